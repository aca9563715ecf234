"""The compression thread (``_native/compressor.pyx``) without a broker: its frames
decode with the Python libraries, its queue bound, cancellation, close and the loop's
wake-up, a batch handed over before it closes, and the accumulator leaving a batch at
the thread for a later pass. (The real-broker tests are in
tests/broker/test_compression_thread.py.)"""

from __future__ import annotations

import asyncio
import gc
import random
import time
from typing import Any

import lz4.frame  # type: ignore[import-untyped]
import pytest
import zstandard

from aioproducer._native import BufferPool, ProducerBatch
from aioproducer._native.compressor import CompressorThread
from aioproducer.accumulator import RecordAccumulator
from aioproducer.batch_split import records_of_batch
from aioproducer.compression import (
    codec_id,
    decompress,
    lz4_frame_level,
    make_compression_thread,
    make_compressor,
)
from aioproducer.errors import KafkaError
from aioproducer.metadata import Cluster, PartitionInfo, TopicInfo

SEED = 20261128


def _data(rng: random.Random, n: int) -> bytes:
    """Text-like bytes with random runs: compressible, not trivially."""
    words = [rng.randbytes(rng.randint(1, 12)) for _ in range(200)]
    out = bytearray()
    while len(out) < n:
        out += rng.choice(words) if rng.random() < 0.8 else rng.randbytes(rng.randint(1, 40))
    return bytes(out[:n])


def _wait_for(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)


@pytest.mark.parametrize(("codec", "level"), [
    ("zstd", 3), ("zstd", 1), ("zstd", 19), ("zstd", -5),
    ("lz4", 9), ("lz4", 1), ("lz4", 12),
])
def test_frames_decode_to_the_input(codec: str, level: int) -> None:
    print(f"seed={SEED}")
    rng = random.Random(SEED + level)
    thread = make_compression_thread(codec, level)
    assert thread is not None
    thread = CompressorThread(thread.codec, thread.level, min_bytes=1)
    try:
        inputs = [_data(rng, n) for n in (1, 100, 65_535, 65_536, 65_537, 300_000)]
        for data in inputs:
            job = thread.submit(data)
            assert job is not None
            out = job.result()
            assert out is not None
            assert decompress(codec_id(codec), out) == data
            if codec == "lz4":
                # What lz4.frame makes on the loop and Kafka's Java reader takes:
                # independent 64 KiB blocks, no checksums but the header's.
                info = lz4.frame.get_frame_info(out)
                assert (info["block_size"], info["block_linked"], info["content_checksum"],
                        info["block_checksum"]) == (65536, False, False, False)
            else:
                params = zstandard.get_frame_parameters(out)
                assert params.content_size == len(data) and not params.has_checksum
        assert thread.compressed == len(inputs) and thread.failed == 0
    finally:
        thread.close()


def test_same_frames_as_the_loops_compressor_for_lz4() -> None:
    """LZ4's frame output depends on the level only: the thread and lz4.frame, both
    LZ4 1.9.4, write the same bytes (zstd frames may differ by the library's
    internal choices; they decode to the same records, above)."""
    rng = random.Random(SEED)
    data = _data(rng, 200_000)
    for level in (9, 10):
        thread = CompressorThread(3, lz4_frame_level(level), min_bytes=1)
        try:
            job = thread.submit(data)
            assert job is not None
            compress = make_compressor("lz4", level)
            assert compress is not None
            assert job.result() == bytes(compress(memoryview(data)))
        finally:
            thread.close()


def test_small_inputs_and_a_full_queue_are_declined() -> None:
    thread = CompressorThread(4, 3, min_bytes=1000, max_pending=3)
    try:
        assert thread.submit(b"x" * 999) is None
        assert not thread.running  # nothing submitted: no thread yet
        thread.hold(True)
        jobs = [thread.submit(b"y" * 5000) for _ in range(3)]
        assert all(j is not None for j in jobs)
        assert thread.pending == 3
        assert thread.submit(b"z" * 5000) is None  # the loop compresses this one
        assert not any(j.done for j in jobs if j is not None)
        thread.hold(False)
        assert [decompress(4, j.result() or b"") for j in jobs if j is not None] \
            == [b"y" * 5000] * 3
        assert thread.pending == 0
        assert thread.submit(b"z" * 5000) is not None
    finally:
        thread.close()


