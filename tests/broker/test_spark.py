"""aioproducer.spark: DataFrames published from the executors and from the driver.

One local Spark session (``local[2, 2]``: two cores, and a failed task is tried twice so
that Spark's retry can be tested) serves the whole run (the ``spark`` fixture of
tests/broker/conftest.py); everything binds to 127.0.0.1. What arrives is read back with
confluent-kafka (tests/support/kafka_util.py).
"""

from __future__ import annotations

import asyncio
import re
import socket
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from support.kafka_util import Consumed, consume_all, partition_offsets

from aioproducer import Producer
from aioproducer._native import murmur2_partition
from aioproducer.spark import (
    PublishError,
    SchemaError,
    _prepare_chunk,
    publish,
    publish_async,
)

pa = pytest.importorskip("pyarrow", reason="pip install -e '.[spark]'")
pyspark_sql = pytest.importorskip("pyspark.sql", reason="pip install -e '.[spark]'")

TopicFactory = Any


# ``spark``: one Spark session for the whole run (tests/broker/conftest.py).


# -- the data: keys, null keys, null values (tombstones), headers ----------------------

def mixed_df(spark: Any, n: int, partitions: int = 4) -> Any:
    return spark.range(0, n, numPartitions=partitions).selectExpr(
        "CASE WHEN id % 10 = 3 THEN NULL ELSE cast(concat('v', cast(id AS string)) AS binary)"
        " END AS value",
        "CASE WHEN id % 7 = 0 THEN NULL ELSE concat('k', cast(id AS string)) END AS key",
        "CASE WHEN id % 5 = 0 THEN array("
        "  named_struct('key', 'h', 'value', cast(cast(id AS string) AS binary)),"
        "  named_struct('key', 'i', 'value', cast(NULL AS binary)))"
        " ELSE NULL END AS headers",
        "id * 2 AS ignored")


def expected_row(i: int) -> tuple[bytes | None, bytes | None, tuple[Any, ...]]:
    key = None if i % 7 == 0 else f"k{i}".encode()
    value = None if i % 10 == 3 else f"v{i}".encode()
    headers = (("h", str(i).encode()), ("i", None)) if i % 5 == 0 else ()
    return key, value, headers


