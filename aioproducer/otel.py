"""OpenTelemetry tracing and metrics (the optional ``otel`` extra: ``opentelemetry-api``).

Turned on by producer options, never by importing this module::

    Producer(bootstrap_servers=..., tracer_provider=provider)   # or "global"
    Producer(bootstrap_servers=..., meter_provider=provider)    # or "global"

**Tracing**: every ``send()`` gets a span of kind PRODUCER named ``send {topic}``, with
the messaging semantic conventions (``messaging.system=kafka``,
``messaging.operation.name``/``type=send``, ``messaging.destination.name``, the
partition and ``messaging.kafka.offset`` once acknowledged, ``messaging.kafka.message.key``
(when it has a string form), ``messaging.kafka.message.tombstone`` for a None value,
``messaging.client.id``, ``server.address``/``port`` of the partition's leader,
``error.type`` on failure: the Kafka error code's name for a broker's answer, else the
exception's class name). The caller's current span is the parent. The span ends when
the record is acknowledged or fails (a span that is not recorded, sampled out, ends at
once). Its context is injected into the record's headers
with the propagator (default: the global one, W3C ``traceparent``); a header the caller
set is never replaced. ``send_many()`` gets one span for the call, with
``messaging.batch.message_count``. A traced producer takes the Python path for every
``send()``; without a tracer provider the native fast path is untouched.

**Metrics**: :func:`register_metrics` exports the producer's Java-named metrics as
observable instruments, named as OpenTelemetry's Java Kafka instrumentation names them
(``kafka.producer.record_send_rate``, attributes ``client-id`` and ``topic`` or
``node-id``), plus ``messaging.client.sent.messages`` per topic and, when tracing is
on, the ``messaging.client.operation.duration`` histogram. :func:`metric_points` reads
them without OpenTelemetry (for other exporters).

opentelemetry-api is imported only when one of these options is set.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from .errors import BrokerResponseError, ConfigError

if TYPE_CHECKING:
    from .metadata import Metadata
    from .protocols import ProducerLike
    from .record import RecordFuture, SendManyResult
    from .types import Header

    class _Traced(ProducerLike, Protocol):
        """A producer whose metadata the tracing reads (a partition's leader)."""

        _metadata: Metadata

__all__ = ["MetricPoint", "Tracing", "metric_points", "register_metrics", "setup"]

_SCOPE = "aioproducer"
_SYSTEM = "kafka"

# The per-topic and per-node metrics of producer.metrics(); the producer-level values
# of the same names are their sum (or a mix) and are left out by default, as the
# OpenTelemetry Java Kafka instrumentation keeps only the most granular attribute set.
_TOPIC_NAMES = ("record-send-rate", "record-send-total", "byte-rate", "byte-total",
                "record-error-rate", "record-error-total")
_NODE_NAMES = ("request-latency-avg", "request-latency-max", "request-rate",
               "request-total")
_BY_TOPIC = frozenset(_TOPIC_NAMES)
_BY_NODE = frozenset(_NODE_NAMES)
_SENT_MESSAGES = "messaging.client.sent.messages"
_DURATION = "messaging.client.operation.duration"
# The semantic conventions' advice for messaging.client.operation.duration (s).
_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0,
                     2.5, 5.0, 7.5, 10.0)


def _unit(java_name: str) -> str:
    if java_name.startswith("byte-") or java_name.startswith("batch-size") \
            or java_name.startswith("buffer-"):
        return "By/s" if java_name.endswith("-rate") else "By"
    if "time-ns" in java_name or java_name == "bufferpool-wait-time-total":
        return "ns"
    if "latency" in java_name or "queue-time" in java_name or "throttle-time" in java_name:
        return "ms"
    if java_name == "metadata-age":
        return "s"
    if java_name.endswith("-rate"):
        return "1/s"
    return "1"


def instrument_name(java_name: str) -> str:
    """``record-send-rate`` -> ``kafka.producer.record_send_rate``."""
    return "kafka.producer." + java_name.replace("-", "_")


@dataclass(frozen=True, slots=True)
class MetricPoint:
    """One value of :func:`metric_points`."""

    name: str
    """The OpenTelemetry instrument name (``kafka.producer.record_send_total``)."""
    java_name: str
    """The Java metric name (``record-send-total``), or the semantic-conventions name."""
    group: str
    """Java's metric group: ``producer-metrics``, ``producer-topic-metrics``,
    ``producer-node-metrics`` (``messaging`` for the semantic-conventions counter)."""
    kind: str
    """``counter`` (monotonic, a ``-total``) or ``gauge``."""
    unit: str
    value: float
    attributes: dict[str, str] = field(default_factory=dict)