def test_dropped_jobs_are_skipped_and_freed() -> None:
    thread = CompressorThread(4, 3, min_bytes=1, max_pending=64)
    try:
        thread.hold(True)
        for _ in range(20):
            assert thread.submit(b"a" * 10_000) is not None  # dropped at once
        kept = thread.submit(b"b" * 10_000)
        assert kept is not None
        gc.collect()
        thread.hold(False)
        assert decompress(4, kept.result() or b"") == b"b" * 10_000
        _wait_for(lambda: thread.pending == 0)
        assert thread.compressed == 1  # the 20 dropped ones were never compressed
    finally:
        thread.close()


def test_close_fails_the_queued_jobs_and_never_hangs() -> None:
    thread = CompressorThread(3, 0, min_bytes=1)
    thread.hold(True)
    jobs = [thread.submit(bytes(50_000)) for _ in range(4)]
    thread.close()
    # The thread stopped before taking them: None, the batch compresses on the loop.
    assert [j.result() for j in jobs if j is not None] == [None] * 4
    assert thread.submit(bytes(50_000)) is None
    assert not thread.running
    thread.close()  # idempotent


def test_the_thread_outlives_its_owner_safely() -> None:
    """A job running when its CompressorThread and CompressJob are dropped: the thread
    finishes it and frees everything (run under the debug build and ASan-free CI, a
    use after free would crash here)."""
    rng = random.Random(SEED)
    data = _data(rng, 2_000_000)
    for _ in range(5):
        thread = CompressorThread(4, 19, min_bytes=1)
        job = thread.submit(data)
        assert job is not None
        del thread, job
        gc.collect()
    thread = CompressorThread(4, 3, min_bytes=1)
    job = thread.submit(data)
    assert job is not None and decompress(4, job.result() or b"") == data
    thread.close()


@pytest.mark.parametrize("codec", [0, 1, 2, 5])
def test_only_zstd_and_lz4(codec: int) -> None:
    with pytest.raises(ValueError):
        CompressorThread(codec, 0)
    assert make_compression_thread(["none", "gzip", "snappy"][min(codec, 2)], 1) is None


@pytest.mark.asyncio
async def test_the_loop_is_woken_once_jobs_are_done() -> None:
    loop = asyncio.get_running_loop()
    thread = CompressorThread(4, 3, min_bytes=1)
    woken = asyncio.Event()
    calls = 0

    def on_done() -> None:
        nonlocal calls
        calls += 1
        woken.set()

    thread.attach(loop, on_done)
    try:
        thread.hold(True)
        jobs = [thread.submit(bytes(20_000)) for _ in range(5)]
        await asyncio.sleep(0.05)
        assert calls == 0
        thread.hold(False)
        await asyncio.wait_for(woken.wait(), 10)
        _wait_for(lambda: thread.pending == 0)
        await asyncio.sleep(0.01)
        assert all(j is not None and j.done for j in jobs)
        # However many finished, the pipe wakes the loop at least once, at most once
        # per job.
        assert 1 <= calls <= 5
        with pytest.raises(RuntimeError):
            thread.attach(loop, on_done)
    finally:
        thread.close()


def _batch(codec: str, size: int = 1 << 17, pool: BufferPool | None = None) -> ProducerBatch:
    pool = pool or BufferPool(1 << 20, size)
    block = pool.try_allocate(size)
    assert block is not None
    batch = ProducerBatch(("t", 0), block, None, 0.0)
    batch.builder.set_compression(codec_id(codec), make_compressor(codec, -1 if codec != "lz4"
                                                                   else 9))
    return batch


def _records(n: int) -> list[tuple[int, bytes, bytes, None]]:
    rng = random.Random(SEED)
    return [(1_700_000_000_000 + i, b"k%d" % i, _data(rng, rng.randint(10, 300)), None)
            for i in range(n)]


