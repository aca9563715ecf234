"""Delivery guarantees on real brokers: failover, restarts, bounded shutdown.

The long variants are sized by ``AIOPRODUCER_FAILOVER_RECORDS`` (default 100,000 for
CI; the documented full run uses 1,000,000).
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from typing import Any

import pytest
from support.delivery_util import check, encode, leaders, settle
from support.kafka_util import consume_all, create_topic

from aioproducer import KafkaTimeoutError, Producer, ProducerClosedError
from aioproducer.devbroker import LocalKafka

pytestmark = pytest.mark.asyncio

RECORDS = int(os.environ.get("AIOPRODUCER_FAILOVER_RECORDS", "100000"))


async def produce_with_fault(producer: Producer, topic: str, n: int, fault_at: int,
                             fault: Any, *, keys: int = 1000) -> tuple[list[Any], list[Any]]:
    """Send n keyed records; run ``fault()`` (a coroutine) once ``fault_at`` are sent."""
    rng = random.Random(7)
    key_list = [f"key-{i}".encode() for i in range(keys)]
    futs: list[Any] = []
    sent_keys: list[bytes | None] = []
    fault_task: asyncio.Task[Any] | None = None
    for i in range(n):
        key = key_list[rng.randrange(keys)]
        try:
            futs.append(await producer.send(topic, encode(i), key=key))
        except Exception as exc:  # a send that failed up front still counts as sent
            fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            fut.set_exception(exc)
            futs.append(fut)
        sent_keys.append(key)
        if i == fault_at:
            fault_task = asyncio.create_task(fault())
        if i % 2000 == 0:
            await asyncio.sleep(0.001)  # a steady stream, not one burst
    results = await settle(futs)
    if fault_task is not None:
        await fault_task
    return sent_keys, results


@pytest.mark.cluster
async def test_leader_killed_mid_stream_nothing_lost_or_duplicated(
        kafka_cluster3: LocalKafka) -> None:
    bootstrap = kafka_cluster3.bootstrap
    topic = create_topic(bootstrap, partitions=6, replication=3,
                         config={"min.insync.replicas": "2"})
    victim = leaders(bootstrap, topic)[0]

    async def kill_and_restart() -> None:
        await asyncio.to_thread(kafka_cluster3.kill_node, victim)
        await asyncio.sleep(3)
        await asyncio.to_thread(kafka_cluster3.start_node, victim)

    async with Producer(bootstrap_servers=bootstrap, linger_ms=5,
                        delivery_timeout_ms=120_000) as producer:
        keys, results = await produce_with_fault(producer, topic, RECORDS, RECORDS // 3,
                                                 kill_and_restart)
    consumed = consume_all(bootstrap, topic, RECORDS, timeout=180)
    outcome = check(keys, results, consumed)
    print(f"\nleader failover (killed node {victim}): {outcome.line()}")
    assert outcome.untyped_failures == []
    assert outcome.lost == 0
    assert outcome.duplicated == 0
    assert outcome.out_of_order == 0
    assert outcome.acknowledged == RECORDS, outcome.line()


@pytest.mark.broker  # starts a broker of its own
@pytest.mark.slow
async def test_single_broker_down_for_10s_is_ridden_out(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    kafka = LocalKafka(tmp_path_factory.mktemp("restart"), nodes=1)
    kafka.start(timeout=180)
    try:
        bootstrap = kafka.bootstrap
        topic = create_topic(bootstrap, partitions=3)
        n = max(RECORDS // 5, 20_000)

        async def stop_10s() -> None:
            await asyncio.to_thread(kafka.stop_node, 0)
            await asyncio.sleep(10)
            await asyncio.to_thread(kafka.start_node, 0)

        async with Producer(bootstrap_servers=bootstrap, delivery_timeout_ms=60_000,
                            request_timeout_ms=5_000) as producer:
            t0 = time.monotonic()
            keys, results = await produce_with_fault(producer, topic, n, n // 4, stop_10s)
            elapsed = time.monotonic() - t0
        consumed = consume_all(bootstrap, topic, n, timeout=120)
        outcome = check(keys, results, consumed)
        print(f"\nsingle-node restart ({elapsed:.1f}s): {outcome.line()}")
        assert elapsed >= 10, "the outage never happened mid-stream"
        assert outcome.untyped_failures == []
        assert (outcome.lost, outcome.duplicated, outcome.out_of_order) == (0, 0, 0)
        assert outcome.acknowledged == n, outcome.line()
    finally:
        kafka.stop()


@pytest.mark.broker  # starts a broker of its own
@pytest.mark.slow
async def test_flush_and_close_are_bounded_with_the_broker_down(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    kafka = LocalKafka(tmp_path_factory.mktemp("down"), nodes=1)
    kafka.start(timeout=180)
    try:
        topic = create_topic(kafka.bootstrap, partitions=2)
        producer = Producer(bootstrap_servers=kafka.bootstrap, request_timeout_ms=3000)
        await producer.start()
        first = await producer.send_and_wait(topic, b"before")
        assert first.offset == 0
        await asyncio.to_thread(kafka.stop)
        futs = [await producer.send(topic, encode(i)) for i in range(500)]

        t0 = time.monotonic()
        with pytest.raises(KafkaTimeoutError, match="500 record"):
            await producer.flush(timeout=2)
        assert 1.8 <= time.monotonic() - t0 < 4

        t0 = time.monotonic()
        await producer.close(timeout=2)
        assert time.monotonic() - t0 < 4
        results = await settle(futs)
        assert all(isinstance(r, ProducerClosedError) for r in results), results[:3]
        pool = producer._accumulator.pool
        pool.reclaim()
        assert pool.allocated_bytes == pool.quarantined_bytes  # nothing leaked
    finally:
        kafka.stop()
