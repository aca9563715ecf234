"""MockProducer: history, completion, partitioning and errors, checked against the real one."""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import itertools
import logging
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from kio.schema.errors import ErrorCode

from aioproducer import (
    ConfigError,
    GroupMetadata,
    IllegalStateError,
    KafkaError,
    KafkaTimeoutError,
    PartitionError,
    Producer,
    ProducerClosedError,
    ProducerConfig,
    ProducerFencedError,
    RecordMetadata,
    RecordTooLargeError,
    SendManyResult,
    SerializationError,
    TransactionAbortableError,
    TransactionAbortedError,
    TransactionalIdAuthorizationError,
    UnknownTopicError,
    transaction_state,
)
from aioproducer._native import murmur2_partition
from aioproducer.errors import GroupAuthorizationError, for_code
from aioproducer.partitioner import xxhash_partition
from aioproducer.protocols import ProducerLike, RecordFutureLike
from aioproducer.testing import MockProducer, MockRecordFuture, MockSendManyResult, SentRecord
from aioproducer.testing import mock as mock_module
from aioproducer.transaction_state import (
    FATAL_CODES,
    FENCED_CODES,
    TRANSITIONS,
    TxnStateMachine,
    is_fatal_code,
    is_fatal_failure,
    is_transition_valid,
)
from aioproducer.transactions import TransactionManager, TxnState

ROOT = Path(__file__).resolve().parents[2]

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
async def test_without_a_cluster_any_topic_is_accepted() -> None:
    """Like the Java MockProducer with an empty cluster: partition 0, unless the record
    names one."""
    async with MockProducer() as mp:
        assert not mp.strict_topics
        assert (await mp.send_and_wait("anything", b"v")).partition == 0
        assert (await mp.send_and_wait("anything", b"v", key=b"k")).partition == 0
        assert (await mp.send_and_wait("other", b"v", partition=7)).partition == 7
        assert await (await mp.send_many("more", [b"a", b"b"])) == 2
        assert await mp.partitions_for("never-used") == [0]
        assert [(r.topic, r.partition, r.key) for r in mp.history()] == [
            ("anything", 0, None), ("anything", 0, b"k"), ("other", 7, None),
            ("more", 0, None), ("more", 0, None)]
        assert mp.cluster == {}  # nothing was declared
        for bad in (-1, "0", True, 1.0):
            with pytest.raises(PartitionError):
                await mp.send("anything", b"v", partition=cast(Any, bad))
        mp.add_topic("anything", 2)  # declared from now on: its partition count holds
        with pytest.raises(PartitionError, match="out of range"):
            await mp.send("anything", b"v", partition=7)
        assert await mp.partitions_for("anything") == [0, 1]
        assert len(mp.history()) == 5


@aio
async def test_strict_topics_is_an_option() -> None:
    async with MockProducer(strict_topics=True) as mp:
        with pytest.raises(UnknownTopicError, match="not in the MockProducer's cluster"):
            await mp.send("t", b"v")
        with pytest.raises(UnknownTopicError):
            await mp.partitions_for("t")
        mp.add_topic("t")
        assert (await mp.send_and_wait("t", b"v")).partition == 0
    async with MockProducer(cluster={}) as mp:  # a cluster given: only its topics
        assert mp.strict_topics
        with pytest.raises(UnknownTopicError):
            await mp.send("t", b"v")
    async with MockProducer(cluster={"t": 2}, strict_topics=False) as mp:
        assert (await mp.send_and_wait("other", b"v", partition=5)).partition == 5
        with pytest.raises(PartitionError, match="out of range"):
            await mp.send("t", b"v", partition=5)
        assert await mp.partitions_for("t") == [0, 1]
        assert mp.cluster == {"t": 2}
    with pytest.raises(ValueError, match="contradict"):
        MockProducer(default_partitions=2, strict_topics=True)


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

    # Small batches: the sticky partition moves after batch_size bytes (KIP-794), to a
    # random partition (which may be the same one: runs of a multiple of one stay).
    async with MockProducer(cluster={"t": 8}, batch_size=500) as mp:
        for _ in range(200):
            await mp.send("t", b"x" * 100)
        parts = [r.partition for r in mp.history()]
        runs = [len(list(g)) for _, g in itertools.groupby(parts)]
        assert len(runs) > 10
        stay = min(runs[:-1])
        assert 3 <= stay <= 5 and all(r % stay == 0 for r in runs[:-1])
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
    # beyond the count: the real producer refreshes metadata for max_block_ms first
    ({"max_block_ms": 300}, {"partition": 3}, PartitionError),
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


@pytest.mark.slow  # seconds: outside the quick loop (-m 'not broker and not slow')
def test_mypy_accepts_both_as_producer_like() -> None:
    """``tests/support/typecheck_protocol.py`` assigns Producer and MockProducer to ProducerLike."""
    r = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental",
         "tests/support/typecheck_protocol.py"],
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


# -- send_many ------------------------------------------------------------------------------


def keys_for_partitions(partitions: list[int], count: int) -> list[bytes]:
    """Keys whose murmur2 partition (out of ``count``) is ``partitions[i]``, in order."""
    keys: list[bytes] = []
    candidates = (b"key-%d" % i for i in itertools.count())
    for wanted in partitions:
        keys.append(next(k for k in candidates if murmur2_partition(k, count) == wanted))
    return keys


