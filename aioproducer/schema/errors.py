"""Schema Registry errors: subclasses of :class:`aioproducer.KafkaError`."""

from __future__ import annotations

from ..errors import KafkaError, SerializationError

__all__ = ["SchemaIncompatibleError", "SchemaNotFoundError", "SchemaRegistryError",
           "SchemaSerializationError"]


class SchemaRegistryError(KafkaError):
    """The Schema Registry refused a request or could not be reached.

    ``status`` is the HTTP status (0 when there was no answer), ``error_code`` the
    registry's own code (Confluent's API: 40401 subject not found, 409 incompatible...)."""

    def __init__(self, message: str, status: int = 0, error_code: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.error_code = error_code


class SchemaNotFoundError(SchemaRegistryError):
    """The subject, version or schema is not registered (and ``auto_register_schemas`` is
    off, or the lookup was explicit)."""


class SchemaIncompatibleError(SchemaRegistryError):
    """The schema breaks the subject's compatibility rule (BACKWARD, FORWARD...): the
    registry refused to register it. Nothing was sent."""


class SchemaSerializationError(SerializationError):
    """The object does not fit the schema (or is not the type the serializer takes)."""
