"""Checking and serializing what ``send()`` is given, with typed errors.

One implementation serves :class:`~aioproducer.Producer` and
:class:`~aioproducer.testing.MockProducer`, so both refuse the same inputs the same way.
"""

from __future__ import annotations

import struct
import time
import uuid
from collections.abc import Sequence
from typing import Any

from ._native import BATCH_HEADER_SIZE, record_size_upper_bound
from .config import Serializer
from .errors import ConfigError, RecordTooLargeError, SerializationError

__all__ = ["JAVA_SERIALIZERS", "Header", "check_bytes", "check_headers", "check_record_size",
           "java_serializer", "needs_topic", "prepare_record", "serialize_for_topic"]

Header = tuple[str, "bytes | bytearray | memoryview | None"]

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


# -- Java serializer class names ---------------------------------------------------------

def _packer(fmt: str, what: str, kind: type | tuple[type, ...]) -> Serializer:
    pack = struct.Struct(fmt).pack

    def serialize(obj: Any) -> bytes | None:
        if obj is None:
            return None
        if (isinstance(obj, bool) and kind is not bool) or not isinstance(obj, kind):
            raise SerializationError(f"{what} takes {_what_types(kind)} or None, "
                                     f"got {type(obj).__name__}")
        try:
            return pack(obj)
        except struct.error as exc:
            raise SerializationError(f"{what}: {obj!r} does not fit: {exc}") from None
    serialize.__qualname__ = serialize.__name__ = what
    return serialize


def _what_types(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(k.__name__ for k in kinds)


def _string(obj: Any) -> bytes | None:
    if obj is None:
        return None
    if not isinstance(obj, str):
        raise SerializationError(f"StringSerializer takes str or None, got {type(obj).__name__}")
    return obj.encode("utf-8")


def _uuid(obj: Any) -> bytes | None:
    if obj is None:
        return None
    if not isinstance(obj, uuid.UUID):
        raise SerializationError(f"UUIDSerializer takes uuid.UUID or None, "
                                 f"got {type(obj).__name__}")
    return str(obj).encode("ascii")


def _void(obj: Any) -> None:
    if obj is not None:
        raise SerializationError(f"VoidSerializer takes only None, got {type(obj).__name__}")
    return None


_JAVA_SERDE = "org.apache.kafka.common.serialization."

#: Java serializer class (short or full name) -> our equivalent; ``None`` means "no
#: serializer": the key or value must already be bytes-like (the fast path).
JAVA_SERIALIZERS: dict[str, Serializer | None] = {
    "ByteArraySerializer": None,
    "ByteBufferSerializer": None,
    "BytesSerializer": None,
    "StringSerializer": _string,
    "IntegerSerializer": _packer(">i", "IntegerSerializer", int),
    "LongSerializer": _packer(">q", "LongSerializer", int),
    "ShortSerializer": _packer(">h", "ShortSerializer", int),
    "FloatSerializer": _packer(">f", "FloatSerializer", (float, int)),
    "DoubleSerializer": _packer(">d", "DoubleSerializer", (float, int)),
    "BooleanSerializer": _packer(">?", "BooleanSerializer", bool),
    "UUIDSerializer": _uuid,
    "VoidSerializer": _void,
}


def java_serializer(option: str, class_name: str) -> Serializer | None:
    """Our serializer for the Java class ``class_name`` (``key.serializer`` /
    ``value.serializer``), encoding as the Java class does; ``None`` for the byte-array
    ones. A class without an equivalent is a :class:`ConfigError`."""
    name = class_name.strip()
    short = name[len(_JAVA_SERDE):] if name.startswith(_JAVA_SERDE) else name
    if short in JAVA_SERIALIZERS and (short == name or name.startswith(_JAVA_SERDE)):
        return JAVA_SERIALIZERS[short]
    known = ", ".join(sorted(JAVA_SERIALIZERS))
    raise ConfigError(
        f"{option}: the Java class {class_name!r} has no equivalent here; give a Python "
        f"callable (obj -> bytes | None) or one of the Java serializers {known} "
        f"(short or {_JAVA_SERDE}* name)")

