"""KIP-714 pieces without a broker: the OTLP encoder (decoded by opentelemetry-proto),
the Java metric naming, subscription matching, the ``enable_metrics_push`` option, and
the push state machine against a scripted connection (jitter, deltas, error codes, the
terminating push). The broker round trips are in tests/broker/test_telemetry.py."""

from __future__ import annotations

import asyncio
import datetime
import random
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.get_telemetry_subscriptions.v0.request import GetTelemetrySubscriptionsRequest
from kio.schema.get_telemetry_subscriptions.v0.response import (
    GetTelemetrySubscriptionsResponse,
)
from kio.schema.push_telemetry.v0.request import PushTelemetryRequest
from kio.schema.push_telemetry.v0.response import PushTelemetryResponse
from kio.static.primitive import i8, i32, i32Timedelta
from opentelemetry.proto.metrics.v1.metrics_pb2 import AggregationTemporality, MetricsData

from aioproducer import Producer, ProducerConfig
from aioproducer.compression import decompress
from aioproducer.errors import (
    AuthenticationError,
    ConfigError,
    IllegalStateError,
    KafkaConnectionError,
)
from aioproducer.metrics import MetricsSnapshot
from aioproducer.telemetry import (
    ClientTelemetry,
    MetricPoint,
    TelemetryState,
    TelemetrySubscription,
    collect_points,
    encode_metrics_data,
    otel_metric_name,
)


def test_otlp_metrics_data_decodes_with_opentelemetry_proto() -> None:
    points = [
        MetricPoint("org.apache.kafka.producer.record.send.total", (), 1234.0, True,
                    time_ns=1_700_000_000_123_456_789, start_ns=1_700_000_000_000_000_001,
                    delta=True),
        MetricPoint("org.apache.kafka.producer.topic.record.send.total",
                    (("topic", "tëst"),), 7.0, True, time_ns=2, start_ns=1, delta=False),
        MetricPoint("org.apache.kafka.producer.topic.record.send.total",
                    (("topic", "other"),), 3.0, True, time_ns=2, start_ns=1, delta=False),
        MetricPoint("org.apache.kafka.producer.request.latency.avg", (), 1.5, False,
                    time_ns=3),
        MetricPoint("org.apache.kafka.producer.batch.size.max", (), 0.0, False, time_ns=4),
    ]
    raw = encode_metrics_data(points, resource={"transactional_id": "tx-1"},
                              scope_name="aioproducer", scope_version="9.9")
    data = MetricsData.FromString(raw)
    assert len(data.resource_metrics) == 1
    rm = data.resource_metrics[0]
    assert {kv.key: kv.value.string_value for kv in rm.resource.attributes} == {
        "transactional_id": "tx-1"}
    (sm,) = rm.scope_metrics
    assert (sm.scope.name, sm.scope.version) == ("aioproducer", "9.9")
    by_name = {m.name: m for m in sm.metrics}
    assert list(by_name) == [
        "org.apache.kafka.producer.record.send.total",
        "org.apache.kafka.producer.topic.record.send.total",
        "org.apache.kafka.producer.request.latency.avg",
        "org.apache.kafka.producer.batch.size.max"]

    total = by_name["org.apache.kafka.producer.record.send.total"]
    assert total.WhichOneof("data") == "sum"
    assert total.sum.is_monotonic
    assert total.sum.aggregation_temporality == AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA
    (p,) = total.sum.data_points
    assert (p.as_double, p.time_unix_nano, p.start_time_unix_nano) == (
        1234.0, 1_700_000_000_123_456_789, 1_700_000_000_000_000_001)
    assert list(p.attributes) == []

    per_topic = by_name["org.apache.kafka.producer.topic.record.send.total"]
    assert per_topic.sum.aggregation_temporality == (
        AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE)
    assert [({kv.key: kv.value.string_value for kv in dp.attributes}, dp.as_double)
            for dp in per_topic.sum.data_points] == [({"topic": "tëst"}, 7.0),
                                                     ({"topic": "other"}, 3.0)]

    gauge = by_name["org.apache.kafka.producer.request.latency.avg"]
    assert gauge.WhichOneof("data") == "gauge"
    assert [(dp.as_double, dp.time_unix_nano) for dp in gauge.gauge.data_points] == [(1.5, 3)]
    zero = by_name["org.apache.kafka.producer.batch.size.max"].gauge.data_points[0]
    assert zero.WhichOneof("value") == "as_double" and zero.as_double == 0.0


def test_empty_payload_is_valid_otlp() -> None:
    data = MetricsData.FromString(encode_metrics_data([]))
    assert len(data.resource_metrics) == 1
    assert list(data.resource_metrics[0].scope_metrics[0].metrics) == []


