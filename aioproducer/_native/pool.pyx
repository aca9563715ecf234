"""Blocks of batch memory and the pool that hands them out.

The pool bounds the producer's memory (``buffer_memory``) exactly like the Java
client's ``BufferPool``: ``batch_size`` blocks are kept on a free list and
reused, other sizes are malloc'd and freed on demand, and when the memory is
used up ``try_allocate`` returns None (the asyncio caller waits and retries).
Unlike Java's, it can also reuse the blocks of grown batches (``batch_size``
doubled, up to ``pooled_up_to``: KIP-782's expandable batches), one free list per
size: freed, their memory went back to the C allocator, which returned it to the
kernel, and every new grown batch paid a page fault per 4 KiB it wrote.

A block whose bytes may still be read by the transport (it has live buffer
views) is never reused: releasing it puts it in a quarantine until the views
are gone.
"""

cimport cython
from cpython.buffer cimport PyBUF_FORMAT, PyBUF_ND, PyBUF_STRIDES, PyBUF_WRITABLE
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memset

from .debug cimport AIOP_DEBUG

#: True when the core was compiled with AIOPRODUCER_DEBUG=1.
DEBUG_BUILD = bool(AIOP_DEBUG)

# Debug builds fill fresh blocks and returned memory with these patterns so that
# reads of unwritten or released memory stand out.
cdef enum:
    POISON_FRESH = 0xCD
    POISON_RELEASED = 0xDD


@cython.final
@cython.no_gc_clear  # __dealloc__ needs self.pool to give the memory back
@cython.auto_pickle(False)
cdef class Block:
    """A fixed chunk of memory from a :class:`BufferPool`.

    Supports the buffer protocol with read-only views only; every live view is
    counted in :attr:`exports`.  Blocks are made by ``BufferPool.try_allocate``.
    """

    def __init__(self) -> None:
        raise TypeError("Block objects are made by BufferPool.try_allocate()")

    def __dealloc__(self):
        if self.data == NULL:
            return
        if self.pool is not None:
            # Dropped without release() (or its quarantine list was cleared by
            # the GC): the memory still goes back, so the accounting stays exact.
            self.pool.dropped(self.data, self.capacity,
                              self.state == BLOCK_QUARANTINED)
        else:
            free(self.data)
        self.data = NULL

    @property
    def released(self) -> bool:
        """True once the block was given back to its pool (even if quarantined)."""
        return self.state != BLOCK_LIVE

    def view(self, Py_ssize_t start, Py_ssize_t stop) -> memoryview:
        """A read-only view of bytes ``[start:stop]``; an export until released."""
        if self.state != BLOCK_LIVE:
            raise ValueError("the block was released to its pool")
        if start < 0 or start > stop or stop > self.capacity:
            raise ValueError(
                f"view [{start}:{stop}] is outside the block [0:{self.capacity}]"
            )
        # The slice shares the managed buffer of memoryview(self): one export,
        # released when the last view over it is released or collected.
        return memoryview(self)[start:stop]

    def __getbuffer__(self, Py_buffer* view, int flags):
        if self.state != BLOCK_LIVE:
            raise BufferError("the block was released to its pool")
        if flags & PyBUF_WRITABLE:
            raise BufferError("Block only exports read-only buffers")
        view.buf = self.data
        view.obj = self
        view.len = self.capacity
        view.readonly = 1
        view.itemsize = 1
        view.format = NULL
        if flags & PyBUF_FORMAT:
            view.format = <char*>"B"
        view.ndim = 1
        view.shape = &view.len if (flags & PyBUF_ND) == PyBUF_ND else NULL
        view.strides = &view.itemsize if (flags & PyBUF_STRIDES) == PyBUF_STRIDES else NULL
        view.suboffsets = NULL
        view.internal = NULL
        self.exports += 1

    def __releasebuffer__(self, Py_buffer* view):
        self.exports -= 1

    def __repr__(self) -> str:
        state = {BLOCK_LIVE: "live", BLOCK_QUARANTINED: "quarantined",
                 BLOCK_RELEASED: "released"}[self.state]
        return f"<Block capacity={self.capacity} exports={self.exports} {state}>"


