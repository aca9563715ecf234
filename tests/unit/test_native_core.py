"""The native core (``_native/records``) and its asyncio glue (``_native/aio``).

The core routes and appends records and keeps batches' outcomes without asyncio; the
glue binds the appender to its event loop through the thread's async-generator hooks.
When an application replaces those hooks, the appender must not take records (the
send takes the exact Python path), and sends still work.
"""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from aioproducer._native import Appender, BufferPool, ProducerBatch, RecordFuture, murmur2_partition
from aioproducer._native.records import CoreAppender, CoreBatch

ROOT = Path(__file__).resolve().parents[2]
BLOCK = 1 << 16


@pytest.fixture
def pool() -> Iterator[BufferPool]:
    yield BufferPool(64 * BLOCK, BLOCK)


def open_batches(app: CoreAppender, pool: BufferPool, topic: str, n: int,
                 loop: asyncio.AbstractEventLoop) -> list[ProducerBatch]:
    route = app.set_route(topic, n)
    batches = []
    for p in range(n):
        block = pool.try_allocate(BLOCK)
        assert block is not None
        batch = ProducerBatch((topic, p), block, loop.create_future(), 0.0)
        route.tails[p] = batch
        batches.append(batch)
    return batches


# -- the asyncio glue: the loop check ------------------------------------------------


@pytest.mark.asyncio
async def test_append_on_the_bound_loop(pool: BufferPool) -> None:
    loop = asyncio.get_running_loop()
    app = Appender(hash_keys=True)
    batches = open_batches(app, pool, "t", 3, loop)
    app.set_route("t", 3).sticky = 1
    assert app.append("t", b"v", None, None, None) is None  # not bound yet
    app.bind(loop)
    fut = app.append("t", b"v", None, None, None)
    assert isinstance(fut, RecordFuture)
    assert fut.batch is batches[1] and fut.partition == 1
    app.bind(None)
    assert app.append("t", b"v", None, None, None) is None


@pytest.mark.asyncio
async def test_replaced_asyncgen_hooks_take_the_python_path(pool: BufferPool) -> None:
    loop = asyncio.get_running_loop()
    app = Appender(hash_keys=True)
    batches = open_batches(app, pool, "t", 2, loop)
    app.set_route("t", 2).sticky = 0
    app.bind(loop)
    assert app.append("t", b"before", None, None, None) is not None
    seen: list[object] = []

    def firstiter(agen: object) -> None:  # the application's own hooks
        seen.append(agen)

    def finalizer(agen: object) -> None:
        pass

    class Other:
        def firstiter(self, agen: object) -> None:
            pass

    saved = sys.get_asyncgen_hooks()
    try:
        sys.set_asyncgen_hooks(firstiter=firstiter, finalizer=finalizer)
        assert app.append("t", b"v", None, None, None) is None
        assert app.append("t", b"v", b"k", None, None) is None
        assert app.append("t", b"v", None, 1, None) is None
        # a bound method, but not of the bound loop
        sys.set_asyncgen_hooks(firstiter=Other().firstiter, finalizer=finalizer)
        assert app.append("t", b"v", None, None, None) is None
    finally:
        sys.set_asyncgen_hooks(*saved)
    assert batches[0].record_count == 1 and batches[1].record_count == 0
    # the loop's own hooks back: the native path again
    assert app.append("t", b"after", None, None, None) is not None
    assert batches[0].record_count == 2


@pytest.mark.asyncio
async def test_another_threads_loop_is_not_the_bound_one(pool: BufferPool) -> None:
    loop = asyncio.get_running_loop()
    app = Appender(hash_keys=True)
    open_batches(app, pool, "t", 1, loop)
    app.set_route("t", 1).sticky = 0
    app.bind(loop)
    results: list[object] = []

    def other_thread() -> None:
        async def main() -> None:
            results.append(app.append("t", b"v", None, None, None))
        asyncio.run(main())
        results.append(app.append("t", b"v", None, None, None))  # no loop at all

    t = threading.Thread(target=other_thread)
    t.start()
    t.join()
    assert results == [None, None]


# -- the core: the one partition choice ----------------------------------------------


@pytest.mark.asyncio
@pytest.mark.parametrize("n", [1, 3, 7, 12])
async def test_append_many_partitions_like_murmur2_partition(pool: BufferPool, n: int) -> None:
    loop = asyncio.get_running_loop()
    app = Appender(hash_keys=True)
    batches = open_batches(app, pool, "t", n, loop)
    rng = random.Random(n)
    keys = [rng.randbytes(rng.randrange(0, 20)) for _ in range(100)]
    touched: list[ProducerBatch] = []
    assert app.append_many("t", [b"v"] * len(keys), keys, 0, None, 1, touched) == len(keys)
    expected = [0] * n
    for k in keys:
        expected[murmur2_partition(k, n)] += 1
    assert [b.record_count for b in batches] == expected
    assert sorted(b.partition for b in touched) == [p for p in range(n) if expected[p]]
    # append() chooses the same partition
    app.bind(loop)
    for k in keys[:20]:
        fut = app.append("t", b"v", k, None, None)
        assert fut is not None and fut.partition == murmur2_partition(k, n)


