"""Typed errors and bounded memory, against the real broker."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

import pytest
from support.kafka_util import consume_all

from aioproducer import (
    BufferExhaustedError,
    ConfigError,
    DeliveryTimeoutError,
    IllegalStateError,
    KafkaConnectionError,
    PartitionError,
    Producer,
    ProducerClosedError,
    RecordTooLargeError,
    SerializationError,
    UnknownTopicError,
)
from aioproducer.testing.faultproxy import ProxyCluster

pytestmark = pytest.mark.asyncio


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_bad_input_is_typed_and_loses_nothing_else(kafka_bootstrap: str,
                                                         topic_factory: Any) -> None:
    topic = topic_factory(partitions=2)
    good: list[bytes] = []
    async with Producer(bootstrap_servers=kafka_bootstrap, max_block_ms=1000,
                        max_request_size=100_000) as producer:
        bad_calls: list[tuple[type[BaseException], dict[str, Any]]] = [
            (SerializationError, {"value": "text, not bytes"}),
            (SerializationError, {"value": b"v", "key": 42}),
            (SerializationError, {"value": b"v", "headers": [("k", "not bytes")]}),
            (SerializationError, {"value": b"v", "headers": [(b"k", b"v")]}),
            (SerializationError, {"value": b"v", "headers": "k=v"}),
            (SerializationError, {"value": b"v", "timestamp_ms": -5}),
            (PartitionError, {"value": b"v", "partition": 2}),
            (PartitionError, {"value": b"v", "partition": -1}),
            (RecordTooLargeError, {"value": b"x" * 100_001}),
        ]
        for i, (exc_type, kwargs) in enumerate(bad_calls):
            ok = f"good-{i}".encode()
            good.append(ok)
            await producer.send(topic, ok)
            with pytest.raises(exc_type) as info:
                await producer.send(topic, **kwargs)
            assert str(info.value), "typed errors must say what was wrong"
        with pytest.raises(UnknownTopicError, match="not present in metadata after 1000 ms"):
            await producer.send("no-such-topic-anywhere", b"v")
        last = await producer.send(topic, b"last")
        good.append(b"last")
        await last
    got = consume_all(kafka_bootstrap, topic, len(good))
    assert sorted(m.value for m in got) == sorted(good)  # type: ignore[type-var]


async def test_unknown_topic_waits_max_block_ms(kafka_bootstrap: str) -> None:
    async with Producer(bootstrap_servers=kafka_bootstrap, max_block_ms=700) as producer:
        t0 = time.monotonic()
        with pytest.raises(UnknownTopicError):
            await producer.send("missing-topic", b"v")
        assert 0.6 <= time.monotonic() - t0 < 3.0


async def test_closed_and_unstarted_producers_refuse_sends(kafka_bootstrap: str,
                                                           topic_factory: Any) -> None:
    topic = topic_factory()
    producer = Producer(bootstrap_servers=kafka_bootstrap)
    with pytest.raises(IllegalStateError, match="not started"):
        await producer.send(topic, b"v")
    await producer.start()
    meta = await producer.send_and_wait(topic, b"v")
    assert meta.offset == 0
    await producer.close()
    await producer.close()  # idempotent
    with pytest.raises(ProducerClosedError):
        await producer.send(topic, b"v")


async def test_unreachable_broker_fails_start_within_bound() -> None:
    producer = Producer(bootstrap_servers=f"127.0.0.1:{closed_port()},127.0.0.1:{closed_port()}",
                        max_block_ms=1500)
    t0 = time.monotonic()
    with pytest.raises(KafkaConnectionError):
        await producer.start()
    assert time.monotonic() - t0 < 5.0


async def test_config_errors_are_clear() -> None:
    with pytest.raises(ConfigError, match="did you mean 'linger_ms'"):
        Producer(bootstrap_servers="127.0.0.1:1", lingerms=5)
    with pytest.raises(ConfigError, match="acks"):
        Producer(bootstrap_servers="127.0.0.1:1", acks=2)
    with pytest.raises(ConfigError, match="batch_size"):
        Producer({"bootstrap.servers": "127.0.0.1:1", "batch.size": 0})
    with pytest.raises(ConfigError, match="enable_idempotence=True conflicts"):
        Producer(bootstrap_servers="127.0.0.1:1", acks=1, enable_idempotence=True)
    p = Producer({"bootstrap.servers": "127.0.0.1:1", "linger.ms": 7, "acks": "1"})
    assert p.config.linger_ms == 7 and p.config.acks == 1
    assert p.config.enable_idempotence is False  # acks=1 turns the default off, as in Java


async def test_flood_with_one_mib_stays_bounded_and_delivers(kafka_bootstrap: str,
                                                             topic_factory: Any) -> None:
    topic = topic_factory(partitions=3)
    n, size = 60_000, 1000
    memory = 1024 * 1024
    peak = 0
    async with Producer(bootstrap_servers=kafka_bootstrap, buffer_memory=memory,
                        max_request_size=memory, linger_ms=0) as producer:
        pool = producer._accumulator.pool
        futs = []
        for i in range(n):
            futs.append(await producer.send(topic, i.to_bytes(8, "big") * (size // 8)))
            peak = max(peak, pool.allocated_bytes)
            assert pool.allocated_bytes + pool.available_memory == memory
        await producer.flush()
        waited = producer._accumulator.memory_waiters
        assert waited == 0
        for f in futs:
            f.result()
    assert peak <= memory
    assert peak > memory // 2, "the flood never filled the pool; the test proves nothing"
    got = consume_all(kafka_bootstrap, topic, n, timeout=120)
    assert len(got) == n
    assert len({m.value for m in got}) == n


async def test_send_that_cannot_get_memory_times_out_and_loses_nothing(
        kafka_bootstrap: str, topic_factory: Any) -> None:
    # The real broker sits behind a proxy that stops forwarding (a hung network):
    # batches keep their memory, so a flood of sends must block and then time out.
    topic = topic_factory(partitions=1)
    memory = 64 * 1024
    async with ProxyCluster.start(kafka_bootstrap) as proxies, \
            Producer(bootstrap_servers=proxies.bootstrap, buffer_memory=memory,
                     batch_size=16 * 1024, max_request_size=memory, linger_ms=0,
                     max_block_ms=800, request_timeout_ms=3000,
                     delivery_timeout_ms=60_000) as producer:
        await producer.send_and_wait(topic, b"warm-up")
        proxies.blackhole(True)
        held = []
        t0 = time.monotonic()
        with pytest.raises(BufferExhaustedError, match="max_block_ms=800"):
            for i in range(10_000):
                held.append(await producer.send(topic, i.to_bytes(4, "big") * 250))
        assert 0.7 <= time.monotonic() - t0 < 5
        pool = producer._accumulator.pool
        # The pool really was used up (each 1000-byte record sits in its own
        # 16 KiB block with linger_ms=0) before the send blocked.
        assert len(held) >= memory // (16 * 1024)
        assert pool.allocated_bytes == memory and pool.available_memory == 0
        proxies.blackhole(False)
        metas = await asyncio.gather(*held)
    assert [m.offset for m in metas] == list(range(1, len(held) + 1))
    got = consume_all(kafka_bootstrap, topic, len(held) + 1)
    assert [m.value for m in got[1:]] == [i.to_bytes(4, "big") * 250 for i in range(len(held))]


async def test_record_after_an_expired_open_batch_goes_into_a_new_batch(
        kafka_bootstrap: str, topic_factory: Any) -> None:
    """A batch that expires while still open (its leader unreachable, so never sent)
    gives its memory back; later sends must not append into it."""
    topic = topic_factory(partitions=1)
    async with ProxyCluster.start(kafka_bootstrap) as proxies, \
            Producer(bootstrap_servers=proxies.bootstrap, linger_ms=0,
                     request_timeout_ms=800, delivery_timeout_ms=1200,
                     reconnect_backoff_ms=50, reconnect_backoff_max_ms=200) as producer:
        await producer.send_and_wait(topic, b"warm-up")
        proxies.refuse_connections(True)
        proxies.drop_connections()
        await asyncio.sleep(0.2)
        stale = await producer.send(topic, b"expires")
        with pytest.raises(DeliveryTimeoutError):
            await stale
        proxies.refuse_connections(False)
        fresh = await producer.send(topic, b"delivered")  # the native fast path
        assert fresh.batch is not stale.batch
        md = await asyncio.wait_for(fresh, 30)
    got = consume_all(kafka_bootstrap, topic, 2)
    assert [r.value for r in got] == [b"warm-up", b"delivered"]
    assert got[1].offset == md.offset
