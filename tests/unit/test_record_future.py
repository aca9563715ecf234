"""RecordFuture as an asyncio future, short re-raised tracebacks, per-record errors
(KIP-467) and split batches (after MESSAGE_TOO_LARGE).

The unit tests build ProducerBatch objects directly over a pool block, with an
asyncio future as ``result``, and complete them as ``RecordAccumulator.complete``
does. The last test sends through a real Producer to the local broker.
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import sys
import time
import traceback
import weakref
from collections.abc import Callable
from typing import Any

import pytest

from aioproducer import Producer
from aioproducer._native import BufferPool, ProducerBatch, RecordFuture, RecordMetadata
from aioproducer.record import SendManyResult

pytestmark = pytest.mark.asyncio

TS = 1_700_000_000_000
TP = ("topic", 3)


# -- helpers ---------------------------------------------------------------------------


def new_batch(n: int, tp: tuple[str, int] = TP, first: int = 0) -> ProducerBatch:
    """A batch of ``n`` records (values ``v<first>``, ``v<first+1>``, ...) whose result
    future belongs to the running loop."""
    pool = BufferPool(1 << 20, 16384)  # the block keeps its pool alive
    block = pool.try_allocate(16384)
    assert block is not None
    batch = ProducerBatch(tp, block, asyncio.get_running_loop().create_future(),
                          time.monotonic())
    for i in range(n):
        assert batch.builder.append(TS + first + i, None, b"v%d" % (first + i), None) == i
    return batch


def futures_of(batch: ProducerBatch, first: int = 0) -> list[RecordFuture]:
    return [RecordFuture(batch, i, TS + first + i, -1, len(b"v%d" % (first + i)))
            for i in range(batch.record_count)]


def complete(batch: ProducerBatch, base_offset: int = -1,
             error: BaseException | None = None, log_append_time: int = -1) -> None:
    """What RecordAccumulator.complete() does to a batch's outcome."""
    batch.full = True
    batch.base_offset = base_offset
    batch.log_append_time = log_append_time
    batch.error = error
    batch.result.set_result(None)
    batch.wake_waiters()


def finish(batch: ProducerBatch, base_offset: int = -1,
           error: BaseException | None = None) -> list[ProducerBatch]:
    """Complete ``batch`` and follow the child_done() contract up the split tree;
    returns the ancestors that were completed."""
    complete(batch, base_offset, error)
    completed = []
    while batch.child_done():
        assert batch.parent is not None
        batch = batch.parent
        complete(batch)
        completed.append(batch)
    return completed


def failed_in_a_function(message: str) -> ValueError:
    """An error with a (short) traceback, as a caught error has."""
    try:
        raise ValueError(message)
    except ValueError as exc:
        return exc


