"""Transactions against Apache Kafka, read back by confluent-kafka (read_committed and
read_uncommitted): commit/abort, the state machine, fencing, abortable errors,
consume-transform-produce across a crash, and a producer killed mid-transaction.

Every test runs twice: on a broker whose finalized ``transaction.version`` is 1 (the
classic protocol) and on one where it is 2 (KIP-890), see tests/support/txn_brokers.py."""

from __future__ import annotations

import ast
import asyncio
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from support.kafka_util import consume_all, partition_offsets
from support.txn_brokers import TxnBroker, txn_broker_fixture

from aioproducer import (
    BrokerResponseError,
    ConfigError,
    GroupMetadata,
    IllegalStateError,
    Producer,
    ProducerFencedError,
    TransactionAbortableError,
    TransactionAbortedError,
)
from aioproducer.errors import InvalidProducerEpochError, MessageTooLargeError
from aioproducer.transactions import TxnState

pytestmark = pytest.mark.asyncio

txn_broker = txn_broker_fixture()


@pytest.fixture(scope="module")
def kafka_bootstrap(txn_broker: TxnBroker) -> str:
    """Every test (and the plugin's topic factory) uses this module's broker."""
    return txn_broker.bootstrap

WORKER = str(Path(__file__).resolve().parent.parent / "support" / "txn_worker.py")


def txn_id() -> str:
    return f"txn-{uuid.uuid4().hex[:12]}"


def tx_producer(bootstrap: str, tid: str | None = None, **options: Any) -> Producer:
    return Producer(bootstrap_servers=bootstrap, transactional_id=tid or txn_id(),
                    linger_ms=5, **options)


async def test_commit_1000_abort_500_isolation_levels(kafka_bootstrap: str,
                                                      topic_factory: Any) -> None:
    topic = topic_factory(partitions=3)
    async with tx_producer(kafka_bootstrap) as producer:
        await producer.init_transactions()
        producer.begin_transaction()
        committed = []
        for i in range(1000):
            key = None if i % 10 == 0 else b"key-%d" % (i % 37)
            fut = await producer.send(topic, b"commit-%d" % i, key=key,
                                      headers=[("h", b"%d" % i), ("txn", b"commit")],
                                      timestamp_ms=1_700_000_000_000 + i)
            committed.append((key, fut))
        await producer.commit_transaction()
        metas = {}
        for key, fut in committed:
            md = await fut
            metas[(md.partition, md.offset)] = key

        producer.begin_transaction()
        aborted = [await producer.send(topic, b"abort-%d" % i, key=b"a%d" % i)
                   for i in range(500)]
        await producer.flush()  # written to the log, then aborted
        await producer.abort_transaction()
        for fut in aborted:
            await fut  # acknowledged by the leader; the abort marker hides them

    got = consume_all(kafka_bootstrap, topic, 1000, isolation="read_committed")
    assert len(got) == 1000
    assert sorted(r.value for r in got) == sorted(b"commit-%d" % i for i in range(1000))
    for r in got:
        i = int(r.value.split(b"-")[1])
        assert metas[(r.partition, r.offset)] == r.key
        assert r.key == (None if i % 10 == 0 else b"key-%d" % (i % 37))
        assert r.headers == [("h", b"%d" % i), ("txn", b"commit")]
        assert r.timestamp == 1_700_000_000_000 + i

    everything = consume_all(kafka_bootstrap, topic, 1500, isolation="read_uncommitted")
    assert len(everything) == 1500
    assert Counter(r.value.split(b"-")[0] for r in everything) == {b"commit": 1000,
                                                                   b"abort": 500}


