"""``python -m bench.spark_bench``: publishing a Spark DataFrame to Kafka, three ways, on
one broker in one run.

- ``spark-kafka-sink``: Spark's own sink, ``df.write.format("kafka").save()``
  (``spark-sql-kafka-0-10`` matched to the installed pyspark, see ``bench/spark_jars.py``);
- ``aioproducer-executors``: :func:`aioproducer.spark.publish` (one producer per task);
- ``aioproducer-driver``: :func:`aioproducer.spark.publish_async` (one producer on the
  driver; the DataFrame streams to it partition by partition).

The DataFrame is ``spark.range(N)`` with a 100-byte value per row (the row number,
left-padded), computed on the fly in every run, so every row of it costs the same in
each run. One SparkSession on ``local[2]`` serves all runs; they alternate (A B C, A B C,
...), each on a fresh topic, and after each run the broker must hold exactly N records
with values of the right size (``bench.broker.verify_topic``), or the run is FAILED and
gives no number. Each producer runs with its defaults (acks=all, idempotence on).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bench.harness import broker, host_description
from bench.run import DEFAULT_OUT

SINK, SINK_128K = "spark-kafka-sink", "spark-kafka-sink@128KiB"
EXECUTORS, DRIVER = "aioproducer-executors", "aioproducer-driver"
ROWS = (SINK, SINK_128K, EXECUTORS, DRIVER)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.spark_bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--records", type=int, default=10_000_000,
                   help="rows per run (default 10,000,000)")
    p.add_argument("--driver-records", type=int, default=None,
                   help="rows per driver-side run (default: --records)")
    p.add_argument("--value-size", type=int, default=100, help="bytes per value (100)")
    p.add_argument("--spark-partitions", type=int, default=4,
                   help="DataFrame partitions on the executor side (default 4)")
    p.add_argument("--driver-partition-rows", type=int, default=100_000,
                   help="rows per DataFrame partition on the driver side, which holds "
                        "about two partitions at a time (default 100,000)")
    p.add_argument("--topic-partitions", type=int, default=8,
                   help="partitions of each run's topic (default 8)")
    p.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    p.add_argument("--reps", type=int, default=1, help="repetitions (default 1)")
    p.add_argument("--only", action="append", choices=ROWS, default=[],
                   help="run only this row (repeatable)")
    p.add_argument("--bootstrap", default=os.environ.get("AIOPRODUCER_BOOTSTRAP"),
                   help="an existing broker; default: env AIOPRODUCER_BOOTSTRAP, else a "
                        "local single-node broker started for the run")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT,
                   help="where spark_latest.md / spark_latest.json go (bench/results)")
    args = p.parse_args(argv)
    if args.records <= 0 or args.reps <= 0 or args.value_size <= 0:
        p.error("--records, --reps and --value-size must be positive")
    return args


def spark_session(master: str, jars: list[Path]) -> Any:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master(master).appName("aioproducer-spark-bench")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.driver.memory", "3g")
             .config("spark.jars", ",".join(str(j) for j in jars))
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def dataframe(spark: Any, rows: int, partitions: int, value_size: int) -> Any:
    from pyspark.sql import functions as F

    return spark.range(0, rows, numPartitions=partitions).select(
        F.lpad(F.col("id").cast("string"), value_size, "x").cast("binary").alias("value"))


def run_sink(df: Any, bootstrap: str, topic: str) -> None:
    (df.write.format("kafka").option("kafka.bootstrap.servers", bootstrap)
     .option("topic", topic).save())


def run_sink_128k(df: Any, bootstrap: str, topic: str) -> None:
    """The sink with the batch size and linger that aioproducer's tasks use."""
    (df.write.format("kafka").option("kafka.bootstrap.servers", bootstrap)
     .option("kafka.batch.size", str(128 * 1024)).option("kafka.linger.ms", "5")
     .option("topic", topic).save())


def run_executors(df: Any, bootstrap: str, topic: str) -> None:
    from aioproducer.spark import publish

    report = publish(df, topic, bootstrap_servers=bootstrap)
    if report.failures:
        raise RuntimeError(f"{report.failures} records failed: {report.errors}")


def run_driver(df: Any, bootstrap: str, topic: str) -> None:
    from aioproducer import Producer
    from aioproducer.spark import publish_async

    async def main() -> None:
        async with Producer(bootstrap_servers=bootstrap) as producer:
            await publish_async(df, producer, topic, progress=False)

    asyncio.run(main())