async def spin(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


# -- the asyncio future protocol --------------------------------------------------------


async def test_is_an_asyncio_future() -> None:
    batch = new_batch(2)
    fut = futures_of(batch)[0]
    assert asyncio.isfuture(fut)
    assert fut._asyncio_future_blocking is False
    fut._asyncio_future_blocking = True  # what a task resets after a blocking yield
    assert fut._asyncio_future_blocking is True
    fut._asyncio_future_blocking = False
    assert fut.get_loop() is asyncio.get_running_loop()
    assert asyncio.ensure_future(fut) is fut
    assert not fut.done() and not fut.cancelled()
    with pytest.raises(asyncio.InvalidStateError):
        fut.result()
    with pytest.raises(asyncio.InvalidStateError):
        fut.exception()
    complete(batch, base_offset=40)
    assert fut.done() and not fut.cancelled()
    assert fut.exception() is None
    assert fut.result() == RecordMetadata(TP[0], TP[1], 40, TS, -1, 2)
    assert await asyncio.ensure_future(fut) == fut.result()


async def test_wait_with_timeout_over_done_and_pending() -> None:
    done_batch, pending_batch = new_batch(3), new_batch(4, first=3)
    complete(done_batch, base_offset=10)
    early, late = futures_of(done_batch), futures_of(pending_batch, first=3)
    started = time.monotonic()
    done, pending = await asyncio.wait(early + late, timeout=0.2)
    assert 0.15 < time.monotonic() - started < 2
    assert done == set(early) and pending == set(late)
    # wait() removed its callbacks from the pending ones: nothing left to call
    assert all(f.remove_done_callback(lambda _f: None) == 0 for f in late)

    loop = asyncio.get_running_loop()
    loop.call_later(0.05, complete, pending_batch, 20)
    done, pending = await asyncio.wait(early + late, timeout=5)
    assert done == set(early + late) and not pending
    assert [f.result().offset for f in early + late] == [10, 11, 12, 20, 21, 22, 23]

    # FIRST_EXCEPTION stops at a failed record
    failing = new_batch(1)
    quiet = new_batch(1)
    loop.call_soon(complete, failing, -1, RuntimeError("boom"))
    done, pending = await asyncio.wait(futures_of(failing) + futures_of(quiet), timeout=5,
                                       return_when=asyncio.FIRST_EXCEPTION)
    assert [f.batch for f in done] == [failing] and [f.batch for f in pending] == [quiet]
    complete(quiet)


async def test_gather() -> None:
    batch = new_batch(3)
    futs = futures_of(batch)
    asyncio.get_running_loop().call_later(0.01, complete, batch, 7)
    metas = await asyncio.gather(*futs)
    assert [m.offset for m in metas] == [7, 8, 9]

    bad = new_batch(2)
    bad_futs = futures_of(bad)
    err = RuntimeError("refused")
    asyncio.get_running_loop().call_soon(complete, bad, -1, err)
    with pytest.raises(RuntimeError, match="refused"):
        await asyncio.gather(*bad_futs)
    results = await asyncio.gather(*bad_futs, return_exceptions=True)
    assert results == [err, err]


async def test_gather_with_a_cancelled_record_future() -> None:
    batch = new_batch(2)
    a, b = futures_of(batch)
    assert a.cancel("not needed")
    gathering = asyncio.gather(a, b, return_exceptions=True)
    complete(batch, 5)
    results = await gathering
    assert isinstance(results[0], asyncio.CancelledError)
    assert results[1] == b.result()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.gather(a, b)


async def test_cancelling_gather_cancels_the_handles_not_the_records() -> None:
    batch = new_batch(2)
    futs = futures_of(batch)
    gathering = asyncio.gather(*futs)
    await spin()
    gathering.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gathering
    assert all(f.cancelled() for f in futs)
    assert not batch.result.done()
    complete(batch, 3)
    assert [f.result().offset for f in futures_of(batch)] == [3, 4]


async def test_as_completed_in_completion_order() -> None:
    first, second = new_batch(2), new_batch(2, first=2)
    loop = asyncio.get_running_loop()
    loop.call_later(0.02, complete, second, 100)
    loop.call_later(0.06, complete, first, 200)
    offsets = [(await f).offset
               for f in asyncio.as_completed(futures_of(first) + futures_of(second), timeout=5)]
    assert sorted(offsets[:2]) == [100, 101] and sorted(offsets[2:]) == [200, 201]

    pending = new_batch(1)
    with pytest.raises(asyncio.TimeoutError):
        for f in asyncio.as_completed(futures_of(pending), timeout=0.05):
            await f
    complete(pending, 1)


async def test_wait_for_times_out_and_the_record_is_still_delivered() -> None:
    batch = new_batch(3)
    futs = futures_of(batch)
    started = time.monotonic()
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(futs[1], 0.1)
    assert time.monotonic() - started < 2
    assert not batch.result.done()  # the batch is not cancelled: the record is sent
    # Python 3.11 cancels the awaited future (this handle only); 3.12+ cancel the task
    # that awaits it, which leaves the handle pending.
    assert futs[1].cancelled() == (sys.version_info < (3, 12))
    complete(batch, 50)
    assert futs[0].result().offset == 50 and futs[2].result().offset == 52
    assert futures_of(batch)[1].result().offset == 51
    if not futs[1].cancelled():
        assert futs[1].result().offset == 51

    quick = new_batch(1)
    asyncio.get_running_loop().call_soon(complete, quick, 9)
    assert (await asyncio.wait_for(futures_of(quick)[0], 5)).offset == 9


async def test_shield() -> None:
    batch = new_batch(2)
    fut = futures_of(batch)[0]
    outer = asyncio.shield(fut)
    outer.cancel()
    await spin()
    assert outer.cancelled() and not fut.cancelled() and not fut.done()
    complete(batch, 1)
    assert fut.result().offset == 1

    batch = new_batch(1)
    fut = futures_of(batch)[0]
    asyncio.get_running_loop().call_later(0.01, complete, batch, 8)
    assert (await asyncio.shield(fut)).offset == 8
    failed = new_batch(1)
    asyncio.get_running_loop().call_soon(complete, failed, -1, KeyError("k"))
    with pytest.raises(KeyError):
        await asyncio.shield(futures_of(failed)[0])


async def test_ensure_future_and_run_inside_a_task() -> None:
    batch = new_batch(1)
    fut = futures_of(batch)[0]
    assert asyncio.ensure_future(fut, loop=asyncio.get_running_loop()) is fut

    async def wait_it() -> int:
        return (await asyncio.ensure_future(fut)).offset

    task = asyncio.create_task(wait_it())
    await spin()
    complete(batch, 77)
    assert await task == 77


# -- cancel ------------------------------------------------------------------------------


async def test_cancel_cancels_only_the_handle() -> None:
    batch = new_batch(3)
    futs = futures_of(batch)
    seen: list[RecordFuture] = []
    futs[1].add_done_callback(seen.append)
    assert futs[1].cancel(msg="changed my mind")
    assert futs[1].cancelled() and futs[1].done()
    assert not futs[0].done() and not futs[0].cancelled()
    assert not batch.result.done()
    with pytest.raises(asyncio.CancelledError, match="changed my mind"):
        futs[1].result()
    with pytest.raises(asyncio.CancelledError):
        futs[1].exception()
    with pytest.raises(asyncio.CancelledError):
        await futs[1]
    assert seen == []  # scheduled, not called in cancel()
    await spin(1)
    assert seen == [futs[1]]
    assert not futs[1].cancel()  # done already
    late: list[RecordFuture] = []
    futs[1].add_done_callback(late.append)  # done: scheduled at once
    await spin(1)
    assert late == [futs[1]]
    assert "cancelled" in repr(futs[1])

    complete(batch, 30)
    assert futs[0].result().offset == 30 and futs[2].result().offset == 32
    assert futures_of(batch)[1].result().offset == 31  # the record was sent
    assert futs[1].cancelled()  # and the handle stays cancelled
    assert not futs[0].cancel()  # a done future cannot be cancelled
    assert not futs[0].cancelled()
    await spin()
    assert seen == [futs[1]]  # its callbacks ran once


async def test_cancel_wakes_a_task_awaiting_the_handle() -> None:
    batch = new_batch(2)
    futs = futures_of(batch)

    async def wait_it(f: RecordFuture) -> RecordMetadata:
        return await f

    waiting = asyncio.create_task(wait_it(futs[0]))
    waiting2 = asyncio.create_task(wait_it(futs[0]))
    other = asyncio.create_task(wait_it(futs[1]))
    await spin()
    assert futs[0].cancel(["a", "list", "as", "message"])
    await spin()
    assert waiting.done() and waiting.cancelled()
    assert waiting2.done() and waiting2.cancelled()
    with pytest.raises(asyncio.CancelledError) as info:
        futs[0].result()
    assert info.value.args == (["a", "list", "as", "message"],)
    assert not other.done()
    complete(batch, 4)
    assert (await other).offset == 5

    # one task awaiting: cancelled with the handle's message
    batch = new_batch(1)
    fut = futures_of(batch)[0]
    waiting = asyncio.create_task(wait_it(fut))
    await spin()
    fut.cancel("stop")
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert waiting.cancelled()
    complete(batch, 0)


async def test_a_cancelled_awaiting_task_changes_nothing_else() -> None:
    batch = new_batch(2)
    futs = futures_of(batch)

    async def wait_it(f: RecordFuture) -> RecordMetadata:
        return await f

    task = asyncio.create_task(wait_it(futs[0]))
    other = asyncio.create_task(wait_it(futs[0]))
    await spin()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not futs[0].cancelled() and not futs[0].done()
    assert not batch.result.done() and not other.done()
    complete(batch, 60)
    assert (await other).offset == 60
    assert futs[0].result().offset == 60
    assert batch.waiters is None


async def test_await_under_a_trace_function_and_after_a_spurious_wakeup() -> None:
    """``await fut`` steps the future through its type's am_send; with a trace function
    set (coverage, debuggers) the interpreter uses __next__ instead: both give the
    metadata of a done future, block on a pending one, and raise the record's error.
    A task woken while the batch is still pending (its waiter resolved by someone
    else) blocks again instead of reading an unfinished result."""
    batch = new_batch(3)
    futs = futures_of(batch)

    async def wait_it(f: RecordFuture) -> RecordMetadata:
        return await f

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        return tracer

    for traced in (False, True):
        if traced:
            sys.settrace(tracer)
        try:
            task = asyncio.create_task(wait_it(futs[0]))
            await spin()
            assert not task.done()
            if not traced:
                assert batch.waiters is not None
                for w in batch.waiters:  # wake it while the batch is pending
                    w.set_result(None)
                await spin()
                assert not task.done()
                continue
            batch.record_errors = {2: ValueError("bad")}
            complete(batch, 10)
            assert (await task).offset == 10
            assert (await futs[1]).offset == 11
            with pytest.raises(ValueError, match="bad"):
                await futs[2]
        finally:
            sys.settrace(None)
    assert futs[0].__await__() is futs[0]
    with pytest.raises(StopIteration) as stop:
        next(futs[1].__await__())
    assert stop.value.value.offset == 11


async def test_await_iterator_driven_by_hand() -> None:
    """``fut.__await__()`` is the future itself, an iterator: next() steps it (the
    waiter to block on, then StopIteration with the metadata). It has no
    send/throw/close: with them, ``collections.abc.Coroutine`` would take it for a
    coroutine, which ``asyncio.wait()`` refuses. (Generator-based coroutines, the other
    users of that protocol, are gone since Python 3.11.)"""
    import collections.abc

    batch = new_batch(2)
    futs = futures_of(batch)
    it = futs[0].__await__()
    assert isinstance(next(it), asyncio.Future)
    assert not isinstance(futs[0], collections.abc.Coroutine)
    assert not asyncio.iscoroutine(futs[0]) and asyncio.isfuture(futs[0])

    complete(batch, 7)
    with pytest.raises(StopIteration) as stop:
        next(futs[1].__await__())
    assert stop.value.value.offset == 8
    with pytest.raises(StopIteration) as stop:
        next(futs[0].__await__())
    assert stop.value.value.offset == 7


# -- callbacks ---------------------------------------------------------------------------


async def test_callbacks_are_scheduled_on_the_loop_with_their_context() -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    batch = new_batch(2)
    fut = futures_of(batch)[0]
    calls: list[tuple[str, str, RecordFuture, bool]] = []
    loop = asyncio.get_running_loop()

    def record(name: str) -> Callable[[RecordFuture], None]:
        def cb(f: RecordFuture) -> None:
            running = asyncio.get_running_loop() is loop
            calls.append((name, var.get(), f, running))
        return cb

    var.set("at-add")
    fut.add_done_callback(record("implicit"))
    other = contextvars.copy_context()
    other.run(var.set, "explicit")
    fut.add_done_callback(record("explicit"), context=other)
    var.set("later")
    fut.add_done_callback(record("third"))
    complete(batch, 1)
    assert calls == []  # never called synchronously by the completion
    await spin()
    assert calls == [("implicit", "at-add", fut, True), ("explicit", "explicit", fut, True),
                     ("third", "later", fut, True)]
    # added to a done future: scheduled with call_soon, not called in place
    fut.add_done_callback(record("done"))
    assert len(calls) == 3
    await spin(1)
    assert calls[-1] == ("done", "later", fut, True)


async def test_callback_errors_go_to_the_loop_exception_handler() -> None:
    batch = new_batch(1)
    fut = futures_of(batch)[0]
    loop = asyncio.get_running_loop()
    seen: list[dict[str, Any]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: seen.append(context))
    try:
        fut.add_done_callback(lambda _f: 1 / 0)
        ran: list[RecordFuture] = []
        fut.add_done_callback(ran.append)
        complete(batch, 0)
        await spin()
    finally:
        loop.set_exception_handler(previous)
    assert ran == [fut]
    assert len(seen) == 1 and isinstance(seen[0]["exception"], ZeroDivisionError)


async def test_remove_done_callback() -> None:
    batch = new_batch(1)
    fut = futures_of(batch)[0]
    calls: list[str] = []

    def a(_f: RecordFuture) -> None:
        calls.append("a")

    def b(_f: RecordFuture) -> None:
        calls.append("b")

    fut.add_done_callback(a)
    fut.add_done_callback(b)
    fut.add_done_callback(a)
    assert fut.remove_done_callback(a) == 2
    assert fut.remove_done_callback(a) == 0
    fut.add_done_callback(a)
    complete(batch, 0)
    await spin()
    assert calls == ["b", "a"]
    assert fut.remove_done_callback(b) == 0  # scheduled already

    # removing every callback of a pending future, then adding one again
    batch = new_batch(1)
    fut = futures_of(batch)[0]
    fut.add_done_callback(a)
    assert fut.remove_done_callback(a) == 1
    fut.add_done_callback(b)
    calls.clear()
    complete(batch, 0)
    await spin()
    assert calls == ["b"]


async def test_one_hook_per_record_future_and_one_loop_callback_per_batch() -> None:
    batch = new_batch(3)
    futs = futures_of(batch)

    def hooks() -> int:
        return len(batch.hooked or ())

    await asyncio.wait(futs, timeout=0.01)  # add then remove callbacks
    assert hooks() == 3
    assert not batch.result._callbacks  # nothing on the batch's asyncio future
    futs[0].add_done_callback(print)
    futs[0].add_done_callback(repr)
    assert futs[0].remove_done_callback(print) == 1
    assert futs[0].remove_done_callback(repr) == 1
    futs[0].add_done_callback(repr)
    assert hooks() == 3  # once per record future, however many callbacks
    other = new_batch(2)
    for f in futures_of(other):
        await asyncio.sleep(0)
        assert not f.done()
    assert not other.hooked  # no callback: no hook
    loop = asyncio.get_running_loop()
    ran: list[int] = []
    for i, f in enumerate(futs):
        f.add_done_callback(lambda _f, i=i: ran.append(i))
    ready = getattr(loop, "_ready", None)  # asyncio's queue of handles (not uvloop's)
    scheduled = None if ready is None else len(ready)
    complete(batch, 0)
    if ready is not None:
        assert len(ready) == scheduled + 1  # one loop callback for the whole batch
    assert batch.hooked is None and ran == []
    complete(other, 0)
    await spin()
    assert sorted(ran) == [0, 1, 2]  # (in the order the futures were hooked)


class _Callback:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, _f: RecordFuture) -> None:
        self.calls += 1


