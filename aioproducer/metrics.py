"""Producer metrics with the Java producer's names and meanings.

Recording happens per batch and per request, never per record: the Sender adds a
batch's record count and size when it sends the batch, so the cost on the hot path
is nil and a few additions per batch. Rates, averages and maxima are computed when
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

__all__ = ["MetricsSnapshot", "ProducerMetrics", "WindowedStat", "prometheus_collector"]

_WINDOW = 30.0


class WindowedStat:
    """Sum, count and max over the current and the previous sample window, plus
    all-time totals."""

    __slots__ = ("_cur_count", "_cur_max", "_cur_start", "_cur_sum", "_prev_count",
                 "_prev_max", "_prev_start", "_prev_sum", "created", "total", "total_count")

    def __init__(self, now: float) -> None:
        self.created = now
        self._prev_start = self._cur_start = now
        self._prev_sum = self._cur_sum = 0.0
        self._prev_count = self._cur_count = 0
        self._prev_max = self._cur_max = float("-inf")
        self.total = 0.0
        self.total_count = 0

    def _roll(self, now: float) -> None:
        if now - self._cur_start < _WINDOW:
            return
        if now - self._cur_start < 2 * _WINDOW:
            self._prev_start, self._prev_sum = self._cur_start, self._cur_sum
            self._prev_count, self._prev_max = self._cur_count, self._cur_max
        else:  # nothing recorded for a whole window
            self._prev_start, self._prev_sum = now - _WINDOW, 0.0
            self._prev_count, self._prev_max = 0, float("-inf")
        self._cur_start, self._cur_sum = now, 0.0
        self._cur_count, self._cur_max = 0, float("-inf")

    def record(self, value: float, now: float) -> None:
        if now - self._cur_start >= _WINDOW:
            self._roll(now)
        self._cur_sum += value
        self._cur_count += 1
        if value > self._cur_max:
            self._cur_max = value
        self.total += value
        self.total_count += 1

    def rate(self, now: float) -> float:
        """Sum per second over the window (since creation while younger)."""
        self._roll(now)
        elapsed = max(now - self._prev_start, 1e-3)
        return (self._prev_sum + self._cur_sum) / elapsed

    def count_rate(self, now: float) -> float:
        self._roll(now)
        elapsed = max(now - self._prev_start, 1e-3)
        return (self._prev_count + self._cur_count) / elapsed

    def avg(self, now: float) -> float:
        self._roll(now)
        n = self._prev_count + self._cur_count
        return (self._prev_sum + self._cur_sum) / n if n else 0.0

    def max(self, now: float) -> float:
        self._roll(now)
        m = max(self._prev_max, self._cur_max)
        return m if m != float("-inf") else 0.0


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


class ProducerMetrics:
    """The sensors; fed by the Sender, the accumulator and the producer."""

    def __init__(self, client_id: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.client_id = client_id
        self._clock = clock
        now = clock()
        self.created = now
        self.record_send = WindowedStat(now)      # records sent (first attempt), per batch
        self.record_error = WindowedStat(now)     # records failed
        self.record_retry = WindowedStat(now)     # records in batches sent again
        self.bytes = WindowedStat(now)            # batch bytes sent (first attempt)
        self.batch_size = WindowedStat(now)       # bytes per batch
        self.records_per_request = WindowedStat(now)
        self.compression_rate = WindowedStat(now)
        self.request_latency = WindowedStat(now)  # ms
        self.queue_time = WindowedStat(now)       # ms, batch creation -> drain
        self.throttle_time = WindowedStat(now)    # ms
        self.pool_wait = WindowedStat(now)        # ns waited for buffer memory
        self.topic_send: dict[str, WindowedStat] = {}
        self.topic_bytes: dict[str, WindowedStat] = {}
        self.topic_errors: dict[str, WindowedStat] = {}
        self.node_latency: dict[int, WindowedStat] = {}
        self.leader_hints_used = 0
        """KIP-951: leaders moved from a Produce response's hint (no metadata wait)."""
        self.throttle_time_total = 0.0
        """KIP-219: ms the brokers' quotas kept the producer from sending (summed)."""

    def now(self) -> float:
        return self._clock()

    # -- recording (per batch / per request) ---------------------------------------

    def batch_sent(self, topic: str, records: int, size: int, compression_rate: float,
                   queue_ms: float, retry: bool, now: float) -> None:
        if retry:
            self.record_retry.record(records, now)
            return
        self.record_send.record(records, now)
        self.bytes.record(size, now)
        self.batch_size.record(size, now)
        self.compression_rate.record(compression_rate, now)
        self.queue_time.record(queue_ms, now)
        ts = self.topic_send.get(topic)
        if ts is None:
            ts = self.topic_send[topic] = WindowedStat(now)
            self.topic_bytes[topic] = WindowedStat(now)
        ts.record(records, now)
        self.topic_bytes[topic].record(size, now)

    def request_sent(self, records: int, now: float) -> None:
        self.records_per_request.record(records, now)

    def response(self, node: int, latency_ms: float, throttle_ms: float, now: float) -> None:
        self.request_latency.record(latency_ms, now)
        self.throttle_time.record(throttle_ms, now)
        nl = self.node_latency.get(node)
        if nl is None:
            nl = self.node_latency[node] = WindowedStat(now)
        nl.record(latency_ms, now)

    def records_failed(self, topic: str, records: int, now: float) -> None:
        self.record_error.record(records, now)
        te = self.topic_errors.get(topic)
        if te is None:
            te = self.topic_errors[topic] = WindowedStat(now)
        te.record(records, now)

    def pool_waited(self, ns: int, now: float) -> None:
        self.pool_wait.record(ns, now)

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
