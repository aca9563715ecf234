"""Harness-side broker work, with confluent-kafka: fresh topics and the check that the
broker holds exactly what a run sent."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from confluent_kafka.cimpl import NewTopic

SAMPLE = 100
"""Records read back from each end of each partition."""


class Admin:
    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.client = AdminClient({"bootstrap.servers": bootstrap})

    def create_topic(self, name: str, partitions: int, timeout: float = 30.0) -> None:
        """Create ``name`` and wait until every partition has a leader."""
        futures = self.client.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=1)],
            operation_timeout=timeout, request_timeout=timeout)
        for fut in futures.values():
            fut.result(timeout)
        deadline = time.monotonic() + timeout
        while True:
            md = self.client.list_topics(name, timeout=timeout).topics.get(name)
            if (md is not None and md.error is None and len(md.partitions) == partitions
                    and all(p.leader >= 0 for p in md.partitions.values())):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"topic {name} has no leader for every partition")
            time.sleep(0.05)

    def delete_topic(self, name: str, timeout: float = 30.0) -> None:
        self.delete_topics([name], timeout)

    def delete_topics(self, names: list[str], timeout: float = 60.0) -> None:
        if not names:
            return
        for fut in self.client.delete_topics(names, operation_timeout=timeout,
                                             request_timeout=timeout).values():
            with contextlib.suppress(KafkaException):
                fut.result(timeout)

    def create_topics(self, names: list[str], partitions: int,
                      config: dict[str, str] | None = None, timeout: float = 120.0) -> float:
        """Create ``names`` in one request (``partitions`` each, replication 1, topic
        ``config``) and wait until the broker answers a ListOffsets request for every
        partition: a leader in the metadata is not yet a broker that leads (a
        4,000-partition topic has one for every partition seconds before its broker
        has made the logs). Returns the seconds waited."""
        t0 = time.monotonic()
        futures = self.client.create_topics(
            [NewTopic(n, num_partitions=partitions, replication_factor=1,
                      config=dict(config or {})) for n in names],
            operation_timeout=timeout, request_timeout=timeout)
        for fut in futures.values():
            fut.result(timeout)
        tps = [TopicPartition(n, p) for n in names for p in range(partitions)]
        deadline = t0 + timeout
        while True:
            try:
                list_offsets(self.bootstrap, tps, OffsetSpec.latest(), timeout)
                return time.monotonic() - t0
            except KafkaException:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{len(names)} topic(s) of {partitions} partition(s) "
                                       f"not led after {timeout:.0f} s") from None
                time.sleep(0.2)


def list_offsets(bootstrap: str, tps: list[TopicPartition], spec: Any,
                 timeout: float = 60.0) -> dict[tuple[str, int], int]:
    """(topic, partition) -> offset for ``spec`` (earliest or latest), in one request
    per leader. A fresh admin client each time: one that has seen the cluster before
    answers ``_NOENT`` for topics created since, until its metadata refresh is due."""
    client = AdminClient({"bootstrap.servers": bootstrap})
    futures = client.list_offsets({tp: spec for tp in tps}, request_timeout=timeout)
    return {(tp.topic, tp.partition): fut.result(timeout).offset
            for tp, fut in futures.items()}


@dataclass
class Verification:
    ok: bool
    held: int
    """Records the broker holds (sum of high watermark - low watermark)."""
    expected: int
    sampled: int = 0
    problems: list[str] = field(default_factory=list)

    def describe(self) -> str:
        if self.ok:
            return f"broker holds {self.held} records, {self.sampled} sampled: ok"
        return "; ".join(self.problems)

    def summary(self) -> dict[str, Any]:
        """What a run's record keeps of it (the first 20 problems)."""
        return {"ok": self.ok, "held": self.held, "expected": self.expected,
                "sampled": self.sampled, "problems": self.problems[:20]}


def verify_topic(bootstrap: str, topic: str, partitions: int, expected: int,
                 value_size: int, key_size: int, timeout: float = 60.0) -> Verification:
    """Require sum(high - low watermark) == expected, then read up to :data:`SAMPLE`
    records from each end of every partition and check their key and value sizes
    (:func:`verify_topics` for one topic)."""
    return verify_topics(bootstrap, {topic: expected}, partitions, value_size, key_size,
                         timeout=timeout)


