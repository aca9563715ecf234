"""CPU per record of one bench scenario, run in this process, optionally profiled.

Runs a client's bench runner (``bench/client_<name>.py``, the same produce loop as
``python -m bench``) in this process against a fresh topic, and prints the send loop's
process CPU (user + system, all threads) per record. ``--cprofile`` adds the top
functions of Python's profiler (its overhead inflates the times; read it for the
shares, not the totals). Under ``valgrind --tool=callgrind`` (see
``bench/profiling/callgrind_producer.sh``), ``--no-topic-admin`` leaves the topic to a previous
call so that the profile holds only the client.

    python -m bench.profiling.profile_send --bootstrap 127.0.0.1:9092 --scenario key16-100B-8p
    python -m bench.profiling.profile_send --scenario send-and-wait --records 2000 --cprofile
    python -m bench.profiling.profile_send --scenario zstd --client confluent-kafka --reps 3
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import sys
import uuid
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.common import CLIENTS_BY_NAME, SCENARIOS, RunArgs, percentile

RUNNERS = {"aioproducer": "bench.client_aioproducer", "confluent": "bench.client_confluent",
           "aiokafka": "bench.client_aiokafka"}


def _run_args(ns: argparse.Namespace, topic: str) -> RunArgs:
    sc = SCENARIOS[ns.scenario]
    client = CLIENTS_BY_NAME[ns.client]
    args = RunArgs(bootstrap=ns.bootstrap, topic=topic, records=ns.records,
                   value_size=sc.value_size, key_size=sc.key_size,
                   partitions=sc.partitions, acks=sc.acks, idempotence=sc.idempotence,
                   linger_ms=sc.linger_ms, compression=sc.compression, mode=sc.mode,
                   rate=float(ns.rate), sync_api=sc.sync_api)
    for k, v in client.options.items():
        setattr(args, k, v)
    return args


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.profiling.profile_send", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bootstrap", default=os.environ.get("AIOPRODUCER_BOOTSTRAP"),
                   help="an existing broker (default: $AIOPRODUCER_BOOTSTRAP)")
    p.add_argument("--scenario", default="key16-100B-8p", choices=sorted(SCENARIOS))
    p.add_argument("--client", default="aioproducer", choices=sorted(CLIENTS_BY_NAME))
    p.add_argument("--records", type=int, default=200_000)
    p.add_argument("--reps", type=int, default=1, help="runs, each on a fresh topic")
    p.add_argument("--cprofile", action="store_true", help="print cProfile's top functions")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--rate", type=int, default=10_000,
                   help="records per second in the paced scenarios (as bench's --paced-rate)")
    p.add_argument("--topic", default=None,
                   help="an existing topic (not created nor deleted here)")
    p.add_argument("--json", action="store_true", help="one JSON line per run")
    ns = p.parse_args(argv)
    if not ns.bootstrap:
        p.error("--bootstrap (or $AIOPRODUCER_BOOTSTRAP) is needed")
    if ns.records <= 0 or ns.reps <= 0:
        p.error("--records and --reps must be positive")
    family = CLIENTS_BY_NAME[ns.client].module
    if family not in RUNNERS:
        p.error(f"--client {ns.client}: only {sorted(RUNNERS)} run in-process")
    import importlib

    run = importlib.import_module(RUNNERS[family]).run
    admin: Any = None
    if ns.topic is None:
        from bench.broker import Admin

        admin = Admin(ns.bootstrap)
    for rep in range(ns.reps):
        topic = ns.topic or f"profile-{ns.scenario}-{uuid.uuid4().hex[:8]}"
        args = _run_args(ns, topic)
        if admin is not None:
            admin.create_topic(topic, args.partitions)
        prof = cProfile.Profile() if ns.cprofile else None
        try:
            if prof is not None:
                prof.enable()
            m = run(args)
            if prof is not None:
                prof.disable()
        finally:
            if admin is not None:
                admin.delete_topic(topic)
        cpu_us = (m.cpu_loop_s or 0.0) / max(m.records, 1) * 1e6
        line = {"client": ns.client, "scenario": ns.scenario, "rep": rep,
                "records": m.records, "elapsed_s": round(m.elapsed_s, 4),
                "records_per_s": round(m.records / max(m.elapsed_s, 1e-9)),
                "cpu_us_per_record": round(cpu_us, 3), "errors": len(m.errors)}
        lat = sorted(m.latencies_s or ())
        if lat:
            line["p50_ms"] = round((percentile(lat, 0.5) or 0.0) * 1e3, 3)
            line["p99_ms"] = round((percentile(lat, 0.99) or 0.0) * 1e3, 3)
        if ns.json:
            print(json.dumps(line))
        else:
            print(f"{ns.client} {ns.scenario} rep {rep}: {m.records} records in "
                  f"{m.elapsed_s:.3f} s ({line['records_per_s']:,}/s), "
                  f"CPU {cpu_us:.3f} us/record, {len(m.errors)} errors"
                  + (f", p50 {line['p50_ms']} ms, p99 {line['p99_ms']} ms" if lat else ""))
        if prof is not None:
            out = io.StringIO()
            stats = pstats.Stats(prof, stream=out)
            stats.sort_stats("tottime").print_stats(ns.top)
            print(out.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
