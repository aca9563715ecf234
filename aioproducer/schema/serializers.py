"""Schema Registry serializers in Confluent's wire format: magic byte 0, the schema id
(4 bytes, big-endian), then the payload; Protobuf puts its message indexes (zig-zag
varints) between the id and the payload.

A serializer needs the topic (the subject is named after it) and, on first use, an
answer from the registry. The :class:`~aioproducer.Producer` calls
:meth:`RegistrySerializer.serialize_async` in ``send()``: the first record of a subject
awaits the registration (or lookup), every later one finds the schema id in the cache
and is encoded without suspending.
"""

from __future__ import annotations

import base64
import io
import json
import struct
from collections.abc import Callable, Mapping
from typing import Any

from .client import AsyncSchemaRegistryClient, RegisteredSchema, Schema
from .errors import SchemaIncompatibleError, SchemaRegistryError, SchemaSerializationError

__all__ = ["MAGIC_BYTE", "AvroSerializer", "JSONSchemaSerializer", "ProtobufSerializer",
           "RegistrySerializer", "SubjectNameStrategy", "record_name_strategy",
           "topic_name_strategy", "topic_record_name_strategy"]

MAGIC_BYTE = 0
_HEADER = struct.Struct(">bI")

SubjectNameStrategy = Callable[[str, bool, "str | None"], str]
"""``(topic, is_key, record_name) -> subject``."""


def topic_name_strategy(topic: str, is_key: bool, record_name: str | None) -> str:
    """``<topic>-key`` / ``<topic>-value`` (Confluent's default)."""
    return f"{topic}-{'key' if is_key else 'value'}"


def record_name_strategy(topic: str, is_key: bool, record_name: str | None) -> str:
    """The record's fully-qualified name (one subject per record type, any topic)."""
    if not record_name:
        raise SchemaSerializationError(
            "record_name_strategy needs a record name: an Avro record, a JSON Schema with a "
            "'title', or a Protobuf message")
    return record_name


def topic_record_name_strategy(topic: str, is_key: bool, record_name: str | None) -> str:
    """``<topic>-<record name>``."""
    return f"{topic}-{record_name_strategy(topic, is_key, record_name)}"


_STRATEGIES: dict[str, SubjectNameStrategy] = {
    "topic": topic_name_strategy, "TopicNameStrategy": topic_name_strategy,
    "record": record_name_strategy, "RecordNameStrategy": record_name_strategy,
    "topic_record": topic_record_name_strategy,
    "TopicRecordNameStrategy": topic_record_name_strategy,
}


def _strategy(value: Any) -> SubjectNameStrategy:
    if isinstance(value, str):
        short = value.rsplit(".", 1)[-1]
        if short in _STRATEGIES:
            return _STRATEGIES[short]
        raise ValueError(f"subject_name_strategy {value!r}: give a callable (topic, is_key, "
                         f"record_name) -> str or one of {sorted(_STRATEGIES)}")
    if not callable(value):
        raise TypeError("subject_name_strategy must be a callable or a strategy name")
    return value  # type: ignore[no-any-return]


def _zigzag_varints(values: list[int]) -> bytes:
    out = bytearray()
    for n in (len(values), *values):
        z = (n << 1) ^ (n >> 63)
        while z & ~0x7F:
            out.append((z & 0x7F) | 0x80)
            z >>= 7
        out.append(z)
    return bytes(out)


