"""MockProducer: history, completion, partitioning and errors, checked against the real one."""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from aioproducer import (
    ConfigError,
    IllegalStateError,
    KafkaError,
    PartitionError,
    Producer,
    ProducerClosedError,
    ProducerConfig,
    RecordMetadata,
    RecordTooLargeError,
    SerializationError,
    UnknownTopicError,
)
from aioproducer._native import murmur2_partition
from aioproducer.partitioner import xxhash_partition
from aioproducer.protocols import ProducerLike, RecordFutureLike
from aioproducer.testing import MockProducer, MockRecordFuture, SentRecord

ROOT = Path(__file__).resolve().parent.parent

aio = pytest.mark.asyncio


class Boom(KafkaError):
    """A broker-side failure played by the test."""


# -- lifecycle -------------------------------------------------------------------------


@aio
async def test_send_before_start_is_illegal_state() -> None:
    mp = MockProducer(cluster={"t": 1})
    with pytest.raises(IllegalStateError, match="not started") as info:
        await mp.send("t", b"v")
    assert type(info.value) is IllegalStateError
    with pytest.raises(IllegalStateError):
        await mp.partitions_for("t")
    assert mp.history() == []


@aio
async def test_send_after_close_is_producer_closed() -> None:
    mp = MockProducer(cluster={"t": 1})
    await mp.start()
    assert not mp.closed
    await mp.close()
    assert mp.closed
    with pytest.raises(ProducerClosedError):
        await mp.send("t", b"v")
    with pytest.raises(ProducerClosedError):
        await mp.send_and_wait("t", b"v")
    await mp.close()  # idempotent
    with pytest.raises(IllegalStateError, match="once"):
        await mp.start()


@aio
async def test_start_twice_and_close_unstarted() -> None:
    mp = MockProducer(cluster={"t": 1})
    async with mp as same:
        assert same is mp
        with pytest.raises(IllegalStateError, match="once"):
            await mp.start()
    assert mp.closed
    never = MockProducer()
    await never.close()
    assert never.closed


def test_config_like_producer() -> None:
    mp = MockProducer({"linger.ms": 7}, cluster={"t": 2}, batch_size=1000)
    assert mp.config.linger_ms == 7 and mp.config.batch_size == 1000
    assert MockProducer(ProducerConfig(acks=1)).config.acks == 1
    with pytest.raises(ConfigError, match="did you mean"):
        MockProducer(linger_msec=5)
    with pytest.raises(IllegalStateError):
        MockProducer(ProducerConfig(), linger_ms=1)
    with pytest.raises(ValueError):
        MockProducer(cluster={"t": 0})
    with pytest.raises(ValueError):
        MockProducer(default_partitions=0)


# -- history and automatic completion --------------------------------------------------


@aio
async def test_auto_complete_offsets_per_partition_and_history() -> None:
    async with MockProducer(cluster={"a": 3, "b": 1}) as mp:
        futs = []
        for i in range(6):
            futs.append(await mp.send("a", b"v%d" % i, partition=i % 2, timestamp_ms=1000 + i,
                                      headers=[("h", b"x"), ("n", None)]))
        futs.append(await mp.send("b", None, key=b"k"))
        assert all(f.done() for f in futs)
        metas = [await f for f in futs]
        assert [(m.topic, m.partition, m.offset) for m in metas] == [
            ("a", 0, 0), ("a", 1, 0), ("a", 0, 1), ("a", 1, 1), ("a", 0, 2), ("a", 1, 2),
            ("b", 0, 0),
        ]
        assert metas[0] == RecordMetadata("a", 0, 0, 1000, -1, 2)
        assert metas[-1].serialized_key_size == 1 and metas[-1].serialized_value_size == -1
        assert futs[0].result() == metas[0] and futs[0].exception() is None
        assert (futs[0].topic, futs[1].partition) == ("a", 1)

        history = mp.history()
        assert [r.value for r in history] == [b"v0", b"v1", b"v2", b"v3", b"v4", b"v5", None]
        assert history[0] == SentRecord("a", 0, None, b"v0", (("h", b"x"), ("n", None)), 1000)
        assert history[-1] == SentRecord("b", 0, b"k", None, (), history[-1].timestamp)
        assert futs[3].record is history[3]
        history.clear()  # a copy
        assert len(mp.history()) == 7
        assert mp.flushed and mp.pending == 0


