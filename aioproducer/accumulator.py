"""The RecordAccumulator: per-partition deques of batches built in pool blocks.

Records are appended to the batch at the tail of a partition's deque; the Sender
takes batches from the head (``ready`` then ``drain``). Memory comes from the native
:class:`BufferPool`; when it is used up, ``send()`` waits in FIFO order, bounded by
``max_block_ms``, exactly as Java's ``BufferPool`` blocks its callers.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sized
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from ._native import BATCH_HEADER_SIZE, Appender, Block, ProducerBatch, new_future
from ._native.batch import record_size_upper_bound
from .backoff import ExponentialBackoff
from .batch_split import records_of_batch
from .compression import CompressionRatioEstimator, Compressor
from .errors import (
    KafkaError,
    ProducerClosedError,
    RecordTooLargeError,
)
from .memory import Memory
from .metadata import Cluster, TopicInfo
from .types import TopicPartition

if TYPE_CHECKING:
    from ._native.compressor import CompressorThread

__all__ = ["AppendResult", "ProducerBatch", "ReadyResult", "RecordAccumulator"]

MIN_BATCH_TARGET = 1024
"""The smallest block a sparse partition's batches shrink to under memory pressure
(see :meth:`RecordAccumulator.batch_taken`); a record larger than it gets a block of
its own size, as always."""



class StickyPartitioner(Protocol):
    """What :meth:`RecordAccumulator.append` needs of the partitioner for a record whose
    partition it chose (``RecordPartitioner.new_batch_hook``)."""

    def on_new_batch(self, topic: str, info: TopicInfo, previous: int) -> int:
        """``previous``'s open batch is full: the partition to append to now (KIP-794:
        the sticky partition moves if its bytes are due; a custom partitioner's
        ``on_new_batch``, then its choice again)."""
        ...

    def on_appended(self, topic: str, partition: int, nbytes: int) -> None:
        """The record added ``nbytes`` to ``partition``'s batches (a new batch counts
        its header): KIP-794's byte count."""
        ...


class LoadStatsSink(Protocol):
    """The partitioner, as the accumulator sees it for adaptive partitioning (KIP-794):
    its settings (:meth:`RecordAccumulator.topic_backlog` and
    :meth:`RecordAccumulator.node_polled` read them)."""

    adaptive: bool
    availability_timeout_ms: int
    sticky_topics: set[str]

    def update_load_stats(self, topic: str, queue_sizes: list[int] | None,
                          partition_ids: list[int] | None, length: int) -> None: ...


@dataclass(slots=True)
class AppendResult:
    """Where :meth:`RecordAccumulator.append` put a record."""

    batch: ProducerBatch
    index: int
    """The record's offset delta in the batch."""
    new_batch: bool
    """The record opened a new batch (the Sender should look again)."""


@dataclass(slots=True)
class ReadyResult:
    nodes: set[int] = field(default_factory=set)
    next_check: float = float("inf")
    """Seconds until some batch may become sendable (linger or backoff)."""
    unknown_leaders: bool = False


def _codec_slack(size: int) -> int:
    # Room for a codec's framing on incompressible records (LZ4/zstd/gzip store such
    # blocks raw: a few bytes per block plus a frame header).
    return 64 + size // 512


def _held(tp: TopicPartition, batch: ProducerBatch, dq: Sized,
          flying: Mapping[TopicPartition, Sized] | None) -> bool:
    """Whether ``batch`` (the head of ``tp``'s deque) waits for the partition's request
    in flight: it is the only batch queued and not full.

    Like Nagle's algorithm: a partial batch sent while the previous one is still on
    its way would be one more request for the broker to queue behind it, and it
    would not arrive sooner. Held back, it gathers the records that come in
    meanwhile and goes out when the response arrives, so that under load (above all
    with ``linger_ms=0``) requests carry several records instead of one each, and
    the latency stops growing with the request rate. Full batches are never held,
    so throughput and pipelining (``max_in_flight_requests_per_connection``) are as
    before.
    """
    return (flying is not None and not batch.full and batch.attempts == 0
            and len(dq) == 1 and bool(flying.get(tp)))


def _sort_head_by_sequence(dq: deque[ProducerBatch]) -> None:
    """Order the batches with a sequence at the head of ``dq`` (retries and split
    pieces) by sequence; the batches without one stay behind them, as they were."""
    head = []
    while dq and dq[0].base_sequence >= 0:
        head.append(dq.popleft())
    head.sort(key=lambda b: (b.producer_epoch, b.base_sequence))
    dq.extendleft(reversed(head))


