"""The Sender on a fake broker (tests/support/fake_broker.py): its retries, idempotence,
splitting and expiry, pass by pass, without a real Kafka. The fake keeps a log per
partition and a broker's idempotence state, so each test asserts what the log holds
(every record once, in order) as well as what each record's future says."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from support.fake_broker import Parts, parts

from aioproducer.errors import (
    DeliveryTimeoutError,
    InvalidRecordError,
    NotLeaderOrFollowerError,
)
from aioproducer.record import RecordFuture, RecordMetadata, SendManyResult

pytestmark = pytest.mark.asyncio

TP = ("t", 0)


async def send(p: Parts, value: bytes, partition: int = 0) -> RecordFuture:
    res = await p.send("t", value, partition)
    return RecordFuture(res.batch, res.index, 1_700_000_000_000, -1, len(value))


async def settled(futures: list[RecordFuture], timeout: float = 5.0) -> list[Any]:
    """Each future's RecordMetadata or exception."""
    async def one(f: RecordFuture) -> Any:
        try:
            return await f
        except Exception as exc:
            return exc

    return await asyncio.wait_for(asyncio.gather(*(one(f) for f in futures)), timeout)


def values_in_log(p: Parts, tp: tuple[str, int] = TP) -> list[int]:
    """The sequences of the records in the fake broker's log, in log order."""
    return [seq for _off, seq in p.broker.records(tp)]


async def test_a_retriable_error_is_retried_and_written_once() -> None:
    p = parts({"t": 1}, linger_ms=0, retry_backoff_ms=10)
    try:
        p.broker.refuse(TP, int(ErrorCode.not_leader_or_follower), times=2)
        futures = [await send(p, b"a")]
        (meta,) = await settled(futures)
        assert isinstance(meta, RecordMetadata) and meta.offset == 0
        assert p.broker.requests == 3  # two refusals, then written
        assert values_in_log(p) == [0]
    finally:
        await p.close()


@pytest.mark.parametrize("idempotent", [False, True])
async def test_an_answer_for_another_partition_is_no_answer(idempotent: bool) -> None:
    """A one-batch request answered for another partition (the one-answer shortcut
    must not take it for the batch's): the batch is retried, then written once."""
    p = parts({"t": 2}, linger_ms=0, retry_backoff_ms=10, enable_idempotence=idempotent)
    try:
        p.broker.misname(TP)
        (meta,) = await settled([await send(p, b"a")])
        assert isinstance(meta, RecordMetadata) and meta.offset == 0
        assert p.broker.requests == 2
        assert len(p.broker.records(TP)) == 1 and p.broker.records(("t", 1)) == []
    finally:
        await p.close()


async def test_retries_run_out_with_the_broker_error() -> None:
    p = parts({"t": 1}, linger_ms=0, retry_backoff_ms=1, retries=2)
    try:
        p.broker.refuse(TP, int(ErrorCode.not_leader_or_follower), times=5)
        (err,) = await settled([await send(p, b"a")])
        assert isinstance(err, NotLeaderOrFollowerError)
        assert p.broker.requests == 3  # the first attempt and two retries
        assert values_in_log(p) == []
    finally:
        await p.close()


async def test_a_lost_answer_is_retried_and_the_broker_drops_the_copy() -> None:
    """Idempotence: the batch was written and its answer lost; the retry carries the
    same sequence, the broker answers with the first offset, and the log holds each
    record once, in order."""
    p = parts({"t": 1}, linger_ms=0, retry_backoff_ms=10, batch_size=128)
    try:
        futures = [await send(p, b"first")]
        await settled(futures)
        p.broker.lose_answer(TP)
        futures += [await send(p, b"x%02d" % i) for i in range(20)]
        metas = await settled(futures)
        assert all(isinstance(m, RecordMetadata) for m in metas), metas
        assert [m.offset for m in metas] == list(range(21))
        assert values_in_log(p) == list(range(21))  # no record twice
    finally:
        await p.close()


