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
from collections import deque
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from .._lifecycle import check_loop, raise_not_running
from .._native import BATCH_HEADER_SIZE
from ..config import ProducerConfig
from ..errors import (
    IllegalStateError,
    UnknownTopicError,
)
from ..metadata import PartitionInfo, TopicInfo
from ..partitioner import RecordPartitioner
from ..record import RecordMetadata
from ..serializers import Header, check_record_size, prepare_record

__all__ = ["MockProducer", "MockRecordFuture", "SentRecord"]

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
    """What :meth:`MockProducer.send` returns; behaves like :class:`~aioproducer.RecordFuture`."""

    __slots__ = ("_error", "_fut", "_key_size", "_metadata", "_value_size", "record")

    def __init__(self, record: SentRecord, loop: asyncio.AbstractEventLoop,
                 key_size: int, value_size: int) -> None:
        self.record = record
        """The record this future is for."""
        # Like the real producer's batch future, this one only ever gets a None
        # result; the error is kept aside so that an unawaited failed record does
        # not log "exception was never retrieved".
        self._fut: asyncio.Future[None] = loop.create_future()
        self._metadata: RecordMetadata | None = None
        self._error: BaseException | None = None
        self._key_size = key_size
        self._value_size = value_size

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        fut = self._fut
        if not fut.done():
            yield from fut
        return self.result()

    def done(self) -> bool:
        return self._fut.done()

    def result(self) -> RecordMetadata:
        """The metadata; raises the record's error, or InvalidStateError if not done."""
        if not self._fut.done():
            raise asyncio.InvalidStateError("the record has not been acknowledged yet")
        if self._error is not None:
            raise self._error
        assert self._metadata is not None
        return self._metadata

    def exception(self) -> BaseException | None:
        if not self._fut.done():
            raise asyncio.InvalidStateError("the record has not been acknowledged yet")
        return self._error

    def add_done_callback(self, callback: Callable[[MockRecordFuture], object]) -> None:
        """Call ``callback(self)`` on the event loop once the record is completed or failed."""
        self._fut.add_done_callback(lambda _f: callback(self))

    @property
    def topic(self) -> str:
        return self.record.topic

    @property
    def partition(self) -> int:
        return self.record.partition

    def _complete(self, offset: int) -> None:
        r = self.record
        self._metadata = RecordMetadata(r.topic, r.partition, offset, r.timestamp,
                                        self._key_size, self._value_size)
        self._fut.set_result(None)

    def _fail(self, error: BaseException) -> None:
        self._error = error
        self._fut.set_result(None)

    def __repr__(self) -> str:
        state = "pending"
        if self._fut.done():
            state = "failed" if self._error is not None else "done"
        return f"<MockRecordFuture {self.topic}-{self.partition} {state}>"


