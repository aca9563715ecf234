"""A local Apache Kafka (KRaft) cluster for development, demos and the test suite.

Everything runs on 127.0.0.1. The Kafka jars come from Maven Central through ``mvn``
(``dependency:copy-dependencies``) into a cache directory, once; each node is one JVM that
is both broker and controller, with its own free ports, its own directory
(``<state_dir>/node-<id>/``: ``server.properties``, ``data/``, ``server.log``,
``stdout.log``, ``pid``) and the cluster's state in ``<state_dir>/cluster.json`` so that
another process can ask for its status or stop it.

Node ids are ``0 .. nodes-1`` and are also the indexes taken by the ``*_node`` methods.

``LocalKafka(..., secure=True)`` (``start --secure``) is the secured mode: TLS listeners
(with certificates made by ``openssl`` at start), SASL listeners (PLAIN, SCRAM-SHA-256/512,
OAUTHBEARER with unsigned JWTs) and ``StandardAuthorizer`` ACLs; see ``LocalKafka``.

Used as a library (``LocalKafka``) by the tests, and as a command::

    python -m aioproducer.devbroker start [--nodes N] [--dir DIR] [--secure]
    python -m aioproducer.devbroker status | stop | logs [I]
    python -m aioproducer.devbroker kill-node I | stop-node I | start-node I

This module imports nothing from the rest of ``aioproducer`` (only the stdlib and ``kio``),
so it works before the compiled core is built.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import dataclasses
import fcntl
import io
import json
import os
import random
import shlex
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.api_versions.v3.response import ApiVersionsResponse
from kio.schema.create_acls.v3.request import AclCreation, CreateAclsRequest
from kio.schema.create_acls.v3.response import CreateAclsResponse
from kio.schema.delete_acls.v3.request import DeleteAclsFilter, DeleteAclsRequest
from kio.schema.delete_acls.v3.response import DeleteAclsResponse
from kio.schema.describe_acls.v3.request import DescribeAclsRequest
from kio.schema.describe_acls.v3.response import DescribeAclsResponse
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.metadata.v12.response import MetadataResponse
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.types import TopicName
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i8, i32
from kio.static.protocol import HeaderV2RequestPayload, ResponsePayload

__all__ = [
    "BADHOST_NAME",
    "CLIENT_KEY_PASSWORD",
    "CLUSTER_RESOURCE",
    "KAFKA_VERSION",
    "REAUTH_MS",
    "SASL_MECHANISMS",
    "SECURE_LISTENERS",
    "SECURE_USERS",
    "SUPER_USERS",
    "AclBinding",
    "AclError",
    "BrokerStartError",
    "ClusterStatus",
    "KafkaLibsError",
    "LocalKafka",
    "NodeStatus",
    "TlsFiles",
    "api_versions",
    "cache_dir",
    "create_acls",
    "default_state_dir",
    "delete_acls",
    "describe_acls",
    "ensure_kafka_libs",
    "fetch_metadata",
    "java_classpath",
    "java_executable",
    "main",
    "make_tls_files",
    "run_java",
    "running_bootstrap",
    "unsecured_jwt",
]

KAFKA_VERSION = "4.3.1"
SCALA_VERSION = "2.13"
_LOG4J_VERSION = "2.24.3"
_SLF4J_VERSION = "2.0.17"

_MARKER = ".complete"
_STATE_FILE = "cluster.json"
_HOST = "127.0.0.1"
_MVN_TIMEOUT = 900.0
_POLL = 0.1

_R = TypeVar("_R", bound=ResponsePayload)


class KafkaLibsError(RuntimeError):
    """The Kafka jars could not be fetched (no ``mvn``, no network, a Maven error...)."""


class BrokerStartError(RuntimeError):
    """A node did not start (in time); ``logs`` holds the tail of each failing node's log."""

    def __init__(self, message: str, logs: str = "", *, port_in_use: bool = False) -> None:
        super().__init__(f"{message}\n{logs}" if logs else message)
        self.logs = logs
        self.port_in_use = port_in_use


# --------------------------------------------------------------------------------------
# Where things live


def _source_checkout() -> Path | None:
    """The repository root when this module is imported from a source checkout."""
    root = Path(__file__).resolve().parent.parent
    return root if (root / "pyproject.toml").is_file() else None


def cache_dir() -> Path:
    """Where the Kafka jars are kept (``kafka-<version>/`` under the cache root).

    The root is ``$AIOPRODUCER_CACHE_DIR``, else ``<checkout>/.cache`` in a source
    checkout, else ``~/.cache/aioproducer``.
    """
    env = os.environ.get("AIOPRODUCER_CACHE_DIR")
    if env:
        root = Path(env).expanduser()
    else:
        checkout = _source_checkout()
        root = checkout / ".cache" if checkout else Path.home() / ".cache" / "aioproducer"
    return (root / f"kafka-{KAFKA_VERSION}").absolute()


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


# --------------------------------------------------------------------------------------
# The jars


_POM = f"""<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>aioproducer.devbroker</groupId>
  <artifactId>kafka-dist</artifactId>
  <version>{KAFKA_VERSION}</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_{SCALA_VERSION}</artifactId>
      <version>{KAFKA_VERSION}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka-tools</artifactId>
      <version>{KAFKA_VERSION}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j2-impl</artifactId>
      <version>{_LOG4J_VERSION}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-core</artifactId>
      <version>{_LOG4J_VERSION}</version>
    </dependency>
    <dependency>
      <groupId>org.slf4j</groupId>
      <artifactId>slf4j-api</artifactId>
      <version>{_SLF4J_VERSION}</version>
    </dependency>
  </dependencies>
</project>
"""

_REQUIRED_JARS = (f"kafka_{SCALA_VERSION}-{KAFKA_VERSION}.jar", f"kafka-tools-{KAFKA_VERSION}.jar")


def _libs_complete(root: Path) -> bool:
    try:
        marker = json.loads((root / _MARKER).read_text())
        jars = {p.name for p in (root / "libs").glob("*.jar")}
    except (OSError, ValueError):
        return False
    return (isinstance(marker, dict) and marker.get("version") == KAFKA_VERSION
            and len(jars) == marker.get("jars") and all(j in jars for j in _REQUIRED_JARS))


