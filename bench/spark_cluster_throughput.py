"""Rows/s and CPU of Spark's own ``format("kafka")`` and ``format("aioproducer")`` (at
least once, and exactly once) on the standalone cluster, writing to the three-node Kafka
cluster: ``python -m bench.spark_cluster_bench --scenario throughput --rows 10000000``.

One driver process writes the same DataFrame (``--rows`` 100-byte values, no key, 4
Spark partitions: two executors of one core each) into a fresh topic of 8 partitions
(replication 3) per write, each sink in turn, ``--reps`` rounds after a warm-up round
of a tenth of the rows. CPU is sampled from ``/proc`` every 200 ms: the executors' (each
executor JVM and the Python workers below it, under both workers) and the driver's (its
Python process, its JVM and the JVM's Python workers, which run ``commit()``), for the
time of each write. After each write the broker's offsets are checked: the high
watermark must hold exactly the rows (at-least-once), or the rows plus one commit marker
per partition and transaction with the last stable offset caught up (exactly once).
"""

from __future__ import annotations

import json
import os
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from aioproducer.devbroker.spark_cluster import LocalSpark, iter_pids
from bench.spark_driver import Driver, Offsets, create_topic, delete_topic

_TICK = os.sysconf("SC_CLK_TCK")

SINKS: dict[str, tuple[str, dict[str, str]]] = {
    "kafka": ("kafka", {}),
    "aioproducer (at-least-once)": ("aioproducer", {}),
    "aioproducer (exactly once)": ("aioproducer", {"exactlyOnce": "true",
                                                   "kafka.transaction.timeout.ms": "900000"}),
}


def _cpu(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / _TICK


def _tree(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="ascii") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, stack = [root], list(children.get(root, []))
    while stack:
        pid = stack.pop()
        out.append(pid)
        stack.extend(children.get(pid, []))
    return out


class Sampler:
    """Cumulative CPU of the cluster's executors (and their Python workers) and of the
    driver's process tree, sampled every 200 ms; :meth:`window` gives what each group
    used between two marks."""

    def __init__(self, cluster: LocalSpark, driver_pid: int) -> None:
        self.cluster = cluster
        self.driver_pid = driver_pid
        self.seen: dict[int, tuple[str, float]] = {}  # pid: (group, last cpu)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        daemons = set()
        state = self.cluster._load() or {}
        for node in state.get("nodes", []):
            if node.get("pid"):
                daemons.add(int(node["pid"]))
        groups = {pid: "executors" for pid in iter_pids(self.cluster) if pid not in daemons}
        groups.update({pid: "driver" for pid in _tree(self.driver_pid)})
        with self._lock:
            for pid, group in groups.items():
                cpu = _cpu(pid)
                if cpu is not None:
                    self.seen[pid] = (group, cpu)

    def _loop(self) -> None:
        while not self._stop.wait(0.2):
            self._sample()

    def mark(self) -> dict[int, tuple[str, float]]:
        self._sample()
        with self._lock:
            return dict(self.seen)

    @staticmethod
    def window(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]
               ) -> dict[str, float]:
        used = {"executors": 0.0, "driver": 0.0}
        for pid, (group, cpu) in after.items():
            start = before.get(pid, (group, 0.0))[1]
            used[group] += max(0.0, cpu - start)
        return used

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