class RegistrySerializer:
    """What the Schema Registry serializers share: the subject, the registration policy
    and a cache of ``subject -> (schema id, writer state)``.

    ``auto_register_schemas`` (default True): register the schema under the subject on
    first use (the registry checks its compatibility rule: :class:`SchemaIncompatibleError`
    if it breaks it). Off: look the schema up, :class:`SchemaNotFoundError` if it is not
    registered. ``use_latest_version``: write with the subject's latest registered schema
    (and its id) instead of this one; implies no registration. ``subject_name_strategy``:
    ``topic_name_strategy`` (default), ``record_name_strategy``,
    ``topic_record_name_strategy``, their names, or a callable.
    """

    schema_type = "AVRO"

    def __init__(self, client: AsyncSchemaRegistryClient, schema: Schema, *,
                 subject_name_strategy: Any = topic_name_strategy,
                 auto_register_schemas: bool = True, use_latest_version: bool = False,
                 record_name: str | None = None) -> None:
        if not isinstance(client, AsyncSchemaRegistryClient):
            raise TypeError("client must be an aioproducer.schema.AsyncSchemaRegistryClient, "
                            f"got {type(client).__name__}")
        self.client = client
        self.schema = schema
        self.record_name = record_name
        self.subject_name_strategy = _strategy(subject_name_strategy)
        self.auto_register_schemas = bool(auto_register_schemas)
        self.use_latest_version = bool(use_latest_version)
        self.what: str | None = None
        """What the schema describes, for error messages (PydanticSerializer: the model)."""
        self._state: dict[tuple[str, bool], tuple[bytes, Any]] = {}

    # The Producer calls this (producer.py, the slow path of send()).
    async def serialize_async(self, obj: Any, topic: str, is_key: bool = False
                              ) -> bytes | None:
        """``obj`` in the wire format for ``topic``; awaits the registry on first use."""
        if obj is None:
            return None
        state = self._state.get((topic, is_key))
        if state is None:
            state = await self._resolve(topic, is_key)
        prefix, writer = state
        return prefix + self._encode(obj, writer)

    def serialize(self, obj: Any, topic: str, is_key: bool = False) -> bytes | None:
        """The synchronous form, once the topic's schema is resolved (after one
        :meth:`serialize_async` or :meth:`prepare`); :class:`SchemaRegistryError` before."""
        if obj is None:
            return None
        state = self._state.get((topic, is_key))
        if state is None:
            raise SchemaRegistryError(
                f"the schema of topic {topic!r} is not resolved yet: await "
                "serialize_async() or prepare() first")
        return state[0] + self._encode(obj, state[1])

    async def prepare(self, topic: str, is_key: bool = False) -> int:
        """Register or look up the schema for ``topic`` now; its id."""
        prefix, _ = await self._resolve(topic, is_key)
        return int(_HEADER.unpack_from(prefix)[1])

    def __call__(self, obj: Any) -> bytes | None:
        raise SchemaSerializationError(
            f"{type(self).__name__} needs the topic: give it to Producer(key_serializer=/"
            "value_serializer=), which calls serialize_async(obj, topic, is_key), or call "
            "serialize(obj, topic) yourself")

    def subject_for(self, topic: str, is_key: bool) -> str:
        return self.subject_name_strategy(topic, is_key, self.record_name)

    async def _resolve(self, topic: str, is_key: bool) -> tuple[bytes, Any]:
        subject = self.subject_for(topic, is_key)
        if self.use_latest_version:
            latest: RegisteredSchema = await self.client.get_latest_version(subject)
            if latest.schema.schema_type != self.schema_type:
                raise SchemaRegistryError(
                    f"the latest schema of {subject!r} is {latest.schema.schema_type}, "
                    f"not {self.schema_type}")
            schema_id, schema = latest.schema_id, latest.schema
        elif self.auto_register_schemas:
            try:
                schema_id = await self.client.register_schema(subject, self.schema)
            except SchemaIncompatibleError as exc:
                raise await self._incompatible(subject, exc) from exc
            schema = self.schema
        else:
            schema_id = (await self.client.lookup_schema(subject, self.schema)).schema_id
            schema = self.schema
        state = (self._prefix(schema_id), self._writer(schema))
        self._state[(topic, is_key)] = state
        return state

    async def _incompatible(self, subject: str, exc: SchemaIncompatibleError
                            ) -> SchemaIncompatibleError:
        """The registry's refusal, said plainly: what, which subject, which rule, why."""
        what = self.what or (f"the {self.schema_type} schema {self.record_name}"
                             if self.record_name else f"the {self.schema_type} schema")
        try:
            level = await self.client.get_compatibility(subject)
        except SchemaRegistryError:
            level = ""
        rule = f" under its compatibility rule {level}" if level else ""
        reason = str(exc).split(": ", 2)[-1] if ": " in str(exc) else str(exc)
        return SchemaIncompatibleError(
            f"{what} is not compatible with the versions registered under subject "
            f"{subject!r}{rule}; the registry refused it, nothing was sent. The registry "
            f"says: {reason}", exc.status, exc.error_code)

    def _prefix(self, schema_id: int) -> bytes:
        return _HEADER.pack(MAGIC_BYTE, schema_id)

    def _writer(self, schema: Schema) -> Any:
        return schema

    def _encode(self, obj: Any, writer: Any) -> bytes:
        raise NotImplementedError