@contextlib.contextmanager
def _file_lock(path: Path, timeout: float) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise KafkaLibsError(f"timed out waiting for the lock {path}") from None
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _tail(text: str, lines: int) -> str:
    return "\n".join(text.splitlines()[-lines:])


def ensure_kafka_libs() -> Path:
    """The directory of Kafka's jars (and its dependencies), fetched with ``mvn`` if needed.

    Safe to call from several processes at once: a file lock makes one of them fetch
    while the others wait, and a marker file written last says the directory is complete.
    """
    root = cache_dir()
    libs = root / "libs"
    if _libs_complete(root):
        return libs
    root.mkdir(parents=True, exist_ok=True)
    with _file_lock(root / ".lock", _MVN_TIMEOUT + 60):
        if _libs_complete(root):
            return libs
        mvn = shutil.which("mvn")
        if mvn is None:
            raise KafkaLibsError(
                "Maven ('mvn') is needed to fetch the Apache Kafka jars and is not on PATH "
                "(on Debian/Ubuntu: apt-get install maven openjdk-17-jre-headless)")
        (root / "pom.xml").write_text(_POM)
        partial = root / "libs.partial"
        shutil.rmtree(partial, ignore_errors=True)
        print(f"aioproducer: fetching Apache Kafka {KAFKA_VERSION} with Maven into {root} "
              "(once)...", file=sys.stderr, flush=True)
        started = time.monotonic()
        cmd = [mvn, "-B", "--no-transfer-progress", "-f", str(root / "pom.xml"),
               "dependency:copy-dependencies", f"-DoutputDirectory={partial}",
               "-DincludeScope=runtime"]
        try:
            done = subprocess.run(cmd, cwd=root, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, timeout=_MVN_TIMEOUT, check=False)
        except subprocess.TimeoutExpired as exc:
            out = exc.output if isinstance(exc.output, str) else ""
            raise KafkaLibsError(f"mvn did not finish in {_MVN_TIMEOUT:.0f} s:\n"
                                 f"{_tail(out, 40)}") from None
        jars = sorted(p.name for p in partial.glob("*.jar")) if partial.is_dir() else []
        missing = [j for j in _REQUIRED_JARS if j not in jars]
        if done.returncode != 0 or missing:
            raise KafkaLibsError(
                f"fetching Apache Kafka {KAFKA_VERSION} with Maven failed (exit "
                f"{done.returncode}{', missing ' + ', '.join(missing) if missing else ''}):\n"
                f"$ {shlex.join(cmd)}\n{_tail(done.stdout, 40)}")
        shutil.rmtree(libs, ignore_errors=True)
        partial.rename(libs)
        shutil.rmtree(root / "target", ignore_errors=True)
        tmp = root / (_MARKER + ".tmp")
        tmp.write_text(json.dumps({"version": KAFKA_VERSION, "jars": len(jars)}))
        tmp.replace(root / _MARKER)
        print(f"aioproducer: fetched {len(jars)} jars in {time.monotonic() - started:.1f} s",
              file=sys.stderr, flush=True)
    return libs


def java_executable() -> str:
    """``$JAVA_HOME/bin/java`` if it exists, else ``java`` from PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and os.access(Path(home) / "bin" / "java", os.X_OK):
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise KafkaLibsError("Java (17 or newer) is needed to run Kafka and 'java' is not on "
                             "PATH (on Debian/Ubuntu: apt-get install openjdk-17-jre-headless)")
    return found


def java_classpath() -> str:
    """A ``-cp`` value holding Kafka, its tools and their dependencies."""
    return str(ensure_kafka_libs() / "*")


_TOOLS_LOG4J = """Configuration:
  status: error
  Appenders:
    Console:
      name: STDERR
      target: SYSTEM_ERR
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Root:
      level: WARN
      AppenderRef:
        - ref: STDERR
"""


def _tools_log4j_config() -> Path:
    path = cache_dir() / "tools-log4j2.yaml"
    if not path.is_file() or path.read_text() != _TOOLS_LOG4J:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(_TOOLS_LOG4J)
        tmp.replace(path)
    return path


def _tool_command(target: str, args: Sequence[str], jvm_args: Sequence[str]) -> list[str]:
    return [java_executable(), "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            "-Djava.awt.headless=true", f"-Dlog4j2.configurationFile={_tools_log4j_config()}",
            *jvm_args, "-cp", java_classpath(), target, *args]


def run_java(main_class_or_source_file: str | os.PathLike[str], args: Sequence[str] = (),
             timeout: float = 120.0, *, input: str | None = None,
             jvm_args: Sequence[str] = (), check: bool = False,
             cwd: str | os.PathLike[str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run a Java main class (e.g. ``org.apache.kafka.tools.consumer.ConsoleConsumer``) or a
    single-file Java program (a path ending in ``.java``) with Kafka's jars on the class
    path; its output is captured as text. The process is killed after ``timeout`` seconds
    (``subprocess.TimeoutExpired`` is raised then)."""
    target = os.fspath(main_class_or_source_file)
    if target.endswith(".java"):
        target = str(Path(target).absolute())
    cmd = _tool_command(target, args, jvm_args)
    return subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout,
                          check=check, cwd=cwd,
                          stdin=subprocess.DEVNULL if input is None else None)


# --------------------------------------------------------------------------------------
# Talking to a broker (just enough to tell whether it is up)


def _parse_address(address: str) -> tuple[str, int]:
    host, _, port = address.strip().rpartition(":")
    return host or _HOST, int(port)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < n:
        chunk = sock.recv(n - len(chunks))
        if not chunk:
            raise ConnectionError("connection closed by the broker")
        chunks += chunk
    return bytes(chunks)


