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
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from bench.run import broker

FORMATS = ("aioproducer", "kafka")

_CHILD = '''
import os, sys, time
os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
os.environ["PYSPARK_PYTHON"] = sys.executable
from pyspark.sql import SparkSession
import aioproducer.spark_source as source
fmt, bootstrap, topic, checkpoint, batches, jars = sys.argv[1:7]
builder = (SparkSession.builder.master("local[2, 2]").appName("aioproducer-kill")
           .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1")
           .config("spark.driver.bindAddress", "127.0.0.1"))
if jars:
    builder = builder.config("spark.jars", jars)
spark = builder.getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
source.register(spark)
query = (spark.readStream.format("rate").option("rowsPerSecond", "1000")
         .option("numPartitions", "2").load()
         .selectExpr("cast(value AS string) AS value")
         .writeStream.format(fmt).option("kafka.bootstrap.servers", bootstrap)
         .option("topic", topic).option("checkpointLocation", checkpoint)
         .trigger(processingTime="500 milliseconds").start())
print("started", flush=True)
done = 0
while done < int(batches):
    if query.exception() is not None:
        raise SystemExit(f"query failed: {query.exception()}")
    now = sum(1 for p in query.recentProgress if p["numInputRows"] > 0)
    if now > done:
        done = now
        print("batch", flush=True)
    time.sleep(0.1)
query.stop()
spark.stop()
'''


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.spark_source_bench",
                                description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scenario", action="append", choices=("batch", "kill"), default=[])
    p.add_argument("--records", type=int, default=1_000_000, help="batch rows (1,000,000)")
    p.add_argument("--spark-partitions", type=int, default=4)
    p.add_argument("--topic-partitions", type=int, default=8)
    p.add_argument("--seed", type=int, default=None, help="kill points (default: random)")
    p.add_argument("--final-batches", type=int, default=3)
    p.add_argument("--bootstrap", default=os.environ.get("AIOPRODUCER_BOOTSTRAP"))
    args = p.parse_args(argv)
    args.scenario = args.scenario or ["batch", "kill"]
    return args


def _create_topic(bootstrap: str, partitions: int) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"bench-src-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    time.sleep(1.0)
    return name


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


def _session(jars: list[Path]) -> Any:
    from pyspark.sql import SparkSession

    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    builder = (SparkSession.builder.master("local[2]").appName("aioproducer-source-bench")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.driver.memory", "2g"))
    if jars:
        builder = builder.config("spark.jars", ",".join(str(j) for j in jars))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


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


def kill(args: argparse.Namespace, bootstrap: str, jars: list[Path]) -> None:
    seed = args.seed if args.seed is not None else time.time_ns() % 100_000
    print(f"kill: seed={seed}", flush=True)
    for fmt in FORMATS:
        rng = random.Random(seed)
        topic = _create_topic(bootstrap, 2)
        with tempfile.TemporaryDirectory() as tmp:
            script = Path(tmp) / "child.py"
            script.write_text(_CHILD)
            checkpoint = Path(tmp) / "ckpt"
            for run in range(3):
                child = subprocess.Popen(
                    [sys.executable, str(script), fmt, bootstrap, topic, str(checkpoint),
                     str(args.final_batches) if run == 2 else "1000000",
                     ",".join(str(j) for j in jars) if fmt == "kafka" else ""],
                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                    env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
                    start_new_session=True)
                assert child.stdout is not None
                try:
                    if child.stdout.readline().strip() != b"started":
                        raise RuntimeError(f"{fmt}: the query did not start")
                    if run < 2:
                        child.stdout.readline()  # a micro-batch completed
                        time.sleep(rng.uniform(0.0, 1.5))
                        os.killpg(child.pid, signal.SIGKILL)
                        child.wait(30)
                    elif child.wait(300) != 0:
                        raise RuntimeError(f"{fmt}: the last run failed")
                finally:
                    if child.poll() is None:
                        os.killpg(child.pid, signal.SIGKILL)
                        child.wait(30)
                    child.stdout.close()
        values = Counter(int(v) for _, _, v, _ in _read_all(bootstrap, topic) if v)
        top = max(values) if values else -1
        missing = sum(1 for i in range(top + 1) if i not in values)
        dups = sum(n - 1 for n in values.values() if n > 1)
        print(f"kill {fmt}: {sum(values.values()):,} records read_committed, values 0..{top}: "
              f"{dups:,} duplicates, {missing:,} missing", flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from bench.spark_jars import ensure_spark_kafka_jars

    jars = ensure_spark_kafka_jars()
    with broker(args.bootstrap) as (bootstrap, _desc):
        if "batch" in args.scenario:
            batch(args, bootstrap, jars)
        if "kill" in args.scenario:
            kill(args, bootstrap, jars)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