async def test_state_machine_rejects_wrong_calls(kafka_bootstrap: str,
                                                 topic_factory: Any) -> None:
    topic = topic_factory()
    async with tx_producer(kafka_bootstrap) as producer:
        with pytest.raises(IllegalStateError, match="init_transactions"):
            await producer.send(topic, b"x")
        with pytest.raises(IllegalStateError, match="init_transactions"):
            producer.begin_transaction()
        await producer.init_transactions()
        with pytest.raises(IllegalStateError, match="init_transactions"):
            await producer.init_transactions()
        with pytest.raises(IllegalStateError, match="begin_transaction"):
            await producer.send(topic, b"outside")
        with pytest.raises(IllegalStateError, match="begin_transaction"):
            await producer.send_many(topic, [b"outside"])
        with pytest.raises(IllegalStateError, match="no transaction"):
            await producer.commit_transaction()
        with pytest.raises(IllegalStateError, match="no transaction"):
            await producer.abort_transaction()
        with pytest.raises(IllegalStateError, match="no transaction"):
            await producer.send_offsets_to_transaction({(topic, 0): 1}, "g")
        producer.begin_transaction()
        with pytest.raises(IllegalStateError, match="already in progress"):
            producer.begin_transaction()
        await producer.send(topic, b"inside")
        with pytest.raises(TypeError, match="offsets"):
            await producer.send_offsets_to_transaction({(topic, 0): -5}, "g")
        await producer.commit_transaction()
        with pytest.raises(IllegalStateError, match="no transaction"):
            await producer.commit_transaction()  # twice
        # A transaction with nothing in it commits without a round trip.
        producer.begin_transaction()
        await producer.commit_transaction()

    async with Producer(bootstrap_servers=kafka_bootstrap) as plain:
        with pytest.raises(IllegalStateError, match="not transactional"):
            plain.begin_transaction()
        with pytest.raises(IllegalStateError, match="not transactional"):
            await plain.init_transactions()
    with pytest.raises(ConfigError, match="idempotence"):
        Producer(transactional_id="x", enable_idempotence=False)
    with pytest.raises(ConfigError, match="acks"):
        Producer(transactional_id="x", acks=1)
    with pytest.raises(ConfigError, match="transactional_id"):
        Producer(transactional_id="")
    assert Producer(transactional_id="x").config.enable_idempotence is True
    got = consume_all(kafka_bootstrap, topic, 1, isolation="read_committed")
    assert [r.value for r in got] == [b"inside"]


async def test_context_manager_commits_or_aborts(kafka_bootstrap: str,
                                                 topic_factory: Any) -> None:
    topic = topic_factory(partitions=2)
    async with tx_producer(kafka_bootstrap) as producer:
        await producer.init_transactions()
        async with producer.transaction():
            for i in range(100):
                await producer.send(topic, b"ok-%d" % i)
        with pytest.raises(RuntimeError, match="boom"):
            async with producer.transaction():
                futs = [await producer.send(topic, b"no-%d" % i) for i in range(50)]
                raise RuntimeError("boom")
        # Unsent records of the aborted transaction fail; the sent ones were written
        # and hidden by the abort marker.
        outcomes = await asyncio.gather(*futs, return_exceptions=True)
        assert all(o is None or not isinstance(o, BaseException)
                   or isinstance(o, TransactionAbortedError) for o in outcomes)
        async with producer.transaction():
            await producer.send(topic, b"after")
    got = consume_all(kafka_bootstrap, topic, 101, isolation="read_committed")
    assert sorted(r.value for r in got) == sorted([b"ok-%d" % i for i in range(100)]
                                                  + [b"after"])


async def test_fencing_second_producer_takes_over(kafka_bootstrap: str,
                                                  topic_factory: Any) -> None:
    topic = topic_factory(partitions=2)
    tid = txn_id()
    first = tx_producer(kafka_bootstrap, tid)
    await first.start()
    try:
        await first.init_transactions()
        first.begin_transaction()
        for i in range(20):
            await first.send(topic, b"zombie-%d" % i, partition=0)
        await first.flush()

        async with tx_producer(kafka_bootstrap, tid) as second:
            await second.init_transactions()  # fences `first`, aborts its transaction

            # The zombie's next write (a new partition) and its commit are refused.
            # Version 1: AddPartitionsToTxn says PRODUCER_FENCED (fatal). Version 2:
            # the partition leader says INVALID_PRODUCER_EPOCH, abortable (KIP-588, as
            # Java), and the abort's EndTxn then says PRODUCER_FENCED (fatal).
            late = await first.send(topic, b"zombie-late", partition=1)
            with pytest.raises((ProducerFencedError, InvalidProducerEpochError)):
                await late
            with pytest.raises((ProducerFencedError, TransactionAbortableError)):
                await first.commit_transaction()
            with pytest.raises(ProducerFencedError):
                await first.abort_transaction()
            # ...and it can do nothing more.
            with pytest.raises(ProducerFencedError):
                await first.send(topic, b"zombie-again")
            with pytest.raises(ProducerFencedError):
                first.begin_transaction()
            with pytest.raises(ProducerFencedError):
                await first.abort_transaction()

            async with second.transaction():
                for i in range(30):
                    await second.send(topic, b"live-%d" % i)
    finally:
        await first.close()
    got = consume_all(kafka_bootstrap, topic, 30, isolation="read_committed")
    assert sorted(r.value for r in got) == sorted(b"live-%d" % i for i in range(30))


