"""What OpenTelemetry costs a ``send()``: records/s and CPU per record, tracing off and on.

Modes (each a fresh producer and topic, ``send()`` of N records then ``flush()``):

* ``off``: no OpenTelemetry option (the default);
* ``headers``: no OpenTelemetry, each record with one header (the Python path that
  tracing takes, without the tracing: the baseline for the ``on-*`` modes);
* ``meter``: ``meter_provider`` only (the SDK's, with an in-memory reader);
* ``on-noop``: ``tracer_provider`` = the API's NoOpTracerProvider (the Python path and
  the header injection, spans that record nothing);
* ``on-sdk``: the SDK's TracerProvider with a BatchSpanProcessor and an exporter that
  drops the spans, plus the meter provider (the duration histogram is recorded).

Besides the times, it counts the Python function calls made per ``send()`` (with
``sys.setprofile``, over 1,000 sends after the warm-up: 1 is the ``send`` coroutine
itself, the rest the Python path for the records that open a new batch), and prints a
digest of ``Producer.send``'s bytecode up to the native fast path's ``return``: with
tracing off both are those of main before aioproducer.otel existed. Run it against
that code with ``--code DIR`` (a checkout with the compiled core) to compare in the
same minute (``--modes off``; that code has no OpenTelemetry options)::

    .venv/bin/python -m bench.otel_overhead --bootstrap 127.0.0.1:9092 --records 200000
    .venv/bin/python -m bench.otel_overhead --code /tmp/main-before --modes off

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

MODES = ("off", "headers", "meter", "on-noop", "on-sdk")


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


def _fast_path_digest() -> str:
    """sha1 of Producer.send's instructions up to its first return (the native call)."""
    import dis
    import hashlib

    from aioproducer import Producer

    out = []
    for ins in dis.get_instructions(Producer.send):
        out.append((ins.opname, ins.argrepr))
        if ins.opname == "RETURN_VALUE":
            break
    return hashlib.sha1(repr(out).encode()).hexdigest()[:12]


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

        sys.setprofile(profile)
        try:
            for _ in range(1000):
                await p.send(topic, value)
        finally:
            sys.setprofile(None)
        await p.flush()
        hot = bool(getattr(p, "_hot", None))
        send = p.send
        cpu0, t0 = _cpu(), time.perf_counter()
        if mode == "headers":
            hdrs = [("h", b"1")]
            for _ in range(records):
                await send(topic, value, headers=hdrs)
        else:
            for _ in range(records):
                await send(topic, value)
        await p.flush()
        wall, cpu = time.perf_counter() - t0, _cpu() - cpu0
    # 1 call per send is the coroutine send() itself
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
    args = ap.parse_args(argv)
    if args.code:
        sys.path.insert(0, args.code)
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    print(f"seed {seed}", file=sys.stderr)
    rng = random.Random(seed)
    value = rng.randbytes(args.value_size)
    import aioproducer
    print(f"aioproducer from {aioproducer.__file__}", file=sys.stderr)
    print(f"send() fast path bytecode digest {_fast_path_digest()}", file=sys.stderr)

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
    print(f"{'mode':8} {'records/s':>11} {'CPU us/record':>14} {'py calls/send':>14} hot")
    for mode, runs in results.items():
        rate = statistics.median(r["records_per_s"] for r in runs)
        cpu = statistics.median(r["cpu_us_per_record"] for r in runs)
        print(f"{mode:8} {rate:11,.0f} {cpu:14.2f} {runs[0]['python_calls_per_send']:14.1f} "
              f"{runs[0]['hot']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