@aio
async def test_history_copies_bytes_like_input_and_stamps_time() -> None:
    async with MockProducer(cluster={"t": 1}) as mp:
        value = bytearray(b"abc")
        key = memoryview(b"\x01\x00\x00\x00\x02\x00\x00\x00").cast("I")
        before = int(time.time() * 1000)
        await mp.send("t", value, key=key, headers=[("h", bytearray(b"hv"))])
        after = int(time.time() * 1000)
        value[0] = ord("X")
        (rec,) = mp.history()
        assert rec.value == b"abc" and type(rec.value) is bytes
        assert rec.key == b"\x01\x00\x00\x00\x02\x00\x00\x00"
        assert rec.headers == (("h", b"hv"),)
        assert before <= rec.timestamp <= after


@aio
async def test_serializers_apply_and_history_has_bytes() -> None:
    async with MockProducer(cluster={"t": 4}, key_serializer=lambda k: str(k).encode(),
                            value_serializer=lambda v: repr(v).encode()) as mp:
        meta = await mp.send_and_wait("t", {"n": 1}, key=42)
        (rec,) = mp.history()
        assert (rec.key, rec.value) == (b"42", b"{'n': 1}")
        assert rec.partition == murmur2_partition(b"42", 4) == meta.partition


@aio
async def test_clear_forgets_history_but_not_pending() -> None:
    async with MockProducer(cluster={"t": 1}, auto_complete=False) as mp:
        await mp.send("t", b"1")
        fut = await mp.send("t", b"2")
        mp.complete_next()
        await mp.flush()
        assert mp.flush_count == 1
        await mp.send("t", b"3")
        mp.clear()
        assert mp.history() == [] and mp.flush_count == 0
        assert mp.pending == 1 and fut.done()
        assert mp.complete_all() == 1
        await mp.send("t", b"4")
        assert [r.value for r in mp.history()] == [b"4"]


# -- manual completion ------------------------------------------------------------------


@aio
async def test_manual_complete_and_fail_in_send_order() -> None:
    async with MockProducer(cluster={"t": 1}, auto_complete=False) as mp:
        futs = [await mp.send("t", b"%d" % i) for i in range(5)]
        assert not any(f.done() for f in futs)
        assert mp.pending == 5 and not mp.flushed
        with pytest.raises(asyncio.InvalidStateError):
            futs[0].result()
        with pytest.raises(asyncio.InvalidStateError):
            futs[0].exception()

        assert mp.complete_next() is True
        assert futs[0].done() and not futs[1].done()
        assert (await futs[0]).offset == 0

        err = Boom("leader went away")
        assert mp.fail_next(err) is True
        assert futs[1].exception() is err
        with pytest.raises(Boom):
            await futs[1]
        with pytest.raises(Boom):
            futs[1].result()

        assert mp.complete_next() is True  # a failed record takes no offset
        assert (await futs[2]).offset == 1
        assert mp.fail_all(Boom("down")) == 2
        assert all(f.done() for f in futs) and mp.flushed
        assert mp.complete_next() is False and mp.fail_next(err) is False
        assert mp.complete_all() == 0 and mp.fail_all(err) == 0
        assert "failed" in repr(futs[4]) and "done" in repr(futs[0])


@aio
async def test_fail_needs_an_exception_instance() -> None:
    async with MockProducer(cluster={"t": 1}, auto_complete=False) as mp:
        await mp.send("t", b"v")
        with pytest.raises(TypeError):
            mp.fail_next(Boom)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            mp.fail_all("no")  # type: ignore[arg-type]
        assert mp.pending == 1


