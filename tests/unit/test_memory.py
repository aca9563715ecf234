"""Buffer memory (``aioproducer/memory.py``, Java's BufferPool) without batches: blocks
now or FIFO waits bounded by max_block_ms, release waking the first waiter, blocks
outside ``buffer_memory`` (a split piece's, a compressed batch's paid for by a pool
block), a refusal raised to waiters, the wait time reported."""

from __future__ import annotations

import asyncio

import pytest

from aioproducer.errors import BufferExhaustedError, ProducerClosedError
from aioproducer.memory import Memory

pytestmark = pytest.mark.asyncio

BLOCK = 1024


async def test_allocate_now_then_wait_fifo_and_release_wakes_the_first() -> None:
    mem = Memory(4 * BLOCK, BLOCK)
    held = [mem.allocate_now(BLOCK) for _ in range(4)]
    assert all(b is not None for b in held) and mem.available_memory == 0
    assert mem.allocate_now(BLOCK) is None
    order: list[int] = []

    async def wait(i: int) -> None:
        block = await mem.wait(BLOCK, 5.0)
        order.append(i)
        mem.release(block)

    waiters = [asyncio.ensure_future(wait(i)) for i in range(3)]
    await asyncio.sleep(0.01)
    assert mem.waiters == 3
    # While sends wait, a new one gets nothing at once even when memory is back.
    first = held.pop()
    assert first is not None
    mem.release(first)
    assert mem.allocate_now(BLOCK) is None  # the waiters come first
    await asyncio.gather(*waiters)
    assert order == [0, 1, 2] and mem.waiters == 0
    for b in held:
        assert b is not None
        mem.release(b)
    assert mem.available_memory == mem.total_memory == 4 * BLOCK


async def test_wait_times_out_with_a_typed_error() -> None:
    mem = Memory(BLOCK, BLOCK)
    block = mem.allocate_now(BLOCK)
    assert block is not None
    with pytest.raises(BufferExhaustedError, match="within max_block_ms=50"):
        await mem.wait(BLOCK, 0.05)
    assert mem.waiters == 0
    mem.release(block)


async def test_blocks_outside_the_pool() -> None:
    mem = Memory(4 * BLOCK, BLOCK)
    piece = mem.outside(3 * BLOCK)  # a split piece: buffer_memory does not change
    assert mem.available_memory == 4 * BLOCK
    mem.release(piece)
    assert mem.available_memory == 4 * BLOCK
    charged = mem.allocate_now(BLOCK)  # a compressed batch's target
    assert charged is not None
    big = mem.outside(8 * BLOCK, charged)  # its uncompressed records, outside the pool
    assert mem.available_memory == 3 * BLOCK
    mem.release(big)  # gives back what paid for it
    assert mem.available_memory == 4 * BLOCK


async def test_a_refusal_is_raised_to_waiters_and_the_wait_is_reported() -> None:
    mem = Memory(BLOCK, BLOCK)
    waited: list[int] = []
    mem.on_waited = waited.append
    block = mem.allocate_now(BLOCK)
    assert block is not None
    refusal: list[BaseException] = []
    task = asyncio.ensure_future(
        mem.wait(BLOCK, 5.0, lambda: refusal[0] if refusal else None))
    await asyncio.sleep(0.01)
    refusal.append(ProducerClosedError("closed while waiting"))
    mem.wake_all()
    with pytest.raises(ProducerClosedError):
        await task
    assert len(waited) == 1 and waited[0] > 0
    mem.release(block)


async def test_a_release_wakes_the_waiter_at_the_next_turn_of_the_loop() -> None:
    """The waiter awaits its own future: a release makes its task runnable at once,
    and it has the block after one turn of the loop, with no timer left behind
    (asyncio.wait_for over asyncio.shield took three turns)."""
    mem = Memory(BLOCK, BLOCK)
    held = mem.allocate_now(BLOCK)
    assert held is not None
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(mem.wait(BLOCK, 60.0))
    await asyncio.sleep(0)
    assert mem.waiters == 1 and not task.done()
    scheduled = getattr(loop, "_scheduled", None)  # asyncio's timers (not uvloop's)
    if scheduled is not None:
        assert len(scheduled) >= 1  # the wait's own timer (the 60 s bound)
    mem.release(held)
    await asyncio.sleep(0)  # one turn: the woken task runs and allocates
    assert task.done() and mem.waiters == 0
    block = task.result()
    if scheduled is not None:
        # Its timer was cancelled (asyncio drops cancelled timers from the heap lazily).
        assert all(h.cancelled() for h in scheduled)
    mem.release(block)


async def test_a_cancelled_waiter_leaves_its_place_to_the_next() -> None:
    mem = Memory(BLOCK, BLOCK)
    held = mem.allocate_now(BLOCK)
    assert held is not None
    first = asyncio.ensure_future(mem.wait(BLOCK, 5.0))
    second = asyncio.ensure_future(mem.wait(BLOCK, 5.0))
    await asyncio.sleep(0)
    assert mem.waiters == 2
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert mem.waiters == 1
    mem.release(held)
    block = await asyncio.wait_for(second, 1.0)
    assert mem.waiters == 0 and mem.available_memory == 0
    mem.release(block)
    assert mem.available_memory == BLOCK


async def test_a_quarantined_block_is_found_by_the_poll() -> None:
    """A block released while a view of it lives is quarantined, and nothing wakes
    the waiter when the view goes: the wait looks again every 5 ms meanwhile."""
    mem = Memory(BLOCK, BLOCK)
    held = mem.allocate_now(BLOCK)
    assert held is not None
    view = memoryview(held)
    mem.release(held)  # quarantined: the view still reads it
    assert mem.pool.quarantined_bytes == BLOCK
    task = asyncio.ensure_future(mem.wait(BLOCK, 5.0))
    await asyncio.sleep(0.02)
    assert not task.done()
    view.release()  # no event: the next poll finds the block
    block = await asyncio.wait_for(task, 1.0)
    assert mem.waiters == 0
    mem.release(block)
