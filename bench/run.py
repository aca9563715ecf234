"""``python -m bench``: every client, side by side, on the same Apache Kafka broker.

For each scenario and repetition the clients run in turn (A B C ..., A B C ...), each in
its own process, each on a fresh topic. After every run the broker's offsets must add up
to exactly the records sent and a sample read back must have the right sizes; a run that
fails that is reported as FAILED, never as a number.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bench.common import (
    CLIENTS,
    CONCURRENT,
    PACED,
    SCENARIOS,
    SEND_AND_WAIT,
    THROUGHPUT,
    Client,
    RunArgs,
    Scenario,
)
from bench.curves import run_curves
from bench.harness import (
    broker,
    git_commit,
    judge,
    loadavg,
    run_child,
    run_meta,
    safe_name,
    select_clients,
)
from bench.report import FAILED, NA, OK, SKIPPED, render

DEFAULT_OUT = Path(__file__).resolve().parent / "results"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    names = ", ".join(SCENARIOS)
    clients = ", ".join(c.name for c in CLIENTS)
    p = argparse.ArgumentParser(
        prog="python -m bench",
        description="Run every producer client side by side on one Kafka broker and "
                    "write a Markdown comparison.",
        epilog=f"scenarios: {names}. clients: {clients}.",
    )
    p.add_argument("--scenario", action="append", default=[], metavar="NAME",
                   help="a scenario to run (repeatable); default: all of them")
    p.add_argument("--all", action="store_true", help="run every scenario")
    p.add_argument("--client", action="append", default=[], metavar="PATTERN",
                   help="a client row to run, shell patterns allowed, e.g. 'aioproducer*' "
                        "(repeatable); default: all of them")
    p.add_argument("--records", type=int, default=1_000_000,
                   help="records per run in the throughput scenarios (default 1,000,000)")
    p.add_argument("--sync-records", type=int, default=2000,
                   help="records per run in the send-and-wait scenarios (default 2,000)")
    p.add_argument("--concurrent-records", type=int, default=20_000,
                   help="records per run in concurrent-send-and-wait (default 20,000)")
    p.add_argument("--concurrency", type=int, default=100,
                   help="callers in concurrent-send-and-wait (default 100)")
    p.add_argument("--no-warmup", action="store_true",
                   help="skip the unmeasured warm-up run of each client per scenario")
    p.add_argument("--paced-rate", type=int, default=10_000,
                   help="records/s in paced-10k (default 10,000)")
    p.add_argument("--paced-seconds", type=float, default=5.0,
                   help="duration of paced-10k (default 5 s)")
    p.add_argument("--reps", type=int, default=None,
                   help="repetitions (default 3; 2 with --curves)")
    p.add_argument("--bootstrap", default=os.environ.get("AIOPRODUCER_BOOTSTRAP"),
                   help="an existing broker (host:port); default: env AIOPRODUCER_BOOTSTRAP, "
                        "else a local single-node broker started for the run")
    p.add_argument("--kafka-libs", default=None, metavar="DIR",
                   help="directory of Kafka jars for the Java client; default: "
                        "aioproducer.devbroker.ensure_kafka_libs()")
    p.add_argument("--run-timeout", type=float, default=None, metavar="SECONDS",
                   help="hard limit for one client run (default 60 s + 1 s per 2,000 records)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT,
                   help="where latest.md and latest.json go (default bench/results)")
    p.add_argument("--keep-topics", action="store_true",
                   help="do not delete each run's topic after verifying it")
    p.add_argument("--list", action="store_true", help="list scenarios and clients, then exit")
    c = p.add_argument_group(
        "curves", "--curves sweeps one parameter at a time instead of running the "
        "scenarios: records/s and CPU per record against partitions, topics, record "
        "size and concurrent callers, as PNG plots (bench/curves.py; default clients "
        "aioproducer, aiokafka, confluent-kafka)")
    c.add_argument("--curves", action="store_true", help="run the curves")
    c.add_argument("--axis", action="append", default=[], metavar="NAME",
                   choices=["partitions", "topics", "size", "callers"],
                   help="partitions, topics, size or callers (repeatable; default all)")
    c.add_argument("--points", default=None, metavar="X,Y,...",
                   help="the points of the one --axis given (default: its own)")
    c.add_argument("--curve-records", type=int, default=200_000, metavar="N",
                   help="records per run (default 200,000; fewer on the size axis "
                        "and the callers axis, see bench/curves.py)")
    c.add_argument("--curve-bytes", type=int, default=256 << 20, metavar="BYTES",
                   help="at most this many value bytes per run on the size axis "
                        "(default 256 MiB)")
    c.add_argument("--max-minutes", type=float, default=55.0,
                   help="the runs not started by then are not run (default 55)")
    c.add_argument("--plots", type=Path, default=None, metavar="DIR",
                   help="where the PNGs go (default: --out)")
    c.add_argument("--into", type=Path, default=None, metavar="FILE",
                   help="a Markdown file (docs/performance.md) whose block between "
                        "'<!-- bench-curves:begin -->' and '<!-- bench-curves:end -->' "
                        "is replaced by the curves' page")
    args = p.parse_args(argv)
    for name in args.scenario:
        if name not in SCENARIOS:
            p.error(f"unknown scenario {name!r}; choose from {names}")
    if min(args.records, args.reps or 1, args.sync_records, args.concurrent_records,
           args.concurrency, args.curve_records, args.curve_bytes) <= 0:
        p.error("--records, --sync-records, --concurrent-records, --concurrency, "
                "--curve-records, --curve-bytes and --reps must be positive")
    if args.paced_rate <= 0 or args.paced_seconds <= 0:
        p.error("--paced-rate and --paced-seconds must be positive")
    return args


def records_for(sc: Scenario, args: argparse.Namespace) -> int:
    if sc.mode == SEND_AND_WAIT:
        return int(args.sync_records)
    if sc.mode == CONCURRENT:
        return int(args.concurrent_records)
    if sc.mode == PACED:
        return int(args.paced_rate * args.paced_seconds)
    return int(args.records)


def compression_unsupported(codec: str) -> str | None:
    """Why ours cannot run ``codec`` yet (None: it can)."""
    try:
        from aioproducer.config import ProducerConfig
    except Exception as e:
        return f"aioproducer is not importable ({type(e).__name__})"
    try:
        ProducerConfig.from_options(bootstrap_servers="127.0.0.1:9092",
                                    compression_type=codec)
    except Exception as e:
        return f"aioproducer does not support {codec} compression yet ({e})"
    return None


def kafka_libs(explicit: str | None) -> tuple[str | None, str]:
    if explicit:
        return explicit, ""
    try:
        from aioproducer import devbroker

        return str(devbroker.ensure_kafka_libs()), ""
    except Exception as e:
        return None, f"no Kafka jars ({type(e).__name__}: {e}); pass --kafka-libs DIR"


def topic_name(scenario: str, client: str, rep: int) -> str:
    return f"bench-{scenario}-{safe_name(client)}-r{rep}-{uuid.uuid4().hex[:8]}"


def one_run(admin: Any, bootstrap: str, sc: Scenario, client: Client, rep: int,
            args: argparse.Namespace, n: int, libs: str | None) -> dict[str, Any]:
    from bench.broker import verify_topic

    topic = topic_name(sc.name, client.name, rep)
    timeout = args.run_timeout or (60.0 + n / 2000.0 + (args.paced_seconds
                                                        if sc.mode == PACED else 0.0))
    run_args = RunArgs(
        bootstrap=bootstrap, topic=topic, records=n, value_size=sc.value_size,
        key_size=sc.key_size, partitions=sc.partitions, acks=sc.acks,
        idempotence=sc.idempotence, linger_ms=sc.linger_ms, compression=sc.compression,
        mode=sc.mode, rate=float(args.paced_rate), sync_api=sc.sync_api,
        concurrency=int(args.concurrency),
        sample_every=1 if sc.mode in (SEND_AND_WAIT, PACED, CONCURRENT) else 16,
        timeout_s=max(10.0, timeout - 20.0), kafka_libs=libs, **client.options,
    )
    record: dict[str, Any] = {"scenario": sc.name, "client": client.name, "rep": rep,
                              "topic": topic, "records": n}
    admin.create_topic(topic, sc.partitions)
    t0 = time.monotonic()
    try:
        result, stderr_tail = run_child(client, run_args, timeout)
        record["wall_s"] = round(time.monotonic() - t0, 3)
        return judge(record, result, stderr_tail, lambda: verify_topic(
            bootstrap, topic, sc.partitions, n, sc.value_size, sc.key_size))
    finally:
        if not args.keep_topics:
            admin.delete_topic(topic)


def warmup_records(sc: Scenario, n: int) -> int:
    """Records of the unmeasured warm-up run: enough to warm the broker's log and
    the client's code paths up, small next to a measured run."""
    if sc.mode == THROUGHPUT:
        return min(n, 50_000)
    if sc.mode == CONCURRENT:
        return min(n, 2_000)
    return min(n, 200)


