"""aioproducer.otel without a broker: the library without OpenTelemetry installed, option
checks, metric names, header injection."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from aioproducer import ConfigError, Producer
from aioproducer.metadata import Metadata
from aioproducer.otel import Tracing, instrument_name, metric_points

_BLOCKED = textwrap.dedent("""
    import sys

    class NoOpenTelemetry:
        def find_spec(self, name, path=None, target=None):
            if name == "opentelemetry" or name.startswith("opentelemetry."):
                raise ImportError(f"No module named {name!r} (blocked by the test)")
            return None

    sys.meta_path.insert(0, NoOpenTelemetry())
""")


def _run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_the_library_works_without_opentelemetry() -> None:
    out = _run(_BLOCKED + textwrap.dedent("""
        import aioproducer, aioproducer.otel
        from aioproducer import ConfigError, Producer
        from aioproducer.otel import metric_points
        p = Producer(bootstrap_servers="127.0.0.1:1")
        assert p._tracing is None
        print(len(metric_points(p)) > 10)
        for option in ("tracer_provider", "meter_provider"):
            try:
                Producer(bootstrap_servers="127.0.0.1:1", **{option: "global"})
            except ConfigError as exc:
                print(exc)
        print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))
    """))
    lines = out.splitlines()
    assert lines[0] == "True"
    assert len(lines) == 4
    for line in lines[1:3]:
        assert "pip install 'aioproducer[otel]'" in line
    assert lines[3] == "[]"


def test_importing_the_library_does_not_import_opentelemetry() -> None:
    out = _run("import sys, aioproducer, aioproducer.otel\n"
               "from aioproducer import Producer\n"
               "Producer(bootstrap_servers='127.0.0.1:1')\n"
               "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))")
    assert out.strip() == "[]"


@pytest.mark.parametrize("option, value, message", [
    ("tracer_provider", object(), "tracer_provider must be an OpenTelemetry TracerProvider"),
    ("tracer_provider", "yes", "tracer_provider must be"),
    ("meter_provider", 3, "meter_provider must be an OpenTelemetry MeterProvider"),
    ("propagator", "w3c", "propagator must be an OpenTelemetry TextMapPropagator"),
])
def test_bad_options_are_config_errors(option: str, value: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Producer(bootstrap_servers="127.0.0.1:1", **{option: value})


def test_tracing_is_off_unless_a_tracer_provider_is_given() -> None:
    assert Producer(bootstrap_servers="127.0.0.1:1")._tracing is None
    assert Producer(bootstrap_servers="127.0.0.1:1",
                    tracer_provider=TracerProvider())._tracing is not None
    assert Producer(bootstrap_servers="127.0.0.1:1",
                    tracer_provider="global")._tracing is not None


def test_metric_points_use_the_java_names() -> None:
    p = Producer(bootstrap_servers="127.0.0.1:1", client_id="c1")
    assert instrument_name("record-send-rate") == "kafka.producer.record_send_rate"
    pts = {pt.java_name: pt for pt in metric_points(p)}
    assert pts["batch-size-avg"].name == "kafka.producer.batch_size_avg"
    assert pts["batch-size-avg"].unit == "By"
    assert pts["record-queue-time-avg"].unit == "ms"
    assert pts["bufferpool-wait-time-total"].kind == "counter"
    assert pts["bufferpool-wait-time-total"].unit == "ns"
    assert pts["buffer-total-bytes"].value == p.config.buffer_memory
    assert pts["buffer-total-bytes"].attributes == {"client-id": "c1"}
    # The per-topic / per-node names are left out at the producer level...
    assert "record-send-total" not in pts and "request-latency-avg" not in pts
    # ... unless asked for.
    every = {pt.java_name for pt in metric_points(p, most_granular=False)}
    assert {"record-send-total", "request-latency-avg"} <= every


def test_injected_headers_never_replace_the_callers() -> None:
    tracing = Tracing(TracerProvider(), TraceContextTextMapPropagator(), None, "c",
                      Metadata(max_age_ms=1000, retry_backoff_ms=10,
                               retry_backoff_max_ms=100, max_idle_ms=1000))
    span = tracing._start("t", {})
    tid = f"{span.get_span_context().trace_id:032x}"
    assert tracing._headers(span, None) is not None
    [(name, value)] = tracing._headers(span, None) or []
    assert name == "traceparent" and tid in value.decode()
    mine = [("a", b"1"), ("TraceParent", b"mine")]
    assert tracing._headers(span, mine) == mine
    assert mine == [("a", b"1"), ("TraceParent", b"mine")]  # the caller's list is kept
    out = tracing._headers(span, (("a", None),)) or []
    assert out[0] == ("a", None) and out[1][0] == "traceparent"
    bad = {"a": b"1"}  # not headers: passed on as they are, for send()'s usual error
    assert tracing._headers(span, bad) is bad  # type: ignore[arg-type]
    span.end()


def test_error_type_and_key_attribute_follow_the_conventions() -> None:
    from aioproducer.errors import (
        DeliveryTimeoutError,
        MessageTooLargeError,
        NotLeaderOrFollowerError,
        RecordTooLargeError,
    )
    from aioproducer.otel import _error_type, _key_attribute
    # A broker's answer: the Kafka error code's name (the conventions' examples are
    # UNKNOWN_TOPIC_OR_PARTITION, KAFKA_STORAGE_ERROR...); ours: the class name.
    assert _error_type(MessageTooLargeError()) == "MESSAGE_TOO_LARGE"
    assert _error_type(NotLeaderOrFollowerError()) == "NOT_LEADER_OR_FOLLOWER"
    assert _error_type(RecordTooLargeError("big")) == "RecordTooLargeError"
    assert _error_type(DeliveryTimeoutError("late")) == "DeliveryTimeoutError"
    assert _error_type(ValueError("x")) == "ValueError"
    assert _key_attribute("k") == "k"
    assert _key_attribute(b"k\xc3\xa9") == "k\u00e9"
    assert _key_attribute(memoryview(b"mv")) == "mv"
    assert _key_attribute(b"\xff\xfe") is None  # no unambiguous string form: left out
    assert _key_attribute(42) == "42"
