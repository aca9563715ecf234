"""Broker compatibility: the producer against every Apache Kafka release of
``KAFKA_VERSIONS`` (3.7, 3.9 and the 4.x the project develops on), each a one-node
KRaft broker fetched from Maven Central and started by the dev broker, for this module.

For each release: a round trip (``send``, ``send_many``, ``send_and_wait``; keys,
headers, timestamps) read back by confluent-kafka field by field; idempotence through
a broker restart (the only node stopped for a few seconds mid-stream: nothing lost,
duplicated or reordered); every codec, read back and checked compressed in the
broker's own log by Kafka's ``DumpLogSegments``; a transaction of the classic protocol
(``transaction.version`` 1: the only one 3.x has; a 4.x broker is formatted with it)
committed and another aborted, read back in both isolation levels.

Slow (three brokers started one after the other): ``make test`` runs it,
``-m "not slow"`` leaves it out.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from support.delivery_util import check, encode
from support.kafka_util import consume_all, create_topic
from support.log_util import dump_batches

from aioproducer import Producer
from aioproducer.devbroker import (
    KAFKA_VERSIONS,
    BrokerStartError,
    KafkaLibsError,
    LocalKafka,
)
from aioproducer.devbroker.jars import kafka_major

pytestmark = [pytest.mark.slow, pytest.mark.broker]

# Recent timestamps: the brokers' time-based retention (7 days, from the records'
# own timestamps) would delete a segment of older records at its next check.
T0 = (int(time.time()) - 3600) * 1000


@pytest.fixture(scope="module", params=KAFKA_VERSIONS, ids=[f"kafka-{v}" for v in KAFKA_VERSIONS])
def versioned_kafka(request: pytest.FixtureRequest,
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafka]:
    version: str = request.param
    # Kafka 4 finalizes transaction.version 2 by default: formatted with 1 here, so that
    # every release runs the same (classic) transaction protocol.
    features = {"transaction.version": 1} if kafka_major(version) >= 4 else {}
    cluster = LocalKafka(tmp_path_factory.mktemp(f"kafka-{version}"), nodes=1,
                         kafka_version=version, features=features, ttl=1800)
    try:
        try:
            cluster.start(timeout=180)
        except (BrokerStartError, KafkaLibsError) as exc:
            pytest.fail(f"could not start Kafka {version}: {exc}", pytrace=False)
        yield cluster
    finally:
        cluster.stop(timeout=30)


def test_the_broker_is_that_release(versioned_kafka: LocalKafka) -> None:
    """The JVM runs the release asked for (Kafka logs its own version at start)."""
    log = versioned_kafka.server_log(0).read_text()
    found = set(re.findall(r"Kafka version: (\S+)", log))
    assert found == {versioned_kafka.kafka_version}, found
    assert versioned_kafka.status().kafka_version == versioned_kafka.kafka_version


@pytest.mark.asyncio
async def test_round_trip(versioned_kafka: LocalKafka) -> None:
    bootstrap = versioned_kafka.bootstrap
    topic = create_topic(bootstrap, partitions=3)
    sent: dict[tuple[int, int], tuple[bytes | None, bytes, list[tuple[str, bytes]], int]] = {}
    async with Producer(bootstrap_servers=bootstrap, linger_ms=5) as producer:
        futs = []
        for i in range(300):
            key = None if i % 7 == 0 else b"key-%d" % (i % 11)
            headers = [("i", b"%d" % i), ("v", versioned_kafka.kafka_version.encode())]
            fut = await producer.send(topic, b"send-%d" % i, key=key, headers=headers,
                                      timestamp_ms=T0 + i)
            futs.append((fut, key, b"send-%d" % i, headers, T0 + i))
        for fut, key, value, headers, ts in futs:
            md = await fut
            sent[(md.partition, md.offset)] = (key, value, headers, ts)
            assert md.topic == topic and md.timestamp == ts
        # send_many() after every send() above is acknowledged: its records follow them
        # in partition 1, in order.
        values = [b"many-%d" % i for i in range(500)]
        first = 1 + max((o for p, o in sent if p == 1), default=-1)
        assert await (await producer.send_many(topic, values, partition=1,
                                               timestamp_ms=T0 + 5_000)) == 500
        for i, value in enumerate(values):
            sent[(1, first + i)] = (None, value, [], T0 + 5_000)
        md = await producer.send_and_wait(topic, b"last", key=b"k", partition=2,
                                          timestamp_ms=T0 + 10_000)
        sent[(md.partition, md.offset)] = (b"k", b"last", [], T0 + 10_000)

    consumed = consume_all(bootstrap, topic, len(sent), timeout=60)
    assert len(consumed) == len(sent) == 801
    for c in consumed:
        key, value, headers, ts = sent[(c.partition, c.offset)]
        assert (c.key, c.value, c.headers, c.timestamp) == (key, value, headers, ts)
        assert c.timestamp_type == 1  # CreateTime


@pytest.mark.asyncio
async def test_idempotence_through_a_broker_restart(versioned_kafka: LocalKafka) -> None:
    """The only node stops cleanly for 3 s while 20,000 keyed records are being sent:
    the producer's sequences carry over the restart (the broker reloads its producer
    state), so every record is in the log once, in send order per partition."""
    bootstrap = versioned_kafka.bootstrap
    topic = create_topic(bootstrap, partitions=3)
    n = 20_000
    rng = random.Random(35)
    keys = [b"key-%d" % rng.randrange(500) for _ in range(n)]
    restarted = asyncio.Event()

    async def restart() -> None:
        await asyncio.to_thread(versioned_kafka.stop_node, 0)
        await asyncio.sleep(3)
        await asyncio.to_thread(versioned_kafka.start_node, 0, 120)
        restarted.set()

    async with Producer(bootstrap_servers=bootstrap, linger_ms=5, delivery_timeout_ms=90_000,
                        request_timeout_ms=5_000) as producer:
        assert producer.config.enable_idempotence is not False  # the default: on
        futs = []
        task = None
        t0 = time.monotonic()
        for i in range(n):
            futs.append(await producer.send(topic, encode(i), key=keys[i]))
            if i == n // 4:
                await producer.flush()
                task = asyncio.create_task(restart())
                await asyncio.sleep(0.5)  # the node is going down while we send
            if i % 1000 == 0:
                await asyncio.sleep(0)
        assert task is not None
        await asyncio.wait_for(task, 150)
        results = await asyncio.gather(*futs, return_exceptions=True)
        elapsed = time.monotonic() - t0
    assert restarted.is_set() and elapsed >= 3
    consumed = consume_all(bootstrap, topic, n, timeout=90)
    outcome = check(keys, results, consumed)
    print(f"\nKafka {versioned_kafka.kafka_version}, restart mid-stream "
          f"({elapsed:.1f} s): {outcome.line()}")
    assert outcome.untyped_failures == []
    assert (outcome.lost, outcome.duplicated, outcome.out_of_order) == (0, 0, 0)
    assert outcome.acknowledged == n, outcome.line()


@pytest.mark.asyncio
@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
async def test_compression(versioned_kafka: LocalKafka, codec: str) -> None:
    bootstrap = versioned_kafka.bootstrap
    topic = create_topic(bootstrap, partitions=1)
    words = [b"order", b"user", b"status", b"shipped", b"warehouse", b"EUR", b"42"]
    rng = random.Random(codec)
    values = [b" ".join(rng.choice(words) for _ in range(30)) + b" #%d" % i
              for i in range(2000)]
    async with Producer(bootstrap_servers=bootstrap, compression_type=codec,
                        linger_ms=20) as producer:
        futs = [await producer.send(topic, v, key=b"k%d" % (i % 5), timestamp_ms=T0 + i)
                for i, v in enumerate(values)]
        offsets = [(await f).offset for f in futs]
    assert offsets == list(range(len(values)))
    consumed = consume_all(bootstrap, topic, len(values), timeout=60)
    assert [(c.offset, c.key, c.value, c.timestamp) for c in consumed] == [
        (i, b"k%d" % (i % 5), v, T0 + i) for i, v in enumerate(values)]
    batches = dump_batches(versioned_kafka.node_dir(0) / "data", topic)
    assert batches and {b.codec for b in batches} == {codec}, batches[:3]
    assert sum(b.count for b in batches) == len(values)
    raw = sum(len(v) for v in values)
    assert sum(b.size for b in batches) < raw / 2  # compressed on the wire, kept as sent


@pytest.mark.asyncio
async def test_transactions_version_1(versioned_kafka: LocalKafka) -> None:
    bootstrap = versioned_kafka.bootstrap
    topic = create_topic(bootstrap, partitions=2)
    tid = f"compat-{uuid.uuid4().hex[:10]}"
    async with Producer(bootstrap_servers=bootstrap, transactional_id=tid,
                        linger_ms=5) as producer:
        await producer.init_transactions()
        assert producer.transaction_version == 1
        producer.begin_transaction()
        committed: list[Any] = [await producer.send(topic, b"c-%d" % i, key=b"%d" % (i % 4))
                                for i in range(200)]
        committed.append(await producer.send_many(topic, [b"cm-%d" % i for i in range(100)],
                                                  partition=0))
        await producer.commit_transaction()
        producer.begin_transaction()
        aborted_futs = [await producer.send(topic, b"a-%d" % i) for i in range(50)]
        await producer.flush()  # in the log before the abort (else never sent at all)
        assert all(f.done() for f in aborted_futs)
        await producer.abort_transaction()
        producer.begin_transaction()
        await producer.send(topic, b"c-last", partition=1)
        await producer.commit_transaction()
        assert await committed.pop() == 100
        metas = [await f for f in committed]
    assert len(metas) == 200

    want = {b"c-%d" % i for i in range(200)} | {b"cm-%d" % i for i in range(100)} | {b"c-last"}
    read = consume_all(bootstrap, topic, len(want), timeout=60, isolation="read_committed")
    assert sorted(c.value for c in read if c.value is not None) == sorted(want)
    assert {(c.partition, c.offset) for c in read} >= {(m.partition, m.offset) for m in metas}
    everything = consume_all(bootstrap, topic, len(want) + 50, timeout=60)
    aborted = [c.value for c in everything if c.value is not None and c.value.startswith(b"a-")]
    assert sorted(aborted) == sorted(b"a-%d" % i for i in range(50))
