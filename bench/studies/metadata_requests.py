"""Metadata requests after one send to a missing topic (issue #17's "298 in 30 s").

``python -m bench.studies.metadata_requests --seconds 60`` (from the repository root) starts a
one-node local broker (:class:`aioproducer.devbroker.LocalKafka`, in a temporary
directory, stopped at the end; ``auto.create.topics.enable=false``) unless
``--bootstrap`` names one, puts the fault proxy
(``aioproducer.testing.faultproxy``) in front of it, and runs one producer
(``max_block_ms=1000``): one ``send()`` to a topic that does not exist (it raises
``UnknownTopicError`` after ``max_block_ms``), then nothing for ``--seconds``. It
prints the Metadata requests the proxy saw, in all and per 5 s, and when the last
one was. ``--idle-ms`` sets ``metadata_max_idle_ms`` (when this version has it).

The Java producer: a handful of requests backing off to ``retry.backoff.max.ms``,
and none once the topic has expired (``metadata.max.idle.ms``, 5 min by default).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import sys
import tempfile
import time
import uuid

from aioproducer import Producer, ProducerConfig, UnknownTopicError
from aioproducer.devbroker import LocalKafka

METADATA = 3


async def measure(bootstrap: str, seconds: float, idle_ms: int | None) -> dict[str, object]:
    from aioproducer.testing.faultproxy import ProxyCluster

    options: dict[str, object] = {"max_block_ms": 1000}
    fields = {f.name for f in dataclasses.fields(ProducerConfig)}
    if idle_ms is not None and "metadata_max_idle_ms" in fields:
        options["metadata_max_idle_ms"] = idle_ms
    async with ProxyCluster.start(bootstrap) as cluster, \
            Producer(bootstrap_servers=cluster.bootstrap, **options) as producer:
        base = cluster.requests(METADATA)
        t0 = time.monotonic()
        with contextlib.suppress(UnknownTopicError):
            await producer.send(f"missing-{uuid.uuid4().hex[:8]}", b"v")
        per_bucket: list[int] = []
        last_at = 0.0
        seen = 0
        while (elapsed := time.monotonic() - t0) < seconds:
            await asyncio.sleep(0.05)
            n = cluster.requests(METADATA) - base
            if n != seen:
                seen, last_at = n, elapsed
            bucket = int(elapsed // 5)
            while len(per_bucket) <= bucket:
                per_bucket.append(0)
            per_bucket[bucket] = n - sum(per_bucket[:bucket])
        return {"requests": seen, "seconds": seconds, "last_request_at_s": round(last_at, 2),
                "per_5s": per_bucket, "options": options}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", help="an existing broker (default: start one)")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--idle-ms", type=int, default=None,
                    help="metadata_max_idle_ms (default: the producer's, 300000)")
    args = ap.parse_args(argv)
    if args.bootstrap:
        result = asyncio.run(measure(args.bootstrap, args.seconds, args.idle_ms))
    else:
        with tempfile.TemporaryDirectory(prefix="aioproducer-md-") as tmp:
            broker = LocalKafka(tmp, nodes=1)
            broker.start(timeout=120)
            try:
                result = asyncio.run(measure(broker.bootstrap, args.seconds, args.idle_ms))
            finally:
                broker.stop(timeout=30)
    print(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
