"""KIP-1050 error categories (``exc.category``) and the transactional error handling
that differs from the classic rules (issue #18 item 4), with scripted coordinators:
no broker."""

from __future__ import annotations

import asyncio
import inspect
import time
from types import SimpleNamespace
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

import aioproducer
from aioproducer import ErrorCategory, ProducerConfig
from aioproducer.errors import (
    BrokerResponseError,
    ClusterAuthorizationError,
    InvalidProducerEpochError,
    KafkaError,
    ProducerFencedError,
    category_of,
    for_code,
)
from aioproducer.producer_id import ProducerIdManager
from aioproducer.transaction_state import PRODUCE_FENCED_CODES, TxnState, TxnStateMachine
from aioproducer.transactions import TransactionManager

C = ErrorCategory


def test_every_exported_error_has_one_category() -> None:
    classes = [obj for _, obj in inspect.getmembers(aioproducer.errors, inspect.isclass)
               if issubclass(obj, KafkaError)]
    assert len(classes) > 25
    for cls in classes:
        exc = cls("x")
        assert isinstance(exc.category, ErrorCategory), cls
    for code in ErrorCode:
        if int(code) == 0:
            continue
        assert isinstance(for_code(int(code)).category, ErrorCategory), code


@pytest.mark.parametrize(("exc", "category"), [
    (for_code(int(ErrorCode.not_leader_or_follower)), C.REFRESH_AND_RETRY),
    (for_code(int(ErrorCode.not_coordinator)), C.REFRESH_AND_RETRY),
    (for_code(int(ErrorCode.concurrent_transactions)), C.RETRIABLE),
    (for_code(int(ErrorCode.request_timed_out)), C.RETRIABLE),
    (aioproducer.KafkaTimeoutError("commit timed out"), C.RETRIABLE),
    (aioproducer.BufferExhaustedError("x"), C.RETRIABLE),
    (for_code(int(ErrorCode.invalid_producer_epoch)), C.ABORTABLE),
    (for_code(int(ErrorCode.transaction_abortable)), C.ABORTABLE),
    (aioproducer.TransactionAbortableError("x"), C.ABORTABLE),
    (aioproducer.TransactionAbortedError("x"), C.ABORTABLE),
    (aioproducer.DeliveryTimeoutError("x"), C.ABORTABLE),
    (for_code(int(ErrorCode.message_too_large)), C.ABORTABLE),
    (ProducerFencedError("x"), C.APPLICATION_RECOVERABLE),
    (ProducerFencedError("x", code=ErrorCode.invalid_producer_epoch),
     C.APPLICATION_RECOVERABLE),
    (for_code(int(ErrorCode.producer_fenced)), C.APPLICATION_RECOVERABLE),
    (for_code(int(ErrorCode.invalid_producer_id_mapping)), C.APPLICATION_RECOVERABLE),
    (for_code(int(ErrorCode.transactional_id_authorization_failed)),
     C.INVALID_CONFIGURATION),
    (for_code(int(ErrorCode.cluster_authorization_failed)), C.INVALID_CONFIGURATION),
    (for_code(int(ErrorCode.topic_authorization_failed)), C.INVALID_CONFIGURATION),
    (aioproducer.ConfigError("x"), C.INVALID_CONFIGURATION),
    (aioproducer.UnsupportedVersionError("x"), C.INVALID_CONFIGURATION),
    (aioproducer.IllegalStateError("x"), C.FATAL),
    (aioproducer.ProducerClosedError("x"), C.FATAL),
    (RuntimeError("a bug"), C.FATAL),
])
def test_categories(exc: BaseException, category: ErrorCategory) -> None:
    assert category_of(exc) is category


def test_state_machine_errors_keep_their_category() -> None:
    m = TxnStateMachine("t")
    assert m.state_error("send()").category is C.FATAL  # UNINITIALIZED: a bug
    m.initialized()
    m.begin()
    m.fail(for_code(int(ErrorCode.message_too_large)))
    assert m.state_error("commit_transaction()").category is C.ABORTABLE
    m.start_abort()
    m.to_fatal(ProducerFencedError("fenced"))
    assert m.state_error("send()").category is C.APPLICATION_RECOVERABLE


# -- item 4: where Java 4.x differs from the classic rules ---------------------------


def test_invalid_producer_epoch_on_produce_is_abortable_not_fatal() -> None:
    """KIP-588: from a partition leader, INVALID_PRODUCER_EPOCH is abortable."""
    assert int(ErrorCode.invalid_producer_epoch) not in PRODUCE_FENCED_CODES
    assert int(ErrorCode.producer_fenced) in PRODUCE_FENCED_CODES
    m = TxnStateMachine("t")
    m.initialized()
    m.begin()
    assert m.fail(for_code(int(ErrorCode.invalid_producer_epoch))) is TxnState.ABORTABLE_ERROR
    m.start_abort()
    m.ended()
    m.begin()  # the producer goes on


