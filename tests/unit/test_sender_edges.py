"""The Sender's decisions on a Produce answer, without a broker: a Sender built on a
stub client, real accumulator, metadata and idempotence state, fed answers directly
(``_on_partition_response``). The cases a real broker will not produce on demand:
INVALID_PRODUCER_ID_MAPPING on Produce (fatal, KAFKA-18019), UNKNOWN_PRODUCER_ID inside
a transaction (Java's ``canRetry``), a split batch whose earlier attempt's outcome is
unknown."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from aioproducer._native import ProducerBatch
from aioproducer.accumulator import RecordAccumulator
from aioproducer.config import ProducerConfig
from aioproducer.errors import (
    InvalidProducerIdMappingError,
    KafkaConnectionError,
    KafkaError,
    UnknownProducerIdError,
)
from aioproducer.metadata import Cluster, Metadata
from aioproducer.net.protocol import PartitionResult
from aioproducer.producer_id import ProducerIdManager
from aioproducer.sender import Sender
from aioproducer.transaction_state import TxnState
from aioproducer.transactions import TransactionManager

TP = ("t", 0)


class _StubClient:
    """What the Sender's constructor and these decisions touch of a KafkaClient."""

    on_ready_change: Any = None
    on_disconnect: Any = None

    def connections(self) -> list[Any]:
        return []


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    try:
        yield loop
    finally:
        loop.close()


def _sender(transactional: bool) -> tuple[Sender, ProducerIdManager,
                                           TransactionManager | None]:
    options: dict[str, Any] = {"linger_ms": 0}
    if transactional:
        options["transactional_id"] = "tx"
    config = ProducerConfig.from_options(None, **options)
    client: Any = _StubClient()
    acc = RecordAccumulator(batch_size=1024, batch_max_size=1024, buffer_memory=1 << 20,
                            linger_ms=0, retry_backoff_ms=100, retry_backoff_max_ms=1000,
                            delivery_timeout_ms=120_000, max_request_size=1 << 20)
    metadata = Metadata(max_age_ms=300_000, retry_backoff_ms=100)
    metadata.cluster = Cluster(leaders={TP: 0})
    pid = ProducerIdManager(client, config)
    pid.assign(42, 3)
    txn = None
    if transactional:
        txn = TransactionManager(client, config, pid, lambda: None)
        txn.machine.initialized()
        txn.begin()
    return Sender(config, client, metadata, acc, pid=pid, txn=txn), pid, txn


def _in_flight(sender: Sender, loop: asyncio.AbstractEventLoop, n: int = 1,
               records: int = 3) -> list[ProducerBatch]:
    """``n`` batches of TP, drained, given sequences and put in flight as the Sender
    does."""
    acc, out = sender.acc, []
    for _ in range(n):
        block = acc.pool.try_allocate(1024)
        assert block is not None
        b = acc.new_batch(TP, block, loop)
        for i in range(records):
            assert b.builder.append(1, None, b"x%d" % i, None) >= 0
        out.append(b)
    for _ in range(n):  # (one batch of a partition per drain)
        drained = acc.drain(sender.metadata.cluster, [0], 1 << 20, time.monotonic(), set())
        for b in drained.get(0, []):
            sender._close_batch(b)
            sender.in_flight.setdefault(TP, deque()).append(b)
    return out


def _answer(sender: Sender, b: ProducerBatch, code: int, base_offset: int = -1,
            log_start: int = -1) -> None:
    flying = sender.in_flight.get(TP)
    if flying and b in flying:
        flying.remove(b)
    sender._on_partition_response(0, b, PartitionResult(0, code, base_offset, -1, log_start),
                                  time.monotonic())


def test_invalid_producer_id_mapping_on_produce_is_fatal(
        loop: asyncio.AbstractEventLoop) -> None:
    sender, _pid, txn = _sender(transactional=True)
    assert txn is not None
    txn.may_send(TP)  # (version 1: added by AddPartitionsToTxn; here by hand)
    txn.added.add(TP)
    (b,) = _in_flight(sender, loop)
    _answer(sender, b, int(ErrorCode.invalid_producer_id_mapping))
    assert isinstance(b.error, InvalidProducerIdMappingError)
    assert txn.state is TxnState.FATAL_ERROR  # not abortable: Java 4.x (KAFKA-18019)