def test_java_metric_names() -> None:
    assert otel_metric_name("org.apache.kafka.producer.", "record-send-total") == (
        "org.apache.kafka.producer.record.send.total")
    snap = MetricsSnapshot({"record-send-total": 5.0, "bufferpool-wait-ratio": 0.25},
                           {"t1": {"byte-total": 10.0}},
                           {3: {"request-latency-avg": 2.0}})
    assert collect_points(snap, 0) == [
        ("org.apache.kafka.producer.record.send.total", (), 5.0),
        ("org.apache.kafka.producer.bufferpool.wait.ratio", (), 0.25),
        ("org.apache.kafka.producer.topic.byte.total", (("topic", "t1"),), 10.0),
        ("org.apache.kafka.producer.node.request.latency.avg", (("node_id", "node-3"),), 2.0),
    ]


def _sub(*requested: str) -> TelemetrySubscription:
    return TelemetrySubscription(uuid.uuid4(), 1, 1000, (), 1 << 20, True, requested)


def test_subscription_selects_by_prefix() -> None:
    name = "org.apache.kafka.producer.record.send.total"
    assert _sub("*").selects(name)
    assert _sub("org.apache.kafka.producer.").selects(name)
    assert _sub("org.apache.kafka.consumer.", "org.apache.kafka.producer.record.").selects(name)
    assert not _sub("org.apache.kafka.producer.topic.").selects(name)
    assert _sub().selects_nothing and not _sub().selects(name)


def test_enable_metrics_push_option() -> None:
    assert ProducerConfig().enable_metrics_push is True
    off = ProducerConfig.from_options({"enable.metrics.push": "false"})
    assert off.enable_metrics_push is False
    assert not ProducerConfig.from_properties("enable.metrics.push=FALSE\n").enable_metrics_push
    with pytest.raises(ConfigError, match="enable_metrics_push"):
        ProducerConfig(enable_metrics_push="yes").validated()  # type: ignore[arg-type]


@pytest.mark.asyncio
async def test_client_instance_id_needs_metrics_push() -> None:
    producer = Producer(enable_metrics_push=False)
    with pytest.raises(IllegalStateError, match="enable_metrics_push"):
        await producer.client_instance_id(1.0)
    with pytest.raises(ValueError, match="negative"):
        await Producer().client_instance_id(-1)


# -- the state machine, against a scripted broker connection ----------------------------

class _FakeConn:
    def __init__(self) -> None:
        self.api_versions = {71: (0, 0), 72: (0, 0)}
        self.requests: list[Any] = []
        self.push_errors: list[ErrorCode] = []

    async def request(self, req: Any, response_type: Any, *, timeout_ms: int | None = None
                      ) -> Any:
        self.requests.append(req)
        zero = i32Timedelta.parse(datetime.timedelta(0))
        if isinstance(req, GetTelemetrySubscriptionsRequest):
            return GetTelemetrySubscriptionsResponse(
                throttle_time=zero, error_code=ErrorCode.none, client_instance_id=_ID,
                subscription_id=i32(17), accepted_compression_types=(i8(4), i8(1)),
                push_interval=i32Timedelta.parse(datetime.timedelta(milliseconds=1000)),
                telemetry_max_bytes=i32(1 << 20), delta_temporality=True,
                requested_metrics=("org.apache.kafka.producer.record.send",))
        code = self.push_errors.pop(0) if self.push_errors else ErrorCode.none
        return PushTelemetryResponse(throttle_time=zero, error_code=code)


class _FakeClient:
    def __init__(self, conn: _FakeConn) -> None:
        self.conn = conn
        self.nodes = {1: ("127.0.0.1", 9)}

    def least_loaded_node(self) -> int:
        return 1

    async def connect(self, node: int, timeout_s: float) -> _FakeConn:
        return self.conn


_ID = uuid.UUID("6c1f3c1e-58a8-4c3e-9a61-3f7e1b1d2a90")


def _pushed(req: Any) -> dict[str, float]:
    assert req.compression_type == 4  # the broker's first choice: zstd
    data = MetricsData.FromString(decompress(4, req.metrics))
    metrics = data.resource_metrics[0].scope_metrics[0].metrics
    # record-send-rate matches the requested prefix too (a gauge, always 1.0 here)
    assert [m.gauge.data_points[0].as_double for m in metrics
            if m.name == "org.apache.kafka.producer.record.send.rate"] == [1.0]
    return {m.name: m.sum.data_points[0].as_double for m in metrics
            if m.WhichOneof("data") == "sum"}


