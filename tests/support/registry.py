"""A real Schema Registry for the tests: Apicurio Registry, fetched once from Maven Central
(``io.apicurio:apicurio-registry-app``'s ``-all.tar.gz`` distribution, a runnable Quarkus
application) into the cache directory next to the Kafka jars, started on 127.0.0.1 with
its in-memory storage. It serves Confluent's API under ``/apis/ccompat/v7``.

Apicurio 2.6 runs on Java 17 (the 3.x line needs Java 21). ``$AIOPRODUCER_SCHEMA_REGISTRY``
(a ccompat base URL) makes the tests use an existing registry instead.

:func:`make_tls_files` and ``Apicurio(tls=...)`` serve the registry over HTTPS only
(Quarkus's own TLS) with a certificate of the test CA. (Client certificates cannot be
required: Apicurio's build fixes ``quarkus.http.ssl.client-auth`` to NONE.)

``Apicurio(auth=TokenIssuer(...))`` turns on the registry's authentication with HTTP
basic auth: Apicurio 2.6 has no user list of its own, it trades the user and password
for a token at an OpenID Connect server (the client credentials grant) and checks the
token's signature against that server's keys. :class:`TokenIssuer` is that server,
reduced to what Apicurio asks of Keycloak (discovery, keys, the token endpoint); the
registry's checks are its own.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import ssl
import subprocess
import tarfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

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


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class TokenIssuer:
    """An OpenID Connect server on 127.0.0.1 for Apicurio's basic auth: discovery, the
    signing key (JWKS) and a token endpoint that grants client credentials to
    ``clients`` (``{user: password}``), issuing RS256 tokens. ``grants`` lists the users
    it issued tokens to, ``refusals`` those it refused."""

    def __init__(self, clients: dict[str, str], realm: str = "aioproducer") -> None:
        from cryptography.hazmat.primitives.asymmetric import rsa

        self.clients = dict(clients)
        self.realm = realm
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.grants: list[str] = []
        self.refusals: list[str] = []
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _json(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                path = self.path.rstrip("/")
                if path == urllib.parse.urlparse(issuer.issuer).path \
                        + "/.well-known/openid-configuration":
                    self._json(200, issuer.discovery())
                elif path.endswith("/protocol/openid-connect/certs"):
                    self._json(200, issuer.jwks())
                else:
                    self._json(404, {"error": "not_found"})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                form = urllib.parse.parse_qs(self.rfile.read(length).decode())
                user = form.get("client_id", [""])[0]
                password = form.get("client_secret", [""])[0]
                auth = self.headers.get("Authorization", "")
                if auth.startswith("Basic "):
                    user, _, password = base64.b64decode(auth[6:]).decode().partition(":")
                if not self.path.rstrip("/").endswith("/protocol/openid-connect/token") \
                        or form.get("grant_type") != ["client_credentials"] \
                        or issuer.clients.get(user) != password:
                    issuer.refusals.append(user)
                    self._json(401, {"error": "unauthorized_client"})
                    return
                issuer.grants.append(user)
                self._json(200, {"access_token": issuer.token(user), "token_type": "Bearer",
                                 "expires_in": 300})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True,
                                        name="oidc-token-issuer")

    @property
    def base_url(self) -> str:
        """What Apicurio calls the Keycloak URL."""
        return f"http://127.0.0.1:{self.server.server_address[1]}/auth"

    @property
    def issuer(self) -> str:
        return f"{self.base_url}/realms/{self.realm}"

    def discovery(self) -> dict[str, Any]:
        i = f"{self.issuer}/protocol/openid-connect"
        return {"issuer": self.issuer, "jwks_uri": f"{i}/certs", "token_endpoint": f"{i}/token",
                "authorization_endpoint": f"{i}/auth", "userinfo_endpoint": f"{i}/userinfo",
                "id_token_signing_alg_values_supported": ["RS256"]}

    def jwks(self) -> dict[str, Any]:
        pub = self.key.public_key().public_numbers()
        return {"keys": [{"kty": "RSA", "kid": "test", "use": "sig", "alg": "RS256",
                          "n": _b64url(pub.n.to_bytes((pub.n.bit_length() + 7) // 8, "big")),
                          "e": _b64url(pub.e.to_bytes(3, "big"))}]}

    def token(self, user: str) -> str:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding

        now = int(time.time())
        header = {"alg": "RS256", "typ": "JWT", "kid": "test"}
        claims = {"iss": self.issuer, "sub": user, "azp": user, "preferred_username": user,
                  "typ": "Bearer", "iat": now, "exp": now + 300}
        signing = ".".join(_b64url(json.dumps(part).encode()) for part in (header, claims))
        signature = self.key.sign(signing.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing}.{_b64url(signature)}"

    def start(self) -> TokenIssuer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


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
                 tls: TLSFiles | None = None, auth: TokenIssuer | None = None) -> None:
        self.state_dir = state_dir
        self.port = port or _free_ports(1)[0]
        self.tls = tls
        self.auth = auth
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
        env = None
        if self.auth is not None:  # Apicurio's variables for its Keycloak set-up
            env = dict(os.environ, REGISTRY_AUTH_ENABLED="true",
                       CLIENT_CREDENTIALS_BASIC_AUTH_ENABLED="true",
                       KEYCLOAK_URL=self.auth.base_url, KEYCLOAK_REALM=self.auth.realm)
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(cmd, cwd=self.state_dir, stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True, env=env)
        deadline = time.monotonic() + timeout
        context = None if self.tls is None else self.tls.client_context()
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"Apicurio Registry exited ({self.proc.returncode}):\n"
                                   f"{self.log_tail()}")
            # With authentication on, an anonymous request is answered 401 once it runs.
            if _get(f"{self.url}/subjects", 2.0, context) == (401 if self.auth else 200):
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


REGISTRY_USERS = {"alice": "s3cret-Pa55"}


@pytest.fixture(scope="session")
def auth_schema_registry(tmp_path_factory: pytest.TempPathFactory
                         ) -> Iterator[tuple[str, TokenIssuer]]:
    """A third Apicurio Registry, authentication on, HTTP basic auth for the users of
    ``REGISTRY_USERS``: its ccompat URL and its token issuer. Started on first use."""
    issuer = TokenIssuer(REGISTRY_USERS).start()
    reg = Apicurio(tmp_path_factory.mktemp("apicurio-auth"), auth=issuer)
    try:
        reg.start()
        yield reg.url, issuer
    finally:
        reg.stop()
        issuer.stop()