@aio
async def test_send_and_wait_waits_for_the_test_to_complete() -> None:
    async with MockProducer(cluster={"t": 1}, auto_complete=False) as mp:
        task = asyncio.ensure_future(mp.send_and_wait("t", b"v"))
        await asyncio.sleep(0.01)
        assert not task.done() and mp.pending == 1
        mp.complete_next()
        meta = await asyncio.wait_for(task, 1)
        assert meta.offset == 0


@aio
async def test_done_callbacks_run_on_the_loop() -> None:
    async with MockProducer(cluster={"t": 1}, auto_complete=False) as mp:
        seen: list[Any] = []
        fut = await mp.send("t", b"v")
        fut.add_done_callback(seen.append)
        mp.complete_next()
        assert seen == []  # scheduled, like asyncio futures
        await asyncio.sleep(0)
        assert seen == [fut]
        late: list[Any] = []
        fut.add_done_callback(late.append)
        await asyncio.sleep(0)
        assert late == [fut]


@aio
async def test_flush_and_close_complete_everything_pending() -> None:
    mp = MockProducer(cluster={"t": 2}, auto_complete=False)
    await mp.start()
    futs = [await mp.send("t", b"v", partition=i % 2) for i in range(4)]
    await mp.flush()
    assert mp.flush_count == 1 and mp.flushed
    assert [(await f).offset for f in futs] == [0, 0, 1, 1]
    late = await mp.send("t", b"late")
    await mp.close()
    assert (await late).offset == 2 and mp.closed


@aio
async def test_send_error_and_flush_error() -> None:
    async with MockProducer(cluster={"t": 1}, auto_complete=False) as mp:
        mp.send_error = Boom("refused")
        with pytest.raises(Boom):
            await mp.send("t", b"v")
        assert mp.history() == []
        mp.send_error = None
        await mp.send("t", b"v")
        mp.flush_error = Boom("flush failed")
        with pytest.raises(Boom):
            await mp.flush()
        assert mp.pending == 1 and mp.flush_count == 0
        mp.flush_error = None
        await mp.flush()
        assert mp.pending == 0 and mp.flush_count == 1


@aio
async def test_auto_complete_can_be_switched() -> None:
    async with MockProducer(cluster={"t": 1}, auto_complete=False) as mp:
        first = await mp.send("t", b"1")
        mp.auto_complete = True
        second = await mp.send("t", b"2")
        assert second.done() and not first.done()
        assert (await second).offset == 0  # offsets follow acknowledgement order
        mp.complete_next()
        assert (await first).offset == 1


# -- topics and partitions ---------------------------------------------------------------


@aio
async def test_unknown_topic_raises_at_once() -> None:
    async with MockProducer(cluster={"known": 2}, max_block_ms=60000) as mp:
        started = time.monotonic()
        with pytest.raises(UnknownTopicError, match="other"):
            await mp.send("other", b"v")
        with pytest.raises(UnknownTopicError):
            await mp.partitions_for("other")
        assert time.monotonic() - started < 1
        assert await mp.partitions_for("known") == [0, 1]
        mp.add_topic("other", 3)
        assert await mp.partitions_for("other") == [0, 1, 2]
        assert mp.cluster == {"known": 2, "other": 3}


@aio
async def test_default_partitions_makes_every_topic_exist() -> None:
    async with MockProducer(cluster={"wide": 5}, default_partitions=2) as mp:
        assert await mp.partitions_for("anything") == [0, 1]
        assert await mp.partitions_for("wide") == [0, 1, 2, 3, 4]
        await mp.send("fresh", b"v")
        assert mp.cluster == {"wide": 5, "anything": 2, "fresh": 2}


@aio
async def test_keyed_records_use_murmur2_like_the_java_client() -> None:
    async with MockProducer(cluster={"t": 6}) as mp:
        keys = [b"key-%d" % i for i in range(200)]
        for key in keys:
            await mp.send("t", b"v", key=key)
        for key in keys:  # the same key again: the same partition
            await mp.send("t", b"w", key=key)
        placed = [(r.key, r.partition) for r in mp.history()]
        assert placed == [(k, murmur2_partition(k, 6)) for k in keys] * 2
        assert len({p for _, p in placed}) == 6


