"""``python -m bench.spark_cluster_bench``: ``format("aioproducer")`` on a real Spark
standalone cluster (a master and two workers, ``aioproducer.devbroker.spark_cluster``)
writing to a three-node Kafka cluster, with executors, workers and drivers killed.

Every scenario runs its Spark driver in a child process of its own
(:mod:`bench.spark_driver`), which prints one JSON line per event; this process
watches the tasks (their trace files, option ``aioproducer.test.trace``) and Kafka,
and does the killing. What Kafka holds
is read back with confluent-kafka (``read_committed``, and ``read_uncommitted`` to see
what a killed attempt left) and compared row by row: every row carries a unique
integer, so the lost and duplicated rows are counted.

Scenarios (``--scenario``, repeatable):

- ``executor-kill-batch``: ``df.write`` of ``--rows`` rows (Spark partition i to Kafka
  partition i), exactly once (``--mode eo``) or at-least-once (``--mode alo``); once a
  seeded task has handed a seeded number of rows to Kafka, its executor JVM and Python
  workers are SIGKILLed at once. Spark runs the task again; the time from the kill
  until that partition's last stable offset moves on (the retry's
  ``init_transactions()`` aborts the killed attempt's transaction) is measured.
- ``stream-kills``: a ``rate`` source streamed exactly once; an executor killed the same
  way after a seeded number of micro-batches, then, a few micro-batches later, a whole
  worker (its JVM, its executor and their Python workers) killed for good: the query
  goes on on the other worker.
- ``driver-kill-stream``: the driver process killed (SIGKILL) twice at seeded points and
  restarted from its checkpoint, on the cluster, a task failing once inside the writer.
- ``throughput``: ``--rows`` rows of 100-byte values through ``format("kafka")`` and
  ``format("aioproducer")`` (at-least-once, and exactly once), rows/s and CPU (driver,
  executors and their Python workers).

Without ``--bootstrap``/``--master`` it starts a three-node Kafka cluster and a Spark
cluster of two workers in a temporary directory and stops them at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from aioproducer.devbroker.spark_cluster import LocalSpark, executor_of
from bench.spark_cluster_throughput import throughput
from bench.spark_driver import (
    Count,
    Driver,
    Offsets,
    count,
    create_topic,
    delete_topic,
    read_values,
)

Log = Callable[[str], None]


def traces(trace_dir: Path) -> dict[tuple[int, int, int], dict[str, Any]]:
    """The task attempts' trace files: (batch id, partition, attempt) -> content."""
    out = {}
    for f in trace_dir.glob("*.json"):
        with contextlib.suppress(OSError, ValueError):
            b, p, a = (int(x) for x in f.stem.split("_"))
            out[(b, p, a)] = json.loads(f.read_text())
    return out


@dataclasses.dataclass
class KillReport:
    """What a kill did."""

    what: str
    """``executor`` or ``worker``."""
    batch_id: int
    partition: int
    rows_handed: int
    """Rows the killed attempt had handed to its producer (its trace)."""
    high_watermark: int
    """The partition's high watermark at the kill (rows already in Kafka)."""
    lso_at_kill: int
    worker: int
    pids: int
    kill_to_lso_s: float | None = None
    """Seconds from the kill until the partition's last stable offset passed
    ``lso_at_kill`` (exactly once only)."""
    retry_worker: int | None = None
    """The worker whose executor ran the task's next attempt (-1: not found)."""


def _kill_task(cluster: LocalSpark, trace: dict[str, Any], worker: bool) -> tuple[int, int]:
    """Kill the executor (or its whole worker) running the task attempt of ``trace``;
    (worker index, processes killed)."""
    pid = executor_of(int(trace["pid"]))
    if pid is None:
        raise RuntimeError(f"no executor above Python worker {trace['pid']}")
    ex = next((e for e in cluster.executors() if e.pid == pid), None)
    if ex is None:
        raise RuntimeError(f"executor {pid} is not one of the cluster's")
    if worker:
        return ex.worker, len(cluster.kill_worker(ex.worker))
    cluster.kill_executor(pid)
    return ex.worker, 1 + len(ex.python_pids)


