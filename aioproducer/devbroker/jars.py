"""The Kafka jars: fetched once from Maven Central with ``mvn``
(``dependency:copy-dependencies``) into a cache directory, and the ``java`` command
lines built on them (``java_classpath``, ``run_java``).

``KAFKA_VERSION`` is the broker the project develops and tests against; the functions
that take a ``version`` also fetch and run the older releases of ``KAFKA_VERSIONS``
(the broker compatibility tests). Kafka 3.x logs through log4j 1 (reload4j, configured
by a ``.properties`` file), 4.x through log4j 2 (a YAML file): ``log4j_jvm_option``
and ``log4j_config`` pick the right one."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from .common import _tail

KAFKA_VERSION = "4.3.1"
# The releases the broker compatibility tests run (tests/broker/test_broker_versions.py),
# oldest first, the newest patch of each line: 2.8 is the oldest broker the producer
# supports (the first with Produce v9; it runs with ZooKeeper here), 3.7 and 3.9 the
# last 3.x lines (KRaft), then the 4.x the project develops on (docs/install.md).
KAFKA_VERSIONS = ("2.8.2", "3.7.2", "3.9.2", KAFKA_VERSION)
SCALA_VERSION = "2.13"
_LOG4J_VERSION = "2.24.3"
_SLF4J_VERSION = "2.0.17"
# Kafka 3.x: slf4j 1.7 bound to reload4j (log4j 1), as Kafka's own distribution ships.
_RELOAD4J_VERSION = "1.2.25"
_SLF4J1_VERSION = "1.7.36"

_MARKER = ".complete"
_MVN_TIMEOUT = 900.0


class KafkaLibsError(RuntimeError):
    """The Kafka jars could not be fetched (no ``mvn``, no network, a Maven error...)."""


# --------------------------------------------------------------------------------------
# Where things live


def _source_checkout() -> Path | None:
    """The repository root when this module is imported from a source checkout."""
    root = Path(__file__).resolve().parent.parent.parent
    return root if (root / "pyproject.toml").is_file() else None


def cache_root() -> Path:
    """The cache root: ``$AIOPRODUCER_CACHE_DIR``, else ``<checkout>/.cache`` in a source
    checkout, else ``~/.cache/aioproducer``."""
    env = os.environ.get("AIOPRODUCER_CACHE_DIR")
    if env:
        root = Path(env).expanduser()
    else:
        checkout = _source_checkout()
        root = checkout / ".cache" if checkout else Path.home() / ".cache" / "aioproducer"
    return root.absolute()


def kafka_major(version: str | None = None) -> int:
    """The major version of ``version`` (default ``KAFKA_VERSION``): 2, 3 or 4."""
    return int((version or KAFKA_VERSION).split(".", 1)[0])


def cache_dir(version: str | None = None) -> Path:
    """Where the Kafka jars are kept (``kafka-<version>/`` under ``cache_root()``)."""
    return cache_root() / f"kafka-{version or KAFKA_VERSION}"


# --------------------------------------------------------------------------------------
# The jars


Artifact = tuple[str, str, str]
"""A Maven artifact: (groupId, artifactId, version)."""

def _artifacts(version: str) -> tuple[Artifact, ...]:
    kafka = (("org.apache.kafka", f"kafka_{SCALA_VERSION}", version),
             ("org.apache.kafka", "kafka-tools", version))
    if kafka_major(version) >= 4:
        return (*kafka,
                ("org.apache.logging.log4j", "log4j-slf4j2-impl", _LOG4J_VERSION),
                ("org.apache.logging.log4j", "log4j-core", _LOG4J_VERSION),
                ("org.slf4j", "slf4j-api", _SLF4J_VERSION))
    return (*kafka,
            ("ch.qos.reload4j", "reload4j", _RELOAD4J_VERSION),
            ("org.slf4j", "slf4j-reload4j", _SLF4J1_VERSION),
            ("org.slf4j", "slf4j-api", _SLF4J1_VERSION))


_ARTIFACTS = _artifacts(KAFKA_VERSION)


def _keep_jar(jar: Path) -> bool:
    """One slf4j binding, reload4j's: ZooKeeper's logback (Kafka 3.x) and Kafka 2.x's
    own log4j 1.2.17 and its binding are left out."""
    return not jar.name.startswith(("logback-", "slf4j-log4j12-", "log4j-1."))


def maven_pom(project: Artifact, dependencies: Sequence[Artifact]) -> str:
    """The ``pom.xml`` of a project (``packaging pom``) that only depends on
    ``dependencies``."""
    group_id, artifact_id, version = project
    deps = "".join(f"""    <dependency>
      <groupId>{g}</groupId>
      <artifactId>{a}</artifactId>
      <version>{v}</version>
    </dependency>