async def test_callbacks_are_dropped_once_scheduled_removed_or_cancelled() -> None:
    """RecordFuture stays out of the garbage collector: it must not keep callbacks
    (which often capture it) beyond their use."""
    for how in ("completed", "removed", "cancelled"):
        batch = new_batch(1)
        fut = futures_of(batch)[0]
        cb = _Callback()
        ref = weakref.ref(cb)
        fut.add_done_callback(cb)
        if how == "removed":
            assert fut.remove_done_callback(cb) == 1
        elif how == "cancelled":
            assert fut.cancel()
        else:
            complete(batch, 0)
        await spin()
        assert cb.calls == (0 if how == "removed" else 1)
        del cb
        gc.collect()
        assert ref() is None, how
        if not batch.result.done():
            complete(batch, 0)
        await spin()


# -- short tracebacks ----------------------------------------------------------------


async def test_many_awaiters_of_a_failed_batch_see_short_tracebacks() -> None:
    batch = new_batch(10)
    futs = futures_of(batch)
    error = failed_in_a_function("the batch failed")
    original = error.__traceback__
    assert original is not None
    depths: list[int] = []

    async def wait_it(f: RecordFuture) -> None:
        try:
            await f
        except ValueError as exc:
            assert exc is error
            frames = traceback.extract_tb(exc.__traceback__)
            depths.append(len(frames))
            assert frames[-1].name == "failed_in_a_function"

    tasks = [asyncio.create_task(wait_it(futs[i % 10])) for i in range(10_000)]
    await spin()
    complete(batch, -1, error)
    assert batch.error_tb is original
    await asyncio.gather(*tasks)
    assert len(depths) == 10_000
    assert max(depths) < 10, max(depths)
    # result()/exception() keep doing the same afterwards
    for f in futs:
        assert f.exception() is error
        with pytest.raises(ValueError) as info:
            f.result()
        assert len(traceback.extract_tb(info.value.__traceback__)) < 10
    assert batch.error_tb is original

    # and SendManyResult
    result = SendManyResult([batch], 10)
    for _ in range(1000):
        with pytest.raises(ValueError) as info:
            await result
    assert len(traceback.extract_tb(info.value.__traceback__)) < 10


