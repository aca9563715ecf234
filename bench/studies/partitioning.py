"""Keyless records and a slow broker: where do they go, and how fast (KIP-794).

One broker of a three-node cluster answers Produce requests late (a fault proxy in
front of each node adds ``--delay-ms`` to every Produce response of the slowed one);
a producer sends ``--records`` keyless records of ``--record-size`` bytes, one
``send()`` each, then flushes. Printed: the records per partition and per leader, the
slowed leader's share, and the throughput (records/s, send to last acknowledgement).

With the uniform sticky partitioner (byte counting) and adaptive partitioning, the
slow broker's partitions, whose queues are longer, are chosen less often; the old
KIP-480 rule (move on when a new batch opens) gave them more.

    .venv/bin/python -m bench.studies.partitioning                   # starts a 3-node cluster
    .venv/bin/python -m bench.studies.partitioning --bootstrap 127.0.0.1:9092,... --no-adaptive
    PYTHONPATH=/other/checkout .venv/bin/python -m bench.studies.partitioning ...  # another build

The measuring function, :func:`run_slow_broker`, is shared with
``tests/broker/test_partitioning.py``; it needs a
:class:`aioproducer.testing.faultproxy.ProxyCluster` (passed in, or imported by the
command line).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import random
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from aioproducer import Producer, ProducerConfig

PRODUCE = 0


class ProcessProxies:
    """A ``ProxyCluster`` (aioproducer.testing.faultproxy) in a child process of its own
    (``python -m bench.studies.partitioning --serve-proxies BOOTSTRAP``): a producer sending in
    a tight loop holds its event loop and the GIL, and proxies sharing either would
    make every broker look slow. Commands go over the child's stdin."""

    def __init__(self, bootstrap: str) -> None:
        self._bootstrap = bootstrap
        self._proc: asyncio.subprocess.Process | None = None
        self._bootstrap_via = ""

    async def __aenter__(self) -> ProcessProxies:
        repo = Path(__file__).resolve().parents[2]
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.studies.partitioning", "--serve-proxies", self._bootstrap,
            cwd=str(repo), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        assert self._proc.stdout is not None
        line = await asyncio.wait_for(self._proc.stdout.readline(), 30)
        if not line:
            raise RuntimeError("the proxy process did not start")
        self._bootstrap_via = json.loads(line)["bootstrap"]
        return self

    @property
    def bootstrap(self) -> str:
        return self._bootstrap_via

    async def delay(self, node: int, delay_ms: float) -> None:
        """Delay the Produce responses of ``node`` by ``delay_ms`` (0: no more)."""
        proc = self._proc
        assert proc is not None and proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(f"delay {node} {delay_ms}\n".encode())
        await proc.stdin.drain()
        await asyncio.wait_for(proc.stdout.readline(), 10)  # "ok"

    async def __aexit__(self, *exc: object) -> None:
        proc = self._proc
        if proc is None:
            return
        assert proc.stdin is not None
        with contextlib.suppress(OSError):
            proc.stdin.write(b"quit\n")
            await proc.stdin.drain()
        try:
            await asyncio.wait_for(proc.wait(), 15)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()


async def _serve_proxies(bootstrap: str) -> int:
    from aioproducer.testing.faultproxy import ProxyCluster

    loop = asyncio.get_running_loop()
    async with ProxyCluster.start(bootstrap) as cluster:
        print(json.dumps({"bootstrap": cluster.bootstrap}), flush=True)
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            words = line.split()
            if not words or words[0] == "quit":
                return 0
            if words[0] == "delay":
                cluster.proxy_for_node(int(words[1])).delay_responses(
                    PRODUCE, float(words[2]) / 1000.0)
            print("ok", flush=True)


@dataclasses.dataclass
class SlowBrokerResult:
    records: int
    seconds: float
    slow_node: int
    per_partition: dict[int, int]
    per_node: dict[int, int]
    leaders: dict[int, int]
    adaptive: bool | None
    """None: the build has no adaptive partitioning (the KIP-480 code)."""

    @property
    def slow_share(self) -> float:
        return self.per_node.get(self.slow_node, 0) / max(1, self.records)

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.update(slow_share=round(self.slow_share, 4), records_per_s=round(self.rate))
        return d


def supports_adaptive() -> bool:
    return any(f.name == "partitioner_adaptive_partitioning_enable"
               for f in dataclasses.fields(ProducerConfig))


