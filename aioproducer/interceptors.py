"""Producer interceptors (Java's ``ProducerInterceptor``).

An interceptor may rewrite each record before it is serialized and partitioned
(``on_send``) and sees every acknowledgement, success or failure
(``on_acknowledgement``). Interceptors run in the order given; one that raises is
logged and skipped, and never breaks a send or the Sender. With interceptors, every
record takes the Python path (the native fast path cannot call them).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ._native import RecordMetadata
from .types import Header

__all__ = ["InterceptorChain", "ProducerInterceptor", "ProducerRecord"]

log = logging.getLogger("aioproducer.interceptors")


@dataclass(frozen=True, slots=True)
class ProducerRecord:
    """A record as given to ``send()``; return a changed copy
    (``dataclasses.replace(record, value=...)``) from ``on_send`` to rewrite it."""

    topic: str
    value: Any = None
    key: Any = None
    partition: int | None = None
    timestamp_ms: int | None = None
    headers: Sequence[Header] | None = None


@runtime_checkable
class ProducerInterceptor(Protocol):
    def on_send(self, record: ProducerRecord) -> ProducerRecord: ...

    def on_acknowledgement(self, metadata: RecordMetadata,
                           exception: BaseException | None) -> None: ...


class InterceptorChain:
    """Calls each interceptor in turn, isolating their failures."""

    def __init__(self, interceptors: Sequence[ProducerInterceptor]) -> None:
        self.interceptors = tuple(interceptors)

    def __bool__(self) -> bool:
        return bool(self.interceptors)

    def on_send(self, record: ProducerRecord) -> ProducerRecord:
        for ic in self.interceptors:
            hook = getattr(ic, "on_send", None)
            if hook is None:
                continue
            try:
                out = hook(record)
            except Exception:
                log.warning("interceptor %r raised in on_send; skipped", ic, exc_info=True)
                continue
            if isinstance(out, ProducerRecord):
                record = out
            else:
                log.warning("interceptor %r on_send returned %s, not a ProducerRecord; "
                            "ignored", ic, type(out).__name__)
        return record

    def on_acknowledgement(self, metadata: RecordMetadata,
                           exception: BaseException | None) -> None:
        for ic in self.interceptors:
            hook = getattr(ic, "on_acknowledgement", None)
            if hook is None:
                continue
            try:
                hook(metadata, exception)
            except Exception:
                log.warning("interceptor %r raised in on_acknowledgement; skipped", ic,
                            exc_info=True)

    def close(self) -> None:
        for ic in self.interceptors:
            hook = getattr(ic, "close", None)
            if hook is None:
                continue
            try:
                hook()
            except Exception:
                log.warning("interceptor %r raised in close; skipped", ic, exc_info=True)
