"""Hand-written Produce request framing (the hot path) and small wire helpers.

Everything else on the control plane goes through ``kio``'s generated entities;
Produce is written by hand so that record batches are never copied: the body is
returned as a list of small header byte strings interleaved with the caller's
record memoryviews, ready for ``transport.writelines``.

Only the flexible versions (9+) are produced. Layout (``ProduceRequest.json``)::

    transactional_id  COMPACT_NULLABLE_STRING
    acks              INT16
    timeout_ms        INT32
    topic_data        COMPACT_ARRAY of
        name          COMPACT_STRING        (v9-v12)
        topic_id      UUID                  (v13+)
        partition_data COMPACT_ARRAY of
            index     INT32
            records   COMPACT_NULLABLE_BYTES
            TAG_BUFFER
        TAG_BUFFER
    TAG_BUFFER
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from typing import TypeAlias

import kio.schema.produce.v9.response as _r9
import kio.schema.produce.v10.response as _r10
import kio.schema.produce.v11.response as _r11
import kio.schema.produce.v12.response as _r12
import kio.schema.produce.v13.response as _r13
from kio.serial import entity_reader

from ..errors import ProtocolError, UnsupportedVersionError

__all__ = [
    "PRODUCE_API_KEY",
    "PRODUCE_MAX_VERSION",
    "PRODUCE_MIN_VERSION",
    "PartitionProduceResponse",
    "ProduceResponse",
    "compact_string",
    "decode_produce_response",
    "encode_produce_body",
    "produce_results",
    "read_uvarint",
    "uvarint",
]

PRODUCE_API_KEY = 0
PRODUCE_MIN_VERSION = 9
PRODUCE_MAX_VERSION = 13
_TOPIC_ID_VERSION = 13

ProduceResponse: TypeAlias = (
    _r9.ProduceResponse
    | _r10.ProduceResponse
    | _r11.ProduceResponse
    | _r12.ProduceResponse
    | _r13.ProduceResponse
)
"""The kio ``ProduceResponse`` of any version we send (v9..v13).

Topics are identified by ``name`` up to v12 and by ``topic_id`` from v13 on.
"""

PartitionProduceResponse: TypeAlias = (
    _r9.PartitionProduceResponse
    | _r10.PartitionProduceResponse
    | _r11.PartitionProduceResponse
    | _r12.PartitionProduceResponse
    | _r13.PartitionProduceResponse
)
"""One partition's result in a :data:`ProduceResponse`."""

_RESPONSE_TYPES: dict[int, type[ProduceResponse]] = {
    9: _r9.ProduceResponse,
    10: _r10.ProduceResponse,
    11: _r11.ProduceResponse,
    12: _r12.ProduceResponse,
    13: _r13.ProduceResponse,
}

_I16_I32 = struct.Struct(">hi")
_I32 = struct.Struct(">i")
_EMPTY_TAGS = b"\x00"
_ACKS = (-1, 0, 1)


def uvarint(value: int) -> bytes:
    """Unsigned LEB128 varint (the protocol's UNSIGNED_VARINT)."""
    if value < 0:
        raise ValueError(f"unsigned varint cannot encode {value}")
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def read_uvarint(buf: bytes | bytearray | memoryview, offset: int) -> tuple[int, int]:
    """Decode an unsigned varint at ``offset``; returns ``(value, new_offset)``."""
    result = 0
    shift = 0
    end = len(buf)
    while True:
        if offset >= end:
            raise ProtocolError("truncated unsigned varint")
        b = buf[offset]
        offset += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, offset
        shift += 7
        if shift > 28:
            raise ProtocolError("unsigned varint is longer than 5 bytes")


def compact_string(value: str | None) -> bytes:
    """COMPACT_NULLABLE_STRING: uvarint(len + 1) then UTF-8 bytes; ``None`` is ``0``."""
    if value is None:
        return b"\x00"
    data = value.encode("utf-8")
    return uvarint(len(data) + 1) + data


