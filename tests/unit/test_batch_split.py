"""Splitting a batch the broker refused as too large (no broker: the accumulator and
the native builder; the real-broker scenario is in test_exactly_once.py)."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from aioproducer._native import BATCH_HEADER_SIZE, BufferPool, ProducerBatch
from aioproducer.accumulator import RecordAccumulator
from aioproducer.batch_split import records_of_batch
from aioproducer.compression import codec_id, make_compressor

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def _records(n: int, seed: int) -> list[tuple[int, bytes | None, bytes | None,
                                              list[tuple[str, bytes | None]] | None]]:
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        key = None if i % 7 == 0 else f"key-{i}".encode()
        value = None if i % 11 == 0 else rnd.randbytes(rnd.randrange(0, 300))
        headers = None if i % 3 else [("h", b"v" * (i % 5)), ("null", None)]
        out.append((1_700_000_000_000 + i * 3, key, value, headers))
    return out


def _written_and_read_back(records: list[Any], codec: str) -> list[Any]:
    """``records`` appended to a 256 KiB batch (``codec``), closed, and read back with
    :func:`records_of_batch`."""
    pool = BufferPool(1 << 20, 1 << 18)
    block = pool.try_allocate(1 << 18)
    assert block is not None
    batch = ProducerBatch(("t", 0), block, None, 0.0)
    if codec != "none":
        batch.builder.set_compression(codec_id(codec), make_compressor(codec, -1))
    for r in records:
        assert batch.builder.append(*r) >= 0
    batch.builder.close(7, 1, 100, False)
    assert batch.builder.compression == (codec_id(codec) if codec != "none" else 0)
    with batch.builder.view() as view:
        return list(records_of_batch(view))


@pytest.mark.parametrize("codec", CODECS)
def test_records_of_batch_reads_back_what_the_builder_wrote(codec: str) -> None:
    seed = 20261125
    print(f"seed={seed}")
    records = _records(200, seed)
    got = _written_and_read_back(records, codec)
    expected = [(ts, k, v, h if h else None) for ts, k, v, h in records]
    assert got == expected


def test_varint_lengths_at_every_size_boundary_read_back() -> None:
    # Keys, values and header values whose lengths sit on each side of a varint
    # size step (zigzag: 63/64, 8191/8192), so every length field is sized and
    # written at each width the records use.
    lengths = [0, 1, 63, 64, 65, 8191, 8192, 8193]
    Headers = list[tuple[str, bytes | None]] | None
    records: list[tuple[int, bytes | None, bytes | None, Headers]] = []
    for i, n in enumerate(lengths):
        records.append((1_700_000_000_000 + i * 70_000, b"k" * n, b"v" * n,
                        [("h" * (n % 70), b"x" * n)]))
        records.append((1_700_000_000_000 - i, None, b"w" * (9000 - n), None))
    assert _written_and_read_back(records, "none") == records


def test_records_of_batch_refuses_truncated_input() -> None:
    pool = BufferPool(1 << 16, 1 << 14)
    block = pool.try_allocate(1 << 14)
    assert block is not None
    batch = ProducerBatch(("t", 0), block, None, 0.0)
    for r in _records(10, 1):
        batch.builder.append(*r)
    batch.builder.close()
    data = bytes(batch.builder.view())
    for cut in (10, BATCH_HEADER_SIZE, len(data) - 1):
        with pytest.raises(ValueError):
            list(records_of_batch(data[:cut]))


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_split_keeps_order_sequences_and_futures(codec: str) -> None:
    loop = asyncio.new_event_loop()
    try:
        acc = RecordAccumulator(batch_size=2048, buffer_memory=1 << 20, linger_ms=0,
                                retry_backoff_ms=10, retry_backoff_max_ms=100,
                                delivery_timeout_ms=60_000, codec=codec_id(codec),
                                compressor=make_compressor(codec, -1) if codec != "none"
                                else None)
        tp = ("t", 0)
        records = _records(300, 5)
        block = acc.pool.try_allocate(1 << 17)
        assert block is not None
        # A batch built with a compression estimate that did not hold.
        big = ProducerBatch(tp, block, loop.create_future(), 0.0)
        if codec != "none":
            big.builder.set_compression(codec_id(codec), make_compressor(codec, -1))
        acc.incomplete.add(big)
        for r in records:
            assert big.builder.append(*r) >= 0
        big.builder.close(42, 3, 1000, False)
        big.producer_id, big.producer_epoch, big.base_sequence = 42, 3, 1000
        big.attempts = 2
        before = acc.pool.available_memory
        pieces = acc.split(big, loop)
        assert len(pieces) > 1
        # The big block went back; the pieces live outside buffer_memory.
        assert acc.pool.available_memory > before
        assert list(acc.batches[tp]) == pieces
        assert sum(p.record_count for p in pieces) == len(records)
        seq = 1000
        for p in pieces:
            assert (p.producer_id, p.producer_epoch, p.base_sequence) == (42, 3, seq)
            assert p.attempts == 2 and p.full
            assert p.builder.size_in_bytes <= 2048 + 64  # batch_size (plus codec room)
            seq += p.record_count
        # Each piece, closed, holds its records in order.
        got = []
        for p in pieces:
            p.builder.close(p.producer_id, p.producer_epoch, p.base_sequence, False)
            with p.builder.view() as view:
                got.extend(records_of_batch(view))
        assert got == [(ts, k, v, h if h else None) for ts, k, v, h in records]
        # The big batch completes when its last piece does.
        for i, p in enumerate(pieces):
            assert not big.result.done()
            acc.complete(p, 10 * i, -1, None)
        assert big.result.done()
        assert not acc.incomplete
    finally:
        loop.close()


def test_split_of_a_batch_within_batch_size_makes_progress() -> None:
    """A batch that already fit in batch_size is refused again whole if split into
    batch_size pieces: each split halves it instead, so splitting ends with single
    records (which then fail with the broker's error) and never nests for ever."""
    loop = asyncio.new_event_loop()
    try:
        acc = RecordAccumulator(batch_size=16384, buffer_memory=1 << 20, linger_ms=0,
                                retry_backoff_ms=10, retry_backoff_max_ms=100,
                                delivery_timeout_ms=60_000)
        tp = ("t", 0)
        block = acc.pool.try_allocate(16384)
        assert block is not None
        batch = ProducerBatch(tp, block, loop.create_future(), 0.0)
        acc.incomplete.add(batch)
        for i in range(50):
            assert batch.builder.append(i, None, b"x" * 300, None) >= 0
        depth = 0
        while batch.record_count > 1:
            batch.builder.close()
            pieces = acc.split(batch, loop)
            assert len(pieces) >= 2
            assert max(p.record_count for p in pieces) <= (batch.record_count + 1) // 2 + 1
            acc.batches[tp].clear()
            batch = pieces[0]
            depth += 1
        assert depth <= 7
    finally:
        loop.close()


@pytest.mark.parametrize("codec", ["none", "lz4"])
@pytest.mark.parametrize("big_first", [True, False])
def test_split_puts_an_oversized_record_alone(codec: str, big_first: bool) -> None:
    """A refused batch of one record larger than half the batch and a small one: the
    big record's piece is sized for it, and the slack of its size bound must not take
    the small record too (that piece would be the refused batch again, split for ever:
    a Produce request loop and, through the nested children, a C stack overflow)."""
    loop = asyncio.new_event_loop()
    try:
        acc = RecordAccumulator(batch_size=16384, buffer_memory=1 << 20, linger_ms=0,
                                retry_backoff_ms=10, retry_backoff_max_ms=100,
                                delivery_timeout_ms=60_000, codec=codec_id(codec),
                                compressor=make_compressor(codec, -1) if codec != "none"
                                else None)
        tp = ("t", 0)
        block = acc.pool.try_allocate(16384)
        assert block is not None
        batch = ProducerBatch(tp, block, loop.create_future(), 0.0)
        if codec != "none":
            batch.builder.set_compression(codec_id(codec), make_compressor(codec, -1))
        acc.incomplete.add(batch)
        big = random.Random(7).randbytes(5000)  # incompressible
        records = [(1, None, big, None), (2, None, b"v14", None)]
        for r in (records if big_first else records[::-1]):
            assert batch.builder.append(*r) >= 0
        batch.builder.close()
        pieces = acc.split(batch, loop)
        assert [p.record_count for p in pieces] == [1, 1]
    finally:
        loop.close()
