"""The producer's view of the cluster's network: one connection per broker.

:class:`KafkaClient` keeps the node-id → address map from the latest metadata,
opens connections in the background (``ready()``, with exponential reconnect
backoff and jitter, like Java's ``NetworkClient``), and runs the control-plane
requests the producer needs: Metadata, and DescribeConfigs for a topic's
``max.message.bytes``. Produce requests are written by the Sender directly on the
connections; topic administration (CreateTopics/DeleteTopics) is in
:mod:`.admin`, and :meth:`KafkaClient.on_any_node` runs such one-off requests.

Before the first metadata, the bootstrap servers stand in as nodes with the
negative ids ``-1, -2, ...`` (in the order given). When metadata arrives
(:meth:`KafkaClient.update_nodes`), a bootstrap connection whose address is a
real broker's is kept under that broker's id; the others are closed.

The client never touches an event loop before one of its coroutines (or
:meth:`ready`) runs inside it, so it can be constructed anywhere.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import socket
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeAlias, TypeVar, cast

from kio.static.primitive import i8

from ..backoff import ExponentialBackoff
from ..errors import (
    AuthenticationError,
    ConfigError,
    IllegalStateError,
    KafkaConnectionError,
    KafkaError,
    ProtocolError,
    RequestTimedOutError,
    TLSError,
    for_code,
)
from .apis import PRODUCE_MAX_VERSION, PRODUCE_MIN_VERSION, ApiKey
from .connection import BrokerConnection
from .protocol import build_entity, request_module, response_type, response_union
from .security import Security

if TYPE_CHECKING:
    # Only for the annotations: at run time the negotiated version's module is
    # imported when it is first used (response_type()).
    import kio.schema.metadata.v1.response as _m1
    import kio.schema.metadata.v2.response as _m2
    import kio.schema.metadata.v3.response as _m3
    import kio.schema.metadata.v4.response as _m4
    import kio.schema.metadata.v5.response as _m5
    import kio.schema.metadata.v6.response as _m6
    import kio.schema.metadata.v7.response as _m7
    import kio.schema.metadata.v8.response as _m8
    import kio.schema.metadata.v9.response as _m9
    import kio.schema.metadata.v10.response as _m10
    import kio.schema.metadata.v11.response as _m11
    import kio.schema.metadata.v12.response as _m12
    import kio.schema.metadata.v13.response as _m13

__all__ = ["KafkaClient", "MetadataResponse", "parse_bootstrap_servers"]

log = logging.getLogger("aioproducer.net")

T = TypeVar("T")

if TYPE_CHECKING:
    MetadataResponse: TypeAlias = (
        _m1.MetadataResponse | _m2.MetadataResponse | _m3.MetadataResponse
        | _m4.MetadataResponse | _m5.MetadataResponse | _m6.MetadataResponse
        | _m7.MetadataResponse | _m8.MetadataResponse | _m9.MetadataResponse
        | _m10.MetadataResponse | _m11.MetadataResponse | _m12.MetadataResponse
        | _m13.MetadataResponse
    )
    """kio ``MetadataResponse`` v1..v13 (in practice v12 or v13 against any broker
    aioproducer can produce to: Produce v9+ means Kafka 2.8+, which has Metadata v11+).
    Fields used by callers exist in every one: ``brokers[].node_id/host/port``,
    ``topics[].name/error_code/partitions[].partition_index/leader_id``; v7+ add
    ``leader_epoch``, v10+ ``topic_id``, v13 a top-level ``error_code``
    (REBOOTSTRAP_REQUIRED, KIP-1102)."""
else:

    def __getattr__(name: str) -> Any:
        # MetadataResponse at run time (aioproducer only annotates with it): the union
        # of every version's class, which imports the kio modules of all of them, so
        # only when somebody asks.
        if name == "MetadataResponse":
            lo, hi = _METADATA_VERSIONS
            union = response_union(METADATA_KEY, range(lo, hi + 1), name)
            globals()[name] = union
            return union
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


METADATA_KEY: Final = int(ApiKey.METADATA)
DESCRIBE_CONFIGS_KEY: Final = int(ApiKey.DESCRIBE_CONFIGS)
_DESCRIBE_CONFIGS_VERSIONS: Final = (1, 4)
_TOPIC_RESOURCE: Final = 2
_METADATA_VERSIONS: Final = (1, 13)
_REBOOTSTRAP_REQUIRED: Final = 129
_JITTER: Final = 0.2


def parse_bootstrap_servers(servers: str | Sequence[str]) -> list[tuple[str, int]]:
    """``"h1:9092,h2:9092"`` (or a list of such strings) → ``[(host, port), ...]``.

    IPv6 literals are written in brackets: ``"[::1]:9092"``. Raises
    :class:`ConfigError` (a ``ValueError``) naming the bad entry.
    """
    items = [servers] if isinstance(servers, str) else list(servers)
    out: list[tuple[str, int]] = []
    for item in items:
        if not isinstance(item, str):
            raise ConfigError(f"bootstrap_servers entries must be strings, got {item!r}")
        for raw in item.split(","):
            entry = raw.strip()
            if not entry:
                continue
            out.append(_parse_address(entry))
    if not out:
        raise ConfigError("bootstrap_servers is empty; give at least one 'host:port'")
    return out


def _parse_address(entry: str) -> tuple[str, int]:
    if entry.startswith("["):
        host, sep, rest = entry[1:].partition("]")
        if not sep or not rest.startswith(":"):
            raise ConfigError(f"bad bootstrap server {entry!r}: expected '[ipv6]:port'")
        port_text = rest[1:]
    else:
        host, sep, port_text = entry.rpartition(":")
        if not sep:
            raise ConfigError(f"bad bootstrap server {entry!r}: expected 'host:port'")
        if ":" in host:
            raise ConfigError(
                f"bad bootstrap server {entry!r}: write IPv6 addresses as '[addr]:port'")
    if not host:
        raise ConfigError(f"bad bootstrap server {entry!r}: the host is empty")
    try:
        port = int(port_text)
    except ValueError:
        raise ConfigError(
            f"bad bootstrap server {entry!r}: port {port_text!r} is not a number") from None
    if not 0 < port < 65536:
        raise ConfigError(f"bad bootstrap server {entry!r}: port {port} is out of range")
    return host, port


@dataclasses.dataclass(slots=True)
class _NodeState:
    failures: int = 0
    next_attempt: float = 0.0
    """``time.monotonic()`` before which no new connection attempt is made."""
    last_error: BaseException | None = None
    task: asyncio.Task[None] | None = None
    throttle_until: float = 0.0
    """KIP-219: ``time.monotonic()`` before which nothing is sent to the node."""


class KafkaClient:
    """Connections to the brokers of one cluster, for one producer."""

    def __init__(self, bootstrap_servers: str | Sequence[str], *,
                 client_id: str = "aioproducer", request_timeout_ms: int = 30000,
                 connect_timeout_ms: int = 10000, reconnect_backoff_ms: int = 50,
                 reconnect_backoff_max_ms: int = 1000,
                 max_response_bytes: int = 100 * 1024 * 1024,
                 security: Security | None = None,
                 metadata_recovery_strategy: str = "rebootstrap",
                 metadata_recovery_rebootstrap_trigger_ms: int = 300000,
                 connect_timeout_max_ms: int | None = None,
                 connections_max_idle_ms: int = -1,
                 send_buffer_bytes: int = -1, receive_buffer_bytes: int = -1,
                 client_dns_lookup: str = "use_all_dns_ips") -> None:
        if metadata_recovery_strategy not in ("rebootstrap", "none"):
            raise ConfigError("metadata_recovery_strategy must be 'rebootstrap' or 'none', "
                              f"got {metadata_recovery_strategy!r}")
        self.security = security
        self.metadata_recovery_strategy = metadata_recovery_strategy
        # socket.connection.setup.timeout.ms doubling per failed attempt (+-20% jitter)
        # up to .max.ms, as Java's ClusterConnectionStates.
        self._setup_timeout = ExponentialBackoff(
            connect_timeout_ms, max(connect_timeout_ms, connect_timeout_max_ms or 0))
        self.connections_max_idle_ms = connections_max_idle_ms
        self.send_buffer_bytes = send_buffer_bytes
        self.receive_buffer_bytes = receive_buffer_bytes
        self.client_dns_lookup = client_dns_lookup
        self._canonical_done = client_dns_lookup != "resolve_canonical_bootstrap_servers_only"
        self._idle_timer: asyncio.TimerHandle | None = None
        self._idle_marks: dict[BrokerConnection, tuple[int, float]] = {}
        self.rebootstrap_trigger_s = metadata_recovery_rebootstrap_trigger_ms / 1000.0
        self.rebootstraps = 0
        """How many times the client went back to the bootstrap servers."""
        self._unreachable_since: float | None = None
        self.max_response_bytes = max_response_bytes
        self.bootstrap_servers = parse_bootstrap_servers(bootstrap_servers)
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.connect_timeout_ms = connect_timeout_ms
        self.reconnect_backoff_ms = reconnect_backoff_ms
        self.reconnect_backoff_max_ms = max(reconnect_backoff_max_ms, reconnect_backoff_ms)
        self.on_ready_change: Callable[[], None] | None = None
        """Called when a connection finishes connecting (or fails to), or is lost."""
        self.on_disconnect: Callable[[int], None] | None = None
        """Called with the node id when connecting to a node fails or its connection is
        lost (not closed by us): the metadata may be stale (Java requests an update)."""
        self._bootstrap_nodes: dict[int, tuple[str, int]] = {
            -1 - i: addr for i, addr in enumerate(self.bootstrap_servers)
        }
        self._nodes: dict[int, tuple[str, int]] = dict(self._bootstrap_nodes)
        self._conns: dict[int, BrokerConnection] = {}
        self._states: dict[int, _NodeState] = {}
        self._closing: set[BrokerConnection] = set()
        self._bootstrap_next = 0
        self._closed = False

    def __repr__(self) -> str:
        return (f"<KafkaClient nodes={sorted(self._nodes)} "
                f"connected={sorted(self._conns)}>")

    # -- node map ----------------------------------------------------------------------

    @property
    def nodes(self) -> dict[int, tuple[str, int]]:
        """The current node-id → ``(host, port)`` map (bootstrap pseudo-nodes at first)."""
        return dict(self._nodes)

    def update_nodes(self, nodes: Mapping[int, tuple[str, int]]) -> None:
        """Replace the node map with the brokers of the latest metadata.

        Connections to nodes that left (or moved) are closed; a bootstrap
        connection to a real broker's address is kept under the broker's id. An
        empty map is ignored (a cluster never has no brokers).
        """
        if not nodes or self._closed:
            return
        new = {int(n): (str(h), int(p)) for n, (h, p) in nodes.items()}
        by_addr = {addr: nid for nid, addr in new.items()}
        for nid, conn in list(self._conns.items()):
            if nid >= 0:
                continue
            real = by_addr.get((conn.host, conn.port))
            if real is not None and real not in self._conns and conn.is_connected:
                del self._conns[nid]
                self._conns[real] = conn
                conn.node_id = real
                conn.on_close = self._make_on_close(real)
                conn.on_throttle = self._make_on_throttle(real)
                self._state(real).failures = 0
        for nid, conn in list(self._conns.items()):
            if new.get(nid) != (conn.host, conn.port):
                log.debug("closing the connection to %s: no longer in the metadata", conn)
                self._close_conn(conn, "the broker left the cluster metadata")
        for nid, st in list(self._states.items()):
            if nid not in new:
                if st.task is not None:
                    st.task.cancel()
                else:
                    del self._states[nid]
        self._nodes = new

    # -- connections -------------------------------------------------------------------

    def connection(self, node_id: int) -> BrokerConnection | None:
        """The live connection to ``node_id``, or None."""
        conn = self._conns.get(node_id)
        if conn is not None and conn.is_connected:
            return conn
        return None

    def check_produce_versions(self) -> None:
        """Raise :class:`UnsupportedVersionError` (with the reason) if a connected
        broker takes no Produce version the producer frames (v9 to v13: Kafka 2.4 or
        newer); called once the producer has bootstrapped, instead of failing every
        record later."""
        for conn in self.connections():
            conn.version_for(ApiKey.PRODUCE, PRODUCE_MIN_VERSION, PRODUCE_MAX_VERSION)

    def connections(self) -> list[BrokerConnection]:
        """Every live connection."""
        return [c for c in self._conns.values() if c.is_connected]

    def in_flight_total(self) -> int:
        """Requests in flight on all connections."""
        return sum(c.in_flight for c in self._conns.values())

    def in_flight(self, node_id: int) -> int:
        """Requests in flight on the connection to ``node_id`` (0 if not connected)."""
        conn = self._conns.get(node_id)
        return conn.in_flight if conn is not None else 0

    def is_connecting(self, node_id: int) -> bool:
        st = self._states.get(node_id)
        return st is not None and st.task is not None

    def backoff_remaining(self, node_id: int) -> float:
        """Seconds until a new connection attempt to ``node_id`` is allowed (0 if now)."""
        st = self._states.get(node_id)
        if st is None:
            return 0.0
        return max(0.0, st.next_attempt - time.monotonic())

    def ready(self, node_id: int) -> bool:
        """True if a connection to ``node_id`` is up; otherwise start one (unless in
        reconnect backoff or already connecting) and return False.

        Must be called from inside the event loop.
        """
        return self.ready_connection(node_id) is not None

    def ready_connection(self, node_id: int) -> BrokerConnection | None:
        """:meth:`ready`, giving the connection: the live connection to ``node_id``
        unless the broker throttles it (KIP-219); else None, and a connection is
        started if there is none (unless in reconnect backoff or already connecting).

        Must be called from inside the event loop.
        """
        conn = self._conns.get(node_id)
        if conn is not None and conn.is_connected:
            st = self._states.get(node_id)
            return conn if st is None or st.throttle_until <= time.monotonic() else None
        if not self._closed:
            self._start_connect(node_id)
        return None

    # -- quotas (KIP-219) ----------------------------------------------------------------

    def throttle(self, node_id: int, throttle_ms: float) -> None:
        """A response from ``node_id`` said the broker throttled us for
        ``throttle_ms``: :meth:`ready` is False for the node until then (Java mutes the
        node the same way), and ``on_ready_change`` is called when the time is over."""
        if throttle_ms <= 0 or self._closed:
            return
        st = self._state(node_id)
        until = time.monotonic() + throttle_ms / 1000.0
        if until <= st.throttle_until:
            return
        st.throttle_until = until
        log.debug("%s throttled us for %.0f ms", self._describe(node_id), throttle_ms)
        asyncio.get_running_loop().call_later(throttle_ms / 1000.0, self._notify)

    def _make_on_throttle(self, node_id: int) -> Callable[[float], None]:
        def on_throttle(throttle_ms: float) -> None:
            self.throttle(node_id, throttle_ms)
        return on_throttle

    def throttle_remaining(self, node_id: int) -> float:
        """Seconds until ``node_id`` may be sent to again after a throttle (0 if now)."""
        st = self._states.get(node_id)
        if st is None:
            return 0.0
        return max(0.0, st.throttle_until - time.monotonic())

    # -- leader hints (KIP-951) and rebootstrap (KIP-899, KIP-1102) ------------------------

    def add_nodes(self, nodes: Mapping[int, tuple[str, int]]) -> None:
        """Add nodes (or new addresses of known nodes) to the node map, e.g. the
        leader endpoints of a Produce response, without waiting for metadata."""
        if self._closed:
            return
        for nid, (host, port) in nodes.items():
            addr = (str(host), int(port))
            if self._nodes.get(nid) == addr:
                continue
            conn = self._conns.get(nid)
            if conn is not None and (conn.host, conn.port) != addr:
                del self._conns[nid]
                self._close_conn(conn, "the node moved to a new address")
            self._nodes[int(nid)] = addr

    def rebootstrap(self, reason: str) -> None:
        """Forget the brokers of the metadata and go back to ``bootstrap_servers``
        (host names are resolved again at each connection attempt). Connections to
        known brokers stay until the next metadata replaces the node map."""
        self.rebootstraps += 1
        log.warning("rebootstrapping from %s: %s", ", ".join(
            f"{h}:{p}" for h, p in self.bootstrap_servers), reason)
        self._nodes = dict(self._bootstrap_nodes)
        for nid in self._bootstrap_nodes:
            st = self._states.get(nid)
            if st is not None:
                st.failures = 0
                st.next_attempt = 0.0
        self._bootstrap_next = 0
        self._unreachable_since = None

    def check_rebootstrap_required(self, response: Any) -> None:
        """Raise :class:`KafkaConnectionError` if ``response`` carries the top-level
        REBOOTSTRAP_REQUIRED error code (KIP-1102), after rebootstrapping unless the
        strategy is ``"none"``."""
        if int(getattr(response, "error_code", 0) or 0) != _REBOOTSTRAP_REQUIRED:
            return
        if self.metadata_recovery_strategy == "rebootstrap":
            self.rebootstrap("a broker answered REBOOTSTRAP_REQUIRED")
        raise KafkaConnectionError("the broker answered REBOOTSTRAP_REQUIRED")

    def _maybe_rebootstrap(self, now: float) -> None:
        since = self._unreachable_since
        if since is None or self.metadata_recovery_strategy != "rebootstrap":
            return
        if now - since >= self.rebootstrap_trigger_s and not all(
                nid < 0 for nid in self._nodes):
            self.rebootstrap(f"no known broker answered for {now - since:.3g} s "
                             f"(metadata_recovery_rebootstrap_trigger_ms="
                             f"{self.rebootstrap_trigger_s * 1000:.0f})")

    async def connect(self, node_id: int, timeout_s: float) -> BrokerConnection:
        """The connection to ``node_id``, connecting (once) if needed.

        Waits out the node's reconnect backoff first. Raises
        :class:`KafkaConnectionError` when the attempt fails or ``timeout_s`` runs out.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        attempted = False
        while True:
            conn = self.connection(node_id)
            if conn is not None:
                return conn
            self._check_open()
            if self._address(node_id) is None:
                raise KafkaConnectionError(
                    f"unknown node {node_id}: not in the cluster metadata")
            st = self._state(node_id)
            if attempted:
                err = st.last_error
                if isinstance(err, (KafkaConnectionError, AuthenticationError, TLSError)):
                    raise err
                raise KafkaConnectionError(
                    f"cannot connect to {self._describe(node_id)}: "
                    f"{err or 'the attempt was cancelled'}") from err
            remaining = deadline - loop.time()
            task = self._start_connect(node_id)
            if task is None:
                wait = self.backoff_remaining(node_id)
                if wait >= remaining:
                    raise KafkaConnectionError(
                        f"cannot connect to {self._describe(node_id)} within "
                        f"{timeout_s:.3g} s: in reconnect backoff for {wait:.3g} s after: "
                        f"{st.last_error}")
                await asyncio.sleep(wait + 0.001)
                continue
            await asyncio.wait((task,), timeout=max(0.0, remaining))
            if not task.done():
                raise KafkaConnectionError(
                    f"cannot connect to {self._describe(node_id)}: timed out after "
                    f"{timeout_s:.3g} s")
            attempted = True

    def security_error(self, node_id: int) -> KafkaError | None:
        """The authentication or TLS error of the last attempt to reach ``node_id``."""
        st = self._states.get(node_id)
        err = st.last_error if st is not None else None
        return err if isinstance(err, (AuthenticationError, TLSError)) else None

    def least_loaded_node(self) -> int | None:
        """The connected node with the fewest in-flight requests; else a node being
        connected; else one not in reconnect backoff; else None."""
        ids = list(self._nodes)
        if not ids:
            return None
        start = random.randrange(len(ids))
        ids = ids[start:] + ids[:start]
        best: int | None = None
        best_load = 0
        for nid in ids:
            conn = self.connection(nid)
            if conn is not None and (best is None or conn.in_flight < best_load):
                best, best_load = nid, conn.in_flight
                if best_load == 0:
                    break
        if best is not None:
            return best
        for nid in ids:
            if self.is_connecting(nid):
                return nid
        now = time.monotonic()
        for nid in ids:
            st = self._states.get(nid)
            if st is None or st.next_attempt <= now:
                return nid
        return None

    # -- metadata ----------------------------------------------------------------------

    async def bootstrap(self, timeout_s: float, *,
                        topics: Sequence[str] | None = ()) -> MetadataResponse:
        """Connect to a bootstrap server and fetch metadata (for no topics by default).

        The servers are tried in turn (round-robin, each respecting its reconnect
        backoff) until one connects and answers. The node map is updated from the
        response. Raises :class:`KafkaConnectionError` listing each server and its
        last error if none answered within ``timeout_s``.
        """
        self._check_open()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        if not self._canonical_done:
            await self._canonicalise_bootstrap()
        errors: dict[int, BaseException] = {}
        ids = list(self._bootstrap_nodes)
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            node = self._next_bootstrap(ids)
            if node is None:
                wait = min(self.backoff_remaining(n) for n in ids)
                await asyncio.sleep(min(max(wait, 0.001), remaining))
                continue
            try:
                response = await self._with_timeout(self._metadata_from(node, topics, remaining),
                                                    remaining)
            except (KafkaConnectionError, RequestTimedOutError, ProtocolError) as exc:
                errors[node] = exc
                log.debug("bootstrap via %s failed: %s", self._describe(node), exc)
                continue
            self.update_nodes({int(b.node_id): (str(b.host), int(b.port))
                               for b in response.brokers})
            return response
        details = "; ".join(
            f"{host}:{port}: {errors.get(nid) or self._last_error_text(nid)}"
            for nid, (host, port) in self._bootstrap_nodes.items()
        )
        raise KafkaConnectionError(
            f"could not bootstrap from any of {len(ids)} server(s) within "
            f"{timeout_s:.3g} s: {details}")

    async def fetch_metadata(self, topics: Sequence[str] | None, *,
                             timeout_s: float | None = None,
                             on_error: Callable[[BaseException], None] | None = None,
                             allow_auto_topic_creation: bool = False,
                             ) -> MetadataResponse:
        """Metadata for ``topics`` (None: all topics) from the least-loaded node.

        Creates no topics unless ``allow_auto_topic_creation`` (the producer's
        refreshes set it, as Java's do: brokers with ``auto.create.topics.enable``
        then create the topics asked for). Nodes that fail are put in backoff and
        the next one is tried until ``timeout_s`` (default: ``request_timeout_ms``)
        runs out; ``on_error`` hears of each failed attempt.
        The caller applies :meth:`update_nodes`.
        """
        timeout = self.request_timeout_ms / 1000.0 if timeout_s is None else timeout_s

        async def op(node: int, remaining: float) -> MetadataResponse:
            return await self._metadata_from(
                node, topics, remaining, allow_auto_topic_creation=allow_auto_topic_creation)

        return await self.on_any_node(op, timeout, "fetch metadata", on_error=on_error)

    async def _metadata_from(self, node: int, topics: Sequence[str] | None,
                             timeout_s: float, *,
                             allow_auto_topic_creation: bool = False) -> MetadataResponse:
        conn = await self.connect(node, timeout_s)
        version = conn.version_for(METADATA_KEY, *_METADATA_VERSIONS)
        mod = request_module(METADATA_KEY, version)
        topic_list: tuple[Any, ...] | None = None
        if topics is not None:
            topic_list = tuple(build_entity(mod.MetadataRequestTopic, name=t, topic_id=None)
                               for t in topics)
        req = build_entity(mod.MetadataRequest, topics=topic_list,
                           allow_auto_topic_creation=allow_auto_topic_creation,
                           include_cluster_authorized_operations=False,
                           include_topic_authorized_operations=False)
        rtype = cast("type[MetadataResponse]", response_type(METADATA_KEY, version))
        response = await conn.request(req, rtype)
        self.check_rebootstrap_required(response)
        return response

    # -- topic configuration -------------------------------------------------------------

    async def topic_max_message_bytes(self, topic: str, timeout_s: float) -> int:
        """The topic's ``max.message.bytes`` as the broker applies it (the topic's own
        setting, else the broker's ``message.max.bytes``), from DescribeConfigs.

        Raises the typed error of a refusal (e.g. :class:`TopicAuthorizationError`
        without DESCRIBE_CONFIGS on the topic), :class:`ProtocolError` if the broker
        leaves the value out.
        """
        async def op(node: int, remaining: float) -> int:
            conn = await self.connect(node, remaining)
            version = conn.version_for(DESCRIBE_CONFIGS_KEY, *_DESCRIBE_CONFIGS_VERSIONS)
            mod = request_module(DESCRIBE_CONFIGS_KEY, version)
            req = build_entity(
                mod.DescribeConfigsRequest, include_synonyms=False,
                include_documentation=False, resources=(build_entity(
                    mod.DescribeConfigsResource, resource_type=i8(_TOPIC_RESOURCE),
                    resource_name=topic, configuration_keys=("max.message.bytes",)),))
            resp: Any = await conn.request(req, timeout_ms=int(remaining * 1000))
            for result in resp.results:
                code = int(result.error_code)
                if code:
                    raise for_code(code, f"cannot describe the configuration of topic "
                                         f"{topic!r}: {result.error_message or ''}".rstrip(": "))
                for entry in result.configs:
                    if entry.name == "max.message.bytes" and entry.value:
                        try:
                            return int(entry.value)
                        except ValueError:
                            break
            raise ProtocolError(f"DescribeConfigs gave no max.message.bytes for {topic!r}")

        return await self.on_any_node(op, timeout_s, "describe topic configuration")

    # -- shutdown ----------------------------------------------------------------------

    async def close(self) -> None:
        """Close every connection and cancel connection attempts. Idempotent."""
        self._closed = True
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        tasks = [st.task for st in self._states.values() if st.task is not None]
        for task in tasks:
            task.cancel()
        conns = list(self._conns.values())
        self._conns.clear()
        for conn in conns:
            self._close_conn(conn, "the client was closed")
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        closing = list(self._closing)
        for conn in closing:
            await conn.wait_closed()
        self._closing.clear()

    @property
    def closed(self) -> bool:
        return self._closed

    # -- internals ---------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateError("the Kafka client is closed")

    def _address(self, node_id: int) -> tuple[str, int] | None:
        addr = self._nodes.get(node_id)
        if addr is None and node_id < 0:
            addr = self._bootstrap_nodes.get(node_id)
        return addr

    def _describe(self, node_id: int) -> str:
        addr = self._address(node_id)
        where = f"{addr[0]}:{addr[1]}" if addr else "unknown address"
        if node_id < 0:
            return f"bootstrap broker {where}"
        return f"node {node_id} at {where}"

    def _last_error_text(self, node_id: int) -> str:
        st = self._states.get(node_id)
        if st is None or st.last_error is None:
            return "not tried"
        return str(st.last_error)

    def _state(self, node_id: int) -> _NodeState:
        st = self._states.get(node_id)
        if st is None:
            st = self._states[node_id] = _NodeState()
        return st

    def _backoff_s(self, failures: int) -> float:
        exp = min(max(0, failures - 1), 32)
        base = min(self.reconnect_backoff_ms * (1 << exp), self.reconnect_backoff_max_ms)
        jitter = random.uniform(1.0 - _JITTER, 1.0 + _JITTER)
        return base * jitter / 1000.0

    def _notify(self) -> None:
        cb = self.on_ready_change
        if cb is not None:
            try:
                cb()
            except Exception:  # pragma: no cover - owner's bug
                log.exception("on_ready_change callback failed")

    def _start_connect(self, node_id: int) -> asyncio.Task[None] | None:
        """The running connect task for ``node_id``, starting one if allowed."""
        st = self._state(node_id)
        if st.task is not None:
            return st.task
        if self._closed or self.connection(node_id) is not None:
            return None
        addr = self._address(node_id)
        if addr is None or st.next_attempt > time.monotonic():
            return None
        loop = asyncio.get_running_loop()
        st.task = loop.create_task(self._connect_task(node_id, addr[0], addr[1]),
                                   name=f"aioproducer-connect-{node_id}")
        return st.task

    async def _connect_task(self, node_id: int, host: str, port: int) -> None:
        st = self._state(node_id)
        old = self._conns.pop(node_id, None)
        if old is not None:
            self._close_conn(old, "replaced by a new connection")
        try:
            conn = await BrokerConnection.open(
                host, port, node_id=node_id if node_id >= 0 else None,
                client_id=self.client_id, request_timeout_ms=self.request_timeout_ms,
                connect_timeout_ms=round(self._setup_timeout.backoff_ms(st.failures)),
                max_response_bytes=self.max_response_bytes, security=self.security,
                send_buffer_bytes=self.send_buffer_bytes,
                receive_buffer_bytes=self.receive_buffer_bytes)
        except Exception as exc:
            st.failures += 1
            st.last_error = exc
            st.next_attempt = time.monotonic() + self._backoff_s(st.failures)
            log.log(logging.WARNING if st.failures == 1 else logging.DEBUG,
                    "connecting to %s failed (%d in a row): %s",
                    self._describe(node_id), st.failures, exc)
            self._disconnected(node_id)
        else:
            if self._closed or self._address(node_id) != (host, port):
                self._close_conn(conn, "no longer needed")
            else:
                st.failures = 0
                st.last_error = None
                conn.on_close = self._make_on_close(node_id)
                conn.on_throttle = self._make_on_throttle(node_id)
                conn.on_writable = self._notify
                self._conns[node_id] = conn
                self._arm_idle_check()
        finally:
            st.task = None
            if node_id not in self._nodes and node_id not in self._bootstrap_nodes:
                self._states.pop(node_id, None)
            self._notify()

    # -- connections.max.idle.ms ------------------------------------------------------

    def _arm_idle_check(self) -> None:
        if self._idle_timer is None and self.connections_max_idle_ms >= 0 and not self._closed:
            period = min(max(self.connections_max_idle_ms / 4000.0, 0.01), 30.0)
            self._idle_timer = asyncio.get_running_loop().call_later(
                period, self._close_idle_connections)

    def _close_idle_connections(self) -> None:
        """Close the connections that sent no request and awaited no response for
        ``connections_max_idle_ms`` (Java's idle expiry); they reopen when needed."""
        self._idle_timer = None
        if self._closed:
            return
        now = time.monotonic()
        limit = self.connections_max_idle_ms / 1000.0
        marks: dict[BrokerConnection, tuple[int, float]] = {}
        for node_id, conn in list(self._conns.items()):
            # The correlation id moves on with every request sent.
            sent = conn._next_correlation_id
            old = self._idle_marks.get(conn)
            since = now if old is None or old[0] != sent or conn.in_flight else old[1]
            if now - since >= limit:
                del self._conns[node_id]
                log.info("closing the connection to %s: idle for %d ms "
                         "(connections.max.idle.ms)", conn, self.connections_max_idle_ms)
                self._close_conn(conn, f"idle for {self.connections_max_idle_ms} ms")
                self._notify()
            else:
                marks[conn] = (sent, since)
        self._idle_marks = marks
        if self._conns:
            self._arm_idle_check()

    # -- client.dns.lookup=resolve_canonical_bootstrap_servers_only ---------------------

    async def _canonicalise_bootstrap(self) -> None:
        """Replace each bootstrap server by the canonical host names of its addresses
        (as Java's ``ClientUtils.parseAndValidateAddresses`` does for
        ``resolve_canonical_bootstrap_servers_only``)."""
        loop = asyncio.get_running_loop()
        servers: list[tuple[str, int]] = []
        for host, port in self.bootstrap_servers:
            try:
                infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            except OSError as exc:
                log.warning("bootstrap server %s:%d does not resolve: %s", host, port, exc)
                continue
            for *_, addr in infos:
                ip = str(addr[0])
                try:
                    name, _ = await loop.getnameinfo((ip, port), 0)
                except OSError:
                    name = ip
                if (name, port) not in servers:
                    servers.append((name, port))
        self._canonical_done = True
        if not servers or self._conns or any(st.task for st in self._states.values()):
            return  # nothing resolved (the connection errors will say so), or in use
        log.info("bootstrap servers %s resolved to canonical names %s",
                 self.bootstrap_servers, servers)
        for nid in self._bootstrap_nodes:
            self._nodes.pop(nid, None)
            self._states.pop(nid, None)
        self._bootstrap_nodes = {-1 - i: addr for i, addr in enumerate(servers)}
        self._nodes.update(self._bootstrap_nodes)

    def _make_on_close(self, node_id: int) -> Callable[[BrokerConnection], None]:
        def on_close(conn: BrokerConnection) -> None:
            self._closing = {c for c in self._closing if not c.closed}
            self._closing.add(conn)
            if self._conns.get(node_id) is conn:
                del self._conns[node_id]
                if not self._closed:
                    log.info("connection to %s lost: %s", conn, conn.close_reason)
                st = self._state(node_id)
                st.last_error = KafkaConnectionError(
                    f"connection to {conn} lost: {conn.close_reason}")
                if not self._closed:
                    st.next_attempt = time.monotonic() + self._backoff_s(1)
                    self._disconnected(node_id)
                    self._notify()
        return on_close

    def _disconnected(self, node_id: int) -> None:
        cb = self.on_disconnect
        if cb is not None and not self._closed:
            try:
                cb(node_id)
            except Exception:  # pragma: no cover - owner's bug
                log.exception("on_disconnect callback failed")

    def _close_conn(self, conn: BrokerConnection, reason: str) -> None:
        # Keep closing connections until their transport is gone, so close() can
        # wait for them; drop the ones already fully closed.
        self._closing = {c for c in self._closing if not c.closed}
        self._closing.add(conn)
        conn.close(reason)

    def _next_bootstrap(self, ids: list[int]) -> int | None:
        now = time.monotonic()
        for _ in range(len(ids)):
            nid = ids[self._bootstrap_next % len(ids)]
            self._bootstrap_next += 1
            if self.connection(nid) is not None or self.is_connecting(nid):
                return nid
            st = self._states.get(nid)
            if st is None or st.next_attempt <= now:
                return nid
        return None

    @staticmethod
    async def _with_timeout(aw: Awaitable[T], timeout_s: float) -> T:
        # Nothing awaited in here raises asyncio.TimeoutError itself: our own
        # timeouts are RequestTimedOutError / KafkaConnectionError.
        try:
            return await asyncio.wait_for(aw, timeout_s)
        except asyncio.TimeoutError:
            raise RequestTimedOutError(f"no answer within {timeout_s:.3g} s") from None

    async def on_any_node(self, op: Callable[[int, float], Awaitable[T]], timeout_s: float,
                          what: str, *,
                          on_error: Callable[[BaseException], None] | None = None) -> T:
        """Run ``op(node, remaining_s)`` on the least-loaded node, moving on to other
        nodes after connection-level failures (each also given to ``on_error``),
        until ``timeout_s`` runs out."""
        self._check_open()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        errors: dict[int, BaseException] = {}
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            self._maybe_rebootstrap(time.monotonic())
            node = self.least_loaded_node()
            if node is None:
                if self._unreachable_since is None:
                    self._unreachable_since = time.monotonic()
                waits = [self.backoff_remaining(n) for n in self._nodes]
                wait = min(waits) if waits else remaining
                await asyncio.sleep(min(max(wait, 0.001), remaining))
                continue
            try:
                result = await self._with_timeout(op(node, remaining), remaining)
                self._unreachable_since = None
                return result
            except (KafkaConnectionError, RequestTimedOutError, ProtocolError) as exc:
                if self._unreachable_since is None:
                    self._unreachable_since = time.monotonic()
                errors[node] = exc
                log.debug("%s via %s failed: %s", what, self._describe(node), exc)
                if on_error is not None:
                    on_error(exc)
                self._check_open()
        details = "; ".join(f"{self._describe(n)}: {e}" for n, e in errors.items())
        raise KafkaConnectionError(
            f"could not {what} within {timeout_s:.3g} s"
            + (f": {details}" if details else ": no broker was reachable"))
