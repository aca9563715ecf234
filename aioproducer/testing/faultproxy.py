"""A small fault-injecting, Kafka-aware TCP proxy for tests.

Topology::

    client --> FaultProxy (127.0.0.1:<free port>) --> one real broker

The proxy understands Kafka framing (4-byte big-endian size prefix; requests start
with ``int16 api_key, int16 api_version, int32 correlation_id``, responses with
``int32 correlation_id``) so that faults can be injected at precise points.  Bytes
are otherwise streamed through in chunks: a multi-megabyte Produce request is never
decoded, only its first few bytes are looked at.

Brokers advertise their own address in Metadata (api 3) and DescribeCluster (api 60)
responses, so a client bootstrapped at a proxy would go straight to the broker
afterwards.  :class:`ProxyCluster` therefore starts one :class:`FaultProxy` per
broker node and rewrites those responses (decoded and re-encoded with kio) so that
every advertised ``node_id -> host:port`` becomes ``node_id -> 127.0.0.1:<that
node's proxy port>``.  A node first seen in a later Metadata response gets a proxy
started on demand.  Responses of a version kio does not know pass unchanged and are
counted in ``stats["rewrite_errors"]``.

Usage (both forms close everything, tasks included)::

    async with ProxyCluster.start(kafka_bootstrap) as cluster:   # context manager
        producer = Producer(bootstrap_servers=cluster.bootstrap)
        cluster.proxies[1].drop_after_request(API_PRODUCE)
        ...

    cluster = await ProxyCluster.start(kafka_bootstrap)         # or explicit close
    try:
        ...
    finally:
        await cluster.close()

A single :class:`FaultProxy` can be used on its own (``async with FaultProxy(h, p)
as proxy`` or ``start()``/``close()``); it then does no address rewriting unless
``rewrite_addresses`` is set.

Fault controls (plain methods, callable at any time from the event loop thread):

* ``drop_connections()`` -- close every current client connection (both sides) now.
* ``drop_after_request(api_key, count=1, forward=True)`` -- the next ``count``
  requests with ``api_key`` are forwarded, and when the broker's response to such a
  request arrives the connection is dropped instead of delivering it ("the broker
  wrote the batch but the ack was lost").  Responses to earlier requests on the same
  connection are still delivered.  ``forward=False`` drops the connection before the
  request reaches the broker.  (A Produce with ``acks=0`` has no response: with
  ``forward=True`` the connection is dropped right after forwarding it.)
  ``count=0`` cancels the rule.
* ``delay_responses(api_key, seconds, count=None)`` -- hold each matching response
  (``api_key=None``: every response) for ``seconds`` after it has fully arrived.
  Responses behind it on the same connection wait too (order is preserved).
  ``count`` limits how many responses are delayed; ``seconds <= 0`` or ``count=0``
  cancels the rule.  Rules for a specific api key win over the ``None`` rule.
* ``blackhole(on=True)`` -- nothing is forwarded in either direction; connections
  (old and new) stay open, data read meanwhile is held and flows again after
  ``blackhole(False)`` (like a healed partition: TCP would deliver it too, even a
  request the client already gave up on).  Call ``drop_connections()`` before
  ``blackhole(False)`` to discard what was held instead.  Clients see request timeouts.
* ``refuse_connections(on=True)`` -- new connections are accepted and closed at once.
* ``corrupt_responses(api_key, body, count=1)`` -- the next ``count`` responses to
  ``api_key`` arrive with their body (after the response header) replaced by
  ``body(original_body)``, in a frame of the right size: bytes the real broker never
  sends (truncated, inconsistent, hostile lengths), for the decoders.
* ``clear_faults()`` -- cancel all of the above.

``stats`` (a :class:`ProxyStats` dict) counts ``connections`` (accepted, refused
ones included), ``connections_refused``, ``connections_dropped`` (by a fault),
``requests_by_api`` (a ``Counter`` api_key -> requests received from clients),
``requests_dropped`` (``forward=False``), ``responses_dropped``, ``responses_delayed``,
``responses_rewritten``, ``responses_corrupted`` and ``rewrite_errors``.

Also: ``FaultProxy.wait_for_requests(api_key, count, timeout)``, ``connection_count``,
``ProxyCluster.requests(api_key)`` (summed over proxies), ``proxy_for_node(node_id)``,
cluster-wide ``drop_connections/blackhole/refuse_connections/clear_faults``,
``discover_brokers(bootstrap)`` and ``encode_request(api_key, version, corr, fields)``.

Only asyncio and 127.0.0.1; everything runs on the caller's loop, so blocking clients
(e.g. confluent-kafka) must be driven from another thread (``asyncio.to_thread``).
Not supported: TLS/SASL listeners.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import io
import struct
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Generator
from types import TracebackType
from typing import Any, TypedDict

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

__all__ = [
    "API_API_VERSIONS",
    "API_DESCRIBE_CLUSTER",
    "API_FETCH",
    "API_INIT_PRODUCER_ID",
    "API_METADATA",
    "API_PRODUCE",
    "AddressRewriter",
    "FaultProxy",
    "ProxyCluster",
    "ProxyStats",
    "discover_brokers",
    "encode_request",
]

API_PRODUCE = 0
API_FETCH = 1
API_METADATA = 3
_API_FIND_COORDINATOR = 10
API_API_VERSIONS = 18
API_INIT_PRODUCER_ID = 22
API_DESCRIBE_CLUSTER = 60

_LOCALHOST = "127.0.0.1"
_CHUNK = 256 * 1024
_REQ_HEAD = struct.Struct(">ihhi")  # size, api_key, api_version, correlation_id
_RESP_HEAD = struct.Struct(">ii")  # size, correlation_id
_SIZE = struct.Struct(">i")
_I16 = struct.Struct(">h")

#: ``(node_id, advertised_host, advertised_port) -> (host, port)`` or ``None`` to keep.
AddressRewriter = Callable[[int, str, int], Awaitable[tuple[str, int] | None]]


class ProxyStats(TypedDict):
    connections: int
    connections_refused: int
    connections_dropped: int
    requests_by_api: Counter[int]
    requests_dropped: int
    responses_dropped: int
    responses_delayed: int
    responses_rewritten: int
    responses_corrupted: int
    rewrite_errors: int


def _new_stats() -> ProxyStats:
    return ProxyStats(
        connections=0,
        connections_refused=0,
        connections_dropped=0,
        requests_by_api=Counter(),
        requests_dropped=0,
        responses_dropped=0,
        responses_delayed=0,
        responses_rewritten=0,
        responses_corrupted=0,
        rewrite_errors=0,
    )


@dataclasses.dataclass(slots=True)
class _Pending:
    correlation_id: int
    api_key: int
    api_version: int
    drop: bool


@dataclasses.dataclass(slots=True)
class _DropRule:
    remaining: int
    forward: bool


@dataclasses.dataclass(slots=True)
class _DelayRule:
    seconds: float
    remaining: int | None


@dataclasses.dataclass(slots=True)
class _CorruptRule:
    body: Callable[[bytes], bytes]
    remaining: int


class _ShortBuffer(Exception):
    pass


def _read_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        if pos >= len(buf):
            raise _ShortBuffer
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ValueError("uvarint too long")


def _need(buf: bytes, end: int) -> None:
    if end > len(buf):
        raise _ShortBuffer


def _produce_acks(frame: bytes, version: int) -> int:
    """The ``acks`` of a Produce request; ``frame`` starts at the size prefix.

    Raises :class:`_ShortBuffer` if ``frame`` is too short to tell.
    """
    pos = 12  # size, api_key, api_version, correlation_id
    _need(frame, pos + 2)
    (client_id_len,) = _I16.unpack_from(frame, pos)
    pos += 2 + max(client_id_len, 0)
    flexible = version >= 9
    if flexible:  # request header v2: tagged fields after client_id
        n_tags, pos = _read_uvarint(frame, pos)
        for _ in range(n_tags):
            _, pos = _read_uvarint(frame, pos)
            size, pos = _read_uvarint(frame, pos)
            pos += size
    if version >= 3:  # transactional_id
        if flexible:
            n, pos = _read_uvarint(frame, pos)
            pos += max(n - 1, 0)
        else:
            _need(frame, pos + 2)
            (n,) = _I16.unpack_from(frame, pos)
            pos += 2 + max(n, 0)
    _need(frame, pos + 2)
    return int(_I16.unpack_from(frame, pos)[0])


def _flexible_response_header(entry: _Pending) -> bool:
    """Response header v1 (tagged fields) for flexible versions; ApiVersions never."""
    if entry.api_key == API_API_VERSIONS:
        return False
    try:
        return bool(load_response_schema(entry.api_key, entry.api_version).__flexible__)
    except Exception:  # a version kio does not know: assume the old header
        return False


def _tagged_header_size(buf: bytes, pos: int) -> int:
    start = pos
    count, pos = _read_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = _read_uvarint(buf, pos)
        size, pos = _read_uvarint(buf, pos)
        pos += size
    return pos - start


def _normalise_host(host: str) -> str:
    return _LOCALHOST if host in ("localhost", "::1", "0.0.0.0", "") else host


class _Conn:
    """One proxied client connection and its upstream connection."""

    __slots__ = ("client_reader", "client_writer", "dropped", "pending", "tasks",
                 "upstream_reader", "upstream_writer")

    def __init__(self, client_reader: asyncio.StreamReader,
                 client_writer: asyncio.StreamWriter) -> None:
        self.client_reader = client_reader
        self.client_writer = client_writer
        self.upstream_reader: asyncio.StreamReader | None = None
        self.upstream_writer: asyncio.StreamWriter | None = None
        self.pending: deque[_Pending] = deque()
        self.tasks: list[asyncio.Task[None]] = []
        self.dropped = False

    def pop_pending(self, correlation_id: int) -> _Pending | None:
        if self.pending and self.pending[0].correlation_id == correlation_id:
            return self.pending.popleft()
        for i, p in enumerate(self.pending):  # out of order: should not happen
            if p.correlation_id == correlation_id:
                del self.pending[i]
                return p
        return None

    def shut(self, *, graceful: bool) -> None:
        """Close both sides now and stop the pumps (idempotent)."""
        self.dropped = True
        for w in (self.client_writer, self.upstream_writer):
            if w is not None and not w.transport.is_closing():
                if graceful:
                    w.close()
                else:
                    w.transport.abort()
        current = asyncio.current_task()
        for t in self.tasks:
            if t is not current:
                t.cancel()


async def _close_writer(writer: asyncio.StreamWriter | None) -> None:
    if writer is None:
        return
    if not writer.transport.is_closing():
        writer.close()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(writer.wait_closed(), 1.0)
    # A peer that does not read keeps a graceful close pending: force it.
    writer.transport.abort()


class FaultProxy:
    """A TCP proxy in front of one Kafka broker, with fault injection.

    See the module docstring for the controls and ``stats``.
    """

    def __init__(self, upstream_host: str, upstream_port: int, *,
                 connect_timeout: float = 5.0,
                 rewrite_addresses: AddressRewriter | None = None) -> None:
        self.upstream_host = _normalise_host(upstream_host)
        self.upstream_port = upstream_port
        self.connect_timeout = connect_timeout
        #: Set by :class:`ProxyCluster`: maps advertised broker addresses in
        #: Metadata / DescribeCluster responses.  ``None``: no rewriting.
        self.rewrite_addresses = rewrite_addresses
        self.stats: ProxyStats = _new_stats()
        self._server: asyncio.Server | None = None
        self._port: int | None = None
        self._conns: set[_Conn] = set()
        self._handlers: dict[asyncio.Task[Any], asyncio.StreamWriter] = {}
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._refuse = False
        self._drop_rules: dict[int, _DropRule] = {}
        self._delay_rules: dict[int | None, _DelayRule] = {}
        self._corrupt_rules: dict[int, _CorruptRule] = {}
        self._request_seen = asyncio.Event()
        self._closing = False
        self._closed = asyncio.Event()

    # -- lifecycle ---------------------------------------------------------------

    async def start(self) -> None:
        if self._server is not None:
            return
        if self._closing:
            raise RuntimeError("FaultProxy is closed")
        self._server = await asyncio.start_server(self._on_client, _LOCALHOST, 0)
        self._port = int(self._server.sockets[0].getsockname()[1])

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("FaultProxy not started")
        return self._port

    @property
    def address(self) -> str:
        return f"{_LOCALHOST}:{self.port}"

    @property
    def upstream(self) -> str:
        return f"{self.upstream_host}:{self.upstream_port}"

    async def close(self) -> None:
        """Stop listening, close every connection and await every task; idempotent."""
        if self._closing:
            await self._closed.wait()
            return
        self._closing = True
        try:
            if self._server is not None:
                self._server.close()
            for conn in list(self._conns):
                conn.shut(graceful=False)
            while self._handlers:
                handlers = list(self._handlers)
                for t in handlers:
                    t.cancel()
                await asyncio.gather(*handlers, return_exceptions=True)
                for t in handlers:
                    self._handler_done(t)
            if self._server is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self._server.wait_closed(), 2.0)
        finally:
            self._flowing.set()
            self._closed.set()

    async def __aenter__(self) -> FaultProxy:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.close()

    def __repr__(self) -> str:
        where = self.address if self._port is not None else "unstarted"
        return f"<FaultProxy {where} -> {self.upstream}>"

    # -- fault controls ----------------------------------------------------------

    def drop_connections(self) -> None:
        """Close every current client connection now (client and broker side)."""
        for conn in list(self._conns):
            if not conn.dropped:
                self.stats["connections_dropped"] += 1
                conn.shut(graceful=True)

    def drop_after_request(self, api_key: int, count: int = 1, *,
                           forward: bool = True) -> None:
        """Drop the connection carrying each of the next ``count`` ``api_key`` requests.

        ``forward=True``: the request reaches the broker; its response is discarded
        and the connection dropped when that response arrives.  ``forward=False``:
        the connection is dropped instead of forwarding the request.
        ``count <= 0`` cancels the rule for ``api_key``.
        """
        if count <= 0:
            self._drop_rules.pop(api_key, None)
        else:
            self._drop_rules[api_key] = _DropRule(count, forward)

    def delay_responses(self, api_key: int | None, seconds: float,
                        count: int | None = None) -> None:
        """Hold matching responses ``seconds`` before delivering them.

        ``api_key=None`` matches every response; ``count`` limits how many are
        delayed (``None``: until changed).  ``seconds <= 0`` or ``count == 0``
        cancels the rule for ``api_key``.
        """
        if seconds <= 0 or (count is not None and count <= 0):
            self._delay_rules.pop(api_key, None)
        else:
            self._delay_rules[api_key] = _DelayRule(seconds, count)

    def corrupt_responses(self, api_key: int, body: Callable[[bytes], bytes],
                          count: int = 1) -> None:
        """Replace the body of the next ``count`` ``api_key`` responses with
        ``body(original)`` (the response header and correlation id stay);
        ``count <= 0`` cancels the rule."""
        if count <= 0:
            self._corrupt_rules.pop(api_key, None)
        else:
            self._corrupt_rules[api_key] = _CorruptRule(body, count)

    def _corrupter(self, entry: _Pending | None) -> Callable[[bytes], bytes] | None:
        rule = self._corrupt_rules.get(entry.api_key) if entry is not None else None
        if rule is None:
            return None
        assert entry is not None
        rule.remaining -= 1
        if rule.remaining <= 0:
            del self._corrupt_rules[entry.api_key]
        return rule.body

    def blackhole(self, on: bool = True) -> None:
        """Stop (``on``) or resume forwarding in both directions."""
        if on:
            self._flowing.clear()
        else:
            self._flowing.set()

    def refuse_connections(self, on: bool = True) -> None:
        """Accept and immediately close new connections while ``on``."""
        self._refuse = on

    def clear_faults(self) -> None:
        """Cancel every rule, blackhole and refusal (open connections stay)."""
        self._drop_rules.clear()
        self._delay_rules.clear()
        self._corrupt_rules.clear()
        self._refuse = False
        self._flowing.set()

    @property
    def connection_count(self) -> int:
        """Client connections currently open through this proxy."""
        return len(self._conns)

    async def wait_for_requests(self, api_key: int, count: int = 1,
                                timeout: float = 10.0) -> None:
        """Wait until ``stats['requests_by_api'][api_key] >= count``.

        Raises ``asyncio.TimeoutError`` after ``timeout`` seconds.
        """
        async def seen() -> None:
            while self.stats["requests_by_api"][api_key] < count:
                self._request_seen.clear()
                await self._request_seen.wait()

        await asyncio.wait_for(seen(), timeout)

    # -- plumbing ----------------------------------------------------------------

    def _on_client(self, reader: asyncio.StreamReader,
                   writer: asyncio.StreamWriter) -> None:
        # A plain callback: the connection runs in a task of our own, so that close()
        # can cancel and await it (asyncio would not track a coroutine callback).
        if self._closing:
            writer.transport.abort()
            return
        task = asyncio.get_running_loop().create_task(self._serve(reader, writer))
        self._handlers[task] = writer
        task.add_done_callback(self._handler_done)

    def _handler_done(self, task: asyncio.Task[Any]) -> None:
        writer = self._handlers.pop(task, None)
        if writer is not None and not writer.transport.is_closing():
            writer.transport.abort()  # e.g. cancelled before it ever ran
        if not task.cancelled():
            task.exception()  # a broken connection is not the test's business

    async def _serve(self, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> None:
        self.stats["connections"] += 1
        if self._refuse:
            self.stats["connections_refused"] += 1
            await _close_writer(writer)
            return
        conn = _Conn(reader, writer)
        self._conns.add(conn)
        try:
            try:
                conn.upstream_reader, conn.upstream_writer = await asyncio.wait_for(
                    asyncio.open_connection(self.upstream_host, self.upstream_port),
                    self.connect_timeout)
            except (OSError, asyncio.TimeoutError):
                return
            if conn.dropped:  # dropped while connecting
                return
            conn.tasks = [asyncio.create_task(self._pump_requests(conn)),
                          asyncio.create_task(self._pump_responses(conn))]
            await asyncio.wait(conn.tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._conns.discard(conn)
            conn.shut(graceful=not self._closing)
            if conn.tasks:
                await asyncio.gather(*conn.tasks, return_exceptions=True)
            await _close_writer(conn.upstream_writer)
            await _close_writer(conn.client_writer)

    async def _flow(self) -> None:
        if not self._flowing.is_set():
            await self._flowing.wait()

    def _drop(self, conn: _Conn) -> None:
        if not conn.dropped:
            self.stats["connections_dropped"] += 1
        conn.shut(graceful=True)

    async def _intercept(self, conn: _Conn, head: bytes, api_key: int, api_version: int,
                         corr: int, total: int) -> bytes | None:
        """A subclass's hook, called with the first bytes of each request (``head``, of
        a ``total``-byte frame): return the bytes read so far (at least ``head``) to
        forward the request, or None if it was answered here and must not be
        forwarded. The base class forwards everything."""
        return head

    async def _pump_requests(self, conn: _Conn) -> None:
        reader = conn.client_reader
        writer = conn.upstream_writer
        assert writer is not None
        while True:
            head = await reader.readexactly(_REQ_HEAD.size)
            size, api_key, api_version, corr = _REQ_HEAD.unpack(head)
            if size < 8:
                raise ValueError(f"bad request frame size {size}")
            total = size + 4
            frame = await self._intercept(conn, head, api_key, api_version, corr, total)
            if frame is None:
                continue  # answered here, never forwarded
            expects_response = True
            if api_key == API_PRODUCE:
                want = 256
                while True:
                    if len(frame) < min(want, total):
                        frame += await reader.readexactly(min(want, total) - len(frame))
                    try:
                        expects_response = _produce_acks(frame, api_version) != 0
                        break
                    except _ShortBuffer:
                        if len(frame) >= total or want >= 1 << 17:
                            break
                        want *= 4
                    except ValueError:
                        break
            self.stats["requests_by_api"][api_key] += 1
            self._request_seen.set()

            await self._flow()
            drop_response = False
            rule = self._drop_rules.get(api_key)
            if rule is not None:
                rule.remaining -= 1
                if rule.remaining <= 0:
                    del self._drop_rules[api_key]
                if not rule.forward:
                    self.stats["requests_dropped"] += 1
                    self._drop(conn)
                    return
                drop_response = True
            if expects_response:
                conn.pending.append(_Pending(corr, api_key, api_version, drop_response))

            writer.write(frame)
            remaining = total - len(frame)
            while remaining:
                chunk = await reader.read(min(remaining, _CHUNK))
                if not chunk:
                    raise asyncio.IncompleteReadError(b"", remaining)
                remaining -= len(chunk)
                await self._flow()
                writer.write(chunk)
                await writer.drain()
            await writer.drain()
            if drop_response and not expects_response:
                self.stats["responses_dropped"] += 1  # nothing to drop; the link goes
                self._drop(conn)
                return

    def _delay_for(self, api_key: int | None) -> float:
        rule = self._delay_rules.get(api_key) if api_key is not None else None
        key: int | None = api_key
        if rule is None:
            rule = self._delay_rules.get(None)
            key = None
        if rule is None:
            return 0.0
        if rule.remaining is not None:
            rule.remaining -= 1
            if rule.remaining <= 0:
                del self._delay_rules[key]
        return rule.seconds

    async def _pump_responses(self, conn: _Conn) -> None:
        reader = conn.upstream_reader
        assert reader is not None
        writer = conn.client_writer
        while True:
            head = await reader.readexactly(_RESP_HEAD.size)
            size, corr = _RESP_HEAD.unpack(head)
            if size < 4:
                raise ValueError(f"bad response frame size {size}")
            entry = conn.pop_pending(corr)
            if entry is not None and entry.drop:
                self.stats["responses_dropped"] += 1
                self._drop(conn)
                return
            api_key = entry.api_key if entry is not None else None
            delay = self._delay_for(api_key)
            rewrite = (self.rewrite_addresses is not None and entry is not None
                       and entry.api_key in (API_METADATA, API_DESCRIBE_CLUSTER,
                                             _API_FIND_COORDINATOR))
            corrupt = self._corrupter(entry)
            if delay or rewrite or corrupt:
                payload = head[4:] + await reader.readexactly(size - 4)
                if rewrite:
                    assert entry is not None
                    payload = await self._rewrite(entry, payload)
                if corrupt:
                    assert entry is not None
                    offset = 4 + (_tagged_header_size(payload, 4)
                                  if _flexible_response_header(entry) else 0)
                    payload = payload[:offset] + corrupt(payload[offset:])
                    self.stats["responses_corrupted"] += 1
                if delay:
                    self.stats["responses_delayed"] += 1
                    await asyncio.sleep(delay)
                await self._flow()
                writer.write(_SIZE.pack(len(payload)) + payload)
                await writer.drain()
                continue
            await self._flow()
            writer.write(head)
            remaining = size - 4
            while remaining:
                chunk = await reader.read(min(remaining, _CHUNK))
                if not chunk:
                    raise asyncio.IncompleteReadError(b"", remaining)
                remaining -= len(chunk)
                await self._flow()
                writer.write(chunk)
                await writer.drain()
            await writer.drain()

    async def _rewrite(self, entry: _Pending, payload: bytes) -> bytes:
        """Rewrite broker addresses in a Metadata / DescribeCluster / FindCoordinator
        response payload."""
        rewrite = self.rewrite_addresses
        assert rewrite is not None
        try:
            schema: Any = load_response_schema(entry.api_key, entry.api_version)
            header_schema: Any = schema.__header_schema__
            # kio readers return (value, number of bytes consumed).
            header, offset = entity_reader(header_schema)(payload, 0)
            response, size = entity_reader(schema)(payload, offset)
            if offset + size != len(payload):
                raise ValueError("trailing bytes after response")
        except Exception:
            self.stats["rewrite_errors"] += 1
            return payload
        if entry.api_key == _API_FIND_COORDINATOR:
            return await self._rewrite_coordinators(header_schema, header, schema, response,
                                                    payload)
        if entry.api_key == API_DESCRIBE_CLUSTER:
            if getattr(response, "endpoint_type", 1) != 1:  # controllers: leave alone
                return payload
            id_field = "broker_id"
        else:
            id_field = "node_id"
        brokers = []
        changed = False
        for b in response.brokers:
            new = await rewrite(int(getattr(b, id_field)), str(b.host), int(b.port))
            if new is not None and (new[0], new[1]) != (b.host, b.port):
                b = dataclasses.replace(b, host=new[0], port=i32(new[1]))
                changed = True
            brokers.append(b)
        if not changed:
            return payload
        response = dataclasses.replace(response, brokers=tuple(brokers))
        buf = io.BytesIO()
        entity_writer(header_schema)(buf, header)
        entity_writer(schema)(buf, response)
        self.stats["responses_rewritten"] += 1
        return buf.getvalue()


    async def _rewrite_coordinators(self, header_schema: Any, header: Any, schema: Any,
                                    response: Any, payload: bytes) -> bytes:
        """A FindCoordinator answer names the coordinator's address too (transactional
        producers connect to it): rewrite it like Metadata's brokers."""
        rewrite = self.rewrite_addresses
        assert rewrite is not None
        changed = False
        if hasattr(response, "coordinators"):  # v4+
            coordinators = []
            for c in response.coordinators:
                new = await rewrite(int(c.node_id), str(c.host), int(c.port)) \
                    if int(c.node_id) >= 0 else None
                if new is not None and (new[0], new[1]) != (c.host, c.port):
                    c = dataclasses.replace(c, host=new[0], port=i32(new[1]))
                    changed = True
                coordinators.append(c)
            response = dataclasses.replace(response, coordinators=tuple(coordinators))
        elif int(response.node_id) >= 0:
            new = await rewrite(int(response.node_id), str(response.host), int(response.port))
            if new is not None and (new[0], new[1]) != (response.host, response.port):
                response = dataclasses.replace(response, host=new[0], port=i32(new[1]))
                changed = True
        if not changed:
            return payload
        buf = io.BytesIO()
        entity_writer(header_schema)(buf, header)
        entity_writer(schema)(buf, response)
        self.stats["responses_rewritten"] += 1
        return buf.getvalue()


