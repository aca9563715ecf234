"""``format("aioproducer")``: a Spark 4 Python Data Source that writes to Kafka.

It takes the options and the input schema of Spark's own Kafka sink, so a job written
for ``format("kafka")`` runs by changing that one word::

    import aioproducer.spark_source
    aioproducer.spark_source.register(spark)      # once per SparkSession

    (df.write.format("aioproducer")
       .option("kafka.bootstrap.servers", "kafka:9092").option("topic", "events")
       .mode("append").save())

    (df.writeStream.format("aioproducer")
       .option("kafka.bootstrap.servers", "kafka:9092").option("topic", "events")
       .option("checkpointLocation", "/data/ckpt/events").start())

Options: ``kafka.bootstrap.servers`` (required), ``topic`` (overrides a ``topic``
column), and any other ``kafka.<name>``: a producer option under its Java name
(``kafka.linger.ms``, ``kafka.compression.type``, ``kafka.transaction.timeout.ms``...).
The columns are those of :mod:`aioproducer.spark` (``value``, ``key``, ``topic``,
``partition``, ``headers``); a wrong schema raises :class:`~aioproducer.spark.SchemaError`
while Spark plans the write, before any task runs.

The batch writer is :func:`aioproducer.spark.publish` as a format: one producer per
task, Arrow batches to ``send_many`` (headers included); at-least-once (a retried task
writes its rows again), unless option ``exactlyOnce`` is ``true``: then each task
writes in a transaction (transactional id ``<prefix>-<partition>``, a fresh prefix per
write unless ``transactional.id.prefix`` is given) that it hands over open, the
driver's ``commit()`` commits them all and ``abort()`` (a failed job) aborts them.

The streaming writer is **exactly once** for ``read_committed`` consumers (option
``exactlyOnce``, true by default; ``false`` writes at-least-once): each task of a
micro-batch writes its rows in a Kafka transaction (transactional id
``<prefix>-<partition>``), sends them, and hands the transaction over open
(:meth:`Producer.prepare_transaction`); its commit message carries (transactional id,
producer id, epoch). The driver's ``commit(messages, batch_id)`` first records them in
the commit log (``<checkpointLocation>/aioproducer/<batch_id>.intent``), then resumes
and commits each transaction (:meth:`Producer.resume_transaction`, no InitProducerId),
then marks the batch done (``<batch_id>.done``). A task of a batch that already has an
intent (a restarted query replaying it) commits its partition's recorded transaction
(a commit repeated is a retry to the coordinator) and writes nothing; if the
coordinator had aborted it (the driver was down longer than the transaction timeout),
the task writes its rows again in a new transaction, which replaces the lost one in the
intent: each row is committed once whenever the driver dies, for however long. A
retried task attempt re-initialises the same transactional id, which aborts what the
failed (or killed) attempt wrote; a failed write's ``abort()`` initialises the ids of
the tasks that left no commit message. Exactly-once batch writes with option
``aioproducer.commitLog`` record their commit decision too, and the next write with
that log finishes (or rolls back) what a driver that died left.

Spark's Python Data Source API (4.2) has no way to report a writer's own metrics: the
counts (rows, bytes, failures) travel in the commit messages, and the driver logs them
(logger ``aioproducer.spark_source``) and writes them to ``<batch_id>.done``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import re
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from .errors import (
    BrokerResponseError,
    ConfigError,
    InvalidProducerEpochError,
    KafkaError,
    ProducerFencedError,
)
from .producer import Producer
from .record import RecordFuture, SendManyResult
from .spark import (
    PublishError,
    SchemaError,
    _check_schema,
    _Chunk,
    _prepare_chunk,
    _producer_options,
    _retrieve,
    _Tally,
    _task_failure,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.accumulators import Accumulator
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

__all__ = ["AioproducerDataSource", "CommitLogError", "PublishError", "RecordPublishError",
           "SchemaError", "TaskReport", "TransactionLostError", "TxnMessage", "WriteCounters",
           "register"]

log = logging.getLogger("aioproducer.spark_source")


def _report(event: str, counts: Mapping[str, Any]) -> None:
    """An INFO record ``format("aioproducer") <event>: <JSON counts>`` on this module's
    logger. These run in Spark's Python workers (tasks, and the driver's commit), which
    are Spark's processes, not the application's: the logger is set to INFO there
    unless something set its level, so that Spark's Python worker logging
    (``spark.sql.pyspark.worker.logging.enabled``, read back with
    ``spark.tvf.python_worker_logs()``) keeps the records. Without it they go nowhere."""
    if log.level == logging.NOTSET:
        log.setLevel(logging.INFO)
    log.info("format(\"aioproducer\") %s: %s", event, json.dumps(dict(counts)))

_SINK_COLUMNS = ("value", "key", "topic", "partition", "headers")
_REFUSED = ("key.serializer", "value.serializer", "transactional.id")
_BATCH_ID = "streaming.sql.batchId"
_FAIL_ONCE = "aioproducer.test.failafterwrite"
"""Test hook: ``"<batch id>:<partition>"``; the first attempt of that task raises after
its transaction is prepared (the batch writer ignores the batch id)."""
_CRASH_AFTER_COMMIT = "aioproducer.test.crashaftercommit"
"""Test hook: ``"<batch id>"``; the driver's commit() of that batch raises after its
transactions are committed, before it is marked done (as if the driver died there)."""
_CRASH_IN_COMMIT = "aioproducer.test.crashincommit"
"""Test hook: ``"<batch id>:<n>"``; the driver's commit() of that batch raises after
recording its transactions and committing only the first ``n`` of them (as if the
driver died there), the first time it commits that batch."""
_FAIL_AT_ROW = "aioproducer.test.failatrow"
"""Test hook: ``"<batch id>:<partition>:<row>"``; the first attempt of that task raises
once at least ``row`` of its rows were sent and acknowledged by Kafka, its transaction
still open (the batch writer ignores the batch id). Batch ``*``: the first task attempt
of that partition to get there, in any micro-batch, once (needs ``aioproducer.test.trace``,
where the mark ``failed-once`` is kept)."""
_TRACE = "aioproducer.test.trace"
"""Test hook: a directory; every task attempt keeps
``<batch id>_<partition>_<attempt>.json`` there up to date (its Python worker's pid, the
rows handed to the producer so far, its state), so that a test can kill its executor
at a chosen moment."""
_PACE = "aioproducer.test.pacems"
"""Test hook: milliseconds a task sleeps after each Arrow batch it produced (so that a
short test's tasks are still writing when it kills their executor)."""


class TransactionLostError(PublishError):
    """A micro-batch's transaction could not be committed: the coordinator aborted it
    (it stayed open longer than ``kafka.transaction.timeout.ms``) or a newer producer
    took its transactional id. Its rows are not in Kafka."""


class RecordPublishError(PublishError):
    """A task's record failed: the message names the Spark partition and attempt, the
    row (or the rows of the one producer call that held it) within the task, the
    topic, the Kafka partition when known, and the producer's typed error, which is
    also ``__cause__`` (in the Python worker; Spark passes the message to the driver).
    """

    def __init__(self, message: str, *, spark_partition: int, first_row: int,
                 last_row: int, topic: str, kafka_partition: int | None) -> None:
        super().__init__(message)
        self.spark_partition = spark_partition
        """The task's Spark partition id (-1 outside a Spark task)."""
        self.first_row = first_row
        """Index, among the rows the task was given (from 0), of the failed record, or
        of the first row of the ``send_many()`` call whose batch failed after it was
        sent (a batch holds many rows; which of the call's rows it held is not known)."""
        self.last_row = last_row
        """``first_row`` for a single record, else the call's last row."""
        self.topic = topic
        self.kafka_partition = kafka_partition
        """The partition of the failed batch (None for a record refused before it was
        given one)."""


class CommitLogError(PublishError):
    """The exactly-once commit log (under ``checkpointLocation``) cannot be used."""


@dataclasses.dataclass(frozen=True)
class WriteCounters:
    """Driver-side totals of the ``format("aioproducer")`` writes of one SparkSession
    (what :func:`register` returns): Spark accumulators that every task adds its counts
    to. Spark keeps the updates of successful task attempts only, so a retried task
    counts once. Read them on the driver (``counters.records.value``) after a write;
    they add up over the session's writes (set ``.value = 0`` to start again)."""

    records: Accumulator[int]
    """Rows written (handed to the producer and acknowledged) by successful tasks.
    Exactly-once writes count them before the driver commits: a transaction then lost
    (:class:`TransactionLostError`) is counted all the same."""
    bytes: Accumulator[int]
    """Key, value and header bytes of those rows."""

    def add(self, records: int, nbytes: int) -> None:
        self.records.add(records)
        self.bytes.add(nbytes)


def register(spark: SparkSession) -> WriteCounters | None:
    """Make ``format("aioproducer")`` available in ``spark``; returns its
    :class:`WriteCounters` (None on Spark Connect, which has no accumulators)."""
    try:
        sc = spark.sparkContext
    except Exception:  # Spark Connect: no SparkContext
        spark.dataSource.register(AioproducerDataSource)
        return None
    counters = WriteCounters(sc.accumulator(0), sc.accumulator(0))
    spark.dataSource.register(_counted(counters))
    return counters


def _counted(counters: WriteCounters) -> type[AioproducerDataSource]:
    """The data source with ``counters`` (a class defined here is pickled by value, with
    its accumulators, to the Python workers that plan and run the write)."""

    class CountedDataSource(AioproducerDataSource):
        _counters = counters

    return CountedDataSource


@dataclasses.dataclass
class TaskReport(WriterCommitMessage):
    """What one task wrote (the commit message of the batch writer)."""

    records: int = 0
    bytes: int = 0
    failures: int = 0
    partition: int = -1


@dataclasses.dataclass
class TxnMessage(TaskReport):
    """The commit message of a streaming task: its open transaction, if any."""

    transactional_id: str | None = None
    producer_id: int = -1
    epoch: int = -1
    batch_id: int = -1
    skipped: bool = False
    """The batch was already recorded for commit: the task wrote nothing (it committed
    its partition's recorded transaction, or found it committed)."""
    rewritten: bool = False
    """A replay whose recorded transaction the coordinator had aborted (the driver was
    down longer than the transaction timeout): the task wrote its rows again."""


# -- options -----------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class _Hooks:
    """The test hooks of one write (options ``aioproducer.test.*``)."""

    fail_at_row: tuple[int, int, int] | None = None
    trace_dir: str | None = None
    pace_s: float = 0.0
    crash_in_commit: tuple[int, int] | None = None


def _hooks(opts: Mapping[str, str]) -> _Hooks | None:
    fail = opts.get(_FAIL_AT_ROW)
    trace = opts.get(_TRACE)
    pace = float(opts.get(_PACE) or 0) / 1000
    crash = opts.get(_CRASH_IN_COMMIT)
    if not (fail or trace or pace or crash):
        return None
    at = None
    if fail:
        b, p, r = fail.split(":")
        at = (_ANY_BATCH if b == "*" else int(b), int(p), int(r))
    in_commit = None
    if crash:
        b, n = crash.split(":")
        in_commit = (int(b), int(n))
    return _Hooks(at, trace, pace, in_commit)


_ANY_BATCH = -2
"""``failAtRow`` batch ``*``: the first task of the partition to reach the row fails,
once per trace directory (it keeps the mark)."""


@dataclasses.dataclass(frozen=True)
class _Settings:
    topic: str | None
    options: dict[str, Any]
    txn_prefix: str | None = None
    """Set when the writer is exactly once: tasks write in transactions."""
    commit_log: str | None = None
    fail_once: tuple[int, int] | None = None
    crash_after_commit: int | None = None
    counters: WriteCounters | None = None
    hooks: _Hooks | None = None


_EXACTLY_ONCE = "exactlyOnce"
"""Option ``exactlyOnce``: ``true`` or ``false``; default false for the batch writer,
true for the streaming writer."""
_COMMIT_CONCURRENCY = 16
"""Transactions the driver commits (or aborts) at a time, one producer each."""


def _flag(opts: Mapping[str, str], name: str, default: bool) -> bool:
    """A true/false option (``opts`` has lower-case names; ``name`` as documented)."""
    raw = opts.get(name.lower())
    if raw is None:
        return default
    value = str(raw).strip().lower()
    if value not in ("true", "false"):
        raise ConfigError(f"option {name!r} must be 'true' or 'false', got {raw!r}")
    return value == "true"


def _parse(options: Mapping[str, str], schema: StructType, streaming: bool) -> _Settings:
    """The writer's settings, or SchemaError / ConfigError (on the driver, at planning)."""
    opts = {str(k).lower(): v for k, v in options.items()}
    topic = opts.get("topic") or None
    _check_schema(schema, topic)
    bootstrap = opts.get("kafka.bootstrap.servers")
    if not bootstrap:
        raise ConfigError("option 'kafka.bootstrap.servers' is required")
    config: dict[str, Any] = {}
    for key, value in opts.items():
        if not key.startswith("kafka.") or key == "kafka.bootstrap.servers":
            continue
        name = key[len("kafka."):]
        if name in _REFUSED:
            raise ConfigError(f"option {key!r} is not supported: records are the "
                              "key/value columns as bytes"
                              if "serializer" in name else
                              f"option {key!r} is not supported: exactly-once writers "
                              "set a transactional id per task (option "
                              "'transactional.id.prefix' names them)")
        config[name] = value
    producer_options = _producer_options(bootstrap, config)
    exactly_once = _flag(opts, _EXACTLY_ONCE, default=streaming)
    fail_once = None
    if opts.get(_FAIL_ONCE):
        b, p = opts[_FAIL_ONCE].split(":")
        fail_once = (int(b), int(p))
    if not streaming:
        # One write, one set of transactional ids: a fresh prefix unless one is given,
        # or one of the commit log's, whose next write recovers what this one left.
        prefix = batch_log = None
        if exactly_once:
            given = opts.get("aioproducer.commitlog")
            batch_log = None if not given else _local_path(given)
            prefix = (opts.get("transactional.id.prefix")
                      or (f"aioproducer-spark-batch-{uuid.uuid4().hex[:16]}"
                          if batch_log is None else "aioproducer-spark-batch-"
                          + hashlib.sha256(batch_log.encode()).hexdigest()[:16]))
        return _Settings(topic, producer_options, prefix, batch_log, fail_once=fail_once,
                         hooks=_hooks(opts))
    checkpoint = opts.get("checkpointlocation")
    log_dir = opts.get("aioproducer.commitlog")
    if log_dir is None:
        if not checkpoint:
            raise ConfigError("the streaming writer needs option 'checkpointLocation' "
                              "(its exactly-once commit log lives there)")
        log_dir = os.path.join(_local_path(checkpoint), "aioproducer")
    log_dir = _local_path(log_dir)
    prefix = opts.get("transactional.id.prefix") or (
        "aioproducer-spark-" + hashlib.sha256(log_dir.encode()).hexdigest()[:16])
    crash = opts.get(_CRASH_AFTER_COMMIT)
    return _Settings(topic, producer_options, prefix if exactly_once else None, log_dir,
                     fail_once, None if crash is None else int(crash), hooks=_hooks(opts))


def _local_path(location: str) -> str:
    if location.startswith("file:"):
        location = location[len("file:"):]
        while location.startswith("//"):
            location = location[1:]
    elif "://" in location:
        raise CommitLogError(f"{location!r}: the commit log must be on a filesystem "
                             "path that the driver and executors share (file: or a "
                             "plain path); set option 'aioproducer.commitLog'")
    return os.path.abspath(location)


# -- writing a task's rows -----------------------------------------------------------------

def _normalize(batch: pa.RecordBatch, topic: str | None) -> pa.RecordBatch:
    """Only the sink's columns (no copy; string keys and values are read as their UTF-8
    bytes by ``_prepare_chunk``, as publish()'s select casts them)."""
    names = batch.schema.names
    keep = [name for name in _SINK_COLUMNS
            if name in names and not (name == "topic" and topic is not None)]
    return batch if keep == names else batch.select(keep)


def _partition_id() -> int:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return -1 if ctx is None else ctx.partitionId()


_BUFFERED = re.compile(r"send_many: records 0\.\.(\d+) were buffered")


@dataclasses.dataclass(frozen=True)
class _Rows:
    """The task rows ``first..last`` given to one producer call, and their topic."""

    first: int
    last: int
    topic: str
    partition: int | None


class _TaskTally(_Tally):
    """A task's counts, and where its first failed record is among the task's rows."""

    def __init__(self) -> None:
        super().__init__()
        self._rows: deque[_Rows] = deque()
        self.failed_rows: _Rows | None = None

    def add_rows(self, result: SendManyResult | RecordFuture, rows: _Rows) -> None:
        self._rows.append(rows)
        self.add(result)

    def _account(self, result: SendManyResult | RecordFuture) -> None:
        # _Tally accounts its results in the order they were added, once each.
        rows = self._rows.popleft()
        had_error = self.first_error is not None
        super()._account(result)
        if had_error or self.first_error is None:
            return
        failures = (result.batch.failures() if isinstance(result, RecordFuture)
                    else result.failures())
        partition = failures[0][1] if failures else rows.partition
        self.failed_rows = dataclasses.replace(rows, partition=partition)


def _position(rows: _Rows) -> str:
    where = (f"row {rows.first}" if rows.first == rows.last else
             f"rows {rows.first}..{rows.last}")
    part = "" if rows.partition is None else f", partition {rows.partition}"
    return f"{where} of the task (topic {rows.topic!r}{part})"


def _record_error(exc: BaseException, rows: _Rows, prefix: str = "") -> RecordPublishError:
    return RecordPublishError(
        _task_failure(exc, f"{prefix}{_position(rows)}: "), spark_partition=_partition_id(),
        first_row=rows.first, last_row=rows.last, topic=rows.topic,
        kafka_partition=rows.partition)


def _refused_at(exc: BaseException, first: int, last: int) -> int | None:
    """The row of a ``send_many()`` call over rows ``first..last`` that it refused:
    records ``0..i-1`` were buffered (its note says so), record ``i`` raised."""
    notes = getattr(exc, "__notes__", None) or []
    for note in notes:
        found = _BUFFERED.search(note)
        if found:
            return first + int(found.group(1)) + 1
    return first if not notes or first == last else None


async def _send_task_chunk(producer: Producer, chunk: _Chunk, tally: _TaskTally) -> None:
    """One chunk's runs to the producer, one ``send_many`` call each (headers
    included); a record refused on the spot raises RecordPublishError naming its row."""
    for run in chunk.runs:
        values, keys, headers = chunk.columns(run)
        base = tally.records  # the task row of the run's first row
        last = base + run.end - run.start - 1
        try:
            result = await producer.send_many(run.topic, values, keys,
                                              partition=run.partition, headers=headers)
        except KafkaError as exc:
            at = _refused_at(exc, base, last)
            raise _record_error(exc, _Rows(base if at is None else at,
                                           last if at is None else at,
                                           run.topic, run.partition)) from exc
        tally.records += run.end - run.start
        tally.add_rows(result, _Rows(base, last, run.topic, run.partition))
    tally.bytes += chunk.nbytes
    tally.settle()


async def _pump_task(producer: Producer, fetch: Callable[[], _Chunk | None],
                     executor: ThreadPoolExecutor, tally: _TaskTally,
                     probe: _Probe | None = None) -> None:
    """Produce what ``fetch`` (run in ``executor``) returns until it returns None; the
    next chunk is read while the current one is produced."""
    loop = asyncio.get_running_loop()
    pending: asyncio.Future[_Chunk | None] = loop.run_in_executor(executor, fetch)
    try:
        while True:
            chunk = await pending
            if chunk is None:
                return
            pending = loop.run_in_executor(executor, fetch)
            await _send_task_chunk(producer, chunk, tally)
            if probe is not None:
                await probe.after_chunk(producer, tally)
    finally:
        pending.add_done_callback(_retrieve)


class _Probe:
    """A task attempt's test hooks (:class:`_Hooks`): its trace file, its pace, its
    injected failure."""

    def __init__(self, hooks: _Hooks, batch_id: int, partition: int, attempt: int) -> None:
        self.hooks = hooks
        self.fail_at: int | None = None
        if (hooks.fail_at_row is not None and attempt == 0
                and hooks.fail_at_row[1] == partition
                and (batch_id < 0 or hooks.fail_at_row[0] in (batch_id, _ANY_BATCH))):
            self.fail_at = hooks.fail_at_row[2]
        self.once = (None if hooks.fail_at_row is None or hooks.trace_dir is None
                     or hooks.fail_at_row[0] != _ANY_BATCH else
                     os.path.join(hooks.trace_dir, "failed-once"))
        self.path = (None if hooks.trace_dir is None else
                     os.path.join(hooks.trace_dir, f"{batch_id}_{partition}_{attempt}.json"))

    def trace(self, state: str, rows: int, **more: Any) -> None:
        if self.path is None:
            return
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        tmp = f"{self.path}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"pid": os.getpid(), "rows": rows, "state": state,
                       "time": time.time(), **more}, f)
        os.replace(tmp, self.path)

    async def after_chunk(self, producer: Producer, tally: _TaskTally) -> None:
        self.trace("writing", tally.records)
        if (self.fail_at is not None and tally.records >= self.fail_at
                and self._first_failure()):
            await producer.flush()
            await tally.wait_all()
            self.trace("failing", tally.records)
            raise PublishError(_task_failure(RuntimeError(
                f"injected failure after {tally.records} rows were acknowledged, the "
                "transaction open (option aioproducer.test.failAtRow)")))
        if self.hooks.pace_s:
            await asyncio.sleep(self.hooks.pace_s)

    def _first_failure(self) -> bool:
        """Whether this attempt is to fail (``*``: only the first to get here)."""
        if self.once is None:
            return True
        self.fail_at = None
        try:
            os.close(os.open(self.once, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except FileExistsError:
            return False
        return True


def _run_task(settings: _Settings, batches: Iterator[pa.RecordBatch],
              transactional_id: str | None, fail: bool, probe: _Probe | None = None
              ) -> tuple[_Tally, tuple[int, int] | None]:
    """Produce every batch; with a transactional id, in a transaction handed over open."""
    topic = settings.topic
    executor = ThreadPoolExecutor(1, thread_name_prefix="aioproducer-spark-read")

    def fetch() -> _Chunk | None:
        batch = next(batches, None)
        return None if batch is None else _prepare_chunk(_normalize(batch, topic), topic)

    async def run() -> tuple[_Tally, tuple[int, int] | None]:
        tally = _TaskTally()
        options = dict(settings.options)
        handle = None
        if transactional_id is not None:
            options["transactional_id"] = transactional_id
        async with Producer(options) as producer:
            if transactional_id is not None:
                await producer.init_transactions()  # aborts a failed attempt's rows
                producer.begin_transaction()
            try:
                await _pump_task(producer, fetch, executor, tally, probe)
                await producer.flush()
                await tally.wait_all()
                if tally.failures:
                    error, rows = tally.first_error, tally.failed_rows
                    assert error is not None and rows is not None
                    raise _record_error(error, rows, f"{tally.failures} of {tally.records}"
                                                     " records failed; first: ") from error
                if transactional_id is not None:
                    handle = await producer.prepare_transaction()
                if probe is not None:
                    probe.trace("prepared" if handle else "written", tally.records,
                                handle=handle)
            except BaseException:
                if transactional_id is not None:
                    # Best effort, so that read_committed consumers are not held back
                    # until the transaction times out (a retry's init_transactions()
                    # would abort it too).
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(producer.abort_transaction(), 30)
                raise
        if fail:
            raise PublishError(_task_failure(RuntimeError(
                "injected failure after writing (option aioproducer.test.failAfterWrite)")))
        return tally, handle

    try:
        return asyncio.run(run())
    except PublishError:
        raise
    except KafkaError as exc:
        raise PublishError(_task_failure(exc)) from exc
    finally:
        executor.shutdown(wait=True)


def _task_attempt() -> tuple[int, int]:
    """(Spark partition, attempt number) of the running task ((-1, 0) outside one)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return (-1, 0) if ctx is None else (ctx.partitionId(), ctx.attemptNumber())


def _write_rows(s: _Settings, iterator: Iterator[pa.RecordBatch], batch_id: int
                ) -> TxnMessage:
    """A task's rows to Kafka; exactly once (``s.txn_prefix``): in a transaction with
    the transactional id ``<prefix>-<Spark partition>``, handed over open."""
    partition, attempt = _task_attempt()
    first = next(iterator, None)
    # An empty partition opens no producer, unless it is a retry in a transaction: its
    # init_transactions() then aborts what the failed attempt left open.
    if first is None and (s.txn_prefix is None or attempt == 0):
        return TxnMessage(partition=partition, batch_id=batch_id)
    fail = (s.fail_once is not None and attempt == 0 and s.fail_once[1] == partition
            and (batch_id < 0 or s.fail_once[0] == batch_id))

    def batches() -> Iterator[pa.RecordBatch]:
        if first is not None:
            yield first
            yield from iterator

    tid = None if s.txn_prefix is None else f"{s.txn_prefix}-{partition}"
    if tid is not None and batch_id < 0 and s.commit_log is not None:
        # A batch write with a commit log: the next write can end this transaction
        # (its init_transactions() aborts it) if this write's driver dies before its
        # commit decision.
        _write_atomic(os.path.join(s.commit_log, _BATCH_TASKS, f"{tid}.json"),
                      json.dumps({"transactional_id": tid}))
    probe = None if s.hooks is None else _Probe(s.hooks, batch_id, partition, attempt)
    try:
        tally, handle = _run_task(s, batches(), tid, fail, probe)
    except PublishError as exc:
        _report("task failed", {"partition": partition, "attempt": attempt,
                                "batch_id": batch_id, "transactional_id": tid,
                                "error": type(exc).__name__, "message": str(exc)})
        raise
    if s.counters is not None:
        s.counters.add(tally.records, tally.bytes)
    _report("task written", {"partition": partition, "attempt": attempt,
                             "batch_id": batch_id, "records": tally.records,
                             "bytes": tally.bytes, "failures": tally.failures,
                             "transactional_id": tid})
    message = TxnMessage(tally.records, tally.bytes, tally.failures, partition,
                         batch_id=batch_id)
    if handle is not None:
        message.transactional_id = tid
        message.producer_id, message.epoch = handle
    return message


def _transactions(messages: list[WriterCommitMessage | None]) -> list[tuple[str, int, int]]:
    return [(m.transactional_id, m.producer_id, m.epoch) for m in messages
            if isinstance(m, TxnMessage) and m.transactional_id is not None]


def _totals(messages: list[WriterCommitMessage | None]) -> dict[str, int]:
    reports = [m for m in messages if isinstance(m, TaskReport)]
    return {"records": sum(m.records for m in reports),
            "bytes": sum(m.bytes for m in reports),
            "failures": sum(m.failures for m in reports), "tasks": len(reports)}


class _BatchWriter(DataSourceArrowWriter):
    """At-least-once by default; with ``exactlyOnce=true`` every task writes in a
    transaction that the driver's commit() commits and abort() aborts. With a commit
    log (option ``aioproducer.commitLog``), commit() records its decision first, and
    the next write with that log finishes (or rolls back) what a driver that died left
    (:func:`_recover_batch`)."""

    def __init__(self, settings: _Settings) -> None:
        self.settings = settings

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TaskReport:
        return _write_rows(self.settings, iterator, -1)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        s = self.settings
        txns = _transactions(messages)
        if s.commit_log is not None and s.txn_prefix is not None:
            _write_atomic(_batch_intent(s.commit_log), json.dumps(
                {"transactional_id_prefix": s.txn_prefix, "transactions": txns,
                 "time": time.time()}))
            hooks = s.hooks
            if hooks is not None and hooks.crash_in_commit is not None and (
                    hooks.crash_in_commit[0] == -1):
                n = hooks.crash_in_commit[1]
                if n:
                    asyncio.run(_end(s.options, txns[:n], commit=True))
                raise PublishError(f"injected crash in the commit of a batch write after "
                                   f"{n} of {len(txns)} transactions (option "
                                   "aioproducer.test.crashInCommit)")
        if txns:
            try:
                asyncio.run(_end(s.options, txns, commit=True))
            except TransactionLostError:
                if s.commit_log is not None:
                    _set_aside(s.commit_log)
                raise
        if s.commit_log is not None:
            _clear_batch(s.commit_log)
        _report("write committed", {**_totals(messages), "transactions": len(txns)})

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        s = self.settings
        if s.commit_log is not None and os.path.exists(_batch_intent(s.commit_log)):
            return  # decided: the next write with this commit log finishes the commit
        _abort_all(s, messages)
        if s.commit_log is not None:
            asyncio.run(_roll_back(s.options, s.commit_log))


def _abort_all(s: _Settings, messages: list[WriterCommitMessage | None]) -> None:
    """A failed write's transactions: those of the tasks that succeeded (resumed and
    aborted), and those that tasks which failed or were killed (Spark cancels the
    tasks still running when the job fails) may have left open: their commit message
    is None, and initializing their transactional id (``<prefix>-<partition>``: the
    list has one entry per partition) aborts what it holds at once, rather than at
    the transaction timeout."""
    txns = _transactions(messages)
    if txns:
        try:
            asyncio.run(_end(s.options, txns, commit=False))
        except TransactionLostError as exc:  # aborted anyway, by the coordinator
            log.warning("format(\"aioproducer\"): abort: %s", exc)
    if s.txn_prefix is not None:
        ids = [f"{s.txn_prefix}-{i}" for i, m in enumerate(messages) if m is None]
        if ids:
            try:
                asyncio.run(_init_ids(s.options, ids))
            except KafkaError as exc:
                log.warning("format(\"aioproducer\"): abort: %s", exc)


_BATCH_TASKS = "batch-tasks"


def _batch_intent(log_dir: str) -> str:
    return os.path.join(log_dir, "batch.intent")


def _clear_batch(log_dir: str) -> None:
    """The write is over: forget its task records and its intent."""
    tasks = os.path.join(log_dir, _BATCH_TASKS)
    for name in (os.listdir(tasks) if os.path.isdir(tasks) else []):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(tasks, name))
    with contextlib.suppress(FileNotFoundError):
        os.unlink(_batch_intent(log_dir))


def _set_aside(log_dir: str) -> str:
    """Keep an intent whose transactions could not all be committed as
    ``batch.lost-<time>.json`` (for the record), and clear the write."""
    kept = os.path.join(log_dir, f"batch.lost-{time.time_ns()}.json")
    with contextlib.suppress(FileNotFoundError):
        os.replace(_batch_intent(log_dir), kept)
    _clear_batch(log_dir)
    return kept


async def _roll_back(options: Mapping[str, Any], log_dir: str) -> int:
    """Abort whatever the transactional ids recorded by the tasks of an undecided write
    hold (``init_transactions()`` on each: the coordinator aborts an open transaction
    of that id), then forget them; returns how many ids there were."""
    tasks = os.path.join(log_dir, _BATCH_TASKS)
    ids = sorted(name[:-len(".json")] for name in
                 (os.listdir(tasks) if os.path.isdir(tasks) else [])
                 if name.endswith(".json"))
    await _init_ids(options, ids)
    _clear_batch(log_dir)
    return len(ids)


async def _init_ids(options: Mapping[str, Any], ids: list[str]) -> None:
    """``init_transactions()`` on each transactional id (at most 16 at a time): the
    coordinator aborts the transaction it holds open, if any."""
    slots = asyncio.Semaphore(_COMMIT_CONCURRENCY)

    async def one(tid: str) -> None:
        async with slots, Producer({**options, "transactional_id": tid}) as producer:
            await producer.init_transactions()

    await asyncio.gather(*(one(t) for t in ids))


def _recover_batch(s: _Settings) -> None:
    """Before an exactly-once batch write with a commit log (on the driver, while Spark
    plans it): finish what the previous write with this log left. Its commit decision
    recorded (its driver died during commit()): commit the recorded transactions
    (a repeated commit is a retry to the coordinator); those the coordinator had
    aborted (that driver was down longer than the transaction timeout) raise
    TransactionLostError, and the record is kept aside. No decision recorded (its
    driver died before): abort the transactions its tasks left open."""
    log_dir = s.commit_log
    assert log_dir is not None
    intent = _batch_intent(log_dir)
    if os.path.exists(intent):
        try:
            with open(intent, encoding="utf-8") as f:
                data = json.load(f)
            txns = [(str(t), int(p), int(e)) for t, p, e in data["transactions"]]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CommitLogError(f"{intent}: unreadable commit log entry: {exc}") from exc
        results = asyncio.run(_settle_all(s.options, txns))
        lost = [t for t, ok in zip(txns, results, strict=True) if not ok]
        if lost:
            kept = _set_aside(log_dir)
            raise TransactionLostError(
                f"the previous exactly-once write with commit log {log_dir!r} died during "
                f"its commit and {len(lost)} of its {len(txns)} transactions were aborted "
                f"by the coordinator before this write could finish the commit (first: "
                f"{lost[0][0]!r}): those partitions' rows are not in Kafka; the others "
                f"are. The record is kept in {kept!r}; the next write goes on")
        _report("previous write finished", {"commit_log": log_dir,
                                            "transactions": len(txns)})
        _clear_batch(log_dir)
        return
    n = asyncio.run(_roll_back(s.options, log_dir))
    if n:
        _report("previous write rolled back", {"commit_log": log_dir,
                                               "transactional_ids": n})


async def _settle_all(options: Mapping[str, Any], txns: list[tuple[str, int, int]]
                      ) -> list[bool]:
    slots = asyncio.Semaphore(_COMMIT_CONCURRENCY)

    async def one(txn: tuple[str, int, int]) -> bool:
        async with slots:
            return await _settle(options, txn)

    return list(await asyncio.gather(*(one(t) for t in txns)))


# -- the commit log ------------------------------------------------------------------------

def _intent_path(log_dir: str, batch_id: int) -> str:
    return os.path.join(log_dir, f"{batch_id}.intent")


def _done_path(log_dir: str, batch_id: int) -> str:
    return os.path.join(log_dir, f"{batch_id}.done")


def _write_atomic(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(os.path.dirname(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_intent(log_dir: str, batch_id: int) -> list[tuple[str, int, int]] | None:
    try:
        with open(_intent_path(log_dir, batch_id), encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise CommitLogError(f"batch {batch_id}: unreadable commit log entry: {exc}") from exc
    return [(str(t), int(p), int(e)) for t, p, e in data["transactions"]]


async def _end(options: Mapping[str, Any], txns: list[tuple[str, int, int]],
               commit: bool) -> None:
    slots = asyncio.Semaphore(_COMMIT_CONCURRENCY)

    async def one(txn: tuple[str, int, int]) -> None:
        transactional_id, producer_id, epoch = txn
        async with slots, Producer({**options, "transactional_id": transactional_id}
                                   ) as producer:
            await producer.resume_transaction(producer_id, epoch)
            if commit:
                await producer.commit_transaction()
            else:
                await producer.abort_transaction()

    results = await asyncio.gather(*(one(t) for t in txns), return_exceptions=True)
    failed = [(t, r) for t, r in zip(txns, results, strict=True)
              if isinstance(r, BaseException)]
    if failed:
        (tid, pid, epoch), exc = failed[0]
        raise TransactionLostError(
            f"{len(failed)} of {len(txns)} transactions could not be "
            f"{'committed' if commit else 'aborted'}; first: {tid!r} (producer id {pid}, "
            f"epoch {epoch}): {type(exc).__name__}: {exc}. A transaction open longer than "
            "kafka.transaction.timeout.ms is aborted by its coordinator: its rows are "
            "lost") from exc


def _lost(exc: BaseException) -> bool:
    """Whether a commit of a resumed transaction failed because the coordinator will
    never commit it: it was aborted (on timeout, or when a newer producer initialized
    its transactional id: both bump the epoch) or is already complete as aborted."""
    if isinstance(exc, (ProducerFencedError, InvalidProducerEpochError)):
        return True
    return isinstance(exc, BrokerResponseError) and exc.code == ErrorCode.invalid_txn_state


async def _settle(options: Mapping[str, Any], txn: tuple[str, int, int]) -> bool:
    """Commit a recorded transaction (again): True when it is committed (now, or it
    already was: a repeated commit is a retry to the coordinator), False when the
    coordinator answers that it was aborted. Anything else (the coordinator out of
    reach, the transactional id unknown to it) raises: the task fails, and is retried."""
    transactional_id, producer_id, epoch = txn
    producer = Producer({**options, "transactional_id": transactional_id})
    try:
        await producer.start()
        await producer.resume_transaction(producer_id, epoch)
        await producer.commit_transaction()
    except KafkaError as exc:
        if _lost(exc):
            return False
        raise
    finally:
        with contextlib.suppress(Exception):
            await producer.close()
    return True


def _replay_partition(s: _Settings, recorded: list[tuple[str, int, int]], batch_id: int,
                      iterator: Iterator[pa.RecordBatch]) -> TxnMessage:
    """A task of a micro-batch replayed after its transactions were recorded for
    commit: commit its partition's recorded transaction; if the coordinator had
    aborted it (a driver down longer than the transaction timeout, or a query stopped
    during its commit and restarted late), write the rows again in a new transaction
    for the driver to commit instead."""
    partition, attempt = _task_attempt()
    tid = f"{s.txn_prefix}-{partition}"
    mine = [t for t in recorded if t[0] == tid]
    if not mine:
        if next(iterator, None) is not None:
            raise CommitLogError(
                f"batch {batch_id}: replayed partition {partition} has rows but no "
                "transaction was recorded for it: the replay is not partitioned as the "
                "first run was")
        return TxnMessage(partition=partition, batch_id=batch_id, skipped=True)
    if asyncio.run(_settle(s.options, mine[0])):
        _report("recorded transaction committed", {"partition": partition,
                                                   "attempt": attempt, "batch_id": batch_id,
                                                   "transactional_id": tid})
        return TxnMessage(partition=partition, batch_id=batch_id, skipped=True)
    _report("recorded transaction lost, writing again", {
        "partition": partition, "attempt": attempt, "batch_id": batch_id,
        "transactional_id": tid, "producer_id": mine[0][1], "epoch": mine[0][2]})
    message = _write_rows(s, iterator, batch_id)
    message.rewritten = True
    return message


class _StreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, settings: _Settings) -> None:
        self.settings = settings

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TxnMessage:
        from pyspark import TaskContext

        s = self.settings
        assert s.commit_log is not None
        ctx = TaskContext.get()
        raw = ctx.getLocalProperty(_BATCH_ID) if ctx is not None else None
        if raw is None:
            raise PublishError("aioproducer: no micro-batch id in the task's properties")
        batch_id = int(raw)
        if s.txn_prefix is not None:
            recorded = _read_intent(s.commit_log, batch_id)
            if recorded is not None:
                # A replay of a batch recorded for commit: its transactions are
                # committed from the record (writing again would duplicate), unless the
                # coordinator aborted them.
                return _replay_partition(s, recorded, batch_id, iterator)
        return _write_rows(s, iterator, batch_id)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        s = self.settings
        assert s.commit_log is not None
        if os.path.exists(_done_path(s.commit_log, batchId)):
            return
        txns: list[tuple[str, int, int]] = []
        if s.txn_prefix is not None:
            recorded = _read_intent(s.commit_log, batchId)
            fresh = _transactions(messages)
            if recorded is None:
                txns = fresh
            elif fresh:
                # A replay whose tasks found recorded transactions aborted and wrote
                # their rows again: the new transactions replace the lost ones.
                again = {t[0] for t in fresh}
                txns = [t for t in recorded if t[0] not in again] + fresh
            else:
                txns = recorded
            if txns != recorded:
                _write_atomic(_intent_path(s.commit_log, batchId), json.dumps(
                    {"batch_id": batchId, "transactions": txns,
                     "rewritten": [m.partition for m in messages
                                   if isinstance(m, TxnMessage) and m.rewritten]}))
            hooks = s.hooks
            if hooks is not None and hooks.crash_in_commit is not None and (
                    hooks.crash_in_commit[0] == batchId and recorded is None):
                n = hooks.crash_in_commit[1]
                if n:
                    asyncio.run(_end(s.options, txns[:n], commit=True))
                raise PublishError(f"injected crash in the commit of batch {batchId} after "
                                   f"{n} of {len(txns)} transactions (option "
                                   "aioproducer.test.crashInCommit)")
        if txns:
            asyncio.run(_end(s.options, txns, commit=True))
        if s.crash_after_commit == batchId:
            raise PublishError(f"injected crash after committing batch {batchId} (option "
                               "aioproducer.test.crashAfterCommit)")
        summary = {"batch_id": batchId, "transactions": len(txns), **_totals(messages)}
        _write_atomic(_done_path(s.commit_log, batchId), json.dumps(summary))
        _report("micro-batch committed", summary)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        s = self.settings
        assert s.commit_log is not None
        recorded = _read_intent(s.commit_log, batchId)
        if recorded is None:
            _abort_all(s, messages)
            return
        # Recorded for commit: a restart commits it. Only transactions of a failed replay
        # that rewrote lost ones are not in the record: abort those.
        txns = [t for t in _transactions(messages) if t not in recorded]
        if txns:
            try:
                asyncio.run(_end(s.options, txns, commit=False))
            except TransactionLostError as exc:  # aborted anyway
                log.warning("format(\"aioproducer\"): abort: %s", exc)


class AioproducerDataSource(DataSource):
    """``format("aioproducer")``: Spark's Kafka sink options and schema, written with
    aioproducer (batch: at-least-once, or exactly once with ``exactlyOnce=true``;
    streaming: exactly once, or at-least-once with ``exactlyOnce=false``)."""

    @classmethod
    def name(cls) -> str:
        return "aioproducer"

    def writer(self, schema: StructType, overwrite: bool) -> _BatchWriter:
        if overwrite:  # as Spark's Kafka sink: a topic cannot be overwritten
            raise ConfigError("save mode overwrite is not allowed for Kafka: records are "
                              "only ever appended; use mode('append')")
        settings = self._settings(schema, streaming=False)
        if settings.commit_log is not None and settings.txn_prefix is not None:
            _recover_batch(settings)
        return _BatchWriter(settings)

    def streamWriter(self, schema: StructType, overwrite: bool) -> _StreamWriter:
        return _StreamWriter(self._settings(schema, streaming=True))

    _counters: WriteCounters | None = None
    """Set by :func:`register` on the subclass it registers."""

    def _settings(self, schema: StructType, streaming: bool) -> _Settings:
        settings = _parse(self.options, schema, streaming=streaming)
        if self._counters is None:
            return settings
        return dataclasses.replace(settings, counters=self._counters)

