"""TransactionManager decisions without a broker, on a scripted coordinator connection:
the transaction version (chosen at init from the finalized feature, moved to 2 only at
the end of a transaction and with an epoch bump, KAFKA-18227, never back to 1), the
EndTxn v5 answer's producer id, close() cancelling AddPartitionsToTxn, a failed Sender
dooming the producer after the abort."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from aioproducer.config import ProducerConfig
from aioproducer.errors import KafkaError, ProducerClosedError
from aioproducer.producer_id import ProducerIdManager
from aioproducer.transaction_state import TxnState
from aioproducer.transactions import TransactionManager

pytestmark = pytest.mark.asyncio

_INIT_PRODUCER_ID, _END_TXN, _PRODUCE = 22, 26, 0


class _Conn:
    """A coordinator connection: each InitProducerId bumps the epoch, each EndTxn v5
    answers ``end_answer`` (producer id, epoch)."""

    def __init__(self, level: int) -> None:
        self.api_versions = {_PRODUCE: (3, 13), _END_TXN: (0, 5), _INIT_PRODUCER_ID: (0, 5)}
        self.finalized_features_epoch = 1
        self.finalized_features = {"transaction.version": level}
        self.requests: list[str] = []
        self.producer_id, self.epoch = 1000, 0
        self.end_answer: tuple[int, int] | None = None
        self.on_end: Any = None  # called while EndTxn is on its way

    def set_level(self, level: int) -> None:
        self.finalized_features_epoch += 1
        self.finalized_features = {"transaction.version": level}

    def version_for(self, api_key: int, lo: int, hi: int) -> int:
        return hi

    async def request(self, req: Any, resp_type: Any) -> Any:
        name = type(req).__name__
        self.requests.append(name)
        if name == "InitProducerIdRequest":
            if int(req.producer_id) >= 0:
                self.epoch += 1
            return SimpleNamespace(error_code=0, producer_id=self.producer_id,
                                   producer_epoch=self.epoch)
        if name == "EndTxnRequest":
            if self.on_end is not None:
                self.on_end()
            pid, epoch = self.end_answer or (self.producer_id, self.epoch + 1)
            if self.end_answer is None:
                self.epoch += 1
            return SimpleNamespace(error_code=0, producer_id=pid, producer_epoch=epoch)
        return SimpleNamespace(error_code=0)


class _Client:
    def __init__(self, conn: _Conn) -> None:
        self.conn = conn

    async def connect(self, node: int, timeout: float) -> _Conn:
        return self.conn

    def connections(self) -> list[_Conn]:
        return [self.conn]


async def _manager(level: int) -> tuple[TransactionManager, _Conn, ProducerIdManager]:
    conn = _Conn(level)
    config = ProducerConfig.from_options(None, transactional_id="t")
    client: Any = _Client(conn)
    pid = ProducerIdManager(client, config)
    tm = TransactionManager(client, config, pid, lambda: None)
    tm._coordinators[(1, "t")] = 0
    await tm.init()
    return tm, conn, pid


async def _one_transaction(tm: TransactionManager, commit: bool = True) -> None:
    async def flushed() -> None:
        return None

    tm.begin()
    tm._started = True  # (a record reached the transaction)
    if commit:
        await tm.commit(flushed)
    else:
        async def nothing() -> None:
            return None

        await tm.abort(lambda err: None, nothing)


async def test_version_moves_to_2_at_the_end_of_a_transaction_with_a_bump() -> None:
    tm, conn, pid = await _manager(level=1)
    assert tm.version == 1 and tm.machine.version == 1
    await _one_transaction(tm)
    assert tm.version == 1
    conn.set_level(2)  # the cluster finalized transaction.version 2
    conn.requests.clear()
    tm.begin()  # a transaction begun now stays on version 1 ...
    assert tm.version == 1
    tm._started = True

    async def flushed() -> None:
        return None

    epoch = pid.epoch
    await tm.commit(flushed)  # ... and its end bumps the epoch, then moves to 2
    assert conn.requests == ["EndTxnRequest", "InitProducerIdRequest"]
    assert tm.version == 2 and tm.machine.version == 2
    assert pid.epoch > epoch and pid.epoch == conn.epoch  # the bump's answer
    conn.set_level(1)  # never back to 1 in the producer's life
    await _one_transaction(tm)
    assert tm.version == 2


async def test_version_chosen_at_init_from_the_finalized_feature() -> None:
    tm, _conn, _pid = await _manager(level=2)
    assert tm.version == 2
    tm2, _conn2, _pid2 = await _manager(level=0)
    assert tm2.version == 1


async def test_end_txn_v5_answer_without_a_producer_id_keeps_ours() -> None:
    tm, conn, pid = await _manager(level=2)
    before = (pid.producer_id, pid.epoch)
    conn.end_answer = (-1, -1)
    await _one_transaction(tm)
    assert (pid.producer_id, pid.epoch) == before
    conn.end_answer = (2000, 0)  # the epoch ran out: a new id
    await _one_transaction(tm, commit=False)
    assert (pid.producer_id, pid.epoch) == (2000, 0)


async def test_close_cancels_add_partitions_and_refuses_end_txn() -> None:
    tm, conn, _pid = await _manager(level=1)
    tm.begin()
    gate = asyncio.Event()

    async def stuck() -> None:
        await gate.wait()

    tm._add_task = asyncio.ensure_future(stuck())
    await asyncio.sleep(0)
    tm.close(ProducerClosedError("closed"))
    await asyncio.sleep(0)
    assert tm._add_task.cancelled()
    assert tm.state is TxnState.FATAL_ERROR
    conn.requests.clear()
    with pytest.raises(KafkaError):
        await tm._end_txn(True)
    assert conn.requests == []  # not written


async def test_a_commit_waiting_for_add_partitions_gets_the_close_error() -> None:
    """A forced close() cancels the AddPartitionsToTxn a commit (or abort, or
    hand-over) waits for: the commit raises close()'s ProducerClosedError, not the
    CancelledError of a task its caller never cancelled (found by the txn soak)."""
    for which in ("commit", "abort", "prepare"):
        tm, _conn, _pid = await _manager(level=1)
        tm.begin()
        tm._started = True
        gate = asyncio.Event()

        async def stuck(gate: asyncio.Event = gate) -> None:
            await gate.wait()

        async def nothing() -> None:
            return None

        tm._add_task = asyncio.ensure_future(stuck())
        if which == "commit":
            call = asyncio.ensure_future(tm.commit(nothing))
        elif which == "abort":
            call = asyncio.ensure_future(tm.abort(lambda err: None, nothing))
        else:
            call = asyncio.ensure_future(tm.hand_over(nothing))
        await asyncio.sleep(0.01)
        assert not call.done()
        tm.close(ProducerClosedError("closed"))
        with pytest.raises(ProducerClosedError):
            await call
        assert not call.cancelled(), which


async def test_a_cancelled_commit_waiting_for_add_partitions_stays_cancelled() -> None:
    tm, _conn, _pid = await _manager(level=1)
    tm.begin()
    tm._started = True
    gate = asyncio.Event()

    async def stuck() -> None:
        await gate.wait()

    async def nothing() -> None:
        return None

    tm._add_task = asyncio.ensure_future(stuck())
    call = asyncio.ensure_future(tm.commit(nothing))
    await asyncio.sleep(0.01)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert not tm._add_task.done()  # shielded: the request goes on
    gate.set()


async def test_failed_sender_leaves_an_abort_then_the_producer_is_unusable() -> None:
    tm, _conn, _pid = await _manager(level=2)
    tm.begin()
    tm._started = True
    tm.sender_failed(KafkaError("the Sender failed"))
    assert tm.state is TxnState.ABORTABLE_ERROR

    async def nothing() -> None:
        return None

    await tm.abort(lambda err: None, nothing)
    assert tm.state is TxnState.FATAL_ERROR
    with pytest.raises(KafkaError, match="the Sender failed"):
        tm.begin()
    tm2, _c, _p = await _manager(level=2)
    tm2.sender_failed(KafkaError("the Sender failed"))  # between transactions: at once
    assert tm2.state is TxnState.FATAL_ERROR


async def test_end_txn_answered_after_close_ran_out_is_a_commit() -> None:
    """close() ran out of time while EndTxn(commit) was on its way, and its answer
    came before the connection closed: the transaction is committed, and the commit
    says so (it does not raise, and the state machine is not asked for READY)."""
    tm, conn, _pid = await _manager(level=1)
    tm.begin()
    tm._started = True
    tm._pid.bump_needed = True  # (a bump would follow EndTxn: close() refuses it)
    conn.on_end = lambda: tm.close(ProducerClosedError("closed"))

    async def flushed() -> None:
        return None

    await tm.commit(flushed)
    assert conn.requests[-1] == "EndTxnRequest"
    assert tm.state is TxnState.FATAL_ERROR  # the producer is closed
