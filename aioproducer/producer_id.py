"""Idempotence: the producer id, and each partition's epoch and sequence numbers.

The broker keeps, per (producer id, partition), the epoch and the sequence it expects
next, and the last five batches it wrote, so a resent batch is written once. The
rules here are the Java producer's (``TransactionManager``'s idempotent half):

- A batch gets its producer id, epoch and sequence once, when it is first drained,
  and keeps them for every retry: a batch whose outcome is unknown (sent, no answer)
  may already be in the log, and only its own sequence lets the broker drop the copy.
- A batch that failed for good (the broker refused it) leaves a gap in the
  partition's sequences. The partition then needs new sequences under a new epoch:
  a *local* bump (same producer id, epoch + 1; the broker takes a higher epoch that
  starts at sequence 0). It happens once nothing of that partition is in flight and
  every batch before the gap is resolved, and it renumbers only the batches after the
  gap, which the broker cannot have written. Other partitions keep sending.
- A batch that expired after it was sent leaves its partition *unresolved*: its
  records may or may not be in the log. New batches of that partition wait until
  the answers to later batches tell (an acknowledged later batch means it was
  written); if nothing is left to tell, the partition gets a local bump.
- InitProducerId is sent at start-up only, and again only if an epoch would
  overflow (or the broker forgot the id for good).

Epochs are kept per partition: the broker checks them per partition, so a bump on
one partition changes nothing for the others.
"""

from __future__ import annotations

import datetime
import logging
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32Timedelta, i64

from ._native import ProducerBatch
from .config import ProducerConfig
from .errors import KafkaConnectionError, KafkaError, for_code
from .net.apis import ApiKey
from .net.client import KafkaClient
from .net.protocol import request_module, response_type
from .types import TopicPartition

__all__ = ["PartitionSequences", "ProducerIdManager"]

log = logging.getLogger("aioproducer.idempotence")

_MAX_SEQUENCE = 2**31 - 1
_MAX_EPOCH = 2**15 - 1



def _add_sequence(sequence: int, count: int) -> int:
    """Sequences wrap from 2**31 - 1 to 0, as the broker expects."""
    nxt = sequence + count
    return nxt - _MAX_SEQUENCE - 1 if nxt > _MAX_SEQUENCE else nxt


def last_sequence(batch: ProducerBatch) -> int:
    """The sequence of the batch's last record."""
    return _add_sequence(batch.base_sequence, batch.record_count - 1)


@dataclass(slots=True, eq=False)
class PartitionSequences:
    """One partition's idempotence state (Java's ``TopicPartitionEntry``)."""

    producer_id: int
    epoch: int
    next_sequence: int = 0
    """Base sequence of the partition's next new batch."""
    last_acked: int = -1
    """Last sequence the broker acknowledged under this id and epoch (-1: none yet)."""
    incomplete: list[ProducerBatch] = field(default_factory=list)
    """Batches with a sequence, not completed (in flight or queued for a retry), in
    sequence order."""
    unresolved: int | None = None
    """Set after a sent batch expired: the sequence that follows it."""
    bump_from: int | None = None
    """Set when the partition needs a local epoch bump: the first sequence that the
    broker is known not to have written (the batches from there on get renumbered)."""
    last_acked_offset: int = -1
    """The offset of the last record the broker acknowledged here (-1: none known)."""
    restart: bool = False
    """Transactions: the broker lost this producer's state here (retention removed
    its records): the incomplete batches start over at sequence 0, same epoch, once
    nothing of the partition is in flight."""

    def is_next(self, sequence: int) -> bool:
        return _add_sequence(self.last_acked, 1) == sequence