async def test_a_refused_batch_leaves_a_gap_that_a_local_epoch_bump_closes() -> None:
    """A batch the broker refuses (INVALID_RECORD) fails; the batches pipelined behind
    it, with later sequences, are renumbered under the next epoch (from 0) and
    written, in order, without a new producer id."""
    p = parts({"t": 1}, linger_ms=0, retry_backoff_ms=10, batch_size=128)
    try:
        await settled([await send(p, b"r0")])  # an acknowledged batch: pipelining on
        assert p.pid is not None
        first_id = p.pid.producer_id
        p.broker.refuse(TP, int(ErrorCode.invalid_record))
        futures = [await send(p, b"y%02d" % i) for i in range(30)]
        results = await settled(futures)
        # The first batch was refused whole; every record behind it is written.
        refused = [r for r in results if isinstance(r, InvalidRecordError)]
        assert refused and results[:len(refused)] == refused
        written = results[len(refused):]
        assert written and all(isinstance(m, RecordMetadata) for m in written), results
        assert [m.offset for m in written] == list(range(1, len(written) + 1))
        log = p.broker.logs[TP]
        assert [w.epoch for w in log[1:]] == [log[1].epoch] * (len(log) - 1)
        assert log[1].epoch == log[0].epoch + 1 and log[1].base_sequence == 0
        assert p.pid.producer_id == first_id  # a local bump, no InitProducerId
    finally:
        await p.close()


async def test_a_batch_too_large_is_split_and_its_pieces_written_in_order() -> None:
    p = parts({"t": 1}, linger_ms=50, batch_size=4096, retry_backoff_ms=10)
    try:
        await settled([await send(p, b"r0")])
        futures = [await send(p, b"s%03d-" % i + b"x" * 60) for i in range(40)]
        p.broker.refuse(TP, int(ErrorCode.message_too_large))
        metas = await settled(futures)
        assert all(isinstance(m, RecordMetadata) for m in metas), metas
        assert [m.offset for m in metas] == list(range(1, 41))
        log = p.broker.logs[TP]
        assert len(log) > 2  # the refused batch came back in pieces
        assert values_in_log(p) == list(range(41))  # consecutive sequences, in order
    finally:
        await p.close()


async def test_expiry_in_flight_then_the_late_answer_resolves_the_partition() -> None:
    """A batch in flight past delivery_timeout_ms fails with DeliveryTimeoutError (it
    may or may not be written); the answer that comes later tells: written, so the
    partition goes on from the next sequence, with nothing written twice."""
    p = parts({"t": 1}, linger_ms=0, retry_backoff_ms=10, delivery_timeout_ms=400,
              request_timeout_ms=300)
    try:
        await settled([await send(p, b"r0")])
        p.broker.hold(TP)
        (late,) = await settled([await send(p, b"late")], timeout=5.0)
        assert isinstance(late, DeliveryTimeoutError)
        p.broker.release(TP)
        await asyncio.sleep(0.05)
        (after,) = await settled([await send(p, b"after")])
        assert isinstance(after, RecordMetadata) and after.offset == 2
        assert values_in_log(p) == [0, 1, 2]
    finally:
        await p.close()


async def test_stale_metadata_retries_are_logged_once_per_topic_and_counted(
        caplog: pytest.LogCaptureFixture) -> None:
    """A new topic's leaders settling answer NOT_LEADER_OR_FOLLOWER for a while: one
    warning per topic per metadata version, every retry counted."""
    import logging

    p = parts({"t": 3}, linger_ms=0, retry_backoff_ms=1, retry_backoff_max_ms=2)
    try:
        for part in range(3):
            p.broker.refuse(("t", part), int(ErrorCode.not_leader_or_follower), times=6)
        with caplog.at_level(logging.DEBUG, logger="aioproducer.sender"):
            futures = [await send(p, b"v%d" % part, part) for part in range(3)]
            metas = await settled(futures)
        assert all(isinstance(m, RecordMetadata) for m in metas), metas
        warned = [r for r in caplog.records if r.levelno == logging.WARNING
                  and "retrying" in r.getMessage()]
        assert len(warned) == 1, [r.getMessage() for r in warned]
        assert p.sender.metrics.metadata_retries == 18
    finally:
        await p.close()