class MockProducer:
    """A :class:`~aioproducer.Producer` stand-in for tests: same API, no network.

    ``cluster`` maps each topic that exists to its partition count; sending to any
    other topic raises :class:`~aioproducer.UnknownTopicError` at once (the real
    producer raises it after ``max_block_ms``), unless ``default_partitions`` is given:
    then every topic exists, with that many partitions unless ``cluster`` says otherwise.
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
    """

    def __init__(self, config: ProducerConfig | Mapping[str, Any] | None = None, *,
                 cluster: Mapping[str, int] | None = None, auto_complete: bool = True,
                 default_partitions: int | None = None, **options: Any) -> None:
        if isinstance(config, ProducerConfig):
            if options:
                raise IllegalStateError("pass either a ProducerConfig or options, not both")
            self.config = config.validated()
        else:
            self.config = ProducerConfig.from_options(config, **options)
        c = self.config
        if default_partitions is not None:
            _check_partition_count("default_partitions", default_partitions)
        self.default_partitions = default_partitions
        self.auto_complete = auto_complete
        """Whether records are acknowledged as they are sent (may be changed any time)."""
        self.send_error: BaseException | None = None
        """When set, ``send()`` raises it (after the closed/not-started checks)."""
        self.flush_error: BaseException | None = None
        """When set, ``flush()`` raises it (and completes nothing)."""
        self.flush_count = 0
        """How many times ``flush()`` completed (reset by :meth:`clear`)."""
        self._topics: dict[str, TopicInfo] = {}
        for topic, partitions in (cluster or {}).items():
            self.add_topic(topic, partitions)
        self._partitioner = RecordPartitioner(c.partitioner, ignore_keys=c.partitioner_ignore_keys)
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

    def _topic_info(self, topic: str) -> TopicInfo:
        info = self._topics.get(topic)
        if info is None:
            if self.default_partitions is None:
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
        """Acknowledge every pending record (``timeout`` is accepted and unused)."""
        self._check_loop()
        if self.flush_error is not None:
            raise self.flush_error
        self.complete_all()
        self._open_batches.clear()
        self.flush_count += 1

    async def close(self, timeout: float | None = None) -> None:
        """Acknowledge every pending record, then close. Safe to call more than once."""
        if self._state == _CLOSED:
            return
        if self._state == _RUNNING:
            self._check_loop()
            self.complete_all()
        self._state = _CLOSED

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
        if self.send_error is not None:
            raise self.send_error
        # The same checks as Producer.send(), from the same code.
        key, value, checked_headers, timestamp_ms = prepare_record(
            topic, key, value, headers, timestamp_ms, self._key_serializer,
            self._value_serializer)
        record_size = check_record_size(key, value, checked_headers, self._max_request_size,
                                        self.config.buffer_memory)

        info = self._topic_info(topic)
        part = self._partitioner.partition(topic, key, partition, info)
        key_size = -1 if key is None else len(key)
        value_size = -1 if value is None else len(value)
        part = self._place(topic, info, part, key, partition, record_size)

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
        self._history.append(record)
        if self.auto_complete:
            self._acknowledge(fut)
        else:
            self._pending.append(fut)
        return fut

    async def send_and_wait(self, topic: str, value: Any = None, key: Any = None, *,
                            partition: int | None = None, timestamp_ms: int | None = None,
                            headers: Sequence[Header] | None = None) -> RecordMetadata:
        """``send()`` and wait for the acknowledgement (in manual mode: for a test to give it)."""
        fut = await self.send(topic, value, key, partition=partition,
                              timestamp_ms=timestamp_ms, headers=headers)
        return await fut

    async def partitions_for(self, topic: str) -> list[int]:
        """The topic's partition ids; :class:`UnknownTopicError` for a topic not in the cluster."""
        if self._state != _RUNNING:
            self._raise_not_running()
        return [p.partition for p in self._topic_info(topic).partitions]

    def _place(self, topic: str, info: TopicInfo, part: int, key: bytes | None,
               explicit: int | None, record_size: int) -> int:
        """Emulate the accumulator's batches, for the sticky partitioner's moves."""
        batches = self._open_batches
        batch = batches.get((topic, part))
        if batch is not None and batch[0] + record_size > batch[1] and \
                self._partitioner.is_sticky_choice(topic, key, explicit):
            part = self._partitioner.on_new_batch(topic, info, part)
            batch = batches.get((topic, part))
        if batch is None or batch[0] + record_size > batch[1]:
            batch = [BATCH_HEADER_SIZE, max(self._batch_size, BATCH_HEADER_SIZE + record_size)]
            batches[(topic, part)] = batch
        batch[0] += record_size
        return part

    # -- completion (the test plays the broker) -----------------------------------

    def complete_next(self) -> bool:
        """Acknowledge the oldest pending record; False if there is none."""
        if not self._pending:
            return False
        self._acknowledge(self._pending.popleft())
        return True

    def fail_next(self, error: BaseException) -> bool:
        """Fail the oldest pending record with ``error``; False if there is none."""
        _check_error(error)
        if not self._pending:
            return False
        self._pending.popleft()._fail(error)
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

    # -- inspection ---------------------------------------------------------------

    def history(self) -> list[SentRecord]:
        """Every record sent since creation (or :meth:`clear`), in send order."""
        return list(self._history)

    def clear(self) -> None:
        """Forget the history and reset :attr:`flush_count`; pending records stay pending."""
        self._history.clear()
        self.flush_count = 0

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
        return (f"<MockProducer {state} topics={self.cluster} sent={len(self._history)} "
                f"pending={len(self._pending)}>")

    # -- helpers ------------------------------------------------------------------

    def _raise_not_running(self) -> NoReturn:
        raise_not_running(self._loop, self._state == _NEW, "MockProducer")

    def _check_loop(self) -> None:
        check_loop(self._loop)


def _check_partition_count(what: str, n: object) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"{what} must be an int >= 1, got {n!r}")


def _check_error(error: object) -> None:
    if not isinstance(error, BaseException):
        raise TypeError(f"expected an exception instance, got {error!r}")
