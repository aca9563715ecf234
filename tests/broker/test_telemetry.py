"""KIP-714 client metrics push against a real Kafka 4.3.1 broker.

The broker runs ``support/java/TelemetryRecorder.java`` (compiled here) as a metric
reporter that receives client telemetry: it decodes every pushed OTLP payload with
Kafka's own (shaded) OpenTelemetry classes and appends it to a JSON-lines file. The
client-metrics subscriptions are made with the admin API (IncrementalAlterConfigs on
resource type CLIENT_METRICS), each matching client ids by a pattern so that the tests
do not see each other's producers.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.incremental_alter_configs.v1 import request as iac
from kio.schema.incremental_alter_configs.v1.response import IncrementalAlterConfigsResponse
from kio.static.primitive import i8

from aioproducer import Producer
from aioproducer.devbroker import LocalKafka, ensure_kafka_libs
from aioproducer.errors import IllegalStateError
from aioproducer.net.admin import Admin
from aioproducer.net.client import KafkaClient
from aioproducer.telemetry import TelemetryState

pytestmark = [pytest.mark.broker, pytest.mark.asyncio]

JAVA_SRC = Path(__file__).resolve().parents[1] / "support" / "java" / "TelemetryRecorder.java"
_CLIENT_METRICS = 16  # ConfigResource.Type.CLIENT_METRICS
_SET = 0
INTERVAL_MS = 500
SENT_TOTAL = "org.apache.kafka.producer.record.send.total"


@pytest.fixture(scope="module")
def telemetry_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalKafka, Path]]:
    if shutil.which("javac") is None:
        pytest.skip("needs a JDK (javac) to build the broker-side telemetry receiver")
    root = tmp_path_factory.mktemp("kafka-telemetry")
    classes = root / "classes"
    classes.mkdir()
    subprocess.run(["javac", "-cp", f"{ensure_kafka_libs()}/*", "-d", str(classes),
                    str(JAVA_SRC)], check=True, timeout=180)
    out = root / "pushes.jsonl"
    cluster = LocalKafka(root / "state", nodes=1, extra_classpath=[classes],
                         extra_config={"metric.reporters": "TelemetryRecorder",
                                       "aioproducer.test.telemetry.file": str(out)})
    try:
        cluster.start(timeout=180)
        yield cluster, out
    finally:
        cluster.stop(timeout=30)


async def _admin(bootstrap: str, op: Callable[[KafkaClient], Any]) -> None:
    client = KafkaClient(bootstrap, client_id="telemetry-test-admin", request_timeout_ms=30000)
    try:
        await client.bootstrap(30.0)
        await op(client)
    finally:
        await client.close()


async def subscribe(bootstrap: str, name: str, *, metrics: str, match: str,
                    interval_ms: int = INTERVAL_MS) -> None:
    """Create or change the client-metrics subscription ``name`` (admin API)."""
    async def op(client: KafkaClient) -> None:
        node = client.least_loaded_node()
        assert node is not None
        conn = await client.connect(node, 30.0)
        configs = tuple(iac.AlterableConfig(name=k, config_operation=i8(_SET), value=v)
                        for k, v in (("metrics", metrics), ("interval.ms", str(interval_ms)),
                                     ("match", match)))
        req = iac.IncrementalAlterConfigsRequest(
            resources=(iac.AlterConfigsResource(resource_type=i8(_CLIENT_METRICS),
                                                resource_name=name, configs=configs),),
            validate_only=False)
        resp = await conn.request(req, IncrementalAlterConfigsResponse)
        assert [int(r.error_code) for r in resp.responses] == [0], resp
    await _admin(bootstrap, op)


async def create_topic(bootstrap: str, partitions: int = 2) -> str:
    topic = f"telemetry-{uuid.uuid4().hex[:10]}"

    async def op(client: KafkaClient) -> None:
        await Admin(client).create_topics([(topic, partitions, 1, {})], 30.0)
    await _admin(bootstrap, op)
    return topic


def pushes(path: Path, **match: Any) -> list[dict[str, Any]]:
    """The recorded payloads whose fields equal ``match``."""
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if all(r.get(k) == v for k, v in match.items())]


async def wait_for(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {timeout} s")
        await asyncio.sleep(0.1)


def point_sum(rows: list[dict[str, Any]], name: str, **attrs: str) -> float:
    return float(sum(p["value"] for r in rows for p in r["points"]
                     if p["name"] == name and p["attributes"] == attrs))


async def test_pushes_the_subscribed_metrics_with_their_values(
        telemetry_kafka: tuple[LocalKafka, Path]) -> None:
    cluster, out = telemetry_kafka
    bootstrap = cluster.bootstrap
    await subscribe(bootstrap, "aioproducer-values", metrics="org.apache.kafka.producer.",
                    match="client_id=values-.*")
    topic = await create_topic(bootstrap)
    client_id = f"values-{uuid.uuid4().hex[:8]}"
    n = 300
    async with Producer(bootstrap_servers=bootstrap, client_id=client_id, linger_ms=2,
                        max_block_ms=30000) as producer:
        instance = await producer.client_instance_id(20.0)
        assert isinstance(instance, uuid.UUID) and instance.int != 0
        assert await producer.client_instance_id(0) == instance  # known: no wait
        mine = str(instance)
        for i in range(n):
            await producer.send(topic, b"v%d" % i, key=b"k%d" % (i % 7))
        await producer.flush(30.0)
        # Pushes come every 500 ms (the first after 250-750 ms): the sends show up.
        await wait_for(lambda: point_sum(pushes(out, client_instance_id=mine),
                                         SENT_TOTAL) == n, 20.0, f"push counting {n} records")
        before_close = producer.metrics()
        sub = producer._telemetry.subscription  # type: ignore[union-attr]
        assert sub is not None and sub.push_interval_ms == INTERVAL_MS and sub.delta_temporality
    rows = pushes(out, client_instance_id=mine)
    # The broker saw our client id and instance id; close() sent a terminating push last.
    assert {r["client_id"] for r in rows} == {client_id}
    assert [r["terminating"] for r in rows][-1] is True
    assert sum(r["terminating"] for r in rows) == 1
    assert {r["content_type"] for r in rows} == {"OTLP"}  # PushTelemetryRequest's
    assert len(rows) >= 2
    names = {p["name"] for r in rows for p in r["points"]}
    assert all(name.startswith("org.apache.kafka.producer.") for name in names)
    assert {SENT_TOTAL, "org.apache.kafka.producer.byte.total",
            "org.apache.kafka.producer.request.latency.avg",
            "org.apache.kafka.producer.topic.record.send.total",
            "org.apache.kafka.producer.node.request.total"} <= names
    sent = [p for r in rows for p in r["points"] if p["name"] == SENT_TOTAL]
    assert {(p["type"], p["temporality"], p["monotonic"]) for p in sent} == {("sum", 1, True)}
    # Deltas: the pushes add up to the producer's own totals, exactly.
    assert point_sum(rows, SENT_TOTAL) == n
    assert point_sum(rows, "org.apache.kafka.producer.topic.record.send.total",
                     topic=topic) == n
    assert point_sum(rows, "org.apache.kafka.producer.byte.total") == before_close["byte-total"]
    assert before_close["record-send-total"] == n
    # Each delta starts where the previous one ended.
    spans = [(p["start_ns"], p["time_ns"]) for p in sent]
    assert all(a[1] == b[0] for a, b in itertools.pairwise(spans)), spans
    gauges = [p for r in rows for p in r["points"]
              if p["name"] == "org.apache.kafka.producer.request.latency.avg"]
    assert gauges and {p["type"] for p in gauges} == {"gauge"}
    assert max(p["value"] for p in gauges) > 0


async def test_metrics_push_off_sends_nothing(
        telemetry_kafka: tuple[LocalKafka, Path]) -> None:
    cluster, out = telemetry_kafka
    bootstrap = cluster.bootstrap
    await subscribe(bootstrap, "aioproducer-off", metrics="org.apache.kafka.producer.",
                    match="client_id=off-.*")
    topic = await create_topic(bootstrap, 1)
    client_id = f"off-{uuid.uuid4().hex[:8]}"
    async with Producer(bootstrap_servers=bootstrap, client_id=client_id,
                        enable_metrics_push=False) as producer:
        await producer.send_and_wait(topic, b"v")
        with pytest.raises(IllegalStateError):
            await producer.client_instance_id(1.0)
        assert producer._telemetry is None
        await asyncio.sleep(4 * INTERVAL_MS / 1000)
    await asyncio.sleep(0.5)
    assert pushes(out, client_id=client_id) == []


async def test_no_subscribed_metrics_no_push(
        telemetry_kafka: tuple[LocalKafka, Path]) -> None:
    """A client no subscription matches gets its instance id but pushes nothing, not
    even a terminating push."""
    cluster, out = telemetry_kafka
    bootstrap = cluster.bootstrap
    topic = await create_topic(bootstrap, 1)
    client_id = f"nobody-{uuid.uuid4().hex[:8]}"
    async with Producer(bootstrap_servers=bootstrap, client_id=client_id) as producer:
        instance = await producer.client_instance_id(20.0)
        assert instance is not None
        await producer.send_and_wait(topic, b"v")
        telemetry = producer._telemetry
        assert telemetry is not None and telemetry.subscription is not None
        assert telemetry.subscription.requested_metrics == ()
        assert telemetry.state is TelemetryState.SUBSCRIPTION_NEEDED
        await asyncio.sleep(4 * INTERVAL_MS / 1000)
    await asyncio.sleep(0.5)
    assert pushes(out, client_instance_id=str(instance)) == []
    assert telemetry.pushes == 0


async def test_changed_subscription_is_fetched_again(
        telemetry_kafka: tuple[LocalKafka, Path]) -> None:
    """The subscription changes while the producer runs: the next push is answered
    UNKNOWN_SUBSCRIPTION_ID, the producer fetches the new subscription and pushes the
    newly requested metrics (and only those)."""
    cluster, out = telemetry_kafka
    bootstrap = cluster.bootstrap
    name = "aioproducer-refetch"
    await subscribe(bootstrap, name, metrics="org.apache.kafka.producer.record.",
                    match="client_id=refetch-.*")
    topic = await create_topic(bootstrap, 1)
    client_id = f"refetch-{uuid.uuid4().hex[:8]}"
    async with Producer(bootstrap_servers=bootstrap, client_id=client_id) as producer:
        instance = await producer.client_instance_id(20.0)
        mine = str(instance)
        await producer.send_and_wait(topic, b"v")
        await wait_for(lambda: len(pushes(out, client_instance_id=mine)) >= 1, 20.0,
                       "first push")
        telemetry = producer._telemetry
        assert telemetry is not None and telemetry.subscription is not None
        first_id = telemetry.subscription.subscription_id
        first_rows = pushes(out, client_instance_id=mine)
        assert {p["name"] for r in first_rows for p in r["points"]} <= {
            n for n in (SENT_TOTAL, "org.apache.kafka.producer.record.send.rate",
                        "org.apache.kafka.producer.record.error.rate",
                        "org.apache.kafka.producer.record.error.total",
                        "org.apache.kafka.producer.record.retry.rate",
                        "org.apache.kafka.producer.record.retry.total",
                        "org.apache.kafka.producer.record.queue.time.avg",
                        "org.apache.kafka.producer.record.queue.time.max")}
        await subscribe(bootstrap, name, metrics="org.apache.kafka.producer.topic.",
                        match="client_id=refetch-.*")
        seen = len(first_rows)

        def topic_only_push() -> bool:
            later = pushes(out, client_instance_id=mine)[seen:]
            return any(r["points"] and all(p["name"].startswith(
                "org.apache.kafka.producer.topic.") for p in r["points"]) for r in later)
        await wait_for(topic_only_push, 20.0, "push of the changed subscription")
        assert telemetry.subscription.subscription_id != first_id
        assert telemetry.subscription.requested_metrics == ("org.apache.kafka.producer.topic.",)
        assert telemetry.state is TelemetryState.PUSH_NEEDED


async def test_invalid_record_stops_the_push(
        telemetry_kafka: tuple[LocalKafka, Path]) -> None:
    """The broker's receiver fails on our payload (INVALID_RECORD): the producer stops
    pushing for good, as Java does: one push recorded, no other, no terminating push."""
    cluster, out = telemetry_kafka
    bootstrap = cluster.bootstrap
    await subscribe(bootstrap, "aioproducer-reject", metrics="org.apache.kafka.producer.",
                    match="client_id=reject-.*")
    client_id = f"reject-{uuid.uuid4().hex[:8]}"
    async with Producer(bootstrap_servers=bootstrap, client_id=client_id) as producer:
        instance = await producer.client_instance_id(20.0)
        mine = str(instance)
        await wait_for(lambda: len(pushes(out, client_instance_id=mine)) >= 1, 20.0,
                       "first push")
        telemetry = producer._telemetry
        assert telemetry is not None
        await wait_for(lambda: telemetry.state is TelemetryState.DISABLED, 10.0,
                       "telemetry stopped")
        assert telemetry.last_error == "PushTelemetry: invalid_record"
        await asyncio.sleep(4 * INTERVAL_MS / 1000)
    assert [r["terminating"] for r in pushes(out, client_instance_id=mine)] == [False]
    assert telemetry.pushes == 0


async def test_broker_without_telemetry_receiver(kafka_bootstrap: str,
                                                 topic_factory: Callable[..., str]) -> None:
    """The suite's broker has no telemetry receiver, so it does not offer the APIs: the
    push stops at once, quietly, and the producer works as ever."""
    topic = topic_factory(1)
    async with Producer(bootstrap_servers=kafka_bootstrap) as producer:
        t0 = time.monotonic()
        assert await producer.client_instance_id(1.0) is None
        assert time.monotonic() - t0 < 3.0
        assert producer._telemetry is not None
        assert producer._telemetry.state is TelemetryState.DISABLED
        assert (await producer.send_and_wait(topic, b"v")).offset == 0