@aio
async def test_xxhash_and_custom_partitioners() -> None:
    async with MockProducer(cluster={"t": 7}, partitioner="xxhash") as mp:
        for i in range(50):
            await mp.send("t", b"v", key=b"k%d" % i)
        assert all(r.partition == xxhash_partition(r.key or b"", 7) for r in mp.history())

    def last_byte(topic: str, key: bytes | None, n: int) -> int:
        return (key or b"\x00")[-1] % n

    async with MockProducer(cluster={"t": 4}, partitioner=last_byte) as mp:
        assert (await mp.send_and_wait("t", b"v", key=b"\x07")).partition == 3


@aio
async def test_explicit_partition_and_out_of_range() -> None:
    async with MockProducer(cluster={"t": 3}) as mp:
        assert (await mp.send_and_wait("t", b"v", key=b"k", partition=2)).partition == 2
        for bad in (3, -1, 100):
            with pytest.raises(PartitionError, match="out of range"):
                await mp.send("t", b"v", partition=bad)
        for wrong_type in ("1", 1.0, True):
            with pytest.raises(PartitionError):
                await mp.send("t", b"v", partition=wrong_type)  # type: ignore[arg-type]
        assert len(mp.history()) == 1


@aio
async def test_keyless_records_are_sticky_until_a_batch_fills() -> None:
    async with MockProducer(cluster={"t": 8}) as mp:
        for _ in range(100):
            await mp.send("t", b"x" * 10)
        assert len({r.partition for r in mp.history()}) == 1

    # Small batches: the sticky partition moves each time one fills, never to itself.
    async with MockProducer(cluster={"t": 8}, batch_size=500) as mp:
        for _ in range(200):
            await mp.send("t", b"x" * 100)
        parts = [r.partition for r in mp.history()]
        runs = [len(list(g)) for _, g in itertools.groupby(parts)]
        assert len(runs) > 10
        assert max(runs) <= 5 and min(runs[:-1]) >= 3
        assert len(set(parts)) > 1

    # partitioner_ignore_keys: keyed records are sticky too.
    async with MockProducer(cluster={"t": 8}, partitioner_ignore_keys=True) as mp:
        for i in range(20):
            await mp.send("t", b"v", key=b"k%d" % i)
        assert len({r.partition for r in mp.history()}) == 1


@aio
async def test_record_too_large() -> None:
    async with MockProducer(cluster={"t": 1}, max_request_size=1000) as mp:
        with pytest.raises(RecordTooLargeError, match="max_request_size=1000"):
            await mp.send("t", b"x" * 1000)
        await mp.send("t", b"x" * 800)
        assert len(mp.history()) == 1


# -- the same typed errors as the real producer ------------------------------------------

# (producer options, send() keyword arguments, expected exception type)
BAD_INPUTS: list[tuple[dict[str, Any], dict[str, Any], type[Exception]]] = [
    ({}, {"value": "text"}, SerializationError),
    ({}, {"value": 12}, SerializationError),
    ({}, {"key": 1.5}, SerializationError),
    ({}, {"key": ["a"]}, SerializationError),
    ({}, {"value": memoryview(bytes(16)).cast("B", (4, 4))[::2]}, SerializationError),
    ({}, {"headers": "h"}, SerializationError),
    ({}, {"headers": {"h": b"v"}}, SerializationError),
    ({}, {"headers": [("h", "text")]}, SerializationError),
    ({}, {"headers": [(b"h", b"v")]}, SerializationError),
    ({}, {"headers": [("h",)]}, SerializationError),
    ({}, {"timestamp_ms": -1}, SerializationError),
    ({}, {"timestamp_ms": 1.5}, SerializationError),
    ({}, {"timestamp_ms": True}, SerializationError),
    ({}, {"topic": ""}, SerializationError),
    ({}, {"topic": 7}, SerializationError),
    ({}, {"partition": 3}, PartitionError),
    ({}, {"partition": -1}, PartitionError),
    ({}, {"partition": "0"}, PartitionError),
    ({"max_block_ms": 500}, {"topic": "no-such-topic-aioproducer-mock"}, UnknownTopicError),
    ({"max_request_size": 1000}, {"value": b"x" * 2000}, RecordTooLargeError),
    ({"value_serializer": lambda v: v}, {"value": "not bytes"}, SerializationError),
    ({"key_serializer": lambda k: int(k)}, {"key": "x"}, ValueError),
]


