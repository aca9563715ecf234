"""Requests written with one ``writev`` of their parts (BrokerConnection._writev).

On asyncio's own plain-TCP transport, with nothing buffered, a request goes straight
from its parts (the batches' memory) to the socket; what the socket does not take goes
to the transport, and the requests after it queue behind it there. These tests make
the socket take little (small buffers, a reader that waits) and check that the peer
gets every byte of every request, in order. On uvloop the transport writes as before.
"""

from __future__ import annotations

import asyncio
import random
import socket
import struct

import pytest

from aioproducer.net.connection import BrokerConnection

pytestmark = pytest.mark.asyncio


def _frames(data: bytes) -> list[tuple[int, bytes]]:
    """(correlation id, body) of each request frame (header v2, client id "t")."""
    out = []
    pos = 0
    while pos < len(data):
        (size,) = struct.unpack_from(">i", data, pos)
        frame = data[pos + 4:pos + 4 + size]
        assert len(frame) == size, "truncated frame"
        _key, _version, cid, id_len = struct.unpack_from(">hhih", frame)
        body = frame[10 + id_len + 1:]  # + the empty tagged fields of header v2
        out.append((cid, body))
        pos += 4 + size
    return out


async def _read_all(sock: socket.socket, n: int, delay: float) -> bytes:
    loop = asyncio.get_running_loop()
    await asyncio.sleep(delay)  # let the writer fill the socket's buffers first
    buf = bytearray()
    while len(buf) < n:
        chunk = await loop.sock_recv(sock, 65536)
        assert chunk, "the writer's side closed early"
        buf += chunk
    return bytes(buf)


async def test_partial_writes_keep_every_byte_in_order() -> None:
    seed = random.randrange(2**32)
    print(f"seed={seed}")
    rnd = random.Random(seed)
    loop = asyncio.get_running_loop()
    a, b = socket.socketpair()
    for s, opt in ((a, socket.SO_SNDBUF), (b, socket.SO_RCVBUF)):
        s.setsockopt(socket.SOL_SOCKET, opt, 4096)
    a.setblocking(False)
    b.setblocking(False)
    conn = BrokerConnection("127.0.0.1", 0, client_id="t")
    transport, _ = await loop.create_connection(lambda: conn, sock=a)
    direct = type(transport).__module__ == "asyncio.selector_events"
    assert (conn._fd >= 0) is direct
    try:
        expected: list[bytes] = []
        for _ in range(6):
            # Parts as the Sender gives them: bytes and memoryviews of batch memory,
            # some empty, up to ~1 MB a request.
            parts: list[bytes | memoryview] = []
            for _ in range(rnd.randrange(1, 40)):
                piece = rnd.randbytes(rnd.choice((0, 1, 7, 100, 16_384, 60_000)))
                parts.append(memoryview(piece) if rnd.random() < 0.5 else piece)
            expected.append(b"".join(bytes(p) for p in parts))
            fut = conn.send_raw(0, 9, parts, flexible=True, expect_response=True)
            assert fut is not None
        total = sum(4 + 10 + 1 + 1 + len(e) for e in expected)
        if direct:
            # The socket took part of the first request at most: the rest waits in
            # the transport, with the later requests behind it.
            assert transport.get_write_buffer_size() > 0
        data = await asyncio.wait_for(_read_all(b, total, 0.05), 30)
        frames = _frames(data)
        assert [cid for cid, _ in frames] == list(range(len(expected)))
        assert [body for _, body in frames] == expected
    finally:
        conn.close()
        transport.close()
        b.close()
        await asyncio.sleep(0)


async def test_a_request_the_socket_takes_whole_leaves_nothing_buffered() -> None:
    loop = asyncio.get_running_loop()
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    conn = BrokerConnection("127.0.0.1", 0, client_id="t")
    transport, _ = await loop.create_connection(lambda: conn, sock=a)
    try:
        body = [b"abc", memoryview(b"defgh"), b""]
        conn.send_raw(0, 9, body, flexible=True, expect_response=True)
        assert transport.get_write_buffer_size() == 0
        data = await asyncio.wait_for(_read_all(b, 4 + 10 + 1 + 1 + 8, 0), 10)
        assert _frames(data) == [(0, b"abcdefgh")]
    finally:
        conn.close()
        transport.close()
        b.close()
        await asyncio.sleep(0)