def _kind(java_name: str) -> str:
    return "counter" if java_name.endswith("-total") else "gauge"


def metric_points(producer: ProducerLike, *, most_granular: bool = True) -> list[MetricPoint]:
    """The producer's metrics (``producer.metrics()``) as named points, without
    OpenTelemetry: the Java names under ``kafka.producer.*`` (with ``client-id``, and
    ``topic`` or ``node-id``) and ``messaging.client.sent.messages`` per topic.

    ``most_granular``: leave out the producer-level values of the metrics that also
    exist per topic or per node (summing over the attributes would count them twice).
    """
    snap = producer.metrics()
    cid = producer.config.client_id
    points: list[MetricPoint] = []
    for name, value in snap.producer.items():
        if most_granular and (name in _BY_TOPIC or name in _BY_NODE):
            continue
        points.append(MetricPoint(instrument_name(name), name, "producer-metrics",
                                  _kind(name), _unit(name), float(value),
                                  {"client-id": cid}))
    for topic, values in snap.topics.items():
        for name, value in values.items():
            points.append(MetricPoint(instrument_name(name), name, "producer-topic-metrics",
                                      _kind(name), _unit(name), float(value),
                                      {"client-id": cid, "topic": topic}))
        points.append(MetricPoint(
            _SENT_MESSAGES, _SENT_MESSAGES, "messaging", "counter", "{message}",
            float(values.get("record-send-total", 0.0)),
            {"messaging.system": _SYSTEM, "messaging.operation.name": "send",
             "messaging.destination.name": topic, "messaging.client.id": cid}))
    for node, values in snap.nodes.items():
        for name, value in values.items():
            points.append(MetricPoint(instrument_name(name), name, "producer-node-metrics",
                                      _kind(name), _unit(name), float(value),
                                      {"client-id": cid, "node-id": str(node)}))
    return points


def _api() -> Any:
    try:
        from opentelemetry import trace
    except ImportError as exc:
        raise ConfigError(
            "tracer_provider/meter_provider need the OpenTelemetry API: "
            "pip install 'aioproducer[otel]'") from exc
    return trace


def _version() -> str:
    from ._version import __version__
    return __version__


def register_metrics(producer: ProducerLike, meter_provider: Any) -> None:
    """Register observable instruments for ``producer``'s metrics with
    ``meter_provider`` (``"global"``: OpenTelemetry's global one). The callbacks hold
    the producer weakly and read ``producer.metrics()`` once per collection."""
    _api()
    if meter_provider == "global":
        from opentelemetry import metrics as otel_metrics
        meter = otel_metrics.get_meter(_SCOPE, _version())
    else:
        meter = meter_provider.get_meter(_SCOPE, _version())
    ref = weakref.ref(producer)
    cache: list[Any] = [0.0, []]  # (taken at, points): one snapshot per collection

    def points() -> list[MetricPoint]:
        now = time.monotonic()
        if now - cache[0] > 0.05:
            p = ref()
            cache[1] = metric_points(p) if p is not None else []
            cache[0] = now
        result: list[MetricPoint] = cache[1]
        return result

    from opentelemetry.metrics import CallbackOptions, Observation

    def callback(name: str, _options: CallbackOptions) -> Iterator[Observation]:
        for pt in points():
            if pt.name == name:
                yield Observation(pt.value, pt.attributes)

    known = list(producer.metrics().producer)
    names = [n for n in known if n not in _BY_TOPIC and n not in _BY_NODE]
    names += list(_TOPIC_NAMES) + list(_NODE_NAMES)
    for java_name in names:
        name = instrument_name(java_name)
        make = (meter.create_observable_counter if _kind(java_name) == "counter"
                else meter.create_observable_gauge)
        make(name, callbacks=[partial(callback, name)], unit=_unit(java_name),
             description=f"The Java producer metric {java_name}")
    meter.create_observable_counter(
        _SENT_MESSAGES, callbacks=[partial(callback, _SENT_MESSAGES)], unit="{message}",
        description="Number of messages the producer sent to the broker (first attempts)")


def _key_attribute(key: Any) -> str | None:
    """The key's string form, or None where it has no unambiguous one (bytes that are
    not UTF-8): the conventions say to leave the attribute out then."""
    if isinstance(key, str):
        return key
    if isinstance(key, (bytes, bytearray, memoryview)):
        try:
            return bytes(key).decode("utf-8")
        except UnicodeDecodeError:
            return None
    return str(key)


