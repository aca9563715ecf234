"""Kafka record batch v2 (magic 2) builder (compiled: batch.pyx)."""

from collections.abc import Callable, Sequence
from typing import Any, final

from typing_extensions import Buffer

from .compressor import CompressorThread
from .pool import Block

BATCH_HEADER_SIZE: int
"""61: bytes of the record batch header; records start at this offset."""

def record_size_upper_bound(
    key_len: int,
    value_len: int,
    headers: Sequence[tuple[str, Buffer | None]] | None = None,
) -> int:
    """Upper bound of one encoded record incl. its length prefix (-1 length = null)."""

@final
class BatchBuilder:
    """Builds one record batch v2 in a :class:`Block`."""

    def __init__(self, block: Block) -> None: ...
    def set_compression(
        self, codec: int, compressor: Callable[[memoryview], Any] | None, limit: int = -1
    ) -> None:
        """Compress the records (codec id 1-4) at close; ``limit`` bounds the batch
        for every record but the first. Only before the first append."""
    def compress_ahead(self, thread: CompressorThread) -> bool:
        """Hand the records to the compression thread now; the batch takes no more
        records. False (nothing changed) if the thread declines or nothing to do."""
    @property
    def compress_ns(self) -> int:
        """CPU ns its compression took on the loop (0: not compressed there)."""
    @property
    def compressing(self) -> bool:
        """Its records are with the compression thread, not done yet."""
    def append(
        self, timestamp_ms: int, key: object, value: object, headers: object = None
    ) -> int:
        """Append a record: its offset delta, or -1 if it does not fit (block unchanged).

        ``key``/``value``: None or a C-contiguous bytes-like object; ``headers``: None
        or a list/tuple of ``(str, bytes-like | None)`` pairs.
        """
    def close(
        self,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        transactional: bool = False,
    ) -> None:
        """Fill in the header and CRC; RuntimeError for an empty or closed batch."""
    def set_producer_state(
        self, producer_id: int, producer_epoch: int, base_sequence: int
    ) -> None:
        """Rewrite the producer fields of a closed batch and recompute the CRC.

        The bytes change in place: views handed out earlier see the new values.
        """
    def detach(self) -> None:
        """Forget the block once it went back to its pool; RuntimeError while live."""
    def view(self) -> memoryview:
        """Read-only view of the closed batch ``[0:size_in_bytes]`` (an export)."""
    @property
    def block(self) -> Block: ...
    @property
    def record_count(self) -> int: ...
    @property
    def compression(self) -> int:
        """Codec id asked for; once closed, the codec applied (0 if sent plain)."""
    @property
    def records_size(self) -> int:
        """Uncompressed bytes of the records section."""
    @property
    def limit_bytes(self) -> int: ...
    @property
    def size_in_bytes(self) -> int:
        """Header plus the records so far."""
    @property
    def remaining(self) -> int:
        """Bytes left for records (0 once closed)."""
    @property
    def base_timestamp(self) -> int:
        """Timestamp of the first record (-1 while empty)."""
    @property
    def max_timestamp(self) -> int:
        """Largest record timestamp (-1 while empty)."""
    @property
    def closed(self) -> bool: ...
    @property
    def producer_id(self) -> int: ...
    @property
    def producer_epoch(self) -> int: ...
    @property
    def base_sequence(self) -> int: ...
    @property
    def transactional(self) -> bool: ...
