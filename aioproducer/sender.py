"""The Sender: one asyncio task per producer, in the role of Java's Sender thread.

Each pass: refresh metadata when due, get a producer id when idempotent, expire
batches past ``delivery_timeout_ms``, find the leaders with sendable batches
(``ready``), take batches for them (``drain``), close each batch natively (header,
sequence, CRC32C) and write one Produce request per leader with the pool blocks as
zero-copy views. Responses come back as future callbacks: they complete batches
(and so every record future), retry what is retriable, and wake this task.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import time
from collections import deque
from functools import partial
from typing import Any

from kio.schema.errors import ErrorCode

from ._native import BATCH_HEADER_SIZE
from .accumulator import ProducerBatch, RecordAccumulator, TopicPartition
from .config import ProducerConfig
from .errors import (
    BrokerResponseError,
    DeliveryTimeoutError,
    InvalidProducerEpochError,
    KafkaError,
    OutOfOrderSequenceError,
    ProtocolError,
    UnknownProducerIdError,
    for_code,
)
from .metadata import Cluster, Metadata
from .metrics import ProducerMetrics
from .net.client import KafkaClient
from .net.protocol import (
    ProduceResponse,
    decode_produce_response,
    encode_produce_body,
    produce_results,
)
from .producer_id import ProducerIdManager
from .transactions import TransactionManager

__all__ = ["Sender"]

log = logging.getLogger("aioproducer.sender")

_PRODUCE = 0
_METADATA_ERRORS = frozenset({
    int(ErrorCode.not_leader_or_follower),
    int(ErrorCode.unknown_topic_or_partition),
    int(ErrorCode.leader_not_available),
    int(ErrorCode.fenced_leader_epoch),
    int(ErrorCode.unknown_leader_epoch),
    int(ErrorCode.kafka_storage_error),
    int(ErrorCode.not_enough_replicas),
})
_DUPLICATE_SEQUENCE = int(ErrorCode.duplicate_sequence_number)
# A partition leader saying that a newer producer owns our transactional id.
_FENCED = frozenset({int(ErrorCode.producer_fenced), int(ErrorCode.invalid_producer_epoch),
                     int(ErrorCode.transaction_coordinator_fenced)})
# Produce v12+ belongs to transaction version 2; transactions here use version 1.
_TXN_PRODUCE_MAX = 11


class Sender:
    """Moves batches from the accumulator to the brokers and completes them."""

    def __init__(self, config: ProducerConfig, client: KafkaClient, metadata: Metadata,
                 accumulator: RecordAccumulator, metrics: ProducerMetrics | None = None
                 ) -> None:
        self.config = config
        self.metrics = metrics or ProducerMetrics(config.client_id)
        self.client = client
        self.metadata = metadata
        self.acc = accumulator
        self.acks = config.acks
        self.max_in_flight = config.max_in_flight_requests_per_connection
        self.request_timeout_ms = config.request_timeout_ms
        self.retries = config.retries
        self.delivery_timeout = config.delivery_timeout_ms / 1000.0
        self.reconnect_backoff = config.reconnect_backoff_ms / 1000.0
        self.guarantee_order = self.max_in_flight == 1
        self.pid = ProducerIdManager(client, config) if config.enable_idempotence else None
        self.txn: TransactionManager | None = None
        if config.transactional_id is not None:
            assert self.pid is not None
            self.txn = TransactionManager(client, config, self.pid, self.wakeup)
        self.transactional_id = config.transactional_id
        self.in_flight: dict[TopicPartition, deque[ProducerBatch]] = {}
        self.task: asyncio.Task[None] | None = None
        self._sleeper: asyncio.Future[None] | None = None
        self._background: set[asyncio.Task[Any]] = set()
        self._stopped = False
        self._latency_ms = 0.0
        client.on_ready_change = self.wakeup
        metadata.on_update_request = self.wakeup
        if accumulator.batch_max_size > accumulator.batch_size:
            accumulator.on_growth_cap_needed = lambda topic: self.spawn(
                self._learn_growth_cap(topic))

    # -- lifecycle ---------------------------------------------------------------

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run(), name="aioproducer-sender")

    def wakeup(self) -> None:
        """Make the Sender look again now (cheap; called from send() on a new batch)."""
        s = self._sleeper
        if s is not None and not s.done():
            s.set_result(None)

    async def stop(self) -> None:
        """Cancel the task and every background request it started."""
        self._stopped = True
        tasks = list(self._background)
        if self.task is not None:
            tasks.append(self.task)
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    def spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while not self._stopped:
                delay = self.run_once(time.monotonic())
                if self.acc.closing and not self.acc.incomplete:
                    return
                self._sleeper = loop.create_future()
                handle = loop.call_later(min(delay, 1.0), self.wakeup) if delay > 0 else None
                if delay <= 0:
                    self._sleeper.set_result(None)
                try:
                    await self._sleeper
                finally:
                    self._sleeper = None
                    if handle is not None:
                        handle.cancel()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug: fail loudly, never leave sends hanging
            log.exception("aioproducer sender crashed")
            self.acc.abort_all(KafkaError(f"the producer's sender task crashed: {exc!r}"))
            raise

    # -- one pass ----------------------------------------------------------------

    def run_once(self, now: float) -> float:
        delay = float("inf")
        md_due = self.metadata.due_in(now)
        if md_due <= 0:
            # Marked in progress now, not when the task first runs: another pass
            # before then must not start a second refresh.
            self.spawn(self._refresh_metadata(self.metadata.refresh_started(now)))
        else:
            delay = md_due

        for batch in self.acc.expired(now):
            self._fail(batch, DeliveryTimeoutError(
                self._expiry_text(batch, now, batch.last_error)))

        txn = self.txn
        if txn is not None:
            err = txn.blocks_queued
            if err is not None and any(self.acc.batches.values()):
                self._abort_queued(err)

        if self.pid is not None and self.pid.bump_needed and txn is None \
                and not any(self.in_flight.values()):
            # KIP-360: nothing in flight any more, so renumber under a new epoch.
            self.pid.begin_bump()
            for dq in self.acc.batches.values():
                for b in dq:
                    b.base_sequence = -1
        if self.pid is not None and self.pid.bump_needed and txn is None:
            return min(delay, 0.05)  # wait for in-flight requests to finish first
        if self.pid is not None and not self.pid.ready:
            if txn is not None:  # init_transactions() gets the id, not the Sender
                return delay
            if self.pid.error is not None:
                self.acc.abort_all(self.pid.error)
                return delay
            wait = self.pid.due_in(now)
            if wait <= 0:
                self.pid.init_started()  # now: a second pass must not start another
                self.spawn(self._init_producer_id())
            return min(delay, max(wait, 0.01), self.acc.delivery_timeout)

        cluster = self.metadata.cluster
        muted = self._muted()
        res = self.acc.ready(cluster, now, muted, self.in_flight)
        if res.unknown_leaders:
            self.metadata.request_update()
        sendable = []
        for node in res.nodes:
            if self._node_sendable(node):
                sendable.append(node)
                continue
            err = self.client.security_error(node)
            if err is not None:
                # Authentication or TLS failed: not retried, the sends fail now.
                self._fail_queued_for(node, cluster, err)
            else:
                delay = min(delay, self.reconnect_backoff)
        if sendable:
            drained = self.acc.drain(cluster, sendable, self.config.max_request_size, now,
                                     muted, self._may_send if self.pid else None,
                                     self.in_flight)
            for node, batches in drained.items():
                self._send_produce(node, batches, cluster, now)
        if txn is not None:
            due = txn.add_due(now)
            if due <= 0:
                txn.start_add()
            else:
                delay = min(delay, due)
        delay = min(delay, res.next_check)
        oldest = self.acc.oldest_queued()
        if oldest is not None:
            # Expiry must be noticed even when nothing else happens. Queued batches
            # expire head first; in-flight ones are bounded by request_timeout_ms.
            delay = min(delay, max(0.0, oldest + self.delivery_timeout - now))
        return delay

    def _muted(self) -> set[TopicPartition]:
        if not self.guarantee_order:
            return set()
        return {tp for tp, dq in self.in_flight.items() if dq}

    def _node_sendable(self, node: int) -> bool:
        if not self.client.ready(node):
            return False
        conn = self.client.connection(node)
        return conn is not None and conn.in_flight < self.max_in_flight and conn.can_write

    def _may_send(self, batch: ProducerBatch) -> bool:
        """Idempotence: keep sequences in order on the broker.

        A retried batch goes out only when nothing before it is in flight, and a
        partition with no acknowledged batch yet (under this producer id and epoch)
        has one batch in flight at most. Transactions: a batch waits until its
        partition was added to the transaction (AddPartitionsToTxn).
        """
        txn = self.txn
        if txn is not None and not txn.may_send(batch.tp):
            return False
        flying = self.in_flight.get(batch.tp)
        if not flying:
            return True
        if batch.base_sequence >= 0:
            return False
        assert self.pid is not None
        return len(flying) < 5 and self.pid.has_acked(batch.tp)

    # -- produce -----------------------------------------------------------------

    def _send_produce(self, node: int, batches: list[ProducerBatch], cluster: Cluster,
                      now: float) -> None:
        conn = self.client.connection(node)
        if conn is None:  # lost between ready() and here: put them back
            for b in batches:
                self.acc.reenqueue(b, now)
            return
        version = conn.version_for(_PRODUCE, 9, 13 if self.txn is None else _TXN_PRODUCE_MAX)
        by_topic: dict[str, list[tuple[int, memoryview]]] = {}
        m = self.metrics
        records = 0
        for b in batches:
            self._close_batch(b)
            builder = b.builder
            size = builder.size_in_bytes
            raw = builder.records_size
            m.batch_sent(b.topic, b.record_count, size,
                         (size - BATCH_HEADER_SIZE) / raw if raw > 0 else 1.0,
                         (now - b.created) * 1000.0, b.attempts > 0, now)
            records += b.record_count
            by_topic.setdefault(b.topic, []).append((b.partition, builder.view()))
        m.request_sent(records, now)
        topics = []
        for topic, parts in by_topic.items():
            info = cluster.topics.get(topic)
            tid = info.topic_id if info is not None else None
            if tid is None:
                version = min(version, 12)
            topics.append((topic, tid, parts))
        body = encode_produce_body(
            version, transactional_id=self.transactional_id, acks=self.acks,
            timeout_ms=self.request_timeout_ms, topics=topics,
        )
        for b in batches:
            self.in_flight.setdefault(b.tp, deque()).append(b)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("produce v%d to node %d: %s", version, node,
                      ", ".join(f"{b.partition}@{b.base_sequence}" for b in batches))
        try:
            fut = conn.send_raw(_PRODUCE, version, body, flexible=True,
                                expect_response=self.acks != 0,
                                decode=partial(decode_produce_response, version),
                                callback=partial(self._on_produce_future, node, version,
                                                 batches, time.monotonic()))
        except Exception as exc:  # connection died under us
            self._on_produce_done(node, version, batches, exc, None)
            return
        if fut is None:  # acks=0: nothing comes back; done once written
            self._on_produce_done(node, version, batches, None, None)

    def _close_batch(self, b: ProducerBatch) -> None:
        pid = self.pid
        if pid is None:
            if not b.closed:
                b.builder.close()
                self.acc.batch_closed(b)
            return
        if b.base_sequence < 0:
            b.base_sequence = pid.next_sequence(b.tp, b.record_count)
            b.producer_id, b.producer_epoch = pid.producer_id, pid.epoch
            if b.closed:  # renumbered after an epoch bump
                b.builder.set_producer_state(b.producer_id, b.producer_epoch, b.base_sequence)
            else:
                b.builder.close(b.producer_id, b.producer_epoch, b.base_sequence,
                                self.txn is not None)
                self.acc.batch_closed(b)
        elif (b.producer_id, b.producer_epoch) != (pid.producer_id, pid.epoch):
            b.producer_id, b.producer_epoch = pid.producer_id, pid.epoch
            b.builder.set_producer_state(b.producer_id, b.producer_epoch, b.base_sequence)

    def _on_produce_future(self, node: int, version: int, batches: list[ProducerBatch],
                           sent_at: float, fut: asyncio.Future[ProduceResponse]) -> None:
        self._latency_ms = (time.monotonic() - sent_at) * 1000.0
        if fut.cancelled():
            self._on_produce_done(node, version, batches,
                                  ProtocolError("produce request was cancelled"), None)
            return
        exc = fut.exception()
        self._on_produce_done(node, version, batches, exc, None if exc else fut.result())

    def _on_produce_done(self, node: int, version: int, batches: list[ProducerBatch],
                         exc: BaseException | None, response: ProduceResponse | None) -> None:
        now = time.monotonic()
        for b in batches:
            flying = self.in_flight.get(b.tp)
            if flying is not None:
                with contextlib.suppress(ValueError):
                    flying.remove(b)
        try:
            if exc is not None:
                log.info("produce request to node %s failed (%d batch(es)): %s", node,
                         len(batches), _describe_error(exc))
                self.metadata.request_update()
                for b in batches:
                    self._retry_or_fail(b, exc, now)
                return
            if response is None:  # acks=0
                for b in batches:
                    self.acc.complete(b, -1, -1, None)
                return
            throttle = response.throttle_time
            self.metrics.response(node, self._latency_ms,
                                  throttle.total_seconds() * 1000.0 if throttle else 0.0, now)
            results: dict[TopicPartition, Any] = {}
            names_by_id = self.metadata.cluster.names_by_id
            for name, topic_id, part in produce_results(response):
                if name is None and topic_id is not None:
                    name = names_by_id.get(topic_id)
                if name is not None:
                    results[(name, int(part.index))] = part
            for b in batches:
                p = results.get(b.tp)
                if p is None:
                    self._retry_or_fail(
                        b, ProtocolError(f"produce response from node {node} lacks {b.tp}"), now)
                    continue
                code = int(p.error_code)
                if code == 0:
                    if self.pid is not None:
                        self.pid.acknowledged(b.tp, b.base_sequence + b.record_count - 1)
                    self.acc.complete(b, int(p.base_offset), _log_append_ms(p.log_append_time),
                                      None)
                elif code == _DUPLICATE_SEQUENCE:
                    # Already written by an earlier attempt; the offset is not known.
                    self.acc.complete(b, -1, -1, None)
                else:
                    if code in _METADATA_ERRORS:
                        self.metadata.request_update()
                    msg = p.error_message or None
                    self._retry_or_fail(b, for_code(code, msg), now)
        finally:
            # The Sender has work if batches are queued (held back behind this
            # request, or retried), or if it waits for something to finish. Waking it
            # for nothing costs a turn of the loop and a timer per response.
            if exc is not None or self.acc.closing or self.txn is not None \
                    or (self.pid is not None and self.pid.bump_needed) \
                    or any(self.acc.batches.values()):
                self.wakeup()

    def _retry_or_fail(self, b: ProducerBatch, exc: BaseException, now: float) -> None:
        txn = self.txn
        if txn is not None and isinstance(exc, BrokerResponseError) \
                and int(exc.code) in _FENCED:
            self._fail(b, txn.fenced(int(exc.code), str(exc)))  # fatal: no retries
            return
        retriable = bool(getattr(exc, "retriable", False))
        pid = self.pid
        if pid is not None and b.base_sequence >= 0 and txn is not None \
                and isinstance(exc, UnknownProducerIdError):
            # The transaction cannot be completed: abort it (the epoch is bumped then).
            retriable = False
        elif pid is not None and b.base_sequence >= 0:
            if isinstance(exc, OutOfOrderSequenceError) and (
                    self._earlier_pending(b) or pid.bump_needed
                    or not pid.is_next_sequence(b.tp, b.base_sequence)):
                # An earlier batch is being resent, or failed for good and left a gap
                # that the coming epoch bump closes: this batch is resent in order.
                retriable = True
            elif isinstance(exc, (UnknownProducerIdError, InvalidProducerEpochError)):
                # The broker lost (or moved past) our producer state: bump the epoch
                # (KIP-360) and resend under it; the batch was not written.
                pid.batch_failed(b.tp)
                retriable = True
        if self._stopped:
            retriable = False
        if retriable and b.attempts < self.retries:
            if now - b.created + self.acc.retry_backoff >= self.delivery_timeout:
                self._fail(b, DeliveryTimeoutError(self._expiry_text(b, now, exc)))
                return
            log.warning("produce to %s-%d failed, retrying (attempt %d, %d record(s), "
                        "sequence %d): %s", b.topic, b.partition, b.attempts + 2,
                        b.record_count, b.base_sequence, _describe_error(exc))
            b.last_error = exc
            self.acc.reenqueue(b, now)
            return
        self._fail(b, exc)

    def _earlier_pending(self, b: ProducerBatch) -> bool:
        dq = self.acc.batches.get(b.tp)
        if dq and any(0 <= x.base_sequence < b.base_sequence for x in dq):
            return True
        flying = self.in_flight.get(b.tp)
        return bool(flying) and any(0 <= x.base_sequence < b.base_sequence for x in flying or ())

    def _fail(self, b: ProducerBatch, exc: BaseException) -> None:
        log.warning("failed to deliver %d record(s) to %s-%d (sequence %d, attempt %d): %s",
                    b.record_count, b.topic, b.partition, b.base_sequence, b.attempts + 1, exc)
        if self.pid is not None and b.base_sequence >= 0:
            self.pid.batch_failed(b.tp)
        self.metrics.records_failed(b.topic, b.record_count, time.monotonic())
        self.acc.complete(b, -1, -1, exc)
        if self.txn is not None:
            self.txn.fail(exc)

    def _fail_queued_for(self, node: int, cluster: Cluster, error: KafkaError) -> None:
        for tp, dq in self.acc.batches.items():
            if dq and cluster.leaders.get(tp) == node:
                while dq:
                    self._fail(dq.popleft(), error)

    def _abort_queued(self, error: KafkaError) -> None:
        """Transactions: fail the queued batches of an aborted or failed transaction."""
        failed = self.acc.abort_queued(error)
        now = time.monotonic()
        for b in failed:
            self.metrics.records_failed(b.topic, b.record_count, now)
        if self.pid is not None and any(b.base_sequence >= 0 for b in failed):
            self.pid.bump_needed = True
        log.debug("failed %d queued batch(es): %s", len(failed), error)

    def _expiry_text(self, b: ProducerBatch, now: float, cause: BaseException | None) -> str:
        text = (f"{b.record_count} record(s) for {b.topic}-{b.partition} expired: "
                f"{(now - b.created) * 1000:.0f} ms since the batch was created "
                f"(delivery_timeout_ms={self.delivery_timeout * 1000:.0f})")
        return text + (f"; last error: {cause}" if cause is not None else "")

    # -- background requests -----------------------------------------------------

    async def _refresh_metadata(self, topics: list[str]) -> None:
        md = self.metadata
        try:
            response = await self.client.fetch_metadata(
                topics, timeout_s=self.request_timeout_ms / 1000.0, on_error=md.attempt_failed)
            cluster = Cluster.from_response(response)
            self.client.update_nodes(cluster.nodes)
            md.refresh_done(time.monotonic(), cluster, topics)
        except asyncio.CancelledError:
            md.refresh_failed(time.monotonic(), KafkaError("cancelled"))
            raise
        except Exception as exc:
            md.refresh_failed(time.monotonic(), exc)
        finally:
            self.wakeup()

    async def _learn_growth_cap(self, topic: str) -> None:
        """How large the topic's batches may grow: from its ``max.message.bytes``.
        Without it (no DESCRIBE_CONFIGS permission, an old broker) they keep
        ``batch_size``."""
        try:
            limit = await self.client.topic_max_message_bytes(
                topic, self.request_timeout_ms / 1000.0)
        except Exception as exc:
            log.debug("batches of %s keep batch_size: its max.message.bytes is not known "
                      "(%s)", topic, exc)
            return
        self.acc.set_growth_cap(topic, limit)
        log.debug("batches of %s may grow to %d bytes (max.message.bytes=%d)", topic,
                  self.acc.growth_caps[topic], limit)

    async def _init_producer_id(self) -> None:
        assert self.pid is not None
        try:
            await self.pid.init(time.monotonic())
        finally:
            self.wakeup()


def _describe_error(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if isinstance(exc, BrokerResponseError) else f"{type(exc).__name__}: {text}"


def _log_append_ms(value: Any) -> int:
    if value is None:
        return -1
    if isinstance(value, datetime.datetime):
        return int(value.timestamp() * 1000)
    return int(value)