def kill_when(cluster: LocalSpark, driver: Driver, trace_dir: Path, offsets: Offsets,
              *, partition: int, min_rows: int, min_batch: int, worker: bool,
              exactly_once: bool, deadline: float, log: Log) -> KillReport:
    """Wait until attempt 0 of a task of ``partition`` (in a micro-batch >=
    ``min_batch``; -1 for a batch write) has handed ``min_rows`` rows to Kafka and is
    still writing, kill its executor (or worker), and with ``exactly_once`` measure the
    time until the partition's last stable offset moves past where it stood."""
    while True:
        if time.monotonic() > deadline:
            raise RuntimeError(f"no task of partition {partition} reached {min_rows} rows "
                               "in time")
        driver.poll_events(0.02)
        if driver.proc.poll() is not None or driver.error():
            raise RuntimeError(f"the driver ended before the kill: {driver.error()}")
        found = [(k, t) for k, t in traces(trace_dir).items()
                 if k[1] == partition and k[2] == 0 and k[0] >= min_batch
                 and t["state"] == "writing" and t["rows"] >= min_rows]
        if found:
            (batch_id, _, _), trace = min(found)
            break
    hw = offsets.end(partition, committed=False)
    lso = offsets.end(partition, committed=True)
    t0 = time.monotonic()
    where, npids = _kill_task(cluster, trace, worker)
    report = KillReport("worker" if worker else "executor", batch_id, partition,
                        int(trace["rows"]), hw, lso, where, npids)
    log(f"killed the {report.what} of worker {where} ({npids} processes) running "
        f"batch {batch_id} partition {partition}: {trace['rows']:,} rows handed over, "
        f"high watermark {hw:,}, last stable offset {lso:,}")
    if exactly_once:
        while time.monotonic() < deadline:
            if offsets.end(partition, committed=True) > lso:
                report.kill_to_lso_s = time.monotonic() - t0
                break
            driver.poll_events(0.02)
        log(f"last stable offset of partition {partition} moved on "
            f"{report.kill_to_lso_s if report.kill_to_lso_s is not None else 'never'} s "
            "after the kill")
    # Where the retry runs (while its executor is still there to be asked).
    while time.monotonic() < deadline and report.retry_worker is None:
        for (b, p, a), t in traces(trace_dir).items():
            if (b, p) == (batch_id, partition) and a > 0:
                ex = executor_of(int(t["pid"]))
                report.retry_worker = next((e.worker for e in cluster.executors()
                                            if e.pid == ex), -1)
        if driver.proc.poll() is not None:
            break
        driver.poll_events(0.05)
    return report


# -- scenarios ---------------------------------------------------------------------------------

@dataclasses.dataclass
class Result:
    scenario: str
    seed: int
    rows_expected: int | None
    committed: Count
    uncommitted: Count | None
    kills: list[KillReport]
    seconds: float
    notes: list[str] = dataclasses.field(default_factory=list)
    failed_attempt_rows: int = 0
    """Rows acknowledged by task attempts that then failed inside the writer."""

    def summary(self) -> str:
        kills = "; ".join(
            f"driver killed after micro-batch {k.batch_id}" if k.what == "driver" else
            f"{k.what} of worker {k.worker} killed in batch {k.batch_id} partition "
            f"{k.partition} after {k.rows_handed:,} rows (high watermark {k.high_watermark:,})"
            + ("" if k.kill_to_lso_s is None else
               f", last stable offset moved {k.kill_to_lso_s:.2f} s after the kill")
            + f", retried on worker {k.retry_worker}"
            for k in self.kills)
        return (f"{self.scenario} seed={self.seed}: read_committed {self.committed}"
                + ("" if self.uncommitted is None else
                   f"; read_uncommitted {self.uncommitted}")
                + f"; {kills}; {self.seconds:.0f} s")


def _driver_conf(cluster: LocalSpark, **extra: str) -> dict[str, str]:
    return cluster.session_config(**{
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.driver.memory": "1g",
        **extra})


