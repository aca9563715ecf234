"""SASL mechanisms and secret handling, without a broker (the broker tests are in
test_security.py): SCRAM against the RFC 7677 test vector, tampered server messages,
PLAIN and OAUTHBEARER messages, secrets kept out of repr(), and the re-authentication
schedule of :class:`SaslAuthenticator` on a scripted connection."""

from __future__ import annotations

import ast
import asyncio
import datetime
import pathlib
import pickle
from typing import Any

import kio.schema.sasl_handshake.v1.response as sasl_handshake_v1
import pytest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i64Timedelta

import aioproducer.config
from aioproducer import Producer, ProducerConfig
from aioproducer.errors import AuthenticationError, ConfigError
from aioproducer.net.sasl import OAuthBearer, Plain, SaslAuthenticator, Scram
from aioproducer.net.security import Secret, Security, security_from_config

pytestmark = pytest.mark.asyncio

SERVER_FIRST = (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")


async def test_scram_sha256_rfc7677_vector() -> None:
    scram = Scram("SCRAM-SHA-256", "user", Secret("pencil"), nonce="rOprNGfwEbeRWgbNEkqO")
    assert await scram.start() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    final = scram.respond(SERVER_FIRST)
    assert final == (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                     b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert scram.respond(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=") is None
    assert scram.done


async def test_scram_rejects_a_server_that_does_not_know_the_password() -> None:
    scram = Scram("SCRAM-SHA-256", "user", Secret("pencil"), nonce="rOprNGfwEbeRWgbNEkqO")
    await scram.start()
    scram.respond(SERVER_FIRST)
    with pytest.raises(AuthenticationError, match="signature does not match"):
        scram.respond(b"v=AAAATRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")


@pytest.mark.parametrize("server_first, match", [
    (b"r=someoneelse,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "nonce"),
    (b"r=abc123,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "nonce"),  # not extended
    (b"r=abc123xyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=10", "iteration"),
    (b"r=abc123xyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=99999999", "iteration"),
    (b"r=abc123xyz,s=***,i=4096", "salt"),
    (b"r=abc123xyz,i=4096", "malformed"),
    (b"e=unknown-user", "refused"),
    (b"\xff\xfe", "UTF-8"),
])
async def test_scram_rejects_bad_server_first(server_first: bytes, match: str) -> None:
    scram = Scram("SCRAM-SHA-512", "u", Secret("p"), nonce="abc123")
    await scram.start()
    with pytest.raises(AuthenticationError, match=match):
        scram.respond(server_first)


async def test_scram_escapes_user_names() -> None:
    scram = Scram("SCRAM-SHA-512", "a=b,c", Secret("p"), nonce="n")
    assert await scram.start() == b"n,,n=a=3Db=2Cc,r=n"


async def test_plain_and_oauthbearer_messages() -> None:
    assert await Plain("alice", Secret("pw")).start() == b"\0alice\0pw"

    async def token() -> tuple[str, dict[str, str]]:
        return "tok.en.", {"traceId": "42"}

    oauth = OAuthBearer(token)
    assert await oauth.start() == b"n,,\x01auth=Bearer tok.en.\x01traceId=42\x01\x01"
    # A server error document is acknowledged with 0x01, then the server fails us.
    assert oauth.respond(b'{"status":"invalid_token"}') == b"\x01"
    assert oauth.error_detail == "invalid_token"


async def test_secrets_stay_out_of_repr_and_pickle_round_trips() -> None:
    s = Secret("hunter2")
    assert "hunter2" not in repr(s) and "hunter2" not in str(s) and "hunter2" not in f"{s}"
    assert pickle.loads(pickle.dumps(s)).get() == "hunter2"

    async def provider() -> str:
        return "secret-token"

    config = ProducerConfig.from_options(
        security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256",
        sasl_plain_username="alice", sasl_plain_password="hunter2")
    assert "hunter2" not in repr(config)
    assert "alice" in repr(config)
    producer = Producer(config)
    assert "hunter2" not in repr(producer)
    assert "hunter2" not in repr(producer._security)
    oauth = ProducerConfig.from_options(security_protocol="SASL_SSL",
                                        sasl_mechanism="OAUTHBEARER",
                                        sasl_oauth_token_provider=provider)
    assert "provider" not in repr(oauth)


async def test_security_config_errors() -> None:
    with pytest.raises(ConfigError, match="security_protocol"):
        ProducerConfig.from_options(security_protocol="TLS")
    with pytest.raises(ConfigError, match="use SSL or SASL_SSL"):
        ProducerConfig.from_options(ssl_cafile="/ca.pem")
    with pytest.raises(ConfigError, match="sasl_mechanism"):
        ProducerConfig.from_options(security_protocol="SASL_SSL", sasl_mechanism="GSSAPI")
    with pytest.raises(ConfigError, match="needs sasl_plain_username"):
        ProducerConfig.from_options(security_protocol="SASL_PLAINTEXT")
    with pytest.raises(ConfigError, match="sasl_oauth_token_provider"):
        ProducerConfig.from_options(security_protocol="SASL_PLAINTEXT",
                                    sasl_mechanism="OAUTHBEARER")
    with pytest.raises(ConfigError, match="cannot load TLS files") as info:
        Producer(security_protocol="SSL", ssl_cafile="/nonexistent/ca.pem",
                 ssl_password="hunter2")
    assert "hunter2" not in str(info.value)
    # Java's dotted names work too.
    c = ProducerConfig.from_options({"security.protocol": "sasl_ssl",
                                     "sasl.mechanism": "scram-sha-512",
                                     "sasl.plain.username": "u", "sasl.plain.password": "p"})
    assert security_from_config(c).sasl_mechanism == "SCRAM-SHA-512"


async def test_security_from_config() -> None:
    plain = security_from_config(ProducerConfig.from_options())
    assert plain == Security() and not plain.sasl and plain.ssl_context is None
    sasl = security_from_config(ProducerConfig.from_options(
        security_protocol="sasl_plaintext", sasl_mechanism="plain",
        sasl_plain_username="u", sasl_plain_password="p"))
    assert sasl.sasl and sasl.sasl_mechanism == "PLAIN" and sasl.username == "u"
    assert sasl.password == Secret("p") and sasl.ssl_context is None


async def test_config_module_does_not_import_the_network_layer() -> None:
    """config.py holds plain fields; net/security.py builds TLS and SASL from them."""
    tree = ast.parse(pathlib.Path(aioproducer.config.__file__).read_text())
    for node in tree.body:  # module level; TYPE_CHECKING blocks are not ast.Import*
        if isinstance(node, ast.ImportFrom):
            assert not (node.module or "").startswith("net"), ast.unparse(node)


# -- re-authentication (KIP-368) on a scripted connection ------------------------------


class ScriptedChannel:
    """A :class:`SaslChannel` whose broker accepts PLAIN (or refuses it when told to)
    and gives sessions a lifetime of ``lifetime_ms``."""

    def __init__(self, lifetime_ms: int) -> None:
        self.lifetime_ms = lifetime_ms
        self.in_flight = 0
        self.is_connected = True
        self.refuse = False
        self.requests: list[str] = []
        self.events: list[str] = []
        self.closed: tuple[str, BaseException | None] | None = None

    def version_for(self, api_key: int, lo: int, hi: int) -> int:
        return hi

    async def request(self, req: Any, response_type: type[Any], *,
                      timeout_ms: int | None = None) -> Any:
        self.requests.append(type(req).__name__)
        await asyncio.sleep(0)
        if response_type is sasl_handshake_v1.SaslHandshakeResponse:
            return response_type(error_code=ErrorCode.none, mechanisms=("PLAIN",))
        code = ErrorCode.sasl_authentication_failed if self.refuse else ErrorCode.none
        return response_type(error_code=code, error_message=None, auth_bytes=b"",
                             session_lifetime=i64Timedelta.parse(
                                 datetime.timedelta(milliseconds=self.lifetime_ms)))

    def hold_writes(self) -> None:
        self.events.append("hold")

    def release_writes(self) -> None:
        self.events.append("release")

    def close(self, reason: str = "closed", cause: BaseException | None = None) -> None:
        self.closed = (reason, cause)
        self.is_connected = False


PLAIN_SECURITY = Security(protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                          username="alice", password=Secret("pw"))


async def test_reauthentication_waits_for_the_requests_in_flight() -> None:
    channel = ScriptedChannel(lifetime_ms=100)
    auth = SaslAuthenticator(channel, PLAIN_SECURITY)
    await auth.authenticate()
    assert channel.requests == ["SaslHandshakeRequest", "SaslAuthenticateRequest"]
    channel.in_flight = 1
    await asyncio.sleep(0.15)  # the session is at 85..95 % of its lifetime
    assert auth.reauth_due and channel.events == ["hold"]
    assert len(channel.requests) == 2  # not while a request is in flight
    waiter = asyncio.ensure_future(auth.wait_turn())
    await asyncio.sleep(0.01)
    assert not waiter.done()  # other requests wait for the re-authentication
    channel.in_flight = 0
    channel.lifetime_ms = 0  # no further re-authentication
    auth.connection_idle()
    await asyncio.wait_for(waiter, 1.0)
    for _ in range(10):
        await asyncio.sleep(0)
    assert auth.reauthentications == 1 and not auth.reauth_due
    assert channel.events == ["hold", "release"] and channel.closed is None
    assert len(channel.requests) == 4
    auth.close()


async def test_failed_reauthentication_closes_the_connection() -> None:
    channel = ScriptedChannel(lifetime_ms=50)
    auth = SaslAuthenticator(channel, PLAIN_SECURITY)
    await auth.authenticate()
    channel.refuse = True
    for _ in range(100):
        await asyncio.sleep(0.01)
        if channel.closed is not None:
            break
    assert channel.closed is not None
    reason, cause = channel.closed
    assert reason.startswith("re-authentication failed: SASL PLAIN authentication")
    assert isinstance(cause, AuthenticationError)
    assert auth.reauthentications == 0 and not auth.reauth_due
    await asyncio.wait_for(auth.wait_turn(), 1.0)  # nobody is left waiting