""" for g, a, v in dependencies)
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>{group_id}</groupId>
  <artifactId>{artifact_id}</artifactId>
  <version>{version}</version>
  <packaging>pom</packaging>
  <dependencies>
{deps}  </dependencies>
</project>
"""


def _required_jars(version: str) -> tuple[str, ...]:
    return (f"kafka_{SCALA_VERSION}-{version}.jar", f"kafka-tools-{version}.jar")


_REQUIRED_JARS = _required_jars(KAFKA_VERSION)


def _libs_complete(root: Path, version: str = KAFKA_VERSION) -> bool:
    try:
        marker = json.loads((root / _MARKER).read_text())
        jars = {p.name for p in (root / "libs").glob("*.jar")}
    except (OSError, ValueError):
        return False
    return (isinstance(marker, dict) and marker.get("version") == version
            and len(jars) == marker.get("jars")
            and all(j in jars for j in _required_jars(version)))


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


def fetch_maven_artifacts(root: Path, artifacts: Sequence[Artifact], *, what: str,
                          project: Artifact = ("aioproducer", "maven-fetch", "1"),
                          required: Sequence[str] = (),
                          keep: Callable[[Path], bool] | None = None,
                          log_prefix: str = "aioproducer",
                          timeout: float = _MVN_TIMEOUT) -> list[str]:
    """Fetch ``artifacts`` and their runtime dependencies from Maven Central with ``mvn``
    (``dependency:copy-dependencies`` of ``<root>/pom.xml``) into ``<root>/libs``, which
    is replaced only once the fetch has succeeded; returns the names of its jars.

    ``what`` names the artifacts in messages; ``required`` are jar names that must be
    among those fetched; ``keep`` (a jar's path -> bool) deletes the jars it refuses
    before they go to ``libs``. Raises ``KafkaLibsError`` (no ``mvn``, a Maven error, a
    time-out, a required jar missing). Neither locks ``root`` nor marks ``libs`` complete:
    the caller does (see ``ensure_kafka_libs``).
    """
    mvn = shutil.which("mvn")
    if mvn is None:
        raise KafkaLibsError(
            f"Maven ('mvn') is needed to fetch {what} and is not on PATH "
            "(on Debian/Ubuntu: apt-get install maven openjdk-17-jre-headless)")
    root.mkdir(parents=True, exist_ok=True)
    (root / "pom.xml").write_text(maven_pom(project, artifacts))
    libs = root / "libs"
    partial = root / "libs.partial"
    shutil.rmtree(partial, ignore_errors=True)
    print(f"{log_prefix}: fetching {what} with Maven into {root} (once)...",
          file=sys.stderr, flush=True)
    started = time.monotonic()
    cmd = [mvn, "-B", "--no-transfer-progress", "-f", str(root / "pom.xml"),
           "dependency:copy-dependencies", f"-DoutputDirectory={partial}",
           "-DincludeScope=runtime"]
    try:
        done = subprocess.run(cmd, cwd=root, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        out = exc.output if isinstance(exc.output, str) else ""
        raise KafkaLibsError(f"mvn did not finish in {timeout:.0f} s:\n"
                             f"{_tail(out, 40)}") from None
    jars = sorted(p.name for p in partial.glob("*.jar")) if partial.is_dir() else []
    missing = [j for j in required if j not in jars]
    if done.returncode != 0 or missing:
        raise KafkaLibsError(
            f"fetching {what} with Maven failed (exit "
            f"{done.returncode}{', missing ' + ', '.join(missing) if missing else ''}):\n"
            f"$ {shlex.join(cmd)}\n{_tail(done.stdout, 40)}")
    if keep is not None:
        for jar in partial.glob("*.jar"):
            if not keep(jar):
                jar.unlink()
        jars = sorted(p.name for p in partial.glob("*.jar"))
    shutil.rmtree(libs, ignore_errors=True)
    partial.rename(libs)
    shutil.rmtree(root / "target", ignore_errors=True)
    print(f"{log_prefix}: fetched {len(jars)} jars in {time.monotonic() - started:.1f} s",
          file=sys.stderr, flush=True)
    return jars


def ensure_kafka_libs(version: str | None = None) -> Path:
    """The directory of Kafka's jars (and its dependencies), fetched with ``mvn`` if needed;
    ``version`` is a Kafka release (default ``KAFKA_VERSION``; 3.x and 4.x work).

    Safe to call from several processes at once: a file lock makes one of them fetch
    while the others wait, and a marker file written last says the directory is complete.
    """
    version = version or KAFKA_VERSION
    root = cache_dir(version)
    libs = root / "libs"
    if _libs_complete(root, version):
        return libs
    root.mkdir(parents=True, exist_ok=True)
    with _file_lock(root / ".lock", _MVN_TIMEOUT + 60):
        if _libs_complete(root, version):
            return libs
        jars = fetch_maven_artifacts(
            root, _artifacts(version), what=f"Apache Kafka {version}",
            project=("aioproducer.devbroker", "kafka-dist", version),
            required=_required_jars(version), keep=_keep_jar)
        tmp = root / (_MARKER + ".tmp")
        tmp.write_text(json.dumps({"version": version, "jars": len(jars)}))
        tmp.replace(root / _MARKER)
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


def java_classpath(version: str | None = None) -> str:
    """A ``-cp`` value holding Kafka, its tools and their dependencies."""
    return str(ensure_kafka_libs(version) / "*")


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


def log4j1_properties(file: str | os.PathLike[str] | None, *, level: str = "INFO",
                      quiet: Sequence[str] = ()) -> str:
    """Kafka 3.x's logging configuration (log4j 1 properties, read by reload4j):
    everything from ``level`` into ``file`` (stderr when None), the ``quiet`` loggers
    from WARN. Kafka 4.x reads log4j 2's YAML instead (see ``log4j_jvm_option``)."""
    if file is None:
        out = ("log4j.appender.out=org.apache.log4j.ConsoleAppender\n"
               "log4j.appender.out.Target=System.err\n")
    else:
        out = ("log4j.appender.out=org.apache.log4j.FileAppender\n"
               f"log4j.appender.out.File={os.fspath(file)}\n"
               "log4j.appender.out.Append=true\n")
    return (f"log4j.rootLogger={level}, out\n{out}"
            "log4j.appender.out.layout=org.apache.log4j.PatternLayout\n"
            "log4j.appender.out.layout.ConversionPattern=[%d] %p %m (%c)%n\n"
            + "".join(f"log4j.logger.{name}=WARN\n" for name in quiet))


def log4j_file_name(version: str | None) -> str:
    """``log4j2.yaml`` for Kafka 4, ``log4j.properties`` for Kafka 3."""
    return "log4j2.yaml" if kafka_major(version) >= 4 else "log4j.properties"


def log4j_jvm_option(version: str | None, path: Path) -> str:
    """The JVM option that points Kafka ``version``'s logging at the file ``path``."""
    if kafka_major(version) >= 4:
        return f"-Dlog4j2.configurationFile={path}"
    return f"-Dlog4j.configuration={path.as_uri()}"


def _tools_log4j_config(version: str | None = None) -> Path:
    text = (_TOOLS_LOG4J if kafka_major(version) >= 4
            else log4j1_properties(None, level="WARN"))
    path = cache_dir(version) / f"tools-{log4j_file_name(version)}"
    if not path.is_file() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(text)
        tmp.replace(path)
    return path


def _tool_command(target: str, args: Sequence[str], jvm_args: Sequence[str],
                  version: str | None = None) -> list[str]:
    return [java_executable(), "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            "-Djava.awt.headless=true", log4j_jvm_option(version, _tools_log4j_config(version)),
            *jvm_args, "-cp", java_classpath(version), target, *args]


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