def test_cluster_authorization_failed_on_produce_is_fatal() -> None:
    m = TxnStateMachine("t")
    m.initialized()
    m.begin()
    err = for_code(int(ErrorCode.cluster_authorization_failed))
    assert isinstance(err, ClusterAuthorizationError)
    assert m.fail(err) is TxnState.FATAL_ERROR
    with pytest.raises(ClusterAuthorizationError):
        m.check_send()


class _Conn:
    """A scripted coordinator connection: answers requests with the next code."""

    def __init__(self, codes: list[int]) -> None:
        self.codes = codes
        self.requests: list[Any] = []

    def version_for(self, api_key: int, lo: int, hi: int) -> int:
        return hi

    async def request(self, req: Any, resp_type: Any) -> Any:
        self.requests.append(req)
        code = self.codes.pop(0) if self.codes else 0
        part = SimpleNamespace(error_code=code, partition_error_code=code,
                               partition_index=0)
        return SimpleNamespace(
            error_code=code,
            topics=[SimpleNamespace(partitions=[part])],
            results_by_topic_v3_and_below=[SimpleNamespace(results_by_partition=[part])])


class _Client:
    def __init__(self, conn: _Conn) -> None:
        self.conn = conn

    async def connect(self, node: int, timeout: float) -> _Conn:
        return self.conn

    def connections(self) -> list[Any]:
        return []


def _manager(codes: list[int], **options: Any) -> tuple[TransactionManager, _Conn]:
    conn = _Conn(codes)
    config = ProducerConfig.from_options(None, transactional_id="t", **options)
    client: Any = _Client(conn)
    pid = ProducerIdManager(client, config)
    pid.assign(7, 0)
    tm = TransactionManager(client, config, pid, lambda: None)
    tm._coordinators[(1, "t")] = 0  # the transaction coordinator: node 0
    tm._coordinators[(0, "g")] = 0  # the group coordinator
    tm.machine.initialized()
    tm.begin()
    return tm, conn


@pytest.mark.asyncio
async def test_concurrent_transactions_on_add_partitions_backs_off_20_ms() -> None:
    tm, _conn = _manager([int(ErrorCode.concurrent_transactions)], retry_backoff_ms=500)
    tm.pending.add(("t", 0))
    await tm._add_partitions()
    after = asyncio.get_running_loop().time()
    assert tm.pending == {("t", 0)} and not tm.added  # to be retried
    assert tm._add_next - after <= 0.021  # Java's 20 ms, not 500 ms
    # Another retriable error keeps the configured backoff.
    tm2, _ = _manager([int(ErrorCode.coordinator_load_in_progress)], retry_backoff_ms=500)
    tm2.pending.add(("t", 0))
    before = asyncio.get_running_loop().time()
    await tm2._add_partitions()
    assert tm2._add_next - before >= 0.4


@pytest.mark.asyncio
@pytest.mark.parametrize("code", [ErrorCode.unknown_topic_or_partition,
                                  ErrorCode.not_enough_replicas,
                                  ErrorCode.coordinator_load_in_progress,
                                  ErrorCode.request_timed_out])
async def test_every_retriable_txn_offset_commit_error_is_retried(code: ErrorCode) -> None:
    assert code.retriable
    tm, conn = _manager([0, int(code), int(code)], retry_backoff_ms=1)  # 0: AddOffsets
    started = time.monotonic()
    await tm.send_offsets({("t", 0): 5}, "g")
    offset_commits = [r for r in conn.requests if type(r).__name__ == "TxnOffsetCommitRequest"]
    assert len(offset_commits) == 3  # two refusals, then accepted
    assert tm.state is TxnState.IN_TRANSACTION
    assert time.monotonic() - started < 5


@pytest.mark.asyncio
async def test_a_txn_offset_commit_error_that_is_not_retriable_is_abortable() -> None:
    tm, _conn = _manager([0, int(ErrorCode.group_authorization_failed)])
    with pytest.raises(KafkaError) as info:
        await tm.send_offsets({("t", 0): 5}, "g")
    assert info.value.category is C.ABORTABLE  # the transaction must be aborted
    assert isinstance(info.value.__cause__, BrokerResponseError)
    assert info.value.__cause__.category is C.INVALID_CONFIGURATION
    assert tm.state is TxnState.ABORTABLE_ERROR


def test_invalid_producer_epoch_asks_for_an_epoch_bump() -> None:
    tm, _ = _manager([])
    tm.fail(InvalidProducerEpochError("stale"))
    assert tm.state is TxnState.ABORTABLE_ERROR
    assert tm._pid.bump_needed
