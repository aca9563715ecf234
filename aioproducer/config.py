"""Validated producer configuration.

Options use Python names (``linger_ms``); the Java producer's dotted names
(``"linger.ms"``) are accepted too, so a config dict can be carried over as is (the
Java side of that is :mod:`aioproducer.java`). Each option is declared once, as a field
of :class:`ProducerConfig` whose metadata (an :class:`Option`) carries its Java name,
its kind of value and its range; the checks, the table of Java names and the parsing of
string values are derived from it. A config checks itself when it is made, and a bad
option is a :class:`~aioproducer.errors.ConfigError` that names the option and what it
accepts.
"""

from __future__ import annotations

import dataclasses
import os
import ssl
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .compression import validate_level
from .errors import ConfigError
from .java import (
    ConfigIgnoredWarning,
    JavaNames,
    JavaOption,
    JavaOptionStatus,
    check_stores,
    parse_properties,
)
from .types import (
    SASL_MECHANISMS,
    SECURITY_PROTOCOLS,
    PartitionFunction,
    Serializer,
    TokenProvider,
)

if TYPE_CHECKING:
    from .interceptors import ProducerInterceptor
    from .partitioner import Partitioner

__all__ = [
    "JAVA_OPTIONS",
    "ConfigIgnoredWarning",
    "JavaOption",
    "Option",
    "ProducerConfig",
    "check_options",
    "effective_status",
    "java_option",
    "parse_properties",
]

_DEFAULT_BATCH_MAX = 262144


@dataclass(frozen=True, slots=True)
class Option:
    """What the metadata of a :class:`ProducerConfig` field says about its option."""

    kind: str = "any"
    """The kind of value: how a string given for it is parsed (a key of
    :data:`aioproducer.java.PARSERS`; ``"any"``: taken as it is), and, unless ``check``
    is set, how the value is checked (``int``/``long``: an int of at least ``min``;
    ``bool``; ``str`` and the like: a str, one of ``choices`` if set; ``serializer``: a
    callable)."""
    java: str | None = None
    """The Java producer's name of the option, when it sets this field as it is."""
    mapped: bool = False
    """The Java option's value is translated to ours (a class name, a password of
    another name): its status in :data:`JAVA_OPTIONS` is ``mapped``."""
    min: int | None = None
    """The smallest value accepted (``int``/``long``)."""
    choices: tuple[str, ...] | None = None
    """The values accepted (``str``)."""
    check: Callable[[str, Any], None] | None = None
    """Checks ``(name, value)`` instead of the kind's check."""
    nullable: bool = False
    """None is accepted (it is the default)."""

    def validate(self, name: str, value: Any) -> None:
        """ConfigError unless ``value`` is one the option takes."""
        if self.check is not None:
            self.check(name, value)
        elif value is None and self.nullable:
            return
        elif self.kind in ("int", "long"):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"{name} must be an int, got {type(value).__name__}")
            if self.min is not None and value < self.min:
                raise ConfigError(f"{name} must be >= {self.min}, got {value}")
        elif self.kind == "bool":
            if not isinstance(value, bool):
                raise ConfigError(f"{name} must be a bool (or 'true'/'false'), got {value!r}")
        elif self.kind in ("str", "lower_str", "optional_str"):
            if not isinstance(value, str):
                raise ConfigError(f"{name} must be a str")
            if self.choices is not None and value not in self.choices:
                raise ConfigError(f"{name} must be one of {', '.join(self.choices)}, "
                                  f"got {value!r}")
        elif self.kind == "serializer" and not callable(value):
            raise ConfigError(f"{name} must be a callable or None")


def _spec(*, kind: str = "any", java: str | None = None, mapped: bool = False,
          min: int | None = None, choices: tuple[str, ...] | None = None,
          check: Callable[[str, Any], None] | None = None) -> dict[str, Option]:
    """The metadata of a :class:`ProducerConfig` field: its :class:`Option`."""
    return {"option": Option(kind, java, mapped, min, choices, check)}


