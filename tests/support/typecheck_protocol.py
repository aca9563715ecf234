"""Checked by ``mypy --strict`` (see test_mock_producer.py), not run by pytest.

Producer and MockProducer both satisfy ProducerLike, their futures RecordFutureLike;
a class missing part of the API does not (the ``type: ignore`` below would be reported
as unused by ``--strict`` if it did).
"""

from __future__ import annotations

from aioproducer import Producer, RecordFuture, RecordMetadata
from aioproducer.protocols import ProducerLike, RecordFutureLike
from aioproducer.testing import MockProducer, MockRecordFuture

real: ProducerLike = Producer(bootstrap_servers="127.0.0.1:9092")
mock: ProducerLike = MockProducer(cluster={"t": 1})
both: list[ProducerLike] = [real, mock]


def takes_future(fut: RecordFutureLike) -> None:
    fut.add_done_callback(lambda f: print(f.done(), f.topic, f.partition))


def check_futures(real_future: RecordFuture, mock_future: MockRecordFuture) -> None:
    takes_future(real_future)
    takes_future(mock_future)


async def publish(producer: ProducerLike) -> RecordMetadata:
    async with producer as p:
        fut: RecordFutureLike = await p.send("t", b"v", key=b"k", partition=0,
                                             timestamp_ms=1, headers=[("h", b"x")])
        metadata: RecordMetadata = await fut
        assert fut.result() == metadata and fut.exception() is None
        await p.flush(timeout=1.0)
        partitions: list[int] = await p.partitions_for("t")
        assert partitions and not p.closed
        return await p.send_and_wait("t", b"v")


class SendOnly:
    """Not a producer: no flush, close, partitions_for..."""

    async def send(self, topic: str, value: object = None) -> RecordMetadata:
        raise NotImplementedError


not_a_producer: ProducerLike = SendOnly()  # type: ignore[assignment]
