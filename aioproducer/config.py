"""Validated producer configuration.

Options use Python names (``linger_ms``); the Java producer's dotted names
(``"linger.ms"``) are accepted too, so a config dict can be carried over as is.
Everything is checked once, at construction, and a bad option is a
:class:`~aioproducer.errors.ConfigError` that names the option and what it accepts.
"""

from __future__ import annotations

import dataclasses
import difflib
import ssl
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .compression import validate_level
from .errors import ConfigError

__all__ = [
    "SASL_MECHANISMS",
    "SECURITY_PROTOCOLS",
    "OAuthToken",
    "Partitioner",
    "ProducerConfig",
    "Serializer",
    "TokenProvider",
]

#: ``(topic, serialized_key, num_partitions) -> partition``
Partitioner = Callable[[str, bytes | None, int], int]
#: turns a user object into bytes (or None)
Serializer = Callable[[Any], bytes | bytearray | memoryview | None]
#: what an OAUTHBEARER token provider returns: a token, or (token, SASL extensions)
OAuthToken = str | tuple[str, Mapping[str, str]]
#: ``sasl_oauth_token_provider``: ``async () -> OAuthToken``
TokenProvider = Callable[[], Awaitable[OAuthToken]]

#: accepted values of ``security_protocol``
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
#: accepted values of ``sasl_mechanism``
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")