@aio
async def test_send_many_partitions_and_records_like_send() -> None:
    async with MockProducer(cluster={"t": 4}) as mp:
        keys = [b"k%d" % i for i in range(20)]
        values = [b"v%d" % i for i in range(20)]
        result = await mp.send_many("t", values, keys, timestamp_ms=1234)
        assert isinstance(result, MockSendManyResult)
        assert result.count == 20 and result.done() and result.failures() == []
        assert await result == 20
        history = mp.history()
        assert [(r.key, r.value, r.timestamp) for r in history] == [
            (k, v, 1234) for k, v in zip(keys, values, strict=True)]
        assert [r.partition for r in history] == [murmur2_partition(k, 4) for k in keys]
        assert [f.record for f in result.futures] == history
        assert "20 records, 0 pending" in repr(result)

        # a tuple, no keys, an explicit partition, null values
        assert await (await mp.send_many("t", (b"x", None), partition=3)) == 2
        assert [(r.partition, r.value) for r in mp.history()[20:]] == [(3, b"x"), (3, None)]
        assert await (await mp.send_many("t", [])) == 0


@aio
async def test_send_many_refusals() -> None:
    async with MockProducer(cluster={"t": 1}) as mp:
        with pytest.raises(SerializationError, match="2 keys for 3 values"):
            await mp.send_many("t", [b"1", b"2", b"3"], [b"k", b"k"])
        with pytest.raises(SerializationError) as info:
            await mp.send_many("t", [b"a", b"b", "not bytes", b"d"])
        assert "records 0..1 were buffered" in "".join(getattr(info.value, "__notes__", []))
        with pytest.raises(SerializationError) as first:
            await mp.send_many("t", ["bad", b"ok"])
        assert not getattr(first.value, "__notes__", [])
        with pytest.raises(PartitionError):
            await mp.send_many("t", [b"v"], partition=1)
        with pytest.raises(UnknownTopicError):
            await mp.send_many("nope", [b"v"])
        mp.send_error = Boom("refused")
        with pytest.raises(Boom):
            await mp.send_many("t", [b"v"])
        mp.send_error = None
        assert [r.value for r in mp.history()] == [b"a", b"b"]
    with pytest.raises(ProducerClosedError):
        await mp.send_many("t", [b"v"])
    with pytest.raises(IllegalStateError, match="not started"):
        await MockProducer(cluster={"t": 1}).send_many("t", [b"v"])


@aio
async def test_send_many_result_waits_for_every_record_and_lists_failures() -> None:
    async with MockProducer(cluster={"t": 2}, auto_complete=False) as mp:
        keys = keys_for_partitions([0, 1, 0, 1, 1], 2)
        result = await mp.send_many("t", [b"a", b"b", b"c", b"d", b"e"], keys)
        assert [f.partition for f in result.futures] == [0, 1, 0, 1, 1]

        async def wait() -> int:
            return await result

        task = asyncio.ensure_future(wait())
        await asyncio.sleep(0)
        assert not task.done() and not result.done() and result.failures() == []
        first, second = Boom("first"), Boom("second")
        mp.complete_next()
        mp.fail_next(first)  # b, partition 1
        mp.fail_next(second)  # c, partition 0
        await asyncio.sleep(0)
        assert not task.done()
        mp.fail_all(first)  # d and e, partition 1: the same error as b's
        with pytest.raises(Boom) as info:
            await task
        assert info.value is first  # the first failed record's error
        assert result.done()
        assert result.failures() == [("t", 1, first), ("t", 0, second)]
        assert (await result.futures[0]).offset == 0


@aio
async def test_send_many_errors_match_the_real_producer(kafka_bootstrap: str,
                                                        topic_factory: Any) -> None:
    topic = topic_factory(partitions=3)
    calls: list[tuple[list[Any], list[Any] | None, int | None]] = [
        ([b"1", b"2", b"3"], [b"k", b"k"], None),
        ([b"a", b"b", "not bytes"], None, None),
        ([b"a", 12], [b"k", b"k"], None),
        ([b"a"], None, 3),
    ]
    outcomes = []
    # Partition 3 of 3: the real producer waits max_block_ms for it to appear (the
    # default, 60 s, was most of this test's time).
    producers: list[Producer | MockProducer] = [
        Producer(bootstrap_servers=kafka_bootstrap, max_request_size=1000,
                 max_block_ms=2000),
        MockProducer(cluster={topic: 3}, max_request_size=1000, max_block_ms=2000)]
    for producer in producers:
        got: list[Any] = []
        async with producer:
            for values, keys, partition in calls:
                with pytest.raises(KafkaError) as info:
                    await producer.send_many(topic, values, keys, partition=partition)
                got.append((type(info.value), getattr(info.value, "__notes__", [])))
            with pytest.raises(RecordTooLargeError) as too_large:
                await producer.send_many(topic, [b"ok", b"y" * 2000])
            got.append(str(too_large.value))
            result = await producer.send_many(topic, [b"x", b"y"], [b"k1", b"k2"])
            got += [result.count, await result, result.done(), result.failures()]
        outcomes.append(got)
    assert outcomes[0] == outcomes[1]


# -- transactions ---------------------------------------------------------------------------


def tx_mock(**options: Any) -> MockProducer:
    return MockProducer(cluster={"t": 2, "in": 4}, transactional_id="tx-1", **options)


def txn_state(mp: MockProducer) -> TxnState | None:
    """``mp.transaction_state``, read through a call so mypy does not narrow it."""
    return mp.transaction_state