def test_only_batches_the_loop_would_spend_time_on_go() -> None:
    """With ``min_seconds``, the choice follows what the codec cost the loop per byte
    (observe): nothing goes until it is known, a batch expected to take less than
    ``min_seconds`` stays, and one in 16 of those worth it stays too (a fresh sample).
    A sample lower than the estimate replaces it; a higher one moves it by an eighth."""
    thread = CompressorThread(4, 3, min_bytes=1000, min_seconds=100e-6, max_pending=64)
    try:
        thread.hold(True)  # no job runs: only the loop's samples count, below
        data = bytes(100_000)
        assert thread.seconds_per_mib == 0
        assert thread.submit(data) is None  # cost unknown: the loop compresses, learns
        thread.observe(100_000, 50_000)  # 0.5 ns per byte: 50 us for this batch
        assert thread.submit(data) is None
        assert thread.submit(data * 3) is not None  # 150 us
        thread.observe(100_000, 500_000)  # slower data: up by an eighth, to 1.06 ns/B
        assert thread.seconds_per_mib == pytest.approx(1.0625e-9 * 1048576)
        taken = [thread.submit(data) is not None for _ in range(40)]
        # 40 calls after the one accepted above: calls 15 and 31 are the loop's samples.
        assert [i for i, t in enumerate(taken) if not t] == [14, 30]
        thread.observe(1000, 100)  # a fast sample replaces the estimate at once
        assert thread.seconds_per_mib == pytest.approx(0.1e-9 * 1048576)
        assert thread.submit(data * 3) is None
        thread.observe(0, 5)  # nothing learnt from nothing
        thread.observe(5, 0)
        assert thread.seconds_per_mib == pytest.approx(0.1e-9 * 1048576)

        # The thread's own cost counts when it is lower: zeros compress in no time
        # there, so even with a slow estimate on the loop, nothing more goes.
        thread.observe(100_000, 10_000_000)  # (up by an eighth)
        big = bytes(200_000)  # 2.5 ms at the loop's estimate; microseconds as zeros
        thread.hold(False)
        job = thread.submit(big)
        assert job is not None
        assert job.result() is not None
        # Once the thread has timed zeros (its first job also made the codec's
        # context: a second may be needed), they stay on the loop.
        declined = False
        for _ in range(4):
            job = thread.submit(big)
            if job is None:
                declined = True
                break
            assert job.result() is not None
        assert declined
    finally:
        thread.close()


@pytest.mark.parametrize("codec", ["zstd", "lz4"])
def test_a_batch_handed_over_is_sealed_and_closes_with_the_threads_bytes(codec: str) -> None:
    thread = make_compression_thread(codec, 3 if codec == "zstd" else 9)
    assert thread is not None
    thread.observe(1, 1_000_000)  # as if the loop found this data slow to compress
    try:
        batch = _batch(codec)
        records = _records(300)
        for r in records:
            assert batch.builder.append(*r) >= 0
        thread.hold(True)
        assert batch.builder.compress_ahead(thread)
        assert batch.builder.compressing
        assert not batch.builder.compress_ahead(thread)  # once
        # Sealed: a record that would have fit is refused, the batch is unchanged.
        size = batch.builder.size_in_bytes
        assert batch.builder.append(0, b"k", b"v", None) == -1
        assert batch.builder.size_in_bytes == size
        thread.hold(False)
        batch.builder.close(5, 0, 0, False)  # waits for the thread if need be
        assert not batch.builder.compressing
        assert batch.builder.compression == codec_id(codec)
        assert thread.compressed == 1
        with batch.builder.view() as view:
            assert list(records_of_batch(view)) == records
    finally:
        thread.close()


def test_the_thread_reads_the_block_in_place_and_the_pool_waits_for_it() -> None:
    """No copy: the job holds an export of the batch's block while the thread may read
    it. A batch aborted meanwhile gives its block back, and the pool quarantines it
    (neither reused nor freed) until the job lets go."""
    thread = CompressorThread(4, 3, min_bytes=1)
    pool = BufferPool(1 << 20, 1 << 17)
    try:
        batch = _batch("zstd", pool=pool)
        for r in _records(100):
            batch.builder.append(*r)
        block = batch.builder.block
        thread.hold(True)
        assert batch.builder.compress_ahead(thread)
        assert block.exports == 1
        # Aborted before the thread took it: back to the pool, into the quarantine.
        pool.release(block)
        assert pool.quarantined_bytes == block.capacity
        thread.hold(False)
        _wait_for(lambda: thread.pending == 0)
        batch.builder.detach()  # what the accumulator does: the job goes with it
        assert block.exports == 0
        pool.reclaim()
        assert pool.quarantined_bytes == 0

        # Closed normally: the export goes once the thread's bytes are taken.
        other = _batch("zstd", pool=pool)
        for r in _records(100):
            other.builder.append(*r)
        assert other.builder.compress_ahead(thread)
        assert other.builder.block.exports == 1
        other.builder.close()
        assert other.builder.block.exports == 0
    finally:
        thread.close()


def test_a_batch_whose_job_failed_compresses_on_the_loop() -> None:
    thread = CompressorThread(4, 3, min_bytes=1)
    batch = _batch("zstd")
    records = _records(100)
    for r in records:
        batch.builder.append(*r)
    thread.hold(True)
    assert batch.builder.compress_ahead(thread)
    thread.close()  # the job fails: close() compresses with the batch's compressor
    batch.builder.close()
    assert batch.builder.compression == 4
    with batch.builder.view() as view:
        assert list(records_of_batch(view)) == records


