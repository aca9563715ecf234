"""What the Java producer's configuration means here: its option names and the values a
``.properties`` file gives them.

* :data:`IGNORED` lists the Java options that have no effect here, and why;
  :data:`TRANSLATED` those whose Java value is turned into another field's value
  (JAAS lines, PEM stores, the endpoint identification algorithm).
* The value parsers turn a ``.properties`` string (``"16384"``, ``"true"``, ``"all"``,
  comma-separated lists, Java class names) into the Python value of a field.
* :func:`parse_properties` reads ``java.util.Properties`` syntax.
* :data:`JAVA_SERIALIZERS` and the partitioner names map Java classes to ours.

The options that set a field of :class:`~aioproducer.config.ProducerConfig` under its
Java name are declared with the field (its metadata); :class:`JavaNames` joins those
rows with the ones here. A leaf module: it imports only the standard library, the
errors and the shared types.
"""

from __future__ import annotations

import dataclasses
import os
import re
import struct
import sys
import uuid
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from .errors import ConfigError, SerializationError
from .types import Serializer

__all__ = [
    "IGNORED",
    "JAVA_SERIALIZERS",
    "TRANSLATED",
    "ConfigIgnoredWarning",
    "JavaNames",
    "JavaOption",
    "JavaOptionStatus",
    "java_serializer",
    "normalise",
    "parse_properties",
]

# Each Java option is one row, saying which field it sets, how a string value (as a
# ``.properties`` file gives it) is parsed, and its status:
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
    """How a value is parsed: a key of ``PARSERS`` (or ``jaas``, ``store_type``,
    ``interceptors``, parsed by :meth:`JavaNames.convert` itself)."""
    status: JavaOptionStatus
    note: str = ""
    """For ignored options: why, and what to use instead."""
    only: tuple[str, ...] | None = None
    """For ignored options: the only values accepted (case-insensitive); None: any."""


_M: JavaOptionStatus = "mapped"
_X: JavaOptionStatus = "ignored"
_METRICS = "metrics are read with Producer.metrics() (see the Observability page)"
_OAUTH = "OAUTHBEARER tokens come from sasl_oauth_token_provider (an async callable)"
_JAVA_LOGIN = "Java login modules do not run here"
_TLS = "TLS is configured by ssl_cafile/ssl_certfile/ssl_keyfile or an ssl_context"


def _opt(name: str, field: str | None, kind: str, status: JavaOptionStatus,
         note: str = "", only: tuple[str, ...] | None = None) -> JavaOption:
    return JavaOption(name, field, kind, status, note, only)


IGNORED: tuple[JavaOption, ...] = (
    _opt("config.providers", None, "list", _X,
         "config providers are Java classes: resolve ${...} references before", only=("",)),
    _opt("metric.reporters", None, "list", _X, "Java metric reporters do not run; " + _METRICS),
    _opt("metrics.num.samples", None, "int", _X, _METRICS),
    _opt("metrics.recording.level", None, "str", _X, _METRICS),
    _opt("metrics.sample.window.ms", None, "long", _X, _METRICS),
    _opt("sasl.client.callback.handler.class", None, "str", _X, _JAVA_LOGIN, only=("",)),
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
    _opt("security.providers", None, "str", _X, "JCA security providers are Java's"),
    _opt("ssl.cipher.suites", None, "list", _X,
         "Java cipher suite names do not apply to OpenSSL: pass an ssl_context "
         "(ctx.set_ciphers)", only=("",)),
    _opt("ssl.enabled.protocols", None, "list", _X,
         "Python's TLS defaults (TLS 1.2 and 1.3) apply; pass an ssl_context to restrict"),
    _opt("ssl.engine.factory.class", None, "str", _X, _TLS, only=("",)),
    _opt("ssl.keymanager.algorithm", None, "str", _X, _TLS),
    _opt("ssl.keystore.certificate.chain", None, "str", _X, _TLS + " (PEM files)", only=("",)),
    _opt("ssl.keystore.key", None, "str", _X, _TLS + " (PEM files)", only=("",)),
    _opt("ssl.keystore.password", None, "str", _X, "PEM key files take ssl.key.password"),
    _opt("ssl.protocol", None, "str", _X,
         "Python's TLS defaults (TLS 1.2 and 1.3) apply; pass an ssl_context to restrict"),
    _opt("ssl.provider", None, "str", _X, _TLS),
    _opt("ssl.secure.random.implementation", None, "str", _X, _TLS),
    _opt("ssl.trustmanager.algorithm", None, "str", _X, _TLS),
    _opt("ssl.truststore.certificates", None, "str", _X, _TLS + " (PEM files)", only=("",)),
    _opt("ssl.truststore.password", None, "str", _X, "PEM trust stores need no password"),
    _opt("transaction.two.phase.commit.enable", None, "bool", _X,
         "two-phase commit (KIP-939) is not implemented", only=("false",)),
)
"""The Java producer's options that have no effect here (kafka-clients 4.x)."""