def _summary(record: dict[str, Any]) -> str:
    if record["status"] != OK:
        return f"{record['status']}: {record['reason']}"
    r = record["result"]
    p99 = r.get("lat_p99_ms")
    p99s = "—" if p99 is None else f"{p99:.2f} ms"
    return (f"{r['records_per_s']:,.0f} rec/s, {r['mb_per_s']:.1f} MB/s, "
            f"p99 {p99s}, verified ({record['verification']['held']} records)")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.curves:
        return run_curves(args, argv if argv is not None else sys.argv[1:])
    if args.reps is None:
        args.reps = 3
    if args.list:
        for sc in SCENARIOS.values():
            print(f"scenario {sc.name:22} {sc.description}")
        for c in CLIENTS:
            print(f"client   {c.name}")
        return 0
    scenarios = ([SCENARIOS[n] for n in dict.fromkeys(args.scenario)]
                 if args.scenario and not args.all else list(SCENARIOS.values()))
    clients = select_clients(args.client)

    skipped_scenarios: dict[str, str] = {}
    for sc in scenarios:
        if sc.compression:
            why = compression_unsupported(sc.compression)
            if why:
                skipped_scenarios[sc.name] = why
                print(f"bench: skipping scenario {sc.name}: {why}", file=sys.stderr)
    libs, libs_problem = (None, "")
    if any(c.family == "java" for c in clients):
        libs, libs_problem = kafka_libs(args.kafka_libs)
        if libs_problem:
            print(f"bench: java: {libs_problem}", file=sys.stderr)

    from bench.broker import Admin

    runs: list[dict[str, Any]] = []
    warmups: list[dict[str, Any]] = []
    records_by_scenario = {sc.name: records_for(sc, args) for sc in scenarios}
    started = datetime.now(timezone.utc)
    load_before = loadavg()
    with broker(args.bootstrap) as (bootstrap, broker_desc):
        admin = Admin(bootstrap)
        for sc in scenarios:
            if sc.name in skipped_scenarios:
                continue
            n = records_by_scenario[sc.name]
            not_runnable: dict[str, tuple[str, str]] = {}
            for c in clients:
                if c.family in sc.unsupported:
                    not_runnable[c.name] = (NA, sc.unsupported[c.family])
                elif c.family == "java" and libs is None:
                    not_runnable[c.name] = (SKIPPED, libs_problem)
            for c in clients:
                if c.name in not_runnable:
                    status, reason = not_runnable[c.name]
                    runs.append({"scenario": sc.name, "client": c.name, "rep": 1,
                                 "status": status, "reason": reason, "result": {}})
            if not args.no_warmup:
                # One unmeasured run per client first (rep 0): the broker's first
                # writes to a new log and each client's first run are the slowest.
                wn = warmup_records(sc, n)
                for c in clients:
                    if c.name in not_runnable:
                        continue
                    label = f"[{sc.name} warm-up] {c.name}"
                    print(f"bench: {label} ({wn:,} records, not reported) ...",
                          file=sys.stderr, flush=True)
                    record = one_run(admin, bootstrap, sc, c, 0, args, wn, libs)
                    warmups.append(record)
                    print(f"bench: {label}: {_summary(record)}", file=sys.stderr, flush=True)
                    if record["status"] == SKIPPED:
                        not_runnable[c.name] = (SKIPPED, record["reason"])
                        runs.append({"scenario": sc.name, "client": c.name, "rep": 1,
                                     "status": SKIPPED, "reason": record["reason"],
                                     "result": {}})
            for rep in range(1, args.reps + 1):
                for c in clients:
                    if c.name in not_runnable:
                        continue
                    label = f"[{sc.name} {rep}/{args.reps}] {c.name}"
                    print(f"bench: {label} ...", file=sys.stderr, flush=True)
                    record = one_run(admin, bootstrap, sc, c, rep, args, n, libs)
                    runs.append(record)
                    print(f"bench: {label}: {_summary(record)}", file=sys.stderr, flush=True)
                    if record["status"] == SKIPPED:
                        # The same reason holds for the remaining repetitions.
                        not_runnable[c.name] = (SKIPPED, record["reason"])

    meta = run_meta(
        started, git_commit(), broker_desc, runs, load_before, args.reps,
        "none" if args.no_warmup else ("one unmeasured run per client and scenario before "
                                       "the repetitions (not in any number)"),
        "python -m bench " + " ".join(argv if argv is not None else sys.argv[1:]))
    md = render(meta, scenarios, records_by_scenario, runs, skipped_scenarios,
                [c.name for c in clients])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "latest.md").write_text(md)
    raw = {"meta": meta, "records_by_scenario": records_by_scenario,
           "skipped_scenarios": skipped_scenarios, "runs": runs, "warmups": warmups,
           "scenarios": [sc.name for sc in scenarios],
           "clients": [c.name for c in clients]}
    (args.out / "latest.json").write_text(json.dumps(raw, indent=1) + "\n")
    sys.stdout.write(md)
    print(f"bench: wrote {args.out / 'latest.md'} and latest.json", file=sys.stderr)
    failed = sum(1 for r in runs if r["status"] == FAILED)
    return 1 if failed else 0

