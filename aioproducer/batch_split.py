"""Reading the records back out of a closed batch, to split it (Java's
``ProducerBatch.split``).

A broker refuses a batch over its ``max.message.bytes`` (MESSAGE_TOO_LARGE) or its
request limit (RECORD_LIST_TOO_LARGE). With compression that can happen to a batch
sized from an estimated ratio that the data did not keep. The batch is then not
failed: its records are re-encoded into ``batch_size`` pieces that keep their order
and sequence numbers. That is rare, so this reads the batch in plain Python; the
input is always a batch that our own native builder wrote.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from .compression import decompress

__all__ = ["SplitRecord", "records_of_batch"]

# (timestamp ms, key, value, headers) as BatchBuilder.append takes them.
SplitRecord = tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]] | None]

_ATTRIBUTES = 21          # int16: bits 0-2 are the codec
_BASE_TIMESTAMP = 27      # int64
_RECORDS_COUNT = 57       # int32
_RECORDS = 61             # the records start here


def _varint(buf: memoryview | bytes, pos: int) -> tuple[int, int]:
    """A zig-zag varint (the record fields' encoding) at ``pos``; value, next pos."""
    shift = 0
    raw = 0
    while True:
        if pos >= len(buf):
            raise ValueError("record batch ends inside a varint")
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if not b & 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes in a record batch")


def _bytes(buf: memoryview | bytes, pos: int) -> tuple[bytes | None, int]:
    n, pos = _varint(buf, pos)
    if n < 0:
        return None, pos
    if pos + n > len(buf):
        raise ValueError("record batch ends inside a record field")
    return bytes(buf[pos:pos + n]), pos + n


def records_of_batch(batch: memoryview | bytes) -> Iterator[SplitRecord]:
    """The records of an encoded record batch (magic 2), decompressed, in order."""
    if len(batch) < _RECORDS:
        raise ValueError(f"a record batch has at least {_RECORDS} bytes, got {len(batch)}")
    (attributes,) = struct.unpack_from(">h", batch, _ATTRIBUTES)
    (base_ts,) = struct.unpack_from(">q", batch, _BASE_TIMESTAMP)
    (count,) = struct.unpack_from(">i", batch, _RECORDS_COUNT)
    codec = attributes & 0x07
    body: memoryview | bytes = batch[_RECORDS:]
    if codec:
        body = decompress(codec, bytes(body))
    pos = 0
    for _ in range(count):
        length, pos = _varint(body, pos)
        end = pos + length
        if length < 0 or end > len(body):
            raise ValueError("record length runs past the end of the batch")
        pos += 1  # record attributes (unused)
        ts_delta, pos = _varint(body, pos)
        _offset_delta, pos = _varint(body, pos)
        key, pos = _bytes(body, pos)
        value, pos = _bytes(body, pos)
        nh, pos = _varint(body, pos)
        headers: list[tuple[str, bytes | None]] | None = None
        if nh > 0:
            headers = []
            for _ in range(nh):
                hk, pos = _bytes(body, pos)
                hv, pos = _bytes(body, pos)
                headers.append(((hk or b"").decode("utf-8"), hv))
        if pos != end:
            raise ValueError("record fields do not add up to the record length")
        yield base_ts + ts_delta, key, value, headers
    if pos != len(body):
        raise ValueError("bytes left over after the batch's last record")