# -- Avro --------------------------------------------------------------------------------

def _avro_full_name(parsed: Any) -> str | None:
    if isinstance(parsed, dict) and parsed.get("type") in ("record", "enum", "fixed"):
        name = str(parsed.get("name"))
        return name  # fastavro's parsed schemas carry the full name
    return None


class AvroSerializer(RegistrySerializer):
    """Avro (fastavro): ``schema`` as a JSON string or a dict; records are dicts (or any
    object that ``to_dict(obj)`` turns into one)."""

    schema_type = "AVRO"

    def __init__(self, client: AsyncSchemaRegistryClient, schema: str | Mapping[str, Any],
                 *, to_dict: Callable[[Any], Any] | None = None, **options: Any) -> None:
        import fastavro
        raw = json.loads(schema) if isinstance(schema, str) else dict(schema)
        try:
            parsed = fastavro.parse_schema(raw)
        except Exception as exc:
            raise ValueError(f"not a valid Avro schema: {exc}") from exc
        text = schema if isinstance(schema, str) else json.dumps(raw, separators=(",", ":"))
        super().__init__(client, Schema(text, "AVRO"), record_name=_avro_full_name(parsed),
                         **options)
        self.to_dict = to_dict

    def _writer(self, schema: Schema) -> Any:
        import fastavro
        return fastavro.parse_schema(json.loads(schema.schema_str))

    def _encode(self, obj: Any, writer: Any) -> bytes:
        import fastavro
        if self.to_dict is not None:
            obj = self.to_dict(obj)
        buf = io.BytesIO()
        try:
            fastavro.schemaless_writer(buf, writer, obj, strict=True)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise SchemaSerializationError(f"the record does not fit the Avro schema: "
                                           f"{exc}") from exc
        return buf.getvalue()


# -- JSON Schema -------------------------------------------------------------------------

class JSONSchemaSerializer(RegistrySerializer):
    """JSON Schema: ``schema`` as a JSON string or a dict; records are JSON-able objects (or
    what ``to_dict(obj)`` makes of them), validated against the schema unless
    ``validate=False``. The record name (for the record strategies) is the schema's
    ``title``."""

    schema_type = "JSON"

    def __init__(self, client: AsyncSchemaRegistryClient, schema: str | Mapping[str, Any],
                 *, to_dict: Callable[[Any], Any] | None = None, validate: bool = True,
                 **options: Any) -> None:
        raw = json.loads(schema) if isinstance(schema, str) else dict(schema)
        if not isinstance(raw, dict):
            raise ValueError("a JSON Schema must be a JSON object")
        text = schema if isinstance(schema, str) else json.dumps(raw, separators=(",", ":"))
        title = raw.get("title")
        super().__init__(client, Schema(text, "JSON"),
                         record_name=title if isinstance(title, str) else None, **options)
        self.to_dict = to_dict
        self.validate = validate

    def _writer(self, schema: Schema) -> Any:
        if not self.validate:
            return None
        import jsonschema
        raw = json.loads(schema.schema_str)
        cls = jsonschema.validators.validator_for(raw)
        cls.check_schema(raw)
        return cls(raw)

    def _encode(self, obj: Any, writer: Any) -> bytes:
        if self.to_dict is not None:
            obj = self.to_dict(obj)
        if writer is not None:
            errors = sorted(writer.iter_errors(obj), key=lambda e: list(e.path))
            if errors:
                raise SchemaSerializationError(
                    "the record does not fit the JSON Schema: "
                    + "; ".join(f"{'/'.join(map(str, e.path)) or '<root>'}: {e.message}"
                                for e in errors[:5]))
        try:
            return json.dumps(obj, separators=(",", ":")).encode()
        except (TypeError, ValueError) as exc:
            raise SchemaSerializationError(f"the record is not JSON: {exc}") from exc


