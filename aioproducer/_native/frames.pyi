"""Type stubs for a connection's compiled framing (frames.pyx)."""

import asyncio
from collections.abc import Callable, Iterable
from typing import Any, final

from typing_extensions import Buffer

def request_head(api_key: int, api_version: int, correlation_id: int,
                 client_id_field: bytes, flexible: bool,
                 body_parts: Iterable[Buffer]) -> tuple[bytes, int]:
    """The bytes before a request's body (size and request header), and the
    request's size on the wire, head included."""

@final
class InFlight:
    """A request waiting for its response (its future, or its reply function)."""

    @property
    def correlation_id(self) -> int: ...
    @property
    def api_key(self) -> int: ...
    @property
    def api_version(self) -> int: ...
    @property
    def flexible_header(self) -> bool: ...
    @property
    def future(self) -> asyncio.Future[Any] | None: ...
    @property
    def deadline(self) -> float: ...
    @property
    def timeout_ms(self) -> int: ...
    @property
    def decode(self) -> Callable[[memoryview], Any] | None: ...
    @property
    def reply(self) -> Callable[[Any, BaseException | None], None] | None: ...
    def __init__(self, correlation_id: int, api_key: int, api_version: int,
                 flexible_header: bool, future: asyncio.Future[Any] | None,
                 deadline: float, timeout_ms: int,
                 decode: Callable[[memoryview], Any] | None,
                 reply: Callable[[Any, BaseException | None], None] | None) -> None: ...