async def test_fenced_while_batches_are_in_the_log(kafka_bootstrap: str,
                                                   topic_factory: Any) -> None:
    """The zombie's next batch to a partition it already wrote to is refused by the
    partition leader itself (the abort marker carries the newer epoch): with
    INVALID_PRODUCER_EPOCH, abortable as in Java (KIP-588); the abort is then fenced."""
    topic = topic_factory()
    tid = txn_id()
    async with tx_producer(kafka_bootstrap, tid) as first:
        await first.init_transactions()
        first.begin_transaction()
        await (await first.send(topic, b"one"))
        async with tx_producer(kafka_bootstrap, tid) as second:
            await second.init_transactions()
            fut = await first.send(topic, b"two")
            with pytest.raises((ProducerFencedError, InvalidProducerEpochError)):
                await fut
            with pytest.raises(ProducerFencedError):
                await first.abort_transaction()
            with pytest.raises(ProducerFencedError):
                first.begin_transaction()
    assert consume_all(kafka_bootstrap, topic, 0, timeout=10,
                       isolation="read_committed") == []


async def test_abortable_error_then_abort_and_continue(kafka_bootstrap: str,
                                                       topic_factory: Any) -> None:
    """A record the broker refuses (bigger than the topic's max.message.bytes) makes
    the transaction abortable: commit raises, abort works, the next one commits."""
    topic = topic_factory(config={"max.message.bytes": "2000"})
    async with tx_producer(kafka_bootstrap) as producer:
        await producer.init_transactions()
        producer.begin_transaction()
        small = await producer.send(topic, b"fine")
        await small
        big = await producer.send(topic, b"x" * 10_000)
        with pytest.raises(MessageTooLargeError):
            await big
        with pytest.raises(TransactionAbortableError, match="abort"):
            await producer.send(topic, b"more")
        with pytest.raises(TransactionAbortableError) as info:
            await producer.commit_transaction()
        assert isinstance(info.value.__cause__, MessageTooLargeError)
        assert producer._txn is not None and producer._txn.state is TxnState.ABORTABLE_ERROR
        await producer.abort_transaction()

        async with producer.transaction():
            futs = [await producer.send(topic, b"next-%d" % i) for i in range(10)]
        offsets = [(await f).offset for f in futs]
        assert offsets == sorted(offsets)
    got = consume_all(kafka_bootstrap, topic, 10, isolation="read_committed")
    assert [r.value for r in got] == [b"next-%d" % i for i in range(10)]


async def test_transaction_timeout_reaches_the_coordinator(kafka_bootstrap: str) -> None:
    # Above the broker's transaction.max.timeout.ms (15 minutes by default).
    async with tx_producer(kafka_bootstrap, transaction_timeout_ms=3_600_000,
                           delivery_timeout_ms=3_600_000) as producer:
        with pytest.raises(BrokerResponseError, match="INVALID_TRANSACTION_TIMEOUT"):
            await producer.init_transactions()


def _run_worker(*args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, WORKER, *args], capture_output=True, text=True,
                          timeout=timeout, check=False)


async def test_killed_mid_transaction_new_producer_aborts_it(kafka_bootstrap: str,
                                                             topic_factory: Any) -> None:
    topic = topic_factory()
    tid = txn_id()
    proc = await asyncio.to_thread(_run_worker, "open", kafka_bootstrap, topic, tid, "200",
                                   "600000")
    assert proc.returncode == -9, proc.stderr
    assert "READY" in proc.stdout
    # The open transaction holds back the last stable offset: a read_committed consumer
    # sees nothing, not even records committed after it, until it is aborted.
    assert len(consume_all(kafka_bootstrap, topic, 200, timeout=30)) == 200
    assert consume_all(kafka_bootstrap, topic, 0, timeout=10, isolation="read_committed") == []
    async with tx_producer(kafka_bootstrap, tid) as producer:
        started = time.monotonic()
        await producer.init_transactions()  # aborts the dead producer's transaction
        elapsed = time.monotonic() - started
        async with producer.transaction():
            for i in range(100):
                await producer.send(topic, b"new-%d" % i)
    assert elapsed < 30
    got = consume_all(kafka_bootstrap, topic, 100, isolation="read_committed")
    assert sorted(r.value for r in got) == sorted(b"new-%d" % i for i in range(100))


