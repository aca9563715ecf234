"""RecordAccumulator.append() opening new batches: without a wait for memory it
takes a block at once and opens the batch; after a wait it first tries the batch
another send may have opened meanwhile (and gives its block back)."""

from __future__ import annotations

import asyncio

import pytest

from aioproducer.accumulator import RecordAccumulator
from aioproducer.metadata import PartitionInfo, TopicInfo

pytestmark = pytest.mark.asyncio

TOPIC = "t"


def _info(n: int) -> TopicInfo:
    return TopicInfo(TOPIC, tuple(PartitionInfo(p, 0) for p in range(n)))


def _acc(buffer_memory: int) -> RecordAccumulator:
    return RecordAccumulator(batch_size=1024, batch_max_size=1024, buffer_memory=buffer_memory,
                             linger_ms=0, retry_backoff_ms=100, retry_backoff_max_ms=1000,
                             delivery_timeout_ms=120_000)


async def _append(acc: RecordAccumulator, info: TopicInfo, partition: int,
                  value: bytes) -> tuple[object, int, bool]:
    res = await acc.append(TOPIC, info, partition, 1, None, value, None, len(value) + 16,
                           sticky=None, max_block_s=5.0)
    return res.batch, res.index, res.new_batch


async def test_new_batches_without_a_wait() -> None:
    acc = _acc(1 << 20)
    info = _info(2)
    first = await _append(acc, info, 0, b"a" * 10)
    second = await _append(acc, info, 0, b"b" * 10)
    other = await _append(acc, info, 1, b"c" * 10)
    assert first[2] and not second[2] and other[2]
    assert second[0] is first[0] and second[1] == 1
    assert other[0] is not first[0]
    assert acc.tail((TOPIC, 0)) is first[0] and acc.tail((TOPIC, 1)) is other[0]
    assert [len(acc.batches[(TOPIC, p)]) for p in (0, 1)] == [1, 1]
    assert acc.pool.total_memory - acc.pool.available_memory == 2 * 1024


async def test_sends_that_waited_for_memory_share_the_batch_one_opened() -> None:
    acc = _acc(3 * 1024)
    info = _info(1)
    held = [acc.pool.try_allocate(1024) for _ in range(3)]
    tasks = [asyncio.create_task(_append(acc, info, 0, bytes([65 + i]) * 10))
             for i in range(3)]
    await asyncio.sleep(0.01)
    assert acc.memory_waiters == 3 and not acc.batches.get((TOPIC, 0))
    for block in held:
        assert block is not None
        acc.memory.release(block)
    results = await asyncio.gather(*tasks)
    assert [r[2] for r in results] == [True, False, False]  # FIFO: the first opens it
    assert all(r[0] is results[0][0] for r in results)
    assert [r[1] for r in results] == [0, 1, 2]
    assert len(acc.batches[(TOPIC, 0)]) == 1
    # The batch's block is in use; the blocks of the two others went back.
    assert acc.pool.total_memory - acc.pool.available_memory == 1024
