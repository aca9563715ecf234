"""End to end against the real Apache Kafka broker, read back by confluent-kafka."""

from __future__ import annotations

import itertools
import random
from collections import defaultdict
from typing import Any

import pytest
from support.delivery_util import gather_chunked
from support.kafka_util import consume_all, java_partitions, partition_offsets

from aioproducer import Producer

pytestmark = pytest.mark.asyncio


@pytest.mark.slow
async def test_round_trip_100k_every_field(kafka_bootstrap: str, topic_factory: Any) -> None:
    partitions = 6
    topic = topic_factory(partitions=partitions)
    probe = topic_factory(partitions=partitions)
    rng = random.Random(20261122)
    distinct_keys = [rng.randbytes(rng.randint(1, 40)) for _ in range(3000)]
    n = 100_000
    sent: list[dict[str, Any]] = []
    async with Producer(bootstrap_servers=kafka_bootstrap, linger_ms=10) as producer:
        futs = []
        for i in range(n):
            kind = i % 10
            key = None if kind in (0, 1) else rng.choice(distinct_keys)
            value: bytes | None = None if kind == 2 else rng.randbytes(rng.randint(0, 300))
            headers = None
            if kind in (3, 4):
                headers = [("h", rng.randbytes(8)), ("h", b""), ("trace-id", None),
                           (f"k{i}", str(i).encode())]
            ts = 1_600_000_000_000 + i if kind in (4, 5) else None
            part = rng.randrange(partitions) if kind == 6 else None
            fut = await producer.send(topic, value, key=key, partition=part,
                                      timestamp_ms=ts, headers=headers)
            sent.append({"key": key, "value": value, "headers": headers or [], "ts": ts,
                         "explicit": part})
            futs.append(fut)
        await producer.flush()
        assert all(f.done() for f in futs), "flush() returned before every ack"
        metas = await gather_chunked(futs)

    got = consume_all(kafka_bootstrap, topic, n, timeout=120)
    assert len(got) == n
    by_pos = {(m.partition, m.offset): m for m in got}
    assert len(by_pos) == n

    # Offsets: per partition 0..n-1, no gaps, in send order.
    per_partition: dict[int, list[int]] = defaultdict(list)
    for meta in metas:
        per_partition[meta.partition].append(meta.offset)
    for p, offsets in per_partition.items():
        assert offsets == list(range(len(offsets))), f"partition {p} offsets not 0..n-1"
    assert sum(len(v) for v in per_partition.values()) == n

    java = java_partitions(kafka_bootstrap, probe, distinct_keys)
    for rec, meta in zip(sent, metas, strict=True):
        m = by_pos[(meta.partition, meta.offset)]
        assert m.topic == topic == meta.topic
        assert m.key == rec["key"]
        assert m.value == rec["value"]
        assert m.headers == rec["headers"]
        if rec["ts"] is not None:
            assert m.timestamp == rec["ts"] == meta.timestamp
        else:
            assert m.timestamp == meta.timestamp
        assert m.timestamp_type == 1  # CreateTime
        assert meta.serialized_key_size == (-1 if rec["key"] is None else len(rec["key"]))
        assert meta.serialized_value_size == (-1 if rec["value"] is None else len(rec["value"]))
        if rec["explicit"] is not None:
            assert meta.partition == rec["explicit"]
        elif rec["key"] is not None:
            assert meta.partition == java[rec["key"]], "key not where Java would put it"


@pytest.mark.parametrize("acks", [0, 1, -1, "all"])
async def test_every_acks_level_delivers_everything(kafka_bootstrap: str, topic_factory: Any,
                                                    acks: Any) -> None:
    topic = topic_factory(partitions=3)
    n = 20_000
    values = [i.to_bytes(4, "big") * 10 for i in range(n)]
    if acks == 0:
        # acks=0 cannot retry: make sure every partition's leader is serving first
        # (a topic just created may answer NOT_LEADER_OR_FOLLOWER for a moment).
        async with Producer(bootstrap_servers=kafka_bootstrap, acks=1) as warm:
            for p in range(3):
                await warm.send_and_wait(topic, b"warm-up", partition=p)
    async with Producer(bootstrap_servers=kafka_bootstrap, acks=acks) as producer:
        futs = [await producer.send(topic, v, key=v[:4]) for v in values]
        await producer.flush()
        assert all(f.done() for f in futs)
        metas = await gather_chunked(futs)
    if acks == 0:
        assert all(m.offset == -1 for m in metas)
    else:
        assert sorted((m.partition, m.offset) for m in metas) == sorted(
            {(m.partition, m.offset) for m in metas})
    warm_ups = 3 if acks == 0 else 0
    got = consume_all(kafka_bootstrap, topic, n + warm_ups)
    got_values = [m.value for m in got if m.value != b"warm-up"]
    assert sorted(got_values) == sorted(values)  # type: ignore[type-var]
    watermarks = partition_offsets(kafka_bootstrap, topic)
    assert sum(hi - lo for lo, hi in watermarks.values()) == n + warm_ups


async def test_sticky_partitioning_fills_batches(kafka_bootstrap: str,
                                                 topic_factory: Any) -> None:
    topic = topic_factory(partitions=4)
    async with Producer(bootstrap_servers=kafka_bootstrap, linger_ms=50,
                        batch_size=4096) as producer:
        futs = [await producer.send(topic, b"x" * 100) for _ in range(2000)]
        metas = await gather_chunked(futs)
    # Keyless records stick to a partition for a whole batch: long runs, not spraying.
    runs = 1 + sum(1 for a, b in itertools.pairwise(metas)
                   if a.partition != b.partition)
    assert runs <= 2000 * 100 // 3000, f"{runs} partition switches for 2000 records"
    assert len({m.partition for m in metas}) > 1, "sticky partition never moved on"
