"""BufferPool / Block: exact accounting, reuse, exhaustion and the export quarantine."""

from __future__ import annotations

import ctypes
import gc
import pickle
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aioproducer._native import DEBUG_BUILD, BatchBuilder, Block, BufferPool

KB = 1024


def check(pool: BufferPool) -> None:
    pool._check_invariants()
    assert pool.allocated_bytes + pool.available_memory == pool.total_memory


def test_constructor_validation() -> None:
    with pytest.raises(ValueError, match="batch_size"):
        BufferPool(1024, 0)
    with pytest.raises(ValueError, match="batch_size"):
        BufferPool(1024, -5)
    with pytest.raises(ValueError, match="total_memory"):
        BufferPool(1023, 1024)
    with pytest.raises(ValueError, match="preallocate"):
        BufferPool(4 * KB, KB, preallocate=5)
    with pytest.raises(ValueError, match="preallocate"):
        BufferPool(4 * KB, KB, preallocate=-1)
    pool = BufferPool(4 * KB, KB)
    assert (pool.total_memory, pool.batch_size) == (4 * KB, KB)
    assert (pool.available_memory, pool.allocated_bytes, pool.free_blocks) == (4 * KB, 0, 0)
    assert pool.quarantined_bytes == 0
    check(pool)


def test_blocks_are_only_made_by_the_pool() -> None:
    with pytest.raises(TypeError):
        Block()
    pool = BufferPool(4 * KB, KB)
    block = pool.try_allocate(KB)
    assert block is not None
    with pytest.raises(TypeError):
        pickle.dumps(block)
    with pytest.raises(TypeError):
        pickle.dumps(pool)


def test_preallocate() -> None:
    pool = BufferPool(8 * KB, KB, preallocate=3)
    assert pool.free_blocks == 3
    assert pool.available_memory == 8 * KB and pool.allocated_bytes == 0
    block = pool.try_allocate(KB)
    assert block is not None and block.capacity == KB
    assert pool.free_blocks == 2
    check(pool)
    full = BufferPool(4 * KB, KB, preallocate=4)
    assert full.free_blocks == 4
    check(full)


def test_batch_size_blocks_are_pooled_and_reused() -> None:
    pool = BufferPool(4 * KB, KB)
    a = pool.try_allocate(KB)
    assert a is not None
    assert pool.allocated_bytes == KB and pool.free_blocks == 0
    pool.release(a)
    assert a.released
    assert pool.free_blocks == 1 and pool.allocated_bytes == 0
    assert pool.available_memory == 4 * KB
    b = pool.try_allocate(KB)
    assert b is not None and b is not a  # same memory, a fresh Block object
    assert pool.free_blocks == 0
    check(pool)


def test_other_sizes_are_freed_not_pooled() -> None:
    pool = BufferPool(10 * KB, KB)
    big = pool.try_allocate(3 * KB + 5)
    small = pool.try_allocate(100)
    assert big is not None and small is not None
    assert big.capacity >= 3 * KB + 5 and small.capacity >= 100
    assert pool.allocated_bytes == big.capacity + small.capacity
    check(pool)
    pool.release(big)
    pool.release(small)
    assert pool.free_blocks == 0
    assert pool.available_memory == 10 * KB and pool.allocated_bytes == 0
    check(pool)


def test_grown_sizes_are_pooled_up_to_pooled_up_to() -> None:
    pool = BufferPool(32 * KB, KB, pooled_up_to=5 * KB)  # pools 1, 2 and 4 KiB blocks
    assert pool.pooled_up_to == 4 * KB
    blocks = [pool.try_allocate(n * KB) for n in (1, 2, 3, 4, 8)]
    assert all(b is not None for b in blocks)
    for b in blocks:
        pool.release(b)  # type: ignore[arg-type]
    assert pool.free_blocks == 3 and pool.pooled_bytes == 7 * KB  # 3 and 8 KiB were freed
    assert pool.available_memory == 32 * KB
    check(pool)
    again = pool.try_allocate(4 * KB)  # from its free list
    assert again is not None and pool.pooled_bytes == 3 * KB and pool.free_blocks == 2
    check(pool)
    assert BufferPool(4 * KB, KB).pooled_up_to == KB  # by default only batch_size