def _request(address: str, request: HeaderV2RequestPayload, response_type: type[_R],
             timeout: float, ssl_context: ssl.SSLContext | None = None) -> _R:
    buf = io.BytesIO()
    correlation_id = random.randrange(1, 2**31)
    header = RequestHeader(request_api_key=request.__api_key__,
                           request_api_version=request.__version__,
                           correlation_id=i32(correlation_id), client_id="aioproducer-devbroker")
    entity_writer(RequestHeader)(buf, header)
    entity_writer(type(request))(buf, request)
    payload = buf.getvalue()
    host, port = _parse_address(address)
    with contextlib.ExitStack() as stack:
        sock = stack.enter_context(socket.create_connection((host, port), timeout=timeout))
        if ssl_context is not None:
            sock = stack.enter_context(ssl_context.wrap_socket(sock, server_hostname=host))
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        (size,) = struct.unpack(">i", _recv_exact(sock, 4))
        data = _recv_exact(sock, size)
    response_header, offset = entity_reader(response_type.__header_schema__)(data, 0)
    if response_header.correlation_id != correlation_id:
        raise ConnectionError("response correlation id does not match the request")
    response, _ = entity_reader(response_type)(data, offset)
    return response


def api_versions(address: str, timeout: float = 2.0, *,
                 ssl_context: ssl.SSLContext | None = None) -> ApiVersionsResponse:
    """Send ApiVersions (v3) to ``host:port`` (over TLS with ``ssl_context``); raises
    ``OSError`` (``ssl.SSLError`` included) if it does not answer."""
    request = ApiVersionsRequest(client_software_name="aioproducer-devbroker",
                                 client_software_version="1")
    response = _request(address, request, ApiVersionsResponse, timeout, ssl_context)
    if response.error_code != ErrorCode.none:
        raise ConnectionError(f"ApiVersions error {response.error_code.name}")
    return response


def fetch_metadata(address: str, topics: Sequence[str] | None = (),
                   timeout: float = 5.0) -> MetadataResponse:
    """Send Metadata (v12) to ``host:port``: no topics by default, ``None`` for all."""
    wanted = None if topics is None else tuple(
        MetadataRequestTopic(topic_id=None, name=TopicName(t)) for t in topics)
    request = MetadataRequest(topics=wanted, allow_auto_topic_creation=False,
                              include_topic_authorized_operations=False)
    return _request(address, request, MetadataResponse, timeout)


# ACLs (for the secured mode's StandardAuthorizer), over the protocol like the above: the
# PLAINTEXT listener's principal (User:ANONYMOUS) is a super user there.

_ACL_RESOURCE_TYPES = {"ANY": 1, "TOPIC": 2, "GROUP": 3, "CLUSTER": 4, "TRANSACTIONAL_ID": 5,
                       "DELEGATION_TOKEN": 6, "USER": 7}
_ACL_OPERATIONS = {"ANY": 1, "ALL": 2, "READ": 3, "WRITE": 4, "CREATE": 5, "DELETE": 6,
                   "ALTER": 7, "DESCRIBE": 8, "CLUSTER_ACTION": 9, "DESCRIBE_CONFIGS": 10,
                   "ALTER_CONFIGS": 11, "IDEMPOTENT_WRITE": 12, "CREATE_TOKENS": 13,
                   "DESCRIBE_TOKENS": 14, "TWO_PHASE_COMMIT": 15}
_ACL_PERMISSIONS = {"ANY": 1, "DENY": 2, "ALLOW": 3}
_ACL_PATTERNS = {"ANY": 1, "MATCH": 2, "LITERAL": 3, "PREFIXED": 4}

CLUSTER_RESOURCE = "kafka-cluster"
"""The name of the one CLUSTER resource (for IDEMPOTENT_WRITE, CLUSTER_ACTION...)."""


def _acl_code(table: Mapping[str, int], what: str, value: str) -> i8:
    try:
        return i8(table[value.upper()])
    except KeyError:
        raise ValueError(f"unknown ACL {what} {value!r} (one of {', '.join(table)})") from None


def _acl_name(table: Mapping[str, int], code: int) -> str:
    return next((name for name, c in table.items() if c == code), str(code))


class AclError(RuntimeError):
    """The broker refused to create, list or delete ACLs."""


@dataclasses.dataclass(frozen=True)
class AclBinding:
    """One ACL: ``principal`` (``"User:bob"``) may (``ALLOW``) or may not (``DENY``) do
    ``operation`` (``WRITE``, ``DESCRIBE``, ``IDEMPOTENT_WRITE``...) on the resource
    ``resource_type`` (``TOPIC``, ``GROUP``, ``CLUSTER``, ``TRANSACTIONAL_ID``) named
    ``resource_name`` (``CLUSTER_RESOURCE`` for the cluster), matched ``LITERAL``-ly or as
    a ``PREFIXED`` name. Names are Kafka's, upper-case."""

    resource_type: str
    resource_name: str
    principal: str
    operation: str
    permission: str = "ALLOW"
    pattern: str = "LITERAL"
    host: str = "*"

    def __post_init__(self) -> None:
        for field_name, table in (("resource_type", _ACL_RESOURCE_TYPES),
                                  ("operation", _ACL_OPERATIONS),
                                  ("permission", _ACL_PERMISSIONS),
                                  ("pattern", _ACL_PATTERNS)):
            value = str(getattr(self, field_name)).upper()
            _acl_code(table, field_name, value)
            object.__setattr__(self, field_name, value)
        if ":" not in self.principal:
            raise ValueError(f"an ACL principal looks like 'User:name', not {self.principal!r}")


def create_acls(address: str, bindings: Sequence[AclBinding], timeout: float = 10.0) -> None:
    """Create ACLs through the broker at ``host:port`` (CreateAcls v3) as its listener's
    principal, which must be allowed to (a super user). Raises ``AclError``."""
    if not bindings:
        return
    request = CreateAclsRequest(creations=tuple(
        AclCreation(resource_type=_acl_code(_ACL_RESOURCE_TYPES, "resource type",
                                            b.resource_type),
                    resource_name=b.resource_name,
                    resource_pattern_type=_acl_code(_ACL_PATTERNS, "pattern", b.pattern),
                    principal=b.principal, host=b.host,
                    operation=_acl_code(_ACL_OPERATIONS, "operation", b.operation),
                    permission_type=_acl_code(_ACL_PERMISSIONS, "permission", b.permission))
        for b in bindings))
    response = _request(address, request, CreateAclsResponse, timeout)
    failed = [f"{b}: {r.error_code.name} {r.error_message or ''}".rstrip()
              for b, r in zip(bindings, response.results, strict=False)
              if r.error_code != ErrorCode.none]
    if failed:
        raise AclError("CreateAcls failed: " + "; ".join(failed))


