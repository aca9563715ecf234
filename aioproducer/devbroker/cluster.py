"""``LocalKafka``: a local KRaft cluster of combined broker+controller nodes on
127.0.0.1, its state directory and ``cluster.json``, the nodes' ``server.properties``,
starting, stopping, killing, pausing and restarting nodes, their status and logs."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import io
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .admin import (
    CLUSTER_RESOURCE,
    AclBinding,
    AclError,
    api_versions,
    create_acls,
    delete_acls,
    describe_acls,
    fetch_metadata,
)
from .common import _HOST, BrokerStartError, _tail, load_state, save_state
from .jars import (
    KAFKA_VERSION,
    _source_checkout,
    _tool_command,
    ensure_kafka_libs,
    java_classpath,
    java_executable,
    kafka_major,
    log4j1_properties,
    log4j_file_name,
    log4j_jvm_option,
)
from .process import (
    _WATCHDOG,
    _free_ports,
    _pid_alive,
    _pid_paused,
    _proc_start_time,
    _signal,
    _spawn,
    _terminate,
    _wait_gone,
    _wait_paused,
)
from .security import SECURE_LISTENERS, _scram_format_args, _secure_config
from .tls import TlsFiles, make_tls_files

_STATE_FILE = "cluster.json"
_POLL = 0.1


def default_state_dir() -> Path:
    """``$AIOPRODUCER_BROKER_DIR``, else ``<checkout>/.broker/default``, else
    ``~/.cache/aioproducer/broker``."""
    env = os.environ.get("AIOPRODUCER_BROKER_DIR")
    if env:
        return Path(env).expanduser().absolute()
    checkout = _source_checkout()
    if checkout:
        return checkout / ".broker" / "default"
    return Path.home() / ".cache" / "aioproducer" / "broker"


def _read_from(path: Path, start: int = 0, limit: int = 4 << 20) -> str:
    """The text of ``path`` from byte ``start`` on (at most its last ``limit`` bytes)."""
    try:
        with path.open("rb") as f:
            size = f.seek(0, io.SEEK_END)
            f.seek(max(start, size - limit) if start <= size else max(0, size - limit))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _error_lines(text: str, limit: int = 30) -> list[str]:
    """The ERROR/FATAL lines of a Kafka log and the exception lines right after them."""
    out: list[str] = []
    in_error = False
    for line in text.splitlines():
        if line.startswith("["):
            in_error = "] ERROR " in line or "] FATAL " in line
            if in_error:
                out.append(line)
        elif in_error and (line.startswith("Caused by:") or not line.startswith("\t")):
            out.append(line)
        if len(out) >= limit:
            break
    return out


def _kafka_cluster_id() -> str:
    """A random cluster id as Kafka writes them (URL-safe base64 of 16 bytes)."""
    while True:
        cid = base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


# --------------------------------------------------------------------------------------
# The cluster


@dataclasses.dataclass(frozen=True)
class NodeStatus:
    node_id: int
    pid: int | None
    broker_port: int
    controller_port: int
    alive: bool
    answering: bool
    listeners: tuple[tuple[str, int], ...] = ()
    """The secured mode's listeners: (name, port), see ``SECURE_LISTENERS``."""

    @property
    def address(self) -> str:
        return f"{_HOST}:{self.broker_port}"


@dataclasses.dataclass(frozen=True)
class ClusterStatus:
    state_dir: Path
    nodes: tuple[NodeStatus, ...]
    bootstrap: str | None
    kafka_version: str = KAFKA_VERSION

    @property
    def running(self) -> bool:
        """Every node's process runs and answers."""
        return bool(self.nodes) and all(n.alive and n.answering for n in self.nodes)

    @property
    def degraded(self) -> bool:
        """Some but not all nodes run and answer."""
        return not self.running and any(n.alive and n.answering for n in self.nodes)

    def describe(self) -> str:
        if not self.nodes:
            return f"no Kafka cluster in {self.state_dir}"
        lines = [f"Kafka {self.kafka_version}, {len(self.nodes)} node(s), "
                 f"state in {self.state_dir}"]
        for n in self.nodes:
            what = ("up" if n.answering else "running, not answering") if n.alive else "down"
            pid = f"pid {n.pid}" if n.alive else "no process"
            lines.append(f"  node {n.node_id}: {n.address} (controller :{n.controller_port}), "
                         f"{pid}, {what}")
            if n.listeners:
                lines.append("    " + ", ".join(f"{name} {_HOST}:{port}"
                                               for name, port in n.listeners))
        return "\n".join(lines)


