"""A Java 4.x producer .properties file runs a producer here, and the socket options it
carries do what they do in Java: socket buffer sizes, connections.max.idle.ms, the
exponential connection set-up timeout and client.dns.lookup (issue #17, item 13)."""

from __future__ import annotations

import asyncio
import re
import socket
import struct
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.kafka_util import consume_all

from aioproducer import Producer, ProducerConfig
from aioproducer import java as java_module
from aioproducer.config import ConfigIgnoredWarning, parse_properties
from aioproducer.errors import KafkaConnectionError
from aioproducer.net import connection as connection_module
from aioproducer.net.client import KafkaClient, parse_bootstrap_servers

pytestmark = pytest.mark.asyncio

PROPERTIES = Path(__file__).resolve().parents[1] / "support" / "java" / "producer-4x.properties"
_SERDE = "org.apache.kafka.common.serialization."


def _quiet(**overrides: Any) -> ProducerConfig:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigIgnoredWarning)
        return ProducerConfig.from_properties(PROPERTIES, **overrides)


@pytest.fixture(autouse=True)
def _fresh_warnings() -> Iterator[None]:
    java_module._warned.clear()
    yield
    java_module._warned.clear()


async def test_java_defaults_file_delivers(kafka_bootstrap: str, topic_factory: Any) -> None:
    """Every Java 4.x producer option, as strings from the file: the producer delivers,
    and an independent client (librdkafka) reads the records back."""
    topic = topic_factory(partitions=3)
    text = PROPERTIES.read_text().replace("bootstrap.servers=127.0.0.1:9092",
                                          f"bootstrap.servers={kafka_bootstrap}")
    with pytest.warns(ConfigIgnoredWarning):
        config = ProducerConfig.from_properties(text)
    # the same options as a dict of strings, the way a config map is carried over
    as_dict = Producer(parse_properties(text))
    assert as_dict.config == config
    async with Producer(config) as producer:
        futs = [await producer.send(topic, b"v%d" % i, key=b"k%d" % (i % 7))
                for i in range(200)]
        metas = [await f for f in futs]
    assert len({(m.partition, m.offset) for m in metas}) == 200
    got = consume_all(kafka_bootstrap, topic, 200, timeout=60)
    assert sorted(m.value for m in got) == sorted(b"v%d" % i for i in range(200))


async def test_java_serializers_write_what_java_would(kafka_bootstrap: str,
                                                      topic_factory: Any) -> None:
    topic = topic_factory(partitions=1)
    config = _quiet(bootstrap_servers=kafka_bootstrap,
                    **{"key.serializer": _SERDE + "StringSerializer",
                       "value.serializer": _SERDE + "LongSerializer"})
    async with Producer(config) as producer:
        for i, n in enumerate((0, 1, -1, 2**40)):
            await producer.send_and_wait(topic, n, key=f"clé-{i}")
    got = consume_all(kafka_bootstrap, topic, 4, timeout=60)
    assert [(m.key, m.value) for m in got] == [
        (f"clé-{i}".encode(), struct.pack(">q", n)) for i, n in enumerate((0, 1, -1, 2**40))]


def _socket_of(producer: Producer) -> socket.socket:
    conns = producer._client.connections()  # type: ignore[union-attr]
    assert conns
    sock = conns[0]._transport.get_extra_info("socket")  # type: ignore[union-attr]
    assert sock is not None
    return sock  # type: ignore[no-any-return]


async def test_socket_buffer_sizes(kafka_bootstrap: str, topic_factory: Any) -> None:
    topic = topic_factory(partitions=1)
    config = _quiet(bootstrap_servers=kafka_bootstrap,
                    **{"send.buffer.bytes": "65536", "receive.buffer.bytes": "49152"})
    async with Producer(config) as producer, \
            Producer(bootstrap_servers=kafka_bootstrap) as default:
        await producer.send_and_wait(topic, b"x")
        await default.send_and_wait(topic, b"y")
        sock, plain = _socket_of(producer), _socket_of(default)
        sndbuf = sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
        rcvbuf = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
        if sys.platform == "linux":  # Linux reports twice the size asked for
            assert (sndbuf, rcvbuf) == (2 * 65536, 2 * 49152)
        else:
            assert sndbuf >= 65536 and rcvbuf >= 49152
        # -1 (our default) leaves the kernel's own sizes
        assert plain.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) != 2 * 65536


async def test_idle_connections_close_and_reopen(kafka_bootstrap: str,
                                                 topic_factory: Any) -> None:
    topic = topic_factory(partitions=1)
    idle = _quiet(bootstrap_servers=kafka_bootstrap, **{"connections.max.idle.ms": "300"})
    async with Producer(idle) as producer, \
            Producer(bootstrap_servers=kafka_bootstrap) as keeper:
        await producer.send_and_wait(topic, b"1")
        await keeper.send_and_wait(topic, b"k")
        first = producer._client.connections()  # type: ignore[union-attr]
        kept = keeper._client.connections()  # type: ignore[union-attr]
        assert first and kept
        deadline = time.monotonic() + 5.0
        while producer._client.connections() and time.monotonic() < deadline:  # type: ignore[union-attr]
            await asyncio.sleep(0.05)
        assert producer._client.connections() == []  # type: ignore[union-attr]
        assert all(c.closed and "idle" in (c.close_reason or "") for c in first)
        assert keeper._client.connections() == kept  # type: ignore[union-attr]
        assert all(not c.closed for c in kept)
        meta = await producer.send_and_wait(topic, b"2")  # reconnects
        assert meta.offset >= 1
        assert producer._client.connections()  # type: ignore[union-attr]
    got = consume_all(kafka_bootstrap, topic, 3, timeout=60)
    assert sorted(m.value for m in got) == [b"1", b"2", b"k"]