def _error_type(exc: BaseException) -> str:
    """``error.type``: the Kafka error code's name for an error a broker answered
    (``MESSAGE_TOO_LARGE``, ``NOT_ENOUGH_REPLICAS``, as the conventions' examples), the
    exception's class name otherwise (``DeliveryTimeoutError``, ``RecordTooLargeError``)."""
    code = getattr(exc, "code", None)
    if code is not None and isinstance(exc, BrokerResponseError):
        return str(code.name).upper()
    return type(exc).__qualname__


class Tracing:
    """The per-record part: spans, header injection and the duration histogram."""

    def __init__(self, tracer_provider: Any, propagator: Any, meter_provider: Any,
                 client_id: str, metadata: Metadata) -> None:
        trace = _api()
        self._trace = trace
        self._kind = trace.SpanKind.PRODUCER
        if tracer_provider == "global":
            self._tracer = trace.get_tracer(_SCOPE, _version())  # follows a later set
        else:
            self._tracer = tracer_provider.get_tracer(_SCOPE, _version())
        if propagator is None:
            from opentelemetry import propagate
            self._inject: Callable[..., None] = propagate.inject  # the global, at call time
        else:
            self._inject = propagator.inject
        from opentelemetry.trace.status import Status, StatusCode
        self._error_status = partial(Status, StatusCode.ERROR)
        self._client_id = client_id
        self._metadata = metadata
        self._duration: Any = None
        if meter_provider is not None:
            from opentelemetry import metrics as otel_metrics
            meter = (otel_metrics.get_meter(_SCOPE, _version()) if meter_provider == "global"
                     else meter_provider.get_meter(_SCOPE, _version()))
            self._duration = meter.create_histogram(
                _DURATION, unit="s",
                description="Duration of a send, from send() to the acknowledgement",
                explicit_bucket_boundaries_advisory=list(_DURATION_BUCKETS))

    def _start(self, topic: str, attributes: dict[str, Any]) -> Any:
        attrs: dict[str, Any] = {
            "messaging.system": _SYSTEM,
            "messaging.operation.name": "send",
            "messaging.operation.type": "send",
            "messaging.destination.name": topic,
            "messaging.client.id": self._client_id,
        }
        attrs.update(attributes)
        return self._tracer.start_span(f"send {topic}", kind=self._kind, attributes=attrs)

    def _leader(self, topic: str, partition: int) -> tuple[str, int] | None:
        cluster = self._metadata.cluster
        node = cluster.leaders.get((topic, partition))
        return None if node is None else cluster.nodes.get(node)

    def _end(self, span: Any, started: float, topic: str, exc: BaseException | None,
             where: dict[str, Any] | None = None) -> None:
        """End ``span``; record the duration with ``where`` (partition id, server
        address and port, when known)."""
        error = None if exc is None else _error_type(exc)
        if exc is not None:
            span.set_attribute("error.type", error)
            span.record_exception(exc)
            span.set_status(self._error_status(f"{type(exc).__name__}: {exc}"))
        if self._duration is not None:
            attrs = {"messaging.system": _SYSTEM, "messaging.operation.name": "send",
                     "messaging.operation.type": "send",
                     "messaging.destination.name": topic}
            if where:
                attrs.update(where)
            if error is not None:
                attrs["error.type"] = error
            self._duration.record(time.perf_counter() - started, attrs)
        span.end()

    def _headers(self, span: Any, headers: Sequence[Header] | None) -> Any:
        if headers is not None and (isinstance(headers, (str, bytes))
                                    or not isinstance(headers, (list, tuple))):
            return headers  # not headers: send() refuses them with its usual error
        carrier: dict[str, str] = {}
        self._inject(carrier, context=self._trace.set_span_in_context(span))
        if not carrier:
            return None if headers is None else list(headers)
        out: list[Any] = [] if headers is None else list(headers)
        taken = {h[0].lower() for h in out
                 if isinstance(h, tuple) and len(h) == 2 and isinstance(h[0], str)}
        for k, v in carrier.items():
            if k.lower() not in taken:
                out.append((k, v.encode()))
        return out

    async def send(self, send: Callable[..., Awaitable[RecordFuture]], topic: Any,
                   value: Any, key: Any, partition: int | None, timestamp_ms: int | None,
                   headers: Sequence[Header] | None) -> RecordFuture:
        """Trace ``send(topic, value, key, partition, timestamp_ms, headers)``."""
        started = time.perf_counter()
        attrs: dict[str, Any] = {}
        if key is not None:
            text = _key_attribute(key)
            if text is not None:
                attrs["messaging.kafka.message.key"] = text
        if value is None:
            attrs["messaging.kafka.message.tombstone"] = True
        name = topic if isinstance(topic, str) else str(topic)
        if type(partition) is int and partition >= 0:
            attrs["messaging.destination.partition.id"] = str(partition)
            leader = self._leader(name, partition)  # at creation, for samplers
            if leader is not None:
                attrs["server.address"], attrs["server.port"] = leader
        span = self._start(name, attrs)
        try:
            fut = await send(topic, value, key, partition, timestamp_ms,
                             self._headers(span, headers))
        except BaseException as exc:
            self._end(span, started, name, exc)
            raise
        if self._duration is None and not span.is_recording():
            # Sampled out (or a no-op tracer): nothing to record at the ack. The context
            # went into the headers all the same, with its sampled flag.
            span.end()
            return fut
        fut.add_done_callback(partial(self._acknowledged, span, started, name))
        return fut

    def _acknowledged(self, span: Any, started: float, topic: str,
                      fut: RecordFuture) -> None:
        if fut.cancelled():  # the caller cancelled its handle; the record is still sent
            span.set_attribute("aioproducer.handle_cancelled", True)
            span.end()
            return
        exc = fut.exception()
        where: dict[str, Any] = {}
        offset = -1
        if exc is None:
            meta = fut.result()
            partition, offset = meta.partition, meta.offset
        else:
            partition = fut.partition
        if partition >= 0:
            where["messaging.destination.partition.id"] = str(partition)
            leader = self._leader(topic, partition)
            if leader is not None:
                where["server.address"], where["server.port"] = leader
        if span.is_recording():
            attrs = dict(where)
            if offset >= 0:
                attrs["messaging.kafka.offset"] = offset
            span.set_attributes(attrs)  # one call: the SDK locks the span for each
        self._end(span, started, topic, exc, where)

    def _many_headers(self, span: Any, count: int | None,
                      headers: Sequence[Sequence[Header] | None] | None) -> Any:
        """Per-record headers for send_many: the call span's context in each record's
        (the caller's headers kept). Arrow columns are passed on as they are."""
        if count is None or not (headers is None or isinstance(headers, (list, tuple))):
            return headers
        injected = self._headers(span, None)
        if not injected:
            return headers
        if headers is None:
            return [injected] * count  # one list for all: only read
        out: list[Any] = []
        for h in headers:
            out.append(injected if h is None else self._headers(span, h))
        return out

    async def send_many(self, send_many: Callable[..., Awaitable[SendManyResult]],
                        topic: Any, values: Sequence[Any], keys: Sequence[Any] | None,
                        partition: int | None, timestamp_ms: int | None,
                        headers: Sequence[Sequence[Header] | None] | None = None
                        ) -> SendManyResult:
        """One span for a ``send_many()`` call, ended when all its records are done;
        its context goes into every record's headers."""
        started = time.perf_counter()
        attrs: dict[str, Any] = {}
        count = len(values) if hasattr(values, "__len__") else None
        if count is not None:
            attrs["messaging.batch.message_count"] = count
        if type(partition) is int and partition >= 0:
            attrs["messaging.destination.partition.id"] = str(partition)
        name = topic if isinstance(topic, str) else str(topic)
        span = self._start(name, attrs)
        try:
            many = self._many_headers(span, count, headers)
            if many is None:
                result = await send_many(topic, values, keys, partition, timestamp_ms)
            else:
                result = await send_many(topic, values, keys, partition, timestamp_ms,
                                         headers=many)
        except BaseException as exc:
            self._end(span, started, name, exc)
            raise
        span.set_attribute("messaging.batch.message_count", result.count)
        futures = [b.result for b in result._batches]
        remaining = [len(futures)]

        def one_done(_fut: Any) -> None:
            remaining[0] -= 1
            if remaining[0] == 0:
                failures = result.failures()
                self._end(span, started, name, failures[0][2] if failures else None)

        if not futures:
            self._end(span, started, name, None)
        for f in futures:
            f.add_done_callback(one_done)
        return result


def setup(producer: _Traced, tracer_provider: Any, meter_provider: Any,
          propagator: Any) -> Tracing | None:
    """Called by the producer for its ``tracer_provider``/``meter_provider``/
    ``propagator`` options: registers the metrics, returns the tracing hook (None
    without a tracer provider)."""
    if meter_provider is not None:
        register_metrics(producer, meter_provider)
    if tracer_provider is None:
        return None
    return Tracing(tracer_provider, propagator, meter_provider, producer.config.client_id,
                   producer._metadata)
