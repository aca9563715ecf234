"""Client metrics push (KIP-714): the producer's metrics sent to the brokers as OTLP.

A cluster operator subscribes clients to metrics (``kafka-client-metrics.sh`` or the
admin API on resource type ``CLIENT_METRICS``: metric name prefixes, a push interval,
client match patterns) and a broker-side metrics reporter receives what the clients
push. The producer takes part as the Java producer does when ``enable_metrics_push``
is on (the default):

1. GetTelemetrySubscriptions with the zero client instance id: the broker assigns the
   id (:meth:`Producer.client_instance_id`) and answers with the subscription: its id,
   the metric name prefixes requested (none: nothing to push; ``*``: everything), the
   push interval, the compression types it accepts, the maximum payload size and
   whether sums are to be sent as deltas.
2. PushTelemetry of the matching metrics every push interval (the first one after
   0.5 to 1.5 intervals, so that clients started together spread out), compressed with
   the broker's first accepted codec.
3. On close, one last push with ``terminating=True``.

Errors are handled as ``ClientTelemetryReporter`` handles them: UNKNOWN_SUBSCRIPTION_ID
and UNSUPPORTED_COMPRESSION_TYPE fetch the subscription again at once,
THROTTLING_QUOTA_EXCEEDED and TELEMETRY_TOO_LARGE after a push interval;
INVALID_REQUEST, INVALID_RECORD, UNSUPPORTED_VERSION (and a broker that does not
offer the APIs at all) stop the push for the producer's life; a lost connection or a
timed-out request tries again, through another broker, after a push interval.

Metric names are the Java client's: ``org.apache.kafka.`` + the metric group without
``-metrics`` + the metric name, lower case, with dots for dashes
(``record-send-total`` of ``producer-metrics`` is
``org.apache.kafka.producer.record.send.total``; per-topic metrics are
``org.apache.kafka.producer.topic.*`` with a ``topic`` attribute, per-node ones
``org.apache.kafka.producer.node.*`` with ``node_id`` = ``node-<id>``). ``*-total``
metrics are monotonic sums, the others gauges.

The OTLP ``MetricsData`` message is encoded here, by a small protobuf writer for the
nine messages it needs: no dependency (the push is on by default, as in Java, and
needs nothing beyond the core install). Its output is checked in the tests against
``opentelemetry-proto``'s decoder and against the broker's own (Java) decoder.

Nothing of this touches the send path: the push task reads :meth:`Producer.metrics`
once per push interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import random
import struct
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from kio.schema.errors import ErrorCode

from .compression import make_compressor
from .errors import KafkaConnectionError, KafkaError, UnsupportedVersionError
from .metrics import MetricsSnapshot
from .net.telemetry import (
    ZERO_UUID,
    get_telemetry_subscriptions,
    push_telemetry,
    telemetry_supported,
)

if TYPE_CHECKING:
    from .net.client import KafkaClient
    from .net.connection import BrokerConnection

__all__ = [
    "DEFAULT_PUSH_INTERVAL_MS",
    "ClientTelemetry",
    "MetricPoint",
    "TelemetryState",
    "TelemetrySubscription",
    "collect_points",
    "encode_metrics_data",
    "otel_metric_name",
]

log = logging.getLogger("aioproducer.telemetry")

#: The push interval when the broker gives none (and after a failed request), as Java.
DEFAULT_PUSH_INTERVAL_MS: Final = 300_000
#: The first push comes after this fraction of the push interval (uniform), as Java.
_FIRST_PUSH_JITTER: Final = (0.5, 1.5)
#: Metric name prefix of the Java client's telemetry (ClientTelemetryProvider.DOMAIN).
DOMAIN: Final = "org.apache.kafka"
_PRODUCER: Final = DOMAIN + ".producer."
_TOPIC: Final = DOMAIN + ".producer.topic."
_NODE: Final = DOMAIN + ".producer.node."
_CODEC_NAMES: Final = {1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}

# OTLP AggregationTemporality
_DELTA: Final = 1
_CUMULATIVE: Final = 2

_E_NONE: Final = 0
_DISABLE: Final = frozenset({int(ErrorCode.invalid_request), int(ErrorCode.invalid_record),
                             int(ErrorCode.unsupported_version)})
_REFETCH_NOW: Final = frozenset({int(ErrorCode.unknown_subscription_id),
                                 int(ErrorCode.unsupported_compression_type)})
_REFETCH_LATER: Final = frozenset({int(ErrorCode.telemetry_too_large),
                                   int(ErrorCode.throttling_quota_exceeded)})


class TelemetryState(enum.Enum):
    SUBSCRIPTION_NEEDED = "subscription needed"
    PUSH_NEEDED = "push needed"
    TERMINATED = "terminated"
    DISABLED = "disabled"


@dataclass(frozen=True, slots=True)
class TelemetrySubscription:
    """What GetTelemetrySubscriptions answered."""

    client_instance_id: uuid.UUID
    subscription_id: int
    push_interval_ms: int
    accepted_compression_types: tuple[int, ...]
    telemetry_max_bytes: int
    delta_temporality: bool
    requested_metrics: tuple[str, ...]

    @property
    def selects_nothing(self) -> bool:
        return not self.requested_metrics

    def selects(self, name: str) -> bool:
        """Whether metric ``name`` is requested (by prefix; ``*`` is every metric)."""
        if self.requested_metrics == ("*",):
            return True
        return any(name.startswith(prefix) for prefix in self.requested_metrics)


@dataclass(frozen=True, slots=True)
class MetricPoint:
    """One data point of one metric, as pushed."""

    name: str
    attributes: tuple[tuple[str, str], ...]
    value: float
    monotonic_sum: bool
    """A ``*-total`` metric (an OTLP monotonic Sum); else a Gauge."""
    time_ns: int
    start_ns: int = 0
    delta: bool = False


def otel_metric_name(prefix: str, java_name: str) -> str:
    """``record-send-total`` -> ``<prefix>record.send.total`` (Java's naming rule)."""
    return prefix + java_name.lower().replace("-", ".")


def collect_points(snapshot: MetricsSnapshot, time_ns: int
                   ) -> list[tuple[str, tuple[tuple[str, str], ...], float]]:
    """``(name, attributes, value)`` of every metric of ``snapshot``, named as the Java
    client names them in its telemetry (client_id is left out, as Java does: the
    broker knows it)."""
    out: list[tuple[str, tuple[tuple[str, str], ...], float]] = [
        (otel_metric_name(_PRODUCER, name), (), float(value))
        for name, value in snapshot.producer.items()]
    for topic, values in snapshot.topics.items():
        attrs = (("topic", topic),)
        out.extend((otel_metric_name(_TOPIC, name), attrs, float(value))
                   for name, value in values.items())
    for node, values in snapshot.nodes.items():
        attrs = (("node_id", f"node-{node}"),)
        out.extend((otel_metric_name(_NODE, name), attrs, float(value))
                   for name, value in values.items())
    return out


# -- a minimal protobuf writer for OTLP MetricsData (opentelemetry/proto/metrics/v1) ----

def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _ld(field: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def _string(field: int, value: str) -> bytes:
    return _ld(field, value.encode("utf-8")) if value else b""


def _key_values(field: int, attrs: Iterable[tuple[str, str]]) -> bytes:
    # KeyValue{key=1, value=2: AnyValue{string_value=1}}
    return b"".join(_ld(field, _string(1, k) + _ld(2, _ld(1, v.encode("utf-8"))))
                    for k, v in attrs)


def _number_point(p: MetricPoint) -> bytes:
    # NumberDataPoint{start_time_unix_nano=2 fixed64, time_unix_nano=3 fixed64,
    #                 as_double=4 double, attributes=7}
    out = b""
    if p.start_ns:
        out += b"\x11" + struct.pack("<Q", p.start_ns)
    out += b"\x19" + struct.pack("<Q", p.time_ns)
    out += b"\x21" + struct.pack("<d", p.value)
    return out + _key_values(7, p.attributes)


def encode_metrics_data(points: Sequence[MetricPoint], *,
                        resource: Mapping[str, str] | None = None,
                        scope_name: str = "", scope_version: str = "") -> bytes:
    """The OTLP ``MetricsData`` protobuf of ``points``: one ResourceMetrics (with
    ``resource`` as string attributes) holding one ScopeMetrics; the points of one
    metric name share one Metric (a monotonic Sum or a Gauge)."""
    by_name: dict[str, list[MetricPoint]] = {}
    for p in points:
        by_name.setdefault(p.name, []).append(p)
    metrics = []
    for name, group in by_name.items():
        data = b"".join(_ld(1, _number_point(p)) for p in group)
        first = group[0]
        if first.monotonic_sum:
            # Sum{data_points=1, aggregation_temporality=2, is_monotonic=3}
            body = data + b"\x10" + _varint(_DELTA if first.delta else _CUMULATIVE) + b"\x18\x01"
            metric = _string(1, name) + _ld(7, body)
        else:
            metric = _string(1, name) + _ld(5, data)   # Gauge{data_points=1}
        metrics.append(_ld(2, metric))                  # ScopeMetrics.metrics=2
    scope = _string(1, scope_name) + _string(2, scope_version)
    scope_metrics = (_ld(1, scope) if scope else b"") + b"".join(metrics)
    res = _key_values(1, (resource or {}).items())
    resource_metrics = _ld(1, res) + _ld(2, scope_metrics)
    return _ld(1, resource_metrics)                     # MetricsData.resource_metrics=1


# -- the push task ---------------------------------------------------------------------

class ClientTelemetry:
    """The KIP-714 state machine and its task, one per producer.

    ``snapshot`` gives the metrics to push (None once the producer is gone: the task
    ends). ``rng`` draws the first push's jitter (seed it in tests).
    """

    def __init__(self, client: KafkaClient, snapshot: Callable[[], MetricsSnapshot | None],
                 *, request_timeout_ms: int, resource: Mapping[str, str] | None = None,
                 rng: random.Random | None = None, scope_version: str = "") -> None:
        self._client = client
        self._snapshot = snapshot
        self._timeout_ms = request_timeout_ms
        self._resource = dict(resource or {})
        self._rng = rng if rng is not None else random.Random()
        self._scope_version = scope_version
        self.state = TelemetryState.SUBSCRIPTION_NEEDED
        self.subscription: TelemetrySubscription | None = None
        self._next_at = 0.0                      # loop time of the next request
        self._node: int | None = None            # sticky node, as Java (KIP-714)
        self._task: asyncio.Task[None] | None = None
        self._closing = asyncio.Event()
        self._subscribed = asyncio.Event()
        # Sums as deltas: the value and time of the last value pushed, per metric.
        self._last: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[float, int]] = {}
        self._started_ns = time.time_ns()
        self.pushes = 0
        """Pushes the broker accepted (the terminating one included)."""
        self.last_error: str | None = None

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(),
                                                            name="aioproducer-telemetry")

    async def close(self, timeout_s: float) -> None:
        """Stop the task, then send the terminating push if there is a subscription
        with metrics to push (all within ``timeout_s``)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, timeout_s)
        self._closing.set()
        task = self._task
        if task is not None and not task.done():
            # A request in progress finishes first (bounded by the request timeout).
            await asyncio.wait((task,), timeout=max(0.0, deadline - loop.time()))
            self.stop()
        if self.state is TelemetryState.PUSH_NEEDED and self.subscription is not None:
            remaining = deadline - loop.time()
            if remaining > 0:
                try:
                    await asyncio.wait_for(self._push(terminating=True), remaining)
                except asyncio.TimeoutError:
                    log.debug("the terminating telemetry push did not finish in time")
                except Exception as exc:  # close() goes on whatever happens here
                    log.warning("the terminating telemetry push failed: %r", exc)
        if self.state is not TelemetryState.DISABLED:
            self.state = TelemetryState.TERMINATED

    def stop(self) -> None:
        """Cancel the task (no terminating push)."""
        self._closing.set()
        if self._task is not None and not self._task.done():
            self._task.cancel()

    async def client_instance_id(self, timeout_s: float) -> uuid.UUID | None:
        """The id the broker assigned, waiting up to ``timeout_s`` for the first
        subscription; None if there is none by then."""
        if self.subscription is None and timeout_s > 0:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._subscribed.wait(), timeout_s)
        sub = self.subscription
        return sub.client_instance_id if sub is not None else None

    # -- the loop ------------------------------------------------------------------------

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._closing.is_set():
            delay = self._next_at - loop.time()
            if delay > 0:
                try:
                    await asyncio.wait_for(self._closing.wait(), delay)
                    return
                except asyncio.TimeoutError:
                    pass
            try:
                if self.state is TelemetryState.SUBSCRIPTION_NEEDED:
                    await self._subscribe()
                elif self.state is TelemetryState.PUSH_NEEDED:
                    if not await self._push(terminating=False):
                        return  # the producer is gone
                else:
                    return
            except Exception as exc:  # never let the push take the producer down
                log.warning("client telemetry stopped after an unexpected error: %r", exc)
                self.last_error = repr(exc)
                self.state = TelemetryState.DISABLED
                return

    def _after(self, interval_ms: float) -> None:
        self._next_at = asyncio.get_running_loop().time() + interval_ms / 1000.0

    def _interval_ms(self) -> int:
        sub = self.subscription
        return sub.push_interval_ms if sub is not None else DEFAULT_PUSH_INTERVAL_MS

    async def _connection(self) -> BrokerConnection:
        client = self._client
        if self._node is None or self._node not in client.nodes:
            self._node = client.least_loaded_node()
        if self._node is None:
            raise KafkaConnectionError("no broker to send client telemetry to")
        conn = await client.connect(self._node, self._timeout_ms / 1000.0)
        if not telemetry_supported(conn):
            raise UnsupportedVersionError(
                f"{conn} does not offer GetTelemetrySubscriptions/PushTelemetry v0 "
                "(no client telemetry receiver is configured on the broker)")
        return conn

    def _failed(self, exc: BaseException) -> None:
        self.last_error = str(exc)
        if isinstance(exc, UnsupportedVersionError):
            log.debug("client telemetry is off: %s", exc)
            self.state = TelemetryState.DISABLED
            return
        # A lost connection or a timeout: try again (maybe elsewhere) after an interval.
        log.debug("client telemetry request failed, retrying in a push interval: %s", exc)
        self._node = None
        self.state = TelemetryState.SUBSCRIPTION_NEEDED
        self._after(self._interval_ms())

    def _error(self, code: int, what: str) -> None:
        name = ErrorCode(code).name if code in ErrorCode._value2member_map_ else str(code)
        self.last_error = f"{what}: {name}"
        if code in _REFETCH_NOW:
            delay = 0
        elif code in _REFETCH_LATER:
            delay = self._interval_ms()
        else:  # INVALID_REQUEST, INVALID_RECORD, UNSUPPORTED_VERSION and unknown codes
            log.warning("client telemetry stopped: the broker answered %s with %s",
                        what, name)
            self.state = TelemetryState.DISABLED
            return
        log.debug("client telemetry: %s answered %s; subscription again in %d ms",
                  what, name, delay)
        self.state = TelemetryState.SUBSCRIPTION_NEEDED
        self._after(delay)

    async def _subscribe(self) -> None:
        old = self.subscription
        try:
            conn = await self._connection()
            resp = await get_telemetry_subscriptions(
                conn, old.client_instance_id if old is not None else None,
                timeout_ms=self._timeout_ms)
        except KafkaError as exc:  # connection, timeout, authentication, no such API
            self._failed(exc)
            return
        code = int(resp.error_code)
        if code != _E_NONE:
            self._error(code, "GetTelemetrySubscriptions")
            return
        instance = resp.client_instance_id
        if instance is None or instance == ZERO_UUID:
            if old is None:
                self._error(int(ErrorCode.invalid_request), "GetTelemetrySubscriptions "
                            "(no client instance id)")
                return
            instance = old.client_instance_id
        interval = int(resp.push_interval.total_seconds() * 1000)
        if interval <= 0:
            interval = DEFAULT_PUSH_INTERVAL_MS
        sub = TelemetrySubscription(
            client_instance_id=instance, subscription_id=int(resp.subscription_id),
            push_interval_ms=interval,
            accepted_compression_types=tuple(int(c) for c in resp.accepted_compression_types),
            telemetry_max_bytes=int(resp.telemetry_max_bytes),
            delta_temporality=bool(resp.delta_temporality),
            requested_metrics=tuple(resp.requested_metrics))
        if old is not None and old.delta_temporality != sub.delta_temporality:
            self._last.clear()
        if self._closing.is_set():
            return
        self.subscription = sub
        self._subscribed.set()
        if sub.selects_nothing:
            # Nothing requested: ask again after the interval (no push).
            self.state = TelemetryState.SUBSCRIPTION_NEEDED
            self._after(interval)
        else:
            self.state = TelemetryState.PUSH_NEEDED
            self._after(interval * self._rng.uniform(*_FIRST_PUSH_JITTER))
        log.debug("client telemetry subscription: %s", sub)

    def _points(self, sub: TelemetrySubscription, snapshot: MetricsSnapshot
                ) -> tuple[list[MetricPoint], dict[tuple[str, tuple[tuple[str, str], ...]],
                                                   tuple[float, int]]]:
        now_ns = time.time_ns()
        points: list[MetricPoint] = []
        pending: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[float, int]] = {}
        for name, attrs, value in collect_points(snapshot, now_ns):
            if not sub.selects(name):
                continue
            if not name.endswith(".total"):
                points.append(MetricPoint(name, attrs, value, False, now_ns))
                continue
            if not sub.delta_temporality:
                points.append(MetricPoint(name, attrs, value, True, now_ns,
                                          self._started_ns, False))
                continue
            key = (name, attrs)
            last_value, last_ns = self._last.get(key, (0.0, self._started_ns))
            points.append(MetricPoint(name, attrs, value - last_value, True, now_ns,
                                      last_ns, True))
            pending[key] = (value, now_ns)
        return points, pending

    def _compress(self, sub: TelemetrySubscription, payload: bytes) -> tuple[int, bytes]:
        for codec in sub.accepted_compression_types[:1]:  # the broker's preference
            name = _CODEC_NAMES.get(codec)
            if name is None:
                break
            level = {"gzip": -1, "lz4": 9, "zstd": 3}.get(name, 0)
            compressor = make_compressor(name, level)
            assert compressor is not None
            try:
                return codec, bytes(compressor(memoryview(payload)))
            except Exception as exc:  # as Java: send it uncompressed
                log.debug("cannot compress the telemetry payload with %s: %s", name, exc)
        return 0, payload

    async def _push(self, *, terminating: bool) -> bool:
        """One push; False when the producer is gone (the task ends)."""
        sub = self.subscription
        assert sub is not None
        snapshot = self._snapshot()
        if snapshot is None:
            return False
        points, pending = self._points(sub, snapshot)
        payload = encode_metrics_data(points, resource=self._resource,
                                      scope_name="aioproducer",
                                      scope_version=self._scope_version)
        codec, body = self._compress(sub, payload)
        if 0 < sub.telemetry_max_bytes < len(body):
            # The broker would refuse it (TELEMETRY_TOO_LARGE): skip this push; the sums'
            # deltas carry over to the next one.
            self.last_error = (f"telemetry payload of {len(body)} bytes is over the "
                               f"broker's {sub.telemetry_max_bytes}")
            log.warning("client telemetry: %s; not pushed", self.last_error)
            self._after(sub.push_interval_ms)
            return True
        try:
            conn = await self._connection()
            resp = await push_telemetry(conn, sub.client_instance_id, sub.subscription_id,
                                        body, compression_type=codec,
                                        terminating=terminating,
                                        timeout_ms=self._timeout_ms)
        except KafkaError as exc:  # connection, timeout, authentication, no such API
            if not terminating:
                self._failed(exc)
            return True
        code = int(resp.error_code)
        if code != _E_NONE:
            if not terminating:
                self._error(code, "PushTelemetry")
            else:
                self.last_error = f"terminating PushTelemetry: error code {code}"
            return True
        # Accepted: these values are the base of the next deltas.
        self._last.update(pending)
        self.pushes += 1
        self._after(sub.push_interval_ms)
        return True
