"""Exactly-once delivery under faults, by the Java KafkaProducer's rules (real broker).

Each test drives one fault path through the producer and a real local Kafka broker
(through aioproducer.testing.faultproxy where a fault is injected) and checks, with an
independent client (confluent-kafka, ``kafka_util.consume_all``), that every record
the producer acknowledged is in the log exactly once and in order, that failures are
the ones the Java producer reports, and that the producer neither hangs nor stalls
other partitions while one recovers.

The behaviour expected is the Java producer's (``Sender``/``TransactionManager``/
``RecordAccumulator``, Kafka 3.x+):

* a batch whose outcome is unknown (sent, no response) keeps its producer id, epoch
  and sequence until it is resolved: it is never renumbered;
* an idempotent (non-transactional) producer bumps its epoch *locally* after a batch
  failed for good (KIP-360): no InitProducerId request, and a partition moves to the
  new epoch (sequence 0) only once it has nothing in flight or unresolved;
* OUT_OF_ORDER_SEQUENCE_NUMBER on the next expected batch is retried (with such an
  epoch bump) instead of failing the records;
* a compressed batch refused with MESSAGE_TOO_LARGE is split and resent;
* batches in flight expire at ``delivery_timeout_ms`` (counted from their creation);
* KIP-467: the invalid record gets the broker's error, the other records of its batch
  a generic "part of a batch with invalid records" error.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import random
import re
import time
from typing import Any, cast

import pytest
from support.delivery_util import check, decode, encode, settle
from support.kafka_util import Consumed, consume_all
from support.produce_response import (
    AnsweringProxy,
    AnsweringProxyCluster,
    cap_api_version,
    rewrite_produce_errors,
)

import aioproducer.sender
from aioproducer import KafkaError, Producer, RecordMetadata
from aioproducer.errors import (
    BrokerResponseError,
    DeliveryTimeoutError,
    InvalidRecordError,
    UnsupportedVersionError,
)
from aioproducer.testing.faultproxy import ProxyCluster

pytestmark = pytest.mark.asyncio

PRODUCE = 0
API_VERSIONS = 18
INIT_PRODUCER_ID = 22
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
NOT_ENOUGH_REPLICAS = 19
WARM_UP = b"warm-up"
BOUND = 10.0  # seconds: every await on the producer is bounded by this
# A failing test must not wait the default delivery_timeout_ms (2 min) in close().
BOUNDED: dict[str, Any] = {"request_timeout_ms": 8000, "delivery_timeout_ms": 15000}


def without_warm_up(consumed: list[Consumed]) -> list[Consumed]:
    return [m for m in consumed if m.value != WARM_UP]


def assert_exactly_once_in_order(consumed: list[Consumed], expected: list[int],
                                 what: str) -> None:
    got = [decode(m.value) for m in consumed]
    dups = len(got) - len(set(got))
    missing = sorted(set(expected) - set(got))
    assert dups == 0, (f"{what}: {dups} duplicated record(s) in the log, e.g. "
                       f"{[i for i in got if got.count(i) > 1][:10]}")
    assert not missing, f"{what}: {len(missing)} record(s) missing, e.g. {missing[:10]}"
    assert got == expected, f"{what}: records out of order in the log"


async def wait_until(cond: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.002)


class AckStream:
    """Sends one record to ``topic`` every ``interval`` seconds and records when each
    acknowledgement arrived (a done callback), until stopped."""

    def __init__(self, producer: Producer, topic: str, interval: float = 0.01) -> None:
        self.producer = producer
        self.topic = topic
        self.interval = interval
        self.futs: list[Any] = []
        self.acked_at: dict[int, float] = {}
        self.sent_at: list[float] = []
        self._stop = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            fut = await self.producer.send(self.topic, encode(i))
            self.sent_at.append(time.monotonic())
            fut.add_done_callback(self._acked(i))
            self.futs.append(fut)
            i += 1
            await asyncio.sleep(self.interval)

    def _acked(self, i: int) -> Any:
        def done(_fut: Any) -> None:
            self.acked_at.setdefault(i, time.monotonic())
        return done

    async def stop(self) -> list[Any]:
        self._stop.set()
        assert self.task is not None
        await asyncio.wait_for(self.task, BOUND)
        return await asyncio.wait_for(settle(self.futs), 3 * BOUND)

    def acks_between(self, start: float, end: float) -> list[float]:
        return sorted(t for t in self.acked_at.values() if start <= t <= end)

    def longest_gap(self, start: float, end: float) -> float:
        """Longest time without an acknowledgement within [start, end]."""
        times = [start, *self.acks_between(start, end), end]
        return max(b - a for a, b in itertools.pairwise(times))


# -- 1 -------------------------------------------------------------------------------


async def test_unknown_outcome_is_never_renumbered(kafka_bootstrap: str,
                                                   topic_factory: Any) -> None:
    """Five Produce requests of partition P are written by the broker but their
    responses are lost (the connection drops): their outcome is unknown. While they
    wait for their retry, a record to another topic fails for good (INVALID_RECORD:
    null key on a compacted topic). Proves: P's unresolved batches are resent with
    their original epoch and sequences (the broker recognises them as duplicates), so
    every record of P is in the log exactly once and in order; the failure bumps the
    epoch locally (no InitProducerId after the warm-up); the poison record gets
    InvalidRecordError; a third topic keeps getting acks while P recovers."""
    p_topic = topic_factory(partitions=1)
    q_topic = topic_factory(partitions=1, config={"cleanup.policy": "compact"})
    c_topic = topic_factory(partitions=1)
    n = 300
    async with ProxyCluster.start(kafka_bootstrap) as proxies, \
            Producer(bootstrap_servers=proxies.bootstrap, linger_ms=0, batch_size=1024,
                     retry_backoff_ms=1500, retry_backoff_max_ms=1500,
                     **BOUNDED) as producer:
        await asyncio.wait_for(producer.send_and_wait(p_topic, WARM_UP), BOUND)
        await asyncio.wait_for(producer.send_and_wait(q_topic, WARM_UP, key=b"k"), BOUND)
        await asyncio.wait_for(producer.send_and_wait(c_topic, encode(10**6)), BOUND)
        inits_after_warm_up = proxies.requests(INIT_PRODUCER_ID)
        produce_before = proxies.requests(PRODUCE)
        # Hold every Produce response so that 5 requests of P are in flight at once,
        # all forwarded to (and written by) the broker; then lose their responses.
        for proxy in proxies.proxies.values():
            proxy.delay_responses(PRODUCE, 5.0)
        p_futs = []
        for i in range(n):
            p_futs.append(await producer.send(p_topic, encode(i, 100)))
            if i % 20 == 0:
                await asyncio.sleep(0.001)
        await wait_until(lambda: proxies.requests(PRODUCE) - produce_before >= 5, BOUND,
                         "5 Produce requests of P in flight")
        await asyncio.sleep(0.5)  # the broker has written them (their responses are held)
        in_flight_p = proxies.requests(PRODUCE) - produce_before
        t_drop = time.monotonic()
        proxies.clear_faults()
        proxies.drop_connections()  # the held responses are lost
        p_done: list[float] = []
        for f in p_futs:
            f.add_done_callback(lambda _f: p_done.append(time.monotonic()))
        c_stream = AckStream(producer, c_topic)
        c_stream.start()
        poison = await producer.send(q_topic, b"poison", key=None)  # INVALID_RECORD
        poison_result = (await asyncio.wait_for(settle([poison]), BOUND))[0]
        p_results = await asyncio.wait_for(settle(p_futs), 3 * BOUND)
        await asyncio.sleep(0.2)
        c_results = await c_stream.stop()
        inits = proxies.requests(INIT_PRODUCER_ID) - inits_after_warm_up
    t_p_done = max(p_done) if p_done else time.monotonic()
    print(f"\nP requests in flight when the responses were lost: {in_flight_p}; "
          f"InitProducerId after warm-up: {inits}; poison: {poison_result!r}")
    assert in_flight_p == 5, "expected exactly 5 Produce requests of P in flight"
    assert isinstance(poison_result, InvalidRecordError), poison_result
    failed = [(i, r) for i, r in enumerate(p_results) if isinstance(r, BaseException)]
    assert not failed, f"{len(failed)} record(s) of P failed, first: {failed[0]!r}"
    consumed = without_warm_up(consume_all(kafka_bootstrap, p_topic, n))
    assert_exactly_once_in_order(consumed, list(range(n)), "partition P")
    assert inits == 0, f"{inits} InitProducerId request(s) after the warm-up"
    assert all(isinstance(r, RecordMetadata) for r in c_results), \
        [r for r in c_results if not isinstance(r, RecordMetadata)][:1]
    during = c_stream.acks_between(t_drop, t_p_done)
    print(f"P recovered {t_p_done - t_drop:.2f} s after the drop; acks of the third "
          f"topic meanwhile: {len(during)}")
    assert len(during) >= 5, (f"the third topic got {len(during)} ack(s) in the "
                              f"{t_p_done - t_drop:.2f} s P took to recover")


# -- 2 -------------------------------------------------------------------------------


@pytest.mark.asyncio(loop_factories=["asyncio"])
async def test_message_too_large_batch_is_split(kafka_bootstrap: str,
                                                topic_factory: Any) -> None:
    """A zstd producer learns that a topic's records compress very well, so its
    batches hold far more than max.message.bytes of uncompressed data; then records
    that do not compress arrive and a batch comes out over the topic's
    max.message.bytes (65536). Proves: a batch refused with MESSAGE_TOO_LARGE is split
    and resent (Java's splitAndReenqueue) -- all 44,000 records delivered, in order,
    none duplicated, none failed."""
    seed = int.from_bytes(os.urandom(4), "big")
    print(f"\nseed={seed}")
    rng = random.Random(seed)
    topic = topic_factory(partitions=1, config={"max.message.bytes": "65536"})
    values: list[bytes] = []
    for _round in range(2):
        for _ in range(20_000):
            values.append(encode(len(values), 1024))
        for _ in range(2_000):
            values.append(len(values).to_bytes(8, "big") + rng.randbytes(1016))
    n = len(values)
    async with Producer(bootstrap_servers=kafka_bootstrap, compression_type="zstd") as producer:
        futs = []
        for i, v in enumerate(values):
            futs.append(await producer.send(topic, v))
            if i % 2000 == 0:
                await asyncio.sleep(0)
        results = await asyncio.wait_for(settle(futs), 120)
    failed = [(i, r) for i, r in enumerate(results) if isinstance(r, BaseException)]
    types = sorted({type(r).__name__ for _, r in failed})
    assert not failed, (f"{len(failed)} of {n} record(s) failed ({types}), first: "
                        f"#{failed[0][0]} {failed[0][1]!r}")
    consumed = consume_all(kafka_bootstrap, topic, n, timeout=90)
    assert_exactly_once_in_order(consumed, list(range(n)), "zstd topic")


@pytest.mark.parametrize("codec", ["none", "lz4"])
async def test_oversized_record_among_small_ones_fails_alone(kafka_bootstrap: str,
                                                             topic_factory: Any,
                                                             codec: str) -> None:
    """One record over the topic's max.message.bytes (2,000) but under
    max.request.size, followed by tiny ones, in a lingering batch shared by two
    send_many() calls and ten send()s. Proves: the refused batch is split until the big
    record is alone (its piece, sized for it, used to take the tiny record after it in
    the slack of its size bound, so that piece was the refused batch again and was
    split into itself for ever: a Produce loop, then a C stack overflow); only that
    record fails, with MESSAGE_TOO_LARGE; a call whose own records all landed
    succeeds although its batch was split; everything else is in the log once, in
    order. (Values are the send index in ASCII: a few bytes, small enough to fit that
    slack.)"""
    topic = topic_factory(partitions=1, config={"max.message.bytes": "2000"})
    big = random.Random(11).randbytes(5000)  # incompressible
    async with Producer(bootstrap_servers=kafka_bootstrap, linger_ms=200,
                        compression_type=codec) as producer:
        first = await producer.send_many(topic, [b"%d" % i for i in range(10)])
        second = await producer.send_many(
            topic, [big if i == 13 else b"%d" % i for i in range(10, 20)])
        singles = [await producer.send(topic, b"%d" % i) for i in range(20, 30)]
        results = await asyncio.wait_for(
            asyncio.gather(first, second, *singles, return_exceptions=True), 30)
    assert results[0] == 10
    assert isinstance(results[1], KafkaError) and "MESSAGE_TOO_LARGE" in str(results[1])
    assert first.failures() == [] and len(second.failures()) == 1
    assert (first.failed_count(), second.failed_count()) == (0, 1)
    assert all(isinstance(r, RecordMetadata) for r in results[2:]), results[2:]
    expected = [i for i in range(30) if i != 13]
    consumed = consume_all(kafka_bootstrap, topic, len(expected), timeout=30)
    assert [int(m.value or b"-1") for m in consumed] == expected


async def test_send_many_does_not_answer_for_a_send_made_while_it_waited(
        kafka_bootstrap: str, topic_factory: Any) -> None:
    """A keyed send_many() writes into partition 1's open batch, then waits (its
    partition-0 batch is full: the Python path yields once per new batch with
    linger_ms), and meanwhile another task's send() of a record over the topic's
    max.message.bytes lands in that same partition-1 batch. The batch is refused and
    split; only the other record fails. The call wrote all of its records, so it
    succeeds: its span of the batch ends where its own records end (it used to run to
    the batch's end when the call returned, taking in the other task's record)."""
    from aioproducer._native.murmur2 import murmur2_partition

    topic = topic_factory(partitions=2, config={"max.message.bytes": "2000"})
    key0 = next(k for k in (b"k%d" % i for i in range(100)) if murmur2_partition(k, 2) == 0)
    key1 = next(k for k in (b"k%d" % i for i in range(100)) if murmur2_partition(k, 2) == 1)
    big = random.Random(5).randbytes(2500)  # fits the batch, not the topic
    async with Producer(bootstrap_servers=kafka_bootstrap, linger_ms=200, batch_size=4000,
                        **BOUNDED) as producer:
        await producer.send_and_wait(topic, WARM_UP, partition=0)  # metadata known
        # Let the Sender finish whatever the warm-up's answer woke it for and park on
        # its timer: a Sender step already queued when the other task is created would
        # run before it at send_many's yield and drain partition 1's batch (holding
        # only the call's first record) before the other record could join it.
        await asyncio.sleep(0.05)
        other = asyncio.create_task(producer.send(topic, big, partition=1))
        result = await producer.send_many(topic, [b"x" * 50] * 150,
                                          [key1] + [key0] * 149)
        intruder = await other
        # the scenario: the other record is in the call's partition-1 batch
        assert intruder.batch in [b for b, _lo, _hi in result._spans], "not interleaved"
        outcome = await asyncio.wait_for(
            asyncio.gather(result, intruder, return_exceptions=True), BOUND * 3)
    assert isinstance(outcome[1], KafkaError) and "MESSAGE_TOO_LARGE" in str(outcome[1])
    assert outcome[0] == 150, outcome[0]
    assert result.failures() == [] and result.failed_count() == 0


# -- 3 -------------------------------------------------------------------------------


async def test_out_of_order_sequence_on_next_batch_is_retried(kafka_bootstrap: str,
                                                              topic_factory: Any) -> None:
    """The proxy answers one Produce request itself, without forwarding it, with
    OUT_OF_ORDER_SEQUENCE_NUMBER for the partition -- for the batch the broker expects
    next (every earlier response was delivered first). The broker never wrote it;
    requests pipelined behind it then get a real OUT_OF_ORDER_SEQUENCE_NUMBER from
    the broker. Proves: the Java producer's rule for the idempotent producer -- retry
    (bumping the epoch locally, no InitProducerId), never fail the records: every
    record delivered exactly once, in order, no failures."""
    topic = topic_factory(partitions=1)
    n = 2000
    async with AnsweringProxyCluster.start(kafka_bootstrap) as proxies, \
            Producer(bootstrap_servers=proxies.bootstrap, linger_ms=0,
                     batch_size=1024, **BOUNDED) as producer:
        await asyncio.wait_for(producer.send_and_wait(topic, WARM_UP), BOUND)
        inits_after_warm_up = proxies.requests(INIT_PRODUCER_ID)
        answering = [cast(AnsweringProxy, p) for p in proxies.proxies.values()]
        for proxy in answering:
            proxy.answer_produce(OUT_OF_ORDER_SEQUENCE_NUMBER, skip=3)
        futs = []
        for i in range(n):
            futs.append(await producer.send(topic, encode(i, 100)))
            if i % 50 == 0:
                await asyncio.sleep(0.002)
        results = await asyncio.wait_for(settle(futs), 3 * BOUND)
        answered = sum(len(p.answered) for p in answering)
        inits = proxies.requests(INIT_PRODUCER_ID) - inits_after_warm_up
    print(f"\nrequests answered OUT_OF_ORDER_SEQUENCE_NUMBER by the proxy: {answered}; "
          f"InitProducerId after warm-up: {inits}")
    assert answered == 1, "the proxy did not answer a Produce request: nothing was tested"
    failed = [(i, r) for i, r in enumerate(results) if isinstance(r, BaseException)]
    assert not failed, (f"{len(failed)} record(s) failed, first: #{failed[0][0]} "
                        f"{failed[0][1]!r}")
    consumed = without_warm_up(consume_all(kafka_bootstrap, topic, n))
    assert_exactly_once_in_order(consumed, list(range(n)), "topic")
    assert inits == 0, f"{inits} InitProducerId request(s) after the warm-up"


# -- 4 -------------------------------------------------------------------------------


async def _sender_failure_does_not_hang(producer: Producer, topic: str, *,
                                        restore: Any = None) -> None:
    """The records pending when the Sender fails fail with a KafkaError within seconds,
    flush() returns, and a later send() is refused at once with a KafkaError.

    ``restore`` (undoes the injected fault) also allows a producer that contained the
    failure to the batches that hit it: the later send() may then return a future, which
    must fail with a KafkaError within seconds (the fault is still there), and once the
    fault is gone a record must be delivered."""
    futs = [await producer.send(topic, encode(i)) for i in range(100)]
    started = time.monotonic()
    try:
        results = await asyncio.wait_for(settle(futs), 5)
    except asyncio.TimeoutError:
        pending = sum(1 for f in futs if not f.done())
        raise AssertionError(f"{pending} of 100 record futures still pending after 5 s: "
                             "the producer hangs") from None
    not_kafka = [r for r in results if not isinstance(r, KafkaError)]
    assert not not_kafka, f"expected every record to fail with a KafkaError: {not_kafka[:1]!r}"
    try:
        await asyncio.wait_for(producer.flush(), BOUND)
    except KafkaError:
        pass
    except asyncio.TimeoutError:
        raise AssertionError("flush() hangs after the Sender failed") from None
    print(f"\nfutures failed after {time.monotonic() - started:.2f} s: {results[0]!r}")
    t0 = time.monotonic()
    try:
        later = await asyncio.wait_for(producer.send(topic, b"later"), 2)
    except KafkaError as exc:
        took = time.monotonic() - t0
        print(f"later send() raised after {took:.3f} s: {exc!r}")
        assert took < 0.5, f"send() took {took:.2f} s to refuse the record"
        return
    except asyncio.TimeoutError:
        raise AssertionError("a send() after the Sender failed hangs") from None
    if restore is None:
        raise AssertionError("send() after the Sender failed returned a future instead of "
                             "raising a KafkaError: the record would never be sent")
    try:
        result = (await asyncio.wait_for(settle([later]), 5))[0]
    except asyncio.TimeoutError:
        raise AssertionError("send() after the failure returned a future that is still "
                             "pending after 5 s: the producer hangs") from None
    assert isinstance(result, KafkaError), f"the fault is still injected: {result!r}"
    restore()
    meta = await asyncio.wait_for(producer.send_and_wait(topic, b"after"), BOUND)
    print(f"failure contained to its batches: later record {result!r}, then {meta!r}")


async def test_failing_compressor_does_not_hang_the_producer(
        kafka_bootstrap: str, topic_factory: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The compressor raises RuntimeError when the Sender closes a batch. Proves: the
    producer does not hang -- every pending record fails with a KafkaError within
    seconds, flush() returns promptly, and a later send() either raises a KafkaError
    at once (the producer failed) or, if the producer contained the failure to the
    batches that hit it (as Java does: it compresses in send(), and a failure there
    fails that record only), fails promptly too, and the producer delivers again once
    the compressor works."""
    topic = topic_factory(partitions=1)
    async with Producer(bootstrap_servers=kafka_bootstrap, compression_type="lz4",
                        linger_ms=5) as producer:
        await asyncio.wait_for(producer.send_and_wait(topic, WARM_UP), BOUND)

        def broken(data: Any) -> bytes:
            raise RuntimeError("injected compressor failure")

        monkeypatch.setattr(producer._accumulator, "compressor", broken)
        await _sender_failure_does_not_hang(producer, topic, restore=monkeypatch.undo)


