"""Fuzz targets: every decoder of bytes from the network, and the native batch builder.

Each target takes a ``random.Random`` (so that any failure is replayed from its seed)
and asserts the one property that matters for hostile input: the code answers with a
value or with its typed error (:class:`ProtocolError`, :class:`AuthenticationError`,
``-1`` for "does not fit"), and never with another exception, a crash, a hang or an
allocation out of proportion to the input.

``tests/unit/test_fuzz.py`` runs them under Hypothesis in the suite and as a short
campaign in a child process with a memory limit; ``fuzz/long.py`` runs the long
campaign. From the repository root::

    python -m fuzz.targets --executions 100000 --seed 1 --stats out.json

The campaign loops over the targets (weighted), counts executions per target, and
exits 1 with the seed of the failing execution on the first property violation.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import functools
import importlib
import json
import logging
import random
import sys
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

from kio.index import load_response_schema
from kio.records.readers import read_batch
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map
from kio.schema.types import TopicName
from kio.serial import entity_reader
from kio.static.primitive import i32, i32Timedelta, i64

from aioproducer._native import BATCH_HEADER_SIZE, BatchBuilder, BufferPool
from aioproducer._native.produce import decode_produce_written
from aioproducer.errors import AuthenticationError, KafkaConnectionError, ProtocolError
from aioproducer.net.connection import BrokerConnection
from aioproducer.net.protocol import (
    check_entity_layout,
    decode_entity,
    decode_produce_answer,
    produce_answer_of,
)
from aioproducer.net.sasl import OAuthBearer, Scram
from aioproducer.net.security import Secret
from fuzz.util import encode, mutate, random_entity, uvarint

# -- the responses aioproducer decodes: (API, versions) as the package asks for them ----

RESPONSE_VERSIONS: dict[str, tuple[int, int]] = {
    "api_versions": (0, 3),
    "metadata": (1, 12),
    "produce": (9, 13),
    "init_producer_id": (0, 5),
    "find_coordinator": (1, 6),
    "add_partitions_to_txn": (0, 3),
    "add_offsets_to_txn": (0, 4),
    "txn_offset_commit": (0, 4),
    "end_txn": (0, 4),
    "sasl_handshake": (1, 1),
    "sasl_authenticate": (0, 2),
    "create_topics": (2, 7),
    "delete_topics": (1, 6),
}


_API_KEYS = {name: key for key, name in api_key_map.items()}


def _response_class(api: str, version: int) -> type[Any]:
    return load_response_schema(_API_KEYS[api], version)  # type: ignore[no-any-return]


RESPONSE_TYPES: list[type[Any]] = [
    _response_class(api, v)
    for api, (lo, hi) in RESPONSE_VERSIONS.items() for v in range(lo, hi + 1)
]


def type_name(t: type[Any]) -> str:
    return f"{t.__module__.split('.')[2]}.v{t.__version__}"


# -- decoders --------------------------------------------------------------------------


def hostile_body(entity_type: type[Any], rnd: random.Random) -> bytes:
    """A mutated plausible encoding (mostly) or random bytes."""
    if rnd.random() < 0.1:
        return rnd.randbytes(rnd.randint(0, 64))
    return mutate(random_entity(entity_type, rnd), rnd)


def check_decode(entity_type: type[Any], body: bytes) -> str:
    """``decode_entity`` gives an ``entity_type`` or a ProtocolError, nothing else; where
    the bounds check lets a body through, kio's own reader agrees with it."""
    try:
        value = decode_entity(entity_type, body)
    except ProtocolError:
        return "refused"
    assert isinstance(value, entity_type)
    # The body passed the bounds check, so kio's reader (which aborts the process on
    # a count it cannot allocate) sees it whole and consumes all of it.
    again, end = entity_reader(entity_type)(body, 0)
    assert end == len(body) and again == value
    return "decoded"


def target_decode(rnd: random.Random) -> str:
    entity_type = rnd.choice(RESPONSE_TYPES)
    return check_decode(entity_type, hostile_body(entity_type, rnd))


def target_valid(rnd: random.Random) -> str:
    """The bounds check never refuses a well-formed body (that would cut the producer
    off from a healthy broker)."""
    entity_type = rnd.choice(RESPONSE_TYPES)
    body = random_entity(entity_type, rnd)
    check_entity_layout(entity_type, body)
    return "accepted"


