"""Blocks of batch memory and the pool that hands them out (compiled: pool.pyx)."""

from typing import final

DEBUG_BUILD: bool
"""True when the core was compiled with ``AIOPRODUCER_DEBUG=1``."""

@final
class Block:
    """A fixed chunk of malloc'd memory from a :class:`BufferPool`.

    Exports read-only buffers only; each live view counts in :attr:`exports`.
    """

    @property
    def capacity(self) -> int:
        """Usable bytes."""
    @property
    def exports(self) -> int:
        """Live buffer views (memoryviews) over the block."""
    @property
    def released(self) -> bool:
        """True once given back to its pool (also while quarantined)."""
    def view(self, start: int, stop: int) -> memoryview:
        """Read-only view of ``[start:stop]``; an export until it is released."""
    def __buffer__(self, flags: int, /) -> memoryview: ...

@final
class BufferPool:
    """A bounded pool of :class:`Block` memory, like the Java client's ``BufferPool``."""

    def __init__(self, total_memory: int, batch_size: int, *, preallocate: int = 0,
                 pooled_up_to: int = 0) -> None: ...
    @property
    def total_memory(self) -> int: ...
    @property
    def batch_size(self) -> int: ...
    @property
    def pooled_up_to(self) -> int:
        """The largest pooled block size: ``batch_size`` doubled while it stays within
        the ``pooled_up_to`` given (``batch_size`` by default)."""
    @property
    def available_memory(self) -> int:
        """Free pooled blocks + never-allocated memory (quarantined blocks not included)."""
    @property
    def free_blocks(self) -> int:
        """Pooled blocks (of every pooled size) on the free lists."""
    @property
    def pooled_bytes(self) -> int:
        """Bytes of the pooled blocks on the free lists."""
    @property
    def allocated_bytes(self) -> int:
        """Bytes handed out, quarantined blocks included (+ available == total)."""
    @property
    def quarantined_bytes(self) -> int:
        """Bytes of released blocks still waiting for their views to go."""
    def try_allocate(self, size: int) -> Block | None:
        """A block of at least ``size`` bytes, or None when the memory is in use.

        ValueError if ``size <= 0`` or ``size > total_memory``.
        """
    def release(self, block: Block) -> None:
        """Give a block back; ValueError if released before or from another pool."""
    def reclaim(self) -> int:
        """Sweep the quarantine now; the bytes made available."""
    def _check_invariants(self) -> None:
        """AssertionError if the accounting is inconsistent (for tests)."""
