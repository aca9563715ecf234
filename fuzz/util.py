"""Hostile inputs for the fuzz tests (``fuzz/targets.py``, ``tests/unit/test_fuzz.py``).

* :func:`random_entity` writes random, plausible wire bytes of any kio entity straight
  from its schema (thousands a second; ``st.from_type`` makes ~60), with values chosen
  so that most of them also decode, so that mutations reach deep into the message.
* :func:`mutate` turns valid encodings into hostile ones: truncated, extended,
  bit-flipped, spans deleted or duplicated, and "interesting" integers (0, -1,
  2**31-1, -2**31, ...) or over-long varints written over arbitrary offsets.
* ``AIOPRODUCER_FUZZ_EXAMPLES`` scales the Hypothesis fuzz tests (the ``max_examples``
  of a test of weight 1.0; default 150).
"""

from __future__ import annotations

import dataclasses
import io
import os
import random
import struct
from typing import Any

from hypothesis import HealthCheck, settings
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

EXAMPLES = max(1, int(os.environ.get("AIOPRODUCER_FUZZ_EXAMPLES", "150")))


def fuzz_settings(weight: float = 1.0) -> settings:
    """Hypothesis settings for a fuzz test: ``weight * EXAMPLES`` examples, no deadline
    (a loaded CI machine must not turn slowness into failures: a hang is caught by
    the time bound of the process that runs the campaign)."""
    return settings(
        max_examples=max(1, int(EXAMPLES * weight)),
        deadline=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                               HealthCheck.filter_too_much, HealthCheck.large_base_example],
    )


def encode(entity: Any) -> bytes:
    """A kio entity's wire bytes."""
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


_INT32 = (0, 1, 2, 3, 4, 5, 0x7F, 0x80, 0xFF, 0x100, 0x7FFF, 0x8000, 0xFFFF, 0x7FFFFFFF,
          -1, -2, -0x80000000, -0x7FFFFFFF)
_INT16 = (0, 1, -1, 0x7FFF, -0x8000, 0xFF, 0x100)
# Unsigned varints: canonical, non-canonical, the 5-byte limit, one too long, unterminated.
_VARINTS = (b"\x00", b"\x01", b"\x7f", b"\x80\x01", b"\xff\x7f", b"\x80\x80\x80\x80\x00",
            b"\xff\xff\xff\xff\x07", b"\xff\xff\xff\xff\x0f", b"\xff\xff\xff\xff\x7f",
            b"\xff\xff\xff\xff\xff\x01", b"\x80", b"\xff\xff")

_OPS = ("truncate", "extend", "byte", "bit", "int32", "int16", "varint", "delete",
        "duplicate", "insert")


def mutate(data: bytes, rnd: random.Random, max_mutations: int = 4) -> bytes:
    """``data`` with 0..``max_mutations`` hostile edits (0: left valid)."""
    out = bytearray(data)
    for _ in range(rnd.randint(0, max_mutations)):
        op = rnd.choice(_OPS)
        n = len(out)
        at = rnd.randint(0, n)
        if op == "truncate":
            del out[at:]
        elif op == "extend":
            out += rnd.randbytes(rnd.randint(1, 16))
        elif op == "insert":
            out[at:at] = rnd.randbytes(rnd.randint(1, 8))
        elif op == "delete":
            del out[at:at + rnd.randint(1, 16)]
        elif op == "duplicate":
            out[at:at] = bytes(out[at:at + rnd.randint(1, 32)])
        elif n == 0:
            continue
        elif op == "byte":
            out[min(at, n - 1)] = rnd.randint(0, 255)
        elif op == "bit":
            out[min(at, n - 1)] ^= 1 << rnd.randint(0, 7)
        elif op == "int32":
            value = (rnd.choice(_INT32) if rnd.random() < 0.7
                     else rnd.randint(-(2**31), 2**31 - 1))
            out[at:at + 4] = struct.pack(">i", value)
        elif op == "int16":
            out[at:at + 2] = struct.pack(">h", rnd.choice(_INT16))
        else:  # varint: overwrite what is there (lengths, counts, tag buffers)
            v = rnd.choice(_VARINTS)
            out[at:at + len(v)] = v
    return bytes(out)


# -- fast random valid encodings -----------------------------------------------------
#
# st.from_type() makes kio entities at ~60 a second (deep nesting, phantom types);
# this writes plausible bytes straight from the schema at thousands a second. The
# values are chosen so that most encodings also decode (known error codes, UTF-8
# strings, sane durations and timestamps), so mutations reach deep into the message.