# -- discovery ---------------------------------------------------------------------


def _split_hostport(item: str) -> tuple[str, int]:
    host, _, port = item.strip().rpartition(":")
    return _normalise_host(host.strip("[]")), int(port)


def encode_request(api_key: int, version: int, corr: int, body: dict[str, Any]) -> bytes:
    schema: Any = load_request_schema(api_key, version)
    names = {f.name for f in dataclasses.fields(schema)}
    request = schema(**{k: v for k, v in body.items() if k in names})
    header_schema: Any = schema.__header_schema__
    header_names = {f.name for f in dataclasses.fields(header_schema)}
    header_args: dict[str, Any] = {"request_api_key": i16(api_key),
                                   "request_api_version": i16(version),
                                   "correlation_id": i32(corr),
                                   "client_id": "faultproxy"}
    header = header_schema(**{k: v for k, v in header_args.items() if k in header_names})
    buf = io.BytesIO()
    entity_writer(header_schema)(buf, header)
    entity_writer(schema)(buf, request)
    data = buf.getvalue()
    return _SIZE.pack(len(data)) + data


async def _roundtrip(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     api_key: int, version: int, corr: int, body: dict[str, Any]) -> Any:
    writer.write(encode_request(api_key, version, corr, body))
    await writer.drain()
    (size,) = _SIZE.unpack(await reader.readexactly(4))
    payload = await reader.readexactly(size)
    schema: Any = load_response_schema(api_key, version)
    header, offset = entity_reader(schema.__header_schema__)(payload, 0)
    if header.correlation_id != corr:
        raise RuntimeError("correlation id mismatch")
    response, _ = entity_reader(schema)(payload, offset)
    return response


