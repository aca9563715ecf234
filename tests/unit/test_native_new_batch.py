"""The native ``send()`` opening a partition's new batch (``Appender.opener``, wired to
``RecordAccumulator.open_now``): a record whose partition's open batch is full, drained
or absent no longer takes the Python path when nothing makes it wait. The tests drive
an Appender bound to the running loop over a real accumulator (no broker): which
records the opener takes, that it leaves every record that must wait or be decided in
Python to the Python path without changing anything, and that the batches and the
sticky partition's byte count (KIP-794) come out as the Python path makes them.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from aioproducer._native import Appender, ProducerBatch
from aioproducer.accumulator import RecordAccumulator
from aioproducer.errors import ProducerClosedError
from aioproducer.metadata import PartitionInfo, TopicInfo
from aioproducer.partitioner import RecordPartitioner

pytestmark = pytest.mark.asyncio

TOPIC = "t"


def _info(n: int) -> TopicInfo:
    return TopicInfo(TOPIC, tuple(PartitionInfo(p, 0) for p in range(n)))


class Rig:
    """An accumulator whose appender is hot on the running loop, with the opener
    wired as the producer wires it (minus the producer) and a Python path that
    records what reaches it."""

    def __init__(self, partitions: int = 1, *, buffer_memory: int = 1 << 20,
                 linger_ms: int = 0, batch_size: int = 1024, wire: bool = True) -> None:
        self.loop = asyncio.get_running_loop()
        self.appender: Any = Appender(True, False, -1, batch_size)
        self.acc = RecordAccumulator(
            batch_size=batch_size, batch_max_size=batch_size, buffer_memory=buffer_memory,
            linger_ms=linger_ms, retry_backoff_ms=100, retry_backoff_max_ms=1000,
            delivery_timeout_ms=120_000, appender=self.appender)
        self.partitioner = RecordPartitioner("murmur2", appender=self.appender,
                                             batch_size=batch_size)
        self.partitioner.seed(7)
        self.info = _info(partitions)
        self.appender.set_route(TOPIC, partitions)
        self.partitioner.sticky(TOPIC, self.info)  # the sticky partition is chosen
        self.appender.bind(self.loop)
        self.appender.hot = True
        self.opened: list[tuple[int, ProducerBatch | None]] = []
        self.slow_calls: list[tuple[Any, ...]] = []
        self.appender.slow = self.slow
        if wire:
            self.appender.opener = self.open_now

    def open_now(self, topic: str, partition: int, timestamp: int, key: bytes | None,
                 value: bytes | None) -> ProducerBatch | None:
        batch = self.acc.open_now(topic, len(self.info.partitions), partition, timestamp,
                                  key, value, self.loop)
        self.opened.append((partition, batch))
        return batch

    async def slow(self, *args: Any) -> Any:
        self.slow_calls.append(args)
        return None

    async def send(self, value: bytes, key: bytes | None = None,
                   partition: int | None = None) -> Any:
        return await self.appender.send(TOPIC, value, key, partition=partition,
                                        timestamp_ms=1_700_000_000_000)

    def take_all(self) -> None:
        """What a drain does to every queued batch: taken, so no longer open."""
        for dq in self.acc.batches.values():
            while dq:
                self.acc.take(dq[0], self.loop.time())


async def test_the_opener_takes_the_records_that_need_a_new_batch() -> None:
    rig = Rig(1)
    first = await rig.send(b"a")
    second = await rig.send(b"b")  # the open batch takes it: no opener
    assert [p for p, _ in rig.opened] == [0]
    assert first.batch is second.batch and (first.index, second.index) == (0, 1)
    assert rig.acc.tail((TOPIC, 0)) is first.batch
    assert list(rig.acc.batches[(TOPIC, 0)]) == [first.batch]
    assert first.batch in rig.acc.incomplete
    assert rig.acc.pool.total_memory - rig.acc.pool.available_memory == 1024
    rig.take_all()  # drained (linger 0): the next record needs a new batch
    third = await rig.send(b"c")
    assert [p for p, _ in rig.opened] == [0, 0]
    assert third.batch is not first.batch and third.index == 0
    assert third.batch.builder.record_count == 1
    assert rig.slow_calls == []


async def test_a_full_batch_gets_its_successor_from_the_opener() -> None:
    rig = Rig(1, batch_size=256)
    futures = [await rig.send(bytes([65 + i]) * 60) for i in range(8)]
    batches = list(rig.acc.batches[(TOPIC, 0)])
    assert len(batches) >= 2 and len(rig.opened) == len(batches)
    assert all(b is not None for _, b in rig.opened)
    assert [b for _, b in rig.opened] == batches
    assert all(b.full for b in batches[:-1]) and not batches[-1].full
    # Every record is where its future says, in order.
    assert [(batches.index(f.batch), f.index) for f in futures] == sorted(
        (batches.index(f.batch), f.index) for f in futures)
    assert sum(b.builder.record_count for b in batches) == 8


async def test_the_native_choice_of_partition_stands() -> None:
    """Keyed records (murmur2) and explicit partitions open their own partition's
    batch; the opener is asked for that partition."""
    rig = Rig(4)
    key = next(k for k in (b"key-%d" % i for i in range(100))
               if rig.partitioner.partition(TOPIC, k, None, rig.info) != 3)
    expected = rig.partitioner.partition(TOPIC, key, None, rig.info)
    keyed = await rig.send(b"v", key=key)
    explicit = await rig.send(b"v", partition=3)
    assert keyed.batch.partition == expected
    assert explicit.batch.partition == 3
    assert [p for p, _ in rig.opened] == [expected, 3]
    assert rig.slow_calls == []


async def test_sticky_bytes_count_as_on_the_python_path() -> None:
    """KIP-794: a keyless record that opens a batch counts the batch's size (header
    and record), as RecordAccumulator.append() counts it for the Python path."""
    native, python = Rig(3), Rig(3, wire=False)
    route_n, route_p = native.appender.route(TOPIC), python.appender.route(TOPIC)
    assert route_n.sticky == route_p.sticky  # (the same seed)
    fut = await native.send(b"x" * 50)
    assert fut.batch.partition == route_n.sticky
    # The Python path, as Producer._send_slow drives it:
    assert await python.send(b"x" * 50) is None and len(python.slow_calls) == 1
    part = python.partitioner.partition(TOPIC, None, None, python.info)
    res = await python.acc.append(
        TOPIC, python.info, part, 1_700_000_000_000, None, b"x" * 50, None, 70,
        sticky=python.partitioner.new_batch_hook(TOPIC, None, None), max_block_s=1.0)
    assert res.new_batch and res.batch.partition == part == fut.batch.partition
    assert route_n.sticky_bytes == route_p.sticky_bytes == fut.batch.builder.size_in_bytes
    await native.send(b"y" * 50)  # into the open batch: counted by the native append
    await python.send(b"y" * 50)
    assert route_n.sticky_bytes == fut.batch.builder.size_in_bytes


async def test_a_due_sticky_switch_is_left_to_the_python_path() -> None:
    """The sticky partition's batch fills with batch_size bytes produced to it: its
    switch is due (KIP-794), and moving it is the partitioner's, in Python."""
    rig = Rig(3, batch_size=256)
    route = rig.appender.route(TOPIC)
    stayed = route.sticky
    for i in range(20):
        await rig.send(bytes([65 + i]) * 60)
        if rig.slow_calls:
            break
    assert rig.slow_calls, "the switch never came"
    assert route.sticky_bytes >= 256
    assert route.sticky == stayed  # not moved natively
    assert all(p == stayed for p, _ in rig.opened)


