"""MockProducer's record futures behave as the real ones (issue #34, item 4).

Each test runs twice: on real :class:`RecordFuture` objects over a batch completed as
the accumulator completes it (as test_record_future.py builds them), and on
:class:`MockRecordFuture` objects of a MockProducer that completes records when told.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from aioproducer._native import BufferPool, ProducerBatch, RecordFuture
from aioproducer.testing import MockProducer

pytestmark = pytest.mark.asyncio

TS = 1_700_000_000_000
TOPIC, PARTITION = "topic", 3


@dataclass
class Records:
    """``n`` record futures of one partition, and how to end them all."""

    futures: list[Any]
    succeed: Callable[[], None]  # offsets 0..n-1
    fail: Callable[[BaseException], None]
    sent: Callable[[], int]  # how many records were acknowledged (records, not handles)


def _real(n: int) -> Records:
    pool = BufferPool(1 << 20, 16384)
    block = pool.try_allocate(16384)
    assert block is not None
    batch = ProducerBatch((TOPIC, PARTITION), block, asyncio.get_running_loop().create_future(),
                          time.monotonic())
    for i in range(n):
        batch.builder.append(TS + i, None, b"v%d" % i, None)
    futures = [RecordFuture(batch, i, TS + i, -1, 2) for i in range(n)]

    def end(error: BaseException | None) -> None:  # RecordAccumulator.complete()
        batch.full = True
        batch.base_offset = -1 if error else 0
        batch.log_append_time = -1
        batch.error = error
        batch.result.set_result(None)
        batch.wake_waiters()

    def sent() -> int:  # (new handles on the same records)
        fresh = [RecordFuture(batch, i, TS + i, -1, 2) for i in range(n)]
        return sum(f.done() and f.exception() is None for f in fresh)

    return Records(futures, lambda: end(None), end, sent)


async def _mock(n: int) -> Records:
    mp = MockProducer(cluster={TOPIC: PARTITION + 1}, auto_complete=False)
    await mp.start()
    futures = [await mp.send(TOPIC, b"v%d" % i, partition=PARTITION, timestamp_ms=TS + i)
               for i in range(n)]

    def sent() -> int:
        return int(mp.metrics()["record-send-total"])

    def fail(error: BaseException) -> None:
        mp.fail_all(error)

    return Records(futures, mp.complete_all, fail, sent)


@pytest.fixture(params=["real", "mock"])
def make(request: pytest.FixtureRequest) -> Callable[[int], Any]:
    """``await make(n)``: n records of the kind the test runs on."""
    async def build(n: int) -> Records:
        return _real(n) if request.param == "real" else await _mock(n)
    return build


async def spin(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_an_asyncio_future(make: Callable[[int], Any]) -> None:
    records: Records = await make(2)
    fut = records.futures[0]
    assert asyncio.isfuture(fut)
    assert fut.get_loop() is asyncio.get_running_loop()
    assert asyncio.ensure_future(fut) is fut
    assert not fut.done() and not fut.cancelled()
    with pytest.raises(asyncio.InvalidStateError, match="Result is not set"):
        fut.result()
    with pytest.raises(asyncio.InvalidStateError, match="Exception is not set"):
        fut.exception()
    records.succeed()
    assert fut.done() and fut.exception() is None
    assert (fut.result().topic, fut.result().partition, fut.result().offset) == (
        TOPIC, PARTITION, 0)
    assert await asyncio.ensure_future(fut) == fut.result()


async def test_gather(make: Callable[[int], Any]) -> None:
    records: Records = await make(3)
    asyncio.get_running_loop().call_soon(records.succeed)
    assert [m.offset for m in await asyncio.gather(*records.futures)] == [0, 1, 2]

    bad: Records = await make(2)
    error = RuntimeError("refused")
    asyncio.get_running_loop().call_soon(bad.fail, error)
    with pytest.raises(RuntimeError, match="refused"):
        await asyncio.gather(*bad.futures)
    assert await asyncio.gather(*bad.futures, return_exceptions=True) == [error, error]


async def test_wait_and_as_completed(make: Callable[[int], Any]) -> None:
    records: Records = await make(2)
    done, pending = await asyncio.wait(records.futures, timeout=0.05)
    assert not done and pending == set(records.futures)
    # wait() removed its callbacks: nothing left to remove
    assert all(f.remove_done_callback(lambda _f: None) == 0 for f in records.futures)
    asyncio.get_running_loop().call_later(0.01, records.succeed)
    done, pending = await asyncio.wait(records.futures, timeout=5)
    assert done == set(records.futures) and not pending

    more: Records = await make(2)
    asyncio.get_running_loop().call_later(0.01, more.succeed)
    offsets = [(await f).offset for f in asyncio.as_completed(more.futures, timeout=5)]
    assert sorted(offsets) == [0, 1]


async def test_done_callbacks_run_on_the_loop_in_their_context(
        make: Callable[[int], Any]) -> None:
    records: Records = await make(1)
    fut = records.futures[0]
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    seen: list[tuple[Any, str]] = []

    def callback(f: Any) -> None:
        seen.append((f, var.get()))

    var.set("current")
    fut.add_done_callback(callback)
    other = contextvars.copy_context()
    other.run(var.set, "given")
    fut.add_done_callback(callback, context=other)
    fut.add_done_callback(seen.append)
    assert fut.remove_done_callback(seen.append) == 1
    records.succeed()
    assert seen == []  # scheduled, not called at completion
    await spin(1)
    assert seen == [(fut, "current"), (fut, "given")]
    fut.add_done_callback(callback)  # done: scheduled at once
    await spin(1)
    assert len(seen) == 3


async def test_cancel_cancels_only_the_handle(make: Callable[[int], Any]) -> None:
    records: Records = await make(2)
    fut, other = records.futures
    seen: list[Any] = []
    fut.add_done_callback(seen.append)

    async def wait_it(f: Any) -> Any:
        return await f

    waiting = asyncio.create_task(wait_it(fut))
    await spin()
    assert fut.cancel("changed my mind")
    assert fut.cancelled() and fut.done() and not other.done()
    with pytest.raises(asyncio.CancelledError, match="changed my mind"):
        fut.result()
    with pytest.raises(asyncio.CancelledError):
        fut.exception()
    with pytest.raises(asyncio.CancelledError):
        await fut
    await spin()
    assert waiting.cancelled() and seen == [fut]
    assert not fut.cancel()
    records.succeed()
    assert records.sent() == 2  # the record was sent all the same
    assert fut.cancelled() and other.result().offset == 1
    await spin()
    assert seen == [fut]  # its callbacks ran once


async def test_a_cancelled_awaiting_task_changes_nothing_else(
        make: Callable[[int], Any]) -> None:
    records: Records = await make(1)
    fut = records.futures[0]

    async def wait_it() -> Any:
        return await fut

    task, other = asyncio.create_task(wait_it()), asyncio.create_task(wait_it())
    await spin()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not fut.done() and not other.done()
    records.succeed()
    assert (await other).offset == 0 and fut.result().offset == 0


async def test_cancelling_gather_and_shield(make: Callable[[int], Any]) -> None:
    records: Records = await make(2)
    gathering = asyncio.gather(*records.futures)
    await spin()
    gathering.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gathering
    assert all(f.cancelled() for f in records.futures)

    shielded: Records = await make(1)
    outer = asyncio.shield(shielded.futures[0])
    outer.cancel()
    await spin()
    assert outer.cancelled() and not shielded.futures[0].done()
    asyncio.get_running_loop().call_soon(shielded.succeed)
    assert (await asyncio.shield(shielded.futures[0])).offset == 0
