"""The Spark driver of the cluster benchmarks and tests, in a process of its own
(``python -m bench.spark_driver SPEC``, started by :class:`Driver`), which prints one
JSON line per event; and the Kafka helpers they share (an independent client,
confluent-kafka: topics, offsets, the values read back and their count).

Used by :mod:`bench.spark_cluster_bench` (kills), :mod:`bench.spark_cluster_throughput`
and the Spark cluster tests.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import select
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

# -- Kafka helpers (confluent-kafka: an independent client) --------------------------------

def create_topic(bootstrap: str, partitions: int, replication: int = 3) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"spark-cluster-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, replication)])[name].result(60)
    deadline = time.monotonic() + 60
    while True:  # every partition has a leader
        md = admin.list_topics(name, timeout=10).topics.get(name)
        if md is not None and len(md.partitions) == partitions and all(
                p.leader >= 0 for p in md.partitions.values()):
            return name
        if time.monotonic() > deadline:
            raise RuntimeError(f"topic {name} not ready")
        time.sleep(0.2)


def delete_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    with contextlib.suppress(Exception):
        admin.delete_topics([topic], operation_timeout=60)[topic].result(60)


class Offsets:
    """End offsets of a topic's partitions: the high watermark (``read_uncommitted``) or
    the last stable offset (``read_committed``: ListOffsets with that isolation)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import Consumer

        self.topic = topic
        self._c = {iso: Consumer({"bootstrap.servers": bootstrap,
                                  "group.id": uuid.uuid4().hex,
                                  "isolation.level": iso})
                   for iso in ("read_committed", "read_uncommitted")}

    def end(self, partition: int, committed: bool) -> int:
        from confluent_kafka import TopicPartition

        c = self._c["read_committed" if committed else "read_uncommitted"]
        _, high = c.get_watermark_offsets(TopicPartition(self.topic, partition),
                                          timeout=10, cached=False)
        return int(high)

    def close(self) -> None:
        for c in self._c.values():
            c.close()


def read_values(bootstrap: str, topic: str, committed: bool = True,
                timeout: float = 600.0) -> list[tuple[int, int]]:
    """(partition, int(value)) of every record up to each partition's end."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                  "enable.auto.commit": False, "enable.partition.eof": True,
                  "isolation.level": "read_committed" if committed else "read_uncommitted"})
    try:
        parts = sorted(c.list_topics(topic, timeout=30).topics[topic].partitions)
        ends = {}
        for p in parts:
            low, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=30,
                                                cached=False)
            ends[p] = (low, high)
        todo = {p for p, (low, high) in ends.items() if high > low}
        c.assign([TopicPartition(topic, p, -2) for p in parts])
        out: list[tuple[int, int]] = []
        deadline = time.monotonic() + timeout
        while todo and time.monotonic() < deadline:
            for m in c.consume(10_000, timeout=1.0):
                if m.error():
                    if m.error().code() == -191:  # _PARTITION_EOF
                        todo.discard(m.partition())
                        continue
                    raise RuntimeError(str(m.error()))
                if m.value() is not None:
                    out.append((m.partition(), int(m.value())))
        if todo:
            raise RuntimeError(f"{topic}: partitions {sorted(todo)} not read to the end")
        return out
    finally:
        c.close()


@dataclasses.dataclass
class Count:
    rows: int
    distinct: int
    duplicated: int
    """Rows read beyond the first copy of each value."""
    lost: int
    """Expected values not read."""

    def __str__(self) -> str:
        return (f"{self.rows:,} rows, {self.distinct:,} distinct, {self.duplicated:,} "
                f"duplicated, {self.lost:,} lost")


def count(values: list[int], expected: range | None) -> Count:
    """Compare ``values`` with ``expected`` (default: 0 .. the largest value read)."""
    seen = Counter(values)
    want = expected if expected is not None else range(max(seen, default=-1) + 1)
    lost = sum(1 for v in want if v not in seen)
    return Count(len(values), len(seen), len(values) - len(seen), lost)


# -- the driver process ------------------------------------------------------------------------

def _emit(event: str, **data: Any) -> None:
    print(json.dumps({"event": event, "time": time.time(), **data}), flush=True)


def _driver(spec: dict[str, Any]) -> None:
    """One Spark driver (``python -m bench.spark_driver SPEC``): a session on
    ``spec["conf"]``'s master, then one job of ``spec["job"]``; events on stdout, one
    JSON object per line."""
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import aioproducer.spark_source as source

    if spec.get("remote"):  # a Spark Connect client: no JVM in this process
        spark = SparkSession.builder.remote(spec["remote"]).getOrCreate()
        counters = source.register(spark)
        _emit("started", connect=True, counters=counters is not None)
    else:
        builder = SparkSession.builder.appName(f"aioproducer-{spec['job']}")
        for k, v in spec["conf"].items():
            builder = builder.config(k, v)
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        source.register(spark)
        _emit("started", app_id=spark.sparkContext.applicationId,
              ui=spark.sparkContext.uiWebUrl)
    try:
        if spec["job"] == "batch":
            _driver_batch(spark, spec)
        else:
            _driver_stream(spark, spec)
    finally:
        spark.stop()


def _field(progress: Any, name: str) -> Any:
    """A field of a streaming progress: an attribute of Spark Connect's
    ``StreamingQueryProgress`` (its ``[name]`` is None there), a key of classic's."""
    value = getattr(progress, name, None)
    return progress[name] if value is None else value


def _writer_options(spec: dict[str, Any]) -> dict[str, str]:
    return {"kafka.bootstrap.servers": spec["bootstrap"], "topic": spec["topic"],
            **spec.get("options", {})}