@aio
async def test_transactions_need_a_transactional_id() -> None:
    async with MockProducer(cluster={"t": 1}) as mp:
        for name in ("init_transactions", "commit_transaction", "abort_transaction"):
            with pytest.raises(IllegalStateError, match=rf"{name}\(\): this producer is not "
                               "transactional; set transactional_id"):
                await getattr(mp, name)()
        with pytest.raises(IllegalStateError, match="not transactional"):
            mp.begin_transaction()
        with pytest.raises(IllegalStateError, match="not transactional"):
            await mp.send_offsets_to_transaction({("in", 0): 1}, "g")
        with pytest.raises(IllegalStateError, match="not transactional"):
            async with mp.transaction():
                pass
        with pytest.raises(IllegalStateError, match="not transactional"):
            mp.fence_producer()
        assert mp.transaction_state is None
        assert not (mp.transaction_initialized or mp.transaction_in_flight
                    or mp.transaction_committed or mp.transaction_aborted or mp.sent_offsets)
        await mp.send("t", b"v")
        assert len(mp.history()) == 1 and mp.uncommitted() == []
        assert "transaction=" not in repr(mp)
    with pytest.raises(ConfigError, match="idempotence"):
        MockProducer(transactional_id="x", enable_idempotence=False)
    tx = MockProducer(transactional_id="x")
    with pytest.raises(IllegalStateError, match="not started"):
        await tx.init_transactions()
    await tx.close()
    with pytest.raises(ProducerClosedError):
        tx.begin_transaction()


@aio
async def test_commit_moves_the_records_to_the_history() -> None:
    async with tx_mock() as mp:
        assert txn_state(mp) is TxnState.UNINITIALIZED
        await mp.init_transactions()
        assert mp.transaction_initialized and txn_state(mp) is TxnState.READY
        assert not mp.transaction_in_flight
        mp.begin_transaction()
        assert mp.transaction_in_flight and not mp.transaction_committed
        fut = await mp.send("t", b"a", key=b"k")
        many = await mp.send_many("t", [b"b", b"c"], partition=1)
        assert mp.history() == []
        assert [r.value for r in mp.uncommitted()] == [b"a", b"b", b"c"]
        assert "uncommitted=3" in repr(mp)
        assert (await fut).topic == "t" and await many == 2  # acknowledged, not committed
        await mp.commit_transaction()
        assert [r.value for r in mp.history()] == [b"a", b"b", b"c"] and mp.uncommitted() == []
        assert mp.transaction_committed and not mp.transaction_aborted
        assert not mp.transaction_in_flight and txn_state(mp) is TxnState.READY
        assert (mp.commit_count, mp.abort_count, mp.flush_count) == (1, 0, 1)
        assert mp.consumer_group_offsets_history() == []  # no offsets were sent

        mp.begin_transaction()
        assert not mp.transaction_committed  # about the last transaction: reset at begin
        await mp.send("t", b"d")
        await mp.commit_transaction()
        assert [r.value for r in mp.history()] == [b"a", b"b", b"c", b"d"]
        assert mp.commit_count == 2 and "transaction=ready" in repr(mp)


@aio
async def test_commit_acknowledges_the_pending_records_first() -> None:
    async with tx_mock(auto_complete=False) as mp:
        await mp.init_transactions()
        mp.begin_transaction()
        futs = [await mp.send("t", b"%d" % i, partition=0) for i in range(3)]
        assert mp.pending == 3
        await mp.commit_transaction()
        assert mp.pending == 0 and [(await f).offset for f in futs] == [0, 1, 2]
        assert len(mp.history()) == 3


@aio
async def test_abort_drops_the_records_and_fails_the_pending_ones() -> None:
    async with tx_mock(auto_complete=False) as mp:
        await mp.init_transactions()
        mp.begin_transaction()
        await mp.send("t", b"kept", partition=0)
        await mp.commit_transaction()

        mp.begin_transaction()
        acked = await mp.send("t", b"acked", partition=0)
        mp.complete_next()
        pending = await mp.send("t", b"pending", partition=0)
        await mp.send_offsets_to_transaction({("in", 0): 5}, "g")
        assert mp.sent_offsets
        await mp.abort_transaction()
        assert (await acked).offset == 1  # written, then hidden by the abort marker
        with pytest.raises(TransactionAbortedError, match="aborted before it was sent"):
            await pending
        assert [r.value for r in mp.history()] == [b"kept"] and mp.uncommitted() == []
        assert mp.consumer_group_offsets_history() == []
        assert mp.transaction_aborted and not mp.transaction_committed
        assert not mp.transaction_in_flight and (mp.commit_count, mp.abort_count) == (1, 1)

        mp.begin_transaction()  # the next transaction starts clean
        assert not mp.transaction_aborted and not mp.sent_offsets
        nxt = await mp.send("t", b"next", partition=0)
        await mp.commit_transaction()
        assert [r.value for r in mp.history()] == [b"kept", b"next"]
        assert (await nxt).offset == 2


# (operation, error it raises at that point: a regex, None for success). The real
# producer goes through the same steps in test_transaction_state_errors_match_the_real_producer.
TXN_SCRIPT: list[tuple[str, str | None]] = [
    ("send", r"^send\(\): call init_transactions\(\) first$"),
    ("send_many", r"^send\(\): call init_transactions\(\) first$"),
    ("begin", r"^begin_transaction\(\): call init_transactions\(\) first$"),
    ("commit", r"^commit_transaction\(\): call init_transactions\(\) first$"),
    ("abort", r"^abort_transaction\(\): call init_transactions\(\) first$"),
    ("offsets", r"^send_offsets_to_transaction\(\): call init_transactions\(\) first$"),
    ("init", None),
    ("init", r"^init_transactions\(\): no transaction in progress; call begin_transaction"),
    ("send", r"^send\(\): no transaction in progress; call begin_transaction\(\) first$"),
    ("commit", r"^commit_transaction\(\): no transaction in progress"),
    ("abort", r"^abort_transaction\(\): no transaction in progress"),
    ("offsets", r"^send_offsets_to_transaction\(\): no transaction in progress"),
    ("begin", None),
    ("begin", r"^begin_transaction\(\): a transaction is already in progress$"),
    ("init", r"^init_transactions\(\): a transaction is already in progress$"),
    ("send", None),
    ("send_many", None),
    ("offsets", None),
    ("commit", None),
    ("commit", r"^commit_transaction\(\): no transaction in progress"),
    ("begin", None),
    ("send", None),
    ("abort", None),
    ("abort", r"^abort_transaction\(\): no transaction in progress"),
]


