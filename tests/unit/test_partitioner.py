"""The partitioner without a broker: KIP-794's byte counting (native and Python paths
agree), the adaptive cumulative frequency table, and custom partitioners."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from aioproducer import ProducerConfig
from aioproducer._native import Appender, BufferPool, ProducerBatch
from aioproducer.compression import codec_id
from aioproducer.errors import ConfigError, PartitionError
from aioproducer.metadata import Cluster, PartitionInfo, TopicInfo
from aioproducer.partitioner import (
    Partitioner,
    RecordPartitioner,
    cumulative_frequency_table,
    is_partitioner_object,
)

BLOCK = 1 << 14
SEED = 20261125


def topic_info(name: str, n: int, leaderless: tuple[int, ...] = ()) -> TopicInfo:
    parts = tuple(PartitionInfo(p, -1 if p in leaderless else p % 3) for p in range(n))
    return TopicInfo(name, parts, None, tuple(p for p in range(n) if p not in leaderless))


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    lp = asyncio.new_event_loop()
    yield lp
    lp.close()


def open_batch(app: Appender, pool: BufferPool, topic: str, p: int,
               loop: asyncio.AbstractEventLoop) -> ProducerBatch:
    route = app.route(topic)
    assert route is not None
    block = pool.try_allocate(BLOCK)
    assert block is not None
    batch = ProducerBatch((topic, p), block, loop.create_future(), 0.0)
    route.tails[p] = batch
    return batch


# -- the adaptive table ------------------------------------------------------------------


def test_cumulative_frequency_table_is_javas() -> None:
    # Java's example: queues 0 3 1 -> inverted 4 1 3 -> running sums 4 5 8.
    assert cumulative_frequency_table([0, 3, 1], 3) == [4, 5, 8]
    # equal queues and nobody left out: uniform (no table)
    assert cumulative_frequency_table([2, 2, 2], 3) is None
    # equal queues but a partition left out (availability timeout): a table
    assert cumulative_frequency_table([2, 2, 0], 2) == [1, 2]
    # fewer than two partitions, or none available
    assert cumulative_frequency_table([5], 1) is None
    assert cumulative_frequency_table([1, 2], 0) is None


def test_weighted_choice_follows_the_queues() -> None:
    print("seed", SEED)
    part = RecordPartitioner("murmur2", seed=SEED)
    info = topic_info("t", 4)
    # queued batches per partition 3: [0, 3, 1, 7] -> weights 8, 5, 7, 1 (sum 21)
    part.update_load_stats("t", [0, 3, 1, 7], [0, 1, 2, 3], 4)
    draws = 84_000
    counts = Counter(part.next_partition("t", info) for _ in range(draws))
    for p, weight in enumerate((8, 5, 7, 1)):
        expected = draws * weight / 21
        assert abs(counts[p] - expected) < 0.03 * expected, (p, counts)
    # The same seed gives the same draws.
    again = RecordPartitioner("murmur2", seed=SEED)
    again.update_load_stats("t", [0, 3, 1, 7], [0, 1, 2, 3], 4)
    assert Counter(again.next_partition("t", info) for _ in range(draws)) == counts


def test_partitions_left_out_are_never_chosen() -> None:
    part = RecordPartitioner("murmur2", seed=SEED)
    info = topic_info("t", 3)
    # partition 1 left out (its leader stopped draining): the first `length` ids count
    part.update_load_stats("t", [4, 0, 0], [0, 2, 1], 2)
    counts = Counter(part.next_partition("t", info) for _ in range(10_000))
    assert counts[1] == 0
    assert counts[2] > 4 * counts[0]  # weights 5 and 1
    # no statistics (e.g. adaptive off): uniform over the partitions with a leader
    part.update_load_stats("t", None, None, 0)
    counts = Counter(part.next_partition("t", topic_info("t", 3, leaderless=(0,)))
                     for _ in range(9_000))
    assert counts[0] == 0 and min(counts[1], counts[2]) > 4000


def test_adaptive_off_ignores_the_queues() -> None:
    part = RecordPartitioner("murmur2", adaptive=False, seed=SEED)
    part.update_load_stats("t", [0, 50], [0, 1], 2)
    assert part.load_stats("t") is None
    counts = Counter(part.next_partition("t", topic_info("t", 2)) for _ in range(10_000))
    assert abs(counts[0] - counts[1]) < 500


# -- KIP-794: switch after batch_size bytes, the native and the Python path agree ----------


def test_native_path_counts_bytes_and_leaves_the_switch_to_python(
        loop: asyncio.AbstractEventLoop) -> None:
    pool = BufferPool(16 * BLOCK, BLOCK)
    part = RecordPartitioner("murmur2", batch_size=1000, seed=SEED)
    app = part.appender
    info = topic_info("t", 4)
    first = part.sticky("t", info)
    batch = open_batch(app, pool, "t", first, loop)
    route = app.route("t")
    assert route is not None and route.sticky == first and route.sticky_limit == 1000
    values: list[Any] = [b"v" * 90] * 40
    before = int(batch.builder.size_in_bytes)
    stop = app.append_many("t", values, None, 0, None, 1, [])
    grown = int(batch.builder.size_in_bytes) - before
    assert route.sticky_bytes == grown  # every appended byte counted
    # The batch's block (16 KiB, as a batch grown past batch_size has) is not full,
    # but the batch holds batch_size bytes, which is Java's full batch: the native path
    # stops there and leaves the record to Python (enableSwitch).
    assert 1000 <= route.sticky_bytes < 1000 + 120 and 0 < stop < 40
    assert int(batch.builder.size_in_bytes) >= 1000
    assert route.switch_due()
    # The Python path sees the same and moves the sticky partition.
    nxt = part.sticky("t", info)
    assert route.sticky == nxt and route.sticky_bytes == 0
    # Keyed records (hashed) and explicit partitions do not count.
    route.sticky = first
    app.append_many("t", [b"k"] * 3, [b"a", b"b", b"c"], 0, None, 1, [])
    app.append_many("t", [b"x"] * 3, None, 0, first, 1, [])
    assert route.sticky_bytes == 0


def test_switch_when_the_batch_is_full_past_batch_size(
        loop: asyncio.AbstractEventLoop) -> None:
    pool = BufferPool(16 * BLOCK, BLOCK)
    part = RecordPartitioner("murmur2", batch_size=1000, seed=SEED)
    app = part.appender
    info = topic_info("t", 3)
    first = part.sticky("t", info)
    batch = open_batch(app, pool, "t", first, loop)
    route = app.route("t")
    assert route is not None
    app.append_many("t", [b"v" * 90] * 5, None, 0, None, 1, [])
    # batch_size bytes went to the partition this stay (some into batches already
    # sent), but its open batch holds less and takes more: no switch yet.
    route.sticky_bytes = 1500
    assert int(batch.builder.size_in_bytes) < 1000 and not route.switch_due()
    batch.full = True  # drained, or no room for the next record
    assert route.switch_due()
    assert app.append_many("t", [b"v"], None, 0, None, 1, []) == 0  # left to Python
    part.sticky("t", info)
    assert route.sticky_bytes == 0
    # Below batch_size a full batch does not move it: a new batch opens there.
    route.sticky, route.sticky_bytes = first, 999
    assert not route.switch_due()
    # Python's byte count (on_appended) is the same counter.
    part.on_appended("t", first, 1)
    assert route.sticky_bytes == 1000 and route.switch_due()
    part.on_appended("t", (first + 1) % 3, 500)  # not the sticky partition: ignored
    assert route.sticky_bytes == 1000
    # Twice batch_size bytes: a switch even though the open batch takes more.
    route.sticky = first
    route.tails[first] = open_batch(app, pool, "t", first, loop)
    route.sticky_bytes = 1999
    assert not route.switch_due()
    route.sticky_bytes = 2000
    assert route.switch_due()


def test_a_grown_batch_does_not_lengthen_the_stay(loop: asyncio.AbstractEventLoop) -> None:
    """A backlogged partition's batches grow past batch_size (batch_max_size): its stay
    still ends after batch_size bytes, like every other partition's, so that the
    adaptive weights decide the shares. (It went on to twice batch_size, giving the
    slow broker's partitions twice the records per stay.) A compressed batch's
    uncompressed bytes do not count: it holds batch_size bytes after compression."""
    pool = BufferPool(16 * BLOCK, BLOCK)
    part = RecordPartitioner("murmur2", batch_size=1000, seed=SEED)
    app = part.appender
    info = topic_info("t", 3)
    first = part.sticky("t", info)
    batch = open_batch(app, pool, "t", first, loop)  # 16 KiB: room for 2,000 bytes
    route = app.route("t")
    assert route is not None
    stop = app.append_many("t", [b"v" * 90] * 30, None, 0, None, 1, [])
    assert stop < 30 and 1000 <= route.sticky_bytes < 1100 and route.switch_due()
    assert not batch.full  # left open: the next stay here appends to it
    # Compressed: only the byte count's twice-batch_size rule moves it.
    part.sticky("t", info)
    second = route.sticky
    compressed = ProducerBatch(("t", second), pool.try_allocate(BLOCK),
                               loop.create_future(), 0.0)
    compressed.builder.set_compression(codec_id("gzip"), lambda b: bytes(b))
    route.tails[second] = compressed
    app.append_many("t", [b"v" * 90] * 11, None, 0, None, 1, [])
    assert int(compressed.builder.size_in_bytes) >= 1000 and not route.switch_due()
    route.sticky_bytes = 2000
    assert route.switch_due()


def test_one_partition_never_moves_its_sticky_partition(
        loop: asyncio.AbstractEventLoop) -> None:
    """With one partition a move could only pick it again: keyless records stay on the
    native path past batch_size (and twice it), instead of a Python-path detour every
    batch_size bytes."""
    pool = BufferPool(16 * BLOCK, BLOCK)
    part = RecordPartitioner("murmur2", batch_size=1000, seed=SEED)
    app = part.appender
    info = topic_info("t", 1)
    assert part.sticky("t", info) == 0
    open_batch(app, pool, "t", 0, loop)
    route = app.route("t")
    assert route is not None
    assert app.append_many("t", [b"v" * 90] * 100, None, 0, None, 1, []) == 100
    assert route.sticky_bytes > 2 * 1000 and not route.switch_due()
    route.tails[0].full = True
    assert not route.switch_due()  # (the new batch opens there)


def test_uniform_spread_of_keyless_bytes() -> None:
    # Without load statistics, each stay gets the same bytes and the partitions are
    # drawn uniformly: over many stays every partition gets about the same share.
    part = RecordPartitioner("murmur2", batch_size=1000, seed=SEED)
    info = topic_info("t", 5)
    got: Counter[int] = Counter()
    for _ in range(20_000):
        p = part.sticky("t", info)
        part.on_appended("t", p, 100)
        got[p] += 1
    assert min(got.values()) > 0.9 * 4000 and max(got.values()) < 1.1 * 4000


# -- custom partitioners ------------------------------------------------------------------


class ByValue:
    def __init__(self) -> None:
        self.new_batches: list[tuple[str, int]] = []
        self.closed = 0

    def partition(self, topic: str, key: Any, key_bytes: bytes | None, value: Any,
                  value_bytes: bytes | None, cluster: Cluster) -> int:
        available = cluster.topics[topic].available
        assert value_bytes is not None
        return available[value_bytes[0] % len(available)]

    def on_new_batch(self, topic: str, cluster: Cluster, prev_partition: int) -> None:
        self.new_batches.append((topic, prev_partition))

    def close(self) -> None:
        self.closed += 1


def test_partitioner_objects_and_functions() -> None:
    obj = ByValue()
    assert isinstance(obj, Partitioner) and is_partitioner_object(obj)
    assert not is_partitioner_object(lambda t, k, n: 0)
    part = RecordPartitioner(obj)
    assert not part.fast
    info = topic_info("t", 4, leaderless=(1,))
    assert part.partition("t", None, None, info, value=b"\x01") == 2  # available: 0, 2, 3
    assert part.partition("t", None, 3, info, value=b"\x01") == 3     # explicit wins
    hook = part.new_batch_hook("t", None, None, value=b"\x02", info=info)
    assert hook is not None
    assert hook.on_new_batch("t", info, 2) == 3
    assert obj.new_batches == [("t", 2)]
    part.close()
    assert obj.closed == 1
    # The old form: (topic, key_bytes, num_partitions).
    old = RecordPartitioner(lambda topic, key, n: n - 1)
    assert old.partition("t", b"k", None, info) == 3
    with pytest.raises(PartitionError, match="returned 9"):
        RecordPartitioner(lambda topic, key, n: 9).partition("t", b"k", None, info)
    with pytest.raises(ConfigError, match="key_bytes, num_partitions"):
        RecordPartitioner(lambda topic: 0)  # type: ignore[arg-type]


def test_config_options() -> None:
    c = ProducerConfig.from_options(None, **{
        "partitioner.adaptive.partitioning.enable": "false",
        "partitioner.availability.timeout.ms": "250", "partitioner.class": ByValue()})
    assert c.partitioner_adaptive_partitioning_enable is False
    assert c.partitioner_availability_timeout_ms == 250
    assert isinstance(c.partitioner, ByValue)
    assert ProducerConfig().partitioner_adaptive_partitioning_enable is True
    assert ProducerConfig().partitioner_availability_timeout_ms == 0
    with pytest.raises(ConfigError, match="partitioner_availability_timeout_ms"):
        ProducerConfig(partitioner_availability_timeout_ms=-1).validated()
    with pytest.raises(ConfigError, match="partitioner_adaptive_partitioning_enable"):
        ProducerConfig(partitioner_adaptive_partitioning_enable=1).validated()  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="partitioner must be"):
        ProducerConfig(partitioner=object()).validated()  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="partitioner must be"):
        ProducerConfig(partitioner="bogus").validated()  # str has a partition() method