# -- Checks of one value (the options whose kind says too little) ------------------------

def _check_servers(name: str, value: Any) -> None:
    if not _parse_servers(value):
        raise ConfigError(f"{name} is empty; give at least one 'host:port'")


def _check_acks(name: str, value: Any) -> None:
    if value not in (0, 1, -1):
        raise ConfigError(f"acks must be 0, 1, -1 or 'all', got {value!r}")


def _level(codec: str) -> Callable[[str, Any], None]:
    """The check of a codec's level option (the ranges are the codecs')."""
    def check(name: str, value: Any) -> None:
        validate_level(codec, value)
    return check


def _check_partitioner(name: str, value: Any) -> None:
    if isinstance(value, str):  # str has a partition() method of its own
        valid = value in ("murmur2", "xxhash")
    else:
        valid = callable(value) or callable(getattr(value, "partition", None))
    if not valid:
        raise ConfigError(
            "partitioner must be 'murmur2', 'xxhash', an object with partition(topic, "
            "key, key_bytes, value, value_bytes, cluster) (aioproducer.partitioner."
            "Partitioner) or a callable "
            "(topic, key_bytes, num_partitions) -> int"
        )


def _check_transactional_id(name: str, value: Any) -> None:
    if value is not None and (not isinstance(value, str) or not value):
        raise ConfigError("transactional_id must be a non-empty str (or None)")


def _check_interceptors(name: str, value: Any) -> None:
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise ConfigError("interceptors must be a list of interceptor objects")
    for ic in value:
        if not (callable(getattr(ic, "on_send", None))
                or callable(getattr(ic, "on_acknowledgement", None))):
            raise ConfigError(f"interceptor {ic!r} has neither on_send nor "
                              "on_acknowledgement")


def _check_tracer_provider(name: str, value: Any) -> None:
    if value is not None and value != "global" and not callable(
            getattr(value, "get_tracer", None)):
        raise ConfigError("tracer_provider must be an OpenTelemetry TracerProvider, "
                          f"'global' or None, got {type(value).__name__}")


def _check_meter_provider(name: str, value: Any) -> None:
    if value is not None and value != "global" and not callable(
            getattr(value, "get_meter", None)):
        raise ConfigError("meter_provider must be an OpenTelemetry MeterProvider, "
                          f"'global' or None, got {type(value).__name__}")


def _check_propagator(name: str, value: Any) -> None:
    if value is not None and not callable(getattr(value, "inject", None)):
        raise ConfigError("propagator must be an OpenTelemetry TextMapPropagator "
                          f"(with inject()) or None, got {type(value).__name__}")


def check_options(tracer_provider: Any, meter_provider: Any, propagator: Any) -> None:
    """Typed errors for bad OpenTelemetry options (imports nothing of OpenTelemetry)."""
    _check_tracer_provider("tracer_provider", tracer_provider)
    _check_meter_provider("meter_provider", meter_provider)
    _check_propagator("propagator", propagator)


def _check_protocol(name: str, value: Any) -> None:
    if not isinstance(value, str) or value.upper() not in SECURITY_PROTOCOLS:
        raise ConfigError(f"security_protocol must be one of {', '.join(SECURITY_PROTOCOLS)}"
                          f", got {value!r}")


