"""Awaiting many send() futures: ``asyncio.gather(*futures)`` against
``SendManyResult.of(futures)``, CPU per record, no broker.

    python -m bench.studies.await_many     # 10,000 records, 1, 10 and 100 per batch

Each round builds batches of ``per_batch`` records (real ``ProducerBatch`` objects and
record futures, as ``send()`` makes them), completes them from a loop callback as the
Sender does, and awaits all the futures one way or the other; the CPU time of the
await (completion included, the same for both) is divided by the records. Best of 5.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from aioproducer._native import BufferPool, ProducerBatch, RecordFuture
from aioproducer.record import SendManyResult


def _batches(loop: asyncio.AbstractEventLoop, pool: BufferPool, n: int,
             per_batch: int) -> tuple[list[RecordFuture], list[ProducerBatch]]:
    futures: list[RecordFuture] = []
    batches: list[ProducerBatch] = []
    for _ in range(n // per_batch):
        block = pool.try_allocate(1024)
        assert block is not None
        batch = ProducerBatch(("t", 0), block, loop.create_future(), 0.0)
        for i in range(per_batch):
            batch.builder.append(0, None, b"v", None)
            futures.append(RecordFuture(batch, i, 0, -1, 1))
        batches.append(batch)
    return futures, batches


def _complete(pool: BufferPool, batches: list[ProducerBatch]) -> None:
    """What the accumulator does when a batch is acknowledged."""
    for b in batches:
        b.base_offset, b.log_append_time, b.error = 0, -1, None
        block = b.block
        b.block = None
        pool.release(block)
        b.builder.detach()
        b.result.set_result(None)
        b.settled = True
        b.wake_waiters()


async def measure(n: int, per_batch: int, reps: int = 5) -> dict[str, float]:
    loop = asyncio.get_running_loop()
    pool = BufferPool(max(n // per_batch, 1) * 1024 * 2, 1024)
    out: dict[str, float] = {}
    ways: dict[str, Any] = {
        "gather": lambda futures: asyncio.gather(*futures),
        "SendManyResult.of": SendManyResult.of,
    }
    best = float("inf")
    for _ in range(reps):  # the completion alone, the same for both ways
        futures, batches = _batches(loop, pool, n, per_batch)
        started = time.process_time()
        _complete(pool, batches)
        best = min(best, (time.process_time() - started) / n * 1e6)
    out["completion"] = best
    for name, wait in ways.items():
        best = float("inf")
        for _ in range(reps):
            futures, batches = _batches(loop, pool, n, per_batch)
            loop.call_soon(_complete, pool, batches)
            started = time.process_time()
            await wait(futures)
            best = min(best, (time.process_time() - started) / n * 1e6)
        out[name] = best
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.studies.await_many",
                                 description=__doc__)
    ap.add_argument("--records", type=int, default=10_000)
    ap.add_argument("--per-batch", type=int, nargs="*", default=[1, 10, 100])
    args = ap.parse_args(argv)
    print("CPU per record (us) of the await, the batches' completion subtracted")
    print(f"{'records/batch':>14} {'completion':>11} {'gather':>8} {'of()':>8} {'ratio':>6}")
    for per_batch in args.per_batch:
        r = asyncio.run(measure(args.records, per_batch))
        c = r["completion"]
        g, o = r["gather"] - c, r["SendManyResult.of"] - c
        print(f"{per_batch:>14} {c:>11.3f} {g:>8.3f} {o:>8.3f} {g / max(o, 1e-9):>6.1f}")


if __name__ == "__main__":
    main()
