"""Choosing a partition: explicit > hash of the key > sticky for keyless records.

The default key hash is murmur2 exactly as the Java client computes it, so a keyed
record lands where a Java (or librdkafka ``murmur2_random``) producer puts it.
Keyless records stick to one partition until a new batch has to be opened for it
(KIP-480), so batches fill up instead of spraying one record per partition.

The native appender makes this choice for ordinary records (``choose_partition`` in
``_native/records.pyx``, with the one murmur2-to-partition formula of
``_native/murmur2.pxd``, which ``murmur2_partition`` exposes). What stays here is
what native code cannot do: custom partitioners, the xxhash option, choosing and
moving the sticky partition, and the typed errors of the records it leaves to Python.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import xxhash

from ._native import Appender, TopicRoute, murmur2_partition
from .config import Partitioner
from .errors import ConfigError, PartitionError, UnknownPartitionError
from .metadata import TopicInfo

__all__ = ["RecordPartitioner", "xxhash_partition"]


def xxhash_partition(key: bytes, num_partitions: int) -> int:
    """A fast non-Java hash: XXH3-64 of the key modulo the partition count."""
    return int(xxhash.xxh3_64_intdigest(key) % num_partitions)


class RecordPartitioner:
    """Picks the partition of each record (``partitioner`` / ``partitioner.ignore.keys``)."""

    __slots__ = ("_custom", "_hash", "_ignore_keys", "_rng", "appender", "fast")

    def __init__(self, partitioner: str | Partitioner, *, ignore_keys: bool = False,
                 max_payload: int = -1) -> None:
        self._custom: Partitioner | None = None
        self._hash: Callable[[bytes, int], int]
        if callable(partitioner):
            self._custom = partitioner
            self._hash = murmur2_partition
        elif partitioner == "murmur2":
            self._hash = murmur2_partition
        elif partitioner == "xxhash":
            self._hash = xxhash_partition
        else:  # config validation already refuses this
            raise ConfigError(f"unknown partitioner {partitioner!r}")
        self._ignore_keys = ignore_keys
        self._rng = random.Random()
        # The routes (sticky partition, open batch per partition) live in the native
        # appender, which takes ordinary records without coming back to Python.
        self.appender = Appender(hash_keys=partitioner == "murmur2", ignore_keys=ignore_keys,
                                 max_payload=max_payload)
        self.fast = self._custom is None
        """Whether the native appender may choose partitions (not with a custom callable)."""

    def partition(self, topic: str, key: bytes | None, explicit: int | None,
                  info: TopicInfo) -> int:
        """The partition for one record, given the topic's current metadata."""
        n = len(info.partitions)
        if explicit is not None:
            if isinstance(explicit, bool) or not isinstance(explicit, int):
                raise PartitionError(
                    f"partition must be an int, got {type(explicit).__name__}"
                )
            if explicit < 0:
                raise PartitionError(
                    f"partition {explicit} is out of range for topic {topic!r}: "
                    "it must be >= 0"
                )
            if explicit >= n:
                # The producer waits for metadata first (up to max_block_ms); what
                # gets here (a fixed cluster, as in MockProducer) fails as that wait would.
                raise UnknownPartitionError(
                    f"partition {explicit} is out of range for topic {topic!r}: "
                    f"the topic has {n} partition(s) (valid: 0..{n - 1})"
                )
            return explicit
        if self._custom is not None:
            p = self._custom(topic, key, n)
            if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p < n:
                raise PartitionError(
                    f"custom partitioner returned {p!r} for topic {topic!r} with {n} partitions"
                )
            return p
        if key is not None and not self._ignore_keys:
            return self._hash(key, n)
        return self.sticky(topic, info)

    def route(self, topic: str, info: TopicInfo) -> TopicRoute:
        """The topic's route, created or resized to the metadata's partition count."""
        n = len(info.partitions)
        r = self.appender.route(topic)
        if r is None or r.num_partitions != n:
            r = self.appender.set_route(topic, n)
        return r

    def sticky(self, topic: str, info: TopicInfo) -> int:
        r = self.route(topic, info)
        if r.sticky < 0:
            r.sticky = self._choose(info, None)
        return r.sticky

    def is_sticky_choice(self, topic: str, key: bytes | None, explicit: int | None) -> bool:
        """Whether this record's partition came from the sticky choice."""
        return explicit is None and self._custom is None and (key is None or self._ignore_keys)

    def on_new_batch(self, topic: str, info: TopicInfo, previous: int) -> int:
        """A keyless record needs a new batch on ``previous``: move the sticky partition."""
        r = self.route(topic, info)
        if r.sticky < 0 or r.sticky == previous:
            r.sticky = self._choose(info, previous)
        return r.sticky

    def _choose(self, info: TopicInfo, avoid: int | None) -> int:
        candidates = info.available or tuple(p.partition for p in info.partitions)
        if len(candidates) > 1 and avoid is not None:
            candidates = tuple(p for p in candidates if p != avoid)
        return candidates[self._rng.randrange(len(candidates))]