TRANSLATED: tuple[JavaOption, ...] = (
    _opt("sasl.jaas.config", "sasl_plain_username", "jaas", _M),
    _opt("ssl.endpoint.identification.algorithm", "ssl_check_hostname", "hostname_check", _M),
    _opt("ssl.keystore.location", "ssl_certfile", "store", _M),
    _opt("ssl.keystore.type", None, "store_type", _M),
    _opt("ssl.truststore.location", "ssl_cafile", "store", _M),
    _opt("ssl.truststore.type", None, "store_type", _M),
)
"""Java options whose value becomes another kind of value of a field (a JAAS line gives
the user name and password, a PEM store location a file, ``https`` a bool), or only
qualifies such an option (the store types)."""


def normalise(name: str) -> str:
    """An option name with dots and dashes as underscores, lower-case: the Java and
    the Python spelling of an option normalise to the same name when they are the same
    option (``linger.ms``, ``linger_ms``)."""
    return name.replace(".", "_").replace("-", "_").lower()


class JavaNames:
    """Every option name a config accepts, and what a value given under it sets.

    ``field_rows`` are the Java options declared with the fields of the config (each
    sets its field, parsed by its kind); ``field_kinds`` gives, for every field, the
    kind of value its Python name takes (a key of :data:`PARSERS`, or ``"any"``: taken
    as it is). The rows of :data:`IGNORED` and :data:`TRANSLATED` are added here.
    """

    def __init__(self, field_rows: Iterable[JavaOption], field_kinds: Mapping[str, str]) -> None:
        self.options: tuple[JavaOption, ...] = tuple(
            sorted((*field_rows, *IGNORED, *TRANSLATED), key=_table_order))
        """Every option of the Java producer (and aioproducer's own dotted names)."""
        self.fields = frozenset(field_kinds)
        self._kinds = dict(field_kinds)
        self._by_norm = {normalise(o.name): o for o in self.options}
        if len(self._by_norm) != len(self.options):
            raise ValueError("two rows for one Java option")
        self._by_field = {o.field: o for o in self.options if o.field is not None}

    def option(self, name: str) -> JavaOption | None:
        """The row of a Java option (dotted or with underscores), or None."""
        return self._by_norm.get(normalise(name))

    def status(self, opt: JavaOption) -> JavaOptionStatus:
        """``opt``'s status in this build: an option whose field does not exist (yet)
        is ignored."""
        if opt.field is not None and opt.field not in self.fields:
            return "ignored"
        return opt.status

    def canonical(self, name: str) -> str:
        """The field an option name sets (its normalised name if not a known option)."""
        norm = normalise(name)
        opt = self._by_norm.get(norm) or self._by_field.get(norm)
        return opt.field if opt is not None and opt.field is not None else norm

    def convert(self, key: str, value: Any) -> dict[str, Any]:
        """The field assignments of the option ``key`` (any spelling) given ``value``.

        Private keys (``_keystore_type``...) carry what :func:`check_stores` needs."""
        norm = normalise(key)
        opt = self._by_norm.get(norm)
        if opt is None:
            kind = self._kinds.get(norm)
            if kind is None:
                import difflib  # only for this message

                names = sorted(self.fields | {o.name for o in self.options})
                close = difflib.get_close_matches(key, names, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise ConfigError(f"unknown producer option {key!r}{hint}")
            if kind == "interceptors":
                return {norm: _parse_interceptors(key, self._by_field[norm], value)}
            return {norm: PARSERS[kind](key, value) if kind in PARSERS else value}
        if self.status(opt) == "ignored":
            parsed = PARSERS[opt.kind](key, value) if opt.kind in PARSERS else value
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
            path = PARSERS["store"](key, value)
            return {opt.field: path, f"_{opt.name.split('.')[1]}_location": path is not None}
        if opt.kind == "jaas":
            return _parse_jaas(key, value)
        if opt.kind == "interceptors":
            return {opt.field: _parse_interceptors(key, opt, value)}
        return {opt.field: PARSERS[opt.kind](key, value)}


def _table_order(opt: JavaOption) -> tuple[bool, str]:
    # Java's options by name, then aioproducer's own dotted names.
    return (opt.name in _OWN_NAMES, opt.name)


#: aioproducer's own dotted names (not options of the Java producer).
_OWN_NAMES = frozenset({"batch.max.size", "receive.message.max.bytes"})


def check_stores(merged: dict[str, Any]) -> None:
    """Java key and trust stores given by location must be PEM files (they become
    ssl_certfile / ssl_cafile); JKS and PKCS12 stores are refused. Takes the private
    keys of :meth:`JavaNames.convert` out of ``merged``."""
    for store, field_name in (("keystore", "ssl_certfile"), ("truststore", "ssl_cafile")):
        kind = merged.pop(f"_{store}_type", "JKS")
        if merged.pop(f"_{store}_location", False) and kind != "PEM":
            raise ConfigError(
                f"ssl.{store}.location: {kind} stores are not supported; convert the store "
                f"to PEM and set ssl.{store}.type=PEM (or give {field_name})")


_warned: set[str] = set()


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


# -- Value parsers -----------------------------------------------------------------------

_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)
_INTEGER = re.compile(r"[+-]?[0-9]+")  # what Java's Integer.parseInt / Long.parseLong take


