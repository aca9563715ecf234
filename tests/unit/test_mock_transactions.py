"""MockProducer follows transactions V2 (KIP-890) and shares the state machine, the
transaction numbers and the error categories with the real producer."""

from __future__ import annotations

import pytest

from aioproducer import ErrorCategory, IllegalStateError, ProducerFencedError
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
