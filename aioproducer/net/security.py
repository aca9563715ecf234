"""Connection security settings, built from the producer config.

* :class:`Secret` keeps a password or token out of ``repr()``, logs and messages.
* :func:`make_ssl_context` builds the client's TLS context from files (hostname
  verification on unless turned off).
* :class:`Security` is what a connection needs: the TLS context and the SASL
  settings; :func:`security_from_config` builds it from a
  :class:`~aioproducer.config.ProducerConfig` (loading, and so checking, the TLS
  files).

The SASL mechanisms and the authentication exchange are in :mod:`.sasl`.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..types import SASL_MECHANISMS, SECURITY_PROTOCOLS, OAuthToken, TokenProvider

if TYPE_CHECKING:
    from ..config import ProducerConfig

__all__ = [
    "SASL_MECHANISMS",
    "SECURITY_PROTOCOLS",
    "OAuthToken",
    "Secret",
    "Security",
    "TokenProvider",
    "make_ssl_context",
    "security_from_config",
]


class Secret:
    """A password or token that never shows itself in ``repr()``/``str()``."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def get(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('******')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        import hmac  # (not imported with the package: comparing secrets is rare)

        return isinstance(other, Secret) and hmac.compare_digest(
            self._value.encode(), other._value.encode())

    def __hash__(self) -> int:
        return hash(Secret)

    def __reduce__(self) -> tuple[Any, ...]:  # picklable (Spark ships configs)
        return (Secret, (self._value,))


def make_ssl_context(*, cafile: str | None, certfile: str | None, keyfile: str | None,
                     password: Secret | None, check_hostname: bool) -> ssl.SSLContext:
    """A client TLS context: the CA file (else the system's CAs), an optional client
    certificate (mutual TLS), hostname verification unless ``check_hostname`` is False."""
    try:
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=cafile)
        if certfile is not None:
            ctx.load_cert_chain(certfile, keyfile,
                                password=password.get() if password is not None else None)
    except (OSError, ssl.SSLError) as exc:
        # Never echo the password: name the files and the library's reason only.
        raise ConfigError(
            f"cannot load TLS files (ssl_cafile={cafile!r}, ssl_certfile={certfile!r}, "
            f"ssl_keyfile={keyfile!r}): {getattr(exc, 'strerror', None) or exc.args[-1]}"
        ) from None
    ctx.check_hostname = check_hostname
    if not check_hostname:
        ctx.verify_mode = ssl.CERT_REQUIRED  # the chain is still verified
    return ctx


@dataclass(frozen=True)
class Security:
    """How to secure and authenticate connections (built from the producer config)."""

    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    sasl_mechanism: str | None = None
    username: str | None = None
    password: Secret | None = field(default=None, repr=False)
    token_provider: TokenProvider | None = field(default=None, repr=False)

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")


def security_from_config(config: ProducerConfig) -> Security:
    """The connection security ``config`` describes. Builds the TLS context (unless
    the config carries one), so unreadable TLS files raise :class:`ConfigError` here."""
    proto = config.security_protocol.upper()
    ctx = None
    if proto in ("SSL", "SASL_SSL"):
        ctx = config.ssl_context or make_ssl_context(
            cafile=config.ssl_cafile, certfile=config.ssl_certfile, keyfile=config.ssl_keyfile,
            password=Secret(config.ssl_password) if config.ssl_password is not None else None,
            check_hostname=config.ssl_check_hostname)
    sasl = proto in ("SASL_PLAINTEXT", "SASL_SSL")
    return Security(
        protocol=proto, ssl_context=ctx,
        sasl_mechanism=config.sasl_mechanism.upper() if sasl else None,
        username=config.sasl_plain_username if sasl else None,
        password=(Secret(config.sasl_plain_password)
                  if sasl and config.sasl_plain_password is not None else None),
        token_provider=config.sasl_oauth_token_provider if sasl else None)
