"""Leader epochs (KIP-320) and leader hints (KIP-951) in the metadata snapshot, the
rebootstrap trigger (KIP-899/KIP-1102) and node throttling (KIP-219) of the client,
with constructed responses: no broker."""

from __future__ import annotations

import asyncio
import time
import uuid
from types import SimpleNamespace
from typing import Any

import pytest

from aioproducer.config import ProducerConfig
from aioproducer.errors import ConfigError, KafkaConnectionError
from aioproducer.metadata import Cluster, Metadata
from aioproducer.net.client import KafkaClient

TID = uuid.UUID(int=7)


def _response(parts: list[tuple[int, int, int]], *, nodes: tuple[int, ...] = (1, 2, 3),
              topic: str = "t", topic_id: uuid.UUID = TID) -> Any:
    """A MetadataResponse-shaped object: ``parts`` is [(partition, leader, epoch)]."""
    return SimpleNamespace(
        brokers=[SimpleNamespace(node_id=n, host="127.0.0.1", port=9000 + n) for n in nodes],
        topics=[SimpleNamespace(
            name=topic, error_code=0, topic_id=topic_id,
            partitions=[SimpleNamespace(partition_index=p, leader_id=leader, leader_epoch=e)
                        for p, leader, e in parts])])


def _metadata(parts: list[tuple[int, int, int]], **kw: Any) -> Metadata:
    md = Metadata(max_age_ms=300000, retry_backoff_ms=100)
    md.add_topic("t")
    md.refresh_done(time.monotonic(), Cluster.from_response(_response(parts, **kw)), ["t"])
    return md


# -- item 6: leader epochs -------------------------------------------------------------

def test_stale_response_keeps_the_newer_leader() -> None:
    md = _metadata([(0, 1, 5), (1, 2, 3)])
    # A stale broker answers: partition 0 back to node 2 at epoch 4 (older),
    # partition 1 moved to node 3 at epoch 4 (newer).
    md.refresh_done(time.monotonic(),
                    Cluster.from_response(_response([(0, 2, 4), (1, 3, 4)])), ["t"])
    c = md.cluster
    assert c.leader_for("t", 0) == 1
    assert c.topics["t"].partitions[0].leader_epoch == 5
    assert c.leader_for("t", 1) == 3
    assert c.topics["t"].partitions[1].leader_epoch == 4
    assert c.topics["t"].available == (0, 1)


def test_same_epoch_and_unknown_epochs_take_the_new_answer() -> None:
    md = _metadata([(0, 1, 5), (1, 2, -1)])
    md.refresh_done(time.monotonic(),
                    Cluster.from_response(_response([(0, 2, 5), (1, 3, 2)])), ["t"])
    assert md.cluster.leader_for("t", 0) == 2  # same epoch: the newer answer wins (Java)
    assert md.cluster.leader_for("t", 1) == 3  # no epoch known before
    md.refresh_done(time.monotonic(),
                    Cluster.from_response(_response([(0, 3, -1), (1, 1, 2)])), ["t"])
    assert md.cluster.leader_for("t", 0) == 3  # an answer without epoch: taken


def test_a_recreated_topic_resets_the_epochs() -> None:
    md = _metadata([(0, 1, 9)])
    other = uuid.UUID(int=8)
    md.refresh_done(time.monotonic(),
                    Cluster.from_response(_response([(0, 2, 0)], topic_id=other)), ["t"])
    assert md.cluster.leader_for("t", 0) == 2
    assert md.cluster.topics["t"].topic_id == other


def test_a_kept_leader_missing_from_the_nodes_is_unknown() -> None:
    md = _metadata([(0, 1, 5)])
    # The stale answer does not list node 1 at all: the newer leader is kept, but
    # without an address it is not usable, so the partition has no known leader
    # (the Sender asks for metadata again) rather than the stale one.
    md.refresh_done(time.monotonic(),
                    Cluster.from_response(_response([(0, 2, 4)], nodes=(2, 3))), ["t"])
    assert md.cluster.leader_for("t", 0) is None
    assert md.cluster.topics["t"].partitions[0].leader_epoch == 5
    assert md.cluster.topics["t"].available == ()


def test_other_topics_are_untouched_by_a_partial_refresh() -> None:
    md = _metadata([(0, 1, 5)])
    md.add_topic("u")
    md.refresh_done(time.monotonic(), Cluster.from_response(
        _response([(0, 3, 1)], topic="u", topic_id=uuid.UUID(int=9))), ["u"])
    assert md.cluster.leader_for("t", 0) == 1
    assert md.cluster.leader_for("u", 0) == 3


# -- item 7: leader hints --------------------------------------------------------------

