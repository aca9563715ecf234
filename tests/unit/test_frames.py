"""The connection's compiled framing (aioproducer/_native/frames.pyx): a request's head
is what the protocol says, whatever buffers its body is made of."""

from __future__ import annotations

import array
import random
import struct

import pytest

from aioproducer._native.frames import InFlight, request_head

SEED = 20261128


def _expected(api_key: int, version: int, cid: int, field: bytes, flexible: bool,
              parts: list[bytes | bytearray | memoryview]) -> tuple[bytes, int]:
    header = struct.pack(">hhi", api_key, version, cid) + field + (b"\x00" if flexible else b"")
    size = len(header) + sum(memoryview(p).nbytes for p in parts)
    return struct.pack(">i", size) + header, size + 4


def test_request_head_matches_the_protocol() -> None:
    print("seed", SEED)
    rnd = random.Random(SEED)
    for _ in range(2000):
        api_key = rnd.randint(-32768, 32767)
        version = rnd.randint(-32768, 32767)
        cid = rnd.randint(-(2**31), 2**31 - 1)
        name = rnd.randbytes(rnd.randint(0, 40))
        field = rnd.choice([b"\xff\xff", len(name).to_bytes(2, "big") + name])
        flexible = rnd.random() < 0.5
        parts: list[bytes | bytearray | memoryview] = []
        for _ in range(rnd.randint(0, 6)):
            data = rnd.randbytes(rnd.randint(0, 300))
            kind = rnd.randint(0, 3)
            if kind == 0:
                parts.append(data)
            elif kind == 1:
                parts.append(bytearray(data))
            elif kind == 2:
                parts.append(memoryview(data)[rnd.randint(0, len(data)):])
            else:  # a memoryview whose items are 4 bytes: its nbytes, not its len
                parts.append(memoryview(array.array("i", range(len(data) // 4))))
        got = request_head(api_key, version, cid, field, flexible, parts)
        assert got == _expected(api_key, version, cid, field, flexible, parts)


def test_request_head_refuses_what_the_header_cannot_hold() -> None:
    with pytest.raises(OverflowError, match="not an INT16"):
        request_head(40000, 0, 1, b"\xff\xff", True, [])
    with pytest.raises(OverflowError, match="not an INT16"):
        request_head(0, -40000, 1, b"\xff\xff", True, [])
    with pytest.raises(TypeError):
        request_head(0, 0, 1, b"\xff\xff", True, [object()])
    with pytest.raises(TypeError):
        request_head(0, 0, 1, "text", True, [])  # type: ignore[arg-type]


def test_in_flight_keeps_what_it_was_given() -> None:
    def reply(answer: object, exc: BaseException | None) -> None:
        pass

    entry = InFlight(7, 0, 13, True, None, 12.5, 30000, bytes, reply)
    assert (entry.correlation_id, entry.api_key, entry.api_version, entry.flexible_header,
            entry.future, entry.deadline, entry.timeout_ms, entry.decode, entry.reply) == (
        7, 0, 13, True, None, 12.5, 30000, bytes, reply)
    with pytest.raises(AttributeError):
        entry.reply = None  # type: ignore[misc]


def test_new_future_is_the_loops_own_kind() -> None:
    """``new_future`` makes asyncio's Future on asyncio's loops, and defers to a loop
    that makes its own (uvloop, or any loop overriding ``create_future``)."""
    import asyncio

    import uvloop

    from aioproducer._native import new_future

    class Custom(asyncio.SelectorEventLoop):
        made = 0

        def create_future(self) -> asyncio.Future[object]:
            Custom.made += 1
            return super().create_future()

    for make in (asyncio.new_event_loop, uvloop.new_event_loop, Custom):
        loop = make()
        try:
            fut = new_future(loop)
            assert fut.get_loop() is loop and not fut.done()
            assert type(fut) is type(loop.create_future())
            fut.set_result(1)
            assert loop.run_until_complete(fut) == 1
        finally:
            loop.close()
    assert Custom.made == 2  # new_future went through the override
