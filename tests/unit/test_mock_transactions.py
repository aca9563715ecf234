"""MockProducer follows transactions V2 (KIP-890) and shares the state machine, the
transaction numbers and the error categories with the real producer."""

from __future__ import annotations

import pytest

from aioproducer import ErrorCategory, IllegalStateError, KafkaTimeoutError, ProducerFencedError
from aioproducer.testing import MockProducer
from aioproducer.transaction_state import TxnStateMachine


@pytest.mark.asyncio
@pytest.mark.parametrize("version", [1, 2])
async def test_epoch_bumps_on_every_end_in_version_2(version: int) -> None:
    async with MockProducer(transactional_id="m", transaction_version=version,
                            default_partitions=1) as producer:
        assert producer.transaction_version is None
        await producer.init_transactions()
        assert producer.transaction_version == version
        assert (producer.producer_id, producer.producer_epoch) == (0, 0)
        epochs = []
        for i in range(4):
            producer.begin_transaction()
            assert producer.transaction_sequence == i + 1
            await producer.send("t", b"x%d" % i)
            if i % 2:
                await producer.abort_transaction()
            else:
                await producer.commit_transaction()
            epochs.append(producer.producer_epoch)
        assert epochs == ([1, 2, 3, 4] if version == 2 else [0, 0, 0, 0])
        assert [r.value for r in producer.history()] == [b"x0", b"x2"]


@pytest.mark.asyncio
async def test_the_mock_uses_the_shared_state_machine() -> None:
    async with MockProducer(transactional_id="m", default_partitions=1) as producer:
        assert isinstance(producer._txn, TxnStateMachine)
        await producer.init_transactions()
        with pytest.raises(IllegalStateError, match="begin_transaction") as info:
            await producer.send("t", b"x")
        assert info.value.category is ErrorCategory.FATAL
        producer.begin_transaction()
        producer.commit_transaction_error = ProducerFencedError("newer producer")
        with pytest.raises(ProducerFencedError) as fenced:
            await producer.commit_transaction()
        assert fenced.value.category is ErrorCategory.APPLICATION_RECOVERABLE
        with pytest.raises(ProducerFencedError):
            producer.begin_transaction()


def test_transaction_version_is_checked() -> None:
    with pytest.raises(ValueError, match="transaction_version"):
        MockProducer(transactional_id="m", transaction_version=3)


@pytest.mark.asyncio
async def test_the_mock_follows_the_caller_actions_table() -> None:
    """docs/transactions.md, "When the caller cancels, times out, closes or hands
    over": the rows the mock plays (it has no network to cancel in)."""
    async with MockProducer(transactional_id="m", default_partitions=1) as producer:
        await producer.init_transactions()
        # An empty poll: no offsets, nothing sent, the commit ends nothing.
        producer.begin_transaction()
        await producer.send_offsets_to_transaction({}, "g")
        await producer.commit_transaction()
        assert producer.consumer_group_offsets_history() == []
        # A commit that timed out after its EndTxn: only the commit may follow.
        producer.begin_transaction()
        await producer.send("t", b"a")
        producer.commit_transaction_error = KafkaTimeoutError("EndTxn: no answer")
        with pytest.raises(KafkaTimeoutError):
            await producer.commit_transaction()
        with pytest.raises(IllegalStateError, match=r"call commit_transaction\(\) again"):
            await producer.abort_transaction()
        producer.commit_transaction_error = None
    # close() finished it: the record is committed.
    assert [r.value for r in producer.history()] == [b"a"]
    async with MockProducer(transactional_id="m", default_partitions=1) as producer:
        await producer.init_transactions()
        producer.begin_transaction()
        await producer.send("t", b"b")
        producer.abort_transaction_error = KafkaTimeoutError("EndTxn: no answer")
        with pytest.raises(KafkaTimeoutError):
            await producer.abort_transaction()
        with pytest.raises(IllegalStateError, match=r"call abort_transaction\(\) again"):
            await producer.commit_transaction()
        producer.abort_transaction_error = None
    assert producer.history() == [] and producer.abort_count == 1  # close() finished it