def one_run(admin: Any, bootstrap: str, row: str, fn: Callable[[Any, str, str], None],
            df: Any, n: int, args: argparse.Namespace, rep: int) -> dict[str, Any]:
    from bench.broker import verify_topic

    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in row)
    topic = f"bench-spark-{safe}-r{rep}-{uuid.uuid4().hex[:8]}"
    admin.create_topic(topic, args.topic_partitions)
    record: dict[str, Any] = {"row": row, "rep": rep, "records": n, "topic": topic}
    try:
        started = time.monotonic()
        try:
            fn(df, bootstrap, topic)
        except Exception as exc:
            record.update(status="FAILED", reason=f"{type(exc).__name__}: {exc}"[:2000])
            return record
        seconds = time.monotonic() - started
        v = verify_topic(bootstrap, topic, args.topic_partitions, n, args.value_size, 0)
        record.update(seconds=round(seconds, 3), records_per_s=n / seconds,
                      verification=v.describe())
        record.update(status="ok" if v.ok else "FAILED",
                      reason="" if v.ok else "verification: " + v.describe())
        return record
    finally:
        admin.delete_topic(topic)


def render(runs: list[dict[str, Any]], args: argparse.Namespace, spark_version: str,
           broker_desc: str) -> str:
    medians: dict[str, float] = {}
    for row in ROWS:
        rates = [r["records_per_s"] for r in runs if r["row"] == row and r["status"] == "ok"]
        if rates:
            medians[row] = statistics.median(rates)
    anchor = medians.get(SINK)
    labels = {SINK: "Spark's Kafka sink (`df.write.format(\"kafka\")`)",
              SINK_128K: "Spark's Kafka sink, `kafka.batch.size=131072`, `kafka.linger.ms=5`",
              EXECUTORS: "aioproducer `publish()` (executors)",
              DRIVER: "aioproducer `publish_async()` (driver)"}
    lines = [f"Spark {spark_version}, `{args.master}`, {args.value_size}-byte values, "
             f"topic of {args.topic_partitions} partitions, {broker_desc}; "
             f"{host_description()}; medians of {args.reps} interleaved run(s).", "",
             "| path | rows | records/s | ÷ Spark's sink |", "|---|---:|---:|---:|"]
    for row in ROWS:
        if row not in medians:
            continue
        n = next(r["records"] for r in runs if r["row"] == row)
        ratio = f"{medians[row] / anchor:.2f}\u00d7" if anchor else "n/a"
        lines.append(f"| {labels[row]} | {n:,} | {medians[row]:,.0f} | {ratio} |")
    failed = [r for r in runs if r["status"] != "ok"]
    if failed:
        lines += ["", "FAILED runs (no number above):"]
        lines += [f"- {r['row']} rep {r['rep']}: {r['reason']}" for r in failed]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from bench.broker import Admin
    from bench.spark_jars import ensure_spark_kafka_jars, spark_versions

    rows = [r for r in ROWS if not args.only or r in args.only]
    jars = ensure_spark_kafka_jars() if SINK in rows or SINK_128K in rows else []
    spark = spark_session(args.master, jars)
    n_driver = args.driver_records or args.records
    frames = {
        SINK: dataframe(spark, args.records, args.spark_partitions, args.value_size),
        SINK_128K: dataframe(spark, args.records, args.spark_partitions, args.value_size),
        EXECUTORS: dataframe(spark, args.records, args.spark_partitions, args.value_size),
        DRIVER: dataframe(spark, n_driver,
                          max(1, -(-n_driver // args.driver_partition_rows)),
                          args.value_size),
    }
    fns = {SINK: run_sink, SINK_128K: run_sink_128k, EXECUTORS: run_executors,
           DRIVER: run_driver}
    runs: list[dict[str, Any]] = []
    started = datetime.now(timezone.utc)
    try:
        with broker(args.bootstrap) as (bootstrap, broker_desc):
            admin = Admin(bootstrap)
            for rep in range(1, args.reps + 1):
                for row in rows:
                    n = n_driver if row == DRIVER else args.records
                    print(f"bench.spark: [{rep}/{args.reps}] {row}: {n:,} rows ...",
                          file=sys.stderr, flush=True)
                    record = one_run(admin, bootstrap, row, fns[row], frames[row], n,
                                     args, rep)
                    runs.append(record)
                    summary = (f"{record['records_per_s']:,.0f} records/s in "
                               f"{record['seconds']:.1f} s, {record['verification']}"
                               if record["status"] == "ok" else
                               f"FAILED: {record['reason'][:500]}")
                    print(f"bench.spark: [{rep}/{args.reps}] {row}: {summary}",
                          file=sys.stderr, flush=True)
    finally:
        spark.stop()
    spark_version, _scala = spark_versions()
    table = render(runs, args, spark_version, broker_desc)
    print(table)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "spark_latest.md").write_text(table)
    (args.out / "spark_latest.json").write_text(json.dumps(
        {"started": started.isoformat(), "args": {k: str(v) for k, v in vars(args).items()},
         "runs": runs}, indent=2))
    return 1 if any(r["status"] != "ok" for r in runs) else 0


if __name__ == "__main__":
    raise SystemExit(main())