class RecordAccumulator:
    """Holds batches until the Sender takes them (``batch.size``, ``linger.ms``)."""

    def __init__(self, *, batch_size: int, buffer_memory: int, linger_ms: int,
                 retry_backoff_ms: int, retry_backoff_max_ms: int,
                 delivery_timeout_ms: int, codec: int = 0,
                 compressor: Compressor | None = None,
                 max_request_size: int = 1048576,
                 batch_max_size: int | None = None,
                 appender: Appender | None = None,
                 offload: CompressorThread | None = None) -> None:
        # The routes of the native appender hold each partition's open batch (its
        # tail), where the native send path finds it in one step; only the
        # accumulator sets them.
        self.appender = appender if appender is not None else Appender(hash_keys=True)
        self.batch_size = batch_size
        # A grown batch takes at most a quarter of the memory, like a compressed one.
        self.batch_max_size = max(batch_size, min(batch_max_size or batch_size,
                                                  buffer_memory // 4))
        # Grown batches' blocks (batch_size doubled, up to batch_max_size) are reused
        # too: freed, their pages went back to the kernel and were faulted in again.
        self.memory = Memory(buffer_memory, batch_size, pooled_up_to=self.batch_max_size)
        """``buffer_memory`` (Java's BufferPool): blocks, the sends waiting for one."""
        self.pool = self.memory.pool  # the native pool, for its counters
        # KIP-782: the batch size (on the wire) for a partition's next batch, where it
        # differs from batch_size; see batch_taken().
        self.batch_targets: dict[TopicPartition, int] = {}
        # Per topic, how large its batches may grow (set_growth_cap); batch_size while
        # the topic's max.message.bytes is being asked for.
        self.growth_caps: dict[str, int] = {}
        self.on_growth_cap_needed: Callable[[str], None] | None = None
        """Called once per topic whose batches would grow: look up the topic's
        ``max.message.bytes`` and call :meth:`set_growth_cap`."""
        self.codec = codec
        self.compressor = compressor
        # The compression thread (zstd, LZ4): a partition's batch found full goes to it
        # at once (see _hand_over), if the compressor is still the one it stands in for.
        self.offload = offload
        self.offload_for = compressor
        self.ratios = CompressionRatioEstimator()
        # A compressed batch may hold this much uncompressed at most.
        self.max_compressed_batch = max(batch_size, min(max_request_size, buffer_memory // 4))
        self.linger = linger_ms / 1000.0
        self.retry_backoff = retry_backoff_ms / 1000.0
        self.retry_backoff_max = retry_backoff_max_ms / 1000.0
        self.retry_backoff_policy = ExponentialBackoff(
            retry_backoff_ms, max(retry_backoff_ms, retry_backoff_max_ms))
        self.delivery_timeout = delivery_timeout_ms / 1000.0
        self.batches: dict[TopicPartition, deque[ProducerBatch]] = {}
        self.incomplete: set[ProducerBatch] = set()
        self.flushes_in_progress = 0
        # send_and_wait(): per partition, the batch of an awaited record, sendable at
        # the next Sender pass whatever linger_ms says (see hurry()).
        self.hurried: dict[TopicPartition, ProducerBatch] = {}
        self.closing = False
        self._refusal: KafkaError | None = None
        self._drain_index = 0
        # Adaptive partitioning (KIP-794): the partitioner that gets the queue sizes of
        # the topics with keyless records in ready(), and per node (monotonic seconds)
        # the last time it had batches ready and the last time it could take them.
        self.load_stats: LoadStatsSink | None = None
        self.node_ready_at: dict[int, float] = {}
        self.node_drained_at: dict[int, float] = {}
        self._last_cluster: Cluster | None = None
        self._flying: Mapping[TopicPartition, Sized] | None = None
        # A done future of the producer's loop that completed batches hold instead of
        # their own (complete()): see _settle().
        self._settled: asyncio.Future[None] | None = None

    # -- append path -------------------------------------------------------------

    def tail(self, tp: TopicPartition) -> ProducerBatch | None:
        """The partition's open batch (the last one created), or None."""
        route = self.appender.route(tp[0])
        if route is None or tp[1] >= len(route.tails):
            return None
        batch: ProducerBatch | None = route.tails[tp[1]]
        return batch

    def try_append(self, tp: TopicPartition, timestamp: int, key: object, value: object,
                   headers: object) -> tuple[ProducerBatch, int] | None:
        """Append to the partition's open batch; None if a new batch is needed."""
        batch = self.tail(tp)
        if batch is not None and not batch.full:
            index = batch.builder.append(timestamp, key, value, headers)
            if index >= 0:
                return batch, index
            batch.full = True
        return None

    async def append(self, topic: str, info: TopicInfo, partition: int, timestamp: int,
                     key: object, value: object, headers: object, record_size: int, *,
                     sticky: StickyPartitioner | None, max_block_s: float,
                     guard: Callable[[], None] | None = None) -> AppendResult:
        """Append one record (Java's ``RecordAccumulator.append``).

        Tries the partition's open batch; when it is full, ``sticky`` (the
        partitioner, for a partition it chose) may move the record first (KIP-794:
        a sticky partition whose bytes are due; a custom partitioner's
        ``on_new_batch``), and is told the bytes each record added; otherwise a new
        batch is opened in a block from the pool, waiting for memory
        up to ``max_block_s``. Every ``await`` comes before the record is appended: a
        cancelled call buffered nothing. ``guard`` (transactions) is called after each
        ``await``, right before appending: if it raises, nothing is buffered.
        """
        n = len(info.partitions)
        # The native send path hashes keys over the route's count: keep it current.
        self.appender.set_route(topic, n)
        tp = (topic, partition)
        appended = self._append_counted(tp, timestamp, key, value, headers, sticky)
        if appended is None and self.offload is not None:
            self._hand_over(tp)
        if appended is None and sticky is not None:
            moved = sticky.on_new_batch(topic, info, partition)
            if moved != partition:
                partition = moved
                tp = (topic, partition)
                appended = self._append_counted(tp, timestamp, key, value, headers, sticky)
        if appended is not None:
            return AppendResult(appended[0], appended[1], False)
        if self.linger > 0 and self.batches.get(tp):
            # Let the Sender (and the network) run once per new batch: a tight loop
            # of sends never yields otherwise, and batches would pile up until the
            # pool is full. Once per batch, not per record, keeps the hot path cheap.
            await asyncio.sleep(0)
            self._check_open()
            if guard is not None:
                guard()
            appended = self._append_counted(tp, timestamp, key, value, headers, sticky)
            if appended is not None:
                return AppendResult(appended[0], appended[1], False)
        size = self.block_size_for(record_size, tp)
        charge = self._charge_for(size, record_size, tp)
        # Memory at once: nothing else ran since the appends above found no room, so
        # they need not be tried again below.
        memory = self.memory
        block = memory.allocate_now(charge)
        waited = block is None
        if block is None:
            block = await memory.wait(charge, max_block_s, self._memory_refusal)
        if self._refusal is not None:
            memory.release(block)
            self._check_open()
        if guard is not None:
            try:
                guard()
            except BaseException:
                memory.release(block)
                raise
        if waited:
            # Another send may have opened a batch for this partition meanwhile.
            appended = self._append_counted(tp, timestamp, key, value, headers, sticky)
            if appended is not None:
                memory.release(block)
                return AppendResult(appended[0], appended[1], False)
        batch = self._open(tp, block, size, charge, timestamp, key, value, headers,
                           self.appender.bound_loop() or asyncio.get_running_loop(), n)
        if sticky is not None:
            sticky.on_appended(topic, partition, int(batch.builder.size_in_bytes))
        return AppendResult(batch, 0, True)

    def open_now(self, topic: str, num_partitions: int, partition: int, timestamp: int,
                 key: bytes | None, value: bytes | None,
                 loop: asyncio.AbstractEventLoop) -> ProducerBatch | None:
        """:meth:`append` for a record of the native ``send()`` whose partition needs a
        new batch (its open one is full, drained or absent), when nothing makes it
        wait: a new batch with the record as its first (the caller counts its sticky
        bytes), or None where :meth:`append` would suspend or decide more (the topic's
        partition count changed, a yield under a linger, memory not free now, the
        producer refusing records), and the Python path takes the record.

        The native path has chosen the partition (below its route's partition count,
        so below ``num_partitions`` once the two agree) and bounded the record's size
        (``CoreAppender.max_payload``), as the Python path would have.
        """
        route = self.appender.route(topic)
        if route is None or route.num_partitions != num_partitions \
                or self._refusal is not None:
            return None
        tp = (topic, partition)
        if self.linger > 0 and self.batches.get(tp):
            return None  # append() lets the Sender run once first
        if self.offload is not None:
            self._hand_over(tp)
        record_size = record_size_upper_bound(-1 if key is None else len(key),
                                              -1 if value is None else len(value), None)
        size = self.block_size_for(record_size, tp)
        charge = self._charge_for(size, record_size, tp)
        block = self.memory.allocate_now(charge)
        if block is None:
            return None
        return self._open(tp, block, size, charge, timestamp, key, value, None, loop,
                          num_partitions)

    def _open(self, tp: TopicPartition, block: Block, size: int, charge: int,
              timestamp: int, key: object, value: object, headers: object,
              loop: asyncio.AbstractEventLoop, num_partitions: int) -> ProducerBatch:
        """A new batch for ``tp`` in ``block`` (of ``charge`` bytes from the pool), with
        the record at index 0."""
        if charge < size:
            # Its records wait uncompressed in a block of ``size`` outside the pool,
            # paid for by the pool block of its compressed target.
            block = self.memory.outside(size, block)
        batch = self.new_batch(tp, block, loop, num_partitions)
        if batch.builder.append(timestamp, key, value, headers) < 0:
            # Cannot happen: the block was sized for this record.
            raise RecordTooLargeError("record does not fit in a block sized for it")
        return batch

    def _hand_over(self, tp: TopicPartition) -> None:
        """The partition's open batch is full: its records go to the compression thread
        now, while the loop fills the next batch (the batch takes no more records).
        The thread may decline (too small, too busy): the batch is then compressed
        when the Sender takes it, as without a thread."""
        batch = self.tail(tp)
        if batch is not None and batch.full and batch.attempts == 0 \
                and self.compressor is self.offload_for and self.offload is not None:
            batch.builder.compress_ahead(self.offload)

    def _append_counted(self, tp: TopicPartition, timestamp: int, key: object,
                        value: object, headers: object, sticky: StickyPartitioner | None
                        ) -> tuple[ProducerBatch, int] | None:
        """:meth:`try_append`, telling ``sticky`` the bytes the record added."""
        if sticky is None:
            return self.try_append(tp, timestamp, key, value, headers)
        batch = self.tail(tp)
        if batch is None or batch.full:  # (what try_append would find)
            return None
        before = int(batch.builder.size_in_bytes)
        appended = self.try_append(tp, timestamp, key, value, headers)
        if appended is not None:
            sticky.on_appended(tp[0], tp[1], int(appended[0].builder.size_in_bytes) - before)
        return appended

    def _charge_for(self, size: int, record_size: int, tp: TopicPartition) -> int:
        """What a new batch of ``size`` bytes takes from ``buffer_memory``: all of it,
        but a compressed batch only its target (``batch_size``, or its record's size
        if larger), as Java's do. The rest of its block, where its records wait
        uncompressed until it closes, is taken outside the pool (see
        :meth:`Memory.outside`)."""
        if not self.codec:
            return size
        return min(size, max(self.batch_targets.get(tp, self.batch_size),
                             BATCH_HEADER_SIZE + record_size))

    def new_batch(self, tp: TopicPartition, block: Block,
                  loop: asyncio.AbstractEventLoop,
                  num_partitions: int | None = None) -> ProducerBatch:
        """Open a new batch for ``tp`` in ``block``; it becomes the partition's tail.
        ``num_partitions``: the topic's partition count from the metadata, for a route
        that is gone (the topic expired while the send waited for memory): the native
        path hashes keys over the route's count, which must be the topic's."""
        batch = ProducerBatch(tp, block, new_future(loop), time.monotonic())
        if self.codec:
            cap = block.capacity
            limit = min(cap - _codec_slack(cap), self._compressed_limit(tp))
            batch.builder.set_compression(self.codec, self.compressor,
                                          max(limit, BATCH_HEADER_SIZE + 1))
        dq = self.batches.get(tp)
        if dq is None:
            dq = self.batches[tp] = deque()
        if dq:
            dq[-1].full = True
        dq.append(batch)
        self.incomplete.add(batch)
        route = self.appender.route(tp[0])
        if route is None or tp[1] >= route.num_partitions:
            route = self.appender.set_route(tp[0], max(
                tp[1] + 1, num_partitions or 0, route.num_partitions if route else 0))
        previous = route.tails[tp[1]]
        if previous is not None:
            previous.full = True
        route.tails[tp[1]] = batch
        return batch

    # -- lifecycle ---------------------------------------------------------------

    def begin_flush(self) -> None:
        """From now until :meth:`end_flush`, every batch is sendable at once."""
        self.flushes_in_progress += 1

    def end_flush(self) -> None:
        self.flushes_in_progress -= 1

    def hurry(self, batch: ProducerBatch) -> bool:
        """A caller awaits a record of ``batch`` (``send_and_wait()``): the batch is
        sendable at the next Sender pass, without waiting for ``linger_ms``. It stays
        open until then, so records appended meanwhile (in the same turn of the event
        loop) share it. False if there is nothing to do: the batch is full or drained,
        and so sendable or sent already."""
        if batch.full:
            return False
        self.hurried[batch.tp] = batch
        return True

    def _is_hurried(self, tp: TopicPartition) -> bool:
        """Whether ``tp``'s queue holds a batch that :meth:`hurry` marked; forgets
        the mark of a batch that is full (it is sendable anyway), drained or done."""
        batch = self.hurried.get(tp)
        if batch is None:
            return False
        if batch.full or batch.result.done():
            del self.hurried[tp]
            return False
        return True

    def close(self, error: KafkaError) -> None:
        """No more appends (they raise ``error``); what is buffered goes out now."""
        self.closing = True
        self.refuse_appends(error)

    def refuse_appends(self, error: KafkaError) -> None:
        """From now on appends raise ``error`` (a closed or failed producer); sends
        waiting for memory are woken to raise it."""
        if self._refusal is None:
            self._refusal = error
        self.memory.wake_all()

    def _memory_refusal(self) -> BaseException | None:
        """The error a send waiting for memory raises when woken, if any."""
        if self._refusal is None:
            return None
        if self.closing:
            return ProducerClosedError("the producer was closed while send() waited for "
                                       "memory")
        return type(self._refusal)(str(self._refusal))

    def _check_open(self) -> None:
        if self._refusal is not None:
            err = type(self._refusal)(str(self._refusal))
            raise err from self._refusal.__cause__

    def block_size_for(self, record_size: int, tp: TopicPartition) -> int:
        """Block size for a new batch of ``tp`` whose first record encodes to
        ``record_size``.

        The batch is sized for the partition's target (``batch_size``, or more for a
        partition whose batches fill up: :meth:`batch_taken`). With compression, a
        batch holds records up to its estimated compressed size reaching the target
        (plus room for the codec's overhead on data that does not compress), so the
        block may be larger than the target.
        """
        size = max(self.batch_targets.get(tp, self.batch_size), BATCH_HEADER_SIZE + record_size)
        if self.codec:
            limit = self._compressed_limit(tp)
            size = max(size, limit + _codec_slack(limit))
        return size

    def learn_growth_cap(self, topic: str) -> None:
        """Ask (once) for ``topic``'s limit; its batches keep batch_size until known.
        ``send()`` calls this on a topic's first use, so that the answer is usually
        there before its first batch fills up."""
        if topic not in self.growth_caps and self.on_growth_cap_needed is not None:
            self.growth_caps[topic] = self.batch_size
            self.on_growth_cap_needed(topic)

    def set_growth_cap(self, topic: str, max_message_bytes: int) -> None:
        """Let ``topic``'s batches grow to half of its ``max.message.bytes`` at most
        (and ``batch_max_size``): the broker refuses a bigger batch whole
        (MESSAGE_TOO_LARGE), and a compressed batch may come out somewhat larger than
        its estimate."""
        self.growth_caps[topic] = max(self.batch_size,
                                      min(self.batch_max_size, max_message_bytes // 2))

    def _compressed_limit(self, tp: TopicPartition) -> int:
        target = self.batch_targets.get(tp, self.batch_size)
        budget = self.ratios.records_budget(tp[0], target, BATCH_HEADER_SIZE)
        return min(BATCH_HEADER_SIZE + budget, max(self.max_compressed_batch, target))

    def batch_taken(self, batch: ProducerBatch, now: float | None = None) -> None:
        """Adapt the partition's batch size to its rate (KIP-782's expandable batches,
        and smaller batches for sparse partitions when memory is short).

        A batch that filled up before the Sender took it means records arrive faster
        than batches go out: the partition's next batch is twice as large, up to
        ``batch_size`` at once, then up to ``batch_max_size`` and half the topic's
        ``max.message.bytes`` (asked of the broker the first time; no growth until it
        is known, or if it cannot be known), while at least half of ``buffer_memory``
        is free (under memory pressure batches stay small, so that many partitions can
        share it). A batch taken less than half full after it waited ``linger_ms``
        (``now``: monotonic time of the drain) halves the target again, down to
        ``batch_size``; and while more than half of ``buffer_memory`` is in use, one
        taken a quarter full or less sets it below ``batch_size``: twice what the
        batch held, at least :data:`MIN_BATCH_TARGET` (also before its linger, while
        sends wait for memory: the drain then takes every batch at once). A partition
        that gets a few records per linger then holds a block of its size, not
        ``batch_size``: with thousands of such partitions, ``batch_size`` blocks of a
        record or two each fill ``buffer_memory`` and every send waits for memory
        (Java's producer has that limit; librdkafka, which buffers per record, has
        not). One taken earlier, along with a full batch of another partition of the same node (the
        drain takes every partition's first batch), says nothing about its rate and
        leaves the target as it is. Bigger batches mean fewer Produce requests for the
        same records, which is where a busy partition's time goes.
        """
        tp = batch.tp
        base = self.batch_size
        target = self.batch_targets.get(tp, base)
        if batch.full:
            if target < base:
                target *= 2
                if target >= base:
                    del self.batch_targets[tp]
                else:
                    self.batch_targets[tp] = target
                return
            if self.batch_max_size <= base:
                return
            cap = self.growth_caps.get(tp[0])
            if cap is None:
                self.learn_growth_cap(tp[0])
            elif target < cap and not self._memory_short():
                self.batch_targets[tp] = min(target * 2, cap)
            return
        starved = self.memory.waiters > 0
        if now is not None and now - batch.created < self.linger and not starved:
            return
        used = int(batch.builder.size_in_bytes)
        if target > base:
            if used * 2 < target:
                target //= 2
                if target <= base:
                    del self.batch_targets[tp]
                else:
                    self.batch_targets[tp] = target
        elif used * 4 <= target and target > MIN_BATCH_TARGET and (
                starved or self._memory_short()):
            small = MIN_BATCH_TARGET
            while small < used * 2:
                small *= 2
            if small < target:
                self.batch_targets[tp] = small

    def _memory_short(self) -> bool:
        """More than half of ``buffer_memory`` is in use."""
        return self.pool.available_memory * 2 < self.pool.total_memory

    def batch_closed(self, batch: ProducerBatch) -> None:
        """Learn the topic's compression ratio from a batch that was just closed."""
        b = batch.builder
        if self.codec and b.records_size:
            if self.offload is not None and b.compress_ns \
                    and b.records_size >= self.offload.min_bytes:
                # Compressed on the loop: what the codec costs on this data, for the
                # compression thread's choice of the batches worth handing over.
                self.offload.observe(b.records_size, b.compress_ns)
            if b.compression:
                self.ratios.observe(batch.topic, b.records_size,
                                    b.size_in_bytes - BATCH_HEADER_SIZE)
            else:  # did not fit compressed: the data does not compress
                self.ratios.observe(batch.topic, b.records_size, b.records_size + 1)

    @property
    def memory_waiters(self) -> int:
        """Sends waiting for memory now."""
        return self.memory.waiters

    # -- completion --------------------------------------------------------------

    def complete(self, batch: ProducerBatch, base_offset: int, log_append_time: int,
                 error: BaseException | None) -> None:
        """Finish a batch (success or failure), give its memory back, wake waiters."""
        if batch not in self.incomplete:
            return
        batch.full = True  # never appended to again: its block goes back to the pool
        batch.base_offset = base_offset
        batch.log_append_time = log_append_time
        batch.error = error
        self.deallocate(batch)
        self.incomplete.discard(batch)
        self._resolve(batch)
        # A split batch is done once all of its pieces are: its records' futures
        # resolve through the pieces.
        while batch.parent is not None and batch.child_done():
            batch = batch.parent
            self._resolve(batch)

    def _resolve(self, batch: ProducerBatch) -> None:
        """Set the batch's ``result`` and wake its waiters (only ever done here; a
        user cannot reach it), then let it hold one done future shared by all completed
        batches instead of its own. A record future the application keeps holds its
        batch, and the batch held its future, builder and block: objects that the cycle
        collector counted and walked until the application let go (with one record per
        batch, as with linger 0, the collections they caused showed in the tail
        latency). Its builder forgot its block in :meth:`deallocate`; only the batch
        itself is left."""
        if batch.result.done():
            return
        batch.result.set_result(None)
        batch.settled = True  # the native side's C-level "result is done"
        batch.wake_waiters()
        settled = self._settled
        if settled is None:
            settled = self._settled = batch.result.get_loop().create_future()
            settled.set_result(None)
        batch.result = settled

    def deallocate(self, batch: ProducerBatch) -> None:
        block = batch.block
        if block is not None:
            batch.block = None
            self.memory.release(block)  # (before detach(): the block must be free)
            batch.builder.detach()

    def split(self, batch: ProducerBatch, loop: asyncio.AbstractEventLoop
              ) -> list[ProducerBatch]:
        """Re-encode a closed batch that the broker found too large into pieces of
        ``batch_size``, in order, and queue them in its place (Java's
        ``splitAndReenqueue``).

        The pieces keep the batch's producer id and epoch, and its sequences run on
        through them, so the broker sees exactly the records it refused, in the same
        order. Their memory is taken outside ``buffer_memory`` (the refused batch's
        block is given back first): a split must not wait for memory. The topic's
        compression ratio estimate starts over from what this batch achieved. A
        split does not count as a retry.
        """
        b = batch.builder
        if self.codec and b.records_size:
            self.ratios.reset(batch.topic, (b.size_in_bytes - BATCH_HEADER_SIZE) / b.records_size)
        with b.view() as view:
            records = list(records_of_batch(view))
        # Pieces of batch_size, and at most half the refused batch: a batch that
        # already fit in batch_size is refused again whole, so each split must make
        # progress (down to one record, which then fails with the broker's error).
        target = min(self.batch_size, BATCH_HEADER_SIZE + max(1, b.records_size // 2))
        pieces: list[ProducerBatch] = []
        piece: ProducerBatch | None = None
        for ts, key, value, headers in records:
            if piece is not None and piece.builder.append(ts, key, value, headers) >= 0:
                continue
            need = BATCH_HEADER_SIZE + record_size_upper_bound(
                -1 if key is None else len(key), -1 if value is None else len(value), headers)
            size = max(target, need)
            if self.codec:
                size += _codec_slack(size)
            block = self.memory.outside(size)
            piece = ProducerBatch(batch.tp, block, loop.create_future(), batch.created)
            if self.codec:
                piece.builder.set_compression(self.codec, self.compressor, max(target, need))
            if piece.builder.append(ts, key, value, headers) < 0:
                raise AssertionError("a record does not fit a split piece sized for it")
            piece.full = True
            piece.attempts = batch.attempts
            piece.last_error = batch.last_error
            pieces.append(piece)
            if need > target:
                # A record over the target goes alone: the slack of its size bound
                # must not take the next record too, or a batch of one big and one
                # small record would come back whole, and split for ever.
                piece = None
        if batch.base_sequence >= 0:
            seq = batch.base_sequence
            for p in pieces:
                p.producer_id, p.producer_epoch = batch.producer_id, batch.producer_epoch
                p.base_sequence = seq
                seq = (seq + p.record_count) % 2**31
        batch.set_children(pieces)
        self.incomplete.discard(batch)
        self.incomplete.update(pieces)
        self.deallocate(batch)
        dq = self.batches.setdefault(batch.tp, deque())
        for p in reversed(pieces):
            dq.appendleft(p)
        if batch.base_sequence >= 0:
            _sort_head_by_sequence(dq)
        return pieces

    # -- Sender side -------------------------------------------------------------

    def has_queued(self) -> bool:
        """Whether any batch waits to be sent (queued, not in flight)."""
        return any(self.batches.values())

    def queued_elsewhere(self, tp: TopicPartition) -> bool:
        """Whether a partition other than ``tp`` has a batch queued."""
        return any(dq and other != tp for other, dq in self.batches.items())

    def queued_before(self, tp: TopicPartition, sequence: int) -> bool:
        """Whether a batch of ``tp`` with a sequence below ``sequence`` is queued (a
        retry the broker must see first)."""
        dq = self.batches.get(tp)
        return bool(dq) and any(0 <= x.base_sequence < sequence for x in dq or ())

    def take_queued(self, leaders: Mapping[TopicPartition, int], node: int
                    ) -> list[ProducerBatch]:
        """Take every queued batch of the partitions ``node`` leads (to fail them: the
        node refused our authentication)."""
        out: list[ProducerBatch] = []
        for tp, dq in self.batches.items():
            if dq and leaders.get(tp) == node:
                out.extend(dq)
                dq.clear()
        return out

    def topics_in_use(self) -> set[str]:
        """Topics with records buffered (queued or in flight)."""
        busy = {b.topic for b in self.incomplete}
        busy.update(tp[0] for tp, dq in self.batches.items() if dq)
        return busy

    def queued_topics(self) -> set[str]:
        """Topics with batches queued."""
        return {tp[0] for tp, dq in self.batches.items() if dq}

    def oldest_queued(self) -> float | None:
        """Creation time of the oldest batch still queued (heads of the deques)."""
        heads = [dq[0].created for dq in self.batches.values() if dq]
        return min(heads) if heads else None

    def _send_now(self) -> bool:
        """Every queued batch is sendable, lingering or not: sends wait for memory,
        or the producer flushes or closes."""
        return self.memory.waiters > 0 or self.closing or self.flushes_in_progress > 0

    def lingers(self, batch: ProducerBatch) -> bool:
        """Whether ``batch``, just opened, only waits for ``linger_ms``: it is its
        partition's one queued batch (none before it became full), not full itself,
        and nothing makes queued batches sendable at once (see :meth:`ready`). A
        Sender pass before its linger ends finds nothing new to send."""
        dq = self.batches.get(batch.tp)
        return (not batch.full and dq is not None and len(dq) == 1
                and not self._send_now())

    def ready(self, cluster: Cluster, now: float, muted: AbstractSet[TopicPartition],
              flying: Mapping[TopicPartition, Sized] | None = None) -> ReadyResult:
        """Leaders that have at least one sendable batch, and when to look again.

        ``flying``: the partitions' batches in flight. A partition's only queued batch,
        not full, waits while the partition has a request in flight (see
        :func:`_held`); the response wakes the Sender.
        """
        res = ReadyResult()
        send_now = self._send_now()
        hurried = self.hurried
        offload = self.offload
        # Kept for topic_backlog(), which the partitioner asks when it moves a sticky
        # partition (adaptive partitioning, KIP-794).
        self._last_cluster = cluster
        self._flying = flying
        for tp, dq in self.batches.items():
            if not dq:
                continue
            leader = cluster.leaders.get(tp)
            if leader is None:
                res.unknown_leaders = True
                continue
            if leader in res.nodes or tp in muted:
                continue
            batch = dq[0]
            if batch.attempts > 0 and now < batch.next_attempt:
                res.next_check = min(res.next_check, batch.next_attempt - now)
                continue
            waited = now - batch.created
            if send_now or batch.full or len(dq) > 1 or waited >= self.linger \
                    or (hurried and self._is_hurried(tp)):
                if batch.full and offload is not None and batch.builder.compressing:
                    continue  # the thread's pipe wakes the Sender when it is done
                if not _held(tp, batch, dq, flying):
                    res.nodes.add(leader)
            else:
                res.next_check = min(res.next_check, self.linger - waited)
        return res

    def _queue_stats(self, q: tuple[list[int], list[int], list[int]], tp: TopicPartition,
                     dq: Sized, cluster: Cluster, sink: LoadStatsSink,
                     flying: Mapping[TopicPartition, Sized] | None) -> None:
        """One partition's entry in its topic's load statistics (Java's
        ``partitionReady``): its batches not yet acknowledged (queued here, and in
        flight: with up to ``max_in_flight_requests_per_connection`` requests
        pipelined, a slow broker's backlog waits in flight more than here) if its
        leader is known and has been draining, else it is left out (``q[2]`` counts
        the partitions seen)."""
        q[2].append(tp[1])
        leader = cluster.leaders.get(tp)
        if leader is None:
            return
        timeout = sink.availability_timeout_ms
        if timeout > 0:
            ready_at = self.node_ready_at.get(leader)
            if ready_at is not None and \
                    (ready_at - self.node_drained_at.get(leader, ready_at)) * 1000 > timeout:
                return
        inflight = flying.get(tp) if flying is not None else None
        q[0].append(len(dq) + (len(inflight) if inflight is not None else 0))
        q[1].append(tp[1])

    def topic_backlog(self, topic: str) -> tuple[list[int], list[int], int] | None:
        """The topic's load statistics now (as :meth:`ready` reports them), for the
        partitioner when it moves a sticky partition: between two Sender passes a
        tight loop of sends can move it many times. None until every partition of the
        topic has had a batch, or before the first Sender pass."""
        cluster = self._last_cluster
        sink = self.load_stats
        if cluster is None or sink is None:
            return None
        info = cluster.topics.get(topic)
        if info is None:
            return None
        q: tuple[list[int], list[int], list[int]] = ([], [], [])
        for p in info.partitions:
            tp = (topic, p.partition)
            dq = self.batches.get(tp)
            if dq is None:
                return None
            self._queue_stats(q, tp, dq, cluster, sink, self._flying)
        sizes, ids, seen = q
        missing = sorted(set(seen) - set(ids))
        return sizes + [0] * len(missing), ids + missing, len(ids)

    def node_polled(self, node: int, now: float, can_drain: bool) -> None:
        """The Sender found ``node`` with batches ready; ``can_drain``: it could take
        them (Java's ``updateNodeLatencyStats``, for
        ``partitioner_availability_timeout_ms``)."""
        sink = self.load_stats
        if sink is None or sink.availability_timeout_ms <= 0:
            return
        if can_drain or node not in self.node_drained_at:
            self.node_drained_at[node] = now
        self.node_ready_at[node] = now

    def drain(self, cluster: Cluster, nodes: Iterable[int], max_request_size: int,
              now: float, muted: AbstractSet[TopicPartition],
              may_send: Callable[[ProducerBatch], bool] | None = None,
              flying: Mapping[TopicPartition, Sized] | None = None,
              ) -> dict[int, list[ProducerBatch]]:
        """Take sendable batches per node, up to ``max_request_size`` each, fairly.

        ``may_send(batch) -> bool`` lets idempotence hold back a batch (sequence order).
        """
        out: dict[int, list[ProducerBatch]] = {}
        by_node: dict[int, list[TopicPartition]] = {}
        leaders = cluster.leaders
        offload = self.offload
        # The partitions with queued batches (as ready() walks them), not every
        # partition the metadata knows: a pass costs O(queued), not O(cluster).
        for tp, dq in self.batches.items():
            if dq:
                leader = leaders.get(tp)
                if leader is not None:
                    by_node.setdefault(leader, []).append(tp)
        for node in nodes:
            tps = by_node.get(node)
            if not tps:
                continue
            size = 0
            ready: list[ProducerBatch] = []
            start = self._drain_index % len(tps)
            for i in range(len(tps)):
                tp = tps[(start + i) % len(tps)]
                if tp in muted:
                    continue
                dq = self.batches[tp]
                if not dq:
                    continue
                batch = dq[0]
                if batch.attempts > 0 and now < batch.next_attempt:
                    continue
                if batch.record_count == 0 or _held(tp, batch, dq, flying):
                    continue
                if batch.full and offload is not None and batch.builder.compressing:
                    continue
                if may_send is not None and not may_send(batch):
                    continue
                batch_bytes = int(batch.builder.size_in_bytes)
                if ready and size + batch_bytes > max_request_size:
                    break
                self.take(batch, now)
                size += batch_bytes
                ready.append(batch)
            self._drain_index += 1
            if ready:
                out[node] = ready
        return out

    def take(self, batch: ProducerBatch, now: float) -> None:
        """Take ``batch``, the head of its partition's deque, for a request."""
        tp = batch.tp
        self.batches[tp].popleft()
        if self.hurried and self.hurried.get(tp) is batch:
            del self.hurried[tp]
        if batch.attempts == 0:
            self.batch_taken(batch, now)
        batch.full = True  # closed for appends from now on, even if re-enqueued

    def reenqueue(self, batch: ProducerBatch, now: float, *, escalate: bool = True) -> None:
        """Put a batch back at the head of its deque for a retry, in sequence order.

        The retry waits ``retry_backoff_ms``, doubling with each attempt up to
        ``retry_backoff_max_ms`` (KIP-580, with jitter); ``escalate=False`` keeps it at
        ``retry_backoff_ms`` (with jitter) whatever the attempts, for a batch the
        broker refused because it does not lead the partition yet (see the Sender)."""
        batch.attempts += 1
        batch.next_attempt = now + self.retry_backoff_policy.backoff_s(
            batch.attempts - 1 if escalate else 0)
        dq = self.batches.setdefault(batch.tp, deque())
        dq.appendleft(batch)
        if batch.base_sequence >= 0:
            # Keep idempotent batches ordered by sequence among the retried ones.
            _sort_head_by_sequence(dq)

    def resize_routes(self, counts: Mapping[str, int]) -> None:
        """Topics' partition counts changed (a metadata refresh): their routes follow
        in the same step, so keyed records move to murmur2(key) % n for the new n on
        the native path and the Python path at once. Topics without a route (none
        sent to yet, or expired) get none."""
        appender = self.appender
        for topic, n in counts.items():
            if appender.route(topic) is not None:
                appender.set_route(topic, n)

    def forget_topic(self, topic: str) -> None:
        """Drop a topic's per-topic state (it expired from the metadata, with nothing
        buffered or in flight): its route in the native appender, its empty deques,
        batch size targets, growth cap and compression ratio estimate."""
        self.appender.drop_route(topic)
        for table in (self.batches, self.batch_targets):
            for tp in [tp for tp in table if tp[0] == topic]:
                if not self.batches.get(tp):  # never drop a queued batch
                    del table[tp]
        self.growth_caps.pop(topic, None)
        self.ratios.forget(topic)

    def expired(self, now: float) -> list[ProducerBatch]:
        """Queued batches whose delivery timeout has passed (removed from the deques).

        Once a partition's head batch expires, the batches behind it (created later)
        are checked in order too, so records are never reordered around a failure.
        """
        out: list[ProducerBatch] = []
        for dq in self.batches.values():
            while dq and now - dq[0].created >= self.delivery_timeout:
                out.append(dq.popleft())
        return out

    def abort_undrained(self, error: KafkaError) -> list[ProducerBatch]:
        """Fail every batch still queued (not in flight); returns them."""
        out: list[ProducerBatch] = []
        for dq in self.batches.values():
            while dq:
                batch = dq.popleft()
                out.append(batch)
                self.complete(batch, -1, -1, error)
        return out

    def abort_all(self, error: KafkaError) -> int:
        """Fail every batch not yet completed (queued or in flight); returns records failed."""
        count = 0
        for dq in self.batches.values():
            dq.clear()
        for batch in list(self.incomplete):
            count += batch.record_count
            self.complete(batch, -1, -1, error)
        return count
