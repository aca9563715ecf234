"""Choosing a partition: explicit > custom partitioner > hash of the key > sticky.

The default key hash is murmur2 exactly as the Java client computes it, so a keyed
record lands where a Java (or librdkafka ``murmur2_random``) producer puts it.

Keyless records (and all records with ``partitioner_ignore_keys``) follow Java's
built-in partitioner (KIP-794, ``BuiltInPartitioner``): they stick to one partition
until ``batch_size`` bytes were produced to it, counted record by record whatever the
batch boundaries, and move on once the partition's open batch is full (or at twice
``batch_size`` in any case). The next partition is drawn with a probability inversely
proportional to its backlog (``partitioner_adaptive_partitioning_enable``: the
accumulator's ``topic_backlog`` gives the batches per partition not yet acknowledged,
read when the sticky partition moves), and partitions whose leader has had batches it could
not take for ``partitioner_availability_timeout_ms`` are left out.

The native appender makes the per-record choice for ordinary records
(``choose_partition`` in ``_native/records.pyx``, which also counts the sticky bytes
and leaves a due switch to Python). What stays here is what native code cannot do:
custom partitioners, the xxhash option, choosing and moving the sticky partition, and
the typed errors of the records it leaves to Python.
"""

from __future__ import annotations

import bisect
import inspect
import random
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import xxhash

from ._native import Appender, TopicRoute, murmur2_partition
from .errors import ConfigError, PartitionError, UnknownPartitionError
from .metadata import Cluster, TopicInfo
from .types import PartitionFunction

__all__ = ["LoadStats", "Partitioner", "RecordPartitioner", "cumulative_frequency_table",
           "xxhash_partition"]

#: the old custom form: ``(topic, serialized_key, num_partitions) -> partition``


@runtime_checkable
class Partitioner(Protocol):
    """A custom partitioner with what Java's ``Partitioner`` gets (``partitioner`` option).

    ``partition`` is called for every record without an explicit partition:
    ``key``/``value`` are the objects given to ``send()``, ``key_bytes``/``value_bytes``
    their serialized form; ``cluster`` is the current metadata snapshot
    (``cluster.topics[topic].partitions``, ``.available``: the partitions with a
    leader now; ``cluster.leaders``). It returns a partition in
    ``range(len(cluster.topics[topic].partitions))``.

    ``on_new_batch`` is called when the partition it chose needs a new batch (the
    open one is full); ``partition`` is then asked again for the same record, so a
    sticky partitioner can move on (Java's ``onNewBatch``). ``close`` is called once,
    when the producer closes. Neither may block.
    """

    def partition(self, topic: str, key: Any, key_bytes: bytes | None, value: Any,
                  value_bytes: bytes | None, cluster: Cluster) -> int: ...

    def on_new_batch(self, topic: str, cluster: Cluster, prev_partition: int) -> None: ...

    def close(self) -> None: ...


def is_partitioner_object(obj: object) -> bool:
    """Whether ``obj`` is a :class:`Partitioner` object (has a callable ``partition``),
    as opposed to the old ``(topic, key_bytes, num_partitions)`` callable."""
    return not isinstance(obj, str) and callable(getattr(obj, "partition", None))


def _check_function(fn: Callable[..., Any]) -> None:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # builtins without a signature: trust them
        return
    try:
        sig.bind("topic", b"key", 1)
    except TypeError as exc:
        raise ConfigError(
            f"partitioner {fn!r} must take (topic, key_bytes, num_partitions), or be an "
            f"object with partition(topic, key, key_bytes, value, value_bytes, cluster): "
            f"{exc}") from None


def xxhash_partition(key: bytes, num_partitions: int) -> int:
    """A fast non-Java hash: XXH3-64 of the key modulo the partition count."""
    return int(xxhash.xxh3_64_intdigest(key) % num_partitions)


def cumulative_frequency_table(queue_sizes: list[int], length: int) -> list[int] | None:
    """Java's adaptive partitioning table: queue sizes of the first ``length``
    (available) partitions -> running sums of ``max + 1 - size``.

    A uniform draw ``r`` in ``[0, table[-1])`` picks the first index whose entry is
    greater than ``r``, so a partition with a shorter queue is picked more often.
    None when uniform choice does as well: fewer than 2 partitions in all, none
    available, or all queues equal with none left out (``length == len(queue_sizes)``).
    """
    if length < 1 or len(queue_sizes) < 2:
        return None
    sizes = queue_sizes[:length]
    top = max(sizes)
    if length == len(queue_sizes) and min(sizes) == top:
        return None
    table: list[int] = []
    total = 0
    for q in sizes:
        total += top + 1 - q
        table.append(total)
    return table


class LoadStats:
    """One topic's adaptive-partitioning table and the partitions it covers."""

    __slots__ = ("ids", "table")

    def __init__(self, table: list[int], ids: list[int]) -> None:
        self.table = table
        self.ids = ids

    def pick(self, r: int) -> int:
        """The partition for a uniform random ``r >= 0``."""
        return self.ids[bisect.bisect_right(self.table, r % self.table[-1])]


