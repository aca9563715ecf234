"""Per-record hot path: batches, record futures, the appender (compiled: records.pyx)."""

import asyncio
from collections.abc import Callable, Generator
from contextvars import Context
from types import TracebackType
from typing import Any, final

from .batch import BatchBuilder
from .pool import Block

@final
class RecordMetadata:
    """Where a record was written (Java's ``RecordMetadata``). Immutable."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int:
        """The record's offset, or -1 when it is not known (acks=0)."""
    @property
    def timestamp(self) -> int:
        """CreateTime given or assigned at send, or the broker's LogAppendTime."""
    @property
    def serialized_key_size(self) -> int:
        """Bytes of the key, -1 for a null key."""
    @property
    def serialized_value_size(self) -> int:
        """Bytes of the value, -1 for a null value."""
    def __init__(self, topic: str, partition: int, offset: int, timestamp: int,
                 serialized_key_size: int, serialized_value_size: int) -> None: ...
    def __hash__(self) -> int: ...

@final
class ProducerBatch:
    """One batch for one partition: a builder over a pool block, and its outcome."""

    topic: str
    partition: int
    tp: tuple[str, int]
    block: Block | None
    builder: BatchBuilder
    result: Any
    created: float
    next_attempt: float
    attempts: int
    full: bool
    base_offset: int
    log_append_time: int
    last_error: BaseException | None
    producer_id: int
    producer_epoch: int
    base_sequence: int
    waiters: list[asyncio.Future[None]] | None
    def __init__(self, tp: tuple[str, int], block: Block, result: Any, now: float) -> None: ...
    @property
    def error(self) -> BaseException | None:
        """The final error, None on success; with ``record_errors`` set, the error of
        the records that have no entry there."""
    @error.setter
    def error(self, value: BaseException | None) -> None:
        """Also keeps ``error_tb``: the traceback the error has now."""
    @property
    def error_tb(self) -> TracebackType | None:
        """``error.__traceback__`` when ``error`` was set; record futures raise
        ``error.with_traceback(error_tb)`` (as asyncio.Future), so it never grows."""
    @property
    def record_errors(self) -> dict[int, BaseException] | None:
        """KIP-467: None, or ``{index of a record in this batch: its error}``.

        ``RecordFuture.result()``/``exception()`` give ``record_errors[index]`` when
        there is one, else ``error`` (which must then be set too, for the other
        records). Set it, before completing the batch, to the whole dict: the errors'
        tracebacks are kept then.
        """
    @record_errors.setter
    def record_errors(self, value: dict[int, BaseException] | None) -> None: ...
    @property
    def children(self) -> list[ProducerBatch] | None:
        """The batches this one's records were moved to (:meth:`set_children`)."""
    @property
    def parent(self) -> ProducerBatch | None:
        """For a child of a split batch: that batch."""
    @property
    def parent_offset(self) -> int:
        """For a child: the index in ``parent`` of its first record (else 0)."""
    def set_children(self, children: list[ProducerBatch]) -> None:
        """Split: this batch's records now live, in order, in ``children``.

        Child k holds this batch's indices ``[offset_k, offset_k + child.record_count)``,
        ``offset_k`` being the sum of the record counts of the children before it; each
        child gets ``parent = self`` and ``parent_offset = offset_k``. The children must
        be of the same partition, not done, not already children, and hold exactly
        ``self.record_count`` records together; ``self`` must be neither done nor split
        already (ValueError/TypeError otherwise). A child may be split in turn.

        A record future of this batch (index i) then gives the outcome of record
        ``i - offset_k`` of the child k holding it (recursively) once that child is
        done; if ``self`` is completed while that child is not, ``self``'s own outcome.
        It is done when ``self.result`` is: complete ``self`` only when
        :meth:`child_done` says so.
        """
    def child_done(self) -> bool:
        """The completion contract of split batches.

        After completing a child batch (outcome set, ``result`` set,
        :meth:`wake_waiters` called: ``RecordAccumulator.complete(child, ...)``), call
        ``child.child_done()``. It returns True when that call made the last of
        ``child.parent``'s children done: the caller must then complete
        ``child.parent`` the same way (its ``result`` set, then its
        ``wake_waiters()``; its own error may be set to its first failure for
        code that reads ``batch.error``, records resolve through the children
        anyway) and then call ``child.parent.child_done()``, which tells in the same
        way whether the grandparent must be completed (nested splits), and so on up.
        False when nothing must be completed: a sibling is still pending, the batch
        has no parent, or this child was already reported. Raises InvalidStateError if
        the child's ``result`` is not done yet. (If the parent was completed on its
        own meanwhile, e.g. aborted, True still comes once: completing it again must
        then be a no-op, as ``RecordAccumulator.complete`` is for a done batch.)
        """
    def failures(self) -> list[tuple[str, int, BaseException]]:
        """``(topic, partition, error)`` of each distinct error of this batch's records
        so far, in record order: its record errors, then its error if some record has
        none; for a split batch, those of its done children (recursively), and its
        own error for records of children not done if it was completed on its own.
        An error object shared by several records is listed once."""
    def first_failure(self) -> tuple[BaseException, TracebackType | None] | None:
        """The first error of :meth:`failures` and the traceback it had when the batch
        recorded it (raise ``error.with_traceback(tb)``), or None."""
    def waiter(self) -> asyncio.Future[None] | None:
        """A private future resolved when the batch completes (None if it is done)."""
    def wake_waiters(self) -> None:
        """Resolve every waiter (right after ``result`` is set)."""
    @property
    def record_count(self) -> int: ...
    @property
    def closed(self) -> bool: ...

