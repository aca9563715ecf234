"""SASL mechanisms and secret handling, without a broker (the broker tests are in
test_security.py): SCRAM against the RFC 7677 test vector, tampered server messages,
PLAIN and OAUTHBEARER messages, and secrets kept out of repr()."""

from __future__ import annotations

import pickle

import pytest

from aioproducer import Producer, ProducerConfig
from aioproducer.errors import AuthenticationError, ConfigError
from aioproducer.net.sasl import OAuthBearer, Plain, Scram
from aioproducer.net.security import Secret

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
    assert c.security().sasl_mechanism == "SCRAM-SHA-512"
