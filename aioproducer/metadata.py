"""Cluster metadata: an immutable snapshot, replaced wholesale on each refresh.

As in the Java producer, ``send()`` reads the current :class:`Cluster` without
waiting; only a topic it has never seen (or an explicit partition beyond the topic's
count) makes it wait (bounded by ``max_block_ms``) for a newer version. Refreshes are
requested by the Sender (unknown leaders, ``NOT_LEADER_OR_FOLLOWER``, unknown topic
ids) and run periodically every ``metadata_max_age_ms``. Attempts back off
exponentially with jitter (KIP-580: ``retry_backoff_ms`` doubling up to
``retry_backoff_max_ms``) after failures and after answers that changed nothing.
A topic not used for ``metadata_max_idle_ms`` (with nothing buffered or in flight)
is forgotten: its metadata and, through :attr:`Metadata.on_topics_expired`, the
producer's per-topic state.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import re
import time
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from .backoff import ExponentialBackoff
from .errors import (
    AuthenticationError,
    InvalidTopicError,
    KafkaError,
    TLSError,
    UnknownPartitionError,
    UnknownTopicError,
    for_code,
)

__all__ = ["Cluster", "Metadata", "PartitionInfo", "TopicInfo", "check_topic_name"]

log = logging.getLogger("aioproducer.metadata")

_ZERO_UUID = uuid.UUID(int=0)
_TOPIC_AUTHORIZATION_FAILED = int(ErrorCode.topic_authorization_failed)
_INVALID_TOPIC = ErrorCode.invalid_topic_exception
_MAX_TOPIC_NAME = 249
_LEGAL_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")


def check_topic_name(topic: str) -> None:
    """Raise :class:`InvalidTopicError` unless ``topic`` is a legal Kafka topic name
    (Kafka's ``Topic.validate``: not empty, not ``.`` or ``..``, at most 249
    characters, only ASCII letters, digits, ``.``, ``_`` and ``-``)."""
    if not topic:
        raise InvalidTopicError("the topic name is empty", code=_INVALID_TOPIC)
    if topic in (".", ".."):
        raise InvalidTopicError(f"{topic!r} is not a legal topic name", code=_INVALID_TOPIC)
    if len(topic) > _MAX_TOPIC_NAME:
        raise InvalidTopicError(
            f"a topic name of {len(topic)} characters is longer than {_MAX_TOPIC_NAME}: "
            f"{topic[:40]!r}...", code=_INVALID_TOPIC)
    if _LEGAL_TOPIC_NAME.fullmatch(topic) is None:
        bad = "".join(sorted({c for c in topic if _LEGAL_TOPIC_NAME.fullmatch(c) is None}))
        raise InvalidTopicError(
            f"topic name {topic!r} has illegal character(s) {bad!r}: only ASCII letters, "
            "digits, '.', '_' and '-' are allowed", code=_INVALID_TOPIC)


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    leader: int
    """Leader node id, or -1 while there is none."""
    leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    partitions: tuple[PartitionInfo, ...]
    topic_id: uuid.UUID | None = None
    available: tuple[int, ...] = ()
    """Partitions that have a leader right now."""


@dataclass(frozen=True, slots=True)
class Cluster:
    """One metadata snapshot. Never mutated: a refresh builds a new one."""

    nodes: dict[int, tuple[str, int]] = field(default_factory=dict)
    topics: dict[str, TopicInfo] = field(default_factory=dict)
    topic_errors: dict[str, int] = field(default_factory=dict)
    """Topics the broker answered with an error code (e.g. unknown topic)."""
    leaders: dict[tuple[str, int], int] = field(default_factory=dict)
    names_by_id: dict[uuid.UUID, str] = field(default_factory=dict)
    """Topic ids to names (Produce v13 answers by id)."""

    @classmethod
    def from_response(cls, response: Any) -> Cluster:
        """Build a snapshot from a kio ``MetadataResponse`` (any version >= 1)."""
        nodes = {int(b.node_id): (str(b.host), int(b.port)) for b in response.brokers}
        topics: dict[str, TopicInfo] = {}
        errors: dict[str, int] = {}
        leaders: dict[tuple[str, int], int] = {}
        for t in response.topics:
            name = str(t.name)
            if int(t.error_code) != 0:
                errors[name] = int(t.error_code)
                continue
            parts = sorted(
                (
                    PartitionInfo(int(p.partition_index), int(p.leader_id),
                                  int(getattr(p, "leader_epoch", -1)))
                    for p in t.partitions
                ),
                key=lambda p: p.partition,
            )
            tid = getattr(t, "topic_id", None)
            if tid == _ZERO_UUID:
                tid = None
            available = tuple(p.partition for p in parts if p.leader >= 0 and p.leader in nodes)
            topics[name] = TopicInfo(name, tuple(parts), tid, available)
            for p in parts:
                if p.leader >= 0:
                    leaders[(name, p.partition)] = p.leader
        return cls(nodes, topics, errors, leaders, _ids(topics))

    def merged_with(self, newer: Cluster, requested: Iterable[str]) -> Cluster:
        """``newer`` answered only for ``requested`` topics: keep the others we knew."""
        asked = set(requested)
        topics = {n: t for n, t in self.topics.items() if n not in asked}
        errors = {n: e for n, e in self.topic_errors.items() if n not in asked}
        errors.update(newer.topic_errors)
        leaders = {tp: n for tp, n in self.leaders.items() if tp[0] not in asked}
        leaders.update(newer.leaders)
        for name, info in newer.topics.items():
            old = self.topics.get(name)
            topics[name] = info if old is None else _keep_newer_epochs(
                old, info, newer.nodes, leaders)
        return Cluster(dict(newer.nodes), topics, errors, leaders, _ids(topics))

    def with_leader(self, topic: str, partition: int, leader: int, epoch: int,
                    nodes: Mapping[int, tuple[str, int]]) -> Cluster:
        """A copy where ``topic``-``partition`` is led by ``leader`` at ``epoch``,
        with ``nodes`` added to (or replacing addresses in) the node map."""
        merged = {**self.nodes, **nodes}
        info = self.topics[topic]
        parts = tuple(dataclasses.replace(p, leader=leader, leader_epoch=epoch)
                      if p.partition == partition else p for p in info.partitions)
        available = tuple(p.partition for p in parts if p.leader >= 0 and p.leader in merged)
        topics = dict(self.topics)
        topics[topic] = dataclasses.replace(info, partitions=parts, available=available)
        leaders = dict(self.leaders)
        leaders[(topic, partition)] = leader
        return Cluster(merged, topics, dict(self.topic_errors), leaders, dict(self.names_by_id))

    def without(self, topics: Collection[str]) -> Cluster:
        """This snapshot minus ``topics`` (expired ones): their partitions, leaders,
        errors and ids."""
        gone = set(topics)
        if not gone:
            return self
        kept = {n: t for n, t in self.topics.items() if n not in gone}
        return Cluster(dict(self.nodes), kept,
                       {n: e for n, e in self.topic_errors.items() if n not in gone},
                       {tp: n for tp, n in self.leaders.items() if tp[0] not in gone},
                       _ids(kept))

    def leader_for(self, topic: str, partition: int) -> int | None:
        return self.leaders.get((topic, partition))

    def partition_count(self, topic: str) -> int | None:
        info = self.topics.get(topic)
        return len(info.partitions) if info is not None else None


def _keep_newer_epochs(old: TopicInfo, new: TopicInfo, nodes: Mapping[int, tuple[str, int]],
                       leaders: dict[tuple[str, int], int]) -> TopicInfo:
    """KIP-320: a partition never goes back to an older leader epoch. Where ``new``
    (an answer from a broker that has not caught up) has an older epoch than ``old``,
    keep the old partition (and update ``leaders`` to match). A leader kept that way
    but absent from ``nodes`` counts as unknown, so metadata is asked for again.
    A topic id that changed (the topic was re-created) resets the epochs."""
    if old.topic_id is not None and new.topic_id is not None and old.topic_id != new.topic_id:
        return new
    before = {p.partition: p for p in old.partitions}
    parts: list[PartitionInfo] = []
    kept = False
    for p in new.partitions:
        o = before.get(p.partition)
        if o is not None and 0 <= p.leader_epoch < o.leader_epoch:
            log.debug("%s-%d: metadata with leader epoch %d (leader %d) is older than the "
                      "known epoch %d (leader %d): kept the known leader", new.name,
                      p.partition, p.leader_epoch, p.leader, o.leader_epoch, o.leader)
            kept = True
            tp = (new.name, p.partition)
            if o.leader >= 0 and o.leader in nodes:
                leaders[tp] = o.leader
            else:
                leaders.pop(tp, None)
            parts.append(o)
        else:
            parts.append(p)
    if not kept:
        return new
    available = tuple(p.partition for p in parts if p.leader >= 0 and p.leader in nodes)
    return TopicInfo(new.name, tuple(parts), new.topic_id, available)


def _ids(topics: dict[str, TopicInfo]) -> dict[uuid.UUID, str]:
    return {t.topic_id: name for name, t in topics.items() if t.topic_id is not None}


class Metadata:
    """The producer's view of the cluster: the current snapshot plus refresh state.

    It never does I/O itself: the Sender calls :meth:`due` and runs the fetch.
    """

    def __init__(self, *, max_age_ms: int, retry_backoff_ms: int,
                 retry_backoff_max_ms: int | None = None, max_idle_ms: int = 300000,
                 rng: random.Random | None = None) -> None:
        self.cluster = Cluster()
        self.version = 0
        self._max_age = max_age_ms / 1000.0
        self._max_idle = max_idle_ms / 1000.0
        # KIP-580: refresh attempts back off from retry_backoff_ms, doubling up to
        # retry_backoff_max_ms, with jitter (Java's Metadata.refreshBackoff).
        self.backoff = ExponentialBackoff(
            retry_backoff_ms, max(retry_backoff_ms, retry_backoff_max_ms
                                  if retry_backoff_max_ms is not None else retry_backoff_ms),
            rng=rng)
        self._backoff = self.backoff.backoff_s(0)
        """Seconds from the last attempt before the next may start."""
        self._failures = 0  # refreshes failed in a row
        self._equivalent = 0  # answers in a row that changed nothing
        self._last_refresh = 0.0
        self._last_attempt = 0.0
        self._need_update = True
        self._in_progress = False
        self.requests = 0
        """Refreshes started (each is one Metadata request, more if nodes fail)."""
        self.topics: dict[str, float] = {}
        """Topics this producer uses, with the time they were last used."""
        self._awaited: dict[str, int] = {}  # topics send() waits for: never expired
        self._waiters: list[asyncio.Future[None]] = []
        self._fatal: KafkaError | None = None
        self._security_error: KafkaError | None = None
        self._last_failure: BaseException | None = None  # of the last refresh, if it failed
        self.on_update_request: Any = None
        """Called (no arguments) when someone needs a refresh now: wakes the Sender."""
        self.busy_topics: Callable[[], Collection[str]] | None = None
        """The topics with records buffered or in flight (they never expire)."""
        self.on_topics_expired: Callable[[list[str]], None] | None = None
        """Called with the topics that expired, to drop their per-topic state."""
        self.on_partition_counts: Callable[[dict[str, int]], None] | None = None
        """Called, in the same step as the snapshot changes, with the topics whose
        partition count changed (topic -> new count): keyed records move to their new
        partition at once on every send path."""

    # -- asked by send() ---------------------------------------------------------

    def add_topic(self, topic: str, now: float | None = None) -> None:
        """Start using ``topic`` (a new one is asked for at once), or mark it used."""
        t = time.monotonic() if now is None else now
        if topic not in self.topics:
            self.topics[topic] = t
            # Java's requestUpdateForNewTopics: no backoff for a topic just added.
            self._last_attempt = float("-inf")
            self._equivalent = 0
            self.request_update()
        else:
            self.topics[topic] = t

    def touch(self, topics: Iterable[str], now: float) -> None:
        """``topics`` were used at ``now`` (batches of them were sent)."""
        known = self.topics
        for t in topics:
            if t in known:
                known[t] = now

    def request_update(self) -> None:
        self._need_update = True
        hook = self.on_update_request
        if hook is not None:
            hook()

    async def wait_for_topic(self, topic: str, max_wait_s: float,
                             partition: int | None = None) -> TopicInfo:
        """The topic's metadata, waiting for refreshes up to ``max_wait_s``; with
        ``partition``, until the topic has that partition (Java's ``waitOnMetadata``).

        Raises :class:`InvalidTopicError` at once for an illegal name (or the broker's
        INVALID_TOPIC_EXCEPTION), :class:`UnknownTopicError` or
        :class:`UnknownPartitionError` when ``max_wait_s`` runs out.
        """
        info = self.cluster.topics.get(topic)
        if info is not None and (partition is None or partition < len(info.partitions)):
            return info
        check_topic_name(topic)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max_wait_s
        self.add_topic(topic)
        self._awaited[topic] = self._awaited.get(topic, 0) + 1
        try:
            return await self._wait(topic, partition, max_wait_s, deadline, loop)
        finally:
            left = self._awaited[topic] - 1
            if left:
                self._awaited[topic] = left
            else:
                del self._awaited[topic]
            if topic in self.topics:
                self.topics[topic] = time.monotonic()

    async def _wait(self, topic: str, partition: int | None, max_wait_s: float,
                    deadline: float, loop: asyncio.AbstractEventLoop) -> TopicInfo:
        version = -1
        while True:
            if self._fatal is not None:
                raise self._fatal
            if self._security_error is not None:
                raise self._security_error  # no retrying a wrong password
            info = self.cluster.topics.get(topic)
            if info is not None and (partition is None or partition < len(info.partitions)):
                return info
            code = self.cluster.topic_errors.get(topic)
            if code == _TOPIC_AUTHORIZATION_FAILED:
                raise for_code(code, f"not authorized to access topic {topic!r}")
            if code == int(_INVALID_TOPIC):
                self.topics.pop(topic, None)  # never asked for again
                raise InvalidTopicError(f"the broker refused topic name {topic!r}",
                                        code=_INVALID_TOPIC)
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise self._wait_timeout(topic, partition, info, max_wait_s)
            if version != self.version:
                # Once per new snapshot: a request for every wake-up would defeat
                # the backoff.
                version = self.version
                self.request_update()
            fut: asyncio.Future[None] = loop.create_future()
            self._waiters.append(fut)
            try:
                await asyncio.wait_for(fut, remaining)
            except asyncio.TimeoutError:
                pass
            finally:
                if fut in self._waiters:
                    self._waiters.remove(fut)

    def _wait_timeout(self, topic: str, partition: int | None, info: TopicInfo | None,
                      max_wait_s: float) -> KafkaError:
        waited = f"{max_wait_s * 1000:.0f} ms"
        failed = (f" (the last metadata request failed: {self._last_failure})"
                  if self._last_failure is not None else "")
        if info is not None and partition is not None:
            n = len(info.partitions)
            return UnknownPartitionError(
                f"partition {partition} of topic {topic!r} is not present in metadata "
                f"after {waited}: the topic has {n} partition(s) (valid: 0..{n - 1}){failed}")
        code = self.cluster.topic_errors.get(topic)
        cause = f" (last answer: {for_code(code)})" if code else ""
        return UnknownTopicError(
            f"topic {topic!r} is not present in metadata after {waited}{cause}{failed}; "
            "create it, or check the name (the producer's metadata requests create "
            "topics only where the brokers set auto.create.topics.enable=true)")

    # -- driven by the Sender ----------------------------------------------------

    def due_in(self, now: float) -> float:
        """Seconds until a refresh should start (0 = now); inf while one runs."""
        if self._in_progress:
            return float("inf")
        backoff_left = self._last_attempt + self._backoff - now
        if self._need_update:
            return max(0.0, backoff_left)
        return max(0.0, self._last_refresh + self._max_age - now, backoff_left)

    def refresh_started(self, now: float) -> list[str]:
        """Mark a refresh as running; returns the topics to ask for."""
        if not self._need_update:
            self._equivalent = 0  # a periodic refresh: no backoff from earlier answers
        self._in_progress = True
        self._last_attempt = now
        self.requests += 1
        return sorted(self.topics)

    def age(self, now: float) -> float:
        """Seconds since the last successful refresh (Java's ``metadata-age``)."""
        return now - self._last_refresh if self._last_refresh else 0.0

    def attempt_failed(self, exc: BaseException) -> None:
        """One node failed to answer a refresh (which goes on with another): a wait
        that times out names this as the reason."""
        self._last_failure = exc

    def refresh_failed(self, now: float, exc: BaseException) -> None:
        self._in_progress = False
        self._need_update = True
        self._last_failure = exc
        self._failures += 1
        self._backoff = self.backoff.backoff_s(self._failures - 1)
        log.debug("metadata refresh failed (%d in a row, next in %.0f ms): %s",
                  self._failures, self._backoff * 1000, exc)
        if isinstance(exc, (AuthenticationError, TLSError)):
            self._security_error = exc
            self._wake_waiters()

    def refresh_done(self, now: float, cluster: Cluster, requested: list[str]) -> None:
        self._in_progress = False
        self._last_refresh = now
        self._need_update = False
        self._security_error = None
        self._last_failure = None
        self._failures = 0
        old = self.cluster
        merged = old.merged_with(cluster, requested)
        expired = self._expire_topics(now)
        if expired:
            merged = merged.without(expired)
        # Java's equivalentResponseCount: answers that teach nothing new back off.
        if (merged.topics == old.topics and merged.topic_errors == old.topic_errors
                and merged.nodes == old.nodes):
            self._equivalent += 1
        else:
            self._equivalent = 0
        self._backoff = max(self.backoff.backoff_s(0), self.backoff.backoff_s(
            self._equivalent - 1) if self._equivalent > 0 else 0.0)
        self.cluster = merged
        self.version += 1
        self._report_changes(old, merged, expired)
        # Unknown topics keep waiters waiting; ask again after the backoff.
        if any(t not in merged.topics for t in requested if t in self.topics):
            self._need_update = True
        self._wake_waiters()

    def _expire_topics(self, now: float) -> list[str]:
        """Drop the topics unused for ``metadata_max_idle_ms`` (Java's ``retainTopic``),
        except those with records buffered or in flight, or awaited by a send."""
        limit = now - self._max_idle
        stale = [t for t, used in self.topics.items()
                 if used <= limit and t not in self._awaited]
        if not stale:
            return []
        busy = self.busy_topics() if self.busy_topics is not None else ()
        expired = []
        for t in stale:
            if t in busy:
                self.topics[t] = now  # in use: its records are still on their way
            else:
                del self.topics[t]
                expired.append(t)
        if expired:
            log.debug("metadata: %d topic(s) unused for %.0f ms forgotten: %s", len(expired),
                      self._max_idle * 1000, ", ".join(expired[:10]))
        return expired

    def _report_changes(self, old: Cluster, new: Cluster, expired: list[str]) -> None:
        if old.nodes != new.nodes and old.nodes:
            log.info("metadata version %d: brokers now %s", self.version,
                     ", ".join(f"{n}={h}:{p}" for n, (h, p) in sorted(new.nodes.items())))
        if old.leaders != new.leaders:
            moved = [f"{t}-{p} {old.leaders[(t, p)]}->{n}"
                     for (t, p), n in new.leaders.items()
                     if (t, p) in old.leaders and old.leaders[(t, p)] != n]
            if moved:
                log.info("metadata version %d: leader changed for %d partition(s): %s%s",
                         self.version, len(moved), ", ".join(moved[:10]),
                         ", ..." if len(moved) > 10 else "")
            log.debug("metadata version %d: %d topics, %d nodes", self.version,
                      len(new.topics), len(new.nodes))
        # New topics too: a route made meanwhile (a send that waited for memory while
        # its topic expired) gets the count of the metadata.
        counts = {name: len(info.partitions) for name, info in new.topics.items()
                  if (o := old.topics.get(name)) is None
                  or len(o.partitions) != len(info.partitions)}
        if counts:
            changed = [f"{t}={n}" for t, n in sorted(counts.items()) if t in old.topics]
            if changed:
                log.info("metadata version %d: partition count changed: %s", self.version,
                         ", ".join(changed))
            if self.on_partition_counts is not None:
                self.on_partition_counts(counts)
        if expired and self.on_topics_expired is not None:
            self.on_topics_expired(expired)

    def apply_leader_hint(self, topic: str, partition: int, leader: int, epoch: int,
                          endpoints: Mapping[int, tuple[str, int]]) -> bool:
        """KIP-951: a Produce answer (NOT_LEADER_OR_FOLLOWER) named the partition's new
        leader and epoch, and ``endpoints`` the addresses of such leaders. Move the
        leader in the snapshot without a metadata round trip if the hint is complete,
        its epoch newer than the one known, the partition known and the leader's
        address known (from ``endpoints`` or the snapshot). True if applied."""
        cluster = self.cluster
        info = cluster.topics.get(topic)
        if leader < 0 or epoch < 0 or info is None:
            return False
        current = next((p for p in info.partitions if p.partition == partition), None)
        if current is None or (current.leader_epoch >= 0 and epoch <= current.leader_epoch):
            return False
        if leader not in endpoints and leader not in cluster.nodes:
            return False
        self.cluster = cluster.with_leader(topic, partition, leader, epoch, endpoints)
        self.version += 1
        log.info("%s-%d: leader %d (epoch %d) from a produce response, was %d (epoch %d)",
                 topic, partition, leader, epoch, current.leader, current.leader_epoch)
        return True

    def fail_waiters(self, exc: KafkaError) -> None:
        """A fatal error (e.g. producer closed): every metadata wait raises it."""
        self._fatal = exc
        self._wake_waiters()

    def _wake_waiters(self) -> None:
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)