def describe_acls(address: str, principal: str | None = None,
                  timeout: float = 10.0) -> list[AclBinding]:
    """The ACLs the broker at ``host:port`` knows (of ``principal`` only, if given)."""
    request = DescribeAclsRequest(
        resource_type_filter=i8(_ACL_RESOURCE_TYPES["ANY"]), resource_name_filter=None,
        pattern_type_filter=i8(_ACL_PATTERNS["ANY"]), principal_filter=principal,
        host_filter=None, operation=i8(_ACL_OPERATIONS["ANY"]),
        permission_type=i8(_ACL_PERMISSIONS["ANY"]))
    response = _request(address, request, DescribeAclsResponse, timeout)
    if response.error_code != ErrorCode.none:
        raise AclError(f"DescribeAcls failed: {response.error_code.name} "
                       f"{response.error_message or ''}".rstrip())
    return [AclBinding(resource_type=_acl_name(_ACL_RESOURCE_TYPES, r.resource_type),
                       resource_name=r.resource_name,
                       pattern=_acl_name(_ACL_PATTERNS, r.pattern_type),
                       principal=a.principal, host=a.host,
                       operation=_acl_name(_ACL_OPERATIONS, a.operation),
                       permission=_acl_name(_ACL_PERMISSIONS, a.permission_type))
            for r in response.resources for a in r.acls]


def delete_acls(address: str, principal: str | None = None, timeout: float = 10.0) -> int:
    """Delete every ACL (of ``principal`` only, if given); returns how many went."""
    request = DeleteAclsRequest(filters=(DeleteAclsFilter(
        resource_type_filter=i8(_ACL_RESOURCE_TYPES["ANY"]), resource_name_filter=None,
        pattern_type_filter=i8(_ACL_PATTERNS["ANY"]), principal_filter=principal,
        host_filter=None, operation=i8(_ACL_OPERATIONS["ANY"]),
        permission_type=i8(_ACL_PERMISSIONS["ANY"])),))
    response = _request(address, request, DeleteAclsResponse, timeout)
    deleted = 0
    for result in response.filter_results:
        if result.error_code != ErrorCode.none:
            raise AclError(f"DeleteAcls failed: {result.error_code.name} "
                           f"{result.error_message or ''}".rstrip())
        deleted += len(result.matching_acls)
    return deleted


# --------------------------------------------------------------------------------------
# Processes


def _proc_stat(pid: int) -> list[str] | None:
    """Fields 3.. of /proc/<pid>/stat (state first), or None when there is no such process."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rfind(")") + 2:].split()


def _proc_start_time(pid: int) -> str | None:
    stat = _proc_stat(pid)
    return stat[19] if stat and len(stat) > 19 else None


def _pid_alive(pid: int | None, marker: str | None = None) -> bool:
    """Whether ``pid`` runs (and is not a zombie); with ``marker``, also that its command
    line contains it (guards against a reused pid)."""
    if not pid or pid <= 0:
        return False
    try:
        reaped, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass  # not our child: look it up
    else:
        return reaped == 0
    if Path("/proc/self/stat").exists():
        stat = _proc_stat(pid)
        if stat is None or stat[0] in ("Z", "X", "x"):
            return False
        if marker is None:
            return True
        try:
            return marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _signal(pid: int | None, sig: int) -> None:
    if pid:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _pid_paused(pid: int | None) -> bool:
    """Whether ``pid`` is stopped by a signal (SIGSTOP): ``T`` in /proc/<pid>/stat."""
    if not pid:
        return False
    stat = _proc_stat(pid)
    return stat is not None and stat[0] == "T"


def _wait_paused(pid: int, paused: bool, timeout: float) -> bool:
    """Until ``pid`` is (``paused``) or is not stopped; False on timeout. Without /proc
    there is nothing to look at: True at once."""
    if not Path("/proc/self/stat").exists():
        return True
    deadline = time.monotonic() + timeout
    while _pid_paused(pid) != paused:
        if time.monotonic() > deadline or not _pid_alive(pid):
            return False
        time.sleep(0.01)
    return True


def _spawn(argv: Sequence[str], output: Path, env: Mapping[str, str] | None = None) -> int:
    """Start ``argv`` detached (own session, stdin from /dev/null, stdout and stderr
    appended to ``output``) and return its pid."""
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, str(output), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644),
        (os.POSIX_SPAWN_DUP2, 1, 2),
    ]
    defaults = [signal.SIGPIPE, signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT]
    if hasattr(signal, "SIGXFSZ"):
        defaults.append(signal.SIGXFSZ)
    return os.posix_spawn(argv[0], list(argv), dict(os.environ if env is None else env),
                          file_actions=actions, setsid=True, setsigdef=defaults,
                          setsigmask=())


def _wait_gone(pids: Mapping[int, str | None], timeout: float) -> list[int]:
    """Wait until none of ``pids`` (pid -> cmdline marker) runs; returns the ones left."""
    deadline = time.monotonic() + timeout
    left = [p for p, m in pids.items() if _pid_alive(p, m)]
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = [p for p in left if _pid_alive(p, pids[p])]
    return left


def _terminate(pids: Mapping[int, str | None], timeout: float) -> None:
    """SIGTERM, then SIGKILL whatever still runs after ``timeout`` seconds."""
    alive = {p: m for p, m in pids.items() if _pid_alive(p, m)}
    for pid in alive:
        _signal(pid, signal.SIGTERM)
        _signal(pid, signal.SIGCONT)  # a paused (SIGSTOP) process must run to exit
    left = _wait_gone(alive, timeout)
    for pid in left:
        _signal(pid, signal.SIGKILL)
    _wait_gone({p: alive[p] for p in left}, 10.0)


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((_HOST, port))
        except OSError:
            return False
    return True


def _free_ports(n: int) -> list[int]:
    """``n`` distinct free ports, below the ephemeral range when possible (so that a port
    of a stopped node is not taken as the source port of some connection before the node
    restarts)."""
    low = 32768
    with contextlib.suppress(OSError, ValueError):
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports: list[int] = []
    if low > 12000:
        rng = random.SystemRandom()
        for _ in range(400):
            port = rng.randrange(max(10000, low - 12000), low)
            if port not in ports and _port_free(port):
                ports.append(port)
                if len(ports) == n:
                    return ports
    socks: list[socket.socket] = []
    try:  # fall back to the kernel's choice
        while len(ports) < n:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(s)
            s.bind((_HOST, 0))
            port = s.getsockname()[1]
            if port not in ports:
                ports.append(port)
    finally:
        for s in socks:
            s.close()
    return ports


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


# The watchdog: a tiny separate Python process that stops the cluster when the process
# that started it has gone (a test run that crashed or was killed) or when its time to
# live is over. It exits once the cluster is marked stopped.
_WATCHDOG = r"""
import json, os, signal, sys, time
from pathlib import Path