async def txn_step(producer: Producer | MockProducer, step: str, topic: str,
                   group: str) -> tuple[str, str] | None:
    """Run one step; None if it succeeded, else the error's type name and text."""
    calls: dict[str, Callable[[], Awaitable[Any]]] = {
        "send": lambda: producer.send(topic, b"v", partition=0),
        "send_many": lambda: producer.send_many(topic, [b"v"], partition=0),
        "init": producer.init_transactions,
        "commit": producer.commit_transaction,
        "abort": producer.abort_transaction,
        "offsets": lambda: producer.send_offsets_to_transaction({(topic, 0): 1}, group),
    }
    try:
        if step == "begin":
            producer.begin_transaction()
        else:
            await calls[step]()
    except KafkaError as exc:
        return type(exc).__name__, str(exc)
    return None


@aio
async def test_transaction_state_machine_errors() -> None:
    async with MockProducer(cluster={"t": 1}, transactional_id="tx-1") as mp:
        for i, (step, expected) in enumerate(TXN_SCRIPT):
            outcome = await txn_step(mp, step, "t", "g")
            if expected is None:
                assert outcome is None, (i, step, outcome)
            else:
                assert outcome is not None and outcome[0] == "IllegalStateError", (i, outcome)
                assert re.search(expected, outcome[1]), (i, step, outcome[1])
        assert [r.value for r in mp.history()] == [b"v", b"v"]
        assert mp.consumer_group_offsets_history() == [{"g": {("t", 0): 1}}]


@aio
async def test_transaction_state_errors_match_the_real_producer(kafka_bootstrap: str,
                                                                topic_factory: Any) -> None:
    topic = topic_factory(partitions=1)
    tid = f"mock-parity-{uuid.uuid4().hex[:12]}"
    group = f"mock-parity-{uuid.uuid4().hex[:12]}"
    outcomes = []
    producers: list[Producer | MockProducer] = [
        Producer(bootstrap_servers=kafka_bootstrap, transactional_id=tid, linger_ms=5),
        MockProducer(cluster={topic: 1}, transactional_id=tid)]
    for producer in producers:
        async with producer:
            outcomes.append([await txn_step(producer, step, topic, group)
                             for step, _ in TXN_SCRIPT])
    assert outcomes[0] == outcomes[1]
    assert [o is None for o in outcomes[0]] == [e is None for _, e in TXN_SCRIPT]

    not_transactional: list[Producer | MockProducer] = [
        Producer(bootstrap_servers=kafka_bootstrap), MockProducer(cluster={topic: 1})]
    outcomes = []
    for producer in not_transactional:
        async with producer:
            outcomes.append([await txn_step(producer, step, topic, group)
                             for step in ("init", "begin", "commit", "abort", "offsets")])
    assert outcomes[0] == outcomes[1]
    assert all(o is not None and "not transactional" in o[1] for o in outcomes[0])


def test_the_mock_and_the_transaction_manager_share_one_state_machine() -> None:
    """No copy to drift: the mock's transactional state is the class that
    TransactionManager drives, and the manager's state, errors and queued-batch error
    are its machine's."""
    config = ProducerConfig(transactional_id="tx-1").validated()
    real = TransactionManager(cast(Any, None), config, cast(Any, None), lambda: None)
    mock = MockProducer(transactional_id="tx-1")._txn
    assert type(mock) is type(real.machine) is TxnStateMachine
    assert TxnState is transaction_state.TxnState
    assert not hasattr(mock_module, "_Transactions")
    assert "_FATAL" not in vars(mock_module)
    for machine in (real.machine, mock):
        machine.initialized()
        machine.begin()
    real.fail(Boom("boom"))
    mock.fail(Boom("boom"))
    assert real.state is mock.state is TxnState.ABORTABLE_ERROR
    assert real.error is real.machine.error and isinstance(real.error, Boom)
    for what in ("send()", "commit_transaction()"):
        r, m = real.machine.state_error(what), mock.state_error(what)
        assert (type(r), str(r), type(r.__cause__)) == (type(m), str(m), type(m.__cause__))
    with pytest.raises(TransactionAbortableError, match="must be aborted"):
        real.check_send()
    rq, mq = real.blocks_queued, mock.queued_error()
    assert (type(rq), str(rq)) == (type(mq), str(mq)) == (
        TransactionAbortedError,
        "the record's transaction was aborted before it was sent (after: boom)")
    err = real.fenced(int(ErrorCode.producer_fenced), "newer epoch")
    assert isinstance(err, ProducerFencedError) and real.state is TxnState.FATAL_ERROR
    assert "PRODUCER_FENCED: newer epoch" in str(err)


# -- the transaction state machine, driven directly -------------------------------------


S = TxnState
ALLOWED = {
    (S.UNINITIALIZED, S.READY), (S.READY, S.IN_TRANSACTION),
    (S.IN_TRANSACTION, S.COMMITTING), (S.IN_TRANSACTION, S.ABORTING),
    (S.IN_TRANSACTION, S.ABORTABLE_ERROR),
    (S.COMMITTING, S.READY), (S.COMMITTING, S.ABORTABLE_ERROR),
    (S.COMMITTING, S.IN_TRANSACTION),  # undone: the flush before EndTxn failed
    (S.ABORTING, S.READY),
    (S.ABORTING, S.IN_TRANSACTION), (S.ABORTING, S.ABORTABLE_ERROR),  # undone
    (S.ABORTABLE_ERROR, S.ABORTING),
} | {(source, S.FATAL_ERROR) for source in S}


