"""The native ``send()`` opening new batches (``Appender.opener``) on the real broker.

Records that each open a batch (``send_and_wait`` at linger 0 and at the defaults,
records larger than ``batch_size``, keyed records over many partitions, zstd) are
appended by the native path, and confluent-kafka reads every one back field by
field, where the producer's futures said it is. A producer short of memory leaves
the records that must wait to the Python path, and loses none.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
from support.kafka_util import consume_all, java_partitions

from aioproducer import Producer
from aioproducer.record import RecordMetadata

pytestmark = pytest.mark.asyncio

SEED = 20261128


class Counted:
    """Wraps a producer's opener and Python path: how many records the opener took
    and declined, and the (key, partition) of each record the Python path got."""

    def __init__(self, producer: Producer) -> None:
        appender: Any = producer._appender
        self.inner = appender.opener
        assert self.inner is not None, "the hot producer has no opener"
        self.opened = 0
        self.declined = 0
        self.python: list[tuple[Any, Any]] = []
        appender.opener = self
        slow = appender.slow

        def counted_slow(topic: str, value: Any, key: Any, partition: Any,
                         *rest: Any) -> Any:
            self.python.append((key, partition))
            return slow(topic, value, key, partition, *rest)

        appender.slow = counted_slow

    def __call__(self, *args: Any) -> Any:
        batch = self.inner(*args)
        if batch is None:
            self.declined += 1
        else:
            self.opened += 1
        return batch


def _check(got: list[Any], sent: list[tuple[bytes | None, bytes, int | None]],
           metas: list[RecordMetadata], topic: str) -> None:
    by_pos = {(m.partition, m.offset): m for m in got}
    assert len(by_pos) == len(got) == len(sent)
    for (key, value, explicit), meta in zip(sent, metas, strict=True):
        m = by_pos[(meta.partition, meta.offset)]
        assert m.topic == topic == meta.topic
        assert (m.key, m.value, m.headers) == (key, value, [])
        assert m.timestamp == meta.timestamp and m.timestamp_type == 1
        if explicit is not None:
            assert meta.partition == explicit


@pytest.mark.parametrize("linger_ms", [0, 5])
async def test_lone_round_trips_open_their_batches_natively(
        kafka_bootstrap: str, topic_factory: Any, linger_ms: int) -> None:
    """One caller awaiting each record: every record opens a batch, on the native
    path (keyless, keyed where Java puts the key, and explicit partitions)."""
    print(f"seed {SEED}")
    rng = random.Random(SEED)
    topic = topic_factory(partitions=4)
    probe = topic_factory(partitions=4)
    keys = [rng.randbytes(rng.randint(1, 20)) for _ in range(20)]
    sent: list[tuple[bytes | None, bytes, int | None]] = []
    metas: list[RecordMetadata] = []
    async with Producer(bootstrap_servers=kafka_bootstrap, linger_ms=linger_ms) as producer:
        await producer.send_and_wait(topic, b"warm-up", partition=0)
        counted = Counted(producer)
        for i in range(300):
            kind = i % 3
            key = None if kind == 0 else rng.choice(keys)
            part = rng.randrange(4) if kind == 2 else None
            value = rng.randbytes(rng.randint(0, 200))
            metas.append(await asyncio.wait_for(
                producer.send_and_wait(topic, value, key, partition=part), 30))
            sent.append((key, value, part))
    # Every record opened its batch natively, but for the keyless ones whose sticky
    # partition was due to move (KIP-794: its bytes reached batch_size), which the
    # partitioner moves in Python.
    assert counted.declined == 0
    assert counted.opened + len(counted.python) == 300
    assert len(counted.python) <= 3
    assert all(key is None and part is None for key, part in counted.python)
    got = [m for m in consume_all(kafka_bootstrap, topic, 301) if m.value != b"warm-up"]
    _check(got, sent, metas, topic)
    java = java_partitions(kafka_bootstrap, probe, keys)
    for (key, _value, part), meta in zip(sent, metas, strict=True):
        if key is not None and part is None:
            assert meta.partition == java[key]


@pytest.mark.parametrize("compression", ["none", "zstd"])
async def test_records_larger_than_a_batch(kafka_bootstrap: str, topic_factory: Any,
                                           compression: str) -> None:
    """100 KiB records (batch_size 16 KiB) to a topic of one partition: each opens a
    batch of its own size on the native path, with and without compression (the
    uncompressed block outside the pool, paid for by the compressed target). (Over
    more partitions, a keyless record this large makes its sticky partition move,
    which the Python path does.)"""
    topic = topic_factory(partitions=1)
    rng = random.Random(SEED + 1)
    sent: list[tuple[bytes | None, bytes, int | None]] = []
    async with Producer(bootstrap_servers=kafka_bootstrap, linger_ms=0,
                        compression_type=compression,
                        max_request_size=1 << 20) as producer:
        counted = Counted(producer)
        futures = []
        for _ in range(60):
            value = rng.randbytes(100 * 1024)
            futures.append(await producer.send(topic, value))
            sent.append((None, value, None))
        metas = list(await asyncio.wait_for(asyncio.gather(*futures), 60))
    # The first record takes the Python path: it waits for the topic's metadata and
    # makes its route.
    assert counted.opened == 59 and counted.declined == 0
    assert counted.python == [(None, None)]
    _check(consume_all(kafka_bootstrap, topic, 60), sent, metas, topic)


async def test_a_producer_short_of_memory_loses_nothing(kafka_bootstrap: str,
                                                        topic_factory: Any) -> None:
    """buffer_memory of four batches, 3,000 keyed records over 50 partitions: the
    opener declines when no block is free, those records wait for memory on the
    Python path, and every record arrives once, where its future says."""
    topic = topic_factory(partitions=50)
    rng = random.Random(SEED + 2)
    sent: list[tuple[bytes | None, bytes, int | None]] = []
    async with Producer(bootstrap_servers=kafka_bootstrap, linger_ms=2, batch_size=1024,
                        buffer_memory=4096, max_request_size=4096) as producer:
        counted = Counted(producer)
        futures = []
        for i in range(3000):
            key = b"k%d" % rng.randrange(500)
            value = b"%06d" % i + rng.randbytes(rng.randint(0, 100))
            futures.append(await asyncio.wait_for(producer.send(topic, value, key), 30))
            sent.append((key, value, None))
        metas = list(await asyncio.wait_for(asyncio.gather(*futures), 60))
    print(f"opened natively {counted.opened}, declined {counted.declined}")
    assert counted.opened > 0 and counted.declined > 0
    _check(consume_all(kafka_bootstrap, topic, 3000), sent, metas, topic)