class _NewBatchHook:
    """A custom partitioner's ``on_new_batch``, then its choice again, for one record."""

    __slots__ = ("cluster", "key", "key_bytes", "owner", "value", "value_bytes")

    def __init__(self, owner: RecordPartitioner, key: Any, key_bytes: bytes | None,
                 value: Any, value_bytes: bytes | None, cluster: Cluster) -> None:
        self.owner = owner
        self.key = key
        self.key_bytes = key_bytes
        self.value = value
        self.value_bytes = value_bytes
        self.cluster = cluster

    def on_new_batch(self, topic: str, info: TopicInfo, previous: int) -> int:
        plugin = self.owner.plugin
        assert plugin is not None
        plugin.on_new_batch(topic, self.cluster, previous)
        return self.owner.checked(topic, plugin.partition(
            topic, self.key, self.key_bytes, self.value, self.value_bytes, self.cluster),
            len(info.partitions))

    def on_appended(self, topic: str, partition: int, nbytes: int) -> None:
        pass


class RecordPartitioner:
    """Picks the partition of each record (``partitioner``, ``partitioner.ignore.keys``,
    ``partitioner.adaptive.partitioning.enable``, ``partitioner.availability.timeout.ms``)."""

    __slots__ = ("_custom", "_hash", "_ignore_keys", "_load", "_rng", "adaptive",
                 "appender", "availability_timeout_ms", "backlog", "fast", "plugin",
                 "sticky_topics")

    def __init__(self, partitioner: str | PartitionFunction | Partitioner, *,
                 appender: Appender | None = None, ignore_keys: bool = False,
                 max_payload: int = -1, batch_size: int = 16384, adaptive: bool = True,
                 availability_timeout_ms: int = 0, seed: int | None = None) -> None:
        """``appender``: the producer's native appender (which holds the routes); one
        of its own when used alone (MockProducer, tests)."""
        self._custom: PartitionFunction | None = None
        self.plugin: Partitioner | None = None
        """The custom :class:`Partitioner` object, if one was given."""
        self._hash: Callable[[bytes, int], int]
        if is_partitioner_object(partitioner):
            self.plugin = partitioner  # type: ignore[assignment]
            self._hash = murmur2_partition
        elif callable(partitioner):
            _check_function(partitioner)
            self._custom = partitioner
            self._hash = murmur2_partition
        elif partitioner == "murmur2":
            self._hash = murmur2_partition
        elif partitioner == "xxhash":
            self._hash = xxhash_partition
        else:  # config validation already refuses this
            raise ConfigError(f"unknown partitioner {partitioner!r}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"batch_size must be an int >= 1, got {batch_size!r}")
        self._ignore_keys = ignore_keys
        self._rng = random.Random(seed)
        self.adaptive = adaptive
        self.availability_timeout_ms = availability_timeout_ms
        # Per topic, the adaptive table (update_load_stats); absent: uniform choice.
        self._load: dict[str, LoadStats] = {}
        self.backlog: Callable[[str], tuple[list[int], list[int], int] | None] | None = None
        """The accumulator's ``topic_backlog``: fresh load statistics when the sticky
        partition moves (else those of the last Sender pass)."""
        self.sticky_topics: set[str] = set()
        """Topics that had a sticky (keyless) choice: the accumulator computes their
        load statistics."""
        # The routes (sticky partition and its bytes, open batch per partition) live in
        # the native appender, which takes ordinary records without coming back here.
        self.appender = appender if appender is not None else Appender(
            hash_keys=partitioner == "murmur2", ignore_keys=ignore_keys,
            max_payload=max_payload, sticky_batch_size=batch_size)
        self.fast = self._custom is None and self.plugin is None
        """Whether the native appender may choose partitions (not with a custom one)."""

    def seed(self, seed: int) -> None:
        """Seed the random choice of sticky partitions (for reproducible tests)."""
        self._rng.seed(seed)

    def close(self) -> None:
        """The producer closes: close a custom :class:`Partitioner`."""
        plugin = self.plugin
        if plugin is not None:
            close = getattr(plugin, "close", None)
            if callable(close):
                close()

    def checked(self, topic: str, p: object, n: int) -> int:
        if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p < n:
            raise PartitionError(
                f"custom partitioner returned {p!r} for topic {topic!r} with {n} partitions"
            )
        return p

    def partition(self, topic: str, key: bytes | None, explicit: int | None,
                  info: TopicInfo, *, value: bytes | None = None, key_obj: Any = None,
                  value_obj: Any = None, cluster: Cluster | None = None) -> int:
        """The partition for one record, given the topic's current metadata.

        ``key``/``value`` are serialized; ``key_obj``/``value_obj`` the objects given
        to ``send()`` (a custom :class:`Partitioner` gets both) and ``cluster`` the
        current snapshot (built from ``info`` when not given).
        """
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
        if self.plugin is not None:
            view = cluster if cluster is not None else _cluster_of(info)
            return self.checked(topic, self.plugin.partition(
                topic, key if key_obj is None else key_obj, key,
                value if value_obj is None else value_obj, value, view), n)
        if self._custom is not None:
            return self.checked(topic, self._custom(topic, key, n), n)
        if key is not None and not self._ignore_keys:
            return self._hash(key, n)
        return self.sticky(topic, info)

    def new_batch_hook(self, topic: str, key: bytes | None, explicit: int | None, *,
                       value: bytes | None = None, key_obj: Any = None,
                       value_obj: Any = None, cluster: Cluster | None = None,
                       info: TopicInfo | None = None
                       ) -> RecordPartitioner | _NewBatchHook | None:
        """What :meth:`RecordAccumulator.append` consults when the record's partition
        needs a new batch: this partitioner for a sticky choice (KIP-794 byte
        counting), a hook calling the custom :class:`Partitioner`'s ``on_new_batch``
        and ``partition`` again, or None."""
        if explicit is not None:
            return None
        if self.plugin is not None:
            view = cluster if cluster is not None else (
                _cluster_of(info) if info is not None else Cluster())
            return _NewBatchHook(self, key if key_obj is None else key_obj, key,
                                 value if value_obj is None else value_obj, value, view)
        if self.is_sticky_choice(topic, key, explicit):
            return self
        return None

    def route(self, topic: str, info: TopicInfo) -> TopicRoute:
        """The topic's route, created or resized to the metadata's partition count."""
        return self.appender.set_route(topic, len(info.partitions))

    def sticky(self, topic: str, info: TopicInfo) -> int:
        """The sticky partition for the next keyless record, moved first if its
        switch is due (KIP-794; the same rule as the native path's)."""
        return self._sticky_of(topic, self.route(topic, info), info)

    def is_sticky_choice(self, topic: str, key: bytes | None, explicit: int | None) -> bool:
        """Whether this record's partition came from the sticky choice."""
        return (explicit is None and self._custom is None and self.plugin is None
                and (key is None or self._ignore_keys))

    def on_new_batch(self, topic: str, info: TopicInfo, previous: int) -> int:
        """The sticky partition ``previous`` needs a new batch for a keyless record:
        the partition to append to, moved first if its switch is due now (its open
        batch being full, KIP-794)."""
        r = self.route(topic, info)
        if r.sticky != previous:
            return previous if r.sticky < 0 else r.sticky
        return self._sticky_of(topic, r, info)

    def _sticky_of(self, topic: str, r: TopicRoute, info: TopicInfo) -> int:
        if r.switch_due():
            self._move(topic, r, info)
        return r.sticky

    def on_appended(self, topic: str, partition: int, nbytes: int) -> None:
        """A keyless record added ``nbytes`` to ``partition``'s batches."""
        r = self.appender.route(topic)
        if r is not None and r.sticky == partition:
            r.sticky_bytes += nbytes

    def _move(self, topic: str, r: TopicRoute, info: TopicInfo) -> None:
        self.sticky_topics.add(topic)
        r.sticky = self.next_partition(topic, info)
        r.sticky_bytes = 0

    def next_partition(self, topic: str, info: TopicInfo) -> int:
        """A new sticky partition (Java's ``BuiltInPartitioner.nextPartition``): weighted
        by the topic's load statistics if there are any, else uniform over the
        partitions with a leader (all of them if none has one)."""
        r = self._rng.getrandbits(31)
        if self.backlog is not None and self.adaptive:
            fresh = self.backlog(topic)
            if fresh is not None:
                self.update_load_stats(topic, *fresh)
        stats = self._load.get(topic)
        n = len(info.partitions)
        if stats is not None:
            p = stats.pick(r)
            if p < n:
                return p
        candidates = info.available or tuple(range(n))
        return candidates[r % len(candidates)]

    def update_load_stats(self, topic: str, queue_sizes: list[int] | None,
                          partition_ids: list[int] | None, length: int) -> None:
        """The topic's queued batches per partition (Java's
        ``updatePartitionLoadStats``): ``partition_ids[:length]`` are the available
        partitions (those whose leader has been draining), ``queue_sizes`` the
        batches queued for each; None: no statistics (uniform choice)."""
        table = None
        if self.adaptive and queue_sizes is not None and partition_ids is not None:
            table = cumulative_frequency_table(queue_sizes, length)
        if table is None:
            self._load.pop(topic, None)
        else:
            assert partition_ids is not None
            self._load[topic] = LoadStats(table, partition_ids[:length])

    def load_stats(self, topic: str) -> LoadStats | None:
        return self._load.get(topic)


def _cluster_of(info: TopicInfo) -> Cluster:
    return Cluster(topics={info.name: info},
                   leaders={(info.name, p.partition): p.leader
                            for p in info.partitions if p.leader >= 0})
