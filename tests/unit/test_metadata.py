"""The metadata lifecycle without a broker: backoff (KIP-580), topic expiry
(``metadata_max_idle_ms``), topic names, waits for topics and partitions, and the
per-topic state that follows the metadata (routes, deques, estimates).

Time is simulated (``now`` arguments), randomness seeded (the seed is printed).
"""

from __future__ import annotations

import asyncio
import itertools
import random
import uuid

import pytest

from aioproducer import InvalidTopicError, UnknownPartitionError, UnknownTopicError
from aioproducer.accumulator import RecordAccumulator
from aioproducer.backoff import ExponentialBackoff
from aioproducer.config import ProducerConfig
from aioproducer.errors import ConfigError, PartitionError
from aioproducer.metadata import Cluster, Metadata, PartitionInfo, TopicInfo, check_topic_name
from aioproducer.net.client import KafkaClient
from aioproducer.partitioner import RecordPartitioner
from aioproducer.sender import Sender
from aioproducer.wiring import wire_sender

SEED = 580
UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_TOPIC = 17
NODES = {1: ("127.0.0.1", 9092)}


def topic_info(name: str, n: int) -> TopicInfo:
    parts = tuple(PartitionInfo(p, 1, 0) for p in range(n))
    return TopicInfo(name, parts, uuid.uuid5(uuid.NAMESPACE_DNS, name), tuple(range(n)))


def answer(**topics: int) -> Cluster:
    """A broker's answer: topics with a partition count, or absent (-1)."""
    infos = {n: topic_info(n, c) for n, c in topics.items() if c >= 0}
    errors = {n: UNKNOWN_TOPIC_OR_PARTITION for n, c in topics.items() if c < 0}
    leaders = {(n, p.partition): 1 for n, i in infos.items() for p in i.partitions}
    return Cluster(dict(NODES), infos, errors, leaders,
                   {i.topic_id: n for n, i in infos.items() if i.topic_id})


def metadata(**kw: int) -> Metadata:
    print(f"seed={SEED}")
    opts = {"max_age_ms": 300000, "retry_backoff_ms": 100, "retry_backoff_max_ms": 1000,
            "max_idle_ms": 300000, **kw}
    return Metadata(**opts, rng=random.Random(SEED))


# -- backoff ---------------------------------------------------------------------------


def test_backoff_sequence_is_exponential_with_jitter() -> None:
    print(f"seed={SEED}")
    b = ExponentialBackoff(100, 1000, rng=random.Random(SEED))
    seq = [b.backoff_ms(a) for a in range(8)]
    print(seq)
    for attempt, value in enumerate(seq):
        base = min(100 * 2 ** attempt, 1000)
        assert 0.8 * base - 1 <= value <= min(1.2 * base, 1000), (attempt, value)
    assert seq[3] > seq[0] * 4  # it grows
    assert max(seq) <= 1000  # jitter never goes past the max
    # Seeded: the same sequence again.
    again = ExponentialBackoff(100, 1000, rng=random.Random(SEED))
    assert [again.backoff_ms(a) for a in range(8)] == seq
    # Not all equal: there is jitter.
    assert len({b.backoff_ms(0) for _ in range(20)}) > 1


def test_backoff_edge_cases() -> None:
    assert ExponentialBackoff(100, 100).backoff_ms(5) == 100  # max == initial: constant
    assert ExponentialBackoff(500, 200).backoff_ms(0) == 200  # initial above max: max
    assert ExponentialBackoff(0, 0).backoff_ms(3) == 0
    assert ExponentialBackoff(100, 1000, jitter=0.0).backoff_ms(2) == 400
    with pytest.raises(ValueError):
        ExponentialBackoff(-1, 10)
    with pytest.raises(ValueError):
        ExponentialBackoff(10, 100, jitter=1.5)


def test_failed_refreshes_back_off_exponentially() -> None:
    md = metadata()
    md.refresh_started(0.0)
    md.refresh_done(0.0, answer(), [])
    md.request_update()
    now = 10.0
    waits = []
    for _ in range(7):
        wait = md.due_in(now)
        now += wait
        waits.append(round(wait * 1000))
        md.refresh_started(now)
        md.refresh_failed(now, ConnectionError("down"))
    print(waits)
    # 0 (long since the last), then ~100, 200, 400, 800, then the 1000 ms ceiling
    assert waits[0] == 0
    for wait, base in zip(waits[1:], (100, 200, 400, 800, 1000, 1000), strict=True):
        assert 0.8 * base - 1 <= wait <= min(1.2 * base, 1000) + 1, waits
    # A success resets the attempts: the base backoff again.
    md.refresh_started(now)
    md.refresh_done(now, answer(), [])
    md.request_update()
    assert 0.079 <= md.due_in(now) <= 0.121


