"""format("aioproducer") on a real Spark standalone cluster: a master and two workers
(``spark_cluster``, each its own JVM from pyspark's jars) and the three-node Kafka
cluster (``kafka_cluster3``), with executors, a worker and the driver SIGKILLed
mid-write.

The scenarios are ``bench.spark_cluster_bench``'s (the bench runs them longer and
bigger): each Spark driver is a child process on the cluster, the executor JVMs and
their Python workers are killed all at once (SIGSTOP, then SIGKILL) once the chosen
task has handed a chosen number of rows to Kafka, and what Kafka holds is read back
with confluent-kafka and compared row by row. The seed picks the task, the row count
and the micro-batches; it is printed, and ``AIOPRODUCER_SPARK_SEED`` replays one. Each
scenario stops itself at its deadline.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark.sql", reason="pip install -e '.[spark]'")
pytest.importorskip("pyarrow", reason="pip install -e '.[spark]'")

from bench.spark_cluster_bench import executor_kill_batch, kill_stream

TXN_TIMEOUT_S = 600
"""kafka.transaction.timeout.ms of the exactly-once writes, in seconds: a killed
attempt's transaction left to the timeout would hold read_committed consumers back
this long."""


def _seed(name: str) -> int:
    seed = int(os.environ.get("AIOPRODUCER_SPARK_SEED")
               or random.SystemRandom().randrange(100_000))
    print(f"{name}: seed={seed} (AIOPRODUCER_SPARK_SEED={seed} replays it)")
    return seed


def test_batch_writes_with_an_executor_killed(kafka_cluster3: Any, spark_cluster: Any,
                                              tmp_path: Path) -> None:
    """Two batch writes of 40,000 rows in one driver, exactly once then at-least-once;
    in each, the executor running one of the first two tasks is killed after 20-60 % of
    its rows. Exactly once: every row once for read_committed, the killed attempt's
    rows in the log as aborted, and the partition's last stable offset moving on
    within seconds of the kill (the retry's init_transactions() aborts the killed
    attempt's transaction), not after the transaction timeout. At-least-once: no row
    lost, the killed attempt's rows duplicated."""
    seed = _seed("executor-kill-batch")
    eo, alo = executor_kill_batch(
        spark_cluster, kafka_cluster3.bootstrap, seed, tmp_path, modes=("eo", "alo"),
        rows=40_000, partitions=4, pace_ms=25, arrow_batch=500,
        txn_timeout_ms=TXN_TIMEOUT_S * 1000, deadline_s=300)
    for r in (eo, alo):
        print(r.summary(), *r.notes, sep="\n  ")
    kill = eo.kills[0]
    assert kill.high_watermark > 0, f"seed={seed}: no row had reached Kafka at the kill"
    assert (eo.committed.lost, eo.committed.duplicated) == (0, 0), f"seed={seed}"
    assert eo.committed.rows == 40_000
    # The killed attempt's rows are in the log, aborted: read_uncommitted sees them.
    assert eo.uncommitted is not None
    assert eo.uncommitted.duplicated >= kill.high_watermark, f"seed={seed}"
    assert kill.kill_to_lso_s is not None and kill.kill_to_lso_s < 60, f"seed={seed}"
    loose = alo.kills[0]
    assert alo.committed.lost == 0, f"seed={seed}"
    assert alo.committed.duplicated >= loose.high_watermark > 0, f"seed={seed}"


def test_stream_exactly_once_through_executor_worker_and_driver_kills(
        kafka_cluster3: Any, spark_cluster: Any, tmp_path: Path) -> None:
    """One streaming query (1,000 rows per micro-batch, two partitions): micro-batch 2's
    task of one partition fails inside the writer after 150 acknowledged rows; then an
    executor is killed mid-write, then a whole worker for good (the query goes on on
    the other one), then the driver (SIGKILL) and it is restarted from its checkpoint.
    A read_committed consumer reads every generated value exactly once; the failed and
    killed attempts' rows are in the log, aborted."""
    seed = _seed("stream-kills")
    r = kill_stream(spark_cluster, kafka_cluster3.bootstrap, seed, tmp_path,
                    kills=("executor", "worker", "driver"), rate=1_000, partitions=2,
                    batches_between=(1, 2), batches_after=2, fail_at_row=150,
                    txn_timeout_ms=TXN_TIMEOUT_S * 1000, deadline_s=420)
    print(r.summary(), *r.notes, sep="\n  ")
    assert [k.what for k in r.kills] == ["executor", "worker", "driver"]
    assert (r.committed.lost, r.committed.duplicated) == (0, 0), f"seed={seed}"
    assert r.committed.rows >= 5 * 1_000, f"seed={seed}"
    executor, worker, _ = r.kills
    for kill in (executor, worker):
        assert kill.kill_to_lso_s is not None, f"seed={seed}: {kill}"
        assert kill.kill_to_lso_s < TXN_TIMEOUT_S / 5, f"seed={seed}: {kill}"
    # The attempt that failed inside the writer had its rows acknowledged: they are in
    # the log, aborted (a failure before any row reached the writer would prove nothing).
    assert r.failed_attempt_rows >= 150, f"seed={seed}"
    assert r.uncommitted is not None
    assert r.uncommitted.duplicated >= r.failed_attempt_rows, f"seed={seed}"
