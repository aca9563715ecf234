"""Injected faults between the producer and the real broker (aioproducer.testing.faultproxy)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from support.delivery_util import check, decode, encode, settle
from support.kafka_util import Consumed, consume_all

from aioproducer import Producer
from aioproducer.errors import MessageTooLargeError
from aioproducer.testing.faultproxy import ProxyCluster

pytestmark = pytest.mark.asyncio

PRODUCE = 0
WARM_UP = b"warm-up"


def without_warm_up(consumed: list[Consumed]) -> list[Consumed]:
    return [m for m in consumed if m.value != WARM_UP]


async def stream(producer: Producer, topic: str, n: int, *, keys: int = 8,
                 pause_every: int = 500) -> tuple[list[bytes | None], list[Any]]:
    futs = []
    sent_keys: list[bytes | None] = []
    for i in range(n):
        key = f"k{i % keys}".encode()
        futs.append(await producer.send(topic, encode(i), key=key))
        sent_keys.append(key)
        if i % pause_every == 0:
            await asyncio.sleep(0.005)
    return sent_keys, await settle(futs)


async def test_lost_acks_cause_no_duplicates(kafka_bootstrap: str, topic_factory: Any) -> None:
    topic = topic_factory(partitions=3)
    n = 20_000
    async with ProxyCluster.start(kafka_bootstrap) as proxies, \
            Producer(bootstrap_servers=proxies.bootstrap, linger_ms=2) as producer:
        await producer.send_and_wait(topic, WARM_UP, partition=0)  # producer id, metadata
        for proxy in proxies.proxies.values():
            # The broker writes these batches, but their acks never come back.
            proxy.drop_after_request(PRODUCE, count=4)
        keys, results = await stream(producer, topic, n)
        dropped = sum(p.stats["responses_dropped"] for p in proxies.proxies.values())
    consumed = without_warm_up(consume_all(kafka_bootstrap, topic, n + 1))
    outcome = check(keys, results, consumed)
    print(f"\nlost acks ({dropped} responses dropped): {outcome.line()}")
    assert dropped >= 1, "no ack was lost: the test proved nothing"
    assert outcome.duplicated == 0 and outcome.lost == 0 and outcome.out_of_order == 0
    assert outcome.failed == 0
    # The offsets the producer reported are where the records really are.
    where = {decode(m.value): (m.partition, m.offset) for m in consumed}
    for i, meta in enumerate(results):
        assert where[i] == (meta.partition, meta.offset)


async def test_request_timeout_is_retried(kafka_bootstrap: str, topic_factory: Any) -> None:
    topic = topic_factory(partitions=1)
    async with ProxyCluster.start(kafka_bootstrap) as proxies, \
            Producer(bootstrap_servers=proxies.bootstrap, request_timeout_ms=1500,
                     delivery_timeout_ms=30_000) as producer:
        await producer.send_and_wait(topic, encode(0))
        for proxy in proxies.proxies.values():
            proxy.delay_responses(PRODUCE, 4.0, count=2)  # past request_timeout_ms
        metas = await settle([await producer.send(topic, encode(i)) for i in range(1, 2001)])
    assert all(not isinstance(m, BaseException) for m in metas), metas[:1]
    consumed = consume_all(kafka_bootstrap, topic, 2001)
    assert [decode(m.value) for m in consumed] == list(range(2001))


async def test_order_kept_without_idempotence_with_one_in_flight(
        kafka_bootstrap: str, topic_factory: Any) -> None:
    topic = topic_factory(partitions=2)
    n = 10_000
    async with ProxyCluster.start(kafka_bootstrap) as proxies, \
            Producer(bootstrap_servers=proxies.bootstrap, acks=1, enable_idempotence=False,
                     max_in_flight_requests_per_connection=1, linger_ms=2,
                     retry_backoff_ms=20) as producer:
        await producer.send_and_wait(topic, WARM_UP, partition=0)
        for proxy in proxies.proxies.values():
            proxy.drop_after_request(PRODUCE, count=3)  # written, but the ack is lost
        keys, results = await stream(producer, topic, n, keys=4)
        dropped = sum(p.stats["responses_dropped"] for p in proxies.proxies.values())
    consumed = without_warm_up(consume_all(kafka_bootstrap, topic, n + 1))
    outcome = check(keys, results, consumed, allow_duplicates=True)
    print(f"\nno idempotence, max_in_flight=1 ({dropped} acks lost): {outcome.line()}")
    assert dropped >= 1
    assert outcome.failed == 0 and outcome.lost == 0
    assert outcome.out_of_order == 0  # duplicates are possible here, reordering is not


async def test_fatal_batch_error_bumps_epoch_and_the_producer_goes_on(
        kafka_bootstrap: str, topic_factory: Any) -> None:
    topic = topic_factory(partitions=1, config={"max.message.bytes": "4000"})
    # batch_size under the topic's max.message.bytes: only the big record's batch is refused.
    async with Producer(bootstrap_servers=kafka_bootstrap, linger_ms=0,
                        batch_size=2000) as producer:
        first = [await producer.send(topic, encode(i)) for i in range(200)]
        await asyncio.gather(*first)
        pid = producer._sender.pid  # type: ignore[union-attr]
        assert pid is not None
        before = (pid.producer_id, pid.epoch)
        big = await producer.send(topic, encode(200, 10_000))  # over the topic's limit
        after = [await producer.send(topic, encode(i)) for i in range(201, 400)]
        results = await settle([*first, big, *after])
        epoch_after_failure = (pid.producer_id, pid.epoch)
        assert epoch_after_failure != before
        last = await producer.send_and_wait(topic, encode(400))
    assert isinstance(results[200], MessageTooLargeError)
    failed = [i for i, r in enumerate(results) if isinstance(r, BaseException)]
    assert all(isinstance(results[i], MessageTooLargeError) for i in failed)
    # Only the big record's batch failed: records sent after it were written, in order,
    # under a new producer epoch (KIP-360) instead of a wedged producer.
    assert any(not isinstance(r, BaseException) for r in results[201:])
    consumed = consume_all(kafka_bootstrap, topic, 401 - len(failed))
    got = [decode(m.value) for m in consumed]
    assert got == sorted(set(range(401)) - set(failed))
    assert last.offset == len(consumed) - 1
    print(f"\nfailed records: {len(failed)}, producer id/epoch after: {epoch_after_failure}")


async def test_first_batch_of_a_partition_is_alone_in_flight(kafka_bootstrap: str,
                                                             topic_factory: Any) -> None:
    """Until a partition's first batch is acknowledged, nothing else is pipelined behind
    it: a broker with no state for the producer id would accept a later sequence first
    (KIP-360) if the first batch failed, and that gap could never be closed."""
    topic = topic_factory(partitions=1)
    async with ProxyCluster.start(kafka_bootstrap) as proxies, \
            Producer(bootstrap_servers=proxies.bootstrap, linger_ms=0,
                     batch_size=1024) as producer:
        for proxy in proxies.proxies.values():
            proxy.delay_responses(PRODUCE, 1.0, count=1)  # hold the first ack
        futs = []
        for i in range(2000):
            futs.append(await producer.send(topic, encode(i)))
            if i % 100 == 0:
                await asyncio.sleep(0.01)  # ~0.2 s of sending, all before the ack
        assert proxies.requests(PRODUCE) == 1, "a batch was pipelined behind the first"
        await settle(futs)
        assert proxies.requests(PRODUCE) > 5  # afterwards, batches are pipelined again
    consumed = consume_all(kafka_bootstrap, topic, 2000)
    assert [decode(m.value) for m in consumed] == list(range(2000))


async def test_batches_queued_behind_a_lost_ack_go_out_with_linger_0(
        kafka_bootstrap: str, topic_factory: Any) -> None:
    """linger_ms=0: a new batch that waits for its partition's request in flight does
    not wake the Sender, the answer does. Here the answer is lost (the broker wrote the
    batch, the connection drops when its ack arrives): the failure must wake the Sender
    just the same, and every record, queued or retried, lands once and in order."""
    topic = topic_factory(partitions=1)
    n = 600
    async with ProxyCluster.start(kafka_bootstrap) as proxies, \
            Producer(bootstrap_servers=proxies.bootstrap, linger_ms=0) as producer:
        await producer.send_and_wait(topic, WARM_UP)
        for proxy in proxies.proxies.values():
            proxy.drop_after_request(PRODUCE, count=2)
        keys, results = await stream(producer, topic, n, keys=1, pause_every=20)
        dropped = sum(p.stats["responses_dropped"] for p in proxies.proxies.values())
    consumed = without_warm_up(consume_all(kafka_bootstrap, topic, n + 1))
    outcome = check(keys, results, consumed)
    print(f"\nlinger 0, {dropped} acks lost: {outcome.line()}")
    assert dropped >= 1, "no ack was lost: the test proved nothing"
    assert outcome.failed == 0 and outcome.lost == 0
    assert outcome.duplicated == 0 and outcome.out_of_order == 0


async def test_local_epoch_bump_sends_no_init_producer_id(kafka_bootstrap: str,
                                                          topic_factory: Any) -> None:
    """A partition that needs new sequences gets them under a local epoch bump (same
    producer id, epoch + 1): no InitProducerId round trip, and the broker takes the
    new epoch from sequence 0. (An InitProducerId without a transactional id hands out
    a new producer id, and the broker cannot deduplicate across ids.)"""
    topic = topic_factory()
    async with ProxyCluster.start(kafka_bootstrap) as proxies, \
            Producer(bootstrap_servers=proxies.bootstrap, linger_ms=0) as producer:
        await producer.send_and_wait(topic, b"first")
        sender = producer._sender
        assert sender is not None and sender.pid is not None
        pid = sender.pid
        before = proxies.requests(22)
        old = (pid.producer_id, pid.partitions[(topic, 0)].epoch)
        pid.request_bump((topic, 0), pid.partitions[(topic, 0)].next_sequence)
        loop = asyncio.get_running_loop()
        sender.run_once(loop.time())
        sender.run_once(loop.time())
        await producer.send_and_wait(topic, b"second")
        entry = pid.partitions[(topic, 0)]
        assert proxies.requests(22) - before == 0
        assert (pid.producer_id, entry.epoch) == (old[0], old[1] + 1)
        assert entry.last_acked == 0  # "second" went out as sequence 0 of the new epoch
    got = consume_all(kafka_bootstrap, topic, 2)
    assert [r.value for r in got] == [b"first", b"second"]


@pytest.mark.parametrize("callers", [1, 8])
async def test_send_and_wait_at_the_defaults_through_lost_acks_and_timeouts(
        kafka_bootstrap: str, topic_factory: Any, callers: int) -> None:
    """send_and_wait() at the defaults (idempotence, acks=all, linger 5 ms), by one
    caller (whose batch the pass writes alone, in the caller's own turn of the loop)
    and by eight at once (who share batches): acks lost after the broker wrote the
    batch, and answers held past request_timeout_ms. Every record is acknowledged,
    read back by an independent consumer exactly once, in each caller's order, at the
    offset the producer reported."""
    topic = topic_factory(partitions=2)
    per_caller = 150
    async with ProxyCluster.start(kafka_bootstrap) as proxies, \
            Producer(bootstrap_servers=proxies.bootstrap, request_timeout_ms=1500,
                     delivery_timeout_ms=60_000, retry_backoff_ms=20) as producer:
        assert producer.config.linger_ms == 5 and producer.config.enable_idempotence
        await producer.send_and_wait(topic, WARM_UP, partition=0)
        for proxy in proxies.proxies.values():
            proxy.drop_after_request(PRODUCE, count=3)  # written; the ack never comes
        results: list[Any] = [None] * (callers * per_caller)
        keys: list[bytes | None] = [None] * (callers * per_caller)

        async def caller(c: int) -> None:
            key = f"caller-{c}".encode()
            for j in range(per_caller):
                i = c * per_caller + j
                keys[i] = key
                if j == per_caller // 2 and c == 0:
                    for proxy in proxies.proxies.values():
                        proxy.delay_responses(PRODUCE, 2.5, count=2)  # past the timeout
                try:
                    results[i] = await producer.send_and_wait(topic, encode(i), key)
                except Exception as exc:  # kept, and counted as failed below
                    results[i] = exc

        await asyncio.wait_for(asyncio.gather(*(caller(c) for c in range(callers))), 120)
        dropped = sum(p.stats["responses_dropped"] for p in proxies.proxies.values())
        # A proxy whose delay rule is gone held its two responses past the timeout.
        held = sum(PRODUCE not in p._delay_rules for p in proxies.proxies.values())
    consumed = without_warm_up(consume_all(kafka_bootstrap, topic,
                                           callers * per_caller + 1))
    outcome = check(keys, results, consumed)
    print(f"\nsend_and_wait x{callers} ({dropped} acks lost, {held} proxies held "
          f"answers): {outcome.line()}")
    assert dropped >= 1, "no ack was lost: the test proved nothing"
    assert held >= 1, "no answer was held past the timeout: the test proved nothing"
    assert outcome.failed == 0, [r for r in results if isinstance(r, BaseException)][:1]
    assert outcome.duplicated == 0 and outcome.lost == 0 and outcome.out_of_order == 0
    where = {decode(m.value): (m.partition, m.offset) for m in consumed}
    for i, meta in enumerate(results):
        assert where[i] == (meta.partition, meta.offset)
