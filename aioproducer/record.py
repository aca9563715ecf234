"""What ``send()`` hands back: a per-record awaitable backed by its batch's result.

Like Java's ``FutureRecordMetadata`` pointing at one ``ProduceRequestResult`` per
batch, a :class:`RecordFuture` (compiled, the asyncio glue ``_native/aio.pyx``) is a
small object holding (batch, index); the only asyncio future is the batch's. It is an
asyncio-compatible future (``asyncio.wait``, ``gather``, ``as_completed``, ...):
awaiting it gives :class:`RecordMetadata` or raises the record's typed error.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

from ._native import ProducerBatch, RecordFuture, RecordMetadata

__all__ = ["RecordFuture", "RecordMetadata", "SendManyResult"]


class SendManyResult:
    """What ``send_many()`` returns once every record is buffered.

    ``await`` it to wait until all of them are acknowledged: it gives the number of
    records, or raises the first typed error of the batches holding them (a split
    batch's through the batches its records moved to; a KIP-467 per-record error
    before its batch's error), with the traceback it had when the batch failed;
    ``failures()`` lists them all.
    """

    __slots__ = ("_batches", "count")

    def __init__(self, batches: Sequence[ProducerBatch], count: int) -> None:
        self._batches = tuple(dict.fromkeys(batches))  # each batch once, in order
        self.count = count
        """Records appended by the call."""

    def __await__(self) -> Generator[Any, None, int]:
        for batch in self._batches:
            waiter = batch.waiter()  # private: a cancelled awaiter cancels only it
            if waiter is not None:
                yield from waiter
        for batch in self._batches:
            failure = batch.first_failure()
            if failure is not None:
                error, tb = failure
                # The traceback it had when the batch failed: raised for many awaiters,
                # it does not grow (as asyncio.Future re-raises).
                raise error.with_traceback(tb)
        return self.count

    def done(self) -> bool:
        return all(b.result.done() for b in self._batches)

    def failures(self) -> list[tuple[str, int, BaseException]]:
        """``(topic, partition, error)`` of each error of the batches holding these
        records so far (see ``ProducerBatch.failures``: per-record errors, and the
        batches a split batch's records moved to, included)."""
        return [f for b in self._batches for f in b.failures()]

    def __repr__(self) -> str:
        return f"<SendManyResult {self.count} records in {len(self._batches)} batches>"