@cython.final
@cython.auto_pickle(False)
cdef class BufferPool:
    """A bounded pool of :class:`Block` memory (Java's ``BufferPool``).

    ``total_memory`` bytes in all; blocks of exactly ``batch_size`` bytes, and of
    ``batch_size`` doubled any number of times up to ``pooled_up_to``, are pooled and
    reused (a free list per size), other sizes are allocated and freed on demand.
    ``preallocate`` creates that many ``batch_size`` blocks up front.
    """

    def __cinit__(self, Py_ssize_t total_memory, Py_ssize_t batch_size, *,
                  Py_ssize_t preallocate=0, Py_ssize_t pooled_up_to=0):
        cdef char* data
        cdef Py_ssize_t size
        cdef int k
        for k in range(MAX_SIZE_CLASSES):
            self.free_list[k] = NULL
            self.free_count[k] = 0
            self.free_cap[k] = 0
        self.pooled = 0
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        if total_memory < batch_size:
            raise ValueError(
                f"total_memory ({total_memory}) must be at least batch_size ({batch_size})"
            )
        if preallocate < 0 or preallocate > total_memory // batch_size:
            raise ValueError(
                f"preallocate must be between 0 and {total_memory // batch_size} "
                f"(total_memory // batch_size), got {preallocate}"
            )
        self.total_memory = total_memory
        self.batch_size = batch_size
        # Doubling only while the result stays <= pooled_up_to: no overflow.
        self.n_classes = 1
        size = batch_size
        while self.n_classes < MAX_SIZE_CLASSES and size <= pooled_up_to // 2:
            size *= 2
            self.n_classes += 1
        self.non_pooled = total_memory
        self.allocated = 0
        self.quarantined = 0
        self.live_blocks = 0
        self.quarantine = []
        for _ in range(preallocate):
            data = <char*>malloc(<size_t>batch_size)
            if data == NULL:
                raise MemoryError(f"cannot preallocate a {batch_size}-byte block")
            if self.push_free(0, data) < 0:
                free(data)
                raise MemoryError("cannot grow the free list")
            self.non_pooled -= batch_size

    def __dealloc__(self):
        # Blocks hold a strong reference to their pool, so no Block can still
        # point at this memory here.
        cdef Py_ssize_t i
        cdef int k
        for k in range(MAX_SIZE_CLASSES):
            if self.free_list[k] != NULL:
                for i in range(self.free_count[k]):
                    free(self.free_list[k][i])
                free(self.free_list[k])
                self.free_list[k] = NULL
                self.free_count[k] = 0

    # -- Python API -------------------------------------------------------------

    @property
    def available_memory(self) -> int:
        """Bytes that could be allocated now: free pooled blocks + never-allocated."""
        return self.non_pooled + self.pooled

    @property
    def pooled_up_to(self) -> int:
        """The largest pooled block size (``batch_size`` doubled ``n_classes - 1`` times)."""
        return self.batch_size << (self.n_classes - 1)

    @property
    def free_blocks(self) -> int:
        """Pooled blocks (of every pooled size) waiting on the free lists."""
        cdef Py_ssize_t n = 0
        cdef int k
        for k in range(self.n_classes):
            n += self.free_count[k]
        return n

    @property
    def pooled_bytes(self) -> int:
        """Bytes of the pooled blocks waiting on the free lists."""
        return self.pooled

    @property
    def allocated_bytes(self) -> int:
        """Bytes handed out and not yet back (quarantined blocks included)."""
        return self.allocated

    @property
    def quarantined_bytes(self) -> int:
        """Bytes of released blocks that wait for their buffer views to go."""
        return self.quarantined

    def try_allocate(self, Py_ssize_t size) -> Block | None:
        """A block of at least ``size`` bytes, or None if the memory is in use.

        ValueError if ``size`` is not positive or exceeds ``total_memory``.
        """
        return self.allocate(size)

    def release(self, Block block not None) -> None:
        """Give a block back (quarantined until its buffer views are released).

        ValueError for a block released before or one from another pool.
        """
        self.release_block(block)

    def reclaim(self) -> int:
        """Sweep the quarantine now; returns the bytes made available."""
        return self.sweep()

    def _check_invariants(self) -> None:
        """Raise AssertionError if the accounting is inconsistent (for tests)."""
        cdef Py_ssize_t i, j, qbytes = 0, pooled = 0
        cdef int k, k2
        cdef Block block
        for k in range(MAX_SIZE_CLASSES):
            if k >= self.n_classes:
                if self.free_count[k] or self.free_list[k] != NULL:
                    raise AssertionError(f"free list {k} is used beyond {self.n_classes} classes")
            else:
                pooled += self.free_count[k] * (self.batch_size << k)
        if pooled != self.pooled:
            raise AssertionError(f"pooled_bytes {self.pooled} != sum of free lists {pooled}")
        if self.allocated + self.non_pooled + pooled != self.total_memory:
            raise AssertionError(
                f"allocated {self.allocated} + never-allocated {self.non_pooled} + "
                f"pooled {pooled} != total {self.total_memory}"
            )
        if self.non_pooled < 0 or self.allocated < 0 or self.live_blocks < 0:
            raise AssertionError(
                f"negative counter: non_pooled={self.non_pooled} "
                f"allocated={self.allocated} live_blocks={self.live_blocks}"
            )
        for k in range(self.n_classes):
            if self.free_count[k] > self.free_cap[k] or self.free_count[k] < 0:
                raise AssertionError(
                    f"free list {k} count {self.free_count[k]} / cap {self.free_cap[k]}")
            for i in range(self.free_count[k]):
                if self.free_list[k][i] == NULL:
                    raise AssertionError(f"free list {k} entry {i} is NULL")
                for k2 in range(k + 1):
                    for j in range(self.free_count[k2] if k2 < k else i):
                        if self.free_list[k2][j] == self.free_list[k][i]:
                            raise AssertionError(
                                f"free list entries {k2}/{j} and {k}/{i} are the same memory")
        if self.quarantine is not None:
            for obj in self.quarantine:
                block = <Block?>obj
                if block.state != BLOCK_QUARANTINED or block.pool is not self:
                    raise AssertionError(f"{block!r} should not be in the quarantine")
                if block.data == NULL or block.exports < 0:
                    raise AssertionError(f"{block!r} in the quarantine has no memory")
                qbytes += block.capacity
            if qbytes != self.quarantined:
                raise AssertionError(
                    f"quarantined_bytes {self.quarantined} != sum of quarantine {qbytes}"
                )
        if self.quarantined > self.allocated:
            raise AssertionError("more bytes quarantined than allocated")
        if self.live_blocks == 0 and self.allocated != self.quarantined:
            raise AssertionError(
                f"no live blocks but {self.allocated - self.quarantined} live bytes"
            )

    def __repr__(self) -> str:
        return (
            f"<BufferPool total={self.total_memory} batch_size={self.batch_size} "
            f"pooled_up_to={self.pooled_up_to} allocated={self.allocated} "
            f"available={self.available_memory} free_blocks={self.free_blocks} "
            f"quarantined={self.quarantined}>"
        )

    # -- C level ----------------------------------------------------------------

    cdef Block allocate(self, Py_ssize_t size):
        cdef char* data
        cdef Block block
        cdef int k, j
        if size <= 0:
            raise ValueError(f"block size must be positive, got {size}")
        if size > self.total_memory:
            raise ValueError(
                f"a {size}-byte block is larger than the pool's total memory "
                f"({self.total_memory} bytes)"
            )
        if self.quarantined:
            self.sweep()
        k = self.size_class(size)
        if k < 0 or self.free_count[k] == 0:
            if self.non_pooled + self.pooled < size:
                return None
        # Make the object first: if that fails no memory has moved yet.
        block = Block.__new__(Block)
        if k >= 0 and self.free_count[k] > 0:
            data = self.pop_free(k)
        else:
            # Java's freeUp(): free pooled blocks (the largest first) until enough
            # is unpooled; the check above says that they hold enough.
            j = self.n_classes - 1
            while self.non_pooled < size:
                while self.free_count[j] == 0:
                    j -= 1
                free(self.pop_free(j))
                self.non_pooled += self.batch_size << j
            data = <char*>malloc(<size_t>size)
            if data == NULL:
                raise MemoryError(f"malloc of a {size}-byte block failed")
            self.non_pooled -= size
        block.data = data
        block.capacity = size
        block.exports = 0
        block.state = BLOCK_LIVE
        block.pool = self
        self.allocated += size
        self.live_blocks += 1
        if AIOP_DEBUG:
            memset(data, POISON_FRESH, <size_t>size)
            self._check_invariants()
        return block

    cdef int release_block(self, Block block) except -1:
        if block.state != BLOCK_LIVE:
            raise ValueError(f"{block!r} was already released")
        if block.pool is not self:
            raise ValueError(f"{block!r} belongs to another pool")
        if self.quarantined:
            self.sweep()
        if block.exports > 0:
            self.quarantine.append(block)
            block.state = BLOCK_QUARANTINED
            self.quarantined += block.capacity
            self.live_blocks -= 1
        else:
            self.live_blocks -= 1
            self.finish(block)
        if AIOP_DEBUG:
            self._check_invariants()
        return 0

    cdef Py_ssize_t sweep(self) except -1:
        cdef Py_ssize_t i, kept = 0, made = 0, n
        cdef Block block
        cdef list q = self.quarantine
        if q is None:  # cleared by the GC while the pool is being torn down
            return 0
        n = len(q)
        for i in range(n):
            block = <Block>q[i]
            if block.exports == 0:
                self.quarantined -= block.capacity
                made += block.capacity
                self.finish(block)
            else:
                q[kept] = block
                kept += 1
        if kept != n:
            del q[kept:]
        return made

    cdef int finish(self, Block block) except -1:
        cdef char* data = block.data
        cdef Py_ssize_t capacity = block.capacity
        block.data = NULL
        block.state = BLOCK_RELEASED
        self.allocated -= capacity
        self.take_back(data, capacity)
        block.pool = None  # last: may drop a reference to self
        return 0

    cdef void take_back(self, char* data, Py_ssize_t capacity) noexcept:
        if AIOP_DEBUG:
            memset(data, POISON_RELEASED, <size_t>capacity)
        cdef int k = self.size_class(capacity)
        if k >= 0 and self.push_free(k, data) == 0:
            return
        free(data)
        self.non_pooled += capacity

    cdef void dropped(self, char* data, Py_ssize_t capacity, bint quarantined) noexcept:
        self.allocated -= capacity
        if quarantined:
            self.quarantined -= capacity
        else:
            self.live_blocks -= 1
        self.take_back(data, capacity)

    cdef int size_class(self, Py_ssize_t size) noexcept:
        cdef Py_ssize_t q
        cdef int k = 0
        if size < self.batch_size or size % self.batch_size != 0:
            return -1
        q = size // self.batch_size
        if q & (q - 1):  # not a power of two
            return -1
        while q > 1:
            q >>= 1
            k += 1
        return k if k < self.n_classes else -1

    cdef int push_free(self, int k, char* data) noexcept:
        cdef Py_ssize_t cap
        cdef char** grown
        if self.free_count[k] == self.free_cap[k]:
            cap = self.free_cap[k] * 2 if self.free_cap[k] else 16
            grown = <char**>realloc(self.free_list[k], <size_t>cap * sizeof(char*))
            if grown == NULL:
                return -1
            self.free_list[k] = grown
            self.free_cap[k] = cap
        self.free_list[k][self.free_count[k]] = data
        self.free_count[k] += 1
        self.pooled += self.batch_size << k
        return 0

    cdef char* pop_free(self, int k) noexcept:
        # Callers check free_count[k] > 0 first.
        self.free_count[k] -= 1
        self.pooled -= self.batch_size << k
        return self.free_list[k][self.free_count[k]]