@final
class RecordFuture:
    """The result of one ``send()``: an awaitable, asyncio-compatible future of its
    RecordMetadata (``asyncio.isfuture()`` is true; ``asyncio.wait``, ``gather``,
    ``as_completed``, ``wait_for``, ``shield``, ``ensure_future`` accept it).

    Done-callbacks are scheduled with ``loop.call_soon(cb, self, context=...)`` once
    the record is done. ``cancel()`` cancels this handle only: the record is still
    sent and its batch is unaffected.
    """

    _asyncio_future_blocking: bool
    def __init__(self, batch: ProducerBatch, index: int, timestamp: int, key_size: int,
                 value_size: int) -> None: ...
    @property
    def batch(self) -> ProducerBatch: ...
    def __await__(self) -> Generator[Any, None, RecordMetadata]: ...
    def done(self) -> bool: ...
    def cancelled(self) -> bool: ...
    def result(self) -> RecordMetadata: ...
    def exception(self) -> BaseException | None: ...
    def cancel(self, msg: Any | None = None) -> bool: ...
    def add_done_callback(self, callback: Callable[[RecordFuture], object], *,
                          context: Context | None = None) -> None: ...
    def remove_done_callback(self, callback: Callable[[RecordFuture], object]) -> int: ...
    def get_loop(self) -> asyncio.AbstractEventLoop: ...
    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...

@final
class TopicRoute:
    num_partitions: int
    sticky: int
    tails: list[ProducerBatch | None]
    def __init__(self, num_partitions: int) -> None: ...
    def resize(self, num_partitions: int) -> None: ...

@final
class Appender:
    def __init__(self, hash_keys: bool, ignore_keys: bool = False,
                 max_payload: int = -1) -> None: ...
    def bind(self, loop: asyncio.AbstractEventLoop | None) -> None:
        """Take records in :meth:`append` only on ``loop`` (None: take none)."""
    def route(self, topic: str) -> TopicRoute | None: ...
    def set_route(self, topic: str, num_partitions: int) -> TopicRoute: ...
    def append(self, topic: object, value: object, key: object, partition: object,
               timestamp_ms: object, /) -> RecordFuture | None: ...
    def append_many(self, topic: str, values: list[Any], keys: list[Any] | None, start: int,
                    partition: int | None, timestamp_ms: int | None,
                    touched: list[ProducerBatch]) -> int: ...
