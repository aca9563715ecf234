"""Helpers for tests against the secured local broker (``LocalKafka(..., secure=True)``,
the ``secure_kafka`` fixture): confluent-kafka (librdkafka) client configs for each
listener and mechanism, a produce + read-back round trip, and a raw SASL exchange that
shows what the broker answers (error, session lifetime).
"""

from __future__ import annotations

import io
import random
import socket
import ssl
import struct
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_authenticate.v2.response import SaslAuthenticateResponse
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from kio.schema.sasl_handshake.v1.response import SaslHandshakeResponse
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32

from aioproducer.devbroker import SECURE_USERS, LocalKafka, unsecured_jwt

__all__ = [
    "SaslOutcome",
    "confluent_config",
    "produce_errors",
    "raw_sasl_plain",
    "round_trip",
]


def confluent_config(cluster: LocalKafka, listener: str, *, mechanism: str | None = None,
                     user: str = "alice", password: str | None = None,
                     client_cert: bool = False, token: str | None = None,
                     extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A librdkafka config for ``listener`` of the secured ``cluster``: the test CA for
    TLS listeners, the (encrypted) client key for ``client_cert`` (needed on ``MTLS``),
    ``mechanism`` with ``user``'s password (default: the right one) on SASL listeners;
    OAUTHBEARER presents ``token`` (default: an unsigned JWT for ``user``). ``extra``
    is added last."""
    name = listener.upper()
    protocol = "SSL" if name in ("SSL", "MTLS", "SSL_BADHOST") else name
    config: dict[str, Any] = {
        "bootstrap.servers": cluster.listener_bootstrap(name),
        "security.protocol": protocol,
        "socket.timeout.ms": 10000,
    }
    tls = cluster.tls
    if protocol.endswith("SSL"):
        config["ssl.ca.location"] = str(tls.ca_file)
    if client_cert:
        config["ssl.certificate.location"] = str(tls.client_cert)
        config["ssl.key.location"] = str(tls.client_key_encrypted)
        config["ssl.key.password"] = tls.client_key_password
    if protocol.startswith("SASL_"):
        mech = (mechanism or "PLAIN").upper()
        config["sasl.mechanism"] = mech
        if mech == "OAUTHBEARER":
            jwt = token if token is not None else unsecured_jwt(user)
            config["oauth_cb"] = lambda _config: (jwt, time.time() + 3600)
        else:
            config["sasl.username"] = user
            config["sasl.password"] = SECURE_USERS[user] if password is None else password
    config.update(extra or {})
    return config


def produce_errors(config: dict[str, Any], records: dict[str, list[bytes]],
                   timeout: float = 30.0) -> dict[str, list[KafkaError]]:
    """Produce ``{topic: [value, ...]}`` with ``config`` and return the delivery errors
    by topic (empty lists when all went through); fails if flush does not finish."""
    errors: dict[str, list[KafkaError]] = {t: [] for t in records}
    producer = Producer({"linger.ms": 5, "message.timeout.ms": int(timeout * 1000),
                         **config})

    def report(err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            errors[msg.topic()].append(err)

    for topic, values in records.items():
        for value in values:
            producer.produce(topic, value, on_delivery=report)
    left = producer.flush(timeout + 10)
    assert left == 0, f"{left} record(s) not delivered nor failed after {timeout} s"
    return errors


def round_trip(config: dict[str, Any], topic: str, n: int = 3,
               timeout: float = 30.0) -> list[bytes]:
    """Produce ``n`` records to partition 0 of ``topic`` with ``config`` and read them
    back (from the first one produced here) with a consumer of the same config."""
    tag = uuid.uuid4().hex[:8]
    values = [f"{tag}-{i}".encode() for i in range(n)]
    errors = produce_errors(config, {topic: values}, timeout)
    assert errors == {topic: []}, errors
    consumer = Consumer({**config, "group.id": f"secure-{tag}", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    got: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, 0, -2)])  # from the beginning
        deadline = time.monotonic() + timeout
        while len(got) < n and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=100, timeout=0.5):
                if msg.error() is not None:
                    raise AssertionError(f"consumer error: {msg.error()}")
                value = msg.value()
                if value is not None and value.startswith(tag.encode()):
                    got.append(value)
    finally:
        consumer.close()
    assert got == values
    return got


# -- a raw SASL exchange ----------------------------------------------------------------


@dataclass(frozen=True)
class SaslOutcome:
    handshake_error: ErrorCode
    mechanisms: tuple[str, ...]
    error: ErrorCode
    error_message: str | None
    session_lifetime_ms: int


def _exchange(sock: socket.socket, header: Any, request: Any, response_type: Any) -> Any:
    buf = io.BytesIO()
    entity_writer(type(header))(buf, header)
    entity_writer(type(request))(buf, request)
    payload = buf.getvalue()
    sock.sendall(struct.pack(">i", len(payload)) + payload)

    def recv(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            data += chunk
        return data

    (size,) = struct.unpack(">i", recv(4))
    data = recv(size)
    response_header, offset = entity_reader(response_type.__header_schema__)(data, 0)
    assert response_header.correlation_id == header.correlation_id
    response, _ = entity_reader(response_type)(data, offset)
    return response


def raw_sasl_plain(address: str, user: str, password: str,
                   ssl_context: ssl.SSLContext | None = None,
                   timeout: float = 10.0) -> SaslOutcome:
    """SaslHandshake v1 (PLAIN) + SaslAuthenticate v2 on a new connection to
    ``host:port``: what the broker answers, including the session lifetime (KIP-368)."""
    host, _, port = address.rpartition(":")
    cid = random.randrange(1, 2**30)
    with socket.create_connection((host, int(port)), timeout=timeout) as raw:
        sock = raw if ssl_context is None else ssl_context.wrap_socket(
            raw, server_hostname=host)
        handshake: SaslHandshakeResponse = _exchange(
            sock, RequestHeaderV1(request_api_key=SaslHandshakeRequest.__api_key__,
                                  request_api_version=SaslHandshakeRequest.__version__,
                                  correlation_id=i32(cid), client_id="secure-util"),
            SaslHandshakeRequest(mechanism="PLAIN"), SaslHandshakeResponse)
        if handshake.error_code != ErrorCode.none:
            return SaslOutcome(handshake.error_code, handshake.mechanisms, ErrorCode.none,
                               None, 0)
        auth: SaslAuthenticateResponse = _exchange(
            sock, RequestHeaderV2(request_api_key=SaslAuthenticateRequest.__api_key__,
                                  request_api_version=SaslAuthenticateRequest.__version__,
                                  correlation_id=i32(cid + 1), client_id="secure-util"),
            SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{password}".encode()),
            SaslAuthenticateResponse)
        if sock is not raw:
            sock.close()
    return SaslOutcome(handshake.error_code, handshake.mechanisms, auth.error_code,
                       auth.error_message,
                       int(auth.session_lifetime.total_seconds() * 1000))