def check_mixed(got: list[Consumed], n: int, partitions: int, spark_partitions: int,
                *, ordered_across_partitions: bool) -> None:
    assert len(got) == n
    want = Counter(expected_row(i) for i in range(n))
    have = Counter((c.key, c.value, tuple(c.headers)) for c in got)
    assert have == want
    for c in got:
        if c.key is not None:  # Java's murmur2 partition for keyed records
            assert c.partition == murmur2_partition(c.key, partitions), c
    # Order: within a Kafka partition, the rows of one Spark partition (or, from the
    # driver, all rows) keep their DataFrame order.
    per_spark_partition = -(-n // spark_partitions)
    last: dict[tuple[int, int], int] = {}
    for c in sorted(got, key=lambda c: (c.partition, c.offset)):
        if c.value is None:
            continue
        i = int(c.value[1:])
        group = (c.partition, 0 if ordered_across_partitions else i // per_spark_partition)
        assert last.get(group, -1) < i, (c, last.get(group))
        last[group] = i


# -- schema: refused before any Spark job ----------------------------------------------

BAD_SCHEMAS = [
    (["cast(id AS string) AS key"], "no 'value' column"),
    (["id AS value"], "column 'value' is bigint"),
    (["'v' AS value", "id AS key"], "column 'key' is bigint"),
    (["'v' AS value", "3 AS topic"], "column 'topic' is int"),
    (["'v' AS value", "id AS partition"], "column 'partition' is bigint"),
    (["'v' AS value", "array('a') AS headers"], "column 'headers' is array<string>"),
    (["'v' AS value", "array(named_struct('key', 'a', 'value', 'b')) AS headers"],
     "must be array<struct<key: string, value: binary>>"),
    (["'v' AS value", "'w' AS value"], "2 columns named 'value'"),
]


@pytest.mark.slow  # a Spark session
@pytest.mark.parametrize(("exprs", "message"), BAD_SCHEMAS)
def test_schema_error_fails_before_any_job(spark: Any, exprs: list[str],
                                           message: str) -> None:
    sc = spark.sparkContext
    group = f"schema-{'-'.join(exprs)}"
    sc.setJobGroup(group, "must run no job")
    try:
        df = spark.range(3).selectExpr(*exprs)
        with pytest.raises(SchemaError, match=re.escape(message)):
            publish(df, "t", bootstrap_servers="127.0.0.1:1")
        assert list(sc.statusTracker().getJobIdsForGroup(group)) == []
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)


@pytest.mark.slow  # a Spark session
def test_no_topic_anywhere_is_a_schema_error(spark: Any) -> None:
    df = spark.range(3).selectExpr("'v' AS value")
    with pytest.raises(SchemaError, match="no topic: give topic= or a 'topic' column"):
        publish(df, bootstrap_servers="127.0.0.1:1")


@pytest.mark.slow  # a Spark session
@pytest.mark.asyncio
async def test_schema_error_from_the_driver_path(spark: Any) -> None:
    df = spark.range(3).selectExpr("id AS value")
    producer = Producer(bootstrap_servers="127.0.0.1:1")  # never started: not needed
    with pytest.raises(SchemaError, match="column 'value' is bigint"):
        await publish_async(df, producer, "t", progress=False)


# -- Arrow batches to producer calls (no Spark) ----------------------------------------

def test_runs_follow_topic_and_partition_headers_stay_arrow() -> None:
    headers_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    batch = pa.RecordBatch.from_pydict({
        "value": pa.array([b"a", b"b", None, b"d", b"e", b"f"], pa.binary()),
        "key": pa.array([None, b"k", b"k", None, None, None], pa.binary()),
        "topic": pa.array(["t1", "t1", "t1", "t2", "t2", "t2"]),
        "partition": pa.array([None, None, 1, 1, 1, 1], pa.int32()),
        "headers": pa.array([None, [], None, None, [{"key": "x", "value": b"y"}], None],
                            headers_type),
    })
    chunk = _prepare_chunk(batch, None)
    assert chunk.rows == 6
    # runs of 2 rows on average: values and keys as lists, headers as the Arrow column
    assert chunk.values == [b"a", b"b", None, b"d", b"e", b"f"]
    assert chunk.keys == [None, b"k", b"k", None, None, None]
    assert [(r.topic, r.partition, r.start, r.end) for r in chunk.runs] == [
        ("t1", None, 0, 2), ("t1", 1, 2, 3), ("t2", 1, 3, 6)]
    values, keys, headers = chunk.columns(chunk.runs[2])
    assert (values, keys) == ([b"d", b"e", b"f"], [None, None, None])
    assert headers.to_pylist() == [None, [{"key": "x", "value": b"y"}], None]
    assert chunk.nbytes == 5 + 2 + 2  # values, keys, one header
    # topic= overrides the column; no key column (or all null keys): keys is None;
    # no header in any row: headers is None; one run: the Arrow columns as they are
    only = _prepare_chunk(batch.select(["value", "topic"]), "over")
    assert [(r.topic, r.start, r.end) for r in only.runs] == [("over", 0, 6)]
    assert only.keys is None and only.headers is None
    assert isinstance(only.values, pa.Array)
    assert only.columns(only.runs[0])[0] is only.values
    empty = _prepare_chunk(batch.select(["value", "headers"]).slice(0, 4), "t")
    assert empty.headers is None and empty.nbytes == 3
    # strings are read as their UTF-8 bytes; long runs keep Arrow (zero-copy slices)
    n = 1000
    long = pa.RecordBatch.from_pydict({
        "value": pa.array([f"v{i}" for i in range(n)], pa.string()),
        "partition": pa.array([i // 500 for i in range(n)], pa.int32())})
    chunk = _prepare_chunk(long, "t")
    assert [(r.partition, r.start, r.end) for r in chunk.runs] == [(0, 0, 500),
                                                                   (1, 500, 1000)]
    second = chunk.columns(chunk.runs[1])[0]
    assert second.type == pa.binary() and second.offset == 500
    assert second.to_pylist() == [f"v{i}".encode() for i in range(500, n)]


# -- executor side ---------------------------------------------------------------------

@pytest.mark.slow  # a Spark session
def test_publish_from_executors_200k(spark: Any, kafka_bootstrap: str,
                                     topic_factory: TopicFactory) -> None:
    n, partitions = 200_000, 4
    topic = topic_factory(partitions=partitions)
    report = publish(mixed_df(spark, n), topic, bootstrap_servers=kafka_bootstrap)
    assert (report.records, report.failures, report.partitions) == (n, 0, 4)
    assert report.bytes == sum(
        len(k or b"") + len(v or b"") + sum(len(hk) + len(hv or b"") for hk, hv in h)
        for k, v, h in map(expected_row, range(n)))
    got = consume_all(kafka_bootstrap, topic, n)
    check_mixed(got, n, partitions, 4, ordered_across_partitions=False)


@pytest.mark.slow  # a Spark session
def test_topic_and_partition_columns(spark: Any, kafka_bootstrap: str,
                                     topic_factory: TopicFactory) -> None:
    a, b = topic_factory(partitions=3), topic_factory(partitions=3)
    n = 3000
    df = spark.range(0, n, numPartitions=2).selectExpr(
        "cast(cast(id AS string) AS binary) AS value",
        f"CASE WHEN id % 3 = 0 THEN '{a}' ELSE '{b}' END AS topic",
        "CASE WHEN id % 4 = 0 THEN NULL ELSE cast(id % 3 AS int) END AS partition",
        "cast(id AS string) AS key")
    report = publish(df, bootstrap_servers=kafka_bootstrap)
    assert report.records == n
    got = consume_all(kafka_bootstrap, a, n // 3) + consume_all(kafka_bootstrap, b, n - n // 3)
    assert len(got) == n
    for c in got:
        i = int(c.value or b"")
        assert c.topic == (a if i % 3 == 0 else b)
        want = murmur2_partition(c.key or b"", 3) if i % 4 == 0 else i % 3
        assert c.partition == want, (i, c)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow  # a Spark session
def test_unreachable_broker_fails_the_job_in_time(spark: Any) -> None:
    df = spark.range(0, 100, numPartitions=2).selectExpr("cast('v' AS binary) AS value")
    started = time.monotonic()
    with pytest.raises(PublishError, match=r"KafkaConnectionError") as info:
        publish(df, "t", bootstrap_servers=f"127.0.0.1:{_free_port()}",
                producer_config={"max_block_ms": 1500})
    # two attempts (local[2, 2]) of 1.5 s each, plus Spark's own overhead
    assert time.monotonic() - started < 30
    assert "could not publish" in str(info.value)


@pytest.mark.slow  # a Spark session
def test_failed_records_fail_the_task_or_are_counted(spark: Any, kafka_bootstrap: str,
                                                     topic_factory: TopicFactory) -> None:
    # The broker refuses every batch of this topic for good (MESSAGE_TOO_LARGE).
    topic = topic_factory(config={"max.message.bytes": "100"})
    df = spark.range(0, 500, numPartitions=2).selectExpr(
        "cast(repeat('x', 300) AS binary) AS value")
    with pytest.raises(PublishError, match=r"500 records failed|250 of 250 records failed"):
        publish(df, topic, bootstrap_servers=kafka_bootstrap)
    report = publish(df, topic, bootstrap_servers=kafka_bootstrap, raise_on_failure=False)
    assert (report.records, report.failures, report.delivered) == (500, 500, 0)
    assert report.errors and "MessageTooLarge" in report.errors[0]


@pytest.mark.slow  # a Spark session
def test_failed_task_is_retried_at_least_once(spark: Any, kafka_bootstrap: str,
                                              topic_factory: TopicFactory) -> None:
    n = 60_000  # two Spark partitions of three Arrow batches each

    def fail_first_attempt(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        for i, batch in enumerate(batches):
            if i == 2 and ctx.partitionId() == 0 and ctx.attemptNumber() == 0:
                raise RuntimeError("injected failure on the first attempt")
            yield batch

    df = (spark.range(0, n, numPartitions=2)
          .selectExpr("cast(cast(id AS string) AS binary) AS value")
          .mapInArrow(fail_first_attempt, "value binary"))
    topic = topic_factory(partitions=2)
    report = publish(df, topic, bootstrap_servers=kafka_bootstrap)
    assert report.records == n  # the report counts the successful attempts
    got = consume_all(kafka_bootstrap, topic, n)
    seen = Counter(int(c.value or b"") for c in got)
    assert set(seen) == set(range(n))  # every row at least once
    assert len(got) >= n


# -- driver side -----------------------------------------------------------------------

@pytest.mark.slow  # a Spark session
@pytest.mark.asyncio
async def test_publish_async_from_the_driver_200k(spark: Any, kafka_bootstrap: str,
                                                  topic_factory: TopicFactory) -> None:
    n, partitions = 200_000, 4
    topic = topic_factory(partitions=partitions)
    async with Producer(bootstrap_servers=kafka_bootstrap) as producer:
        report = await publish_async(mixed_df(spark, n), producer, topic, progress=True)
    assert (report.records, report.failures, report.partitions) == (n, 0, 4)
    got = await asyncio.to_thread(consume_all, kafka_bootstrap, topic, n)
    check_mixed(got, n, partitions, 4, ordered_across_partitions=True)


def _run_queue_ns() -> int:
    """Nanoseconds this thread has spent runnable but waiting for a CPU (Linux), or 0."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1])
    except (OSError, IndexError, ValueError):
        return 0


@pytest.mark.slow  # a Spark session
@pytest.mark.asyncio
async def test_driver_path_keeps_the_loop_responsive(spark: Any, kafka_bootstrap: str,
                                                     topic_factory: TopicFactory) -> None:
    """A task ticking every 5 ms on the loop is never held up for 50 ms or more.

    On two cores shared with Spark's JVM, its Python workers and the broker, the
    scheduler sometimes leaves the whole process waiting for a CPU for tens of ms; an
    unrelated process ticking beside it sees the same gaps. That wait is read from
    /proc/thread-self/schedstat and not counted: what is measured is the loop being
    busy or blocked (a long call, a blocking Spark call, the GIL held elsewhere).
    """
    n = 1_000_000
    topic = topic_factory(partitions=4)
    df = spark.range(0, n, numPartitions=8).selectExpr(
        "cast(lpad(cast(id AS string), 100, 'x') AS binary) AS value")
    loop = asyncio.get_running_loop()
    worst = worst_raw = 0.0
    ticks = 0

    async def tick() -> None:
        nonlocal worst, worst_raw, ticks
        last, last_queued = loop.time(), _run_queue_ns()
        while True:
            await asyncio.sleep(0.005)
            now, queued = loop.time(), _run_queue_ns()
            late = now - last - 0.005
            worst_raw = max(worst_raw, late)
            worst = max(worst, late - (queued - last_queued) / 1e9)
            last, last_queued = now, queued
            ticks += 1

    ticker = asyncio.create_task(tick())
    try:
        async with Producer(bootstrap_servers=kafka_bootstrap) as producer:
            report = await publish_async(df, producer, topic, progress=False)
    finally:
        ticker.cancel()
    print(f"{ticks} ticks; longest hold-up {worst * 1000:.1f} ms "
          f"({worst_raw * 1000:.1f} ms with the waits for a CPU)")
    assert report.records == n
    held = sum(high - low for low, high in partition_offsets(kafka_bootstrap, topic).values())
    assert held == n
    assert ticks > 100
    assert worst < 0.050, (f"the event loop was held up for {worst * 1000:.0f} ms "
                           f"({worst_raw * 1000:.0f} ms with the waits for a CPU)")


@pytest.mark.slow  # a Spark session
@pytest.mark.asyncio
async def test_driver_path_raises_the_typed_error(spark: Any, kafka_bootstrap: str,
                                                  topic_factory: TopicFactory) -> None:
    from aioproducer.errors import MessageTooLargeError

    topic = topic_factory(config={"max.message.bytes": "100"})
    df = spark.range(0, 50, numPartitions=1).selectExpr(
        "cast(repeat('x', 300) AS binary) AS value")
    async with Producer(bootstrap_servers=kafka_bootstrap) as producer:
        with pytest.raises(MessageTooLargeError):
            await publish_async(df, producer, topic, progress=False)
        report = await publish_async(df, producer, topic, progress=False,
                                     raise_on_failure=False)
    assert (report.records, report.failures) == (50, 50)


def _jvm_heap_used_after_gc(spark: Any) -> int:
    runtime = spark.sparkContext._jvm.java.lang.Runtime.getRuntime()
    used = 0
    for _ in range(3):  # a few collections: what is left is reachable
        spark.sparkContext._jvm.java.lang.System.gc()
        time.sleep(0.2)
        used = int(runtime.totalMemory()) - int(runtime.freeMemory())
    return used


@pytest.mark.slow  # a Spark session
@pytest.mark.asyncio
async def test_driver_path_leaves_nothing_in_the_driver_jvm(spark: Any, kafka_bootstrap: str,
                                                            topic_factory: Any) -> None:
    """Three driver-side publishes of ~80 MB of results each leave the driver JVM's heap
    as it was. (Through ``DataFrame.toLocalIterator()`` Spark kept every partition's
    result: +80 MB per publish here, and a second 10M-row publish ran a 3 GiB driver out
    of heap.)"""
    topic = topic_factory(partitions=4)
    n = 400_000
    df = spark.range(0, n, numPartitions=20).selectExpr(
        "cast(lpad(cast(id AS string), 100, '0') AS binary) AS value")
    async with Producer(bootstrap_servers=kafka_bootstrap, linger_ms=5) as producer:
        await publish_async(df, producer, topic, progress=False)  # warm-up
        before = _jvm_heap_used_after_gc(spark)
        for _ in range(3):
            report = await publish_async(df, producer, topic, progress=False)
            assert report.records == n and report.failures == 0
        after = _jvm_heap_used_after_gc(spark)
    grown = (after - before) >> 20
    print(f"\ndriver JVM heap after GC: {before >> 20} MiB -> {after >> 20} MiB")
    assert grown < 60, f"the driver JVM kept {grown} MiB after 3 publishes"