def machine_in(state: TxnState) -> TxnStateMachine:
    """A machine brought to ``state`` through its own transitions."""
    m = TxnStateMachine("tx-1")
    if state is S.FATAL_ERROR:
        m.to_fatal(ProducerFencedError("fenced"))
    elif state is not S.UNINITIALIZED:
        m.initialized()
        if state is not S.READY:
            m.begin()
            if state is S.COMMITTING:
                m.start_commit()
            elif state is S.ABORTABLE_ERROR:
                m.fail(Boom("boom"))
            elif state is S.ABORTING:
                m.start_abort()
    assert m.state is state
    return m


def test_state_machine_transition_table() -> None:
    assert {(a, b) for a in S for b in S if is_transition_valid(a, b)} == ALLOWED
    assert set(TRANSITIONS) == set(S)
    for state in S:
        machine_in(state)  # every state is reachable


@pytest.mark.parametrize(("state", "step", "expected"), [
    (S.UNINITIALIZED, "begin", r"begin_transaction\(\): call init_transactions\(\) first"),
    (S.UNINITIALIZED, "commit", r"commit_transaction\(\): call init_transactions"),
    (S.READY, "commit", r"commit_transaction\(\): no transaction in progress; call "
     r"begin_transaction\(\) first"),
    (S.READY, "abort", "no transaction in progress"),
    (S.READY, "send", r"send\(\): no transaction in progress"),
    (S.IN_TRANSACTION, "begin", "a transaction is already in progress"),
    (S.COMMITTING, "send", r"send\(\): the producer is committing the transaction"),
    (S.COMMITTING, "abort", "the producer is committing the transaction"),
    (S.ABORTING, "begin", r"an earlier abort_transaction\(\) was cancelled or timed out"),
    (S.ABORTABLE_ERROR, "commit", "must be aborted with abort_transaction"),
    (S.ABORTABLE_ERROR, "send", "must be aborted with abort_transaction"),
    (S.FATAL_ERROR, "begin", "the producer is no longer usable"),
    (S.FATAL_ERROR, "abort", "the producer is no longer usable"),
])
def test_state_machine_refuses_calls_in_the_wrong_state(state: TxnState, step: str,
                                                        expected: str) -> None:
    m = machine_in(state)
    calls: dict[str, Callable[[], object]] = {
        "begin": m.begin, "commit": m.start_commit, "abort": m.start_abort,
        "send": m.check_send}
    error_type = {S.ABORTABLE_ERROR: TransactionAbortableError,
                  S.FATAL_ERROR: ProducerFencedError}.get(state, IllegalStateError)
    with pytest.raises(error_type, match=expected) as info:
        calls[step]()
    assert type(info.value) is error_type
    assert m.state is state  # refused: no change
    if state is S.FATAL_ERROR:
        assert type(info.value.__cause__) is ProducerFencedError  # a copy of the original
        assert info.value is not m.error


def test_state_machine_refuses_invalid_transitions() -> None:
    m = machine_in(S.READY)
    with pytest.raises(IllegalStateError, match="invalid transaction state transition "
                       "READY -> READY"):
        m.initialized()
    with pytest.raises(IllegalStateError, match="READY -> READY"):
        m.ended()
    fatal = machine_in(S.FATAL_ERROR)
    for step in (fatal.initialized, fatal.ended):
        with pytest.raises(IllegalStateError, match="FATAL_ERROR -> READY"):
            step()
    assert fatal.fail(Boom("later")) is None and fatal.state is S.FATAL_ERROR
    fatal.to_fatal(TransactionalIdAuthorizationError("denied"))  # fatal -> fatal
    assert isinstance(fatal.error, TransactionalIdAuthorizationError)


def test_state_machine_commit_abort_and_errors() -> None:
    m = machine_in(S.IN_TRANSACTION)
    m.check_send()
    assert m.queued_error() is None and m.open
    busy = r"abort_transaction\(\): commit_transaction\(\) is still running"
    with m.running("commit_transaction()"), pytest.raises(IllegalStateError, match=busy):
        m.start_abort()
    assert m.busy is None
    m.start_commit()
    m.revert_end()  # the flush failed
    assert m.state is S.IN_TRANSACTION
    m.start_commit()
    m.end_started(True)
    assert m.resumes_end(True) and not m.resumes_end(False)
    assert m.end_failed(True, Boom("end")) is False  # a failed commit: abortable
    assert m.state is S.ABORTABLE_ERROR and m.retrying_end is None and m.open
    assert isinstance(m.queued_error(), TransactionAbortedError)
    m.start_abort()
    m.revert_end()  # back where the abort started
    assert m.state is S.ABORTABLE_ERROR
    m.start_abort()
    m.ended()
    assert m.state is S.READY and m.error is None and not m.open
    m.begin()
    assert m.fail(RecordTooLargeError("big")) is S.ABORTABLE_ERROR
    assert m.fail(Boom("second")) is None and isinstance(m.error, RecordTooLargeError)
    m.start_abort()
    assert m.end_failed(False, Boom("end")) is True  # a failed abort: fatal
    assert m.state is S.FATAL_ERROR and str(m.error) == "end"
    copy = m.queued_error()
    assert isinstance(copy, IllegalStateError) and copy.__cause__ is m.error


