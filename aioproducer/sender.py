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
import logging
import time
from collections import deque
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from functools import partial
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ._native import BATCH_HEADER_SIZE
from .accumulator import ProducerBatch, RecordAccumulator
from .config import ProducerConfig
from .errors import (
    BatchRejectedError,
    BrokerResponseError,
    DeliveryTimeoutError,
    InvalidProducerEpochError,
    InvalidRecordError,
    KafkaError,
    OutOfOrderSequenceError,
    ProtocolError,
    UnknownProducerIdError,
    UnsupportedVersionError,
    for_code,
)
from .metadata import Cluster, Metadata
from .metrics import ProducerMetrics
from .net.apis import PRODUCE_MAX_VERSION, PRODUCE_MIN_VERSION, ApiKey
from .net.client import KafkaClient
from .net.protocol import (
    PRODUCE_ANSWER_DECODERS,
    PartitionResult,
    ProduceAnswer,
    encode_produce_body,
)
from .producer_id import ProducerIdManager
from .transaction_state import PRODUCE_FENCED_CODES
from .types import TopicPartition

if TYPE_CHECKING:
    import uuid

    from .net.connection import BrokerConnection
    from .transactions import TransactionManager

__all__ = ["Sender"]

log = logging.getLogger("aioproducer.sender")

_NONE_MUTED: frozenset[TopicPartition] = frozenset()
_METADATA_ERRORS = frozenset({
    int(ErrorCode.not_leader_or_follower),
    int(ErrorCode.unknown_topic_or_partition),
    int(ErrorCode.leader_not_available),
    int(ErrorCode.fenced_leader_epoch),
    int(ErrorCode.unknown_leader_epoch),
    int(ErrorCode.kafka_storage_error),
    int(ErrorCode.not_enough_replicas),
    # Produce v13 names topics by id: a re-created topic has a new one.
    int(ErrorCode.unknown_topic_id),
    int(ErrorCode.inconsistent_topic_id),
})
_DUPLICATE_SEQUENCE = int(ErrorCode.duplicate_sequence_number)
# A broker that does not lead the partition (yet) refused the batch: nothing was
# written. Its retries keep retry_backoff_ms instead of doubling up to
# retry_backoff_max_ms, as librdkafka's (which does not count them as retries): a topic
# just created answers so for each partition until its broker has made the log, for
# seconds with thousands of partitions, and a backoff grown to 1 s delays each such
# partition by up to 1 s after its log exists. Other retriable errors (not enough
# replicas, storage errors, timeouts, lost connections) still back off exponentially.
_NOT_LED = frozenset({
    int(ErrorCode.not_leader_or_follower),
    int(ErrorCode.leader_not_available),
    int(ErrorCode.unknown_topic_or_partition),
})
SLOW_PASS_S = 0.001
"""A Sender pass that took more CPU than this is followed by a quiet time (see
``Sender._run``): it happens with thousands of partitions in use."""
# Answers that may carry the partition's new leader (KIP-951).
_LEADER_HINT_CODES = frozenset({int(ErrorCode.not_leader_or_follower),
                                int(ErrorCode.fenced_leader_epoch)})
# A batch too large for the broker: split it (when it holds more than one record).
_TOO_LARGE = frozenset({int(ErrorCode.message_too_large), int(ErrorCode.record_list_too_large)})
# Broker answers after which a batch may be in the log even so: written by the leader,
# not (yet) by enough replicas.
_MAYBE_WRITTEN = frozenset({int(ErrorCode.not_enough_replicas_after_append),
                            int(ErrorCode.request_timed_out)})
# Produce v12+ belongs to transaction version 2 (TransactionManager.produce_max_version).


