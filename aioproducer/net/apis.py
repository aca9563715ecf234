"""The Kafka API keys aioproducer speaks, and the Produce versions it frames: one home
for the protocol's numbers (a leaf: it imports nothing).

The request and response entities of each API key and version come from ``kio``,
loaded when first used, by :func:`aioproducer.net.protocol.request_module` and
:func:`~aioproducer.net.protocol.response_type`.
"""

from __future__ import annotations

from enum import IntEnum

__all__ = ["PRODUCE_MAX_VERSION", "PRODUCE_MIN_VERSION", "ApiKey"]


class ApiKey(IntEnum):
    """Kafka API keys (the protocol's numbers)."""

    PRODUCE = 0
    LIST_OFFSETS = 2
    METADATA = 3
    FIND_COORDINATOR = 10
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    INIT_PRODUCER_ID = 22
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_CONFIGS = 32
    SASL_AUTHENTICATE = 36
    GET_TELEMETRY_SUBSCRIPTIONS = 71
    PUSH_TELEMETRY = 72


#: Produce v9 (Kafka 2.4: flexible versions) is the oldest the producer frames; Kafka 4
#: removed the versions before it.
PRODUCE_MIN_VERSION = 9
#: Produce v13 (KIP-516: topics named by id).
PRODUCE_MAX_VERSION = 13
