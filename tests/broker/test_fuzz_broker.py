"""Hostile bytes from a real broker's connection (the broker half of the fuzz tests,
``tests/unit/test_fuzz.py``): a malformed Produce response is retried on a new
connection, an answer that says nothing about the partitions (a null ``responses``
array) is retried on the same one, and the response frame bound from the config
refuses what is bigger."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from support.delivery_util import check, decode, encode, settle
from support.kafka_util import consume_all

from aioproducer import Producer, RecordMetadata
from aioproducer.errors import ConfigError, KafkaError
from aioproducer.testing.faultproxy import ProxyCluster

PRODUCE = 0


def _truncated(body: bytes) -> bytes:
    return body[:-3]


def _hostile_count(body: bytes) -> bytes:
    return b"\xff\xff\xff\xff\x0f" + bytes(16)  # 2**35 - 2 topics


@dataclass
class _Faulted:
    connections: int
    """Connections the producer opened through the proxies."""
    after: RecordMetadata
    """A record sent once the faulted ones were settled."""


async def _produce_through(bootstrap: str, topic: str, corrupt: Any, n: int = 3000) -> _Faulted:
    """Send ``n`` keyed records (idempotent, linger 2 ms) through fault proxies that
    replace the next two Produce answers with ``corrupt(body)``, then one more record;
    read the topic back with an independent consumer and check each record was
    written exactly once, in order, at the offset its future gave."""
    async with ProxyCluster.start(bootstrap) as proxies, \
            Producer(bootstrap_servers=proxies.bootstrap, linger_ms=2) as producer:
        await producer.send_and_wait(topic, b"warm-up", partition=0)
        for proxy in proxies.proxies.values():
            proxy.corrupt_responses(PRODUCE, corrupt, count=2)
        futs = [await producer.send(topic, encode(i), key=b"k%d" % (i % 5)) for i in range(n)]
        results = await settle(futs)
        corrupted = sum(p.stats["responses_corrupted"] for p in proxies.proxies.values())
        connections = sum(p.stats["connections"] for p in proxies.proxies.values())
        # Still healthy: one more record after the faults goes through.
        after = await producer.send_and_wait(topic, b"after", partition=1)
    consumed = [m for m in consume_all(bootstrap, topic, n + 2)
                if m.value not in (b"warm-up", b"after")]
    outcome = check([b"k%d" % (i % 5) for i in range(n)], results, consumed)
    print(f"\n{corrupt.__name__}: {corrupted} answers replaced, {connections} "
          f"connections: {outcome.line()}")
    assert corrupted == 2, "the fault was not injected: the test proved nothing"
    assert outcome.failed == 0 and outcome.lost == 0 and outcome.duplicated == 0
    assert outcome.out_of_order == 0
    where = {decode(m.value): (m.partition, m.offset) for m in consumed}
    assert all(where[i] == (r.partition, r.offset) for i, r in enumerate(results))
    return _Faulted(connections, after)


@pytest.mark.asyncio
@pytest.mark.parametrize("corrupt", [_truncated, _hostile_count], ids=["truncated",
                                                                      "hostile-count"])
async def test_malformed_produce_response_is_retried(kafka_bootstrap: str,
                                                     topic_factory: Any, corrupt: Any) -> None:
    """A Produce response that does not decode closes that connection; the batches it
    answered are retried on a new one, and (idempotence) written exactly once."""
    got = await _produce_through(kafka_bootstrap, topic_factory(partitions=2), corrupt)
    # At least one new connection (two corrupted responses pipelined on one
    # connection close it once).
    assert got.connections >= 2
    assert got.after.offset >= 0


def _null_responses(body: bytes) -> bytes:
    """The same answer with a null ``responses`` array: a valid ProduceResponse (v9+,
    flexible: compact array length 0 is null) that names no partition, throttle 0, no
    tagged fields."""
    return b"\x00" + bytes(4) + b"\x00"


@pytest.mark.asyncio
async def test_produce_answer_with_null_responses_is_retried(kafka_bootstrap: str,
                                                             topic_factory: Any) -> None:
    """kio reads a null ``responses`` array as None. The producer reads it as an
    answer about no partition: every batch the request carried is retried (each was
    written: the broker answered the real request), and idempotence makes the retry a
    duplicate the broker recognises, so each record is written exactly once, in order,
    and the producer stays healthy. The answer is a valid one, so the connection stays:
    reading the None as a list (the bug fixed in 4e15446) raised TypeError, which the
    connection takes for a malformed frame and closes on (in the Sender's callback,
    before that, it failed the producer)."""
    got = await _produce_through(kafka_bootstrap, topic_factory(partitions=2),
                                 _null_responses)
    assert got.connections == 1, "a valid answer closed the connection (read as malformed)"
    assert got.after.offset >= 0


@pytest.mark.asyncio
async def test_response_frame_bound_from_the_config(kafka_bootstrap: str, topic_factory: Any,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    """``max_response_bytes`` (librdkafka's ``receive.message.max.bytes``) reaches every
    connection: a Metadata response bigger than it is refused before it is read, and
    the send fails typed within ``max_block_ms`` instead of hanging."""
    topic = topic_factory(partitions=64)  # its Metadata response is a few KiB
    async with Producer({"bootstrap.servers": kafka_bootstrap,
                         "receive.message.max.bytes": 1024, "max.block.ms": 2000}) as producer:
        assert producer.config.max_response_bytes == 1024
        with pytest.raises(KafkaError) as info:
            await producer.send(topic, b"v")
    assert "allowed: 4..1024" in str(info.value), info.value
    print(f"\nrefused: {type(info.value).__name__}: {info.value}")
    with pytest.raises(ConfigError, match="max_response_bytes must be >= 1024"):
        Producer(bootstrap_servers=kafka_bootstrap, max_response_bytes=100)
