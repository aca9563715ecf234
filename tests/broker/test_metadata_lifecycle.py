"""The metadata lifecycle against a real broker (issue #17 part A).

- A send to a missing topic: a handful of Metadata requests, backing off, and none
  once the topic expired (``metadata_max_idle_ms``), counted through the fault proxy.
- Auto-creation on a broker with ``auto.create.topics.enable=true``.
- Illegal topic names fail at once.
- A topic deleted and re-created mid-stream (Produce v13 names topics by id): the
  records sent after the re-creation are delivered within seconds.
- Partitions added: an explicit partition beyond the cached count waits for metadata;
  keyed records move to murmur2(key) % n for the new n at once on both send paths.

Read back with confluent-kafka (an independent client).
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions
from support.kafka_util import consume_all, create_topic, delete_topic, wait_topic_ready

from aioproducer import InvalidTopicError, Producer, UnknownTopicError
from aioproducer._native import murmur2_partition
from aioproducer.devbroker import LocalKafka
from aioproducer.testing.faultproxy import ProxyCluster

pytestmark = pytest.mark.asyncio

METADATA = 3


async def test_missing_topic_metadata_requests_back_off_and_stop(kafka_bootstrap: str) -> None:
    window = 12.0
    async with ProxyCluster.start(kafka_bootstrap) as cluster, \
            Producer(bootstrap_servers=cluster.bootstrap, max_block_ms=1000,
                     metadata_max_idle_ms=3000) as producer:
        before = cluster.requests(METADATA)
        t0 = time.monotonic()
        with pytest.raises(UnknownTopicError):
            await producer.send(f"missing-{uuid.uuid4().hex[:8]}", b"v")
        samples: list[tuple[float, int]] = []
        while time.monotonic() - t0 < window:
            await asyncio.sleep(0.25)
            samples.append((time.monotonic() - t0, cluster.requests(METADATA) - before))
        total = samples[-1][1]
        print(f"{total} Metadata requests in {window:.0f} s: {samples[::4]}")
        # Java: a handful, backing off to retry_backoff_max_ms; before: one every
        # 100 ms for ever (~120 in 12 s).
        assert 4 <= total <= 15
        # The topic expired ~3 s after the failed send (~1 s): none after ~5.5 s.
        late = [n for t, n in samples if t >= 6.0]
        assert late[0] == late[-1] == total, samples
        assert producer._metadata.topics == {}


@pytest.fixture(scope="module")
def auto_create_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafka]:
    cluster = LocalKafka(tmp_path_factory.mktemp("kafka-autocreate"), nodes=1,
                         extra_config={"auto.create.topics.enable": "true",
                                       "num.partitions": "3"})
    try:
        cluster.start(timeout=120)
        yield cluster
    finally:
        cluster.stop(timeout=30)


async def test_first_send_creates_the_topic_where_the_broker_allows(
        auto_create_kafka: LocalKafka) -> None:
    bootstrap = auto_create_kafka.bootstrap
    topic = f"auto-{uuid.uuid4().hex[:10]}"
    async with Producer(bootstrap_servers=bootstrap, max_block_ms=20000) as producer:
        t0 = time.monotonic()
        meta = await producer.send_and_wait(topic, b"first", key=b"k")
        took = time.monotonic() - t0
        assert await producer.partitions_for(topic) == [0, 1, 2]
    print(f"auto-created {topic} and delivered in {took:.2f} s")
    got = await asyncio.to_thread(consume_all, bootstrap, topic, 1, 30.0)
    assert [(m.partition, m.offset, m.key, m.value) for m in got] == [
        (meta.partition, meta.offset, b"k", b"first")]


@pytest.mark.parametrize("name", ["bad name", "a" * 250, "..", "x/y", "ünï"])
async def test_illegal_topic_names_fail_at_once(kafka_bootstrap: str, name: str) -> None:
    async with Producer(bootstrap_servers=kafka_bootstrap, max_block_ms=30000) as producer:
        t0 = time.monotonic()
        with pytest.raises(InvalidTopicError):
            await producer.send(name, b"v")
        assert time.monotonic() - t0 < 1.0
        assert name not in producer._metadata.topics


async def test_recreated_topic_gets_records_within_seconds(kafka_bootstrap: str) -> None:
    seed = random.randrange(2**32)
    print(f"seed={seed}")
    rng = random.Random(seed)
    topic = create_topic(kafka_bootstrap, f"recreate-{uuid.uuid4().hex[:10]}", partitions=2)
    sent: list[tuple[int, float, Any]] = []  # (index, sent at, future)
    stop = asyncio.Event()
    try:
        async with Producer(bootstrap_servers=kafka_bootstrap, linger_ms=5,
                            delivery_timeout_ms=60000) as producer:

            async def pump() -> None:
                i = 0
                while not stop.is_set() and i < 3000:
                    fut = await producer.send(topic, b"v-%d" % i, key=b"k-%d" % rng.randrange(50))
                    sent.append((i, time.monotonic(), fut))
                    i += 1
                    await asyncio.sleep(0.01)

            task = asyncio.ensure_future(pump())
            await asyncio.sleep(1.0)
            assert producer._metadata.cluster.topics[topic].topic_id is not None
            old_id = producer._metadata.cluster.topics[topic].topic_id
            await asyncio.to_thread(delete_topic, kafka_bootstrap, topic)
            await asyncio.sleep(1.0)
            await asyncio.to_thread(create_topic, kafka_bootstrap, topic, 2)
            recreated_at = time.monotonic()
            first_after = len(sent)
            await asyncio.sleep(4.0)
            stop.set()
            await asyncio.wait_for(task, 70)
            after = [(i, at, fut) for i, at, fut in sent[first_after:]]
            assert len(after) > 100
            metas = []
            for i, _at, fut in after:
                meta = await asyncio.wait_for(fut, 15.0)
                metas.append((i, meta))
            latest = time.monotonic() - recreated_at
            new_id = producer._metadata.cluster.topics[topic].topic_id
        assert new_id is not None and new_id != old_id
        print(f"{len(after)} records sent after the re-creation, all acknowledged "
              f"{latest:.1f} s after it")
        # Records sent after the re-creation went to the new topic within seconds.
        assert latest < 15.0
        # The records sent before the re-creation went to the deleted topic (or failed):
        # read the new topic to its end, expecting at least the acknowledged ones (not
        # len(sent), which it never holds: that waited out the whole timeout).
        got = await asyncio.to_thread(consume_all, kafka_bootstrap, topic, len(metas), 60.0)
        by_value = {m.value: m for m in got}
        for i, meta in metas:
            m = by_value[b"v-%d" % i]
            assert (m.partition, m.offset) == (meta.partition, meta.offset)
            assert m.key is not None and m.key.startswith(b"k-")
            assert m.partition == murmur2_partition(m.key, 2)
    finally:
        stop.set()
        await asyncio.to_thread(delete_topic, kafka_bootstrap, topic)


async def test_new_partitions_explicit_and_keyed(kafka_bootstrap: str,
                                                 topic_factory: Any) -> None:
    topic = topic_factory(partitions=2)
    keys = [b"key-%d" % i for i in range(64)]
    records: list[tuple[bytes, bytes, int, Any]] = []  # key, value, n in force, future
    async with Producer(bootstrap_servers=kafka_bootstrap, linger_ms=2) as producer:
        md = producer._metadata

        async def keyed(rounds: int) -> None:
            for r in range(rounds):
                for j, key in enumerate(keys):
                    n = md.cluster.partition_count(topic)
                    value = b"%d-%d-%d" % (len(records), r, j)
                    assert n is not None
                    if j % 3 == 0:  # headers: the Python path
                        fut = await producer.send(topic, value, key=key, headers=[("h", b"1")])
                    else:  # the native path
                        fut = await producer.send(topic, value, key=key)
                    records.append((key, value, n, fut))
                await asyncio.sleep(0.005)

        assert await producer.partitions_for(topic) == [0, 1]
        await keyed(3)
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
        futures = admin.create_partitions([NewPartitions(topic, 5)])
        await asyncio.to_thread(futures[topic].result, 30)
        await asyncio.to_thread(wait_topic_ready, kafka_bootstrap, topic, 5)
        # Keyed sends go on while the producer learns of the new count.
        background = asyncio.ensure_future(keyed(20))
        t0 = time.monotonic()
        meta = await producer.send_and_wait(topic, b"explicit", partition=4)
        waited = time.monotonic() - t0
        await background
        await keyed(2)
        metas = [await fut for *_, fut in records]
    assert meta.partition == 4
    print(f"partition 4 found after {waited:.2f} s")
    counts = [n for _, _, n, _ in records]
    assert counts[0] == 2 and counts[-1] == 5
    switch = counts.index(5)
    assert set(counts[:switch]) == {2} and set(counts[switch:]) == {5}  # once
    for (key, _value, n, _), m in zip(records, metas, strict=True):
        assert m.partition == murmur2_partition(key, n), (key, n, m.partition)
    moved = sum(1 for key in keys if murmur2_partition(key, 2) != murmur2_partition(key, 5))
    assert moved > 10  # the test would notice a path keeping the old count
    got = await asyncio.to_thread(consume_all, kafka_bootstrap, topic, len(records) + 1, 60.0)
    read = {m.value: (m.partition, m.offset, m.key) for m in got}
    assert read[b"explicit"][:2] == (4, meta.offset)
    for (key, value, _n, _), m in zip(records, metas, strict=True):
        assert read[value] == (m.partition, m.offset, key)
