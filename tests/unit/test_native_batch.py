"""The record batch v2 builder, checked against kio's independent decoder."""

from __future__ import annotations

import array
import struct
import sys
from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from kio.records.readers import read_batch
from kio.records.schema import RecordBatch
from kio.serial.readers import read_int8, read_signed_varint, read_signed_varlong

from aioproducer._native import (
    BATCH_HEADER_SIZE,
    BatchBuilder,
    Block,
    BufferPool,
    record_size_upper_bound,
)

Headers = Sequence[tuple[str, bytes | None]]

BASE_TS = 1_700_000_000_123


# -- independent helpers --------------------------------------------------------


def new_block(capacity: int) -> tuple[BufferPool, Block]:
    pool = BufferPool(max(capacity, 1 << 16), capacity)
    block = pool.try_allocate(capacity)
    assert block is not None
    return pool, block


def decode(builder: BatchBuilder) -> RecordBatch:
    view = builder.view()
    try:
        data = bytes(view)
    finally:
        view.release()
    batch, size = read_batch(data, 0)
    assert size == len(data) == builder.size_in_bytes
    return batch


def raw_records(data: bytes) -> list[tuple[int, int, int]]:
    """(attributes, exact timestamp delta, offset delta) of each record, read with kio's
    varint primitives (kio's record reader truncates timestamps to seconds)."""
    out: list[tuple[int, int, int]] = []
    (count,) = struct.unpack_from(">i", data, 57)
    off = BATCH_HEADER_SIZE
    for _ in range(count):
        length, n = read_signed_varint(data, off)
        off += n
        end = off + length
        attrs, n = read_int8(data, off)
        off += n
        ts_delta, n = read_signed_varlong(data, off)
        off += n
        off_delta, n = read_signed_varint(data, off)
        out.append((attrs, ts_delta, off_delta))
        off = end
    assert off == len(data)
    return out


def zigzag(n: int) -> int:
    return (n << 1) ^ (n >> 63)


def uvarint(u: int) -> bytes:
    out = bytearray()
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


def varint(n: int) -> bytes:
    return uvarint(zigzag(n))


def encode_record(ts_delta: int, offset_delta: int, key: bytes | None, value: bytes | None,
                  headers: Headers | None) -> bytes:
    """A straightforward reference encoder of one record (from the protocol docs)."""
    body = bytearray(b"\x00")
    body += varint(ts_delta) + varint(offset_delta)
    for field in (key, value):
        if field is None:
            body += varint(-1)
        else:
            body += varint(len(field)) + field
    hs = headers or ()
    body += varint(len(hs))
    for hk, hv in hs:
        kb = hk.encode()
        body += varint(len(kb)) + kb
        body += varint(-1) if hv is None else varint(len(hv)) + hv
    return varint(len(body)) + bytes(body)


def block_bytes(block: Block) -> bytes:
    return bytes(block.view(0, block.capacity))


# -- round trips ----------------------------------------------------------------


def test_round_trip_every_field() -> None:
    _, block = new_block(16384)
    b = BatchBuilder(block)
    records: list[tuple[int, bytes | None, bytes | None, Headers | None]] = [
        (BASE_TS, b"key-0", b"value-0", None),
        (BASE_TS + 5, None, b"no key", []),
        (BASE_TS + 1, b"no value", None, [("h", b"1")]),
        (BASE_TS - 3000, None, None, [("dup", b"a"), ("dup", None), ("dup", b"")]),
        (BASE_TS + 10, b"", b"", [("", b"empty key"), ("ключ", "значение".encode())]),
        (BASE_TS + 2, b"\x00" * 300, bytes(range(256)) * 3, tuple([("x", b"y")] * 20)),
    ]
    for i, (ts, k, v, h) in enumerate(records):
        assert b.append(ts, k, v, h) == i
    assert b.record_count == len(records)
    assert b.base_timestamp == BASE_TS
    assert b.max_timestamp == BASE_TS + 10
    b.close(producer_id=123456789012, producer_epoch=7, base_sequence=42)
    assert b.closed

    batch = decode(b)
    assert batch.base_offset == 0
    assert batch.batch_length == b.size_in_bytes - 12
    assert batch.partition_leader_epoch == -1
    assert batch.attributes == 0
    assert batch.last_offset_delta == len(records) - 1
    assert batch.base_timestamp == BASE_TS
    assert batch.max_timestamp == BASE_TS + 10
    assert batch.producer_id == 123456789012
    assert batch.producer_epoch == 7
    assert batch.base_sequence == 42
    assert len(batch.records) == len(records)
    for i, (rec, (ts, k, v, h)) in enumerate(zip(batch.records, records, strict=True)):
        assert rec.attributes == 0
        assert rec.offset == i
        assert rec.key == k
        assert rec.value == v
        assert [(hh.key, hh.value) for hh in rec.headers] == [
            (hk.encode(), hv) for hk, hv in (h or ())
        ]
        assert int(rec.timestamp.timestamp()) == ts // 1000
    raw = raw_records(bytes(b.view()))
    assert [r[1] for r in raw] == [ts - BASE_TS for ts, *_ in records]
    assert [r[2] for r in raw] == list(range(len(records)))


