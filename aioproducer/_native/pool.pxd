# Memory for record batches: fixed blocks of malloc'd memory handed out by a
# BufferPool that keeps exact accounting (the Java producer's BufferPool idea).
#
# A Block object is handed out exactly once.  When it is released its memory
# goes back to the pool and the object is dead for good; if the memory is
# handed out again it is wrapped in a *new* Block.  A stale reference to a
# released Block therefore can never see or write somebody else's batch.


cdef enum BlockState:
    BLOCK_LIVE = 1          # handed out by try_allocate(); may be written
    BLOCK_QUARANTINED = 2   # released while views were alive; waits for them
    BLOCK_RELEASED = 3      # memory is back in the pool; the object is dead


cdef class BufferPool


cdef class Block:
    cdef char* data                     # start of the memory; NULL once released
    cdef readonly Py_ssize_t capacity   # usable bytes at `data`
    cdef readonly Py_ssize_t exports    # live buffer views over the block
    cdef BlockState state               # see BlockState
    cdef BufferPool pool                # owner; None once the memory went back


# Pooled block sizes: batch_size << k for k < n_classes (at most this many).
cdef enum:
    MAX_SIZE_CLASSES = 16


cdef class BufferPool:
    cdef readonly Py_ssize_t total_memory   # bytes the pool may hand out in all
    cdef readonly Py_ssize_t batch_size     # size of the smallest pooled (reused) blocks
    cdef int n_classes                      # pooled sizes: batch_size << 0 .. n_classes - 1
    cdef Py_ssize_t non_pooled              # never-allocated bytes (Java's nonPooledAvailableMemory)
    cdef Py_ssize_t pooled                  # bytes on the free lists
    cdef Py_ssize_t allocated               # bytes handed out, quarantined ones included
    cdef Py_ssize_t quarantined             # bytes of released blocks still exported
    cdef Py_ssize_t live_blocks             # handed-out blocks not yet released
    cdef char** free_list[MAX_SIZE_CLASSES]         # per size class: stack of free blocks
    cdef Py_ssize_t free_count[MAX_SIZE_CLASSES]    # entries on each free list
    cdef Py_ssize_t free_cap[MAX_SIZE_CLASSES]      # slots allocated for each free list
    cdef list quarantine                    # released Blocks that still had exports

    # A new LIVE block of at least `size` bytes, or None if the memory is not
    # available now.  ValueError for size <= 0 or size > total_memory.
    cdef Block allocate(self, Py_ssize_t size)
    # Give a LIVE block of this pool back (to the quarantine if it is exported).
    cdef int release_block(self, Block block) except -1
    # Finish quarantined blocks whose views are gone; returns the bytes freed.
    cdef Py_ssize_t sweep(self) except -1
    # Move a LIVE/QUARANTINED block's memory back to the pool; kills the block.
    cdef int finish(self, Block block) except -1
    # Memory of a block coming back: onto the free list or free()d.
    cdef void take_back(self, char* data, Py_ssize_t capacity) noexcept
    # Called by Block.__dealloc__ for a block dropped without release().
    cdef void dropped(self, char* data, Py_ssize_t capacity, bint quarantined) noexcept
    # The size class of a block of `size` bytes, or -1 if that size is not pooled.
    cdef int size_class(self, Py_ssize_t size) noexcept
    # Push onto / pop from class k's free list (push returns -1 if it cannot grow);
    # they keep `pooled` up to date.
    cdef int push_free(self, int k, char* data) noexcept
    cdef char* pop_free(self, int k) noexcept
