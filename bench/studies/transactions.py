"""Small transactions on a transaction.version=1 and a =2 broker (KIP-890).

Each transaction sends ``--records`` records (10 by default) to ``--partitions``
partitions of a fresh topic and commits; measured: the commit_transaction() latency
(p50/p99/max) and whole transactions per second, one producer, one transaction at a
time. Version 2 saves the AddPartitionsToTxn round trip before the first batch of each
partition (and adds an epoch bump to every EndTxn).

    python -m bench.studies.transactions                        # two local brokers, started here
    python -m bench.studies.transactions --bootstrap host:9092  # that broker, at its version
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from typing import Any

from aioproducer import Producer
from bench.broker import Admin


async def run(bootstrap: str, transactions: int, records: int, partitions: int,
              warmup: int) -> dict[str, Any]:
    topic = f"bench-txn-{uuid.uuid4().hex[:10]}"
    Admin(bootstrap).create_topic(topic, partitions)
    value = b"v" * 100
    commits: list[float] = []
    async with Producer(bootstrap_servers=bootstrap, linger_ms=5,
                        transactional_id=f"bench-{uuid.uuid4().hex[:10]}") as producer:
        await producer.init_transactions()
        version = producer.transaction_version
        started = 0.0
        for i in range(warmup + transactions):
            if i == warmup:
                started = time.perf_counter()
            producer.begin_transaction()
            for r in range(records):
                await producer.send(topic, value, partition=r % partitions)
            t0 = time.perf_counter()
            await producer.commit_transaction()
            if i >= warmup:
                commits.append(time.perf_counter() - t0)
        elapsed = time.perf_counter() - started
    commits.sort()
    return {"transaction_version": version, "transactions": transactions,
            "records_per_transaction": records, "partitions": partitions,
            "txn_per_s": transactions / elapsed,
            "commit_p50_ms": 1000 * statistics.median(commits),
            "commit_p99_ms": 1000 * commits[min(len(commits) - 1, int(len(commits) * 0.99))],
            "commit_max_ms": 1000 * commits[-1]}


def _print(result: dict[str, Any]) -> None:
    print(f"transaction.version={result['transaction_version']}: "
          f"{result['txn_per_s']:.1f} transactions/s, commit p50 "
          f"{result['commit_p50_ms']:.2f} ms, p99 {result['commit_p99_ms']:.2f} ms, max "
          f"{result['commit_max_ms']:.2f} ms ({result['transactions']} transactions of "
          f"{result['records_per_transaction']} records over {result['partitions']} "
          "partitions)", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", help="use this broker instead of starting two")
    ap.add_argument("--transactions", type=int, default=500)
    ap.add_argument("--records", type=int, default=10)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=20)
    args = ap.parse_args(argv)
    opts = (args.transactions, args.records, args.partitions, args.warmup)
    if args.bootstrap:
        _print(asyncio.run(run(args.bootstrap, *opts)))
        return 0
    from aioproducer.devbroker import LocalKafka

    for version in (1, 2):
        with tempfile.TemporaryDirectory(prefix=f"bench-tv{version}-") as state:
            cluster = LocalKafka(state, features={"transaction.version": version})
            cluster.start(timeout=180)
            try:
                _print(asyncio.run(run(cluster.bootstrap, *opts)))
            finally:
                cluster.stop(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