def test_which_errors_are_fatal() -> None:
    assert is_fatal_failure(ProducerFencedError("x"))
    assert is_fatal_failure(TransactionalIdAuthorizationError("x"))
    for abortable in (Boom("x"), RecordTooLargeError("x"), GroupAuthorizationError("x"),
                      KafkaTimeoutError("x"), RuntimeError("x")):
        assert not is_fatal_failure(abortable)
    fatal_names = {"producer_fenced", "invalid_producer_epoch",
                   "transaction_coordinator_fenced", "transactional_id_authorization_failed",
                   "invalid_txn_state", "invalid_transaction_timeout",
                   "unsupported_for_message_format", "cluster_authorization_failed",
                   "invalid_producer_id_mapping"}
    assert {ErrorCode(c).name for c in FATAL_CODES} == fatal_names
    for code in ErrorCode:
        assert is_fatal_code(int(code)) is (code.name in fatal_names)
        m = machine_in(S.IN_TRANSACTION)
        assert m.coordinator_error(for_code(int(code), "answer")) is (code.name in fatal_names)
        assert m.state is (S.FATAL_ERROR if code.name in fatal_names else S.IN_TRANSACTION)
    assert {ErrorCode(c).name for c in FENCED_CODES} == {
        "producer_fenced", "invalid_producer_epoch", "transaction_coordinator_fenced"}


@aio
async def test_consumer_group_offsets_history() -> None:
    async with tx_mock() as mp:
        await mp.init_transactions()
        async with mp.transaction():
            await mp.send("t", b"out")
            await mp.send_offsets_to_transaction({("in", 0): 10, ("in", 1): (20, "meta")}, "g1")
            assert mp.sent_offsets
            # confluent-kafka style TopicPartitions, a GroupMetadata, a consumer's metadata
            await mp.send_offsets_to_transaction(
                [SimpleNamespace(topic="in", partition=1, offset=21),
                 SimpleNamespace(topic="in", partition=2, offset=5)],
                GroupMetadata("g1", 3, "member-1"))
            await mp.send_offsets_to_transaction(
                {("in", 3): 7}, SimpleNamespace(group_id="g2", generation_id=1,
                                                member_id="m", group_instance_id=None))
            assert mp.consumer_group_offsets_history() == []  # not committed yet
        assert mp.consumer_group_offsets_history() == [
            {"g1": {("in", 0): 10, ("in", 1): 21, ("in", 2): 5}, "g2": {("in", 3): 7}}]

        async with mp.transaction():
            await mp.send_offsets_to_transaction({}, "g1")  # nothing to commit
            assert not mp.sent_offsets
        async with mp.transaction():
            await mp.send_offsets_to_transaction({("in", 0): 11}, "g1")
        history = mp.consumer_group_offsets_history()
        assert history[1:] == [{"g1": {("in", 0): 11}}]
        history[0]["g1"].clear()  # a copy
        assert mp.consumer_group_offsets_history()[0]["g1"][("in", 0)] == 10

        mp.begin_transaction()
        with pytest.raises(TypeError, match="offsets must map"):
            await mp.send_offsets_to_transaction({("in", 0): -1}, "g1")
        with pytest.raises(TypeError, match="group_metadata"):
            await mp.send_offsets_to_transaction({("in", 0): 1}, 42)
        with pytest.raises(IllegalStateError, match="group id is empty"):
            await mp.send_offsets_to_transaction({("in", 0): 1}, "")
        assert txn_state(mp) is TxnState.IN_TRANSACTION  # refused input: no change
        await mp.send("t", b"open")
        mp.clear()
        assert mp.consumer_group_offsets_history() == [] and mp.history() == []
        assert (mp.commit_count, mp.abort_count, mp.flush_count) == (0, 0, 0)
        assert mp.transaction_in_flight and [r.value for r in mp.uncommitted()] == [b"open"]
        await mp.commit_transaction()
        assert [r.value for r in mp.history()] == [b"open"]


@aio
async def test_transaction_context_commits_or_aborts() -> None:
    async with tx_mock() as mp:
        await mp.init_transactions()
        async with mp.transaction() as same:
            assert same is mp and mp.transaction_in_flight
            await mp.send("t", b"committed")
        assert mp.transaction_committed

        with pytest.raises(RuntimeError, match="boom"):
            async with mp.transaction():
                await mp.send("t", b"dropped")
                raise RuntimeError("boom")
        assert mp.transaction_aborted and [r.value for r in mp.history()] == [b"committed"]

        # a record fails: the commit raises TransactionAbortableError, the block aborts
        mp.auto_complete = False
        with pytest.raises(TransactionAbortableError) as info:
            async with mp.transaction():
                fut = await mp.send("t", b"lost")
                mp.fail_next(Boom("MESSAGE_TOO_LARGE"))
        assert isinstance(info.value.__cause__, Boom)
        assert mp.transaction_aborted and txn_state(mp) is TxnState.READY
        with pytest.raises(Boom):
            await fut

        with pytest.raises(IllegalStateError, match="already in progress"):
            async with mp.transaction(), mp.transaction():
                pass
        assert mp.transaction_aborted and mp.abort_count == 3


@aio
async def test_a_failed_record_makes_the_transaction_abortable() -> None:
    async with tx_mock(auto_complete=False) as mp:
        await mp.init_transactions()
        mp.begin_transaction()
        first = await mp.send("t", b"1", partition=0)
        second = await mp.send("t", b"2", partition=0)
        err = Boom("MESSAGE_TOO_LARGE")
        assert mp.fail_next(err)
        assert txn_state(mp) is TxnState.ABORTABLE_ERROR
        calls: list[Callable[[], Awaitable[Any]]] = [
            lambda: mp.send("t", b"3"), lambda: mp.send_many("t", [b"3"]),
            mp.commit_transaction, mp.init_transactions,
            lambda: mp.send_offsets_to_transaction({("in", 0): 1}, "g")]
        for call in calls:
            with pytest.raises(TransactionAbortableError,
                               match="must be aborted with abort_transaction") as info:
                await call()
            assert info.value.__cause__ is err
        with pytest.raises(TransactionAbortableError):
            mp.begin_transaction()
        await mp.abort_transaction()
        with pytest.raises(TransactionAbortedError, match="after: MESSAGE_TOO_LARGE"):
            await second
        with pytest.raises(Boom):
            await first
        assert txn_state(mp) is TxnState.READY and mp.uncommitted() == []
        mp.begin_transaction()
        await mp.send("t", b"again")
        await mp.commit_transaction()
        assert [r.value for r in mp.history()] == [b"again"]


