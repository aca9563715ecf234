"""Metrics, interceptors and logging, checked against known workloads on a real broker
(records read back with confluent-kafka where the records matter)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import Any

import pytest
from support.kafka_util import consume_all

from aioproducer import (
    ConfigError,
    Producer,
    ProducerRecord,
    RecordMetadata,
    UnknownTopicError,
)
from aioproducer.errors import MessageTooLargeError
from aioproducer.metrics import WindowedStat, prometheus_collector
from aioproducer.testing.faultproxy import ProxyCluster

pytestmark = pytest.mark.asyncio

PRODUCE = 0


async def test_metrics_match_a_known_workload(kafka_bootstrap: str,
                                              topic_factory: Any) -> None:
    topic = topic_factory(partitions=2)
    n, size = 5000, 100
    started = time.monotonic()
    async with Producer(bootstrap_servers=kafka_bootstrap, linger_ms=5,
                        client_id="metrics-test") as producer:
        before = producer.metrics()
        assert before["record-send-total"] == 0
        assert before["buffer-total-bytes"] == producer.config.buffer_memory
        for i in range(n):
            await producer.send(topic, bytes([i % 256]) * size, key=b"%d" % (i % 50))
        await producer.flush()
        m = producer.metrics()
        elapsed = time.monotonic() - started

    assert m["record-send-total"] == n
    assert m["record-error-total"] == 0
    assert m["record-retry-total"] == 0
    # Each record is at least its value plus framing; batches are at most batch_size.
    assert n * size < m["byte-total"] < n * (size + 40) + m["request-total"] * 2 * 61
    batches = m["byte-total"] / m["batch-size-avg"]
    assert 2 <= batches <= n
    assert m["batch-size-avg"] <= m["batch-size-max"] <= producer.config.batch_max_size
    assert 1 <= m["records-per-request-avg"] <= n
    assert m["request-total"] >= 1
    # Rates are totals over the window, which here is the producer's life.
    assert m["byte-total"] / (elapsed + 1) < m["byte-rate"] < m["byte-total"] / (elapsed * 0.5)
    assert m["record-send-total"] / (elapsed + 1) < m["record-send-rate"]
    assert m["compression-rate-avg"] == pytest.approx(1.0)
    assert 0 < m["request-latency-avg"] <= m["request-latency-max"] < 30_000
    assert m["requests-in-flight"] == 0
    assert m["record-queue-time-avg"] <= m["record-queue-time-max"]
    assert m["produce-throttle-time-max"] == 0
    assert m["buffer-available-bytes"] == m["buffer-total-bytes"]
    assert m["bufferpool-wait-time-total"] == 0 and m["bufferpool-wait-ratio"] == 0
    assert 0 <= m["metadata-age"] < elapsed + 1
    assert m.topics[topic]["record-send-total"] == n
    assert m.topics[topic]["byte-total"] == m["byte-total"]
    assert m.nodes and all(v["request-latency-avg"] > 0 for v in m.nodes.values())
    assert len(consume_all(kafka_bootstrap, topic, n)) == n


async def test_compression_rate_and_pool_wait(kafka_bootstrap: str,
                                              topic_factory: Any) -> None:
    topic = topic_factory()
    async with Producer(bootstrap_servers=kafka_bootstrap, compression_type="gzip",
                        linger_ms=50, batch_size=16384, buffer_memory=32768,
                        max_request_size=32768) as producer:
        # 400 concurrent sends: they all append in the loop's next turns, before any
        # response can free a block, so some must wait. (One send after another
        # yields once per batch, and on a slow machine the answer to the batch before
        # last could come back in that turn every time: no wait, a flaky test.)
        futs = await asyncio.gather(*(producer.send(topic, b"abcdefgh" * 128)
                                      for _ in range(400)))
        await asyncio.gather(*futs)
        m = producer.metrics()
    assert m["compression-rate-avg"] < 0.2
    # 400 KiB through 32 KiB of buffer memory: sends had to wait for memory.
    assert m["bufferpool-wait-time-total"] > 0
    assert m["bufferpool-wait-ratio"] > 0
    assert m["record-send-total"] == 400


async def test_errors_and_retries_are_counted(kafka_bootstrap: str,
                                              topic_factory: Any) -> None:
    small = topic_factory(config={"max.message.bytes": "2000"})
    topic = topic_factory()
    async with ProxyCluster.start(kafka_bootstrap) as proxies, \
            Producer(bootstrap_servers=proxies.bootstrap, linger_ms=0) as producer:
        await producer.send_and_wait(topic, b"warm-up")
        with pytest.raises(MessageTooLargeError):
            await producer.send_and_wait(small, b"x" * 10_000)
        for p in proxies.proxies.values():
            p.drop_after_request(PRODUCE, 1)  # the ack is lost: the batch is resent
        md = await producer.send_and_wait(topic, b"resent")
        m = producer.metrics()
    assert m["record-error-total"] == 1
    assert m.topics[small]["record-error-total"] == 1
    assert m["record-retry-total"] >= 1
    assert m["record-send-total"] == 3
    got = consume_all(kafka_bootstrap, topic, 2)
    assert [r.value for r in got] == [b"warm-up", b"resent"]  # idempotence: once
    assert got[1].offset == md.offset


async def test_windowed_stat_forgets_old_samples() -> None:
    s = WindowedStat(0.0)
    s.record(10, 1.0)
    s.record(30, 2.0)
    assert s.avg(2.0) == 20 and s.max(2.0) == 30
    assert s.rate(10.0) == pytest.approx(4.0)
    s.record(5, 40.0)  # a new window: the first one is now the previous sample
    assert s.max(40.0) == 30
    assert s.avg(100.0) == 0 and s.max(100.0) == 0  # both windows have passed
    assert s.total == 45 and s.total_count == 3


class Recording:
    def __init__(self) -> None:
        self.sent: list[ProducerRecord] = []
        self.acks: list[tuple[RecordMetadata, BaseException | None]] = []

    def on_send(self, record: ProducerRecord) -> ProducerRecord:
        self.sent.append(record)
        return dataclasses.replace(record, value=b"seen:" + bytes(record.value),
                                   headers=[*(record.headers or []), ("via", b"ic")])

    def on_acknowledgement(self, metadata: RecordMetadata,
                           exception: BaseException | None) -> None:
        self.acks.append((metadata, exception))


class Broken:
    closed = False

    def on_send(self, record: ProducerRecord) -> ProducerRecord:
        raise RuntimeError("interceptor bug")

    def on_acknowledgement(self, metadata: RecordMetadata,
                           exception: BaseException | None) -> None:
        raise RuntimeError("interceptor bug")

    def close(self) -> None:
        self.closed = True


async def test_interceptors_see_every_record_and_every_ack(
        kafka_bootstrap: str, topic_factory: Any, caplog: pytest.LogCaptureFixture) -> None:
    topic = topic_factory(partitions=2)
    small = topic_factory(config={"max.message.bytes": "2000"})
    rec, broken = Recording(), Broken()
    caplog.set_level(logging.WARNING, logger="aioproducer.interceptors")
    async with Producer(bootstrap_servers=kafka_bootstrap, linger_ms=5, max_block_ms=1000,
                        interceptors=[broken, rec]) as producer:
        futs = [await producer.send(topic, b"v%d" % i, key=b"k%d" % i) for i in range(100)]
        await producer.send_many(topic, [b"bulk%d" % i for i in range(50)])
        await asyncio.gather(*futs)
        await producer.flush()
        too_big = await producer.send(small, b"x" * 10_000)
        with pytest.raises(MessageTooLargeError):
            await too_big
        with pytest.raises(UnknownTopicError):
            await producer.send("no-such-topic-here", b"lost")
    assert broken.closed
    assert len(rec.sent) == 152
    assert len(rec.acks) == 152
    ok = [m for m, e in rec.acks if e is None]
    failed = [(m, e) for m, e in rec.acks if e is not None]
    assert len(ok) == 150 and all(m.offset >= 0 and m.topic == topic for m in ok)
    assert {type(e) for _, e in failed} == {MessageTooLargeError, UnknownTopicError}
    assert all(m.offset == -1 for m, _ in failed)
    assert "interceptor bug" in caplog.text  # logged, skipped, nothing broke

    got = consume_all(kafka_bootstrap, topic, 150)
    assert sorted(r.value for r in got) == sorted(
        [b"seen:v%d" % i for i in range(100)] + [b"seen:bulk%d" % i for i in range(50)])
    assert all(r.headers == [("via", b"ic")] for r in got)


async def test_interceptor_config_is_checked() -> None:
    with pytest.raises(ConfigError, match="interceptor"):
        Producer(interceptors=[object()])
    with pytest.raises(ConfigError, match="list"):
        Producer(interceptors=Recording())


async def test_successful_sends_log_nothing_at_info_and_retries_say_where(
        kafka_bootstrap: str, topic_factory: Any, caplog: pytest.LogCaptureFixture) -> None:
    topic = topic_factory()
    async with ProxyCluster.start(kafka_bootstrap) as proxies, \
            Producer(bootstrap_servers=proxies.bootstrap, linger_ms=0) as producer:
        await producer.send_and_wait(topic, b"warm-up")
        caplog.clear()
        caplog.set_level(logging.INFO, logger="aioproducer")
        futs = [await producer.send(topic, b"%d" % i) for i in range(2000)]
        await asyncio.gather(*futs)
        assert [r for r in caplog.records if r.name.startswith("aioproducer")] == []

        for p in proxies.proxies.values():
            p.drop_after_request(PRODUCE, 1)
        await producer.send_and_wait(topic, b"after a lost ack")
    text = caplog.text
    assert f"produce to {topic}-0 failed, retrying" in text
    assert "connection to node" in text and "lost" in text


async def test_prometheus_collector_exports_the_snapshot(kafka_bootstrap: str,
                                                         topic_factory: Any) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    topic = topic_factory()
    async with Producer(bootstrap_servers=kafka_bootstrap, client_id="prom") as producer:
        registry = CollectorRegistry()
        registry.register(prometheus_collector(producer))
        await producer.send_and_wait(topic, b"one")
        text = generate_latest(registry).decode()
    assert 'kafka_producer_record_send_total{client_id="prom"} 1.0' in text
    assert f'kafka_producer_topic_record_send_total{{client_id="prom",topic="{topic}"}} 1.0' \
        in text
    assert "kafka_producer_node_request_latency_avg{" in text