@aio
@pytest.mark.parametrize(("options", "kwargs", "expected"), BAD_INPUTS,
                         ids=[f"{e.__name__}-{'-'.join(k)}-{i}"
                              for i, (_, k, e) in enumerate(BAD_INPUTS)])
async def test_same_typed_errors_as_the_real_producer(
        kafka_bootstrap: str, topic_factory: Any, options: dict[str, Any],
        kwargs: dict[str, Any], expected: type[Exception]) -> None:
    topic = topic_factory(partitions=3)
    args = {"topic": topic, "value": b"v", **kwargs}

    errors: list[BaseException] = []
    real = Producer(bootstrap_servers=kafka_bootstrap, **options)
    mock = MockProducer(cluster={topic: 3}, **options)
    for producer in (real, mock):
        async with producer:
            with pytest.raises(expected) as info:
                await producer.send(**args)
            errors.append(info.value)
    assert type(errors[0]) is type(errors[1]), errors
    assert mock.history() == []


@aio
async def test_keyed_partitions_match_the_real_producer(kafka_bootstrap: str,
                                                        topic_factory: Any) -> None:
    topic = topic_factory(partitions=6)
    keys = [b"user-%d" % i for i in range(60)]
    async with Producer(bootstrap_servers=kafka_bootstrap) as real, \
            MockProducer(cluster={topic: 6}) as mock:
        real_parts = [(await f).partition for f in
                      [await real.send(topic, b"v", key=k) for k in keys]]
        mock_parts = [(await mock.send_and_wait(topic, b"v", key=k)).partition for k in keys]
        assert real_parts == mock_parts
        assert await real.partitions_for(topic) == await mock.partitions_for(topic)


# -- ProducerLike ---------------------------------------------------------------------------


@aio
async def test_runtime_protocol_checks() -> None:
    assert isinstance(Producer(), ProducerLike)
    async with MockProducer(default_partitions=1) as mp:
        assert isinstance(mp, ProducerLike)
        fut = await mp.send("t", b"v")
        assert isinstance(fut, RecordFutureLike) and isinstance(fut, MockRecordFuture)
    assert not isinstance(object(), ProducerLike)


@aio
async def test_code_typed_with_producer_like_runs_with_the_mock() -> None:
    async def publish(producer: ProducerLike, events: list[bytes]) -> list[int]:
        futs = [await producer.send("events", e, key=e) for e in events]
        await producer.flush()
        return [(await f).offset for f in futs]

    async with MockProducer(cluster={"events": 1}, auto_complete=False) as mp:
        assert await publish(mp, [b"a", b"b"]) == [0, 1]


def test_mypy_accepts_both_as_producer_like() -> None:
    """``tests/typecheck_protocol.py`` assigns Producer and MockProducer to ProducerLike."""
    r = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental",
         "tests/typecheck_protocol.py"],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Success" in r.stdout


@aio
async def test_other_loop_is_illegal_state_like_the_real_producer() -> None:
    async with MockProducer(cluster={"t": 1}, auto_complete=False) as mp:
        await mp.send("t", b"mine")

        async def elsewhere() -> list[str]:
            raised = []
            for call in (lambda: mp.send("t", b"v"), mp.flush, mp.close):
                try:
                    await call()
                except IllegalStateError as exc:
                    raised.append(type(exc).__name__)
            return raised

        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            raised = pool.submit(asyncio.run, elsewhere()).result()
        assert raised == ["IllegalStateError"] * 3
        assert len(mp.history()) == 1 and mp.pending == 1 and not mp.closed
