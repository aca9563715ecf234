"""RecordAccumulator.drain(): which batches a Sender pass takes, per leader.

It walks the partitions with queued batches (not every partition the metadata
knows), groups them by leader, and rotates its starting point between passes so
that a request size limit cannot starve a partition."""

from __future__ import annotations

import asyncio

from aioproducer._native import ProducerBatch
from aioproducer.accumulator import RecordAccumulator
from aioproducer.metadata import Cluster


def _accumulator() -> RecordAccumulator:
    return RecordAccumulator(batch_size=1024, batch_max_size=1024, buffer_memory=1 << 20,
                             linger_ms=0, retry_backoff_ms=100, retry_backoff_max_ms=1000,
                             delivery_timeout_ms=120_000)


def _queue(acc: RecordAccumulator, loop: asyncio.AbstractEventLoop,
           tp: tuple[str, int]) -> ProducerBatch:
    block = acc.pool.try_allocate(1024)
    assert block is not None
    batch = acc.new_batch(tp, block, loop)
    assert batch.builder.append(1, None, b"x" * 100) == 0
    return batch


def test_drain_takes_the_queued_partitions_of_each_leader() -> None:
    acc = _accumulator()
    loop = asyncio.new_event_loop()
    try:
        # 4,000 known partitions over 2 nodes; 5 of them have a batch queued, and one
        # queued partition has no leader.
        leaders = {(t, p): p % 2 for t in ("a", "b") for p in range(2000)}
        cluster = Cluster(leaders=leaders)
        queued = [("a", 3), ("a", 10), ("b", 7), ("b", 1998), ("c", 0)]
        batches = {tp: _queue(acc, loop, tp) for tp in queued}
        out = acc.drain(cluster, [0, 1], 1 << 20, 0.0, set())
        assert {node: sorted(b.tp for b in bs) for node, bs in out.items()} == {
            0: [("a", 10), ("b", 1998)], 1: [("a", 3), ("b", 7)]}
        assert all(b is batches[b.tp] and b.full for bs in out.values() for b in bs)
        # What was taken is gone from the queues; the leaderless one stays.
        assert [tp for tp, dq in acc.batches.items() if dq] == [("c", 0)]
        assert acc.drain(cluster, [0, 1], 1 << 20, 0.0, set()) == {}
    finally:
        loop.close()


def test_a_request_size_limit_does_not_starve_a_partition() -> None:
    """One batch fits per request: successive passes start at the next partition."""
    acc = _accumulator()
    loop = asyncio.new_event_loop()
    try:
        tps = [("t", p) for p in range(4)]
        cluster = Cluster(leaders=dict.fromkeys(tps, 0))
        for tp in tps:
            _queue(acc, loop, tp)
            _queue(acc, loop, tp)  # a second batch behind the first
        taken = []
        for _ in range(8):
            out = acc.drain(cluster, [0], 1, 0.0, set())
            assert len(out[0]) == 1
            taken.append(out[0][0].tp)
        # Every partition had both its batches taken, one per pass, round robin.
        assert sorted(taken) == sorted(tps * 2)
        assert taken[:4] != [tps[0]] * 4 and len(set(taken[:4])) == 4
    finally:
        loop.close()
