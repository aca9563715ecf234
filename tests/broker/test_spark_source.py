"""format("aioproducer"): the Spark Python Data Source, batch and streaming (exactly once).

Real Spark 4 local mode (``local[2, 2]``: a failed task is tried twice) and the test
broker; what arrives is read back with confluent-kafka (tests/support/kafka_util.py).
"""

from __future__ import annotations

import json
import os
import re
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.kafka_util import consume_all

from aioproducer import Producer
from aioproducer._native import murmur2_partition

pa = pytest.importorskip("pyarrow", reason="pip install -e '.[spark]'")
pyspark_sql = pytest.importorskip("pyspark.sql", reason="pip install -e '.[spark]'")

from aioproducer import spark_source  # noqa: E402  (needs pyspark)

TopicFactory = Any


# ``spark``: one Spark session for the whole run (tests/broker/conftest.py).


# -- batch ---------------------------------------------------------------------------------

@pytest.mark.slow  # a Spark session
def test_batch_write_field_by_field(spark: Any, kafka_bootstrap: str,
                                    topic_factory: TopicFactory) -> None:
    a, b = topic_factory(partitions=3), topic_factory(partitions=3)
    n = 3000
    df = spark.range(0, n, numPartitions=3).selectExpr(
        "CASE WHEN id % 10 = 3 THEN NULL ELSE concat('v', cast(id AS string)) END AS value",
        "CASE WHEN id % 7 = 0 THEN NULL ELSE cast(concat('k', cast(id AS string)) AS binary)"
        " END AS key",
        f"CASE WHEN id % 2 = 0 THEN '{a}' ELSE '{b}' END AS topic",
        "CASE WHEN id % 11 = 0 THEN cast(id % 3 AS int) ELSE NULL END AS partition",
        "CASE WHEN id % 5 = 0 THEN array(named_struct('key', 'h',"
        " 'value', cast(cast(id AS string) AS binary))) ELSE NULL END AS headers",
        "id AS ignored")
    (df.write.format("aioproducer").option("kafka.bootstrap.servers", kafka_bootstrap)
     .option("kafka.linger.ms", "5").mode("append").save())
    got = (consume_all(kafka_bootstrap, a, n // 2)
           + consume_all(kafka_bootstrap, b, n // 2))
    assert len(got) == n
    want = {}
    for i in range(n):
        want[i] = (a if i % 2 == 0 else b,
                   None if i % 7 == 0 else f"k{i}".encode(),
                   None if i % 10 == 3 else f"v{i}".encode(),
                   [("h", str(i).encode())] if i % 5 == 0 else [])
    have = Counter((c.topic, c.key, c.value, tuple(c.headers)) for c in got)
    assert have == Counter((t, k, v, tuple(h)) for t, k, v, h in want.values())
    for c in got:
        i = int((c.key or c.value or b"x-1")[1:]) if (c.key or c.value) else -1
        if i < 0:
            continue
        if i % 11 == 0:
            assert c.partition == i % 3, c
        elif c.key is not None:
            assert c.partition == murmur2_partition(c.key, 3), c


@pytest.mark.slow  # a Spark session
def test_batch_schema_error_before_any_task(spark: Any) -> None:
    sc = spark.sparkContext
    group = "aioproducer-source-schema"
    sc.setJobGroup(group, "must run no job")
    try:
        df = spark.range(3).selectExpr("id AS value")
        with pytest.raises(Exception, match="SchemaError") as info:
            (df.write.format("aioproducer").option("kafka.bootstrap.servers", "127.0.0.1:1")
             .option("topic", "t").mode("append").save())
        assert "column 'value' is bigint" in str(info.value)
        assert list(sc.statusTracker().getJobIdsForGroup(group)) == []
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)


def test_batch_overwrite_is_refused_before_any_task(spark: Any) -> None:
    sc = spark.sparkContext
    group = "aioproducer-source-overwrite"
    sc.setJobGroup(group, "must run no job")
    try:
        df = spark.range(3).selectExpr("cast(id AS string) AS value")
        with pytest.raises(Exception, match=r"ConfigError.*overwrite is not allowed"):
            (df.write.format("aioproducer").option("kafka.bootstrap.servers", "127.0.0.1:1")
             .option("topic", "t").mode("overwrite").save())
        assert list(sc.statusTracker().getJobIdsForGroup(group)) == []
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)


# -- batch, exactly once (option exactlyOnce) -----------------------------------------------

def _exactly_once_batch(df: Any, bootstrap: str, topic: str, **options: str) -> None:
    writer = (df.write.format("aioproducer").option("kafka.bootstrap.servers", bootstrap)
              .option("topic", topic).option("exactlyOnce", "true")
              .option("kafka.transaction.timeout.ms", "120000"))
    for k, v in options.items():
        writer = writer.option(k, v)
    writer.mode("append").save()


@pytest.mark.slow  # a Spark session
def test_batch_exactly_once_with_a_retried_task(spark: Any, kafka_bootstrap: str,
                                                topic_factory: TopicFactory) -> None:
    """exactlyOnce=true: each task writes in a transaction the driver's commit()
    commits. The first attempt of partition 1's task fails after writing (its
    transaction prepared): the retry's init_transactions() aborts it, so a
    read_committed consumer sees every row once and a read_uncommitted one sees
    partition 1's rows twice."""
    topic = topic_factory(partitions=2)
    n = 3000
    df = spark.range(0, n, numPartitions=3).selectExpr(
        "cast(id AS string) AS value", "cast(id % 13 AS string) AS key",
        "CASE WHEN id % 4 = 0 THEN array(named_struct('key', 'h', 'value',"
        " cast(cast(id AS string) AS binary))) ELSE NULL END AS headers")
    _exactly_once_batch(df, kafka_bootstrap, topic,
                        **{"aioproducer.test.failAfterWrite": "0:1"})
    committed = consume_all(kafka_bootstrap, topic, n, timeout=30,
                            isolation="read_committed")
    assert sorted(int(c.value or b"-1") for c in committed) == list(range(n))
    for c in committed:
        i = int(c.value or b"-1")
        assert c.key == str(i % 13).encode()
        assert c.headers == ([("h", str(i).encode())] if i % 4 == 0 else [])
    seen = Counter(int(c.value or b"-1") for c in consume_all(kafka_bootstrap, topic, n,
                                                            timeout=15))
    twice = sorted(v for v, k in seen.items() if k == 2)
    assert twice == list(range(1000, 2000))  # partition 1 of spark.range: 1000..1999
    assert all(k in (1, 2) for k in seen.values())


@pytest.mark.slow  # a Spark session
def test_batch_exactly_once_failed_job_aborts_every_transaction(
        spark: Any, kafka_bootstrap: str, topic_factory: TopicFactory) -> None:
    """Partition 1 holds a record over max.request.size: its task fails (twice) and so
    does the job, while partition 0's task is still writing (it sleeps 15 s after its
    rows, test option paceMs): Spark cancels it, its transaction open. The failed task
    aborted its own, and the driver's abort() initializes the transactional id of
    every task without a commit message, which aborts partition 0's: read_committed
    sees none of the rows, and the transactions are ended, not left open (a later
    committed write is visible at once, long before the 120 s transaction timeout
    would end them). Before abort() did so, a task cancelled mid-write (a job that
    failed while it ran: which one finished first was up to the machine's load) held
    the partition back until the timeout."""
    topic = topic_factory(partitions=1)
    df = spark.range(0, 20, numPartitions=2).selectExpr(
        "CASE WHEN id = 13 THEN repeat('x', 5000) ELSE cast(id AS string) END AS value")
    with pytest.raises(Exception, match="RecordPublishError"):
        _exactly_once_batch(df, kafka_bootstrap, topic,
                            **{"kafka.max.request.size": "2000",
                               "aioproducer.test.paceMs": "15000"})
    started = time.monotonic()
    later = spark.range(100, 110, numPartitions=1).selectExpr("cast(id AS string) AS value")
    _exactly_once_batch(later, kafka_bootstrap, topic)
    committed = consume_all(kafka_bootstrap, topic, 10, timeout=30,
                            isolation="read_committed")
    assert sorted(int(c.value or b"-1") for c in committed) == list(range(100, 110))
    assert time.monotonic() - started < 60
    everything = consume_all(kafka_bootstrap, topic, 10 + 10 + 3, timeout=10)
    values = Counter(c.value for c in everything)
    assert all(values[str(i).encode()] >= 1 for i in range(10))  # written, aborted


@pytest.mark.slow  # a Spark session
def test_counts_reach_sparks_python_worker_logs(spark: Any, kafka_bootstrap: str,
                                                topic_factory: TopicFactory) -> None:
    """The Python Data Source API has no metrics hook: each task's counts (and a failed
    attempt) and the driver's totals are INFO records of logger aioproducer.spark_source,
    which Spark's Python worker logging keeps (spark.tvf.python_worker_logs())."""
    import datetime

    topic = topic_factory(partitions=2)
    prefix = f"logs-{topic}"
    n = 3000
    df = spark.range(0, n, numPartitions=3).selectExpr("cast(id AS string) AS value")
    since = datetime.datetime.now() - datetime.timedelta(seconds=1)
    spark.conf.set("spark.sql.pyspark.worker.logging.enabled", "true")
    try:
        _exactly_once_batch(df, kafka_bootstrap, topic,
                            **{"transactional.id.prefix": prefix,
                               "aioproducer.test.failAfterWrite": "0:2"})
        rows = (spark.tvf.python_worker_logs()
                .filter(pyspark_sql.functions.col("logger") == "aioproducer.spark_source")
                .filter(pyspark_sql.functions.col("ts") >= since).collect())
    finally:
        spark.conf.unset("spark.sql.pyspark.worker.logging.enabled")
    events: list[tuple[str, dict[str, Any]]] = []
    for r in rows:
        assert r["level"] == "INFO", r
        found = re.fullmatch(r'format\("aioproducer"\) ([a-z -]+): (\{.*\})', r["msg"])
        assert found, r["msg"]
        events.append((found.group(1), json.loads(found.group(2))))
    tasks = sorted((e["partition"], e["attempt"], e["records"], e["failures"])
                   for name, e in events if name == "task written"
                   and e["transactional_id"].startswith(prefix))
    assert tasks == [(0, 0, 1000, 0), (1, 0, 1000, 0), (2, 1, 1000, 0)]  # 2.0 failed
    failed = [e for name, e in events if name == "task failed"
              and e["transactional_id"] == f"{prefix}-2"]
    assert [(e["attempt"], e["error"]) for e in failed] == [(0, "PublishError")]
    assert "injected failure after writing" in failed[0]["message"]
    totals = [e for name, e in events if name == "write committed"]
    assert {"records": n, "bytes": sum(len(str(i)) for i in range(n)), "failures": 0,
            "tasks": 3, "transactions": 3} in totals
    assert len(consume_all(kafka_bootstrap, topic, n, timeout=30,
                           isolation="read_committed")) == n


@pytest.mark.slow  # a Spark session
def test_write_counters_count_successful_attempts_once(spark: Any, kafka_bootstrap: str,
                                                       topic_factory: TopicFactory) -> None:
    """register() returns accumulators the tasks add their rows and bytes to; Spark
    keeps the updates of successful attempts only: partition 1's failed first attempt
    (which had written its rows) is not counted."""
    counters = spark_source.register(spark)  # registers format("aioproducer") again
    assert counters is not None
    topic = topic_factory(partitions=2)
    n = 3000
    df = spark.range(0, n, numPartitions=3).selectExpr("cast(id AS string) AS value")
    nbytes = sum(len(str(i)) for i in range(n))
    _exactly_once_batch(df, kafka_bootstrap, topic,
                        **{"aioproducer.test.failAfterWrite": "0:1"})
    assert (counters.records.value, counters.bytes.value) == (n, nbytes)
    (df.write.format("aioproducer").option("kafka.bootstrap.servers", kafka_bootstrap)
     .option("topic", topic).mode("append").save())
    assert (counters.records.value, counters.bytes.value) == (2 * n, 2 * nbytes)
    assert len(consume_all(kafka_bootstrap, topic, 2 * n, timeout=30,
                           isolation="read_committed")) == 2 * n


def test_exactly_once_option_is_checked() -> None:
    schema = pyspark_sql.types.StructType([pyspark_sql.types.StructField(
        "value", pyspark_sql.types.BinaryType())])
    base = {"kafka.bootstrap.servers": "127.0.0.1:1", "topic": "t"}
    batch = spark_source._parse(base, schema, streaming=False)
    assert batch.txn_prefix is None  # at-least-once unless asked
    once = spark_source._parse({**base, "exactlyOnce": "TRUE"}, schema, streaming=False)
    again = spark_source._parse({**base, "exactlyOnce": "true"}, schema, streaming=False)
    assert once.txn_prefix and again.txn_prefix and once.txn_prefix != again.txn_prefix
    named = spark_source._parse({**base, "exactlyOnce": "true",
                                 "transactional.id.prefix": "mine"}, schema,
                                streaming=False)
    assert named.txn_prefix == "mine"
    stream = spark_source._parse({**base, "checkpointLocation": "/tmp/x"}, schema,
                                 streaming=True)
    assert stream.txn_prefix is not None  # exactly once unless told otherwise
    loose = spark_source._parse({**base, "checkpointLocation": "/tmp/x",
                                 "exactlyOnce": "false"}, schema, streaming=True)
    assert loose.txn_prefix is None
    with pytest.raises(spark_source.ConfigError, match="'exactlyOnce' must be 'true' or"):
        spark_source._parse({**base, "exactlyOnce": "yes"}, schema, streaming=False)


# -- streaming, exactly once -----------------------------------------------------------------

def _run_stream(spark: Any, bootstrap: str, topic: str, checkpoint: Path,
                batches: int, extra: dict[str, str] | None = None) -> None:
    """A rate source (two partitions) into format("aioproducer") until ``batches``
    more micro-batches have completed (60 s at most), then stop."""
    stream = (spark.readStream.format("rate").option("rowsPerSecond", "300")
              .option("numPartitions", "2").load()
              .selectExpr("cast(value AS string) AS value",
                          "cast(value % 17 AS string) AS key"))
    writer = (stream.writeStream.format("aioproducer")
              .option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
              .option("kafka.transaction.timeout.ms", "20000")
              .option("checkpointLocation", str(checkpoint))
              .trigger(processingTime="500 milliseconds"))
    for k, v in (extra or {}).items():
        writer = writer.option(k, v)
    query = writer.start()
    try:
        deadline = time.monotonic() + 60
        done = 0
        while done < batches:
            assert time.monotonic() < deadline, query.lastProgress
            assert query.exception() is None, str(query.exception())
            progress = query.recentProgress
            done = sum(1 for p in progress if p["numInputRows"] > 0)
            time.sleep(0.2)
    finally:
        # Between micro-batches: a stop during the driver's commit() could leave one
        # task's transaction committed and the other's open (nothing restarts to
        # commit it), and the values would not be contiguous.
        stop_by = time.monotonic() + 10
        while query.status["isTriggerActive"] and time.monotonic() < stop_by:
            time.sleep(0.005)
        query.stop()


def _committed_values(bootstrap: str, topic: str) -> list[int]:
    got = consume_all(bootstrap, topic, 1, timeout=20, isolation="read_committed")
    return sorted(int(c.value) for c in got if c.value is not None)


@pytest.mark.slow  # a Spark streaming query, twice
def test_stream_restart_and_task_failure_exactly_once(
        spark: Any, kafka_bootstrap: str, topic_factory: TopicFactory,
        tmp_path: Path) -> None:
    topic = topic_factory(partitions=3)
    checkpoint = tmp_path / "ckpt"
    _run_stream(spark, kafka_bootstrap, topic, checkpoint, 3,
                {"aioproducer.test.failAfterWrite": "1:0"})
    first = _committed_values(kafka_bootstrap, topic)
    assert first and first == list(range(len(first)))  # batch 1 partition 0 retried
    _run_stream(spark, kafka_bootstrap, topic, checkpoint, 3)
    values = _committed_values(kafka_bootstrap, topic)
    assert len(values) > len(first)
    assert values == list(range(len(values))), Counter(values).most_common(3)
    done = sorted(int(f.split(".")[0]) for f in os.listdir(checkpoint / "aioproducer")
                  if f.endswith(".done"))
    assert done == list(range(len(done))) and len(done) >= 4
    # The failed first attempt of batch 1, partition 0 wrote rows that were aborted:
    # read_uncommitted sees some of batch 1's rows twice, read_committed once.
    counts = [json.loads((checkpoint / "aioproducer" / f"{b}.done").read_text())["records"]
              for b in (0, 1)]
    assert counts[1] > 0
    batch1 = range(counts[0], counts[0] + counts[1])
    seen = Counter(int(c.value) for c in consume_all(kafka_bootstrap, topic, len(values),
                                                     timeout=10) if c.value is not None)
    assert any(seen[v] == 2 for v in batch1)


@pytest.mark.slow  # a Spark streaming query
def test_stream_replayed_batch_commits_recorded_transactions(
        spark: Any, kafka_bootstrap: str, topic_factory: TopicFactory,
        tmp_path: Path) -> None:
    """The driver dies after committing batch 2's transactions but before its ``.done``
    and Spark's commit log (a test option makes commit() raise there): the restarted
    query replays batch 2, whose tasks write nothing, and the recorded transactions are
    committed again (a retry to the coordinator): every row once."""
    topic = topic_factory(partitions=2)
    checkpoint = tmp_path / "ckpt"
    with pytest.raises(AssertionError, match="injected crash after committing batch 2"):
        _run_stream(spark, kafka_bootstrap, topic, checkpoint, 10,
                    {"aioproducer.test.crashAfterCommit": "2"})
    log_dir = checkpoint / "aioproducer"
    assert (log_dir / "2.intent").exists() and not (log_dir / "2.done").exists()
    assert not (checkpoint / "commits" / "2").exists()
    before = _committed_values(kafka_bootstrap, topic)
    _run_stream(spark, kafka_bootstrap, topic, checkpoint, 2)
    values = _committed_values(kafka_bootstrap, topic)
    assert len(values) > len(before)
    assert values == list(range(len(values))), Counter(values).most_common(3)
    # The replay wrote nothing (its tasks found the intent) and committed the
    # recorded transactions again.
    done = json.loads((log_dir / "2.done").read_text())
    intent = json.loads((log_dir / "2.intent").read_text())
    assert done["records"] == 0
    assert done["transactions"] == len(intent["transactions"]) > 0


@pytest.mark.slow  # a Spark session
@pytest.mark.parametrize(("select", "options", "message"), [
    (["cast(value AS int) AS value"], {"checkpointLocation": "CKPT"},
     "SchemaError: column 'value' is int"),
    (["cast(value AS string) AS value"], {"checkpointLocation": "CKPT",
                                          "aioproducer.commitLog": "s3://b/log"},
     "CommitLogError: 's3://b/log': the commit log must be on a filesystem path"),
    (["cast(value AS string) AS value"], {"checkpointLocation": "CKPT",
                                          "kafka.transactional.id": "x"},
     "ConfigError: option 'kafka.transactional.id' is not supported"),
])
def test_stream_refused_before_any_batch(spark: Any, tmp_path: Path, select: list[str],
                                         options: dict[str, str], message: str) -> None:
    df = spark.readStream.format("rate").load().selectExpr(*select)
    writer = (df.writeStream.format("aioproducer")
              .option("kafka.bootstrap.servers", "127.0.0.1:1").option("topic", "t"))
    for k, v in options.items():
        writer = writer.option(k, v.replace("CKPT", str(tmp_path / "ckpt")))
    query = None
    with pytest.raises(Exception, match=re.escape(message)):
        query = writer.start()
        query.awaitTermination(60)
    if query is not None:
        query.stop()
    assert not (tmp_path / "ckpt" / "aioproducer").exists()


@pytest.mark.asyncio
async def test_lost_transaction_is_a_typed_error(kafka_bootstrap: str,
                                                 topic_factory: TopicFactory) -> None:
    """The driver's commit of a transaction the coordinator aborted raises
    TransactionLostError naming the transaction timeout."""
    topic = topic_factory()
    tid = f"lost-{topic}"
    async with Producer(bootstrap_servers=kafka_bootstrap, transactional_id=tid) as p:
        await p.init_transactions()
        p.begin_transaction()
        await p.send(topic, b"x")
        handle = await p.prepare_transaction()
    assert handle is not None
    async with Producer(bootstrap_servers=kafka_bootstrap, transactional_id=tid) as p:
        await p.init_transactions()  # aborts it, as the coordinator's timeout would
    with pytest.raises(spark_source.TransactionLostError,
                       match=re.escape("kafka.transaction.timeout.ms")):
        await spark_source._end({"bootstrap_servers": kafka_bootstrap},
                                [(tid, *handle)], commit=True)



# -- a failed record's position --------------------------------------------------------------

def _task_batches(n: int, per_batch: int, big: dict[int, int]) -> Iterator[Any]:
    """``n`` rows ``v<i>`` in Arrow batches of ``per_batch``; row i in ``big`` gets a value
    of that many bytes."""
    for start in range(0, n, per_batch):
        rows = range(start, min(n, start + per_batch))
        yield pa.RecordBatch.from_pydict(
            {"value": [b"x" * big[i] if i in big else f"v{i}".encode() for i in rows]})


def test_record_refused_at_send_names_its_row(kafka_bootstrap: str,
                                              topic_factory: TopicFactory) -> None:
    """A record over max.request.size in row 7 (the second Arrow batch): the task's
    error names row 7 and the topic, and has the producer's typed error as __cause__."""
    from aioproducer.errors import RecordTooLargeError

    topic = topic_factory()
    settings = spark_source._parse(
        {"kafka.bootstrap.servers": kafka_bootstrap, "topic": topic,
         "kafka.max.request.size": "2000"},
        pyspark_sql.types.StructType([pyspark_sql.types.StructField(
            "value", pyspark_sql.types.BinaryType())]), streaming=False)
    with pytest.raises(spark_source.RecordPublishError) as info:
        spark_source._run_task(settings, _task_batches(12, 5, {7: 5000}), None, False)
    err = info.value
    assert isinstance(err.__cause__, RecordTooLargeError)
    assert (err.first_row, err.last_row, err.topic) == (7, 7, topic)
    assert f"row 7 of the task (topic {topic!r})" in str(err)
    assert "RecordTooLargeError" in str(err)
    # rows 0..6 were buffered before the refusal and were sent
    assert sorted(c.value for c in consume_all(kafka_bootstrap, topic, 7)) == sorted(
        f"v{i}".encode() for i in range(7))


def test_record_rejected_by_broker_names_its_rows(kafka_bootstrap: str,
                                                  topic_factory: TopicFactory) -> None:
    """A record under max.request.size but over the topic's max.message.bytes fails after
    it was sent (the broker refuses it, the batch is split, the piece still fails): the
    error names the rows of the send that held it, and its partition."""
    from aioproducer.errors import KafkaError

    topic = topic_factory(config={"max.message.bytes": "2000"})
    settings = spark_source._parse(
        {"kafka.bootstrap.servers": kafka_bootstrap, "topic": topic,
         "kafka.linger.ms": "50"},
        pyspark_sql.types.StructType([pyspark_sql.types.StructField(
            "value", pyspark_sql.types.BinaryType())]), streaming=False)
    with pytest.raises(spark_source.RecordPublishError) as info:
        spark_source._run_task(settings, _task_batches(20, 10, {13: 5000}), None, False)
    err = info.value
    assert isinstance(err.__cause__, KafkaError)
    assert err.first_row <= 13 <= err.last_row
    assert (err.first_row, err.last_row) == (10, 19)
    assert err.topic == topic and err.kafka_partition == 0
    assert f"rows 10..19 of the task (topic {topic!r}, partition 0)" in str(err)


@pytest.mark.slow  # a Spark session
def test_failed_record_position_reaches_the_driver(spark: Any, kafka_bootstrap: str,
                                                   topic_factory: TopicFactory) -> None:
    """Spark partition 1 holds ids 10..19; id 13 (row 3 of that task) is over
    max.request.size: the job fails with a message naming partition 1 and row 3."""
    topic = topic_factory()
    df = spark.range(0, 20, numPartitions=2).selectExpr(
        "CASE WHEN id = 13 THEN repeat('x', 5000) ELSE cast(id AS string) END AS value")
    with pytest.raises(Exception, match="RecordPublishError") as info:
        (df.write.format("aioproducer").option("kafka.bootstrap.servers", kafka_bootstrap)
         .option("topic", topic).option("kafka.max.request.size", "2000")
         .mode("append").save())
    text = str(info.value)
    assert "Spark task for partition 1" in text
    assert f"row 3 of the task (topic {topic!r})" in text
    assert "RecordTooLargeError" in text


def _wait_no_open_transaction(bootstrap: str, topic: str, timeout: float = 60.0) -> float:
    """Until every partition's last stable offset has caught up with its high watermark
    (no transaction open: the coordinator aborted the timed-out ones); seconds waited."""
    from confluent_kafka import Consumer, TopicPartition

    started = time.monotonic()
    cs = [Consumer({"bootstrap.servers": bootstrap, "group.id": f"lso-{topic}-{iso}",
                    "isolation.level": iso})
          for iso in ("read_committed", "read_uncommitted")]
    try:
        parts = cs[0].list_topics(topic, timeout=30).topics[topic].partitions
        while True:
            ends = [[c.get_watermark_offsets(TopicPartition(topic, p), timeout=10,
                                             cached=False)[1] for p in parts] for c in cs]
            if ends[0] == ends[1]:
                return time.monotonic() - started
            assert time.monotonic() - started < timeout, ends
            time.sleep(0.2)
    finally:
        for c in cs:
            c.close()


@pytest.mark.slow  # a Spark streaming query, twice
def test_stream_replay_rewrites_transactions_the_coordinator_aborted(
        spark: Any, kafka_bootstrap: str, topic_factory: TopicFactory,
        tmp_path: Path) -> None:
    """The driver dies during batch 2's commit, after recording its two transactions and
    committing one, and stays down past the transaction timeout (6 s): the coordinator
    aborts the other. On restart the replayed task of the committed one finds it
    committed (a repeated commit) and writes nothing; the other's task finds its
    transaction aborted and writes its rows again in a new one, which the driver
    commits: every row once, none lost (it used to raise TransactionLostError, the rows
    lost)."""
    committed_before = 1
    topic = topic_factory(partitions=2)
    checkpoint = tmp_path / "ckpt"
    with pytest.raises(AssertionError, match="injected crash in the commit of batch 2"):
        _run_stream(spark, kafka_bootstrap, topic, checkpoint, 10,
                    {"aioproducer.test.crashInCommit": f"2:{committed_before}",
                     "kafka.transaction.timeout.ms": "6000"})
    log_dir = checkpoint / "aioproducer"
    intent = json.loads((log_dir / "2.intent").read_text())
    assert len(intent["transactions"]) == 2 and not (log_dir / "2.done").exists()
    waited = _wait_no_open_transaction(kafka_bootstrap, topic)
    print(f"the coordinator aborted the open transactions within {waited:.1f} s")
    before = _committed_values(kafka_bootstrap, topic)
    _run_stream(spark, kafka_bootstrap, topic, checkpoint, 2,
                {"kafka.transaction.timeout.ms": "20000"})
    values = _committed_values(kafka_bootstrap, topic)
    assert len(values) > len(before)
    assert values == list(range(len(values))), Counter(values).most_common(3)
    replayed = json.loads((log_dir / "2.intent").read_text())
    assert len(replayed["rewritten"]) == 2 - committed_before
    done = json.loads((log_dir / "2.done").read_text())
    assert done["records"] > 0  # the rewritten partitions' rows


@pytest.mark.slow  # a Spark session
def test_batch_write_commit_finished_by_the_next_write(
        spark: Any, kafka_bootstrap: str, topic_factory: TopicFactory,
        tmp_path: Path) -> None:
    """An exactly-once batch write with a commit log whose driver dies during commit(),
    after recording its decision and committing one of its three transactions: the
    other two stay open (read_committed sees a third of the rows). The next write with
    that commit log first commits them, then writes its own rows: every row of both
    writes once."""
    topic = topic_factory(partitions=3)
    log_dir = tmp_path / "batch-log"
    # Each task writes its own Kafka partition: a partition holding records of an open
    # transaction before the committed one's would hide those (the last stable offset
    # stops at the first open transaction), and with the partitioner's choice the
    # read below depended on which task's records came first (it read 0 rows
    # once, in a loaded CI run).
    first = spark.range(0, 3000, numPartitions=3).selectExpr(
        "cast(id AS string) AS value", "spark_partition_id() AS partition")
    with pytest.raises(Exception, match="injected crash in the commit of a batch write"):
        _exactly_once_batch(first, kafka_bootstrap, topic,
                            **{"aioproducer.commitLog": str(log_dir),
                               "aioproducer.test.crashInCommit": "-1:1"})
    assert (log_dir / "batch.intent").exists()
    partial = _committed_values(kafka_bootstrap, topic)
    assert len(partial) == 1000  # one transaction of three
    second = spark.range(3000, 4000, numPartitions=2).selectExpr(
        "cast(id AS string) AS value")
    _exactly_once_batch(second, kafka_bootstrap, topic,
                        **{"aioproducer.commitLog": str(log_dir)})
    assert _committed_values(kafka_bootstrap, topic) == list(range(4000))
    assert not (log_dir / "batch.intent").exists()
    assert not list((log_dir / "batch-tasks").iterdir())


def test_batch_recovery_rolls_back_and_reports_lost_transactions(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path) -> None:
    """What the next write's recovery does with what a dead driver left, without Spark:
    (1) no decision recorded: the tasks' open transactions are aborted at once (the last
    stable offset catches up), not left to the timeout; (2) a decision recorded but its
    transactions aborted by the coordinator (the driver down past the timeout): it
    raises TransactionLostError before the write goes on, and keeps the record aside."""
    import asyncio

    topic = topic_factory(partitions=2)
    log_dir = tmp_path / "log"
    schema = pyspark_sql.types.StructType([pyspark_sql.types.StructField(
        "value", pyspark_sql.types.BinaryType())])
    settings = spark_source._parse(
        {"kafka.bootstrap.servers": kafka_bootstrap, "topic": topic, "exactlyOnce": "true",
         "aioproducer.commitLog": str(log_dir), "kafka.transaction.timeout.ms": "5000"},
        schema, streaming=False)
    assert settings.txn_prefix is not None and settings.commit_log == str(log_dir)

    async def prepare(partition: int) -> tuple[str, int, int]:
        tid = f"{settings.txn_prefix}-{partition}"
        spark_source._write_atomic(str(log_dir / "batch-tasks" / f"{tid}.json"), "{}")
        async with Producer({**settings.options, "transactional_id": tid}) as p:
            await p.init_transactions()
            p.begin_transaction()
            await p.send(topic, b"x", partition=partition)
            handle = await p.prepare_transaction()
        assert handle is not None
        return (tid, *handle)

    async def prepare_both() -> list[tuple[str, int, int]]:
        return list(await asyncio.gather(prepare(0), prepare(1)))

    asyncio.run(prepare_both())
    assert consume_all(kafka_bootstrap, topic, 0, timeout=3, isolation="read_committed") == []
    started = time.monotonic()
    spark_source._recover_batch(settings)
    assert _wait_no_open_transaction(kafka_bootstrap, topic) < 3.0  # not the 5 s timeout
    assert time.monotonic() - started < 5.0
    assert not list((log_dir / "batch-tasks").iterdir())

    txns = asyncio.run(prepare_both())
    spark_source._write_atomic(str(log_dir / "batch.intent"), json.dumps(
        {"transactions": txns}))
    _wait_no_open_transaction(kafka_bootstrap, topic)  # the coordinator's timeout
    with pytest.raises(spark_source.TransactionLostError, match="2 of its 2 transactions"):
        spark_source._recover_batch(settings)
    assert not (log_dir / "batch.intent").exists()
    assert len(list(log_dir.glob("batch.lost-*.json"))) == 1
    assert consume_all(kafka_bootstrap, topic, 0, timeout=3, isolation="read_committed") == []
