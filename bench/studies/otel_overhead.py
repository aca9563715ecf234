"""What OpenTelemetry costs a ``send()``: records/s and CPU per record, tracing off and on.

Modes (each a fresh producer and topic, ``send()`` of N records then ``flush()``):

* ``off``: no OpenTelemetry option (the default);
* ``headers``: no OpenTelemetry, each record with one header (the Python path that
  tracing takes, without the tracing: the baseline for the ``on-*`` modes);
* ``meter``: ``meter_provider`` only (the SDK's, with an in-memory reader);
* ``on-noop``: ``tracer_provider`` = the API's NoOpTracerProvider (the Python path and
  the header injection, spans that record nothing);
* ``on-ratio``: the SDK's TracerProvider sampling 1 trace in 100 (``TraceIdRatioBased``),
  no meter provider: what a sampled-out ``send()`` costs (the context still goes into
  the headers, the span is not recorded);
* ``on-sdk``: the SDK's TracerProvider with a BatchSpanProcessor and an exporter that
  drops the spans, plus the meter provider (the duration histogram is recorded).

Besides the times, it counts the Python function calls made per ``send()`` (with
``sys.setprofile``, over 1,000 sends after the warm-up): with tracing off a producer's
``send`` is its appender's native method and appends natively, so the calls counted
are the Python path's for the records that open a new batch (about 0.1 per record);
the ``hot`` column says whether that native path is on. To time older code, run the
bench with ``--code DIR`` (a checkout of it with its core compiled) and ``--modes off``
(before OpenTelemetry there were no such options)::

    .venv/bin/python -m bench.studies.otel_overhead --bootstrap 127.0.0.1:9092 --records 200000 \
        --reps 5 --markdown
    .venv/bin/python -m bench.studies.otel_overhead --code /tmp/main-before --modes off

CPU per record is ``getrusage`` user+system time of this process (the broker runs in
another) divided by the records; wall times on a shared machine are noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from typing import Any

MODES = ("off", "headers", "meter", "on-noop", "on-ratio", "on-sdk")


def _providers(mode: str) -> dict[str, Any]:
    if mode in ("off", "headers"):
        return {}
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    meters = MeterProvider(metric_readers=[InMemoryMetricReader()])
    if mode == "meter":
        return {"meter_provider": meters}
    if mode == "on-noop":
        from opentelemetry.trace import NoOpTracerProvider
        return {"tracer_provider": NoOpTracerProvider()}
    from opentelemetry.sdk.trace import TracerProvider
    if mode == "on-ratio":
        from opentelemetry.sdk.trace.sampling import TraceIdRatioBased
        return {"tracer_provider": TracerProvider(sampler=TraceIdRatioBased(0.01))}
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    class Drop(SpanExporter):
        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    tracers = TracerProvider()
    tracers.add_span_processor(BatchSpanProcessor(Drop(), max_queue_size=1 << 16))
    return {"tracer_provider": tracers, "meter_provider": meters}


def _git(*args: str) -> str:
    import subprocess
    from pathlib import Path
    try:
        return subprocess.run(["git", *args], cwd=Path(__file__).resolve().parents[2],
                              capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"


def _cpu() -> float:
    import resource
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


async def _run(bootstrap: str, mode: str, records: int, value: bytes) -> dict[str, Any]:
    from aioproducer import Producer
    from aioproducer.testing.plugin import _create_topic

    topic = f"otel-bench-{uuid.uuid4().hex[:10]}"
    await _create_topic(bootstrap, topic, 1, 1, {})
    async with Producer(bootstrap_servers=bootstrap, linger_ms=5, acks=1,
                        **_providers(mode)) as p:
        await p.send_and_wait(topic, b"warm-up")
        for _ in range(2000):
            await p.send(topic, value)
        await p.flush()
        calls = [0]

        def profile(_frame: Any, event: str, _arg: Any) -> None:
            if event == "call":
                calls[0] += 1

        hdrs = [("h", b"1")] if mode == "headers" else None
        sys.setprofile(profile)
        try:
            for _ in range(1000):
                await p.send(topic, value, headers=hdrs)
        finally:
            sys.setprofile(None)
        await p.flush()
        # Whether send() appends natively (the appender's flag; _hot in older trees).
        hot = bool(getattr(p._appender, "hot", getattr(p, "_hot", None)))
        send = p.send
        cpu0, t0 = _cpu(), time.perf_counter()
        if hdrs is not None:
            for _ in range(records):
                await send(topic, value, headers=hdrs)
        else:
            for _ in range(records):
                await send(topic, value)
        await p.flush()
        wall, cpu = time.perf_counter() - t0, _cpu() - cpu0
    # Python calls: none for a record on the native path (send is the appender's
    # native method and its PendingSend appends); the Python path's otherwise.
    return {"mode": mode, "records": records, "records_per_s": records / wall,
            "cpu_us_per_record": cpu / records * 1e6, "hot": hot,
            "python_calls_per_send": calls[0] / 1000}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bootstrap", help="host:port (default: start a local broker)")
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    ap.add_argument("--code", help="import aioproducer from this directory")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--json", action="store_true", help="one JSON line per run")
    ap.add_argument("--markdown", action="store_true",
                    help="also print the table as Markdown (docs/observability.md)")
    args = ap.parse_args(argv)
    if args.code:
        sys.path.insert(0, args.code)
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    print(f"seed {seed}", file=sys.stderr)
    rng = random.Random(seed)
    value = rng.randbytes(args.value_size)
    import aioproducer
    print(f"aioproducer from {aioproducer.__file__}", file=sys.stderr)
    commit = _git("rev-parse", "--short", "HEAD")
    if _git("status", "--porcelain", "--", "aioproducer", "bench/studies/otel_overhead.py"):
        commit += " (with uncommitted changes)"
    started = time.strftime("%Y-%m-%d %H:%M %Z")

    broker = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        from aioproducer.devbroker import LocalKafka
        broker = LocalKafka(tempfile.mkdtemp(prefix="otel-bench-"))
        bootstrap = broker.start()
    results: dict[str, list[dict[str, Any]]] = {m: [] for m in args.modes}
    try:
        for _ in range(args.reps):  # interleaved: A B C D A B C D ...
            for mode in args.modes:
                r = asyncio.run(_run(bootstrap, mode, args.records, value))
                results[mode].append(r)
                if args.json:
                    print(json.dumps(r), flush=True)
    finally:
        if broker is not None:
            broker.stop()
    rows = []
    for mode, runs in results.items():
        rates = [r["records_per_s"] for r in runs]
        cpus = [r["cpu_us_per_record"] for r in runs]
        rows.append((mode, statistics.median(rates), statistics.median(cpus), min(cpus),
                     max(cpus), runs[0]["python_calls_per_send"], runs[0]["hot"]))
    print(f"{started}, commit {commit}, {args.reps} reps of {args.records:,} records of "
          f"{args.value_size} B, seed {seed}")
    print(f"{'mode':8} {'records/s':>11} {'CPU us/record':>14} {'(min-max)':>13} "
          f"{'py calls/send':>14} hot")
    for mode, rate, cpu, lo, hi, calls, hot in rows:
        print(f"{mode:8} {rate:11,.0f} {cpu:14.2f} {f'{lo:.2f}-{hi:.2f}':>13} {calls:14.1f} "
              f"{hot}")
    if args.markdown:
        print()
        print("| mode | records/s | CPU µs/record (min-max) | Python calls per send() |")
        print("| --- | ---: | ---: | ---: |")
        for mode, rate, cpu, lo, hi, calls, _hot in rows:
            print(f"| `{mode}` | {rate:,.0f} | {cpu:.2f} ({lo:.2f}-{hi:.2f}) | {calls:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
