"""``send_many()`` with per-record headers (issue #19 item 3): records/s and CPU/record.

Rows, each against the same broker, one after another, ``--reps`` times interleaved
(medians printed), every run read back (record count per topic):

- ``send_many`` without headers;
- ``send_many`` with ``--headers`` headers per record (~20-byte values);
- ``send_many`` with the same headers as Arrow columns (Spark's headers type);
- a ``send()`` loop with the same headers;
- confluent-kafka's ``produce(headers=...)`` + ``poll(0)`` loop, then ``flush()``.

CPU is the process's CPU time (user + system; the broker is another process); "send
CPU" counts only the calls that append (``send_many`` / ``send`` / ``produce``), "total"
the whole run with the flush. On a shared machine, CPU per record is steadier than
records/s.

    .venv/bin/python -m bench.studies.send_many_headers [--records 300000] [--reps 3]
        [--bootstrap host:port]   # default: a local broker started for the run
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from bench.broker import Admin

VALUE = b"v" * 100
CHUNK = 10_000
SEED_HEADERS = 2


def make_headers(n: int, per_record: int) -> list[list[tuple[str, bytes]]]:
    return [[(f"header-{h}", b"%020d" % (i * 31 + h)) for h in range(per_record)]
            for i in range(n)]


class Result:
    def __init__(self, name: str) -> None:
        self.name = name
        self.rate: list[float] = []
        self.send_cpu: list[float] = []
        self.total_cpu: list[float] = []

    def add(self, n: int, wall: float, send_cpu: float, total_cpu: float) -> None:
        self.rate.append(n / wall)
        self.send_cpu.append(send_cpu / n * 1e6)
        self.total_cpu.append(total_cpu / n * 1e6)


def cpu() -> float:
    return time.process_time()


async def run_send_many(bootstrap: str, topic: str, n: int,
                        headers: list[Any] | None, arrow: bool) -> tuple[float, float, float]:
    from aioproducer import Producer
    values = [VALUE] * CHUNK
    chunks: list[tuple[Any, Any]] = []
    for start in range(0, n, CHUNK):
        hs = None if headers is None else headers[start:start + CHUNK]
        if arrow:
            import pyarrow as pa
            htype = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
            col = pa.array([[{"key": k, "value": v} for k, v in row] for row in hs or []],
                           htype) if hs is not None else None
            chunks.append((pa.array(values, pa.binary()), col))
        else:
            chunks.append((values, hs))
    async with Producer(bootstrap_servers=bootstrap, acks=1, linger_ms=5) as p:
        await p.send_many(topic, [b"warm"])
        await p.flush()
        send = 0.0
        c0, t0 = cpu(), time.perf_counter()
        pending: Any = None
        for vals, hs in chunks:
            c = cpu()
            res = await p.send_many(topic, vals, headers=hs)
            send += cpu() - c
            if pending is not None:
                await pending
            pending = res
        await pending
        await p.flush()
        return time.perf_counter() - t0, send, cpu() - c0


async def run_send_loop(bootstrap: str, topic: str, n: int,
                        headers: list[Any]) -> tuple[float, float, float]:
    from aioproducer import Producer
    async with Producer(bootstrap_servers=bootstrap, acks=1, linger_ms=5) as p:
        await p.send(topic, b"warm")
        await p.flush()
        send = 0.0
        c0, t0 = cpu(), time.perf_counter()
        last: Any = None
        for start in range(0, n, CHUNK):
            c = cpu()
            for i in range(start, min(n, start + CHUNK)):
                last = await p.send(topic, VALUE, headers=headers[i])
            send += cpu() - c
        await last
        await p.flush()
        return time.perf_counter() - t0, send, cpu() - c0


def run_confluent(bootstrap: str, topic: str, n: int,
                  headers: list[Any]) -> tuple[float, float, float]:
    import confluent_kafka
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": 1,
                                  "linger.ms": 5, "enable.idempotence": False})
    p.produce(topic, b"warm")
    p.flush(30)
    produce, poll = p.produce, p.poll
    c0, t0 = cpu(), time.perf_counter()
    for i in range(n):
        while True:
            try:
                produce(topic, VALUE, headers=headers[i])
                break
            except BufferError:
                poll(0.005)
        poll(0)
    send = cpu() - c0
    left = p.flush(60)
    assert left == 0, f"{left} records not delivered"
    return time.perf_counter() - t0, send, cpu() - c0


def count_records(bootstrap: str, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "x-" + uuid.uuid4().hex})
    try:
        lo, hi = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        return int(hi - lo)
    finally:
        c.close()


@contextmanager
def broker(bootstrap: str | None) -> Iterator[str]:
    if bootstrap:
        yield bootstrap
        return
    from aioproducer.devbroker import LocalKafka
    with tempfile.TemporaryDirectory(prefix="send-many-headers-") as state:
        kafka = LocalKafka(state)
        kafka.start()
        try:
            yield kafka.bootstrap
        finally:
            kafka.stop()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--headers", type=int, default=SEED_HEADERS,
                    help="headers per record (~20-byte values)")
    ap.add_argument("--bootstrap")
    args = ap.parse_args(argv)
    n = args.records
    headers = make_headers(n, args.headers)
    rows: list[tuple[Result, Callable[[str, str], tuple[float, float, float]]]] = [
        (Result("send_many, no headers"),
         lambda b, t: asyncio.run(run_send_many(b, t, n, None, False))),
        (Result(f"send_many, {args.headers} headers"),
         lambda b, t: asyncio.run(run_send_many(b, t, n, headers, False))),
        (Result(f"send_many, {args.headers} headers, Arrow columns"),
         lambda b, t: asyncio.run(run_send_many(b, t, n, headers, True))),
        (Result(f"send() loop, {args.headers} headers"),
         lambda b, t: asyncio.run(run_send_loop(b, t, n, headers))),
        (Result(f"confluent-kafka produce(), {args.headers} headers"),
         lambda b, t: run_confluent(b, t, n, headers)),
    ]
    with broker(args.bootstrap) as bootstrap:
        admin = Admin(bootstrap)
        for rep in range(args.reps):
            for result, run in rows:
                topic = f"smh-{uuid.uuid4().hex[:10]}"
                admin.create_topic(topic, 1)
                try:
                    wall, send_cpu, total_cpu = run(bootstrap, topic)
                    got = count_records(bootstrap, topic)
                    assert got == n + 1, f"{result.name}: {got} records in the topic, " \
                        f"expected {n + 1}"
                    result.add(n, wall, send_cpu, total_cpu)
                    print(f"rep {rep + 1} {result.name}: {n / wall:,.0f} rec/s, "
                          f"send CPU {send_cpu / n * 1e6:.2f} us/rec", flush=True)
                finally:
                    admin.delete_topic(topic)
    print(f"\n{n:,} records of {len(VALUE)} B, 1 partition, acks=1, linger_ms=5, "
          f"medians of {args.reps}")
    print("| row | records/s | send CPU us/record | total CPU us/record |")
    print("|---|---:|---:|---:|")
    for result, _ in rows:
        print(f"| {result.name} | {statistics.median(result.rate):,.0f} | "
              f"{statistics.median(result.send_cpu):.3f} | "
              f"{statistics.median(result.total_cpu):.3f} |")


if __name__ == "__main__":
    main()