def executor_kill_batch(cluster: LocalSpark, bootstrap: str, seed: int, work: Path, *,
                        modes: tuple[str, ...] = ("eo", "alo"), rows: int = 200_000,
                        partitions: int = 4, pace_ms: int = 25, arrow_batch: int = 1_000,
                        txn_timeout_ms: int = 600_000, deadline_s: float = 300.0,
                        log: Log = print) -> list[Result]:
    """One driver, one batch write of ``rows`` rows per mode (``eo``: exactly once,
    ``alo``: at-least-once), each into a fresh topic (Spark partition i to Kafka
    partition i); in each, the executor of a seeded one of the first two tasks is
    killed after a seeded number of its rows; everything read back row by row."""
    rng = random.Random(seed)
    per = rows // partitions
    started = time.monotonic()
    deadline = started + deadline_s
    jobs = []
    for mode in modes:
        topic = create_topic(bootstrap, partitions)
        options = {"exactlyOnce": str(mode == "eo").lower(),
                   "aioproducer.test.trace": str(work / f"trace-{topic}"),
                   "aioproducer.test.paceMs": str(pace_ms)}
        if mode == "eo":
            options["kafka.transaction.timeout.ms"] = str(txn_timeout_ms)
        jobs.append({"topic": topic, "options": options, "mode": mode,
                     "target": rng.randrange(min(2, partitions)),
                     "min_rows": int(per * rng.uniform(0.2, 0.6))})
    spec = {"job": "batch", "format": "aioproducer", "bootstrap": bootstrap, "rows": rows,
            "partitions": partitions, "writes": jobs,
            "conf": _driver_conf(cluster, **{
                "spark.sql.execution.arrow.maxRecordsPerBatch": str(arrow_batch)})}
    log(f"executor-kill-batch seed={seed}: {rows:,} rows, {partitions} partitions, per "
        "write: " + "; ".join(f"{j['mode']}: kill the executor of partition {j['target']} "
                              f"after {j['min_rows']:,} of its {per:,} rows"
                              for j in jobs))
    driver = Driver(spec, work / f"driver-{jobs[0]['topic']}.log")
    kills = []
    try:
        driver.wait_event("started", deadline)
        for job in jobs:
            write_started = time.monotonic()
            offsets = Offsets(bootstrap, job["topic"])
            try:
                kills.append(kill_when(cluster, driver, Path(job["options"][
                    "aioproducer.test.trace"]), offsets, partition=job["target"],
                    min_rows=job["min_rows"], min_batch=-1, worker=False,
                    exactly_once=job["mode"] == "eo", deadline=deadline, log=log))
                driver.wait_event("written", deadline)
            finally:
                offsets.close()
            job["seconds"] = time.monotonic() - write_started
        if driver.wait(deadline) != 0:
            raise RuntimeError(f"the driver failed: {driver.error()}")
    finally:
        driver.close()
    results = []
    for job, kill in zip(jobs, kills, strict=True):
        topic = job["topic"]
        committed = count([v for _, v in read_values(bootstrap, topic)], range(rows))
        loose = read_values(bootstrap, topic, committed=False)
        result = Result(f"executor-kill-batch ({job['mode']})", seed, rows, committed,
                        count([v for _, v in loose], range(rows)), [kill], job["seconds"])
        in_target = sum(1 for p, _ in loose if p == job["target"])
        result.notes.append(f"partition {job['target']} holds {in_target:,} records "
                            f"(read_uncommitted) for its {per:,} rows")
        results.append(result)
        delete_topic(bootstrap, topic)
        shutil.rmtree(job["options"]["aioproducer.test.trace"], ignore_errors=True)
    return results


