"""The compression thread on the real broker: zstd and LZ4 batches compressed off the
event loop are read back field for field by confluent-kafka, named with their codec by
Kafka's ``DumpLogSegments``, in order (idempotence at the defaults); a batch held at
the thread waits for it and the thread's wake-up sends it; ``close()`` with batches at
a stopped thread neither hangs nor loses an acknowledged record; a transaction commits
batches the thread compressed. (The thread without a broker:
tests/unit/test_compressor_thread.py.)"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from support.kafka_util import consume_all, partition_offsets
from support.log_util import check_log_layout, dump_batches

from aioproducer import Producer, ProducerClosedError
from aioproducer._native.compressor import CompressorThread

SEED = 20261128
BOUND = 60.0

Rec = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def _records(n: int, seed: int) -> list[Rec]:
    """Text-like values (compressible) with one in five random, keys, some headers and
    tombstones."""
    rng = random.Random(seed)
    words = [rng.randbytes(rng.randint(2, 9)).hex().encode() for _ in range(300)]
    out: list[Rec] = []
    for i in range(n):
        value: bytes | None = b" ".join(rng.choice(words) for _ in range(rng.randint(5, 40)))
        if i % 5 == 1:
            value = rng.randbytes(rng.randint(0, 200))
        elif i % 97 == 0:
            value = None
        headers: list[tuple[str, bytes | None]] = (
            [("i", str(i).encode()), ("none", None)] if i % 7 == 0 else [])
        out.append((f"k{i % 1000}".encode(), value, headers))
    return out


def _offload(producer: Producer) -> CompressorThread:
    thread = producer._accumulator.offload
    assert thread is not None
    return thread


def _eager(producer: Producer) -> Producer:
    """The producer's thread takes every full batch of 8 KiB or more, whatever the
    codec costs the loop on this data (the default leaves batches that compress in
    under 100 us on the loop, a choice that depends on the machine's speed): these
    tests need batches at the thread. Before start(), which attaches it."""
    thread = _offload(producer)
    producer._accumulator.offload = CompressorThread(thread.codec, thread.level, 8192)
    return producer


def _check_read_back(bootstrap: str, topic: str, recs: list[Rec], metas: list[Any],
                     isolation: str = "read_uncommitted") -> dict[int, int]:
    got = consume_all(bootstrap, topic, len(recs), timeout=120, isolation=isolation)
    assert len(got) == len(recs)
    by_pos = {(m.partition, m.offset): m for m in got}
    per_partition: dict[int, list[int]] = defaultdict(list)
    for (key, value, headers), meta in zip(recs, metas, strict=True):
        m = by_pos[(meta.partition, meta.offset)]
        assert (m.key, m.value, m.headers) == (key, value, headers)
        per_partition[meta.partition].append(meta.offset)
    counts: dict[int, int] = {}
    for p, offsets in per_partition.items():
        # In send order, each record once (idempotence and the thread keep the order).
        if isolation == "read_uncommitted":
            assert offsets == list(range(len(offsets))), f"partition {p}"
        else:
            assert offsets == sorted(set(offsets)), f"partition {p}"
        counts[p] = len(offsets)
    return counts


@pytest.mark.asyncio
@pytest.mark.parametrize("codec", ["zstd", "lz4"])
async def test_batches_compressed_on_the_thread_read_back(
        kafka_bootstrap: str, topic_factory: Any, log_dir: Path | None, codec: str) -> None:
    topic = topic_factory(partitions=3)
    recs = _records(40_000, SEED)
    print(f"seed={SEED}")
    async with _eager(Producer(bootstrap_servers=kafka_bootstrap, compression_type=codec,
                               batch_size=65_536)) as producer:
        thread = _offload(producer)
        futs = [await producer.send(topic, v, key=k, headers=h) for k, v, h in recs]
        await producer.flush()
        metas = [f.result() for f in futs]
        compressed, failed = thread.compressed, thread.failed
    assert not thread.running  # close() stopped it
    print(f"{compressed} batches compressed on the thread, {failed} failed")
    assert compressed >= 10 and failed == 0
    counts = _check_read_back(kafka_bootstrap, topic, recs, metas)
    if log_dir is None:
        return
    batches = dump_batches(log_dir, topic)
    check_log_layout(batches, counts)
    assert Counter(b.codec for b in batches) == {codec: len(batches)}
    assert {p: hi - lo for p, (lo, hi) in partition_offsets(kafka_bootstrap, topic).items()} \
        == counts


@pytest.mark.asyncio
async def test_without_the_thread_batches_compress_on_the_loop(
        kafka_bootstrap: str, topic_factory: Any, log_dir: Path | None) -> None:
    topic = topic_factory(partitions=2)
    recs = _records(10_000, SEED + 1)
    async with Producer(bootstrap_servers=kafka_bootstrap, compression_type="zstd",
                        batch_size=65_536, compression_thread=False) as producer:
        assert producer._accumulator.offload is None
        futs = [await producer.send(topic, v, key=k, headers=h) for k, v, h in recs]
        await producer.flush()
        metas = [f.result() for f in futs]
    counts = _check_read_back(kafka_bootstrap, topic, recs, metas)
    if log_dir is not None:
        batches = dump_batches(log_dir, topic)
        check_log_layout(batches, counts)
        assert {b.codec for b in batches} == {"zstd"}


@pytest.mark.asyncio
async def test_batches_wait_for_the_thread_and_its_wakeup_sends_them(
        kafka_bootstrap: str, topic_factory: Any) -> None:
    """The thread is held: full batches handed to it are not sent (the Sender leaves
    them), the partition's later batches wait behind them, nothing is acknowledged.
    Released, its pipe wakes the Sender and everything goes, in order. (Without the
    wake-up, flush() would wait for the linger of 60 s.)"""
    topic = topic_factory(partitions=1)
    recs = _records(20_000, SEED + 2)
    async with _eager(Producer(bootstrap_servers=kafka_bootstrap, compression_type="zstd",
                               batch_size=32_768, linger_ms=60_000)) as producer:
        await asyncio.wait_for(producer.send_and_wait(topic, b"warm-up"), BOUND)
        thread = _offload(producer)
        thread.hold(True)
        futs = [await producer.send(topic, v, key=k, headers=h) for k, v, h in recs]
        flush = asyncio.ensure_future(producer.flush())
        await asyncio.sleep(0.5)
        pending = thread.pending
        assert pending >= 1
        assert not any(f.done() for f in futs), "a batch went out before its compression"
        assert not flush.done()
        t0 = time.monotonic()
        thread.hold(False)
        await asyncio.wait_for(flush, BOUND)
        took = time.monotonic() - t0
        metas = [f.result() for f in futs]
        print(f"{pending} batches held at the thread; flushed {took:.2f} s after release, "
              f"{thread.compressed} compressed there")
        assert took < 10
    got = consume_all(kafka_bootstrap, topic, len(recs) + 1, timeout=120)
    assert [(m.key, m.value, m.headers) for m in got[1:]] == recs
    assert [m.offset for m in metas] == list(range(1, len(recs) + 1))


@pytest.mark.asyncio
async def test_close_with_batches_at_a_held_thread_loses_nothing_acknowledged(
        kafka_bootstrap: str, topic_factory: Any) -> None:
    """close(timeout) while the thread holds batches: close() returns in time, the
    records it could not send fail with ProducerClosedError, every acknowledged one is
    in the topic once, and nothing else is."""
    topic = topic_factory(partitions=2)
    recs = _records(15_000, SEED + 3)
    producer = _eager(Producer(bootstrap_servers=kafka_bootstrap, compression_type="lz4",
                               batch_size=32_768))
    await producer.start()
    await asyncio.wait_for(producer.send_and_wait(topic, b"warm-up", partition=0), BOUND)
    thread = _offload(producer)
    futs = [await producer.send(topic, v, key=k, headers=h) for k, v, h in recs[:5000]]
    await producer.flush()
    thread.hold(True)
    futs += [await producer.send(topic, v, key=k, headers=h) for k, v, h in recs[5000:]]
    await asyncio.sleep(0.2)
    assert thread.pending >= 1
    t0 = time.monotonic()
    await asyncio.wait_for(producer.close(timeout=1.0), BOUND)
    assert time.monotonic() - t0 < 10
    assert all(f.done() for f in futs)
    acked = [(r, f.result()) for r, f in zip(recs, futs, strict=True) if f.exception() is None]
    failed = [f.exception() for f in futs if f.exception() is not None]
    assert failed and all(isinstance(e, ProducerClosedError) for e in failed)
    assert len(acked) >= 5000
    print(f"{len(acked)} acknowledged, {len(failed)} failed at close")
    got = consume_all(kafka_bootstrap, topic, len(acked) + 1, timeout=60)
    stored = {(m.partition, m.offset): (m.key, m.value, m.headers) for m in got}
    assert len(stored) == len(acked) + 1  # the warm-up and the acknowledged, nothing else
    for (key, value, headers), meta in acked:
        assert stored[(meta.partition, meta.offset)] == (key, value, headers)