def test_header_fields_defaults_and_transactional() -> None:
    _, block = new_block(1024)
    b = BatchBuilder(block)
    b.append(BASE_TS, b"k", b"v")
    b.close()
    batch = decode(b)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (-1, -1, -1)
    assert batch.attributes == 0
    assert b.transactional is False

    _, block2 = new_block(1024)
    t = BatchBuilder(block2)
    t.append(BASE_TS, b"k", b"v")
    t.close(1, 0, 0, transactional=True)
    assert decode(t).attributes == 0x10
    assert t.transactional is True


def test_matches_reference_encoding_byte_for_byte() -> None:
    _, block = new_block(4096)
    b = BatchBuilder(block)
    recs = [(BASE_TS, b"a", b"bb", [("k", b"v")]), (BASE_TS - 1, None, b"c", None)]
    for ts, k, v, h in recs:
        b.append(ts, k, v, h)
    b.close(9, 8, 7)
    data = bytes(b.view())
    body = b"".join(encode_record(ts - BASE_TS, i, k, v, h)
                    for i, (ts, k, v, h) in enumerate(recs))
    assert data[BATCH_HEADER_SIZE:] == body
    assert data[:17] == struct.pack(">qiib", 0, len(data) - 12, -1, 2)
    assert data[21:] == struct.pack(">hiqqqhii", 0, 1, BASE_TS, BASE_TS, 9, 8, 7, 2) + body


@pytest.mark.parametrize(
    "timestamps",
    [
        [BASE_TS, BASE_TS - 1, BASE_TS - 10**9, BASE_TS + 10**9],
        [BASE_TS, BASE_TS + 10**14, BASE_TS - 10**12],  # large deltas (multi-byte varlongs)
        [0, 1, 2**40, 5],
        [BASE_TS] * 3,
    ],
)
def test_timestamp_deltas(timestamps: list[int]) -> None:
    _, block = new_block(4096)
    b = BatchBuilder(block)
    for ts in timestamps:
        b.append(ts, None, b"x")
    b.close()
    batch = decode(b)
    assert batch.base_timestamp == timestamps[0]
    assert batch.max_timestamp == max(timestamps)
    for rec, ts in zip(batch.records, timestamps, strict=True):
        assert int(rec.timestamp.timestamp()) == ts // 1000
    raw = raw_records(bytes(b.view()))
    assert [timestamps[0] + r[1] for r in raw] == timestamps


def test_extreme_timestamps_wrap_like_java() -> None:
    # Deltas are computed in 64-bit two's complement like Java's long arithmetic.
    ts = [-(2**62), 2**62, -(2**63), 2**63 - 1]
    _, block = new_block(1024)
    b = BatchBuilder(block)
    for t in ts:
        assert b.append(t, None, None) >= 0
    b.close()
    data = bytes(b.view())
    (base,) = struct.unpack_from(">q", data, 27)
    (max_ts,) = struct.unpack_from(">q", data, 35)
    assert (base, max_ts) == (ts[0], 2**63 - 1)
    wrapped = [((base + r[1] + 2**63) % 2**64) - 2**63 for r in raw_records(data)]
    assert wrapped == ts
    with pytest.raises(ValueError, match="timestamp_ms"):
        b2 = BatchBuilder(new_block(1024)[1])
        b2.append(2**63, None, None)


