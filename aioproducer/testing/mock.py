"""A :class:`MockProducer`: the :class:`~aioproducer.Producer` API without a network.

It validates and partitions every record exactly as the real producer does (same
typed errors, same :class:`~aioproducer.partitioner.RecordPartitioner`, over a cluster
description given to it), keeps a history of what was sent, and completes the
futures either at once (``auto_complete=True``) or when the test says so
(:meth:`MockProducer.complete_next`, :meth:`MockProducer.fail_next`...), like the
Java client's ``MockProducer``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import (
    Callable,
    Generator,
    Iterable,
    Mapping,
    Sequence,
)
from contextlib import AbstractAsyncContextManager
from contextvars import Context, copy_context
from dataclasses import dataclass
from typing import Any, NoReturn

from .._bulk import BulkInput, send_many_error
from .._lifecycle import check_loop, raise_not_running
from .._native import BATCH_HEADER_SIZE
from ..config import ProducerConfig
from ..errors import (
    IllegalStateError,
    KafkaError,
    KafkaTimeoutError,
    PartitionError,
    ProducerFencedError,
    UnknownTopicError,
)
from ..metadata import PartitionInfo, TopicInfo
from ..metrics import MetricsSnapshot, ProducerMetrics
from ..partitioner import RecordPartitioner
from ..record import RecordMetadata
from ..serializers import check_record_size, prepare_record
from ..transaction_state import TxnState, TxnStateMachine
from ..transactions import GroupMetadata, group_metadata_of, offsets_of, transaction_block
from ..types import Header

__all__ = ["MockProducer", "MockRecordFuture", "MockSendManyResult", "SentRecord"]

log = logging.getLogger("aioproducer.testing")

_NEW, _RUNNING, _CLOSED = range(3)


@dataclass(frozen=True, slots=True)
class SentRecord:
    """One record as the mock producer took it: after serialization and partitioning."""

    topic: str
    partition: int
    key: bytes | None
    """The serialized key (a copy), None for a null key."""
    value: bytes | None
    """The serialized value (a copy), None for a null value."""
    headers: tuple[tuple[str, bytes | None], ...]
    """``(key, value)`` pairs, in order; ``()`` when the record has none."""
    timestamp: int
    """CreateTime in ms: given to ``send()`` or taken at send time."""


class MockRecordFuture:
    """What :meth:`MockProducer.send` returns; behaves like :class:`~aioproducer.RecordFuture`.

    An asyncio-compatible future (``asyncio.isfuture()`` is true) as the real one is:
    ``asyncio.wait``, ``gather``, ``as_completed``, ``wait_for``, ``shield`` and
    ``ensure_future`` take it as it is. Done-callbacks run on the loop in the context
    given (or the current one), after the record is done; ``cancel()`` cancels this
    handle only (the record is still sent, and acknowledged or failed as the test
    says); ``await`` waits on a private future, so a task cancelled while awaiting
    changes nothing else.
    """

    __slots__ = ("_callbacks", "_cancel_message", "_cancelled", "_error", "_key_size",
                 "_loop", "_metadata", "_record_done", "_record_waiters", "_value_size",
                 "_waiters", "record")

    # asyncio.isfuture() is true for a class with this attribute not None. (A task sets
    # it on a future that yields itself; this one yields a private waiter instead.)
    _asyncio_future_blocking = False

    def __init__(self, record: SentRecord, loop: asyncio.AbstractEventLoop,
                 key_size: int, value_size: int) -> None:
        self.record = record
        """The record this future is for."""
        self._loop = loop
        self._metadata: RecordMetadata | None = None
        # Kept aside, as the real producer does: an unawaited failed record does not
        # log "exception was never retrieved".
        self._error: BaseException | None = None
        self._record_done = False
        self._cancelled = False
        self._cancel_message: Any = None
        self._callbacks: list[tuple[Callable[[MockRecordFuture], object], Context]] = []
        # Futures of the tasks awaiting this handle (cancel() cancels them), and of the
        # send_many() results waiting for the record itself.
        self._waiters: list[asyncio.Future[None]] = []
        self._record_waiters: list[asyncio.Future[None]] = []
        self._key_size = key_size
        self._value_size = value_size

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        if not self.done():
            waiter = self._loop.create_future()
            self._waiters.append(waiter)
            try:
                yield from waiter
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
        return self.result()

    def done(self) -> bool:
        """True once the record is acknowledged or failed, or this handle cancelled."""
        return self._record_done or self._cancelled

    def cancelled(self) -> bool:
        """True if :meth:`cancel` cancelled this handle (the record is still sent)."""
        return self._cancelled

    def cancel(self, msg: Any | None = None) -> bool:
        """Cancel this handle, not the record. False if it is done already; else True,
        and its callbacks are scheduled and the tasks awaiting it cancelled."""
        if self.done():
            return False
        self._cancelled = True
        self._cancel_message = msg
        self._schedule_callbacks()
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            waiter.cancel(msg)
        return True

    def result(self) -> RecordMetadata:
        """The metadata. Raises the record's error, CancelledError if cancelled,
        InvalidStateError if not done."""
        if self._cancelled:
            raise self._make_cancelled_error()
        if not self._record_done:
            raise asyncio.InvalidStateError("Result is not set.")
        if self._error is not None:
            raise self._error
        assert self._metadata is not None
        return self._metadata

    def exception(self) -> BaseException | None:
        """The record's error, None on success. Raises CancelledError if cancelled,
        InvalidStateError if not done."""
        if self._cancelled:
            raise self._make_cancelled_error()
        if not self._record_done:
            raise asyncio.InvalidStateError("Exception is not set.")
        return self._error

    def add_done_callback(self, callback: Callable[[MockRecordFuture], object], *,
                          context: Context | None = None) -> None:
        """Run ``callback(self)`` in ``context`` (default: a copy of the current one) on
        the event loop once the record is done (soon, if it is done already)."""
        if context is None:
            context = copy_context()
        if self.done():
            self._loop.call_soon(callback, self, context=context)
        else:
            self._callbacks.append((callback, context))

    def remove_done_callback(self, callback: Callable[[MockRecordFuture], object]) -> int:
        """Remove every registration of ``callback`` not yet scheduled; returns how
        many."""
        kept = [entry for entry in self._callbacks if entry[0] != callback]
        removed = len(self._callbacks) - len(kept)
        self._callbacks = kept
        return removed

    def get_loop(self) -> asyncio.AbstractEventLoop:
        """The event loop of the producer that sent the record."""
        return self._loop

    def _make_cancelled_error(self) -> asyncio.CancelledError:
        # (asyncio.gather() asks a cancelled child for this.)
        msg = self._cancel_message
        return asyncio.CancelledError() if msg is None else asyncio.CancelledError(msg)

    @property
    def topic(self) -> str:
        return self.record.topic

    @property
    def partition(self) -> int:
        return self.record.partition

    def _record_waiter(self) -> asyncio.Future[None] | None:
        """A future done when the record is (None if it is already): for
        :class:`MockSendManyResult`, which a cancelled handle does not end."""
        if self._record_done:
            return None
        waiter = self._loop.create_future()
        self._record_waiters.append(waiter)
        return waiter

    def _complete(self, offset: int) -> None:
        r = self.record
        self._metadata = RecordMetadata(r.topic, r.partition, offset, r.timestamp,
                                        self._key_size, self._value_size)
        self._done()

    def _fail(self, error: BaseException) -> None:
        self._error = error
        self._done()

    def _done(self) -> None:
        self._record_done = True
        for waiter in (*self._record_waiters, *self._waiters):
            if not waiter.done():
                waiter.set_result(None)
        self._record_waiters = []
        self._waiters = []
        if not self._cancelled:  # (a cancelled handle's callbacks are scheduled already)
            self._schedule_callbacks()

    def _schedule_callbacks(self) -> None:
        callbacks, self._callbacks = self._callbacks, []
        for callback, context in callbacks:
            self._loop.call_soon(callback, self, context=context)

    def __repr__(self) -> str:
        state = "pending"
        if self._cancelled:
            state = "cancelled"
        elif self._record_done:
            state = "failed" if self._error is not None else "done"
        return f"<MockRecordFuture {self.topic}-{self.partition} {state}>"


class MockSendManyResult:
    """What :meth:`MockProducer.send_many` returns; behaves like
    :class:`~aioproducer.record.SendManyResult`.

    ``await`` it to wait until every record is acknowledged or failed: it gives the
    number of records, or raises the error of the first failed record (in send order).
    """

    __slots__ = ("count", "futures")

    def __init__(self, futures: Sequence[MockRecordFuture]) -> None:
        self.futures: tuple[MockRecordFuture, ...] = tuple(futures)
        """One future per record, in order (the mock's extra: the real result has none)."""
        self.count = len(self.futures)
        """Records appended by the call."""

    @classmethod
    def of(cls, futures: Iterable[MockRecordFuture]) -> MockSendManyResult:
        """As :meth:`SendManyResult.of <aioproducer.record.SendManyResult.of>`: the
        records of many ``send()`` futures, awaited as one."""
        return cls(list(futures))

    def __await__(self) -> Generator[Any, None, int]:
        for fut in self.futures:
            waiter = fut._record_waiter()  # (a cancelled handle still has its record)
            if waiter is not None:
                yield from waiter
        for fut in self.futures:
            if fut._error is not None:
                raise fut._error
        return self.count

    def done(self) -> bool:
        return all(f._record_done for f in self.futures)

    def failures(self) -> list[tuple[str, int, BaseException]]:
        """``(topic, partition, error)`` of the failed records, one per partition and
        error (the real result lists one per failed batch)."""
        seen: set[tuple[str, int, int]] = set()
        out: list[tuple[str, int, BaseException]] = []
        for fut in self.futures:
            err = fut._error
            if err is not None and (fut.topic, fut.partition, id(err)) not in seen:
                seen.add((fut.topic, fut.partition, id(err)))
                out.append((fut.topic, fut.partition, err))
        return out

    def failed_count(self) -> int:
        """How many of the call's records have failed so far."""
        return sum(1 for f in self.futures if f._error is not None)

    def __repr__(self) -> str:
        pending = sum(not f._record_done for f in self.futures)
        return f"<MockSendManyResult {self.count} records, {pending} pending>"


class MockProducer:
    """A :class:`~aioproducer.Producer` stand-in for tests: same API, no network.

    Topics:

    - Without ``cluster`` (the default), any topic is accepted, as by the Java
      ``MockProducer`` with an empty cluster: a topic not declared (with ``cluster``
      or :meth:`add_topic`) has its records on partition 0, or on the partition the
      record names (any int >= 0), and :meth:`partitions_for` says ``[0]`` for it.
    - With ``cluster``, which maps each topic that exists to its partition count
      (``{}`` for none yet), sending to any other topic raises
      :class:`~aioproducer.UnknownTopicError` at once (the real producer raises it
      after ``max_block_ms``). ``strict_topics`` says it explicitly: ``True`` refuses
      undeclared topics even without ``cluster``, ``False`` accepts them (as above)
      even with one; the declared topics keep their partition counts either way.
    - With ``default_partitions``, every topic exists, with that many partitions unless
      ``cluster`` says otherwise (``strict_topics=True`` contradicts it: ValueError).
    Other options are :class:`~aioproducer.ProducerConfig` fields, as for ``Producer``
    (``partitioner``, ``partitioner_ignore_keys``, ``key_serializer``,
    ``value_serializer``, ``max_request_size``, ``batch_size``...); the network ones are
    accepted and ignored.

    Completion:

    - ``auto_complete=True`` (default): each record is acknowledged as it is sent; its
      future is done when ``send()`` returns.
    - ``auto_complete=False``: records stay pending until :meth:`complete_next`,
      :meth:`fail_next`, :meth:`complete_all` or :meth:`fail_all` (oldest first), or
      until :meth:`flush` or :meth:`close`, which acknowledge every pending record
      (the Java ``MockProducer``'s ``flush()``; the real producer's ``close()`` also
      delivers what is buffered). To test a failure path, fail the records first.

    Offsets are assigned per partition, 0, 1, 2..., in the order records are
    acknowledged (failed records take none).

    Partitioning is the real producer's: explicit partition (checked against the
    partition count), else the key's hash, else the sticky partition. Keyless records
    stay on one partition until the records sent to it since the last :meth:`flush`
    would overflow ``batch_size``, then move on, as the real producer does when a batch
    fills (KIP-480).

    For assertions: :meth:`history`, :meth:`clear`, :attr:`closed`, :attr:`flushed`,
    :attr:`flush_count`, :attr:`pending`. Setting :attr:`send_error` (or
    :attr:`flush_error`) makes every ``send()`` (``flush()``) raise it.

    :meth:`send_many` takes the records one by one through ``send()`` and returns a
    :class:`MockSendManyResult`.

    Transactions (like the Java ``MockProducer``): with ``transactional_id`` set,
    :meth:`init_transactions`, :meth:`begin_transaction`, :meth:`commit_transaction`,
    :meth:`abort_transaction`, :meth:`send_offsets_to_transaction` and
    :meth:`transaction` follow the real producer's state machine and raise its errors.
    Records sent in a transaction are in :meth:`uncommitted` until the commit moves
    them to :meth:`history`; an abort drops them (and fails those still pending with
    :class:`~aioproducer.TransactionAbortedError`). A record failed with
    :meth:`fail_next` or :meth:`fail_all` during a transaction makes it abortable, as a
    failed batch does. Committed consumer offsets are in
    :meth:`consumer_group_offsets_history`. :meth:`fence_producer` plays another
    producer taking the id over; :attr:`init_transactions_error`,
    :attr:`commit_transaction_error`, :attr:`abort_transaction_error` and
    :attr:`send_offsets_error` play a coordinator's error answer, with the real
    producer's consequences. For assertions: :attr:`transaction_state`,
    :attr:`transaction_initialized`, :attr:`transaction_in_flight`,
    :attr:`transaction_committed`, :attr:`transaction_aborted`, :attr:`sent_offsets`,
    :attr:`commit_count`, :attr:`abort_count`. No control records are emulated: offsets
    stay consecutive across transactions. ``transaction_version`` (2 by default, or 1)
    plays the protocol the cluster finalized (:attr:`transaction_version`): with 2,
    every commit or abort bumps :attr:`producer_epoch`, as EndTxn v5 does (KIP-890).
    """

    def __init__(self, config: ProducerConfig | Mapping[str, Any] | None = None, *,
                 cluster: Mapping[str, int] | None = None, auto_complete: bool = True,
                 default_partitions: int | None = None, strict_topics: bool | None = None,
                 transaction_version: int = 2, **options: Any) -> None:
        if isinstance(config, ProducerConfig):
            if options:
                raise IllegalStateError("pass either a ProducerConfig or options, not both")
            self.config = config.validated()
        else:
            self.config = ProducerConfig.from_options(config, **options)
        c = self.config
        if default_partitions is not None:
            _check_partition_count("default_partitions", default_partitions)
            if strict_topics:
                raise ValueError("strict_topics=True and default_partitions contradict each "
                                 "other: with default_partitions every topic exists")
        self.default_partitions = default_partitions
        self.strict_topics: bool = (cluster is not None if strict_topics is None
                                    else bool(strict_topics))
        """Whether sending to a topic not declared raises UnknownTopicError (when
        ``default_partitions`` is not set)."""
        self.auto_complete = auto_complete
        """Whether records are acknowledged as they are sent (may be changed any time)."""
        self.send_error: BaseException | None = None
        """When set, ``send()`` raises it (after the closed/not-started checks)."""
        self.flush_error: BaseException | None = None
        """When set, ``flush()`` raises it (and completes nothing)."""
        self.flush_count = 0
        """How many times ``flush()`` completed (reset by :meth:`clear`)."""
        self.init_transactions_error: BaseException | None = None
        """When set, ``init_transactions()`` raises it, as if the coordinator answered it."""
        self.commit_transaction_error: BaseException | None = None
        """When set, ``commit_transaction()`` raises it after flushing, as EndTxn would:
        a :class:`~aioproducer.KafkaTimeoutError` leaves the commit to be called again,
        a :class:`~aioproducer.ProducerFencedError` (or another fatal code) is fatal,
        another :class:`~aioproducer.KafkaError` makes the transaction abortable, any
        other exception leaves the state as it was."""
        self.abort_transaction_error: BaseException | None = None
        """When set, ``abort_transaction()`` raises it, as EndTxn would: a
        :class:`~aioproducer.KafkaTimeoutError` leaves the abort to be called again,
        another :class:`~aioproducer.KafkaError` is fatal (as in the real producer), any
        other exception leaves the state as it was."""
        self.send_offsets_error: BaseException | None = None
        """When set, ``send_offsets_to_transaction()`` fails with it, as the coordinator
        would: a :class:`~aioproducer.KafkaTimeoutError` is raised as is (the call may be
        repeated), another :class:`~aioproducer.KafkaError` makes the transaction
        abortable (fatal if fenced) and raises what the real producer raises, any other
        exception is raised with the state unchanged."""
        self.commit_count = 0
        """How many transactions were committed (reset by :meth:`clear`)."""
        self.abort_count = 0
        """How many transactions were aborted (reset by :meth:`clear`)."""
        self._metrics = ProducerMetrics(c.client_id)
        self._topics: dict[str, TopicInfo] = {}
        for topic, partitions in (cluster or {}).items():
            self.add_topic(topic, partitions)
        self._partitioner = RecordPartitioner(
            c.partitioner, ignore_keys=c.partitioner_ignore_keys, batch_size=c.batch_size,
            adaptive=False)
        self._key_serializer = c.key_serializer
        self._value_serializer = c.value_serializer
        self._max_request_size = c.max_request_size
        self._batch_size = c.batch_size
        self._state = _NEW
        self._loop: asyncio.AbstractEventLoop | None = None
        self._history: list[SentRecord] = []
        self._pending: deque[MockRecordFuture] = deque()
        self._offsets: dict[tuple[str, int], int] = {}
        # (topic, partition) -> [bytes used, capacity] of the emulated open batch.
        self._open_batches: dict[tuple[str, int], list[int]] = {}
        self._txn = None if c.transactional_id is None else TxnStateMachine(c.transactional_id)
        if transaction_version not in (1, 2):
            raise ValueError(f"transaction_version must be 1 or 2, got {transaction_version!r}")
        self._transaction_version = transaction_version
        self.producer_id = -1
        """The emulated producer id (0 once init_transactions() succeeded)."""
        self.producer_epoch = -1
        """The emulated epoch: 0 after init_transactions(); with transaction_version=2
        every commit or abort bumps it, as EndTxn v5 does (KIP-890)."""
        self._uncommitted: list[SentRecord] = []
        self._uncommitted_offsets: dict[str, dict[tuple[str, int], int]] = {}
        self._offsets_history: list[dict[str, dict[tuple[str, int], int]]] = []
        self._txn_initialized = False
        self._txn_in_flight = False
        self._txn_committed = False
        self._txn_aborted = False
        self._sent_offsets = False

    # -- cluster ------------------------------------------------------------------

    def add_topic(self, topic: str, partitions: int = 1) -> None:
        """Make ``topic`` exist with ``partitions`` partitions (or change its count)."""
        if not isinstance(topic, str) or not topic:
            raise ValueError(f"topic must be a non-empty str, got {topic!r}")
        _check_partition_count(f"partitions of {topic!r}", partitions)
        self._topics[topic] = TopicInfo(
            topic, tuple(PartitionInfo(p, 0) for p in range(partitions)), None,
            tuple(range(partitions)))

    @property
    def cluster(self) -> dict[str, int]:
        """The topics that exist (so far) and their partition counts."""
        return {name: len(info.partitions) for name, info in self._topics.items()}

    def _topic_info(self, topic: str) -> TopicInfo | None:
        """The topic's description; None for a topic not declared, when any is accepted."""
        info = self._topics.get(topic)
        if info is None:
            if self.default_partitions is None:
                if not self.strict_topics:
                    return None
                raise UnknownTopicError(
                    f"topic {topic!r} is not in the MockProducer's cluster "
                    f"(known: {sorted(self._topics)}); pass it in cluster= or use add_topic()")
            self.add_topic(topic, self.default_partitions)
            info = self._topics[topic]
        return info

    # -- lifecycle ----------------------------------------------------------------

    async def start(self) -> None:
        """Bind to the running event loop; no connection is made."""
        if self._state != _NEW:
            raise IllegalStateError("start() can be called once, on a new producer")
        self._loop = asyncio.get_running_loop()
        self._state = _RUNNING

    async def __aenter__(self) -> MockProducer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def flush(self, timeout: float | None = None) -> None:
        """Acknowledge every pending record (``timeout`` is accepted and unused).

        When the transaction failed or the producer was fenced, the pending records
        fail instead, with the error the real producer fails its queued batches with.
        """
        self._check_loop()
        if self.flush_error is not None:
            raise self.flush_error
        self._settle_pending()
        self._open_batches.clear()
        self.flush_count += 1

    async def close(self, timeout: float | None = None) -> None:
        """Abort an open transaction (like the real producer), acknowledge every pending
        record, then close. Safe to call more than once."""
        if self._state == _CLOSED:
            return
        if self._state == _RUNNING:
            self._check_loop()
            txn = self._txn
            if txn is not None:
                # As the real producer: finish a commit or abort that was cancelled or
                # timed out past its point of no return, abort an open transaction.
                pending = txn.pending_end()
                try:
                    if pending is True:
                        await self.commit_transaction()
                    elif pending is False or txn.open:
                        await self.abort_transaction()
                except KafkaError as exc:
                    log.warning("close(): the transaction could not be ended: %s", exc)
            self._settle_pending()
        self._state = _CLOSED

    def _settle_pending(self) -> None:
        """What the real producer's flush does with what is buffered."""
        error = None if self._txn is None else self._txn.queued_error()
        if error is None:
            self.complete_all()
        else:
            while self._pending:
                self._fail(self._pending.popleft(), error)

    @property
    def closed(self) -> bool:
        return self._state == _CLOSED

    # -- sending ------------------------------------------------------------------

    async def send(self, topic: str, value: Any = None, key: Any = None, *,
                   partition: int | None = None, timestamp_ms: int | None = None,
                   headers: Sequence[Header] | None = None) -> MockRecordFuture:
        """Validate, partition and record the record; returns its future at once."""
        if self._state != _RUNNING or asyncio.get_running_loop() is not self._loop:
            self._raise_not_running()
        if self._txn is not None:
            self._txn.check_send()
        if self.send_error is not None:
            raise self.send_error
        # The same checks as Producer.send(), from the same code.
        key, value, checked_headers, timestamp_ms = prepare_record(
            topic, key, value, headers, timestamp_ms, self._key_serializer,
            self._value_serializer)
        record_size = check_record_size(key, value, checked_headers, self._max_request_size,
                                        self.config.buffer_memory)

        info = self._topic_info(topic)
        if info is None:
            part = _undeclared_topic_partition(partition)
        else:
            part = self._partitioner.partition(topic, key, partition, info)
            part = self._place(topic, info, part, key, partition, record_size)
        key_size = -1 if key is None else len(key)
        value_size = -1 if value is None else len(value)

        record = SentRecord(
            topic, part,
            None if key is None else bytes(key),
            None if value is None else bytes(value),
            tuple((k, None if v is None else bytes(v)) for k, v in checked_headers or ()),
            timestamp_ms,
        )
        loop = self._loop
        assert loop is not None
        fut = MockRecordFuture(record, loop, key_size, value_size)
        (self._history if self._txn is None else self._uncommitted).append(record)
        if self.auto_complete:
            self._acknowledge(fut)
        else:
            self._pending.append(fut)
        return fut

    async def send_many(self, topic: str, values: Sequence[Any],
                        keys: Sequence[Any] | None = None, *, partition: int | None = None,
                        timestamp_ms: int | None = None,
                        headers: Sequence[Sequence[Header] | None] | None = None,
                        timestamps: Sequence[int | None] | None = None
                        ) -> MockSendManyResult:
        """Send many records to one topic, as :meth:`Producer.send_many
        <aioproducer.Producer.send_many>` does: the same arguments (lists or Arrow
        columns), checks and errors.

        Each record goes through :meth:`send`. If record ``i`` is refused, records
        ``0..i-1`` stay sent (and in the history) and the error says how many.
        """
        if timestamps is not None and timestamp_ms is not None:
            raise TypeError("send_many: give timestamp_ms (one for every record) or "
                            "timestamps (one per record), not both")
        if self._state != _RUNNING or asyncio.get_running_loop() is not self._loop:
            self._raise_not_running()
        if self._txn is not None:
            self._txn.check_send()
        bulk = BulkInput(values, keys, headers, timestamps)
        futures: list[MockRecordFuture] = []
        for i in range(bulk.count):
            value, key, record_headers, ts = bulk.row(i)
            try:
                fut = await self.send(topic, value, key, partition=partition,
                                      timestamp_ms=timestamp_ms if timestamps is None else ts,
                                      headers=record_headers)
            except Exception as exc:
                err = send_many_error(exc, i, [])
                if err is exc:
                    raise
                raise err from exc
            futures.append(fut)
        return MockSendManyResult(futures)

    async def send_and_wait(self, topic: str, value: Any = None, key: Any = None, *,
                            partition: int | None = None, timestamp_ms: int | None = None,
                            headers: Sequence[Header] | None = None) -> RecordMetadata:
        """``send()`` and wait for the acknowledgement (in manual mode: for a test to give it)."""
        fut = await self.send(topic, value, key, partition=partition,
                              timestamp_ms=timestamp_ms, headers=headers)
        return await fut

    async def partitions_for(self, topic: str) -> list[int]:
        """The topic's partition ids; for a topic not declared, :class:`UnknownTopicError`
        with ``strict_topics``, else ``[0]``."""
        if self._state != _RUNNING:
            self._raise_not_running()
        info = self._topic_info(topic)
        return [0] if info is None else [p.partition for p in info.partitions]

    def _place(self, topic: str, info: TopicInfo, part: int, key: bytes | None,
               explicit: int | None, record_size: int) -> int:
        """Emulate the accumulator's batches, for the sticky partitioner's moves."""
        batches = self._open_batches
        batch = batches.get((topic, part))
        if batch is not None and batch[0] + record_size > batch[1] and \
                self._partitioner.is_sticky_choice(topic, key, explicit):
            part = self._partitioner.on_new_batch(topic, info, part)
            batch = batches.get((topic, part))
        added = record_size
        if batch is None or batch[0] + record_size > batch[1]:
            batch = [BATCH_HEADER_SIZE, max(self._batch_size, BATCH_HEADER_SIZE + record_size)]
            batches[(topic, part)] = batch
            added += BATCH_HEADER_SIZE
        batch[0] += record_size
        if self._partitioner.is_sticky_choice(topic, key, explicit):
            self._partitioner.on_appended(topic, part, added)  # KIP-794's byte count
        return part

    # -- transactions -------------------------------------------------------------

    def _transactions(self, what: str) -> TxnStateMachine:
        if self._state != _RUNNING:
            self._raise_not_running()
        self._check_loop()
        if self._txn is None:
            raise IllegalStateError(
                f"{what}: this producer is not transactional; set transactional_id")
        return self._txn

    async def init_transactions(self) -> None:
        """Make the producer ready for transactions; call once, before the first one."""
        txn = self._transactions("init_transactions()")
        txn.enter("init_transactions()", TxnState.UNINITIALIZED)
        error = self.init_transactions_error
        if error is not None:
            txn.coordinator_error(error)
            raise error
        txn.version = self._transaction_version
        self.producer_id, self.producer_epoch = 0, 0
        txn.initialized()
        self._txn_initialized = True

    def begin_transaction(self) -> None:
        """Start a transaction: records sent from now on commit or abort together."""
        self._begin(self._transactions("begin_transaction()"))

    def _begin(self, txn: TxnStateMachine) -> None:
        txn.begin()
        self._txn_in_flight = True
        self._txn_committed = self._txn_aborted = self._sent_offsets = False

    async def commit_transaction(self) -> None:
        """Flush (acknowledge what is pending), then commit: the transaction's records
        move to :meth:`history`, its offsets to :meth:`consumer_group_offsets_history`."""
        txn = self._transactions("commit_transaction()")
        if txn.resumes_end(True):
            self._end(txn, True)  # a timed-out commit, called again
            return
        txn.start_commit()
        try:
            with txn.running("commit_transaction()"):
                await self.flush()
        except BaseException:
            txn.revert_end()
            raise
        self._end(txn, True)

    async def abort_transaction(self) -> None:
        """Abort: pending records of the transaction fail with
        :class:`~aioproducer.TransactionAbortedError` and its records and offsets are
        dropped (they never reach :meth:`history`)."""
        txn = self._transactions("abort_transaction()")
        if txn.resumes_end(False):
            self._end(txn, False)
            return
        txn.start_abort()
        self._settle_pending()
        self._end(txn, False)

    def _end(self, txn: TxnStateMachine, commit: bool) -> None:
        """EndTxn: what the coordinator answers, then the transaction's outcome."""
        error = self.commit_transaction_error if commit else self.abort_transaction_error
        if error is not None:
            if isinstance(error, KafkaTimeoutError):
                txn.end_started(commit)  # the same call may be repeated
            elif isinstance(error, KafkaError):
                txn.end_failed(commit, error)
            elif not commit or txn.retrying_end is None:
                txn.revert_end()  # not from the coordinator: nothing changes
            raise error
        txn.ended()
        if (txn.version or 1) >= 2:
            self.producer_epoch += 1  # KIP-890: every EndTxn bumps the epoch
        if commit:
            self._history.extend(self._uncommitted)
            if self._uncommitted_offsets:
                self._offsets_history.append(self._uncommitted_offsets)
            self.commit_count += 1
        else:
            self.abort_count += 1
        self._uncommitted = []
        self._uncommitted_offsets = {}
        self._txn_in_flight = False
        self._txn_committed, self._txn_aborted = commit, not commit

    async def send_offsets_to_transaction(
            self, offsets: Mapping[Any, Any] | Iterable[Any],
            group_metadata: str | GroupMetadata | Any) -> None:
        """Add consumer offsets to the transaction, as the real producer takes them;
        they are in :meth:`consumer_group_offsets_history` once it commits."""
        txn = self._transactions("send_offsets_to_transaction()")
        txn.enter("send_offsets_to_transaction()", TxnState.IN_TRANSACTION)
        group = group_metadata_of(group_metadata)
        by_topic = offsets_of(offsets)
        if not by_topic:
            return  # as the real producer: empty offsets are a no-op
        error = self.send_offsets_error
        if error is not None:
            if isinstance(error, KafkaTimeoutError) or not isinstance(error, KafkaError):
                raise error
            txn.coordinator_error(error)
            txn.fail(error)
            raise txn.state_error("send_offsets_to_transaction()") from error
        if by_topic:
            group_offsets = self._uncommitted_offsets.setdefault(group.group_id, {})
            for topic, parts in by_topic.items():
                for partition, offset, _metadata in parts:
                    group_offsets[(topic, partition)] = offset
            self._sent_offsets = True

    @property
    def transaction_version(self) -> int | None:
        """As :attr:`Producer.transaction_version`: the ``transaction_version`` option
        (default 2) once init_transactions() succeeded, else None."""
        return None if self._txn is None else self._txn.version

    @property
    def transaction_sequence(self) -> int:
        """As :attr:`Producer.transaction_sequence`: the number of the transaction
        begun last (0 before the first)."""
        return 0 if self._txn is None else self._txn.number

    def transaction(self) -> AbstractAsyncContextManager[MockProducer]:
        """``async with producer.transaction():`` begins a transaction, commits it when
        the block ends, and aborts it if the block raises (the exception propagates)."""
        return transaction_block(self, self._begin_block, log)

    def _begin_block(self) -> TxnStateMachine:
        txn = self._transactions("transaction()")
        self._begin(txn)
        return txn

    def fence_producer(self) -> None:
        """Play a newer producer taking the ``transactional_id`` over: from now on every
        call raises :class:`~aioproducer.ProducerFencedError`, as in the real producer
        (the records still pending fail with it at :meth:`flush` or :meth:`close`)."""
        txn = self._transactions("fence_producer()")
        if txn.state is TxnState.UNINITIALIZED:
            raise IllegalStateError("fence_producer(): call init_transactions() first")
        if txn.state is not TxnState.FATAL_ERROR:
            txn.to_fatal(ProducerFencedError(
                f"transactional_id {txn.transactional_id!r} was taken over by a newer "
                "producer (MockProducer.fence_producer())"))

    # -- completion (the test plays the broker) -----------------------------------

    def complete_next(self) -> bool:
        """Acknowledge the oldest pending record; False if there is none."""
        if not self._pending:
            return False
        self._acknowledge(self._pending.popleft())
        return True

    def fail_next(self, error: BaseException) -> bool:
        """Fail the oldest pending record with ``error``; False if there is none.

        In a transaction, the transaction must then be aborted (a
        :class:`~aioproducer.ProducerFencedError` is fatal), as in the real producer.
        """
        _check_error(error)
        if not self._pending:
            return False
        self._fail(self._pending.popleft(), error)
        if self._txn is not None:
            self._txn.fail(error)
        return True

    def complete_all(self) -> int:
        """Acknowledge every pending record; returns how many there were."""
        n = 0
        while self.complete_next():
            n += 1
        return n

    def fail_all(self, error: BaseException) -> int:
        """Fail every pending record with ``error``; returns how many there were."""
        _check_error(error)
        n = 0
        while self.fail_next(error):
            n += 1
        return n

    def _acknowledge(self, fut: MockRecordFuture) -> None:
        tp = (fut.topic, fut.partition)
        offset = self._offsets.get(tp, 0)
        self._offsets[tp] = offset + 1
        fut._complete(offset)
        # Counted as the Sender counts a batch of one record (see metrics()).
        size = max(fut._key_size, 0) + max(fut._value_size, 0)
        self._metrics.batch_sent(fut.topic, 1, size, 1.0, 0.0, False, time.monotonic())

    def _fail(self, fut: MockRecordFuture, error: BaseException) -> None:
        fut._fail(error)
        self._metrics.records_failed(fut.topic, 1, time.monotonic())

    # -- inspection ---------------------------------------------------------------

    def metrics(self) -> MetricsSnapshot:
        """The producer's metrics by the Java producer's names, as
        :meth:`Producer.metrics() <aioproducer.Producer.metrics>` gives them: each
        record acknowledged counts as a batch of one sent (``record-send-total``,
        ``byte-total``, ``batch-size-avg``, per topic...), each record failed in
        ``record-error-total``; what a network would measure (requests, latencies,
        throttling) stays 0."""
        return self._metrics.snapshot(
            buffer_total=self.config.buffer_memory,
            buffer_available=self.config.buffer_memory, in_flight=0, metadata_age_s=0.0,
            waiting_threads=0)

    def history(self) -> list[SentRecord]:
        """Every record sent since creation (or :meth:`clear`), in send order.

        With transactions: the records of the committed transactions (those of the open
        transaction are in :meth:`uncommitted`, those of aborted ones are dropped).
        """
        return list(self._history)

    def uncommitted(self) -> list[SentRecord]:
        """The records sent in the open transaction, in send order."""
        return list(self._uncommitted)

    def consumer_group_offsets_history(self) -> list[dict[str, dict[tuple[str, int], int]]]:
        """Per committed transaction that sent offsets: ``{group_id: {(topic, partition):
        next offset}}`` (the Java ``MockProducer.consumerGroupOffsetsHistory()``)."""
        return [{group: dict(offsets) for group, offsets in committed.items()}
                for committed in self._offsets_history]

    def clear(self) -> None:
        """Forget the history and the committed offsets, reset :attr:`flush_count`,
        :attr:`commit_count` and :attr:`abort_count`; pending records stay pending and
        the open transaction stays open."""
        self._history.clear()
        self._offsets_history.clear()
        self.flush_count = 0
        self.commit_count = 0
        self.abort_count = 0

    @property
    def transaction_state(self) -> TxnState | None:
        """The state of the transactional state machine; None without ``transactional_id``."""
        return None if self._txn is None else self._txn.state

    @property
    def transaction_initialized(self) -> bool:
        """Whether ``init_transactions()`` succeeded."""
        return self._txn_initialized

    @property
    def transaction_in_flight(self) -> bool:
        """Whether a transaction was begun and is neither committed nor aborted yet."""
        return self._txn_in_flight

    @property
    def transaction_committed(self) -> bool:
        """Whether the last transaction was committed (False again at the next begin)."""
        return self._txn_committed

    @property
    def transaction_aborted(self) -> bool:
        """Whether the last transaction was aborted (False again at the next begin)."""
        return self._txn_aborted

    @property
    def sent_offsets(self) -> bool:
        """Whether the current (or last) transaction sent consumer offsets."""
        return self._sent_offsets

    @property
    def pending(self) -> int:
        """How many sent records are neither acknowledged nor failed yet."""
        return len(self._pending)

    @property
    def flushed(self) -> bool:
        """True when no record is pending (the Java ``MockProducer.flushed()``)."""
        return not self._pending

    def __repr__(self) -> str:
        state = ("new", "running", "closed")[self._state]
        txn = "" if self._txn is None else (
            f" transaction={self._txn.state.name.lower()} "
            f"uncommitted={len(self._uncommitted)}")
        return (f"<MockProducer {state} topics={self.cluster} sent={len(self._history)} "
                f"pending={len(self._pending)}{txn}>")

    # -- helpers ------------------------------------------------------------------

    def _raise_not_running(self) -> NoReturn:
        raise_not_running(self._loop, self._state == _NEW, "MockProducer")

    def _check_loop(self) -> None:
        check_loop(self._loop)


def _check_partition_count(what: str, n: object) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"{what} must be an int >= 1, got {n!r}")


def _undeclared_topic_partition(explicit: object) -> int:
    """The partition of a record for a topic not declared: the one it names, else 0."""
    if explicit is None:
        return 0
    if isinstance(explicit, bool) or not isinstance(explicit, int):
        raise PartitionError(f"partition must be an int, got {type(explicit).__name__}")
    if explicit < 0:
        raise PartitionError(f"partition must be >= 0, got {explicit}")
    return explicit


def _check_error(error: object) -> None:
    if not isinstance(error, BaseException):
        raise TypeError(f"expected an exception instance, got {error!r}")
