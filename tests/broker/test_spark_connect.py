"""format("aioproducer") from a Spark Connect client: a local Spark Connect server
(``aioproducer.devbroker.spark_cluster.SparkConnectServer``: pyspark's own
``spark-connect`` jar run by ``spark-submit``, ``local[2]``), and a client process with
no JVM of its own (``pyspark[connect]``, ``SparkSession.builder.remote``), as on
Databricks serverless and every Spark Connect deployment. The client runs in a child
process (``bench.spark_driver``): the suite's classic local session
lives in this one. What Kafka holds is read back with confluent-kafka.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark.sql", reason="pip install -e '.[spark]'")
pytest.importorskip("grpc", reason="pip install 'pyspark[connect]'")

from aioproducer.devbroker.spark_cluster import (
    SparkClusterError,
    SparkConnectServer,
    _descendants,
)
from bench.spark_driver import Driver, count, read_values


@pytest.fixture(scope="module")
def spark_connect(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkConnectServer]:
    server = SparkConnectServer(tmp_path_factory.mktemp("spark-connect"), "local[2]")
    try:
        server.start(timeout=180)
    except SparkClusterError as exc:
        pytest.fail(f"could not start the Spark Connect server: {exc}", pytrace=False)
    try:
        yield server
    finally:
        server.stop()


def _jvms_below(pid: int) -> list[int]:
    out = []
    for child in _descendants(pid):
        try:
            exe = Path(f"/proc/{child}/exe").resolve().name
        except OSError:
            continue
        if exe == "java":
            out.append(child)
    return out


@pytest.mark.slow  # a Spark Connect server and two client processes
def test_batch_and_streaming_writes_from_a_spark_connect_client(
        spark_connect: SparkConnectServer, kafka_bootstrap: str, topic_factory: Any,
        tmp_path: Path) -> None:
    """An exactly-once batch write of 5,000 rows and a streaming query of three
    micro-batches (500 rows each), both through ``format("aioproducer")`` registered
    from the client: every row once for a read_committed consumer. ``register()``
    returns None there (no SparkContext, no accumulators), and the client has no JVM."""
    deadline = time.monotonic() + 240
    batch_topic, stream_topic = topic_factory(partitions=2), topic_factory(partitions=2)
    batch = {"job": "batch", "remote": spark_connect.remote, "format": "aioproducer",
             "bootstrap": kafka_bootstrap, "rows": 5_000, "partitions": 2,
             "writes": [{"topic": batch_topic, "options": {"exactlyOnce": "true"}}]}
    driver = Driver(batch, tmp_path / "batch-client.log")
    try:
        started = driver.wait_event("started", deadline)
        assert started["connect"] and not started["counters"]
        assert _jvms_below(driver.proc.pid) == []
        driver.wait_event("written", deadline)
        assert driver.wait(deadline) == 0, driver.error()
    finally:
        driver.close()
    got = count([v for _, v in read_values(kafka_bootstrap, batch_topic)], range(5_000))
    assert (got.rows, got.lost, got.duplicated) == (5_000, 0, 0), got

    stream = {"job": "stream", "remote": spark_connect.remote, "format": "aioproducer",
              "bootstrap": kafka_bootstrap, "topic": stream_topic, "rate": 500,
              "partitions": 2, "checkpoint": str(tmp_path / "ckpt"), "batches": 3,
              "deadline_s": 180}
    driver = Driver(stream, tmp_path / "stream-client.log")
    try:
        driver.wait_event("stopped", deadline)
        assert driver.wait(deadline) == 0, driver.error()
    finally:
        driver.close()
    got = count([v for _, v in read_values(kafka_bootstrap, stream_topic)], None)
    assert got.rows >= 3 * 500 and (got.lost, got.duplicated) == (0, 0), got
    # The commit log is the server's (the driver's) file, under the checkpoint.
    assert sorted(p.name for p in (tmp_path / "ckpt" / "aioproducer").glob("*.done"))
