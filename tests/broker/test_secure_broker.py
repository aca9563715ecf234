"""The local broker's secured mode (``LocalKafka(..., secure=True)``, the ``secure_kafka``
fixture) works, checked with the standard library's ``ssl`` and with confluent-kafka
(librdkafka), not with aioproducer: TLS (and its failures: an unrelated CA, a host name
that does not match, mutual TLS without a good client certificate), SASL PLAIN,
SCRAM-SHA-256/512 and OAUTHBEARER over SASL_PLAINTEXT and SASL_SSL, refused credentials,
the session lifetime for re-authentication, and ACLs.
"""

from __future__ import annotations

import contextlib
import ssl
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from kio.schema.errors import ErrorCode
from support.kafka_util import create_topic
from support.secure_util import confluent_config, produce_errors, raw_sasl_plain, round_trip

from aioproducer.devbroker import (
    BADHOST_NAME,
    REAUTH_MS,
    SASL_MECHANISMS,
    SECURE_LISTENERS,
    SECURE_USERS,
    AclBinding,
    LocalKafka,
    api_versions,
    unsecured_jwt,
)


@pytest.fixture(scope="module")
def topic(secure_kafka: LocalKafka) -> str:
    """A topic anybody with rights may use (super users: alice, admin)."""
    return create_topic(secure_kafka.bootstrap)


def _address(cluster: LocalKafka, listener: str) -> str:
    return cluster.listener_bootstrap(listener).split(",")[0]


# -- TLS, with the standard library ------------------------------------------------------

def test_listeners_and_files(secure_kafka: LocalKafka) -> None:
    (node,) = secure_kafka.status().nodes
    assert node.alive and node.answering
    assert [name for name, _ in node.listeners] == list(SECURE_LISTENERS)
    for name, port in node.listeners:
        assert secure_kafka.listener_bootstrap(name) == f"127.0.0.1:{port}"
    assert secure_kafka.listener_bootstrap("PLAINTEXT") == secure_kafka.bootstrap
    with pytest.raises(ValueError, match="no listener"):
        secure_kafka.listener_bootstrap("SASL_SOMETHING")
    assert secure_kafka.tls.exists()
    assert secure_kafka.tls.directory == secure_kafka.state_dir / "tls"


def test_tls_verifies_the_broker(secure_kafka: LocalKafka) -> None:
    tls = secure_kafka.tls
    ssl_address = _address(secure_kafka, "SSL")
    assert api_versions(ssl_address, ssl_context=tls.ssl_context()).api_keys
    # SASL_SSL has the same certificate
    assert api_versions(_address(secure_kafka, "SASL_SSL"), ssl_context=tls.ssl_context())

    # A CA that does not match: an unrelated CA does not verify the broker's certificate.
    other = ssl.create_default_context(cafile=str(tls.other_ca_file))
    with pytest.raises(ssl.SSLCertVerificationError, match="certificate verify failed"):
        api_versions(ssl_address, ssl_context=other)

    # A host name that does not match: SSL_BADHOST's certificate (from the right CA) names
    # only kafka.invalid, and the client connects to 127.0.0.1.
    badhost = _address(secure_kafka, "SSL_BADHOST")
    with pytest.raises(ssl.SSLCertVerificationError, match="mismatch"):
        api_versions(badhost, ssl_context=tls.ssl_context())
    assert api_versions(badhost, ssl_context=tls.ssl_context(check_hostname=False))
    assert BADHOST_NAME == "kafka.invalid"


