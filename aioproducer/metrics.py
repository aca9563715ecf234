"""Producer metrics with the Java producer's names and meanings.

Recording happens per batch and per request, never per record: the Sender adds a
batch's record count and size when it sends the batch, so the cost on the hot path
is nil and a few additions per batch, in compiled code (``_native/stats.pyx``: the
statistics and the recording calls). Rates, averages and maxima are computed when
:meth:`ProducerMetrics.snapshot` is called, over a window of two 30-second samples
(Java's ``SampledStat`` with ``metrics.num.samples=2``, ``metrics.sample.window.ms``
= 30 s).

Units follow Java: latencies and queue times in ms, ``bufferpool-wait-time-total`` in
ns, ``metadata-age`` in s, rates per second.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ._native.stats import Sensors, WindowedStat

__all__ = ["MetricsSnapshot", "ProducerMetrics", "WindowedStat", "prometheus_collector"]


@dataclass(frozen=True)
class MetricsSnapshot(Mapping[str, float]):
    """``producer.metrics()``: the producer-level metrics by Java name (a mapping),
    per-topic ones in ``topics[topic]``, per-node ones in ``nodes[node_id]``."""

    producer: dict[str, float]
    topics: dict[str, dict[str, float]] = field(default_factory=dict)
    nodes: dict[int, dict[str, float]] = field(default_factory=dict)

    def __getitem__(self, name: str) -> float:
        return self.producer[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.producer)

    def __len__(self) -> int:
        return len(self.producer)


class ProducerMetrics(Sensors):
    """The sensors (:class:`~aioproducer._native.stats.Sensors`: ``batch_sent``,
    ``request_sent``, ``response``, ``records_failed``, ``pool_waited``), fed by the
    Sender, the accumulator and the producer, and their snapshot."""

    def __init__(self, client_id: str, clock: Callable[[], float] = time.monotonic) -> None:
        now = clock()
        super().__init__(now)
        self.client_id = client_id
        self._clock = clock
        self.created = now
        self.leader_hints_used = 0
        """KIP-951: leaders moved from a Produce response's hint (no metadata wait)."""
        self.throttle_time_total = 0.0
        """KIP-219: ms the brokers' quotas kept the producer from sending (summed)."""
        self.metadata_retries = 0
        """Batches retried because the metadata was stale (NOT_LEADER_OR_FOLLOWER,
        UNKNOWN_TOPIC_OR_PARTITION...); their log lines are limited (see the Sender)."""

    def now(self) -> float:
        return self._clock()

    # -- reading -----------------------------------------------------------------------

    def snapshot(self, *, buffer_total: int, buffer_available: int, in_flight: int,
                 metadata_age_s: float, waiting_threads: int) -> MetricsSnapshot:
        now = self._clock()
        p = {
            "record-send-rate": self.record_send.rate(now),
            "record-send-total": self.record_send.total,
            "record-error-rate": self.record_error.rate(now),
            "record-error-total": self.record_error.total,
            "record-retry-rate": self.record_retry.rate(now),
            "record-retry-total": self.record_retry.total,
            "byte-rate": self.bytes.rate(now),
            "byte-total": self.bytes.total,
            "batch-size-avg": self.batch_size.avg(now),
            "batch-size-max": self.batch_size.max(now),
            "records-per-request-avg": self.records_per_request.avg(now),
            "request-rate": self.records_per_request.count_rate(now),
            "request-total": float(self.records_per_request.total_count),
            "compression-rate-avg": self.compression_rate.avg(now),
            "request-latency-avg": self.request_latency.avg(now),
            "request-latency-max": self.request_latency.max(now),
            "requests-in-flight": float(in_flight),
            "record-queue-time-avg": self.queue_time.avg(now),
            "record-queue-time-max": self.queue_time.max(now),
            "produce-throttle-time-avg": self.throttle_time.avg(now),
            "produce-throttle-time-max": self.throttle_time.max(now),
            "produce-throttle-time-total": self.throttle_time_total,
            "leader-hints-used-total": float(self.leader_hints_used),
            "metadata-retry-total": float(self.metadata_retries),
            "buffer-total-bytes": float(buffer_total),
            "buffer-available-bytes": float(buffer_available),
            "bufferpool-wait-ratio": self.pool_wait.rate(now) / 1e9,
            "bufferpool-wait-time-total": self.pool_wait.total,
            "bufferpool-wait-time-ns-total": self.pool_wait.total,
            "waiting-threads": float(waiting_threads),
            "metadata-age": metadata_age_s,
        }
        topics: dict[str, dict[str, float]] = {}
        for topic, ts in self.topic_send.items():
            tb = self.topic_bytes[topic]
            topics[topic] = {"record-send-rate": ts.rate(now), "record-send-total": ts.total,
                             "byte-rate": tb.rate(now), "byte-total": tb.total}
        for topic, te in self.topic_errors.items():
            t = topics.setdefault(topic, {"record-send-rate": 0.0, "record-send-total": 0.0,
                                          "byte-rate": 0.0, "byte-total": 0.0})
            t["record-error-rate"] = te.rate(now)
            t["record-error-total"] = te.total
        nodes = {n: {"request-latency-avg": s.avg(now), "request-latency-max": s.max(now),
                     "request-rate": s.count_rate(now), "request-total": float(s.total_count)}
                 for n, s in self.node_latency.items()}
        return MetricsSnapshot(p, topics, nodes)


def prometheus_collector(producer: Any, prefix: str = "kafka_producer") -> Any:
    """A ``prometheus_client`` collector for ``producer.metrics()`` (needs the optional
    ``prometheus-client`` package: ``pip install aioproducer[prometheus]``)::

        from prometheus_client import REGISTRY
        REGISTRY.register(prometheus_collector(producer))

    Names become ``kafka_producer_record_send_rate{client_id=...}``; per-topic and
    per-node metrics carry a ``topic`` or ``node_id`` label.
    """
    try:
        from prometheus_client.core import GaugeMetricFamily
        from prometheus_client.registry import Collector
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("prometheus_collector needs prometheus-client: "
                          "pip install 'aioproducer[prometheus]'") from exc

    def metric_name(name: str, scope: str = "") -> str:
        return f"{prefix}{scope}_" + name.replace("-", "_")

    class _ProducerCollector(Collector):
        def collect(self) -> Iterator[Any]:
            snap = producer.metrics()
            cid = producer.config.client_id
            for name, value in snap.producer.items():
                g = GaugeMetricFamily(metric_name(name), f"Kafka producer {name}",
                                      labels=["client_id"])
                g.add_metric([cid], value)
                yield g
            per_topic: dict[str, GaugeMetricFamily] = {}
            for topic, values in snap.topics.items():
                for name, value in values.items():
                    tg = per_topic.get(name)
                    if tg is None:
                        tg = per_topic[name] = GaugeMetricFamily(
                            metric_name(name, "_topic"), f"Kafka producer per-topic {name}",
                            labels=["client_id", "topic"])
                    tg.add_metric([cid, topic], value)
            yield from per_topic.values()
            per_node: dict[str, GaugeMetricFamily] = {}
            for node, values in snap.nodes.items():
                for name, value in values.items():
                    ng = per_node.get(name)
                    if ng is None:
                        ng = per_node[name] = GaugeMetricFamily(
                            metric_name(name, "_node"), f"Kafka producer per-node {name}",
                            labels=["client_id", "node_id"])
                    ng.add_metric([cid, str(node)], value)
            yield from per_node.values()

    return _ProducerCollector()