@pytest.mark.asyncio
async def test_state_machine_jitter_deltas_and_terminating_push() -> None:
    seed = random.randrange(1 << 30)
    print("seed", seed)
    conn = _FakeConn()
    sent = [0.0]

    def snapshot() -> MetricsSnapshot:
        return MetricsSnapshot({"record-send-total": sent[0], "record-send-rate": 1.0,
                                "byte-total": 99.0})

    tel = ClientTelemetry(_FakeClient(conn), snapshot,  # type: ignore[arg-type]
                          request_timeout_ms=1000, rng=random.Random(seed))
    loop = asyncio.get_running_loop()
    assert await tel.client_instance_id(0) is None
    await tel._subscribe()
    assert conn.requests[0].client_instance_id == uuid.UUID(int=0)
    assert await tel.client_instance_id(0) == _ID
    assert tel.state is TelemetryState.PUSH_NEEDED
    # The first push after 0.5..1.5 push intervals, drawn from the seeded generator.
    expected = 1.0 * random.Random(seed).uniform(0.5, 1.5)
    assert abs((tel._next_at - loop.time()) - expected) < 0.05

    sent[0] = 10.0
    conn.push_errors = [ErrorCode.throttling_quota_exceeded]
    await tel._push(terminating=False)
    assert _pushed(conn.requests[-1]) == {"org.apache.kafka.producer.record.send.total": 10.0}
    # Refused: fetch the subscription again after an interval; the delta is not spent.
    assert tel.state is TelemetryState.SUBSCRIPTION_NEEDED
    assert abs((tel._next_at - loop.time()) - 1.0) < 0.05
    await tel._subscribe()
    assert conn.requests[-1].client_instance_id == _ID  # the assigned id from now on

    sent[0] = 12.0
    await tel._push(terminating=False)
    assert _pushed(conn.requests[-1]) == {"org.apache.kafka.producer.record.send.total": 12.0}
    assert tel.pushes == 1 and tel.state is TelemetryState.PUSH_NEEDED
    sent[0] = 15.0
    conn.push_errors = [ErrorCode.unknown_subscription_id]
    await tel._push(terminating=False)
    assert tel.state is TelemetryState.SUBSCRIPTION_NEEDED
    assert tel._next_at - loop.time() <= 0  # at once
    await tel._subscribe()

    sent[0] = 16.0
    await tel.close(1.0)
    last = conn.requests[-1]
    assert isinstance(last, PushTelemetryRequest) and last.terminating
    assert last.subscription_id == 17 and last.client_instance_id == _ID
    assert _pushed(last) == {"org.apache.kafka.producer.record.send.total": 4.0}
    assert tel.state is TelemetryState.TERMINATED


@pytest.mark.parametrize(("code", "state", "delay"), [
    (ErrorCode.unsupported_compression_type, TelemetryState.SUBSCRIPTION_NEEDED, 0.0),
    (ErrorCode.telemetry_too_large, TelemetryState.SUBSCRIPTION_NEEDED, 1.0),
    (ErrorCode.invalid_request, TelemetryState.DISABLED, None),
    (ErrorCode.invalid_record, TelemetryState.DISABLED, None),
    (ErrorCode.unsupported_version, TelemetryState.DISABLED, None),
    (ErrorCode.unknown_server_error, TelemetryState.DISABLED, None),
])
@pytest.mark.asyncio
async def test_push_errors(code: ErrorCode, state: TelemetryState, delay: float | None) -> None:
    conn = _FakeConn()
    tel = ClientTelemetry(_FakeClient(conn),  # type: ignore[arg-type]
                          lambda: MetricsSnapshot({"record-send-total": 1.0}),
                          request_timeout_ms=1000, rng=random.Random(1))
    await tel._subscribe()
    conn.push_errors = [code]
    await tel._push(terminating=False)
    assert tel.state is state
    if delay is not None:
        assert abs((tel._next_at - asyncio.get_running_loop().time()) - delay) < 0.05
    await tel.close(1.0)
    # No terminating push after the push was stopped or while a subscription is needed.
    assert sum(isinstance(r, PushTelemetryRequest) for r in conn.requests) == 1


class _FailingClient(_FakeClient):
    def __init__(self, exc: BaseException) -> None:
        super().__init__(_FakeConn())
        self.exc = exc

    async def connect(self, node: int, timeout_s: float) -> _FakeConn:
        raise self.exc


@pytest.mark.parametrize(("exc", "state"), [
    (AuthenticationError("bad password"), TelemetryState.SUBSCRIPTION_NEEDED),
    (KafkaConnectionError("refused"), TelemetryState.SUBSCRIPTION_NEEDED),
    (RuntimeError("a bug"), TelemetryState.DISABLED),
])
@pytest.mark.asyncio
async def test_failures_never_crash_the_task(exc: BaseException, state: TelemetryState
                                             ) -> None:
    """Errors reaching a broker retry after an interval; anything unexpected stops the
    push; the task itself never ends with an exception."""
    tel = ClientTelemetry(_FailingClient(exc),  # type: ignore[arg-type]
                          lambda: MetricsSnapshot({}), request_timeout_ms=1000)
    tel.start()
    for _ in range(100):
        await asyncio.sleep(0.01)
        if tel.last_error is not None:
            break
    assert tel.state is state and tel.last_error is not None
    assert tel._task is not None
    if state is TelemetryState.DISABLED:
        await asyncio.wait_for(tel._task, 1.0)  # ended, without an exception
    await tel.close(1.0)
    assert tel._task.done() and (tel._task.cancelled() or tel._task.exception() is None)