def simulate(md: Metadata, seconds: float, broker: dict[str, int],
             rtt: float = 0.005) -> list[float]:
    """Run the Sender's refresh loop against a fake broker for ``seconds``; the start
    time of every Metadata request."""
    now = 0.0
    starts: list[float] = []
    while True:
        wait = md.due_in(now)
        now += wait
        if now >= seconds:
            return starts
        asked = md.refresh_started(now)
        starts.append(now)
        now += rtt
        md.refresh_done(now, answer(**{t: broker.get(t, -1) for t in asked}), asked)


def test_missing_topic_refreshes_back_off_then_stop_once_it_expires() -> None:
    md = metadata(max_idle_ms=5000)
    md.add_topic("missing", now=0.0)  # one send to it (which then timed out)
    starts = simulate(md, 60.0, broker={})
    print(f"{len(starts)} Metadata requests in 60 s at {[round(s, 2) for s in starts]}")
    # Java: a handful, backing off to retry_backoff_max_ms, none after the expiry.
    # (Before: one every 100 ms for ever, 600 in 60 s.)
    assert 5 <= len(starts) <= 15
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert gaps[-1] > 0.75  # backed off to ~1 s
    assert starts[0] == 0.0  # a new topic is asked for at once
    assert starts[-1] <= 5.0 + 1.3  # the last: at most one backoff past the expiry
    assert md.topics == {}
    assert "missing" not in md.cluster.topic_errors
    assert md.requests == len(starts)


def test_known_topics_refresh_only_every_max_age() -> None:
    md = metadata(max_age_ms=10000)
    md.add_topic("t", now=0.0)
    starts = simulate(md, 60.0, broker={"t": 3})
    md.touch(["t"], 59.0)
    print(starts)
    assert len(starts) == 6  # at 0, then every 10 s
    assert md.cluster.partition_count("t") == 3


def test_unchanged_answers_back_off_while_a_topic_stays_unknown() -> None:
    md = metadata()
    md.add_topic("missing", now=0.0)
    starts = simulate(md, 5.0, broker={})
    gaps = [round(b - a, 2) for a, b in itertools.pairwise(starts)]
    print(gaps)
    assert gaps[-1] >= 0.75 and len(starts) <= 12


def test_a_new_topic_is_asked_for_at_once_despite_the_backoff() -> None:
    md = metadata()
    md.add_topic("missing", now=0.0)
    simulate(md, 3.0, broker={})
    assert md.due_in(3.0) > 0.1
    md.add_topic("other", now=3.0)
    assert md.due_in(3.0) == 0.0


# -- expiry ----------------------------------------------------------------------------


def test_used_and_busy_topics_do_not_expire() -> None:
    md = metadata(max_idle_ms=1000)
    busy: set[str] = {"busy"}
    md.busy_topics = lambda: busy
    expired: list[str] = []
    md.on_topics_expired = expired.extend
    for t in ("busy", "used", "idle"):
        md.add_topic(t, now=0.0)
    md.refresh_started(0.0)
    md.refresh_done(0.0, answer(busy=1, used=1, idle=1), sorted(md.topics))
    md.touch(["used"], 1.5)
    md.touch(["unknown-to-metadata"], 1.5)  # not added
    md.refresh_started(2.0)
    md.refresh_done(2.0, answer(busy=1, used=1, idle=1), sorted(md.topics))
    assert expired == ["idle"]
    assert sorted(md.topics) == ["busy", "used"]
    assert sorted(md.cluster.topics) == ["busy", "used"]
    assert ("idle", 0) not in md.cluster.leaders
    busy.clear()
    md.refresh_started(5.0)
    md.refresh_done(5.0, answer(busy=1, used=1), sorted(md.topics))
    assert sorted(expired) == ["busy", "idle", "used"]
    assert md.cluster.topics == {} and md.cluster.names_by_id == {}


@pytest.mark.asyncio
async def test_a_topic_awaited_by_a_send_does_not_expire() -> None:
    md = metadata(max_idle_ms=1)
    task = asyncio.ensure_future(md.wait_for_topic("slow", 5.0))
    await asyncio.sleep(0.05)
    md.refresh_started(1.0)
    md.refresh_done(1e6, answer(slow=-1), ["slow"])
    assert "slow" in md.topics
    md.refresh_started(1e6)
    md.refresh_done(1e6, answer(slow=2), ["slow"])
    info = await task
    assert len(info.partitions) == 2