def test_mutual_tls_requires_a_client_certificate_from_the_ca(
        secure_kafka: LocalKafka) -> None:
    tls = secure_kafka.tls
    mtls = _address(secure_kafka, "MTLS")
    assert api_versions(mtls, ssl_context=tls.ssl_context(client_cert=True))

    encrypted = ssl.create_default_context(cafile=str(tls.ca_file))
    encrypted.load_cert_chain(str(tls.client_cert), str(tls.client_key_encrypted),
                              password=tls.client_key_password)
    assert api_versions(mtls, ssl_context=encrypted)
    chain = ssl.create_default_context(cafile=str(tls.ca_file))
    chain.load_cert_chain(str(tls.client_chain))  # key + certificate + CA in one file
    assert api_versions(mtls, ssl_context=chain)
    with pytest.raises(ssl.SSLError):
        ssl.create_default_context().load_cert_chain(
            str(tls.client_cert), str(tls.client_key_encrypted), password="wrong")

    with pytest.raises(OSError):  # no client certificate
        api_versions(mtls, ssl_context=tls.ssl_context())
    stranger = ssl.create_default_context(cafile=str(tls.ca_file))
    stranger.load_cert_chain(str(tls.other_client_cert), str(tls.other_client_key))
    with pytest.raises(OSError):  # a client certificate from another CA
        api_versions(mtls, ssl_context=stranger)
    # The plain SSL listener asks for no client certificate.
    assert api_versions(_address(secure_kafka, "SSL"), ssl_context=tls.ssl_context())


# -- SASL, raw ---------------------------------------------------------------------------

@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_sasl_session_lifetime_and_refusals(secure_kafka: LocalKafka, listener: str) -> None:
    address = _address(secure_kafka, listener)
    ctx = secure_kafka.tls.ssl_context() if listener == "SASL_SSL" else None
    ok = raw_sasl_plain(address, "bob", SECURE_USERS["bob"], ctx)
    assert set(ok.mechanisms) == set(SASL_MECHANISMS)
    assert ok.error == ErrorCode.none
    assert ok.session_lifetime_ms == REAUTH_MS  # re-authentication (KIP-368) is asked for
    for user, password in (("bob", "wrong"), ("mallory", "anything")):
        refused = raw_sasl_plain(address, user, password, ctx)
        assert refused.error == ErrorCode.sasl_authentication_failed
        assert refused.session_lifetime_ms == 0


# -- round trips with confluent-kafka ----------------------------------------------------

_ROUND_TRIPS = [("SSL", None, False), ("MTLS", None, True)] + [
    (listener, mechanism, False)
    for listener in ("SASL_PLAINTEXT", "SASL_SSL") for mechanism in SASL_MECHANISMS]


@pytest.mark.parametrize(("listener", "mechanism", "client_cert"), _ROUND_TRIPS,
                         ids=[f"{lst}-{m or 'TLS'}" for lst, m, _ in _ROUND_TRIPS])
def test_round_trip(secure_kafka: LocalKafka, topic: str, listener: str,
                    mechanism: str | None, client_cert: bool) -> None:
    config = confluent_config(secure_kafka, listener, mechanism=mechanism,
                              client_cert=client_cert)
    assert len(round_trip(config, topic)) == 3


def _first_error(config: dict[str, Any], timeout: float = 20.0) -> KafkaError:
    """The first error librdkafka reports (error_cb) while trying to connect."""
    errors: list[KafkaError] = []
    producer = Producer({**config, "error_cb": errors.append})
    deadline = time.monotonic() + timeout
    with contextlib.suppress(KafkaException):
        producer.list_topics(timeout=0.5)
    while not errors and time.monotonic() < deadline:
        producer.poll(0.1)
    assert errors, f"no error within {timeout} s"
    return errors[0]


@pytest.mark.parametrize(("listener", "mechanism", "user", "password"), [
    ("SASL_PLAINTEXT", "PLAIN", "alice", "wrong"),
    ("SASL_PLAINTEXT", "SCRAM-SHA-256", "alice", "wrong"),
    ("SASL_SSL", "SCRAM-SHA-512", "mallory", "alice-secret"),
    ("SASL_SSL", "OAUTHBEARER", "alice", None),
])
def test_wrong_credentials_are_refused(secure_kafka: LocalKafka, listener: str,
                                       mechanism: str, user: str,
                                       password: str | None) -> None:
    expired = unsecured_jwt(user, lifetime=-60) if mechanism == "OAUTHBEARER" else None
    config = confluent_config(secure_kafka, listener, mechanism=mechanism, user=user,
                              password=password, token=expired)
    err = _first_error(config)
    assert err.code() == KafkaError._AUTHENTICATION, err


