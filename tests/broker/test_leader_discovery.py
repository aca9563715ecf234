"""Finding leaders fast (issue #17 part B), against real brokers.

* KIP-951: a NOT_LEADER_OR_FOLLOWER answer names the new leader and its address; the
  producer follows it at once (no metadata round trip, no retry backoff). One-node:
  a proxy answers one Produce with a hint. Three nodes: the partition's leader moves
  (AlterPartitionReassignments + ElectLeaders) while records are sent.
* KIP-320: metadata from a broker that lags (an older leader epoch) does not move a
  leader back (the unit tests construct such answers; here the hint's epoch survives
  the refreshes that follow it).
* KIP-899 / KIP-1102: the cluster moves to new ports behind a stable bootstrap
  address; the producer rebootstraps after ``metadata_recovery_rebootstrap_trigger_ms``.
* KIP-219: a client quota on the broker; the producer holds off a throttled broker
  for the time it was told, requests never time out, throughput sits near the quota.

Every test is bounded in records and time; the only randomness (record values)
comes from a printed seed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import random
import struct
import time
import uuid
from collections.abc import Callable
from typing import Any, cast

import pytest
from kio.schema.errors import ErrorCode
from kio.static.primitive import f64, i8, i32, i32Timedelta
from support.kafka_util import consume_all, create_topic
from support.produce_response import (
    AnsweringProxy,
    AnsweringProxyCluster,
    _synthesized_response,
    decode_produce_response_body,
    encode_produce_response_body,
)

from aioproducer import Producer
from aioproducer.devbroker import LocalKafka
from aioproducer.net.client import KafkaClient
from aioproducer.net.connection import BrokerConnection
from aioproducer.net.protocol import build_entity, request_module
from aioproducer.testing.faultproxy import API_PRODUCE, FaultProxy, _Conn

NOT_LEADER = int(ErrorCode.not_leader_or_follower)
pytestmark = pytest.mark.asyncio
ONE_LOOP = pytest.mark.asyncio(loop_factories=["asyncio"])  # long tests: asyncio only
BOUND = 60.0  # seconds: no test here waits longer for anything

ALTER_REASSIGNMENTS = 45
ELECT_LEADERS = 43
ALTER_CLIENT_QUOTAS = 49


def _seed() -> random.Random:
    seed = random.randrange(1 << 30)
    print(f"\nseed {seed}")
    return random.Random(seed)


def _values(rng: random.Random, n: int, size: int = 64) -> list[bytes]:
    """``n`` distinct values: the index, then seeded filler."""
    return [b"%08d:" % i + rng.randbytes(size - 9) for i in range(n)]


def _assert_once(consumed: list[Any], values: list[bytes]) -> None:
    got = [c.value for c in consumed]
    missing = set(values) - set(got)
    assert not missing, f"{len(missing)} record(s) missing"
    dups = len(got) - len(set(got))
    assert dups == 0, f"{dups} duplicate record(s)"


# -- KIP-951, one node: a proxy answers with a hint ------------------------------------


class HintingProxy(AnsweringProxy):
    """Answers the Produce requests chosen by ``answer_produce`` with
    NOT_LEADER_OR_FOLLOWER carrying ``hint`` = ``(leader, epoch, (host, port))``."""

    hint: tuple[int, int, tuple[str, int]] | None = None

    async def _answer_now(self, conn: _Conn, version: int, corr: int, request: Any,
                          error_code: int) -> None:
        while conn.pending:
            await asyncio.sleep(0.001)
        await asyncio.sleep(0.02)
        self.answered.append((corr, request))
        frame = _synthesized_response(version, corr, request, error_code)
        if self.hint is not None:
            frame = _with_hint(frame, *self.hint)
        conn.client_writer.write(frame)
        await conn.client_writer.drain()


def _with_hint(frame: bytes, leader: int, epoch: int, addr: tuple[str, int]) -> bytes:
    head = 4 + 4 + 1  # size, correlation id, empty tagged fields (response header v1)
    version, resp = decode_produce_response_body(frame[head:])
    mod = __import__(type(resp).__module__, fromlist=["x"])
    topics = []
    for t in resp.responses:
        parts = tuple(dataclasses.replace(p, current_leader=mod.LeaderIdAndEpoch(
            leader_id=i32(leader), leader_epoch=i32(epoch))) for p in t.partition_responses)
        topics.append(dataclasses.replace(t, partition_responses=parts))
    resp = dataclasses.replace(resp, responses=tuple(topics), node_endpoints=(
        mod.NodeEndpoint(node_id=i32(leader), host=addr[0], port=i32(addr[1]), rack=None),))
    body = frame[4:head] + encode_produce_response_body(version, resp)
    return struct.pack(">i", len(body)) + body


class HintingProxyCluster(AnsweringProxyCluster):
    async def _add(self, node_id: int, host: str, port: int) -> FaultProxy:
        proxy = HintingProxy(host, port, rewrite_addresses=self._rewrite)
        self.proxies[node_id] = proxy
        await proxy.start()
        return proxy


async def test_leader_hint_redirects_at_once(kafka_bootstrap: str,
                                             topic_factory: Callable[..., str]) -> None:
    """One Produce answered NOT_LEADER_OR_FOLLOWER with a hint (same node, next epoch):
    the retry goes out at once although retry_backoff_ms is 5 s, the hint is counted,
    the records are delivered once, and the metadata refreshes that follow (from a
    broker still at the older epoch) keep the hinted epoch."""
    topic = topic_factory(partitions=1)
    rng = _seed()
    values = _values(rng, 20)
    async with HintingProxyCluster.start(kafka_bootstrap) as proxies, \
            Producer(bootstrap_servers=proxies.bootstrap, linger_ms=0,
                     retry_backoff_ms=5000, retry_backoff_max_ms=5000,
                     request_timeout_ms=10000, delivery_timeout_ms=30000) as producer:
        await asyncio.wait_for(producer.send_and_wait(topic, values[0]), BOUND)
        md = producer._metadata
        part = md.cluster.topics[topic].partitions[0]
        proxy = cast(HintingProxy, proxies.proxies[part.leader])
        proxy.hint = (part.leader, part.leader_epoch + 1, ("127.0.0.1", proxy.port))
        proxy.answer_produce(NOT_LEADER)
        t0 = time.monotonic()
        await asyncio.wait_for(producer.send_and_wait(topic, values[1]), BOUND)
        took = time.monotonic() - t0
        futs = [await producer.send(topic, v) for v in values[2:]]
        await asyncio.wait_for(asyncio.gather(*futs), BOUND)
        m = producer.metrics()
        after = md.cluster.topics[topic].partitions[0]
    print(f"hinted retry acknowledged {took * 1000:.0f} ms after the send; "
          f"hints used {m['leader-hints-used-total']:.0f}; epoch {part.leader_epoch} -> "
          f"{after.leader_epoch}")
    assert len(proxy.answered) == 1, "the proxy answered nothing: nothing was tested"
    assert m["leader-hints-used-total"] == 1
    assert took < 2.5, f"the retry waited {took:.1f} s: the backoff was not skipped"
    assert after.leader == part.leader and after.leader_epoch == part.leader_epoch + 1
    _assert_once(consume_all(kafka_bootstrap, topic, len(values), timeout=BOUND), values)


# -- KIP-951, three nodes: the leader really moves -------------------------------------


async def _admin(bootstrap: str) -> KafkaClient:
    client = KafkaClient(bootstrap, client_id="leader-discovery-admin")
    await client.bootstrap(BOUND)
    return client


async def _leader(client: KafkaClient, topic: str) -> tuple[int, int, list[int]]:
    """``(leader, epoch, replicas)`` of partition 0 of ``topic``."""
    resp = await client.fetch_metadata([topic], timeout_s=BOUND)
    for t in resp.topics:
        for p in t.partitions:
            if int(p.partition_index) == 0:
                return (int(p.leader_id), int(p.leader_epoch),
                        [int(r) for r in p.replica_nodes])
    raise AssertionError(f"no metadata for {topic}-0")


async def move_leader(client: KafkaClient, topic: str, new_leader: int) -> int:
    """Make ``new_leader`` (a replica) the preferred replica of ``topic``-0 and elect it;
    returns the new leader epoch once the metadata shows it."""
    _, _, replicas = await _leader(client, topic)
    order = [new_leader] + [r for r in replicas if r != new_leader]

    async def reassign(node: int, remaining: float) -> None:
        conn = await client.connect(node, remaining)
        version = conn.version_for(ALTER_REASSIGNMENTS, 0, 0)
        mod = request_module(ALTER_REASSIGNMENTS, version)
        req = build_entity(
            mod.AlterPartitionReassignmentsRequest,
            timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
            topics=(build_entity(mod.ReassignableTopic, name=topic, partitions=(
                build_entity(mod.ReassignablePartition, partition_index=i32(0),
                             replicas=tuple(i32(r) for r in order)),)),))
        resp: Any = await conn.request(req)
        assert int(resp.error_code) == 0, resp
        for t in resp.responses:
            for p in t.partitions:
                assert int(p.error_code) == 0, p

    async def elect(node: int, remaining: float) -> int:
        conn = await client.connect(node, remaining)
        version = conn.version_for(ELECT_LEADERS, 1, 2)
        mod = request_module(ELECT_LEADERS, version)
        req = build_entity(
            mod.ElectLeadersRequest, election_type=i8(0),
            topic_partitions=(build_entity(mod.TopicPartitions, topic=topic,
                                           partitions=(i32(0),)),),
            timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)))
        resp: Any = await conn.request(req)
        codes = [int(p.error_code) for r in resp.replica_election_results
                 for p in r.partition_result]
        return codes[0] if codes else 0

    await client.on_any_node(reassign, BOUND, "reassign")
    deadline = time.monotonic() + BOUND
    while True:
        code = await client.on_any_node(elect, BOUND, "elect")
        leader, epoch, replicas = await _leader(client, topic)
        if leader == new_leader:
            return epoch
        assert time.monotonic() < deadline, f"leader still {leader} (last code {code})"
        await asyncio.sleep(0.2)


@ONE_LOOP
async def test_leader_move_followed_from_the_hint(kafka_cluster3: LocalKafka) -> None:
    """The leader of a partition moves to another replica while records are sent:
    the old leader's NOT_LEADER_OR_FOLLOWER answers carry the new leader, the producer
    follows the hint (counted), and every record is delivered once (read back by
    confluent-kafka)."""
    bootstrap = kafka_cluster3.bootstrap
    topic = f"leader-move-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, partitions=1, replication=3)
    rng = _seed()
    n = 3000
    values = _values(rng, n)
    admin = await _admin(bootstrap)
    try:
        old, epoch, replicas = await _leader(admin, topic)
        new = next(r for r in replicas if r != old)
        async with Producer(bootstrap_servers=bootstrap, linger_ms=2,
                            retry_backoff_ms=1000, retry_backoff_max_ms=1000,
                            metadata_max_age_ms=300000) as producer:
            futs = []
            mover: asyncio.Task[int] | None = None
            for i, v in enumerate(values):
                futs.append(await producer.send(topic, v))
                if i == n // 3:
                    mover = asyncio.create_task(move_leader(admin, topic, new))
                if i % 20 == 0:
                    await asyncio.sleep(0.002)
            assert mover is not None
            new_epoch = await asyncio.wait_for(mover, BOUND)
            await asyncio.wait_for(asyncio.gather(*futs), BOUND)
            # Keep sending until the move is seen (bounded).
            extra: list[bytes] = []
            deadline = time.monotonic() + 20
            while producer._metadata.cluster.leader_for(topic, 0) != new \
                    and time.monotonic() < deadline:
                v = b"extra:%d:" % len(extra) + rng.randbytes(16)
                extra.append(v)
                await asyncio.wait_for(producer.send_and_wait(topic, v), BOUND)
                await asyncio.sleep(0.05)
            m = producer.metrics()
            leader_now = producer._metadata.cluster.leader_for(topic, 0)
    finally:
        await admin.close()
    print(f"leader {old} (epoch {epoch}) -> {new} (epoch {new_epoch}); hints used "
          f"{m['leader-hints-used-total']:.0f}; retries {m['record-retry-total']:.0f}")
    assert leader_now == new
    assert m["leader-hints-used-total"] >= 1, "the move was not followed from a hint"
    assert m["record-error-total"] == 0
    _assert_once(consume_all(bootstrap, topic, n + len(extra), timeout=BOUND),
                 values + extra)


# -- KIP-899 / KIP-1102: rebootstrap ---------------------------------------------------


@ONE_LOOP
async def test_rebootstrap_when_the_cluster_moves(kafka_bootstrap: str,
                                                  topic_factory: Callable[..., str]) -> None:
    """The broker is reached through a proxy that stands for its advertised address;
    the bootstrap address is another, stable proxy. The "cluster restarts on new
    ports": the first proxy goes away and the metadata now advertises a new one. No
    known broker answers, so after metadata_recovery_rebootstrap_trigger_ms the
    producer goes back to the bootstrap address, learns the new port and delivers."""
    topic = topic_factory(partitions=1)
    host, port = kafka_bootstrap.split(",")[0].rsplit(":", 1)
    advertised: dict[str, tuple[str, int]] = {}

    async def rewrite(node_id: int, h: str, p: int) -> tuple[str, int] | None:
        return advertised.get("now")

    old = FaultProxy(host, int(port), rewrite_addresses=rewrite)
    new = FaultProxy(host, int(port), rewrite_addresses=rewrite)
    stable = FaultProxy(host, int(port), rewrite_addresses=rewrite)
    for proxy in (old, new, stable):
        await proxy.start()
    advertised["now"] = ("127.0.0.1", old.port)
    try:
        async with Producer(bootstrap_servers=stable.address, linger_ms=0,
                            metadata_recovery_rebootstrap_trigger_ms=1000,
                            reconnect_backoff_ms=20, reconnect_backoff_max_ms=200,
                            request_timeout_ms=5000, delivery_timeout_ms=60000) as producer:
            await asyncio.wait_for(producer.send_and_wait(topic, b"before"), BOUND)
            client = producer._client
            assert client is not None
            assert set(client.nodes.values()) == {("127.0.0.1", old.port)}
            # The move: the old address stops answering, the new one is advertised.
            advertised["now"] = ("127.0.0.1", new.port)
            await old.close()
            t0 = time.monotonic()
            await asyncio.wait_for(producer.send_and_wait(topic, b"after"), BOUND)
            took = time.monotonic() - t0
            rebootstraps = client.rebootstraps
            nodes = client.nodes
    finally:
        for proxy in (new, stable):
            await proxy.close()
    print(f"delivered {took:.2f} s after the move; rebootstraps {rebootstraps}")
    assert rebootstraps >= 1
    assert set(nodes.values()) == {("127.0.0.1", new.port)}
    assert took >= 0.9  # not before the trigger
    got = [c.value for c in consume_all(kafka_bootstrap, topic, 2, timeout=BOUND)]
    assert got == [b"before", b"after"]


# -- KIP-219: quotas -------------------------------------------------------------------


async def _set_quota(bootstrap: str, client_id: str, rate: float | None) -> None:
    client = await _admin(bootstrap)

    async def op(node: int, remaining: float) -> None:
        conn = await client.connect(node, remaining)
        version = conn.version_for(ALTER_CLIENT_QUOTAS, 0, 1)
        mod = request_module(ALTER_CLIENT_QUOTAS, version)
        req = build_entity(mod.AlterClientQuotasRequest, validate_only=False, entries=(
            build_entity(mod.EntryData, entity=(
                build_entity(mod.EntityData, entity_type="client-id", entity_name=client_id),),
                ops=(build_entity(mod.OpData, key="producer_byte_rate",
                                  value=f64(rate or 0.0), remove=rate is None),)),))
        resp: Any = await conn.request(req)
        for e in resp.entries:
            assert int(e.error_code) == 0, e

    try:
        await client.on_any_node(op, BOUND, "alter client quotas")
    finally:
        await client.close()


@ONE_LOOP
@pytest.mark.slow
async def test_quota_throttle_is_honoured(kafka_bootstrap: str,
                                          topic_factory: Callable[..., str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A producer_byte_rate quota of 100 KB/s for the client id: the producer stops
    sending to the broker for each throttle_time_ms it is told (no Produce is written
    to a muted connection), no request times out, the rate sits within 0.5x-1.5x of
    the quota over a bounded run (2 MB, 10-20 s; the broker measures the rate over
    at least 10 s, so the first 1 MB passes at once and the bound allows for it),
    and the metrics report the throttle. Slow: the unit tests in
    tests/unit/test_leader_hints.py cover the mute quickly."""
    topic = topic_factory(partitions=1)
    client_id = f"quota-{uuid.uuid4().hex[:8]}"
    rate = 100_000.0
    await _set_quota(kafka_bootstrap, client_id, rate)
    await asyncio.sleep(1.0)  # the quota reaches the broker's cache

    muted_until: dict[int, float] = {}
    early: list[float] = []
    original = BrokerConnection.send_with_reply

    def spy(self: BrokerConnection, api_key: int, api_version: int, body: Any,
            **kw: Any) -> Any:
        if api_key == API_PRODUCE:
            now = time.monotonic()
            until = muted_until.get(id(self), 0.0)
            if now < until:
                early.append(until - now)
            inner = kw["reply"]

            def reply(answer: Any, exc: BaseException | None,
                      conn: BrokerConnection = self) -> None:
                if exc is None:
                    ms = float(answer.throttle_ms)
                    if ms > 0:
                        muted_until[id(conn)] = max(muted_until.get(id(conn), 0.0),
                                                    time.monotonic() + ms / 1000.0)
                inner(answer, exc)

            kw["reply"] = reply
        return original(self, api_key, api_version, body, **kw)

    monkeypatch.setattr(BrokerConnection, "send_with_reply", spy)
    rng = _seed()
    n = 2000
    values = [rng.randbytes(1000) for _ in range(n)]
    try:
        async with Producer(bootstrap_servers=kafka_bootstrap, client_id=client_id,
                            linger_ms=5, batch_size=16384, compression_type="none",
                            request_timeout_ms=10000, delivery_timeout_ms=60000) as producer:
            await asyncio.wait_for(producer.send_and_wait(topic, b"warm-up"), BOUND)
            t0 = time.monotonic()
            futs = [await producer.send(topic, v) for v in values]
            await asyncio.wait_for(asyncio.gather(*futs), BOUND)
            took = time.monotonic() - t0
            m = producer.metrics()
    finally:
        await _set_quota(kafka_bootstrap, client_id, None)
    sent = sum(len(v) for v in values)
    print(f"{sent} bytes in {took:.2f} s = {sent / took / 1000:.0f} KB/s (quota "
          f"{rate / 1000:.0f} KB/s); throttle max {m['produce-throttle-time-max']:.0f} ms, "
          f"total {m['produce-throttle-time-total']:.0f} ms; sends while muted "
          f"{len(early)}; retries {m['record-retry-total']:.0f}")
    assert m["record-error-total"] == 0
    assert m["record-retry-total"] == 0, "a request failed (timed out?) and was retried"
    assert m["produce-throttle-time-total"] > 0, "the broker never throttled: no test"
    assert not early, f"{len(early)} Produce request(s) written to a muted broker"
    # The broker measures the rate over max(elapsed, 10 s) (quota.window.num 11 x 1 s
    # samples): the first rate x 10 s bytes pass without a throttle, so the bound on
    # what the quota lets through in `took` seconds is rate x (took + 10 s). Without
    # the mute the producer would write the 2 MB in well under a second.
    free = rate * 10.0
    assert sent <= 1.5 * rate * took + free, "faster than the quota allows"
    assert sent / took >= 0.5 * rate, "far slower than the quota"

