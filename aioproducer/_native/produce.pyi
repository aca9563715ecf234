"""Produce requests and answers: the request body's framing, the per-partition result,
and the compiled decoder of the usual answer (compiled: produce.pyx)."""

from collections.abc import Sequence
from typing import Any, final
from uuid import UUID

from typing_extensions import Buffer

@final
class PartitionResult:
    """What a Produce answer says about one partition."""

    @property
    def index(self) -> int: ...
    @property
    def error_code(self) -> int: ...
    @property
    def base_offset(self) -> int: ...
    @property
    def log_append_ms(self) -> int: ...
    @property
    def log_start_offset(self) -> int: ...
    @property
    def error_message(self) -> str | None: ...
    @property
    def record_errors(self) -> list[tuple[int, str | None]]: ...
    @property
    def current_leader(self) -> tuple[int, int] | None: ...
    def __init__(self, index: int, error_code: int, base_offset: int,
                 log_append_ms: int = -1, log_start_offset: int = -1,
                 error_message: str | None = None,
                 record_errors: list[tuple[int, str | None]] | None = None,
                 current_leader: tuple[int, int] | None = None) -> None: ...

@final
class ProduceAnswer:
    """A Produce response, flattened for the Sender: ``partitions`` is
    ``[(topic_name, topic_id, result), ...]`` (by name up to v12, by id from v13)."""

    partitions: list[tuple[str | None, UUID | None, PartitionResult]]
    @property
    def throttle_ms(self) -> int: ...
    @property
    def node_endpoints(self) -> dict[int, tuple[str, int]]: ...
    def __init__(self, throttle_ms: int,
                 partitions: list[tuple[str | None, UUID | None, PartitionResult]],
                 node_endpoints: dict[int, tuple[str, int]] | None = None) -> None: ...

def decode_produce_written(version: int, body: Buffer) -> ProduceAnswer | None:
    """The answer if every partition was written and nothing else is said; else None."""

def encode_produce_body(
    version: int,
    transactional_id: str | None,
    acks: int,
    timeout_ms: int,
    topics: Sequence[tuple[str, UUID | None, Sequence[tuple[int, Buffer]]]],
) -> list[Any]:
    """The body of a Produce request (after its header): ``bytes`` headers
    interleaved with the callers' record buffers, which are not copied."""