def test_unknown_producer_id_in_a_transaction_follows_java(
        loop: asyncio.AbstractEventLoop) -> None:
    sender, pid, txn = _sender(transactional=True)
    assert txn is not None
    txn.added.add(TP)
    first, second = _in_flight(sender, loop, 1)[0], None
    _answer(sender, first, 0, base_offset=100)  # offsets 100..102 acknowledged
    assert pid.last_acked_offset(TP) == 102
    second, third = _in_flight(sender, loop, 2)
    assert (second.base_sequence, third.base_sequence) == (3, 6)
    # No log start offset in the answer: retried as it is.
    _answer(sender, second, int(ErrorCode.unknown_producer_id), log_start=-1)
    assert second.error is None and second.base_sequence == 3
    # The log start moved past everything this producer wrote: the sequences start over
    # at 0 (same id and epoch) once nothing is in flight, and the batches are retried.
    sender.acc.batches[TP].remove(second)  # (taken again, as a Sender pass would)
    sender.in_flight[TP].appendleft(second)
    _answer(sender, second, int(ErrorCode.unknown_producer_id), log_start=500)
    assert second.error is None and txn.state is TxnState.IN_TRANSACTION
    assert pid.waits_for_bump(third)  # nothing goes out before the restart
    pid.restart_ready(sender.in_flight)  # `third` is still in flight: not yet
    assert second.base_sequence == 3
    _answer(sender, third, int(ErrorCode.unknown_producer_id), log_start=500)
    assert third.error is None  # expected after a restart: retried
    pid.restart_ready(sender.in_flight)
    assert [(b.producer_id, b.producer_epoch, b.base_sequence) for b in (second, third)] \
        == [(42, 3, 0), (42, 3, 3)]
    assert pid.restarting(second) and not pid.waits_for_bump(second)
    # A batch whose data is still in the log: the transaction must be aborted.
    sender2, _pid2, txn2 = _sender(transactional=True)
    assert txn2 is not None
    txn2.added.add(TP)
    (a,) = _in_flight(sender2, loop)
    _answer(sender2, a, 0, base_offset=100)
    (b,) = _in_flight(sender2, loop)
    _answer(sender2, b, int(ErrorCode.unknown_producer_id), log_start=50)
    assert isinstance(b.error, UnknownProducerIdError)
    assert txn2.state is TxnState.ABORTABLE_ERROR


def test_split_pieces_keep_the_unknown_outcome_mark(loop: asyncio.AbstractEventLoop) -> None:
    sender, _pid, _txn = _sender(transactional=False)
    (b,) = _in_flight(sender, loop, records=6)
    sender.in_flight[TP].remove(b)
    sender._retry_or_fail(b, KafkaConnectionError("lost"), time.monotonic())
    assert b in sender._unknown_outcome  # maybe written by that attempt
    sender.acc.batches[TP].remove(b)
    sender.in_flight[TP].append(b)
    _answer(sender, b, int(ErrorCode.message_too_large))
    pieces = list(sender.acc.batches[TP])
    assert len(pieces) > 1
    assert b not in sender._unknown_outcome
    assert all(p in sender._unknown_outcome for p in pieces)


@pytest.mark.asyncio
async def test_a_failed_sender_fails_metadata_waiters_at_once() -> None:
    sender, _pid, _txn = _sender(transactional=False)
    waiting = asyncio.ensure_future(sender.metadata.wait_for_topic("unknown", 30.0))
    await asyncio.sleep(0.01)
    assert not waiting.done()
    started = time.monotonic()
    sender.fail_producer(RuntimeError("a bug"))
    with pytest.raises(KafkaError, match="a bug"):
        await asyncio.wait_for(waiting, 5.0)
    assert time.monotonic() - started < 1.0  # not max_block_ms


def _refused_again(sender: Sender, loop: asyncio.AbstractEventLoop, b: ProducerBatch,
                   code: int, times: int) -> float:
    """Answer ``b`` with ``code`` ``times`` times, draining it again at its retry time
    each time as the Sender does; the backoff the last answer gave it (s)."""
    wait = 0.0
    for _ in range(times):
        _answer(sender, b, code)
        now = time.monotonic()
        wait = b.next_attempt - now
        assert not b.result.done()
        drained = sender.acc.drain(sender.metadata.cluster, [0], 1 << 20,
                                   b.next_attempt, set())
        assert drained.get(0) == [b]
        sender.in_flight.setdefault(TP, deque()).append(b)
    return wait


@pytest.mark.parametrize("code", [ErrorCode.not_leader_or_follower,
                                  ErrorCode.leader_not_available,
                                  ErrorCode.unknown_topic_or_partition])
def test_a_partition_not_led_yet_is_retried_at_retry_backoff_ms(
        loop: asyncio.AbstractEventLoop, code: ErrorCode) -> None:
    """A topic just created answers NOT_LEADER_OR_FOLLOWER (the same leader, no hint)
    until its broker has made the log: the broker refused the batch, nothing was
    written, and the retries keep retry_backoff_ms (100 ms, jitter 20%) instead of
    doubling to retry_backoff_max_ms (as librdkafka), with the same sequence."""
    sender, _pid, _txn = _sender(transactional=False)
    (b,) = _in_flight(sender, loop)
    sequence = b.base_sequence
    wait = _refused_again(sender, loop, b, int(code), 6)
    assert b.attempts == 6  # still counted as retries (bounded by retries, delivery)
    assert 0.0 < wait <= 0.1 * 1.2 + 0.01  # exponential: 1 s after six attempts
    assert b.base_sequence == sequence


def test_other_retriable_answers_still_back_off_exponentially(
        loop: asyncio.AbstractEventLoop) -> None:
    sender, _pid, _txn = _sender(transactional=False)
    (b,) = _in_flight(sender, loop)
    wait = _refused_again(sender, loop, b, int(ErrorCode.not_enough_replicas), 4)
    assert wait >= 0.8 * 0.8 - 0.01  # retry_backoff_ms * 2**3, jitter 20%