_MAX_INT32 = 2**31 - 1
_DEFAULT_BATCH_MAX = 262144
_COMPRESSION = ("none", "gzip", "snappy", "lz4", "zstd")


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducerConfig:
    """Every producer option, with the Java producer's defaults.

    Each field mirrors the Java option of the same name with dots for underscores.
    """

    bootstrap_servers: str | list[str] = "127.0.0.1:9092"
    """``bootstrap.servers``: ``host:port`` entries, a comma-separated string or a list."""
    client_id: str = "aioproducer"
    """``client.id``"""
    acks: int = -1
    """``acks``: 0 (no response), 1 (leader) or -1 / ``"all"`` (all in-sync replicas)."""
    enable_idempotence: bool | None = None
    """``enable.idempotence``: on by default when the other options allow it (acks=all,
    retries > 0, max_in_flight <= 5), as in Java 3.x+. Setting True with conflicting
    options is an error."""
    linger_ms: int = 5
    """``linger.ms``: how long a batch waits for more records before it is sendable."""
    batch_size: int = 16384
    """``batch.size``: bytes per batch (and per pooled buffer); a partition's batches
    start at this size."""
    batch_max_size: int | None = None
    """``batch.max.size`` (KIP-782): a partition whose batches fill up before they are
    sent gets batches of twice the size, up to this (default: 262144, or
    ``batch_size`` if larger; at most ``max_request_size``). Set it to ``batch_size``
    for fixed-size batches, as in the Java producer."""
    buffer_memory: int = 32 * 1024 * 1024
    """``buffer.memory``: hard bound on the bytes buffered for sending."""
    max_block_ms: int = 60000
    """``max.block.ms``: how long ``send()`` may wait for metadata or buffer memory."""
    max_request_size: int = 1048576
    """``max.request.size``: bound on one record and on one Produce request."""
    request_timeout_ms: int = 30000
    """``request.timeout.ms``"""
    delivery_timeout_ms: int = 120000
    """``delivery.timeout.ms``: bound on a record's whole life, from send to acknowledgement."""
    retries: int = _MAX_INT32
    """``retries``"""
    retry_backoff_ms: int = 100
    """``retry.backoff.ms``"""
    retry_backoff_max_ms: int = 1000
    """``retry.backoff.max.ms``"""
    max_in_flight_requests_per_connection: int = 5
    """``max.in.flight.requests.per.connection``"""
    metadata_max_age_ms: int = 300000
    """``metadata.max.age.ms``"""
    metadata_recovery_strategy: str = "rebootstrap"
    """``metadata.recovery.strategy`` (KIP-899): ``"rebootstrap"`` goes back to
    ``bootstrap_servers`` when no known broker answers (see the trigger below) or a
    broker answers REBOOTSTRAP_REQUIRED; ``"none"`` never does."""
    metadata_recovery_rebootstrap_trigger_ms: int = 300000
    """``metadata.recovery.rebootstrap.trigger.ms`` (KIP-1102): how long no known
    broker may answer before the producer rebootstraps."""
    metadata_max_idle_ms: int = 300000
    """``metadata.max.idle.ms``: a topic not sent to for this long (and with nothing
    buffered or in flight) leaves the producer's metadata and per-topic state."""
    reconnect_backoff_ms: int = 50
    """``reconnect.backoff.ms``"""
    reconnect_backoff_max_ms: int = 1000
    """``reconnect.backoff.max.ms``"""
    socket_connection_setup_timeout_ms: int = 10000
    """``socket.connection.setup.timeout.ms``"""
    max_response_bytes: int = 100 * 1024 * 1024
    """Largest response frame accepted from a broker (librdkafka's
    ``receive.message.max.bytes``, also accepted): a bigger size prefix closes the
    connection with a ProtocolError before anything is allocated for the frame."""
    compression_type: str = "none"
    """``compression.type``: ``none``, ``gzip``, ``snappy``, ``lz4`` or ``zstd``. Batches
    are compressed once, when they close."""
    compression_gzip_level: int = -1
    """``compression.gzip.level``: 1..9, or -1 for the codec's default (6)."""
    compression_lz4_level: int = 9
    """``compression.lz4.level``: 1..17; 9 (the default) is LZ4's fast mode, others LZ4-HC."""
    compression_zstd_level: int = 3
    """``compression.zstd.level``: -131072..22 (negative levels are zstd's fast modes)."""
    partitioner: str | Partitioner = "murmur2"
    """``partitioner.class``: ``"murmur2"`` (Java-compatible, default), ``"xxhash"``
    (fast, not Java-compatible) or a callable ``(topic, key_bytes, num_partitions) -> int``."""
    partitioner_ignore_keys: bool = False
    """``partitioner.ignore.keys``: keyed records are spread like keyless ones."""
    key_serializer: Serializer | None = None
    """``key.serializer``: a callable; without one, keys must be bytes-like or None."""
    value_serializer: Serializer | None = None
    """``value.serializer``: a callable; without one, values must be bytes-like or None."""
    transactional_id: str | None = None
    """``transactional.id``: makes the producer transactional (implies idempotence)."""
    transaction_timeout_ms: int = 60000
    """``transaction.timeout.ms``: the coordinator aborts a transaction left open longer."""

    interceptors: Sequence[Any] = ()
    """``interceptor.classes``: objects with ``on_send(record) -> record`` and/or
    ``on_acknowledgement(metadata, exception)`` (see :mod:`aioproducer.interceptors`)."""
    security_protocol: str = "PLAINTEXT"
    """``security.protocol``: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL."""
    ssl_context: ssl.SSLContext | None = field(default=None, repr=False)
    """A ready ``ssl.SSLContext`` (else one is built from the ``ssl_*`` files)."""
    ssl_cafile: str | None = None
    """PEM file of the CA(s) that signed the brokers' certificates (default: system CAs)."""
    ssl_certfile: str | None = None
    """PEM client certificate, for brokers that require mutual TLS."""
    ssl_keyfile: str | None = None
    """PEM private key of ``ssl_certfile`` (if not in the same file)."""
    ssl_password: str | None = field(default=None, repr=False)
    """Password of ``ssl_keyfile``."""
    ssl_check_hostname: bool = True
    """Check that the broker's certificate names the host connected to."""
    sasl_mechanism: str = "PLAIN"
    """``sasl.mechanism``: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER."""
    sasl_plain_username: str | None = None
    """User name for PLAIN and SCRAM."""
    sasl_plain_password: str | None = field(default=None, repr=False)
    """Password for PLAIN and SCRAM."""
    sasl_oauth_token_provider: TokenProvider | None = field(default=None, repr=False)
    """OAUTHBEARER: ``async () -> token`` or ``-> (token, {extension: value})``, called
    at every (re-)authentication."""

    _explicit: frozenset[str] = field(default=frozenset(), repr=False, compare=False)

    @classmethod
    def from_options(
        cls, options: Mapping[str, Any] | None = None, /, **kwargs: Any
    ) -> ProducerConfig:
        """Build a config from Python or dotted Java names (both may be mixed)."""
        merged: dict[str, Any] = {}
        for source in (options or {}, kwargs):
            for raw_name, value in source.items():
                name = _normalise(raw_name)
                if name in merged:
                    raise ConfigError(f"option {raw_name!r} is given twice")
                merged[name] = value
        if "partitioner_class" in merged:
            merged["partitioner"] = merged.pop("partitioner_class")
        if "receive_message_max_bytes" in merged:
            merged["max_response_bytes"] = merged.pop("receive_message_max_bytes")
        known = {f.name for f in dataclasses.fields(cls) if not f.name.startswith("_")}
        for name in merged:
            if name not in known:
                close = difflib.get_close_matches(name, sorted(known), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise ConfigError(f"unknown producer option {name!r}{hint}")
        if "acks" in merged:
            merged["acks"] = _parse_acks(merged["acks"])
        config = cls(**merged, _explicit=frozenset(merged))
        return config.validated()

    def validated(self) -> ProducerConfig:
        """Check every value; return a copy with derived defaults filled in."""
        ints = {
            "linger_ms": 0, "batch_size": 1, "buffer_memory": 1, "max_block_ms": 0,
            "max_request_size": 1, "request_timeout_ms": 1, "delivery_timeout_ms": 1,
            "retries": 0, "retry_backoff_ms": 0, "retry_backoff_max_ms": 0,
            "max_in_flight_requests_per_connection": 1, "metadata_max_age_ms": 0,
            "metadata_max_idle_ms": 1,
            "reconnect_backoff_ms": 0, "reconnect_backoff_max_ms": 0,
            "socket_connection_setup_timeout_ms": 1, "transaction_timeout_ms": 1,
            "metadata_recovery_rebootstrap_trigger_ms": 0,
            "max_response_bytes": 1024,
        }
        for name, minimum in ints.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"{name} must be an int, got {type(value).__name__}")
            if value < minimum:
                raise ConfigError(f"{name} must be >= {minimum}, got {value}")
        if self.acks not in (0, 1, -1):
            raise ConfigError(f"acks must be 0, 1, -1 or 'all', got {self.acks!r}")
        if not _parse_servers(self.bootstrap_servers):
            raise ConfigError("bootstrap_servers is empty; give at least one 'host:port'")
        if not isinstance(self.client_id, str):
            raise ConfigError("client_id must be a str")
        if self.metadata_recovery_strategy not in ("rebootstrap", "none"):
            raise ConfigError("metadata_recovery_strategy must be 'rebootstrap' or 'none', "
                              f"got {self.metadata_recovery_strategy!r}")
        if self.compression_type not in _COMPRESSION:
            raise ConfigError(
                f"compression_type {self.compression_type!r} is not supported; "
                f"choose one of {', '.join(_COMPRESSION)}"
            )
        validate_level("gzip", self.compression_gzip_level)
        validate_level("lz4", self.compression_lz4_level)
        validate_level("zstd", self.compression_zstd_level)
        if not (callable(self.partitioner) or self.partitioner in ("murmur2", "xxhash")):
            raise ConfigError(
                "partitioner must be 'murmur2', 'xxhash' or a callable "
                "(topic, key_bytes, num_partitions) -> int"
            )
        for name in ("key_serializer", "value_serializer"):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise ConfigError(f"{name} must be a callable or None")
        if self.transactional_id is not None and (
                not isinstance(self.transactional_id, str) or not self.transactional_id):
            raise ConfigError("transactional_id must be a non-empty str (or None)")
        self._check_security()
        if isinstance(self.interceptors, (str, bytes)) or not isinstance(
                self.interceptors, (list, tuple)):
            raise ConfigError("interceptors must be a list of interceptor objects")
        for ic in self.interceptors:
            if not (callable(getattr(ic, "on_send", None))
                    or callable(getattr(ic, "on_acknowledgement", None))):
                raise ConfigError(f"interceptor {ic!r} has neither on_send nor "
                                  "on_acknowledgement")
        if self.retry_backoff_max_ms < self.retry_backoff_ms:
            raise ConfigError("retry_backoff_max_ms must be >= retry_backoff_ms")
        if self.delivery_timeout_ms < self.linger_ms + self.request_timeout_ms:
            raise ConfigError(
                "delivery_timeout_ms must be >= linger_ms + request_timeout_ms "
                f"({self.linger_ms} + {self.request_timeout_ms}), got {self.delivery_timeout_ms}"
            )
        batch_max = self.batch_max_size
        if batch_max is None:
            batch_max = max(self.batch_size, min(_DEFAULT_BATCH_MAX, self.max_request_size))
        elif isinstance(batch_max, bool) or not isinstance(batch_max, int):
            raise ConfigError(f"batch_max_size must be an int, got {type(batch_max).__name__}")
        elif not self.batch_size <= batch_max <= max(self.batch_size, self.max_request_size):
            raise ConfigError(
                f"batch_max_size must be between batch_size ({self.batch_size}) and "
                f"max_request_size ({self.max_request_size}), got {batch_max}")
        if self.max_request_size > self.buffer_memory:
            # Java allows this, but a record that passes max_request_size could then
            # never get memory: keep the bound honest.
            raise ConfigError("max_request_size must be <= buffer_memory")

        idempotence = self.enable_idempotence
        conflicts = []
        if self.acks != -1:
            conflicts.append(f"acks={self.acks} (needs 'all')")
        if self.retries == 0:
            conflicts.append("retries=0 (needs > 0)")
        if self.max_in_flight_requests_per_connection > 5:
            conflicts.append(
                f"max_in_flight_requests_per_connection="
                f"{self.max_in_flight_requests_per_connection} (needs <= 5)"
            )
        if self.transactional_id is not None:
            if idempotence is False:
                raise ConfigError("transactional_id needs enable_idempotence (not False)")
            if conflicts:
                raise ConfigError(
                    "transactional_id needs idempotence, which conflicts with "
                    + ", ".join(conflicts))
        if idempotence is None:
            idempotence = not conflicts
        elif idempotence and conflicts:
            raise ConfigError(
                "enable_idempotence=True conflicts with " + ", ".join(conflicts)
            )
        return dataclasses.replace(self, enable_idempotence=bool(idempotence),
                                   batch_max_size=batch_max)

    @property
    def compression_level(self) -> int:
        """The level option of ``compression_type`` (0 for codecs without levels)."""
        return {
            "gzip": self.compression_gzip_level,
            "lz4": self.compression_lz4_level,
            "zstd": self.compression_zstd_level,
        }.get(self.compression_type, 0)

    def _check_security(self) -> None:
        proto = self.security_protocol
        if not isinstance(proto, str) or proto.upper() not in SECURITY_PROTOCOLS:
            raise ConfigError(f"security_protocol must be one of {', '.join(SECURITY_PROTOCOLS)}"
                              f", got {proto!r}")
        proto = proto.upper()
        tls_opts = [n for n in ("ssl_context", "ssl_cafile", "ssl_certfile", "ssl_keyfile",
                                "ssl_password") if getattr(self, n) is not None]
        if tls_opts and proto not in ("SSL", "SASL_SSL"):
            raise ConfigError(f"{', '.join(tls_opts)} given but security_protocol is {proto}; "
                              "use SSL or SASL_SSL")
        if self.ssl_context is not None and not isinstance(self.ssl_context, ssl.SSLContext):
            raise ConfigError("ssl_context must be an ssl.SSLContext")
        for n in ("ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_password",
                  "sasl_plain_username", "sasl_plain_password"):
            v = getattr(self, n)
            if v is not None and not isinstance(v, str):
                raise ConfigError(f"{n} must be a str")
        if self.ssl_keyfile is not None and self.ssl_certfile is None:
            raise ConfigError("ssl_keyfile needs ssl_certfile")
        if not isinstance(self.ssl_check_hostname, bool):
            raise ConfigError("ssl_check_hostname must be a bool")
        if proto not in ("SASL_PLAINTEXT", "SASL_SSL"):
            return
        mech = self.sasl_mechanism
        if not isinstance(mech, str) or mech.upper() not in SASL_MECHANISMS:
            raise ConfigError(f"sasl_mechanism must be one of {', '.join(SASL_MECHANISMS)}, "
                              f"got {mech!r}")
        if mech.upper() == "OAUTHBEARER":
            if not callable(self.sasl_oauth_token_provider):
                raise ConfigError("sasl_mechanism OAUTHBEARER needs sasl_oauth_token_provider,"
                                  " an async callable returning a token")
        elif not self.sasl_plain_username or self.sasl_plain_password is None:
            raise ConfigError(f"sasl_mechanism {mech.upper()} needs sasl_plain_username and "
                              "sasl_plain_password")

    @property
    def servers(self) -> list[str]:
        """``bootstrap_servers`` as a list of ``host:port`` strings."""
        return _parse_servers(self.bootstrap_servers)


def _normalise(name: str) -> str:
    return name.replace(".", "_").replace("-", "_").lower()


def _parse_acks(value: Any) -> int:
    if value in ("all", "-1"):
        return -1
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ConfigError(f"acks must be 0, 1, -1 or 'all', got {value!r}")


def _parse_servers(value: str | list[str]) -> list[str]:
    items = value.split(",") if isinstance(value, str) else list(value)
    return [s.strip() for s in items if isinstance(s, str) and s.strip()]

