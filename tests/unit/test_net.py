"""aioproducer.net: connection framing, version negotiation, Produce encoding, client.

Most tests run against the real broker (``kafka_bootstrap``); the failure modes
(timeouts, truncated or oversized responses, bad correlation ids, KIP-511
fallback) use a tiny scripted broker on 127.0.0.1 in this file.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import io
import socket
import struct
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import confluent_kafka
import crc32c
import pytest
from kio.schema.api_versions.v0.response import ApiVersion as ApiVersionV0
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.api_versions.v2.response import ApiVersion as ApiVersionV2
from kio.schema.api_versions.v2.response import ApiVersionsResponse as ApiVersionsResponseV2
from kio.schema.api_versions.v3.response import ApiVersion as ApiVersionV3
from kio.schema.api_versions.v3.response import ApiVersionsResponse as ApiVersionsResponseV3
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v9 import request as md9_req
from kio.schema.metadata.v12 import request as md12_req
from kio.schema.metadata.v12 import response as md12_resp
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32, i32Timedelta

from aioproducer.errors import (
    BrokerResponseError,
    ConfigError,
    KafkaConnectionError,
    ProtocolError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
)
from aioproducer.net.admin import Admin
from aioproducer.net.client import KafkaClient, parse_bootstrap_servers
from aioproducer.net.connection import BrokerConnection
from aioproducer.net.protocol import (
    PRODUCE_MAX_VERSION,
    PRODUCE_MIN_VERSION,
    decode_produce_response,
    encode_produce_body,
    produce_results,
)

asyncio_test = pytest.mark.asyncio


@pytest.fixture
def bootstrap(kafka_bootstrap: str) -> str:
    """The shared broker (tests/conftest.py), as ``host:port``."""
    return kafka_bootstrap


def _addr(bootstrap: str) -> tuple[str, int]:
    return parse_bootstrap_servers(bootstrap)[0]


# -- a hand-made record batch (test vector; the real builder is native) ----------------


def _varint(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def record_batch(values: list[bytes], keys: list[bytes | None] | None = None,
                 timestamp_ms: int | None = None) -> bytes:
    """A magic-2 RecordBatch, uncompressed, non-idempotent, CreateTime."""
    ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    keys = keys or [None] * len(values)
    records = bytearray()
    for i, (k, v) in enumerate(zip(keys, values, strict=True)):
        body = bytearray(b"\x00")  # attributes
        body += _varint(0)  # timestamp delta
        body += _varint(i)  # offset delta
        body += _varint(-1) if k is None else _varint(len(k)) + k
        body += _varint(len(v)) + v
        body += _varint(0)  # headers
        records += _varint(len(body)) + body
    after_crc = struct.pack(">hiqqqhii", 0, len(values) - 1, ts, ts, -1, -1, -1,
                            len(values)) + records
    crc = crc32c.crc32c(after_crc)
    after_length = struct.pack(">ibI", -1, 2, crc) + after_crc
    return struct.pack(">qi", 0, len(after_length)) + after_length


def consume(bootstrap: str, topic: str, partition: int, count: int,
            timeout_s: float = 30.0) -> list[tuple[int, bytes | None, bytes | None]]:
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"test-net-{uuid.uuid4().hex}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    })
    out: list[tuple[int, bytes | None, bytes | None]] = []
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, partition, 0)])
        deadline = time.monotonic() + timeout_s
        while len(out) < count and time.monotonic() < deadline:
            for msg in consumer.consume(count - len(out), 1.0):
                if msg.error():
                    continue
                out.append((msg.offset(), msg.key(), msg.value()))
    finally:
        consumer.close()
    return out


@contextlib.asynccontextmanager
async def admin(bootstrap: str) -> AsyncIterator[KafkaClient]:
    client = KafkaClient(bootstrap, client_id="test-net")
    try:
        await client.bootstrap(15.0)
        yield client
    finally:
        await client.close()


async def wait_for_topic(client: KafkaClient, topic: str, timeout_s: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        md = await client.fetch_metadata([topic])
        t = md.topics[0]
        if int(t.error_code) == 0 and t.partitions and all(
                int(p.leader_id) >= 0 for p in t.partitions):
            return t
        if time.monotonic() > deadline:
            raise AssertionError(f"topic {topic} has no leaders: {t}")
        await asyncio.sleep(0.1)


@contextlib.asynccontextmanager
async def new_topic(bootstrap: str, partitions: int = 1) -> AsyncIterator[tuple[KafkaClient,
                                                                                str, Any]]:
    name = f"test-net-{uuid.uuid4().hex[:10]}"
    async with admin(bootstrap) as client:
        await Admin(client).create_topics([(name, partitions, 1, {})], 15.0)
        try:
            info = await wait_for_topic(client, name)
            yield client, name, info
        finally:
            await Admin(client).delete_topics([name], 15.0, missing_ok=True)


# -- a scripted broker on 127.0.0.1 --------------------------------------------------


def _frame(correlation_id: int, body: bytes, *, flexible_header: bool) -> bytes:
    header = struct.pack(">i", correlation_id) + (b"\x00" if flexible_header else b"")
    return struct.pack(">i", len(header) + len(body)) + header + body


def _encode(entity: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


def _api_versions_v3_body() -> bytes:
    return _encode(ApiVersionsResponseV3(
        error_code=ErrorCode.none,
        api_keys=(
            ApiVersionV3(api_key=i16(0), min_version=i16(3), max_version=i16(13)),
            ApiVersionV3(api_key=i16(3), min_version=i16(0), max_version=i16(12)),
            ApiVersionV3(api_key=i16(18), min_version=i16(0), max_version=i16(3)),
        ),
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
    ))


def _metadata_v12_body(n_topics: int = 0) -> bytes:
    return _encode(md12_resp.MetadataResponse(
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
        brokers=(md12_resp.MetadataResponseBroker(node_id=md12_resp.BrokerId(7),
                                                  host="127.0.0.1", port=i32(1)),),
        cluster_id="fake",
        controller_id=md12_resp.BrokerId(7),
        topics=tuple(
            md12_resp.MetadataResponseTopic(
                error_code=ErrorCode.none, name=md12_resp.TopicName(f"topic-{i:06d}"),
                topic_id=uuid.UUID(int=i + 1), partitions=(),
                topic_authorized_operations=i32(-2147483648))
            for i in range(n_topics)
        ),
    ))


class FakeBroker:
    """Answers ApiVersions, then misbehaves on every other request as ``mode`` says.

    Modes: ``mute`` (never answers anything), ``silent`` (ApiVersions only),
    ``ok`` (Metadata v12 answers), ``close_mid`` (half a response, then close),
    ``huge``/``negative`` (absurd frame size), ``bad_cid`` (wrong correlation id),
    ``scramble`` (answers 5 requests at once, in odd-sized pieces), ``kip511``
    (ApiVersions v3 unsupported; answers v2).
    """

    def __init__(self, mode: str, n_topics: int = 0) -> None:
        self.mode = mode
        self.n_topics = n_topics
        self.port = 0
        self.requests: list[tuple[int, int, int]] = []
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    async def __aenter__(self) -> FakeBroker:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for w in list(self._writers):
            w.close()  # the handler's next read sees EOF and it returns
        if self._handlers:
            await asyncio.wait(list(self._handlers), timeout=5)
        await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            await self._serve(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            self._writers.discard(writer)
            self._handlers.discard(task)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        pending: list[bytes] = []
        while True:
            size = int.from_bytes(await reader.readexactly(4), "big")
            frame = await reader.readexactly(size)
            api_key, version, cid = struct.unpack(">hhi", frame[:8])
            self.requests.append((api_key, version, cid))
            if self.mode == "mute":
                continue
            if api_key == 18:
                writer.write(self._api_versions(version, cid))
                await writer.drain()
                continue
            response = _frame(cid, _metadata_v12_body(self.n_topics), flexible_header=True)
            if self.mode == "silent":
                continue
            if self.mode == "ok":
                writer.write(response)
            elif self.mode == "close_mid":
                writer.write(response[: len(response) // 2])
                await writer.drain()
                return
            elif self.mode == "huge":
                writer.write(struct.pack(">i", 0x7FFFFFF0) + b"\x00" * 16)
            elif self.mode == "negative":
                writer.write(struct.pack(">i", -5))
            elif self.mode == "bad_cid":
                writer.write(_frame(cid + 1000, b"", flexible_header=True))
            elif self.mode == "scramble":
                pending.append(response)
                if len(pending) == 5:
                    data = b"".join(pending)
                    pending.clear()
                    sizes = [1, 2, 3, 4, 5, 7, 11, 64, 1000, 4099]
                    pos = i = 0
                    while pos < len(data):
                        n = sizes[i % len(sizes)]
                        writer.write(data[pos:pos + n])
                        await writer.drain()
                        await asyncio.sleep(0)
                        pos += n
                        i += 1
            await writer.drain()

    def _api_versions(self, version: int, cid: int) -> bytes:
        if self.mode == "kip511" and version > 2:
            body = _encode(ApiVersionsResponseV0(
                error_code=ErrorCode.unsupported_version,
                api_keys=(ApiVersionV0(api_key=i16(18), min_version=i16(0),
                                       max_version=i16(2)),),
            ))
            return _frame(cid, body, flexible_header=False)
        if self.mode == "kip511":
            body = _encode(ApiVersionsResponseV2(
                error_code=ErrorCode.none,
                api_keys=(ApiVersionV2(api_key=i16(3), min_version=i16(1),
                                       max_version=i16(9)),
                          ApiVersionV2(api_key=i16(18), min_version=i16(0),
                                       max_version=i16(2))),
                throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
            ))
            return _frame(cid, body, flexible_header=False)
        return _frame(cid, _api_versions_v3_body(), flexible_header=False)


def _metadata_request() -> md12_req.MetadataRequest:
    return md12_req.MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                    include_topic_authorized_operations=False)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


# -- configuration ---------------------------------------------------------------------


def test_parse_bootstrap_servers() -> None:
    assert parse_bootstrap_servers("a:1, b:2,,") == [("a", 1), ("b", 2)]
    assert parse_bootstrap_servers(["a:1,b:2", "[::1]:9092"]) == [
        ("a", 1), ("b", 2), ("::1", 9092)]
    for bad, text in [("", "empty"), ("host", "host:port"), ("h:x", "not a number"),
                      ("h:0", "out of range"), (":9092", "host is empty"),
                      ("::1:9092", "IPv6")]:
        with pytest.raises(ConfigError, match=text):
            parse_bootstrap_servers(bad)
    with pytest.raises(ValueError):
        KafkaClient("nope")


# -- Produce encoding --------------------------------------------------------------


@pytest.mark.parametrize("version", range(PRODUCE_MIN_VERSION, PRODUCE_MAX_VERSION + 1))
def test_produce_body_matches_kio(version: int) -> None:
    import importlib

    mod = importlib.import_module(f"kio.schema.produce.v{version}.request")
    b1 = record_batch([b"one", b"two"])
    b2 = record_batch([b"three"], keys=[b"k"])
    tid1, tid2 = uuid.uuid4(), uuid.uuid4()
    topics = [("alpha", tid1, [(0, memoryview(b1)), (3, memoryview(b2))]),
              ("béta", tid2, [(1, memoryview(b""))])]
    parts = encode_produce_body(version, transactional_id="tx-1", acks=-1, timeout_ms=1234,
                                topics=topics)
    # The record buffers are passed through, not copied.
    assert any(isinstance(p, memoryview) and p.obj is b1 for p in parts)
    assert any(isinstance(p, memoryview) and p.obj is b2 for p in parts)
    raw = b"".join(parts)

    decoded, end = entity_reader(mod.ProduceRequest)(raw, 0)
    assert end == len(raw)
    assert decoded.transactional_id == "tx-1"
    assert decoded.acks == -1
    assert decoded.timeout == datetime.timedelta(milliseconds=1234)
    got = [(getattr(t, "topic_id", None) or getattr(t, "name", None),
            [(p.index, bytes(p.records)) for p in t.partition_data])
           for t in decoded.topic_data]
    key1, key2 = (tid1, tid2) if version >= 13 else ("alpha", "béta")
    assert got == [(key1, [(0, b1), (3, b2)]), (key2, [(1, b"")])]

    # And byte-for-byte what kio itself writes for the same request.
    def topic(name: str, tid: uuid.UUID, parts: list[tuple[int, bytes]]) -> Any:
        ident: dict[str, Any] = {"topic_id": tid} if version >= 13 else {"name": name}
        return mod.TopicProduceData(**ident, partition_data=tuple(
            mod.PartitionProduceData(index=i32(i), records=r) for i, r in parts))

    req = mod.ProduceRequest(
        transactional_id="tx-1", acks=i16(-1),
        timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=1234)),
        topic_data=(topic("alpha", tid1, [(0, b1), (3, b2)]), topic("béta", tid2, [(1, b"")])),
    )
    assert raw == _encode(req)


def test_produce_body_validation() -> None:
    view = memoryview(record_batch([b"x"]))
    with pytest.raises(ValueError, match="topic 't' has none"):
        encode_produce_body(13, transactional_id=None, acks=1, timeout_ms=1,
                            topics=[("t", None, [(0, view)])])
    with pytest.raises(UnsupportedVersionError):
        encode_produce_body(8, transactional_id=None, acks=1, timeout_ms=1, topics=[])
    with pytest.raises(ValueError, match="acks"):
        encode_produce_body(9, transactional_id=None, acks=2, timeout_ms=1, topics=[])
    # transactional_id None is a null compact string.
    raw = b"".join(encode_produce_body(9, transactional_id=None, acks=0, timeout_ms=5,
                                       topics=[]))
    assert raw == b"\x00" + struct.pack(">hi", 0, 5) + b"\x01" + b"\x00"
    with pytest.raises(ProtocolError):
        decode_produce_response(9, b"\x05\x00")


def test_produce_body_matches_kio_randomized() -> None:
    """Seeded shapes the fixed test above does not reach: several topics, long names
    and transactional ids, record sizes on each varint step, empty partitions and
    topics, every acks; byte-for-byte what kio writes."""
    import importlib
    import random

    seed = random.randrange(2**32)
    print(f"seed {seed}")
    rng = random.Random(seed)
    for _ in range(200):
        version = rng.randint(PRODUCE_MIN_VERSION, PRODUCE_MAX_VERSION)
        mod = importlib.import_module(f"kio.schema.produce.v{version}.request")
        topics: list[Any] = []
        for _ in range(rng.choice((0, 1, 2, 5))):
            name = "".join(rng.choice("ab_-.é9") for _ in range(rng.randint(1, 249)))
            parts = [(rng.randrange(2**31), rng.randbytes(rng.choice((0, 1, 126, 127, 16382,
                                                                      16383, 40000))))
                     for _ in range(rng.choice((0, 1, 3)))]
            topics.append((name, uuid.UUID(int=rng.getrandbits(128) | 1), parts))
        txn = rng.choice((None, "", "t" * rng.randint(1, 400)))
        acks, timeout = rng.choice((-1, 0, 1)), rng.randrange(2**31)
        raw = b"".join(encode_produce_body(
            version, transactional_id=txn, acks=acks, timeout_ms=timeout,
            topics=[(n, t, [(i, memoryview(r)) for i, r in ps]) for n, t, ps in topics]))
        req = mod.ProduceRequest(
            transactional_id=txn, acks=i16(acks),
            timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=timeout)),
            topic_data=tuple(
                mod.TopicProduceData(**({"topic_id": t} if version >= 13 else {"name": n}),
                                     partition_data=tuple(
                                         mod.PartitionProduceData(index=i32(i), records=r)
                                         for i, r in ps))
                for n, t, ps in topics))
        assert raw == _encode(req), (seed, version)


def test_produce_body_refuses_what_it_cannot_encode() -> None:
    view = memoryview(b"x")
    with pytest.raises(ValueError, match="topic 't' has none"):  # the nil id
        encode_produce_body(13, transactional_id=None, acks=1, timeout_ms=1,
                            topics=[("t", uuid.UUID(int=0), [(0, view)])])
    with pytest.raises(ValueError, match="timeout_ms"):
        encode_produce_body(9, transactional_id=None, acks=1, timeout_ms=-1, topics=[])
    with pytest.raises(ValueError, match="timeout_ms"):
        encode_produce_body(9, transactional_id=None, acks=1, timeout_ms=2**31, topics=[])
    with pytest.raises(UnsupportedVersionError):
        encode_produce_body(14, transactional_id=None, acks=1, timeout_ms=1, topics=[])
    with pytest.raises(TypeError):  # a name that is not a str
        encode_produce_body(12, transactional_id=None, acks=1, timeout_ms=1,
                            topics=[(b"t", None, [(0, view)])])


# -- against the real broker -----------------------------------------------------------


@asyncio_test
async def test_api_versions_negotiation(bootstrap: str) -> None:
    host, port = _addr(bootstrap)
    conn = await BrokerConnection.open(host, port, node_id=42, client_id="test-net")
    try:
        assert conn.is_connected and conn.can_write and conn.in_flight == 0
        lo, hi = conn.api_versions[18]
        assert lo == 0 and hi >= 3
        assert conn.api_versions[0][1] >= PRODUCE_MIN_VERSION
        assert conn.version_for(3, 1, 12) == min(12, conn.api_versions[3][1])
        assert conn.version_for(0, 9, 13) == min(13, conn.api_versions[0][1])
        with pytest.raises(UnsupportedVersionError) as info:
            conn.version_for(18, hi + 1, hi + 5)
        text = str(info.value)
        assert "ApiVersions" in text and f"v{lo}..v{hi}" in text
        assert f"v{hi + 1}..v{hi + 5}" in text and "node 42" in text
        with pytest.raises(UnsupportedVersionError, match="does not support api key 9999"):
            conn.version_for(9999, 0, 1)
    finally:
        conn.close()
        await conn.wait_closed()
    assert not conn.is_connected
    assert conn.close_reason == "closed by the client"
    # Write back-pressure is exposed as can_write + on_writable.
    woke: list[bool] = []
    conn.on_writable = lambda: woke.append(True)
    conn.pause_writing()
    assert not conn.can_write
    conn.resume_writing()
    assert conn.can_write and woke == [True]
    conn.close()  # idempotent
    with pytest.raises(KafkaConnectionError, match="closed"):
        conn.send_raw(3, 12, [b""], flexible=True, expect_response=True)


@asyncio_test
async def test_generic_kio_request(bootstrap: str) -> None:
    host, port = _addr(bootstrap)
    conn = await BrokerConnection.open(host, port)
    try:
        typed = await conn.request(_metadata_request(), md12_resp.MetadataResponse)
        assert isinstance(typed, md12_resp.MetadataResponse)
        assert typed.brokers and typed.cluster_id
        # Without a response type the class is looked up in kio.
        untyped = await conn.request(md9_req.MetadataRequest(
            topics=(), allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False))
        assert type(untyped).__module__ == "kio.schema.metadata.v9.response"
        with pytest.raises(ValueError, match="does not answer"):
            await conn.request(_metadata_request(), ApiVersionsResponseV3)
        # Pipelining: many requests in flight at once, answered in order.
        results = await asyncio.gather(*(
            conn.request(_metadata_request(), md12_resp.MetadataResponse)
            for _ in range(20)))
        assert all(r.cluster_id == typed.cluster_id for r in results)
        assert conn.in_flight == 0
    finally:
        conn.close()
        await conn.wait_closed()


@asyncio_test
async def test_metadata_and_topic_admin(bootstrap: str) -> None:
    async with admin(bootstrap) as client:
        md = await client.fetch_metadata(None)
        assert md.brokers
        assert set(client.nodes) == {int(b.node_id) for b in md.brokers}
        assert all(n >= 0 for n in client.nodes)
        name = f"test-net-admin-{uuid.uuid4().hex[:8]}"
        topic_admin = Admin(client)
        await topic_admin.create_topics([(name, 3, 1, {"retention.ms": "60000"})], 15.0)
        try:
            await topic_admin.create_topics([(name, 3, 1, {})], 15.0, exist_ok=True)
            with pytest.raises(BrokerResponseError) as info:
                await topic_admin.create_topics([(name, 3, 1, {})], 15.0)
            assert info.value.code == ErrorCode.topic_already_exists
            assert name in str(info.value)
            t = await wait_for_topic(client, name)
            assert t.name == name and len(t.partitions) == 3 and t.topic_id is not None
        finally:
            await topic_admin.delete_topics([name], 15.0)
        with pytest.raises(UnknownTopicOrPartitionError):
            await topic_admin.delete_topics([name], 15.0)
        await topic_admin.delete_topics([name], 15.0, missing_ok=True)
        # Deletion reaches the broker's metadata cache asynchronously.
        deadline = time.monotonic() + 15
        while True:
            md = await client.fetch_metadata([name])
            if int(md.topics[0].error_code) == int(ErrorCode.unknown_topic_or_partition):
                break
            assert time.monotonic() < deadline, md.topics[0]
            await asyncio.sleep(0.1)


@asyncio_test
async def test_produce_every_version(bootstrap: str) -> None:
    async with new_topic(bootstrap) as (client, topic, info):
        leader = int(info.partitions[0].leader_id)
        conn = await client.connect(leader, 10.0)
        lo, hi = conn.api_versions[0]
        versions = [v for v in range(PRODUCE_MIN_VERSION, PRODUCE_MAX_VERSION + 1)
                    if lo <= v <= hi]
        assert versions
        expected: list[tuple[bytes | None, bytes]] = []
        offsets = []
        for v in versions:
            values = [f"v{v}-{i}".encode() for i in range(3)]
            keys: list[bytes | None] = [b"key", None, b""]
            batch = record_batch(values, keys)
            body = encode_produce_body(v, transactional_id=None, acks=-1, timeout_ms=10000,
                                       topics=[(topic, info.topic_id, [(0, memoryview(batch))])])
            for _attempt in range(50):
                # A topic just created may answer NOT_LEADER_OR_FOLLOWER for a moment.
                fut = conn.send_raw(0, v, body, flexible=True, expect_response=True)
                assert fut is not None
                resp = decode_produce_response(v, await fut)
                code = resp.responses[0].partition_responses[0].error_code
                if code != ErrorCode.not_leader_or_follower:
                    break
                await asyncio.sleep(0.1)
            (t,) = resp.responses
            if v >= 13:
                assert t.topic_id == info.topic_id
            else:
                assert t.name == topic
            (p,) = t.partition_responses
            assert p.index == 0 and p.error_code == ErrorCode.none, p
            assert produce_results(resp) == [
                (None, info.topic_id, p) if v >= 13 else (topic, None, p)]
            offsets.append(int(p.base_offset))
            expected.extend(zip(keys, values, strict=True))
        assert offsets == [3 * i for i in range(len(versions))]
        got = await asyncio.to_thread(consume, bootstrap, topic, 0, len(expected))
        assert [(k, v) for _, k, v in got] == expected
        assert [o for o, _, _ in got] == list(range(len(expected)))


@asyncio_test
async def test_produce_acks_zero(bootstrap: str) -> None:
    async with new_topic(bootstrap) as (client, topic, info):
        leader = int(info.partitions[0].leader_id)
        conn = await client.connect(leader, 10.0)
        version = conn.version_for(0, PRODUCE_MIN_VERSION, 12)
        # A topic just created may answer NOT_LEADER_OR_FOLLOWER for a moment, and a
        # broker closes the connection of an acks=0 request that fails: wait until an
        # acks=1 request is taken.
        warm_up = encode_produce_body(version, transactional_id=None, acks=1,
                                      timeout_ms=10000, topics=[(topic, None, [(0, memoryview(
                                          record_batch([b"warm-up"])))])])
        for _attempt in range(50):
            fut = conn.send_raw(0, version, warm_up, flexible=True, expect_response=True)
            assert fut is not None
            warm_up_resp = decode_produce_response(version, await fut)
            code = warm_up_resp.responses[0].partition_responses[0].error_code
            if code != ErrorCode.not_leader_or_follower:
                break
            await asyncio.sleep(0.1)
        assert code == ErrorCode.none
        batch = bytearray(record_batch([b"fire", b"forget"]))
        body = encode_produce_body(version, transactional_id=None, acks=0, timeout_ms=10000,
                                   topics=[(topic, None, [(0, memoryview(batch))])])
        assert conn.send_raw(0, version, body, flexible=True, expect_response=False) is None
        assert conn.in_flight == 0
        batch[:] = b"\xff" * len(batch)  # the caller may reuse its buffer right away
        # Requests on a connection are handled in order: once this acks=1 request
        # is answered, the acks=0 one has been appended.
        body = encode_produce_body(version, transactional_id=None, acks=1, timeout_ms=10000,
                                   topics=[(topic, None, [(0, memoryview(
                                       record_batch([b"sync"])))])])
        fut = conn.send_raw(0, version, body, flexible=True, expect_response=True)
        assert fut is not None
        resp = decode_produce_response(version, await fut)
        p = resp.responses[0].partition_responses[0]
        assert p.error_code == ErrorCode.none and p.base_offset == 3
        got = await asyncio.to_thread(consume, bootstrap, topic, 0, 4)
        assert [v for _, _, v in got] == [b"warm-up", b"fire", b"forget", b"sync"]


@asyncio_test
async def test_client_ready_and_least_loaded(bootstrap: str) -> None:
    client = KafkaClient(bootstrap, reconnect_backoff_ms=20, reconnect_backoff_max_ms=200)
    changes = 0
    woke = asyncio.Event()

    def on_change() -> None:
        nonlocal changes
        changes += 1
        woke.set()

    client.on_ready_change = on_change
    try:
        assert client.least_loaded_node() == -1  # bootstrap pseudo-node before metadata
        md = await client.bootstrap(10.0)
        node = int(md.brokers[0].node_id)
        # The bootstrap connection was kept under the broker's real id.
        assert client.connection(node) is not None
        assert client.least_loaded_node() == node
        assert client.ready(node)
        assert client.in_flight(node) == 0

        # Losing the connection: on_ready_change fires, ready() reconnects after backoff.
        woke.clear()
        conn = client.connection(node)
        assert conn is not None
        conn.close("test")
        await asyncio.wait_for(woke.wait(), 5)
        assert client.connection(node) is None
        deadline = time.monotonic() + 10
        while not client.ready(node):
            assert time.monotonic() < deadline
            woke.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(woke.wait(), 0.5)
        assert client.connection(node) is not conn
        assert changes >= 2
    finally:
        await client.close()
    await client.close()  # idempotent
    assert not client.ready(0)


@asyncio_test
async def test_client_close_leaves_nothing_pending(bootstrap: str) -> None:
    port = _closed_port()
    client = KafkaClient(f"{bootstrap},127.0.0.1:{port}")
    await client.bootstrap(10.0)
    client.update_nodes({**client.nodes, 99: ("127.0.0.1", port)})
    assert not client.ready(99)  # starts a background attempt
    await client.close()
    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    assert others == []


@asyncio_test
async def test_unreachable_node_backoff() -> None:
    port = _closed_port()
    client = KafkaClient(f"127.0.0.1:{port}", reconnect_backoff_ms=500,
                         reconnect_backoff_max_ms=2000)
    try:
        woke = asyncio.Event()
        client.on_ready_change = woke.set
        assert not client.ready(-1)
        await asyncio.wait_for(woke.wait(), 5)
        assert client.connection(-1) is None
        assert 0 < client.backoff_remaining(-1) <= 0.6
        assert client.least_loaded_node() is None  # only node is in backoff
        assert not client.ready(-1) and not client.is_connecting(-1)
        with pytest.raises(KafkaConnectionError, match=f"127.0.0.1:{port}"):
            await client.connect(-1, 2.0)
        # Two failures now: the backoff grew (500 ms * 2, with ±20% jitter).
        assert client.backoff_remaining(-1) > 0.6
    finally:
        await client.close()


# -- failure modes against the scripted broker ---------------------------------------


@asyncio_test
async def test_bootstrap_closed_port_fails_in_time() -> None:
    port, port2 = _closed_port(), _closed_port()
    client = KafkaClient(f"127.0.0.1:{port},127.0.0.1:{port2}")
    start = time.monotonic()
    try:
        with pytest.raises(KafkaConnectionError) as info:
            await client.bootstrap(1.0)
    finally:
        await client.close()
    elapsed = time.monotonic() - start
    assert 0.9 <= elapsed < 3.0
    text = str(info.value)
    assert f"127.0.0.1:{port}:" in text and f"127.0.0.1:{port2}:" in text
    assert "refused" in text.lower()


@asyncio_test
async def test_bootstrap_silent_server_does_not_hang() -> None:
    async with FakeBroker("mute") as fake:
        client = KafkaClient(f"127.0.0.1:{fake.port}", request_timeout_ms=30000)
        start = time.monotonic()
        try:
            with pytest.raises(KafkaConnectionError, match=f"127.0.0.1:{fake.port}"):
                await client.bootstrap(0.5)
        finally:
            await client.close()
        assert time.monotonic() - start < 1.0


@asyncio_test
async def test_timeout_during_api_versions() -> None:
    async with FakeBroker("mute") as fake:
        start = time.monotonic()
        with pytest.raises(RequestTimedOutError, match="ApiVersions v3"):
            await BrokerConnection.open("127.0.0.1", fake.port, request_timeout_ms=200)
        assert 0.19 <= time.monotonic() - start < 1.0


@asyncio_test
async def test_request_timeout_closes_connection() -> None:
    async with FakeBroker("silent") as fake:
        conn = await BrokerConnection.open("127.0.0.1", fake.port, node_id=1,
                                           request_timeout_ms=300)
        lost: list[BrokerConnection] = []
        conn.on_close = lost.append
        start = time.monotonic()
        futs = [asyncio.ensure_future(conn.request(_metadata_request(),
                                                   md12_resp.MetadataResponse))
                for _ in range(3)]
        await asyncio.sleep(0.01)
        assert conn.in_flight == 3
        results = await asyncio.gather(*futs, return_exceptions=True)
        elapsed = time.monotonic() - start
        assert 0.29 <= elapsed < 1.0
        assert isinstance(results[0], RequestTimedOutError)
        assert "within 300 ms" in str(results[0]) and "node 1 at 127.0.0.1" in str(results[0])
        for r in results[1:]:
            assert isinstance(r, KafkaConnectionError)
            assert str(r).startswith(f"connection to node 1 at 127.0.0.1:{fake.port} lost:")
        assert not conn.is_connected and conn.in_flight == 0 and lost == [conn]
        await conn.wait_closed()


@asyncio_test
async def test_per_request_timeout_override() -> None:
    async with FakeBroker("silent") as fake:
        conn = await BrokerConnection.open("127.0.0.1", fake.port, request_timeout_ms=5000)
        slow = conn.send_raw(3, 12, [b""], flexible=True, expect_response=True)
        start = time.monotonic()
        with pytest.raises(RequestTimedOutError, match="within 100 ms"):
            await conn.request(_metadata_request(), md12_resp.MetadataResponse,
                               timeout_ms=100)
        assert time.monotonic() - start < 1.0
        assert slow is not None
        with pytest.raises(KafkaConnectionError):
            await slow
        await conn.wait_closed()


@asyncio_test
async def test_server_closes_mid_response() -> None:
    async with FakeBroker("close_mid", n_topics=50) as fake:
        conn = await BrokerConnection.open("127.0.0.1", fake.port, node_id=3)
        with pytest.raises(KafkaConnectionError, match="lost: the broker closed"):
            await conn.request(_metadata_request(), md12_resp.MetadataResponse)
        await conn.wait_closed()
        assert not conn.is_connected and conn.closed


@pytest.mark.parametrize("mode", ["huge", "negative"])
@asyncio_test
async def test_oversized_frame_is_refused(mode: str) -> None:
    async with FakeBroker(mode) as fake:
        conn = await BrokerConnection.open("127.0.0.1", fake.port)
        with pytest.raises(ProtocolError, match="response frame of"):
            await conn.request(_metadata_request(), md12_resp.MetadataResponse)
        assert not conn.is_connected
        await conn.wait_closed()
        # With two in flight: the head gets the ProtocolError, the other a
        # KafkaConnectionError caused by it.
        conn = await BrokerConnection.open("127.0.0.1", fake.port)
        head = conn.send_raw(3, 12, [b""], flexible=True, expect_response=True)
        second = conn.send_raw(3, 12, [b""], flexible=True, expect_response=True)
        assert head is not None and second is not None
        with pytest.raises(ProtocolError, match="response frame of"):
            await head
        with pytest.raises(KafkaConnectionError, match="lost: protocol error") as info:
            await second
        assert isinstance(info.value.__cause__, ProtocolError)
        await conn.wait_closed()


@asyncio_test
async def test_small_max_response_bytes() -> None:
    async with FakeBroker("ok", n_topics=100) as fake:
        conn = await BrokerConnection.open("127.0.0.1", fake.port, max_response_bytes=1000)
        with pytest.raises(ProtocolError, match=r"allowed: 4\.\.1000"):
            await conn.request(_metadata_request(), md12_resp.MetadataResponse)
        await conn.wait_closed()


@asyncio_test
async def test_wrong_correlation_id() -> None:
    async with FakeBroker("bad_cid") as fake:
        conn = await BrokerConnection.open("127.0.0.1", fake.port)
        with pytest.raises(ProtocolError, match="correlation id"):
            await conn.request(_metadata_request(), md12_resp.MetadataResponse)
        assert not conn.is_connected
        await conn.wait_closed()


@asyncio_test
async def test_fragmented_and_coalesced_responses() -> None:
    async with FakeBroker("scramble", n_topics=3000) as fake:
        conn = await BrokerConnection.open("127.0.0.1", fake.port)
        results = await asyncio.gather(*(
            conn.request(_metadata_request(), md12_resp.MetadataResponse)
            for _ in range(10)))
        for r in results:
            assert len(r.topics) == 3000
            assert r.topics[-1].name == "topic-002999"
        assert conn.in_flight == 0 and conn.is_connected
        conn.close()
        await conn.wait_closed()


@asyncio_test
async def test_cancelled_request_keeps_connection_usable() -> None:
    async with FakeBroker("ok") as fake:
        conn = await BrokerConnection.open("127.0.0.1", fake.port)
        task = asyncio.ensure_future(conn.request(_metadata_request(),
                                                  md12_resp.MetadataResponse))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        r = await conn.request(_metadata_request(), md12_resp.MetadataResponse)
        assert r.cluster_id == "fake"
        conn.close()
        await conn.wait_closed()


@asyncio_test
async def test_kip511_api_versions_fallback() -> None:
    async with FakeBroker("kip511") as fake:
        conn = await BrokerConnection.open("127.0.0.1", fake.port)
        try:
            assert [v for k, v, _ in fake.requests if k == 18] == [3, 2]
            assert conn.api_versions == {3: (1, 9), 18: (0, 2)}
            assert conn.version_for(3, 1, 12) == 9
            with pytest.raises(UnsupportedVersionError, match="does not support Produce"):
                conn.version_for(0, 9, 13)
        finally:
            conn.close()
            await conn.wait_closed()


@asyncio_test
async def test_fetch_metadata_moves_past_dead_nodes(bootstrap: str) -> None:
    port = _closed_port()
    async with admin(bootstrap) as client:
        real = dict(client.nodes)
        client.update_nodes({**real, 500: ("127.0.0.1", port)})
        for _ in range(5):
            md = await client.fetch_metadata([], timeout_s=10.0)
            assert md.brokers
        with contextlib.suppress(KafkaConnectionError):
            await client.connect(500, 1.0)
        client.update_nodes(real)
        assert 500 not in client.nodes


@asyncio_test
async def test_send_with_reply_answers_without_a_future() -> None:
    """The Produce path's way: ``reply(decode(body), None)`` in the turn the response
    arrives, nothing returned, and the connection's bookkeeping as for a future."""
    async with FakeBroker("ok", n_topics=2) as fake:
        conn = await BrokerConnection.open("127.0.0.1", fake.port)
        got: list[tuple[Any, BaseException | None]] = []
        arrived = asyncio.get_running_loop().create_future()

        def reply(answer: Any, exc: BaseException | None) -> None:
            got.append((answer, exc))
            if len(got) == 2:
                arrived.set_result(None)

        body = _encode(_metadata_request())
        for _ in range(2):
            assert conn.send_with_reply(3, 12, [body], flexible=True, reply=reply,
                                        decode=lambda b: bytes(b)) is None
        assert conn.in_flight == 2
        await asyncio.wait_for(arrived, 5)
        assert [exc for _, exc in got] == [None, None]
        assert got[0][0] == got[1][0] == _metadata_v12_body(2)
        assert conn.in_flight == 0 and conn.is_connected
        conn.close()
        await conn.wait_closed()
        with pytest.raises(KafkaConnectionError, match="closed"):
            conn.send_with_reply(3, 12, [body], flexible=True, reply=reply,
                                 decode=lambda b: bytes(b))
        assert len(got) == 2  # a request that could not be written gets no reply