async def test_awaiting_many_sends_as_one() -> None:
    """SendManyResult.of(futures): one wait per batch instead of per record, the count
    when all are acknowledged, the first typed error otherwise, every failure listed;
    the same outcome as asyncio.gather over the futures."""
    p = parts({"t": 2}, linger_ms=5, retry_backoff_ms=1, batch_size=256)
    try:
        futures = [await send(p, b"ok%03d" % i, i % 2) for i in range(60)]
        assert await asyncio.wait_for(SendManyResult.of(futures), 5.0) == 60
        assert [m.offset for m in await asyncio.gather(*futures)] == [
            i // 2 for i in range(60)]
        p.broker.refuse(("t", 1), int(ErrorCode.invalid_record))
        futures = [await send(p, b"x%03d" % i, i % 2) for i in range(60)]
        result = SendManyResult.of(futures)
        with pytest.raises(InvalidRecordError):
            await asyncio.wait_for(result, 5.0)
        outcomes = await settled(futures)
        failed = [i for i, o in enumerate(outcomes) if isinstance(o, Exception)]
        assert failed and all(i % 2 == 1 for i in failed)
        assert result.failed_count() == len(failed)
        assert {(t, part) for t, part, _e in result.failures()} == {("t", 1)}
        assert SendManyResult.of([]).count == 0 and await SendManyResult.of([]) == 0
    finally:
        await p.close()


async def test_a_slow_pass_is_followed_by_a_quiet_time_and_a_wakeup_waits_it_out(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A pass that took more CPU than SLOW_PASS_S (thousands of partitions) is followed
    by twice its CPU time without passes, wakeups included; a wakeup that came meanwhile
    runs the next pass as soon as it ends, and every record is written."""
    import time

    import aioproducer.sender as sender_module

    burn = 0.003
    monkeypatch.setattr(sender_module, "SLOW_PASS_S", 0.002)
    p = parts({"t": 1}, linger_ms=0)
    real = p.sender.run_once
    passes: list[tuple[float, float]] = []  # (start, end), monotonic

    def slow_pass(now: float, want_delay: bool = True) -> float:
        t0 = time.monotonic()
        c0 = time.thread_time()
        while time.thread_time() - c0 < burn:  # CPU, as a pass over many partitions
            pass
        try:
            return real(now, want_delay)
        finally:
            passes.append((t0, time.monotonic()))

    p.sender.run_once = slow_pass  # type: ignore[method-assign]
    try:
        futures = []
        for i in range(20):  # a send, and its wakeup, every millisecond
            futures.append(await send(p, b"v%d" % i))
            await asyncio.sleep(0.001)
        results = await settled(futures)
        assert all(isinstance(r, RecordMetadata) for r in results), results
        assert values_in_log(p) == list(range(20))
        # The passes of the Sender task are 2 * burn apart at least (the quiet time
        # is twice the pass's CPU time, which is burn or a little more), less 1 ms:
        # uvloop's timers count whole milliseconds, and may fire that much early.
        gaps = [b[0] - a[1] for a, b in itertools.pairwise(passes)]
        assert len(passes) >= 3 and min(gaps) >= 2 * burn - 0.001, gaps
    finally:
        await p.close()


async def test_fast_passes_have_no_quiet_time() -> None:
    """With a handful of partitions a pass costs microseconds: every wakeup gets its
    own pass at once (linger 0: each record its own request)."""
    p = parts({"t": 1}, linger_ms=0)
    try:
        futures = []
        for i in range(10):
            futures.append(await send(p, b"v%d" % i))
            await futures[-1]
        assert values_in_log(p) == list(range(10))
        assert p.broker.requests == 10
        assert not p.sender._quiet
    finally:
        await p.close()


async def test_a_new_batch_in_the_quiet_time_is_not_left_for_the_old_delay() -> None:
    """looks_within() (the Producer skips a wakeup when it is true) is false while the
    Sender waits out a quiet time, whose wait was reckoned before the new batch: the
    wakeup then runs the next pass as soon as the quiet time ends."""
    p = parts({"t": 1}, linger_ms=50)
    try:
        s: Any = p.sender
        for _ in range(200):  # until it sleeps with nothing to do
            await asyncio.sleep(0.005)
            if s._sleeper is not None and not s._sleeper.done() and p.pid is not None \
                    and p.pid.ready:
                break
        # Its timer, 1 s away (as when idle), set here so that the test does not race it.
        loop = asyncio.get_running_loop()
        if s._timer is not None:
            s._timer.cancel()
        s._timer = loop.call_later(1.0, s._on_timer)
        s._timer_at = loop.time() + 1.0
        assert s._sleeper is not None and not s.looks_within(0.05)
        assert s.looks_within(1.5)
        s._sleeper, sleeper = None, s._sleeper  # as during a quiet time
        s._quiet = True
        assert not s.looks_within(10.0)
        s.wakeup()
        assert s._woken
        s._quiet = False
        assert s.looks_within(0.0)  # between passes: the next one comes anyway
        s._sleeper = sleeper
    finally:
        await p.close()


async def _appended(p: Parts, value: bytes) -> Any:
    """Append one record without waking the Sender (as send() under linger 0 does
    before it calls send_new)."""
    return await p.accumulator.append(
        "t", p.info["t"], 0, 1_700_000_000_000, None, value, None, len(value) + 64,
        sticky=None, max_block_s=5.0)


async def _until_pid_ready(p: Parts) -> None:
    for _ in range(200):
        if p.pid is None or p.pid.ready:
            return
        await asyncio.sleep(0.005)
    raise AssertionError("no producer id")


async def test_send_new_writes_a_lone_batch_at_once() -> None:
    """linger 0: send_new() takes the partition's one batch and writes its request in
    the same call (no pass, no turn of the loop); the answer completes it."""
    p = parts({"t": 1}, linger_ms=0)
    try:
        await _until_pid_ready(p)
        res = await _appended(p, b"a")
        loop = asyncio.get_running_loop()
        assert p.sender.send_new(res.batch, loop.time())
        assert not p.accumulator.batches[TP]  # taken
        assert list(p.sender.in_flight[TP]) == [res.batch]
        assert res.batch.full and res.batch.base_sequence == 0
        assert p.client.conn.in_flight == 1  # written
        fut = RecordFuture(res.batch, res.index, 1_700_000_000_000, -1, 1)
        (meta,) = await settled([fut])
        assert isinstance(meta, RecordMetadata) and meta.offset == 0
        assert values_in_log(p) == [0]
    finally:
        await p.close()


async def test_send_new_leaves_a_batch_behind_one_in_flight_to_the_sender() -> None:
    """A batch whose partition has a request in flight is held (see accumulator._held):
    send_new() leaves it queued, and the answer brings the Sender to it; the log keeps
    the order."""
    p = parts({"t": 1}, linger_ms=0)
    try:
        await _until_pid_ready(p)
        p.broker.hold(TP)
        first = await _appended(p, b"a")
        loop = asyncio.get_running_loop()
        assert p.sender.send_new(first.batch, loop.time())
        second = await _appended(p, b"b")
        assert second.batch is not first.batch
        assert not p.sender.send_new(second.batch, loop.time())
        assert list(p.accumulator.batches[TP]) == [second.batch]
        assert p.broker.requests == 1
        p.broker.release(TP)
        futures = [RecordFuture(r.batch, r.index, 1_700_000_000_000, -1, 1)
                   for r in (first, second)]
        metas = await settled(futures)
        assert [m.offset for m in metas] == [0, 1]
        assert values_in_log(p) == [0, 1]
    finally:
        await p.close()


async def test_send_new_leaves_the_batch_to_a_pass_while_the_producer_id_is_missing(
) -> None:
    """Idempotence: before InitProducerId has answered, the batch is the Sender's
    (send_new() would have no sequence to give it)."""
    p = parts({"t": 1}, linger_ms=0)
    try:
        assert p.pid is not None and not p.pid.ready  # the Sender task has not run yet
        res = await _appended(p, b"a")
        assert not p.sender.send_new(res.batch, asyncio.get_running_loop().time())
        assert list(p.accumulator.batches[TP]) == [res.batch]
        p.sender.wakeup()
        fut = RecordFuture(res.batch, res.index, 1_700_000_000_000, -1, 1)
        (meta,) = await settled([fut])
        assert isinstance(meta, RecordMetadata) and values_in_log(p) == [0]
    finally:
        await p.close()
