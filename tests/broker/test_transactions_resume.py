"""Producer.prepare_transaction() / resume_transaction(): a transaction written by one
producer, handed over open, and ended by another (the two-phase commit of
``aioproducer.spark_source``, as Flink's Kafka sink does), on a broker of each
transaction version (tests/support/txn_brokers.py).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from support.kafka_util import consume_all
from support.txn_brokers import TxnBroker, txn_broker_fixture

from aioproducer import IllegalStateError, Producer, ProducerFencedError

pytestmark = pytest.mark.asyncio

txn_broker = txn_broker_fixture()


@pytest.fixture(scope="module")
def kafka_bootstrap(txn_broker: TxnBroker) -> str:
    """The plugin's topic factory creates the topics on this module's broker."""
    return txn_broker.bootstrap


async def _prepare(bootstrap: str, tid: str, topic: str, n: int) -> tuple[int, int]:
    async with Producer(bootstrap_servers=bootstrap, transactional_id=tid,
                        linger_ms=5) as p:
        await p.init_transactions()
        p.begin_transaction()
        for i in range(n):
            await p.send(topic, f"v{i}".encode(), f"k{i}".encode())
        handle = await p.prepare_transaction()
    assert handle is not None
    return handle


async def _end(bootstrap: str, tid: str, handle: tuple[int, int], commit: bool) -> None:
    async with Producer(bootstrap_servers=bootstrap, transactional_id=tid) as q:
        await q.resume_transaction(*handle)
        if commit:
            await q.commit_transaction()
        else:
            await q.abort_transaction()


async def test_resumed_commit_is_visible_and_repeatable(txn_broker: TxnBroker,
                                                       topic_factory: Any) -> None:
    bootstrap = txn_broker.bootstrap
    topic = topic_factory(partitions=2)
    tid = f"resume-{txn_broker.version}-{time.time_ns()}"
    handle = await _prepare(bootstrap, tid, topic, 10)
    # Still open after close(): read_uncommitted sees the rows, read_committed none.
    assert len(consume_all(bootstrap, topic, 10)) == 10
    assert consume_all(bootstrap, topic, 0, timeout=3, isolation="read_committed") == []
    await _end(bootstrap, tid, handle, commit=True)
    await _end(bootstrap, tid, handle, commit=True)  # a retry: the coordinator agrees
    got = consume_all(bootstrap, topic, 10, isolation="read_committed")
    assert sorted(c.value for c in got if c.value) == sorted(
        f"v{i}".encode() for i in range(10))
    # The id is usable again afterwards.
    handle2 = await _prepare(bootstrap, tid, topic, 3)
    await _end(bootstrap, tid, handle2, commit=True)
    assert len(consume_all(bootstrap, topic, 13, isolation="read_committed")) == 13


async def test_resumed_abort(txn_broker: TxnBroker, topic_factory: Any) -> None:
    bootstrap = txn_broker.bootstrap
    topic = topic_factory()
    tid = f"resume-abort-{txn_broker.version}-{time.time_ns()}"
    handle = await _prepare(bootstrap, tid, topic, 5)
    await _end(bootstrap, tid, handle, commit=False)
    async with Producer(bootstrap_servers=bootstrap, transactional_id=tid) as p:
        await p.init_transactions()
        async with p.transaction():
            await p.send(topic, b"after")
    got = consume_all(bootstrap, topic, 1, isolation="read_committed")
    assert [c.value for c in got] == [b"after"]


async def test_resume_after_the_transaction_was_aborted_fails(
        txn_broker: TxnBroker, topic_factory: Any) -> None:
    """A newer producer's InitProducerId aborts the open transaction (as the
    coordinator's timeout does): committing it later raises, nothing is visible."""
    bootstrap = txn_broker.bootstrap
    topic = topic_factory()
    tid = f"resume-lost-{txn_broker.version}-{time.time_ns()}"
    handle = await _prepare(bootstrap, tid, topic, 5)
    async with Producer(bootstrap_servers=bootstrap, transactional_id=tid) as p:
        await p.init_transactions()
    with pytest.raises(ProducerFencedError):
        await _end(bootstrap, tid, handle, commit=True)
    assert consume_all(bootstrap, topic, 0, timeout=3, isolation="read_committed") == []


async def test_prepare_with_nothing_sent(txn_broker: TxnBroker) -> None:
    async with Producer(bootstrap_servers=txn_broker.bootstrap,
                        transactional_id=f"resume-empty-{time.time_ns()}") as p:
        await p.init_transactions()
        p.begin_transaction()
        assert await p.prepare_transaction() is None
        with pytest.raises(IllegalStateError, match="handed over"):
            p.begin_transaction()
    async with Producer(bootstrap_servers=txn_broker.bootstrap) as p:
        with pytest.raises(IllegalStateError, match="not transactional"):
            await p.prepare_transaction()