async def test_error_property_keeps_the_traceback() -> None:
    batch = new_batch(1)
    assert batch.error is None and batch.error_tb is None
    err = failed_in_a_function("x")
    batch.error = err
    assert batch.error is err and batch.error_tb is err.__traceback__
    batch.error = None
    assert batch.error is None and batch.error_tb is None
    with pytest.raises(TypeError):
        batch.error = "not an exception"  # type: ignore[assignment]
    complete(batch, 0)


# -- per-record errors (KIP-467) ------------------------------------------------------


async def test_record_errors() -> None:
    batch = new_batch(5)
    futs = futures_of(batch)
    bad1, bad3 = failed_in_a_function("record 1"), ValueError("record 3")
    whole = RuntimeError("another record of the batch was invalid")
    batch.record_errors = {1: bad1, 3: bad3}
    assert batch.record_errors == {1: bad1, 3: bad3}
    tb1 = bad1.__traceback__
    complete(batch, -1, whole)
    assert [f.exception() for f in futs] == [whole, bad1, whole, bad3, whole]
    for _ in range(100):
        with pytest.raises(ValueError, match="record 1") as info:
            await futs[1]
    assert len(traceback.extract_tb(info.value.__traceback__)) < 10
    assert traceback.extract_tb(info.value.__traceback__)[-1].name == "failed_in_a_function"
    with pytest.raises(RuntimeError):
        futs[0].result()
    assert batch.failures() == [(TP[0], TP[1], bad1), (TP[0], TP[1], bad3),
                                (TP[0], TP[1], whole)]
    first = batch.first_failure()
    assert first is not None and first[0] is bad1 and first[1] is tb1
    assert "failed" in repr(futs[1])

    result = SendManyResult([batch], 5)
    assert result.failures() == batch.failures()
    with pytest.raises(ValueError, match="record 1"):
        await result


