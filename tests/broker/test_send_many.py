"""The bulk path, send_many(), against the real broker."""

from __future__ import annotations

from typing import Any

import pytest
from support.kafka_util import consume_all, java_partitions

from aioproducer import Producer, RecordTooLargeError, SerializationError

pytestmark = pytest.mark.asyncio


async def test_send_many_round_trip_with_keys(kafka_bootstrap: str, topic_factory: Any) -> None:
    topic = topic_factory(partitions=4)
    probe = topic_factory(partitions=4)
    n = 50_000
    keys = [f"key-{i % 777}".encode() for i in range(n)]
    values = [i.to_bytes(4, "big") * 25 for i in range(n)]
    async with Producer(bootstrap_servers=kafka_bootstrap) as producer:
        result = await producer.send_many(topic, values, keys)
        assert result.count == n
        assert await result == n
        assert result.done() and result.failures() == []
    got = consume_all(kafka_bootstrap, topic, n)
    assert sorted(m.value for m in got) == sorted(values)  # type: ignore[type-var]
    java = java_partitions(kafka_bootstrap, probe, sorted(set(keys)))
    for m in got:
        assert m.key is not None and m.partition == java[m.key]
        assert m.value is not None and keys[int.from_bytes(m.value[:4], "big")] == m.key
    # per partition, send order
    by_partition: dict[int, list[int]] = {}
    for m in sorted(got, key=lambda m: (m.partition, m.offset)):
        assert m.value is not None
        by_partition.setdefault(m.partition, []).append(int.from_bytes(m.value[:4], "big"))
    for seq in by_partition.values():
        assert seq == sorted(seq)


async def test_send_many_keyless_and_to_unknown_then_known_topic(
        kafka_bootstrap: str, topic_factory: Any) -> None:
    topic = topic_factory(partitions=3)
    values = [b"v%d" % i for i in range(20_000)]
    async with Producer(bootstrap_servers=kafka_bootstrap, linger_ms=20) as producer:
        # the first record waits for metadata in the Python path; the rest go native
        assert await (await producer.send_many(topic, values, partition=None)) == len(values)
        assert await (await producer.send_many(topic, [b"x", None], partition=2)) == 2
    got = consume_all(kafka_bootstrap, topic, len(values) + 2)
    assert len(got) == len(values) + 2
    assert [m.value for m in got if m.partition == 2][-2:] == [b"x", None]


async def test_send_many_bad_record_midway_is_typed_and_keeps_the_rest(
        kafka_bootstrap: str, topic_factory: Any) -> None:
    topic = topic_factory()
    async with Producer(bootstrap_servers=kafka_bootstrap) as producer:
        with pytest.raises(SerializationError) as info:
            await producer.send_many(topic, [b"a", b"b", "not bytes", b"d"])
        assert "records 0..1 were buffered" in "".join(getattr(info.value, "__notes__", []))
        with pytest.raises(SerializationError, match="2 keys for 3 values"):
            await producer.send_many(topic, [b"1", b"2", b"3"], [b"k", b"k"])
        await producer.flush()
    assert [m.value for m in consume_all(kafka_bootstrap, topic, 2)] == [b"a", b"b"]


async def test_record_size_is_checked_on_every_send(kafka_bootstrap: str,
                                                    topic_factory: Any) -> None:
    topic = topic_factory()
    async with Producer(bootstrap_servers=kafka_bootstrap, max_request_size=2000,
                        linger_ms=1000) as producer:
        first = await producer.send(topic, b"small")  # an open batch exists now
        with pytest.raises(RecordTooLargeError, match="max_request_size=2000"):
            await producer.send(topic, b"x" * 2500)
        with pytest.raises(RecordTooLargeError):
            await producer.send_many(topic, [b"ok", b"y" * 2500])
        await producer.flush()
        assert (await first).offset == 0
    assert [m.value for m in consume_all(kafka_bootstrap, topic, 2)] == [b"small", b"ok"]