class LocalKafka:
    """A local KRaft cluster of ``nodes`` combined broker+controller nodes on 127.0.0.1.

    With ``stop_with_owner`` (the default) a small watchdog process stops the cluster
    once the Python process that started it has exited, so a crashed test run leaves no
    brokers behind; ``ttl`` (seconds) bounds the cluster's life the same way.
    ``extra_config`` is added to (and overrides) every node's ``server.properties``.
    ``features`` finalizes feature levels when the storage is formatted (``kafka-storage
    format --feature name=level``), e.g. ``{"transaction.version": 1}`` for a cluster
    whose transactional producers use the classic protocol instead of KIP-890's.
    The heap is ``-Xms1g -Xmx1g``, as ``kafka-server-start.sh`` sets it, unless
    ``$AIOPRODUCER_BROKER_HEAP`` gives JVM options (like ``KAFKA_HEAP_OPTS``, e.g.
    ``"-Xms512m -Xmx2g"``; a bare size ``2g`` means ``-Xms2g -Xmx2g``). Without ``-Xms``
    the JVM starts with 1/64 of the machine's memory: ~150 MiB of live byte arrays (most
    of it the log cleaner's 128 MiB dedupe buffer) then fill over half of that heap, G1
    runs concurrent marking cycles back to back, and the young collections come every
    2-3 s instead of every ~12 s; the paced bench's p99 was about twice as high, for
    every client. A node's resident memory grows towards the 1 GiB as the young
    generation moves through the heap. ``extra_classpath`` adds
    directories or jars to the brokers' class path (plugins such as a metric reporter).

    With ``secure=True`` every node also has the listeners of ``SECURE_LISTENERS`` (TLS
    with certificates made at start into ``<state_dir>/tls``, see ``tls``; SASL PLAIN,
    SCRAM-SHA-256/512 and unsecured-JWT OAUTHBEARER for ``SECURE_USERS``; sessions of
    ``REAUTH_MS``) and authorizes with ``StandardAuthorizer``: ``SUPER_USERS`` and the
    PLAINTEXT listener (``bootstrap``, User:ANONYMOUS) may do anything, other users what
    ACLs allow (``add_acls``, ``grant_producer``). ``listener_bootstrap(name)`` gives the
    addresses of a listener.

    ``kafka_version`` runs another Apache Kafka release than ``KAFKA_VERSION`` (3.x or
    4.x, fetched from Maven Central like the default; the broker compatibility tests run
    ``KAFKA_VERSIONS``). Every release gets the same KRaft layout: combined
    broker+controller nodes, a static voter set (``controller.quorum.voters``), the
    CONTROLLER listener never advertised; Kafka 3.x logs through log4j 1. Kafka 2.x (the
    oldest supported broker is 2.8: Produce v9) runs with ZooKeeper instead: one
    ZooKeeper server (from Kafka's own dependencies, ``<state_dir>/zookeeper/``) on
    127.0.0.1, started before the nodes and stopped after them; no secured mode there.
    """

    def __init__(self, state_dir: str | os.PathLike[str], nodes: int = 1, *,
                 extra_config: Mapping[str, str] | None = None, stop_with_owner: bool = True,
                 ttl: float | None = None, secure: bool = False,
                 features: Mapping[str, int] | None = None,
                 extra_classpath: Sequence[str | os.PathLike[str]] = (),
                 kafka_version: str | None = None) -> None:
        if nodes < 1:
            raise ValueError("nodes must be at least 1")
        self.kafka_version = kafka_version or KAFKA_VERSION
        self.zookeeper = kafka_major(self.kafka_version) < 3
        if self.zookeeper and (secure or features):
            raise ValueError(f"Kafka {self.kafka_version} runs with ZooKeeper here: no "
                             "secured mode, no features")
        self.state_dir = Path(state_dir).expanduser().absolute()
        self.nodes = nodes
        self.secure = secure
        self.extra_config = dict(extra_config or {})
        self.features = dict(features or {})
        self.extra_classpath = [str(Path(p).expanduser().absolute()) for p in extra_classpath]
        self.stop_with_owner = stop_with_owner
        self.ttl = ttl
        self._log_offsets: dict[int, tuple[int, int]] = {}
        self._zk_port = 0

    # ---- state ------------------------------------------------------------------------

    @property
    def state_file(self) -> Path:
        return self.state_dir / _STATE_FILE

    def node_dir(self, i: int) -> Path:
        return self.state_dir / f"node-{i}"

    def _load(self) -> dict[str, Any] | None:
        return load_state(self.state_file)

    def _save(self, state: dict[str, Any]) -> None:
        save_state(self.state_file, state)

    def _state(self) -> dict[str, Any]:
        state = self._load()
        if state is None or not state.get("nodes"):
            raise RuntimeError(f"no Kafka cluster in {self.state_dir} (start it first)")
        return state

    def _node(self, state: dict[str, Any], i: int) -> dict[str, Any]:
        nodes: list[dict[str, Any]] = state["nodes"]
        if not 0 <= i < len(nodes):
            raise IndexError(f"no node {i} (the cluster has nodes 0..{len(nodes) - 1})")
        return nodes[i]

    @property
    def bootstrap(self) -> str:
        """``127.0.0.1:port[,127.0.0.1:port...]``, every node's PLAINTEXT listener."""
        return ",".join(f"{_HOST}:{n['broker_port']}" for n in self._state()["nodes"])

    def node_port(self, i: int) -> int:
        """The broker (PLAINTEXT) port of node ``i``."""
        return int(self._node(self._state(), i)["broker_port"])

    def node_address(self, i: int) -> str:
        return f"{_HOST}:{self.node_port(i)}"

    def node_controller_port(self, i: int) -> int:
        return int(self._node(self._state(), i)["controller_port"])

    # ---- the secured mode -------------------------------------------------------------

    @property
    def tls(self) -> TlsFiles:
        """The certificates and keys of the secured mode (made when the cluster starts)."""
        return TlsFiles(self.state_dir / "tls")

    def node_listener_port(self, i: int, listener: str) -> int:
        """The port of node ``i``'s listener ``listener`` (``PLAINTEXT`` or one of
        ``SECURE_LISTENERS``; those only in the secured mode)."""
        node = self._node(self._state(), i)
        name = listener.upper()
        if name == "PLAINTEXT":
            return int(node["broker_port"])
        ports: dict[str, int] = node.get("listeners") or {}
        if name not in ports:
            raise ValueError(f"no listener {listener!r} (the cluster in {self.state_dir} has "
                             f"{', '.join(['PLAINTEXT', *ports])})")
        return int(ports[name])

    def listener_bootstrap(self, listener: str) -> str:
        """``127.0.0.1:port[,...]``: every node's listener ``listener`` (e.g. ``SASL_SSL``;
        ``PLAINTEXT`` is ``bootstrap``)."""
        return ",".join(f"{_HOST}:{self.node_listener_port(i, listener)}"
                        for i in range(len(self._state()["nodes"])))

    def _live_addresses(self) -> list[str]:
        addresses = [self.node_address(i) for i in range(self.node_count())
                     if self.node_alive(i)]
        if not addresses:
            raise RuntimeError("no node is running")
        return addresses

    def add_acls(self, bindings: Sequence[AclBinding], timeout: float = 30.0) -> None:
        """Create ACLs (as the PLAINTEXT listener's super user) and wait until every live
        node's authorizer has them. Raises ``AclError``."""
        addresses = self._live_addresses()
        create_acls(addresses[0], bindings, timeout)
        wanted = set(bindings)
        deadline = time.monotonic() + timeout
        for address in addresses:
            while not wanted <= set(describe_acls(address, timeout=timeout)):
                if time.monotonic() > deadline:
                    raise AclError(f"the ACLs did not reach {address} within {timeout:.0f} s")
                time.sleep(0.05)

    def grant_producer(self, user: str, topics: Sequence[str] = (), *,
                       prefixed: bool = False, transactional_ids: Sequence[str] = (),
                       groups: Sequence[str] = (), idempotent: bool = True,
                       timeout: float = 30.0) -> list[AclBinding]:
        """Let ``user`` produce: WRITE, DESCRIBE and CREATE on ``topics`` (names, or name
        prefixes with ``prefixed``), IDEMPOTENT_WRITE on the cluster (``idempotent``),
        WRITE and DESCRIBE on ``transactional_ids`` (prefixes too with ``prefixed``), READ
        and DESCRIBE on consumer ``groups`` (``send_offsets_to_transaction``); like
        ``kafka-acls --producer``. Returns the ACLs made."""
        principal = f"User:{user}"
        pattern = "PREFIXED" if prefixed else "LITERAL"
        bindings = [AclBinding("TOPIC", t, principal, op, pattern=pattern)
                    for t in topics for op in ("WRITE", "DESCRIBE", "CREATE")]
        if idempotent:
            bindings.append(AclBinding("CLUSTER", CLUSTER_RESOURCE, principal,
                                       "IDEMPOTENT_WRITE"))
        bindings += [AclBinding("TRANSACTIONAL_ID", t, principal, op, pattern=pattern)
                     for t in transactional_ids for op in ("WRITE", "DESCRIBE")]
        bindings += [AclBinding("GROUP", g, principal, op, pattern=pattern)
                     for g in groups for op in ("READ", "DESCRIBE")]
        self.add_acls(bindings, timeout)
        return bindings

    def acls(self, principal: str | None = None) -> list[AclBinding]:
        """The ACLs (of ``principal``, e.g. ``"User:bob"``, if given)."""
        return describe_acls(self._live_addresses()[0], principal)

    def remove_acls(self, principal: str | None = None, timeout: float = 30.0) -> int:
        """Delete every ACL (of ``principal`` only, if given) and wait until every live
        node's authorizer has forgotten them; returns how many went."""
        addresses = self._live_addresses()
        deleted = delete_acls(addresses[0], principal, timeout)
        deadline = time.monotonic() + timeout
        for address in addresses:
            while describe_acls(address, principal, timeout):
                if time.monotonic() > deadline:
                    raise AclError(f"ACLs still on {address} after {timeout:.0f} s")
                time.sleep(0.05)
        return deleted

    def node_pid(self, i: int) -> int | None:
        """The pid of node ``i``'s JVM, or None when it does not run."""
        node = self._node(self._state(), i)
        pid = node.get("pid")
        return int(pid) if pid and _pid_alive(pid, node.get("marker")) else None

    def node_count(self) -> int:
        """How many nodes the cluster in the state directory has (else ``nodes``)."""
        state = self._load()
        return len(state["nodes"]) if state and state.get("nodes") else self.nodes

    def node_alive(self, i: int) -> bool:
        return self.node_pid(i) is not None

    def server_log(self, i: int) -> Path:
        return self.node_dir(i) / "server.log"

    def log_tail(self, i: int, lines: int = 60, *, since_start: bool = False) -> str:
        """The last ``lines`` of node ``i``'s server log and of its JVM output, after the
        log's first ERROR lines (with ``since_start``, only since the node last started)."""
        log_start, out_start = self._log_offsets.get(i, (0, 0)) if since_start else (0, 0)
        parts = []
        log = _read_from(self.server_log(i), log_start)
        errors = _error_lines(log)
        if errors:
            parts.append(f"--- node {i}: {self.server_log(i)} (first errors) ---\n"
                         + "\n".join(errors))
        if log:
            parts.append(f"--- node {i}: {self.server_log(i)} (last lines) ---\n"
                         + _tail(log, lines))
        out = _tail(_read_from(self.node_dir(i) / "stdout.log", out_start), 30)
        if out:
            parts.append(f"--- node {i}: {self.node_dir(i) / 'stdout.log'} ---\n{out}")
        return "\n".join(parts) if parts else f"--- node {i}: no log ---"

    # ---- status -----------------------------------------------------------------------

    def status(self, probe_timeout: float = 1.0) -> ClusterStatus:
        state = self._load()
        if state is None or not state.get("nodes"):
            return ClusterStatus(self.state_dir, (), None, self.kafka_version)
        nodes = []
        for i, node in enumerate(state["nodes"]):
            alive = state.get("state") == "running" and _pid_alive(node.get("pid"),
                                                                    node.get("marker"))
            answering = False
            if alive:
                try:
                    api_versions(f"{_HOST}:{node['broker_port']}", probe_timeout)
                    answering = True
                except (OSError, ValueError):
                    pass
            listeners = tuple((str(k), int(v)) for k, v in (node.get("listeners") or {}).items())
            nodes.append(NodeStatus(i, node.get("pid") if alive else None,
                                    int(node["broker_port"]), int(node["controller_port"]),
                                    alive, answering, listeners))
        bootstrap = ",".join(f"{_HOST}:{n.broker_port}" for n in nodes)
        return ClusterStatus(self.state_dir, tuple(nodes), bootstrap,
                             str(state.get("kafka_version") or KAFKA_VERSION))

    def is_running(self) -> bool:
        return self.status().running

    def broker_ids(self, i: int | None = None, timeout: float = 5.0) -> set[int]:
        """The brokers that node ``i`` (default: the first live one) lists in Metadata."""
        if i is None:
            live = [j for j in range(self.node_count()) if self.node_alive(j)]
            if not live:
                raise RuntimeError("no node is running")
            i = live[0]
        response = fetch_metadata(self.node_address(i), timeout=timeout)
        return {int(b.node_id) for b in response.brokers}

    # ---- configuration ----------------------------------------------------------------

    def _server_properties(self, i: int, nodes: list[dict[str, Any]]) -> str:
        replication = 3 if len(nodes) >= 3 else len(nodes)
        min_isr = min(2, replication)
        voters = ",".join(f"{n['node_id']}@{_HOST}:{n['controller_port']}" for n in nodes)
        me = nodes[i]
        extra: dict[str, int] = me.get("listeners") or {}
        advertised = ",".join([f"PLAINTEXT://{_HOST}:{me['broker_port']}",
                               *(f"{name}://{_HOST}:{port}" for name, port in extra.items())])
        protocols = ",".join(["PLAINTEXT:PLAINTEXT", "CONTROLLER:PLAINTEXT",
                              *(f"{name}:{SECURE_LISTENERS[name]}" for name in extra)])
        if self.zookeeper:
            return self._zookeeper_server_properties(i, nodes, replication, min_isr)
        config: dict[str, str] = {
            "process.roles": "broker,controller",
            "node.id": str(me["node_id"]),
            "controller.quorum.voters": voters,
            "listeners": f"{advertised},CONTROLLER://{_HOST}:{me['controller_port']}",
            "advertised.listeners": advertised,
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": protocols,
            **self._common_properties(i, replication, min_isr),
            # A dead node is fenced (and leaves the ISRs) sooner than by default (9 s).
            "broker.heartbeat.interval.ms": "1000",
            "broker.session.timeout.ms": "6000",
        }
        if kafka_major(self.kafka_version) >= 4:  # share groups (KIP-932) came with 4.0
            config["share.coordinator.state.topic.replication.factor"] = str(replication)
            config["share.coordinator.state.topic.min.isr"] = str(min_isr)
        if extra:
            config.update(_secure_config(self.tls))
        config.update(self.extra_config)
        return "".join(f"{k}={v}\n" for k, v in config.items())

    def _common_properties(self, i: int, replication: int, min_isr: int) -> dict[str, str]:
        """What every node's configuration has, KRaft or ZooKeeper."""
        return {
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.node_dir(i) / "data"),
            "auto.create.topics.enable": "false",
            "num.partitions": "1",
            "default.replication.factor": str(replication),
            "offsets.topic.replication.factor": str(replication),
            "offsets.topic.num.partitions": "5",
            "transaction.state.log.replication.factor": str(replication),
            "transaction.state.log.min.isr": str(min_isr),
            "transaction.state.log.num.partitions": "5",
            "group.initial.rebalance.delay.ms": "0",
            # Transactions left open past transaction_timeout_ms are aborted within a
            # second, not ten (so a test can watch it happen).
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
        }

    def _zookeeper_server_properties(self, i: int, nodes: list[dict[str, Any]],
                                     replication: int, min_isr: int) -> str:
        """A Kafka 2.x broker's configuration: ZooKeeper instead of KRaft (the port in
        ``cluster.json``'s ``zookeeper``), one PLAINTEXT listener."""
        me = nodes[i]
        zk_port = self._zk_port
        address = f"PLAINTEXT://{_HOST}:{me['broker_port']}"
        config = {
            "broker.id": str(me["node_id"]),
            "zookeeper.connect": f"{_HOST}:{zk_port}",
            "listeners": address,
            "advertised.listeners": address,
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT",
            **self._common_properties(i, replication, min_isr),
            "zookeeper.session.timeout.ms": "6000",
        }
        config.update(self.extra_config)
        return "".join(f"{k}={v}\n" for k, v in config.items())

    def _log4j_config(self, i: int) -> str:
        if kafka_major(self.kafka_version) < 4:
            return log4j1_properties(self.server_log(i), quiet=(
                "kafka.request.logger", "org.apache.kafka.clients"))
        log = json.dumps(str(self.server_log(i)))
        return f"""Configuration:
  status: error
  Appenders:
    File:
      name: FILE
      fileName: {log}
      append: true
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Root:
      level: INFO
      AppenderRef:
        - ref: FILE
    Logger:
      - name: kafka.request.logger
        level: WARN
      - name: org.apache.kafka.clients
        level: WARN
"""

    def _jvm_command(self, i: int, version: str) -> list[str]:
        """Node ``i``'s JVM, of the Kafka ``version`` its storage was formatted with (the
        state's, so that ``start_node`` from another ``LocalKafka`` runs the same one)."""
        heap = shlex.split(os.environ.get("AIOPRODUCER_BROKER_HEAP", "") or "1g")
        if len(heap) == 1 and heap[0][:1].isdigit():
            heap = [f"-Xms{heap[0]}", f"-Xmx{heap[0]}"]  # AIOPRODUCER_BROKER_HEAP=2g
        node_dir = self.node_dir(i)
        return [java_executable(), *heap, "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
                "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
                "-Djava.awt.headless=true",
                log4j_jvm_option(version, node_dir / log4j_file_name(version)),
                f"-Dkafka.logs.dir={node_dir}",
                "-cp", os.pathsep.join([java_classpath(version), *self.extra_classpath]),
                "kafka.Kafka", str(node_dir / "server.properties")]

    def _prepare(self) -> dict[str, Any]:
        """A fresh cluster: wiped node directories, new ports, configs, formatted storage."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        for old in self.state_dir.glob("node-*"):
            if old.is_dir():
                shutil.rmtree(old)
        names = list(SECURE_LISTENERS) if self.secure else []
        per_node = 2 + len(names)
        ports = _free_ports(per_node * self.nodes + (1 if self.zookeeper else 0))
        nodes: list[dict[str, Any]] = []
        for i in range(self.nodes):
            props = self.node_dir(i) / "server.properties"
            mine = ports[per_node * i:per_node * (i + 1)]
            node: dict[str, Any] = {"node_id": i, "broker_port": mine[0],
                                    "controller_port": mine[1], "pid": None,
                                    "marker": str(props)}
            if names:
                node["listeners"] = dict(zip(names, mine[2:], strict=True))
            nodes.append(node)
        if self.secure:
            shutil.rmtree(self.tls.directory, ignore_errors=True)
            make_tls_files(self.tls.directory)
        cluster_id = _kafka_cluster_id()
        zk: dict[str, Any] | None = None
        if self.zookeeper:
            zk_dir = self.state_dir / "zookeeper"
            shutil.rmtree(zk_dir, ignore_errors=True)
            (zk_dir / "data").mkdir(parents=True)
            zk = {"port": ports[-1], "pid": None, "marker": str(zk_dir / "zoo.cfg")}
            self._zk_port = int(zk["port"])
            (zk_dir / "zoo.cfg").write_text(
                f"dataDir={zk_dir / 'data'}\nclientPort={zk['port']}\n"
                f"clientPortAddress={_HOST}\ntickTime=2000\nmaxClientCnxns=0\n"
                "admin.enableServer=false\n4lw.commands.whitelist=srvr,ruok\n")
            (zk_dir / "log4j.properties").write_text(
                log4j1_properties(zk_dir / "zookeeper.log"))
        for i in range(self.nodes):
            d = self.node_dir(i)
            (d / "data").mkdir(parents=True)
            (d / "server.properties").write_text(self._server_properties(i, nodes))
            (d / log4j_file_name(self.kafka_version)).write_text(self._log4j_config(i))
        state: dict[str, Any] = {"kafka_version": self.kafka_version, "cluster_id": cluster_id,
                                 "state": "formatting", "created": time.time(),
                                 "watchdog_pid": None, "secure": self.secure, "nodes": nodes}
        if zk is not None:
            state["zookeeper"] = zk
        self._save(state)
        if zk is None:
            self._format(cluster_id)
        return state

    # ---- ZooKeeper (Kafka 2.x) ----------------------------------------------------------

    def _ensure_zookeeper(self, state: dict[str, Any], timeout: float = 60.0) -> None:
        """Start the cluster's ZooKeeper server if it has one and it does not run, and
        wait until it answers ``ruok``."""
        zk = state.get("zookeeper")
        if not zk or _pid_alive(zk.get("pid"), zk.get("marker")):
            return
        zk_dir = self.state_dir / "zookeeper"
        version = str(state.get("kafka_version") or self.kafka_version)
        argv = [java_executable(), "-Xms128m", "-Xmx256m", "-XX:+UseSerialGC",
                "-Djava.awt.headless=true",
                log4j_jvm_option(version, zk_dir / "log4j.properties"),
                "-cp", java_classpath(version),
                "org.apache.zookeeper.server.ZooKeeperServerMain", str(zk_dir / "zoo.cfg")]
        zk["pid"] = _spawn(argv, zk_dir / "stdout.log")
        self._save(state)
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(OSError), socket.create_connection(
                    (_HOST, int(zk["port"])), timeout=1.0) as conn:
                conn.sendall(b"ruok")
                if conn.recv(4) == b"imok":
                    return
            if not _pid_alive(zk["pid"], zk.get("marker")) or time.monotonic() > deadline:
                log = _tail(_read_from(zk_dir / "zookeeper.log"), 40)
                raise BrokerStartError(f"ZooKeeper did not start on {_HOST}:{zk['port']}",
                                       log)
            time.sleep(_POLL)

    def _stop_zookeeper(self, state: dict[str, Any], timeout: float) -> None:
        zk = state.get("zookeeper")
        if zk and zk.get("pid"):
            _terminate({int(zk["pid"]): zk.get("marker")}, timeout)
            zk["pid"] = None

    def _format(self, cluster_id: str, timeout: float = 120.0) -> None:
        procs = []
        try:
            for i in range(self.nodes):
                scram = _scram_format_args() if self.secure else []
                feats = [a for name, level in sorted(self.features.items())
                         for a in ("--feature", f"{name}={int(level)}")]
                cmd = _tool_command("kafka.tools.StorageTool",
                                    ["format", "-t", cluster_id, "-c",
                                     str(self.node_dir(i) / "server.properties"), *scram,
                                     *feats], (), self.kafka_version)
                procs.append(subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                                              stdout=subprocess.PIPE,
                                              stderr=subprocess.STDOUT, text=True))
            deadline = time.monotonic() + timeout
            for i, proc in enumerate(procs):
                try:
                    out, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    raise BrokerStartError(f"formatting node {i}'s storage took over "
                                           f"{timeout:.0f} s") from None
                if proc.returncode != 0:
                    raise BrokerStartError(f"formatting node {i}'s storage failed "
                                           f"(exit {proc.returncode})", _tail(out, 40))
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
                if proc.stdout is not None:
                    proc.stdout.close()

    # ---- processes --------------------------------------------------------------------

    def _spawn_node(self, state: dict[str, Any], i: int) -> None:
        node_dir = self.node_dir(i)
        out = node_dir / "stdout.log"
        offsets = []
        for path in (self.server_log(i), out):
            try:
                offsets.append(path.stat().st_size)
            except OSError:
                offsets.append(0)
        self._log_offsets[i] = (offsets[0], offsets[1])
        version = str(state.get("kafka_version") or KAFKA_VERSION)
        pid = _spawn(self._jvm_command(i, version), out)
        (node_dir / "pid").write_text(f"{pid}\n")
        self._node(state, i)["pid"] = pid

    def _ensure_watchdog(self, state: dict[str, Any]) -> None:
        if not self.stop_with_owner and not self.ttl:
            return
        if _pid_alive(state.get("watchdog_pid"), "aioproducer-devbroker-watchdog"):
            return
        if "owner_pid" not in state:
            owner = os.getpid() if self.stop_with_owner else 0
            state["owner_pid"] = owner
            state["owner_start"] = (_proc_start_time(owner) or "") if owner else ""
            state["deadline"] = time.time() + self.ttl if self.ttl else 0.0
        argv = [sys.executable, "-I", "-c", _WATCHDOG, str(self.state_file),
                str(state["owner_pid"]), state["owner_start"], str(state["deadline"]),
                "aioproducer-devbroker-watchdog"]
        state["watchdog_pid"] = _spawn(argv, self.state_dir / "watchdog.log")

    def _failure(self, message: str, nodes: Sequence[int]) -> BrokerStartError:
        logs = "\n".join(self.log_tail(i, 60, since_start=True) for i in nodes)
        in_use = any("Address already in use" in _read_from(self.server_log(i),
                                                             self._log_offsets.get(i, (0,))[0])
                     for i in range(self.node_count()))
        return BrokerStartError(message, logs, port_in_use=in_use)

    def _wait_ready(self, deadline: float, timeout: float) -> None:
        """Until every node that should run answers ApiVersions and lists all of them as
        brokers in Metadata. Fails at once when a node's process exits."""
        state = self._state()
        nodes: list[dict[str, Any]] = state["nodes"]
        expected = {i for i, n in enumerate(nodes) if n.get("pid")}
        pending = set(expected)
        last_error: dict[int, str] = {}
        tls = self.tls.ssl_context() if any(n.get("listeners") for n in nodes) else None
        while True:
            for i in sorted(pending):
                node = nodes[i]
                if not _pid_alive(node["pid"], node.get("marker")):
                    raise self._failure(f"Kafka node {i} exited while starting", [i])
                address = f"{_HOST}:{node['broker_port']}"
                remaining = max(0.2, min(2.0, deadline - time.monotonic()))
                try:
                    api_versions(address, remaining)
                    listed = {int(b.node_id)
                              for b in fetch_metadata(address, timeout=remaining).brokers}
                    if tls is not None:  # the secured mode: TLS works too
                        api_versions(f"{_HOST}:{node['listeners']['SSL']}", remaining,
                                     ssl_context=tls)
                except (OSError, ValueError) as exc:
                    last_error[i] = f"{type(exc).__name__}: {exc}"
                    continue
                if expected <= listed:
                    pending.discard(i)
                else:
                    last_error[i] = f"lists brokers {sorted(listed)}, want {sorted(expected)}"
            if not pending:
                return
            if time.monotonic() > deadline:
                why = "; ".join(f"node {i}: {last_error.get(i, '?')}" for i in sorted(pending))
                raise self._failure(f"Kafka did not become ready within {timeout:.0f} s "
                                    f"({why})", sorted(pending))
            time.sleep(_POLL)

    def _kill_leftovers(self) -> None:
        state = self._load()
        if state is None:
            return
        pids = {int(n["pid"]): n.get("marker") for n in state.get("nodes", []) if n.get("pid")}
        _terminate(pids, 15.0)
        self._stop_zookeeper(state, 10.0)
        wd = state.get("watchdog_pid")
        if wd and _pid_alive(wd, "aioproducer-devbroker-watchdog"):
            _signal(wd, signal.SIGTERM)
            _wait_gone({wd: None}, 5.0)

    def start(self, timeout: float = 120.0) -> str:
        """Start the cluster (a fresh one) and wait until every node answers and sees all
        the others as brokers; returns the bootstrap address. If this state directory's
        cluster already runs and answers, it is kept as it is.

        Raises ``BrokerStartError`` (with the tail of the nodes' logs) on failure or
        timeout, after stopping what it started.
        """
        state = self._load()
        if state and state.get("state") == "running" and len(state.get("nodes", [])) == (
                self.nodes) and bool(state.get("secure")) == self.secure and state.get(
                "kafka_version", KAFKA_VERSION) == self.kafka_version:
            status = self.status()
            if status.running:
                with contextlib.suppress(BrokerStartError):
                    self._wait_ready(time.monotonic() + 10.0, 10.0)
                    return self.bootstrap
        self._kill_leftovers()
        ensure_kafka_libs(self.kafka_version)
        deadline = time.monotonic() + timeout
        for attempt in range(3):
            state = self._prepare()
            try:
                self._ensure_zookeeper(state)
                for i in range(self.nodes):
                    self._spawn_node(state, i)
                state["state"] = "running"
                state["started"] = time.time()
                self._ensure_watchdog(state)
                self._save(state)
                self._wait_ready(deadline, timeout)
                return self.bootstrap
            except BrokerStartError as exc:
                self.stop(timeout=10.0)
                if (exc.port_in_use and attempt < 2
                        and deadline - time.monotonic() > 20):
                    continue  # a port was taken between choosing and binding it
                raise
            except BaseException:
                self.stop(timeout=10.0)
                raise
        raise AssertionError("unreachable")

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Until every running node answers and lists all running nodes as brokers."""
        self._wait_ready(time.monotonic() + timeout, timeout)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop every node: SIGTERM (a clean shutdown), SIGKILL after ``timeout`` s."""
        state = self._load()
        if state is None:
            return
        state["state"] = "stopped"
        self._save(state)  # the watchdog sees this and exits
        pids = {int(n["pid"]): n.get("marker") for n in state.get("nodes", []) if n.get("pid")}
        _terminate(pids, timeout)
        for i, node in enumerate(state.get("nodes", [])):
            node["pid"] = None
            with contextlib.suppress(OSError):
                (self.node_dir(i) / "pid").unlink()
        self._stop_zookeeper(state, timeout)  # after the brokers: they shut down through it
        wd = state.get("watchdog_pid")
        if wd and _pid_alive(wd, "aioproducer-devbroker-watchdog"):
            _signal(wd, signal.SIGTERM)
            _wait_gone({wd: None}, 5.0)
        state["watchdog_pid"] = None
        self._save(state)

    def kill_node(self, i: int) -> None:
        """SIGKILL node ``i`` (a crash) and wait until its process is gone."""
        state = self._state()
        node = self._node(state, i)
        if node.get("pid") and _pid_alive(node["pid"], node.get("marker")):
            _signal(node["pid"], signal.SIGKILL)
            _wait_gone({node["pid"]: node.get("marker")}, 10.0)
        self._mark_down(i)

    def stop_node(self, i: int, timeout: float = 30.0) -> None:
        """Stop node ``i`` cleanly (SIGTERM; SIGKILL after ``timeout`` s)."""
        state = self._state()
        node = self._node(state, i)
        if node.get("pid"):
            _terminate({node["pid"]: node.get("marker")}, timeout)
        self._mark_down(i)

    def pause_node(self, i: int, timeout: float = 10.0) -> None:
        """SIGSTOP node ``i``: its JVM freezes (no heartbeats, no replication, no
        answers; connections stay open) until :meth:`resume_node`. Waits until the
        process is stopped. Neither the watchdog nor :meth:`node_alive` treats a paused
        node as gone; :meth:`stop`, :meth:`stop_node`, :meth:`start_node` and
        :meth:`ensure_running` resume it first."""
        pid = self.node_pid(i)
        if pid is None:
            raise RuntimeError(f"node {i} does not run")
        _signal(pid, signal.SIGSTOP)
        if not _wait_paused(pid, True, timeout):
            raise RuntimeError(f"node {i} (pid {pid}) did not stop within {timeout:.0f} s")

    def resume_node(self, i: int, timeout: float = 10.0) -> None:
        """SIGCONT node ``i`` (after :meth:`pause_node`; harmless on a running node) and
        wait until the process runs again. It does not wait until the broker answers:
        use :meth:`wait_ready` for that."""
        pid = self.node_pid(i)
        if pid is None:
            return
        _signal(pid, signal.SIGCONT)
        if not _wait_paused(pid, False, timeout):
            raise RuntimeError(f"node {i} (pid {pid}) did not resume within {timeout:.0f} s")

    def node_paused(self, i: int) -> bool:
        """Whether node ``i`` runs but is stopped by SIGSTOP (:meth:`pause_node`)."""
        return _pid_paused(self.node_pid(i))

    def resume_all(self) -> None:
        """SIGCONT every node that runs (paused or not)."""
        state = self._load()
        for node in (state or {}).get("nodes", []):
            if node.get("pid") and _pid_alive(node["pid"], node.get("marker")):
                _signal(node["pid"], signal.SIGCONT)

    def _mark_down(self, i: int) -> None:
        state = self._state()
        self._node(state, i)["pid"] = None
        with contextlib.suppress(OSError):
            (self.node_dir(i) / "pid").unlink()
        self._save(state)

    def start_node(self, i: int, timeout: float = 60.0) -> None:
        """(Re)start node ``i`` with its existing data and ports, and wait until it answers
        and every running node lists it (and the other running nodes) as a broker."""
        state = self._state()
        node = self._node(state, i)
        if state.get("state") != "running":
            raise RuntimeError("the cluster is stopped: use start()")
        if not _pid_alive(node.get("pid"), node.get("marker")):
            self._ensure_zookeeper(state)
            self._spawn_node(state, i)
            self._ensure_watchdog(state)
            self._save(state)
        else:
            _signal(node["pid"], signal.SIGCONT)  # a paused node would never answer
        self._wait_ready(time.monotonic() + timeout, timeout)

    def ensure_running(self, timeout: float = 120.0) -> str:
        """Restart the nodes that are down (or start the cluster); returns the bootstrap."""
        state = self._load()
        if state is None or state.get("state") != "running" or len(state["nodes"]) != (
                self.nodes) or bool(state.get("secure")) != self.secure or state.get(
                "kafka_version", KAFKA_VERSION) != self.kafka_version:
            return self.start(timeout)
        deadline = time.monotonic() + timeout
        self.resume_all()  # a paused node is alive but would never answer
        for i in range(self.nodes):
            if not self.node_alive(i):
                self.start_node(i, max(1.0, deadline - time.monotonic()))
        self._wait_ready(deadline, timeout)
        return self.bootstrap

    def __enter__(self) -> LocalKafka:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        secure = ", secure=True" if self.secure else ""
        version = (f", kafka_version={self.kafka_version!r}"
                   if self.kafka_version != KAFKA_VERSION else "")
        return f"LocalKafka({str(self.state_dir)!r}, nodes={self.nodes}{secure}{version})"


def running_bootstrap(state_dir: str | os.PathLike[str] | None = None) -> str | None:
    """The bootstrap address of the local cluster if it runs and answers, else None."""
    cluster = LocalKafka(state_dir or default_state_dir(), stop_with_owner=False)
    status = cluster.status()
    return status.bootstrap if status.running else None
