"""Publishing Spark DataFrames to Kafka: from the executors at scale, or from the driver.

Both take the DataFrame schema of Spark's own Kafka sink (``df.write.format("kafka")``),
so switching is a one-line change:

=============  =========================================  ==============================
column         type                                       meaning
=============  =========================================  ==============================
``value``      binary or string (required)                null is a tombstone
``key``        binary or string (optional)                null: no key (sticky partition)
``topic``      string (optional)                          ``topic=`` overrides it
``partition``  int (optional)                             null: the partitioner decides
``headers``    array<struct<key: string, value: binary>>  (optional)
=============  =========================================  ==============================

Other columns are ignored. A DataFrame without ``value``, with a column of another
type, or with neither a ``topic`` column nor ``topic=`` is refused with
:class:`SchemaError` before any Spark job starts.

- :func:`publish` runs on the executors (``mapInArrow``): every task opens one
  :class:`~aioproducer.Producer` on an event loop of its own, feeds each Arrow record
  batch to ``send_many`` (a thread reads the next batch from Spark while the loop sends
  the current one), waits for every acknowledgement and returns its counts, which the
  driver sums into a :class:`PublishReport`. A task whose records fail raises, and the
  job fails with a :class:`PublishError` that carries the producer's typed error. Spark
  retries a failed task (``spark.task.maxFailures``) from the start of its partition,
  so delivery is **at-least-once**, as with Spark's Kafka sink: the records a failed
  attempt had delivered are written again (and so are those of speculative attempts,
  if ``spark.speculation`` is on). Executors need aioproducer installed.
- :func:`publish_async` runs on the driver, for small or interactive jobs and async
  services: ``await publish_async(df, producer)`` streams the DataFrame to the driver
  one Arrow batch at a time (``toLocalIterator`` with the next partition prefetched),
  with every blocking Spark call in a worker thread, and produces with the caller's
  producer and its backpressure. Memory stays bounded by about two partitions on the
  driver's JVM (the one being produced and the one prefetched), two Arrow batches in
  Python, and the producer's ``buffer_memory``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import itertools
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from .config import ProducerConfig
from .errors import KafkaError, SerializationError
from .producer import Producer
from .record import RecordFuture, SendManyResult

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType


__all__ = ["PublishError", "PublishReport", "SchemaError", "publish", "publish_async"]

_SINK_SCHEMA = (
    "value (binary or string, required), key (binary or string), topic (string), "
    "partition (int), headers (array<struct<key: string, value: binary>>)")
_MAX_ERRORS = 5
"""Distinct error messages kept per task and in a report."""


class SchemaError(KafkaError, ValueError):
    """The DataFrame does not have the Kafka sink's schema (checked before any job)."""


class PublishError(KafkaError):
    """A Spark task could not publish its partition; the message carries the producer's
    typed error (``KafkaConnectionError``, ``DeliveryTimeoutError``, ...)."""