def encode_produce_body(
    version: int,
    *,
    transactional_id: str | None,
    acks: int,
    timeout_ms: int,
    topics: Sequence[tuple[str, uuid.UUID | None, Sequence[tuple[int, memoryview]]]],
) -> list[bytes | memoryview]:
    """Encode a Produce request body (without the request header).

    ``topics`` is ``[(name, topic_id, [(partition, records), ...]), ...]``; from
    v13 on topics are sent by ``topic_id`` (``name`` is then unused) and a missing
    id is a ``ValueError``. The record memoryviews are placed in the returned list
    as they are (no copy); the caller must keep them unchanged until the request
    is written (for acks != 0: until its response arrives).
    """
    if not PRODUCE_MIN_VERSION <= version <= PRODUCE_MAX_VERSION:
        raise UnsupportedVersionError(
            f"Produce v{version} is not supported by aioproducer "
            f"(v{PRODUCE_MIN_VERSION}..v{PRODUCE_MAX_VERSION})"
        )
    if acks not in _ACKS:
        raise ValueError(f"acks must be -1, 0 or 1, got {acks!r}")
    if not 0 <= timeout_ms <= 0x7FFFFFFF:
        raise ValueError(f"timeout_ms out of range: {timeout_ms!r}")
    by_id = version >= _TOPIC_ID_VERSION
    parts: list[bytes | memoryview] = []
    pending = bytearray(compact_string(transactional_id))
    pending += _I16_I32.pack(acks, timeout_ms)
    pending += uvarint(len(topics) + 1)
    for name, topic_id, partitions in topics:
        if by_id:
            if topic_id is None or topic_id.int == 0:
                raise ValueError(
                    f"Produce v{version} addresses topics by id, but topic {name!r} has none"
                )
            pending += topic_id.bytes
        else:
            pending += compact_string(name)
        pending += uvarint(len(partitions) + 1)
        for index, records in partitions:
            size = records.nbytes
            pending += _I32.pack(index)
            pending += uvarint(size + 1)
            if size:
                parts.append(bytes(pending))
                pending.clear()
                parts.append(records)
            pending += _EMPTY_TAGS  # partition tagged fields
        pending += _EMPTY_TAGS  # topic tagged fields
    pending += _EMPTY_TAGS  # request tagged fields
    parts.append(bytes(pending))
    return parts


def decode_produce_response(version: int, body: bytes | memoryview) -> ProduceResponse:
    """Decode a Produce response body (after the response header) with kio."""
    try:
        response_type = _RESPONSE_TYPES[version]
    except KeyError:
        raise UnsupportedVersionError(
            f"Produce v{version} is not supported by aioproducer "
            f"(v{PRODUCE_MIN_VERSION}..v{PRODUCE_MAX_VERSION})"
        ) from None
    try:
        response, end = entity_reader(response_type)(body, 0)
    except Exception as exc:
        raise ProtocolError(f"cannot decode a Produce v{version} response: {exc!r}") from exc
    if end != len(body):
        raise ProtocolError(
            f"Produce v{version} response has {len(body) - end} trailing byte(s)"
        )
    return response


def produce_results(
    response: ProduceResponse,
) -> list[tuple[str | None, uuid.UUID | None, PartitionProduceResponse]]:
    """Flatten a Produce response to ``[(topic_name, topic_id, partition_result)]``.

    Up to v12 topics come back by name (``topic_id`` is None); from v13 by id
    (``topic_name`` is None).
    """
    out: list[tuple[str | None, uuid.UUID | None, PartitionProduceResponse]] = []
    for topic in response.responses:
        if isinstance(topic, _r13.TopicProduceResponse):
            name, topic_id = None, topic.topic_id
        else:
            name, topic_id = str(topic.name), None
        out.extend((name, topic_id, p) for p in topic.partition_responses)
    return out
