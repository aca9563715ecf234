"""The asyncio glue of the native core (compiled: aio.pyx): the batches' private
waiter futures, the record futures, and the appender's binding to its event loop."""

import asyncio
from collections.abc import Callable, Coroutine, Generator
from contextvars import Context
from typing import Any, final

from .records import CoreAppender, CoreBatch, RecordMetadata

def new_future(loop: asyncio.AbstractEventLoop) -> asyncio.Future[Any]:
    """``loop.create_future()``, without asyncio's Python frame on its own loops."""

@final
class ProducerBatch(CoreBatch):
    """A batch whose records can be awaited (see :class:`records.CoreBatch`)."""

    waiters: list[asyncio.Future[None]] | None
    @property
    def hooked(self) -> list[RecordFuture] | None:
        """Its record futures that have done-callbacks to run when it completes."""
    @property
    def parent(self) -> ProducerBatch | None:
        """For a child of a split batch: that batch."""
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
    def waiter(self) -> asyncio.Future[None] | None:
        """A private future resolved when the batch completes (None if it is done)."""
    def wake_waiters(self) -> None:
        """Resolve every waiter (right after ``result`` is set)."""

@final
class RecordFuture:
    """The result of one ``send()``: an awaitable, asyncio-compatible future of its
    RecordMetadata (``asyncio.isfuture()`` is true; ``asyncio.wait``, ``gather``,
    ``as_completed``, ``wait_for``, ``shield``, ``ensure_future`` accept it).

    Done-callbacks run in their context on the batch's loop soon after the record is
    done, in order (those of a batch's records from one ``call_soon`` per batch).
    ``cancel()`` cancels this handle only: the record is still sent and its batch is
    unaffected.
    """

    _asyncio_future_blocking: bool
    @property
    def index(self) -> int:
        """The record's index in its batch (its offset delta)."""
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
class Appender(CoreAppender):
    """Routes records to their partition's open batch; :meth:`append` only in the
    thread of the bound event loop, while it runs."""

    def bind(self, loop: asyncio.AbstractEventLoop | None) -> None:
        """Take records in :meth:`append` only on ``loop`` (None: take none)."""
    def bound_loop(self) -> asyncio.AbstractEventLoop | None:
        """The bound loop if it is the one running in this thread, else None (then
        ask ``asyncio.get_running_loop()``)."""
    hot: bool
    """:class:`PendingSend` may take the native path."""
    slow: Callable[[Any, Any, Any, Any, Any, Any], Coroutine[Any, Any, RecordFuture]]
    """:class:`PendingSend`'s Python path: ``slow(topic, value, key, partition,
    timestamp_ms, None)``."""
    opener: Callable[[str, int, int, bytes | None, bytes | None], ProducerBatch | None] | None
    """While :attr:`hot`: ``opener(topic, partition, timestamp, key, value)`` for a
    record whose (chosen) partition needs a new batch: the new batch holding it at
    index 0, or None for the Python path. None: that record takes the Python path."""
    def append(self, topic: object, value: object, key: object, partition: object,
               timestamp_ms: object, /) -> RecordFuture | None: ...
    def send(self, topic: str, value: Any = None, key: Any = None, *,
             partition: int | None = None, timestamp_ms: int | None = None,
             headers: Any = None) -> Coroutine[Any, Any, RecordFuture]:
        """``Producer.send``: a :class:`PendingSend` of the record (nothing appended
        until it is awaited), or for a record with headers ``slow(...)``'s
        coroutine."""

@final
class PendingSend(Coroutine[Any, Any, RecordFuture]):
    """What ``Producer.send()`` returns for a record without headers: a coroutine that
    appends the record when awaited (natively when it can) and gives its
    RecordFuture."""

    def __await__(self) -> Generator[Any, None, RecordFuture]: ...
    def send(self, arg: Any, /) -> Any: ...
    def throw(self, typ: Any, val: Any = None, tb: Any = None, /) -> Any: ...
    def close(self) -> None: ...