def test_free_up_frees_the_largest_pooled_blocks_first() -> None:
    pool = BufferPool(8 * KB, KB, pooled_up_to=4 * KB)
    blocks = [pool.try_allocate(n * KB) for n in (4, 2, 1, 1)]
    for b in blocks:
        pool.release(b)  # type: ignore[arg-type]
    assert pool.free_blocks == 4 and pool.pooled_bytes == 8 * KB
    odd = pool.try_allocate(3 * KB)  # not a pooled size: frees the 4 KiB block
    assert odd is not None
    assert pool.free_blocks == 3 and pool.pooled_bytes == 4 * KB
    assert pool.available_memory == 5 * KB
    check(pool)


def test_free_up_frees_pooled_blocks_for_a_big_request() -> None:
    pool = BufferPool(4 * KB, KB, preallocate=4)
    big = pool.try_allocate(3 * KB)
    assert big is not None
    assert pool.free_blocks == 1  # three pooled blocks were freed to make room
    assert pool.available_memory == KB
    check(pool)
    assert pool.try_allocate(2 * KB) is None
    last = pool.try_allocate(KB)
    assert last is not None
    assert pool.available_memory == 0
    check(pool)


def test_exhaustion_returns_none_until_a_release() -> None:
    pool = BufferPool(3 * KB, KB)
    blocks = [pool.try_allocate(KB) for _ in range(3)]
    assert all(b is not None for b in blocks)
    assert pool.available_memory == 0
    assert pool.try_allocate(KB) is None
    assert pool.try_allocate(1) is None
    pool.release(blocks[0])  # type: ignore[arg-type]
    again = pool.try_allocate(KB)
    assert again is not None
    assert pool.available_memory == 0
    check(pool)


def test_size_errors() -> None:
    pool = BufferPool(4 * KB, KB)
    with pytest.raises(ValueError, match="larger than the pool"):
        pool.try_allocate(4 * KB + 1)
    with pytest.raises(ValueError, match="positive"):
        pool.try_allocate(0)
    with pytest.raises(ValueError, match="positive"):
        pool.try_allocate(-1)
    assert pool.try_allocate(4 * KB) is not None  # exactly the total is fine
    check(pool)


def test_release_errors() -> None:
    pool = BufferPool(4 * KB, KB)
    other = BufferPool(4 * KB, KB)
    block = pool.try_allocate(KB)
    assert block is not None
    with pytest.raises(ValueError, match="another pool"):
        other.release(block)
    pool.release(block)
    with pytest.raises(ValueError, match="already released"):
        pool.release(block)
    with pytest.raises(ValueError, match="already released"):
        other.release(block)
    with pytest.raises(TypeError):
        pool.release(None)  # type: ignore[arg-type]
    check(pool)
    check(other)


def test_block_views_are_read_only_and_counted() -> None:
    pool = BufferPool(4 * KB, KB)
    block = pool.try_allocate(KB)
    assert block is not None
    assert block.exports == 0
    whole = memoryview(block)
    assert whole.readonly and whole.nbytes == KB and whole.format == "B"
    assert block.exports == 1
    part = block.view(10, 20)
    assert part.readonly and part.nbytes == 10
    assert block.exports == 2
    with pytest.raises((BufferError, TypeError)):
        (ctypes.c_char * KB).from_buffer(block)  # asks for a writable buffer
    assert block.exports == 2
    whole.release()
    assert block.exports == 1
    del part
    gc.collect()
    assert block.exports == 0
    for start, stop in [(-1, 5), (5, 4), (0, KB + 1)]:
        with pytest.raises(ValueError, match="outside"):
            block.view(start, stop)
    assert bytes(block.view(0, 0)) == b""
    assert len(bytes(block.view(0, KB))) == KB
    assert block.exports == 0


def test_a_released_block_exports_nothing() -> None:
    pool = BufferPool(4 * KB, KB)
    block = pool.try_allocate(KB)
    assert block is not None
    pool.release(block)
    with pytest.raises(ValueError, match="released"):
        block.view(0, 1)
    with pytest.raises(BufferError, match="released"):
        memoryview(block)