@aio
async def test_fence_producer_makes_every_call_fail() -> None:
    async with tx_mock(auto_complete=False) as mp:
        with pytest.raises(IllegalStateError, match="call init_transactions"):
            mp.fence_producer()
        await mp.init_transactions()
        mp.begin_transaction()
        pending = await mp.send("t", b"v", partition=0)
        mp.fence_producer()
        mp.fence_producer()  # no-op the second time
        assert txn_state(mp) is TxnState.FATAL_ERROR
        calls: list[Callable[[], Awaitable[Any]]] = [
            lambda: mp.send("t", b"v"), lambda: mp.send_many("t", [b"v"]),
            mp.init_transactions, mp.commit_transaction, mp.abort_transaction,
            lambda: mp.send_offsets_to_transaction({("in", 0): 1}, "g")]
        for call in calls:
            with pytest.raises(ProducerFencedError,
                               match="'tx-1': the producer is no longer usable") as info:
                await call()
            assert isinstance(info.value.__cause__, ProducerFencedError)
            assert "fence_producer" in str(info.value.__cause__)
        with pytest.raises(ProducerFencedError):
            mp.begin_transaction()
        with pytest.raises(ProducerFencedError):
            async with mp.transaction():
                pass
        await mp.flush()  # the pending record fails, as the real Sender fails it
        with pytest.raises(ProducerFencedError):
            await pending
        assert mp.history() == []
    assert mp.closed and mp.transaction_in_flight  # never committed nor aborted


@aio
async def test_a_fenced_record_is_fatal() -> None:
    for error in (ProducerFencedError("fenced by the broker"),
                  TransactionalIdAuthorizationError("denied")):
        async with tx_mock(auto_complete=False) as mp:
            await mp.init_transactions()
            mp.begin_transaction()
            await mp.send("t", b"1")
            second = await mp.send("t", b"2")
            mp.fail_next(error)
            assert txn_state(mp) is TxnState.FATAL_ERROR
            with pytest.raises(type(error), match="no longer usable"):
                await mp.abort_transaction()
        with pytest.raises(type(error)):  # close() failed it with the fatal error
            await second


@aio
async def test_close_aborts_an_open_transaction(caplog: pytest.LogCaptureFixture) -> None:
    mp = tx_mock(auto_complete=False)
    await mp.start()
    await mp.init_transactions()
    mp.begin_transaction()
    fut = await mp.send("t", b"v")
    await mp.close()
    assert mp.closed and mp.transaction_aborted and mp.abort_count == 1
    assert mp.history() == [] and mp.uncommitted() == []
    with pytest.raises(TransactionAbortedError):
        await fut

    # an abort that fails is logged; close() still closes
    other = tx_mock()
    await other.start()
    await other.init_transactions()
    other.begin_transaction()
    other.abort_transaction_error = Boom("coordinator gone")
    with caplog.at_level(logging.WARNING, logger="aioproducer.testing"):
        await other.close()
    assert other.closed and "the transaction could not be ended" in caplog.text
    assert txn_state(other) is TxnState.FATAL_ERROR


@aio
async def test_init_transactions_error() -> None:
    async with tx_mock() as mp:
        mp.init_transactions_error = KafkaTimeoutError("InitProducerId did not complete")
        with pytest.raises(KafkaTimeoutError):
            await mp.init_transactions()
        assert txn_state(mp) is TxnState.UNINITIALIZED and not mp.transaction_initialized
        mp.init_transactions_error = None
        await mp.init_transactions()  # the same call, again
        assert mp.transaction_initialized
    async with tx_mock() as mp:
        mp.init_transactions_error = TransactionalIdAuthorizationError("denied")
        with pytest.raises(TransactionalIdAuthorizationError):
            await mp.init_transactions()
        assert txn_state(mp) is TxnState.FATAL_ERROR
        mp.init_transactions_error = None
        with pytest.raises(TransactionalIdAuthorizationError, match="no longer usable"):
            await mp.init_transactions()


@aio
async def test_commit_transaction_error_has_the_real_consequences() -> None:
    async with tx_mock() as mp:
        await mp.init_transactions()
        # a timeout: only the same call may come next
        mp.begin_transaction()
        await mp.send("t", b"1")
        mp.commit_transaction_error = KafkaTimeoutError("EndTxn did not complete")
        with pytest.raises(KafkaTimeoutError):
            await mp.commit_transaction()
        assert txn_state(mp) is TxnState.COMMITTING and mp.transaction_in_flight
        with pytest.raises(IllegalStateError, match=r"send\(\): an earlier "
                           r"commit_transaction\(\) was cancelled or timed out"):
            await mp.send("t", b"x")
        with pytest.raises(IllegalStateError, match=r"call commit_transaction\(\) again"):
            await mp.abort_transaction()
        with pytest.raises(KafkaTimeoutError):
            await mp.commit_transaction()
        mp.commit_transaction_error = None
        await mp.commit_transaction()
        assert mp.transaction_committed and [r.value for r in mp.history()] == [b"1"]

        # an error answer: the transaction must be aborted
        mp.begin_transaction()
        await mp.send("t", b"2")
        err = Boom("EndTxn failed")
        mp.commit_transaction_error = err
        with pytest.raises(Boom):
            await mp.commit_transaction()
        assert txn_state(mp) is TxnState.ABORTABLE_ERROR
        with pytest.raises(TransactionAbortableError) as info:
            await mp.send("t", b"x")
        assert info.value.__cause__ is err
        await mp.abort_transaction()
        assert mp.transaction_aborted and [r.value for r in mp.history()] == [b"1"]

        # not a Kafka error: nothing changes, as in Java's MockProducer
        mp.begin_transaction()
        mp.commit_transaction_error = RuntimeError("test")
        with pytest.raises(RuntimeError):
            await mp.commit_transaction()
        assert txn_state(mp) is TxnState.IN_TRANSACTION

        # fenced: fatal
        mp.commit_transaction_error = ProducerFencedError("fenced")
        with pytest.raises(ProducerFencedError):
            await mp.commit_transaction()
        assert txn_state(mp) is TxnState.FATAL_ERROR
        assert mp.commit_count == 1