def throughput(cluster: LocalSpark, bootstrap: str, rows: int, reps: int, work: Path,
               partitions: int = 4, topic_partitions: int = 8) -> list[dict[str, Any]]:
    from bench.spark_jars import ensure_spark_kafka_jars

    jars = ",".join(str(j) for j in ensure_spark_kafka_jars())
    plan: list[tuple[str, int, str]] = []  # (sink, rows, topic)
    for name in SINKS:  # warm-up: JIT, Python workers, connections
        plan.append((name, max(rows // 10, 10_000), create_topic(bootstrap, topic_partitions)))
    for _ in range(reps):
        for name in SINKS:
            plan.append((name, rows, create_topic(bootstrap, topic_partitions)))
    writes = [{"topic": t, "format": SINKS[n][0], "options": SINKS[n][1], "rows": r}
              for n, r, t in plan]
    spec = {"job": "batch", "format": "aioproducer", "bootstrap": bootstrap, "rows": rows,
            "pad": 100, "route": False, "partitions": partitions, "writes": writes,
            "announce": True,
            "conf": cluster.session_config(**{"spark.ui.enabled": "false",
                                               "spark.driver.memory": "1g",
                                               "spark.jars": jars})}
    print(f"throughput: {rows:,} rows of 100 bytes, {partitions} Spark partitions on 2 "
          f"executors of 1 core, topics of {topic_partitions} partitions (replication 3); "
          f"{reps} round(s) after a warm-up round", flush=True)
    driver = Driver(spec, work / "driver-throughput.log")
    sampler = Sampler(cluster, driver.proc.pid)
    results = []
    deadline = time.monotonic() + 3600 * max(1, reps)
    try:
        driver.wait_event("started", deadline)
        for i, (name, n, topic) in enumerate(plan):
            driver.wait_event("writing", deadline)
            before = sampler.mark()
            done = driver.wait_event("written", deadline)
            after = sampler.mark()
            assert done["write"] == i
            used = Sampler.window(before, after)
            exactly = SINKS[name][1].get("exactlyOnce") == "true"
            offsets = Offsets(bootstrap, topic)
            try:
                parts = range(topic_partitions)
                # The coordinator writes the commit markers after EndTxn has answered:
                # the last stable offset catches up with the high watermark shortly after.
                settle_by = time.monotonic() + (60 if exactly else 0)
                while True:
                    high = sum(offsets.end(p, committed=False) for p in parts)
                    stable = sum(offsets.end(p, committed=True) for p in parts)
                    if stable == high or time.monotonic() > settle_by:
                        break
                    time.sleep(0.5)
            finally:
                offsets.close()
            ok = (high >= n and stable == high) if exactly else high == n
            seconds = float(done["seconds"])
            row = {"sink": name, "rows": n, "seconds": seconds, "rows_per_s": n / seconds,
                   "executor_cpu": used["executors"], "driver_cpu": used["driver"],
                   "high_watermark": high, "ok": ok, "warmup": i < len(SINKS)}
            print(f"{'warm-up ' if row['warmup'] else ''}{name}: {n:,} rows in {seconds:.1f} s"
                  f" = {row['rows_per_s']:,.0f} rows/s; CPU executors {used['executors']:.1f} s"
                  f" ({used['executors'] / n * 1e6:.2f} us/row), driver {used['driver']:.1f} s;"
                  f" topic holds {high:,} offsets{'' if ok else ' (WRONG)'}", flush=True)
            results.append(row)
            delete_topic(bootstrap, topic)
        driver.wait(deadline)
    finally:
        sampler.close()
        driver.close()
        for _, _, topic in plan:
            delete_topic(bootstrap, topic)
    measured = [r for r in results if not r["warmup"] and r["ok"]]
    print("\n| sink | rows/s | executor CPU us/row | driver CPU s | rows/s vs kafka |")
    print("|---|---:|---:|---:|---:|")
    base = [r["rows_per_s"] for r in measured if r["sink"] == "kafka"]
    for name in SINKS:
        mine = [r for r in measured if r["sink"] == name]
        if not mine:
            continue
        rate = statistics.median(r["rows_per_s"] for r in mine)
        cpu = statistics.median(r["executor_cpu"] / r["rows"] * 1e6 for r in mine)
        drv = statistics.median(r["driver_cpu"] for r in mine)
        vs = f"{rate / statistics.median(base):.2f}x" if base else "n/a"
        print(f"| {name} | {rate:,.0f} | {cpu:.2f} | {drv:.1f} | {vs} |", flush=True)
    (work / "throughput.json").write_text(json.dumps(results, indent=1))
    return results