def test_uncompressed_empty_or_small_batches_are_not_handed_over() -> None:
    thread = CompressorThread(4, 3, min_bytes=10_000)
    try:
        assert not _batch("zstd").builder.compress_ahead(thread)  # empty
        small = _batch("zstd")
        small.builder.append(0, None, b"x" * 100, None)
        assert not small.builder.compress_ahead(thread)
        assert small.builder.append(0, None, b"x" * 100, None) >= 0  # not sealed
        pool = BufferPool(1 << 20, 1 << 16)
        block = pool.try_allocate(1 << 16)
        assert block is not None
        plain = ProducerBatch(("t", 0), block, None, 0.0)
        plain.builder.append(0, None, b"x" * 20_000, None)
        assert not plain.builder.compress_ahead(thread)
        # A batch that failed before it closed (its block back in the pool): the
        # accumulator may still find it as the partition's last batch.
        gone_pool = BufferPool(1 << 20, 1 << 17)
        gone = _batch("zstd", pool=gone_pool)
        gone.builder.append(0, None, b"x" * 20_000, None)
        gone_pool.release(gone.builder.block)
        assert not gone.builder.compress_ahead(thread)
        assert thread.pending == 0
    finally:
        thread.close()


@pytest.mark.asyncio
async def test_the_accumulator_hands_a_full_batch_over_and_waits_for_it() -> None:
    """A partition's batch found full goes to the thread when the next record opens a
    new one; ready() and drain() leave it while the thread has it (the pipe wakes the
    Sender), then take it compressed. A compressor replaced after construction (tests
    inject failing ones) is not bypassed."""
    thread = make_compression_thread("zstd", 3)
    assert thread is not None
    thread.observe(1, 1_000_000)  # as if the loop found this data slow to compress
    acc = RecordAccumulator(batch_size=16_384, buffer_memory=1 << 22, linger_ms=60_000,
                            retry_backoff_ms=10, retry_backoff_max_ms=100,
                            delivery_timeout_ms=60_000, codec=4,
                            compressor=make_compressor("zstd", 3), offload=thread)
    info = TopicInfo("t", (PartitionInfo(0, 0),), available=(0,))
    cluster = Cluster(nodes={0: ("127.0.0.1", 9)}, topics={"t": info},
                      leaders={("t", 0): 0})
    woken = asyncio.Event()
    thread.attach(asyncio.get_running_loop(), woken.set)
    try:
        thread.hold(True)
        rng = random.Random(SEED)
        values = [_data(rng, 200) for _ in range(400)]
        first = None
        for i, v in enumerate(values):
            res = await acc.append("t", info, 0, 1_700_000_000_000 + i, None, v, None, 300,
                                   sticky=None, max_block_s=1.0)
            first = first or res.batch
            if len(acc.batches[("t", 0)]) == 2:
                break
        assert first is not None and first.full and first.builder.compressing
        now = time.monotonic()
        assert acc.ready(cluster, now, set()).nodes == set()
        assert acc.drain(cluster, [0], 1 << 20, now, set()) == {}
        thread.hold(False)
        await asyncio.wait_for(woken.wait(), 10)
        assert not first.builder.compressing
        assert acc.ready(cluster, now, set()).nodes == {0}
        drained = acc.drain(cluster, [0], 1 << 20, now, set())
        assert drained[0][0] is first
        first.builder.close()
        assert first.builder.compression == 4 and thread.compressed == 1
        with first.builder.view() as view:
            got = [r[2] for r in records_of_batch(view)]
        assert got == values[:len(got)] and len(got) == first.record_count

        # The loop's own compressions (of batches big enough) teach the thread what
        # the codec costs: this data compresses fast, nothing more goes.
        batch_closed_before = thread.seconds_per_mib
        acc.batch_closed(first)  # compressed by the thread: nothing learnt
        assert thread.seconds_per_mib == batch_closed_before
        loop_made = _batch("zstd")
        for r in _records(200):
            loop_made.builder.append(*r)
        loop_made.builder.close()
        assert loop_made.builder.compress_ns > 0
        acc.batch_closed(loop_made)
        assert thread.seconds_per_mib < batch_closed_before
        assert thread.seconds_per_mib == pytest.approx(
            loop_made.builder.compress_ns / loop_made.builder.records_size * 1048576 / 1e9)

        # A replaced compressor is the one used: nothing more goes to the thread.
        thread.observe(1, 1_000_000)
        acc.compressor = make_compressor("zstd", 1)
        for v in values * 3:
            await acc.append("t", info, 0, 0, None, v, None, 300, sticky=None,
                             max_block_s=1.0)
        assert thread.compressed == 1 and thread.pending == 0
    finally:
        thread.close()
        acc.abort_all(KafkaError("test over"))