async def test_record_errors_covering_every_record() -> None:
    batch = new_batch(2)
    e0, e1 = ValueError("0"), ValueError("1")
    batch.record_errors = {0: e0, 1: e1}
    complete(batch, -1, RuntimeError("batch"))
    assert [f.exception() for f in futures_of(batch)] == [e0, e1]
    assert [e for _t, _p, e in batch.failures()] == [e0, e1]  # no record has the batch's


async def test_record_errors_type_and_success_without_errors() -> None:
    batch = new_batch(2)
    with pytest.raises(TypeError):
        batch.record_errors = [ValueError()]  # type: ignore[assignment]
    batch.record_errors = {}
    complete(batch, 12)
    assert [f.result().offset for f in futures_of(batch)] == [12, 13]
    assert batch.failures() == [] and batch.first_failure() is None
    assert await SendManyResult([batch], 2) == 2


# -- split batches ---------------------------------------------------------------------


def split(parent: ProducerBatch, sizes: list[int]) -> list[ProducerBatch]:
    """Children holding ``parent``'s records in order, ``sizes[k]`` records each."""
    children = []
    first = 0
    for size in sizes:
        child = new_batch(size, parent.tp, first=parent.parent_offset + first)
        children.append(child)
        first += size
    parent.set_children(children)
    return children


