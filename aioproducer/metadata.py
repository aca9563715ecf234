"""Cluster metadata: an immutable snapshot, replaced wholesale on each refresh.

As in the Java producer, ``send()`` reads the current :class:`Cluster` without
waiting; only a topic it has never seen makes it wait (bounded by ``max_block_ms``)
for a newer version. Refreshes are requested by the Sender (unknown leaders,
``NOT_LEADER_OR_FOLLOWER``) and run periodically every ``metadata_max_age_ms``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from .errors import AuthenticationError, KafkaError, TLSError, UnknownTopicError, for_code

__all__ = ["Cluster", "Metadata", "PartitionInfo", "TopicInfo"]

log = logging.getLogger("aioproducer.metadata")

_ZERO_UUID = uuid.UUID(int=0)
_TOPIC_AUTHORIZATION_FAILED = int(ErrorCode.topic_authorization_failed)


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

    def __init__(self, *, max_age_ms: int, retry_backoff_ms: int) -> None:
        self.cluster = Cluster()
        self.version = 0
        self._max_age = max_age_ms / 1000.0
        self._backoff = retry_backoff_ms / 1000.0
        self._last_refresh = 0.0
        self._last_attempt = 0.0
        self._need_update = True
        self._in_progress = False
        self.topics: dict[str, float] = {}
        """Topics this producer uses, with the time they were last used."""
        self._waiters: list[asyncio.Future[None]] = []
        self._fatal: KafkaError | None = None
        self._security_error: KafkaError | None = None
        self._last_failure: BaseException | None = None  # of the last refresh, if it failed
        self.on_update_request: Any = None
        """Called (no arguments) when someone needs a refresh now: wakes the Sender."""

    # -- asked by send() ---------------------------------------------------------

    def add_topic(self, topic: str) -> None:
        if topic not in self.topics:
            self.topics[topic] = time.monotonic()
            self.request_update()

    def request_update(self) -> None:
        self._need_update = True
        hook = self.on_update_request
        if hook is not None:
            hook()

    async def wait_for_topic(self, topic: str, max_wait_s: float) -> TopicInfo:
        """The topic's metadata, waiting for refreshes up to ``max_wait_s``."""
        info = self.cluster.topics.get(topic)
        if info is not None:
            return info
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max_wait_s
        self.add_topic(topic)
        while True:
            if self._fatal is not None:
                raise self._fatal
            if self._security_error is not None:
                raise self._security_error  # no retrying a wrong password
            info = self.cluster.topics.get(topic)
            if info is not None:
                return info
            code = self.cluster.topic_errors.get(topic)
            if code == _TOPIC_AUTHORIZATION_FAILED:
                raise for_code(code, f"not authorized to access topic {topic!r}")
            remaining = deadline - loop.time()
            if remaining <= 0:
                code = self.cluster.topic_errors.get(topic)
                cause = f" (last answer: {for_code(code)})" if code else ""
                if self._last_failure is not None:
                    cause += f" (the last metadata request failed: {self._last_failure})"
                raise UnknownTopicError(
                    f"topic {topic!r} is not present in metadata after "
                    f"{max_wait_s * 1000:.0f} ms{cause}; create it, or check the name "
                    "(the producer does not create topics)"
                )
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
        self._in_progress = True
        self._last_attempt = now
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
        log.debug("metadata refresh failed: %s", exc)
        if isinstance(exc, (AuthenticationError, TLSError)):
            self._security_error = exc
            self._wake_waiters()

    def refresh_done(self, now: float, cluster: Cluster, requested: list[str]) -> None:
        self._in_progress = False
        self._last_refresh = now
        self._need_update = False
        self._security_error = None
        self._last_failure = None
        old = self.cluster
        self.cluster = old.merged_with(cluster, requested)
        self.version += 1
        if old.nodes != self.cluster.nodes and old.nodes:
            log.info("metadata version %d: brokers now %s", self.version,
                     ", ".join(f"{n}={h}:{p}" for n, (h, p) in sorted(self.cluster.nodes.items())))
        if old.leaders != self.cluster.leaders:
            moved = [f"{t}-{p} {old.leaders[(t, p)]}->{n}"
                     for (t, p), n in self.cluster.leaders.items()
                     if (t, p) in old.leaders and old.leaders[(t, p)] != n]
            if moved:
                log.info("metadata version %d: leader changed for %d partition(s): %s%s",
                         self.version, len(moved), ", ".join(moved[:10]),
                         ", ..." if len(moved) > 10 else "")
            log.debug("metadata version %d: %d topics, %d nodes", self.version,
                      len(self.cluster.topics), len(self.cluster.nodes))
        # Unknown topics keep waiters waiting; ask again after the backoff.
        if any(t not in self.cluster.topics for t in requested):
            self._need_update = True
        self._wake_waiters()

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