state_file, owner, owner_start = sys.argv[1], int(sys.argv[2]), sys.argv[3]
deadline = float(sys.argv[4])

def stat(pid):
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rfind(")") + 2:].split()

def alive(pid, marker=None, start=None):
    if not pid:
        return False
    if not Path("/proc/self/stat").exists():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        return True
    s = stat(pid)
    if s is None or s[0] in ("Z", "X", "x"):
        return False
    if start and len(s) > 19 and s[19] != start:
        return False
    if marker:
        try:
            return marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return False
    return True

def load():
    try:
        return json.loads(Path(state_file).read_text())
    except (OSError, ValueError):
        return None

while True:
    state = load()
    if state is None or state.get("state") != "running" or state.get("watchdog_pid") != os.getpid():
        sys.exit(0)
    expired = deadline > 0 and time.time() > deadline
    if expired or (owner > 0 and not alive(owner, None, owner_start or None)):
        why = "time to live over" if expired else f"owner process {owner} has gone"
        print(f"watchdog: {why}: stopping the cluster", flush=True)
        state["state"] = "stopped"
        tmp = Path(state_file + ".watchdog.tmp")
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(state_file)
        nodes = [(n.get("pid"), n.get("marker")) for n in state.get("nodes", [])]
        for pid, marker in nodes:
            if alive(pid, marker):
                os.kill(pid, signal.SIGTERM)
                os.kill(pid, signal.SIGCONT)  # a paused (SIGSTOP) node must run to exit
        end = time.monotonic() + 30
        while time.monotonic() < end and any(alive(p, m) for p, m in nodes):
            time.sleep(0.2)
        for pid, marker in nodes:
            if alive(pid, marker):
                os.kill(pid, signal.SIGKILL)
        sys.exit(0)
    time.sleep(1.0)
"""


# --------------------------------------------------------------------------------------
# The secured mode: certificates, users, listeners

SECURE_LISTENERS: Mapping[str, str] = {
    "SSL": "SSL",                        # TLS, no client certificate asked for
    "MTLS": "SSL",                       # TLS, a client certificate (from the CA) required
    "SSL_BADHOST": "SSL",                # TLS with a certificate for kafka.invalid only
    "SASL_PLAINTEXT": "SASL_PLAINTEXT",  # PLAIN, SCRAM-SHA-256/512, OAUTHBEARER
    "SASL_SSL": "SASL_SSL",              # the same over TLS
}
"""The secured mode's extra listeners (name -> security protocol), each on its own port;
``PLAINTEXT`` (no authentication, a super user) and ``CONTROLLER`` stay as they are."""

SECURE_USERS: Mapping[str, str] = {"admin": "admin-secret", "alice": "alice-secret",
                                   "bob": "bob-secret"}
"""The secured mode's users and passwords, for PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512."""

SUPER_USERS = ("admin", "alice")
"""Users allowed everything. The others (``bob``) may do only what ACLs grant them."""

SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")

REAUTH_MS = 10_000
"""``connections.max.reauth.ms`` of the SASL listeners: the session lifetime the broker
gives in SaslAuthenticate, after which a client must re-authenticate (KIP-368)."""

BADHOST_NAME = "kafka.invalid"
"""The only name (DNS SAN) in the certificate of the ``SSL_BADHOST`` listener."""

CLIENT_KEY_PASSWORD = "client-key-secret"
_CLIENT_NAME = "alice"  # the client certificate's CN, mapped to the principal User:alice
_CERT_DAYS = "3650"

_OPENSSL_CNF = f"""\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = placeholder
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[broker]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth,clientAuth
subjectAltName = IP:127.0.0.1,DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always
[badhost]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = DNS:{BADHOST_NAME}
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always
[client]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always
"""


