"""``python -m bench.spark_source_bench``: ``format("aioproducer")`` against Spark's own
``format("kafka")`` sink, same broker, same run.

Scenarios (``--scenario``, repeatable):

- ``batch``: ``--records`` rows (keys, null keys, tombstones, headers) written with
  ``df.write.format(...)`` by each sink into a topic of its own; both topics are read
  back with confluent-kafka and compared (the multiset of key, value and headers; the
  partition of every keyed row, murmur2 in both). Prints rows/s of each write.
- ``kill``: a ``rate`` source streamed into each sink with a checkpoint, the driver
  process group SIGKILLed twice at random points (seeded, ``--seed``) and the query
  restarted from its checkpoint, then run to ``--final-batches`` more micro-batches. A
  ``read_committed`` consumer counts the generated values: each must be there exactly
  once with ``aioproducer``; Spark's sink (at-least-once) shows its duplicates.

Spark's sink needs ``spark-sql-kafka-0-10`` (fetched by ``bench/spark_jars.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import random
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from bench.harness import broker

FORMATS = ("aioproducer", "kafka")



def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.spark_source_bench",
                                description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scenario", action="append",
                   choices=("batch", "throughput", "stream", "kill"), default=[])
    p.add_argument("--records", type=int, default=1_000_000, help="batch rows (1,000,000)")
    p.add_argument("--spark-partitions", type=int, default=4)
    p.add_argument("--topic-partitions", type=int, default=8)
    p.add_argument("--data", action="append", choices=("plain", "mixed"), default=[],
                   help="throughput data sets (default: both)")
    p.add_argument("--reps", type=int, default=1, help="throughput rounds (1)")
    p.add_argument("--stream-rows", type=int, nargs="+",
                   default=[100_000, 200_000, 400_000, 600_000, 800_000, 1_200_000],
                   help="rows per micro-batch, tried in turn (stream scenario)")
    p.add_argument("--stream-batches", type=int, default=8,
                   help="measured micro-batches per step (stream scenario)")
    p.add_argument("--seed", type=int, default=None, help="kill points (default: random)")
    p.add_argument("--final-batches", type=int, default=3)
    p.add_argument("--kill-format", action="append", choices=FORMATS, default=[],
                   help="kill scenario: only this sink (repeatable; default both)")
    p.add_argument("--bootstrap", default=os.environ.get("AIOPRODUCER_BOOTSTRAP"))
    args = p.parse_args(argv)
    args.scenario = args.scenario or ["batch", "kill"]
    args.data = args.data or ["plain", "mixed"]
    return args


_CREATED: list[str] = []
"""Topics this run created and has not dropped yet (dropped at the end, whatever
happens: 10,000,000 rows are a gigabyte or more of broker disk each)."""


def _create_topic(bootstrap: str, partitions: int) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"bench-src-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    _CREATED.append(name)
    time.sleep(1.0)
    return name


def _drop_topics(bootstrap: str, topics: list[str] | None = None) -> None:
    """Delete ``topics`` (default: every topic this run created and still holds)."""
    from confluent_kafka.admin import AdminClient

    names = list(_CREATED if topics is None else topics)
    if not names:
        return
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for name, future in admin.delete_topics(names, operation_timeout=60).items():
        try:
            future.result(60)
        except Exception as exc:  # reported, not fatal: the figures are already out
            print(f"bench: could not delete topic {name}: {exc}", file=sys.stderr)
        if name in _CREATED:
            _CREATED.remove(name)


def _read_all(bootstrap: str, topic: str, isolation: str = "read_committed"
              ) -> list[tuple[int, bytes | None, bytes | None, tuple[Any, ...]]]:
    """(partition, key, value, headers) of every record up to the end of each partition."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                  "enable.auto.commit": False, "isolation.level": isolation,
                  "enable.partition.eof": True})
    try:
        md = c.list_topics(topic, timeout=30)
        parts = sorted(md.topics[topic].partitions)
        c.assign([TopicPartition(topic, p, -2) for p in parts])
        out = []
        at_end: set[int] = set()
        deadline = time.monotonic() + 600
        while at_end != set(parts) and time.monotonic() < deadline:
            for m in c.consume(10_000, timeout=1.0):
                if m.error():
                    if m.error().code() == -191:  # _PARTITION_EOF
                        at_end.add(m.partition())
                        continue
                    raise RuntimeError(str(m.error()))
                at_end.discard(m.partition())
                out.append((m.partition(), m.key(), m.value(),
                            tuple(m.headers() or ())))
        return out
    finally:
        c.close()


