"""The idempotence bookkeeping (``producer_id.py``) without a broker: what happens to a
partition's batches when its epoch runs out (32,767 local bumps), as Java's
``resetIdempotentProducerId``: they move to the new producer id as soon as it comes."""

from __future__ import annotations

from typing import Any

import pytest

from aioproducer._native import BufferPool, ProducerBatch
from aioproducer.config import ProducerConfig
from aioproducer.producer_id import ProducerIdManager

TP = ("t", 0)
MAX_EPOCH = 2**15 - 1


class _Answer:
    def __init__(self, producer_id: int, epoch: int) -> None:
        self.error_code = 0
        self.producer_id = producer_id
        self.producer_epoch = epoch


class _Conn:
    def __init__(self, answers: list[tuple[int, int]]) -> None:
        self.answers = answers
        self.requests = 0

    def version_for(self, api: int, lo: int, hi: int) -> int:
        return 4

    async def request(self, request: Any, response_type: Any) -> _Answer:
        self.requests += 1
        return _Answer(*self.answers.pop(0))


class _Client:
    def __init__(self, conn: _Conn) -> None:
        self.conn = conn

    def least_loaded_node(self) -> int:
        return 0

    async def connect(self, node: int, timeout: float) -> _Conn:
        return self.conn


def _batches(pool: BufferPool, n: int, records: int = 2) -> list[ProducerBatch]:
    out = []
    for i in range(n):
        block = pool.try_allocate(1024)
        assert block is not None
        b = ProducerBatch(TP, block, None, 0.0)
        for r in range(records):
            assert b.builder.append(0, None, b"v%d-%d" % (i, r), None) >= 0
        out.append(b)
    return out


@pytest.mark.asyncio
async def test_batches_after_a_gap_move_to_the_new_producer_id_when_the_epoch_runs_out(
        ) -> None:
    conn = _Conn([(100, 0), (200, 0)])
    pid = ProducerIdManager(_Client(conn), ProducerConfig.from_options(None))  # type: ignore[arg-type]
    await pid.init(0.0)
    assert (pid.producer_id, pid.epoch, pid.ready) == (100, 0, True)
    pool = BufferPool(1 << 16, 1024)
    first, gap, after, later = _batches(pool, 4)
    for b in (first, gap, after, later):
        pid.assign_sequence(b)
    # The partition is at the last epoch (as after 32,767 local bumps).
    entry = pid.partitions[TP]
    entry.epoch = MAX_EPOCH
    for b in (first, gap, after, later):
        b.producer_epoch = MAX_EPOCH
    pid.acknowledged(first)
    pid.failed(gap, written=False)  # refused: a gap at sequence 2
    assert pid.waits_for_bump(after) and pid.waits_for_bump(later)
    assert pid.bump_ready({}) == []
    assert pid.ready is False  # a new producer id is wanted
    assert pid.waits_for_bump(after)  # nothing goes out under the spent epoch meanwhile
    assert not pid.may_assign(TP)
    assert pid.bump_ready({}) == []  # asked for once
    await pid.init(0.0)
    assert conn.requests == 2
    assert (pid.producer_id, pid.ready) == (200, True)
    assert [(b.producer_id, b.producer_epoch, b.base_sequence) for b in (after, later)] == [
        (200, 0, 0), (200, 0, 2)]
    assert not pid.waits_for_bump(after) and pid.first_incomplete(after)
    assert pid.may_assign(TP) and not pid.recovering
    nxt = _batches(pool, 1)[0]
    pid.assign_sequence(nxt)
    assert (nxt.producer_id, nxt.producer_epoch, nxt.base_sequence) == (200, 0, 4)


def test_a_local_bump_below_the_last_epoch_keeps_the_producer_id() -> None:
    pid = ProducerIdManager(None, ProducerConfig.from_options(None))  # type: ignore[arg-type]
    pid.producer_id, pid.epoch, pid.ready = 7, 0, True
    pool = BufferPool(1 << 16, 1024)
    gap, after = _batches(pool, 2)
    pid.assign_sequence(gap)
    pid.assign_sequence(after)
    pid.failed(gap, written=False)
    assert pid.bump_ready({}) == [TP]
    assert pid.ready
    assert (after.producer_id, after.producer_epoch, after.base_sequence) == (7, 1, 0)


