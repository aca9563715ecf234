"""SASL authentication of a broker connection, and KIP-368 re-authentication.

* The mechanisms are small state machines that turn server challenges into client
  responses: PLAIN (RFC 4616), SCRAM-SHA-256/512 (RFC 5802/7677, the server's
  signature is verified) and OAUTHBEARER (RFC 7628, with a token from an async
  provider). :func:`new_mechanism` picks one from the :class:`Security` settings.
* :class:`SaslAuthenticator` runs them on one connection: SaslHandshake, then
  SaslAuthenticate round trips; and, when the broker gives the session a lifetime,
  authenticates again before it expires, holding new writes until the requests in
  flight are answered (the broker takes SaslHandshake only between requests).

The connection is reached through :class:`SaslChannel`, the few things the
authenticator needs from it (:class:`~aioproducer.net.connection.BrokerConnection`
provides them).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import logging
import random
import secrets
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar, cast

from kio.schema.errors import ErrorCode
from kio.static.protocol import RequestPayload, ResponsePayload

from ..errors import AuthenticationError, ConfigError, for_code
from .protocol import request_module, response_type

if TYPE_CHECKING:
    import kio.schema.sasl_handshake.v1.request as _sh1_req
    import kio.schema.sasl_handshake.v1.response as _sh1_resp

    from ..types import TokenProvider
    from .security import Secret, Security

__all__ = [
    "OAuthBearer",
    "Plain",
    "SaslAuthenticator",
    "SaslChannel",
    "SaslMechanism",
    "Scram",
    "new_mechanism",
]

log = logging.getLogger("aioproducer.net")

R = TypeVar("R", bound=ResponsePayload)

SASL_HANDSHAKE_KEY: Final = 17
SASL_AUTHENTICATE_KEY: Final = 36
_UNSUPPORTED_MECHANISM: Final = int(ErrorCode.unsupported_sasl_mechanism)
#: Re-authenticate at this fraction of the session lifetime (like the Java client).
_REAUTH_AT: Final = (0.85, 0.95)


# -- mechanisms ------------------------------------------------------------------------


class SaslMechanism:
    """One authentication exchange: ``await start()`` then ``respond(challenge)``
    until ``done``."""

    name: str = ""
    done: bool = False
    error_detail: str = ""
    """What the server said about a failure, when the mechanism learned it."""

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


def new_mechanism(security: Security) -> SaslMechanism:
    """A fresh exchange of the configured ``sasl_mechanism`` (one per authentication)."""
    m = security.sasl_mechanism
    if m == "PLAIN":
        assert security.username is not None and security.password is not None
        return Plain(security.username, security.password)
    if m in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        assert security.username is not None and security.password is not None
        return Scram(m, security.username, security.password)
    if m == "OAUTHBEARER":
        assert security.token_provider is not None
        return OAuthBearer(security.token_provider)
    raise ConfigError(f"unsupported sasl_mechanism {m!r}")


# -- running them on a connection ------------------------------------------------------


class SaslChannel(Protocol):
    """What :class:`SaslAuthenticator` needs from its connection."""

    @property
    def in_flight(self) -> int:
        """Requests sent and not yet answered."""
        ...

    @property
    def is_connected(self) -> bool: ...

    def version_for(self, api_key: int, lo: int, hi: int) -> int: ...

    async def request(self, req: RequestPayload, response_type: type[R], *,
                      timeout_ms: int | None = None) -> R: ...

    def hold_writes(self) -> None:
        """Stop taking new writes (``can_write`` False) until :meth:`release_writes`."""
        ...

    def release_writes(self) -> None:
        """Take writes again (unless the transport's buffer is full) and say so."""
        ...

    def close(self, reason: str = ..., cause: BaseException | None = None) -> None: ...


class SaslAuthenticator:
    """SASL on one connection: :meth:`authenticate` once connected, then KIP-368
    re-authentication whenever the broker's session is about to expire.

    The connection calls:

    * :meth:`authenticate` after version negotiation (raises
      :class:`AuthenticationError`, not retriable, when the broker refuses);
    * :meth:`wait_turn` before writing a request with ``request()``: it waits while
      a re-authentication is due or running (not for the re-authentication's own
      requests);
    * :meth:`connection_idle` when the last response in flight has arrived: a due
      re-authentication starts then;
    * :meth:`close` when the connection closes.

    While a re-authentication is due, :attr:`reauth_due` is True and the connection's
    writes are held (:meth:`SaslChannel.hold_writes`); a failed re-authentication
    closes the connection.
    """

    def __init__(self, channel: SaslChannel, security: Security) -> None:
        self._channel = channel
        self._security = security
        self.reauthentications = 0
        """Successful re-authentications."""
        self.reauth_due = False
        """A re-authentication is due or running: writes are held."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None
        self._gate: asyncio.Future[None] | None = None

    async def authenticate(self) -> None:
        """SaslHandshake, then SaslAuthenticate round trips until the mechanism is done;
        schedules the re-authentication if the broker gives the session a lifetime.

        Raises :class:`AuthenticationError` (not retriable) when the broker refuses.
        """
        conn = self._channel
        self._loop = asyncio.get_running_loop()
        mech = new_mechanism(self._security)
        conn.version_for(SASL_HANDSHAKE_KEY, 1, 1)
        # kio's modules of the versions used, imported on first use.
        hs_req: type[_sh1_req.SaslHandshakeRequest] = request_module(
            SASL_HANDSHAKE_KEY, 1).SaslHandshakeRequest
        hs_resp = cast("type[_sh1_resp.SaslHandshakeResponse]",
                       response_type(SASL_HANDSHAKE_KEY, 1))
        hs = await conn.request(hs_req(mechanism=mech.name), hs_resp)
        code = int(hs.error_code)
        if code == _UNSUPPORTED_MECHANISM:
            raise AuthenticationError(
                f"{conn} does not enable SASL mechanism {mech.name}; it offers "
                f"{', '.join(hs.mechanisms) or 'none'}")
        if code != 0:
            raise AuthenticationError(f"SaslHandshake with {conn} failed: "
                                      f"{for_code(code)}")
        version = conn.version_for(SASL_AUTHENTICATE_KEY, 0, 2)
        req_t: Any = request_module(SASL_AUTHENTICATE_KEY, version).SaslAuthenticateRequest
        resp_t: Any = response_type(SASL_AUTHENTICATE_KEY, version)
        message: bytes | None = await mech.start()
        lifetime_ms = 0
        while message is not None:
            resp = await conn.request(req_t(auth_bytes=message), resp_t)
            code = int(resp.error_code)
            if code != 0:
                detail = resp.error_message or for_code(code).args[0]
                if mech.error_detail:
                    detail += f" ({mech.error_detail})"
                raise AuthenticationError(
                    f"SASL {mech.name} authentication with {conn} failed: {detail}")
            if version >= 1:
                life = resp.session_lifetime
                lifetime_ms = int(life.total_seconds() * 1000) if life is not None else 0
            message = mech.respond(bytes(resp.auth_bytes))
        log.debug("%s: authenticated with SASL %s (session lifetime %d ms)", conn,
                  mech.name, lifetime_ms)
        if lifetime_ms > 0:
            self._schedule(lifetime_ms)

    async def wait_turn(self) -> None:
        """Wait while a re-authentication is due or running (returns at once for the
        re-authentication's own requests, and when the connection closes)."""
        gate = self._gate
        if gate is not None and asyncio.current_task() is not self._task:
            await asyncio.shield(gate)

    def connection_idle(self) -> None:
        """Nothing is in flight: start the re-authentication if it is due."""
        if not self.reauth_due or self._task is not None or self._channel.in_flight:
            return
        assert self._loop is not None
        self._task = self._loop.create_task(self._reauthenticate())

    def close(self) -> None:
        """The connection closed: no more re-authentication; waiters go on (and find
        the connection closed)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._open_gate()

    # -- internals ---------------------------------------------------------------------

    def _schedule(self, lifetime_ms: int) -> None:
        assert self._loop is not None
        delay = lifetime_ms / 1000.0 * random.uniform(*_REAUTH_AT)
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._loop.call_later(delay, self._on_due)

    def _on_due(self) -> None:
        """Hold new writes; re-authenticate once the requests in flight are answered."""
        self._timer = None
        if not self._channel.is_connected:
            return
        self.reauth_due = True
        self._channel.hold_writes()
        assert self._loop is not None
        if self._gate is None:
            self._gate = self._loop.create_future()
        self.connection_idle()

    async def _reauthenticate(self) -> None:
        try:
            await self.authenticate()
        except Exception as exc:
            log.warning("re-authentication with %s failed: %s", self._channel, exc)
            self._channel.close(f"re-authentication failed: {exc}", exc)
        else:
            self.reauthentications += 1
        finally:
            self._task = None
            self.reauth_due = False
            self._open_gate()
        self._channel.release_writes()

    def _open_gate(self) -> None:
        gate, self._gate = self._gate, None
        if gate is not None and not gate.done():
            gate.set_result(None)
