"""KIP-714 pieces without a broker: the OTLP encoder (decoded by opentelemetry-proto),
the Java metric naming, subscription matching and the ``enable_metrics_push`` option.
The broker round trips are in tests/broker/test_telemetry.py."""

from __future__ import annotations

import uuid

import pytest
from opentelemetry.proto.metrics.v1.metrics_pb2 import AggregationTemporality, MetricsData

from aioproducer import Producer, ProducerConfig
from aioproducer.errors import ConfigError, IllegalStateError
from aioproducer.metrics import MetricsSnapshot
from aioproducer.telemetry import (
    MetricPoint,
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
