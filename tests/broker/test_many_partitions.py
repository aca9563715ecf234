"""Many partitions and little memory, on the real broker: a thousand partitions that
get a record or two per batch each do not fill ``buffer_memory`` with ``batch_size``
blocks (their batches shrink under memory pressure), and every record is written once,
in order per key (read back with confluent-kafka)."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
from support.kafka_util import consume_all

from aioproducer import Producer
from aioproducer._native import murmur2

pytestmark = pytest.mark.asyncio

PARTITIONS = 1000
RECORDS = 20_000
KEYS = 4096
SEED = 20261127


async def test_a_thousand_sparse_partitions_share_little_memory(
        kafka_bootstrap: str, kafka_topic_factory: Any) -> None:
    topic = kafka_topic_factory(PARTITIONS)
    rng = random.Random(SEED)
    print(f"seed {SEED}")
    keys = [b"k%05d" % rng.randrange(1 << 20) for _ in range(KEYS)]
    # 2 MiB: 128 blocks of batch_size for 1,000 partitions.
    async with Producer(bootstrap_servers=kafka_bootstrap, buffer_memory=2 << 20,
                        max_block_ms=60_000) as p:
        futures = []
        sent: dict[bytes, list[int]] = {}
        for i in range(RECORDS):
            key = keys[rng.randrange(KEYS)]
            sent.setdefault(key, []).append(i)
            futures.append(await p.send(topic, b"%d" % i, key=key))
        await p.flush()
        metas = [f.result() for f in futures]
        acc: Any = p._accumulator
        small = [t for t in acc.batch_targets.values() if t < p.config.batch_size]
        assert len(small) >= 100, (len(small), sorted(set(acc.batch_targets.values())))
    # Each key to murmur2(key) % n, as Java's partitioner puts it.
    for key, meta in zip((keys_of(sent, RECORDS)), metas, strict=True):
        assert meta.partition == (murmur2(key) & 0x7FFFFFFF) % PARTITIONS

    got = consume_all(kafka_bootstrap, topic, RECORDS, timeout=120)
    assert len(got) == RECORDS
    by_key: dict[bytes, list[int]] = {}
    for r in sorted(got, key=lambda r: (r.partition, r.offset)):
        assert r.key is not None and r.value is not None
        by_key.setdefault(r.key, []).append(int(r.value))
    assert by_key == sent  # every record once, each key's in the order sent


def keys_of(sent: dict[bytes, list[int]], n: int) -> list[bytes]:
    """The key of record i, for i in 0..n-1."""
    out: list[bytes] = [b""] * n
    for key, indexes in sent.items():
        for i in indexes:
            out[i] = key
    return out


async def test_a_new_lingering_batch_does_not_wake_the_sender(
        kafka_bootstrap: str, kafka_topic_factory: Any) -> None:
    """A send that opens a batch which will linger, while the Sender's timer fires
    within the linger anyway, makes no Sender pass: with hundreds of partitions each
    pass walks them all, and a service's sends come one per turn of the loop."""
    topic = kafka_topic_factory(200)
    async with Producer(bootstrap_servers=kafka_bootstrap, linger_ms=200) as p:
        await p.send_and_wait(topic, b"warm", partition=0)
        sender: Any = p._sender
        real = sender.run_once
        passes = 0

        def counted(now: float, want_delay: bool = True) -> float:
            nonlocal passes
            passes += 1
            return real(now, want_delay)

        sender.run_once = counted
        futures = []
        for i in range(200):
            futures.append(await p.send(topic, b"%d" % i, partition=i))
            await asyncio.sleep(0)  # the Sender may run between two sends
        sends_done = passes
        await p.flush()
        assert [f.result().partition for f in futures] == list(range(200))
    # The first new batch wakes it (its timer was the idle one, 1 s away); after that
    # its timer is due within the linger, and the 199 others leave it asleep.
    assert sends_done <= 3, sends_done
