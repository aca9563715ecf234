"""Validated producer configuration.

Options use Python names (``linger_ms``); the Java producer's dotted names
(``"linger.ms"``) are accepted too, so a config dict can be carried over as is.
Everything is checked once, at construction, and a bad option is a
:class:`~aioproducer.errors.ConfigError` that names the option and what it accepts.
"""

from __future__ import annotations

import dataclasses
import os
import re
import ssl
import sys
import warnings
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from .compression import validate_level
from .errors import ConfigError

if TYPE_CHECKING:
    from .partitioner import Partitioner as PartitionerObject

__all__ = [
    "JAVA_OPTIONS",
    "SASL_MECHANISMS",
    "SECURITY_PROTOCOLS",
    "ConfigIgnoredWarning",
    "JavaOption",
    "OAuthToken",
    "Partitioner",
    "ProducerConfig",
    "Serializer",
    "TokenProvider",
    "parse_properties",
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
_DNS_LOOKUPS = ("use_all_dns_ips", "resolve_canonical_bootstrap_servers_only")


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
    """``socket.connection.setup.timeout.ms``: the first connection attempt to a broker
    waits this long; each failed attempt in a row doubles it (with +-20% jitter)..."""
    socket_connection_setup_timeout_max_ms: int = 30000
    """``socket.connection.setup.timeout.max.ms``: ...up to this."""
    connections_max_idle_ms: int = 540000
    """``connections.max.idle.ms``: a connection with nothing sent or received for this
    long is closed (and reopened when needed); -1 keeps connections open."""
    send_buffer_bytes: int = -1
    """``send.buffer.bytes``: SO_SNDBUF of broker connections; -1 (the default here;
    Java's is 131072) leaves the operating system's auto-tuned size."""
    receive_buffer_bytes: int = -1
    """``receive.buffer.bytes``: SO_RCVBUF; -1 (the default here; Java's is 32768) leaves
    the operating system's auto-tuned size."""
    client_dns_lookup: str = "use_all_dns_ips"
    """``client.dns.lookup``: ``use_all_dns_ips`` (a name's addresses are tried in turn)
    or ``resolve_canonical_bootstrap_servers_only`` (each bootstrap server is replaced
    by the canonical names of its addresses)."""
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
    partitioner: str | Partitioner | PartitionerObject = "murmur2"
    """``partitioner.class``: ``"murmur2"`` (Java-compatible, default), ``"xxhash"``
    (fast, not Java-compatible) or a callable ``(topic, key_bytes, num_partitions) -> int``."""
    enable_metrics_push: bool = True
    """``enable.metrics.push`` (KIP-714): when a broker offers a client-metrics
    subscription, push the subscribed metrics to it (see :mod:`aioproducer.telemetry`)."""
    partitioner_ignore_keys: bool = False
    """``partitioner.ignore.keys``: keyed records are spread like keyless ones."""
    partitioner_adaptive_partitioning_enable: bool = True
    """``partitioner.adaptive.partitioning.enable``: keyless records move on to a
    partition with a probability inversely proportional to its queued batches (KIP-794)."""
    partitioner_availability_timeout_ms: int = 0
    """``partitioner.availability.timeout.ms``: keyless records skip the partitions of a
    leader that has had batches ready it could not take for this long; 0: off."""
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
    tracer_provider: Any = field(default=None, repr=False)
    """OpenTelemetry tracing (``aioproducer[otel]``): a ``TracerProvider``, or
    ``"global"`` for the global one; each ``send()`` then makes a PRODUCER span and
    takes the Python path (see :mod:`aioproducer.otel`). None: no tracing, no cost."""
    meter_provider: Any = field(default=None, repr=False)
    """OpenTelemetry metrics: a ``MeterProvider`` or ``"global"``; the producer's
    metrics become observable instruments (see :mod:`aioproducer.otel`)."""
    propagator: Any = field(default=None, repr=False)
    """The ``TextMapPropagator`` that writes the span context into the record headers
    when tracing (None: OpenTelemetry's global propagator, W3C ``traceparent``)."""
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
        """Build a config from Python or dotted Java names (both may be mixed).

        Every Java producer option is accepted (see :data:`JAVA_OPTIONS`), with values
        as Python objects or as the strings a ``.properties`` file gives (``"16384"``,
        ``"true"``, ``"all"``, comma-separated lists, Java class names).
        """
        merged: dict[str, Any] = {}
        for source in (options or {}, kwargs):
            for raw_name, value in source.items():
                if not isinstance(raw_name, str):
                    raise ConfigError(f"option names must be str, got {raw_name!r}")
                for name, parsed in _convert(raw_name, value).items():
                    if name in merged:
                        raise ConfigError(f"option {raw_name!r} is given twice")
                    merged[name] = parsed
        _resolve_stores(merged)
        config = cls(**merged, _explicit=frozenset(merged))
        return config.validated()

    @classmethod
    def from_properties(cls, source: str | os.PathLike[str], /,
                        **overrides: Any) -> ProducerConfig:
        """Build a config from a Java producer ``.properties`` file.

        ``source`` is a path (a ``pathlib.Path``, or a str naming an existing file) or
        the text itself; it is parsed as ``java.util.Properties`` does
        (:func:`parse_properties`). ``overrides`` (Python or Java names) replace the
        file's values for the same options.
        """
        if isinstance(source, os.PathLike) or (
                isinstance(source, str) and "\n" not in source and "=" not in source
                and os.path.isfile(source)):
            try:
                with open(source, encoding="utf-8") as f:
                    text = f.read()
            except UnicodeDecodeError:  # Properties.load(InputStream) reads ISO-8859-1
                with open(source, encoding="latin-1") as f:
                    text = f.read()
            except OSError as exc:
                raise ConfigError(f"cannot read properties file {source!r}: {exc}") from None
        elif isinstance(source, str):
            text = source
        else:
            raise ConfigError(f"from_properties takes a path or the text of a .properties "
                              f"file, got {type(source).__name__}")
        options: dict[str, Any] = dict(parse_properties(text))
        replaced = {_canonical_name(k) for k in overrides}
        options = {k: v for k, v in options.items() if _canonical_name(k) not in replaced}
        options.update(overrides)
        return cls.from_options(options)

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
            "partitioner_availability_timeout_ms": 0,
        }
        for name, minimum in ints.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"{name} must be an int, got {type(value).__name__}")
            if value < minimum:
                raise ConfigError(f"{name} must be >= {minimum}, got {value}")
        self._check_java_socket_options()
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
        if isinstance(self.partitioner, str):  # str has a partition() method of its own
            valid = self.partitioner in ("murmur2", "xxhash")
        else:
            valid = (callable(self.partitioner)
                     or callable(getattr(self.partitioner, "partition", None)))
        if not valid:
            raise ConfigError(
                "partitioner must be 'murmur2', 'xxhash', an object with partition(topic, "
                "key, key_bytes, value, value_bytes, cluster) (aioproducer.partitioner."
                "Partitioner) or a callable "
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
        from .otel import check_options
        check_options(self.tracer_provider, self.meter_provider, self.propagator)
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

    def _check_java_socket_options(self) -> None:
        for name, minimum in (("socket_connection_setup_timeout_max_ms", 1),
                              ("connections_max_idle_ms", -1), ("send_buffer_bytes", -1),
                              ("receive_buffer_bytes", -1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"{name} must be an int, got {type(value).__name__}")
            if value < minimum:
                raise ConfigError(f"{name} must be >= {minimum}, got {value}")
        if self.client_dns_lookup not in _DNS_LOOKUPS:
            raise ConfigError(f"client_dns_lookup must be one of {', '.join(_DNS_LOOKUPS)}, "
                              f"got {self.client_dns_lookup!r}")
        for name in ("enable_idempotence", "partitioner_ignore_keys", "enable_metrics_push",
                     "partitioner_adaptive_partitioning_enable"):
            value = getattr(self, name)
            if not isinstance(value, bool) and not (name == "enable_idempotence"
                                                    and value is None):
                raise ConfigError(f"{name} must be a bool (or 'true'/'false'), got {value!r}")

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



# -- The Java producer's option names ------------------------------------------------------
#
# One row per option of the Java producer (kafka-clients 4.x ``ProducerConfig``), saying
# which field it sets, how a string value (as a ``.properties`` file gives it) is
# parsed, and its status:
#
# * ``implemented``: the option does here what it does in Java;
# * ``mapped``: the Java value (a class name, a JAAS line, a PEM store) is translated to
#   our equivalent, or refused with a ConfigError when there is none;
# * ``ignored``: accepted with a one-time :class:`ConfigIgnoredWarning`; ``only`` lists
#   the values accepted so (other values would change what the producer does, so they
#   are refused rather than silently dropped).

JavaOptionStatus = Literal["implemented", "mapped", "ignored"]


class ConfigIgnoredWarning(UserWarning):
    """A Java producer option that is accepted but has no effect here (warned once per
    option name per process)."""


@dataclass(frozen=True, slots=True)
class JavaOption:
    """One Java producer option: its field, its kind of value and its status."""

    name: str
    """The Java name (``"linger.ms"``)."""
    field: str | None
    """The :class:`ProducerConfig` field it sets (None when ignored)."""
    kind: str
    """How a value is parsed: a key of ``_PARSERS``."""
    status: JavaOptionStatus
    note: str = ""
    """For ignored options: why, and what to use instead."""
    only: tuple[str, ...] | None = None
    """For ignored options: the only values accepted (case-insensitive); None: any."""


_I: JavaOptionStatus = "implemented"
_M: JavaOptionStatus = "mapped"
_X: JavaOptionStatus = "ignored"
_METRICS = "metrics are read with Producer.metrics() (see the Observability page)"
_OAUTH = "OAUTHBEARER tokens come from sasl_oauth_token_provider (an async callable)"
_JAVA_LOGIN = "Java login modules do not run here"
_TLS = "TLS is configured by ssl_cafile/ssl_certfile/ssl_keyfile or an ssl_context"


def _opt(name: str, field: str | None, kind: str, status: JavaOptionStatus,
         note: str = "", only: tuple[str, ...] | None = None) -> JavaOption:
    return JavaOption(name, field, kind, status, note, only)


JAVA_OPTIONS: tuple[JavaOption, ...] = (
    _opt("acks", "acks", "acks", _I),
    _opt("batch.size", "batch_size", "int", _I),
    _opt("bootstrap.servers", "bootstrap_servers", "str", _I),
    _opt("buffer.memory", "buffer_memory", "long", _I),
    _opt("client.dns.lookup", "client_dns_lookup", "lower_str", _I),
    _opt("client.id", "client_id", "str", _I),
    _opt("compression.gzip.level", "compression_gzip_level", "int", _I),
    _opt("compression.lz4.level", "compression_lz4_level", "int", _I),
    _opt("compression.type", "compression_type", "str", _I),
    _opt("compression.zstd.level", "compression_zstd_level", "int", _I),
    _opt("config.providers", None, "list", _X,
         "config providers are Java classes: resolve ${...} references before", only=("",)),
    _opt("connections.max.idle.ms", "connections_max_idle_ms", "long", _I),
    _opt("delivery.timeout.ms", "delivery_timeout_ms", "int", _I),
    _opt("enable.idempotence", "enable_idempotence", "bool", _I),
    _opt("enable.metrics.push", "enable_metrics_push", "bool", _I),
    _opt("interceptor.classes", "interceptors", "interceptors", _M),
    _opt("key.serializer", "key_serializer", "serializer", _M),
    _opt("linger.ms", "linger_ms", "long", _I),
    _opt("max.block.ms", "max_block_ms", "long", _I),
    _opt("max.in.flight.requests.per.connection", "max_in_flight_requests_per_connection",
         "int", _I),
    _opt("max.request.size", "max_request_size", "int", _I),
    _opt("metadata.max.age.ms", "metadata_max_age_ms", "long", _I),
    _opt("metadata.max.idle.ms", "metadata_max_idle_ms", "long", _I),
    _opt("metadata.recovery.rebootstrap.trigger.ms",
         "metadata_recovery_rebootstrap_trigger_ms", "long", _I),
    _opt("metadata.recovery.strategy", "metadata_recovery_strategy", "lower_str", _I),
    _opt("metric.reporters", None, "list", _X, "Java metric reporters do not run; " + _METRICS),
    _opt("metrics.num.samples", None, "int", _X, _METRICS),
    _opt("metrics.recording.level", None, "str", _X, _METRICS),
    _opt("metrics.sample.window.ms", None, "long", _X, _METRICS),
    _opt("partitioner.adaptive.partitioning.enable", "partitioner_adaptive_partitioning_enable",
         "bool", _I),
    _opt("partitioner.availability.timeout.ms", "partitioner_availability_timeout_ms",
         "long", _I),
    _opt("partitioner.class", "partitioner", "partitioner", _M),
    _opt("partitioner.ignore.keys", "partitioner_ignore_keys", "bool", _I),
    _opt("receive.buffer.bytes", "receive_buffer_bytes", "int", _I),
    _opt("reconnect.backoff.max.ms", "reconnect_backoff_max_ms", "long", _I),
    _opt("reconnect.backoff.ms", "reconnect_backoff_ms", "long", _I),
    _opt("request.timeout.ms", "request_timeout_ms", "int", _I),
    _opt("retries", "retries", "int", _I),
    _opt("retry.backoff.max.ms", "retry_backoff_max_ms", "long", _I),
    _opt("retry.backoff.ms", "retry_backoff_ms", "long", _I),
    _opt("sasl.client.callback.handler.class", None, "str", _X, _JAVA_LOGIN, only=("",)),
    _opt("sasl.jaas.config", "sasl_plain_username", "jaas", _M),
    _opt("sasl.kerberos.kinit.cmd", None, "str", _X, "GSSAPI (Kerberos) is not supported"),
    _opt("sasl.kerberos.min.time.before.relogin", None, "long", _X,
         "GSSAPI (Kerberos) is not supported"),
    _opt("sasl.kerberos.service.name", None, "str", _X, "GSSAPI (Kerberos) is not supported"),
    _opt("sasl.kerberos.ticket.renew.jitter", None, "double", _X,
         "GSSAPI (Kerberos) is not supported"),
    _opt("sasl.kerberos.ticket.renew.window.factor", None, "double", _X,
         "GSSAPI (Kerberos) is not supported"),
    _opt("sasl.login.callback.handler.class", None, "str", _X, _JAVA_LOGIN, only=("",)),
    _opt("sasl.login.class", None, "str", _X, _JAVA_LOGIN, only=("",)),
    _opt("sasl.login.connect.timeout.ms", None, "int", _X, _JAVA_LOGIN),
    _opt("sasl.login.read.timeout.ms", None, "int", _X, _JAVA_LOGIN),
    _opt("sasl.login.refresh.buffer.seconds", None, "int", _X, _JAVA_LOGIN),
    _opt("sasl.login.refresh.min.period.seconds", None, "int", _X, _JAVA_LOGIN),
    _opt("sasl.login.refresh.window.factor", None, "double", _X, _JAVA_LOGIN),
    _opt("sasl.login.refresh.window.jitter", None, "double", _X, _JAVA_LOGIN),
    _opt("sasl.login.retry.backoff.max.ms", None, "long", _X, _JAVA_LOGIN),
    _opt("sasl.login.retry.backoff.ms", None, "long", _X, _JAVA_LOGIN),
    _opt("sasl.mechanism", "sasl_mechanism", "str", _I),
    _opt("sasl.oauthbearer.assertion.algorithm", None, "str", _X, _OAUTH),
    _opt("sasl.oauthbearer.assertion.claim.aud", None, "str", _X, _OAUTH),
    _opt("sasl.oauthbearer.assertion.claim.exp.seconds", None, "int", _X, _OAUTH),
    _opt("sasl.oauthbearer.assertion.claim.iss", None, "str", _X, _OAUTH),
    _opt("sasl.oauthbearer.assertion.claim.jti.include", None, "bool", _X, _OAUTH),
    _opt("sasl.oauthbearer.assertion.claim.nbf.seconds", None, "int", _X, _OAUTH),
    _opt("sasl.oauthbearer.assertion.claim.sub", None, "str", _X, _OAUTH),
    _opt("sasl.oauthbearer.assertion.file", None, "str", _X, _OAUTH, only=("",)),
    _opt("sasl.oauthbearer.assertion.private.key.file", None, "str", _X, _OAUTH, only=("",)),
    _opt("sasl.oauthbearer.assertion.private.key.passphrase", None, "str", _X, _OAUTH),
    _opt("sasl.oauthbearer.assertion.template.file", None, "str", _X, _OAUTH),
    _opt("sasl.oauthbearer.client.credentials.client.id", None, "str", _X, _OAUTH, only=("",)),
    _opt("sasl.oauthbearer.client.credentials.client.secret", None, "str", _X, _OAUTH,
         only=("",)),
    _opt("sasl.oauthbearer.clock.skew.seconds", None, "int", _X, _OAUTH),
    _opt("sasl.oauthbearer.expected.audience", None, "list", _X, _OAUTH),
    _opt("sasl.oauthbearer.expected.issuer", None, "str", _X, _OAUTH),
    _opt("sasl.oauthbearer.header.urlencode", None, "bool", _X, _OAUTH),
    _opt("sasl.oauthbearer.jwks.endpoint.refresh.ms", None, "long", _X, _OAUTH),
    _opt("sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms", None, "long", _X, _OAUTH),
    _opt("sasl.oauthbearer.jwks.endpoint.retry.backoff.ms", None, "long", _X, _OAUTH),
    _opt("sasl.oauthbearer.jwks.endpoint.url", None, "str", _X, _OAUTH),
    _opt("sasl.oauthbearer.jwt.retriever.class", None, "str", _X, _OAUTH),
    _opt("sasl.oauthbearer.jwt.validator.class", None, "str", _X, _OAUTH),
    _opt("sasl.oauthbearer.scope", None, "str", _X, _OAUTH),
    _opt("sasl.oauthbearer.scope.claim.name", None, "str", _X, _OAUTH),
    _opt("sasl.oauthbearer.sub.claim.name", None, "str", _X, _OAUTH),
    _opt("sasl.oauthbearer.token.endpoint.url", None, "str", _X, _OAUTH, only=("",)),
    _opt("security.protocol", "security_protocol", "str", _I),
    _opt("security.providers", None, "str", _X, "JCA security providers are Java's"),
    _opt("send.buffer.bytes", "send_buffer_bytes", "int", _I),
    _opt("socket.connection.setup.timeout.max.ms", "socket_connection_setup_timeout_max_ms",
         "long", _I),
    _opt("socket.connection.setup.timeout.ms", "socket_connection_setup_timeout_ms", "long",
         _I),
    _opt("ssl.cipher.suites", None, "list", _X,
         "Java cipher suite names do not apply to OpenSSL: pass an ssl_context "
         "(ctx.set_ciphers)", only=("",)),
    _opt("ssl.enabled.protocols", None, "list", _X,
         "Python's TLS defaults (TLS 1.2 and 1.3) apply; pass an ssl_context to restrict"),
    _opt("ssl.endpoint.identification.algorithm", "ssl_check_hostname", "hostname_check", _M),
    _opt("ssl.engine.factory.class", None, "str", _X, _TLS, only=("",)),
    _opt("ssl.key.password", "ssl_password", "str", _M),
    _opt("ssl.keymanager.algorithm", None, "str", _X, _TLS),
    _opt("ssl.keystore.certificate.chain", None, "str", _X, _TLS + " (PEM files)", only=("",)),
    _opt("ssl.keystore.key", None, "str", _X, _TLS + " (PEM files)", only=("",)),
    _opt("ssl.keystore.location", "ssl_certfile", "store", _M),
    _opt("ssl.keystore.password", None, "str", _X, "PEM key files take ssl.key.password"),
    _opt("ssl.keystore.type", None, "store_type", _M),
    _opt("ssl.protocol", None, "str", _X,
         "Python's TLS defaults (TLS 1.2 and 1.3) apply; pass an ssl_context to restrict"),
    _opt("ssl.provider", None, "str", _X, _TLS),
    _opt("ssl.secure.random.implementation", None, "str", _X, _TLS),
    _opt("ssl.trustmanager.algorithm", None, "str", _X, _TLS),
    _opt("ssl.truststore.certificates", None, "str", _X, _TLS + " (PEM files)", only=("",)),
    _opt("ssl.truststore.location", "ssl_cafile", "store", _M),
    _opt("ssl.truststore.password", None, "str", _X, "PEM trust stores need no password"),
    _opt("ssl.truststore.type", None, "store_type", _M),
    _opt("transaction.timeout.ms", "transaction_timeout_ms", "int", _I),
    _opt("transaction.two.phase.commit.enable", None, "bool", _X,
         "two-phase commit (KIP-939) is not implemented", only=("false",)),
    _opt("transactional.id", "transactional_id", "str", _I),
    _opt("value.serializer", "value_serializer", "serializer", _M),
    # aioproducer's own dotted names
    _opt("batch.max.size", "batch_max_size", "int", _I),
    _opt("receive.message.max.bytes", "max_response_bytes", "int", _I),
)
"""Every option of the Java producer (and aioproducer's own dotted names)."""

_BY_NORM: dict[str, JavaOption] = {_normalise(o.name): o for o in JAVA_OPTIONS}
#: Python names whose Java option takes another kind of value (a store location, a
#: JAAS line, 'https') or that have no Java option: how their strings are parsed.
_FIELD_KINDS = {"ssl_check_hostname": "bool", "ssl_cafile": "optional_str",
                "ssl_certfile": "optional_str", "ssl_keyfile": "optional_str",
                "sasl_plain_username": "optional_str", "sasl_plain_password": "optional_str"}
#: Python name -> the row of the Java option setting that field (same kind of value).
_BY_FIELD: dict[str, JavaOption] = {o.field: o for o in JAVA_OPTIONS
                                    if o.field is not None and o.field not in _FIELD_KINDS}
_INT32 = (-(2**31), 2**31 - 1)
_INTEGER = re.compile(r"[+-]?[0-9]+")  # what Java's Integer.parseInt / Long.parseLong take
_INT64 = (-(2**63), 2**63 - 1)
_warned: set[str] = set()
_FIELD_NAMES = frozenset(f.name for f in dataclasses.fields(ProducerConfig)
                         if not f.name.startswith("_"))


def _canonical_name(name: str) -> str:
    """The field an option name sets (its normalised name if not a known option)."""
    norm = _normalise(name)
    opt = _BY_NORM.get(norm) or _BY_FIELD.get(norm)
    return opt.field if opt is not None and opt.field is not None else norm


def java_option(name: str) -> JavaOption | None:
    """The table row of a Java option (dotted or with underscores), or None."""
    return _BY_NORM.get(_normalise(name))


def effective_status(opt: JavaOption) -> JavaOptionStatus:
    """``opt``'s status in this build: an option whose field does not exist (yet) is
    ignored."""
    if opt.field is not None and opt.field not in _FIELD_NAMES:
        return "ignored"
    return opt.status


def _warn_ignored(key: str, opt: JavaOption) -> None:
    if opt.name in _warned:
        return
    _warned.add(opt.name)
    note = opt.note or "not available in this version"
    warnings.warn(f"producer option {key!r} has no effect in aioproducer: {note}",
                  ConfigIgnoredWarning, stacklevel=_caller_level())


def _caller_level() -> int:
    """The ``stacklevel`` of the first caller outside this package."""
    package = os.path.dirname(__file__) + os.sep
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]
    return level


def _text(key: str, value: Any, forms: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{key} must be {forms}, got {type(value).__name__} {value!r}")
    return value.strip()


def _parse_integer(key: str, value: Any, bounds: tuple[int, int]) -> Any:
    if not isinstance(value, str):
        return value  # checked by validated(), with the field's own bounds
    text = value.strip()
    if not _INTEGER.fullmatch(text):
        raise ConfigError(f"{key}: {value!r} is not an integer; give a whole number "
                          "(an int, or a string such as '16384')")
    number = int(text, 10)
    if not bounds[0] <= number <= bounds[1]:
        raise ConfigError(f"{key}: {value!r} is out of range ({bounds[0]}..{bounds[1]})")
    return number


def _parse_bool(key: str, value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, str):
        return value
    text = value.strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise ConfigError(f"{key}: {value!r} is not a boolean; give true or false "
                      "(a bool, or the string 'true' or 'false')")


def _parse_double(key: str, value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return float(value.strip())
    except ValueError:
        raise ConfigError(f"{key}: {value!r} is not a number") from None


def _parse_list(key: str, value: Any) -> Any:
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    return value


def _parse_acks_option(key: str, value: Any) -> Any:
    try:
        acks = _parse_acks(value.strip().lower() if isinstance(value, str) else value)
        if acks in (0, 1, -1):
            return acks
    except ConfigError:
        pass
    raise ConfigError(f"{key} must be 'all' (or -1), 1 or 0 (an int or a string), "
                      f"got {value!r}")


def _parse_serializer(key: str, value: Any) -> Any:
    if value is None or callable(value):
        return value
    text = _text(key, value, "a callable, a Java serializer class name or None")
    if not text:
        return None
    from .serializers import java_serializer  # serializers imports this module
    return java_serializer(key, text)


_JAVA_PARTITIONERS = {
    "org.apache.kafka.clients.producer.internals.DefaultPartitioner": "murmur2",
}


def _parse_partitioner(key: str, value: Any) -> Any:
    if value is None:
        return "murmur2"
    if not isinstance(value, str):  # a callable or a Partitioner object: validated()
        return value
    text = _text(key, value, "'murmur2', 'xxhash', a callable or a Java class name")
    if text in ("", "murmur2", "xxhash"):
        return text or "murmur2"
    if text in _JAVA_PARTITIONERS:
        return _JAVA_PARTITIONERS[text]
    raise ConfigError(
        f"{key}: the Java partitioner {text!r} has no equivalent here; leave it unset "
        "(Java's built-in murmur2 partitioning, the default), or give 'murmur2', 'xxhash' "
        "or a callable (topic, key_bytes, num_partitions) -> int")


def _parse_interceptors(key: str, opt: JavaOption, value: Any) -> Any:
    if isinstance(value, str):
        value = _parse_list(key, value)
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value):
        _warn_ignored(key, dataclasses.replace(
            opt, note=f"Java interceptor classes ({', '.join(value)}) do not run here; give "
                      "Python interceptor objects (see aioproducer.interceptors)"))
        return ()
    return () if isinstance(value, list) and not value else value


def _parse_hostname_check(key: str, value: Any) -> Any:
    if isinstance(value, bool):
        return value
    text = _text(key, value, "'https' or '' (the empty string)")
    if text.lower() in ("https", ""):
        return bool(text)
    raise ConfigError(f"{key}: {value!r} is not supported; give 'https' (check the broker's "
                      "host name, the default) or '' (do not)")


_JAAS = re.compile(r"""(\w+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;"]+))""")
_JAAS_MODULES = {
    "org.apache.kafka.common.security.plain.PlainLoginModule",
    "org.apache.kafka.common.security.scram.ScramLoginModule",
}


def _parse_jaas(key: str, value: Any) -> dict[str, Any]:
    text = _text(key, value, "a JAAS login line (str)")
    if not text:
        return {}
    module, _, rest = text.partition(" ")
    if module not in _JAAS_MODULES:
        raise ConfigError(
            f"{key}: the login module {module!r} is not supported; PLAIN and SCRAM take "
            "username=\"...\" password=\"...\" in PlainLoginModule or ScramLoginModule "
            "(or give sasl_plain_username and sasl_plain_password); OAUTHBEARER takes "
            "sasl_oauth_token_provider")
    opts = {m.group(1): (m.group(2) if m.group(2) is not None else m.group(3))
            for m in _JAAS.finditer(rest)}
    opts = {k: re.sub(r"\\(.)", r"\1", v) for k, v in opts.items()}
    if "username" not in opts or "password" not in opts:
        raise ConfigError(f"{key}: the JAAS line needs username=\"...\" and password=\"...\"")
    return {"sasl_plain_username": opts["username"], "sasl_plain_password": opts["password"]}


_PARSERS: dict[str, Callable[[str, Any], Any]] = {
    "int": lambda k, v: _parse_integer(k, v, _INT32),
    "long": lambda k, v: _parse_integer(k, v, _INT64),
    "bool": _parse_bool,
    "double": _parse_double,
    "list": _parse_list,
    "str": lambda k, v: v.strip() if isinstance(v, str) else v,
    # Java's CaseInsensitiveValidString options
    "lower_str": lambda k, v: v.strip().lower() if isinstance(v, str) else v,
    "optional_str": lambda k, v: (v.strip() or None) if isinstance(v, str) else v,
    "acks": _parse_acks_option,
    "serializer": _parse_serializer,
    "partitioner": _parse_partitioner,
    "hostname_check": _parse_hostname_check,
    "store": lambda k, v: (v.strip() or None) if isinstance(v, str) else v,
}


def _convert(key: str, value: Any) -> dict[str, Any]:
    """The field assignments of the option ``key`` (any spelling) given ``value``."""
    norm = _normalise(key)
    opt = _BY_NORM.get(norm)
    if opt is None:
        if norm in _FIELD_KINDS:  # a Python name whose Java option takes other values
            return {norm: _PARSERS[_FIELD_KINDS[norm]](key, value)}
        opt = _BY_FIELD.get(norm)
        if opt is None:
            if norm in _FIELD_NAMES:
                return {norm: value}
            import difflib  # only for this message

            names = sorted(_FIELD_NAMES | {o.name for o in JAVA_OPTIONS})
            close = difflib.get_close_matches(key, names, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"unknown producer option {key!r}{hint}")
    status = effective_status(opt)
    if status == "ignored":
        parsed = _PARSERS[opt.kind](key, value) if opt.kind in _PARSERS else value
        if opt.only is not None and value is not None:
            shown = ",".join(map(str, parsed)) if isinstance(parsed, list) else str(parsed)
            if shown.strip().lower() not in opt.only:
                accepted = " or ".join(repr(v) for v in opt.only)
                raise ConfigError(f"{key}={value!r} cannot be honoured: {opt.note}; "
                                  f"only {accepted} is accepted")
        _warn_ignored(key, opt)
        return {}
    if opt.kind == "store_type":
        store = opt.name.split(".")[1]
        return {f"_{store}_type": _text(key, value, "a str such as 'PEM'").upper()}
    assert opt.field is not None
    if opt.kind == "store":
        path = _PARSERS["store"](key, value)
        return {opt.field: path, f"_{opt.name.split('.')[1]}_location": path is not None}
    if opt.kind == "jaas":
        return _parse_jaas(key, value)
    if opt.kind == "interceptors":
        return {opt.field: _parse_interceptors(key, opt, value)}
    return {opt.field: _PARSERS[opt.kind](key, value)}


def _resolve_stores(merged: dict[str, Any]) -> None:
    """Java key and trust stores given by location must be PEM files (they become
    ssl_certfile / ssl_cafile); JKS and PKCS12 stores are refused."""
    for store, field_name in (("keystore", "ssl_certfile"), ("truststore", "ssl_cafile")):
        kind = merged.pop(f"_{store}_type", "JKS")
        if merged.pop(f"_{store}_location", False) and kind != "PEM":
            raise ConfigError(
                f"ssl.{store}.location: {kind} stores are not supported; convert the store "
                f"to PEM and set ssl.{store}.type=PEM (or give {field_name})")


def parse_properties(text: str) -> dict[str, str]:
    """``key -> value`` of a Java ``.properties`` text, as ``java.util.Properties.load``
    reads it: ``#`` and ``!`` comments, ``key=value``, ``key: value`` and ``key value``,
    backslash line continuations, the escapes ``\\t \\n \\r \\f \\uXXXX`` (and ``\\x``
    for any other ``x``); a repeated key keeps its last value."""
    result: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].lstrip(" \t\f")
        i += 1
        if not line or line[0] in "#!":
            continue
        while _continues(line) and i < len(lines):
            line = line[:-1] + lines[i].lstrip(" \t\f")
            i += 1
        if _continues(line):
            line = line[:-1]
        key_end = _key_end(line)
        rest = line[key_end:].lstrip(" \t\f")
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t\f")
        result[_unescape(line[:key_end])] = _unescape(rest)
    return result


def _continues(line: str) -> bool:
    backslashes = len(line) - len(line.rstrip("\\"))
    return backslashes % 2 == 1


def _key_end(line: str) -> int:
    j = 0
    while j < len(line):
        ch = line[j]
        if ch == "\\":
            j += 2
            continue
        if ch in "=: \t\f":
            return j
        j += 1
    return len(line)


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    j = 0
    while j < len(text):
        ch = text[j]
        if ch != "\\" or j + 1 == len(text):
            out.append(ch)
            j += 1
            continue
        nxt = text[j + 1]
        if nxt == "u":
            code = text[j + 2:j + 6]
            if len(code) != 4 or any(c not in "0123456789abcdefABCDEF" for c in code):
                raise ConfigError(f"malformed \\uxxxx escape in .properties text: {text!r}")
            out.append(chr(int(code, 16)))
            j += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        j += 2
    return "".join(out)