@pytest.mark.asyncio
async def test_partition_choice_leaves_the_odd_cases_to_python(pool: BufferPool) -> None:
    loop = asyncio.get_running_loop()
    app = Appender(hash_keys=True)
    batches = open_batches(app, pool, "t", 3, loop)
    app.bind(loop)
    route = app.set_route("t", 3)
    for bad in (-1, 3, 2**40, 2**80, True, 1.0, "1"):
        assert app.append("t", b"v", None, bad, None) is None, bad
        assert app.append_many("t", [b"v"], None, 0, bad, None, []) == 0, bad
    assert route.sticky == -1  # keyless, no sticky partition chosen yet
    assert app.append("t", b"v", None, None, None) is None
    assert app.append_many("t", [b"v", b"w"], None, 1, None, None, []) == 1
    route.sticky = 2
    assert app.append_many("t", [b"v", b"w"], None, 0, None, None, []) == 2
    assert app.append("t", b"v", None, 0, None) is not None
    assert [b.record_count for b in batches] == [1, 0, 2]
    # keys not hashed natively (the xxhash option, a custom partitioner)
    other = Appender(hash_keys=False)
    open_batches(other, pool, "t", 3, loop)
    other.set_route("t", 3).sticky = 0
    other.bind(loop)
    assert other.append("t", b"v", b"k", None, None) is None
    assert other.append_many("t", [b"v"], [b"k"], 0, None, None, []) == 0
    assert other.append("t", b"v", None, None, None) is not None
    # ignore_keys: keyed records go to the sticky partition
    spread = Appender(hash_keys=True, ignore_keys=True)
    sb = open_batches(spread, pool, "t", 3, loop)
    spread.set_route("t", 3).sticky = 1
    assert spread.append_many("t", [b"v"] * 4, [b"a", b"b", b"c", b"d"], 0, None, None, []) == 4
    assert [b.record_count for b in sb] == [0, 4, 0]
    # a topic with no partitions in its metadata never reaches the hash
    empty = Appender(hash_keys=True)
    empty.set_route("e", 0)
    assert empty.append_many("e", [b"v"], [b"k"], 0, None, None, []) == 0


# -- the core: no asyncio ----------------------------------------------------------


def test_core_imports_and_works_without_asyncio() -> None:
    """The core modules import and route, append, split and report failures with
    ``asyncio`` poisoned in ``sys.modules`` (any import of it would raise), while the
    glue module cannot be imported that way."""
    code = textwrap.dedent(f"""
        import sys, types
        sys.modules["asyncio"] = None  # `import asyncio` now raises ImportError
        # Skip the packages' __init__ (the producer uses asyncio); load the modules.
        for name, path in [("aioproducer", {str(ROOT / "aioproducer")!r}),
                           ("aioproducer._native", {str(ROOT / "aioproducer" / "_native")!r})]:
            m = types.ModuleType(name)
            m.__path__ = [path]
            sys.modules[name] = m
        from aioproducer._native.murmur2 import murmur2_partition
        from aioproducer._native.pool import BufferPool
        from aioproducer._native.records import CoreAppender, CoreBatch, TopicRoute

        class Done:  # a batch's result: the core only asks done()
            def __init__(self, done):
                self.is_done = done
            def done(self):
                return self.is_done

        pool = BufferPool(1 << 20, 1 << 14)
        app = CoreAppender(True)
        route = app.set_route("t", 5)
        assert isinstance(route, TopicRoute)
        result = Done(False)
        batches = [CoreBatch(("t", p), pool.try_allocate(1 << 14), result, 0.0)
                   for p in range(5)]
        route.tails[:] = batches
        keys = [bytes([i]) * i for i in range(40)]
        touched = []
        assert app.append_many("t", [b"v"] * 40, keys, 0, None, None, touched) == 40
        counts = [0] * 5
        for k in keys:
            counts[murmur2_partition(k, 5)] += 1
        assert [b.record_count for b in batches] == counts
        route.sticky = 3
        assert app.append_many("t", [b"w"] * 3, None, 0, None, 7, []) == 3
        assert app.append_many("t", [b"x"], None, 0, 4, 7, []) == 1
        assert batches[3].record_count == counts[3] + 3
        big = batches[0]
        children = [CoreBatch(("t", 0), pool.try_allocate(1 << 14), Done(False), 0.0)]
        children[0].builder.append(1, None, b"c", None)
        for _ in range(big.record_count - 1):
            children[0].builder.append(1, None, b"c", None)
        big.set_children(children)
        assert big.failures() == [] and big.first_failure() is None
        err = ValueError("boom")
        children[0].error = err
        children[0].result.is_done = True
        assert big.failures() == [("t", 0, err)]
        assert big.first_failure()[0] is err
        assert sys.modules["asyncio"] is None
        try:
            import aioproducer._native.aio
        except ImportError:
            print("CORE-OK")
    """)
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                       text=True, timeout=60)
    assert r.stdout.strip() == "CORE-OK", r.stdout + r.stderr


def test_core_classes_are_the_bases_of_the_glue() -> None:
    assert issubclass(ProducerBatch, CoreBatch) and issubclass(Appender, CoreAppender)
    assert not hasattr(CoreBatch, "waiter") and not hasattr(CoreAppender, "bind")