async def run_slow_broker(cluster: ProcessProxies, topic: str, *, records: int = 20000,
                          record_size: int = 100, delay_ms: float = 20.0, seed: int = 1,
                          slow_node: int | None = None, adaptive: bool = True,
                          availability_timeout_ms: int = 0, yield_every: int = 0,
                          rate: float = 0.0, timeout_s: float = 120.0,
                          **options: Any) -> SlowBrokerResult:
    """Send ``records`` keyless records through ``cluster`` (fault proxies), with the
    Produce responses of ``slow_node`` (default: the leader of partition 0) delayed
    by ``delay_ms``; returns where they went and how long it took.

    ``yield_every``: let the event loop run other tasks after every so many sends,
    as a service whose sends come from many tasks does (0: a tight loop, which keeps
    the Sender from running except when a new batch opens).
    ``rate``: send at most this many records per second (in steps of 5 ms), as a
    service with a steady load does; 0: as fast as the loop goes. A tight loop outruns
    every broker (the Sender takes one batch per partition per request), so all
    backlogs grow alike and the adaptive weights can hardly tell a slow broker from
    the others; a paced load that the fast brokers keep up with shows the slow one.
    """
    rng = random.Random(seed)
    value = rng.randbytes(record_size)
    opts: dict[str, Any] = {"linger_ms": 5, **options}
    has_adaptive = supports_adaptive()
    if has_adaptive:
        opts["partitioner_adaptive_partitioning_enable"] = adaptive
        opts["partitioner_availability_timeout_ms"] = availability_timeout_ms
    producer = Producer(bootstrap_servers=cluster.bootstrap, **opts)
    seeding = getattr(producer._partitioner, "seed", None)
    if seeding is not None:
        seeding(seed)
    async with producer:
        await producer.partitions_for(topic)
        md = producer._metadata.cluster
        info = md.topics[topic]
        leaders = {p.partition: p.leader for p in info.partitions}
        node = leaders[0] if slow_node is None else slow_node
        await cluster.delay(node, delay_ms)
        try:
            futures = []
            t0 = time.perf_counter()
            async with asyncio.timeout(timeout_s):
                loop = asyncio.get_running_loop()
                start = loop.time()
                step = 0.005
                for i in range(records):
                    futures.append(await producer.send(topic, value))
                    if yield_every and i % yield_every == yield_every - 1:
                        await asyncio.sleep(0)  # as an application with other work would
                    if rate > 0:
                        # Sleep until record i + 1 is due, by whole steps.
                        due = start + (i + 1) / rate
                        if due - loop.time() >= step:
                            await asyncio.sleep(due - loop.time())
                await producer.flush()
                metas = [await f for f in futures]
            elapsed = time.perf_counter() - t0
        finally:
            await cluster.delay(node, 0)
    per_partition = Counter(m.partition for m in metas)
    per_node: Counter[int] = Counter()
    for p, n in per_partition.items():
        per_node[leaders[p]] += n
    return SlowBrokerResult(records, elapsed, node, dict(sorted(per_partition.items())),
                            dict(sorted(per_node.items())), leaders,
                            adaptive if has_adaptive else None)


def _print(res: SlowBrokerResult, label: str) -> None:
    print(f"{label}: {res.records} records in {res.seconds:.3f} s = {res.rate:,.0f} rec/s; "
          f"slow node {res.slow_node} share {res.slow_share:.3f}; per node {res.per_node}; "
          f"per partition {res.per_partition}")


async def _main(args: argparse.Namespace) -> int:
    repo = Path(__file__).resolve().parents[2]
    if str(repo) not in sys.path:
        sys.path.insert(0, str(repo))
    if args.serve_proxies:
        return await _serve_proxies(args.serve_proxies)
    from aioproducer.devbroker import LocalKafka
    from bench.broker import Admin

    local: LocalKafka | None = None
    bootstrap = args.bootstrap
    state = None
    if not bootstrap:
        state = tempfile.TemporaryDirectory(prefix="bench-partitioning-")
        local = LocalKafka(Path(state.name), nodes=3)
        local.start(timeout=180)
        bootstrap = local.bootstrap
    try:
        rows = []
        for rep in range(args.reps):
            topic = f"t-{uuid.uuid4().hex}"
            Admin(bootstrap).create_topic(topic, args.partitions)
            async with ProcessProxies(bootstrap) as cluster:
                res = await run_slow_broker(
                    cluster, topic, records=args.records, record_size=args.record_size,
                    delay_ms=args.delay_ms, seed=args.seed + rep, adaptive=args.adaptive,
                    availability_timeout_ms=args.availability_timeout_ms,
                    yield_every=args.yield_every, rate=args.rate, batch_size=args.batch_size,
                    linger_ms=args.linger_ms,
                    max_in_flight_requests_per_connection=args.max_in_flight)
            label = ("KIP-480 build" if res.adaptive is None
                     else f"KIP-794 adaptive={res.adaptive}")
            _print(res, f"[{rep}] {label}")
            rows.append(res.as_dict())
        rates = sorted(r["records_per_s"] for r in rows)
        shares = sorted(r["slow_share"] for r in rows)
        print(json.dumps({"median_records_per_s": rates[len(rates) // 2],
                          "median_slow_share": shares[len(shares) // 2],
                          "runs": rows}) if args.json else
              f"median: {rates[len(rates) // 2]:,} rec/s, slow share {shares[len(shares) // 2]}")
    finally:
        if local is not None:
            local.stop(timeout=60)
        if state is not None:
            state.cleanup()
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", default="", help="a 3-node cluster (default: start one)")
    ap.add_argument("--records", type=int, default=20000)
    ap.add_argument("--record-size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--delay-ms", type=float, default=20.0)
    ap.add_argument("--batch-size", type=int, default=16384)
    ap.add_argument("--linger-ms", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--adaptive", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--availability-timeout-ms", type=int, default=0)
    ap.add_argument("--yield-every", type=int, default=0,
                    help="yield to the event loop after every N sends (0: never)")
    ap.add_argument("--rate", type=float, default=0.0,
                    help="records per second (default 0: a tight loop)")
    ap.add_argument("--max-in-flight", type=int, default=5,
                    help="max_in_flight_requests_per_connection")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--serve-proxies", default="", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    return asyncio.run(_main(args))


if __name__ == "__main__":
    raise SystemExit(main())