def _session(jars: list[Path], ui: bool = False) -> Any:
    from pyspark.sql import SparkSession

    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    builder = (SparkSession.builder.master("local[2]").appName("aioproducer-source-bench")
               .config("spark.ui.enabled", str(ui).lower())
               .config("spark.ui.port", "0")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.driver.memory", "2g"))
    if jars:
        builder = builder.config("spark.jars", ",".join(str(j) for j in jars))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


_TICK = os.sysconf("SC_CLK_TCK")


def _tree_cpu(root: int) -> dict[int, float]:
    """CPU seconds (user + system, all threads) of process ``root`` and of each of its
    live descendants, by pid."""
    stats: dict[int, tuple[int, float]] = {}  # pid: (ppid, cpu)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # after the command: state, ppid, ... utime (14), stime (15)
        stats[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICK)
    if root not in stats:
        return {}
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    out = {root: stats[root][1]}
    stack = list(children.get(root, []))
    while stack:
        pid = stack.pop()
        out[pid] = stats[pid][1]
        stack.extend(children.get(pid, []))
    return out


def _jvm_pid() -> int:
    """The Spark JVM started by this process (local mode: driver and executor)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii") as f:
                head, rest = f.read().rsplit(")", 1)
        except OSError:
            continue
        if int(rest.split()[1]) == os.getpid() and head.endswith("(java"):
            return int(entry)
    raise RuntimeError("no Spark JVM among this process's children")


class _Meter:
    """CPU of one Spark write: the JVM's (every thread: task threads, Kafka's sender
    thread, GC, JIT; local mode, so the driver's too) and the Python processes' below
    it, and the task metrics' executorCpuTime (task threads only) from Spark's REST API.

    The process tree is sampled every 100 ms, and each process counts what it used
    between its first and last sample: PySpark's daemon ignores SIGCHLD, so a Python
    worker that exits leaves no trace in its parent's cutime (its last <100 ms is lost).
    """

    def __init__(self, spark: Any) -> None:
        self.spark = spark
        self.jvm = _jvm_pid()
        self.ui = spark.sparkContext.uiWebUrl
        self.app = spark.sparkContext.applicationId
        self._first: dict[int, float] = {}
        self._last: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample_loop, daemon=True)

    def _sample(self, first: bool = False) -> None:
        now = _tree_cpu(self.jvm)
        if first:
            self._first = dict(now)
        for pid, cpu in now.items():
            self._first.setdefault(pid, 0.0)  # started during the write
            self._last[pid] = cpu

    def _sample_loop(self) -> None:
        while not self._stop.wait(0.1):
            self._sample()

    def _task_cpu(self) -> float:
        import urllib.request

        if not self.ui:
            return float("nan")
        url = f"{self.ui}/api/v1/applications/{self.app}/stages?status=complete"
        with urllib.request.urlopen(url, timeout=30) as r:
            stages = json.load(r)
        return float(sum(s.get("executorCpuTime", 0) for s in stages)) / 1e9

    def __enter__(self) -> _Meter:
        self.task0 = self._task_cpu()
        self._sample(first=True)
        self.started = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.monotonic() - self.started
        self._stop.set()
        self._thread.join()
        self._sample()
        used = {pid: self._last[pid] - self._first[pid] for pid in self._last}
        self.jvm_cpu = used.pop(self.jvm, 0.0)
        self.python_cpu = sum(used.values())
        time.sleep(1.0)  # the REST API lags the stage's end a little
        self.task_cpu = self._task_cpu() - self.task0


def batch(args: argparse.Namespace, bootstrap: str, jars: list[Path]) -> None:
    import aioproducer.spark_source as source

    spark = _session(jars)
    source.register(spark)
    try:
        df = spark.range(0, args.records, numPartitions=args.spark_partitions).selectExpr(
            "CASE WHEN id % 10 = 3 THEN NULL ELSE cast(concat('v', cast(id AS string))"
            " AS binary) END AS value",
            "CASE WHEN id % 7 = 0 THEN NULL ELSE concat('k', cast(id AS string)) END AS key",
            "CASE WHEN id % 5 = 0 THEN array(named_struct('key', 'h',"
            " 'value', cast(cast(id AS string) AS binary))) ELSE NULL END AS headers")
        warm = spark.range(0, 20_000, numPartitions=args.spark_partitions).selectExpr(
            "cast(id AS string) AS value")
        for fmt in FORMATS:  # JIT, Python workers, connections: not in the timings
            (warm.write.format(fmt).option("kafka.bootstrap.servers", bootstrap)
             .option("topic", _create_topic(bootstrap, 1)).mode("append").save())
        got = {}
        for fmt in FORMATS:
            topic = _create_topic(bootstrap, args.topic_partitions)
            started = time.monotonic()
            (df.write.format(fmt).option("kafka.bootstrap.servers", bootstrap)
             .option("topic", topic).mode("append").save())
            seconds = time.monotonic() - started
            print(f"batch {fmt}: {args.records:,} rows in {seconds:.1f} s, "
                  f"{args.records / seconds:,.0f} rows/s", flush=True)
            got[fmt] = _read_all(bootstrap, topic, "read_uncommitted")
        a, b = (Counter((k, v, h) for _, k, v, h in got[f]) for f in FORMATS)
        pa = {(k, v): p for p, k, v, _ in got["aioproducer"] if k is not None}
        pk = {(k, v): p for p, k, v, _ in got["kafka"] if k is not None}
        print(f"batch: {len(got['aioproducer']):,} and {len(got['kafka']):,} records read; "
              f"identical content: {a == b}; keyed partitions identical: {pa == pk}",
              flush=True)
    finally:
        spark.stop()
        _drop_topics(bootstrap)


SINKS = {
    "noop": ("noop", {}),
    "aioproducer": ("aioproducer", {}),
    "kafka": ("kafka", {}),
    "kafka@128KiB": ("kafka", {"kafka.batch.size": str(128 * 1024), "kafka.linger.ms": "5"}),
}
"""Sinks of the throughput scenario: format, extra options. ``noop`` is Spark's sink that
drops the rows: what computing the DataFrame costs, the floor under both Kafka sinks.
``kafka@128KiB`` is Spark's sink with the batch size and linger aioproducer's tasks use."""


def _frame(spark: Any, data: str, rows: int, partitions: int) -> Any:
    if data == "plain":  # 100-byte values, no key (as bench/spark_bench.py)
        return spark.range(0, rows, numPartitions=partitions).selectExpr(
            "cast(lpad(cast(id AS string), 100, 'x') AS binary) AS value")
    return spark.range(0, rows, numPartitions=partitions).selectExpr(  # "mixed"
        "CASE WHEN id % 10 = 3 THEN NULL ELSE cast(concat('v', cast(id AS string))"
        " AS binary) END AS value",
        "CASE WHEN id % 7 = 0 THEN NULL ELSE concat('k', cast(id AS string)) END AS key",
        "CASE WHEN id % 5 = 0 THEN array(named_struct('key', 'h',"
        " 'value', cast(cast(id AS string) AS binary))) ELSE NULL END AS headers")


def _held(bootstrap: str, topic: str) -> int:
    """Records the broker holds in ``topic`` (high minus low watermark, summed)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex})
    try:
        parts = c.list_topics(topic, timeout=30).topics[topic].partitions
        total = 0
        for p in parts:
            low, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=30,
                                                cached=False)
            total += high - low
        return total
    finally:
        c.close()