async def test_split_resolves_through_the_children() -> None:
    parent = new_batch(6)
    futs = futures_of(parent)
    c1, c2 = split(parent, [4, 2])
    assert parent.children == [c1, c2]
    assert (c1.parent, c1.parent_offset, c2.parent, c2.parent_offset) == (parent, 0, parent, 4)
    assert parent.parent is None and parent.parent_offset == 0

    async def wait_it(f: RecordFuture) -> int:
        return (await f).offset

    awaiting = asyncio.create_task(wait_it(futs[5]))
    await spin()
    assert finish(c2, 500) == []  # c1 still pending: the parent is not done
    await spin()
    assert not awaiting.done() and not futs[5].done()  # consistent with parent.result
    with pytest.raises(asyncio.InvalidStateError):
        futs[5].result()
    err = RuntimeError("c1 failed")
    assert finish(c1, -1, err) == [parent]
    assert futs[5].done() and parent.result.done()
    assert await awaiting == 501
    assert [f.exception() for f in futs[:4]] == [err] * 4
    assert [f.result().offset for f in futs[4:]] == [500, 501]
    assert [f.result().timestamp for f in futs[4:]] == [TS + 4, TS + 5]
    assert parent.failures() == [(TP[0], TP[1], err)]
    result = SendManyResult([parent], 6)
    assert result.done() and result.failures() == [(TP[0], TP[1], err)]
    with pytest.raises(RuntimeError, match="c1 failed"):
        await result


async def test_nested_split_and_parent_completion() -> None:
    root = new_batch(6)
    futs = futures_of(root)
    seen: list[RecordFuture] = []
    for f in futs:
        f.add_done_callback(seen.append)
    c1, c2 = split(root, [4, 2])
    c11, c12 = split(c1, [1, 3])
    assert (c11.parent, c11.parent_offset, c12.parent, c12.parent_offset) == (c1, 0, c1, 1)
    assert (c1.parent, c1.parent_offset, c2.parent_offset) == (root, 0, 4)
    bad = ValueError("record 2 of the root")
    c12.record_errors = {1: bad}

    assert finish(c12, 120, RuntimeError("other records of c12")) == []
    assert finish(c2, 200) == []
    assert not root.result.done() and not c1.result.done()
    assert not any(f.done() for f in futs)
    # the last leaf completes c1, then root
    assert finish(c11, 110) == [c1, root]
    await spin()
    assert seen == futs  # each callback once, in order, when root completed
    assert futs[0].result().offset == 110
    assert futs[1].exception() is c12.error
    assert futs[2].exception() is bad  # c12's record 1
    assert futs[3].exception() is c12.error
    assert [f.result().offset for f in futs[4:]] == [200, 201]
    # a leaf's record errors first, then its error (for its other records)
    assert root.failures() == [(TP[0], TP[1], bad), (TP[0], TP[1], c12.error)]
    first = root.first_failure()
    assert first is not None and first[0] is bad
    # child_done() reports each child once
    assert not c11.child_done() and not c1.child_done() and not root.child_done()


async def test_split_asyncio_wait_and_gather() -> None:
    parent = new_batch(4)
    futs = futures_of(parent)
    c1, c2 = split(parent, [2, 2])
    loop = asyncio.get_running_loop()
    loop.call_later(0.02, finish, c2, 20)
    done, pending = await asyncio.wait(futs, timeout=0.1)
    assert not done and pending == set(futs)
    loop.call_later(0.02, finish, c1, 10)
    assert [m.offset for m in await asyncio.gather(*futs)] == [10, 11, 20, 21]


async def test_parent_completed_on_its_own_answers_for_pending_children() -> None:
    parent = new_batch(4)
    futs = futures_of(parent)
    c1, c2 = split(parent, [2, 2])
    finish(c1, 10)
    aborted = RuntimeError("producer closed")
    complete(parent, -1, aborted)  # e.g. aborted while c2 was in flight
    assert [f.result().offset for f in futs[:2]] == [10, 11]
    assert [f.exception() for f in futs[2:]] == [aborted, aborted]
    assert parent.failures() == [(TP[0], TP[1], aborted)]
    complete(c2, 20)
    assert c2.child_done()  # the caller would find the parent done already

    # failures in record order: the pending first child's records have the parent's
    parent = new_batch(4)
    futs = futures_of(parent)
    c1, c2 = split(parent, [2, 2])
    c2_error = ValueError("c2")
    finish(c2, -1, c2_error)
    complete(parent, -1, aborted)
    assert parent.failures() == [(TP[0], TP[1], aborted), (TP[0], TP[1], c2_error)]
    assert [f.exception() for f in futs] == [aborted, aborted, c2_error, c2_error]
    complete(c1, 0)


