"""What ``send()`` hands back: a per-record awaitable backed by its batch's result.

Like Java's ``FutureRecordMetadata`` pointing at one ``ProduceRequestResult`` per
batch, a :class:`RecordFuture` (compiled, the asyncio glue ``_native/aio.pyx``) is a
small object holding (batch, index); the only asyncio future is the batch's. It is an
asyncio-compatible future (``asyncio.wait``, ``gather``, ``as_completed``, ...):
awaiting it gives :class:`RecordMetadata` or raises the record's typed error.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Sequence
from typing import Any

from ._native import ProducerBatch, RecordFuture, RecordMetadata

__all__ = ["RecordFuture", "RecordMetadata", "SendManyResult"]


class SendManyResult:
    """What ``send_many()`` returns once every record is buffered.

    ``await`` it to wait until all of them are acknowledged: it gives the number of
    records, or raises the first typed error of the call's records (a split batch's
    through the pieces holding them; a KIP-467 per-record error before its batch's
    error), with the traceback it had when the batch failed; ``failures()`` lists them
    all. Only the call's own records count: in a batch shared with other sends, a piece
    of a split batch that holds none of them does not fail this call.
    """

    __slots__ = ("_batches", "_spans", "count")

    def __init__(self, batches: Sequence[ProducerBatch], count: int,
                 firsts: Sequence[int] | None = None,
                 ends: Sequence[int] | None = None) -> None:
        self._batches = tuple(dict.fromkeys(batches))  # each batch once, in order
        # Per batch, the call's records in it: each run of them is ``firsts[k]`` up to
        # ``ends[k]`` for ``batches[k]`` (a batch may have several runs: other sends can
        # write into it while the call waits on the Python path); without ``ends``,
        # from the call's first record there to the batch's end now.
        runs: dict[ProducerBatch, list[tuple[int, int]]] = {}
        if firsts is not None:
            if ends is None:
                ends = [b.record_count for b in batches]
            for batch, first, end in zip(batches, firsts, ends, strict=True):
                runs.setdefault(batch, []).append((first, end))
        spans: list[tuple[ProducerBatch, int, int]] = []
        for b in self._batches:
            merged: list[tuple[int, int]] = []
            for lo, hi in sorted(runs.get(b) or [(0, b.record_count)]):
                if merged and lo <= merged[-1][1]:
                    merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
                else:
                    merged.append((lo, hi))
            spans.extend((b, lo, hi) for lo, hi in merged)
        self._spans = tuple(spans)
        self.count = count
        """Records appended by the call."""

    @classmethod
    def of(cls, futures: Iterable[RecordFuture]) -> SendManyResult:
        """The records of many ``send()`` futures, to be awaited as one: ``await
        SendManyResult.of(futures)`` waits until every one is acknowledged (giving
        their number) or raises the first typed error among them, as ``send_many()``'s
        result does; ``failures()`` lists every error. It waits on each batch once
        instead of on each record: over thousands of records it costs a fraction of
        ``asyncio.gather(*futures)`` (see "Awaiting many sends" in
        docs/performance.md). The per-record metadata stays on each future
        (``fut.result()`` once this returns)."""
        spans: list[tuple[ProducerBatch, int, int]] = []
        last: ProducerBatch | None = None
        lo = end = -1
        n = 0
        try:
            it = iter(futures)
            for fut in it:
                batch, index = fut.batch, fut.index
                n += 1
                if batch is last and index == end:  # the next record of the same batch
                    end += 1
                    continue
                if last is not None:
                    spans.append((last, lo, end))
                last, lo, end = batch, index, index + 1
        except AttributeError as exc:
            raise TypeError("SendManyResult.of() takes the futures send() returned "
                            "(MockProducer's: MockSendManyResult.of())") from exc
        if last is not None:
            spans.append((last, lo, end))
        # (The spans as send_many()'s result keeps them: built here directly, since
        # the runs are known; a batch may have several.)
        result = cls.__new__(cls)
        result._batches = tuple(dict.fromkeys(b for b, _, _ in spans))
        result._spans = tuple(spans)
        result.count = n
        return result

    def __await__(self) -> Generator[Any, None, int]:
        for batch in self._batches:
            waiter = batch.waiter()  # private: a cancelled awaiter cancels only it
            if waiter is not None:
                yield from waiter
        for batch, lo, hi in self._spans:
            if batch.error is None and batch.children is None \
                    and batch.record_errors is None:
                continue  # acknowledged whole: nothing to look up
            failure = batch.first_failure(lo, hi)
            if failure is not None:
                error, tb = failure
                # The traceback it had when the batch failed: raised for many awaiters,
                # it does not grow (as asyncio.Future re-raises).
                raise error.with_traceback(tb)
        return self.count

    def done(self) -> bool:
        return all(b.result.done() for b in self._batches)

    def failures(self) -> list[tuple[str, int, BaseException]]:
        """``(topic, partition, error)`` of each error of the call's records so far
        (see ``ProducerBatch.failures``: per-record errors, and the pieces a split batch's
        records moved to, included)."""
        out: list[tuple[str, int, BaseException]] = []
        seen: set[tuple[int, int]] = set()  # an error of a batch once, for all its runs
        for b, lo, hi in self._spans:
            for f in b.failures(lo, hi):
                if (id(b), id(f[2])) not in seen:
                    seen.add((id(b), id(f[2])))
                    out.append(f)
        return out

    def failed_count(self) -> int:
        """How many of the call's records have failed so far."""
        return sum(b.failed_count(lo, hi) for b, lo, hi in self._spans)

    def __repr__(self) -> str:
        return f"<SendManyResult {self.count} records in {len(self._batches)} batches>"