@pytest.mark.parametrize("case", ["other-ca", "badhost", "mtls-without-cert"])
def test_tls_failures_with_librdkafka(secure_kafka: LocalKafka, case: str) -> None:
    tls = secure_kafka.tls
    if case == "other-ca":
        config = confluent_config(secure_kafka, "SSL",
                                  extra={"ssl.ca.location": str(tls.other_ca_file)})
    elif case == "badhost":
        config = confluent_config(secure_kafka, "SSL_BADHOST")
    else:
        config = confluent_config(secure_kafka, "MTLS")
    err = _first_error(config)
    assert err.code() in (KafkaError._SSL, KafkaError._TRANSPORT,
                          KafkaError._ALL_BROKERS_DOWN), err
    if case == "badhost":  # and it does work without the host name check
        config["ssl.endpoint.identification.algorithm"] = "none"
        topic = create_topic(secure_kafka.bootstrap)
        assert produce_errors(config, {topic: [b"x"]}, timeout=20) == {topic: []}


# -- ACLs ------------------------------------------------------------------------------

@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "OAUTHBEARER"])
def test_acls_allow_one_topic_and_refuse_another(secure_kafka: LocalKafka,
                                                 mechanism: str) -> None:
    allowed = create_topic(secure_kafka.bootstrap)
    refused = create_topic(secure_kafka.bootstrap)
    made = secure_kafka.grant_producer("bob", [allowed])
    assert AclBinding("TOPIC", allowed, "User:bob", "WRITE") in made
    assert set(made) <= set(secure_kafka.acls("User:bob"))
    # With OAUTHBEARER the principal is the token's "sub".
    config = confluent_config(secure_kafka, "SASL_SSL", mechanism=mechanism, user="bob",
                              extra={"enable.idempotence": True})
    errors = produce_errors(config, {allowed: [b"a1", b"a2"], refused: [b"b1"]},
                            timeout=20)
    assert errors[allowed] == []
    assert [e.code() for e in errors[refused]] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]


def test_acls_for_transactional_ids(secure_kafka: LocalKafka) -> None:
    tag = uuid.uuid4().hex[:8]
    topic = create_topic(secure_kafka.bootstrap)
    secure_kafka.grant_producer("bob", [topic], transactional_ids=[f"tx-{tag}-"],
                                prefixed=True)
    base = confluent_config(secure_kafka, "SASL_PLAINTEXT", mechanism="SCRAM-SHA-256",
                            user="bob")
    ok = Producer({**base, "transactional.id": f"tx-{tag}-1"})
    ok.init_transactions(30)
    ok.begin_transaction()
    ok.produce(topic, b"in a transaction")
    ok.commit_transaction(30)

    denied = Producer({**base, "transactional.id": f"other-{tag}"})
    with pytest.raises(KafkaException) as info:
        denied.init_transactions(30)
    assert info.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def test_acls_are_listed_and_removed(secure_kafka: LocalKafka) -> None:
    made = secure_kafka.grant_producer("carol", ["carol-topics-"], prefixed=True,
                                       transactional_ids=["carol-tx"], groups=["carol-g"],
                                       idempotent=True)
    assert {(b.resource_type, b.operation) for b in made} == {
        ("TOPIC", "WRITE"), ("TOPIC", "DESCRIBE"), ("TOPIC", "CREATE"),
        ("CLUSTER", "IDEMPOTENT_WRITE"), ("TRANSACTIONAL_ID", "WRITE"),
        ("TRANSACTIONAL_ID", "DESCRIBE"), ("GROUP", "READ"), ("GROUP", "DESCRIBE")}
    assert all(b.pattern == "PREFIXED" for b in made if b.resource_type != "CLUSTER")
    assert sorted(secure_kafka.acls("User:carol"), key=str) == sorted(made, key=str)
    assert secure_kafka.remove_acls("User:carol") == len(made)
    assert secure_kafka.acls("User:carol") == []
    with pytest.raises(ValueError, match="unknown ACL operation"):
        AclBinding("TOPIC", "t", "User:carol", "SCRIBBLE")