def _write(df: Any, fmt: str, extra: dict[str, str], bootstrap: str, topic: str) -> None:
    writer = df.write.format(fmt).mode("append")
    if fmt != "noop":
        writer = writer.option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
    for k, v in extra.items():
        writer = writer.option(k, v)
    writer.save()


def throughput(args: argparse.Namespace, bootstrap: str, jars: list[Path]) -> None:
    """``--records`` rows per write, each sink in turn (``--reps`` rounds), wall time and
    CPU: the JVM's (all threads) and the Python workers' (``_Meter``)."""
    import statistics

    import aioproducer.spark_source as source

    if len(args.data) > 1:
        # A process (so a JVM) per data set: each data set starts from a fresh JVM,
        # its JIT compiled for that data set's writes only.
        for data in args.data:
            code = subprocess.call(
                [sys.executable, "-m", "bench.spark_source_bench", "--scenario",
                 "throughput", "--data", data, "--records", str(args.records),
                 "--reps", str(args.reps), "--spark-partitions", str(args.spark_partitions),
                 "--topic-partitions", str(args.topic_partitions), "--bootstrap", bootstrap],
                env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
            if code:
                raise SystemExit(f"throughput --data {data} failed ({code})")
        return
    results: dict[tuple[str, str], list[dict[str, float]]] = {}
    for data in args.data:
        spark = _session(jars, ui=True)
        source.register(spark)
        try:
            df = _frame(spark, data, args.records, args.spark_partitions)
            # JIT, Python workers, connections: two unmeasured writes of a fifth of
            # the rows per sink first
            warm = _frame(spark, data, max(args.records // 5, 10_000),
                          args.spark_partitions)
            for _ in range(2):
                for fmt, extra in SINKS.values():
                    _write(warm, fmt, extra, bootstrap, _create_topic(bootstrap, 1))
            _drop_topics(bootstrap)
            for rep in range(args.reps):
                for name, (fmt, extra) in SINKS.items():
                    topic = _create_topic(bootstrap, args.topic_partitions)
                    with _Meter(spark) as m:
                        _write(df, fmt, extra, bootstrap, topic)
                    held = args.records if fmt == "noop" else _held(bootstrap, topic)
                    _drop_topics(bootstrap, [topic])
                    ok = held == args.records
                    row = {"seconds": m.seconds, "rows_per_s": args.records / m.seconds,
                           "jvm_cpu": m.jvm_cpu, "python_cpu": m.python_cpu,
                           "task_cpu": m.task_cpu}
                    print(f"throughput {data} {name} [{rep + 1}/{args.reps}]: "
                          f"{args.records:,} rows in {m.seconds:.1f} s "
                          f"({row['rows_per_s']:,.0f} rows/s); CPU: JVM {m.jvm_cpu:.1f} s "
                          f"+ Python workers {m.python_cpu:.1f} s = "
                          f"{(m.jvm_cpu + m.python_cpu) / args.records * 1e6:.2f} us/row; "
                          f"task executorCpuTime {m.task_cpu:.1f} s; broker holds "
                          f"{held:,}{'' if ok else ' (WRONG: run not counted)'}", flush=True)
                    if ok:
                        results.setdefault((data, name), []).append(row)
        finally:
            spark.stop()
    n = args.records
    print(f"\n{n:,} rows per write, medians of {args.reps} round(s). CPU per row: the "
          "JVM's (every thread; local mode) and the Python workers'; 'over noop' takes "
          "off what computing the rows costs; executorCpuTime: Spark's task metric (task "
          "threads of the JVM only)\n")
    print("| data | sink | rows/s | JVM us/row | Python us/row | total us/row | over noop "
          "| executorCpuTime us/row | rows/s vs kafka | CPU/row vs kafka |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for data in args.data:
        med: dict[str, dict[str, float]] = {}
        for name in SINKS:
            runs = results.get((data, name), [])
            if runs:
                med[name] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
                med[name]["total"] = statistics.median(r["jvm_cpu"] + r["python_cpu"]
                                                       for r in runs)
        base, floor = med.get("kafka"), med.get("noop")
        for name, md in med.items():
            rate = f"{md['rows_per_s'] / base['rows_per_s']:.2f}x" if base else "n/a"
            cpu = f"{base['total'] / md['total']:.2f}x less" if base else "n/a"
            over = f"{(md['total'] - floor['total']) / n * 1e6:.2f}" if floor else "n/a"
            print(f"| {data} | {name} | {md['rows_per_s']:,.0f} | {md['jvm_cpu'] / n * 1e6:.2f} "
                  f"| {md['python_cpu'] / n * 1e6:.2f} | {md['total'] / n * 1e6:.2f} | {over} "
                  f"| {md['task_cpu'] / n * 1e6:.2f} | {rate} | {cpu} |", flush=True)


# -- streaming ----------------------------------------------------------------------------------

STREAM_SINKS = {
    "aioproducer exactly-once": ("aioproducer", {}),
    "aioproducer at-least-once": ("aioproducer", {"exactlyOnce": "false"}),
    "kafka (at-least-once)": ("kafka", {}),
}


def _stream_step(spark: Any, bootstrap: str, fmt: str, extra: dict[str, str],
                 rows_per_batch: int, batches: int, tmp: str) -> dict[str, float]:
    """``rate-micro-batch`` (``rows_per_batch`` 100-byte values per micro-batch, 2
    partitions) into ``fmt`` at a 1 s trigger, until ``batches`` micro-batches after
    two warm-up ones; the durations and rows of the measured ones, and their CPU."""
    import statistics

    topic = _create_topic(bootstrap, 8)
    writer = (spark.readStream.format("rate-micro-batch")
              .option("rowsPerBatch", str(rows_per_batch)).option("numPartitions", "2")
              .load()
              .selectExpr("cast(lpad(cast(value AS string), 100, 'x') AS binary) AS value")
              .writeStream.format(fmt).option("kafka.bootstrap.servers", bootstrap)
              .option("topic", topic)
              .option("checkpointLocation", os.path.join(tmp, uuid.uuid4().hex))
              .trigger(processingTime="1 second"))
    for k, v in extra.items():
        writer = writer.option(k, v)
    query = writer.start()
    meter: _Meter | None = None
    try:
        deadline = time.monotonic() + 60 + batches * 30
        seen = 0
        while seen < 2 + batches:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{fmt}: {seen} micro-batches by the deadline")
            if query.exception() is not None:
                raise RuntimeError(str(query.exception()))
            progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
            if len(progress) >= 2 and meter is None:
                meter = _Meter(spark).__enter__()
            seen = len(progress)
            time.sleep(0.05)
        assert meter is not None
        meter.__exit__(None, None, None)
        measured = progress[2:2 + batches]
    finally:
        query.stop()
        _drop_topics(bootstrap, [topic])
    durations = [p["durationMs"]["triggerExecution"] / 1000 for p in measured]
    rows = sum(p["numInputRows"] for p in measured)
    wall = sum(max(1.0, d) for d in durations)  # a 1 s trigger: a batch every second
    return {"rows_per_batch": rows_per_batch, "median_s": statistics.median(durations),
            "max_s": max(durations), "rows_per_s": rows / wall,
            "cpu_us_per_row": (meter.jvm_cpu + meter.python_cpu) / rows * 1e6}


def stream(args: argparse.Namespace, bootstrap: str, jars: list[Path]) -> None:
    """Per sink, micro-batches of growing size at a 1 s trigger: the largest that still
    runs within the trigger (median), and the rows/s where it no longer does."""
    import aioproducer.spark_source as source

    spark = _session(jars, ui=True)
    source.register(spark)
    lines = []
    try:
        with tempfile.TemporaryDirectory(prefix="aioproducer-stream-bench-") as tmp:
            for name, (fmt, extra) in STREAM_SINKS.items():
                kept = None
                for n in args.stream_rows:
                    step = _stream_step(spark, bootstrap, fmt, extra, n,
                                        args.stream_batches, tmp)
                    keeps = step["median_s"] <= 1.0
                    print(f"stream {name}: {n:,} rows per micro-batch: median "
                          f"{step['median_s']:.2f} s (max {step['max_s']:.2f} s), "
                          f"{step['rows_per_s']:,.0f} rows/s, {step['cpu_us_per_row']:.2f} "
                          f"us CPU/row{'' if keeps else ': over the 1 s trigger'}",
                          flush=True)
                    if not keeps:
                        lines.append(f"| {name} | {kept or 'none':,} | "
                                     f"{step['rows_per_s']:,.0f} at {n:,} rows per batch |")
                        break
                    kept = n
                else:
                    lines.append(f"| {name} | {kept:,} (largest tried) | n/a |")
    finally:
        spark.stop()
    print("\n| sink | largest micro-batch within a 1 s trigger (rows) | rows/s beyond it |")
    print("|---|---:|---:|")
    print("\n".join(lines), flush=True)


# -- the SIGKILL scenario ----------------------------------------------------------------------

@dataclasses.dataclass
class KillRun:
    """What one run of the SIGKILL scenario did (the rows are read back by the caller)."""

    fmt: str
    topic: str
    seed: int
    kills: list[tuple[int, float]]
    """Per kill: the completed micro-batches seen before it, and the delay after that."""
    failure_injected: bool
    seconds: float
    failed_rows: int = 0
    """``format("aioproducer")``: rows the failed task attempt had sent and had
    acknowledged, its transaction open, when it raised inside the writer."""


def _kill_child(spec: dict[str, Any]) -> None:
    """One driver of the SIGKILL scenario (``--kill-child``): a ``rate`` source into
    ``spec["fmt"]`` with a checkpoint, one task attempt failing once (``format("kafka")``:
    in a Python UDF of the query; ``format("aioproducer")``: inside the writer, after
    its rows were acknowledged, see ``run_kill_scenario``); prints ``started``, then
    ``batch`` at every completed micro-batch."""
    import pathlib

    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession
    from pyspark.sql.functions import udf

    import aioproducer.spark_source as source

    builder = (SparkSession.builder.master("local[2, 2]").appName("aioproducer-kill")
               .config("spark.ui.enabled", "false")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.sql.shuffle.partitions", "2")
               # Small Arrow batches: the Python writer has written rows by the time the
               # injected failure reaches its task.
               .config("spark.sql.execution.arrow.maxRecordsPerBatch", "50"))
    if spec["jars"]:
        builder = builder.config("spark.jars", spec["jars"])
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    source.register(spark)
    marker = spec["marker"]
    fail_at = spec["fail_at"]

    @udf("string")
    def passthrough(value: int) -> str:
        # The first attempt of the first task to reach its fail_at-th row fails there,
        # once per scenario (the marker file): the rows before it went to the sink.
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx is not None and ctx.attemptNumber() == 0 and fail_at > 0:
            key = ctx.taskAttemptId()
            seen = _ROWS_SEEN[key] = _ROWS_SEEN.get(key, 0) + 1
            if seen == fail_at and not pathlib.Path(marker).exists():
                pathlib.Path(marker).write_text(f"{value}")
                raise RuntimeError(f"injected task failure at value {value}")
        return str(value)

    writer = (spark.readStream.format("rate").option("rowsPerSecond", spec["rate"])
              .option("numPartitions", "2").load()
              .select(passthrough("value").alias("value"))
              .writeStream.format(spec["fmt"])
              .option("kafka.bootstrap.servers", spec["bootstrap"])
              .option("topic", spec["topic"]).option("checkpointLocation", spec["checkpoint"])
              .trigger(processingTime="500 milliseconds"))
    if spec["fmt"] == "aioproducer":
        writer = writer.option("kafka.transaction.timeout.ms", "60000")
        for k, v in spec.get("options", {}).items():
            writer = writer.option(k, v)
    query = writer.start()
    print("started", flush=True)
    done = 0
    while done < spec["batches"]:
        if query.exception() is not None:
            raise SystemExit(f"query failed: {query.exception()}")
        now = sum(1 for p in query.recentProgress if p["numInputRows"] > 0)
        if now > done:
            done = now
            print("batch", flush=True)
        time.sleep(0.05)
    # Stop between micro-batches: a stop that interrupted the driver's commit() could
    # leave one task's transaction committed and another's open, with no restart to
    # commit it (values would then be missing below the largest one).
    stop_by = time.monotonic() + 10
    while query.status["isTriggerActive"] and time.monotonic() < stop_by:
        time.sleep(0.005)
    query.stop()
    spark.stop()


_ROWS_SEEN: dict[int, int] = {}


def _readline(child: subprocess.Popen[bytes], deadline: float) -> bytes:
    """The child's next stdout line, or RuntimeError at ``deadline`` or its exit."""
    assert child.stdout is not None
    fd = child.stdout.fileno()
    buf = b""
    while not buf.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0:
            raise RuntimeError("the Spark driver did not answer in time")
        ready, _, _ = select.select([fd], [], [], min(left, 1.0))
        if ready:
            chunk = os.read(fd, 1)
            if not chunk:
                raise RuntimeError(f"the Spark driver exited ({child.wait()})")
            buf += chunk
    return buf.strip()


def run_kill_scenario(fmt: str, bootstrap: str, topic: str, seed: int, jars: list[Path],
                      *, kills: int = 2, final_batches: int = 3, rate: int = 1000,
                      fail_at: int = 150, deadline_s: float = 300.0,
                      log: Any = print) -> KillRun:
    """A ``rate`` source streamed into ``fmt`` with a checkpoint; the driver's process
    group is SIGKILLed ``kills`` times, each after a seeded random number (1-3) of
    completed micro-batches plus a seeded random delay (0-1 s), and the query is
    restarted from its checkpoint; the last run stops by itself after
    ``final_batches`` micro-batches. One task attempt fails once (at its ``fail_at``-th
    row). Everything stops by ``deadline_s``: a driver still running is killed and
    RuntimeError raised.

    Where the task fails: for ``format("kafka")``, in a Python UDF of the query, whose
    rows stream through Spark's JVM sink as they come. For ``format("aioproducer")`` a
    UDF would prove nothing: Spark 4.2 hands a Python data source writer a task's rows
    only once an upstream Python UDF has processed the whole partition, so a UDF that
    raises mid-partition fails the attempt before any of its rows reached the writer.
    The writer's own test hook (``aioproducer.test.failAtRow``) fails it instead, after
    ``fail_at`` of its rows were acknowledged by Kafka, its transaction open
    (``KillRun.failed_rows``)."""
    rng = random.Random(seed)
    started = time.monotonic()
    deadline = started + deadline_s
    done: list[tuple[int, float]] = []
    with tempfile.TemporaryDirectory(prefix="aioproducer-kill-") as tmp:
        marker = Path(tmp) / "failed-once"
        trace_dir = Path(tmp) / "trace"
        for run in range(kills + 1):
            last = run == kills
            after = rng.randint(1, 3)
            delay = rng.uniform(0.0, 1.0)
            spec = {"fmt": fmt, "bootstrap": bootstrap, "topic": topic,
                    "checkpoint": str(Path(tmp) / "ckpt"), "rate": str(rate),
                    "batches": final_batches if last else 1_000_000,
                    "jars": ",".join(str(j) for j in jars) if fmt == "kafka" else "",
                    "marker": str(marker), "fail_at": fail_at if fmt == "kafka" else 0,
                    "options": {} if fmt == "kafka" or fail_at <= 0 else {
                        "aioproducer.test.trace": str(trace_dir),
                        "aioproducer.test.failAtRow": f"*:0:{fail_at}"}}
            child = subprocess.Popen(
                [sys.executable, "-m", "bench.spark_source_bench", "--kill-child",
                 json.dumps(spec)],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
                start_new_session=True)
            try:
                if _readline(child, deadline) != b"started":
                    raise RuntimeError(f"{fmt}: the query did not start")
                log(f"kill {fmt}: run {run + 1} started at "
                    f"{time.monotonic() - started:.1f} s")
                if last:
                    for _ in range(final_batches):
                        _readline(child, deadline)
                    code = child.wait(max(1.0, deadline - time.monotonic()))
                    if code != 0:
                        raise RuntimeError(f"{fmt}: the last run failed ({code})")
                else:
                    for _ in range(after):
                        _readline(child, deadline)
                        log(f"kill {fmt}: a micro-batch done at "
                            f"{time.monotonic() - started:.1f} s")
                    time.sleep(delay)
                    os.killpg(child.pid, signal.SIGKILL)
                    child.wait(30)
                    done.append((after, round(delay, 3)))
                    log(f"kill {fmt}: SIGKILL after {after} micro-batch(es) + "
                        f"{delay:.3f} s")
            finally:
                if child.poll() is None:
                    os.killpg(child.pid, signal.SIGKILL)
                    child.wait(30)
                elif not last:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(child.pid, signal.SIGKILL)  # its Python workers
                assert child.stdout is not None
                child.stdout.close()
        failed_rows = 0
        for trace in trace_dir.glob("*.json"):
            with contextlib.suppress(OSError, ValueError):
                state = json.loads(trace.read_text())
                if state["state"] == "failing":
                    failed_rows += int(state["rows"])
        injected = marker.exists() or (trace_dir / "failed-once").exists()
    return KillRun(fmt, topic, seed, done, injected, time.monotonic() - started,
                   failed_rows)


def count_values(values: list[bytes | None]) -> tuple[int, int, int, int]:
    """(rows, distinct values, duplicates, missing below the largest) of the rate
    source's values read back."""
    counts = Counter(int(v) for v in values if v is not None)
    top = max(counts) if counts else -1
    missing = sum(1 for i in range(top + 1) if i not in counts)
    return sum(counts.values()), len(counts), sum(n - 1 for n in counts.values()), missing


def kill(args: argparse.Namespace, bootstrap: str, jars: list[Path]) -> None:
    seed = args.seed if args.seed is not None else time.time_ns() % 100_000
    print(f"kill: seed={seed}", flush=True)
    for fmt in args.kill_format or FORMATS:
        topic = _create_topic(bootstrap, 2)
        run = run_kill_scenario(fmt, bootstrap, topic, seed, jars,
                                final_batches=args.final_batches)
        rows, distinct, dups, missing = count_values(
            [v for _, _, v, _ in _read_all(bootstrap, topic)])
        print(f"kill {fmt}: {rows:,} records read_committed ({distinct:,} distinct values): "
              f"{dups:,} duplicates, {missing:,} missing; kills {run.kills}, task failure "
              f"injected: {run.failure_injected}; {run.seconds:.0f} s", flush=True)
        _drop_topics(bootstrap, [topic])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--kill-child"]:
        _kill_child(json.loads(argv[1]))
        return 0
    args = parse_args(argv)
    from bench.spark_jars import ensure_spark_kafka_jars

    jars = ensure_spark_kafka_jars()
    with broker(args.bootstrap) as (bootstrap, _desc):
        try:
            if "batch" in args.scenario:
                batch(args, bootstrap, jars)
            if "throughput" in args.scenario:
                throughput(args, bootstrap, jars)
            if "stream" in args.scenario:
                stream(args, bootstrap, jars)
            if "kill" in args.scenario:
                kill(args, bootstrap, jars)
        finally:
            _drop_topics(bootstrap)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
