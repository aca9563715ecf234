"""The secured mode's listeners, users and authorization: the ``server.properties``
entries (TLS, SASL JAAS configs, ``StandardAuthorizer``), the SCRAM credentials added at
format time, and unsigned OAUTHBEARER tokens."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Mapping
from typing import Any

from .tls import TlsFiles

SECURE_LISTENERS: Mapping[str, str] = {
    "SSL": "SSL",                        # TLS, no client certificate asked for
    "MTLS": "SSL",                       # TLS, a client certificate (from the CA) required
    "SSL_BADHOST": "SSL",                # TLS with a certificate for kafka.invalid only
    "SASL_PLAINTEXT": "SASL_PLAINTEXT",  # PLAIN, SCRAM-SHA-256/512, OAUTHBEARER
    "SASL_SSL": "SASL_SSL",              # the same over TLS
}
"""The secured mode's extra listeners (name -> security protocol), each on its own port;
``PLAINTEXT`` (no authentication, a super user) and ``CONTROLLER`` stay as they are."""

SECURE_USERS: Mapping[str, str] = {"admin": "admin-secret", "alice": "alice-secret",
                                   "bob": "bob-secret"}
"""The secured mode's users and passwords, for PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512."""

SUPER_USERS = ("admin", "alice")
"""Users allowed everything. The others (``bob``) may do only what ACLs grant them."""

SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")

REAUTH_MS = 10_000
"""``connections.max.reauth.ms`` of the SASL listeners: the session lifetime the broker
gives in SaslAuthenticate, after which a client must re-authenticate (KIP-368)."""


def _jaas(module: str, **options: str) -> str:
    return " ".join([module, "required", *(f'{k}="{v}"' for k, v in options.items())]) + ";"


def _secure_config(tls: TlsFiles) -> dict[str, str]:
    """The server.properties entries of the secured mode (but the listeners)."""
    config: dict[str, str] = {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(tls.broker_keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(tls.ca_file),
        "ssl.client.auth": "none",
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.ssl_badhost.ssl.keystore.location": str(tls.badhost_keystore),
        # The principal of a client certificate is its CN (User:alice), not the whole DN.
        "ssl.principal.mapping.rules": "RULE:^CN=([^,]+).*$/$1/,DEFAULT",
        "sasl.enabled.mechanisms": ",".join(SASL_MECHANISMS),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "false",
        # ANONYMOUS: the PLAINTEXT and CONTROLLER listeners (set-up, inter-broker) and TLS
        # without a client certificate.
        "super.users": ";".join(["User:ANONYMOUS", *(f"User:{u}" for u in SUPER_USERS)]),
    }
    plain_users = {f"user_{u}": p for u, p in SECURE_USERS.items()}
    for listener in (n for n, p in SECURE_LISTENERS.items() if p.startswith("SASL_")):
        prefix = f"listener.name.{listener.lower()}."
        config[prefix + "plain.sasl.jaas.config"] = _jaas(
            "org.apache.kafka.common.security.plain.PlainLoginModule", **plain_users)
        for mechanism in ("scram-sha-256", "scram-sha-512"):
            config[f"{prefix}{mechanism}.sasl.jaas.config"] = _jaas(
                "org.apache.kafka.common.security.scram.ScramLoginModule")
        # No callback handler configured: the broker validates unsecured JWS tokens
        # (alg "none", the principal in "sub", an "exp"): OAuthBearerUnsecuredValidator...
        config[prefix + "oauthbearer.sasl.jaas.config"] = _jaas(
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule",
            unsecuredLoginStringClaim_sub="admin")
        config[prefix + "connections.max.reauth.ms"] = str(REAUTH_MS)
    return config


def _scram_format_args() -> list[str]:
    """``kafka-storage format`` arguments that add every user's SCRAM credentials."""
    args: list[str] = []
    for user, password in SECURE_USERS.items():
        for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            args += ["--add-scram", f"{mechanism}=[name={user},password={password}]"]
    return args


def unsecured_jwt(subject: str, lifetime: float = 3600.0, **claims: Any) -> str:
    """An unsigned OAUTHBEARER token (JWS with ``alg: none``) for ``subject``, as the
    secured mode's brokers accept: ``sub``, ``iat``, ``exp`` (``lifetime`` s from now)."""
    def b64(obj: Mapping[str, Any]) -> str:
        raw = json.dumps(obj, separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")
    now = time.time()
    payload = {"sub": subject, "iat": int(now), "exp": int(now + lifetime), **claims}
    return f"{b64({'alg': 'none'})}.{b64(payload)}."
