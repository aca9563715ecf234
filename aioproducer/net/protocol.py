"""Produce framing and answers (the hot path) and small wire helpers.

Everything else on the control plane goes through ``kio``'s generated entities
(:func:`request_module` and :func:`build_entity` make a request of any version).
Produce is framed by hand, in compiled code (``aioproducer/_native/produce.pyx``,
where its layout is), so that record batches are never copied: the body is a list
of small header byte strings interleaved with the caller's record memoryviews,
ready for ``writev``. Its answer is read by :func:`decode_produce_answer`: compiled
for the usual answer (every partition written), kio for any other.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import operator
import sys
import uuid
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar, cast

from kio.index import load_payload_module, load_response_schema
from kio.serial import entity_reader
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)
from kio.static.constants import EntityType
from kio.static.protocol import Entity, ResponsePayload

from ..errors import ProtocolError, UnsupportedVersionError
from .apis import PRODUCE_MAX_VERSION, PRODUCE_MIN_VERSION, ApiKey

if TYPE_CHECKING:
    # Only for the annotations: at run time each version's module is imported when
    # that version is first used (response_type()).
    import kio.schema.produce.v9.response as _r9
    import kio.schema.produce.v10.response as _r10
    import kio.schema.produce.v11.response as _r11
    import kio.schema.produce.v12.response as _r12
    import kio.schema.produce.v13.response as _r13

try:
    from .._native.produce import PartitionResult, ProduceAnswer, decode_produce_written
    from .._native.produce import encode_produce_body as _encode_produce_body
    from .._native.scan import (
        ARRAY_COMPACT,
        ARRAY_LEGACY,
        ARRAY_NONE,
        ENTITY_HEADER_SIZE,
        FLAG_FLEXIBLE,
        KIND_BYTES32,
        KIND_COMPACT_STRING,
        KIND_ENTITY,
        KIND_FIXED,
        KIND_NULLABLE_ENTITY,
        KIND_STRING16,
        Layout,
        LayoutError,
    )
except ImportError as exc:  # pragma: no cover - depends on the build
    raise ImportError(
        f"aioproducer's compiled core (aioproducer._native.scan) is not built: {exc}. "
        "Build it with `pip install -e .` (or `make build`) in the source checkout."
    ) from exc

__all__ = [
    "PRODUCE_ANSWER_DECODERS",
    "PRODUCE_API_KEY",
    "PRODUCE_MAX_VERSION",
    "PRODUCE_MIN_VERSION",
    "PartitionProduceResponse",
    "PartitionResult",
    "ProduceAnswer",
    "ProduceResponse",
    "build_entity",
    "check_entity_layout",
    "decode_entity",
    "decode_produce_answer",
    "decode_produce_response",
    "encode_produce_body",
    "produce_answer_of",
    "produce_results",
    "read_uvarint",
    "request_module",
    "response_type",
    "response_union",
    "uvarint",
]

PRODUCE_API_KEY = int(ApiKey.PRODUCE)
_PRODUCE_VERSIONS = range(PRODUCE_MIN_VERSION, PRODUCE_MAX_VERSION + 1)

if TYPE_CHECKING:
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

    _TopicByName: TypeAlias = (
        _r9.TopicProduceResponse
        | _r10.TopicProduceResponse
        | _r11.TopicProduceResponse
        | _r12.TopicProduceResponse
    )


if not TYPE_CHECKING:  # (mypy would take any name for one this function serves)

    def __getattr__(name: str) -> Any:
        # ProduceResponse / PartitionProduceResponse at run time (aioproducer only
        # annotates with them): the union of every version's class, which imports the
        # kio modules of all of them, so only when somebody asks.
        if name in ("ProduceResponse", "PartitionProduceResponse"):
            union = response_union(PRODUCE_API_KEY, _PRODUCE_VERSIONS, name)
            globals()[name] = union
            return union
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_PRODUCE_V13_RESPONSE_MODULE = "kio.schema.produce.v13.response"


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
    is written (for acks != 0: until its response arrives). The framing is compiled
    (:func:`aioproducer._native.produce.encode_produce_body`).
    """
    if not PRODUCE_MIN_VERSION <= version <= PRODUCE_MAX_VERSION:
        raise UnsupportedVersionError(
            f"Produce v{version} is not supported by aioproducer "
            f"(v{PRODUCE_MIN_VERSION}..v{PRODUCE_MAX_VERSION})"
        )
    return _encode_produce_body(version, transactional_id, acks, timeout_ms, topics)


