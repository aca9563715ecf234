"""aioproducer against the secured local broker (``secure_kafka``): TLS, mutual TLS, SASL
PLAIN / SCRAM-SHA-256 / SCRAM-SHA-512 / OAUTHBEARER over SASL_PLAINTEXT and SASL_SSL,
read back by confluent-kafka with the same credentials; the typed failures (wrong
password, unknown CA, wrong host name, refused client certificate, ACLs); KIP-368
re-authentication; and no secret in logs or messages."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from support.kafka_util import create_topic
from support.secure_util import confluent_config

from aioproducer import (
    AuthenticationError,
    Producer,
    TLSError,
    TopicAuthorizationError,
)
from aioproducer.devbroker import REAUTH_MS, SECURE_USERS, LocalKafka, unsecured_jwt
from aioproducer.errors import TransactionalIdAuthorizationError

pytestmark = pytest.mark.asyncio

N = 200


@pytest.fixture(scope="module")
def topic(secure_kafka: LocalKafka) -> str:
    return create_topic(secure_kafka.bootstrap, partitions=2)


def options(cluster: LocalKafka, listener: str, mechanism: str | None = None, *,
            user: str = "alice", password: str | None = None, client_cert: bool = False,
            token: str | None = None, **extra: Any) -> dict[str, Any]:
    """aioproducer options equivalent to secure_util.confluent_config."""
    protocol = "SSL" if listener in ("SSL", "MTLS", "SSL_BADHOST") else listener
    tls = cluster.tls
    opts: dict[str, Any] = {"bootstrap_servers": cluster.listener_bootstrap(listener),
                            "security_protocol": protocol, "max_block_ms": 20_000}
    if protocol.endswith("SSL"):
        opts["ssl_cafile"] = str(tls.ca_file)
    if client_cert:
        opts.update(ssl_certfile=str(tls.client_cert),
                    ssl_keyfile=str(tls.client_key_encrypted),
                    ssl_password=tls.client_key_password)
    if protocol.startswith("SASL_"):
        opts["sasl_mechanism"] = mechanism or "PLAIN"
        if mechanism == "OAUTHBEARER":
            jwt = token if token is not None else unsecured_jwt(user)

            async def provider() -> str:
                return jwt

            opts["sasl_oauth_token_provider"] = provider
        else:
            opts["sasl_plain_username"] = user
            opts["sasl_plain_password"] = SECURE_USERS[user] if password is None else password
    opts.update(extra)
    return opts


def read_back(config: dict[str, Any], topic: str, tag: bytes, n: int,
              timeout: float = 30.0) -> list[Any]:
    """Records of ``topic`` whose value starts with ``tag``, read with ``config``."""
    consumer = Consumer({**config, "group.id": f"sec-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    got: list[Any] = []
    try:
        consumer.assign([TopicPartition(topic, p, -2) for p in (0, 1)])
        deadline = time.monotonic() + timeout
        while len(got) < n and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                if msg.error() is not None:
                    raise AssertionError(f"consumer error: {msg.error()}")
                if (msg.value() or b"").startswith(tag):
                    got.append(msg)
    finally:
        consumer.close()
    return got


CASES = [("SSL", None, False), ("MTLS", None, True)] + [
    (listener, mech, False)
    for listener in ("SASL_PLAINTEXT", "SASL_SSL")
    for mech in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
]


@pytest.mark.parametrize("listener, mechanism, client_cert", CASES,
                         ids=[f"{c[0]}-{c[1] or 'tls'}" for c in CASES])
async def test_round_trip(secure_kafka: LocalKafka, topic: str, listener: str,
                          mechanism: str | None, client_cert: bool) -> None:
    tag = uuid.uuid4().hex[:8].encode()
    async with Producer(**options(secure_kafka, listener, mechanism,
                                  client_cert=client_cert), linger_ms=5) as producer:
        futs = [await producer.send(topic, tag + b"-%d" % i, key=b"k%d" % (i % 7),
                                    headers=[("i", b"%d" % i)]) for i in range(N)]
        metas = {(m.partition, m.offset): i
                 for i, m in enumerate(await asyncio.gather(*futs))}
    config = confluent_config(secure_kafka, listener, mechanism=mechanism,
                              client_cert=client_cert)
    got = read_back(config, topic, tag, N)
    assert len(got) == N
    for msg in got:
        i = metas[(msg.partition(), msg.offset())]
        assert msg.value() == tag + b"-%d" % i
        assert msg.key() == b"k%d" % (i % 7)
        assert msg.headers() == [("i", b"%d" % i)]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_wrong_password_fails_fast(secure_kafka: LocalKafka, mechanism: str) -> None:
    started = time.monotonic()
    producer = Producer(**options(secure_kafka, "SASL_SSL", mechanism,
                                  password="not-the-password"))
    with pytest.raises(AuthenticationError, match=mechanism) as info:
        await producer.start()
    assert time.monotonic() - started < 10  # not max_block_ms (20 s)
    assert "not-the-password" not in str(info.value)


async def test_unknown_user_and_expired_token_fail(secure_kafka: LocalKafka) -> None:
    opts = options(secure_kafka, "SASL_PLAINTEXT", "SCRAM-SHA-512")
    opts.update(sasl_plain_username="mallory", sasl_plain_password="whatever")
    with pytest.raises(AuthenticationError):
        await Producer(**opts).start()
    expired = unsecured_jwt("alice", lifetime=-60)
    with pytest.raises(AuthenticationError, match="OAUTHBEARER"):
        await Producer(**options(secure_kafka, "SASL_SSL", "OAUTHBEARER",
                                 token=expired)).start()


async def test_tls_failures_are_typed(secure_kafka: LocalKafka, topic: str) -> None:
    tls = secure_kafka.tls
    with pytest.raises(TLSError, match="certificate"):
        await Producer(**options(secure_kafka, "SSL",
                                 ssl_cafile=str(tls.other_ca_file))).start()
    with pytest.raises(TLSError, match="mismatch"):
        await Producer(**options(secure_kafka, "SSL_BADHOST")).start()
    # The same broker is fine once host name checking is off (the chain still counts).
    async with Producer(**options(secure_kafka, "SSL_BADHOST",
                                  ssl_check_hostname=False)) as producer:
        await producer.send_and_wait(topic, b"badhost-ok")
    # Mutual TLS: no client certificate, or one from another CA.
    with pytest.raises(TLSError):
        await Producer(**options(secure_kafka, "MTLS")).start()
    with pytest.raises(TLSError):
        await Producer(**options(secure_kafka, "MTLS", ssl_certfile=str(tls.other_client_cert),
                                 ssl_keyfile=str(tls.other_client_key))).start()


async def test_topic_authorization(secure_kafka: LocalKafka) -> None:
    allowed = create_topic(secure_kafka.bootstrap)
    denied = create_topic(secure_kafka.bootstrap)
    secure_kafka.grant_producer("bob", [allowed])
    async with Producer(**options(secure_kafka, "SASL_PLAINTEXT", "SCRAM-SHA-256",
                                  user="bob"), linger_ms=0) as producer:
        await producer.send_and_wait(allowed, b"one")
        started = time.monotonic()
        with pytest.raises(TopicAuthorizationError):
            await producer.send_and_wait(denied, b"refused")
        assert time.monotonic() - started < 10
        await producer.send_and_wait(allowed, b"two")  # the other topic keeps working
        with pytest.raises(TopicAuthorizationError):
            await producer.send(denied, b"again")
    got = read_back(confluent_config(secure_kafka, "SASL_PLAINTEXT", user="alice"),
                    allowed, b"", 2)
    assert [m.value() for m in got] == [b"one", b"two"]


async def test_transactional_id_authorization(secure_kafka: LocalKafka) -> None:
    topic = create_topic(secure_kafka.bootstrap)
    secure_kafka.grant_producer("bob", [topic])  # but no transactional id
    async with Producer(**options(secure_kafka, "SASL_PLAINTEXT", "PLAIN", user="bob"),
                        transactional_id=f"bob-{uuid.uuid4().hex[:6]}") as producer:
        with pytest.raises(TransactionalIdAuthorizationError):
            await producer.init_transactions()


async def test_reauthentication_keeps_the_connection(secure_kafka: LocalKafka,
                                                     topic: str) -> None:
    """The broker's session lifetime is REAUTH_MS (10 s): the producer authenticates
    again on the same connections while it keeps producing, for both SCRAM and
    OAUTHBEARER (which asks its provider for a new token)."""
    calls = 0

    async def provider() -> str:
        nonlocal calls
        calls += 1
        return unsecured_jwt("alice")

    tag = uuid.uuid4().hex[:8].encode()
    sent = 0
    scram = Producer(**options(secure_kafka, "SASL_SSL", "SCRAM-SHA-512"), linger_ms=5)
    oauth = Producer(**options(secure_kafka, "SASL_PLAINTEXT", "OAUTHBEARER",
                               sasl_oauth_token_provider=provider), linger_ms=5)
    async with scram, oauth:
        conns = [p._client._conns.copy() for p in (scram, oauth)]  # type: ignore[union-attr]
        deadline = time.monotonic() + REAUTH_MS / 1000 * 1.3
        while time.monotonic() < deadline:
            for p in (scram, oauth):
                await p.send_and_wait(topic, tag + b"-%d" % sent)
                sent += 1
            await asyncio.sleep(0.05)
        for p, before in zip((scram, oauth), conns, strict=True):
            after = p._client._conns  # type: ignore[union-attr]
            reauths = [c.reauthentications for c in after.values()]
            assert sum(reauths) >= 1, reauths
            # The same connection objects: re-authenticated, not reconnected.
            assert any(after.get(n) is c for n, c in before.items())
    assert calls >= 2
    got = read_back(confluent_config(secure_kafka, "SASL_PLAINTEXT"), topic, tag, sent)
    assert len(got) == sent


async def test_no_secret_in_logs_or_errors(secure_kafka: LocalKafka, topic: str,
                                           caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    tls = secure_kafka.tls
    secrets = [SECURE_USERS["alice"], tls.client_key_password, "wrong-secret-123"]
    token = unsecured_jwt("alice")
    async with Producer(**options(secure_kafka, "SASL_SSL", "SCRAM-SHA-256")) as p1:
        await p1.send_and_wait(topic, b"x")
        text = repr(p1) + repr(p1.config)
    async with Producer(**options(secure_kafka, "MTLS", client_cert=True)) as p2:
        await p2.send_and_wait(topic, b"y")
        text += repr(p2.config)
    async with Producer(**options(secure_kafka, "SASL_PLAINTEXT", "OAUTHBEARER",
                                  token=token)) as p3:
        await p3.send_and_wait(topic, b"z")
    for mech in ("PLAIN", "SCRAM-SHA-512"):
        with pytest.raises(AuthenticationError) as info:
            await Producer(**options(secure_kafka, "SASL_PLAINTEXT", mech,
                                     password="wrong-secret-123")).start()
        text += str(info.value) + repr(info.value)
    text += caplog.text
    assert "SaslAuthenticate" in caplog.text or "authenticated" in caplog.text
    for secret in [*secrets, token]:
        assert secret not in text