@pytest.mark.parametrize("mode", ["silent", "huge", "close_mid", "undecodable", "closed"])
@asyncio_test
async def test_send_with_reply_failures(mode: str) -> None:
    """Each way a request with a reply can fail calls ``reply(None, error)`` once, with
    the error a future would have had, and later requests on the connection fail as
    lost."""
    async with FakeBroker("ok" if mode in ("undecodable", "closed") else mode,
                          n_topics=50) as fake:
        conn = await BrokerConnection.open("127.0.0.1", fake.port, request_timeout_ms=300)
        loop = asyncio.get_running_loop()
        got: list[tuple[Any, BaseException | None]] = []
        done = loop.create_future()

        def reply(answer: Any, exc: BaseException | None) -> None:
            got.append((answer, exc))
            if len(got) == 2:
                done.set_result(None)

        def decode(body: memoryview) -> bytes:
            if mode == "undecodable":
                raise ValueError("not the response")
            return bytes(body)

        body = _encode(_metadata_request())
        for _ in range(2):
            conn.send_with_reply(3, 12, [body], flexible=True, reply=reply, decode=decode)
        if mode == "closed":
            conn.close("closed by the test")
            assert got == []  # the replies come in a later turn of the loop
        await asyncio.wait_for(done, 5)
        await asyncio.sleep(0.05)
        assert len(got) == 2 and all(answer is None for answer, _ in got)
        first, second = got[0][1], got[1][1]
        expected = {"silent": (RequestTimedOutError, "within 300 ms"),
                    "huge": (ProtocolError, "response frame of"),
                    "close_mid": (KafkaConnectionError, "lost: the broker closed"),
                    "undecodable": (ProtocolError, "malformed Metadata v12 response"),
                    "closed": (KafkaConnectionError, "lost: closed by the test")}[mode]
        assert isinstance(first, expected[0]) and expected[1] in str(first), first
        assert isinstance(second, KafkaConnectionError), second
        assert not conn.is_connected and conn.in_flight == 0
        await conn.wait_closed()
