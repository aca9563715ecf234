"""``Producer.send()`` returns a native coroutine (PendingSend) for records without
headers: it behaves as the ``async def`` it replaces (nothing happens until it is
awaited or run as a task; dropped unawaited it warns; throw/close/cancel reach the
Python path's coroutine), and its first step appends on the native path when it can.

The tests drive an Appender directly, over a pool block, as bench/profiling/appender_micro.py
does; the last ones check how a Producer installs it (no broker needed).
"""

from __future__ import annotations

import asyncio
import gc
import warnings
import weakref
from collections.abc import Coroutine
from typing import Any

import pytest

from aioproducer import Producer, RecordFuture
from aioproducer._native import Appender, BufferPool, ProducerBatch

pytestmark = pytest.mark.asyncio

TOPIC = "t"


class Rig:
    """An appender bound to the running loop with one open batch of TOPIC-0, and a
    Python path (``slow``) that logs its calls and runs a scripted coroutine."""

    def __init__(self, hot: bool = True) -> None:
        loop = asyncio.get_running_loop()
        self.pool = BufferPool(1 << 20, 16384)
        self.appender: Any = Appender(True, False, -1, 0)  # slow returns tuples here
        self.appender.bind(loop)
        route = self.appender.set_route(TOPIC, 1)
        route.sticky = 0
        block = self.pool.try_allocate(16384)
        assert block is not None
        self.batch = ProducerBatch((TOPIC, 0), block, loop.create_future(), 0.0)
        route.tails[0] = self.batch
        self.calls: list[tuple[Any, ...]] = []
        self.slow_steps: list[str] = []
        self.gate: asyncio.Future[None] | None = None
        self.appender.slow = self.slow
        self.appender.hot = hot

    async def slow(self, *args: Any) -> Any:
        self.calls.append(args)
        self.slow_steps.append("start")
        try:
            if self.gate is not None:
                await self.gate
            return ("slow", args[1])
        finally:
            self.slow_steps.append("end")

    @property
    def appended(self) -> int:
        return self.batch.record_count

    def close(self) -> None:
        self.batch.full = True
        assert self.batch.block is not None
        self.pool.release(self.batch.block)


async def test_is_a_coroutine_that_appends_only_when_awaited() -> None:
    rig = Rig()
    c = rig.appender.send(TOPIC, b"v", b"k")
    assert asyncio.iscoroutine(c) and isinstance(c, Coroutine)
    assert rig.appended == 0, "appended before it was awaited"
    fut = await c
    assert isinstance(fut, RecordFuture) and fut.index == 0 and fut.batch is rig.batch
    assert rig.appended == 1 and rig.calls == []
    # The same through a task, gather and wait_for.
    fut2 = await asyncio.create_task(rig.appender.send(TOPIC, b"v2"))
    f3, f4 = await asyncio.gather(rig.appender.send(TOPIC, b"v3"),
                                  rig.appender.send(TOPIC, b"v4"))
    f5 = await asyncio.wait_for(rig.appender.send(TOPIC, b"v5"), 5)
    assert [f.index for f in (fut2, f3, f4, f5)] == [1, 2, 3, 4]
    rig.close()


async def test_a_dropped_route_is_not_served_from_the_last_lookup() -> None:
    """The appender keeps the route of the last topic it looked up (an application
    sends to the same topic object again and again); an equal topic string that is
    another object finds the route too, and once the route is dropped (the topic
    expired from the metadata) records take the Python path."""
    rig = Rig()
    name = "orders-eu"
    route = rig.appender.set_route(name, 1)
    route.sticky = 0
    block = rig.pool.try_allocate(16384)
    assert block is not None
    batch = ProducerBatch((name, 0), block, asyncio.get_running_loop().create_future(), 0.0)
    route.tails[0] = batch
    assert isinstance(await rig.appender.send(name, b"a"), RecordFuture)
    same = "".join(["orders", "-eu"])  # equal to name, not the same object
    assert same == name and same is not name
    fut = await rig.appender.send(same, b"b")
    assert isinstance(fut, RecordFuture) and fut.batch is batch and fut.index == 1
    assert (await rig.appender.send(TOPIC, b"x")).batch is rig.batch  # another topic
    assert isinstance(await rig.appender.send(name, b"c"), RecordFuture)
    assert rig.appender.drop_route(name)  # right after a lookup of name
    assert await rig.appender.send(name, b"d") == ("slow", b"d")
    assert await rig.appender.send(same, b"e") == ("slow", b"e")
    assert batch.record_count == 3
    batch.full = True
    rig.pool.release(block)
    rig.close()