# -- the compiled decoder of the usual Produce answer -----------------------------------


def written_produce_body(version: int, rnd: random.Random) -> bytes:
    """A Produce response v``version`` in which every partition was written, encoded
    by kio: the answer the compiled decoder is for."""
    mod = importlib.import_module(f"kio.schema.produce.v{version}.response")
    topics = []
    for _ in range(rnd.choice((0, 1, 1, 1, 2, 5))):
        parts = tuple(
            mod.PartitionProduceResponse(
                index=i32(rnd.choice((0, 1, 7, 2**31 - 1))), error_code=ErrorCode.none,
                base_offset=i64(rnd.choice((0, 1, 2**40, 2**63 - 1, -1))),
                log_append_time=rnd.choice((None, _EPOCH + datetime.timedelta(
                    milliseconds=rnd.randrange(2**42)))),
                log_start_offset=i64(rnd.choice((-1, 0, 12345))),
                record_errors=(), error_message=None)
            for _ in range(rnd.choice((0, 1, 1, 3, 8))))
        if version >= 13:
            topics.append(mod.TopicProduceResponse(
                topic_id=uuid.UUID(int=rnd.getrandbits(128)), partition_responses=parts))
        else:
            name = "".join(rnd.choice("abcé_-.9") for _ in range(rnd.randint(1, 40)))
            topics.append(mod.TopicProduceResponse(name=TopicName(name),
                                                   partition_responses=parts))
    throttle = datetime.timedelta(milliseconds=rnd.choice((0, 0, 1, 5000)))
    return encode(mod.ProduceResponse(responses=tuple(topics),
                                      throttle_time=i32Timedelta.parse(throttle)))


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def target_produce_answer(rnd: random.Random) -> str:
    """The compiled decoder of the usual Produce answer accepts only bodies that kio
    decodes to the same answer, and takes every unmutated written answer; any other
    body goes to kio (``decode_produce_answer`` then answers as kio does)."""
    version = rnd.randint(9, 13)
    entity_type = _response_class("produce", version)
    written = rnd.random() < 0.6
    body = written_produce_body(version, rnd) if written else random_entity(entity_type, rnd)
    mutated = rnd.random() < 0.7
    if mutated:
        body = mutate(body, rnd)
    fast = decode_produce_written(version, body)
    try:
        slow = produce_answer_of(decode_entity(entity_type, body))
    except ProtocolError:
        assert fast is None, f"accepted a body kio refuses: {body.hex()}"
        try:
            decode_produce_answer(version, body)
        except ProtocolError:
            return "refused"
        raise AssertionError("decode_produce_answer took a body kio refuses") from None
    if fast is None:
        assert mutated or not written, f"refused a written answer: {body.hex()}"
        return "kio"
    answer = decode_produce_answer(version, body)
    # kio reads a time through a float: past 2**53 microseconds (the year 2255) it can
    # be 1 ms off, where the compiled decoder gives the integer on the wire.
    for (_, _, p), (_, _, q) in zip(answer.partitions, slow.partitions, strict=True):
        if p.log_append_ms != q.log_append_ms:
            assert p.log_append_ms > 2**53 // 1000 and abs(p.log_append_ms - q.log_append_ms) <= 1
            answer.partitions = [(n, t, q if x is p else x) for n, t, x in answer.partitions]
    assert answer == slow, body.hex()
    assert all(p.error_code == 0 and not p.record_errors and p.error_message is None
               and p.current_leader is None for _, _, p in slow.partitions)
    assert not slow.node_endpoints
    return "written"


# -- one connection, fed a hostile response --------------------------------------------


class FakeTransport(asyncio.Transport):
    """Enough of a transport for :class:`BrokerConnection`: writes go nowhere."""

    def __init__(self) -> None:
        super().__init__()
        self.closed = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def write(self, data: Any) -> None:
        pass

    def writelines(self, list_of_data: Any) -> None:
        pass

    def is_closing(self) -> bool:
        return self.closed

    def abort(self) -> None:
        self.closed = True

    def close(self) -> None:
        self.closed = True