def test_quarantine_holds_exported_blocks_until_views_go() -> None:
    pool = BufferPool(2 * KB, KB)
    block = pool.try_allocate(KB)
    assert block is not None
    view = block.view(0, 100)
    pool.release(block)
    assert block.released
    assert pool.quarantined_bytes == KB
    assert pool.allocated_bytes == KB  # still counted as handed out
    assert pool.available_memory == KB  # quarantined bytes are not available
    assert pool.free_blocks == 0
    check(pool)
    with pytest.raises(ValueError, match="already released"):
        pool.release(block)

    # The only other memory is handed out; the exported block is not reused.
    other = pool.try_allocate(KB)
    assert other is not None
    assert pool.try_allocate(KB) is None
    assert pool.reclaim() == 0
    assert len(bytes(view)) == 100  # still readable
    check(pool)

    view.release()
    assert block.exports == 0
    # Swept on the next allocate: the block's memory is reusable again.
    again = pool.try_allocate(KB)
    assert again is not None
    assert pool.quarantined_bytes == 0
    check(pool)


def test_reclaim_and_release_sweep_the_quarantine() -> None:
    pool = BufferPool(4 * KB, KB)
    blocks = [pool.try_allocate(KB) for _ in range(3)]
    views = [b.view(0, 8) for b in blocks if b is not None]
    for b in blocks:
        pool.release(b)  # type: ignore[arg-type]
    assert pool.quarantined_bytes == 3 * KB
    views[0].release()
    assert pool.reclaim() == KB
    assert pool.quarantined_bytes == 2 * KB and pool.free_blocks == 1
    views[1].release()
    last = pool.try_allocate(KB)
    assert last is not None
    pool.release(last)  # release also sweeps
    assert pool.quarantined_bytes == KB
    del views[2]
    views.clear()
    gc.collect()
    assert pool.reclaim() == KB
    assert pool.quarantined_bytes == 0 and pool.allocated_bytes == 0
    assert pool.available_memory == 4 * KB
    check(pool)


def test_dropped_block_gives_its_memory_back() -> None:
    pool = BufferPool(4 * KB, KB)
    block = pool.try_allocate(KB)
    big = pool.try_allocate(2 * KB)
    assert block is not None and big is not None
    assert pool.allocated_bytes == 3 * KB
    del block, big
    gc.collect()
    assert pool.allocated_bytes == 0
    assert pool.free_blocks == 1
    check(pool)


def test_pool_outlives_nothing_it_handed_out() -> None:
    # A block keeps its pool alive; dropping the pool first is safe.
    pool = BufferPool(4 * KB, KB)
    block = pool.try_allocate(KB)
    assert block is not None
    view = block.view(0, 4)
    pool.release(block)
    del pool
    gc.collect()
    assert len(bytes(view)) == 4
    view.release()
    del block
    gc.collect()


def test_batch_builder_view_keeps_block_out_of_reuse() -> None:
    pool = BufferPool(KB, KB)
    block = pool.try_allocate(KB)
    assert block is not None
    builder = BatchBuilder(block)
    builder.append(1, b"k", b"v")
    builder.close()
    wire = builder.view()
    pool.release(block)
    assert pool.try_allocate(KB) is None
    data = bytes(wire)
    wire.release()
    fresh = pool.try_allocate(KB)
    assert fresh is not None
    # The new block is the same memory: it was not reused while exported.
    # (Debug builds poison fresh blocks with 0xCD.)
    expected = b"\xcd" * len(data) if DEBUG_BUILD else data
    assert bytes(fresh.view(0, len(data))) == expected


# -- random sequences against a model of Java's BufferPool -------------------------


