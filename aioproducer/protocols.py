"""Structural types for code that takes "a producer": the real one or a test double.

Annotate with :class:`ProducerLike` where a :class:`~aioproducer.Producer` is used only
through its public API, and a :class:`~aioproducer.testing.MockProducer` can be passed
in tests without casts::

    async def publish(producer: ProducerLike, events: list[bytes]) -> None:
        for event in events:
            await producer.send("events", event)

All three protocols are ``runtime_checkable``; ``isinstance`` then checks only that
the members exist, not their signatures (mypy checks those). Both producers satisfy
them: ``tests/support/typecheck_protocol.py`` is checked by ``mypy --strict``.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from .config import ProducerConfig
from .metrics import MetricsSnapshot
from .record import RecordMetadata
from .types import Header

if TYPE_CHECKING:
    if sys.version_info >= (3, 11):
        from typing import Self
    else:  # pragma: no cover
        from typing_extensions import Self

    from .transactions import GroupMetadata

# (Header is re-exported: its home is aioproducer.types.)
__all__ = ["Header", "ProducerLike", "RecordFutureLike", "SendManyResultLike"]


@runtime_checkable
class RecordFutureLike(Protocol):
    """What ``send()`` returns: await it for the :class:`RecordMetadata`. An
    asyncio-compatible future (``asyncio.isfuture()`` is true for both producers')."""

    def __await__(self) -> Generator[Any, None, RecordMetadata]: ...

    def done(self) -> bool:
        """Whether the record was acknowledged or failed (or this handle cancelled)."""
        ...

    def cancelled(self) -> bool:
        """Whether :meth:`cancel` cancelled this handle."""
        ...

    def cancel(self, msg: Any | None = None) -> bool:
        """Cancel this handle (the record is still sent); False if it was done."""
        ...

    def result(self) -> RecordMetadata:
        """The metadata; raises the record's error, CancelledError, or
        ``asyncio.InvalidStateError``."""
        ...

    def exception(self) -> BaseException | None:
        """The record's error (None on success); ``asyncio.InvalidStateError`` if not
        done."""
        ...

    def add_done_callback(self, callback: Callable[[Self], object]) -> None:
        """Call ``callback(future)`` on the event loop once the record is done."""
        ...

    def remove_done_callback(self, callback: Callable[[Self], object]) -> int:
        """Remove the registrations of ``callback`` not yet scheduled; how many."""
        ...

    def get_loop(self) -> asyncio.AbstractEventLoop:
        """The event loop the future belongs to."""
        ...

    @property
    def topic(self) -> str: ...

    @property
    def partition(self) -> int: ...


@runtime_checkable
class SendManyResultLike(Protocol):
    """What ``send_many()`` returns: await it for the number of records (or the first
    record's error)."""

    @property
    def count(self) -> int:
        """Records appended by the call."""
        ...

    def __await__(self) -> Generator[Any, None, int]: ...

    def done(self) -> bool:
        """Whether every record of the call was acknowledged or failed."""
        ...

    def failures(self) -> list[tuple[str, int, BaseException]]:
        """``(topic, partition, error)`` of the call's failed records so far."""
        ...

    def failed_count(self) -> int:
        """How many of the call's records failed so far."""
        ...


@runtime_checkable
class ProducerLike(Protocol):
    """The public API of :class:`~aioproducer.Producer`: sending, flushing, closing,
    metrics and transactions.

    Left out: what needs a real cluster (``client_instance_id()``) or another process
    (the two-phase hand-over, ``prepare_transaction()`` and ``resume_transaction()``).
    """

    @property
    def config(self) -> ProducerConfig: ...

    @property
    def closed(self) -> bool: ...

    async def start(self) -> None: ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(self, *exc_info: object) -> None: ...

    async def send(self, topic: str, value: Any = None, key: Any = None, *,
                   partition: int | None = None, timestamp_ms: int | None = None,
                   headers: Sequence[Header] | None = None) -> RecordFutureLike: ...

    async def send_many(self, topic: str, values: Sequence[Any],
                        keys: Sequence[Any] | None = None, *, partition: int | None = None,
                        timestamp_ms: int | None = None,
                        headers: Sequence[Sequence[Header] | None] | None = None,
                        timestamps: Sequence[int | None] | None = None
                        ) -> SendManyResultLike: ...

    async def send_and_wait(self, topic: str, value: Any = None, key: Any = None, *,
                            partition: int | None = None, timestamp_ms: int | None = None,
                            headers: Sequence[Header] | None = None) -> RecordMetadata: ...

    async def flush(self, timeout: float | None = None) -> None: ...

    async def close(self, timeout: float | None = None) -> None: ...

    async def partitions_for(self, topic: str) -> list[int]: ...

    def metrics(self) -> MetricsSnapshot: ...

    # -- transactions (``transactional_id`` set) --

    @property
    def transaction_version(self) -> int | None: ...

    @property
    def transaction_sequence(self) -> int: ...

    async def init_transactions(self) -> None: ...

    def begin_transaction(self) -> None: ...

    async def commit_transaction(self) -> None: ...

    async def abort_transaction(self) -> None: ...

    async def send_offsets_to_transaction(
            self, offsets: Mapping[Any, Any] | Iterable[Any],
            group_metadata: str | GroupMetadata | Any) -> None: ...

    def transaction(self) -> AbstractAsyncContextManager[Self]: ...
