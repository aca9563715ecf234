"""One TCP connection to one Kafka broker.

:class:`BrokerConnection` is an :class:`asyncio.Protocol`: a request is written
from its parts, the record buffers not joined (one ``os.writev`` on asyncio's
plain-TCP transport when nothing is buffered, else ``transport.writelines``; a
request that expects no response is joined first), and responses are cut out of
the byte stream in ``data_received`` and matched, in order, to a FIFO of in-flight
requests (Kafka answers requests on a connection in the order they were sent).

Failure model: any framing or correlation problem, a request timeout, or the
socket going away makes the connection unusable; it is closed (aborted) at once
and every in-flight request fails — the expired/offending one with the precise
error (:class:`RequestTimedOutError`, :class:`ProtocolError`), the others with
:class:`KafkaConnectionError`. A closed connection is never reused.

Futures handed out by :meth:`BrokerConnection.send_raw` belong to the caller; a
done callback marks their exception as retrieved, so a caller that only looks at
``fut.exception()`` in a callback (or drops the future on shutdown) never makes
asyncio log "Future exception was never retrieved". A request sent with
:meth:`BrokerConnection.send_with_reply` (the Sender's Produce requests) has no
future: its reply function gets the answer or the error.

With SASL, a :class:`~aioproducer.net.sasl.SaslAuthenticator` authenticates the
connection after version negotiation and re-authenticates it (KIP-368); the
connection gives it :meth:`~BrokerConnection.hold_writes` /
:meth:`~BrokerConnection.release_writes` and tells it when it goes idle.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import io
import logging
import os
import socket
import ssl
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeAlias, TypeVar, cast, overload

from kio.index import load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map
from kio.serial import entity_writer
from kio.static.protocol import RequestPayload, ResponsePayload

from .._native.frames import InFlight, request_head
from .._version import __version__
from ..errors import (
    KafkaConnectionError,
    KafkaError,
    ProtocolError,
    RequestTimedOutError,
    TLSError,
    UnsupportedVersionError,
    for_code,
)
from .apis import ApiKey
from .protocol import decode_entity, read_uvarint, request_module
from .protocol import response_type as _response_type
from .security import Security

if TYPE_CHECKING:
    # Only for the annotations: at run time a version's module is imported when that
    # version is first used (_api_versions_types()), SASL's when a connection uses it.
    import kio.schema.api_versions.v0.response as _av0_resp
    import kio.schema.api_versions.v1.response as _av1_resp
    import kio.schema.api_versions.v2.response as _av2_resp
    import kio.schema.api_versions.v3.request as _av3_req
    import kio.schema.api_versions.v3.response as _av3_resp

    from .sasl import SaslAuthenticator

__all__ = ["API_VERSIONS_KEY", "BrokerConnection", "api_name"]

log = logging.getLogger("aioproducer.net")

R = TypeVar("R", bound=ResponsePayload)
T = TypeVar("T")

API_VERSIONS_KEY: Final = int(ApiKey.API_VERSIONS)
_UNSUPPORTED_VERSION: Final = int(ErrorCode.unsupported_version)
_MAX_CORRELATION_ID: Final = 0x7FFFFFFF
# Requests go out with one writev() of their parts where the platform has it; at most
# this many parts (POSIX IOV_MAX is at least 16; Linux and macOS allow 1024).
_WRITEV = hasattr(os, "writev")
_IOV_MAX = 1024 if _WRITEV else 0
_SOFTWARE_NAME: Final = "aioproducer"
_SOFTWARE_VERSION: Final = __version__

if TYPE_CHECKING:
    _ApiVersionsResponse: TypeAlias = (
        _av0_resp.ApiVersionsResponse
        | _av1_resp.ApiVersionsResponse
        | _av2_resp.ApiVersionsResponse
        | _av3_resp.ApiVersionsResponse
    )
_API_VERSIONS_MAX: Final = 3
_API_VERSIONS_VERSIONS: Final = range(_API_VERSIONS_MAX + 1)


def _api_versions_types(version: int) -> tuple[type[RequestPayload], type[_ApiVersionsResponse]]:
    """kio's ApiVersions request and response classes of ``version`` (0..3; KeyError
    for another), imported on first use."""
    if version not in _API_VERSIONS_VERSIONS:
        raise KeyError(version)
    return (request_module(API_VERSIONS_KEY, version).ApiVersionsRequest,
            cast("type[_ApiVersionsResponse]", _response_type(API_VERSIONS_KEY, version)))


def api_name(api_key: int) -> str:
    """``"Metadata"`` for 3, ``"ApiVersions"`` for 18, ``"api key 999"`` if unknown."""
    name = api_key_map.get(api_key)
    if name is None:
        return f"api key {api_key}"
    return "".join(part.capitalize() for part in name.split("_"))


def _consume_exception(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()


class BrokerConnection(asyncio.Protocol):
    """A connection to one broker, with version negotiation and request pipelining.

    Create with :meth:`open`. Attributes the owner may set:

    * ``on_close(conn)`` — called once when the connection closes for any reason;
    * ``on_writable()`` — called when the transport resumes writing
      (``can_write`` went back to True).
    """

    #: Transport write-buffer high-water mark; above it ``can_write`` turns False.
    write_buffer_high: int = 4 * 1024 * 1024
    write_buffer_low: int = 1024 * 1024

    def __init__(self, host: str, port: int, *, node_id: int | None = None,
                 client_id: str = "aioproducer", request_timeout_ms: int = 30000,
                 max_response_bytes: int = 100 * 1024 * 1024,
                 security: Security | None = None) -> None:
        self.host = host
        self.security = security
        self._sasl: SaslAuthenticator | None = None
        if security is not None and security.sasl:
            from .sasl import SaslAuthenticator  # SASL's code only when it is used
            self._sasl = SaslAuthenticator(self, security)
        self._paused = False
        self.port = port
        self.node_id = node_id
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.max_response_bytes = max_response_bytes
        self.api_versions: dict[int, tuple[int, int]] = {}
        """Broker-supported ``api_key -> (min_version, max_version)``."""
        self.finalized_features: dict[str, int] = {}
        """The cluster's finalized feature levels (ApiVersions v3+), e.g.
        ``{"transaction.version": 2}``; ``finalized_features_epoch`` is -1 if unknown."""
        self.finalized_features_epoch = -1
        self.can_write = True
        self.on_close: Callable[[BrokerConnection], None] | None = None
        self.on_writable: Callable[[], None] | None = None
        self.on_throttle: Callable[[float], None] | None = None
        """KIP-219: called with ``throttle_time_ms`` when a response of :meth:`request`
        says the broker throttled us (the client then mutes the node)."""
        self.close_reason: str | None = None
        """Why the connection closed (None while open)."""

        cid = client_id.encode("utf-8")
        self._client_id_field = len(cid).to_bytes(2, "big") + cid  # NULLABLE_STRING
        self._loop: asyncio.AbstractEventLoop | None = None
        self._transport: asyncio.Transport | None = None
        # The socket's fd when requests may be written to it directly (see _writev),
        # else -1.
        self._fd = -1
        self._negotiated = False
        self._closing = False
        self._closed_event = asyncio.Event()
        self._in_flight: deque[InFlight] = deque()
        self._next_correlation_id = 0
        self._timer: asyncio.TimerHandle | None = None
        self._timer_when = 0.0
        # framing state
        self._size_buf = bytearray()
        self._frame: bytearray | None = None
        self._frame_pos = 0

    # -- construction ------------------------------------------------------------------

    @classmethod
    async def open(cls, host: str, port: int, *, node_id: int | None = None,
                   client_id: str = "aioproducer", request_timeout_ms: int = 30000,
                   connect_timeout_ms: int = 10000,
                   max_response_bytes: int = 100 * 1024 * 1024,
                   security: Security | None = None,
                   send_buffer_bytes: int = -1,
                   receive_buffer_bytes: int = -1) -> BrokerConnection:
        """Connect to ``host:port`` and negotiate API versions.

        Every address ``host`` resolves to is tried in turn (``client.dns.lookup=
        use_all_dns_ips``), each within ``connect_timeout_ms``; the socket gets
        ``send_buffer_bytes`` / ``receive_buffer_bytes`` (SO_SNDBUF / SO_RCVBUF, set
        before it connects; -1 keeps the OS default). Raises
        :class:`KafkaConnectionError` when no address accepts the connection, and
        whatever the ApiVersions exchange raises (:class:`RequestTimedOutError`,
        :class:`KafkaConnectionError`...).
        """
        loop = asyncio.get_running_loop()
        conn = cls(host, port, node_id=node_id, client_id=client_id,
                   request_timeout_ms=request_timeout_ms,
                   max_response_bytes=max_response_bytes, security=security)
        conn._loop = loop
        ctx = security.ssl_context if security is not None else None
        try:
            sock = await _connect_socket(loop, host, port, connect_timeout_ms / 1000.0,
                                         send_buffer_bytes, receive_buffer_bytes)
            try:
                await asyncio.wait_for(
                    loop.create_connection(lambda: conn, sock=sock, ssl=ctx,
                                           server_hostname=host if ctx is not None else None),
                    connect_timeout_ms / 1000.0)
            except BaseException:
                sock.close()
                raise
        except asyncio.TimeoutError:
            raise KafkaConnectionError(
                f"cannot connect to {conn}: timed out after {connect_timeout_ms} ms"
            ) from None
        except ssl.SSLCertVerificationError as exc:
            raise TLSError(f"TLS with {conn} failed: the broker's certificate was not "
                           f"accepted: {exc.verify_message or exc.reason}") from None
        except ssl.SSLError as exc:
            raise TLSError(f"TLS with {conn} failed: {exc.reason or exc}") from None
        except OSError as exc:
            raise KafkaConnectionError(f"cannot connect to {conn}: {_os_error_text(exc)}"
                                       ) from exc
        try:
            await conn._negotiate_versions()
            if conn._sasl is not None:
                await conn._sasl.authenticate()
        except BaseException as exc:
            if isinstance(exc, KafkaError):
                conn.close(f"connection set-up failed: {exc}")
            else:
                conn.close("connection set-up interrupted")
            raise
        return conn

    def __repr__(self) -> str:
        return f"<BrokerConnection {self} in_flight={len(self._in_flight)}>"

    def __str__(self) -> str:
        if self.node_id is None or self.node_id < 0:
            return f"bootstrap broker {self.host}:{self.port}"
        return f"node {self.node_id} at {self.host}:{self.port}"

    # -- state -------------------------------------------------------------------------

    @property
    def is_connected(self) -> bool:
        """True while the connection is open and versions are negotiated."""
        return self._negotiated and not self._closing and self._transport is not None

    @property
    def closed(self) -> bool:
        """True once closed and the transport is gone (see :meth:`wait_closed`)."""
        return self._closing and self._closed_event.is_set()

    @property
    def in_flight(self) -> int:
        """Requests sent and still waiting for their response."""
        return len(self._in_flight)

    @property
    def reauthentications(self) -> int:
        """Successful KIP-368 re-authentications on this connection."""
        return self._sasl.reauthentications if self._sasl is not None else 0

    def version_for(self, api_key: int, lo: int, hi: int) -> int:
        """The highest version of ``api_key`` in ``lo..hi`` that the broker supports."""
        broker = self.api_versions.get(api_key)
        if broker is None:
            raise UnsupportedVersionError(
                f"{self} does not support {api_name(api_key)} (API key {api_key}); "
                f"aioproducer needs v{lo}..v{hi}"
            )
        version = min(hi, broker[1])
        if version < max(lo, broker[0]):
            raise UnsupportedVersionError(
                f"{self} supports {api_name(api_key)} (API key {api_key}) "
                f"v{broker[0]}..v{broker[1]}, aioproducer supports v{lo}..v{hi}: "
                "no common version"
            )
        return version

    # -- requests ----------------------------------------------------------------------

    @overload
    async def request(self, req: RequestPayload, response_type: None = None, *,
                      timeout_ms: int | None = None) -> ResponsePayload: ...

    @overload
    async def request(self, req: RequestPayload, response_type: type[R], *,
                      timeout_ms: int | None = None) -> R: ...

    async def request(self, req: RequestPayload, response_type: type[R] | None = None, *,
                      timeout_ms: int | None = None) -> R | ResponsePayload:
        """Send a kio request entity and decode its response.

        ``response_type`` (the kio response class of the same API and version) makes
        the result precisely typed; without it the class is looked up in kio.
        ``timeout_ms`` overrides the connection's request timeout for this request.
        """
        api_key = int(req.__api_key__)
        version = int(req.__version__)
        if response_type is not None and (
                int(response_type.__api_key__), int(response_type.__version__)) != (
                api_key, version):
            raise ValueError(
                f"{response_type.__qualname__} (API key {response_type.__api_key__} "
                f"v{response_type.__version__}) does not answer {type(req).__qualname__} "
                f"(API key {api_key} v{version})"
            )
        if self.api_versions:
            self.version_for(api_key, version, version)
        if self._sasl is not None:
            await self._sasl.wait_turn()  # held while the connection re-authenticates
        buf = io.BytesIO()
        entity_writer(type(req))(buf, req)
        rtype: type[Any] = (load_response_schema(api_key, version) if response_type is None
                            else response_type)
        fut = self.send_raw(api_key, version, (buf.getvalue(),), flexible=req.__flexible__,
                            expect_response=True, timeout_ms=timeout_ms,
                            decode=functools.partial(decode_entity, rtype))
        assert fut is not None
        response = await fut
        throttle = getattr(response, "throttle_time", None)
        if throttle and self.on_throttle is not None:
            self.on_throttle(throttle.total_seconds() * 1000.0)
        return cast("R | ResponsePayload", response)

    @overload
    def send_raw(self, api_key: int, api_version: int,
                 body_parts: Sequence[bytes | bytearray | memoryview], *, flexible: bool,
                 expect_response: bool, timeout_ms: int | None = None,
                 decode: None = None,
                 ) -> asyncio.Future[memoryview] | None: ...

    @overload
    def send_raw(self, api_key: int, api_version: int,
                 body_parts: Sequence[bytes | bytearray | memoryview], *, flexible: bool,
                 expect_response: bool, timeout_ms: int | None = None,
                 decode: Callable[[memoryview], T],
                 ) -> asyncio.Future[T] | None: ...

    def send_raw(self, api_key: int, api_version: int,
                 body_parts: Sequence[bytes | bytearray | memoryview], *, flexible: bool,
                 expect_response: bool, timeout_ms: int | None = None,
                 decode: Callable[[memoryview], Any] | None = None,
                 ) -> asyncio.Future[Any] | None:
        """Write one request whose body is already encoded; zero copy.

        The request header and the 4-byte size are built here and written with the
        body parts in one call: ``os.writev`` when the transport may be bypassed
        (:meth:`_writev`), else ``transport.writelines``. ``flexible`` is whether
        this version of the API is flexible (request header v2 + response header v1,
        except ApiVersions whose responses always use header v0).

        Returns a future of the response body (after the response header), or of
        ``decode(body)`` when ``decode`` is given, or ``None`` when
        ``expect_response`` is False (acks=0 Produce: the broker sends
        nothing back, so nothing is registered). With ``expect_response=False``
        the parts are joined into one ``bytes`` first, so the caller may reuse its
        buffers as soon as this returns. With a response expected, the parts must
        stay unchanged until the future is done.

        ``decode`` runs when the response arrives; whatever it raises means the broker
        sent bytes that are not the response: the future fails with
        :class:`ProtocolError`, and the connection closes (the other requests in flight
        fail with :class:`KafkaConnectionError`), as for any framing error.

        Raises :class:`KafkaConnectionError` if the connection is closed.
        """
        if not expect_response:
            self._send(api_key, api_version, body_parts, flexible, False)
            return None
        assert self._loop is not None
        fut: asyncio.Future[Any] = self._loop.create_future()
        self._send(api_key, api_version, body_parts, flexible, True, fut, timeout_ms, decode)
        fut.add_done_callback(_consume_exception)
        return fut

    def send_with_reply(self, api_key: int, api_version: int,
                        body_parts: Sequence[bytes | bytearray | memoryview], *,
                        flexible: bool, decode: Callable[[memoryview], T],
                        reply: Callable[[T | None, BaseException | None], None],
                        timeout_ms: int | None = None) -> None:
        """:meth:`send_raw` of a request that expects a response, without a future:
        ``reply(decode(body), None)`` is called when the response arrives, in the
        same turn of the loop, or ``reply(None, error)`` when the request fails (in a
        later turn when the connection closes or the request times out). The Sender's
        Produce requests take this way: an asyncio future, its done-callback and the
        three calls that read its outcome cost about as much as the rest of the
        answer's handling.

        Raises :class:`KafkaConnectionError` if the connection is closed (and then
        ``reply`` is not called).
        """
        self._send(api_key, api_version, body_parts, flexible, True, None, timeout_ms,
                   decode, reply)

    def _send(self, api_key: int, api_version: int,
              body_parts: Sequence[bytes | bytearray | memoryview], flexible: bool,
              expect_response: bool, fut: asyncio.Future[Any] | None = None,
              timeout_ms: int | None = None,
              decode: Callable[[memoryview], Any] | None = None,
              reply: Callable[[Any, BaseException | None], None] | None = None) -> None:
        """Frame and write one request; with ``expect_response``, register it as
        waiting for its response (``fut`` or ``reply``)."""
        transport = self._transport
        if self._closing or transport is None or transport.is_closing():
            raise KafkaConnectionError(
                f"connection to {self} is closed"
                + (f": {self.close_reason}" if self.close_reason else "")
            )
        cid = self._next_correlation_id
        self._next_correlation_id = (cid + 1) & _MAX_CORRELATION_ID
        head, total = request_head(api_key, api_version, cid, self._client_id_field,
                                   flexible, body_parts)
        if not expect_response:
            transport.write(b"".join((head, *body_parts)))
            return
        if self._fd >= 0 and len(body_parts) < _IOV_MAX \
                and not transport.get_write_buffer_size():
            self._writev(transport, head, body_parts, total)
        else:
            transport.writelines((head, *body_parts))
        loop = self._loop
        assert loop is not None
        timeout = self.request_timeout_ms if timeout_ms is None else timeout_ms
        deadline = loop.time() + timeout / 1000.0
        self._in_flight.append(InFlight(cid, api_key, api_version,
                                        flexible and api_key != API_VERSIONS_KEY, fut,
                                        deadline, timeout, decode, reply))
        if self._timer is None or deadline < self._timer_when:
            self._arm_timer(deadline)

    def _writev(self, transport: asyncio.Transport, head: bytes,
                body_parts: Sequence[bytes | bytearray | memoryview], total: int) -> None:
        """Write a request straight from its parts with one ``writev`` (the batches'
        memory is not copied), and hand what the socket did not take to the transport.

        Only for asyncio's own plain-TCP transport with nothing buffered, so the bytes
        stay in order: its ``writelines`` (Python 3.11) joins the parts into one
        ``bytes``, and a partial send copies the rest twice more, which for requests
        of large records cost more than the records' own encoding. Any error other
        than a full socket buffer goes to the transport with the whole request, which
        meets it again and closes the connection as usual.
        """
        parts = (head, *body_parts)
        try:
            n = os.writev(self._fd, parts)
        except (BlockingIOError, InterruptedError):
            n = 0
        except OSError:
            transport.writelines(parts)
            return
        if n >= total:
            return
        rest: list[bytes | bytearray | memoryview] = []
        for part in parts:
            size = part.nbytes if isinstance(part, memoryview) else len(part)
            if n >= size:
                n -= size
                continue
            rest.append(memoryview(part)[n:] if n else part)
            n = 0
        transport.writelines(rest)

    # -- version negotiation -----------------------------------------------------------

    async def _negotiate_versions(self) -> None:
        version = _API_VERSIONS_MAX
        tried: set[int] = set()
        while True:
            tried.add(version)
            req_type, resp_type = _api_versions_types(version)
            if version >= 3:
                req: RequestPayload = cast("type[_av3_req.ApiVersionsRequest]", req_type)(
                    client_software_name=_SOFTWARE_NAME,
                    client_software_version=_SOFTWARE_VERSION,
                )
            else:
                req = req_type()
            buf = io.BytesIO()
            entity_writer(req_type)(buf, req)
            fut = self.send_raw(API_VERSIONS_KEY, version, (buf.getvalue(),),
                                flexible=req.__flexible__, expect_response=True,
                                decode=functools.partial(_decode_api_versions, version))
            assert fut is not None
            resp = await fut
            code = int(resp.error_code)
            if code == _UNSUPPORTED_VERSION:
                # KIP-511: the broker answers with a v0 body listing its range.
                ranges = {int(k.api_key): (int(k.min_version), int(k.max_version))
                          for k in resp.api_keys}
                lo, hi = ranges.get(API_VERSIONS_KEY, (0, 0))
                retry = min(hi, _API_VERSIONS_MAX)
                if retry < lo or retry in tried:
                    raise UnsupportedVersionError(
                        f"{self} supports ApiVersions v{lo}..v{hi}, aioproducer "
                        f"supports v0..v{_API_VERSIONS_MAX}: no common version"
                    )
                log.debug("%s: ApiVersions v%d unsupported, retrying with v%d",
                          self, version, retry)
                version = retry
                continue
            if code != 0:
                raise for_code(code, f"ApiVersions request to {self} failed")
            self.api_versions = {int(k.api_key): (int(k.min_version), int(k.max_version))
                                 for k in resp.api_keys}
            if version >= 3 and isinstance(resp, resp_type):
                v3 = cast("_av3_resp.ApiVersionsResponse", resp)
                self.finalized_features = {f.name: int(f.max_version_level)
                                           for f in v3.finalized_features}
                self.finalized_features_epoch = int(v3.finalized_features_epoch)
            self._negotiated = True
            log.debug("connected to %s (ApiVersions v%d, %d APIs)", self, version,
                      len(self.api_versions))
            return

    # -- asyncio.Protocol --------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCPTransport implements the interface without subclassing it.
        transport = cast(asyncio.Transport, transport)
        self._transport = transport
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):  # not a TCP socket
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if (_WRITEV and type(transport).__module__ == "asyncio.selector_events"
                    and transport.get_extra_info("sslcontext") is None):
                self._fd = sock.fileno()
        transport.set_write_buffer_limits(high=self.write_buffer_high,
                                          low=self.write_buffer_low)

    def pause_writing(self) -> None:
        self._paused = True
        self.can_write = False

    def resume_writing(self) -> None:
        self._paused = False
        if self._sasl is not None and self._sasl.reauth_due:
            return  # still held for re-authentication
        self.can_write = True
        cb = self.on_writable
        if cb is not None:
            cb()

    # -- for the SASL authenticator ------------------------------------------------------

    def hold_writes(self) -> None:
        """Take no new writes (``can_write`` False) until :meth:`release_writes`; the
        authenticator holds them while re-authenticating."""
        self.can_write = False

    def release_writes(self) -> None:
        """``can_write`` again (unless closed, or the transport's buffer is full), and
        ``on_writable()``."""
        if not self._closing and not self._paused:
            self.can_write = True
            cb = self.on_writable
            if cb is not None:
                cb()

    def eof_received(self) -> bool | None:
        return None  # let the transport close; connection_lost does the rest

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._closing:
            reason = str(exc) if exc is not None else "the broker closed the connection"
            self._shutdown(reason or repr(exc), exc)
        self._transport = None
        self._fd = -1
        self._closed_event.set()

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        n = len(data)
        if n >= 8 and self._frame is None and not self._size_buf \
                and int.from_bytes(data[:4], "big", signed=True) == n - 4 \
                and n - 4 <= self.max_response_bytes:
            # The usual chunk: one whole response, nothing before or after it.
            self._on_frame(memoryview(data)[4:])
            return
        pos = 0
        view: memoryview | None = None
        while pos < n:
            frame = self._frame
            if frame is None:
                # Reading the 4-byte size prefix.
                size_buf = self._size_buf
                if not size_buf and n - pos >= 4:
                    size = int.from_bytes(data[pos:pos + 4], "big", signed=True)
                    pos += 4
                else:
                    take = min(4 - len(size_buf), n - pos)
                    size_buf += data[pos:pos + take]
                    pos += take
                    if len(size_buf) < 4:
                        return
                    size = int.from_bytes(size_buf, "big", signed=True)
                    size_buf.clear()
                if size < 4 or size > self.max_response_bytes:
                    self._protocol_error(
                        f"{self} sent a response frame of {size} bytes "
                        f"(allowed: 4..{self.max_response_bytes})")
                    return
                if n - pos >= size:
                    # The whole frame is in this chunk: hand out a view, no copy.
                    if view is None:
                        view = memoryview(data)
                    self._on_frame(view[pos:pos + size])
                    pos += size
                    if self._closing:
                        return
                    continue
                frame = self._frame = bytearray(size)
                self._frame_pos = 0
            fpos = self._frame_pos
            take = min(len(frame) - fpos, n - pos)
            if view is None:
                view = memoryview(data)
            frame[fpos:fpos + take] = view[pos:pos + take]
            pos += take
            fpos += take
            if fpos < len(frame):
                self._frame_pos = fpos
                return
            self._frame = None
            self._frame_pos = 0
            # Read-only, like the views of ``data`` (kio refuses writable buffers).
            self._on_frame(memoryview(frame).toreadonly())
            if self._closing:
                return

    # -- response handling -------------------------------------------------------------

    def _on_frame(self, frame: memoryview) -> None:
        cid = int.from_bytes(frame[:4], "big", signed=True)
        if not self._in_flight:
            self._protocol_error(
                f"{self} sent a response (correlation id {cid}) with no request in flight")
            return
        head = self._in_flight[0]
        if head.correlation_id != cid:
            self._protocol_error(
                f"{self} sent correlation id {cid} but {api_name(head.api_key)} "
                f"v{head.api_version} with correlation id {head.correlation_id} "
                "was expected")
            return
        offset = 4
        if head.flexible_header and len(frame) > 4 and frame[4] == 0:
            offset = 5  # no tagged fields, the usual case
        elif head.flexible_header:
            try:
                offset = _skip_tagged_fields(frame, offset)
            except ProtocolError as exc:
                self._protocol_error(f"bad response header from {self}: {exc}")
                return
        self._in_flight.popleft()
        # The request timer is left to run out when nothing is in flight (it then
        # stops): cancelling and re-arming it for every request costs more.
        fut = head.future
        decode = head.decode
        if decode is None:
            result: Any = frame[offset:]
        else:
            try:
                result = decode(frame[offset:])
            except Exception as exc:  # not the response: this connection is unusable
                message = (f"malformed {api_name(head.api_key)} v{head.api_version} "
                           f"response from {self}: {exc}")
                log.warning("%s; closing the connection", message)
                error = ProtocolError(message)
                if fut is None:
                    assert head.reply is not None
                    head.reply(None, error)
                elif not fut.done():
                    fut.set_exception(error)
                self._shutdown(f"protocol error: {message}", error)
                return
        if fut is None:
            assert head.reply is not None
            head.reply(result, None)
        elif not fut.done():
            fut.set_result(result)
        sasl = self._sasl
        if sasl is not None and sasl.reauth_due and not self._in_flight:
            sasl.connection_idle()

    def _protocol_error(self, message: str) -> None:
        log.warning("%s; closing the connection", message)
        error = ProtocolError(message)
        head = self._in_flight[0] if self._in_flight else None
        self._shutdown(f"protocol error: {message}", error, special=head, special_error=error)

    # -- timeouts ----------------------------------------------------------------------

    def _arm_timer(self, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        assert self._loop is not None
        self._timer_when = when
        self._timer = self._loop.call_at(when, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if not self._in_flight or self._closing:
            return
        assert self._loop is not None
        now = self._loop.time()
        earliest = min(self._in_flight, key=lambda p: p.deadline)
        if earliest.deadline > now:
            self._arm_timer(earliest.deadline)
            return
        message = (f"{api_name(earliest.api_key)} v{earliest.api_version} request "
                   f"(correlation id {earliest.correlation_id}) to {self} got no response "
                   f"within {earliest.timeout_ms} ms")
        error = RequestTimedOutError(message)
        log.warning("%s; closing the connection", message)
        self._shutdown(f"request timed out: {message}", error, special=earliest,
                       special_error=error)

    # -- closing -----------------------------------------------------------------------

    def close(self, reason: str = "closed by the client",
              cause: BaseException | None = None) -> None:
        """Close now, failing every in-flight request (with ``cause`` as the
        ``__cause__`` of their :class:`KafkaConnectionError`). Idempotent."""
        self._shutdown(reason, cause)

    async def wait_closed(self) -> None:
        """Wait until the transport is fully closed."""
        if self._transport is None:
            return
        await self._closed_event.wait()

    def _shutdown(self, reason: str, cause: BaseException | None, *,
                  special: InFlight | None = None,
                  special_error: BaseException | None = None) -> None:
        if self._closing:
            return
        self._closing = True
        self.close_reason = reason
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._sasl is not None:
            self._sasl.close()  # waiters go on and find the connection closed
        self._frame = None
        self._size_buf.clear()
        pending = list(self._in_flight)
        self._in_flight.clear()
        for p in pending:
            fut = p.future
            if fut is not None and fut.done():
                continue
            if p is special and special_error is not None:
                err: BaseException = special_error
            elif isinstance(cause, ssl.SSLError):
                # E.g. TLS 1.3: the broker refuses our client certificate only after
                # the handshake looked complete to us. Not retriable.
                err = TLSError(f"TLS with {self} failed: {reason}")
            else:
                err = KafkaConnectionError(f"connection to {self} lost: {reason}")
                if cause is not None:
                    err.__cause__ = cause
            if fut is not None:
                fut.set_exception(err)
            elif p.reply is not None and self._loop is not None:
                self._loop.call_soon(p.reply, None, err)
        transport = self._transport
        if transport is not None:
            transport.abort()
        else:
            self._closed_event.set()
        cb = self.on_close
        if cb is not None:
            self.on_close = None
            try:
                cb(self)
            except Exception:  # pragma: no cover - owner's bug; never break closing
                log.exception("on_close callback of %s failed", self)


async def _resolve(loop: asyncio.AbstractEventLoop, host: str, port: int
                   ) -> list[tuple[int, int, int, Any]]:
    """``(family, type, proto, sockaddr)`` of every TCP address of ``host``."""
    for family, addr in ((socket.AF_INET, (host, port)), (socket.AF_INET6, (host, port, 0, 0))):
        try:
            socket.inet_pton(family, host)
        except OSError:
            continue
        return [(family, socket.SOCK_STREAM, socket.IPPROTO_TCP, addr)]  # no lookup
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [(family, kind, proto, addr) for family, kind, proto, _, addr in infos]


async def _connect_socket(loop: asyncio.AbstractEventLoop, host: str, port: int,
                          timeout_s: float, send_buffer_bytes: int,
                          receive_buffer_bytes: int) -> socket.socket:
    """A connected non-blocking TCP socket to the first address of ``host`` that
    accepts within ``timeout_s`` (each address gets its own), with its buffer sizes
    set before it connects, as Java's Selector does."""
    addresses = await _resolve(loop, host, port)
    failures: list[str] = []
    last: BaseException | None = None
    for family, kind, proto, addr in addresses:
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            if send_buffer_bytes >= 0:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer_bytes)
            if receive_buffer_bytes >= 0:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer_bytes)
            await asyncio.wait_for(loop.sock_connect(sock, addr), timeout_s)
        except asyncio.TimeoutError as exc:
            sock.close()
            last = exc
            failures.append(f"{addr[0]}: timed out after {timeout_s * 1000:.0f} ms")
        except OSError as exc:
            sock.close()
            last = exc
            failures.append(f"{addr[0]}: {_os_error_text(exc)}")
        except BaseException:
            sock.close()
            raise
        else:
            return sock
    if len(failures) == 1 and last is not None:
        raise last  # the one address's own error, as create_connection gives it
    raise OSError(f"no address of {host} accepted the connection: " + "; ".join(failures))


def _os_error_text(exc: OSError) -> str:
    if exc.errno:
        return f"{os.strerror(exc.errno)} ({exc})"
    return str(exc) or repr(exc)


def _decode_api_versions(version: int, body: memoryview) -> _ApiVersionsResponse:
    """An ApiVersions response of ``version``, or the v0 body a broker sends with
    UNSUPPORTED_VERSION (KIP-511)."""
    if len(body) >= 2 and int.from_bytes(body[:2], "big", signed=True) == _UNSUPPORTED_VERSION:
        version = 0
    return decode_entity(_api_versions_types(version)[1], body)


def _skip_tagged_fields(buf: memoryview, offset: int) -> int:
    count, offset = read_uvarint(buf, offset)
    for _ in range(count):
        _tag, offset = read_uvarint(buf, offset)
        size, offset = read_uvarint(buf, offset)
        offset += size
        if offset > len(buf):
            raise ProtocolError("tagged field runs past the end of the frame")
    return offset