def test_leader_hint_with_a_newer_epoch_moves_the_leader() -> None:
    md = _metadata([(0, 1, 5), (1, 1, 5)])
    version = md.version
    assert md.apply_leader_hint("t", 0, 4, 6, {4: ("127.0.0.1", 9004)})
    c = md.cluster
    assert c.leader_for("t", 0) == 4
    assert c.leader_for("t", 1) == 1
    assert c.nodes[4] == ("127.0.0.1", 9004)
    assert c.topics["t"].partitions[0].leader_epoch == 6
    assert c.topics["t"].available == (0, 1)
    assert md.version == version + 1
    # A metadata answer from a broker that has not seen epoch 6 yet does not undo it.
    md.refresh_done(time.monotonic(),
                    Cluster.from_response(_response([(0, 1, 5), (1, 1, 5)],
                                                    nodes=(1, 2, 3, 4))), ["t"])
    assert md.cluster.leader_for("t", 0) == 4


@pytest.mark.parametrize(("leader", "epoch", "endpoints"), [
    (2, 5, {}),                              # same epoch: not newer
    (2, 4, {}),                              # older epoch
    (-1, 6, {}),                             # no leader
    (2, -1, {}),                             # no epoch
    (9, 6, {}),                              # node 9 unknown and no endpoint given
])
def test_leader_hints_that_are_ignored(leader: int, epoch: int,
                                       endpoints: dict[int, tuple[str, int]]) -> None:
    md = _metadata([(0, 1, 5)])
    version = md.version
    assert not md.apply_leader_hint("t", 0, leader, epoch, endpoints)
    assert md.cluster.leader_for("t", 0) == 1
    assert md.version == version


def test_leader_hint_for_an_unknown_partition_is_ignored() -> None:
    md = _metadata([(0, 1, 5)])
    assert not md.apply_leader_hint("t", 3, 2, 6, {})
    assert not md.apply_leader_hint("nope", 0, 2, 6, {})
    assert md.apply_leader_hint("t", 0, 2, 6, {})  # a known node needs no endpoint


# -- item 8: rebootstrap ---------------------------------------------------------------

def test_recovery_config_is_checked() -> None:
    c = ProducerConfig().validated()
    assert c.metadata_recovery_strategy == "rebootstrap"
    assert c.metadata_recovery_rebootstrap_trigger_ms == 300000
    assert ProducerConfig(metadata_recovery_strategy="none").validated() \
        .metadata_recovery_strategy == "none"
    with pytest.raises(ConfigError, match="metadata_recovery_strategy"):
        ProducerConfig(metadata_recovery_strategy="sometimes").validated()
    with pytest.raises(ConfigError, match="metadata_recovery_rebootstrap_trigger_ms"):
        ProducerConfig(metadata_recovery_rebootstrap_trigger_ms=-1).validated()


def _closed_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.asyncio
async def test_rebootstrap_after_the_trigger_when_no_node_answers() -> None:
    boot = _closed_port()
    client = KafkaClient(f"127.0.0.1:{boot}", reconnect_backoff_ms=5,
                         reconnect_backoff_max_ms=20, connect_timeout_ms=500,
                         metadata_recovery_strategy="rebootstrap",
                         metadata_recovery_rebootstrap_trigger_ms=300)
    try:
        stale = _closed_port()
        client.update_nodes({1: ("127.0.0.1", stale)})
        assert client.nodes == {1: ("127.0.0.1", stale)}

        async def op(node: int, remaining: float) -> int:
            await client.connect(node, remaining)
            return node

        with pytest.raises(KafkaConnectionError):
            await client.on_any_node(op, 0.1, "test")
        assert client.rebootstraps == 0
        with pytest.raises(KafkaConnectionError):
            await client.on_any_node(op, 0.5, "test")
        # No known node answered for 300 ms: back to the bootstrap servers.
        assert client.rebootstraps == 1
        assert client.nodes == {-1: ("127.0.0.1", boot)}
    finally:
        await client.close()


@pytest.mark.asyncio
async def test_no_rebootstrap_with_strategy_none() -> None:
    client = KafkaClient(f"127.0.0.1:{_closed_port()}", reconnect_backoff_ms=5,
                         reconnect_backoff_max_ms=20, connect_timeout_ms=500,
                         metadata_recovery_strategy="none",
                         metadata_recovery_rebootstrap_trigger_ms=50)
    try:
        stale = _closed_port()
        client.update_nodes({1: ("127.0.0.1", stale)})

        async def op(node: int, remaining: float) -> int:
            await client.connect(node, remaining)
            return node

        with pytest.raises(KafkaConnectionError):
            await client.on_any_node(op, 0.4, "test")
        assert client.rebootstraps == 0
        assert client.nodes == {1: ("127.0.0.1", stale)}
    finally:
        await client.close()