@dataclass
class Model:
    """Java's BufferPool, with a free list per pooled size: ``batch`` doubled
    0..classes-1 times (one class: Java's exactly)."""

    total: int
    batch: int
    non_pooled: int
    classes: int = 1
    free: list[int] = field(default_factory=list)
    quarantined: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.free += [0] * (self.classes - len(self.free))

    def size_class(self, size: int) -> int:
        for k in range(self.classes):
            if size == self.batch << k:
                return k
        return -1

    def allocate(self, size: int) -> bool:
        k = self.size_class(size)
        if k >= 0 and self.free[k]:
            self.free[k] -= 1
            return True
        if self.available < size:
            return False
        j = self.classes - 1
        while self.non_pooled < size:  # free pooled blocks, the largest first
            while not self.free[j]:
                j -= 1
            self.free[j] -= 1
            self.non_pooled += self.batch << j
        self.non_pooled -= size
        return True

    def give_back(self, size: int) -> None:
        k = self.size_class(size)
        if k >= 0:
            self.free[k] += 1
        else:
            self.non_pooled += size

    @property
    def free_blocks(self) -> int:
        return sum(self.free)

    @property
    def available(self) -> int:
        return self.non_pooled + sum(n * (self.batch << k) for k, n in enumerate(self.free))


ops = st.lists(
    st.one_of(
        st.tuples(st.just("alloc"), st.sampled_from(["batch", "small", "big", "grown"]),
                  st.integers(1, 9)),
        st.tuples(st.just("release"), st.integers(0, 50), st.booleans()),
        st.tuples(st.just("unview"), st.integers(0, 50), st.just(False)),
        st.tuples(st.just("reclaim"), st.just(0), st.just(False)),
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None, database=None)
@given(ops=ops, batch=st.integers(1, 64), blocks=st.integers(1, 8), pre=st.integers(0, 8),
       classes=st.integers(1, 4), extra=st.integers(0, 63))
def test_random_sequences_keep_exact_accounting(
        ops: list[tuple[str, object, object]], batch: int, blocks: int, pre: int,
        classes: int, extra: int) -> None:
    total = batch * blocks + (batch // 2)
    pre = min(pre, total // batch)
    # pooled_up_to between two doublings: the smaller one is the largest pooled size.
    largest = batch << (classes - 1)
    pool = BufferPool(total, batch, preallocate=pre,
                      pooled_up_to=largest + min(extra, largest - 1) if classes > 1 else 0)
    assert pool.pooled_up_to == largest
    model = Model(total, batch, total - pre * batch, classes, free=[pre])
    live: list[Block] = []
    views: list[tuple[Block, memoryview]] = []  # views over released (quarantined) blocks
    for op, a, b in ops:
        if op == "alloc":
            assert isinstance(b, int)
            size = {"batch": batch, "small": max(1, batch // b), "big": batch * b + 1,
                    "grown": batch << (b % 5)}[a]  # type: ignore[index]
            if size > total:
                with pytest.raises(ValueError):
                    pool.try_allocate(size)
                continue
            expect = model.allocate(size)
            got = pool.try_allocate(size)
            assert (got is not None) == expect, (op, size, model, pool)
            if got is not None:
                assert got.capacity >= size and got.exports == 0
                live.append(got)
        elif op == "release" and live:
            assert isinstance(a, int)
            blk = live.pop(a % len(live))
            if b:  # keep a view alive over it: quarantined
                views.append((blk, blk.view(0, min(4, blk.capacity))))
                model.quarantined.append(blk.capacity)
            else:
                model.give_back(blk.capacity)
            pool.release(blk)
        elif op == "unview" and views:
            assert isinstance(a, int)
            blk, view = views.pop(a % len(views))
            view.release()
            assert blk.exports == 0
            # Becomes free at the next sweep (any allocate/release/reclaim).
            pool.reclaim()
            model.quarantined.remove(blk.capacity)
            model.give_back(blk.capacity)
        elif op == "reclaim":
            assert pool.reclaim() == 0  # the model sweeps eagerly on unview
        check(pool)
        assert pool.available_memory == model.available
        assert pool.free_blocks == model.free_blocks
        assert pool.pooled_bytes == model.available - model.non_pooled
        assert pool.quarantined_bytes == sum(model.quarantined)
        assert pool.allocated_bytes == total - model.available
    for blk in live:
        pool.release(blk)
    for _, view in views:
        view.release()
    pool.reclaim()
    check(pool)
    assert pool.allocated_bytes == 0 and pool.available_memory == total
