"""The bulk path, send_many(), against the real broker."""

from __future__ import annotations

import random
import time
from typing import Any

import pytest
from support.kafka_util import consume_all, java_partitions

from aioproducer import Producer, RecordTooLargeError, SerializationError
from aioproducer._native import murmur2_partition

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


# -- per-record headers and timestamps (issue #19 item 3) ------------------------------

HOUR_AGO = int(time.time() * 1000) - 3_600_000  # the broker refuses far-future timestamps


def headers_for(i: int) -> list[tuple[str, bytes | None]] | None:
    """Record i's headers: none, empty, duplicate keys, null values, non-ASCII keys."""
    kind = i % 6
    if kind == 0:
        return None
    if kind == 1:
        return []
    if kind == 2:
        return [("trace-id", b"%020d" % i), ("span-id", b"%020d" % (i * 7))]
    if kind == 3:
        return [("dup", b"a"), ("dup", None), ("dup", b"c%d" % i)]
    if kind == 4:
        return [("é-ключ", b""), ("n", None)]
    return [(f"h{j}", bytes([j]) * j) for j in range(9)]  # more than fit on the C stack


def count_slow_sends(producer: Producer) -> list[int]:
    """Counts the records send_many leaves to the Python path (``_send_slow``)."""
    calls = [0]
    slow = producer._send_slow

    async def counting(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return await slow(*args, **kwargs)

    producer._send_slow = counting  # type: ignore[method-assign]
    return calls


async def test_send_many_headers_and_timestamps_field_by_field(
        kafka_bootstrap: str, topic_factory: Any) -> None:
    topic = topic_factory(partitions=4)
    n = 6_000
    rng = random.Random(1906)
    keys = [None if i % 5 == 0 else b"k%d" % rng.randrange(500) for i in range(n)]
    values = [None if i % 11 == 0 else b"v%06d" % i + rng.randbytes(rng.randrange(40))
              for i in range(n)]
    headers = [headers_for(i) for i in range(n)]
    timestamps = [None if i % 4 == 0 else HOUR_AGO + i for i in range(n)]
    async with Producer(bootstrap_servers=kafka_bootstrap, linger_ms=50) as producer:
        slow = count_slow_sends(producer)
        before = int(time.time() * 1000)
        result = await producer.send_many(topic, values, keys, headers=headers,
                                          timestamps=timestamps)
        after = int(time.time() * 1000)
        assert result.count == n and await result == n
        # Records with headers stay on the native loop: the Python path takes only the
        # first record of each new batch.
        assert slow[0] < n // 20, slow[0]
    got = consume_all(kafka_bootstrap, topic, n)
    assert len(got) == n
    seen = 0
    for m in got:
        if m.value is None:  # records i % 11 == 0: counted below
            continue
        i = int(m.value[1:7])  # every other value carries its index
        seen += 1
        assert m.key == keys[i]
        want = [] if headers[i] is None else headers[i]
        assert m.headers == want, (i, m.headers)
        if timestamps[i] is None:
            assert before <= m.timestamp <= after
        else:
            assert m.timestamp == timestamps[i]
        if keys[i] is not None:
            assert m.partition == murmur2_partition(keys[i], 4)
    assert seen == sum(v is not None for v in values)
    assert sum(m.value is None for m in got) == sum(v is None for v in values)
    # per partition, send order
    for p in range(4):
        seq = [int(m.value[1:7]) for m in sorted(got, key=lambda m: m.offset)
               if m.partition == p and m.value is not None]
        assert seq == sorted(seq)


async def test_send_many_arrow_columns(kafka_bootstrap: str, topic_factory: Any) -> None:
    pa = pytest.importorskip("pyarrow")
    topic = topic_factory(partitions=3)
    n = 3_000
    values = [f"value-{i}" if i % 13 else None for i in range(n)]
    keys = [b"key-%d" % (i % 50) if i % 7 else None for i in range(n)]
    headers = [headers_for(i) for i in range(n)]
    timestamps = [HOUR_AGO + i if i % 3 else None for i in range(n)]
    header_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    # values: a string column in two chunks; keys: large_binary, sliced (offset 5);
    # headers: Spark's list<struct<key, value>>; timestamps: timestamp[ms]
    value_col = pa.chunked_array([pa.array(values[:1000], pa.string()),
                                  pa.array(values[1000:], pa.string())])
    key_col = pa.array([b"pad"] * 5 + keys, pa.large_binary()).slice(5)
    header_col = pa.array([None if h is None else [{"key": k, "value": v} for k, v in h]
                           for h in headers], header_type)
    ts_col = pa.array(timestamps, pa.timestamp("ms"))
    async with Producer(bootstrap_servers=kafka_bootstrap, linger_ms=50) as producer:
        slow = count_slow_sends(producer)
        before = int(time.time() * 1000)
        result = await producer.send_many(topic, value_col, key_col, headers=header_col,
                                          timestamps=ts_col)
        after = int(time.time() * 1000)
        assert await result == n
        assert slow[0] < n // 10, slow[0]
        # int64 timestamps and a partition, too
        assert await (await producer.send_many(
            topic, pa.array([b"x", b"y"]), partition=2,
            timestamps=pa.array([HOUR_AGO, None], pa.int64()))) == 2
    got = consume_all(kafka_bootstrap, topic, n + 2)
    assert len(got) == n + 2
    tail = sorted((m for m in got if m.value in (b"x", b"y")), key=lambda m: m.offset)
    assert [(m.partition, m.value) for m in tail] == [(2, b"x"), (2, b"y")]
    assert tail[0].timestamp == HOUR_AGO and before <= tail[1].timestamp
    rows = [m for m in got if m.value not in (b"x", b"y")]
    for m in rows:
        if m.value is None:
            continue
        i = int(m.value.split(b"-")[1])
        assert m.key == keys[i]
        assert m.headers == (headers[i] or [])
        assert m.timestamp == timestamps[i] if timestamps[i] is not None \
            else before <= m.timestamp <= after
        if keys[i] is not None:
            assert m.partition == murmur2_partition(keys[i], 3)
    assert sum(m.value is None for m in rows) == sum(v is None for v in values)


async def test_send_many_refuses_bad_headers_and_timestamps_naming_the_record(
        kafka_bootstrap: str, topic_factory: Any) -> None:
    topic = topic_factory()
    ok: list[tuple[str, bytes | None]] = [("h", b"1")]
    async with Producer(bootstrap_servers=kafka_bootstrap) as producer:
        bad_headers: list[Any] = [
            [ok, ok, ok, [("h", "str value")]],
            [ok, ok, ok, [(b"bytes key", b"v")]],
            [ok, ok, ok, [("h", b"v", b"extra")]],
            [ok, ok, ok, "h=v"],
        ]
        for headers in bad_headers:
            with pytest.raises(SerializationError, match=r"send_many: record 3: ") as info:
                await producer.send_many(topic, [b"a", b"b", b"c", b"d"], headers=headers)
            assert "records 0..2 were buffered" in "".join(info.value.__notes__)
        for timestamps in ([1, 2, 3, "4"], [1, 2, 3, -4], [1, 2, 3, True], [1, 2, 3, 2**64]):
            with pytest.raises(SerializationError, match=r"send_many: record 3: timestamp_ms"):
                await producer.send_many(topic, [b"a", b"b", b"c", b"d"],
                                         timestamps=timestamps)
        with pytest.raises(SerializationError, match="2 headers for 3 values"):
            await producer.send_many(topic, [b"1", b"2", b"3"], headers=[None, None])
        with pytest.raises(SerializationError, match="4 timestamps for 3 values"):
            await producer.send_many(topic, [b"1", b"2", b"3"], timestamps=[1, 2, 3, 4])
        with pytest.raises(SerializationError, match="one entry per record"):
            await producer.send_many(topic, [b"1"], headers="h")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="not both"):
            await producer.send_many(topic, [b"1"], timestamp_ms=1, timestamps=[1])
        await producer.flush()
    got = consume_all(kafka_bootstrap, topic, 3 * 8)
    assert [m.value for m in got] == [b"a", b"b", b"c"] * 8
    assert [m.headers for m in got[:12]] == [[("h", b"1")]] * 12
    assert [m.timestamp for m in got[12:]] == [1, 2, 3] * 4


