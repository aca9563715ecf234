"""A real Schema Registry for the tests: Apicurio Registry, fetched once from Maven Central
(``io.apicurio:apicurio-registry-app``'s ``-all.tar.gz`` distribution, a runnable Quarkus
application) into the cache directory next to the Kafka jars, started on 127.0.0.1 with
its in-memory storage. It serves Confluent's API under ``/apis/ccompat/v7``.

Apicurio 2.6 runs on Java 17 (the 3.x line needs Java 21). ``$AIOPRODUCER_SCHEMA_REGISTRY``
(a ccompat base URL) makes the tests use an existing registry instead.

:func:`make_tls_files` and ``Apicurio(tls=...)`` serve the registry over HTTPS only
(Quarkus's own TLS) with a certificate of the test CA. (Client certificates cannot be
required: Apicurio's build fixes ``quarkus.http.ssl.client-auth`` to NONE.)
"""

from __future__ import annotations

import contextlib
import os
import shutil
import ssl
import subprocess
import tarfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
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


@dataclass(frozen=True)
class TLSFiles:
    """A test CA, the registry's certificate (for 127.0.0.1) and a client certificate,
    PEM files."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path

    def client_context(self, with_cert: bool = True) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca))
        if with_cert:
            ctx.load_cert_chain(str(self.client_cert), str(self.client_key))
        return ctx


def make_tls_files(directory: Path) -> TLSFiles:
    """Make the CA and certificates with ``openssl``."""
    directory.mkdir(parents=True, exist_ok=True)
    d = directory

    def run(*cmd: str) -> None:
        subprocess.run(cmd, cwd=d, check=True, capture_output=True, timeout=120)

    run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        "-subj", "/CN=aioproducer test CA", "-keyout", "ca.key", "-out", "ca.pem")
    for name, cn, ext in (("server", "127.0.0.1", "subjectAltName=IP:127.0.0.1\n"
                                                  "extendedKeyUsage=serverAuth\n"),
                          ("client", "registry-client", "extendedKeyUsage=clientAuth\n")):
        (d / f"{name}.ext").write_text(ext)
        run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={cn}",
            "-keyout", f"{name}.key", "-out", f"{name}.csr")
        run("openssl", "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey",
            "ca.key", "-CAcreateserial", "-days", "2", "-extfile", f"{name}.ext",
            "-out", f"{name}.pem")
    return TLSFiles(d / "ca.pem", d / "server.pem", d / "server.key", d / "client.pem",
                    d / "client.key")


def _get(url: str, timeout: float, context: ssl.SSLContext | None = None) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=context) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        exc.close()
        return exc.code
    except (OSError, ValueError):
        return 0


class Apicurio:
    """One Apicurio Registry process on 127.0.0.1 (in-memory storage)."""

    def __init__(self, state_dir: Path, port: int | None = None,
                 tls: TLSFiles | None = None) -> None:
        self.state_dir = state_dir
        self.port = port or _free_ports(1)[0]
        self.tls = tls
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = state_dir / "apicurio.log"

    @property
    def base_url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def _tls_options(self) -> list[str]:
        if self.tls is None:
            return [f"-Dquarkus.http.port={self.port}"]
        t = self.tls
        # HTTPS only (the plain port is not opened). Apicurio's build fixes
        # quarkus.http.ssl.client-auth to NONE: it cannot ask for a client certificate.
        return [f"-Dquarkus.http.port={_free_ports(1)[0]}",
                f"-Dquarkus.http.ssl-port={self.port}",
                "-Dquarkus.http.insecure-requests=disabled",
                f"-Dquarkus.http.ssl.certificate.files={t.server_cert}",
                f"-Dquarkus.http.ssl.certificate.key-files={t.server_key}"]

    @property
    def url(self) -> str:
        """The Confluent-compatible API: what a Schema Registry client is given."""
        return f"{self.base_url}/apis/ccompat/v7"

    def start(self, timeout: float = _START_TIMEOUT) -> None:
        runner = ensure_apicurio()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        cmd = [java_executable(), "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
               "-Djava.awt.headless=true", *self._tls_options(),
               "-Dquarkus.http.host=127.0.0.1", "-Dquarkus.log.level=WARN",
               "-jar", str(runner)]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(cmd, cwd=self.state_dir, stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        deadline = time.monotonic() + timeout
        context = None if self.tls is None else self.tls.client_context()
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"Apicurio Registry exited ({self.proc.returncode}):\n"
                                   f"{self.log_tail()}")
            if _get(f"{self.url}/subjects", 2.0, context) == 200:
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


@pytest.fixture(scope="session")
def tls_schema_registry(tmp_path_factory: pytest.TempPathFactory
                        ) -> Iterator[tuple[str, TLSFiles]]:
    """A second Apicurio Registry, HTTPS only (a certificate of a test CA): its ccompat
    URL and the certificate files. Started on first use."""
    root = tmp_path_factory.mktemp("apicurio-tls")
    tls = make_tls_files(root / "tls")
    reg = Apicurio(root / "state", tls=tls)
    reg.start()
    try:
        yield reg.url, tls
    finally:
        reg.stop()