def kill_stream(cluster: LocalSpark, bootstrap: str, seed: int, work: Path, *,
                kills: tuple[str, ...] = ("executor", "worker", "driver"),
                rate: int = 1_000, partitions: int = 2,
                batches_between: tuple[int, int] = (2, 3), batches_after: int = 3,
                fail_at_row: int | None = 150, pace_ms: int = 50, arrow_batch: int = 100,
                exactly_once: bool = True, txn_timeout_ms: int = 600_000,
                deadline_s: float = 400.0, log: Log = print) -> Result:
    """A ``rate-micro-batch`` source (``rate`` rows per micro-batch) streamed into
    ``format("aioproducer")`` on the cluster. For each of ``kills`` in turn, after a
    seeded number of micro-batches: ``executor``: the executor running a seeded
    partition's task is killed mid-write; ``worker``: the same with its whole worker,
    for good (not restarted here: the query goes on on the other worker); ``driver``:
    the driver process group is SIGKILLed a seeded 0-1 s later and started again from
    its checkpoint. With ``fail_at_row``, micro-batch 2's task of a seeded partition
    fails once inside the writer after that many of its rows were acknowledged (its
    transaction open). Then ``batches_after`` more micro-batches, a stop between two,
    and every generated value is counted."""
    rng = random.Random(seed)
    per = rate // partitions
    plan = [(what, rng.randrange(partitions), rng.randint(*batches_between),
             int(per * rng.uniform(0.2, 0.6)), rng.uniform(0.0, 1.0)) for what in kills]
    fail_partition = rng.randrange(partitions)
    started = time.monotonic()
    deadline = started + deadline_s
    topic = create_topic(bootstrap, partitions)
    trace_dir = work / f"trace-{topic}"
    options = {"exactlyOnce": str(exactly_once).lower(),
               "aioproducer.test.trace": str(trace_dir),
               "aioproducer.test.paceMs": str(pace_ms)}
    if exactly_once:
        options["kafka.transaction.timeout.ms"] = str(txn_timeout_ms)
    if fail_at_row is not None:
        options["aioproducer.test.failAtRow"] = f"2:{fail_partition}:{fail_at_row}"
    name = "stream-kills (" + ", ".join(kills) + ")"
    spec = {"job": "stream", "format": "aioproducer", "bootstrap": bootstrap,
            "topic": topic, "rate": rate, "partitions": partitions,
            "checkpoint": str(work / f"ckpt-{topic}"), "options": options,
            "batches": 10_000, "deadline_s": deadline_s,
            "stop_file": str(work / f"stop-{topic}"),
            "conf": _driver_conf(cluster, **{
                "spark.sql.execution.arrow.maxRecordsPerBatch": str(arrow_batch)})}
    log(f"{name} seed={seed}: {rate:,} rows per micro-batch, {partitions} partitions; "
        + ("" if fail_at_row is None else
           f"micro-batch 2 partition {fail_partition} fails at row {fail_at_row}; ")
        + "; then ".join(
            f"after {n} micro-batches, "
            + (f"kill the driver {delay:.3f} s later" if what == "driver" else
               f"kill the {what} running partition {target} after {rows:,} rows of its "
               "task")
            for what, target, n, rows, delay in plan) + f"; topic {topic}")
    offsets = Offsets(bootstrap, topic)
    runs = 0
    driver = Driver(spec, work / f"driver-{topic}-{runs}.log")
    reports = []
    try:
        driver.wait_event("started", deadline)
        for what, target, n, min_rows, delay in plan:
            for _ in range(n):
                driver.wait_event("batch", deadline)
            last = [e for e in driver.events if e["event"] == "batch"][-1]["batch_id"]
            if what == "driver":
                time.sleep(delay)
                driver.kill()
                driver.close()
                log(f"killed the driver (SIGKILL, its process group) {delay:.3f} s after "
                    f"micro-batch {last}; starting it again from its checkpoint")
                reports.append(KillReport("driver", last, -1, 0, -1, -1, -1, 1))
                runs += 1
                driver = Driver(spec, work / f"driver-{topic}-{runs}.log")
                driver.wait_event("started", deadline)
                continue
            reports.append(kill_when(cluster, driver, trace_dir, offsets, partition=target,
                                     min_rows=min_rows, min_batch=last + 1,
                                     worker=what == "worker", exactly_once=exactly_once,
                                     deadline=deadline, log=log))
        for _ in range(batches_after):
            driver.wait_event("batch", deadline)
        Path(spec["stop_file"]).touch()  # the query stops between micro-batches
        driver.wait_event("stopped", deadline)
        if driver.wait(deadline) != 0:
            raise RuntimeError(f"the driver failed: {driver.error()}")
    finally:
        driver.close()
        offsets.close()
    committed = count([v for _, v in read_values(bootstrap, topic)], None)
    uncommitted = count([v for _, v in read_values(bootstrap, topic, committed=False)],
                        None)
    result = Result(name, seed, None, committed, uncommitted, reports,
                    time.monotonic() - started)
    failing = {k: t["rows"] for k, t in traces(trace_dir).items() if t["state"] == "failing"}
    result.failed_attempt_rows = sum(failing.values())
    result.notes.append("task attempts failed inside the writer (batch, partition, "
                        f"attempt: rows acknowledged): {failing}")
    delete_topic(bootstrap, topic)
    shutil.rmtree(trace_dir, ignore_errors=True)
    return result


