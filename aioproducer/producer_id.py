"""Idempotence: the producer id/epoch and the per-partition sequence numbers.

The broker keeps, per (producer id, partition), the sequence it expects next and the
last five batches it wrote, so a resent batch is written once. When a batch with a
sequence fails for good (or expires), the sequences after it can never line up
again; like the Java client (KIP-360) we then bump the epoch with InitProducerId
(current id and epoch) once nothing is in flight, and restart sequences at 0.
"""

from __future__ import annotations

import datetime
import importlib
import logging
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32Timedelta, i64

from .config import ProducerConfig
from .errors import KafkaConnectionError, KafkaError, for_code
from .net.client import KafkaClient

__all__ = ["ProducerIdManager"]

log = logging.getLogger("aioproducer.idempotence")

_INIT_PRODUCER_ID = 22
_MAX_SEQUENCE = 2**31 - 1

TopicPartition = tuple[str, int]


def _kio_init_producer_id(version: int) -> tuple[Any, Any]:
    mod = f"kio.schema.init_producer_id.v{version}"
    req = importlib.import_module(f"{mod}.request").InitProducerIdRequest
    resp = importlib.import_module(f"{mod}.response").InitProducerIdResponse
    return req, resp


class ProducerIdManager:
    """Holds the producer id, epoch and sequences of an idempotent producer."""

    def __init__(self, client: KafkaClient, config: ProducerConfig) -> None:
        self._client = client
        self._timeout_s = config.request_timeout_ms / 1000.0
        self._backoff = config.retry_backoff_ms / 1000.0
        self._backoff_max = config.retry_backoff_max_ms / 1000.0
        self.producer_id = -1
        self.epoch = -1
        self.ready = False
        self.error: KafkaError | None = None
        self.bump_needed = False
        self._next_attempt = 0.0
        self._failures = 0
        self._in_progress = False
        self._next_seq: dict[TopicPartition, int] = {}
        self._acked: set[TopicPartition] = set()
        self._last_acked: dict[TopicPartition, int] = {}

    def due_in(self, now: float) -> float:
        return float("inf") if self._in_progress else self._next_attempt - now

    def next_sequence(self, tp: TopicPartition, count: int) -> int:
        seq = self._next_seq.get(tp, 0)
        nxt = seq + count
        self._next_seq[tp] = nxt - _MAX_SEQUENCE - 1 if nxt > _MAX_SEQUENCE else nxt
        return seq

    def acknowledged(self, tp: TopicPartition, last_sequence: int) -> None:
        """A batch up to ``last_sequence`` is in the log under the current epoch."""
        self._acked.add(tp)
        self._last_acked[tp] = last_sequence

    def is_next_sequence(self, tp: TopicPartition, sequence: int) -> bool:
        """Whether the broker should be expecting ``sequence`` next on ``tp``."""
        return self._last_acked.get(tp, -1) + 1 == sequence

    def has_acked(self, tp: TopicPartition) -> bool:
        """Whether the broker holds state for us on this partition (an ack came back).

        Until then only one batch may be in flight there: a broker with no state for
        a producer accepts any first sequence (KIP-360), so a later pipelined batch
        could be written ahead of an earlier one that failed and is being retried.
        """
        return tp in self._acked

    def batch_failed(self, tp: TopicPartition) -> None:
        """A sequenced batch failed for good: sequences must restart under a new epoch."""
        self.bump_needed = True

    def begin_bump(self) -> None:
        """Called by the Sender once nothing is in flight: refetch the epoch."""
        self.ready = False
        self.bump_needed = False
        self._next_seq.clear()
        self._acked.clear()
        self._last_acked.clear()

    def assign(self, producer_id: int, epoch: int) -> None:
        """A new id or epoch (from a transactional InitProducerId): sequences restart."""
        self.producer_id, self.epoch = producer_id, epoch
        self.bump_needed = False
        self.error = None
        self._next_seq.clear()
        self._acked.clear()
        self._last_acked.clear()
        self.ready = True

    def init_started(self) -> None:
        """Called when the Sender starts :meth:`init` (before the task first runs)."""
        self._in_progress = True

    async def init(self, now: float) -> None:
        """Send InitProducerId (bumping the epoch when we already have an id)."""
        self._in_progress = True
        try:
            await self._init_once()
            self._failures = 0
            self._next_attempt = 0.0
        except KafkaError as exc:
            if exc.retriable:
                self._failures += 1
                delay = min(self._backoff * 2 ** (self._failures - 1), self._backoff_max)
                self._next_attempt = now + delay
                log.debug("InitProducerId failed (%s); retrying in %.0f ms", exc, delay * 1000)
            else:
                log.error("InitProducerId failed: %s", exc)
                self.error = exc
        finally:
            self._in_progress = False

    async def _init_once(self) -> None:
        node = self._client.least_loaded_node()
        if node is None:
            raise KafkaConnectionError("no broker available to send InitProducerId to")
        conn = await self._client.connect(node, self._timeout_s)
        version = conn.version_for(_INIT_PRODUCER_ID, 0, 5)
        req_t, resp_t = _kio_init_producer_id(version)
        fields: dict[str, Any] = {
            "transactional_id": None,
            "transaction_timeout": i32Timedelta.parse(datetime.timedelta(milliseconds=60000)),
        }
        if version >= 3:
            fields["producer_id"] = i64(self.producer_id)
            fields["producer_epoch"] = i16(self.epoch)
        resp = await conn.request(req_t(**fields), resp_t)
        code = int(resp.error_code)
        if code != 0:
            if code == int(ErrorCode.invalid_producer_epoch) or code == int(
                ErrorCode.producer_fenced
            ):
                # Our id is gone on the broker side: start over with a new one.
                self.producer_id, self.epoch = -1, -1
                err = for_code(code)
                err.retriable = True
                raise err
            raise for_code(code, "InitProducerId")
        self.producer_id = int(resp.producer_id)
        self.epoch = int(resp.producer_epoch)
        self._next_seq.clear()
        self._acked.clear()
        self._last_acked.clear()
        self.ready = True
        log.debug("producer id %d epoch %d", self.producer_id, self.epoch)

