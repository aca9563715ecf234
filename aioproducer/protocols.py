"""Structural types for code that takes "a producer": the real one or a test double.

Annotate with :class:`ProducerLike` where a :class:`~aioproducer.Producer` is used only
through its public API, and a :class:`~aioproducer.testing.MockProducer` can be passed
in tests without casts::

    async def publish(producer: ProducerLike, events: list[bytes]) -> None:
        for event in events:
            await producer.send("events", event)

Both protocols are ``runtime_checkable``; ``isinstance`` then checks only that the
members exist, not their signatures (mypy checks those).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Generator, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from .producer import Header
from .record import RecordMetadata

if TYPE_CHECKING:
    if sys.version_info >= (3, 11):
        from typing import Self
    else:  # pragma: no cover
        from typing_extensions import Self

__all__ = ["Header", "ProducerLike", "RecordFutureLike"]


@runtime_checkable
class RecordFutureLike(Protocol):
    """What ``send()`` returns: await it for the :class:`RecordMetadata`."""

    def __await__(self) -> Generator[Any, None, RecordMetadata]: ...

    def done(self) -> bool:
        """Whether the record was acknowledged or failed."""
        ...

    def result(self) -> RecordMetadata:
        """The metadata; raises the record's error, or ``asyncio.InvalidStateError``."""
        ...

    def exception(self) -> BaseException | None:
        """The record's error (None on success); ``asyncio.InvalidStateError`` if not done."""
        ...

    def add_done_callback(self, callback: Callable[[Self], object]) -> None:
        """Call ``callback(future)`` on the event loop once the record is done."""
        ...

    @property
    def topic(self) -> str: ...

    @property
    def partition(self) -> int: ...


@runtime_checkable
class ProducerLike(Protocol):
    """The public API of :class:`~aioproducer.Producer`."""

    @property
    def closed(self) -> bool: ...

    async def start(self) -> None: ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(self, *exc_info: object) -> None: ...

    async def send(self, topic: str, value: Any = None, key: Any = None, *,
                   partition: int | None = None, timestamp_ms: int | None = None,
                   headers: Sequence[Header] | None = None) -> RecordFutureLike: ...

    async def send_and_wait(self, topic: str, value: Any = None, key: Any = None, *,
                            partition: int | None = None, timestamp_ms: int | None = None,
                            headers: Sequence[Header] | None = None) -> RecordMetadata: ...

    async def flush(self, timeout: float | None = None) -> None: ...

    async def close(self, timeout: float | None = None) -> None: ...

    async def partitions_for(self, topic: str) -> list[int]: ...