def decode_produce_response(version: int, body: bytes | memoryview) -> ProduceResponse:
    """Decode a Produce response body (after the response header) with kio.

    :class:`ProtocolError` for a body that does not decode (see :func:`decode_entity`).
    """
    if version not in _PRODUCE_VERSIONS:
        raise UnsupportedVersionError(
            f"Produce v{version} is not supported by aioproducer "
            f"(v{PRODUCE_MIN_VERSION}..v{PRODUCE_MAX_VERSION})"
        )
    return decode_entity(cast("type[ProduceResponse]", response_type(PRODUCE_API_KEY, version)),
                         body)


def decode_produce_answer(version: int, body: bytes | memoryview) -> ProduceAnswer:
    """Decode a Produce response body (after the response header) for the Sender.

    The usual answer (every partition written, no tagged field) is decoded by the
    compiled :func:`~aioproducer._native.produce.decode_produce_written`; any other
    goes through kio (:func:`decode_produce_response`), which checks it in full.
    Both give the same :class:`ProduceAnswer` (the fuzz target ``produce_answer``
    checks that they agree). :class:`ProtocolError` for a body that does not decode.
    """
    answer = decode_produce_written(version, body)
    if answer is None:
        return produce_answer_of(decode_produce_response(version, body))
    return answer


# decode_produce_answer of each version, as a one-argument function: the decoder the
# Sender hands to every Produce request it writes.
PRODUCE_ANSWER_DECODERS: dict[int, Callable[[memoryview], ProduceAnswer]] = {
    v: functools.partial(decode_produce_answer, v) for v in _PRODUCE_VERSIONS}


def produce_answer_of(response: ProduceResponse) -> ProduceAnswer:
    """kio's ``ProduceResponse`` as a :class:`ProduceAnswer`. A leader hint is
    ``(leader_id, leader_epoch)``, or None when the partition has none (kio's
    default, -1 and -1)."""
    throttle = response.throttle_time
    partitions: list[tuple[str | None, uuid.UUID | None, PartitionResult]] = []
    for name, topic_id, p in produce_results(response):
        hint = getattr(p, "current_leader", None)
        leader = None if hint is None or hint.leader_id < 0 or hint.leader_epoch < 0 \
            else (int(hint.leader_id), int(hint.leader_epoch))
        partitions.append((name, topic_id, PartitionResult(
            int(p.index), int(p.error_code), int(p.base_offset),
            _epoch_ms(p.log_append_time), int(p.log_start_offset), p.error_message,
            [(int(e.batch_index), e.batch_index_error_message)
             for e in p.record_errors or ()],
            leader)))
    return ProduceAnswer(
        round(throttle.total_seconds() * 1000) if throttle else 0, partitions,
        {int(e.node_id): (str(e.host), int(e.port))
         for e in getattr(response, "node_endpoints", None) or ()})