def sender_for(config: ProducerConfig, md: Metadata) -> tuple[Sender, RecordAccumulator]:
    partitioner = RecordPartitioner("murmur2")
    acc = RecordAccumulator(batch_size=1024, buffer_memory=1 << 20, linger_ms=5,
                            retry_backoff_ms=100, retry_backoff_max_ms=1000,
                            delivery_timeout_ms=120000, appender=partitioner.appender)
    client = KafkaClient("127.0.0.1:1")
    sender = Sender(config, client, md, acc)
    wire_sender(sender, client, md, acc)
    return sender, acc


@pytest.mark.asyncio
async def test_an_expired_topic_leaves_every_per_topic_table() -> None:
    md = metadata(max_idle_ms=1000)
    sender, acc = sender_for(ProducerConfig(), md)
    md.add_topic("gone", now=0.0)
    md.add_topic("kept", now=0.0)
    md.refresh_started(0.0)
    md.refresh_done(0.0, answer(gone=3, kept=2), ["gone", "kept"])
    loop = asyncio.get_running_loop()
    for topic in ("gone", "kept"):
        acc.appender.set_route(topic, 3)
        acc.batch_targets[(topic, 0)] = 4096
        acc.growth_caps[topic] = 8192
        acc.ratios.observe(topic, 1000, 500)
    # "kept" has a batch buffered; "gone" had one, delivered.
    block = acc.pool.try_allocate(1024)
    assert block is not None
    kept_batch = acc.new_batch(("kept", 0), block, loop)
    block2 = acc.pool.try_allocate(1024)
    assert block2 is not None
    done = acc.new_batch(("gone", 1), block2, loop)
    acc.batches[("gone", 1)].clear()
    acc.complete(done, 0, -1, None)
    md.refresh_started(2.0)
    md.refresh_done(2.0, answer(gone=3, kept=2), ["gone", "kept"])
    assert sorted(md.topics) == ["kept"]
    assert acc.appender.route("gone") is None
    assert acc.appender.route("kept") is not None
    assert not any(tp[0] == "gone" for tp in (*acc.batches, *acc.batch_targets))
    assert "gone" not in acc.growth_caps and "kept" in acc.growth_caps
    assert acc.ratios.estimate("gone") == 1.0 and acc.ratios.estimate("kept") < 1.0
    assert "gone" not in md.cluster.topics and "kept" in md.cluster.topics
    acc.complete(kept_batch, 0, -1, None)
    await sender.stop()


def test_a_partition_count_change_moves_the_route_in_the_same_step() -> None:
    md = metadata()
    _sender, acc = sender_for(ProducerConfig(), md)
    md.add_topic("t", now=0.0)
    md.refresh_started(0.0)
    md.refresh_done(0.0, answer(t=3), ["t"])
    route = acc.appender.set_route("t", 3)
    md.refresh_started(1.0)
    md.refresh_done(1.0, answer(t=7), ["t"])
    assert route.num_partitions == 7 == md.cluster.partition_count("t")
    assert acc.appender.route("untouched") is None  # no route made for other topics


# -- names and waits -----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "with space", "slash/ed",
                                  "ünïcode", "tab\t", "colon:"])
def test_illegal_topic_names(name: str) -> None:
    with pytest.raises(InvalidTopicError) as info:
        check_topic_name(name)
    assert isinstance(info.value, ValueError)
    assert "INVALID_TOPIC_EXCEPTION" in str(info.value)


@pytest.mark.parametrize("name", ["a", "a" * 249, "Orders.v2_final-1", "...", "_x"])
def test_legal_topic_names(name: str) -> None:
    check_topic_name(name)


@pytest.mark.asyncio
async def test_an_illegal_name_fails_at_once_and_is_never_asked_for() -> None:
    md = metadata()
    with pytest.raises(InvalidTopicError, match="illegal character"):
        await asyncio.wait_for(md.wait_for_topic("no spaces allowed", 60.0), 1.0)
    assert md.topics == {}


@pytest.mark.asyncio
async def test_the_brokers_invalid_topic_answer_fails_at_once() -> None:
    md = metadata()
    task = asyncio.ensure_future(md.wait_for_topic("refused", 60.0))
    await asyncio.sleep(0)
    asked = md.refresh_started(0.0)
    md.refresh_done(0.0, Cluster(dict(NODES), {}, {"refused": INVALID_TOPIC}), asked)
    with pytest.raises(InvalidTopicError, match="refused"):
        await asyncio.wait_for(task, 1.0)
    assert "refused" not in md.topics


