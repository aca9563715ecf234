"""Networking: broker connections, Produce framing and the cluster client.

* :class:`BrokerConnection` — one pipelined connection with API version
  negotiation, request timeouts and zero-copy ``send_raw`` / ``send_with_reply``;
* :func:`encode_produce_body` / :func:`decode_produce_response` — the hand-written
  Produce request (v9..v13) and kio-decoded response;
* :class:`KafkaClient` — node map, background connects with backoff, Metadata;
* :class:`Admin` (``net.admin``) — CreateTopics/DeleteTopics through a client;
* ``net.sasl`` — SASL mechanisms and (re-)authentication of a connection;
  ``net.security`` — TLS context and the :class:`Security` settings from a config.
"""

from typing import TYPE_CHECKING, Any

from .client import KafkaClient, parse_bootstrap_servers
from .connection import BrokerConnection, api_name
from .protocol import (
    PRODUCE_API_KEY,
    PRODUCE_MAX_VERSION,
    PRODUCE_MIN_VERSION,
    decode_produce_response,
    encode_produce_body,
    produce_results,
)

if TYPE_CHECKING:
    from .admin import Admin
    from .client import MetadataResponse
    from .protocol import PartitionProduceResponse, ProduceResponse
else:

    def __getattr__(name: str) -> Any:
        # Imported when first asked for: Admin (the producer does not use it) and the
        # unions of kio's classes of every version (built by .client / .protocol,
        # importing all those modules).
        if name == "Admin":
            from . import admin as module
        elif name == "MetadataResponse":
            from . import client as module
        elif name in ("PartitionProduceResponse", "ProduceResponse"):
            from . import protocol as module
        else:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = globals()[name] = getattr(module, name)
        return value

__all__ = [
    "PRODUCE_API_KEY",
    "PRODUCE_MAX_VERSION",
    "PRODUCE_MIN_VERSION",
    "Admin",
    "BrokerConnection",
    "KafkaClient",
    "MetadataResponse",
    "PartitionProduceResponse",
    "ProduceResponse",
    "api_name",
    "decode_produce_response",
    "encode_produce_body",
    "parse_bootstrap_servers",
    "produce_results",
]
