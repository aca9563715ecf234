"""Schema Registry serializers (Avro, JSON Schema, Protobuf, Pydantic models) and an async
registry client: ``pip install 'aioproducer[schema]'``.

Nothing here is imported by ``aioproducer`` itself; fastavro, jsonschema, protobuf and
pydantic are imported by the serializers that use them.
"""

from __future__ import annotations

from .client import AsyncSchemaRegistryClient, RegisteredSchema, Schema
from .errors import (
    SchemaIncompatibleError,
    SchemaNotFoundError,
    SchemaRegistryError,
    SchemaSerializationError,
)
from .pydantic import PydanticSerializer, avro_schema
from .serializers import (
    MAGIC_BYTE,
    AvroSerializer,
    JSONSchemaSerializer,
    ProtobufSerializer,
    RegistrySerializer,
    SubjectNameStrategy,
    record_name_strategy,
    topic_name_strategy,
    topic_record_name_strategy,
)

__all__ = [
    "MAGIC_BYTE",
    "AsyncSchemaRegistryClient",
    "AvroSerializer",
    "JSONSchemaSerializer",
    "ProtobufSerializer",
    "PydanticSerializer",
    "RegisteredSchema",
    "RegistrySerializer",
    "Schema",
    "SchemaIncompatibleError",
    "SchemaNotFoundError",
    "SchemaRegistryError",
    "SchemaSerializationError",
    "SubjectNameStrategy",
    "avro_schema",
    "record_name_strategy",
    "topic_name_strategy",
    "topic_record_name_strategy",
]
