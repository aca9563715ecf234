"""Hostile bytes: every decoder of broker responses, the SASL exchanges and the native
batch builder, fuzzed (``fuzz/targets.py``). That a producer meeting a malformed
response from a real broker's connection recovers through its retry path is in
``tests/broker/test_fuzz_broker.py``."""

from __future__ import annotations

import datetime
import json
import os
import random
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.metadata.v12.response import MetadataResponse
from kio.static.primitive import i64Timedelta

from aioproducer.errors import ProtocolError
from aioproducer.net.protocol import decode_entity
from fuzz.targets import (
    RESPONSE_TYPES,
    check_decode,
    hostile_body,
    target_builder,
    target_produce_answer,
    type_name,
)
from fuzz.util import fuzz_settings

ROOT = Path(__file__).resolve().parents[2]
# 4 bytes of throttle time, then a compact array that claims 2**35 - 2 brokers.
HOSTILE_METADATA = b"\x00\x00\x00\x00" + b"\xff\xff\xff\xff\x0f"
# What the fuzz child processes may map: far above what they need (~300 MiB), far
# below what one unchecked count from a hostile body asks for.
MEMORY_LIMIT = 2 << 30


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def _child(code: str, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RUST_BACKTRACE": "0"}
    return subprocess.run([sys.executable, *(["-c", code] if code else []), *args],
                          capture_output=True, text=True, timeout=timeout, env=env,
                          preexec_fn=_limit_memory, cwd=ROOT)


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


# kio writes any timedelta whose milliseconds fit an int64 but cannot read back those
# near the limit (a session lifetime of 106,751,991 days failed the test below by
# chance: "timedelta milliseconds overflow"). Kafka's durations are far shorter.
st.register_type_strategy(i64Timedelta, st.timedeltas(
    min_value=datetime.timedelta(days=-10**6), max_value=datetime.timedelta(days=10**6),
).map(lambda d: i64Timedelta(datetime.timedelta(milliseconds=d // _MS))))
_MS = datetime.timedelta(milliseconds=1)


@pytest.mark.parametrize("entity_type", RESPONSE_TYPES, ids=type_name)
def test_layout_check_accepts_what_kio_writes(entity_type: type[Any]) -> None:
    """Bodies written by kio's own encoder (hypothesis instances of the schema)."""
    from fuzz.util import encode

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


@pytest.mark.slow
def test_campaign_in_a_memory_limited_process() -> None:
    """Every target (decoders, a connection fed hostile frames in random chunks,
    SCRAM and OAUTHBEARER, the batch builder) in a child process limited to 2 GiB:
    an allocation out of proportion aborts it, a hang runs into the timeout."""
    executions = 30_000
    run = _child("", "-m", "fuzz.targets", "--executions", str(executions),
                 "--seed", str(random.randrange(2**32)), timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    print(f"\nfuzz campaign: {result}")
    assert result["total"] == executions
    assert set(result["executions"]) == {"decode", "valid", "connection", "scram",
                                         "oauthbearer", "builder", "produce_answer"}


@fuzz_settings(weight=1.0)
@given(rnd=st.randoms(use_true_random=False))
def test_compiled_produce_answer_agrees_with_kio(rnd: random.Random) -> None:
    target_produce_answer(rnd)
