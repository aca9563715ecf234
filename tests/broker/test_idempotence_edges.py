"""Idempotence at its edges, on the real broker, read back by confluent-kafka: a
partition whose epoch runs out (32,767 local bumps) while batches wait behind a gap
moves them to a new producer id at once (Java's ``resetIdempotentProducerId``),
instead of resending them under the spent epoch until ``delivery_timeout_ms``."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from support.kafka_util import consume_all

from aioproducer import Producer
from aioproducer.errors import BrokerResponseError
from aioproducer.testing.faultproxy import ProxyCluster

pytestmark = pytest.mark.asyncio

_PRODUCE = 0
_MAX_EPOCH = 2**15 - 1


async def test_batches_behind_a_gap_move_to_a_new_producer_id_when_the_epoch_runs_out(
        kafka_bootstrap: str, topic_factory: Any) -> None:
    topic = topic_factory(config={"max.message.bytes": "2000"})
    tp = (topic, 0)
    async with ProxyCluster.start(kafka_bootstrap) as proxies, \
            Producer(bootstrap_servers=proxies.bootstrap, linger_ms=5, batch_size=1024,
                     delivery_timeout_ms=20_000, request_timeout_ms=5_000) as p:
        await p.send_and_wait(topic, b"r0", partition=0)
        sender = p._sender
        assert sender is not None and sender.pid is not None
        pid = sender.pid
        first_id = pid.producer_id
        # As after 32,767 local bumps on this partition: its last epoch, sequence 0.
        e = pid.partitions[tp]
        e.epoch, e.next_sequence, e.last_acked = _MAX_EPOCH, 0, -1
        pid.epoch = _MAX_EPOCH
        await p.send_and_wait(topic, b"r1", partition=0)  # the broker takes the epoch
        # A record the broker refuses (over max.message.bytes: a gap in the sequences),
        # and records right behind it, in flight at the same time (the answer to the
        # first is held back, so the second request goes out before it comes).
        proxy = proxies.proxy_for_node(next(iter(proxies.proxies)))
        proxy.delay_responses(_PRODUCE, 0.3, count=1)
        big = await p.send(topic, b"B" * 3000, partition=0)
        await asyncio.sleep(0.05)  # (its own request)
        # (More than a batch: a full batch is not held back behind the request in
        # flight, so it goes out, with its sequence, before the refusal comes.)
        behind = [await p.send(topic, b"s%03d-" % i + b"x" * 40, partition=0)
                  for i in range(60)]
        with pytest.raises(BrokerResponseError):
            await big
        started = time.monotonic()
        metas = await asyncio.wait_for(asyncio.gather(*behind), 10.0)
        took = time.monotonic() - started
        assert pid.producer_id != first_id  # a new producer id, not the spent epoch
        print(f"acknowledged {took:.2f} s after the gap, producer id {first_id} -> "
              f"{pid.producer_id}")
    got = consume_all(kafka_bootstrap, topic, 62)
    assert [r.value for r in got] == [b"r0", b"r1"] + [
        b"s%03d-" % i + b"x" * 40 for i in range(60)]
    assert [m.offset for m in metas] == [r.offset for r in got[2:]]