async def test_order_is_the_order_of_awaits_as_for_an_async_def() -> None:
    rig = Rig()
    first = rig.appender.send(TOPIC, b"a")
    second = rig.appender.send(TOPIC, b"b")
    fb = await second
    fa = await first
    assert (fb.index, fa.index) == (0, 1)
    rig.close()


async def test_not_hot_takes_the_python_path_with_every_argument() -> None:
    rig = Rig(hot=False)
    r = await rig.appender.send(TOPIC, b"v", b"k", partition=0, timestamp_ms=7)
    assert r == ("slow", b"v")
    assert rig.calls == [(TOPIC, b"v", b"k", 0, 7, None)] and rig.appended == 0
    rig.close()


async def test_headers_go_straight_to_the_python_path() -> None:
    rig = Rig()
    c = rig.appender.send(TOPIC, b"v", headers=[("h", b"1")])
    assert type(c).__name__ == "coroutine" and rig.calls == []
    assert await c == ("slow", b"v")
    assert rig.calls == [(TOPIC, b"v", None, None, None, [("h", b"1")])]
    rig.close()


async def test_a_suspended_python_path_is_delegated_and_cancellable() -> None:
    rig = Rig(hot=False)
    rig.gate = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(rig.appender.send(TOPIC, b"v"))
    for _ in range(3):
        await asyncio.sleep(0)
    assert rig.slow_steps == ["start"] and not task.done()
    task.cancel("stop")
    with pytest.raises(asyncio.CancelledError):
        await task
    assert rig.slow_steps == ["start", "end"], "the cancel did not reach the coroutine"
    # And one that resumes normally returns the Python path's result.
    rig.gate = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(rig.appender.send(TOPIC, b"w"))
    await asyncio.sleep(0)
    rig.gate.set_result(None)
    assert await task == ("slow", b"w")
    rig.close()


async def test_throw_and_close_as_a_coroutine() -> None:
    rig = Rig()
    c = rig.appender.send(TOPIC, b"v")
    with pytest.raises(KeyError):
        c.throw(KeyError("x"))
    assert rig.appended == 0
    with pytest.raises(RuntimeError, match="already awaited"):
        await c
    c2 = rig.appender.send(TOPIC, b"v")
    c2.close()
    with pytest.raises(RuntimeError, match="already awaited"):
        await c2
    # close() while delegating closes the Python path's coroutine (its finally runs).
    rig.appender.hot = False
    rig.gate = asyncio.get_running_loop().create_future()
    c3 = rig.appender.send(TOPIC, b"v")
    assert c3.send(None) is rig.gate
    c3.close()
    assert rig.slow_steps == ["start", "end"]
    rig.close()


async def test_awaited_twice_raises() -> None:
    rig = Rig()
    c = rig.appender.send(TOPIC, b"v")
    await c
    with pytest.raises(RuntimeError, match="already awaited"):
        await c
    rig.close()


async def test_dropped_unawaited_warns_and_sends_nothing() -> None:
    rig = Rig()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rig.appender.send(TOPIC, b"v")
        gc.collect()
    assert rig.appended == 0
    assert any(issubclass(w.category, RuntimeWarning) and "never awaited" in str(w.message)
               for w in caught)
    # Awaited ones do not warn.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        await rig.appender.send(TOPIC, b"v")
        gc.collect()
    assert not caught
    rig.close()


async def test_off_the_bound_loop_thread_takes_the_python_path() -> None:
    rig = Rig()
    rig.appender.bind(None)
    assert await rig.appender.send(TOPIC, b"v") == ("slow", b"v")
    assert rig.appended == 0
    rig.close()


async def test_producer_instances_use_the_native_send() -> None:
    p = Producer(bootstrap_servers="127.0.0.1:1")
    assert p.send == p._appender.send  # the bound native method, no Python frame
    # No reference cycle through it: an unclosed producer is freed (and warns) at once.
    gone = weakref.ref(p)
    del p
    assert gone() is None

    class Wrapped(Producer):
        def send(self, topic: str, value: Any = None, key: Any = None, *,
                 partition: int | None = None, timestamp_ms: int | None = None,
                 headers: Any = None) -> Coroutine[Any, Any, RecordFuture]:
            self.seen = topic
            return super().send(topic, value, key, partition=partition,
                                timestamp_ms=timestamp_ms, headers=headers)

    w = Wrapped(bootstrap_servers="127.0.0.1:1")
    assert "send" not in w.__dict__, "an override must not be shadowed"
    c = w.send("x", b"v")
    assert w.seen == "x" and asyncio.iscoroutine(c)
    c.close()


async def test_a_producer_not_started_raises_on_await() -> None:
    p = Producer(bootstrap_servers="127.0.0.1:1")
    with pytest.raises(Exception, match=r"not started|start"):
        await p.send("x", b"v")