class ProducerIdManager:
    """Holds the producer id and the per-partition epochs and sequences."""

    def __init__(self, client: KafkaClient, config: ProducerConfig) -> None:
        self._client = client
        self._timeout_s = config.request_timeout_ms / 1000.0
        self._backoff = config.retry_backoff_ms / 1000.0
        self._backoff_max = config.retry_backoff_max_ms / 1000.0
        self.transactional = config.transactional_id is not None
        self.producer_id = -1
        self.epoch = -1
        """The epoch of the producer id (transactions) or the highest epoch any
        partition uses (idempotence only: epochs are bumped per partition)."""
        self.ready = False
        self.error: KafkaError | None = None
        self.bump_needed = False
        """Transactions: a batch with a sequence failed; the next EndTxn is followed
        by an epoch bump (InitProducerId) that restarts every sequence."""
        self._next_attempt = 0.0
        self._failures = 0
        self._in_progress = False
        self.partitions: dict[TopicPartition, PartitionSequences] = {}
        self.recovering: set[TopicPartition] = set()
        """Partitions that are unresolved or wait for a local epoch bump."""
        self._new_id_wanted: set[TopicPartition] = set()
        """Partitions whose epoch ran out: their batches wait for a new producer id."""
        self._reset: set[ProducerBatch] = set()
        """Batches whose sequences started over (:meth:`restart_sequences`)."""

    # -- per partition -----------------------------------------------------------

    def _entry(self, tp: TopicPartition) -> PartitionSequences:
        e = self.partitions.get(tp)
        if e is None:
            e = self.partitions[tp] = PartitionSequences(self.producer_id, max(self.epoch, 0))
        return e

    def may_assign(self, tp: TopicPartition) -> bool:
        """Whether a new batch of ``tp`` may get a sequence now.

        No while the partition is unresolved or waits for a bump, and no while it
        still has batches under an older producer id in flight or queued.
        """
        e = self.partitions.get(tp)
        if e is None:
            return True
        if e.unresolved is not None or e.bump_from is not None or e.restart:
            return False
        return e.producer_id == self.producer_id or not e.incomplete

    def assign_sequence(self, batch: ProducerBatch) -> None:
        """Give a new batch its producer id, epoch and sequence (once, for good)."""
        e = self._entry(batch.tp)
        if e.producer_id != self.producer_id:
            # A new producer id: the partition starts over once its old batches are
            # done (may_assign held new batches back until then).
            e.producer_id, e.epoch = self.producer_id, max(self.epoch, 0)
            e.next_sequence, e.last_acked = 0, -1
        batch.producer_id, batch.producer_epoch = e.producer_id, e.epoch
        batch.base_sequence = e.next_sequence
        e.next_sequence = _add_sequence(e.next_sequence, batch.record_count)
        e.incomplete.append(batch)

    def has_acked(self, tp: TopicPartition) -> bool:
        """Whether the broker acknowledged a batch of ``tp`` under its current epoch.

        Until then only one batch may be in flight there: a broker with no state for
        a producer epoch accepts any first sequence, so a later pipelined batch could
        be written ahead of an earlier one that failed and is being retried.
        """
        e = self.partitions.get(tp)
        return e is not None and e.last_acked >= 0

    def first_incomplete(self, batch: ProducerBatch) -> bool:
        """Whether ``batch`` is its partition's lowest incomplete sequence (a retry
        goes out only then, so the broker sees sequences in order)."""
        e = self.partitions.get(batch.tp)
        return e is None or not e.incomplete or e.incomplete[0] is batch

    def waits_for_bump(self, batch: ProducerBatch) -> bool:
        """Whether ``batch`` must wait for its partition's epoch bump (it lies after a
        gap, so its sequence can only be accepted once renumbered)."""
        e = self.partitions.get(batch.tp)
        if e is None or batch.producer_epoch != e.epoch or batch.producer_id != e.producer_id:
            return False
        return e.restart or (e.bump_from is not None and batch.base_sequence >= e.bump_from)

    def acknowledged(self, batch: ProducerBatch, base_offset: int = -1) -> None:
        """The broker has ``batch`` in its log (written now at ``base_offset``, or a
        duplicate of an earlier attempt: -1). Also for a batch that expired while in
        flight: its answer resolves the partition."""
        e = self.partitions.get(batch.tp)
        if e is None:
            return
        self._drop(e, batch)
        if base_offset >= 0:
            e.last_acked_offset = max(e.last_acked_offset,
                                      base_offset + batch.record_count - 1)
        if (batch.producer_id, batch.producer_epoch) != (e.producer_id, e.epoch):
            return  # an answer from before a bump or a new id
        last = last_sequence(batch)
        if e.last_acked < 0 or _seq_after(last, e.last_acked):
            e.last_acked = last

    def failed(self, batch: ProducerBatch, *, written: bool | None) -> None:
        """``batch`` (with a sequence) completed without an acknowledgement.

        ``written=False``: the broker refused it, so its sequences are a gap.
        ``written=None``: unknown (it expired after it was sent).
        """
        e = self.partitions.get(batch.tp)
        if e is None:
            return
        self._drop(e, batch)
        if (batch.producer_id, batch.producer_epoch) != (e.producer_id, e.epoch):
            return
        if self.transactional:
            # The transaction becomes abortable; the abort bumps the epoch for all.
            self.bump_needed = True
            return
        if written is None:
            nxt = _add_sequence(last_sequence(batch), 1)
            if e.unresolved is None or _seq_after(nxt, e.unresolved):
                e.unresolved = nxt
            self.recovering.add(batch.tp)
            log.debug("%s-%d unresolved up to sequence %d", batch.topic, batch.partition, nxt)
        else:
            self.request_bump(batch.tp, batch.base_sequence)

    def request_bump(self, tp: TopicPartition, from_sequence: int) -> None:
        """Sequences from ``from_sequence`` on were not written on ``tp``: renumber
        them under a new epoch (see :meth:`bump_ready`)."""
        e = self._entry(tp)
        if e.bump_from is None or _seq_after(e.bump_from, from_sequence):
            e.bump_from = from_sequence
        e.unresolved = None
        self.recovering.add(tp)

    def resolve_unresolved(self, tp: TopicPartition, sequence: int) -> bool:
        """An OUT_OF_ORDER_SEQUENCE for the batch right after an expired one proves
        that the expired one was not written: bump from here. True if so."""
        e = self.partitions.get(tp)
        if e is None or e.unresolved is None or e.unresolved != sequence:
            return False
        self.request_bump(tp, sequence)
        return True

    def is_next_sequence(self, tp: TopicPartition, sequence: int) -> bool:
        """Whether the broker should be expecting ``sequence`` next on ``tp``."""
        e = self.partitions.get(tp)
        return e is not None and e.is_next(sequence)

    def is_unresolved(self, tp: TopicPartition) -> bool:
        e = self.partitions.get(tp)
        return e is not None and e.unresolved is not None

    def maybe_resolve(self, in_flight: dict[TopicPartition, Any]) -> None:
        """Settle unresolved partitions whose answers are all in (Java's
        ``maybeResolveSequences``): resolved if everything assigned was
        acknowledged, else the partition needs a bump."""
        for tp in list(self.recovering):
            e = self.partitions.get(tp)
            if e is None:
                self.recovering.discard(tp)
                continue
            if e.unresolved is None or e.incomplete or in_flight.get(tp):
                continue
            if e.is_next(e.next_sequence):
                log.debug("%s-%d resolved: the expired batch was written", *tp)
                e.unresolved = None
                self.recovering.discard(tp)
            else:
                log.info("%s-%d: an expired batch was not acknowledged and nothing is left "
                         "to resolve it; bumping the partition's epoch", *tp)
                e.unresolved = None
                e.bump_from = e.next_sequence

    def bump_ready(self, in_flight: dict[TopicPartition, Any]) -> list[TopicPartition]:
        """Make the local epoch bumps that are due; returns their partitions.

        A partition is bumped once nothing of it is in flight and none of its
        incomplete batches lies before the gap (such a batch may be in the log: it
        is retried under the old epoch first). Its incomplete batches, all after the
        gap, get the new epoch and sequences from 0, in order.
        """
        done: list[TopicPartition] = []
        for tp in list(self.recovering):
            e = self.partitions.get(tp)
            if e is None:
                self.recovering.discard(tp)
                continue
            if e.bump_from is None or in_flight.get(tp) or tp in self._new_id_wanted:
                continue
            if any(_seq_after(e.bump_from, b.base_sequence) for b in e.incomplete):
                continue
            if e.epoch >= _MAX_EPOCH:
                # No higher epoch: a new producer id (InitProducerId); the partition's
                # batches after the gap move to it as soon as it comes (Java's
                # resetIdempotentProducerId), and wait until then (bump_from stays).
                if tp not in self._new_id_wanted:
                    self._new_id_wanted.add(tp)
                    self.ready = False
                    log.info("%s-%d: producer id %d has no epoch left; asking for a new "
                             "producer id", tp[0], tp[1], e.producer_id)
                continue
            self._renumber(tp, e, e.producer_id, e.epoch + 1)
            log.info("%s-%d: producer id %d now at epoch %d (local bump), %d batch(es) "
                     "renumbered", tp[0], tp[1], e.producer_id, e.epoch, len(e.incomplete))
            done.append(tp)
        return done

    def _renumber(self, tp: TopicPartition, e: PartitionSequences, producer_id: int,
                  epoch: int) -> None:
        """The partition's incomplete batches (all after its gap) get ``producer_id``,
        ``epoch`` and sequences from 0, in order; the partition is settled."""
        e.producer_id, e.epoch = producer_id, epoch
        self.epoch = max(self.epoch, epoch)
        seq = 0
        for b in e.incomplete:
            b.producer_id, b.producer_epoch, b.base_sequence = producer_id, epoch, seq
            if b.closed:
                b.builder.set_producer_state(producer_id, epoch, seq)
            seq = _add_sequence(seq, b.record_count)
        e.next_sequence, e.last_acked, e.bump_from, e.unresolved = seq, -1, None, None
        self.recovering.discard(tp)

    def _move_to_new_id(self) -> None:
        """A new producer id came: the partitions that ran out of epochs move their
        waiting batches to it now (not at their next failure)."""
        for tp in sorted(self._new_id_wanted):
            e = self.partitions.get(tp)
            if e is not None:
                self._renumber(tp, e, self.producer_id, max(self.epoch, 0))
                log.info("%s-%d: %d batch(es) moved to producer id %d epoch %d", tp[0],
                         tp[1], len(e.incomplete), e.producer_id, e.epoch)
        self._new_id_wanted.clear()

    def replace(self, batch: ProducerBatch, pieces: list[ProducerBatch]) -> None:
        """``batch`` was split into ``pieces`` (same id, epoch, consecutive sequences)."""
        e = self.partitions.get(batch.tp)
        if e is None:
            return
        try:
            i = e.incomplete.index(batch)
        except ValueError:
            return
        e.incomplete[i:i + 1] = pieces

    def _drop(self, e: PartitionSequences, batch: ProducerBatch) -> None:
        inc = e.incomplete
        if inc and inc[0] is batch:  # acknowledged in sequence order: the usual case
            del inc[0]
        elif batch in inc:
            inc.remove(batch)
        if self._reset:
            self._reset.discard(batch)

    # -- the broker lost the producer's state (transactions) -----------------------

    def last_acked_offset(self, tp: TopicPartition) -> int:
        e = self.partitions.get(tp)
        return -1 if e is None else e.last_acked_offset

    def restart_sequences(self, tp: TopicPartition) -> None:
        """UNKNOWN_PRODUCER_ID after retention removed everything this producer wrote
        on ``tp`` (Java's ``startSequencesAtBeginning``): the partition's incomplete
        batches start over at sequence 0, same producer id and epoch, once nothing of
        it is in flight (:meth:`restart_ready`); nothing of it goes out until then."""
        e = self._entry(tp)
        e.restart = True
        self.recovering.add(tp)

    def restarting(self, batch: ProducerBatch) -> bool:
        """Whether ``batch``'s sequence was (or is about to be) started over: an
        UNKNOWN_PRODUCER_ID for it is expected, and it is retried."""
        if batch in self._reset:
            return True
        e = self.partitions.get(batch.tp)
        return e is not None and e.restart

    def restart_ready(self, in_flight: dict[TopicPartition, Any]) -> None:
        """Start the sequences over where :meth:`restart_sequences` asked for it and
        nothing of the partition is in flight."""
        for tp in list(self.recovering):
            e = self.partitions.get(tp)
            if e is None or not e.restart or in_flight.get(tp):
                continue
            e.restart = False
            self._renumber(tp, e, e.producer_id, e.epoch)
            self._reset.update(e.incomplete)
            log.info("%s-%d: the broker lost producer id %d's state (the log start moved "
                     "past its records); %d batch(es) start over at sequence 0", tp[0],
                     tp[1], e.producer_id, len(e.incomplete))

    # -- the producer id ---------------------------------------------------------

    def due_in(self, now: float) -> float:
        return float("inf") if self._in_progress else self._next_attempt - now

    def assign(self, producer_id: int, epoch: int) -> None:
        """A new id or epoch (from a transactional InitProducerId): sequences restart."""
        self.producer_id, self.epoch = producer_id, epoch
        self.bump_needed = False
        self.error = None
        self.partitions.clear()
        self.recovering.clear()
        self._new_id_wanted.clear()
        self._reset.clear()
        self.ready = True

    def init_started(self) -> None:
        """Called when the Sender starts :meth:`init` (before the task first runs)."""
        self._in_progress = True

    async def init(self, now: float) -> None:
        """Send InitProducerId for a new producer id."""
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
        version = conn.version_for(ApiKey.INIT_PRODUCER_ID, 0, 5)
        req_t = request_module(ApiKey.INIT_PRODUCER_ID, version).InitProducerIdRequest
        resp_t: Any = response_type(ApiKey.INIT_PRODUCER_ID, version)
        fields: dict[str, Any] = {
            "transactional_id": None,
            "transaction_timeout": i32Timedelta.parse(datetime.timedelta(milliseconds=60000)),
        }
        if version >= 3:
            # Without a transactional id the broker hands out a new id anyway.
            fields["producer_id"] = i64(-1)
            fields["producer_epoch"] = i16(-1)
        resp = await conn.request(req_t(**fields), resp_t)
        code = int(resp.error_code)
        if code != 0:
            if code in (int(ErrorCode.invalid_producer_epoch), int(ErrorCode.producer_fenced)):
                err = for_code(code)
                err.retriable = True
                raise err
            raise for_code(code, "InitProducerId")
        self.producer_id = int(resp.producer_id)
        self.epoch = int(resp.producer_epoch)
        self.ready = True
        log.debug("producer id %d epoch %d", self.producer_id, self.epoch)
        if self._new_id_wanted:
            self._move_to_new_id()


def _seq_after(a: int, b: int) -> bool:
    """Whether sequence ``a`` comes after ``b`` (allowing for the wrap at 2**31)."""
    d = (a - b) % (_MAX_SEQUENCE + 1)
    return 0 < d < (_MAX_SEQUENCE + 1) // 2
