"""Harness-side broker work, with confluent-kafka: fresh topics and the check that the
broker holds exactly what a run sent."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
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
        for fut in self.client.delete_topics([name], operation_timeout=timeout,
                                             request_timeout=timeout).values():
            with contextlib.suppress(KafkaException):
                fut.result(timeout)


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


def verify_topic(bootstrap: str, topic: str, partitions: int, expected: int,
                 value_size: int, key_size: int, timeout: float = 60.0) -> Verification:
    """Require sum(high - low watermark) == expected, then read up to :data:`SAMPLE`
    records from each end of every partition and check their key and value sizes."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"bench-verify-{topic}",
        "enable.auto.commit": False,
        "fetch.max.bytes": 1 << 20,
        "max.partition.fetch.bytes": 1 << 20,
        "queued.max.messages.kbytes": 4096,
    })
    problems: list[str] = []
    try:
        marks: dict[int, tuple[int, int]] = {}
        for p in range(partitions):
            marks[p] = consumer.get_watermark_offsets(TopicPartition(topic, p),
                                                      timeout=timeout, cached=False)
        held = sum(high - low for low, high in marks.values())
        if held != expected:
            problems.append(f"broker holds {held} records, {expected} were sent")
        ranges: list[dict[int, tuple[int, int]]] = [
            {p: (low, min(high, low + SAMPLE)) for p, (low, high) in marks.items()},
            {p: (max(low, high - SAMPLE), high) for p, (low, high) in marks.items()},
        ]
        sampled = 0
        for wanted in ranges:
            sampled += _check_range(consumer, topic, wanted, value_size, key_size,
                                    problems, timeout)
        return Verification(ok=not problems, held=held, expected=expected,
                            sampled=sampled, problems=problems)
    finally:
        consumer.close()


def _check_range(consumer: Any, topic: str, wanted: dict[int, tuple[int, int]],
                 value_size: int, key_size: int, problems: list[str], timeout: float) -> int:
    todo = {p: r for p, r in wanted.items() if r[1] > r[0]}
    if not todo:
        return 0
    consumer.assign([TopicPartition(topic, p, start) for p, (start, _end) in todo.items()])
    seen = {p: 0 for p in todo}
    deadline = time.monotonic() + timeout
    while any(seen[p] < end - start for p, (start, end) in todo.items()):
        if time.monotonic() > deadline:
            problems.append(f"sample read timed out: {seen} of {todo}")
            break
        for msg in consumer.consume(num_messages=500, timeout=1.0):
            if msg.error() is not None:
                problems.append(f"consume error: {msg.error()}")
                continue
            p, off = msg.partition(), msg.offset()
            start, end = todo.get(p, (0, 0))
            if not start <= off < end:
                continue
            seen[p] += 1
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
