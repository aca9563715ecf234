"""Checked by ``mypy --strict`` (see test_mock_producer.py), not run by pytest.

Producer and MockProducer both satisfy ProducerLike, their futures RecordFutureLike;
a class missing part of the API does not (the ``type: ignore`` below would be reported
as unused by ``--strict`` if it did).
"""

from __future__ import annotations

import asyncio

from aioproducer import (
    MetricsSnapshot,
    Producer,
    ProducerLike,
    RecordFuture,
    RecordFutureLike,
    RecordMetadata,
    SendManyResult,
    SendManyResultLike,
)
from aioproducer.testing import MockProducer, MockRecordFuture, MockSendManyResult

real: ProducerLike = Producer(bootstrap_servers="127.0.0.1:9092")
mock: ProducerLike = MockProducer(cluster={"t": 1})
both: list[ProducerLike] = [real, mock]


def takes_future(fut: RecordFutureLike) -> None:
    fut.add_done_callback(lambda f: print(f.done(), f.topic, f.partition))


def check_futures(real_future: RecordFuture, mock_future: MockRecordFuture) -> None:
    takes_future(real_future)
    takes_future(mock_future)
    loop: asyncio.AbstractEventLoop = mock_future.get_loop()
    assert loop is real_future.get_loop()
    assert not (real_future.cancel("why") and mock_future.cancel())
    assert real_future.cancelled() == mock_future.cancelled()


def check_results(real: SendManyResult, mock: MockSendManyResult) -> None:
    results: list[SendManyResultLike] = [real, mock]
    for r in results:
        assert r.failed_count() <= r.count and all(e for _t, _p, e in r.failures())


async def publish(producer: ProducerLike) -> RecordMetadata:
    async with producer as p:
        fut: RecordFutureLike = await p.send("t", b"v", key=b"k", partition=0,
                                             timestamp_ms=1, headers=[("h", b"x")])
        metadata: RecordMetadata = await fut
        assert fut.result() == metadata and fut.exception() is None
        await p.flush(timeout=1.0)
        partitions: list[int] = await p.partitions_for("t")
        assert partitions and not p.closed
        many: SendManyResultLike = await p.send_many("t", [b"a", b"b"], keys=None,
                                                     partition=0, headers=[None, None])
        assert await many == many.count and many.done() and not many.failures()
        metrics: MetricsSnapshot = p.metrics()
        assert metrics["record-send-total"] >= 0 and p.config.linger_ms >= 0
        return await p.send_and_wait("t", b"v")


async def transact(producer: ProducerLike) -> int:
    await producer.init_transactions()
    producer.begin_transaction()
    await producer.send("t", b"v")
    await producer.send_offsets_to_transaction({("in", 0): 10}, "group")
    await producer.commit_transaction()
    async with producer.transaction() as p:
        await p.send("t", b"w")
    producer.begin_transaction()
    await producer.abort_transaction()
    return producer.transaction_sequence + (producer.transaction_version or 0)


class SendOnly:
    """Not a producer: no flush, close, partitions_for..."""

    async def send(self, topic: str, value: object = None) -> RecordMetadata:
        raise NotImplementedError


not_a_producer: ProducerLike = SendOnly()  # type: ignore[assignment]
