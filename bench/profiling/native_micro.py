"""Micro-benchmark of the native hot path, without asyncio or a broker.

Per record: ``BatchBuilder.append``; per full batch: ``close()`` (header + CRC32C),
``BufferPool.release`` and ``try_allocate`` of the next block. Inputs are made before
the clock starts (one value, a pool of keys, a fixed timestamp). Prints ns/record.

    python bench/profiling/native_micro.py --records 1000000 --value-size 100
    python bench/profiling/native_micro.py --key-size 16 --json

``bench/profiling/callgrind_native.sh`` runs it under callgrind for instructions per record.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `bench` and `aioproducer` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

KEY_POOL = 1024
TIMESTAMP_MS = 1_763_800_000_000


def run_once(n: int, value: bytes, keys: list[bytes] | None, batch_size: int,
             total_memory: int) -> tuple[int, int]:
    """Encode ``n`` records; returns (elapsed ns, batches closed)."""
    from aioproducer._native import BatchBuilder, BufferPool

    pool = BufferPool(total_memory, batch_size)
    block = pool.try_allocate(batch_size)
    if block is None:
        raise RuntimeError("the pool gave no block")
    builder = BatchBuilder(block)
    append = builder.append
    ts = TIMESTAMP_MS
    batches = 0
    mask = KEY_POOL - 1
    key = None
    clock = time.perf_counter_ns
    t0 = clock()
    for i in range(n):
        if keys is not None:
            key = keys[i & mask]
        if append(ts, key, value, None) < 0:
            builder.close()
            batches += 1
            pool.release(block)
            block = pool.try_allocate(batch_size)
            if block is None:
                raise RuntimeError("the pool gave no block")
            builder = BatchBuilder(block)
            append = builder.append
            if append(ts, key, value, None) < 0:
                raise RuntimeError("a record does not fit in an empty batch")
    builder.close()
    batches += 1
    pool.release(block)
    return clock() - t0, batches


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python bench/profiling/native_micro.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--value-size", type=int, default=100)
    p.add_argument("--key-size", type=int, default=0, help="0: no key")
    p.add_argument("--batch-size", type=int, default=16384)
    p.add_argument("--buffer-memory", type=int, default=32 << 20)
    p.add_argument("--repeat", type=int, default=5, help="timed runs; the best is reported")
    p.add_argument("--no-warmup", action="store_true", help="skip the untimed warm-up run")
    p.add_argument("--json", action="store_true", help="print one JSON line instead")
    args = p.parse_args(argv)
    if args.records <= 0 or args.repeat <= 0:
        p.error("--records and --repeat must be positive")

    try:
        import aioproducer._native as native
    except ImportError as e:
        print(f"native_micro: {e}", file=sys.stderr)
        return 2
    value = bytes(65 + (i % 26) for i in range(args.value_size))
    keys = None
    if args.key_size > 0:
        keys = [(i.to_bytes(4, "big") * (args.key_size // 4 + 1))[:args.key_size]
                for i in range(KEY_POOL)]
    if not args.no_warmup:
        run_once(min(args.records, 100_000), value, keys, args.batch_size, args.buffer_memory)
    timings: list[float] = []
    batches = 0
    for _ in range(args.repeat):
        ns, batches = run_once(args.records, value, keys, args.batch_size, args.buffer_memory)
        timings.append(ns / args.records)
    best, median = min(timings), statistics.median(timings)
    result: dict[str, Any] = {
        "records": args.records, "value_size": args.value_size, "key_size": args.key_size,
        "batch_size": args.batch_size, "batches": batches,
        "records_per_batch": args.records / batches,
        "ns_per_record_best": best, "ns_per_record_median": median,
        "runs": args.repeat, "debug_build": bool(getattr(native, "DEBUG_BUILD", False)),
    }
    if args.json:
        print(json.dumps(result))
    else:
        key = f"{args.key_size} B key" if args.key_size else "no key"
        print(f"native append+close: {args.records:,} records ({args.value_size} B value, "
              f"{key}) in {batches:,} batches of {args.batch_size} B: "
              f"{best:.1f} ns/record best, {median:.1f} median of {args.repeat}"
              + (" [DEBUG BUILD]" if result["debug_build"] else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