def test_buffer_protocol_inputs() -> None:
    _, block = new_block(4096)
    b = BatchBuilder(block)
    ints = array.array("i", [1, 2, 3])
    big = memoryview(b"0123456789")[2:7]
    cases: list[tuple[object, bytes]] = [
        (bytearray(b"ba"), b"ba"),
        (memoryview(b"mv"), b"mv"),
        (ints, ints.tobytes()),
        (big, b"23456"),
        (memoryview(bytearray(b"abcdef"))[::1], b"abcdef"),
    ]
    for obj, _expected in cases:
        b.append(BASE_TS, obj, obj, [("h", obj)])
    b.close()
    for rec, (_, expected) in zip(decode(b).records, cases, strict=True):
        assert rec.key == rec.value == expected
        assert rec.headers[0].value == expected


def test_many_headers_use_the_heap_path() -> None:
    _, block = new_block(65536)
    b = BatchBuilder(block)
    headers = [(f"h{i}", None if i % 3 == 0 else bytes([i]) * i) for i in range(200)]
    assert b.append(BASE_TS, b"k", b"v", headers) == 0
    assert b.append(BASE_TS, b"k", b"v", tuple(headers[:9])) == 1
    b.close()
    recs = decode(b).records
    assert [(h.key, h.value) for h in recs[0].headers] == [(k.encode(), v) for k, v in headers]
    assert len(recs[1].headers) == 9


# -- CRC ------------------------------------------------------------------------


def test_crc_detects_any_corrupted_byte() -> None:
    _, block = new_block(2048)
    b = BatchBuilder(block)
    for i in range(5):
        b.append(BASE_TS + i, b"key%d" % i, b"value" * i, [("h", b"v")])
    b.close(5, 1, 100)
    data = bytes(b.view())
    read_batch(data, 0)  # valid
    for pos in range(17, len(data)):  # the crc itself and everything it covers
        corrupt = bytearray(data)
        corrupt[pos] ^= 0x01
        with pytest.raises(ValueError):
            read_batch(bytes(corrupt), 0)


def test_set_producer_state_recomputes_the_crc() -> None:
    _, block = new_block(2048)
    b = BatchBuilder(block)
    for i in range(3):
        b.append(BASE_TS + i, b"k", b"v%d" % i)
    b.close(1, 2, 3)
    before = decode(b)
    b.set_producer_state(77, 32767, 2**31 - 1)
    after = decode(b)  # read_batch validates the CRC
    assert (after.producer_id, after.producer_epoch, after.base_sequence) == (77, 32767, 2**31 - 1)
    assert (b.producer_id, b.producer_epoch, b.base_sequence) == (77, 32767, 2**31 - 1)
    assert after.crc != before.crc
    assert after.records == before.records

    # Same bytes as a batch closed with those values in the first place.
    _, block2 = new_block(2048)
    fresh = BatchBuilder(block2)
    for i in range(3):
        fresh.append(BASE_TS + i, b"k", b"v%d" % i)
    fresh.close(77, 32767, 2**31 - 1)
    assert bytes(fresh.view()) == bytes(b.view())


# -- errors ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (("now", b"k", b"v", None), "timestamp_ms must be an int"),
        ((1.5, b"k", b"v", None), "timestamp_ms must be an int"),
        ((1, "str key", b"v", None), "key must be bytes-like"),
        ((1, b"k", 42, None), "value must be bytes-like"),
        ((1, b"k", b"v", {"a": b"b"}), "headers must be a list or tuple"),
        ((1, b"k", b"v", [("a", b"b"), "x"]), r"headers\[1\] must be a \(str"),
        ((1, b"k", b"v", [("a", b"b", b"c")]), r"headers\[0\] must be a \(str"),
        ((1, b"k", b"v", [(b"a", b"b")]), r"headers\[0\] key must be str"),
        ((1, b"k", b"v", [("a", "text")]), r"headers\[0\] value must be bytes-like"),
        ((1, memoryview(b"abcdef")[::2], b"v", None), "key must be a C-contiguous"),
    ],
)
def test_wrong_types_name_the_field(args: tuple[object, ...], match: str) -> None:
    _, block = new_block(1024)
    b = BatchBuilder(block)
    before = block_bytes(block)
    with pytest.raises(TypeError, match=match):
        b.append(*args)  # type: ignore[arg-type]
    assert b.record_count == 0 and b.size_in_bytes == BATCH_HEADER_SIZE
    assert block_bytes(block) == before


