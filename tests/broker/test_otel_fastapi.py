"""examples/fastapi_tracing.py with FastAPI's TestClient against the real broker: the
handler's span is the parent of the producer span, and the record read back carries
the producer span's context."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from support.kafka_util import consume_all

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fastapi_tracing.py"


def _load_example() -> Any:
    spec = importlib.util.spec_from_file_location("fastapi_tracing_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_fastapi_example_traces_a_request_into_the_record(
        kafka_bootstrap: str, topic_factory: Any) -> None:
    topic = topic_factory(partitions=3)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    app = _load_example().create_app(kafka_bootstrap, topic, tracer_provider=provider)
    with TestClient(app) as client:
        answers = [client.post(f"/orders/o-{i}", content=b"order %d" % i).json()
                   for i in range(3)]
    spans = exporter.get_finished_spans()
    handlers = [s for s in spans if s.name == "create_order"]
    sends = {(s.attributes["messaging.destination.partition.id"],
              s.attributes["messaging.kafka.offset"]): s
             for s in spans if s.name == f"send {topic}"}
    assert len(handlers) == 3 and len(sends) == 3
    for i, answer in enumerate(answers):
        send = sends[(str(answer["partition"]), answer["offset"])]
        assert send.kind is SpanKind.PRODUCER
        assert send.attributes["messaging.kafka.message.key"] == f"o-{i}"
        [handler] = [h for h in handlers if send.parent is not None
                     and h.context.span_id == send.parent.span_id]
        assert handler.context.trace_id == send.context.trace_id
    records = consume_all(kafka_bootstrap, topic, 3)
    assert len(records) == 3
    for rec in records:
        send = sends[(str(rec.partition), rec.offset)]
        carrier = {k: v.decode() for k, v in rec.headers if v is not None}
        ctx = trace.get_current_span(TraceContextTextMapPropagator().extract(carrier))
        assert ctx.get_span_context().trace_id == send.context.trace_id
        assert ctx.get_span_context().span_id == send.context.span_id
