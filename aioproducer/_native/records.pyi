"""The loop-free core of the per-record hot path (compiled: records.pyx).

Batches' records and outcome, topic routes, the partition choice and the appends;
nothing here uses asyncio. Its asyncio glue is ``aio`` (aio.pyx).
"""

from types import TracebackType
from typing import TYPE_CHECKING, Any, final

from .batch import BatchBuilder
from .pool import Block

if TYPE_CHECKING:
    from .aio import ProducerBatch

@final
class RecordMetadata:
    """Where a record was written (Java's ``RecordMetadata``). Immutable."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int:
        """The record's offset, or -1 when it is not known (acks=0)."""
    @property
    def timestamp(self) -> int:
        """CreateTime given or assigned at send, or the broker's LogAppendTime."""
    @property
    def serialized_key_size(self) -> int:
        """Bytes of the key, -1 for a null key."""
    @property
    def serialized_value_size(self) -> int:
        """Bytes of the value, -1 for a null value."""
    def __init__(self, topic: str, partition: int, offset: int, timestamp: int,
                 serialized_key_size: int, serialized_value_size: int) -> None: ...
    def __hash__(self) -> int: ...

class CoreBatch:
    """One batch for one partition: a builder over a pool block, and its outcome
    (the loop-free part of :class:`aio.ProducerBatch`)."""

    topic: str
    partition: int
    tp: tuple[str, int]
    block: Block | None
    builder: BatchBuilder
    result: Any
    created: float
    next_attempt: float
    attempts: int
    full: bool
    settled: bool
    base_offset: int
    log_append_time: int
    last_error: BaseException | None
    producer_id: int
    producer_epoch: int
    base_sequence: int
    def __init__(self, tp: tuple[str, int], block: Block, result: Any, now: float) -> None: ...
    @property
    def error(self) -> BaseException | None:
        """The final error, None on success; with ``record_errors`` set, the error of
        the records that have no entry there."""
    @error.setter
    def error(self, value: BaseException | None) -> None:
        """Also keeps ``error_tb``: the traceback the error has now."""
    @property
    def error_tb(self) -> TracebackType | None:
        """``error.__traceback__`` when ``error`` was set; record futures raise
        ``error.with_traceback(error_tb)`` (as asyncio.Future), so it never grows."""
    @property
    def record_errors(self) -> dict[int, BaseException] | None:
        """KIP-467: None, or ``{index of a record in this batch: its error}``.

        ``RecordFuture.result()``/``exception()`` give ``record_errors[index]`` when
        there is one, else ``error`` (which must then be set too, for the other
        records). Set it, before completing the batch, to the whole dict: the errors'
        tracebacks are kept then.
        """
    @record_errors.setter
    def record_errors(self, value: dict[int, BaseException] | None) -> None: ...
    @property
    def children(self) -> list[ProducerBatch] | None:
        """The batches this one's records were moved to (:meth:`set_children`)."""
    @property
    def parent(self) -> CoreBatch | None:
        """For a child of a split batch: that batch."""
    @property
    def parent_offset(self) -> int:
        """For a child: the index in ``parent`` of its first record (else 0)."""
    def set_children(self, children: list[ProducerBatch]) -> None:
        """Split: this batch's records now live, in order, in ``children``.

        Child k holds this batch's indices ``[offset_k, offset_k + child.record_count)``,
        ``offset_k`` being the sum of the record counts of the children before it; each
        child gets ``parent = self`` and ``parent_offset = offset_k``. The children must
        be of the same partition, not done, not already children, and hold exactly
        ``self.record_count`` records together; ``self`` must be neither done nor split
        already (ValueError/TypeError otherwise). A child may be split in turn.

        A record future of this batch (index i) then gives the outcome of record
        ``i - offset_k`` of the child k holding it (recursively) once that child is
        done; if ``self`` is completed while that child is not, ``self``'s own outcome.
        It is done when ``self.result`` is: complete ``self`` only when
        :meth:`child_done` says so.
        """
    def failures(self, lo: int = 0, hi: int = -1) -> list[tuple[str, int, BaseException]]:
        """``(topic, partition, error)`` of each distinct error of this batch's records
        ``lo..hi-1`` (``hi`` -1: to the last) so far, in record order: its record
        errors, then its error if some record has none; for a split batch, those of
        its done children holding those records (recursively), and its own error for
        records of children not done if it was completed on its own. An error object
        shared by several records is listed once."""
    def first_failure(self, lo: int = 0, hi: int = -1
                      ) -> tuple[BaseException, TracebackType | None] | None:
        """The first error of :meth:`failures` and the traceback it had when the batch
        recorded it (raise ``error.with_traceback(tb)``), or None."""
    def failed_count(self, lo: int = 0, hi: int = -1) -> int:
        """How many of the records ``lo..hi-1`` have failed so far (a failed batch
        fails all its records; a split one counts through its children)."""
    @property
    def record_count(self) -> int: ...
    @property
    def closed(self) -> bool: ...

#: An Arrow binary column: (validity address or 0, offsets address, data address or 0,
#: array offset, large offsets).
ArrowBinarySpec = tuple[int, int, int, int, bool]
#: An Arrow list<struct<key, value>> column: (validity address or 0, offsets address,
#: array offset, large offsets, key column, value column).
ArrowHeadersSpec = tuple[int, int, int, bool, ArrowBinarySpec, ArrowBinarySpec]
#: An Arrow int64 column: (validity address or 0, data address, array offset).
ArrowInt64Spec = tuple[int, int, int]

@final
class TopicRoute:
    num_partitions: int
    sticky: int
    sticky_bytes: int
    """KIP-794: batch bytes produced to ``sticky`` since it was chosen."""
    sticky_limit: int
    """Move the sticky partition after this many bytes (``batch_size``); <= 0: never."""
    tails: list[ProducerBatch | None]
    def __init__(self, num_partitions: int, sticky_limit: int = 16384) -> None: ...
    def resize(self, num_partitions: int) -> None: ...
    def switch_due(self) -> bool:
        """Whether the sticky partition must move before the next keyless record."""

class CoreAppender:
    """Routes records to their partition's open batch (the loop-free part of
    :class:`aio.Appender`)."""

    def __init__(self, hash_keys: bool, ignore_keys: bool = False,
                 max_payload: int = -1, sticky_batch_size: int = 16384) -> None: ...
    @property
    def sticky_batch_size(self) -> int: ...
    def route(self, topic: str) -> TopicRoute | None: ...
    def set_route(self, topic: str, num_partitions: int) -> TopicRoute: ...
    def drop_route(self, topic: str) -> bool: ...
    def append_many(self, topic: str, values: list[Any] | ArrowBinarySpec,
                    keys: list[Any] | ArrowBinarySpec | None, start: int,
                    partition: int | None, timestamp_ms: int | None,
                    touched: list[ProducerBatch],
                    headers: list[Any] | ArrowHeadersSpec | None = None,
                    timestamps: list[Any] | ArrowInt64Spec | None = None,
                    count: int = -1, firsts: list[int] | None = None) -> int:
        """Append records ``start..`` while they fit in open batches; the index of the
        first record left for the Python path (``count`` when all were appended).
        Each batch written into is added once to ``touched``, and the index in it of
        the first record written there to ``firsts``.

        Columns are lists, or Arrow buffer specs (addresses the caller keeps alive:
        ``aioproducer._bulk``); ``count`` is needed when ``values`` is a spec. With
        ``timestamps``, ``timestamp_ms`` is ignored.
        """
