"""Checking and serializing what ``send()`` is given, with typed errors.

One implementation serves :class:`~aioproducer.Producer` and
:class:`~aioproducer.testing.MockProducer`, so both refuse the same inputs the same way.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from ._native import BATCH_HEADER_SIZE, record_size_upper_bound
from .errors import RecordTooLargeError, SerializationError
from .types import Header, Serializer

# (Header is re-exported for the modules that still import it from here.)
__all__ = ["Header", "check_bytes", "check_headers", "check_record_size", "needs_topic",
           "prepare_record", "serialize_for_topic"]

_BYTES_TYPES = (bytes, bytearray, memoryview)


def check_bytes(what: str, obj: Any) -> Any:
    """``obj`` as a bytes-like object the batch builder takes, or SerializationError."""
    if isinstance(obj, _BYTES_TYPES):
        if isinstance(obj, memoryview):
            if not obj.c_contiguous:
                raise SerializationError(f"{what} memoryview must be C-contiguous")
            if obj.format != "B":
                return obj.cast("B")
        return obj
    raise SerializationError(
        f"{what} must be bytes, bytearray, memoryview or None, got {type(obj).__name__}; "
        f"encode it first or configure {what.split()[0]}_serializer")


def check_headers(headers: Any) -> list[tuple[str, Any]]:
    """Headers as a list of ``(str, bytes-like | None)`` pairs, or SerializationError."""
    if isinstance(headers, (str, bytes)) or not isinstance(headers, (list, tuple)):
        raise SerializationError(
            f"headers must be a list of (str, bytes | None) pairs, got {type(headers).__name__}")
    out: list[tuple[str, Any]] = []
    for item in headers:
        if not isinstance(item, tuple) or len(item) != 2:
            raise SerializationError(
                f"each header must be a (str, bytes | None) pair, got {item!r}")
        hkey, hval = item
        if not isinstance(hkey, str):
            raise SerializationError(f"header key must be str, got {type(hkey).__name__}")
        if hval is not None and type(hval) is not bytes:
            hval = check_bytes(f"header {hkey!r} value", hval)
        out.append((hkey, hval))
    return out


def prepare_record(topic: Any, key: Any, value: Any, headers: Sequence[Header] | None,
                   timestamp_ms: Any, key_serializer: Serializer | None,
                   value_serializer: Serializer | None
                   ) -> tuple[Any, Any, list[tuple[str, Any]] | None, int]:
    """Serialize and check one record: ``(key, value, headers, timestamp_ms)``."""
    if key_serializer is not None:
        key = key_serializer(key)
    if value_serializer is not None:
        value = value_serializer(value)
    if key is not None and type(key) is not bytes:
        key = check_bytes("key", key)
    if value is not None and type(value) is not bytes:
        value = check_bytes("value", value)
    checked = check_headers(headers) if headers is not None else None
    if not isinstance(topic, str) or not topic:
        raise SerializationError(f"topic must be a non-empty str, got {topic!r}")
    if timestamp_ms is None:
        timestamp_ms = int(time.time() * 1000)
    elif isinstance(timestamp_ms, bool) or not isinstance(timestamp_ms, int) \
            or not 0 <= timestamp_ms < 1 << 63:
        raise SerializationError(
            f"timestamp_ms must be a non-negative int (ms since the epoch), "
            f"got {timestamp_ms!r}")
    return key, value, checked, timestamp_ms


def needs_topic(serializer: Any) -> bool:
    """Whether ``serializer`` is a topic-aware async one (``serialize_async(obj, topic,
    is_key)``: the Schema Registry serializers of :mod:`aioproducer.schema`)."""
    return serializer is not None and callable(getattr(serializer, "serialize_async", None))


async def serialize_for_topic(topic: Any, key: Any, value: Any,
                              key_serializer: Serializer | None,
                              value_serializer: Serializer | None) -> tuple[Any, Any]:
    """Apply both serializers, awaiting the topic-aware ones (a Schema Registry lookup on
    a subject's first use; later calls do not suspend)."""
    if not isinstance(topic, str) or not topic:
        raise SerializationError(f"topic must be a non-empty str, got {topic!r}")
    if key_serializer is not None:
        key = (await key_serializer.serialize_async(key, topic, True)  # type: ignore[attr-defined]
               if needs_topic(key_serializer) else key_serializer(key))
    if value_serializer is not None:
        value = (await value_serializer.serialize_async(value, topic, False)  # type: ignore[attr-defined]
                 if needs_topic(value_serializer) else value_serializer(value))
    return key, value


def check_record_size(key: Any, value: Any, headers: list[tuple[str, Any]] | None,
                      max_request_size: int, buffer_memory: int) -> int:
    """The record's encoded size bound; RecordTooLargeError past either limit (as Java's
    ``ensureValidRecordSize``, on every send)."""
    record_size = record_size_upper_bound(
        -1 if key is None else len(key), -1 if value is None else len(value), headers)
    size = record_size + BATCH_HEADER_SIZE
    if size > max_request_size or size > buffer_memory:
        limit, name = ((max_request_size, "max_request_size") if size > max_request_size
                       else (buffer_memory, "buffer_memory"))
        raise RecordTooLargeError(
            f"the record is {size} bytes when serialized, larger than {name}={limit}; "
            "raise it (and the topic's max.message.bytes) or send a smaller record")
    return record_size
