"""Transactions V2 (KIP-890) and the atomicity of a transaction with concurrent sends.

Every test here runs against a broker whose finalized ``transaction.version`` is 1 and
one where it is 2 (``txn_broker``, see tests/support/txn_brokers.py).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter, defaultdict
from typing import Any

import pytest
from support.kafka_util import consume_all
from support.txn_brokers import TxnBroker, txn_broker_fixture

from aioproducer import (
    IllegalStateError,
    Producer,
    TransactionAbortableError,
    TransactionAbortedError,
)
from aioproducer._native.compressor import CompressorThread
from aioproducer.transactions import TxnState

pytestmark = pytest.mark.asyncio

txn_broker = txn_broker_fixture()


@pytest.fixture(scope="module")
def kafka_bootstrap(txn_broker: TxnBroker) -> str:
    """The plugin's topic factory creates the topics on this module's broker."""
    return txn_broker.bootstrap


async def test_transaction_version_follows_the_broker(txn_broker: TxnBroker,
                                                      topic_factory: Any) -> None:
    topic = topic_factory()
    async with Producer(bootstrap_servers=txn_broker.bootstrap,
                        transactional_id=f"tv-{txn_broker.version}-{time.time_ns()}",
                        linger_ms=5) as producer:
        assert producer.transaction_version is None
        await producer.init_transactions()
        assert producer.transaction_version == txn_broker.version
        epochs = []
        for i in range(4):
            producer.begin_transaction()
            assert producer.transaction_sequence == i + 1
            await producer.send(topic, b"v%d" % i)
            await producer.flush()  # the coordinator knows the transaction: EndTxn goes
            if i % 2:
                await producer.abort_transaction()
            else:
                await producer.commit_transaction()
            pid = producer._txn._pid  # type: ignore[union-attr]
            epochs.append((pid.producer_id, pid.epoch))
    ids = {p for p, _ in epochs}
    assert len(ids) == 1
    if txn_broker.version >= 2:
        # Every EndTxn bumps the epoch (KIP-890), and the producer keeps the new one.
        assert [e for _, e in epochs] == [epochs[0][1] + i for i in range(4)]
    else:
        assert len({e for _, e in epochs}) == 1
    got = consume_all(txn_broker.bootstrap, topic, 2, isolation="read_committed")
    assert sorted(r.value for r in got) == [b"v0", b"v2"]


async def test_v2_sends_no_add_partitions_round_trip(txn_broker: TxnBroker,
                                                     topic_factory: Any) -> None:
    """V2: no AddPartitionsToTxn / AddOffsetsToTxn; V1: one per new partition set."""
    topic = topic_factory(partitions=3)
    async with Producer(bootstrap_servers=txn_broker.bootstrap,
                        transactional_id=f"tvadd-{txn_broker.version}-{time.time_ns()}",
                        linger_ms=5) as producer:
        await producer.init_transactions()
        txn = producer._txn
        assert txn is not None
        calls: Counter[str] = Counter()
        original = txn._coordinator_call

        async def counting(key_type: int, key: str, what: str, *args: Any,
                           **kw: Any) -> None:
            calls[what.split(" ")[0]] += 1
            await original(key_type, key, what, *args, **kw)

        txn._coordinator_call = counting  # type: ignore[method-assign]
        producer.begin_transaction()
        for p in range(3):
            await producer.send(topic, b"x", partition=p)
        await producer.send_offsets_to_transaction({(topic, 0): 1}, "g-v2")
        await producer.commit_transaction()
    if txn_broker.version >= 2:
        assert calls["AddPartitionsToTxn"] == 0
        assert calls["AddOffsetsToTxn"] == 0
    else:
        assert calls["AddPartitionsToTxn"] >= 1
        assert calls["AddOffsetsToTxn"] == 1
    assert calls["EndTxn"] == 1 and calls["TxnOffsetCommit"] == 1


async def test_concurrent_sends_land_in_the_transaction_they_joined(
        txn_broker: TxnBroker, topic_factory: Any) -> None:
    """50 tasks send through one transactional producer while a periodic task ends a
    transaction every 100 ms (commit, but every third one aborted, so that a record
    moved to a neighbouring transaction shows); small buffer memory (sends wait for
    memory) and new topics whose metadata sends wait for. A read_committed consumer
    must see exactly the records whose send() returned, told a committed transaction,
    and none of the others."""
    seed = 20261125 + txn_broker.version
    print(f"seed={seed}")
    rng = random.Random(seed)
    topics = [topic_factory(partitions=2) for _ in range(3)]
    n_txns, n_tasks, per_task = 16, 50, 80
    joined: dict[int, int] = {}  # record id -> transaction number send() joined
    topic_of: dict[int, str] = {}
    refused: Counter[str] = Counter()
    futures: list[tuple[int, Any]] = []
    outcome: dict[int, str] = {}
    stop = asyncio.Event()

    async with Producer(bootstrap_servers=txn_broker.bootstrap,
                        transactional_id=f"atom-{txn_broker.version}-{time.time_ns()}",
                        linger_ms=20, batch_size=4096, buffer_memory=24 * 1024,
                        max_request_size=16 * 1024,
                        max_block_ms=20_000) as producer:
        await producer.init_transactions()
        next_id = 0

        async def sender(task: int) -> None:
            nonlocal next_id
            trng = random.Random(rng.random())
            sent = 0
            while sent < per_task and not stop.is_set():
                # New topics come into use as the run goes on (metadata waits).
                reachable = 1 + min(2, int(producer.transaction_sequence / (n_txns / 3)))
                topic = topics[trng.randrange(reachable)]
                rid = next_id
                next_id += 1
                number = producer.transaction_sequence
                try:
                    fut = await producer.send(
                        topic, bytes(trng.randrange(100, 900)),
                        headers=[("id", b"%d" % rid), ("txn", b"%d" % number)])
                except (IllegalStateError, TransactionAbortedError,
                        TransactionAbortableError) as exc:
                    refused[type(exc).__name__] += 1
                    await asyncio.sleep(0.002 + trng.random() * 0.005)
                    continue
                joined[rid] = number
                topic_of[rid] = topic
                futures.append((rid, fut))
                sent += 1
                if trng.random() < 0.2:
                    await asyncio.sleep(trng.random() * 0.01)

        async def committer() -> None:
            for n in range(1, n_txns + 1):
                producer.begin_transaction()
                assert producer.transaction_sequence == n
                await asyncio.sleep(0.1)
                if n % 3 == 0:
                    await producer.abort_transaction()
                    outcome[n] = "aborted"
                else:
                    await producer.commit_transaction()
                    outcome[n] = "committed"
            stop.set()

        async with asyncio.timeout(120):
            tasks = [asyncio.create_task(sender(i)) for i in range(n_tasks)]
            await committer()
            await asyncio.gather(*tasks)
        assert producer._txn is not None and producer._txn.state is TxnState.READY

    print(f"sends returned: {len(joined)}, refused: {dict(refused)}")
    assert set(joined.values()) <= set(outcome)  # never outside a transaction
    expected = {rid for rid, n in joined.items() if outcome[n] == "committed"}
    # A record of a committed transaction was acknowledged; one of an aborted
    # transaction failed or was written and then aborted.
    for rid, fut in futures:
        if outcome[joined[rid]] == "committed":
            assert fut.done() and fut.exception() is None, rid
    by_txn: dict[int, set[int]] = defaultdict(set)
    read_ids = set()
    for topic in topics:
        for r in consume_all(txn_broker.bootstrap, topic,
                             sum(1 for rid in expected if topic_of[rid] == topic),
                             timeout=30, isolation="read_committed"):
            h = dict(r.headers)
            rid = int(h["id"] or b"-1")
            assert rid not in read_ids, f"record {rid} read twice"
            read_ids.add(rid)
            by_txn[int(h["txn"] or b"-1")].add(rid)
    missing = expected - read_ids
    extra = read_ids - expected
    assert not missing, f"{len(missing)} records of committed transactions not read"
    assert not extra, f"{len(extra)} records read that were not told a committed " \
                      f"transaction: {sorted((joined.get(r), r) for r in extra)[:10]}"
    for n, ids in by_txn.items():
        assert ids == {rid for rid, m in joined.items() if m == n}
    assert len(expected) > 200


# -- Produce errors as Java 4.x handles them (the proxy answers the Produce request) ----


@pytest.mark.parametrize("code", [47, 120], ids=["INVALID_PRODUCER_EPOCH",
                                                 "TRANSACTION_ABORTABLE"])
async def test_produce_error_is_abortable(txn_broker: TxnBroker, topic_factory: Any,
                                          code: int) -> None:
    """INVALID_PRODUCER_EPOCH (KIP-588) and TRANSACTION_ABORTABLE from a partition
    leader make the transaction abortable, not the producer unusable: abort, then the
    next transaction commits (the epoch bumped by the abort)."""
    from support.produce_response import AnsweringProxyCluster

    from aioproducer.errors import KafkaError

    topic = topic_factory()
    async with AnsweringProxyCluster.start(txn_broker.bootstrap) as proxies, \
            Producer(bootstrap_servers=proxies.bootstrap, linger_ms=0,
                     transactional_id=f"abortable-{code}-{time.time_ns()}",
                     max_block_ms=20_000, delivery_timeout_ms=30_000) as producer:
        await producer.init_transactions()
        pid = producer._txn._pid  # type: ignore[union-attr]
        epoch0 = pid.epoch
        producer.begin_transaction()
        await (await producer.send(topic, b"before"))
        for proxy in proxies.proxies.values():
            proxy.answer_produce(code)
        fut = await producer.send(topic, b"refused")
        with pytest.raises(KafkaError) as info:
            await asyncio.wait_for(fut, 20)
        assert int(info.value.code) == code  # type: ignore[attr-defined]
        assert producer._txn.state is TxnState.ABORTABLE_ERROR  # type: ignore[union-attr]
        with pytest.raises(TransactionAbortableError):
            await producer.commit_transaction()
        await producer.abort_transaction()
        assert pid.epoch > epoch0  # the abort bumped the epoch
        producer.begin_transaction()
        await producer.send(topic, b"after")
        await producer.commit_transaction()
    got = consume_all(txn_broker.bootstrap, topic, 1, isolation="read_committed")
    assert [r.value for r in got] == [b"after"]


async def test_cluster_authorization_failed_on_produce_is_fatal(
        txn_broker: TxnBroker, topic_factory: Any) -> None:
    from support.produce_response import AnsweringProxyCluster

    from aioproducer.errors import ClusterAuthorizationError

    topic = topic_factory()
    async with AnsweringProxyCluster.start(txn_broker.bootstrap) as proxies, \
            Producer(bootstrap_servers=proxies.bootstrap, linger_ms=0,
                     transactional_id=f"clusterauth-{time.time_ns()}",
                     max_block_ms=20_000) as producer:
        await producer.init_transactions()
        producer.begin_transaction()
        for proxy in proxies.proxies.values():
            proxy.answer_produce(31)  # CLUSTER_AUTHORIZATION_FAILED
        fut = await producer.send(topic, b"x")
        with pytest.raises(ClusterAuthorizationError):
            await asyncio.wait_for(fut, 20)
        assert producer._txn.state is TxnState.FATAL_ERROR  # type: ignore[union-attr]
        with pytest.raises(ClusterAuthorizationError):
            await producer.abort_transaction()
        with pytest.raises(ClusterAuthorizationError):
            await producer.send(topic, b"y")


# -- the consume-transform-produce example, each error category handled ---------------


async def test_consume_transform_produce_example(txn_broker: TxnBroker,
                                                 topic_factory: Any) -> None:
    """examples/consume_transform_produce.py against the broker, with one scripted error
    of each category a transaction can recover from (a commit timing out, an abortable
    commit, a fenced producer): every input record is in the output once (read_committed)
    and the group's offsets are at the end of the input. Bounded: 300 records, 120 s."""
    import importlib.util
    from pathlib import Path

    from confluent_kafka import Consumer, TopicPartition

    from aioproducer import KafkaTimeoutError, ProducerFencedError

    path = Path(__file__).resolve().parents[2] / "examples" / "consume_transform_produce.py"
    spec = importlib.util.spec_from_file_location("ctp_example", path)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)

    src, dst = topic_factory(partitions=2), topic_factory(partitions=2)
    group = f"ctp-{txn_broker.version}-{time.time_ns()}"
    n = 300
    async with Producer(bootstrap_servers=txn_broker.bootstrap) as plain:
        for i in range(n):
            await plain.send(src, b"rec-%d" % i, key=b"%d" % (i % 7))
        await plain.flush()

    # Commit number k raises: 2 a timeout before committing (RETRIABLE: repeat the
    # commit), 4 an abortable error (abort, rewind), 6 a fence (close, new producer).
    script = {2: KafkaTimeoutError("scripted: EndTxn timed out"),
              4: TransactionAbortableError("scripted: a record failed"),
              6: ProducerFencedError("scripted: fenced")}
    seen: Counter[str] = Counter()
    commits = 0

    class Scripted(Producer):
        async def commit_transaction(self) -> None:
            nonlocal commits
            commits += 1
            err = script.pop(commits, None)
            if err is not None:
                seen[err.category.value] += 1
                raise err
            await super().commit_transaction()

    async with asyncio.timeout(120):
        done = await example.run(txn_broker.bootstrap, src, dst, group,
                                 transactional_id=f"ctp-{time.time_ns()}",
                                 max_records=n, idle_timeout=15, batch=40,
                                 producer_factory=Scripted)
    assert done == n
    assert seen == {"retriable": 1, "abortable": 1, "application-recoverable": 1}
    got = consume_all(txn_broker.bootstrap, dst, n, isolation="read_committed")
    assert sorted(r.value for r in got) == sorted(b"REC-%d" % i for i in range(n))
    consumer = Consumer({"bootstrap.servers": txn_broker.bootstrap, "group.id": group})
    try:
        committed = consumer.committed([TopicPartition(src, p) for p in range(2)],
                                       timeout=10)
        _low, high0 = consumer.get_watermark_offsets(TopicPartition(src, 0), timeout=10)
        _low, high1 = consumer.get_watermark_offsets(TopicPartition(src, 1), timeout=10)
    finally:
        consumer.close()
    assert [tp.offset for tp in committed] == [high0, high1]