# -- Protobuf ----------------------------------------------------------------------------

def _message_indexes(descriptor: Any) -> list[int]:
    """The path of a message in its file: index among the top-level messages, then among
    the nested ones at each level."""
    path: list[int] = []
    desc = descriptor
    while desc.containing_type is not None:
        parent = desc.containing_type
        path.append(list(parent.nested_types).index(desc))
        desc = parent
    path.append(list(desc.file.message_types_by_name.values()).index(desc))
    return path[::-1]


class ProtobufSerializer(RegistrySerializer):
    """Protobuf: ``message_type`` is a generated message class; records are instances of
    it. The schema is its file's descriptor (base64, as Confluent's clients register
    it); imported files are registered first, each under its own file name (a
    reference)."""

    schema_type = "PROTOBUF"

    def __init__(self, client: AsyncSchemaRegistryClient, message_type: type, **options: Any
                 ) -> None:
        descriptor = getattr(message_type, "DESCRIPTOR", None)
        if descriptor is None or not hasattr(descriptor, "file"):
            raise TypeError(f"message_type must be a generated Protobuf message class, got "
                            f"{message_type!r}")
        self.message_type = message_type
        file = descriptor.file
        super().__init__(client, self._schema_of(file, ()), record_name=descriptor.full_name,
                         **options)
        indexes = _message_indexes(descriptor)
        # [0] (the first message) is written as a single 0, as Confluent's clients do.
        self._indexes = b"\x00" if indexes == [0] else _zigzag_varints(indexes)
        self._file = file

    @staticmethod
    def _schema_of(file: Any, refs: tuple[tuple[str, str, int], ...]) -> Schema:
        return Schema(base64.standard_b64encode(file.serialized_pb).decode("ascii"),
                      "PROTOBUF", refs)

    async def _references(self, file: Any) -> tuple[tuple[str, str, int], ...]:
        refs: list[tuple[str, str, int]] = []
        for dep in file.dependencies:
            schema = self._schema_of(dep, await self._references(dep))
            if self.auto_register_schemas:
                await self.client.register_schema(dep.name, schema)
            found = await self.client.lookup_schema(dep.name, schema)
            version = found.version
            if version is None:
                version = (await self.client.get_latest_version(dep.name)).version or 1
            refs.append((dep.name, dep.name, int(version)))
        return tuple(refs)

    async def _resolve(self, topic: str, is_key: bool) -> tuple[bytes, Any]:
        if self._file.dependencies and not self.use_latest_version \
                and not self.schema.references:
            self.schema = self._schema_of(self._file, await self._references(self._file))
        return await super()._resolve(topic, is_key)

    def _prefix(self, schema_id: int) -> bytes:
        return _HEADER.pack(MAGIC_BYTE, schema_id) + self._indexes

    def _encode(self, obj: Any, writer: Any) -> bytes:
        if not isinstance(obj, self.message_type):
            raise SchemaSerializationError(
                f"ProtobufSerializer takes {self.message_type.__name__} messages, "
                f"got {type(obj).__name__}")
        message: Any = obj
        return bytes(message.SerializeToString())
