"""Pydantic models as records: a serializer built from the model class.

``format="json"``: the model's JSON Schema (``model_json_schema()``), records written with
``model_dump_json()``. ``format="avro"``: an Avro record schema made from the model's
fields (:func:`avro_schema`), records written with fastavro.
"""

from __future__ import annotations

import datetime
import enum
import json
import types
import typing
import uuid
from typing import Any

from .client import AsyncSchemaRegistryClient
from .errors import SchemaSerializationError
from .serializers import AvroSerializer, JSONSchemaSerializer, RegistrySerializer

__all__ = ["PydanticSerializer", "avro_schema"]


def _is_model(tp: Any) -> bool:
    from pydantic import BaseModel
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _avro_type(tp: Any, names: dict[str, Any], namespace: str | None) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        return _avro_type(args[0], names, namespace)
    if origin in (typing.Union, types.UnionType):
        branches = [a for a in args if a is not type(None)]
        out = [_avro_type(a, names, namespace) for a in branches]
        return (["null", *out] if len(branches) < len(args) else out) if len(out) > 1 \
            or len(branches) < len(args) else out[0]
    if origin in (list, tuple, set, frozenset) or tp in (list,):
        item = args[0] if args else str
        return {"type": "array", "items": _avro_type(item, names, namespace)}
    if origin is dict:
        if args and args[0] is not str:
            raise TypeError(f"Avro maps have str keys: {tp!r}")
        return {"type": "map", "values": _avro_type(args[1] if args else str, names,
                                                     namespace)}
    if tp is bool:
        return "boolean"
    if tp is int:
        return "long"
    if tp is float:
        return "double"
    if tp is str:
        return "string"
    if tp is bytes:
        return "bytes"
    if tp is datetime.datetime:
        return {"type": "long", "logicalType": "timestamp-millis"}
    if tp is datetime.date:
        return {"type": "int", "logicalType": "date"}
    if tp is uuid.UUID:
        return {"type": "string", "logicalType": "uuid"}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        if tp.__name__ in names:
            return tp.__name__
        names[tp.__name__] = tp
        return {"type": "enum", "name": tp.__name__,
                "symbols": [str(m.value) for m in tp]}
    if _is_model(tp):
        if tp.__name__ in names:
            return tp.__name__
        return _record(tp, names, namespace)
    raise TypeError(f"no Avro type for {tp!r}: use format='json', or give an Avro schema "
                    "to AvroSerializer")


def _record(model: Any, names: dict[str, Any], namespace: str | None) -> dict[str, Any]:
    from pydantic_core import PydanticUndefined
    names[model.__name__] = model
    fields = []
    for name, info in model.model_fields.items():
        field: dict[str, Any] = {"name": info.alias or name,
                                 "type": _avro_type(info.annotation, names, namespace)}
        if info.description:
            field["doc"] = info.description
        if info.default is not PydanticUndefined and info.default_factory is None:
            default = info.default
            if isinstance(default, enum.Enum):
                default = default.value
            if default is None or isinstance(default, (bool, int, float, str)):
                if default is None and isinstance(field["type"], list) \
                        and field["type"][0] != "null":
                    field["type"] = ["null", *field["type"]]
                field["default"] = default
        fields.append(field)
    record: dict[str, Any] = {"type": "record", "name": model.__name__, "fields": fields}
    if namespace:
        record["namespace"] = namespace
    doc = model.__doc__
    if doc and model.__doc__ is not getattr(model.__mro__[1], "__doc__", None):
        record["doc"] = doc.strip()
    return record


def avro_schema(model: type, namespace: str | None = None) -> dict[str, Any]:
    """An Avro record schema from a Pydantic model's fields: int -> long, float -> double,
    ``X | None`` -> ``["null", X]``, list -> array, ``dict[str, X]`` -> map, nested
    models -> records, Enum -> enum, datetime -> timestamp-millis, date, UUID; field
    defaults become Avro defaults (so adding a field with a default stays compatible)."""
    if not _is_model(model):
        raise TypeError(f"avro_schema takes a pydantic.BaseModel subclass, got {model!r}")
    return _record(model, {}, namespace)


def _plain(obj: Any) -> Any:
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [_plain(v) for v in obj]
    return obj


class PydanticSerializer:
    """A Schema Registry serializer for a Pydantic model: ``send(topic,
    value=MyModel(...))``.

    ``format``: ``"json"`` (JSON Schema, default) or ``"avro"``. ``namespace`` (Avro):
    the record's namespace. Other options (``subject_name_strategy``,
    ``auto_register_schemas``, ``use_latest_version``) as for the other serializers. Takes
    instances of ``model`` (or dicts, validated into one first).
    """

    def __init__(self, client: AsyncSchemaRegistryClient, model: type, *,
                 format: str = "json", namespace: str | None = None, **options: Any) -> None:
        if not _is_model(model):
            raise TypeError(f"model must be a pydantic.BaseModel subclass, got {model!r}")
        self.model: Any = model
        self.format = format
        self.inner: RegistrySerializer
        if format == "json":
            schema = dict(model.model_json_schema())  # type: ignore[attr-defined]
            self.inner = JSONSchemaSerializer(client, schema, to_dict=self._to_json,
                                              **options)
        elif format == "avro":
            self.inner = AvroSerializer(client, avro_schema(model, namespace),
                                        to_dict=self._to_avro, **options)
        else:
            raise ValueError(f"format must be 'json' or 'avro', got {format!r}")
        self.inner.what = f"the {format.upper()} schema of model {model.__qualname__}"

    @property
    def schema_str(self) -> str:
        return self.inner.schema.schema_str

    def _model(self, obj: Any) -> Any:
        if isinstance(obj, self.model):
            return obj
        if isinstance(obj, dict):
            from pydantic import ValidationError
            try:
                return self.model.model_validate(obj)
            except ValidationError as exc:
                raise SchemaSerializationError(str(exc)) from exc
        raise SchemaSerializationError(f"this serializer takes {self.model.__name__} "
                                       f"(or a dict), got {type(obj).__name__}")

    def _to_json(self, obj: Any) -> Any:
        return json.loads(self._model(obj).model_dump_json(by_alias=True))

    def _to_avro(self, obj: Any) -> Any:
        return _plain(self._model(obj).model_dump(by_alias=True))

    async def serialize_async(self, obj: Any, topic: str, is_key: bool = False
                              ) -> bytes | None:
        return await self.inner.serialize_async(obj, topic, is_key)

    def serialize(self, obj: Any, topic: str, is_key: bool = False) -> bytes | None:
        return self.inner.serialize(obj, topic, is_key)

    async def prepare(self, topic: str, is_key: bool = False) -> int:
        return await self.inner.prepare(topic, is_key)

    def subject_for(self, topic: str, is_key: bool) -> str:
        return self.inner.subject_for(topic, is_key)

    def __call__(self, obj: Any) -> bytes | None:
        return self.inner(obj)
