"""What ``send()`` hands back: a per-record awaitable backed by its batch's result.

Like Java's ``FutureRecordMetadata`` pointing at one ``ProduceRequestResult`` per
batch, a :class:`RecordFuture` is a small object holding (batch, index); the only
asyncio future is the batch's. Awaiting it gives :class:`RecordMetadata` or raises
the batch's typed error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .accumulator import ProducerBatch

__all__ = ["RecordFuture", "RecordMetadata"]


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where a record was written (Java's ``RecordMetadata``)."""

    topic: str
    partition: int
    offset: int
    """The record's offset, or -1 when it is not known (acks=0)."""
    timestamp: int
    """CreateTime given or assigned at send, or the broker's LogAppendTime."""
    serialized_key_size: int
    """Bytes of the key, -1 for a null key."""
    serialized_value_size: int
    """Bytes of the value, -1 for a null value."""


class RecordFuture:
    """The result of one ``send()``: await it, or add a done callback."""

    __slots__ = ("_batch", "_index", "_key_size", "_timestamp", "_value_size")

    def __init__(self, batch: ProducerBatch, index: int, timestamp: int,
                 key_size: int, value_size: int) -> None:
        self._batch = batch
        self._index = index
        self._timestamp = timestamp
        self._key_size = key_size
        self._value_size = value_size

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        fut = self._batch.result
        if not fut.done():
            yield from fut
        return self.result()

    def done(self) -> bool:
        return self._batch.result.done()

    def result(self) -> RecordMetadata:
        """The metadata; raises the record's error, or InvalidStateError if not done."""
        batch = self._batch
        if not batch.result.done():
            raise asyncio.InvalidStateError("the record has not been acknowledged yet")
        if batch.error is not None:
            raise batch.error
        offset = batch.base_offset + self._index if batch.base_offset >= 0 else -1
        ts = batch.log_append_time if batch.log_append_time >= 0 else self._timestamp
        return RecordMetadata(batch.topic, batch.partition, offset, ts,
                              self._key_size, self._value_size)

    def exception(self) -> BaseException | None:
        if not self._batch.result.done():
            raise asyncio.InvalidStateError("the record has not been acknowledged yet")
        return self._batch.error

    def add_done_callback(self, callback: Callable[[RecordFuture], object]) -> None:
        """Call ``callback(self)`` on the event loop once the record is acknowledged or failed."""
        self._batch.result.add_done_callback(lambda _f: callback(self))

    @property
    def topic(self) -> str:
        return self._batch.topic

    @property
    def partition(self) -> int:
        return self._batch.partition

    def __repr__(self) -> str:
        state = "pending"
        if self._batch.result.done():
            state = "failed" if self._batch.error is not None else "done"
        return f"<RecordFuture {self.topic}-{self.partition}#{self._index} {state}>"
