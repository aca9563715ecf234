"""Micro-benchmark of the native path of ``await producer.send()``, without a broker.

Drives ``aioproducer._native.Appender.send`` (what a Producer's ``send`` is: a native
method returning a PendingSend, whose await takes the hot path: partition choice,
murmur2 for keyed records, the append, the RecordFuture) from a coroutine on a running
asyncio loop. A batch that takes no more records is replaced by a fresh one (in a pool
block released at once): the per-batch Python work of the producer is not
measured here, only the per-record native path. Prints ns/record; instructions per
record come from ``SCRIPT=bench/profiling/appender_micro.py
bench/profiling/callgrind_native.sh``.

    python bench/profiling/appender_micro.py --records 1000000             # keyless, 1 partition
    python bench/profiling/appender_micro.py --key-size 16 --partitions 8  # the keyed scenario
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

KEY_POOL = 1024


async def run_once(n: int, value: bytes, keys: list[bytes] | None, partitions: int,
                   batch_size: int) -> int:
    from aioproducer._native import Appender, BufferPool, ProducerBatch

    loop = asyncio.get_running_loop()
    pool = BufferPool(max(64 << 20, batch_size * (partitions + 2)), batch_size)
    appender = Appender(True, False, -1, 0)  # hash keys; sticky never moves (limit 0)
    appender.bind(loop)
    topic = "t"
    route = appender.set_route(topic, partitions)
    route.sticky = 0

    def fresh(p: int) -> None:
        old = route.tails[p]
        if old is not None:
            old.full = True
            pool.release(old.block)
        block = pool.try_allocate(batch_size)
        assert block is not None
        route.tails[p] = ProducerBatch((topic, p), block, loop.create_future(), 0.0)

    for p in range(partitions):
        fresh(p)
    async def slow(*_args: Any) -> Any:
        return None  # Producer's Python path; here: "open the next batch"

    appender.slow = slow
    appender.hot = True
    send = appender.send  # what Producer.__init__ puts in the instance as its send

    mask = KEY_POOL - 1
    key = None
    held: list[Any] = []
    clock = time.perf_counter_ns
    t0 = clock()
    for i in range(n):
        if keys is not None:
            key = keys[i & mask]
        fut = await send(topic, value, key)
        if fut is None:  # the partition's batch is full: open the next one
            for p in range(partitions):
                if route.tails[p].full:
                    fresh(p)
            fut = await send(topic, value, key)
            assert fut is not None
        held.append(fut)
        if len(held) >= 10_000:
            held = []
    elapsed = clock() - t0
    for p in range(partitions):
        route.tails[p].full = True
        pool.release(route.tails[p].block)
    return elapsed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python bench/profiling/appender_micro.py",
                                description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--value-size", type=int, default=100)
    p.add_argument("--key-size", type=int, default=0, help="0: no key")
    p.add_argument("--partitions", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=262144)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--no-warmup", action="store_true")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.records <= 0 or args.repeat <= 0 or args.partitions <= 0:
        p.error("--records, --repeat and --partitions must be positive")
    import random

    value = bytes(random.Random(20261122).randrange(65, 91) for _ in range(args.value_size))
    keys = None
    if args.key_size > 0:
        rng = random.Random(16)
        keys = [rng.randbytes(args.key_size) for _ in range(KEY_POOL)]

    async def go() -> list[float]:
        if not args.no_warmup:
            await run_once(min(args.records, 100_000), value, keys, args.partitions,
                           args.batch_size)
        return [await run_once(args.records, value, keys, args.partitions, args.batch_size)
                / args.records for _ in range(args.repeat)]

    per = asyncio.run(go())
    out = {"records": args.records, "key_size": args.key_size, "partitions": args.partitions,
           "ns_per_record_best": round(min(per), 1),
           "ns_per_record_median": round(statistics.median(per), 1)}
    print(json.dumps(out) if args.json else
          f"{args.records:,} records, key {args.key_size} B, {args.partitions} partition(s): "
          f"best {out['ns_per_record_best']} ns/record, median {out['ns_per_record_median']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