_ERROR_CODES = tuple(int(e) for e in ErrorCode)
_FIXED = {"int8": ">b", "uint8": ">B", "bool": ">?", "int16": ">h", "uint16": ">H",
          "int32": ">i", "uint32": ">I", "int64": ">q", "uint64": ">Q", "float64": ">d"}
_MAX_ITEMS = 3


def uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _random_int(fmt: str, rnd: random.Random) -> bytes:
    if fmt == ">?":
        return struct.pack(fmt, rnd.random() < 0.5)
    if fmt == ">d":
        return struct.pack(fmt, rnd.uniform(-1e6, 1e6))
    size = struct.calcsize(fmt)
    signed = fmt[1].islower()
    choice = rnd.random()
    if choice < 0.4:
        value = rnd.randint(0, 10)
    elif choice < 0.5 and signed:
        value = -1
    else:
        lo = -(1 << (8 * size - 1)) if signed else 0
        hi = (1 << (8 * size - 1)) - 1 if signed else (1 << (8 * size)) - 1
        value = rnd.randint(lo, hi)
    return struct.pack(fmt, value)


def _random_primitive(kafka_type: str, flexible: bool, nullable: bool,
                      rnd: random.Random) -> bytes:
    if kafka_type in ("string", "bytes", "records"):
        if nullable and rnd.random() < 0.2:
            return b"\x00" if flexible else (b"\xff\xff" if kafka_type == "string"
                                              else b"\xff\xff\xff\xff")
        n = rnd.randint(0, 12)
        data = "".join(rnd.choice("abcdefghij-._é€") for _ in range(n)).encode()
        if flexible:
            return uvarint(len(data) + 1) + data
        if kafka_type == "string":
            return struct.pack(">h", len(data)) + data
        return struct.pack(">i", len(data)) + data
    if kafka_type == "error_code":
        return struct.pack(">h", 0 if rnd.random() < 0.6 else rnd.choice(_ERROR_CODES))
    if kafka_type == "uuid":
        return b"\x00" * 16 if rnd.random() < 0.2 else rnd.randbytes(16)
    if kafka_type == "timedelta_i32":
        return struct.pack(">i", rnd.randint(0, 1 << 20))
    if kafka_type == "timedelta_i64":
        return struct.pack(">q", rnd.randint(0, 1 << 40))
    if kafka_type == "datetime_i64":
        return struct.pack(">q", -1 if nullable and rnd.random() < 0.3
                           else rnd.randint(0, 1 << 42))
    return _random_int(_FIXED[kafka_type], rnd)


def _random_field(f: Any, flexible: bool, tagged: bool, rnd: random.Random,
                  depth: int) -> bytes:
    cls = classify_field(f)
    if cls.is_array:
        if rnd.random() < 0.05:
            return b"\x00" if flexible else b"\xff\xff\xff\xff"  # a null array
        n = rnd.randint(0, _MAX_ITEMS if depth < 3 else 1)
        head = uvarint(n + 1) if flexible else struct.pack(">i", n)
        if isinstance(cls, EntityTupleField):
            items = [random_entity(cls.type_, rnd, depth + 1) for _ in range(n)]
        else:
            items = [_random_primitive(get_schema_field_type(f), flexible, False, rnd)
                     for _ in range(n)]
        return head + b"".join(items)
    if isinstance(cls, EntityField):
        if is_optional(f):
            if rnd.random() < 0.3:
                return b"\xff"
            return b"\x01" + random_entity(cls.type_, rnd, depth + 1)
        return random_entity(cls.type_, rnd, depth + 1)
    nullable = is_optional(f) and not tagged  # kio reads tagged fields as not nullable
    return _random_primitive(get_schema_field_type(f), flexible, nullable, rnd)


def random_entity(entity_type: type[Any], rnd: random.Random, depth: int = 0) -> bytes:
    """Random, plausible wire bytes of one ``entity_type``."""
    flexible = bool(entity_type.__flexible__)
    out = bytearray()
    tagged: list[bytes] = []
    for f in dataclasses.fields(entity_type):
        tag = get_field_tag(f)
        if tag is None:
            out += _random_field(f, flexible, False, rnd, depth)
        elif rnd.random() < 0.3:
            value = _random_field(f, flexible, True, rnd, depth)
            tagged.append(uvarint(int(tag)) + uvarint(len(value)) + value)
    if flexible:
        if rnd.random() < 0.1:  # an unknown tag: the protocol says skip it
            tagged.append(uvarint(rnd.randint(100, 10_000)) + uvarint(2) + b"??")
        out += uvarint(len(tagged)) + b"".join(tagged)
    return bytes(out)