async def _feed_connection(entity_type: type[Any], rnd: random.Random) -> str:
    conn = BrokerConnection("127.0.0.1", 9, node_id=1, max_response_bytes=1 << 16)
    transport = FakeTransport()
    conn.connection_made(transport)
    api_key, version = int(entity_type.__api_key__), int(entity_type.__version__)
    flexible = bool(entity_type.__flexible__) and api_key != 18  # ApiVersions: header v0
    fut = conn.send_raw(api_key, version, [b""], flexible=bool(entity_type.__flexible__),
                        expect_response=True,
                        decode=functools.partial(decode_entity, entity_type))
    assert fut is not None
    header = (0).to_bytes(4, "big")  # the first correlation id
    if flexible:
        tags = [b"\x05\x02ok"] if rnd.random() < 0.2 else []
        header += uvarint(len(tags)) + b"".join(tags)
    payload = header + random_entity(entity_type, rnd)
    frame = mutate(len(payload).to_bytes(4, "big") + payload, rnd, 3)
    pos = 0
    while pos < len(frame):  # arbitrary chunking, as TCP may deliver it
        step = rnd.randint(1, max(1, len(frame) - pos))
        conn.data_received(frame[pos:pos + step])
        pos += step
    if not fut.done():
        assert not transport.closed
        conn.close("fuzz: end of input")
    exc = fut.exception()
    if exc is None:
        assert isinstance(fut.result(), entity_type)
        return "decoded"
    assert isinstance(exc, (ProtocolError, KafkaConnectionError)), repr(exc)
    assert transport.closed, "a connection that failed a request must be closed"
    return type(exc).__name__


def make_target_connection() -> tuple[Callable[[random.Random], str], Callable[[], None]]:
    loop = asyncio.new_event_loop()
    errors: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, ctx: errors.append(ctx))

    def target(rnd: random.Random) -> str:
        outcome = loop.run_until_complete(_feed_connection(rnd.choice(RESPONSE_TYPES), rnd))
        assert not errors, errors
        return outcome

    def close() -> None:
        loop.run_until_complete(asyncio.sleep(0))
        loop.close()
        assert not errors, errors

    return target, close


# -- SASL ------------------------------------------------------------------------------


def target_scram(rnd: random.Random) -> str:
    """SCRAM's server messages: a valid exchange mutated; AuthenticationError or go on."""
    mech = Scram(rnd.choice(("SCRAM-SHA-256", "SCRAM-SHA-512")), "alice",
                 Secret("alice-secret"), nonce="cNonce")
    mech._step = 1  # what start() sets (it only builds the first message): no event loop
    first = b"r=cNonceSERVER,s=" + b"c2FsdHNhbHQ=" + b",i=4096"
    if rnd.random() < 0.3:
        first = b"e=invalid-proof," + first
    try:
        reply = mech.respond(mutate(first, rnd, 3))
    except AuthenticationError:
        return "refused first"
    assert isinstance(reply, bytes) and b",p=" in reply
    final = b"v=" + rnd.choice((b"", b"AAAA", b"!!", b"dGhpcyBpcyBub3QgaXQ="))
    try:
        mech.respond(mutate(final, rnd, 3))
    except AuthenticationError:
        return "refused final"
    raise AssertionError("a server signature that cannot be right was accepted")


def target_oauth(rnd: random.Random) -> str:
    mech = OAuthBearer(lambda: None)  # type: ignore[arg-type, return-value]
    challenge = mutate(b'{"status":"invalid_token","scope":"x"}', rnd, 4)
    reply = mech.respond(challenge)
    assert reply in (b"\x01", None)
    assert isinstance(mech.error_detail, str | int | float | bool | dict | list | None)
    return "answered"


# -- the native batch builder ----------------------------------------------------------


