"""The native appender's route of a topic (its partition count, over which the native
send path hashes keys) stays the metadata's count when the topic expires while a send
waits for memory, and the send then opens the partition's batch."""

from __future__ import annotations

import asyncio

import pytest

from aioproducer.accumulator import RecordAccumulator
from aioproducer.metadata import PartitionInfo, TopicInfo


@pytest.mark.asyncio
async def test_route_recreated_after_expiry_keeps_the_topic_partition_count() -> None:
    acc = RecordAccumulator(batch_size=1024, batch_max_size=1024, buffer_memory=2048,
                            linger_ms=0, retry_backoff_ms=100, retry_backoff_max_ms=1000,
                            delivery_timeout_ms=120_000)
    info = TopicInfo("t", tuple(PartitionInfo(p, 0) for p in range(6)))
    other = TopicInfo("o", (PartitionInfo(0, 0), PartitionInfo(1, 0)))
    # Fill the pool with another topic's batches so that the next send waits.
    for p in range(2):
        await acc.append("o", other, p, 1, None, b"x" * 100, None, 120, sticky=None,
                         max_block_s=1.0)
    assert acc.pool.available_memory < 1024
    send = asyncio.ensure_future(acc.append("t", info, 1, 1, b"k", b"v", None, 10,
                                            sticky=None, max_block_s=5.0))
    await asyncio.sleep(0.01)
    assert not send.done()
    assert acc.appender.route("t").num_partitions == 6
    acc.forget_topic("t")  # the topic expired from the metadata meanwhile
    assert acc.appender.route("t") is None
    first = next(iter(acc.batches[("o", 0)]))
    acc.complete(first, 0, -1, None)  # memory comes back
    res = await asyncio.wait_for(send, 5.0)
    assert res.new_batch and res.batch.tp == ("t", 1)
    route = acc.appender.route("t")
    assert route is not None and route.num_partitions == 6  # not 2 (partition 1 + 1)