@aio
async def test_commit_with_a_flush_error_stays_in_the_transaction() -> None:
    async with tx_mock() as mp:
        await mp.init_transactions()
        mp.begin_transaction()
        mp.flush_error = Boom("flush")
        with pytest.raises(Boom):
            await mp.commit_transaction()
        assert txn_state(mp) is TxnState.IN_TRANSACTION
        mp.flush_error = None
        await mp.commit_transaction()
        assert mp.transaction_committed


@aio
async def test_abort_transaction_error_has_the_real_consequences() -> None:
    async with tx_mock() as mp:
        await mp.init_transactions()
        mp.begin_transaction()
        mp.abort_transaction_error = KafkaTimeoutError("EndTxn did not complete")
        with pytest.raises(KafkaTimeoutError):
            await mp.abort_transaction()
        assert txn_state(mp) is TxnState.ABORTING
        with pytest.raises(IllegalStateError, match=r"call abort_transaction\(\) again"):
            mp.begin_transaction()
        mp.abort_transaction_error = None
        await mp.abort_transaction()
        assert mp.transaction_aborted and txn_state(mp) is TxnState.READY

        mp.begin_transaction()
        mp.abort_transaction_error = RuntimeError("test")
        with pytest.raises(RuntimeError):
            await mp.abort_transaction()
        assert txn_state(mp) is TxnState.IN_TRANSACTION

        mp.abort_transaction_error = Boom("EndTxn failed")
        with pytest.raises(Boom):
            await mp.abort_transaction()
        assert txn_state(mp) is TxnState.FATAL_ERROR  # as in the real producer
        with pytest.raises(IllegalStateError,
                           match="the transactional producer failed: EndTxn failed"):
            mp.begin_transaction()


@aio
async def test_send_offsets_error_has_the_real_consequences() -> None:
    async with tx_mock() as mp:
        await mp.init_transactions()
        mp.begin_transaction()
        for error in (KafkaTimeoutError("AddOffsetsToTxn did not complete"),
                      RuntimeError("test")):
            mp.send_offsets_error = error
            with pytest.raises(type(error)):
                await mp.send_offsets_to_transaction({("in", 0): 1}, "g")
            assert txn_state(mp) is TxnState.IN_TRANSACTION and not mp.sent_offsets

        err = GroupAuthorizationError("TxnOffsetCommit")
        mp.send_offsets_error = err
        with pytest.raises(TransactionAbortableError,
                           match=r"send_offsets_to_transaction\(\).*GROUP_AUTH") as info:
            await mp.send_offsets_to_transaction({("in", 0): 1}, "g")
        assert info.value.__cause__ is err
        assert txn_state(mp) is TxnState.ABORTABLE_ERROR
        await mp.abort_transaction()

        mp.begin_transaction()
        mp.send_offsets_error = ProducerFencedError("fenced")
        with pytest.raises(ProducerFencedError, match="no longer usable"):
            await mp.send_offsets_to_transaction({("in", 0): 1}, "g")
        assert txn_state(mp) is TxnState.FATAL_ERROR
        assert mp.consumer_group_offsets_history() == []


@pytest.mark.parametrize("name", [
    "send", "send_many", "send_and_wait", "flush", "close", "partitions_for",
    "init_transactions", "begin_transaction", "commit_transaction", "abort_transaction",
    "send_offsets_to_transaction", "transaction"])
def test_same_signatures_as_the_producer(name: str) -> None:
    def params(func: Any) -> list[tuple[Any, ...]]:
        return [(p.name, p.kind, p.default, p.annotation)
                for p in inspect.signature(func).parameters.values()]

    real, mock = getattr(Producer, name), getattr(MockProducer, name)
    assert params(mock) == params(real)
    if name == "send":
        # Producer.send is a function returning a coroutine (a native PendingSend, or
        # the Python path's): awaited the same way as the mock's async def.
        assert inspect.iscoroutinefunction(mock) and not inspect.iscoroutinefunction(real)
        assert real.__annotations__["return"] == "Coroutine[Any, Any, RecordFuture]"
    else:
        assert inspect.iscoroutinefunction(mock) == inspect.iscoroutinefunction(real)


def test_send_many_result_has_the_real_results_surface() -> None:
    public = {n for n in dir(SendManyResult) if not n.startswith("_")} | {"count"}
    assert public <= {n for n in dir(MockSendManyResult) if not n.startswith("_")}


class TestMockProducerFixtureWithTransactions:
    """The plugin's ``mock_producer`` fixture, configured for transactions."""

    @pytest.fixture
    def mock_producer_options(self) -> dict[str, Any]:
        return {"default_partitions": 2, "transactional_id": "fixture-tx"}

    @aio
    async def test_fixture(self, mock_producer: MockProducer) -> None:
        await mock_producer.init_transactions()
        async with mock_producer.transaction():
            result = await mock_producer.send_many("events", [b"a", b"b"])
            await mock_producer.send_offsets_to_transaction({("in", 0): 3}, "group")
        assert await result == 2
        assert [r.value for r in mock_producer.history()] == [b"a", b"b"]
        assert mock_producer.consumer_group_offsets_history() == [{"group": {("in", 0): 3}}]
