"""The fault-injecting proxy, exercised with confluent-kafka against the real broker.

confluent-kafka blocks its calling thread while the proxy runs on the test's event
loop, so every confluent call goes through ``asyncio.to_thread`` and every one of
them has its own timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import confluent_kafka
import confluent_kafka.admin
import pytest
import pytest_asyncio
from kio.index import load_response_schema
from kio.serial import entity_reader
from support.kafka_util import create_topic, delete_topic

from aioproducer.testing.faultproxy import (
    API_API_VERSIONS,
    API_DESCRIBE_CLUSTER,
    API_METADATA,
    API_PRODUCE,
    FaultProxy,
    ProxyCluster,
    discover_brokers,
    encode_request,
)

if TYPE_CHECKING:
    from aioproducer.devbroker import LocalKafka

pytestmark = pytest.mark.asyncio

TopicFactory = Callable[..., str]
Report = tuple[Any, bytes | None]


class ThreadedProducer:
    """A confluent Producer whose blocking calls are made from worker threads."""

    def __init__(self, conf: dict[str, Any]) -> None:
        base = {"linger.ms": 5, "log_level": 2}
        self.producer: Any = confluent_kafka.Producer({**base, **conf})

    def _send(self, topic: str, values: list[bytes], timeout: float,
              spread: int) -> list[Report]:
        reports: list[Report] = []

        def on_delivery(err: Any, msg: Any) -> None:
            reports.append((err, msg.value()))

        for i, v in enumerate(values):
            extra = {"partition": i % spread} if spread else {}
            self.producer.produce(topic, v, on_delivery=on_delivery, **extra)
            self.producer.poll(0)
        self.producer.flush(timeout)
        return reports

    async def send(self, topic: str, values: list[bytes], timeout: float = 15.0, *,
                   spread: int = 0) -> list[Report]:
        """Produce and flush; ``spread``: round-robin over that many partitions."""
        return await asyncio.to_thread(self._send, topic, values, timeout, spread)

    async def list_topics(self, timeout: float) -> Any:
        return await asyncio.to_thread(self.producer.list_topics, None, timeout)

    def _close(self) -> None:
        self.producer.purge()
        self.producer.flush(5)
        self.producer = None  # librdkafka is destroyed here, in the worker thread

    async def close(self) -> None:
        await asyncio.to_thread(self._close)


@contextlib.asynccontextmanager
async def confluent_producer(**conf: Any) -> AsyncIterator[ThreadedProducer]:
    producer = await asyncio.to_thread(ThreadedProducer, conf)
    try:
        yield producer
    finally:
        await producer.close()


def _consume_all(bootstrap: str, topic: str, partitions: int,
                 timeout: float) -> dict[int, list[bytes]]:
    """Every value of every partition of ``topic``, read directly from the brokers."""
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"faultproxy-{uuid.uuid4().hex}",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "log_level": 2,
    })
    try:
        tps = [confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
               for p in range(partitions)]
        highs = {tp.partition: consumer.get_watermark_offsets(tp, timeout=10)[1]
                 for tp in tps}
        positions = dict.fromkeys(highs, 0)
        values: dict[int, list[bytes]] = {p: [] for p in highs}
        consumer.assign(tps)
        deadline = time.monotonic() + timeout
        while (any(positions[p] < highs[p] for p in highs)
               and time.monotonic() < deadline):
            msg: Any = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    continue
                raise confluent_kafka.KafkaException(msg.error())
            values[msg.partition()].append(msg.value())
            positions[msg.partition()] = msg.offset() + 1
        assert positions == highs, f"read up to {positions}, high watermarks {highs}"
        return values
    finally:
        consumer.close()


async def consume_all(bootstrap: str, topic: str, timeout: float = 15.0) -> list[bytes]:
    """The values of partition 0 (the tests' topics have one partition)."""
    return (await asyncio.to_thread(_consume_all, bootstrap, topic, 1, timeout))[0]


def ok(reports: list[Report]) -> list[bytes]:
    """The delivered values, asserting that every message was delivered."""
    assert all(err is None for err, _ in reports), [err for err, _ in reports if err]
    return [v if v is not None else b"" for _, v in reports]


@pytest_asyncio.fixture
async def cluster(kafka_bootstrap: str) -> AsyncIterator[ProxyCluster]:
    async with ProxyCluster.start(kafka_bootstrap) as c:
        yield c


async def _raw_request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                       api_key: int, version: int, corr: int) -> bytes:
    writer.write(encode_request(api_key, version, corr, {
        "topics": (), "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False}))
    await writer.drain()
    size = int.from_bytes(await reader.readexactly(4), "big")
    return await reader.readexactly(size)


# -- address rewriting ----------------------------------------------------------------


async def test_metadata_is_rewritten_to_proxy_addresses(
        cluster: ProxyCluster, kafka_bootstrap: str) -> None:
    real = await discover_brokers(kafka_bootstrap)
    assert set(cluster.proxies) == set(real)
    for node_id, (_, port) in real.items():
        assert cluster.proxy_for_port(port) is cluster.proxies[node_id]
    seen = await discover_brokers(cluster.bootstrap)
    assert seen == {n: ("127.0.0.1", p.port) for n, p in cluster.proxies.items()}
    assert sum(p.stats["responses_rewritten"] for p in cluster.proxies.values()) >= 1
    assert all(p.stats["rewrite_errors"] == 0 for p in cluster.proxies.values())


async def test_confluent_producer_stays_behind_the_proxy(
        cluster: ProxyCluster, kafka_bootstrap: str, topic_factory: TopicFactory) -> None:
    topic = topic_factory(partitions=1)
    values = [b"rewrite-%d" % i for i in range(100)]
    async with confluent_producer(**{"bootstrap.servers": cluster.bootstrap}) as producer:
        assert ok(await producer.send(topic, values)) == values
        md = await producer.list_topics(10)
        proxy_ports = {p.port for p in cluster.proxies.values()}
        assert md.brokers and {b.port for b in md.brokers.values()} <= proxy_ports
        assert {b.host for b in md.brokers.values()} == {"127.0.0.1"}
    assert cluster.requests(API_PRODUCE) >= 1
    assert cluster.requests(API_METADATA) >= 1
    assert all(p.stats["rewrite_errors"] == 0 for p in cluster.proxies.values())
    assert await consume_all(kafka_bootstrap, topic) == values


def _describe_cluster(bootstrap: str) -> list[tuple[int, str, int]]:
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap,
                                               "log_level": 2})
    result: Any = admin.describe_cluster(request_timeout=10).result(15)
    return sorted((n.id, n.host, n.port) for n in result.nodes)


async def test_admin_client_sees_proxy_addresses(cluster: ProxyCluster) -> None:
    nodes = await asyncio.to_thread(_describe_cluster, cluster.bootstrap)
    assert nodes == [(n, "127.0.0.1", p.port) for n, p in sorted(cluster.proxies.items())]


async def test_describe_cluster_is_rewritten(cluster: ProxyCluster) -> None:
    # librdkafka's describe_cluster() is Metadata based: speak DescribeCluster directly.
    proxy = next(iter(cluster.proxies.values()))
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    try:
        writer.write(encode_request(API_DESCRIBE_CLUSTER, 0, 9, {
            "include_cluster_authorized_operations": False}))
        await writer.drain()
        size = int.from_bytes(await reader.readexactly(4), "big")
        payload = await reader.readexactly(size)
    finally:
        writer.close()
        await writer.wait_closed()
    schema: Any = load_response_schema(API_DESCRIBE_CLUSTER, 0)
    _, offset = entity_reader(schema.__header_schema__)(payload, 0)
    response, _ = entity_reader(schema)(payload, offset)
    assert response.error_code == 0
    got = sorted((int(b.broker_id), b.host, int(b.port)) for b in response.brokers)
    assert got == [(n, "127.0.0.1", p.port) for n, p in sorted(cluster.proxies.items())]
    assert proxy.stats["responses_rewritten"] == 1
    assert proxy.stats["rewrite_errors"] == 0


async def test_large_produce_requests_stream_through(
        cluster: ProxyCluster, kafka_bootstrap: str, topic_factory: TopicFactory) -> None:
    topic = topic_factory(partitions=1)
    values = [i.to_bytes(4, "big") * 25_000 for i in range(200)]  # 100 kB each, 20 MB
    t0 = time.monotonic()
    async with confluent_producer(**{"bootstrap.servers": cluster.bootstrap,
                                     "linger.ms": 20}) as producer:
        assert len(ok(await producer.send(topic, values, timeout=20))) == len(values)
    assert time.monotonic() - t0 < 15
    assert cluster.requests(API_PRODUCE) >= 2
    got = await consume_all(kafka_bootstrap, topic)
    assert got == values


@pytest.mark.cluster
async def test_three_nodes_each_behind_its_own_proxy(kafka_cluster3: LocalKafka) -> None:
    real = kafka_cluster3.bootstrap
    topic = await asyncio.to_thread(create_topic, real, partitions=6, replication=3)
    try:
        async with ProxyCluster.start(real) as cluster:
            assert len(cluster.proxies) == 3
            for i in range(3):
                port = kafka_cluster3.node_port(i)
                assert cluster.proxy_for_port(port).upstream_port == port
            values = [b"c3-%d" % i for i in range(600)]
            async with confluent_producer(**{"bootstrap.servers": cluster.bootstrap,
                                             "enable.idempotence": True}) as producer:
                sent = ok(await producer.send(topic, values, spread=6))
                assert sorted(sent) == sorted(values)
                md = await producer.list_topics(10)
                brokers = {b.id: (b.host, b.port) for b in md.brokers.values()}
                assert brokers == {n: ("127.0.0.1", p.port)
                                   for n, p in cluster.proxies.items()}
                leaders = {part.leader for part in md.topics[topic].partitions.values()}
            produced_to = {n for n, p in cluster.proxies.items()
                           if p.stats["requests_by_api"][API_PRODUCE]}
            assert produced_to == leaders
        got = await asyncio.to_thread(_consume_all, real, topic, 6, 20.0)
        assert sorted(v for vs in got.values() for v in vs) == sorted(values)
    finally:
        await asyncio.to_thread(delete_topic, real, topic, 10)


# -- lost acks ------------------------------------------------------------------------


@pytest.mark.parametrize("forward", [True, False], ids=["ack-lost", "request-lost"])
async def test_drop_after_produce_idempotent_exactly_once(
        cluster: ProxyCluster, kafka_bootstrap: str, topic_factory: TopicFactory,
        forward: bool) -> None:
    topic = topic_factory(partitions=1)
    for proxy in cluster.proxies.values():
        proxy.drop_after_request(API_PRODUCE, forward=forward)
    values = [b"idem-%d" % i for i in range(100)]
    async with confluent_producer(**{"bootstrap.servers": cluster.bootstrap,
                                     "enable.idempotence": True}) as producer:
        assert sorted(ok(await producer.send(topic, values))) == sorted(values)
    stats = [p.stats for p in cluster.proxies.values()]
    assert sum(s["connections_dropped"] for s in stats) == 1
    if forward:
        assert sum(s["responses_dropped"] for s in stats) == 1
        assert sum(s["requests_dropped"] for s in stats) == 0
    else:
        assert sum(s["requests_dropped"] for s in stats) == 1
        assert sum(s["responses_dropped"] for s in stats) == 0
    assert cluster.requests(API_PRODUCE) >= 2  # the original and the retry
    assert await consume_all(kafka_bootstrap, topic) == values  # once each, in order


async def test_acks0_produce_expects_no_response(
        cluster: ProxyCluster, kafka_bootstrap: str, topic_factory: TopicFactory) -> None:
    """With acks=0 there is no response to lose: the link goes right after forwarding."""
    topic = topic_factory(partitions=1)
    async with confluent_producer(**{"bootstrap.servers": cluster.bootstrap,
                                     "acks": 0, "linger.ms": 50}) as producer:
        ok(await producer.send(topic, [b"warm-up"]))
        for proxy in cluster.proxies.values():
            await proxy.wait_for_requests(API_PRODUCE, 1, timeout=5)
            proxy.drop_after_request(API_PRODUCE)
        values = [b"acks0-%d" % i for i in range(10)]
        ok(await producer.send(topic, values))
        for proxy in cluster.proxies.values():
            await proxy.wait_for_requests(API_PRODUCE, 2, timeout=5)
        ok(await producer.send(topic, [b"after"]))  # over a new connection
    stats = [p.stats for p in cluster.proxies.values()]
    assert sum(s["connections_dropped"] for s in stats) == 1
    assert sum(s["responses_dropped"] for s in stats) == 1
    got = await consume_all(kafka_bootstrap, topic)
    assert got == [b"warm-up", *values, b"after"]


async def test_lost_ack_without_idempotence_duplicates(
        cluster: ProxyCluster, kafka_bootstrap: str, topic_factory: TopicFactory) -> None:
    """The control experiment: the broker did write the batch whose ack was lost."""
    topic = topic_factory(partitions=1)
    for proxy in cluster.proxies.values():
        proxy.drop_after_request(API_PRODUCE)
    values = [b"dup-%d" % i for i in range(20)]
    async with confluent_producer(**{"bootstrap.servers": cluster.bootstrap,
                                     "enable.idempotence": False, "acks": "all",
                                     "linger.ms": 50}) as producer:
        assert sorted(ok(await producer.send(topic, values))) == sorted(values)
    got = await consume_all(kafka_bootstrap, topic)
    assert set(got) == set(values)
    assert len(got) > len(values)


# -- delays, blackhole, refusal, drops -------------------------------------------------


async def test_delay_responses(cluster: ProxyCluster, topic_factory: TopicFactory) -> None:
    topic = topic_factory(partitions=1)
    async with confluent_producer(**{"bootstrap.servers": cluster.bootstrap,
                                     "linger.ms": 0}) as producer:
        ok(await producer.send(topic, [b"warm-up"]))
        delay = 1.5
        for proxy in cluster.proxies.values():
            proxy.delay_responses(API_PRODUCE, delay, count=1)
        t0 = time.monotonic()
        ok(await producer.send(topic, [b"delayed"]))
        elapsed = time.monotonic() - t0
        assert delay - 0.05 <= elapsed < delay + 1.5
        t0 = time.monotonic()
        ok(await producer.send(topic, [b"not delayed"]))  # count=1 is used up
        assert time.monotonic() - t0 < delay - 0.3
    assert sum(p.stats["responses_delayed"] for p in cluster.proxies.values()) == 1


async def test_delay_all_responses_raw(cluster: ProxyCluster) -> None:
    proxy = next(iter(cluster.proxies.values()))
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    try:
        await _raw_request(reader, writer, API_API_VERSIONS, 0, 1)
        proxy.delay_responses(None, 0.4)
        t0 = time.monotonic()
        await _raw_request(reader, writer, API_API_VERSIONS, 0, 2)
        await _raw_request(reader, writer, API_METADATA, 4, 3)
        assert time.monotonic() - t0 >= 0.8
        proxy.delay_responses(None, 0)  # cancelled
        t0 = time.monotonic()
        await _raw_request(reader, writer, API_API_VERSIONS, 0, 4)
        assert time.monotonic() - t0 < 0.3
    finally:
        writer.close()
        await writer.wait_closed()


async def test_blackhole_times_out_then_recovers(
        cluster: ProxyCluster, topic_factory: TopicFactory) -> None:
    topic = topic_factory(partitions=1)
    conf = {"bootstrap.servers": cluster.bootstrap, "linger.ms": 0,
            "message.timeout.ms": 3000, "request.timeout.ms": 2000,
            "socket.timeout.ms": 2000}
    async with confluent_producer(**conf) as producer:
        ok(await producer.send(topic, [b"before"]))
        cluster.blackhole()
        t0 = time.monotonic()
        reports = await producer.send(topic, [b"lost"], timeout=12)
        assert len(reports) == 1
        err = reports[0][0]
        assert err is not None
        assert err.code() in (confluent_kafka.KafkaError._MSG_TIMED_OUT,
                              confluent_kafka.KafkaError._TIMED_OUT)
        assert time.monotonic() - t0 < 10
        cluster.drop_connections()  # whatever was held is discarded, not delivered
        cluster.blackhole(False)
        ok(await producer.send(topic, [b"after"], timeout=15))


async def test_blackhole_raw_holds_then_releases(cluster: ProxyCluster) -> None:
    proxy = next(iter(cluster.proxies.values()))
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    try:
        proxy.blackhole()
        writer.write(encode_request(API_API_VERSIONS, 0, 7, {}))
        await writer.drain()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(reader.readexactly(4), 0.5)
        proxy.blackhole(False)
        size = int.from_bytes(await asyncio.wait_for(reader.readexactly(4), 5), "big")
        payload = await reader.readexactly(size)
        assert int.from_bytes(payload[:4], "big") == 7
    finally:
        writer.close()
        await writer.wait_closed()


async def test_refuse_connections(cluster: ProxyCluster) -> None:
    cluster.refuse_connections()
    proxy = next(iter(cluster.proxies.values()))
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    try:
        assert await asyncio.wait_for(reader.read(), 2) == b""
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    async with confluent_producer(**{"bootstrap.servers": cluster.bootstrap}) as producer:
        with pytest.raises(confluent_kafka.KafkaException):
            await producer.list_topics(3)
        assert proxy.stats["connections_refused"] >= 2
        cluster.refuse_connections(False)
        md = await producer.list_topics(10)
        assert md.brokers


async def test_drop_connections(cluster: ProxyCluster) -> None:
    proxy = next(iter(cluster.proxies.values()))
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    try:
        await _raw_request(reader, writer, API_API_VERSIONS, 0, 1)
        assert proxy.connection_count == 1
        proxy.drop_connections()
        assert await asyncio.wait_for(reader.read(), 2) == b""
        assert proxy.stats["connections_dropped"] == 1
        # The proxy itself keeps serving new connections.
        r2, w2 = await asyncio.open_connection("127.0.0.1", proxy.port)
        try:
            await asyncio.wait_for(_raw_request(r2, w2, API_API_VERSIONS, 0, 2), 5)
        finally:
            w2.close()
            await w2.wait_closed()
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


# -- lifecycle ------------------------------------------------------------------------


async def test_close_leaves_nothing_behind(kafka_bootstrap: str,
                                           topic_factory: TopicFactory) -> None:
    topic = topic_factory(partitions=1)
    before = asyncio.all_tasks()
    cluster = await ProxyCluster.start(kafka_bootstrap)
    ports = [p.port for p in cluster.proxies.values()]
    async with confluent_producer(**{"bootstrap.servers": cluster.bootstrap,
                                     "message.timeout.ms": 2000}) as producer:
        ok(await producer.send(topic, [b"x"]))
        assert sum(p.connection_count for p in cluster.proxies.values()) >= 1
        cluster.proxies[next(iter(cluster.proxies))].blackhole()  # held data, too
        await cluster.close()
        assert asyncio.all_tasks() == before
        assert all(p.connection_count == 0 for p in cluster.proxies.values())
        for port in ports:
            with pytest.raises(OSError):
                await asyncio.open_connection("127.0.0.1", port)
        await cluster.close()  # idempotent
    # A lone proxy, as a context manager, never connected.
    async with FaultProxy("127.0.0.1", 1) as lone:
        assert lone.address == f"127.0.0.1:{lone.port}"
    await lone.close()
    assert asyncio.all_tasks() == before