def driver_kill_stream(cluster: LocalSpark, bootstrap: str, seed: int, work: Path, *,
                       kills: int = 2, rate: int = 1_000, final_batches: int = 3,
                       fail_at: int = 150, deadline_s: float = 400.0,
                       log: Log = print) -> Result:
    """The driver SIGKILLed ``kills`` times (each after 1-3 completed micro-batches plus
    0-1 s, seeded) and restarted from its checkpoint, on the cluster; batch 2's
    partition 0 task fails once inside the writer after ``fail_at`` rows were
    acknowledged (its transaction open)."""
    rng = random.Random(seed)
    started = time.monotonic()
    deadline = started + deadline_s
    topic = create_topic(bootstrap, 2)
    trace_dir = work / f"trace-{topic}"
    options = {"kafka.transaction.timeout.ms": "60000",
               "aioproducer.test.trace": str(trace_dir),
               "aioproducer.test.failAtRow": f"2:0:{fail_at}"}
    spec = {"job": "stream", "format": "aioproducer", "bootstrap": bootstrap,
            "topic": topic, "rate": rate, "partitions": 2,
            "checkpoint": str(work / f"ckpt-{topic}"), "options": options,
            "trigger": "500 milliseconds", "deadline_s": deadline_s,
            "conf": _driver_conf(cluster, **{
                "spark.sql.execution.arrow.maxRecordsPerBatch": "50"})}
    notes = []
    for run in range(kills + 1):
        last = run == kills
        after, delay = rng.randint(1, 3), rng.uniform(0.0, 1.0)
        spec["batches"] = final_batches if last else 1_000_000
        driver = Driver(spec, work / f"driver-{topic}-{run}.log")
        try:
            driver.wait_event("started", deadline)
            if last:
                driver.wait_event("stopped", deadline)
                if driver.wait(deadline) != 0:
                    raise RuntimeError(f"the last driver failed: {driver.error()}")
            else:
                for _ in range(after):
                    driver.wait_event("batch", deadline)
                time.sleep(delay)
                driver.kill()
                notes.append(f"driver SIGKILLed after {after} micro-batch(es) + {delay:.3f} s")
                log(f"driver-kill-stream: {notes[-1]}")
        finally:
            driver.close()
    failing = [k for k, t in traces(trace_dir).items() if t["state"] == "failing"]
    notes.append(f"task attempts failed inside the writer: {sorted(failing)}")
    committed = count([v for _, v in read_values(bootstrap, topic)], None)
    uncommitted = count([v for _, v in read_values(bootstrap, topic, committed=False)],
                        None)
    result = Result("driver-kill-stream", seed, None, committed, uncommitted, [],
                    time.monotonic() - started, notes)
    delete_topic(bootstrap, topic)
    shutil.rmtree(trace_dir, ignore_errors=True)
    return result


# -- clusters --------------------------------------------------------------------------------

@contextlib.contextmanager
def clusters(bootstrap: str | None, spark_dir: str | None,
             log: Log = print) -> Iterator[tuple[str, LocalSpark]]:
    """(bootstrap, Spark cluster): the given ones, or a three-node Kafka cluster and a
    two-worker Spark cluster started in a temporary directory (stopped at the end)."""
    from aioproducer.devbroker import LocalKafka

    tmp = Path(tempfile.mkdtemp(prefix="aioproducer-spark-cluster-"))
    kafka = None
    spark = LocalSpark(spark_dir or tmp / "spark", workers=2)
    try:
        if bootstrap is None:
            kafka = LocalKafka(tmp / "kafka", nodes=3)
            bootstrap = kafka.start(timeout=240)
            log(f"started a three-node Kafka cluster at {bootstrap}")
        log(f"Spark cluster: {spark.start()}")
        yield bootstrap, spark
    finally:
        if spark_dir is None:
            spark.stop()
        if kafka is not None:
            kafka.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="python -m bench.spark_cluster_bench",
                                description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scenario", action="append", default=[], choices=(
        "executor-kill-batch", "stream-kills", "driver-kill-stream", "throughput"))
    p.add_argument("--mode", action="append", choices=("eo", "alo"), default=[],
                   help="executor-kill-batch: exactly once and/or at-least-once")
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--pace-ms", type=int, default=0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--reps", type=int, default=1)
    p.add_argument("--bootstrap", default=None, help="an existing Kafka cluster")
    p.add_argument("--spark-dir", default=None,
                   help="a running LocalSpark's state directory (make spark-cluster)")
    args = p.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(100_000)
    print(f"seed={seed}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="aioproducer-spark-cluster-work-"))
    with clusters(args.bootstrap, args.spark_dir) as (bootstrap, spark):
        for scenario in args.scenario or ["executor-kill-batch"]:
            if scenario == "executor-kill-batch":
                for rep in range(args.reps):
                    for r in executor_kill_batch(spark, bootstrap, seed + rep, work,
                                                 modes=tuple(args.mode or ["eo", "alo"]),
                                                 rows=args.rows, partitions=args.partitions,
                                                 pace_ms=args.pace_ms, deadline_s=1800):
                        print(r.summary(), *r.notes, sep="\n  ", flush=True)
                    spark.ensure_running()
            elif scenario == "stream-kills":
                for rep in range(args.reps):
                    r = kill_stream(spark, bootstrap, seed + rep, work)
                    print(r.summary(), *r.notes, sep="\n  ", flush=True)
                    spark.ensure_running()
            elif scenario == "driver-kill-stream":
                for rep in range(args.reps):
                    r = driver_kill_stream(spark, bootstrap, seed + rep, work)
                    print(r.summary(), *r.notes, sep="\n  ", flush=True)
            elif scenario == "throughput":
                throughput(spark, bootstrap, args.rows, args.reps, work)
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
