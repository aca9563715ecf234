"""What a record future keeps alive once its record is done (issue #19, paced p99).

An application that keeps its record futures (a list awaited later, a dict of pending
requests) keeps their batches alive. With ``linger_ms=0`` a batch holds one record, so
each kept future kept a batch, its asyncio future, its builder and its block object:
four objects for the cycle collector to count and walk, which made collections more
frequent and longer (a pause of tens of ms at 10,000 records/s). A completed batch now
holds a done future shared by all of them, its builder is not tracked and has let its
block go. The records themselves are checked by reading them back.
"""

from __future__ import annotations

import gc
from typing import Any

import pytest
from support.kafka_util import consume_all

from aioproducer import Producer
from aioproducer.errors import MessageTooLargeError

pytestmark = pytest.mark.asyncio


def _tracked_referents(obj: object) -> list[object]:
    return [o for o in gc.get_referents(obj) if gc.is_tracked(o)]


async def test_a_held_future_keeps_only_its_batch(kafka_bootstrap: str,
                                                  topic_factory: Any) -> None:
    topic = topic_factory(partitions=1, config={"max.message.bytes": "20000"})
    n = 200
    async with Producer(bootstrap_servers=kafka_bootstrap, linger_ms=0) as producer:
        futures = []
        for i in range(n):
            futures.append(await producer.send(topic, b"v%05d" % i, key=b"k%d" % i))
            if i % 10 == 0:
                await futures[-1]  # some alone in their batch, some sharing one
        # A record the broker refuses: its batch fails, and its future must still say so.
        too_big = await producer.send(topic, b"x" * 50_000)
        await producer.flush()
        for i, fut in enumerate(futures):
            meta = await fut
            assert meta.offset == i
        with pytest.raises(MessageTooLargeError):
            await too_big
        with pytest.raises(MessageTooLargeError):
            too_big.result()

        batches = {id(f.batch): f.batch for f in [*futures, too_big]}.values()
        gc.collect()  # (which stops tracking tuples of strs and ints, such as a batch's tp)
        assert len(batches) > n // 10
        settled = {id(b.result) for b in batches}
        assert len(settled) == 1, "completed batches share one done future"
        shared = next(iter(batches)).result
        assert shared.done() and shared.result() is None
        for b in batches:
            assert not gc.is_tracked(b.builder)
            assert b.builder.block.released
            assert b.block is None
            # Nothing but the shared future (and, for the refused batch, its error and
            # traceback) is left for the collector behind a completed batch.
            left = [o for o in _tracked_referents(b) if o is not shared]
            if b is too_big.batch:
                assert all(isinstance(o, BaseException) or type(o).__name__ == "traceback"
                           for o in left), left
            else:
                assert left == [], left
        # The counts and sizes a done batch answers for stay as they were.
        assert sum(b.record_count for b in batches) == n + 1

    read = consume_all(kafka_bootstrap, topic, n, timeout=60)
    assert [(r.offset, r.key, r.value) for r in read] == [
        (i, b"k%d" % i, b"v%05d" % i) for i in range(n)]