async def test_failing_request_encoder_does_not_hang_the_producer(
        kafka_bootstrap: str, topic_factory: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Encoding the Produce request raises RuntimeError in the Sender. Proves: no
    hang, every pending record fails with a KafkaError within seconds, flush() returns,
    and a later send() is refused at once with a KafkaError."""
    topic = topic_factory(partitions=1)
    async with Producer(bootstrap_servers=kafka_bootstrap, linger_ms=5) as producer:
        await asyncio.wait_for(producer.send_and_wait(topic, WARM_UP), BOUND)

        def broken(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("injected encode_produce_body failure")

        monkeypatch.setattr(aioproducer.sender, "encode_produce_body", broken)
        await _sender_failure_does_not_hang(producer, topic)


async def test_broker_without_produce_v9_is_refused_at_start(kafka_bootstrap: str) -> None:
    """Every ApiVersions response says Produce goes up to v8 only (aioproducer writes
    v9+). Proves: start() fails with UnsupportedVersionError instead of starting a
    producer whose every batch would fail (or crash the Sender) later."""
    async with ProxyCluster.start(kafka_bootstrap) as proxies:
        for proxy in proxies.proxies.values():
            proxy.corrupt_responses(API_VERSIONS, cap_api_version(PRODUCE, 8), count=1000)
        producer = Producer(bootstrap_servers=proxies.bootstrap, max_block_ms=5000)
        try:
            await asyncio.wait_for(producer.start(), BOUND)
        except UnsupportedVersionError as exc:
            print(f"\nstart() refused: {exc}")
            return
        finally:
            corrupted = sum(p.stats["responses_corrupted"] for p in proxies.proxies.values())
        client = producer._client
        assert client is not None
        seen = {conn.api_versions.get(PRODUCE) for conn in client._conns.values()}
        await asyncio.wait_for(producer.close(0), BOUND)
        assert corrupted >= 1, "no ApiVersions response was rewritten: nothing was tested"
        print(f"\nProduce versions the producer saw: {seen}")
        pytest.fail("start() succeeded against a broker without Produce v9+ "
                    "(expected UnsupportedVersionError)")


# -- 5 -------------------------------------------------------------------------------


async def test_in_flight_batch_expires_at_delivery_timeout(kafka_bootstrap: str,
                                                           topic_factory: Any) -> None:
    """A batch waits in the queue ~2.5 s (the partition's first batch is alone in
    flight and its response is held), then goes out and gets no response.
    delivery_timeout_ms=4000 = request_timeout_ms (Java requires delivery >= linger +
    request timeout, so the brief's 30000/3000 pair is not a valid configuration).
    Proves: an in-flight batch expires at delivery_timeout_ms counted from its
    creation (~4 s), not when its request times out (~6.5 s)."""
    warm = topic_factory(partitions=1)
    topic = topic_factory(partitions=1)
    async with ProxyCluster.start(kafka_bootstrap) as proxies, \
            Producer(bootstrap_servers=proxies.bootstrap, linger_ms=0,
                     request_timeout_ms=4000, delivery_timeout_ms=4000) as producer:
        await asyncio.wait_for(producer.send_and_wait(warm, WARM_UP), BOUND)
        (proxy,) = proxies.proxies.values()
        proxy.delay_responses(PRODUCE, 2.5, count=1)
        first = await producer.send(topic, encode(0))
        await wait_until(lambda: proxy.stats["responses_delayed"] >= 1, BOUND,
                         "the first batch's response to be held")
        proxy.delay_responses(PRODUCE, 30.0, count=1)  # the next response: never in time
        t0 = time.monotonic()
        second = await producer.send(topic, encode(1))
        result = (await asyncio.wait_for(settle([second]), 15))[0]
        elapsed = time.monotonic() - t0
        first_result = (await asyncio.wait_for(settle([first]), BOUND))[0]
    print(f"\nsecond record: {result!r} after {elapsed:.2f} s")
    assert isinstance(first_result, RecordMetadata), first_result
    assert isinstance(result, DeliveryTimeoutError), result
    assert 3.5 <= elapsed <= 5.3, (f"the in-flight batch expired {elapsed:.2f} s after it "
                                   "was created (delivery_timeout_ms=4000)")


async def test_retries_exhausted_give_the_brokers_error(kafka_bootstrap: str,
                                                        topic_factory: Any) -> None:
    """Every Produce response says NOT_ENOUGH_REPLICAS (19, retriable), rewritten by
    the proxy: Kafka 4.x caps a topic's effective min.insync.replicas at its
    replication factor, so the one-node broker cannot be made to answer it with
    min.insync.replicas=2 on a topic of replication 1. Proves: once retries=2 are
    used up the record fails with the broker's error (a BrokerResponseError with code
    19), not with DeliveryTimeoutError."""
    topic = topic_factory(partitions=1)
    async with ProxyCluster.start(kafka_bootstrap) as proxies, \
            Producer(bootstrap_servers=proxies.bootstrap, acks="all", retries=2,
                     retry_backoff_ms=50) as producer:
        await asyncio.wait_for(producer.send_and_wait(topic, WARM_UP), BOUND)
        for proxy in proxies.proxies.values():
            proxy.corrupt_responses(PRODUCE, rewrite_produce_errors(NOT_ENOUGH_REPLICAS),
                                    count=100)
        fut = await producer.send(topic, encode(0))
        result = (await asyncio.wait_for(settle([fut]), 20))[0]
        attempts = sum(p.stats["responses_corrupted"] for p in proxies.proxies.values())
    print(f"\nresult after {attempts} attempt(s): {result!r}")
    assert not isinstance(result, DeliveryTimeoutError), result
    assert isinstance(result, BrokerResponseError), result
    assert int(result.code) == NOT_ENOUGH_REPLICAS, result
    assert attempts == 3, f"{attempts} attempt(s), expected 1 + retries=2"


# -- 6 -------------------------------------------------------------------------------


async def test_per_record_errors(kafka_bootstrap: str, topic_factory: Any) -> None:
    """One batch of 100 records to a compacted topic where record 37 has a null key:
    the broker rejects the whole batch with INVALID_RECORD and names record 37
    (KIP-467). Proves: record 37 fails with InvalidRecordError carrying the broker's
    message; the other 99 fail with a KafkaError that is not InvalidRecordError and
    says they were in a batch with invalid records (Java's behaviour); a later batch
    to the partition succeeds; no InitProducerId is sent (local epoch bump)."""
    topic = topic_factory(partitions=1, config={"cleanup.policy": "compact"})
    async with ProxyCluster.start(kafka_bootstrap) as proxies, \
            Producer(bootstrap_servers=proxies.bootstrap, linger_ms=5000,
                     batch_size=65536) as producer:
        await asyncio.wait_for(producer.send_and_wait(topic, WARM_UP, key=b"w"), BOUND)
        inits_after_warm_up = proxies.requests(INIT_PRODUCER_ID)
        futs = [await producer.send(topic, encode(i), key=None if i == 37 else b"k%d" % i)
                for i in range(100)]
        assert len({id(f.batch) for f in futs}) == 1, "the 100 records are not one batch"
        with contextlib.suppress(KafkaError):
            await asyncio.wait_for(producer.flush(), BOUND)
        results = await asyncio.wait_for(settle(futs), BOUND)
        later = await asyncio.wait_for(producer.send(topic, encode(100), key=b"k100"), BOUND)
        await asyncio.wait_for(producer.flush(), BOUND)
        later_result = (await asyncio.wait_for(settle([later]), BOUND))[0]
        inits = proxies.requests(INIT_PRODUCER_ID) - inits_after_warm_up
    bad = results[37]
    print(f"\nrecord 37: {bad!r}\nrecord 0: {results[0]!r}\nlater: {later_result!r}")
    assert isinstance(bad, InvalidRecordError), bad
    assert "key" in str(bad).lower() and "compact" in str(bad).lower(), str(bad)
    others = [r for i, r in enumerate(results) if i != 37]
    assert all(isinstance(r, KafkaError) for r in others), others[:1]
    wrong = [r for r in others if isinstance(r, InvalidRecordError)]
    assert not wrong, (f"{len(wrong)} valid record(s) failed with InvalidRecordError, "
                       f"first: {wrong[0]!r}")
    text = str(others[0]).lower()
    assert "batch" in text and "invalid" in text, str(others[0])
    assert isinstance(later_result, RecordMetadata), later_result
    assert inits == 0, f"{inits} InitProducerId request(s) after the warm-up"
    consumed = without_warm_up(consume_all(kafka_bootstrap, topic, 1))
    assert [decode(m.value) for m in consumed] == [100]


# -- 7 -------------------------------------------------------------------------------


async def _cancel_storm(producer: Producer, topic: str, n: int,
                        turns: tuple[int, ...]) -> tuple[set[int], set[int], dict[int, int]]:
    """n tasks each await producer.send(); every other one is cancelled before it runs,
    half of the others after ``turns[0]`` turns of the loop, the rest after the later
    ``turns``. Returns the indexes of the
    sends that returned a future, of those that raised CancelledError, and per turn how
    many were cancelled while running."""
    await asyncio.wait_for(producer.send_and_wait(topic, WARM_UP), BOUND)
    tasks = [asyncio.ensure_future(producer.send(topic, encode(i))) for i in range(n)]
    for i in range(0, n, 2):
        tasks[i].cancel()
    # Half of the rest after the first turn, the others spread over the later turns.
    cancel_at = {i: turns[0] if i % 4 == 1 else turns[1 + (i // 4) % (len(turns) - 1)]
                 for i in range(1, n, 2)}
    for turn in range(1, max(turns) + 1):
        await asyncio.sleep(0)
        for i, at in cancel_at.items():
            if at == turn:
                tasks[i].cancel()
    results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), BOUND)
    returned = {i for i, r in enumerate(results) if not isinstance(r, BaseException)}
    cancelled = {i for i, r in enumerate(results) if isinstance(r, asyncio.CancelledError)}
    others = [r for r in results if isinstance(r, BaseException)
              and not isinstance(r, asyncio.CancelledError)]
    assert not others, others[:1]
    acks = await asyncio.wait_for(settle([results[i] for i in sorted(returned)]), BOUND)
    assert all(isinstance(a, RecordMetadata) for a in acks), acks[:1]
    await asyncio.wait_for(producer.flush(), BOUND)
    late = {t: sum(1 for i, at in cancel_at.items() if at == t and i in cancelled)
            for t in turns}
    return returned, cancelled, late


async def test_cancelled_send_does_not_buffer(kafka_bootstrap: str,
                                              topic_factory: Any) -> None:
    """2,000 tasks each await producer.send() (linger_ms=0, batch_size=200: a new batch
    every few records). Every other task is cancelled before it runs, half of the
    others after one turn of the loop, the rest after 2, 3, 5 or 8 turns, wherever
    their send() is then (before the fix: suspended right after appending to a new
    batch). Then the same with buffer_memory=16384, so
    that later sends also wait for memory when cancelled. Proves the defined
    behaviour: a send() that raised CancelledError did not buffer its record, a send()
    that returned a future did -- the log holds exactly the records of the sends that
    returned."""
    n = 2000
    for memory in (None, 16384):
        topic = topic_factory(partitions=1)
        limits: dict[str, Any] = {} if memory is None else {"buffer_memory": memory,
                                            "max_request_size": memory}
        async with Producer(bootstrap_servers=kafka_bootstrap, linger_ms=0, batch_size=200,
                            **limits) as producer:
            returned, cancelled, late = await _cancel_storm(producer, topic, n,
                                                            (1, 2, 3, 5, 8))
        print(f"\nbuffer_memory={memory or 'default'}: returned a future: {len(returned)}, "
              f"cancelled: {len(cancelled)} (cancelled while running, by turn: {late})")
        consumed = without_warm_up(consume_all(kafka_bootstrap, topic, len(returned)))
        in_log = [decode(m.value) for m in consumed]
        silently = sorted(set(in_log) & cancelled)
        assert not silently, (f"buffer_memory={memory or 'default'}: {len(silently)} "
                              "record(s) whose send() raised CancelledError are in the "
                              f"log, e.g. {silently[:10]}")
        assert sorted(in_log) == sorted(returned)


async def test_cancelled_send_many_reports_what_was_buffered(kafka_bootstrap: str,
                                                             topic_factory: Any) -> None:
    """send_many() of 500 records waits for buffer memory (acks are held, memory is
    small) and is cancelled there. Proves: the records buffered before the
    cancellation are delivered, and the CancelledError carries a note (__notes__)
    saying how many were buffered -- exactly those records are in the log."""
    topic = topic_factory(partitions=1)
    n = 500
    async with ProxyCluster.start(kafka_bootstrap) as proxies, \
            Producer(bootstrap_servers=proxies.bootstrap, linger_ms=0, batch_size=1024,
                     buffer_memory=16384, max_request_size=16384) as producer:
        await asyncio.wait_for(producer.send_and_wait(topic, WARM_UP), BOUND)
        for proxy in proxies.proxies.values():
            proxy.delay_responses(PRODUCE, 1.5)
        task = asyncio.ensure_future(
            producer.send_many(topic, [encode(i, 100) for i in range(n)]))
        await wait_until(lambda: producer._accumulator.memory_waiters > 0 or task.done(),
                         BOUND, "send_many() to wait for memory")
        assert not task.done(), f"send_many() did not wait for memory: {task!r}"
        task.cancel()
        try:
            await asyncio.wait_for(task, BOUND)
        except asyncio.CancelledError as exc:
            error: BaseException = exc
        else:
            raise AssertionError("send_many() was not cancelled")
        proxies.clear_faults()
        await asyncio.wait_for(producer.flush(), 3 * BOUND)
    notes = getattr(error, "__notes__", [])
    consumed = without_warm_up(consume_all(kafka_bootstrap, topic, 1))
    in_log = [decode(m.value) for m in consumed]
    buffered = len(in_log)
    print(f"\nCancelledError notes: {notes}; records in the log: {buffered}")
    assert 0 < buffered < n, f"{buffered} of {n} records in the log"
    assert in_log == list(range(buffered)), "the log does not hold records 0..k in order"
    assert notes, "the CancelledError of send_many() has no note saying what was buffered"
    text = " ".join(notes)
    assert re.search(rf"(?<![\d.]){buffered}(?!\d)", text) or \
        re.search(rf"0\s*\.\.\s*{buffered - 1}(?!\d)", text), \
        f"the note does not say that {buffered} records were buffered: {notes}"


# -- 8 -------------------------------------------------------------------------------


async def test_one_partition_failing_does_not_stall_others(kafka_bootstrap: str,
                                                           topic_factory: Any) -> None:
    """Topic A gets a record over its max.message.bytes (one record: the batch cannot
    be split; it is below max_request_size) while topic B streams a record every
    10 ms. InitProducerId responses are delayed 2 s by the proxy, so a producer that
    stops everything for a new producer id is seen to stall. Proves: B's
    acknowledgements keep coming (no gap over 1 s) while A's failure is handled, A's
    record fails with a KafkaError, and no InitProducerId is sent after the warm-up
    (the epoch is bumped locally)."""
    a_topic = topic_factory(partitions=1, config={"max.message.bytes": "4000"})
    b_topic = topic_factory(partitions=1)
    async with ProxyCluster.start(kafka_bootstrap) as proxies, \
            Producer(bootstrap_servers=proxies.bootstrap, linger_ms=1) as producer:
        await asyncio.wait_for(producer.send_and_wait(a_topic, WARM_UP), BOUND)
        await asyncio.wait_for(producer.send_and_wait(b_topic, encode(10**6)), BOUND)
        inits_after_warm_up = proxies.requests(INIT_PRODUCER_ID)
        for proxy in proxies.proxies.values():
            proxy.delay_responses(INIT_PRODUCER_ID, 2.0)
        b_stream = AckStream(producer, b_topic)
        b_stream.start()
        await asyncio.sleep(0.5)
        t_fail = time.monotonic()
        big = await producer.send(a_topic, encode(0, 10_000))
        big_result = (await asyncio.wait_for(settle([big]), BOUND))[0]
        t_failed = time.monotonic()
        await asyncio.sleep(2.5)
        t_end = time.monotonic()
        b_results = await b_stream.stop()
        inits = proxies.requests(INIT_PRODUCER_ID) - inits_after_warm_up
    gap = b_stream.longest_gap(t_fail, t_end)
    print(f"\nA's record: {big_result!r} ({t_failed - t_fail:.2f} s); longest gap between "
          f"B's acks: {gap:.2f} s; InitProducerId after warm-up: {inits}")
    assert isinstance(big_result, KafkaError), big_result
    assert all(isinstance(r, RecordMetadata) for r in b_results), \
        [r for r in b_results if not isinstance(r, RecordMetadata)][:1]
    assert gap <= 1.0, f"B got no acknowledgement for {gap:.2f} s while A's failure was handled"
    assert inits == 0, f"{inits} InitProducerId request(s) after the warm-up"
    consumed = [m for m in consume_all(kafka_bootstrap, b_topic, len(b_results) + 1)
                if decode(m.value) != 10**6]
    outcome = check([None] * len(b_results), b_results, consumed)
    assert outcome.duplicated == 0 and outcome.lost == 0 and outcome.out_of_order == 0, \
        outcome.line()