async def test_send_many_result_counts_only_the_runs_of_the_call() -> None:
    """A call's records in a batch may be several runs (another send wrote into the
    batch while the call waited on the Python path): only the runs count, and an error
    shared by several of them is listed once."""
    batch = new_batch(6)
    c1, c2, c3 = split(batch, [2, 2, 2])  # the call wrote 0-1 and 4-5; 2-3 are others'
    finish(c1, 10)
    finish(c2, -1, RuntimeError("the other send's records"))
    finish(c3, 30)
    result = SendManyResult([batch, batch], 4, [0, 4], [2, 6])
    assert result._spans == ((batch, 0, 2), (batch, 4, 6))
    assert await result == 4
    assert result.failures() == [] and result.failed_count() == 0
    # adjacent runs are one; without ends, a run goes to the batch's end
    assert SendManyResult([batch, batch], 3, [0, 2], [2, 3])._spans == ((batch, 0, 3),)
    assert SendManyResult([batch], 2, [4])._spans == ((batch, 4, 6),)

    whole = RuntimeError("the whole batch")
    failed = new_batch(6)
    complete(failed, -1, whole)
    result = SendManyResult([failed, failed], 4, [0, 4], [2, 6])
    assert result.failures() == [(TP[0], TP[1], whole)]  # once, not once per run
    assert result.failed_count() == 4
    with pytest.raises(RuntimeError, match="the whole batch"):
        await result


async def test_ranged_failures_with_record_errors() -> None:
    """failures(lo, hi), first_failure(lo, hi) and failed_count(lo, hi) answer for the
    records lo..hi-1 only: with KIP-467 errors, the batch's error is one of them only if
    one of those records has no error of its own (as failures() of the whole batch);
    an empty range has none. Also through nested splits, for a range that ends inside
    a child, and in a SendManyResult."""
    batch = new_batch(4)
    e0, e2 = ValueError("record 0"), ValueError("record 2")
    whole = RuntimeError("the batch")
    batch.record_errors = {0: e0, 2: e2}
    complete(batch, -1, whole)

    def errors(b: ProducerBatch, lo: int, hi: int) -> list[BaseException]:
        return [e for _t, _p, e in b.failures(lo, hi)]

    assert errors(batch, 0, 1) == [e0]
    assert errors(batch, 2, 3) == [e2]
    assert errors(batch, 1, 2) == [whole]
    assert errors(batch, 0, 3) == [e0, e2, whole]
    assert errors(batch, 3, 3) == [] and errors(batch, 4, -1) == []
    first = batch.first_failure(2, 3)
    assert first is not None and first[0] is e2
    assert batch.first_failure(3, 3) is None
    assert [batch.failed_count(lo, hi) for lo, hi in ((0, 1), (0, 4), (3, 3), (4, -1))] \
        == [1, 4, 0, 0]
    assert batch.failed_count(3, 1) == 0  # (an inverted range is empty too)

    # record errors without a batch error (each of those records fails with its own)
    only = new_batch(3)
    only.record_errors = {1: e0}
    complete(only, 7)
    assert [f.exception() for f in futures_of(only)] == [None, e0, None]
    assert only.failed_count() == 1 and only.failed_count(1, 2) == 1
    assert only.failed_count(2, 3) == 0

    # nested: root 0..5 -> c1 (0..3) -> c11 (0), c12 (1..3, its record 1 is root's 2)
    root = new_batch(6)
    c1, c2 = split(root, [4, 2])
    c11, c12 = split(c1, [1, 3])
    bad = ValueError("root's record 2")
    c12.record_errors = {1: bad}
    finish(c12, -1, RuntimeError("c12's other records"))
    finish(c11, 110)
    finish(c2, 200)
    assert errors(root, 2, 3) == [bad]  # a range ending inside c12
    assert errors(root, 0, 1) == [] and errors(root, 3, 5) == [c12.error]
    assert errors(root, 0, 3) == [bad, c12.error]
    assert [root.failed_count(lo, hi) for lo, hi in ((2, 3), (0, 3), (0, 6), (4, 6))] \
        == [1, 2, 3, 0]
    result = SendManyResult([root], 2, [2], [3])
    assert result.failures() == [(TP[0], TP[1], bad)] and result.failed_count() == 1
    with pytest.raises(ValueError, match="root's record 2"):
        await result


async def test_callbacks_after_one_raising_system_exit_still_run() -> None:
    """A done-callback that raises SystemExit or KeyboardInterrupt stops the loop, as
    in asyncio; the other callbacks of the batch's records still run when the loop runs
    again, as those of asyncio futures do (their Handles stay queued): a task waiting
    in asyncio.wait() on one of those records would hang otherwise."""

    def scenario(kind: type[BaseException]) -> list[str]:
        loop = asyncio.new_event_loop()
        try:
            pool = BufferPool(1 << 20, 16384)
            block = pool.try_allocate(16384)
            assert block is not None
            batch = ProducerBatch(TP, block, loop.create_future(), time.monotonic())
            for i in range(2):
                batch.builder.append(TS + i, None, b"v%d" % i, None)
            futs = futures_of(batch)
            ran: list[str] = []

            def stop(_f: RecordFuture) -> None:
                raise kind()

            futs[0].add_done_callback(lambda _f: ran.append("first"))
            futs[0].add_done_callback(stop)
            futs[0].add_done_callback(lambda _f: ran.append("after, same record"))
            futs[1].add_done_callback(lambda _f: ran.append("other record"))
            complete(batch, 0)
            loop.call_soon(loop.stop)
            with pytest.raises(kind):
                loop.run_forever()
            assert ran == ["first"]
            loop.call_soon(loop.stop)
            loop.run_forever()  # the loop runs again
            return ran
        finally:
            loop.close()

    for kind in (SystemExit, KeyboardInterrupt):
        assert await asyncio.to_thread(scenario, kind) == [
            "first", "after, same record", "other record"], kind