@pytest.mark.asyncio
async def test_rebootstrap_required_error_code() -> None:
    client = KafkaClient("127.0.0.1:1", metadata_recovery_strategy="rebootstrap")
    try:
        client.update_nodes({1: ("127.0.0.1", 2)})
        client.check_rebootstrap_required(SimpleNamespace(error_code=0))
        assert client.rebootstraps == 0
        with pytest.raises(KafkaConnectionError, match="REBOOTSTRAP_REQUIRED"):
            client.check_rebootstrap_required(SimpleNamespace(error_code=129))
        assert client.rebootstraps == 1
        assert client.nodes == {-1: ("127.0.0.1", 1)}
    finally:
        await client.close()


# -- item 9: throttling ----------------------------------------------------------------

@pytest.mark.asyncio
async def test_throttled_node_is_not_ready_until_the_time_passed() -> None:
    client = KafkaClient("127.0.0.1:1")
    woken: list[float] = []
    client.on_ready_change = lambda: woken.append(time.monotonic())
    conn = SimpleNamespace(is_connected=True, in_flight=0, close=lambda *a: None,
                           closed=False, host="127.0.0.1", port=1)
    client._conns[-1] = conn  # type: ignore[assignment]
    try:
        assert client.ready(-1)
        start = time.monotonic()
        client.throttle(-1, 150)
        assert client.throttle_remaining(-1) > 0.1
        assert not client.ready(-1)
        await asyncio.sleep(0.25)
        assert woken and woken[0] - start >= 0.14  # woken when the mute ends
        assert client.throttle_remaining(-1) == 0.0
        assert client.ready(-1)
        client.throttle(-1, 0)
        assert client.ready(-1)
    finally:
        client._conns.clear()
        await client.close()


class _ThrottlingBroker:
    """Answers ApiVersions (v3) and Metadata (v12, no topics) with ``throttle_ms``."""

    def __init__(self, throttle_ms: int) -> None:
        self.throttle_ms = throttle_ms
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []

    async def __aenter__(self) -> _ThrottlingBroker:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for w in self._writers:
            w.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        import datetime
        import io
        import struct

        from kio.schema.api_versions.v3.response import ApiVersion, ApiVersionsResponse
        from kio.schema.errors import ErrorCode
        from kio.schema.metadata.v12 import response as md
        from kio.serial import entity_writer
        from kio.static.primitive import i16, i32, i32Timedelta

        def encode(entity: Any) -> bytes:
            buf = io.BytesIO()
            entity_writer(type(entity))(buf, entity)
            return buf.getvalue()

        def frame(cid: int, body: bytes, flexible: bool) -> bytes:
            head = struct.pack(">i", cid) + (b"\x00" if flexible else b"")
            return struct.pack(">i", len(head) + len(body)) + head + body

        self._writers.append(writer)
        throttle = i32Timedelta.parse(datetime.timedelta(milliseconds=self.throttle_ms))
        try:
            while True:
                size = int.from_bytes(await reader.readexactly(4), "big")
                data = await reader.readexactly(size)
                api_key, _version, cid = struct.unpack(">hhi", data[:8])
                if api_key == 18:
                    writer.write(frame(cid, encode(ApiVersionsResponse(
                        error_code=ErrorCode.none, throttle_time=throttle, api_keys=(
                            ApiVersion(api_key=i16(3), min_version=i16(0),
                                       max_version=i16(12)),
                            ApiVersion(api_key=i16(18), min_version=i16(0),
                                       max_version=i16(3))))), flexible=False))
                else:
                    writer.write(frame(cid, encode(md.MetadataResponse(
                        throttle_time=throttle, cluster_id="fake",
                        controller_id=md.BrokerId(-1), topics=(),
                        brokers=(md.MetadataResponseBroker(
                            node_id=md.BrokerId(-1), host="127.0.0.1",
                            port=i32(self.port)),))), flexible=True))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass


@pytest.mark.asyncio
async def test_a_throttled_metadata_answer_mutes_the_node() -> None:
    """KIP-219 for the control plane: a Metadata answer with throttle_time_ms mutes
    the node that sent it, as a Produce answer does."""
    async with _ThrottlingBroker(400) as broker:
        client = KafkaClient(f"127.0.0.1:{broker.port}")
        try:
            await client.bootstrap(5.0)
            assert client.throttle_remaining(-1) > 0.3
            assert not client.ready(-1)
        finally:
            await client.close()
