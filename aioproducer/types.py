"""The small types the rest of the package shares: record headers, serializers, the
partition function, topic-partitions, OAuth tokens and the security vocabulary.

A leaf: it imports nothing but the standard library, so any module can take its
names from here without pulling in another part of the producer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

__all__ = [
    "SASL_MECHANISMS",
    "SECURITY_PROTOCOLS",
    "Header",
    "OAuthToken",
    "PartitionFunction",
    "Serializer",
    "TokenProvider",
    "TopicPartition",
]

#: One record header: ``(key, value)``; the value is bytes-like or None.
Header = tuple[str, "bytes | bytearray | memoryview | None"]

#: ``key_serializer`` / ``value_serializer``: a user object to bytes (or None).
Serializer = Callable[[Any], bytes | bytearray | memoryview | None]

#: The partitioner in function form: ``(topic, serialized_key, num_partitions) ->
#: partition``. (The object form, with what Java's ``Partitioner`` gets, is the
#: protocol :class:`aioproducer.partitioner.Partitioner`.)
PartitionFunction = Callable[[str, bytes | None, int], int]

#: ``(topic, partition)``
TopicPartition = tuple[str, int]

#: What an OAUTHBEARER token provider returns: a token, or (token, SASL extensions).
OAuthToken = str | tuple[str, Mapping[str, str]]

#: ``sasl_oauth_token_provider``: ``async () -> OAuthToken``.
TokenProvider = Callable[[], Awaitable[OAuthToken]]

#: Accepted values of ``security_protocol``.
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")

#: Accepted values of ``sasl_mechanism``.
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
