"""The ``aioproducer`` command: ``perf`` (like kafka-producer-perf-test) and ``broker``."""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import sys
import time
import uuid
from collections.abc import Sequence
from typing import Any

__all__ = ["main"]


def _parse_props(items: Sequence[str]) -> dict[str, str]:
    props: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise SystemExit(
                f"aioproducer: error: --producer-props expects key=value, got {item!r}")
        props[name.strip()] = value.strip()
    return props


def _coerce(value: str) -> Any:
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    try:
        return int(value)
    except ValueError:
        return value


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    idx = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[idx]


async def _perf(args: argparse.Namespace) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from .net.client import KafkaClient
    from .producer import Producer

    bootstrap = args.bootstrap_server or os.environ.get("AIOPRODUCER_BOOTSTRAP")
    if not bootstrap:
        from . import devbroker
        bootstrap = devbroker.running_bootstrap()
        if not bootstrap:
            print("aioproducer: error: no --bootstrap-server given and no local broker "
                  "running (start one with 'aioproducer broker start')", file=sys.stderr)
            return 2
    options: dict[str, Any] = {k: _coerce(v) for k, v in _parse_props(args.producer_props).items()}
    if "bootstrap.servers" not in options and "bootstrap_servers" not in options:
        options["bootstrap_servers"] = bootstrap

    topic = args.topic
    if topic is None:
        topic = f"aioproducer-perf-{uuid.uuid4().hex[:8]}"
    if args.create_topic or args.topic is None:
        admin = KafkaClient(bootstrap, client_id="aioproducer-perf-admin")
        try:
            await admin.bootstrap(30.0)
            await admin.create_topics([(topic, args.partitions, 1, {})], 30.0, exist_ok=True)
        finally:
            await admin.close()

    payload = os.urandom(args.record_size)
    n = args.num_records
    # Latency is sampled on every 16th record to keep the measurement cheap.
    sample_every = 16
    latencies: list[float] = []
    errors: list[BaseException] = []
    done_count = 0

    def on_done(sent_at: float, fut: Any) -> None:
        exc = fut.exception()
        if exc is not None:
            errors.append(exc)
        else:
            latencies.append((time.perf_counter() - sent_at) * 1000.0)

    period = 1.0 / args.throughput if args.throughput and args.throughput > 0 else 0.0
    producer = Producer(options)
    await producer.start()
    start = time.perf_counter()
    last = None
    progress = Progress(
        TextColumn("[bold]producing[/bold]"), BarColumn(), MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"), TimeElapsedColumn(),
        disable=args.no_progress, transient=False,
    )
    try:
        with progress:
            task = progress.add_task("produce", total=n, rate="")
            chunk = 10000
            for i in range(n):
                fut = await producer.send(topic, payload)
                if i % sample_every == 0:
                    fut.add_done_callback(functools.partial(on_done, time.perf_counter()))
                last = fut
                if period:
                    target = start + (i + 1) * period
                    delay = target - time.perf_counter()
                    if delay > 0:
                        await asyncio.sleep(delay)
                if i % chunk == chunk - 1:
                    done_count = i + 1
                    elapsed = time.perf_counter() - start
                    progress.update(task, completed=done_count,
                                    rate=f"{done_count / elapsed:,.0f} rec/s")
                    await asyncio.sleep(0)
            await producer.flush()
            progress.update(task, completed=n)
        elapsed = time.perf_counter() - start
        if last is not None and last.exception() is not None:
            errors.append(last.exception())  # type: ignore[arg-type]
    finally:
        await producer.close()

    latencies.sort()
    rate = n / elapsed
    mb = rate * args.record_size / (1024 * 1024)
    avg = sum(latencies) / len(latencies) if latencies else float("nan")
    mx = latencies[-1] if latencies else float("nan")
    print(
        f"{n} records sent, {rate:,.1f} records/sec ({mb:.2f} MB/sec), "
        f"{avg:.2f} ms avg latency, {mx:.2f} ms max latency, "
        f"{_percentile(latencies, 0.50):.0f} ms 50th, {_percentile(latencies, 0.95):.0f} ms 95th, "
        f"{_percentile(latencies, 0.99):.0f} ms 99th, "
        f"{_percentile(latencies, 0.999):.0f} ms 99.9th."
    )
    print(f"topic={topic} elapsed={elapsed:.2f}s latency samples={len(latencies)} "
          f"errors={len(errors)}")
    if errors:
        print(f"aioproducer: error: {len(errors)} sampled record(s) failed; first: {errors[0]}",
              file=sys.stderr)
        return 1
    return 0


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="aioproducer", description=__doc__)
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", required=True)

    perf = sub.add_parser("perf", help="producer throughput and latency test")
    perf.add_argument("--num-records", type=int, required=True)
    perf.add_argument("--record-size", type=int, required=True)
    perf.add_argument("--throughput", type=float, default=-1,
                      help="records/s to aim for (-1: as fast as possible)")
    perf.add_argument("--topic", default=None,
                      help="topic (default: a fresh one, created with --partitions)")
    perf.add_argument("--create-topic", action="store_true",
                      help="create --topic if missing")
    perf.add_argument("--partitions", type=int, default=1)
    perf.add_argument("--bootstrap-server", default=None,
                      help="default: $AIOPRODUCER_BOOTSTRAP or the local dev broker")
    perf.add_argument("--producer-props", nargs="*", default=[], metavar="KEY=VALUE")
    perf.add_argument("--uvloop", action="store_true", help="run on uvloop")
    perf.add_argument("--no-progress", action="store_true")

    broker = sub.add_parser("broker", help="the local development broker (start|stop|status...)",
                            add_help=False)
    broker.add_argument("broker_args", nargs=argparse.REMAINDER)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "broker":
        # Everything after "broker" (--help included) belongs to the broker's own CLI.
        from . import devbroker
        return devbroker.main(argv[1:])
    args = _build_parser().parse_args(argv)
    try:
        if args.command == "broker":
            from . import devbroker
            return devbroker.main(list(args.broker_args))
        if args.command == "perf":
            if args.uvloop:
                import uvloop
                return int(uvloop.run(_perf(args)))
            return asyncio.run(_perf(args))
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if args.debug:
            raise
        print(f"aioproducer: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 2