@pytest.mark.asyncio
async def test_unknown_topic_message_no_longer_says_the_producer_never_creates() -> None:
    md = metadata()
    with pytest.raises(UnknownTopicError) as info:
        await md.wait_for_topic("absent", 0.05)
    assert "does not create topics" not in str(info.value)
    assert "auto.create.topics.enable" in str(info.value)


@pytest.mark.asyncio
async def test_a_partition_beyond_the_count_waits_for_metadata() -> None:
    md = metadata()
    md.add_topic("t", now=0.0)
    md.refresh_started(0.0)
    md.refresh_done(0.0, answer(t=3), ["t"])
    with pytest.raises(UnknownPartitionError) as info:
        await md.wait_for_topic("t", 0.1, partition=5)
    assert isinstance(info.value, PartitionError) and isinstance(info.value, TimeoutError)
    assert "3 partition(s)" in str(info.value) and "partition 5" in str(info.value)
    # It grows while the send waits: the send goes on.
    task = asyncio.ensure_future(md.wait_for_topic("t", 5.0, partition=5))
    await asyncio.sleep(0.01)
    assert md.due_in(1e6) == 0.0  # a refresh was asked for
    md.refresh_started(1e6)
    md.refresh_done(1e6, answer(t=6), ["t"])
    info6 = await asyncio.wait_for(task, 1.0)
    assert len(info6.partitions) == 6


def test_the_partitioner_still_refuses_negative_partitions_at_once() -> None:
    p = RecordPartitioner("murmur2")
    with pytest.raises(PartitionError, match=">= 0"):
        p.partition("t", None, -1, topic_info("t", 3))
    with pytest.raises(UnknownPartitionError, match="3 partition"):
        p.partition("t", None, 3, topic_info("t", 3))


def test_metadata_max_idle_ms_is_checked() -> None:
    assert ProducerConfig().metadata_max_idle_ms == 300000
    assert ProducerConfig.from_options({"metadata.max.idle.ms": 5000}).metadata_max_idle_ms \
        == 5000
    with pytest.raises(ConfigError, match="metadata_max_idle_ms"):
        ProducerConfig.from_options(metadata_max_idle_ms=0)
    with pytest.raises(ConfigError, match="metadata_max_idle_ms"):
        ProducerConfig.from_options(metadata_max_idle_ms="5s")


def test_batch_retries_back_off_exponentially_with_jitter() -> None:
    print(f"seed={SEED}")
    loop = asyncio.new_event_loop()
    try:
        acc = RecordAccumulator(batch_size=1024, buffer_memory=1 << 20, linger_ms=0,
                                retry_backoff_ms=100, retry_backoff_max_ms=1000,
                                delivery_timeout_ms=120000)
        acc.retry_backoff_policy = ExponentialBackoff(100, 1000, rng=random.Random(SEED))
        block = acc.pool.try_allocate(1024)
        assert block is not None
        batch = acc.new_batch(("t", 0), block, loop)
        acc.batches[("t", 0)].clear()
        delays = []
        for _ in range(6):
            acc.reenqueue(batch, 100.0)
            acc.batches[("t", 0)].clear()
            delays.append(round((batch.next_attempt - 100.0) * 1000))
        print(delays)
        for d, base in zip(delays, (100, 200, 400, 800, 1000, 1000), strict=True):
            assert 0.8 * base - 1 <= d <= min(1.2 * base, 1000) + 1, delays
        assert len(set(delays[:4])) == 4
    finally:
        loop.close()


@pytest.mark.asyncio
async def test_a_batch_appended_after_its_topic_expired_brings_the_topic_back() -> None:
    # A send that waited for memory while its topic expired appends anyway: its topic
    # is asked for again, and the route it made gets the metadata's count.
    md = metadata(max_idle_ms=1000)
    sender, acc = sender_for(ProducerConfig(), md)
    block = acc.pool.try_allocate(1024)
    assert block is not None
    batch = acc.new_batch(("late", 1), block, asyncio.get_running_loop())
    assert acc.appender.route("late").num_partitions == 2  # from the partition alone
    assert "late" not in md.topics
    sender._want_queued_topics()
    assert "late" in md.topics and md.due_in(5.0) == 0.0
    md.refresh_started(5.0)
    md.refresh_done(5.0, answer(late=6), ["late"])
    assert acc.appender.route("late").num_partitions == 6
    acc.complete(batch, 0, -1, None)
    await sender.stop()