def _epoch_ms(value: Any) -> int:
    """kio's ``datetime_i64`` (a datetime, or None for -1) as epoch milliseconds,
    exactly (no float on the way)."""
    if value is None:
        return -1
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.timezone.utc)
        return int((value - _EPOCH) // _ONE_MS)
    return int(value)


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
_ONE_MS = datetime.timedelta(milliseconds=1)


# -- decoding hostile bytes with kio -------------------------------------------------------
#
# kio's (Rust) decoder reserves an array's memory from its declared length before it
# reads an element: 9 bytes of "Metadata v12 response" that declare 2**35 brokers make
# it ask for 256 GiB and abort the process. check_entity_layout() walks the body first
# (compiled: aioproducer/_native/scan.pyx) against a layout compiled from the same kio
# schema, and refuses every length or count that the body cannot back.

E = TypeVar("E", bound=Entity)

# kafka_type -> encoded size of the fixed-size primitives kio knows.
_FIXED_SIZES: dict[str, int] = {
    "int8": 1, "uint8": 1, "bool": 1,
    "int16": 2, "uint16": 2, "error_code": 2,
    "int32": 4, "uint32": 4, "timedelta_i32": 4,
    "int64": 8, "uint64": 8, "float64": 8, "timedelta_i64": 8, "datetime_i64": 8,
    "uuid": 16,
}

_LAYOUTS: dict[type[Any], Layout] = {}


class _LayoutCompiler:
    """kio entity class -> the flat program of :class:`aioproducer._native.scan.Layout`.

    Classifies fields exactly as kio's own schema compiler does (the same
    ``kio.serial._introspect`` helpers): the field's container decides compact or
    legacy encodings, each nested entity its own tagged-field buffer.
    """

    def __init__(self) -> None:
        self.code: list[int] = []
        self._offsets: dict[type[Any], int] = {}
        self._min_sizes: dict[int, int] = {}

    def entity(self, entity_type: type[Any]) -> int:
        """Compile ``entity_type`` (once); its offset in :attr:`code`."""
        known = self._offsets.get(entity_type)
        if known is not None:
            return known
        flexible = bool(entity_type.__flexible__)
        regular: list[tuple[int, int, int]] = []
        tagged: list[tuple[int, int, int, int]] = []
        fields = dataclasses.fields(entity_type)
        n_tagged = sum(1 for f in fields if get_field_tag(f) is not None)
        start = len(self.code)
        self._offsets[entity_type] = start
        self.code.extend([0] * (ENTITY_HEADER_SIZE + 3 * (len(fields) - n_tagged)
                                + 4 * n_tagged))
        smallest = 1 if flexible else 0
        for f in fields:
            op = self._field(f, flexible)
            tag = get_field_tag(f)
            if tag is None:
                regular.append(op)
                smallest += self._op_min_size(op)
            else:
                tagged.append((int(tag), *op))
        program = [FLAG_FLEXIBLE if flexible else 0, len(regular), len(tagged), smallest]
        for r in regular:
            program.extend(r)
        for t in tagged:
            program.extend(t)
        self.code[start:start + len(program)] = program
        self._min_sizes[start] = smallest
        return start

    def _field(self, f: dataclasses.Field[Any], flexible: bool) -> tuple[int, int, int]:
        cls = classify_field(f)
        array = (ARRAY_COMPACT if flexible else ARRAY_LEGACY) if cls.is_array else ARRAY_NONE
        if isinstance(cls, (PrimitiveField, PrimitiveTupleField)):
            kind, arg = _primitive(get_schema_field_type(f), flexible)
        elif isinstance(cls, EntityField):
            kind = KIND_NULLABLE_ENTITY if is_optional(f) else KIND_ENTITY
            arg = self.entity(cls.type_)
        elif isinstance(cls, EntityTupleField):
            kind, arg = KIND_ENTITY, self.entity(cls.type_)
        else:  # pragma: no cover - kio has no other field classes
            raise TypeError(f"cannot lay out field {f.name!r}: {cls!r}")
        return array, kind, arg

    def _op_min_size(self, op: tuple[int, int, int]) -> int:
        array, kind, arg = op
        if array == ARRAY_COMPACT:
            return 1
        if array == ARRAY_LEGACY:
            return 4
        if kind == KIND_FIXED:
            return arg
        if kind == KIND_STRING16:
            return 2
        if kind == KIND_BYTES32:
            return 4
        if kind == KIND_ENTITY:
            return self._min_sizes.get(arg, 0)  # 0 while it is being compiled
        return 1  # compact string/bytes, nullable entity marker


def _primitive(kafka_type: str, flexible: bool) -> tuple[int, int]:
    if kafka_type in ("string", "bytes", "records"):
        if flexible:
            return KIND_COMPACT_STRING, 0
        return (KIND_STRING16, 0) if kafka_type == "string" else (KIND_BYTES32, 0)
    size = _FIXED_SIZES.get(kafka_type)
    if size is None:
        raise TypeError(f"no wire layout for kafka_type {kafka_type!r}")
    return KIND_FIXED, size


def entity_layout(entity_type: type[Any]) -> Layout:
    """The compiled wire layout of a kio entity class (cached)."""
    layout = _LAYOUTS.get(entity_type)
    if layout is None:
        compiler = _LayoutCompiler()
        compiler.entity(entity_type)
        layout = _LAYOUTS[entity_type] = Layout(compiler.code, entity_type.__qualname__)
    return layout


def check_entity_layout(entity_type: type[Any], body: bytes | bytearray | memoryview) -> None:
    """:class:`ProtocolError` unless ``body`` is exactly one ``entity_type``, with every
    length, count and tagged field backed by bytes that are there.

    Decoding a body that passes with kio allocates in proportion to the body; values
    (UTF-8, error codes, timestamps) are left for kio to check.
    """
    try:
        end = entity_layout(entity_type).check(body)
    except LayoutError as exc:
        raise ProtocolError(f"malformed {entity_type.__qualname__}: {exc}") from None
    size = body.nbytes if isinstance(body, memoryview) else len(body)
    if end != size:
        raise ProtocolError(
            f"malformed {entity_type.__qualname__}: {size - end} trailing byte(s)")


def decode_entity(entity_type: type[E], body: bytes | memoryview) -> E:
    """Decode ``body`` as exactly one ``entity_type`` with kio, safely.

    The body is checked with :func:`check_entity_layout` first; anything wrong
    (truncated, inconsistent or oversized lengths, trailing bytes, values kio
    refuses) is a :class:`ProtocolError`.
    """
    check_entity_layout(entity_type, body)
    try:
        value, end = entity_reader(entity_type)(body, 0)
    except Exception as exc:
        raise ProtocolError(f"malformed {entity_type.__qualname__}: {exc!r}") from exc
    if end != len(body):  # pragma: no cover - the layout check saw the same end
        raise ProtocolError(f"malformed {entity_type.__qualname__}: trailing bytes")
    return value


def produce_results(
    response: ProduceResponse,
) -> list[tuple[str | None, uuid.UUID | None, PartitionProduceResponse]]:
    """Flatten a Produce response to ``[(topic_name, topic_id, partition_result)]``.

    Up to v12 topics come back by name (``topic_id`` is None); from v13 by id
    (``topic_name`` is None).
    """
    out: list[tuple[str | None, uuid.UUID | None, PartitionProduceResponse]] = []
    # A v13 topic can only exist once kio's v13 module is imported.
    r13 = sys.modules.get(_PRODUCE_V13_RESPONSE_MODULE)
    by_id: type[_r13.TopicProduceResponse] | None = (
        None if r13 is None else r13.TopicProduceResponse)
    for topic in response.responses or ():
        if by_id is not None and isinstance(topic, by_id):
            name, topic_id = None, topic.topic_id
        else:
            name, topic_id = str(cast("_TopicByName", topic).name), None
        out.extend((name, topic_id, p) for p in topic.partition_responses or ())
    return out


def request_module(api_key: int, version: int) -> ModuleType:
    """kio's module of the request entities of ``api_key`` v``version``."""
    return load_payload_module(api_key, version, EntityType.request)


@functools.cache
def response_type(api_key: int, version: int) -> type[ResponsePayload]:
    """kio's response entity class of ``api_key`` v``version``.

    kio has a module per API and version; aioproducer imports one when that version
    is first used (a producer uses the one version it negotiated), not all of them
    at import time.
    """
    return load_response_schema(api_key, version)


def response_union(api_key: int, versions: range, name: str) -> Any:
    """The union of the class ``name`` of kio's response module of each of
    ``versions`` of ``api_key`` (for code that asks for an annotation's value at run
    time; it imports every one of those modules)."""
    return functools.reduce(operator.or_, [
        getattr(load_payload_module(api_key, v, EntityType.response), name)
        for v in versions])


def build_entity(cls: Any, **values: Any) -> Any:
    """Instantiate a kio dataclass with the fields this version has (others dropped)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in names})