@dataclasses.dataclass(frozen=True)
class PublishReport:
    """What a publish did, summed over its Spark tasks (or partitions, on the driver)."""

    records: int
    """Rows handed to the producer: delivered plus failed."""
    bytes: int
    """Key, value and header bytes of those rows."""
    failures: int
    """Records that failed (only non-zero with ``raise_on_failure=False``)."""
    partitions: int
    """DataFrame partitions published (one Spark task each on the executors)."""
    seconds: float
    """Wall time of the whole publish."""
    errors: tuple[str, ...] = ()
    """The first distinct error messages of failed records."""

    @property
    def delivered(self) -> int:
        return self.records - self.failures

    @property
    def records_per_second(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0


# -- the schema ------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class _Layout:
    """Which sink columns a DataFrame has, and how to select them for Arrow."""

    topic: str | None
    """``topic=``, which overrides a topic column."""
    key: bool
    topic_column: bool
    partition: bool
    headers: bool
    cast_value: bool
    cast_key: bool

    def select(self, df: DataFrame) -> DataFrame:
        """Only the sink's columns, strings cast to binary (UTF-8), as Spark's sink does."""
        from pyspark.sql import functions as F

        cols = [F.col("value").cast("binary").alias("value") if self.cast_value
                else F.col("value")]
        if self.key:
            cols.append(F.col("key").cast("binary").alias("key") if self.cast_key
                        else F.col("key"))
        if self.topic_column:
            cols.append(F.col("topic"))
        if self.partition:
            cols.append(F.col("partition"))
        if self.headers:
            cols.append(F.col("headers"))
        return df.select(*cols)


def _check_schema(schema: StructType, topic: str | None) -> _Layout:
    """The columns to publish, or SchemaError naming what is wrong."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        StringType,
        StructType,
    )

    if topic is not None and (not isinstance(topic, str) or not topic):
        raise SchemaError(f"topic must be a non-empty str or None, got {topic!r}")
    names = [f.name for f in schema.fields]
    types = {f.name: f.dataType for f in schema.fields}
    for name in ("value", "key", "topic", "partition", "headers"):
        if names.count(name) > 1:
            raise SchemaError(f"the DataFrame has {names.count(name)} columns named "
                              f"{name!r}; keep one")
    if "value" not in types:
        raise SchemaError(f"the DataFrame has no 'value' column (columns: {names}); "
                          f"publishing takes the Kafka sink's schema: {_SINK_SCHEMA}")

    def binary_or_string(name: str) -> bool:
        t = types[name]
        if not isinstance(t, (BinaryType, StringType)):
            raise SchemaError(f"column {name!r} is {t.simpleString()}; it must be binary "
                              f"or string (schema: {_SINK_SCHEMA})")
        return isinstance(t, StringType)

    cast_value = binary_or_string("value")
    cast_key = binary_or_string("key") if "key" in types else False
    if "topic" in types and not isinstance(types["topic"], StringType):
        raise SchemaError(f"column 'topic' is {types['topic'].simpleString()}; it must be "
                          "string")
    if "partition" in types and not isinstance(types["partition"], IntegerType):
        raise SchemaError(f"column 'partition' is {types['partition'].simpleString()}; it "
                          "must be int (cast it: F.col('partition').cast('int'))")
    if "headers" in types:
        t = types["headers"]
        element = t.elementType if isinstance(t, ArrayType) else None
        fields = ({f.name: f.dataType for f in element.fields}
                  if isinstance(element, StructType) else {})
        if (set(fields) != {"key", "value"} or not isinstance(fields["key"], StringType)
                or not isinstance(fields["value"], BinaryType)):
            raise SchemaError(f"column 'headers' is {t.simpleString()}; it must be "
                              "array<struct<key: string, value: binary>>")
    if topic is None and "topic" not in types:
        raise SchemaError("no topic: give topic= or a 'topic' column")
    return _Layout(topic=topic, key="key" in types, topic_column=topic is None,
                   partition="partition" in types, headers="headers" in types,
                   cast_value=cast_value, cast_key=cast_key)


# -- Arrow batches to producer calls ---------------------------------------------------

_LIST_BELOW = 64
"""Rows per ``send_many`` call below which a chunk's values and keys go as Python lists:
an Arrow column costs a few microseconds more per call (its buffers are looked up), a
list one Python object per row (``to_pylist``). Headers always stay Arrow."""


@dataclasses.dataclass
class _Run:
    """Consecutive rows of a chunk for one ``send_many`` call: ``start:end`` indexes the
    chunk's columns."""

    topic: str
    partition: int | None
    start: int
    end: int


@dataclasses.dataclass
class _Chunk:
    """One Arrow record batch, ready to produce.

    ``values`` and ``keys`` are Arrow binary columns, or Python lists when the runs are
    short (see ``_LIST_BELOW``); ``headers`` the Arrow ``list<struct<key, value>>``
    column, or None when no row has a header. ``send_many`` reads Arrow columns'
    buffers in its native loop: no Python object per row.
    """

    rows: int
    nbytes: int
    values: Any
    keys: Any
    headers: Any
    runs: list[_Run]

    def columns(self, run: _Run) -> tuple[Any, Any, Any]:
        """(values, keys, headers) of ``run``: zero-copy slices of Arrow columns."""
        if len(self.runs) == 1:
            return self.values, self.keys, self.headers
        s, e = run.start, run.end
        return (self.values[s:e], None if self.keys is None else self.keys[s:e],
                None if self.headers is None else self.headers[s:e])


def _binary_length(col: Any) -> int:
    import pyarrow.compute as pc

    return int(pc.sum(pc.binary_length(col)).as_py() or 0)


def _as_binary(col: Any) -> Any:
    """A string column as binary (the same buffers: UTF-8 bytes)."""
    import pyarrow as pa

    if pa.types.is_string(col.type):
        return col.view(pa.binary())
    if pa.types.is_large_string(col.type):
        return col.view(pa.large_binary())
    return col


def _prepare_chunk(batch: pa.RecordBatch, topic: str | None) -> _Chunk:
    """Turn one record batch (the selected sink columns) into producer calls.

    Rows go to ``send_many`` in runs that share a topic and an explicit partition (or
    none), in their order, with their headers; runs keep the order of the rows, so the
    records of each partition keep it too.
    """
    import numpy as np
    import pyarrow.compute as pc

    n = batch.num_rows
    names = batch.schema.names
    values: Any = _as_binary(batch.column(names.index("value")))
    nbytes = _binary_length(values)
    keys: Any = None
    if "key" in names:
        key_col = batch.column(names.index("key"))
        if key_col.null_count < n:
            keys = _as_binary(key_col)
            nbytes += _binary_length(keys)
    headers: Any = None
    if "headers" in names:
        head_col = batch.column(names.index("headers"))
        if head_col.null_count < n and (pc.max(pc.list_value_length(head_col)).as_py()
                                        or 0) > 0:
            headers = head_col
            structs = head_col.flatten()  # the headers of the batch's rows, all of them
            st = structs.type
            for i, child in enumerate(structs.flatten()):  # key and value
                if st.field(i).name in ("key", "value"):
                    nbytes += _binary_length(child)
    if n == 0:
        return _Chunk(0, 0, values, keys, headers, [])

    topic_col = batch.column(names.index("topic")) if topic is None else None
    if topic_col is not None and topic_col.null_count:
        raise SerializationError("a row has a null topic; give publish() a topic= or fill "
                                 "the 'topic' column")
    part_col = batch.column(names.index("partition")) if "partition" in names else None
    if part_col is not None and part_col.null_count == n:
        part_col = None
    if topic_col is None and part_col is None:
        assert topic is not None
        return _Chunk(n, nbytes, values, keys, headers, [_Run(topic, None, 0, n)])

    # A run starts where the topic or the partition changes.
    starts = np.zeros(n, dtype=bool)
    starts[0] = True
    if topic_col is not None:
        starts[1:] |= np.asarray(pc.not_equal(topic_col.slice(1), topic_col.slice(0, n - 1))
                                 .to_numpy(zero_copy_only=False))
    parts = None
    if part_col is not None:
        parts = np.asarray(pc.fill_null(part_col, -1).to_numpy(zero_copy_only=False))
        starts[1:] |= parts[1:] != parts[:-1]
    bounds = [*np.flatnonzero(starts).tolist(), n]
    runs: list[_Run] = []
    for start, end in itertools.pairwise(bounds):
        run_topic = topic if topic_col is None else topic_col[start].as_py()
        assert run_topic is not None
        part = None if parts is None or parts[start] < 0 else int(parts[start])
        runs.append(_Run(run_topic, part, start, end))
    if len(runs) * _LIST_BELOW > n:
        values = values.to_pylist()
        keys = None if keys is None else keys.to_pylist()
    return _Chunk(n, nbytes, values, keys, headers, runs)


class _Tally:
    """Counts of one publish, and the results still awaited."""

    def __init__(self) -> None:
        self.records = 0
        self.bytes = 0
        self.failures = 0
        self.first_error: BaseException | None = None
        self.errors: list[str] = []
        self._pending: deque[SendManyResult | RecordFuture] = deque()

    def add(self, result: SendManyResult | RecordFuture) -> None:
        self._pending.append(result)

    def settle(self) -> None:
        """Count the results done so far (oldest first), so they are not kept."""
        pending = self._pending
        while pending and pending[0].done():
            self._account(pending.popleft())

    async def wait_all(self) -> None:
        """Until every result is acknowledged or failed, then count them all."""
        for result in self._pending:
            with contextlib.suppress(Exception):  # counted below, from the batches
                await result
        while self._pending:
            self._account(self._pending.popleft())

    def _account(self, result: SendManyResult | RecordFuture) -> None:
        # Only this publish's own records count (a batch shared with other sends, or
        # split into pieces of which some failed, fails only the records it failed).
        if isinstance(result, RecordFuture):
            error = None if result.cancelled() else result.exception()
            if error is None:
                return
            failed = 1
        else:
            failures = result.failures()
            if not failures:
                return
            failed = result.failed_count()
            error = failures[0][2]
        self.failures += failed
        if self.first_error is None:
            self.first_error = error
        message = f"{type(error).__name__}: {error}"
        if len(self.errors) < _MAX_ERRORS and message not in self.errors:
            self.errors.append(message)


async def _send_chunk(producer: Producer, chunk: _Chunk, tally: _Tally) -> None:
    for run in chunk.runs:
        values, keys, headers = chunk.columns(run)
        result = await producer.send_many(run.topic, values, keys, partition=run.partition,
                                          headers=headers)
        tally.records += run.end - run.start
        tally.add(result)
    tally.bytes += chunk.nbytes
    tally.settle()


def _retrieve(fut: asyncio.Future[Any]) -> None:
    """Done-callback: mark the outcome of a future nobody awaits any more as seen."""
    if not fut.cancelled():
        fut.exception()


async def _pump(producer: Producer, fetch: Callable[[], _Chunk | None],
                executor: ThreadPoolExecutor, tally: _Tally,
                on_chunk: Callable[[_Chunk], None] | None = None) -> None:
    """Produce what ``fetch`` (run in ``executor``) returns, until it returns None; the
    next chunk is fetched while the current one is produced."""
    loop = asyncio.get_running_loop()
    pending: asyncio.Future[_Chunk | None] = loop.run_in_executor(executor, fetch)
    try:
        while True:
            chunk = await pending
            if chunk is None:
                return
            pending = loop.run_in_executor(executor, fetch)
            await _send_chunk(producer, chunk, tally)
            if on_chunk is not None:
                on_chunk(chunk)
    finally:
        pending.add_done_callback(_retrieve)


# -- executor side ---------------------------------------------------------------------

_REPORT_DDL = "records long, bytes long, failures long, errors string"


@dataclasses.dataclass(frozen=True)
class _TaskSettings:
    """What every task needs (pickled to the executors with the function)."""

    topic: str | None
    options: dict[str, Any]
    raise_on_failure: bool


_TASK_DEFAULTS: dict[str, Any] = {"batch_size": 128 * 1024}
"""Producer options a task uses unless ``producer_config`` sets them. A task streams a
whole partition: 128 KiB batches (Java's default is 16 KiB) carry 8 times fewer Produce
round trips per record, the biggest per-record cost (README, Performance), and 256 of
them still fit the default ``buffer_memory``."""


def _producer_options(bootstrap_servers: str | Sequence[str],
                      producer_config: Mapping[str, Any] | None) -> dict[str, Any]:
    """The tasks' producer options, checked here on the driver (ConfigError now rather
    than in every task)."""
    options = dict(producer_config or {})
    given = {name.replace(".", "_") for name in options}
    options.update({k: v for k, v in _TASK_DEFAULTS.items() if k not in given})
    config = ProducerConfig.from_options(options, bootstrap_servers=bootstrap_servers)
    if getattr(config, "transactional_id", None) is not None:
        from .errors import ConfigError

        raise ConfigError("publish(): transactional_id is not supported: every Spark task "
                          "opens a producer of its own, and one id would fence the others")
    options["bootstrap_servers"] = bootstrap_servers
    return options


async def _publish_task(settings: _TaskSettings, first: pa.RecordBatch,
                        rest: Iterator[pa.RecordBatch], executor: ThreadPoolExecutor
                        ) -> _Tally:
    tally = _Tally()
    topic = settings.topic
    ready: list[pa.RecordBatch] = [first]

    def fetch() -> _Chunk | None:
        batch = ready.pop() if ready else next(rest, None)
        return None if batch is None else _prepare_chunk(batch, topic)

    async with Producer(settings.options) as producer:
        await _pump(producer, fetch, executor, tally)
        await producer.flush()
        await tally.wait_all()
    return tally


def _publish_partition(settings: _TaskSettings, batches: Iterator[pa.RecordBatch]
                       ) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` function: one producer for the task's whole partition."""
    import pyarrow as pa

    first = next(batches, None)
    tally = _Tally()
    if first is not None:  # an empty partition opens no connection
        executor = ThreadPoolExecutor(1, thread_name_prefix="aioproducer-spark-read")
        try:
            tally = asyncio.run(_publish_task(settings, first, batches, executor))
        except KafkaError as exc:  # the producer's typed errors; others propagate as is
            raise PublishError(_task_failure(exc)) from exc
        finally:
            # The reader thread must be done with Spark's input before the task returns.
            executor.shutdown(wait=True)
        if tally.failures and settings.raise_on_failure:
            assert tally.first_error is not None
            raise PublishError(_task_failure(
                tally.first_error, f"{tally.failures} of {tally.records} records failed; "
                                   "first: "))
    yield pa.RecordBatch.from_pydict(
        {"records": [tally.records], "bytes": [tally.bytes], "failures": [tally.failures],
         "errors": ["\n".join(tally.errors)]},
        schema=pa.schema([("records", pa.int64()), ("bytes", pa.int64()),
                          ("failures", pa.int64()), ("errors", pa.string())]))


_TASK_MARK = "aioproducer.spark: "


def _task_failure(exc: BaseException, prefix: str = "") -> str:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    where = ("a Spark task" if ctx is None else
             f"Spark task for partition {ctx.partitionId()} (attempt {ctx.attemptNumber()})")
    detail = " ".join(str(exc).split())
    return f"{_TASK_MARK}{where} could not publish: {prefix}{type(exc).__name__}: {detail}"


def _job_failure(exc: BaseException) -> PublishError | None:
    """A PublishError with the task's own message, if a task of ours failed the job."""
    text = str(exc)
    found = text.rfind(_TASK_MARK)
    if found < 0:
        return None
    line = text[found + len(_TASK_MARK):].splitlines()[0]
    return PublishError(f"publishing to Kafka failed: {line}")


def publish(df: DataFrame, topic: str | None = None, *,
            bootstrap_servers: str | Sequence[str],
            producer_config: Mapping[str, Any] | None = None,
            raise_on_failure: bool = True) -> PublishReport:
    """Publish ``df`` to Kafka from the executors, one producer per Spark task.

    ``df`` has the Kafka sink's schema (see the module docstring); ``topic`` overrides
    its ``topic`` column. ``producer_config`` holds further :class:`Producer` options
    (Python or Java names, e.g. ``{"linger.ms": 20, "compression_type": "lz4"}``),
    checked here before the job; tasks default to ``batch_size=131072`` (128 KiB).
    Blocks until every record is acknowledged and returns the summed
    :class:`PublishReport`.

    A task whose producer cannot start or whose records fail raises, and so the job
    fails with :class:`PublishError` (its message names the producer's typed error) once
    Spark has run out of task attempts. Each retried attempt republishes its whole
    partition: delivery is at-least-once. With ``raise_on_failure=False`` failed
    records are only counted (``failures``, ``errors``) and the job succeeds; records
    that the producer refuses outright (a bad partition, a record too large) still
    fail the task.
    """
    layout = _check_schema(df.schema, topic)
    settings = _TaskSettings(topic, _producer_options(bootstrap_servers, producer_config),
                             raise_on_failure)
    started = time.monotonic()
    job = layout.select(df).mapInArrow(functools.partial(_publish_partition, settings),
                                       _REPORT_DDL)
    try:
        rows = job.collect()
    except Exception as exc:
        failure = _job_failure(exc)
        if failure is None:
            raise
        raise failure from exc
    errors: list[str] = []
    for row in rows:
        for message in (row["errors"] or "").splitlines():
            if message not in errors and len(errors) < _MAX_ERRORS:
                errors.append(message)
    return PublishReport(
        records=sum(r["records"] for r in rows), bytes=sum(r["bytes"] for r in rows),
        failures=sum(r["failures"] for r in rows), partitions=len(rows),
        seconds=time.monotonic() - started, errors=tuple(errors))


# -- driver side -----------------------------------------------------------------------

# The IPC stream travels as hex text: toLocalIterator pickles a binary cell as
# bytearray(<latin-1 str>), and unpickling that costs ~10 ms per MiB in one call with
# the GIL held, which stalls the event loop; ASCII text unpickles at memcpy speed and
# bytes.fromhex() decodes ~1 ms per MiB (base64 takes 4-10 ms).
_IPC_DDL = "partition int, ipc string"


def _to_ipc(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` function: each record batch as one row holding its Arrow IPC
    stream, so the driver gets whole batches (not a Python object per row)."""
    import pyarrow as pa
    from pyspark import TaskContext

    ctx = TaskContext.get()
    partition = -1 if ctx is None else ctx.partitionId()
    schema = pa.schema([("partition", pa.int32()), ("ipc", pa.string())])
    for batch in batches:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, batch.schema) as writer:
            writer.write_batch(batch)
        text = memoryview(sink.getvalue()).hex()
        yield pa.RecordBatch.from_arrays(
            [pa.array([partition], pa.int32()), pa.array([text], pa.string())],
            schema=schema)


def _cells(row: Any) -> tuple[int, str]:
    """(partition, IPC hex) of a ``_to_ipc`` row, as a plain tuple for the driver."""
    return int(row[0]), str(row[1])


class _Progress:
    """A rich progress line: rows published so far and rows/s."""

    def __init__(self, topic: str | None) -> None:
        from rich.progress import BarColumn, Progress, ProgressColumn, Task, TextColumn
        from rich.text import Text

        class Rows(ProgressColumn):
            def render(self, task: Task) -> Text:
                speed = task.finished_speed or task.speed or 0.0
                return Text(f"{int(task.completed):,} rows  {speed:,.0f} rows/s")

        self._progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                                  Rows(), TextColumn("{task.elapsed:.1f} s"))
        self._task = self._progress.add_task(
            f"publishing to {topic or 'the topic column'}", total=None)
        self._progress.start()

    def advance(self, chunk: _Chunk) -> None:
        self._progress.advance(self._task, chunk.rows)

    def stop(self) -> None:
        self._progress.stop()


async def publish_async(df: DataFrame, producer: Producer, topic: str | None = None, *,
                        progress: bool = True, raise_on_failure: bool = True
                        ) -> PublishReport:
    """Publish ``df`` from the driver with ``producer``, without blocking the event loop.

    ``df`` has the Kafka sink's schema (see the module docstring). The DataFrame comes
    to the driver one Arrow batch at a time, partition after partition with the next
    one prefetched; every blocking Spark call (planning, the jobs, reading results)
    runs in a worker thread, and the next batch is read while the current one is
    produced, with the producer's backpressure. ``progress`` shows rows and rows/s.

    Returns once every record is acknowledged. If records failed, raises the first
    one's typed error (with ``raise_on_failure=False``: counts them in the report).
    Cancelling stops publishing; what was already handed to the producer is sent.
    """
    loop = asyncio.get_running_loop()
    executor = ThreadPoolExecutor(1, thread_name_prefix="aioproducer-spark-fetch")
    started = time.monotonic()
    rows: Iterator[Any] | None = None
    partitions: set[int] = set()
    tally = _Tally()
    bar: _Progress | None = None

    def start() -> None:
        nonlocal rows
        layout = _check_schema(df.schema, topic)  # SchemaError here: no job has run
        ipc = layout.select(df).mapInArrow(_to_ipc, _IPC_DDL)
        # Through the RDD, not DataFrame.toLocalIterator(): on Spark 4.2 the latter
        # keeps every partition's result in the driver JVM for good (a 1 GiB driver
        # fails after ~40 partitions of 20 MB, over one or several publishes), the
        # RDD's does not. The cells arrive as the tuples the workers pickled.
        rows = ipc.rdd.map(_cells).toLocalIterator(prefetchPartitions=True)

    def fetch() -> _Chunk | None:
        import pyarrow as pa

        assert rows is not None
        row = next(rows, None)
        if row is None:
            return None
        partitions.add(row[0])
        with pa.ipc.open_stream(bytes.fromhex(row[1])) as reader:
            batch = reader.read_next_batch()
        return _prepare_chunk(batch, topic)

    def abandon() -> None:
        # Stops Spark's result stream (and its job) when we leave before its end.
        close = getattr(rows, "close", None)
        if close is not None:
            close()

    finished = False
    try:
        starting = loop.run_in_executor(executor, start)
        starting.add_done_callback(_retrieve)
        await starting
        if progress:
            bar = _Progress(topic)
        await _pump(producer, fetch, executor, tally,
                    on_chunk=None if bar is None else bar.advance)
        finished = True
        await tally.wait_all()
    finally:
        if bar is not None:
            bar.stop()
        if not finished:
            executor.submit(abandon)  # runs after the Spark call in flight, if any
        executor.shutdown(wait=False)
    if tally.failures and raise_on_failure:
        assert tally.first_error is not None
        raise tally.first_error
    return PublishReport(records=tally.records, bytes=tally.bytes, failures=tally.failures,
                         partitions=len(partitions), seconds=time.monotonic() - started,
                         errors=tuple(tally.errors))
