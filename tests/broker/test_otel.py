"""OpenTelemetry tracing and metrics on a real broker, checked with the SDK's in-memory
exporter and reader; records are read back with confluent-kafka and the trace context
is extracted from their headers with the propagator."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from support.kafka_util import Consumed, consume_all

from aioproducer import Producer
from aioproducer.errors import MessageTooLargeError, RecordTooLargeError, SerializationError

pytestmark = pytest.mark.asyncio

W3C = TraceContextTextMapPropagator()


@pytest.fixture
def spans() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def _sends(exporter: InMemorySpanExporter, topic: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == f"send {topic}"]


def _context_of(record: Consumed) -> trace.SpanContext:
    carrier = {k: v.decode() for k, v in record.headers if v is not None}
    ctx = W3C.extract(carrier)
    return trace.get_current_span(ctx).get_span_context()


async def test_send_spans_follow_the_conventions_and_travel_in_the_headers(
        kafka_bootstrap: str, topic_factory: Any, spans: Any) -> None:
    provider, exporter = spans
    topic = topic_factory(partitions=2)
    tracer = provider.get_tracer("test")
    async with Producer(bootstrap_servers=kafka_bootstrap, linger_ms=5,
                        client_id="otel-test", tracer_provider=provider,
                        propagator=W3C) as producer:
        assert producer._appender.hot is False  # tracing takes the Python path
        with tracer.start_as_current_span("handler") as parent:
            futs = [await producer.send(topic, b"v%d" % i, key=b"k%d" % i,
                                        headers=[("app", b"x")]) for i in range(6)]
            futs.append(await producer.send(topic, b"explicit", partition=1))
            metas = await asyncio.gather(*futs)
        await producer.flush()
    sent = _sends(exporter, topic)
    assert len(sent) == 7
    by_offset = {(s.attributes["messaging.destination.partition.id"],
                  s.attributes["messaging.kafka.offset"]): s for s in sent}
    host, port = kafka_bootstrap.rsplit(":", 1)
    for i, meta in enumerate(metas):
        span = by_offset[(str(meta.partition), meta.offset)]
        assert span.kind is SpanKind.PRODUCER
        assert span.status.status_code is StatusCode.UNSET
        a = span.attributes
        assert a["messaging.system"] == "kafka"
        assert a["messaging.operation.name"] == "send"
        assert a["messaging.operation.type"] == "send"
        assert a["messaging.destination.name"] == topic
        assert a["messaging.client.id"] == "otel-test"
        assert a["server.address"] == host and a["server.port"] == int(port)
        assert "error.type" not in a
        if i < 6:
            assert a["messaging.kafka.message.key"] == f"k{i}"
        else:
            assert "messaging.kafka.message.key" not in a
        assert span.parent is not None
        assert span.parent.span_id == parent.get_span_context().span_id
        assert span.context.trace_id == parent.get_span_context().trace_id

    records = consume_all(kafka_bootstrap, topic, 7)
    assert len(records) == 7
    for rec in records:
        span = by_offset[(str(rec.partition), rec.offset)]
        ctx = _context_of(rec)
        assert ctx.trace_id == span.context.trace_id
        assert ctx.span_id == span.context.span_id  # the producer span is the parent
        names = [k for k, _ in rec.headers]
        assert names.count("traceparent") == 1
        if rec.value != b"explicit":
            assert ("app", b"x") in rec.headers


async def test_a_header_the_caller_set_is_kept(kafka_bootstrap: str, topic_factory: Any,
                                                spans: Any) -> None:
    provider, exporter = spans
    topic = topic_factory()
    mine = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    async with Producer(bootstrap_servers=kafka_bootstrap, tracer_provider=provider,
                        propagator=W3C) as producer:
        meta = await producer.send_and_wait(topic, b"v", headers=[("traceparent", mine)])
    [rec] = consume_all(kafka_bootstrap, topic, 1)
    assert rec.headers == [("traceparent", mine)]
    [span] = _sends(exporter, topic)
    assert span.attributes["messaging.kafka.offset"] == meta.offset


async def test_failures_end_the_span_with_error_type(kafka_bootstrap: str,
                                                     topic_factory: Any, spans: Any) -> None:
    provider, exporter = spans
    small = topic_factory(config={"max.message.bytes": "2000"})
    async with Producer(bootstrap_servers=kafka_bootstrap, tracer_provider=provider,
                        max_request_size=50_000, linger_ms=0) as producer:
        # Refused in send(): larger than max_request_size.
        with pytest.raises(RecordTooLargeError):
            await producer.send(small, b"x" * 60_000)
        # Refused by the broker, after it was buffered: the done callback ends the span.
        fut = await producer.send(small, b"y" * 10_000)
        with pytest.raises(MessageTooLargeError):
            await fut
    # A broker's answer is named by its Kafka error code (as the conventions' examples,
    # KAFKA_STORAGE_ERROR...), an error of ours by its class.
    by_error = {s.attributes["error.type"]: s for s in _sends(exporter, small)}
    assert set(by_error) == {"RecordTooLargeError", "MESSAGE_TOO_LARGE"}
    for span in by_error.values():
        assert span.status.status_code is StatusCode.ERROR
        assert "messaging.kafka.offset" not in span.attributes
        assert [e.name for e in span.events] == ["exception"]
    assert by_error["MESSAGE_TOO_LARGE"].attributes[
        "messaging.destination.partition.id"] == "0"
    assert by_error["MESSAGE_TOO_LARGE"].events[0].attributes[
        "exception.type"].endswith("MessageTooLargeError")


async def test_bad_headers_get_the_untraced_error(kafka_bootstrap: str, topic_factory: Any,
                                                  spans: Any) -> None:
    provider, exporter = spans
    topic = topic_factory()
    async with Producer(bootstrap_servers=kafka_bootstrap) as plain, \
            Producer(bootstrap_servers=kafka_bootstrap, tracer_provider=provider) as traced:
        for bad in ({"a": b"1"}, "a=1", [("a", b"1"), "b"]):
            with pytest.raises(SerializationError) as untraced:
                await plain.send(topic, b"v", headers=bad)  # type: ignore[arg-type]
            with pytest.raises(SerializationError) as with_tracing:
                await traced.send(topic, b"v", headers=bad)  # type: ignore[arg-type]
            assert str(with_tracing.value) == str(untraced.value)
    failed = _sends(exporter, topic)
    assert len(failed) == 3
    assert {s.attributes["error.type"] for s in failed} == {"SerializationError"}


async def test_tombstones_and_keys_without_a_string_form(
        kafka_bootstrap: str, topic_factory: Any, spans: Any) -> None:
    provider, exporter = spans
    topic = topic_factory(partitions=2)
    async with Producer(bootstrap_servers=kafka_bootstrap, tracer_provider=provider,
                        propagator=W3C) as producer:
        tomb = await producer.send_and_wait(topic, None, key=b"gone")
        binary = await producer.send_and_wait(topic, b"v", key=b"\xff\xfe")
        plain = await producer.send_and_wait(topic, b"v", key="k\u00e9".encode())
        explicit = await producer.send_and_wait(topic, b"v", partition=1)
    by_offset = {(s.attributes["messaging.destination.partition.id"],
                  s.attributes["messaging.kafka.offset"]): s.attributes
                 for s in _sends(exporter, topic)}

    def attrs(meta: Any) -> Any:
        return by_offset[(str(meta.partition), meta.offset)]
    assert attrs(tomb)["messaging.kafka.message.tombstone"] is True
    assert attrs(tomb)["messaging.kafka.message.key"] == "gone"
    # Not UTF-8: no unambiguous string form, so no attribute (the conventions' rule).
    assert "messaging.kafka.message.key" not in attrs(binary)
    assert attrs(plain)["messaging.kafka.message.key"] == "k\u00e9"
    for meta in (binary, plain, explicit):
        assert "messaging.kafka.message.tombstone" not in attrs(meta)
    records = {(r.partition, r.offset): r for r in consume_all(kafka_bootstrap, topic, 4)}
    assert records[(tomb.partition, tomb.offset)].value is None  # a tombstone indeed
    [tomb_span] = [s for s in _sends(exporter, topic)
                   if s.attributes.get("messaging.kafka.message.tombstone")]
    assert _context_of(records[(tomb.partition, tomb.offset)]).span_id == \
        tomb_span.context.span_id


async def test_a_sampled_out_send_still_propagates_its_context(
        kafka_bootstrap: str, topic_factory: Any) -> None:
    """With a sampler that drops every span, nothing is exported, yet each record carries
    the context with the sampled flag off (a consumer must not start a new trace)."""
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=ALWAYS_OFF)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    topic = topic_factory()
    async with Producer(bootstrap_servers=kafka_bootstrap, tracer_provider=provider,
                        propagator=W3C) as producer:
        with provider.get_tracer("test").start_as_current_span("handler") as parent:
            futs = [await producer.send(topic, b"v%d" % i) for i in range(5)]
            await asyncio.gather(*futs)
    assert exporter.get_finished_spans() == ()
    records = consume_all(kafka_bootstrap, topic, 5)
    assert len(records) == 5
    for rec in records:
        ctx = _context_of(rec)
        assert ctx.trace_id == parent.get_span_context().trace_id
        assert ctx.is_valid and not ctx.trace_flags.sampled


async def test_send_many_makes_one_span_for_the_call(kafka_bootstrap: str,
                                                     topic_factory: Any, spans: Any) -> None:
    provider, exporter = spans
    topic, other = topic_factory(partitions=3), topic_factory()
    mine = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    headers: list[Any] = [None] * 10
    headers[3] = [("traceparent", mine)]
    headers[4] = [("app", b"x")]
    async with Producer(bootstrap_servers=kafka_bootstrap, tracer_provider=provider,
                        propagator=W3C, linger_ms=20) as producer:
        result = await producer.send_many(topic, [b"a%d" % i for i in range(50)],
                                          [b"k%d" % i for i in range(50)])
        assert _sends(exporter, topic) == []  # not acknowledged yet: the span is open
        assert await result == 50
        await (await producer.send_many(other, [b"b%d" % i for i in range(10)],
                                        headers=headers))
        await producer.flush()
        await asyncio.sleep(0)  # done-callbacks run on the next turn of the loop
    [span] = _sends(exporter, topic)
    assert span.kind is SpanKind.PRODUCER
    assert span.attributes["messaging.batch.message_count"] == 50
    assert "error.type" not in span.attributes
    records = consume_all(kafka_bootstrap, topic, 50)
    assert len(records) == 50
    for rec in records:  # every record carries the call's span context
        ctx = _context_of(rec)
        assert (ctx.trace_id, ctx.span_id) == (span.context.trace_id, span.context.span_id)
    [span2] = _sends(exporter, other)
    assert span2.attributes["messaging.batch.message_count"] == 10
    by_value = {r.value: r for r in consume_all(kafka_bootstrap, other, 10)}
    assert by_value[b"b3"].headers == [("traceparent", mine)]  # the caller's, kept
    assert by_value[b"b4"].headers[0] == ("app", b"x")
    for value in (b"b0", b"b4", b"b9"):
        assert _context_of(by_value[value]).span_id == span2.context.span_id


async def test_tracing_off_keeps_the_native_path_and_makes_no_spans(
        kafka_bootstrap: str, topic_factory: Any, spans: Any) -> None:
    provider, exporter = spans
    topic = topic_factory()
    reader = InMemoryMetricReader()
    # A meter provider alone does not change the send path either.
    async with Producer(bootstrap_servers=kafka_bootstrap,
                        meter_provider=MeterProvider(metric_readers=[reader])) as producer:
        assert producer._tracing is None
        assert producer._appender.hot is True
        with provider.get_tracer("test").start_as_current_span("handler"):
            await producer.send_and_wait(topic, b"v", key=b"k")
            await (await producer.send_many(topic, [b"a", b"b"]))
    assert [s.name for s in exporter.get_finished_spans()] == ["handler"]
    [rec, *_] = consume_all(kafka_bootstrap, topic, 3)
    assert all(k != "traceparent" for k, _ in rec.headers)


def _points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    data = reader.get_metrics_data()
    out: dict[str, list[Any]] = {}
    assert data is not None
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            assert sm.scope.name == "aioproducer"
            for metric in sm.metrics:
                out.setdefault(metric.name, []).extend(metric.data.data_points)
    return out


async def test_metrics_equal_the_producers_own_counters(kafka_bootstrap: str,
                                                        topic_factory: Any,
                                                        spans: Any) -> None:
    provider, _ = spans
    a, b = topic_factory(partitions=2), topic_factory()
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    async with Producer(bootstrap_servers=kafka_bootstrap, client_id="otel-metrics",
                        linger_ms=5, tracer_provider=provider,
                        meter_provider=meters) as producer:
        futs = [await producer.send(a, b"%d" % i, key=b"%d" % (i % 7)) for i in range(300)]
        futs += [await producer.send(b, b"%d" % i) for i in range(120)]
        await asyncio.gather(*futs)
        await producer.flush()
        await asyncio.sleep(0)
        m = producer.metrics()
        points = _points(reader)

    def by(name: str, attr: str) -> dict[str, float]:
        return {p.attributes[attr]: p.value for p in points[name]}

    assert by("kafka.producer.record_send_total", "topic") == {
        a: m.topics[a]["record-send-total"], b: m.topics[b]["record-send-total"]}
    assert m.topics[a]["record-send-total"] == 300
    assert by("kafka.producer.byte_total", "topic") == {
        a: m.topics[a]["byte-total"], b: m.topics[b]["byte-total"]}
    assert by("messaging.client.sent.messages", "messaging.destination.name") == {
        a: 300, b: 120}
    [sent] = [p for p in points["messaging.client.sent.messages"]
              if p.attributes["messaging.destination.name"] == a]
    assert sent.attributes["messaging.system"] == "kafka"
    assert sent.attributes["messaging.client.id"] == "otel-metrics"
    # Producer-level metrics: client-id only, the snapshot's values.
    for name in ("batch-size-avg", "batch-size-max", "records-per-request-avg",
                 "record-retry-total", "buffer-total-bytes", "compression-rate-avg"):
        [pt] = points["kafka.producer." + name.replace("-", "_")]
        assert pt.attributes == {"client-id": "otel-metrics"}
        assert pt.value == pytest.approx(m[name]), name
    # Per node: the request totals add up to the producer's.
    assert sum(by("kafka.producer.request_total", "node-id").values()) == m["request-total"]
    # Counted per topic, not also per producer (no double count when summed).
    assert all("topic" in p.attributes for p in points["kafka.producer.record_send_total"])
    # send -> ack durations, one per record, with tracing on; one series per partition.
    host, port = kafka_bootstrap.rsplit(":", 1)
    durations: dict[str, list[Any]] = {}
    for p in points["messaging.client.operation.duration"]:
        durations.setdefault(p.attributes["messaging.destination.name"], []).append(p)
        assert p.attributes["messaging.system"] == "kafka"
        assert p.attributes["messaging.operation.name"] == "send"
        assert p.attributes["messaging.operation.type"] == "send"
        assert p.attributes["server.address"] == host
        assert p.attributes["server.port"] == int(port)
        assert "error.type" not in p.attributes
    assert {p.attributes["messaging.destination.partition.id"]
            for p in durations[a]} <= {"0", "1"}
    assert sum(p.count for p in durations[a]) == 300
    assert sum(p.count for p in durations[b]) == 120
    assert 0 < sum(p.sum for p in durations[a]) < 300 * 30


_EXTRAS = ("opentelemetry", "httpx", "fastavro", "jsonschema", "google.protobuf", "pydantic")


async def test_producing_without_the_extras_installed(kafka_bootstrap: str,
                                                      topic_factory: Any) -> None:
    """With the otel and schema extras' packages unimportable (as if not installed), the
    library imports, produces (send, send_and_wait, send_many, headers) and reads its
    metrics; none of those packages is even looked for."""
    topic = topic_factory()
    code = textwrap.dedent(f"""
        import asyncio, sys
        BLOCKED = {_EXTRAS!r}
        looked_for = []

        class NotInstalled:
            def find_spec(self, name, path=None, target=None):
                if any(name == b or name.startswith(b + ".") for b in BLOCKED):
                    looked_for.append(name)
                    raise ImportError(f"No module named {{name!r}} (blocked by the test)")
                return None

        sys.meta_path.insert(0, NotInstalled())
        from aioproducer import Producer
        from aioproducer.otel import metric_points

        async def main():
            async with Producer(bootstrap_servers={kafka_bootstrap!r}, linger_ms=1) as p:
                assert p._appender.hot and p._tracing is None and p._telemetry is not None
                await p.send_and_wait({topic!r}, b"one", key=b"k")
                await (await p.send({topic!r}, b"two", headers=[("h", b"1")]))
                await (await p.send_many({topic!r}, [b"three", b"four"]))
                return p.metrics()["record-send-total"], len(metric_points(p))

        sent, points = asyncio.run(main())
        print(sent, points > 10, looked_for)
        print(sorted({{m.split(".")[0] for m in sys.modules}} & {{"opentelemetry", "httpx",
              "fastavro", "jsonschema", "pydantic", "google"}}))
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = await asyncio.to_thread(subprocess.run, [sys.executable, "-c", code],
                                   capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["4.0 True []", "[]"]
    records = consume_all(kafka_bootstrap, topic, 4)
    assert sorted(r.value for r in records) == [b"four", b"one", b"three", b"two"]