def target_builder(rnd: random.Random) -> str:
    """Random record sizes near the space left in the block: an append either fits
    (and writes exactly that record) or returns -1 and leaves the block as it was;
    the closed batch decodes (kio's reader) to what was appended."""
    kind = rnd.random()
    if kind < 0.6:
        capacity = rnd.randint(BATCH_HEADER_SIZE + 1, 700)
    elif kind < 0.9:
        capacity = rnd.choice((16384, 16384 + rnd.randint(-64, 64)))
    else:
        capacity = rnd.randint(1 << 17, 1 << 20)
    pool = BufferPool(max(capacity, 1 << 16), capacity)
    block = pool.try_allocate(capacity)
    assert block is not None
    builder = BatchBuilder(block)
    small = capacity <= 1024
    appended: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]] = []
    for _ in range(rnd.randint(1, 12)):
        remaining = builder.remaining

        def field(remaining: int = remaining) -> bytes | None:
            if rnd.random() < 0.15:
                return None
            r = rnd.random()
            n = (rnd.randint(max(0, remaining - 24), remaining + 4) if r < 0.6
                 else rnd.randint(0, 16) if r < 0.8 else rnd.randint(0, capacity))
            return bytes([n & 0xFF]) * n

        key, value = field(), field()
        headers = [(rnd.choice(("h", "trace", "é")), rnd.choice((None, b"", b"v" * 9)))
                   for _ in range(rnd.choice((0, 0, 1, 3, 20)))]
        size = builder.size_in_bytes
        before = bytes(block.view(0, capacity)) if small else None
        index = builder.append(rnd.randint(0, 2**41), key, value, headers or None)
        after = bytes(block.view(0, capacity)) if small else None
        if index >= 0:
            assert index == len(appended)
            assert size < builder.size_in_bytes <= capacity
            if small:
                assert before is not None and after is not None
                assert after[:size] == before[:size]
                assert after[builder.size_in_bytes:] == before[builder.size_in_bytes:]
            appended.append((key, value, headers))
        else:
            assert builder.size_in_bytes == size
            if small:
                assert after == before
        assert builder.remaining == capacity - builder.size_in_bytes
    outcome = "empty"
    if appended:
        builder.close(rnd.randint(0, 2**40), rnd.randint(0, 100), rnd.randint(0, 2**30))
        view = builder.view()
        try:
            data = bytes(view)
        finally:
            view.release()
        batch, end = read_batch(data, 0)
        assert end == len(data)
        got = [(r.key, r.value, [(h.key, h.value) for h in r.headers]) for r in batch.records]
        assert got == [(k, v, [(hk.encode(), hv) for hk, hv in h]) for k, v, h in appended]
        outcome = f"{len(appended)} record(s)"
    del builder
    pool.release(block)
    pool._check_invariants()
    return outcome


# -- the campaign ----------------------------------------------------------------------


def make_targets() -> tuple[dict[str, tuple[float, Callable[[random.Random], str]]],
                            Callable[[], None]]:
    """name -> (weight, target), and a function that releases what they hold."""
    connection, close = make_target_connection()
    return {
        "decode": (0.45, target_decode),
        "valid": (0.1, target_valid),
        "connection": (0.25, connection),
        "scram": (0.02, target_scram),
        "oauthbearer": (0.03, target_oauth),
        "builder": (0.15, target_builder),
        "produce_answer": (0.1, target_produce_answer),
    }, close


def campaign(executions: int, seconds: float, seed: int,
             only: list[str] | None = None) -> tuple[Counter[str], float]:
    # A refused frame logs a WARNING per execution; the counts are what matter here.
    logging.getLogger("aioproducer").setLevel(logging.CRITICAL)
    targets, close = make_targets()
    if only:
        targets = {k: v for k, v in targets.items() if k in only}
    names = list(targets)
    weights = [targets[n][0] for n in names]
    counts: Counter[str] = Counter()
    picker = random.Random(seed)
    started = time.monotonic()
    deadline = started + seconds
    try:
        for i in range(executions):
            if i % 256 == 0 and time.monotonic() > deadline:
                break
            name = picker.choices(names, weights)[0]
            case_seed = picker.getrandbits(64)
            try:
                targets[name][1](random.Random(case_seed))
            except Exception:
                traceback.print_exc()
                print(f"FAILED: target {name!r}, replay with "
                      f"fuzz.targets.replay({name!r}, {case_seed})", file=sys.stderr)
                raise SystemExit(1) from None
            counts[name] += 1
    finally:
        close()
    return counts, time.monotonic() - started


def replay(name: str, case_seed: int) -> str:
    """Run one execution again (from a campaign's FAILED line)."""
    targets, close = make_targets()
    try:
        return targets[name][1](random.Random(case_seed))
    finally:
        close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--executions", type=int, default=10_000)
    ap.add_argument("--seconds", type=float, default=600.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", action="append", help="run only these targets")
    ap.add_argument("--stats", help="write {target: executions, ...} here as JSON")
    args = ap.parse_args(argv)
    counts, elapsed = campaign(args.executions, args.seconds, args.seed, args.only)
    result = {"executions": dict(counts), "total": sum(counts.values()),
              "seconds": round(elapsed, 2), "seed": args.seed}
    if args.stats:
        with open(args.stats, "w", encoding="utf-8") as f:
            json.dump(result, f)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