@pytest.mark.parametrize("case", ["memory", "linger", "refusing", "count", "unbound"])
async def test_what_must_wait_or_be_decided_takes_the_python_path(case: str) -> None:
    """The opener declines (and changes nothing: no batch, no memory, no route) where
    RecordAccumulator.append() would suspend or decide: memory not free now, a
    partition with a batch queued under a linger (append() yields once), a producer
    refusing records, a partition count the metadata has changed; and an appender
    without an opener sends everything new to the Python path."""
    rig = Rig(2, buffer_memory=4096, linger_ms=5 if case == "linger" else 0,
              wire=case != "unbound")
    held = []
    if case == "memory":
        while (block := rig.acc.memory.allocate_now(1024)) is not None:
            held.append(block)
    if case == "linger":
        await rig.send(b"a", partition=0)
        rig.acc.tail((TOPIC, 0)).full = True  # full, still queued
    if case == "refusing":
        rig.acc.refuse_appends(ProducerClosedError("closing"))
    if case == "count":
        rig.info = _info(3)  # the metadata says 3, the route still 2
    del rig.opened[:]
    before_batches = {tp: list(dq) for tp, dq in rig.acc.batches.items()}
    before_free = rig.acc.pool.available_memory
    assert await rig.send(b"b", partition=0) is None  # the slow stub's result
    assert len(rig.slow_calls) == 1
    assert {tp: list(dq) for tp, dq in rig.acc.batches.items()} == before_batches
    assert rig.acc.pool.available_memory == before_free
    assert rig.appender.route(TOPIC).num_partitions == 2
    assert all(b is None for _, b in rig.opened)
    assert len(rig.opened) == (0 if case == "unbound" else 1)
    for block in held:
        rig.acc.memory.release(block)


async def test_a_cold_appender_never_calls_the_opener() -> None:
    """``hot`` off (tracing, interceptors, serializers, a transaction, closing): the
    opener is not consulted, even through append()."""
    rig = Rig(1)
    rig.appender.hot = False
    assert rig.appender.append(TOPIC, b"v", None, None, None) is None
    assert rig.opened == []