async def discover_brokers(bootstrap: str,
                           timeout: float = 10.0) -> dict[int, tuple[str, int]]:
    """Ask the first reachable bootstrap server for ``{node_id: (host, port)}``."""
    return await asyncio.wait_for(_discover(bootstrap), timeout)


async def _discover(bootstrap: str) -> dict[int, tuple[str, int]]:
    last: Exception | None = None
    for item in bootstrap.split(","):
        host, port = _split_hostport(item)
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 5)
        except (OSError, asyncio.TimeoutError) as e:
            last = e
            continue
        try:
            versions = await _roundtrip(reader, writer, API_API_VERSIONS, 0, 1, {})
            meta = next((v for v in versions.api_keys if v.api_key == API_METADATA), None)
            if meta is None:
                raise RuntimeError("broker does not support Metadata")
            version = min(int(meta.max_version), 12)
            if version < int(meta.min_version):
                raise RuntimeError("no common Metadata version")
            response = await _roundtrip(
                reader, writer, API_METADATA, version, 2,
                {"topics": (), "allow_auto_topic_creation": False,
                 "include_cluster_authorized_operations": False,
                 "include_topic_authorized_operations": False})
            return {int(b.node_id): (str(b.host), int(b.port)) for b in response.brokers}
        except (OSError, asyncio.IncompleteReadError) as e:
            last = e
        finally:
            await _close_writer(writer)
    raise ConnectionError(f"no bootstrap server of {bootstrap!r} answered: {last!r}")