def _driver_batch(spark: Any, spec: dict[str, Any]) -> None:
    """``spec["writes"]`` one after another: the same rows into each write's topic."""
    value = ("cast(id AS string)" if not spec.get("pad") else
             f"lpad(cast(id AS string), {int(spec['pad'])}, '0')")
    cols = [f"cast({value} AS binary) AS value"]
    if spec.get("route", True):  # Spark partition i to Kafka partition i
        cols.append("cast(spark_partition_id() AS int) AS partition")
    for i, write in enumerate(spec["writes"]):
        df = spark.range(0, write.get("rows", spec["rows"]),
                         numPartitions=spec["partitions"]).selectExpr(*cols)
        writer = df.write.format(write.get("format", spec["format"])).mode("append")
        options = {"kafka.bootstrap.servers": spec["bootstrap"], "topic": write["topic"],
                   **write.get("options", {})}
        for k, v in options.items():
            writer = writer.option(k, v)
        if spec.get("announce"):
            _emit("writing", write=i)
        started = time.monotonic()
        try:
            writer.save()
        except Exception as exc:
            _emit("failed", write=i, error=" ".join(str(exc).split())[:2000])
            raise SystemExit(3) from None
        _emit("written", write=i, seconds=time.monotonic() - started)


def _driver_stream(spark: Any, spec: dict[str, Any]) -> None:
    # rate-micro-batch: the same number of rows in every micro-batch, however late it
    # runs (a rate source's backlog after a slow start or a restart would grow the
    # micro-batches, and with them the paced tasks)
    df = (spark.readStream.format("rate-micro-batch")
          .option("rowsPerBatch", str(spec["rate"]))
          .option("numPartitions", str(spec["partitions"])).load()
          .selectExpr("cast(cast(value AS string) AS binary) AS value",
                      "cast(spark_partition_id() AS int) AS partition"))
    writer = (df.writeStream.format(spec["format"])
              .option("checkpointLocation", spec["checkpoint"])
              .trigger(processingTime=spec.get("trigger", "1 second")))
    for k, v in _writer_options(spec).items():
        writer = writer.option(k, v)
    query = writer.start()
    _emit("query", id=str(query.id))
    done = 0
    deadline = time.monotonic() + spec.get("deadline_s", 600)
    stop_file = spec.get("stop_file")
    while done < spec["batches"] and not (stop_file and os.path.exists(stop_file)):
        if query.exception() is not None:
            _emit("failed", error=" ".join(str(query.exception()).split())[:2000])
            raise SystemExit(3)
        if time.monotonic() > deadline:
            _emit("failed", error="deadline")
            raise SystemExit(4)
        now = sum(1 for p in query.recentProgress if (_field(p, "numInputRows") or 0) > 0)
        if now > done:
            done = now
            _emit("batch", n=done, batch_id=_field(query.lastProgress, "batchId"))
        time.sleep(0.05)
    # Stop between micro-batches, not inside the driver's commit().
    stop_by = time.monotonic() + 30
    while query.status["isTriggerActive"] and time.monotonic() < stop_by:
        time.sleep(0.005)
    query.stop()
    _emit("stopped", batches=done)


# -- driving a driver ------------------------------------------------------------------------

class Driver:
    """A driver child process (its own process group), its events read line by line."""

    def __init__(self, spec: dict[str, Any], log_path: Path) -> None:
        self.log_path = log_path
        self._err = log_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.spark_driver", json.dumps(spec)],
            stdout=subprocess.PIPE, stderr=self._err, stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
            start_new_session=True)
        self._buf = b""
        self.events: list[dict[str, Any]] = []

    def poll_events(self, timeout: float = 0.0) -> list[dict[str, Any]]:
        """Events that arrived (waiting up to ``timeout`` for the first)."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        new: list[dict[str, Any]] = []
        end = time.monotonic() + timeout
        while True:
            left = max(0.0, end - time.monotonic())
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                return new
            chunk = os.read(fd, 65536)
            if not chunk:
                return new
            self._buf += chunk
            while b"\n" in self._buf:
                line, self._buf = self._buf.split(b"\n", 1)
                with contextlib.suppress(ValueError):
                    event = json.loads(line)
                    self.events.append(event)
                    new.append(event)
            if new:
                return new

    def wait_event(self, name: str, deadline: float) -> dict[str, Any]:
        while True:
            for e in self.events:
                if e["event"] == name and not e.get("_seen"):
                    e["_seen"] = True
                    return e
            if time.monotonic() > deadline:
                raise RuntimeError(f"no {name!r} event from the driver in time "
                                   f"(log: {self.log_path})")
            if not self.poll_events(0.5) and self.proc.poll() is not None:
                raise RuntimeError(f"the driver exited ({self.proc.returncode}) before "
                                   f"{name!r}: {self.error() or 'see ' + str(self.log_path)}")
            failed = [e for e in self.events if e["event"] == "failed"]
            if failed:
                raise RuntimeError(f"the driver's job failed: {failed[0]['error']}")

    def error(self) -> str | None:
        failed = [e for e in self.events if e["event"] == "failed"]
        return failed[0]["error"] if failed else None

    def wait(self, deadline: float) -> int:
        while self.proc.poll() is None:
            self.poll_events(0.5)
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"the driver did not finish in time ({self.log_path})")
        self.poll_events(0.0)
        return self.proc.returncode

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(30)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.kill()
        else:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)  # its Python workers
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._err.close()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    _driver(json.loads(argv[0]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