@dataclasses.dataclass(frozen=True)
class TlsFiles:
    """The PEM files of the secured mode (all in ``directory``). Keys are PKCS#8.

    - ``ca_file``: the test CA; it signed every certificate below but the ``other_*``.
    - ``broker_keystore``: the brokers' key + certificate (SAN IP:127.0.0.1 and
      DNS:localhost) + CA; ``badhost_keystore``: the same for ``SSL_BADHOST``, whose
      certificate names only ``kafka.invalid``.
    - ``client_cert`` / ``client_key``: a client certificate (CN=alice, so the principal
      on the ``MTLS`` listener is ``User:alice``); ``client_key_encrypted`` is that key
      encrypted with ``client_key_password`` (AES-256); ``client_chain`` is the key, the
      certificate and the CA in one file.
    - ``other_ca_file``: an unrelated CA (verifying the brokers with it fails);
      ``other_client_cert``/``other_client_key``: a client certificate it signed (the
      ``MTLS`` listener refuses it).
    """

    directory: Path

    @property
    def ca_file(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def ca_key(self) -> Path:
        return self.directory / "ca.key"

    @property
    def broker_keystore(self) -> Path:
        return self.directory / "broker-keystore.pem"

    @property
    def badhost_keystore(self) -> Path:
        return self.directory / "badhost-keystore.pem"

    @property
    def client_cert(self) -> Path:
        return self.directory / "client.pem"

    @property
    def client_key(self) -> Path:
        return self.directory / "client.key"

    @property
    def client_key_encrypted(self) -> Path:
        return self.directory / "client-encrypted.key"

    @property
    def client_key_password(self) -> str:
        return CLIENT_KEY_PASSWORD

    @property
    def client_chain(self) -> Path:
        return self.directory / "client-chain.pem"

    @property
    def other_ca_file(self) -> Path:
        return self.directory / "other-ca.pem"

    @property
    def other_client_cert(self) -> Path:
        return self.directory / "other-client.pem"

    @property
    def other_client_key(self) -> Path:
        return self.directory / "other-client.key"

    def exists(self) -> bool:
        return all(p.is_file() for p in (
            self.ca_file, self.broker_keystore, self.badhost_keystore, self.client_cert,
            self.client_key, self.client_key_encrypted, self.client_chain,
            self.other_ca_file, self.other_client_cert, self.other_client_key))

    def ssl_context(self, *, client_cert: bool = False,
                    check_hostname: bool = True) -> ssl.SSLContext:
        """A client-side ``ssl.SSLContext`` that trusts ``ca_file`` (and presents the
        client certificate with ``client_cert``)."""
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        ctx.check_hostname = check_hostname
        if client_cert:
            ctx.load_cert_chain(str(self.client_cert), str(self.client_key))
        return ctx


def _openssl(args: Sequence[str], cwd: Path) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise BrokerStartError("the secured mode makes its certificates with 'openssl', "
                               "which is not on PATH (on Debian/Ubuntu: apt-get install "
                               "openssl)")
    done = subprocess.run([openssl, *args], cwd=cwd, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        raise BrokerStartError(f"openssl {shlex.join(args)} failed (exit {done.returncode})",
                               _tail(done.stderr + done.stdout, 20))


def make_tls_files(directory: str | os.PathLike[str]) -> TlsFiles:
    """Make (afresh) the secured mode's CAs, keys and certificates with ``openssl``
    into ``directory``; see ``TlsFiles``. EC P-256 keys, valid for ten years."""
    files = TlsFiles(Path(directory).absolute())
    d = files.directory
    d.mkdir(parents=True, exist_ok=True)
    cnf = d / "openssl.cnf"
    cnf.write_text(_OPENSSL_CNF)

    def key(name: str) -> None:
        _openssl(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
                  "-out", name], d)

    def ca(name: str, cn: str) -> None:
        key(f"{name}.key")
        _openssl(["req", "-new", "-x509", "-config", cnf.name, "-extensions", "ca",
                  "-key", f"{name}.key", "-subj", f"/CN={cn}", "-days", _CERT_DAYS,
                  "-sha256", "-out", f"{name}.pem"], d)

    def leaf(name: str, cn: str, extensions: str, issuer: str) -> None:
        key(f"{name}.key")
        _openssl(["req", "-new", "-config", cnf.name, "-key", f"{name}.key",
                  "-subj", f"/CN={cn}", "-out", f"{name}.csr"], d)
        _openssl(["x509", "-req", "-in", f"{name}.csr", "-CA", f"{issuer}.pem",
                  "-CAkey", f"{issuer}.key", "-set_serial", f"0x{os.urandom(12).hex()}",
                  "-days", _CERT_DAYS, "-sha256", "-extfile", cnf.name,
                  "-extensions", extensions, "-out", f"{name}.pem"], d)
        (d / f"{name}.csr").unlink()

    ca("ca", "aioproducer test CA")
    ca("other-ca", "aioproducer unrelated test CA")
    leaf("broker", "localhost", "broker", "ca")
    leaf("badhost", BADHOST_NAME, "badhost", "ca")
    leaf("client", _CLIENT_NAME, "client", "ca")
    leaf("other-client", _CLIENT_NAME, "client", "other-ca")
    _openssl(["pkcs8", "-topk8", "-v2", "aes-256-cbc", "-in", "client.key",
              "-out", files.client_key_encrypted.name,
              "-passout", f"pass:{CLIENT_KEY_PASSWORD}"], d)
    ca_pem = files.ca_file.read_text()
    for name, target in (("broker", files.broker_keystore),
                         ("badhost", files.badhost_keystore),
                         ("client", files.client_chain)):
        target.write_text((d / f"{name}.key").read_text() + (d / f"{name}.pem").read_text()
                          + ca_pem)
    for path in d.iterdir():
        if path.suffix == ".key":
            path.chmod(0o600)
    return files


def _jaas(module: str, **options: str) -> str:
    return " ".join([module, "required", *(f'{k}="{v}"' for k, v in options.items())]) + ";"


def _secure_config(tls: TlsFiles) -> dict[str, str]:
    """The server.properties entries of the secured mode (but the listeners)."""
    config: dict[str, str] = {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(tls.broker_keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(tls.ca_file),
        "ssl.client.auth": "none",
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.ssl_badhost.ssl.keystore.location": str(tls.badhost_keystore),
        # The principal of a client certificate is its CN (User:alice), not the whole DN.
        "ssl.principal.mapping.rules": "RULE:^CN=([^,]+).*$/$1/,DEFAULT",
        "sasl.enabled.mechanisms": ",".join(SASL_MECHANISMS),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "false",
        # ANONYMOUS: the PLAINTEXT and CONTROLLER listeners (set-up, inter-broker) and TLS
        # without a client certificate.
        "super.users": ";".join(["User:ANONYMOUS", *(f"User:{u}" for u in SUPER_USERS)]),
    }
    plain_users = {f"user_{u}": p for u, p in SECURE_USERS.items()}
    for listener in (n for n, p in SECURE_LISTENERS.items() if p.startswith("SASL_")):
        prefix = f"listener.name.{listener.lower()}."
        config[prefix + "plain.sasl.jaas.config"] = _jaas(
            "org.apache.kafka.common.security.plain.PlainLoginModule", **plain_users)
        for mechanism in ("scram-sha-256", "scram-sha-512"):
            config[f"{prefix}{mechanism}.sasl.jaas.config"] = _jaas(
                "org.apache.kafka.common.security.scram.ScramLoginModule")
        # No callback handler configured: the broker validates unsecured JWS tokens
        # (alg "none", the principal in "sub", an "exp"): OAuthBearerUnsecuredValidator...
        config[prefix + "oauthbearer.sasl.jaas.config"] = _jaas(
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule",
            unsecuredLoginStringClaim_sub="admin")
        config[prefix + "connections.max.reauth.ms"] = str(REAUTH_MS)
    return config


def _scram_format_args() -> list[str]:
    """``kafka-storage format`` arguments that add every user's SCRAM credentials."""
    args: list[str] = []
    for user, password in SECURE_USERS.items():
        for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            args += ["--add-scram", f"{mechanism}=[name={user},password={password}]"]
    return args


def unsecured_jwt(subject: str, lifetime: float = 3600.0, **claims: Any) -> str:
    """An unsigned OAUTHBEARER token (JWS with ``alg: none``) for ``subject``, as the
    secured mode's brokers accept: ``sub``, ``iat``, ``exp`` (``lifetime`` s from now)."""
    def b64(obj: Mapping[str, Any]) -> str:
        raw = json.dumps(obj, separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")
    now = time.time()
    payload = {"sub": subject, "iat": int(now), "exp": int(now + lifetime), **claims}
    return f"{b64({'alg': 'none'})}.{b64(payload)}."


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
        lines = [f"Kafka {KAFKA_VERSION}, {len(self.nodes)} node(s), state in {self.state_dir}"]
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
    The heap is ``-Xmx1g`` unless ``$AIOPRODUCER_BROKER_HEAP`` gives JVM options
    (like ``KAFKA_HEAP_OPTS``, e.g. ``"-Xms512m -Xmx2g"``).

    With ``secure=True`` every node also has the listeners of ``SECURE_LISTENERS`` (TLS
    with certificates made at start into ``<state_dir>/tls``, see ``tls``; SASL PLAIN,
    SCRAM-SHA-256/512 and unsecured-JWT OAUTHBEARER for ``SECURE_USERS``; sessions of
    ``REAUTH_MS``) and authorizes with ``StandardAuthorizer``: ``SUPER_USERS`` and the
    PLAINTEXT listener (``bootstrap``, User:ANONYMOUS) may do anything, other users what
    ACLs allow (``add_acls``, ``grant_producer``). ``listener_bootstrap(name)`` gives the
    addresses of a listener.
    """

    def __init__(self, state_dir: str | os.PathLike[str], nodes: int = 1, *,
                 extra_config: Mapping[str, str] | None = None, stop_with_owner: bool = True,
                 ttl: float | None = None, secure: bool = False) -> None:
        if nodes < 1:
            raise ValueError("nodes must be at least 1")
        self.state_dir = Path(state_dir).expanduser().absolute()
        self.nodes = nodes
        self.secure = secure
        self.extra_config = dict(extra_config or {})
        self.stop_with_owner = stop_with_owner
        self.ttl = ttl
        self._log_offsets: dict[int, tuple[int, int]] = {}

    # ---- state ------------------------------------------------------------------------

    @property
    def state_file(self) -> Path:
        return self.state_dir / _STATE_FILE

    def node_dir(self, i: int) -> Path:
        return self.state_dir / f"node-{i}"

    def _load(self) -> dict[str, Any] | None:
        try:
            state = json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return None
        return state if isinstance(state, dict) else None

    def _save(self, state: dict[str, Any]) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_name(f"{_STATE_FILE}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(self.state_file)

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
            return ClusterStatus(self.state_dir, (), None)
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
        return ClusterStatus(self.state_dir, tuple(nodes), bootstrap)

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
        config: dict[str, str] = {
            "process.roles": "broker,controller",
            "node.id": str(me["node_id"]),
            "controller.quorum.voters": voters,
            "listeners": f"{advertised},CONTROLLER://{_HOST}:{me['controller_port']}",
            "advertised.listeners": advertised,
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": protocols,
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
            "share.coordinator.state.topic.replication.factor": str(replication),
            "share.coordinator.state.topic.min.isr": str(min_isr),
            "group.initial.rebalance.delay.ms": "0",
            # Transactions left open past transaction_timeout_ms are aborted within a
            # second, not ten (so a test can watch it happen).
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
            # A dead node is fenced (and leaves the ISRs) sooner than by default (9 s).
            "broker.heartbeat.interval.ms": "1000",
            "broker.session.timeout.ms": "6000",
        }
        if extra:
            config.update(_secure_config(self.tls))
        config.update(self.extra_config)
        return "".join(f"{k}={v}\n" for k, v in config.items())

    def _log4j_config(self, i: int) -> str:
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

    def _jvm_command(self, i: int) -> list[str]:
        heap = shlex.split(os.environ.get("AIOPRODUCER_BROKER_HEAP", "") or "-Xmx1g")
        if len(heap) == 1 and heap[0][:1].isdigit():
            heap = [f"-Xmx{heap[0]}"]  # AIOPRODUCER_BROKER_HEAP=2g
        node_dir = self.node_dir(i)
        return [java_executable(), *heap, "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
                "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
                "-Djava.awt.headless=true",
                f"-Dlog4j2.configurationFile={node_dir / 'log4j2.yaml'}",
                f"-Dkafka.logs.dir={node_dir}",
                "-cp", java_classpath(), "kafka.Kafka", str(node_dir / "server.properties")]

    def _prepare(self) -> dict[str, Any]:
        """A fresh cluster: wiped node directories, new ports, configs, formatted storage."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        for old in self.state_dir.glob("node-*"):
            if old.is_dir():
                shutil.rmtree(old)
        names = list(SECURE_LISTENERS) if self.secure else []
        per_node = 2 + len(names)
        ports = _free_ports(per_node * self.nodes)
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
        for i in range(self.nodes):
            d = self.node_dir(i)
            (d / "data").mkdir(parents=True)
            (d / "server.properties").write_text(self._server_properties(i, nodes))
            (d / "log4j2.yaml").write_text(self._log4j_config(i))
        state: dict[str, Any] = {"kafka_version": KAFKA_VERSION, "cluster_id": cluster_id,
                                 "state": "formatting", "created": time.time(),
                                 "watchdog_pid": None, "secure": self.secure, "nodes": nodes}
        self._save(state)
        self._format(cluster_id)
        return state

    def _format(self, cluster_id: str, timeout: float = 120.0) -> None:
        procs = []
        try:
            for i in range(self.nodes):
                scram = _scram_format_args() if self.secure else []
                cmd = _tool_command("kafka.tools.StorageTool",
                                    ["format", "-t", cluster_id, "-c",
                                     str(self.node_dir(i) / "server.properties"), *scram], ())
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
        pid = _spawn(self._jvm_command(i), out)
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
                self.nodes) and bool(state.get("secure")) == self.secure:
            status = self.status()
            if status.running:
                with contextlib.suppress(BrokerStartError):
                    self._wait_ready(time.monotonic() + 10.0, 10.0)
                    return self.bootstrap
        self._kill_leftovers()
        ensure_kafka_libs()
        deadline = time.monotonic() + timeout
        for attempt in range(3):
            state = self._prepare()
            try:
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
                self.nodes) or bool(state.get("secure")) != self.secure:
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
        return f"LocalKafka({str(self.state_dir)!r}, nodes={self.nodes}{secure})"


def running_bootstrap(state_dir: str | os.PathLike[str] | None = None) -> str | None:
    """The bootstrap address of the local cluster if it runs and answers, else None."""
    cluster = LocalKafka(state_dir or default_state_dir(), stop_with_owner=False)
    status = cluster.status()
    return status.bootstrap if status.running else None


# --------------------------------------------------------------------------------------
# Command line


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--dir", default=argparse.SUPPRESS,
                        help="the cluster's state directory (default: $AIOPRODUCER_BROKER_DIR "
                             f"or {default_state_dir()})")
    parser = argparse.ArgumentParser(
        prog="aioproducer broker",
        description=f"A local Apache Kafka {KAFKA_VERSION} (KRaft) cluster on 127.0.0.1.",
        parents=[common])
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("start", parents=[common],
                           help="start (if not running) and print the bootstrap address")
    start.add_argument("--nodes", type=int, default=None,
                       help="number of nodes (default 1, or as many as already run)")
    start.add_argument("--timeout", type=float, default=120.0)
    start.add_argument("--ttl", type=float, default=None,
                       help="stop the cluster by itself after this many seconds")
    start.add_argument("--secure", action="store_true",
                       help="the secured mode: TLS and SASL listeners, users, ACLs (see "
                            "LocalKafka)")
    stop = sub.add_parser("stop", parents=[common], help="stop every node")
    stop.add_argument("--timeout", type=float, default=30.0)
    sub.add_parser("status", parents=[common],
                   help="exit 0 if every node is up, 1 if only some, 3 if none")
    logs = sub.add_parser("logs", parents=[common], help="the end of the nodes' logs")
    logs.add_argument("node", type=int, nargs="?", default=None)
    logs.add_argument("--lines", type=int, default=60)
    for name, what in (("kill-node", "SIGKILL a node"), ("stop-node", "stop a node cleanly"),
                       ("start-node", "restart a node with its data")):
        p = sub.add_parser(name, parents=[common], help=what)
        p.add_argument("node", type=int)
        p.add_argument("--timeout", type=float, default=60.0)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    state_dir = Path(args.dir) if getattr(args, "dir", None) else default_state_dir()
    cluster = LocalKafka(state_dir, stop_with_owner=False)
    try:
        if args.command == "start":
            status = cluster.status()
            if status.running and args.nodes in (None, len(status.nodes)) and (
                    not args.secure or any(n.listeners for n in status.nodes)):
                print(status.bootstrap)
                return 0
            nodes = args.nodes or (len(status.nodes) if status.nodes else 1)
            cluster = LocalKafka(state_dir, nodes, stop_with_owner=False, ttl=args.ttl,
                                 secure=args.secure)
            started = time.monotonic()
            bootstrap = cluster.start(timeout=args.timeout)
            print(f"Kafka {KAFKA_VERSION}: {nodes} node(s) up in "
                  f"{time.monotonic() - started:.1f} s; logs in {state_dir}/node-*/server.log")
            if args.secure:
                print(cluster.status().describe())
                print(f"certificates in {cluster.tls.directory}; users "
                      + ", ".join(f"{u}/{p}" for u, p in SECURE_USERS.items()))
            print(bootstrap)
            return 0
        if args.command == "stop":
            if cluster.status().nodes:
                cluster.stop(timeout=args.timeout)
                print(f"stopped the Kafka cluster in {state_dir}")
            else:
                print(f"no Kafka cluster in {state_dir}")
            return 0
        if args.command == "status":
            status = cluster.status()
            print(status.describe())
            if status.running:
                print(status.bootstrap)
                return 0
            return 1 if status.degraded else 3
        if args.command == "logs":
            nodes = [args.node] if args.node is not None else list(range(cluster.node_count()))
            print("\n".join(cluster.log_tail(i, args.lines) for i in nodes))
            return 0
        if args.command == "kill-node":
            cluster.kill_node(args.node)
        elif args.command == "stop-node":
            cluster.stop_node(args.node, timeout=args.timeout)
        elif args.command == "start-node":
            cluster.start_node(args.node, timeout=args.timeout)
        print(cluster.status().describe())
        return 0
    except (BrokerStartError, KafkaLibsError, RuntimeError, IndexError) as exc:
        print(f"aioproducer broker: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
