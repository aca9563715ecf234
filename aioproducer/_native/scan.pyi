"""Bounds check of a Kafka message body against a kio entity's wire layout
(compiled: scan.pyx). The layout program is made by ``aioproducer.net.protocol``."""

from collections.abc import Sequence
from typing import final

from typing_extensions import Buffer

ARRAY_NONE: int
ARRAY_COMPACT: int
ARRAY_LEGACY: int
KIND_FIXED: int
KIND_COMPACT_STRING: int
KIND_STRING16: int
KIND_BYTES32: int
KIND_ENTITY: int
KIND_NULLABLE_ENTITY: int
FLAG_FLEXIBLE: int
ENTITY_HEADER_SIZE: int

class LayoutError(ValueError):
    """The body does not fit the layout (truncated, or a length it cannot back)."""

@final
class Layout:
    """A compiled wire layout; :meth:`check` walks a body against it."""

    def __init__(self, code: Sequence[int], name: str = "entity") -> None: ...
    @property
    def name(self) -> str: ...
    def check(self, body: Buffer) -> int:
        """The offset where the entity ends; :class:`LayoutError` if the body does not
        fit (a length, count or tagged field it cannot back, or a truncation)."""
