"""Buffer memory: Java's ``BufferPool``, around the native pool of blocks.

``buffer_memory`` bounds the bytes the producer holds for records not yet
acknowledged. The native :class:`~aioproducer._native.BufferPool` hands out blocks
(``batch_size`` ones kept for reuse, larger ones made to measure) and takes them back;
this room adds what involves waiting and bookkeeping:

- **allocate**: a block now, if the pool has one and no send waits before us
  (:meth:`Memory.allocate_now`);
- **wait**: otherwise, in FIFO order, up to ``max_block_ms``
  (:meth:`Memory.wait`, :class:`~aioproducer.errors.BufferExhaustedError` when the
  time runs out), with the waiter queue served first as blocks come back;
- **release**: a block goes back, and the first waiter is woken
  (:meth:`Memory.release`);
- **blocks outside the pool**: a split batch's pieces (Java allocates them outside
  ``buffer_memory`` too: a split must not wait for memory) and a compressed batch's
  block, whose records wait uncompressed but which is charged only its compressed
  target, paid for by a pool block of that size held until both go back
  (:meth:`Memory.outside`).

Nothing here knows batches: the accumulator asks for blocks and gives them back.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable

from ._native import Block, BufferPool
from .errors import BufferExhaustedError

__all__ = ["Memory"]


class Memory:
    """``buffer_memory`` bytes in blocks, and the sends waiting for one."""

    __slots__ = ("_outside", "_waiters", "on_waited", "pool")

    def __init__(self, buffer_memory: int, batch_size: int,
                 pooled_up_to: int | None = None) -> None:
        self.pool = BufferPool(buffer_memory, batch_size,
                               pooled_up_to=pooled_up_to or batch_size)
        """The native pool (``total_memory``, ``available_memory``...)."""
        self._waiters: deque[asyncio.Future[None]] = deque()
        # Blocks outside buffer_memory: block id -> (the one-block pool it came from,
        # the pool block that pays for it, or None for a split piece's).
        self._outside: dict[int, tuple[BufferPool, Block | None]] = {}
        self.on_waited: Callable[[int], None] | None = None
        """Called with the nanoseconds a send waited for memory (the metrics)."""

    @property
    def total_memory(self) -> int:
        return int(self.pool.total_memory)

    @property
    def available_memory(self) -> int:
        return int(self.pool.available_memory)

    @property
    def waiters(self) -> int:
        """Sends waiting for memory now."""
        return len(self._waiters)

    def allocate_now(self, size: int) -> Block | None:
        """A block of ``size`` bytes if the pool has one now and no send waits for
        memory before us (they are served first, FIFO); else None."""
        return None if self._waiters else self.pool.try_allocate(size)

    async def wait(self, size: int, max_block_s: float,
                   refused: Callable[[], BaseException | None] | None = None) -> Block:
        """A block of ``size`` bytes, waiting FIFO for memory up to ``max_block_s``
        (after :meth:`allocate_now` found none). ``refused()``, asked at every wake,
        returns an error to raise instead (the producer closes or failed)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max_block_s
        fut: asyncio.Future[None] = loop.create_future()
        self._waiters.append(fut)
        started = time.perf_counter_ns()
        try:
            while True:
                if refused is not None:
                    err = refused()
                    if err is not None:
                        raise err
                if self._waiters[0] is fut:
                    block = self.pool.try_allocate(size)
                    if block is not None:
                        return block
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise BufferExhaustedError(
                        f"failed to allocate {size} bytes within max_block_ms="
                        f"{max_block_s * 1000:.0f}: buffer_memory={self.pool.total_memory} "
                        f"is in use by records waiting to be sent; the brokers may be slow "
                        f"or unreachable, or buffer_memory is too small for this load"
                    )
                # Quarantined blocks come back without any event: poll them briefly.
                # One timer per wait, and the future awaited as it is: woken by a
                # release, the task runs at the loop's next turn (asyncio.wait_for
                # over asyncio.shield took two more turns, two more futures and a
                # timer of its own per wake).
                wait = min(remaining, 0.005) if self.pool.quarantined_bytes else remaining
                timer = loop.call_later(wait, _wake, fut)
                try:
                    await fut
                finally:
                    timer.cancel()
                # Woken (memory came back, or the poll or the deadline is due): keep
                # our place in the queue with a fresh future.
                new: asyncio.Future[None] = loop.create_future()
                self._waiters[self._waiters.index(fut)] = new
                fut = new
        finally:
            if fut in self._waiters:
                self._waiters.remove(fut)
            self._wake_first()
            if self.on_waited is not None:
                self.on_waited(time.perf_counter_ns() - started)

    def outside(self, size: int, charged: Block | None = None) -> Block:
        """A block of ``size`` bytes outside ``buffer_memory``: a split piece's
        (``charged`` None) or a compressed batch's, paid for by ``charged`` (a pool
        block of its target, given back with it)."""
        own = BufferPool(size, size)
        block = own.try_allocate(size)
        assert block is not None  # a fresh pool of exactly this size
        self._outside[id(block)] = (own, charged)
        return block

    def release(self, block: Block) -> None:
        """Give a block back (from the pool or from outside it, with what paid for
        it), and wake the first send waiting for memory."""
        outside = self._outside.pop(id(block), None) if self._outside else None
        if outside is None:
            self.pool.release(block)
        else:
            own, charged = outside
            own.release(block)
            if charged is None:
                return  # a split piece's: buffer_memory did not change
            self.pool.release(charged)
        if self._waiters:
            self._wake_first()

    def wake_all(self) -> None:
        """Wake every waiting send (each looks again: closing, memory)."""
        for fut in self._waiters:
            if not fut.done():
                fut.set_result(None)

    def _wake_first(self) -> None:
        if self._waiters and not self._waiters[0].done():
            self._waiters[0].set_result(None)


def _wake(fut: asyncio.Future[None]) -> None:
    """A waiter's timer: look again (a poll of the quarantine, or the deadline)."""
    if not fut.done():
        fut.set_result(None)
