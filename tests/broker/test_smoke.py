"""The broker smoke: ``send``, ``send_many``, ``send_and_wait`` and a committed
transaction next to an aborted one, on the test broker, read back by confluent-kafka
field by field. Quick (a few seconds); part of ``make test``, and what
``make other-python V=3.12`` runs on another interpreter."""

from __future__ import annotations

import sys
import time
import uuid
from typing import Any

import pytest
from support.kafka_util import consume_all

from aioproducer import Producer

pytestmark = pytest.mark.asyncio

# Recent timestamps: the brokers' time-based retention (7 days, from the records'
# own timestamps) would delete a segment of older records at its next check.
T0 = (int(time.time()) - 3600) * 1000


async def test_send_send_many_send_and_wait(kafka_bootstrap: str, topic_factory: Any) -> None:
    topic = topic_factory(partitions=2)
    async with Producer(bootstrap_servers=kafka_bootstrap, linger_ms=5) as producer:
        futs = [await producer.send(topic, b"v%d" % i, key=b"k%d" % i, partition=i % 2,
                                    headers=[("py", sys.version.split()[0].encode())],
                                    timestamp_ms=T0 + i) for i in range(200)]
        metas = [await f for f in futs]
        assert await (await producer.send_many(topic, [b"m%d" % i for i in range(300)],
                                               partition=0, timestamp_ms=T0)) == 300
        last = await producer.send_and_wait(topic, b"last", key=b"k", partition=1,
                                            timestamp_ms=T0 + 1000)
    assert [(m.partition, m.offset) for m in metas] == [(i % 2, i // 2) for i in range(200)]
    assert (last.partition, last.offset) == (1, 100)
    consumed = consume_all(kafka_bootstrap, topic, 501, timeout=60)
    by_position = {(c.partition, c.offset): c for c in consumed}
    assert len(consumed) == len(by_position) == 501
    header = [("py", sys.version.split()[0].encode())]
    for i, m in enumerate(metas):
        c = by_position[(m.partition, m.offset)]
        assert (c.key, c.value, c.headers, c.timestamp) == (b"k%d" % i, b"v%d" % i, header,
                                                            T0 + i)
    assert [by_position[(0, 100 + i)].value for i in range(300)] == [b"m%d" % i
                                                                     for i in range(300)]
    c = by_position[(1, 100)]
    assert (c.key, c.value, c.headers, c.timestamp) == (b"k", b"last", [], T0 + 1000)


async def test_transaction_committed_and_aborted(kafka_bootstrap: str,
                                                 topic_factory: Any) -> None:
    topic = topic_factory(partitions=1)
    async with Producer(bootstrap_servers=kafka_bootstrap, linger_ms=5,
                        transactional_id=f"smoke-{uuid.uuid4().hex[:10]}") as producer:
        await producer.init_transactions()
        async with producer.transaction():
            for i in range(100):
                await producer.send(topic, b"c%d" % i, key=b"k")
            await producer.send_many(topic, [b"cm%d" % i for i in range(100)])
        producer.begin_transaction()
        aborted = [await producer.send(topic, b"a%d" % i) for i in range(20)]
        await producer.flush()
        assert all(f.done() for f in aborted)
        await producer.abort_transaction()
    committed = consume_all(kafka_bootstrap, topic, 200, timeout=60,
                            isolation="read_committed")
    assert [c.value for c in committed] == ([b"c%d" % i for i in range(100)]
                                            + [b"cm%d" % i for i in range(100)])
    everything = consume_all(kafka_bootstrap, topic, 220, timeout=60)
    assert [c.value for c in everything if c.value and c.value.startswith(b"a")] == [
        b"a%d" % i for i in range(20)]
