"""Per-record hot path: batches, record futures, the appender (compiled: records.pyx)."""

import asyncio
from collections.abc import Callable, Generator
from typing import Any, final

from .batch import BatchBuilder
from .pool import Block

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

@final
class ProducerBatch:
    """One batch for one partition: a builder over a pool block, and its outcome."""

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
    base_offset: int
    log_append_time: int
    error: BaseException | None
    last_error: BaseException | None
    producer_id: int
    producer_epoch: int
    base_sequence: int
    waiters: list[asyncio.Future[None]] | None
    def __init__(self, tp: tuple[str, int], block: Block, result: Any, now: float) -> None: ...
    def waiter(self) -> asyncio.Future[None] | None:
        """A private future resolved when the batch completes (None if it is done)."""
    def wake_waiters(self) -> None:
        """Resolve every waiter (right after ``result`` is set)."""
    @property
    def record_count(self) -> int: ...
    @property
    def closed(self) -> bool: ...

@final
class RecordFuture:
    """The result of one ``send()``: await it for RecordMetadata, or add a callback."""

    def __init__(self, batch: ProducerBatch, index: int, timestamp: int, key_size: int,
                 value_size: int) -> None: ...
    @property
    def batch(self) -> ProducerBatch: ...
    def __await__(self) -> Generator[Any, None, RecordMetadata]: ...
    def done(self) -> bool: ...
    def result(self) -> RecordMetadata: ...
    def exception(self) -> BaseException | None: ...
    def add_done_callback(self, callback: Callable[[RecordFuture], object]) -> None: ...
    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...

@final
class TopicRoute:
    num_partitions: int
    sticky: int
    tails: list[ProducerBatch | None]
    def __init__(self, num_partitions: int) -> None: ...
    def resize(self, num_partitions: int) -> None: ...

@final
class Appender:
    def __init__(self, hash_keys: bool, ignore_keys: bool = False,
                 max_payload: int = -1) -> None: ...
    def bind(self, loop: asyncio.AbstractEventLoop | None) -> None:
        """Take records in :meth:`append` only on ``loop`` (None: take none)."""
    def route(self, topic: str) -> TopicRoute | None: ...
    def set_route(self, topic: str, num_partitions: int) -> TopicRoute: ...
    def append(self, topic: object, value: object, key: object, partition: object,
               timestamp_ms: object, /) -> RecordFuture | None: ...
    def append_many(self, topic: str, values: list[Any], keys: list[Any] | None, start: int,
                    partition: int | None, timestamp_ms: int | None,
                    touched: list[ProducerBatch]) -> int: ...