def _check_ranges(consumer: Any, wanted: dict[tuple[str, int], tuple[int, int]],
                  value_size: int, key_size: int, problems: list[str],
                  timeout: float) -> int:
    """Read the offsets [start, end) of every (topic, partition) of ``wanted`` at once
    and check each record's value and key sizes; returns the records read."""
    todo = {tp: r for tp, r in wanted.items() if r[1] > r[0]}
    if not todo:
        return 0
    consumer.assign([TopicPartition(t, p, start) for (t, p), (start, _end) in todo.items()])
    seen = dict.fromkeys(todo, 0)
    left = sum(end - start for start, end in todo.values())
    deadline = time.monotonic() + timeout
    while left > 0:
        if time.monotonic() > deadline:
            short = {tp: n for tp, n in seen.items() if n < todo[tp][1] - todo[tp][0]}
            problems.append(f"sample read timed out: {len(short)} partition(s) short, e.g. "
                            + ", ".join(f"{t}-{p}: {n} of {todo[(t, p)][1] - todo[(t, p)][0]}"
                                        for (t, p), n in list(short.items())[:5]))
            break
        for msg in consumer.consume(num_messages=500, timeout=1.0):
            if msg.error() is not None:
                problems.append(f"consume error: {msg.error()}")
                continue
            topic, p, off = msg.topic(), msg.partition(), msg.offset()
            start, end = todo.get((topic, p), (0, 0))
            if not start <= off < end:
                continue
            seen[(topic, p)] += 1
            left -= 1
            value, key = msg.value(), msg.key()
            if value is None or len(value) != value_size:
                problems.append(f"{topic}-{p}@{off}: value of "
                                f"{None if value is None else len(value)} bytes, "
                                f"expected {value_size}")
            want_key = key_size if key_size > 0 else None
            got_key = None if key is None else len(key)
            if got_key != want_key:
                problems.append(f"{topic}-{p}@{off}: key of {got_key} bytes, "
                                f"expected {want_key}")
        if len(problems) > 20:
            break
    consumer.unassign()
    return sum(seen.values())


@dataclass
class SweepVerification(Verification):
    partitions_used: int = 0
    """Partitions (of all topics) holding at least one record."""
    per_end: int = 0
    """Records read back from each end of each partition."""

    def summary(self) -> dict[str, Any]:
        return {**super().summary(), "per_end": self.per_end,
                "partitions_used": self.partitions_used}


def verify_topics(bootstrap: str, expected: dict[str, int], partitions: int,
                  value_size: int, key_size: int, *, every_partition: bool = False,
                  sample_records: int = 20_000, sample_bytes: int = 64 << 20,
                  timeout: float = 120.0) -> SweepVerification:
    """The check of a run over several topics (or partitions), for the curves.

    ``expected``: topic -> records sent to it. Every topic's high - low watermarks,
    summed over its partitions, must equal its count (one ListOffsets request per
    end, for all partitions at once); with ``every_partition`` every partition must
    hold at least one record (keyed runs, which should reach them all). Then up to
    :data:`SAMPLE` records from each end of every partition are read back and their
    key and value sizes checked: fewer when there are many partitions or big records,
    so that at most about ``sample_records`` records and ``sample_bytes`` bytes are
    read (at least one record from each end of each partition)."""
    tps = [TopicPartition(t, p) for t in expected for p in range(partitions)]
    problems: list[str] = []
    low = list_offsets(bootstrap, tps, OffsetSpec.earliest(), timeout)
    high = list_offsets(bootstrap, tps, OffsetSpec.latest(), timeout)
    held_by_topic = dict.fromkeys(expected, 0)
    used = 0
    for (t, p), hi in high.items():
        n = hi - low[(t, p)]
        held_by_topic[t] += n
        used += n > 0
    wrong = [(t, held_by_topic[t], n) for t, n in expected.items() if held_by_topic[t] != n]
    if wrong:
        problems.append(f"{len(wrong)} of {len(expected)} topic(s) hold the wrong count, "
                        "e.g. " + ", ".join(f"{t}: {h} held, {n} sent" for t, h, n in wrong[:5]))
    if every_partition and used < len(tps):
        problems.append(f"{len(tps) - used} of {len(tps)} partition(s) got no record")
    held = sum(held_by_topic.values())
    record_bytes = max(1, value_size + max(0, key_size))
    per_end = max(1, min(SAMPLE, sample_records // (2 * len(tps)),
                         sample_bytes // (2 * len(tps) * record_bytes)))
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"bench-verify-{next(iter(expected))}",
        "enable.auto.commit": False,
        "fetch.max.bytes": 1 << 20,
        "max.partition.fetch.bytes": 1 << 20,
        "queued.max.messages.kbytes": 4096,
    })
    sampled = 0
    try:
        marks = {tp: (low[tp], high[tp]) for tp in high}
        for wanted in ({tp: (lo, min(hi, lo + per_end)) for tp, (lo, hi) in marks.items()},
                       {tp: (max(lo, hi - per_end), hi) for tp, (lo, hi) in marks.items()}):
            sampled += _check_ranges(consumer, wanted, value_size, key_size, problems,
                                     timeout)
    finally:
        consumer.close()
    return SweepVerification(ok=not problems, held=held, expected=sum(expected.values()),
                             sampled=sampled, problems=problems, partitions_used=used,
                             per_end=per_end)