async def test_a_transaction_commits_batches_the_compression_thread_made(
        txn_broker: TxnBroker, topic_factory: Any) -> None:
    """zstd batches compressed on the compression thread (tests/broker/
    test_compression_thread.py): the commit waits for them, and read_committed reads
    every record once, in order, field for field."""
    topic = topic_factory(partitions=2)
    rng = random.Random(20261128)
    words = [rng.randbytes(rng.randint(2, 9)).hex().encode() for _ in range(300)]
    recs = [(b"k%d" % (i % 500), b" ".join(rng.choice(words) for _ in range(30)))
            for i in range(20_000)]
    producer = Producer(bootstrap_servers=txn_broker.bootstrap, compression_type="zstd",
                        batch_size=32_768,
                        transactional_id=f"thread-{txn_broker.version}-{time.time_ns()}")
    # Every full batch to the thread, whatever zstd costs the loop on this machine.
    producer._accumulator.offload = CompressorThread(4, 3, 8192)
    async with producer:
        await producer.init_transactions()
        producer.begin_transaction()
        futs = [await producer.send(topic, v, key=k) for k, v in recs]
        await asyncio.wait_for(producer.commit_transaction(), 60)
        metas = [f.result() for f in futs]
        thread = producer._accumulator.offload
        assert thread is not None and thread.compressed >= 5, thread
    got = consume_all(txn_broker.bootstrap, topic, len(recs), isolation="read_committed")
    by_pos = {(m.partition, m.offset): (m.key, m.value) for m in got}
    assert len(by_pos) == len(got) == len(recs)
    assert [by_pos[(m.partition, m.offset)] for m in metas] == recs
    per_partition: dict[int, list[int]] = defaultdict(list)
    for m in metas:
        per_partition[m.partition].append(m.offset)
    assert all(offs == sorted(offs) for offs in per_partition.values())
