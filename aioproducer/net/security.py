"""TLS and SASL for broker connections.

* :class:`Secret` keeps a password or token out of ``repr()``, logs and messages.
* :func:`make_ssl_context` builds the client's TLS context from files (hostname
  verification on unless turned off).
* SASL mechanisms are small state machines that turn server challenges into client
  responses; :class:`BrokerConnection` carries them in SaslAuthenticate requests:
  PLAIN (RFC 4616), SCRAM-SHA-256/512 (RFC 5802/7677, the server's signature is
  verified) and OAUTHBEARER (RFC 7628, with a token from an async provider).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import AuthenticationError, ConfigError

__all__ = [
    "SASL_MECHANISMS",
    "SECURITY_PROTOCOLS",
    "OAuthBearer",
    "Plain",
    "SaslMechanism",
    "Scram",
    "Secret",
    "Security",
    "make_ssl_context",
]

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")

# What an OAUTHBEARER token provider returns: a token, or (token, SASL extensions).
OAuthToken = str | tuple[str, Mapping[str, str]]
TokenProvider = Callable[[], Awaitable[OAuthToken]]


class Secret:
    """A password or token that never shows itself in ``repr()``/``str()``."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def get(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('******')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and hmac.compare_digest(
            self._value.encode(), other._value.encode())

    def __hash__(self) -> int:
        return hash(Secret)

    def __reduce__(self) -> tuple[Any, ...]:  # picklable (Spark ships configs)
        return (Secret, (self._value,))


def make_ssl_context(*, cafile: str | None, certfile: str | None, keyfile: str | None,
                     password: Secret | None, check_hostname: bool) -> ssl.SSLContext:
    """A client TLS context: the CA file (else the system's CAs), an optional client
    certificate (mutual TLS), hostname verification unless ``check_hostname`` is False."""
    try:
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=cafile)
        if certfile is not None:
            ctx.load_cert_chain(certfile, keyfile,
                                password=password.get() if password is not None else None)
    except (OSError, ssl.SSLError) as exc:
        # Never echo the password: name the files and the library's reason only.
        raise ConfigError(
            f"cannot load TLS files (ssl_cafile={cafile!r}, ssl_certfile={certfile!r}, "
            f"ssl_keyfile={keyfile!r}): {getattr(exc, 'strerror', None) or exc.args[-1]}"
        ) from None
    ctx.check_hostname = check_hostname
    if not check_hostname:
        ctx.verify_mode = ssl.CERT_REQUIRED  # the chain is still verified
    return ctx


class SaslMechanism:
    """One authentication exchange: ``await start()`` then ``respond(challenge)``
    until ``done``."""

    name: str = ""
    done: bool = False

    async def start(self) -> bytes:
        raise NotImplementedError

    def respond(self, challenge: bytes) -> bytes | None:
        """The next message for the server (None: nothing more to send)."""
        raise NotImplementedError


class Plain(SaslMechanism):
    name = "PLAIN"

    def __init__(self, username: str, password: Secret) -> None:
        self._username = username
        self._password = password

    async def start(self) -> bytes:
        self.done = True
        return b"\0" + self._username.encode() + b"\0" + self._password.get().encode()

    def respond(self, challenge: bytes) -> bytes | None:
        return None