async def test_abandoned_transaction_times_out(kafka_bootstrap: str,
                                               topic_factory: Any) -> None:
    """``transaction_timeout_ms`` reaches the coordinator: an open transaction whose
    producer died is aborted by the broker after it, with no new producer."""
    topic = topic_factory()
    proc = await asyncio.to_thread(_run_worker, "open", kafka_bootstrap, topic, txn_id(),
                                   "50", "2000")
    assert proc.returncode == -9, proc.stderr
    async with Producer(bootstrap_servers=kafka_bootstrap) as plain:
        await plain.send_and_wait(topic, b"plain")
    # Until the coordinator aborts the transaction, "plain" is behind the LSO.
    got = consume_all(kafka_bootstrap, topic, 1, timeout=45, isolation="read_committed")
    assert [r.value for r in got] == [b"plain"]


async def test_consume_transform_produce_survives_a_crash(kafka_bootstrap: str,
                                                          topic_factory: Any) -> None:
    src = topic_factory(partitions=3)
    dst = topic_factory(partitions=3)
    group = f"ctp-{uuid.uuid4().hex[:8]}"
    tid = txn_id()
    n = 3000
    async with Producer(bootstrap_servers=kafka_bootstrap, linger_ms=5) as plain:
        futs = [await plain.send(src, b"v%d" % i, key=b"k%d" % i, partition=i % 3)
                for i in range(n)]
        await asyncio.gather(*futs)

    first = await asyncio.to_thread(_run_worker, "ctp", kafka_bootstrap, src, dst, group,
                                    tid, "5")
    assert first.returncode == -9, first.stdout + first.stderr
    assert "CRASH in transaction 5" in first.stdout
    second = await asyncio.to_thread(_run_worker, "ctp", kafka_bootstrap, src, dst, group,
                                     tid, "0")
    assert second.returncode == 0, second.stdout + second.stderr
    # The restart resumed after the 4 committed transactions, not at the start.
    starts = ast.literal_eval(second.stdout.split("START ", 1)[1].splitlines()[0])
    assert sum(max(o, 0) for o in starts.values()) > 0, second.stdout

    got = consume_all(kafka_bootstrap, dst, n, isolation="read_committed")
    values = Counter(r.value for r in got)
    assert len(got) == n, f"{len(got)} records, {n} expected"
    assert values == Counter(b"out:v%d" % i for i in range(n))  # no duplicates, no gaps
    for r in got:
        i = int(r.value[5:])
        assert r.key == b"k%d" % i and r.partition == i % 3
    # The crashed transaction's output is in the log, but aborted.
    assert len(consume_all(kafka_bootstrap, dst, n + 1, timeout=20)) > n

    # The group's committed offsets are the ends of the input partitions.
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    try:
        committed = consumer.committed([TopicPartition(src, p) for p in range(3)],
                                       timeout=10)
    finally:
        consumer.close()
    ends = partition_offsets(kafka_bootstrap, src)
    assert {tp.partition: tp.offset for tp in committed} == {p: ends[p][1] for p in ends}


async def test_send_offsets_accepts_group_metadata_and_topic_partitions(
        kafka_bootstrap: str, topic_factory: Any) -> None:
    src = topic_factory()
    dst = topic_factory()
    group = f"g-{uuid.uuid4().hex[:8]}"
    async with tx_producer(kafka_bootstrap) as producer:
        await producer.init_transactions()
        async with producer.transaction():
            await producer.send(dst, b"x")
            await producer.send_offsets_to_transaction(
                [TopicPartition(src, 0, 42)], GroupMetadata(group))
        consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group})
        try:
            (tp,) = consumer.committed([TopicPartition(src, 0)], timeout=10)
            assert tp.offset == 42
            # Aborted offsets are not committed.
            producer.begin_transaction()
            await producer.send_offsets_to_transaction({(src, 0): (99, "meta")}, group)
            await producer.abort_transaction()
            (tp,) = consumer.committed([TopicPartition(src, 0)], timeout=10)
            assert tp.offset == 42
        finally:
            consumer.close()


async def test_close_aborts_an_open_transaction(kafka_bootstrap: str,
                                                topic_factory: Any) -> None:
    topic = topic_factory()
    producer = tx_producer(kafka_bootstrap)
    await producer.start()
    await producer.init_transactions()
    producer.begin_transaction()
    await (await producer.send(topic, b"left open"))
    await producer.close()
    async with Producer(bootstrap_servers=kafka_bootstrap) as plain:
        await plain.send_and_wait(topic, b"after")
    # Not held back for transaction_timeout_ms (60 s): close() aborted it.
    got = consume_all(kafka_bootstrap, topic, 1, timeout=15, isolation="read_committed")
    assert [r.value for r in got] == [b"after"]
