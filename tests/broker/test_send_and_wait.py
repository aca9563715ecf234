"""The awaited-record rule of ``send_and_wait()`` (issue #19, item 2).

The record a caller awaits makes its batch sendable at the next Sender pass, whatever
``linger_ms`` says, and records appended before that pass (in the same turn of the
event loop) go in the same batch. A record that opens a new batch has that pass made
by a callback, without waking the Sender task. ``send()`` alone still lingers.

The assertions are on the mechanism (the producer's queue-time and request metrics,
which futures are done), not on wall time, except for generous bounds that only a
lingering batch could break.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

import pytest

from aioproducer import Producer

pytestmark = pytest.mark.asyncio

VALUE = b"v" * 100


async def test_lone_caller_at_defaults_does_not_linger(kafka_bootstrap: str,
                                                       topic_factory: Any) -> None:
    """A default Producer (linger_ms=5): 200 sequential send_and_wait calls; each
    batch leaves at the next Sender pass, not after the 5 ms linger."""
    topic = topic_factory(partitions=1)
    async with Producer(bootstrap_servers=kafka_bootstrap) as producer:
        assert producer.config.linger_ms == 5
        await producer.send_and_wait(topic, b"warm-up")
        lat: list[float] = []

        async def loop() -> None:
            for i in range(200):
                t = time.perf_counter()
                meta = await producer.send_and_wait(topic, VALUE)
                lat.append(time.perf_counter() - t)
                assert meta.offset == i + 1
        await asyncio.wait_for(loop(), 60)
        m = producer.metrics().producer
    print(f"send_and_wait at defaults: p50 {statistics.median(lat) * 1e3:.3f} ms, "
          f"max {max(lat) * 1e3:.3f} ms, record-queue-time-avg "
          f"{m['record-queue-time-avg']:.3f} ms, requests {m['request-total']:.0f}")
    # Lingering puts every batch's queue time at 5 ms or more; one Sender pass is tens
    # of microseconds, so half the linger leaves room for a loaded machine.
    assert m["record-queue-time-avg"] < 2.5
    # One record, one batch, one request per call: nothing waited for company.
    assert m["request-total"] == 201


async def test_lone_caller_with_a_long_linger(kafka_bootstrap: str,
                                              topic_factory: Any) -> None:
    """linger_ms=60 s: 20 sequential calls finish at once (a lingering batch would
    take a minute each)."""
    topic = topic_factory(partitions=1)
    async with Producer(bootstrap_servers=kafka_bootstrap, linger_ms=60_000) as producer:
        async def loop() -> None:
            for i in range(20):
                meta = await producer.send_and_wait(topic, VALUE)
                assert meta.offset == i
        await asyncio.wait_for(loop(), 20)
        m = producer.metrics().producer
    assert m["record-queue-time-max"] < 1000.0


@pytest.mark.parametrize("linger_ms", [5, 60_000])
async def test_concurrent_callers_share_batches(kafka_bootstrap: str, topic_factory: Any,
                                                linger_ms: int) -> None:
    """1,000 send_and_wait tasks started together: they share batches (requests are
    far fewer than records), and with a 60 s linger they still finish at once."""
    topic = topic_factory(partitions=1)
    n = 1000
    async with Producer(bootstrap_servers=kafka_bootstrap, linger_ms=linger_ms) as producer:
        await producer.send_and_wait(topic, b"warm-up")
        metas = await asyncio.wait_for(
            asyncio.gather(*(producer.send_and_wait(topic, VALUE) for _ in range(n))), 30)
        m = producer.metrics().producer
    offsets = sorted(meta.offset for meta in metas)
    assert offsets == list(range(1, n + 1))
    requests = m["request-total"] - 1  # the warm-up's
    print(f"linger_ms={linger_ms}: {n} concurrent send_and_wait in {requests:.0f} "
          f"requests, records-per-request-avg {m['records-per-request-avg']:.1f}")
    # 100-byte records fill a 16 KiB batch at about 140: eight batches at least.
    assert requests <= n / 20


async def test_records_appended_before_ride_along(kafka_bootstrap: str,
                                                  topic_factory: Any) -> None:
    """send() records appended before the awaited one, to its partition, ride in its
    batch: one request. The other partition has the same leader: its batch goes in
    that request too (a ready node is drained whole, as in the Java producer)."""
    topic = topic_factory(partitions=2)
    async with Producer(bootstrap_servers=kafka_bootstrap, linger_ms=60_000) as producer:
        other = await producer.send(topic, b"other", partition=1)
        same = await producer.send(topic, b"same", partition=0)
        meta = await asyncio.wait_for(
            producer.send_and_wait(topic, b"awaited", partition=0), 20)
        assert same.done()
        assert (await same).offset == meta.offset - 1 == 0
        assert (await asyncio.wait_for(other, 20)).offset == 0
        assert producer.metrics().producer["request-total"] == 1


async def test_plain_send_still_lingers(kafka_bootstrap: str, topic_factory: Any) -> None:
    """Batching is unchanged for send(): an awaited RecordFuture does not hurry it."""
    topic = topic_factory(partitions=1)
    async with Producer(bootstrap_servers=kafka_bootstrap, linger_ms=400) as producer:
        fut = await producer.send(topic, VALUE)
        await asyncio.sleep(0.05)
        assert not fut.done()
        await asyncio.wait_for(fut, 20)
        m = producer.metrics().producer
    assert m["record-queue-time-max"] >= 400.0


async def test_a_new_batch_gets_its_pass_without_the_sender_task(
        kafka_bootstrap: str, topic_factory: Any) -> None:
    """A send_and_wait() whose record opens a new batch has the Sender's pass made by a
    callback at the loop's next turn: the request is written then, and the Sender
    task, asleep, is not woken for it. Records other tasks append in the caller's
    turn share the batch: ten callers in one turn make one request."""
    topic = topic_factory(partitions=1)
    async with Producer(bootstrap_servers=kafka_bootstrap, linger_ms=60_000) as producer:
        await producer.send_and_wait(topic, b"warm-up")
        sender: Any = producer._sender
        for _ in range(100):  # until the Sender task sleeps
            await asyncio.sleep(0.01)
            asleep = sender._sleeper
            if asleep is not None and not asleep.done():
                break
        assert asleep is not None and not asleep.done()
        before = producer.metrics().producer["request-total"]
        lone = asyncio.create_task(producer.send_and_wait(topic, VALUE))
        await asyncio.sleep(0)  # the task's first step: the append
        await asyncio.sleep(0)  # the next turn: the pass
        assert producer.metrics().producer["request-total"] == before + 1
        assert sender._sleeper is asleep and not asleep.done()  # never woken
        assert (await asyncio.wait_for(lone, 20)).offset == 1
        metas = await asyncio.wait_for(asyncio.gather(
            *(producer.send_and_wait(topic, VALUE) for _ in range(10))), 20)
        assert sorted(m.offset for m in metas) == list(range(2, 12))
        assert producer.metrics().producer["request-total"] == before + 2


async def test_a_send_waiting_for_metadata_does_not_take_another_callers_pass(
        kafka_bootstrap: str, topic_factory: Any) -> None:
    """Calls interleave: one send_and_wait() waits for a new topic's metadata while
    another's record opens a batch and is written at once; then the first one's batch
    gets the Sender's pass it needs. With a 60 s linger, a pass taken by the wrong
    call would leave a batch lingering, and this test would time out."""
    known, fresh = topic_factory(partitions=1), topic_factory(partitions=1)
    async with Producer(bootstrap_servers=kafka_bootstrap, linger_ms=60_000) as producer:
        await producer.send_and_wait(known, b"warm-up")
        waiting = asyncio.create_task(producer.send_and_wait(fresh, VALUE))
        await asyncio.sleep(0)  # it waits for the metadata of `fresh`
        assert not waiting.done()
        meta = await asyncio.wait_for(producer.send_and_wait(known, VALUE), 10)
        assert meta.offset == 1
        assert (await asyncio.wait_for(waiting, 20)).offset == 0
        plain = await producer.send(known, VALUE)  # send() alone still lingers
        await asyncio.sleep(0.2)
        assert not plain.done()


async def test_a_new_batch_takes_another_partitions_batch_along(
        kafka_bootstrap: str, topic_factory: Any) -> None:
    """A send_and_wait() record that opens a new batch while another partition of the
    same leader has a lingering batch: the pass drains the node whole (as Java's
    drain does), so the other batch goes in the same request, not after its linger."""
    topic = topic_factory(partitions=2)
    async with Producer(bootstrap_servers=kafka_bootstrap, linger_ms=60_000) as producer:
        await producer.send_and_wait(topic, b"warm-up", partition=0)
        before = producer.metrics().producer["request-total"]
        other = await producer.send(topic, b"other", partition=1)
        meta = await asyncio.wait_for(
            producer.send_and_wait(topic, b"awaited", partition=0), 20)
        assert meta.offset == 1
        assert other.done() and (await other).offset == 0
        assert producer.metrics().producer["request-total"] == before + 1


async def test_a_lone_caller_at_defaults_takes_two_turns_of_the_loop(
        kafka_bootstrap: str, topic_factory: Any) -> None:
    """A lone caller awaiting send_and_wait() at the defaults, with nothing else for the
    loop to run: its batch is written in the caller's own turn (the pass the next turn
    would start with, made at once), so a round trip takes two turns of the loop (the
    answer's, and the caller's), not three. Counted as the selector's polls over 200
    round trips; timers (the Sender's, the metadata's) may add a few. (uvloop's ready
    queue is not visible: there the pass stays at the next turn, and only the records
    and requests are checked.)"""
    topic = topic_factory(partitions=1)
    async with Producer(bootstrap_servers=kafka_bootstrap) as producer:
        assert producer.config.linger_ms == 5
        await producer.send_and_wait(topic, b"warm-up")
        loop: Any = asyncio.get_running_loop()
        selector = getattr(loop, "_selector", None)
        real = selector.select if selector is not None else None
        polls = 0

        def counting(timeout: float | None = None) -> Any:
            nonlocal polls
            polls += 1
            assert real is not None
            return real(timeout)

        async def run() -> None:
            for i in range(200):
                meta = await producer.send_and_wait(topic, VALUE)
                assert meta.offset == i + 1

        task = asyncio.ensure_future(run())  # its own task: wait_for adds turns
        await asyncio.sleep(0)
        if selector is not None:
            selector.select = counting
        try:
            await asyncio.wait_for(asyncio.shield(task), 60)
        finally:
            if selector is not None:
                selector.select = real
        requests = producer.metrics().producer["request-total"]
    print(f"{polls / 200:.2f} turns of the loop per round trip, {requests:.0f} requests")
    assert requests == 201
    if selector is not None:
        assert polls / 200 < 2.5  # three with the pass at the next turn
