"""The caller as a source of faults: close() with a timeout, cancelled and timed-out
commits and aborts, empty offsets, a hand-over, a timed-out send_offsets, a Sender
that fails. Each must leave every transaction all or nothing for a ``read_committed``
consumer (confluent-kafka reads it back), and the producer usable or clearly failed,
as Java's ``KafkaProducer`` does.

Every test runs on a broker of each transaction version (tests/support/txn_brokers.py).
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from support.kafka_util import consume_all
from support.txn_brokers import TxnBroker, txn_broker_fixture

from aioproducer import (
    IllegalStateError,
    KafkaError,
    KafkaTimeoutError,
    Producer,
    ProducerClosedError,
    TransactionAbortableError,
    TransactionOutcomeUnknownError,
)
from aioproducer.testing.faultproxy import ProxyCluster
from aioproducer.transaction_state import TxnState

pytestmark = pytest.mark.asyncio

txn_broker = txn_broker_fixture()

_FIND_COORDINATOR = 10
_END_TXN = 26
_PRODUCE = 0
_ADD_PARTITIONS_TO_TXN = 24


@pytest.fixture(scope="module")
def kafka_bootstrap(txn_broker: TxnBroker) -> str:
    """Every test (and the plugin's topic factory) uses this module's broker."""
    return txn_broker.bootstrap


def txn_id(what: str) -> str:
    return f"caller-{what}-{uuid.uuid4().hex[:10]}"


async def fence(bootstrap: str, tid: str) -> None:
    """A new producer with the same id: the coordinator aborts whatever the last one
    left open, so that a read_committed consumer sees only what was committed."""
    async with Producer(bootstrap_servers=bootstrap, transactional_id=tid) as p:
        await p.init_transactions()


def committed_values(bootstrap: str, topic: str, expected: int,
                     prefix: bytes = b"") -> list[bytes]:
    got = consume_all(bootstrap, topic, expected, timeout=20 if expected else 5,
                      isolation="read_committed")
    return [r.value for r in got if r.value is not None and r.value.startswith(prefix)]


def group_offset(bootstrap: str, group: str, topic: str, partition: int) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    try:
        (tp,) = consumer.committed([TopicPartition(topic, partition)], timeout=10)
        return int(tp.offset)
    finally:
        consumer.close()


# -- 1. a commit never goes out after records of its transaction failed locally ----------


async def test_sender_failure_after_an_ack_does_not_commit_part(
        kafka_bootstrap: str, topic_factory: Any) -> None:
    topic = topic_factory()
    tid = txn_id("sender-fails")
    async with Producer(bootstrap_servers=kafka_bootstrap, transactional_id=tid,
                        linger_ms=5) as p:
        await p.init_transactions()
        p.begin_transaction()
        await p.send_and_wait(topic, b"first")
        sender = p._sender
        assert sender is not None

        def broken(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("injected Sender failure")

        sender.acc.drain = broken  # type: ignore[method-assign]
        fut = await p.send(topic, b"second")
        with pytest.raises(KafkaError, match="injected Sender failure"):
            await fut
        with pytest.raises(TransactionAbortableError):
            await p.commit_transaction()
        await p.abort_transaction()  # the coordinator is still reachable
        with pytest.raises(KafkaError, match="injected Sender failure"):
            p.begin_transaction()  # the producer cannot send any more
    assert committed_values(kafka_bootstrap, topic, 0) == []
    everything = consume_all(kafka_bootstrap, topic, 1, timeout=10)
    assert [r.value for r in everything] == [b"first"]  # written, then aborted


@pytest.mark.parametrize("seed", [11, 12, 13, 14, 15, 16])
async def test_commit_racing_close_is_all_or_nothing(
        kafka_bootstrap: str, topic_factory: Any, seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(800, 2500)
    linger = rng.choice([0, 5, 20])
    close_after = rng.uniform(0.0, 0.03)
    print(f"seed {seed}: {n} records, linger_ms={linger}, close after {close_after:.4f} s")
    topic = topic_factory(partitions=3)
    tid = txn_id("close-race")
    p = Producer(bootstrap_servers=kafka_bootstrap, transactional_id=tid,
                 linger_ms=linger, batch_size=1024)
    await p.start()
    await p.init_transactions()
    p.begin_transaction()
    for i in range(n):
        await p.send(topic, b"r%d" % i, key=b"k%d" % (i % 17))
    commit = asyncio.ensure_future(p.commit_transaction())
    await asyncio.sleep(close_after)
    started = time.monotonic()
    await p.close(timeout=0.05)
    took = time.monotonic() - started
    outcome: BaseException | None = None
    try:
        await commit
    except KafkaError as exc:
        outcome = exc
    await fence(kafka_bootstrap, tid)
    got = committed_values(kafka_bootstrap, topic, n if outcome is None else 0)
    print(f"commit: {outcome!r}; close took {took:.3f} s; {len(got)} committed")
    assert len(got) in (0, n), f"a partial transaction is visible: {len(got)} of {n}"
    if outcome is None:
        assert len(got) == n
        assert sorted(got) == sorted(b"r%d" % i for i in range(n))
    elif not isinstance(outcome, TransactionOutcomeUnknownError):
        assert got == [], f"commit raised {outcome!r} yet the transaction committed"
    assert took < 0.05 + 0.5, took  # bounded by the timeout (plus the clean-up)


async def test_commit_waiting_for_add_partitions_gets_the_close_error(
        txn_broker: TxnBroker, topic_factory: Any) -> None:
    """commit_transaction() waits for the AddPartitionsToTxn in flight (the fault proxy
    holds its answer) when close(timeout) runs out and cancels that request: the commit
    raises close()'s ProducerClosedError, not a CancelledError its caller never asked
    for, and nothing of the transaction is committed (found by the txn soak)."""
    if txn_broker.version == 2:
        pytest.skip("transaction version 2 adds partitions with Produce, not "
                    "AddPartitionsToTxn")
    topic = topic_factory()
    tid = txn_id("add-close")
    async with ProxyCluster.start(txn_broker.bootstrap) as proxies:
        p = Producer(bootstrap_servers=proxies.bootstrap, transactional_id=tid)
        await p.start()
        try:
            await p.init_transactions()
            proxy = proxies.proxy_for_node(next(iter(proxies.proxies)))
            before = proxy.stats["requests_by_api"].get(_ADD_PARTITIONS_TO_TXN, 0)
            proxy.delay_responses(_ADD_PARTITIONS_TO_TXN, 2.0, count=1)
            p.begin_transaction()
            for i in range(10):
                await p.send(topic, b"x%d" % i)
            await proxy.wait_for_requests(_ADD_PARTITIONS_TO_TXN, before + 1, timeout=5)
            commit = asyncio.ensure_future(p.commit_transaction())
            for _ in range(20):
                await asyncio.sleep(0)
            assert not commit.done()
        finally:
            await p.close(timeout=0.05)
        with pytest.raises(ProducerClosedError):
            await commit
    await fence(txn_broker.bootstrap, tid)
    assert committed_values(txn_broker.bootstrap, topic, 0, prefix=b"x") == []


async def test_close_lets_a_commit_in_progress_finish(
        kafka_bootstrap: str, topic_factory: Any) -> None:
    topic = topic_factory(partitions=2)
    tid = txn_id("close-waits")
    p = Producer(bootstrap_servers=kafka_bootstrap, transactional_id=tid, linger_ms=20)
    await p.start()
    await p.init_transactions()
    p.begin_transaction()
    for i in range(2000):
        await p.send(topic, b"w%d" % i)
    commit = asyncio.ensure_future(p.commit_transaction())
    await asyncio.sleep(0)
    await p.close()  # no timeout: the commit in progress finishes
    await commit
    assert len(committed_values(kafka_bootstrap, topic, 2000)) == 2000


# -- 2. empty offsets are a no-op ----------------------------------------------------------


async def test_empty_offsets_then_commit(kafka_bootstrap: str, topic_factory: Any) -> None:
    src = topic_factory()
    out = topic_factory()
    group = f"empty-poll-{uuid.uuid4().hex[:8]}"
    async with Producer(bootstrap_servers=kafka_bootstrap,
                        transactional_id=txn_id("empty")) as p:
        await p.init_transactions()
        for _ in range(3):  # empty polls: nothing sent, no offsets
            p.begin_transaction()
            await p.send_offsets_to_transaction({}, group)
            await p.commit_transaction()
        p.begin_transaction()
        await p.send_offsets_to_transaction([], group)
        await p.send(out, b"out-0")
        await p.send_offsets_to_transaction({(src, 0): 7}, group)
        await p.commit_transaction()
        p.begin_transaction()
        await p.send_offsets_to_transaction({}, group)
        await p.abort_transaction()
    assert committed_values(kafka_bootstrap, out, 1) == [b"out-0"]
    assert group_offset(kafka_bootstrap, group, src, 0) == 7


# -- 3. a cancelled or timed-out abort (or commit) can be finished -----------------------


async def _open_transaction_behind_a_proxy(proxies: ProxyCluster, topic: str,
                                           tid: str) -> Producer:
    p = Producer(bootstrap_servers=proxies.bootstrap, transactional_id=tid, linger_ms=5)
    await p.start()
    await p.init_transactions()
    p.begin_transaction()
    for i in range(20):
        await p.send(topic, b"a%d" % i)
    await p.flush()
    return p


async def _later_commit_is_visible(bootstrap: str, topic: str) -> None:
    """Another producer commits one record: a read_committed consumer sees it within
    seconds only if no transaction is left open on the topic (its timeout is 60 s)."""
    async with Producer(bootstrap_servers=bootstrap,
                        transactional_id=txn_id("later")) as q:
        await q.init_transactions()
        async with q.transaction():
            await q.send(topic, b"later")
    assert committed_values(bootstrap, topic, 1, prefix=b"later") == [b"later"]


@pytest.mark.parametrize("where", ["waiting-for-batches", "in-end-txn"])
@pytest.mark.parametrize("then", ["abort-again", "close"])
async def test_cancelled_abort_can_be_finished(kafka_bootstrap: str, topic_factory: Any,
                                               where: str, then: str) -> None:
    topic = topic_factory()
    tid = txn_id("cancel-abort")
    async with ProxyCluster.start(kafka_bootstrap) as proxies:
        p = await _open_transaction_behind_a_proxy(proxies, topic, tid)
        try:
            proxy = proxies.proxy_for_node(next(iter(proxies.proxies)))
            if where == "waiting-for-batches":
                proxy.delay_responses(_PRODUCE, 0.5, count=1)
                await p.send(topic, b"late")
                p._wake_sender()
                await proxy.wait_for_requests(_PRODUCE, proxy.stats["requests_by_api"]
                                              [_PRODUCE] + 1, timeout=5)
            else:
                proxy.delay_responses(_END_TXN, 0.5, count=1)
            abort = asyncio.ensure_future(p.abort_transaction())
            if where == "in-end-txn":
                await proxy.wait_for_requests(_END_TXN, 1, timeout=5)
            else:
                for _ in range(20):
                    await asyncio.sleep(0)
            assert p._txn is not None and p._txn.machine.busy == "abort_transaction()"
            abort.cancel()
            with pytest.raises(asyncio.CancelledError):
                await abort
            if then == "abort-again":
                with pytest.raises(IllegalStateError, match="abort_transaction"):
                    await p.commit_transaction()  # only the abort may be finished
                await p.abort_transaction()
                assert p._txn.state is TxnState.READY
                p.begin_transaction()  # usable again
                await p.abort_transaction()
        finally:
            await p.close()
    await _later_commit_is_visible(kafka_bootstrap, topic)
    assert committed_values(kafka_bootstrap, topic, 1, prefix=b"a") == []


async def test_timed_out_commit_is_finished_by_close(kafka_bootstrap: str,
                                                     topic_factory: Any) -> None:
    topic = topic_factory()
    tid = txn_id("commit-timeout")
    async with ProxyCluster.start(kafka_bootstrap) as proxies:
        p = Producer(bootstrap_servers=proxies.bootstrap, transactional_id=tid,
                     linger_ms=5, max_block_ms=300)
        await p.start()
        try:
            await p.init_transactions()
            p.begin_transaction()
            for i in range(10):
                await p.send(topic, b"c%d" % i)
            await p.flush()
            proxy = proxies.proxy_for_node(next(iter(proxies.proxies)))
            proxy.delay_responses(_END_TXN, 1.0, count=1)
            with pytest.raises(KafkaTimeoutError):
                await p.commit_transaction()  # EndTxn sent, no answer in max_block_ms
            assert p._txn is not None and p._txn.state is TxnState.COMMITTING
        finally:
            await p.close()  # finishes the commit
    assert sorted(committed_values(kafka_bootstrap, topic, 10)) == sorted(
        b"c%d" % i for i in range(10))


# -- 4. a resumed transaction takes no records ---------------------------------------------


async def test_send_after_resume_is_refused(txn_broker: TxnBroker,
                                            topic_factory: Any) -> None:
    bootstrap = txn_broker.bootstrap
    topic = topic_factory()
    tid = txn_id("resume-send")
    group = f"resume-send-{uuid.uuid4().hex[:8]}"
    async with Producer(bootstrap_servers=bootstrap, transactional_id=tid) as p:
        await p.init_transactions()
        p.begin_transaction()
        for i in range(10):
            await p.send(topic, b"p%d" % i)
        handle = await p.prepare_transaction()
    assert handle is not None
    async with Producer(bootstrap_servers=bootstrap, transactional_id=tid) as q:
        await q.resume_transaction(*handle)
        with pytest.raises(IllegalStateError, match="resume"):
            await q.send(topic, b"q0")
        with pytest.raises(IllegalStateError, match="resume"):
            await q.send_many(topic, [b"q1", b"q2"])
        await q.commit_transaction()
        # The next transaction is an ordinary one, under a new epoch (this producer
        # does not know the resumed transaction's sequences), bumped before its first
        # request: here its offsets, then a record.
        q.begin_transaction()
        await q.send_offsets_to_transaction({(topic, 0): 5}, group)
        await q.send(topic, b"next")
        await q.commit_transaction()
    got = committed_values(bootstrap, topic, 11)
    assert sorted(got) == sorted([b"p%d" % i for i in range(10)] + [b"next"])
    assert group_offset(bootstrap, group, topic, 0) == 5


# -- 5. a timed-out send_offsets_to_transaction is not dropped --------------------------


async def test_timed_out_send_offsets_is_kept_for_the_commit(
        kafka_bootstrap: str, topic_factory: Any) -> None:
    src = topic_factory()
    out = topic_factory()
    group = f"slow-coordinator-{uuid.uuid4().hex[:8]}"
    tid = txn_id("offsets-timeout")
    # The group coordinator's topic exists before the measured call.
    async with Producer(bootstrap_servers=kafka_bootstrap, transactional_id=tid) as w:
        await w.init_transactions()
        async with w.transaction():
            await w.send_offsets_to_transaction({(src, 0): 1}, f"warm-{group}")
    async with ProxyCluster.start(kafka_bootstrap) as proxies, \
            Producer(bootstrap_servers=proxies.bootstrap, transactional_id=tid,
                     max_block_ms=200) as p:
        await p.init_transactions()
        p.begin_transaction()
        for i in range(50):
            await p.send(out, b"o%d" % i)
        proxy = proxies.proxy_for_node(next(iter(proxies.proxies)))
        proxy.delay_responses(_FIND_COORDINATOR, 0.6, count=1)
        with pytest.raises(KafkaTimeoutError):
            await p.send_offsets_to_transaction({(src, 0): 50}, group)
        await asyncio.sleep(0.7)
        await p.commit_transaction()
    assert len(committed_values(kafka_bootstrap, out, 50)) == 50
    assert group_offset(kafka_bootstrap, group, src, 0) == 50