def _check_ssl_context(name: str, value: Any) -> None:
    if value is not None and not isinstance(value, ssl.SSLContext):
        raise ConfigError("ssl_context must be an ssl.SSLContext")


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducerConfig:
    """Every producer option, with the Java producer's defaults.

    Each field mirrors the Java option of the same name with dots for underscores.
    Making one checks every value (:class:`~aioproducer.errors.ConfigError`) and fills
    in the defaults that depend on other options (``enable_idempotence``,
    ``batch_max_size``).
    """

    bootstrap_servers: str | list[str] = field(
        default="127.0.0.1:9092",
        metadata=_spec(kind="str", java="bootstrap.servers", check=_check_servers))
    """``bootstrap.servers``: ``host:port`` entries, a comma-separated string or a list."""
    client_id: str = field(default="aioproducer", metadata=_spec(kind="str", java="client.id"))
    """``client.id``"""
    acks: int = field(default=-1, metadata=_spec(kind="acks", java="acks", check=_check_acks))
    """``acks``: 0 (no response), 1 (leader) or -1 / ``"all"`` (all in-sync replicas)."""
    enable_idempotence: bool | None = field(
        default=None,
        metadata=_spec(kind="bool", java="enable.idempotence"))
    """``enable.idempotence``: on by default when the other options allow it (acks=all,
    retries > 0, max_in_flight <= 5), as in Java 3.x+. Setting True with conflicting
    options is an error."""
    linger_ms: int = field(default=5, metadata=_spec(kind="long", java="linger.ms", min=0))
    """``linger.ms``: how long a batch waits for more records before it is sendable."""
    batch_size: int = field(default=16384, metadata=_spec(kind="int", java="batch.size", min=1))
    """``batch.size``: bytes per batch (and per pooled buffer); a partition's batches
    start at this size."""
    batch_max_size: int | None = field(
        default=None,
        metadata=_spec(kind="int", java="batch.max.size"))
    """``batch.max.size`` (KIP-782): a partition whose batches fill up before they are
    sent gets batches of twice the size, up to this (default: 262144, or
    ``batch_size`` if larger; at most ``max_request_size``). Set it to ``batch_size``
    for fixed-size batches, as in the Java producer."""
    buffer_memory: int = field(
        default=32 * 1024 * 1024,
        metadata=_spec(kind="long", java="buffer.memory", min=1))
    """``buffer.memory``: hard bound on the bytes buffered for sending."""
    max_block_ms: int = field(
        default=60000,
        metadata=_spec(kind="long", java="max.block.ms", min=0))
    """``max.block.ms``: how long ``send()`` may wait for metadata or buffer memory."""
    max_request_size: int = field(
        default=1048576,
        metadata=_spec(kind="int", java="max.request.size", min=1))
    """``max.request.size``: bound on one record and on one Produce request."""
    request_timeout_ms: int = field(
        default=30000,
        metadata=_spec(kind="int", java="request.timeout.ms", min=1))
    """``request.timeout.ms``"""
    delivery_timeout_ms: int = field(
        default=120000,
        metadata=_spec(kind="int", java="delivery.timeout.ms", min=1))
    """``delivery.timeout.ms``: bound on a record's whole life, from send to acknowledgement."""
    retries: int = field(default=2**31 - 1, metadata=_spec(kind="int", java="retries", min=0))
    """``retries``"""
    retry_backoff_ms: int = field(
        default=100,
        metadata=_spec(kind="long", java="retry.backoff.ms", min=0))
    """``retry.backoff.ms``"""
    retry_backoff_max_ms: int = field(
        default=1000,
        metadata=_spec(kind="long", java="retry.backoff.max.ms", min=0))
    """``retry.backoff.max.ms``"""
    max_in_flight_requests_per_connection: int = field(
        default=5,
        metadata=_spec(kind="int", java="max.in.flight.requests.per.connection", min=1))
    """``max.in.flight.requests.per.connection``"""
    metadata_max_age_ms: int = field(
        default=300000,
        metadata=_spec(kind="long", java="metadata.max.age.ms", min=0))
    """``metadata.max.age.ms``"""
    metadata_recovery_strategy: str = field(
        default="rebootstrap", metadata=_spec(
            kind="lower_str", java="metadata.recovery.strategy", choices=("rebootstrap", "none")))
    """``metadata.recovery.strategy`` (KIP-899): ``"rebootstrap"`` goes back to
    ``bootstrap_servers`` when no known broker answers (see the trigger below) or a
    broker answers REBOOTSTRAP_REQUIRED; ``"none"`` never does."""
    metadata_recovery_rebootstrap_trigger_ms: int = field(
        default=300000,
        metadata=_spec(kind="long", java="metadata.recovery.rebootstrap.trigger.ms", min=0))
    """``metadata.recovery.rebootstrap.trigger.ms`` (KIP-1102): how long no known
    broker may answer before the producer rebootstraps."""
    metadata_max_idle_ms: int = field(
        default=300000,
        metadata=_spec(kind="long", java="metadata.max.idle.ms", min=1))
    """``metadata.max.idle.ms``: a topic not sent to for this long (and with nothing
    buffered or in flight) leaves the producer's metadata and per-topic state."""
    reconnect_backoff_ms: int = field(
        default=50,
        metadata=_spec(kind="long", java="reconnect.backoff.ms", min=0))
    """``reconnect.backoff.ms``"""
    reconnect_backoff_max_ms: int = field(
        default=1000,
        metadata=_spec(kind="long", java="reconnect.backoff.max.ms", min=0))
    """``reconnect.backoff.max.ms``"""
    socket_connection_setup_timeout_ms: int = field(
        default=10000,
        metadata=_spec(kind="long", java="socket.connection.setup.timeout.ms", min=1))
    """``socket.connection.setup.timeout.ms``: the first connection attempt to a broker
    waits this long; each failed attempt in a row doubles it (with +-20% jitter)..."""
    socket_connection_setup_timeout_max_ms: int = field(
        default=30000,
        metadata=_spec(kind="long", java="socket.connection.setup.timeout.max.ms", min=1))
    """``socket.connection.setup.timeout.max.ms``: ...up to this."""
    connections_max_idle_ms: int = field(
        default=540000,
        metadata=_spec(kind="long", java="connections.max.idle.ms", min=-1))
    """``connections.max.idle.ms``: a connection with nothing sent or received for this
    long is closed (and reopened when needed); -1 keeps connections open."""
    send_buffer_bytes: int = field(
        default=-1,
        metadata=_spec(kind="int", java="send.buffer.bytes", min=-1))
    """``send.buffer.bytes``: SO_SNDBUF of broker connections; -1 (the default here;
    Java's is 131072) leaves the operating system's auto-tuned size."""
    receive_buffer_bytes: int = field(
        default=-1,
        metadata=_spec(kind="int", java="receive.buffer.bytes", min=-1))
    """``receive.buffer.bytes``: SO_RCVBUF; -1 (the default here; Java's is 32768) leaves
    the operating system's auto-tuned size."""
    client_dns_lookup: str = field(
        default="use_all_dns_ips", metadata=_spec(
            kind="lower_str", java="client.dns.lookup",
            choices=("use_all_dns_ips", "resolve_canonical_bootstrap_servers_only")))
    """``client.dns.lookup``: ``use_all_dns_ips`` (a name's addresses are tried in turn)
    or ``resolve_canonical_bootstrap_servers_only`` (each bootstrap server is replaced
    by the canonical names of its addresses)."""
    max_response_bytes: int = field(
        default=100 * 1024 * 1024,
        metadata=_spec(kind="int", java="receive.message.max.bytes", min=1024))
    """Largest response frame accepted from a broker (librdkafka's
    ``receive.message.max.bytes``, also accepted): a bigger size prefix closes the
    connection with a ProtocolError before anything is allocated for the frame."""
    compression_type: str = field(
        default="none", metadata=_spec(
            kind="str", java="compression.type",
            choices=("none", "gzip", "snappy", "lz4", "zstd")))
    """``compression.type``: ``none``, ``gzip``, ``snappy``, ``lz4`` or ``zstd``. Batches
    are compressed once, when they close."""
    compression_gzip_level: int = field(
        default=-1,
        metadata=_spec(kind="int", java="compression.gzip.level", check=_level("gzip")))
    """``compression.gzip.level``: 1..9, or -1 for the codec's default (6)."""
    compression_lz4_level: int = field(
        default=9,
        metadata=_spec(kind="int", java="compression.lz4.level", check=_level("lz4")))
    """``compression.lz4.level``: 1..17; 9 (the default) is LZ4's fast mode, others LZ4-HC."""
    compression_zstd_level: int = field(
        default=3,
        metadata=_spec(kind="int", java="compression.zstd.level", check=_level("zstd")))
    """``compression.zstd.level``: -131072..22 (negative levels are zstd's fast modes)."""
    compression_thread: bool = field(
        default=True, metadata=_spec(kind="bool"))
    """With ``zstd`` or ``lz4``: compress full batches on a thread of the producer's
    own, which never takes the GIL, while the event loop goes on filling the next batch
    (librdkafka compresses off its application thread too). Only batches expected to
    take 200 us or more to compress go (docs/compression.md). False compresses every
    batch on the event loop, when the Sender takes it. No Java equivalent."""
    partitioner: str | PartitionFunction | Partitioner = field(
        default="murmur2", metadata=_spec(
            kind="partitioner", java="partitioner.class", mapped=True, check=_check_partitioner))
    """``partitioner.class``: ``"murmur2"`` (Java-compatible, default), ``"xxhash"``
    (fast, not Java-compatible) or a callable ``(topic, key_bytes, num_partitions) -> int``."""
    enable_metrics_push: bool = field(
        default=True,
        metadata=_spec(kind="bool", java="enable.metrics.push"))
    """``enable.metrics.push`` (KIP-714): when a broker offers a client-metrics
    subscription, push the subscribed metrics to it (see :mod:`aioproducer.telemetry`)."""
    partitioner_ignore_keys: bool = field(
        default=False,
        metadata=_spec(kind="bool", java="partitioner.ignore.keys"))
    """``partitioner.ignore.keys``: keyed records are spread like keyless ones."""
    partitioner_adaptive_partitioning_enable: bool = field(
        default=True,
        metadata=_spec(kind="bool", java="partitioner.adaptive.partitioning.enable"))
    """``partitioner.adaptive.partitioning.enable``: keyless records move on to a
    partition with a probability inversely proportional to its queued batches (KIP-794)."""
    partitioner_availability_timeout_ms: int = field(
        default=0,
        metadata=_spec(kind="long", java="partitioner.availability.timeout.ms", min=0))
    """``partitioner.availability.timeout.ms``: keyless records skip the partitions of a
    leader that has had batches ready it could not take for this long; 0: off."""
    key_serializer: Serializer | None = field(
        default=None,
        metadata=_spec(kind="serializer", java="key.serializer", mapped=True))
    """``key.serializer``: a callable; without one, keys must be bytes-like or None."""
    value_serializer: Serializer | None = field(
        default=None,
        metadata=_spec(kind="serializer", java="value.serializer", mapped=True))
    """``value.serializer``: a callable; without one, values must be bytes-like or None."""
    transactional_id: str | None = field(
        default=None,
        metadata=_spec(kind="str", java="transactional.id", check=_check_transactional_id))
    """``transactional.id``: makes the producer transactional (implies idempotence)."""
    transaction_timeout_ms: int = field(
        default=60000,
        metadata=_spec(kind="int", java="transaction.timeout.ms", min=1))
    """``transaction.timeout.ms``: the coordinator aborts a transaction left open longer."""

    interceptors: Sequence[ProducerInterceptor] = field(
        default=(), metadata=_spec(
            kind="interceptors", java="interceptor.classes", mapped=True,
            check=_check_interceptors))
    """``interceptor.classes``: objects with ``on_send(record) -> record`` and/or
    ``on_acknowledgement(metadata, exception)`` (see :mod:`aioproducer.interceptors`)."""
    tracer_provider: Any = field(
        default=None, repr=False,
        metadata=_spec(check=_check_tracer_provider))
    """OpenTelemetry tracing (``aioproducer[otel]``): a ``TracerProvider``, or
    ``"global"`` for the global one; each ``send()`` then makes a PRODUCER span and
    takes the Python path (see :mod:`aioproducer.otel`). None: no tracing, no cost."""
    meter_provider: Any = field(
        default=None, repr=False,
        metadata=_spec(check=_check_meter_provider))
    """OpenTelemetry metrics: a ``MeterProvider`` or ``"global"``; the producer's
    metrics become observable instruments (see :mod:`aioproducer.otel`)."""
    propagator: Any = field(default=None, repr=False, metadata=_spec(check=_check_propagator))
    """The ``TextMapPropagator`` that writes the span context into the record headers
    when tracing (None: OpenTelemetry's global propagator, W3C ``traceparent``)."""
    security_protocol: str = field(
        default="PLAINTEXT",
        metadata=_spec(kind="str", java="security.protocol", check=_check_protocol))
    """``security.protocol``: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL."""
    ssl_context: ssl.SSLContext | None = field(
        default=None, repr=False,
        metadata=_spec(check=_check_ssl_context))
    """A ready ``ssl.SSLContext`` (else one is built from the ``ssl_*`` files)."""
    ssl_cafile: str | None = field(default=None, metadata=_spec(kind="optional_str"))
    """PEM file of the CA(s) that signed the brokers' certificates (default: system CAs)."""
    ssl_certfile: str | None = field(default=None, metadata=_spec(kind="optional_str"))
    """PEM client certificate, for brokers that require mutual TLS."""
    ssl_keyfile: str | None = field(default=None, metadata=_spec(kind="optional_str"))
    """PEM private key of ``ssl_certfile`` (if not in the same file)."""
    ssl_password: str | None = field(
        default=None, repr=False,
        metadata=_spec(kind="str", java="ssl.key.password", mapped=True))
    """Password of ``ssl_keyfile``."""
    ssl_check_hostname: bool = field(default=True, metadata=_spec(kind="bool"))
    """Check that the broker's certificate names the host connected to."""
    sasl_mechanism: str = field(default="PLAIN", metadata=_spec(kind="str", java="sasl.mechanism"))
    """``sasl.mechanism``: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER."""
    sasl_plain_username: str | None = field(default=None, metadata=_spec(kind="optional_str"))
    """User name for PLAIN and SCRAM."""
    sasl_plain_password: str | None = field(
        default=None, repr=False,
        metadata=_spec(kind="optional_str"))
    """Password for PLAIN and SCRAM."""
    sasl_oauth_token_provider: TokenProvider | None = field(
        default=None, repr=False,
        metadata=_spec())
    """OAUTHBEARER: ``async () -> token`` or ``-> (token, {extension: value})``, called
    at every (re-)authentication."""

    def __post_init__(self) -> None:
        for name, option in _OPTIONS:
            option.validate(name, getattr(self, name))
        self._check_together()

    def _check_together(self) -> None:
        """The rules between options; fills in the derived defaults."""
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
        elif not self.batch_size <= batch_max <= max(self.batch_size, self.max_request_size):
            raise ConfigError(
                f"batch_max_size must be between batch_size ({self.batch_size}) and "
                f"max_request_size ({self.max_request_size}), got {batch_max}")
        if self.max_request_size > self.buffer_memory:
            # Java allows this, but a record that passes max_request_size could then
            # never get memory: keep the bound honest.
            raise ConfigError("max_request_size must be <= buffer_memory")
        self._check_security()
        # (A frozen dataclass: the derived defaults are set past its __setattr__.)
        object.__setattr__(self, "enable_idempotence", self._idempotence())
        object.__setattr__(self, "batch_max_size", batch_max)

    def _idempotence(self) -> bool:
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
            return not conflicts
        if idempotence and conflicts:
            raise ConfigError(
                "enable_idempotence=True conflicts with " + ", ".join(conflicts)
            )
        return idempotence

    def _check_security(self) -> None:
        proto = self.security_protocol.upper()
        tls_opts = [n for n in ("ssl_context", "ssl_cafile", "ssl_certfile", "ssl_keyfile",
                                "ssl_password") if getattr(self, n) is not None]
        if tls_opts and proto not in ("SSL", "SASL_SSL"):
            raise ConfigError(f"{', '.join(tls_opts)} given but security_protocol is {proto}; "
                              "use SSL or SASL_SSL")
        if self.ssl_keyfile is not None and self.ssl_certfile is None:
            raise ConfigError("ssl_keyfile needs ssl_certfile")
        if proto not in ("SASL_PLAINTEXT", "SASL_SSL"):
            return
        mech = self.sasl_mechanism.upper()
        if mech not in SASL_MECHANISMS:
            raise ConfigError(f"sasl_mechanism must be one of {', '.join(SASL_MECHANISMS)}, "
                              f"got {self.sasl_mechanism!r}")
        if mech == "OAUTHBEARER":
            if not callable(self.sasl_oauth_token_provider):
                raise ConfigError("sasl_mechanism OAUTHBEARER needs sasl_oauth_token_provider,"
                                  " an async callable returning a token")
        elif not self.sasl_plain_username or self.sasl_plain_password is None:
            raise ConfigError(f"sasl_mechanism {mech} needs sasl_plain_username and "
                              "sasl_plain_password")

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
                for name, parsed in _NAMES.convert(raw_name, value).items():
                    if name in merged:
                        raise ConfigError(f"option {raw_name!r} is given twice")
                    merged[name] = parsed
        check_stores(merged)
        return cls(**merged)

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
        replaced = {_NAMES.canonical(k) for k in overrides}
        options = {k: v for k, v in options.items() if _NAMES.canonical(k) not in replaced}
        options.update(overrides)
        return cls.from_options(options)

    def validated(self) -> ProducerConfig:
        """The config itself: it was checked, and its derived defaults filled in, when
        it was made (a config cannot be made unchecked)."""
        return self

    @property
    def compression_level(self) -> int:
        """The level option of ``compression_type`` (0 for codecs without levels)."""
        return {
            "gzip": self.compression_gzip_level,
            "lz4": self.compression_lz4_level,
            "zstd": self.compression_zstd_level,
        }.get(self.compression_type, 0)

    @property
    def servers(self) -> list[str]:
        """``bootstrap_servers`` as a list of ``host:port`` strings."""
        return _parse_servers(self.bootstrap_servers)