async def test_set_children_and_child_done_are_checked() -> None:
    parent = new_batch(4)
    with pytest.raises(ValueError, match="records"):
        parent.set_children([new_batch(3)])
    with pytest.raises(ValueError):
        parent.set_children([])
    with pytest.raises(ValueError, match="is not of"):
        parent.set_children([new_batch(4, ("other", 0))])
    twice = new_batch(2)
    with pytest.raises(ValueError, match="twice"):
        parent.set_children([twice, twice])
    done_child = new_batch(4)
    complete(done_child, 0)
    with pytest.raises(ValueError, match="already done"):
        parent.set_children([done_child])
    with pytest.raises(TypeError):
        parent.set_children([object()])  # type: ignore[list-item]
    assert parent.children is None and twice.parent is None  # nothing half-done
    c1, c2 = split(parent, [1, 3])
    with pytest.raises(ValueError, match="already split"):
        parent.set_children([new_batch(4)])
    other = new_batch(1)
    with pytest.raises(ValueError, match="already a child"):
        other.set_children([c1])
    with pytest.raises(asyncio.InvalidStateError):
        c1.child_done()
    complete(c1, 0)
    assert not c1.child_done()
    assert not c1.child_done()  # reported once
    assert finish(c2, 1) == [parent]
    done_parent = new_batch(1)
    complete(done_parent, 0)
    with pytest.raises(ValueError, match="is done"):
        done_parent.set_children([new_batch(1)])
    assert not done_parent.child_done()  # no parent
    complete(other, 0)


# -- a real broker ---------------------------------------------------------------------


async def test_wait_and_as_completed_on_a_real_producer(kafka_bootstrap: str,
                                                          topic_factory: Any) -> None:
    topic = topic_factory(partitions=1)
    async with Producer(bootstrap_servers=kafka_bootstrap, linger_ms=5) as producer:
        futs = [await producer.send(topic, b"value-%d" % i) for i in range(200)]
        done, pending = await asyncio.wait(futs, timeout=5)
        assert not pending and done == set(futs)
        offsets = sorted(f.result().offset for f in futs)
        assert offsets == list(range(offsets[0], offsets[0] + 200))

        more = [await producer.send(topic, b"more-%d" % i, key=b"k") for i in range(50)]
        got = [(await f).offset for f in asyncio.as_completed(more, timeout=5)]
        assert sorted(got) == list(range(offsets[-1] + 1, offsets[-1] + 51))
        assert [m.offset for m in await asyncio.gather(*more)] == sorted(got)
        assert all(f.done() and not f.cancelled() for f in futs + more)


# -- the settled flag: "done" without a method call -------------------------------------


async def test_the_accumulator_settles_a_batch_with_its_result() -> None:
    """RecordAccumulator.complete() sets the batch's result and its ``settled`` flag
    together; the record futures read the flag (a C read, not ``result.done()``). A
    batch whose result was set without the flag (as the helper above does) reads as
    done too: the flag only ever short-cuts the check."""
    from aioproducer.accumulator import RecordAccumulator

    acc = RecordAccumulator(batch_size=16384, batch_max_size=16384, buffer_memory=1 << 20,
                            linger_ms=5, retry_backoff_ms=100, retry_backoff_max_ms=1000,
                            delivery_timeout_ms=120_000)
    tp = ("t", 0)
    block = acc.pool.try_allocate(16384)
    assert block is not None
    batch = acc.new_batch(tp, block, asyncio.get_running_loop())
    for i in range(3):
        assert batch.builder.append(TS + i, None, b"v%d" % i, None) == i
    futs = futures_of(batch)
    assert not batch.settled and not any(f.done() for f in futs)
    with pytest.raises(asyncio.InvalidStateError):
        futs[0].result()
    acc.batches[tp].remove(batch)
    acc.complete(batch, 70, -1, None)
    assert batch.settled and batch.result.done()
    assert all(f.done() for f in futs)
    assert [(await f).offset for f in futs] == [70, 71, 72]
    assert futs[1].exception() is None and not futs[2].cancel()
    # Set the other way (result only): the same answers.
    other = new_batch(2)
    other_futs = futures_of(other)
    complete(other, base_offset=5)
    assert not other.settled
    assert [f.done() for f in other_futs] == [True, True]
    assert [(await f).offset for f in other_futs] == [5, 6]