async def test_busy_connection_is_not_idle(kafka_bootstrap: str, topic_factory: Any) -> None:
    topic = topic_factory(partitions=1)
    config = _quiet(bootstrap_servers=kafka_bootstrap, **{"connections.max.idle.ms": "400"})
    async with Producer(config) as producer:
        await producer.send_and_wait(topic, b"0")
        conns = producer._client.connections()  # type: ignore[union-attr]
        for i in range(1, 13):  # 1.2 s of a send every 100 ms
            await producer.send_and_wait(topic, b"%d" % i)
            await asyncio.sleep(0.1)
        assert producer._client.connections() == conns  # type: ignore[union-attr]


@pytest.fixture
def blackhole_port() -> Iterator[int]:
    """A port whose TCP handshakes never complete: a listener with a full backlog."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(0)
    port = srv.getsockname()[1]
    held = socket.create_connection(("127.0.0.1", port), timeout=2)
    try:
        yield port
    finally:
        held.close()
        srv.close()


async def test_connection_setup_timeout_doubles_to_the_max(blackhole_port: int) -> None:
    client = KafkaClient(f"127.0.0.1:{blackhole_port}", connect_timeout_ms=100,
                         connect_timeout_max_ms=400, reconnect_backoff_ms=1,
                         reconnect_backoff_max_ms=1)
    used: list[int] = []
    try:
        for _ in range(5):
            with pytest.raises(KafkaConnectionError, match="timed out after") as info:
                await client.connect(-1, timeout_s=5.0)
            used.append(int(re.findall(r"timed out after (\d+) ms", str(info.value))[0]))
    finally:
        await client.close()
    print("connection set-up timeouts (ms):", used)
    bounds = [(80, 120), (160, 240), (320, 400), (320, 400), (320, 400)]
    assert all(lo <= ms <= hi for ms, (lo, hi) in zip(used, bounds, strict=True)), used


async def test_use_all_dns_ips_tries_every_address(
        kafka_bootstrap: str, topic_factory: Any, blackhole_port: int,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A name with a dead address first: the next address is tried."""
    topic = topic_factory(partitions=1)
    host, port = parse_bootstrap_servers(kafka_bootstrap)[0]
    real = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    refused_port = closed.getsockname()[1]
    closed.close()  # nothing listens there: refused
    resolve = connection_module._resolve
    asked: list[str] = []

    async def fake(loop: Any, name: str, p: int) -> list[tuple[int, int, int, Any]]:
        asked.append(name)
        if name != "kafka-bootstrap.test":
            return await resolve(loop, name, p)
        fam, kind, proto = real[0][0], real[0][1], real[0][2]
        return [(fam, kind, proto, ("127.0.0.1", refused_port)),
                (fam, kind, proto, ("127.0.0.1", blackhole_port)),
                (fam, kind, proto, real[0][4])]

    monkeypatch.setattr(connection_module, "_resolve", fake)
    async with Producer(bootstrap_servers=f"kafka-bootstrap.test:{port}",
                        socket_connection_setup_timeout_ms=300,
                        client_dns_lookup="use_all_dns_ips") as producer:
        meta = await producer.send_and_wait(topic, b"via the third address")
    assert asked[0] == "kafka-bootstrap.test" and meta.offset == 0


async def test_resolve_canonical_bootstrap_servers_only(
        kafka_bootstrap: str, topic_factory: Any) -> None:
    topic = topic_factory(partitions=1)
    host, port = parse_bootstrap_servers(kafka_bootstrap)[0]
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    canonical = [socket.getnameinfo((str(i[4][0]), port), 0)[0] for i in infos]
    client = KafkaClient(kafka_bootstrap,
                         client_dns_lookup="resolve_canonical_bootstrap_servers_only")
    try:
        await client.bootstrap(10.0)
        assert client.bootstrap_servers == [(host, port)]
        assert [a[0] for a in client._bootstrap_nodes.values()] == list(dict.fromkeys(canonical))
    finally:
        await client.close()
    config = _quiet(bootstrap_servers=kafka_bootstrap,
                    **{"client.dns.lookup": "resolve_canonical_bootstrap_servers_only"})
    async with Producer(config) as producer:
        assert (await producer.send_and_wait(topic, b"c")).offset == 0


async def test_every_address_failing_names_each(blackhole_port: int,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    refused_port = closed.getsockname()[1]
    closed.close()

    async def fake(loop: Any, name: str, p: int) -> list[tuple[int, int, int, Any]]:
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, ("127.0.0.1", refused_port)),
                (socket.AF_INET, socket.SOCK_STREAM, 6, ("127.0.0.1", blackhole_port))]

    monkeypatch.setattr(connection_module, "_resolve", fake)
    t0 = time.monotonic()
    with pytest.raises(KafkaConnectionError) as info:
        await connection_module.BrokerConnection.open("two.test", 9092, connect_timeout_ms=200)
    assert time.monotonic() - t0 < 2.0
    text = str(info.value)
    assert "no address of two.test accepted the connection" in text
    assert "Connection refused" in text and "timed out after 200 ms" in text