def _scram_name(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


class Scram(SaslMechanism):
    """SCRAM-SHA-256 / SCRAM-SHA-512 (no channel binding, as Kafka does it)."""

    def __init__(self, mechanism: str, username: str, password: Secret, *,
                 nonce: str | None = None) -> None:
        if mechanism not in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            raise ConfigError(f"unknown SCRAM mechanism {mechanism!r}")
        self.name = mechanism
        self._hash = "sha256" if mechanism.endswith("256") else "sha512"
        self._password = password
        self._nonce = nonce or base64.b64encode(secrets.token_bytes(24)).decode()
        self._first_bare = f"n={_scram_name(username)},r={self._nonce}"
        self._server_signature: bytes | None = None
        self._step = 0

    async def start(self) -> bytes:
        self._step = 1
        return ("n,," + self._first_bare).encode()

    def _hmac(self, key: bytes, msg: bytes) -> bytes:
        return hmac.new(key, msg, self._hash).digest()

    def respond(self, challenge: bytes) -> bytes | None:
        if self._step == 1:
            self._step = 2
            return self._client_final(challenge)
        if self._step == 2:
            self._verify(challenge)
            self.done = True
            return None
        raise AuthenticationError(f"{self.name}: unexpected message from the server")

    def _client_final(self, server_first: bytes) -> bytes:
        attrs = _scram_attrs(server_first, self.name)
        if "e" in attrs:
            raise AuthenticationError(f"{self.name}: the server refused: {attrs['e']}")
        nonce, salt_b64, iterations = attrs.get("r"), attrs.get("s"), attrs.get("i")
        if not nonce or not salt_b64 or not iterations:
            raise AuthenticationError(f"{self.name}: malformed server-first message")
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise AuthenticationError(f"{self.name}: the server's nonce does not extend ours")
        try:
            salt = base64.b64decode(salt_b64, validate=True)
            rounds = int(iterations)
        except ValueError:
            raise AuthenticationError(f"{self.name}: malformed salt or iteration count"
                                      ) from None
        if not 4096 <= rounds <= 1_000_000:  # RFC 7677 minimum; bound the work
            raise AuthenticationError(
                f"{self.name}: iteration count {rounds} outside 4096..1000000")
        salted = hashlib.pbkdf2_hmac(self._hash, self._password.get().encode(), salt, rounds)
        client_key = self._hmac(salted, b"Client Key")
        stored_key = hashlib.new(self._hash, client_key).digest()
        without_proof = f"c=biws,r={nonce}"
        auth_message = ",".join((self._first_bare, server_first.decode("utf-8", "replace"),
                                 without_proof)).encode()
        signature = self._hmac(stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        server_key = self._hmac(salted, b"Server Key")
        self._server_signature = self._hmac(server_key, auth_message)
        return (without_proof + ",p=" + base64.b64encode(proof).decode()).encode()

    def _verify(self, server_final: bytes) -> None:
        attrs = _scram_attrs(server_final, self.name)
        if "e" in attrs:
            raise AuthenticationError(f"{self.name}: the server refused: {attrs['e']}")
        try:
            got = base64.b64decode(attrs.get("v", ""), validate=True)
        except ValueError:
            got = b""
        assert self._server_signature is not None
        if not got or not hmac.compare_digest(got, self._server_signature):
            raise AuthenticationError(
                f"{self.name}: the server's signature does not match; it does not know "
                "the password (or is not the server it claims to be)")


def _scram_attrs(message: bytes, name: str) -> dict[str, str]:
    try:
        text = message.decode("utf-8")
    except UnicodeDecodeError:
        raise AuthenticationError(f"{name}: the server's message is not UTF-8") from None
    out: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if sep and len(key) == 1:
            out.setdefault(key, value)
    return out


class OAuthBearer(SaslMechanism):
    """OAUTHBEARER: the token comes from ``provider()`` each time we authenticate."""

    name = "OAUTHBEARER"

    def __init__(self, provider: TokenProvider) -> None:
        self._provider = provider
        self._failed = False

    async def start(self) -> bytes:
        got = await self._provider()
        token, extensions = (got, {}) if isinstance(got, str) else got
        if not isinstance(token, str) or not token:
            raise AuthenticationError("OAUTHBEARER: the token provider returned no token")
        ext = "".join(f"{k}={v}\x01" for k, v in extensions.items())
        return f"n,,\x01auth=Bearer {token}\x01{ext}\x01".encode()

    def respond(self, challenge: bytes) -> bytes | None:
        if challenge and not self._failed:
            # RFC 7628: the server sent an error document; acknowledge it, and the
            # server then fails the exchange. Keep the reason for the error message.
            self._failed = True
            try:
                self.error_detail = json.loads(challenge.decode()).get("status", "")
            except (ValueError, AttributeError):
                self.error_detail = ""
            return b"\x01"
        self.done = True
        return None

    error_detail: str = ""


@dataclass(frozen=True)
class Security:
    """How to secure and authenticate connections (built from the producer config)."""

    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    sasl_mechanism: str | None = None
    username: str | None = None
    password: Secret | None = field(default=None, repr=False)
    token_provider: TokenProvider | None = field(default=None, repr=False)

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def mechanism(self) -> SaslMechanism:
        m = self.sasl_mechanism
        if m == "PLAIN":
            assert self.username is not None and self.password is not None
            return Plain(self.username, self.password)
        if m in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            assert self.username is not None and self.password is not None
            return Scram(m, self.username, self.password)
        if m == "OAUTHBEARER":
            assert self.token_provider is not None
            return OAuthBearer(self.token_provider)
        raise ConfigError(f"unsupported sasl_mechanism {m!r}")