def test_lifecycle_errors() -> None:
    pool, block = new_block(1024)
    b = BatchBuilder(block)
    with pytest.raises(RuntimeError, match="empty"):
        b.close()
    with pytest.raises(RuntimeError, match="closed"):
        b.view()
    with pytest.raises(RuntimeError, match="closed"):
        b.set_producer_state(1, 1, 1)
    b.append(1, None, b"x")
    with pytest.raises(ValueError, match="int16"):
        b.close(1, 40000, 0)
    with pytest.raises(ValueError, match="int32"):
        b.close(1, 0, 2**31)
    assert not b.closed
    b.close()
    assert b.remaining == 0
    with pytest.raises(RuntimeError, match="closed"):
        b.append(1, None, b"x")
    with pytest.raises(RuntimeError, match="closed"):
        b.close()
    with pytest.raises(TypeError):
        BatchBuilder(None)  # type: ignore[arg-type]

    pool.release(block)
    with pytest.raises(RuntimeError, match="released"):
        b.view()
    with pytest.raises(RuntimeError, match="released"):
        b.set_producer_state(1, 1, 1)
    with pytest.raises(ValueError, match="released"):
        BatchBuilder(block)


def test_released_block_refuses_writes() -> None:
    pool, block = new_block(1024)
    b = BatchBuilder(block)
    b.append(1, None, b"x")
    pool.release(block)
    with pytest.raises(RuntimeError, match="released"):
        b.append(2, None, b"y")
    with pytest.raises(RuntimeError, match="released"):
        b.close()


def test_block_size_limits() -> None:
    pool = BufferPool(4096, 1024)
    small = pool.try_allocate(BATCH_HEADER_SIZE)
    assert small is not None
    with pytest.raises(ValueError, match="too small"):
        BatchBuilder(small)
    tiny = pool.try_allocate(BATCH_HEADER_SIZE + 1)
    assert tiny is not None
    b = BatchBuilder(tiny)
    assert b.remaining == 1
    assert b.append(1, None, None) == -1  # the smallest record is 7 bytes


def test_view_is_an_export_that_keeps_the_block_quarantined() -> None:
    pool = BufferPool(2048, 1024)
    block = pool.try_allocate(1024)
    assert block is not None
    b = BatchBuilder(block)
    b.append(1, b"k", b"v")
    b.close()
    view = b.view()
    assert view.readonly and block.exports == 1
    pool.release(block)
    assert pool.quarantined_bytes == 1024
    assert pool.try_allocate(2048) is None
    view.release()
    assert pool.reclaim() == 1024
    assert pool.try_allocate(2048) is not None


# -- sizes and bounds -----------------------------------------------------------


def test_record_size_upper_bound_basics() -> None:
    assert BATCH_HEADER_SIZE == 61
    plain = record_size_upper_bound(-1, -1, None)
    assert plain >= len(encode_record(2**62, 2**31 - 1, None, None, None))
    h: Headers = [("ключ", b"v"), ("k", None)]
    assert record_size_upper_bound(3, 100, h) >= len(
        encode_record(-(2**63), 2**31 - 1, b"abc", b"x" * 100, h))
    assert record_size_upper_bound(0, 0, []) == record_size_upper_bound(0, 0, None)
    with pytest.raises(ValueError):
        record_size_upper_bound(-2, 0, None)
    with pytest.raises(TypeError, match="headers"):
        record_size_upper_bound(0, 0, "nope")  # type: ignore[arg-type]


@pytest.mark.parametrize("value_len", [0, 1, 100, 127, 128, 16384, 100_000])
def test_first_record_always_fits_a_block_sized_by_the_bound(value_len: int) -> None:
    headers: Headers = [("trace-id", b"t" * 40)]
    size = BATCH_HEADER_SIZE + record_size_upper_bound(8, value_len, headers)
    _, block = new_block(size)
    b = BatchBuilder(block)
    assert b.append(BASE_TS, b"k" * 8, b"v" * value_len, headers) == 0
    b.close()
    assert decode(b).records[0].value == b"v" * value_len


def test_fills_exactly_to_capacity() -> None:
    # A record of exactly the remaining bytes fits; one byte more does not.
    rec = encode_record(0, 0, None, b"x" * 50, None)
    _, block = new_block(BATCH_HEADER_SIZE + len(rec))
    b = BatchBuilder(block)
    before = block_bytes(block)
    assert b.append(1, None, b"x" * 51) == -1
    assert block_bytes(block) == before
    assert b.append(1, None, b"x" * 50) == 0
    assert b.remaining == 0 and b.size_in_bytes == block.capacity
    assert b.append(1, None, None) == -1
    b.close()
    assert decode(b).records[0].value == b"x" * 50


header_st = st.tuples(
    st.text(max_size=6),
    st.one_of(st.none(), st.binary(max_size=40)),
)


