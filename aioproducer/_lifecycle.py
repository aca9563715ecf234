"""State checks shared by :class:`~aioproducer.Producer` and ``MockProducer``."""

from __future__ import annotations

import asyncio
from typing import NoReturn

from .errors import IllegalStateError, ProducerClosedError

__all__ = ["check_loop", "raise_not_running"]


def check_loop(bound: asyncio.AbstractEventLoop | None) -> None:
    """IllegalStateError unless the running loop is the one the producer started on."""
    if bound is not None and asyncio.get_running_loop() is not bound:
        raise IllegalStateError(
            "this producer was started on another event loop; use it only from the "
            "loop that started it")


def raise_not_running(bound: asyncio.AbstractEventLoop | None, never_started: bool,
                      what: str) -> NoReturn:
    """The error for a send on a producer that is not running (or on another loop)."""
    check_loop(bound)
    if never_started:
        raise IllegalStateError(
            f"the producer is not started: call 'await producer.start()' or use "
            f"'async with {what}(...)' before send()")
    raise ProducerClosedError("cannot send: the producer is closed")
