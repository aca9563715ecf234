"""Test helpers around a real Kafka: topics, reading everything back, watermarks.

They use confluent-kafka (librdkafka), an independent client, so that what the tests
check does not depend on aioproducer itself.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from aioproducer.devbroker import fetch_metadata

__all__ = [
    "Consumed",
    "consume_all",
    "create_topic",
    "delete_topic",
    "java_partitions",
    "partition_offsets",
    "topic_partitions",
    "wait_topic_ready",
]


@dataclass(frozen=True)
class Consumed:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    timestamp: int = 0
    timestamp_type: int = 0


def _addresses(bootstrap: str) -> list[str]:
    return [a.strip() for a in bootstrap.split(",") if a.strip()]


def wait_topic_ready(bootstrap: str, name: str, partitions: int | None = None,
                     timeout: float = 30.0) -> None:
    """Until every reachable broker's metadata has ``name`` with ``partitions`` partitions
    (any number if None), each with a leader."""
    deadline = time.monotonic() + timeout
    last = "no broker answered"
    while True:
        ready, reached = True, 0
        addresses = _addresses(bootstrap)
        for address in list(addresses):
            try:
                md = fetch_metadata(address, [name], timeout=2.0)
            except (OSError, ValueError) as exc:
                last = f"{address}: {exc}"
                continue
            reached += 1
            for b in md.brokers:  # also ask the brokers that bootstrap does not name
                other = f"{b.host}:{b.port}"
                if other not in addresses:
                    addresses.append(other)
            topic = next((t for t in md.topics if t.name == name), None)
            if topic is None or topic.error_code.value != 0:
                ready = False
                last = f"{address}: {topic.error_code.name if topic else 'no topic'}"
            elif partitions is not None and len(topic.partitions) != partitions:
                ready = False
                last = f"{address}: {len(topic.partitions)} partitions"
            elif any(p.leader_id < 0 or p.error_code.value != 0 for p in topic.partitions):
                ready = False
                last = f"{address}: a partition has no leader yet"
        if ready and reached:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"topic {name} not ready after {timeout:.0f} s ({last})")
        time.sleep(0.05)


def create_topic(bootstrap: str, name: str | None = None, partitions: int = 1,
                 replication: int = 1, config: dict[str, str] | None = None,
                 timeout: float = 30.0) -> str:
    """Create a topic (``t-<uuid>`` by default) and wait until every broker knows it and
    all its partitions have leaders. Returns its name."""
    name = name or f"t-{uuid.uuid4().hex}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=replication,
                  config=dict(config or {}))],
        operation_timeout=timeout, request_timeout=timeout)
    futures[name].result(timeout=timeout + 5)
    wait_topic_ready(bootstrap, name, partitions, timeout)
    _wait_leaders_serving(bootstrap, name, timeout)
    return name


def _wait_leaders_serving(bootstrap: str, name: str, timeout: float) -> None:
    """Metadata can name a leader a moment before it serves the partition: wait until
    every partition answers a watermark query (NOT_LEADER_OR_FOLLOWER until then)."""
    deadline = time.monotonic() + timeout
    consumer = _consumer(bootstrap)
    try:
        for p in _partitions(consumer, name, timeout):
            while True:
                try:
                    consumer.get_watermark_offsets(TopicPartition(name, p), timeout=5,
                                                   cached=False)
                    break
                except KafkaException:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
    finally:
        consumer.close()


def delete_topic(bootstrap: str, name: str, timeout: float = 30.0) -> None:
    """Delete a topic; one that does not exist is not an error."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.delete_topics([name], operation_timeout=timeout, request_timeout=timeout)
    try:
        futures[name].result(timeout=timeout + 5)
    except KafkaException as exc:
        if exc.args and isinstance(exc.args[0], KafkaError) and (
                exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
            return
        raise


def _consumer(bootstrap: str, **extra: Any) -> Any:
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": f"kafka-util-{uuid.uuid4().hex}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "check.crcs": True,  # verify the CRC32C of every batch we read
        "fetch.wait.max.ms": 100,
    }
    config.update(extra)
    return Consumer(config)


def topic_partitions(bootstrap: str, topic: str, timeout: float = 10.0) -> list[int]:
    consumer = _consumer(bootstrap)
    try:
        return _partitions(consumer, topic, timeout)
    finally:
        consumer.close()


def _partitions(consumer: Any, topic: str, timeout: float) -> list[int]:
    md = consumer.list_topics(topic, timeout=timeout)
    t = md.topics.get(topic)
    if t is None or t.error is not None:
        raise KafkaException(t.error if t is not None else KafkaError(
            KafkaError.UNKNOWN_TOPIC_OR_PART))
    return sorted(t.partitions)


def consume_all(bootstrap: str, topic: str, expected: int, timeout: float = 60.0,
                isolation: str = "read_uncommitted") -> list[Consumed]:
    """Read ``topic`` from the beginning of every partition (no consumer group, no
    commits) until ``expected`` records were read and every partition is at its end,
    or until ``timeout``; returns what was read, in the order read. Records beyond
    ``expected`` that are already in the log are returned too, so the caller sees
    duplicates. Raises on any consumer error except reaching a partition's end."""
    deadline = time.monotonic() + timeout
    consumer = _consumer(bootstrap, **{"enable.partition.eof": True,
                                       "isolation.level": isolation})
    out: list[Consumed] = []
    try:
        partitions = _partitions(consumer, topic, min(timeout, 30.0))
        consumer.assign([TopicPartition(topic, p, -2) for p in partitions])  # beginning
        at_end: set[int] = set()
        grace_end: float | None = None
        while True:
            now = time.monotonic()
            if now >= deadline:
                break
            if len(out) >= expected:
                if at_end >= set(partitions):
                    break
                # Enough read: only wait a little for the rest to report their end.
                grace_end = grace_end or min(deadline, now + 10.0)
                if now >= grace_end:
                    break
            msgs = consumer.consume(num_messages=10000,
                                    timeout=min(0.5, max(0.01, deadline - now)))
            for msg in msgs:
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        at_end.add(msg.partition())
                        continue
                    raise KafkaException(err)
                at_end.discard(msg.partition())
                ts_type, ts = msg.timestamp()
                out.append(Consumed(
                    topic=msg.topic(), partition=msg.partition(), offset=msg.offset(),
                    key=msg.key(), value=msg.value(), headers=list(msg.headers() or []),
                    timestamp=ts, timestamp_type=ts_type))
    finally:
        consumer.close()
    return out


def partition_offsets(bootstrap: str, topic: str,
                      timeout: float = 10.0) -> dict[int, tuple[int, int]]:
    """``{partition: (low watermark, high watermark)}``."""
    consumer = _consumer(bootstrap)
    try:
        result: dict[int, tuple[int, int]] = {}
        for p in _partitions(consumer, topic, timeout):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p),
                                                       timeout=timeout, cached=False)
            result[p] = (int(low), int(high))
        return result
    finally:
        consumer.close()


def java_partitions(bootstrap: str, topic: str, keys: list[bytes]) -> dict[bytes, int]:
    """Where librdkafka's Java-compatible ``murmur2_random`` partitioner puts each key.

    Each key is produced once by confluent-kafka to ``topic``; the delivery report
    says which partition it chose.
    """
    placed: dict[bytes, int] = {}

    def report(err: Any, msg: Any) -> None:
        assert err is None, err
        placed[msg.key()] = msg.partition()

    p = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random",
                  "linger.ms": 5})
    for k in keys:
        p.produce(topic, b"", key=k, on_delivery=report)
        p.poll(0)
    assert p.flush(30) == 0
    return placed
