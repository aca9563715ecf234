"""Hostile bytes: every decoder of broker responses, the SASL exchanges and the native
batch builder, fuzzed (``fuzz_targets.py``); and a producer that meets a malformed
response from a real broker's connection recovers through its retry path."""

from __future__ import annotations

import json
import os
import random
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from delivery_util import check, decode, encode, settle
from faultproxy import ProxyCluster
from fuzz_targets import RESPONSE_TYPES, check_decode, hostile_body, target_builder, type_name
from fuzz_util import fuzz_settings
from hypothesis import given
from hypothesis import strategies as st
from kafka_util import consume_all
from kio.schema.metadata.v12.response import MetadataResponse

from aioproducer import Producer
from aioproducer.errors import ConfigError, KafkaError, ProtocolError
from aioproducer.net.protocol import decode_entity

TESTS = Path(__file__).parent
PRODUCE = 0
# 4 bytes of throttle time, then a compact array that claims 2**35 - 2 brokers.
HOSTILE_METADATA = b"\x00\x00\x00\x00" + b"\xff\xff\xff\xff\x0f"
# What the fuzz child processes may map: far above what they need (~300 MiB), far
# below what one unchecked count from a hostile body asks for.
MEMORY_LIMIT = 2 << 30


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def _child(code: str, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(TESTS), "RUST_BACKTRACE": "0"}
    return subprocess.run([sys.executable, *(["-c", code] if code else []), *args],
                          capture_output=True, text=True, timeout=timeout, env=env,
                          preexec_fn=_limit_memory, cwd=TESTS)


def test_kio_alone_aborts_on_a_hostile_count_and_decode_entity_refuses_it() -> None:
    """Why the bounds check exists: kio reserves an array from its declared count
    before reading it, and a failed allocation aborts the process (no exception).
    ``decode_entity`` refuses the same 9 bytes with a ProtocolError."""
    run = _child("from kio.serial import entity_reader\n"
                 "from kio.schema.metadata.v12.response import MetadataResponse\n"
                 f"entity_reader(MetadataResponse)({HOSTILE_METADATA!r}, 0)\n"
                 "print('decoded')")
    assert run.returncode != 0 and "decoded" not in run.stdout, (
        "kio decoded (or refused) the hostile body by itself; the layout check in "
        "aioproducer.net.protocol may no longer be needed")
    assert "memory allocation" in run.stderr, run.stderr[-2000:]
    with pytest.raises(ProtocolError, match=r"array of \d+ element\(s\)"):
        decode_entity(MetadataResponse, HOSTILE_METADATA)


@pytest.mark.parametrize("entity_type", RESPONSE_TYPES, ids=type_name)
def test_layout_check_accepts_what_kio_writes(entity_type: type[Any]) -> None:
    """Bodies written by kio's own encoder (hypothesis instances of the schema)."""
    from fuzz_util import encode

    @fuzz_settings(weight=0.05)
    @given(st.from_type(entity_type))
    def accepted(value: Any) -> None:
        body = encode(value)
        assert decode_entity(entity_type, body) == value

    accepted()


@fuzz_settings(weight=2.0)
@given(entity_type=st.sampled_from(RESPONSE_TYPES), rnd=st.randoms(use_true_random=False))
def test_decoders_answer_with_a_value_or_a_protocol_error(entity_type: type[Any],
                                                          rnd: random.Random) -> None:
    check_decode(entity_type, hostile_body(entity_type, rnd))


@fuzz_settings(weight=1.0)
@given(rnd=st.randoms(use_true_random=False))
def test_builder_never_overruns_and_round_trips(rnd: random.Random) -> None:
    target_builder(rnd)


def test_campaign_in_a_memory_limited_process() -> None:
    """Every target (decoders, a connection fed hostile frames in random chunks,
    SCRAM and OAUTHBEARER, the batch builder) in a child process limited to 2 GiB:
    an allocation out of proportion aborts it, a hang runs into the timeout."""
    executions = 30_000
    run = _child("", str(TESTS / "fuzz_targets.py"), "--executions", str(executions),
                 "--seed", str(random.randrange(2**32)), timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    print(f"\nfuzz campaign: {result}")
    assert result["total"] == executions
    assert set(result["executions"]) == {"decode", "valid", "connection", "scram",
                                         "oauthbearer", "builder"}


def _truncated(body: bytes) -> bytes:
    return body[:-3]


def _hostile_count(body: bytes) -> bytes:
    return b"\xff\xff\xff\xff\x0f" + bytes(16)  # 2**35 - 2 topics


@pytest.mark.asyncio
@pytest.mark.parametrize("corrupt", [_truncated, _hostile_count], ids=["truncated",
                                                                      "hostile-count"])
async def test_malformed_produce_response_is_retried(kafka_bootstrap: str,
                                                     topic_factory: Any, corrupt: Any) -> None:
    """A Produce response that does not decode closes that connection; the batches it
    answered are retried on a new one, and (idempotence) written exactly once."""
    topic = topic_factory(partitions=2)
    n = 3000
    async with ProxyCluster.start(kafka_bootstrap) as proxies, \
            Producer(bootstrap_servers=proxies.bootstrap, linger_ms=2) as producer:
        await producer.send_and_wait(topic, b"warm-up", partition=0)
        for proxy in proxies.proxies.values():
            proxy.corrupt_responses(PRODUCE, corrupt, count=2)
        futs = [await producer.send(topic, encode(i), key=b"k%d" % (i % 5)) for i in range(n)]
        results = await settle(futs)
        corrupted = sum(p.stats["responses_corrupted"] for p in proxies.proxies.values())
        connections = sum(p.stats["connections"] for p in proxies.proxies.values())
    consumed = [m for m in consume_all(kafka_bootstrap, topic, n + 1) if m.value != b"warm-up"]
    outcome = check([b"k%d" % (i % 5) for i in range(n)], results, consumed)
    print(f"\n{corrupt.__name__}: {corrupted} responses corrupted, {connections} "
          f"connections: {outcome.line()}")
    assert corrupted == 2, "the fault was not injected: the test proved nothing"
    # At least one new connection (two corrupted responses pipelined on one
    # connection close it once).
    assert connections >= 2
    assert outcome.failed == 0 and outcome.lost == 0 and outcome.duplicated == 0
    assert outcome.out_of_order == 0
    where = {decode(m.value): (m.partition, m.offset) for m in consumed}
    assert all(where[i] == (r.partition, r.offset) for i, r in enumerate(results))


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
