"""The compression thread against compression on the event loop, alternated runs.

    python -m bench.studies.compression_thread --bootstrap 127.0.0.1:9092 [--reps 6]

For each codec (zstd, LZ4), data kind and API, runs aioproducer with
``compression_thread`` on and off, one fresh process and topic per run, alternating,
and reports the medians of: records/s, CPU per record of the event loop's thread
(``time.thread_time``) and of the whole process (the compression thread included).
Every run's topic is checked afterwards (its watermarks hold exactly the records sent,
and records at both ends have the right sizes).

Data kinds, 100-byte values, no keys, one partition, acks=1, the other options at
their defaults:

- ``bench``: the full bench's text-like value, the same for every record (as Java's
  ``ProducerPerformance --payload-file`` is given); batches of it compress to a few
  percent, fast;
- ``letters``: a different value per record, random letters from an alphabet of 11:
  about 2:1 for zstd, slower to compress (about 5 ns per byte on the loop here).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import subprocess
import sys
import time
from typing import Any

CODECS = ("zstd", "lz4")
KINDS = ("bench", "letters")
APIS = ("send", "send_many")


def _values(kind: str, n: int) -> list[bytes]:
    if kind == "bench":
        from bench.common import make_value

        return [make_value(100, compressible=True)] * n
    rng = random.Random(20261128)
    pool = [bytes(rng.choice(b"abcdefghij ") for _ in range(100)) for _ in range(1000)]
    return [pool[i % len(pool)] for i in range(n)]


async def _run(bootstrap: str, topic: str, codec: str, thread: bool, kind: str, api: str,
               records: int) -> dict[str, Any]:
    from aioproducer import Producer

    values = _values(kind, records)
    async with Producer(bootstrap_servers=bootstrap, compression_type=codec,
                        compression_thread=thread, acks=1) as producer:
        await producer.send_and_wait(topic, values[0])  # metadata, connection
        t0, c0, l0 = time.perf_counter(), time.process_time(), time.thread_time()
        if api == "send_many":
            for i in range(0, records, 10_000):
                await producer.send_many(topic, values[i:i + 10_000])
        else:
            for v in values:
                await producer.send(topic, v)
        await producer.flush()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        loop_cpu = time.thread_time() - l0
        offload = producer._accumulator.offload
        return {"records_per_s": records / wall, "loop_us": loop_cpu / records * 1e6,
                "process_us": cpu / records * 1e6,
                "thread_batches": offload.compressed if offload is not None else 0}


def _child(args: argparse.Namespace) -> None:
    out = asyncio.run(_run(args.bootstrap, args.topic, args.codec, args.thread == 1,
                           args.kind, args.api, args.records))
    print(json.dumps(out))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--records", type=int, default=300_000)
    p.add_argument("--reps", type=int, default=6)
    p.add_argument("--codec", action="append", choices=CODECS)
    p.add_argument("--kind", action="append", choices=KINDS)
    p.add_argument("--api", action="append", choices=APIS)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--topic", help=argparse.SUPPRESS)
    p.add_argument("--thread", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        args.codec, args.kind, args.api = args.codec[0], args.kind[0], args.api[0]
        _child(args)
        return
    from bench.broker import Admin, verify_topic

    admin = Admin(args.bootstrap)
    print("| codec | data | API | thread | records/s | loop CPU µs/record | "
          "process CPU µs/record | batches on the thread |")
    print("|---|---|---|---|---:|---:|---:|---:|")
    for codec in args.codec or CODECS:
        for kind in args.kind or KINDS:
            for api in args.api or APIS:
                rows: dict[int, list[dict[str, Any]]] = {1: [], 0: []}
                for rep in range(args.reps):
                    for thread in ((1, 0) if rep % 2 == 0 else (0, 1)):
                        topic = f"ct-{codec}-{kind}-{api}-{thread}-{time.time_ns()}"
                        admin.create_topic(topic, 1)
                        proc = subprocess.run(
                            [sys.executable, "-m", "bench.studies.compression_thread",
                             "--child", "--bootstrap", args.bootstrap, "--topic", topic,
                             "--codec", codec, "--kind", kind, "--api", api,
                             "--thread", str(thread), "--records", str(args.records)],
                            capture_output=True, text=True, timeout=600, check=True)
                        rows[thread].append(json.loads(proc.stdout.strip().splitlines()[-1]))
                        check = verify_topic(args.bootstrap, topic, 1, args.records + 1,
                                             100, 0)
                        if not check.ok:
                            raise SystemExit(f"{topic}: {check}")
                        admin.delete_topic(topic)
                for thread in (1, 0):
                    r = rows[thread]

                    def med(k: str, r: list[dict[str, Any]] = r) -> float:
                        return statistics.median(x[k] for x in r)

                    print(f"| {codec} | {kind} | {api} | {'on' if thread else 'off'} | "
                          f"{med('records_per_s'):,.0f} | {med('loop_us'):.2f} | "
                          f"{med('process_us'):.2f} | {med('thread_batches'):.0f} |",
                          flush=True)


if __name__ == "__main__":
    main()