async def test_send_many_record_too_large_by_its_headers(kafka_bootstrap: str,
                                                         topic_factory: Any) -> None:
    topic = topic_factory()
    async with Producer(bootstrap_servers=kafka_bootstrap, max_request_size=2000,
                        batch_size=16384, linger_ms=1000) as producer:
        await producer.send(topic, b"first")  # an open batch exists now
        big = [("trace", b"t" * 1000), ("baggage", b"b" * 1000)]
        with pytest.raises(RecordTooLargeError, match="max_request_size=2000") as info:
            await producer.send_many(topic, [b"ok", b"small"], headers=[None, big])
        assert "records 0..0 were buffered" in "".join(info.value.__notes__)
        # just under the limit: taken
        fits = [("trace", b"t" * 800), ("baggage", b"b" * 800)]
        assert await (await producer.send_many(topic, [b"fits"], headers=[fits])) == 1
    got = consume_all(kafka_bootstrap, topic, 3)
    assert [m.value for m in got] == [b"first", b"ok", b"fits"]
    assert got[2].headers == fits


async def test_send_many_headers_in_transactions(kafka_bootstrap: str,
                                                 topic_factory: Any) -> None:
    topic = topic_factory(partitions=2)
    n = 2_000
    values = [b"c%05d" % i for i in range(n)]
    headers = [headers_for(i) for i in range(n)]
    timestamps = [HOUR_AGO + i for i in range(n)]
    async with Producer(bootstrap_servers=kafka_bootstrap,
                        transactional_id=f"send-many-headers-{topic}") as producer:
        await producer.init_transactions()
        async with producer.transaction():
            result = await producer.send_many(topic, values, headers=headers,
                                              timestamps=timestamps)
        assert await result == n
        producer.begin_transaction()
        await producer.send_many(topic, [b"aborted"] * 10, headers=[[("x", b"y")]] * 10)
        await producer.abort_transaction()
    got = consume_all(kafka_bootstrap, topic, n, isolation="read_committed")
    assert sorted(m.value for m in got) == values  # type: ignore[type-var]
    for m in got:
        assert m.value is not None
        i = int(m.value[1:])
        assert m.headers == (headers[i] or []) and m.timestamp == timestamps[i]