@st.composite
def record_st(draw: st.DrawFn, capacity: int, remaining: int) -> tuple[
        int, bytes | None, bytes | None, list[tuple[str, bytes | None]] | None]:
    # Lengths from the whole block range, small ones, and ones that put the
    # record right around the space still free (the exact boundary).
    def field() -> bytes | None:
        if draw(st.booleans()):
            return None
        n = draw(st.one_of(
            st.integers(0, capacity),
            st.integers(0, 16),
            st.integers(max(0, remaining - 40), max(0, remaining + 2)),
        ))
        return bytes([n & 0xFF]) * n

    # Non-negative: kio's reader mis-checks negative maxTimestamps (it compares
    # seconds with milliseconds); negative ones are covered by the raw test above.
    ts = draw(st.one_of(st.integers(0, 2**41), st.just(BASE_TS)))
    headers = draw(st.one_of(st.none(), st.lists(header_st, max_size=12)))
    return ts, field(), field(), headers


@pytest.mark.slow  # seconds: outside the quick loop (-m 'not broker and not slow')
@settings(max_examples=250, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data(), capacity=st.integers(BATCH_HEADER_SIZE + 1, 700))
def test_fuzz_appends_never_overrun_the_block(data: st.DataObject, capacity: int) -> None:
    pool = BufferPool(1 << 16, capacity)
    block = pool.try_allocate(capacity)
    assert block is not None
    b = BatchBuilder(block)
    appended: list[tuple[int, bytes | None, bytes | None, Headers | None]] = []
    for _ in range(data.draw(st.integers(1, 25))):
        ts, key, value, headers = data.draw(record_st(capacity, b.remaining))
        base = appended[0][0] if appended else ts
        delta = ((ts - base + 2**63) % 2**64) - 2**63
        rec = encode_record(delta, len(appended), key, value, headers)
        bound = record_size_upper_bound(-1 if key is None else len(key),
                                        -1 if value is None else len(value), headers)
        assert bound >= len(rec)
        before = block_bytes(block)
        size = b.size_in_bytes
        index = b.append(ts, key, value, headers)
        after = block_bytes(block)
        free = capacity - size
        event("exact fit" if len(rec) == free else "1 byte short" if len(rec) == free + 1
              else "fits" if len(rec) < free else "does not fit")
        if len(rec) <= capacity - size:
            assert index == len(appended)
            assert b.size_in_bytes == size + len(rec)
            assert after[size:size + len(rec)] == rec
            assert after[:size] == before[:size]
            assert after[size + len(rec):] == before[size + len(rec):]
            appended.append((ts, key, value, headers))
        else:
            assert index == -1
            assert b.size_in_bytes == size
            assert after == before
        assert b.size_in_bytes <= capacity
        assert b.remaining == capacity - b.size_in_bytes
    if appended:
        b.close(3, 4, 5)
        batch = decode(b)
        assert [(r.key, r.value) for r in batch.records] == [(k, v) for _, k, v, _ in appended]
        raw = raw_records(bytes(b.view()))
        base = appended[0][0]
        assert [base + r[1] for r in raw] == [ts for ts, *_ in appended]
    pool.release(block)
    pool._check_invariants()


# -- no leaked references or buffer exports -------------------------------------


def test_append_holds_nothing_afterwards() -> None:
    _, block = new_block(1 << 16)
    b = BatchBuilder(block)
    key = bytearray(b"key")
    value = bytearray(b"value" * 10)
    hv = bytearray(b"hv")
    pair = ("h", hv)
    headers = [pair] * 12  # more than fit the stack slots
    objs = [key, value, hv, pair, headers]
    before = [sys.getrefcount(o) for o in objs]
    for _ in range(50):
        assert b.append(1, key, value, headers) >= 0
    # A failing append (bad header after good ones) releases what it acquired too.
    for _ in range(50):
        with pytest.raises(TypeError):
            b.append(1, key, value, [*headers, ("bad", "str")])
    # A record that does not fit releases everything as well.
    _, tiny_block = new_block(BATCH_HEADER_SIZE + 10)
    tiny = BatchBuilder(tiny_block)
    for _ in range(50):
        assert tiny.append(1, key, value, headers) == -1
    assert [sys.getrefcount(o) for o in objs] == before
    # No buffer export is left behind: a bytearray with an export cannot resize.
    key.extend(b"!")
    value.extend(b"!")
    hv.extend(b"!")