class Sender:
    """Moves batches from the accumulator to the brokers and completes them."""

    use_leader_hints: bool = True
    """KIP-951: follow the new leader named in a NOT_LEADER_OR_FOLLOWER answer at
    once (False, for measurements: wait for a metadata refresh as before)."""

    def __init__(self, config: ProducerConfig, client: KafkaClient, metadata: Metadata,
                 accumulator: RecordAccumulator, metrics: ProducerMetrics | None = None,
                 *, pid: ProducerIdManager | None = None,
                 txn: TransactionManager | None = None) -> None:
        """``pid`` (idempotence) and ``txn`` (transactions) are built by the
        producer, which owns them; the Sender drives them."""
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
        self.pid = pid
        self.txn = txn
        self.transactional_id = config.transactional_id
        self.in_flight: dict[TopicPartition, deque[ProducerBatch]] = {}
        self.task: asyncio.Task[None] | None = None
        self._sleeper: asyncio.Future[None] | None = None
        # After a slow pass the Sender waits a little before the next (see _run):
        # _quiet while it does, _woken if a wakeup came meanwhile.
        self._quiet = False
        self._woken = False
        # The timer that ends the Sender's sleep at the latest (see _run), or None.
        # (A Handle, not a TimerHandle, when uvloop's call_at rounds the delay down to
        # 0 ms: it has no when(), so its deadline is kept in _timer_at.)
        self._timer: asyncio.Handle | None = None
        self._timer_at = 0.0
        self._background: set[asyncio.Task[Any]] = set()
        self._stopped = False
        self._latency_ms = 0.0
        # Idempotence: batches queued for a retry after an attempt whose outcome is
        # unknown (a lost connection, a timeout): they may be in the log already.
        self._unknown_outcome: set[ProducerBatch] = set()
        # Per topic, the metadata version of its last retry logged for stale metadata
        # (see _retry_log_level).
        self._retry_logged: dict[str, int] = {}
        self.fatal_error: KafkaError | None = None
        """Set once the Sender failed (a bug): the producer can no longer send."""
        self.on_fatal: Callable[[KafkaError], None] | None = None
        """Called once, with the error, when the Sender fails (see :meth:`fail_producer`)."""

    # -- lifecycle ---------------------------------------------------------------

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run(), name="aioproducer-sender")

    def wakeup(self) -> None:
        """Make the Sender look again now (cheap; called from send() on a new batch)."""
        s = self._sleeper
        if s is not None and not s.done():
            s.set_result(None)
        elif self._quiet:
            self._woken = True  # the pass after the quiet time runs at once

    def looks_within(self, seconds: float) -> bool:
        """Whether the Sender makes a pass within ``seconds`` without a wakeup: one is
        due now (it is not sleeping, nor waiting out a quiet time), or its timer fires
        by then."""
        s = self._sleeper
        if s is None:
            # Between passes (the next one runs before any sleep), unless in the quiet
            # time after a slow pass, whose wait was reckoned without this batch.
            return not self._quiet
        if s.done():
            return True
        return self._timer is not None and self._timer_at <= s.get_loop().time() + seconds

    async def stop(self) -> None:
        """Cancel the task and every background request it started, and stop the
        compression thread (its batches still queued fail back to the loop)."""
        self._stopped = True
        if self.acc.offload is not None:
            self.acc.offload.close()
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
            cpu = time.thread_time
            while not self._stopped:
                started = cpu()
                delay = self.run_once(time.monotonic())
                spent = cpu() - started
                if spent > SLOW_PASS_S and not self._stopped:
                    # A pass walks every partition with something queued or in flight:
                    # with thousands of them it takes milliseconds, and a pass for each
                    # new full batch or each partition's linger would leave send() no
                    # time. After such a pass the next one waits twice its CPU time
                    # (50 ms at most), wakeups included, so that passes take a third of
                    # the loop at most and each finds more to send. Batches linger a
                    # little longer then, and gather more records. With tens of
                    # partitions a pass costs tens of µs: this never happens.
                    quiet = min(2 * spent, 0.05)
                    self._quiet = True
                    self._woken = False
                    try:
                        await asyncio.sleep(quiet)
                    finally:
                        self._quiet = False
                    if self._woken or delay <= quiet:
                        continue
                    delay -= quiet
                if self._stopped or (self.acc.closing and not self.acc.incomplete):
                    return
                self._sleeper = loop.create_future()
                if delay > 0:
                    # A timer that fires no later than needed is kept (its pass may
                    # find nothing to do): most sleeps end in wakeup() long before
                    # their timer, and a new timer per sleep, cancelled at once, cost a
                    # heap push and a handle per request.
                    deadline = loop.time() + min(delay, 1.0)
                    timer = self._timer
                    if timer is None or self._timer_at > deadline:
                        if timer is not None:
                            timer.cancel()
                        self._timer = loop.call_at(deadline, self._on_timer)
                        self._timer_at = deadline
                else:
                    self._sleeper.set_result(None)
                try:
                    await self._sleeper
                finally:
                    self._sleeper = None
        finally:  # (stop() cancels the task: this runs then too)
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

    def _on_timer(self) -> None:
        self._timer = None
        self.wakeup()

    def fail_producer(self, exc: BaseException) -> None:
        """A bug or an unexpected error in the Sender: fail the producer, loudly.

        Every record not yet acknowledged fails with a :class:`KafkaError` that
        carries the cause, and ``on_fatal`` makes every later ``send()`` raise it:
        a producer that accepts records it can never send would leave its callers
        waiting for ever.
        """
        if self.fatal_error is not None:
            return
        log.error("aioproducer's sender failed; the producer can no longer send",
                  exc_info=exc)
        err = KafkaError(f"the producer failed and can no longer send: {exc!r}")
        err.__cause__ = exc
        self.fatal_error = err
        self._stopped = True
        failed = self.acc.abort_all(err)
        self._unknown_outcome.clear()
        if failed:
            self.metrics.records_failed("", failed, time.monotonic())
        if self.txn is not None:
            # Batches of the open transaction failed here: it must not be committed.
            self.txn.sender_failed(err)
        self.metadata.fail_waiters(err)  # sends waiting for a topic fail now
        if self.on_fatal is not None:
            self.on_fatal(err)
        self.wakeup()

    # -- one pass ----------------------------------------------------------------

    def run_once(self, now: float, want_delay: bool = True) -> float:
        """One pass of the Sender; the delay until the next one is due.

        ``want_delay=False`` (a pass made in ``send()`` under linger 0, whose caller
        does not sleep on it) skips working out that delay and returns 0.0: the
        Sender task works out its own when it next runs.
        """
        if self.fatal_error is not None:
            return float("inf")
        try:
            return self._run_once(now, want_delay)
        except Exception as exc:  # a bug: fail loudly, never leave sends hanging
            self.fail_producer(exc)
            return float("inf")

    def send_new(self, batch: ProducerBatch, now: float) -> bool:
        """Write a batch just opened under linger 0, if it can go out now; False
        leaves it to a full pass (:meth:`run_once`).

        The lone ``send_and_wait()``'s pass: what a full pass would do for this
        batch, without walking every partition for the other work a pass does
        (expiry, held batches, retries due, metadata, transactions), whose own
        wakeups and timers bring the Sender task to it. It goes out only when it
        is its partition's one queued batch, nothing of the partition is in
        flight, its leader's connection takes a request, and neither the producer
        id nor the metadata needs the Sender first.
        """
        if self.fatal_error is not None or self.txn is not None:
            return False
        pid = self.pid
        if pid is not None and (not pid.ready or pid.recovering):
            return False
        tp = batch.tp
        acc = self.acc
        dq = acc.batches.get(tp)
        if dq is None or len(dq) != 1 or dq[0] is not batch or self.in_flight.get(tp):
            return False
        cluster = self.metadata.cluster
        node = cluster.leaders.get(tp)
        if node is None or self.metadata.due_in(now) <= 0:
            return False
        conn = self._sendable(node)
        if conn is None or (pid is not None and not self._may_send(batch)):
            return False
        acc.node_polled(node, now, True)
        acc.take(batch, now)
        self._send_produce(node, [batch], cluster, now, conn)
        return True

    def _run_once(self, now: float, want_delay: bool = True) -> float:
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
                self._expiry_text(batch, now, batch.last_error)), written=None)
        self._expire_in_flight(now)

        txn = self.txn
        pid = self.pid
        if txn is not None:
            err = txn.blocks_queued
            if err is not None and self.acc.has_queued():
                self.abort_queued(err)
            if pid is not None and pid.recovering:
                pid.restart_ready(self.in_flight)  # sequences started over, when due
        elif pid is not None and pid.ready and pid.recovering:
            # Idempotence: settle partitions whose expired batches are answered, and
            # make the local epoch bumps that are due (only those partitions wait).
            pid.maybe_resolve(self.in_flight)
            pid.bump_ready(self.in_flight)
        if pid is not None and not pid.ready:
            if txn is not None:  # init_transactions() gets the id, not the Sender
                return delay
            if pid.error is not None:
                self.acc.abort_all(pid.error)
                return delay
            wait = pid.due_in(now)
            if wait <= 0:
                pid.init_started()  # now: a second pass must not start another
                self.spawn(self._init_producer_id())
            return min(delay, max(wait, 0.01), self.acc.delivery_timeout)

        cluster = self.metadata.cluster
        muted = self._muted()
        res = self.acc.ready(cluster, now, muted, self.in_flight)
        if res.unknown_leaders:
            self._want_queued_topics()
            self.metadata.request_update()
        sendable = []
        for node in res.nodes:
            if self._sendable(node) is not None:
                self.acc.node_polled(node, now, True)
                sendable.append(node)
                continue
            self.acc.node_polled(node, now, False)  # partitioner.availability.timeout.ms
            err = self.client.security_error(node)
            if err is not None:
                # Authentication or TLS failed: not retried, the sends fail now.
                self._fail_queued_for(node, cluster, err)
            else:
                delay = min(delay, self.reconnect_backoff)
        if sendable:
            drained = self.acc.drain(cluster, sendable, self.config.max_request_size, now,
                                     muted, self._may_send if pid else None,
                                     self.in_flight)
            for node, batches in drained.items():
                self._send_produce(node, batches, cluster, now)
        if txn is not None:
            due = txn.add_due(now)
            if due <= 0:
                txn.start_add()
            else:
                delay = min(delay, due)
        if not want_delay:
            return 0.0
        delay = min(delay, res.next_check)
        oldest = self.acc.oldest_queued()
        if oldest is not None:
            # Expiry must be noticed even when nothing else happens. Queued batches
            # expire head first.
            delay = min(delay, max(0.0, oldest + self.delivery_timeout - now))
        oldest = self._oldest_in_flight()
        if oldest is not None:
            delay = min(delay, max(0.0, oldest + self.delivery_timeout - now))
        return delay

    def _expire_in_flight(self, now: float) -> None:
        """Fail the batches in flight whose ``delivery_timeout_ms`` has passed (Java's
        ``getExpiredInflightBatches``). They stay in ``in_flight`` until their answer
        comes (or their request fails): that answer still tells whether they were
        written, which the partition's later sequences depend on."""
        limit = self.delivery_timeout
        for dq in self.in_flight.values():
            for b in dq:  # in creation order
                if now - b.created < limit:
                    break
                if not b.result.done():
                    self._fail(b, DeliveryTimeoutError(
                        self._expiry_text(b, now, b.last_error) + "; the batch was sent "
                        "and no answer came in time, so it may or may not have been "
                        "written"), written=None)

    def _oldest_in_flight(self) -> float | None:
        oldest = None
        for dq in self.in_flight.values():
            for b in dq:
                if not b.result.done():
                    if oldest is None or b.created < oldest:
                        oldest = b.created
                    break
        return oldest

    def _muted(self) -> AbstractSet[TopicPartition]:
        if not self.guarantee_order:
            return _NONE_MUTED
        return {tp for tp, dq in self.in_flight.items() if dq}

    def _sendable(self, node: int) -> BrokerConnection | None:
        """The node's connection if it takes a Produce request now (up, not throttled,
        below ``max_in_flight_requests_per_connection``, writable), else None."""
        conn = self.client.ready_connection(node)
        if conn is not None and conn.in_flight < self.max_in_flight and conn.can_write:
            return conn
        return None

    def _may_send(self, batch: ProducerBatch) -> bool:
        """Idempotence: keep sequences in order on the broker.

        A batch that already has a sequence (a retry, or a piece of a split batch)
        goes out only alone, as its partition's lowest incomplete sequence, and not
        while it waits for its partition's epoch bump. A new batch waits while its
        partition is unresolved or due for a bump; a partition with no acknowledged
        batch yet (under its current epoch) has one batch in flight at most.
        Transactions: a batch waits until its partition was added to the transaction
        (AddPartitionsToTxn).
        """
        txn = self.txn
        if txn is not None and not txn.may_send(batch.tp):
            return False
        pid = self.pid
        assert pid is not None
        flying = self.in_flight.get(batch.tp)
        if batch.base_sequence >= 0:
            return not flying and pid.first_incomplete(batch) and not pid.waits_for_bump(batch)
        if not pid.may_assign(batch.tp):
            return False
        if not flying:
            return True
        return len(flying) < 5 and pid.has_acked(batch.tp)

    # -- produce -----------------------------------------------------------------

    def _send_produce(self, node: int, batches: list[ProducerBatch], cluster: Cluster,
                      now: float, conn: BrokerConnection | None = None) -> None:
        """Write one Produce request of ``batches`` to ``node`` (over ``conn``, its
        connection found sendable in this same step, or looked up here)."""
        if conn is None:
            conn = self.client.connection(node)
            if conn is None:  # lost between ready() and here: put them back
                for b in batches:
                    self.acc.reenqueue(b, now)
                return
        txn = self.txn
        try:
            version = conn.version_for(ApiKey.PRODUCE, PRODUCE_MIN_VERSION,
                                       PRODUCE_MAX_VERSION if txn is None
                                       else txn.produce_max_version)
        except UnsupportedVersionError as exc:
            for b in batches:
                self._fail(b, exc, written=False)
            return
        topics: list[tuple[str, uuid.UUID | None, list[tuple[int, memoryview]]]]
        if len(batches) == 1:  # a lone send_and_wait's request, and many others
            b = batches[0]
            view = self._batch_out(b, now)
            if view is None:
                return
            records = b.record_count
            info = cluster.topics.get(b.topic)
            tid = info.topic_id if info is not None else None
            topics = [(b.topic, tid, [(b.partition, view)])]
            if tid is None:
                version = min(version, 12)
            self.metadata.touch((b.topic,), now)  # in use: no expiry (metadata_max_idle_ms)
        else:
            by_topic: dict[str, list[tuple[int, memoryview]]] = {}
            records = 0
            sent: list[ProducerBatch] = []
            for b in batches:
                view = self._batch_out(b, now)
                if view is not None:
                    records += b.record_count
                    by_topic.setdefault(b.topic, []).append((b.partition, view))
                    sent.append(b)
            if not sent:
                return
            batches = sent
            self.metadata.touch(by_topic, now)
            topics = []
            for topic, parts in by_topic.items():
                info = cluster.topics.get(topic)
                tid = info.topic_id if info is not None else None
                if tid is None:
                    version = min(version, 12)
                topics.append((topic, tid, parts))
        self.metrics.request_sent(records, now)
        body = encode_produce_body(version, transactional_id=self.transactional_id,
                                   acks=self.acks, timeout_ms=self.request_timeout_ms,
                                   topics=topics)
        in_flight = self.in_flight
        for b in batches:
            flying = in_flight.get(b.tp)
            if flying is None:
                flying = in_flight[b.tp] = deque()
            flying.append(b)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("produce v%d to node %d: %s", version, node,
                      ", ".join(f"{b.partition}@{b.producer_epoch}/{b.base_sequence}"
                                for b in batches))
        try:
            if self.acks == 0:  # nothing comes back: done once written
                conn.send_raw(ApiKey.PRODUCE, version, body, flexible=True,
                              expect_response=False)
            else:
                conn.send_with_reply(ApiKey.PRODUCE, version, body, flexible=True,
                                     decode=PRODUCE_ANSWER_DECODERS[version],
                                     reply=partial(self._on_produce_answer, node, version,
                                                   batches, time.monotonic()))
        except Exception as exc:  # connection died under us
            self._on_produce_done(node, version, batches, exc, None)
            return
        if self.acks == 0:
            self._on_produce_done(node, version, batches, None, None)

    def _batch_out(self, b: ProducerBatch, now: float) -> memoryview | None:
        """Close ``b`` for a request (:meth:`_close_batch`) and count it as sent; the
        bytes to send, or None when it could not be closed (and then it failed)."""
        try:
            self._close_batch(b)
        except Exception as exc:  # a codec that raised: this batch cannot be sent
            log.error("could not close the batch for %s-%d", b.topic, b.partition,
                      exc_info=exc)
            err = KafkaError(f"could not encode the batch for {b.topic}-{b.partition}: "
                             f"{exc!r}")
            err.__cause__ = exc
            self._fail(b, err, written=False)
            return None
        builder = b.builder
        size = builder.size_in_bytes
        raw = builder.records_size
        self.metrics.batch_sent(b.topic, b.record_count, size,
                                (size - BATCH_HEADER_SIZE) / raw if raw > 0 else 1.0,
                                (now - b.created) * 1000.0, b.attempts > 0, now)
        return builder.view()

    def _close_batch(self, b: ProducerBatch) -> None:
        """Write the batch header once: its producer id, epoch and sequence are
        assigned at its first drain and never change after (except by a local epoch
        bump, which renumbers only batches the broker cannot have written)."""
        pid = self.pid
        if pid is not None and b.base_sequence < 0:
            pid.assign_sequence(b)
        if not b.closed:
            if pid is None:
                b.builder.close()
            else:
                b.builder.close(b.producer_id, b.producer_epoch, b.base_sequence,
                                self.txn is not None)
            self.acc.batch_closed(b)

    def _on_produce_answer(self, node: int, version: int, batches: list[ProducerBatch],
                           sent_at: float, answer: ProduceAnswer | None,
                           exc: BaseException | None) -> None:
        """The connection's reply to a Produce request: its ``answer``, or ``exc``."""
        now = time.monotonic()
        self._latency_ms = (now - sent_at) * 1000.0
        try:
            self._on_produce_done(node, version, batches, exc, answer, now)
        except Exception as err:  # a bug: fail loudly, never leave sends hanging
            self.fail_producer(err)

    def _on_produce_done(self, node: int, version: int, batches: list[ProducerBatch],
                         exc: BaseException | None, response: ProduceAnswer | None,
                         now: float | None = None) -> None:
        if now is None:
            now = time.monotonic()
        in_flight = self.in_flight
        for b in batches:
            flying = in_flight.get(b.tp)
            if flying:
                if flying[0] is b:  # answers come in order: the usual case
                    flying.popleft()
                elif b in flying:
                    flying.remove(b)
        try:
            if exc is not None:
                log.info("produce request to node %s failed (%d batch(es)): %s", node,
                         len(batches), _describe_error(exc))
                self.metadata.request_update()
                for b in batches:
                    if not b.result.done():
                        self._retry_or_fail(b, exc, now)
                return
            if response is None:  # acks=0
                for b in batches:
                    self.acc.complete(b, -1, -1, None)
                return
            throttle_ms = float(response.throttle_ms)
            self.metrics.response(node, self._latency_ms, throttle_ms, now)
            if throttle_ms > 0:  # KIP-219: the broker asks us to hold off this long
                self.client.throttle(node, throttle_ms)
                self.metrics.throttle_time_total += throttle_ms
            endpoints = response.node_endpoints
            answered = response.partitions
            if len(batches) == 1 and len(answered) == 1:  # one batch, its answer
                b = batches[0]
                name, topic_id, part = answered[0]
                if part.index == b.partition:
                    if name is None and topic_id is not None:
                        # The batch's topic's id? (As a number: uuid.UUID compares
                        # and hashes in Python.)
                        info = self.metadata.cluster.topics.get(b.topic)
                        known = info.topic_id if info is not None else None
                        if known is not None and known.int == topic_id.int:
                            name = b.topic
                    if name == b.topic:
                        self._on_partition_response(node, b, part, now, endpoints)
                        return
            names_by_id = self.metadata.cluster.names_by_id
            results: dict[TopicPartition, PartitionResult] = {}
            for name, topic_id, part in answered:
                if name is None and topic_id is not None:
                    name = names_by_id.get(topic_id)
                if name is not None:
                    results[(name, part.index)] = part
            for b in batches:
                self._on_partition_response(node, b, results.get(b.tp), now, endpoints)
        finally:
            # The Sender has work if batches are queued (held back behind this
            # request, or retried), or if it waits for something to finish. Waking it
            # for nothing costs a turn of the loop and a timer per response.
            pid = self.pid
            if exc is not None or self.acc.closing or self.txn is not None \
                    or self.acc.has_queued() or (pid is not None and pid.recovering):
                self.wakeup()

    def _on_partition_response(self, node: int, b: ProducerBatch, p: PartitionResult | None,
                               now: float,
                               endpoints: dict[int, tuple[str, int]] | None = None) -> None:
        pid = self.pid
        expired = b.result.done()  # failed at delivery_timeout_ms while in flight
        if p is None:
            if not expired:
                self._retry_or_fail(
                    b, ProtocolError(f"produce response from node {node} lacks {b.tp}"), now)
            return
        code = p.error_code
        if code == 0 or code == _DUPLICATE_SEQUENCE:
            # DUPLICATE_SEQUENCE: written by an earlier attempt; the offset is unknown.
            if pid is not None and b.base_sequence >= 0:
                pid.acknowledged(b, p.base_offset if code == 0 else -1)
                self._unknown_outcome.discard(b)
            if not expired:
                if code == 0:
                    self.acc.complete(b, p.base_offset, p.log_append_ms, None)
                else:
                    self.acc.complete(b, -1, -1, None)
            return
        if expired:
            return  # its records already failed; the partition is marked unresolved
        hinted = False
        if code in _METADATA_ERRORS:
            self.metadata.request_update()
            if code in _LEADER_HINT_CODES and self.use_leader_hints:
                hinted = self._apply_leader_hint(b, p, endpoints or {})
        msg = p.error_message or None
        if code in _TOO_LARGE and b.record_count > 1 and self.fatal_error is None:
            self._split(b, code, msg)
            return
        record_errors = p.record_errors
        if record_errors:
            self._fail_with_record_errors(b, code, msg, record_errors)
            return
        self._retry_or_fail(b, for_code(code, msg), now, p.log_start_offset)
        if code in _METADATA_ERRORS and not b.result.done() and (
                hinted or self.metadata.cluster.leaders.get(b.tp) not in (None, node)):
            # A new leader (epoch) from the hint, or metadata that came meanwhile
            # names another leader: retry at once, as Java does, not after
            # retry_backoff_ms.
            b.next_attempt = now

    def _apply_leader_hint(self, b: ProducerBatch, p: PartitionResult,
                           endpoints: dict[int, tuple[str, int]]) -> bool:
        """KIP-951: the answer named the partition's new leader (``current_leader``)
        and the response its address (``node_endpoints``): move the leader now.
        True if the hint was newer than what the metadata knew, and applied."""
        hint = p.current_leader
        if hint is None:
            return False
        leader, epoch = hint
        known = {leader: endpoints[leader]} if leader in endpoints else {}
        if not self.metadata.apply_leader_hint(b.topic, b.partition, leader, epoch, known):
            return False
        self.metrics.leader_hints_used += 1
        if known:
            self.client.add_nodes(known)
        return True

    def _split(self, b: ProducerBatch, code: int, msg: str | None) -> None:
        loop = b.result.get_loop()
        pieces = self.acc.split(b, loop)
        if self.pid is not None and b.base_sequence >= 0:
            self.pid.replace(b, pieces)
        if b in self._unknown_outcome:
            # An earlier attempt of the whole batch may be in the log: so may each
            # piece's records.
            self._unknown_outcome.discard(b)
            self._unknown_outcome.update(pieces)
        log.info("%s-%d: the broker refused a batch of %d records (%d bytes) as too large "
                 "(%s%s); split into %d batches", b.topic, b.partition, b.record_count,
                 b.builder.size_in_bytes, ErrorCode(code).name.upper(),
                 f": {msg}" if msg else "", len(pieces))

    def _fail_with_record_errors(self, b: ProducerBatch, code: int, msg: str | None,
                                 record_errors: list[tuple[int, str | None]]) -> None:
        """KIP-467: the broker named the invalid records of a batch it refused. They
        get the broker's reason; the others a :class:`BatchRejectedError` (they were
        not written either). As in Java, none of them is retried."""
        errors: dict[int, BaseException] = {}
        for index, message in record_errors:
            text = message or msg or ErrorCode(code).name
            errors[index] = (for_code(code, text) if len(record_errors) == 1
                             else InvalidRecordError(text))
        first = next(iter(errors.values()))
        b.record_errors = errors
        self._fail(b, BatchRejectedError(
            f"not written: the broker refused the whole batch for {b.topic}-{b.partition} "
            f"because {len(errors)} other record(s) in it were invalid ({first})"),
            written=False)

    def _retry_or_fail(self, b: ProducerBatch, exc: BaseException, now: float,
                       log_start: int = -1) -> None:
        """Retry ``b`` (in order, within ``delivery_timeout_ms``) or fail it, after
        ``exc``; ``log_start`` is the partition's log start offset of the answer."""
        txn = self.txn
        if txn is not None and isinstance(exc, BrokerResponseError) \
                and int(exc.code) in PRODUCE_FENCED_CODES:
            self._fail(b, txn.fenced(int(exc.code), str(exc)), written=False)  # fatal
            return
        retriable = bool(getattr(exc, "retriable", False))
        pid = self.pid
        if pid is not None and b.base_sequence >= 0:
            if txn is not None:
                if isinstance(exc, UnknownProducerIdError):
                    # Java's canRetry: the broker lost this producer's state. Retried
                    # when the answer lacks the log start offset, or the batch's
                    # sequence was started over already; when retention removed
                    # everything this producer wrote here, the partition's sequences
                    # start over at 0 and the batch is retried; otherwise the
                    # transaction cannot be completed: abort it (the abort bumps the
                    # epoch).
                    if log_start < 0 or pid.restarting(b):
                        retriable = True
                    elif pid.last_acked_offset(b.tp) < log_start:
                        pid.restart_sequences(b.tp)
                        retriable = True
                    else:
                        retriable = False
                elif isinstance(exc, OutOfOrderSequenceError) and (
                        self._earlier_pending(b)
                        or not pid.is_next_sequence(b.tp, b.base_sequence)):
                    retriable = True  # an earlier batch is being resent first
            elif isinstance(exc, OutOfOrderSequenceError):
                # The idempotent producer retries every OUT_OF_ORDER_SEQUENCE (as
                # Java). If the batch is the one the broker should take next, or the
                # one right after an expired batch, there is a real gap: its
                # partition gets new sequences under a local epoch bump first.
                if not pid.resolve_unresolved(b.tp, b.base_sequence) \
                        and not pid.is_unresolved(b.tp) \
                        and pid.is_next_sequence(b.tp, b.base_sequence):
                    pid.request_bump(b.tp, b.base_sequence)
                retriable = True
            elif isinstance(exc, (UnknownProducerIdError, InvalidProducerEpochError)):
                # The broker lost (or moved past) our state on this partition: bump
                # its epoch locally and resend; the batch was not written.
                pid.request_bump(b.tp, b.base_sequence)
                retriable = True
        if self._stopped:
            retriable = False
        written = _written(exc)
        if retriable and b.attempts < self.retries:
            if now - b.created + self.acc.retry_backoff >= self.delivery_timeout:
                self._fail(b, DeliveryTimeoutError(self._expiry_text(b, now, exc)),
                           written=written)
                return
            log.log(self._retry_log_level(b.tp, exc),
                    "produce to %s-%d failed, retrying (attempt %d, %d record(s), "
                    "sequence %d): %s", b.topic, b.partition, b.attempts + 2,
                    b.record_count, b.base_sequence, _describe_error(exc))
            b.last_error = exc
            if written is None and self.pid is not None:
                self._unknown_outcome.add(b)
            self.acc.reenqueue(b, now, escalate=not (
                isinstance(exc, BrokerResponseError) and int(exc.code) in _NOT_LED))
            return
        self._fail(b, exc, written=written)

    def _retry_log_level(self, tp: TopicPartition, exc: BaseException) -> int:
        """WARNING for a retry, but a retry for stale metadata (NOT_LEADER_OR_FOLLOWER
        and its kind: a new topic's leaders settling, a leader moving) only for the
        first partition of its topic per metadata version, the others at DEBUG: a
        topic of a thousand partitions just created would log each one again at every
        refresh. Every such retry is counted (``metadata-retry-total``)."""
        if not isinstance(exc, BrokerResponseError) or int(exc.code) not in _METADATA_ERRORS:
            return logging.WARNING
        self.metrics.metadata_retries += 1
        version = self.metadata.version
        topic = tp[0]
        if self._retry_logged.get(topic) == version:
            return logging.DEBUG
        if len(self._retry_logged) > 10_000:
            self._retry_logged.clear()
        self._retry_logged[topic] = version
        return logging.WARNING

    def _earlier_pending(self, b: ProducerBatch) -> bool:
        if self.acc.queued_before(b.tp, b.base_sequence):
            return True
        flying = self.in_flight.get(b.tp)
        return bool(flying) and any(0 <= x.base_sequence < b.base_sequence for x in flying or ())

    def _fail(self, b: ProducerBatch, exc: BaseException, *, written: bool | None) -> None:
        """Fail a batch for good. ``written``: whether the broker may have it (None:
        unknown, False: refused); a batch with a sequence tells its partition's
        idempotence state, which then resolves or bumps that partition only."""
        log.warning("failed to deliver %d record(s) to %s-%d (sequence %d, attempt %d): %s",
                    b.record_count, b.topic, b.partition, b.base_sequence, b.attempts + 1, exc)
        if b in self._unknown_outcome:
            # An earlier attempt may have been written (its answer was lost), so a
            # refusal of this one proves nothing about the log.
            self._unknown_outcome.discard(b)
            written = None
        if self.pid is not None and b.base_sequence >= 0:
            self.pid.failed(b, written=written)
        self.metrics.records_failed(b.topic, b.record_count, time.monotonic())
        self.acc.complete(b, -1, -1, exc)
        if self.txn is not None:
            self.txn.fail(exc)

    def _fail_queued_for(self, node: int, cluster: Cluster, error: KafkaError) -> None:
        for b in self.acc.take_queued(cluster.leaders, node):
            self._fail(b, error, written=False)

    def abort_queued(self, error: KafkaError) -> None:
        """Transactions: fail the queued batches of an aborted or failed transaction."""
        failed = self.acc.abort_undrained(error)
        if self._unknown_outcome:
            self._unknown_outcome.difference_update(failed)
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
            # As Java's producer: a broker with auto.create.topics.enable creates them.
            response = await self.client.fetch_metadata(
                topics, timeout_s=self.request_timeout_ms / 1000.0, on_error=md.attempt_failed,
                allow_auto_topic_creation=True)
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

    def busy_topics(self) -> set[str]:
        """Topics with records buffered or in flight: they never expire."""
        busy = self.acc.topics_in_use()
        busy.update(tp[0] for tp, dq in self.in_flight.items() if dq)
        return busy

    def _want_queued_topics(self) -> None:
        """Batches without a leader: make sure their topics are asked for (a send that
        waited for memory may have appended after its topic expired)."""
        md = self.metadata
        for topic in self.acc.queued_topics():
            if topic not in md.topics:
                md.add_topic(topic)

    def forget_topics(self, topics: list[str]) -> None:
        """Topics that expired from the metadata: drop their per-topic state."""
        for topic in topics:
            self.acc.forget_topic(topic)
            for tp in [tp for tp, dq in self.in_flight.items() if tp[0] == topic and not dq]:
                del self.in_flight[tp]

    def learn_growth_cap(self, topic: str) -> None:
        """Ask the broker (in the background) how large ``topic``'s batches may grow."""
        self.spawn(self._learn_growth_cap(topic))

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


def _written(exc: BaseException) -> bool | None:
    """Whether a batch that got ``exc`` may be in the log: False when a broker
    refused it, None (unknown) after a lost connection or a timeout, or an answer
    that the leader wrote it without enough replicas."""
    if isinstance(exc, BrokerResponseError) and int(exc.code) not in _MAYBE_WRITTEN:
        return False
    return None


def _describe_error(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if isinstance(exc, BrokerResponseError) else f"{type(exc).__name__}: {text}"