def _text(key: str, value: Any, forms: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{key} must be {forms}, got {type(value).__name__} {value!r}")
    return value.strip()


def _parse_integer(key: str, value: Any, bounds: tuple[int, int]) -> Any:
    if not isinstance(value, str):
        return value  # checked by the config, with the field's own bounds
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


def parse_acks(value: Any) -> int:
    """``acks`` as an int: ``"all"`` and ``"-1"`` are -1 (the value is not checked
    further: 0, 1 and -1 are the valid ones)."""
    if value in ("all", "-1"):
        return -1
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ConfigError(f"acks must be 0, 1, -1 or 'all', got {value!r}")


def _parse_acks_option(key: str, value: Any) -> Any:
    try:
        acks = parse_acks(value.strip().lower() if isinstance(value, str) else value)
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
    return java_serializer(key, text)


_JAVA_PARTITIONERS = {
    "org.apache.kafka.clients.producer.internals.DefaultPartitioner": "murmur2",
}


def _parse_partitioner(key: str, value: Any) -> Any:
    if value is None:
        return "murmur2"
    if not isinstance(value, str):  # a callable or a Partitioner object: the config checks it
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


def _strip(key: str, value: Any) -> Any:
    return value.strip() if isinstance(value, str) else value


def _strip_or_none(key: str, value: Any) -> Any:
    return (value.strip() or None) if isinstance(value, str) else value


PARSERS: dict[str, Callable[[str, Any], Any]] = {
    "int": lambda k, v: _parse_integer(k, v, _INT32),
    "long": lambda k, v: _parse_integer(k, v, _INT64),
    "bool": _parse_bool,
    "double": _parse_double,
    "list": _parse_list,
    "str": _strip,
    # Java's CaseInsensitiveValidString options
    "lower_str": lambda k, v: v.strip().lower() if isinstance(v, str) else v,
    "optional_str": _strip_or_none,
    "acks": _parse_acks_option,
    "serializer": _parse_serializer,
    "partitioner": _parse_partitioner,
    "hostname_check": _parse_hostname_check,
    "store": _strip_or_none,
}
"""How a string value of each kind becomes the Python value (others pass as they are)."""


# -- Java serializer classes ------------------------------------------------------------

def _packer(fmt: str, what: str, kind: type | tuple[type, ...]) -> Serializer:
    pack = struct.Struct(fmt).pack

    def serialize(obj: Any) -> bytes | None:
        if obj is None:
            return None
        if (isinstance(obj, bool) and kind is not bool) or not isinstance(obj, kind):
            raise SerializationError(f"{what} takes {_what_types(kind)} or None, "
                                     f"got {type(obj).__name__}")
        try:
            return pack(obj)
        except struct.error as exc:
            raise SerializationError(f"{what}: {obj!r} does not fit: {exc}") from None
    serialize.__qualname__ = serialize.__name__ = what
    return serialize


def _what_types(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(k.__name__ for k in kinds)


def _string(obj: Any) -> bytes | None:
    if obj is None:
        return None
    if not isinstance(obj, str):
        raise SerializationError(f"StringSerializer takes str or None, got {type(obj).__name__}")
    return obj.encode("utf-8")


def _uuid(obj: Any) -> bytes | None:
    if obj is None:
        return None
    if not isinstance(obj, uuid.UUID):
        raise SerializationError(f"UUIDSerializer takes uuid.UUID or None, "
                                 f"got {type(obj).__name__}")
    return str(obj).encode("ascii")


def _void(obj: Any) -> None:
    if obj is not None:
        raise SerializationError(f"VoidSerializer takes only None, got {type(obj).__name__}")
    return None


_JAVA_SERDE = "org.apache.kafka.common.serialization."

#: Java serializer class (short or full name) -> our equivalent; ``None`` means "no
#: serializer": the key or value must already be bytes-like (the fast path).
JAVA_SERIALIZERS: dict[str, Serializer | None] = {
    "ByteArraySerializer": None,
    "ByteBufferSerializer": None,
    "BytesSerializer": None,
    "StringSerializer": _string,
    "IntegerSerializer": _packer(">i", "IntegerSerializer", int),
    "LongSerializer": _packer(">q", "LongSerializer", int),
    "ShortSerializer": _packer(">h", "ShortSerializer", int),
    "FloatSerializer": _packer(">f", "FloatSerializer", (float, int)),
    "DoubleSerializer": _packer(">d", "DoubleSerializer", (float, int)),
    "BooleanSerializer": _packer(">?", "BooleanSerializer", bool),
    "UUIDSerializer": _uuid,
    "VoidSerializer": _void,
}


def java_serializer(option: str, class_name: str) -> Serializer | None:
    """Our serializer for the Java class ``class_name`` (``key.serializer`` /
    ``value.serializer``), encoding as the Java class does; ``None`` for the byte-array
    ones. A class without an equivalent is a :class:`ConfigError`."""
    name = class_name.strip()
    short = name[len(_JAVA_SERDE):] if name.startswith(_JAVA_SERDE) else name
    if short in JAVA_SERIALIZERS and (short == name or name.startswith(_JAVA_SERDE)):
        return JAVA_SERIALIZERS[short]
    known = ", ".join(sorted(JAVA_SERIALIZERS))
    raise ConfigError(
        f"{option}: the Java class {class_name!r} has no equivalent here; give a Python "
        f"callable (obj -> bytes | None) or one of the Java serializers {known} "
        f"(short or {_JAVA_SERDE}* name)")


# -- .properties files ------------------------------------------------------------------

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
