"""format("aioproducer") streaming, exactly once through driver crashes: the driver is
SIGKILLed twice at seeded random points and restarted from its checkpoint, and one task
attempt fails once inside the writer after its first rows were acknowledged; a
read_committed consumer must see every generated row once, and a read_uncommitted one
the failed attempt's rows too (aborted), so the failure is known to have come after rows
reached Kafka. (A Python UDF raising mid-partition would not do: Spark 4.2 hands the
writer a task's rows only after an upstream Python UDF has processed the whole
partition, so nothing of that attempt would reach Kafka.)

The scenario is ``bench.spark_source_bench.run_kill_scenario`` (the bench runs it on
Spark's own sink too, to count that sink's duplicates). Each driver is a real Spark 4
process (``local[2, 2]``) in a process group of its own, killed with SIGKILL (JVM and
Python workers at once); the rows are read back here with confluent-kafka. The seed is
printed (``AIOPRODUCER_KILL_SEED`` replays one); the whole run stops by itself within
``DEADLINE_S``.
"""

from __future__ import annotations

import os
import random
from typing import Any

import pytest
from support.kafka_util import consume_all

pytest.importorskip("pyspark.sql", reason="pip install -e '.[spark]'")
pytest.importorskip("pyarrow", reason="pip install -e '.[spark]'")

from bench.spark_source_bench import count_values, run_kill_scenario

DEADLINE_S = 180.0


@pytest.mark.slow  # three Spark drivers, one after another
def test_driver_sigkill_twice_and_a_task_failure_exactly_once(
        kafka_bootstrap: str, topic_factory: Any) -> None:
    seed = int(os.environ.get("AIOPRODUCER_KILL_SEED") or random.SystemRandom().randrange(
        100_000))
    print(f"kill scenario seed={seed} (AIOPRODUCER_KILL_SEED={seed} replays it)")
    topic = topic_factory(partitions=2)
    run = run_kill_scenario("aioproducer", kafka_bootstrap, topic, seed, [],
                            deadline_s=DEADLINE_S)
    print(f"seed={seed}: kills {run.kills}, {run.seconds:.0f} s")
    assert len(run.kills) == 2, f"seed={seed}"
    assert run.failure_injected, f"seed={seed}: no task failure was injected"
    got = consume_all(kafka_bootstrap, topic, 1, timeout=30, isolation="read_committed")
    rows, distinct, dups, missing = count_values([c.value for c in got])
    print(f"seed={seed}: {rows} rows read_committed, {distinct} distinct values, "
          f"{dups} duplicates, {missing} missing")
    assert rows > 1000, f"seed={seed}"
    assert (dups, missing) == (0, 0), f"seed={seed}"
    # What the failed attempt left: its acknowledged rows are in the log, aborted.
    assert run.failed_rows >= 150, f"seed={seed}"
    loose = consume_all(kafka_bootstrap, topic, 1, timeout=30)
    _, _, loose_dups, _ = count_values([c.value for c in loose])
    print(f"seed={seed}: read_uncommitted {len(loose)} rows, {loose_dups} duplicates; the "
          f"failed attempt had {run.failed_rows} rows acknowledged")
    assert loose_dups >= run.failed_rows, f"seed={seed}"