# -- cluster -------------------------------------------------------------------------


class ProxyCluster:
    """One :class:`FaultProxy` per broker node, with address rewriting installed.

    Create with ``await ProxyCluster.start(bootstrap)`` or
    ``async with ProxyCluster.start(bootstrap) as cluster``.
    """

    def __init__(self) -> None:
        self.proxies: dict[int, FaultProxy] = {}
        self._lock = asyncio.Lock()
        self._closed = False

    @classmethod
    def start(cls, bootstrap: str, *, timeout: float = 10.0) -> _ClusterStart:
        """Discover the brokers behind ``bootstrap`` and start a proxy for each."""
        return _ClusterStart(cls._start(bootstrap, timeout))

    @classmethod
    async def _start(cls, bootstrap: str, timeout: float) -> ProxyCluster:
        cluster = cls()
        try:
            brokers = await discover_brokers(bootstrap, timeout)
            if not brokers:
                raise RuntimeError("cluster reported no brokers")
            for node_id, (host, port) in sorted(brokers.items()):
                await cluster._add(node_id, host, port)
        except BaseException:
            await cluster.close()
            raise
        return cluster

    async def _add(self, node_id: int, host: str, port: int) -> FaultProxy:
        proxy = FaultProxy(host, port, rewrite_addresses=self._rewrite)
        self.proxies[node_id] = proxy
        await proxy.start()
        return proxy

    async def _rewrite(self, node_id: int, host: str, port: int) -> tuple[str, int] | None:
        proxy = self.proxies.get(node_id)
        if proxy is None:
            if self._closed:
                return None
            async with self._lock:
                proxy = self.proxies.get(node_id)
                if proxy is None:
                    proxy = await self._add(node_id, host, port)
        return (_LOCALHOST, proxy.port)

    @property
    def bootstrap(self) -> str:
        return ",".join(p.address for _, p in sorted(self.proxies.items()))

    def proxy_for_port(self, broker_port: int) -> FaultProxy:
        """The proxy in front of the broker listening on ``broker_port``."""
        for proxy in self.proxies.values():
            if proxy.upstream_port == broker_port:
                return proxy
        raise KeyError(broker_port)

    def proxy_for_node(self, node_id: int) -> FaultProxy:
        return self.proxies[node_id]

    def requests(self, api_key: int) -> int:
        """Requests with ``api_key`` received by all proxies together."""
        return sum(p.stats["requests_by_api"][api_key] for p in self.proxies.values())

    def drop_connections(self) -> None:
        for p in self.proxies.values():
            p.drop_connections()

    def blackhole(self, on: bool = True) -> None:
        for p in self.proxies.values():
            p.blackhole(on)

    def refuse_connections(self, on: bool = True) -> None:
        for p in self.proxies.values():
            p.refuse_connections(on)

    def clear_faults(self) -> None:
        for p in self.proxies.values():
            p.clear_faults()

    async def close(self) -> None:
        """Close every proxy (idempotent)."""
        self._closed = True
        while True:
            open_ = [p for p in self.proxies.values() if not p._closed.is_set()]
            if not open_:
                return
            await asyncio.gather(*(p.close() for p in open_), return_exceptions=True)

    async def __aenter__(self) -> ProxyCluster:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.close()


class _ClusterStart:
    """What :meth:`ProxyCluster.start` returns: await it, or ``async with`` it."""

    def __init__(self, coro: Awaitable[ProxyCluster]) -> None:
        self._coro = coro
        self._cluster: ProxyCluster | None = None

    def __await__(self) -> Generator[Any, None, ProxyCluster]:
        return self._coro.__await__()

    async def __aenter__(self) -> ProxyCluster:
        self._cluster = await self._coro
        return self._cluster

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._cluster is not None:
            await self._cluster.close()