def _parse_servers(value: str | list[str]) -> list[str]:
    items = value.split(",") if isinstance(value, str) else list(value)
    return [s.strip() for s in items if isinstance(s, str) and s.strip()]


#: ``(field name, Option)`` of every field, in declaration order (None is accepted where
#: it is the default).
_OPTIONS: tuple[tuple[str, Option], ...] = tuple(
    (f.name, dataclasses.replace(f.metadata["option"], nullable=f.default is None))
    for f in dataclasses.fields(ProducerConfig))

_NAMES = JavaNames(
    (JavaOption(o.java, name, o.kind, "mapped" if o.mapped else "implemented")
     for name, o in _OPTIONS if o.java is not None),
    {name: o.kind for name, o in _OPTIONS})

JAVA_OPTIONS: tuple[JavaOption, ...] = _NAMES.options
"""Every option of the Java producer (and aioproducer's own dotted names): the ones
declared with the fields and the ignored and translated ones of :mod:`aioproducer.java`."""


def java_option(name: str) -> JavaOption | None:
    """The table row of a Java option (dotted or with underscores), or None."""
    return _NAMES.option(name)


def effective_status(opt: JavaOption) -> JavaOptionStatus:
    """``opt``'s status in this build: an option whose field does not exist (yet) is
    ignored."""
    return _NAMES.status(opt)
