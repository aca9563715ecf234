"""A real Schema Registry for the tests: Apicurio Registry, fetched once from Maven Central
(``io.apicurio:apicurio-registry-app``'s ``-all.tar.gz`` distribution, a runnable Quarkus
application) into the cache directory next to the Kafka jars, started on 127.0.0.1 with
its in-memory storage. It serves Confluent's API under ``/apis/ccompat/v7``.

Apicurio 2.6 runs on Java 17 (the 3.x line needs Java 21). ``$AIOPRODUCER_SCHEMA_REGISTRY``
(a ccompat base URL) makes the tests use an existing registry instead.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tarfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from aioproducer.devbroker.jars import (
    KafkaLibsError,
    _file_lock,
    cache_root,
    java_executable,
)
from aioproducer.devbroker.process import _free_ports

APICURIO_VERSION = "2.6.13.Final"
_ARTIFACT = f"io.apicurio:apicurio-registry-app:{APICURIO_VERSION}:tar.gz:all"
_RUNNER = f"apicurio-registry-app-{APICURIO_VERSION}-runner.jar"
_FETCH_TIMEOUT = 900.0
_START_TIMEOUT = 120.0


def apicurio_dir() -> Path:
    """Where the unpacked distribution lives (under the cache root)."""
    return cache_root() / f"apicurio-registry-{APICURIO_VERSION}"


def ensure_apicurio() -> Path:
    """The runner jar of Apicurio Registry, fetched with ``mvn dependency:copy`` and
    unpacked on first use (a file lock serialises concurrent fetches)."""
    root = apicurio_dir()
    runner = root / "app" / _RUNNER
    if runner.is_file():
        return runner
    mvn = shutil.which("mvn")
    if mvn is None:
        raise KafkaLibsError("Maven ('mvn') is needed to fetch Apicurio Registry")
    root.mkdir(parents=True, exist_ok=True)
    with _file_lock(root / ".lock", _FETCH_TIMEOUT + 60):
        if runner.is_file():
            return runner
        download = root / "download"
        shutil.rmtree(download, ignore_errors=True)
        cmd = [mvn, "-B", "--no-transfer-progress", "dependency:copy",
               f"-Dartifact={_ARTIFACT}", f"-DoutputDirectory={download}"]
        done = subprocess.run(cmd, cwd=root, stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=_FETCH_TIMEOUT, check=False)
        archives = list(download.glob("*.tar.gz"))
        if done.returncode != 0 or len(archives) != 1:
            raise KafkaLibsError(f"fetching {_ARTIFACT} failed (exit {done.returncode}):\n"
                                 f"{done.stdout[-3000:]}")
        partial = root / "app.partial"
        shutil.rmtree(partial, ignore_errors=True)
        with tarfile.open(archives[0]) as tar:
            tar.extractall(partial, filter="data")
        shutil.rmtree(root / "app", ignore_errors=True)
        partial.rename(root / "app")
        shutil.rmtree(download, ignore_errors=True)
    return runner


def _get(url: str, timeout: float) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        exc.close()
        return exc.code
    except (OSError, ValueError):
        return 0


class Apicurio:
    """One Apicurio Registry process on 127.0.0.1 (in-memory storage)."""

    def __init__(self, state_dir: Path, port: int | None = None) -> None:
        self.state_dir = state_dir
        self.port = port or _free_ports(1)[0]
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = state_dir / "apicurio.log"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        """The Confluent-compatible API: what a Schema Registry client is given."""
        return f"{self.base_url}/apis/ccompat/v7"

    def start(self, timeout: float = _START_TIMEOUT) -> None:
        runner = ensure_apicurio()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        cmd = [java_executable(), "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
               "-Djava.awt.headless=true",
               f"-Dquarkus.http.port={self.port}", "-Dquarkus.http.host=127.0.0.1",
               "-Dquarkus.log.level=WARN",
               "-jar", str(runner)]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(cmd, cwd=self.state_dir, stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"Apicurio Registry exited ({self.proc.returncode}):\n"
                                   f"{self.log_tail()}")
            if _get(f"{self.url}/subjects", 2.0) == 200:
                return
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"Apicurio Registry not ready within {timeout:.0f} s:\n"
                           f"{self.log_tail()}")

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def stop(self, timeout: float = 20.0) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@contextlib.contextmanager
def running_registry(state_dir: Path) -> Iterator[str]:
    """The ccompat URL of a registry: ``$AIOPRODUCER_SCHEMA_REGISTRY`` or a fresh Apicurio
    started here (and stopped on exit)."""
    env = os.environ.get("AIOPRODUCER_SCHEMA_REGISTRY")
    if env:
        yield env.rstrip("/")
        return
    reg = Apicurio(state_dir)
    reg.start()
    try:
        yield reg.url
    finally:
        reg.stop()


@pytest.fixture(scope="session")
def schema_registry_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Schema Registry's Confluent-compatible URL, for the whole session."""
    with running_registry(tmp_path_factory.mktemp("apicurio")) as url:
        yield url
