"""The floor of one awaited Produce round trip, with no producer in it.

The ``send-and-wait`` row compares one record at a time, each acknowledgement awaited
before the next send. This script asks what any asyncio client pays there before its
own code runs: the Produce request our producer writes for one 100-byte record (acks=1,
linger 0, captured once from a real ``send_and_wait``) is written again and again, and
each answer is read before the next write, by

- ``blocking``: a plain blocking socket (no event loop at all);
- ``asyncio-task`` / ``uvloop-task``: an asyncio ``Protocol`` whose ``data_received``
  sets a future that a task awaits, as ``await producer.send_and_wait()`` does (the
  loop's select, the task's wake-up and one ``writev`` per round trip, nothing else);

alternated in the same minutes with confluent-kafka's ``produce()`` + ``flush()`` and
our ``send_and_wait`` on both loops (acks=1, linger 0, as in the bench). Each prints
p50, p99 and the process CPU (user + system, every thread) per round trip.

With ``--bulk`` it asks the same of the ``nokey-100B-1p`` row instead: the largest
Produce request our ``send_many`` writes for 100-byte records (acks=1, no idempotence,
so the broker appends every copy) is written again over a blocking socket with up to
five requests in flight, and the records the broker took per second are printed: how
fast this broker, on the same cores, can take such records from one connection with
no client work at all.

With ``--paced RATE`` it asks it of the ``paced-10k`` row: the one-record request is
written by an asyncio loop at a fixed rate for ``--seconds``, without waiting for the
answers (one connection, answers in order), and each record's latency runs from its
write to its answer, as the bench times a paced record from its ``send()``. At 10,000
requests a second this broker falls behind (one connection's requests are handled one
at a time), so lower rates show the tail the broker gives a client that does nothing
else.

    python -m bench.studies.round_trip_floor --bootstrap 127.0.0.1:9092 --rounds 3000 --reps 3
    python -m bench.studies.round_trip_floor --bootstrap 127.0.0.1:9092 --bulk --rounds 400
    python -m bench.studies.round_trip_floor --bootstrap 127.0.0.1:9092 --paced 1000 --reps 3
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import socket
import sys
import time
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

if __package__ in (None, ""):  # run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from aioproducer.net.client import parse_bootstrap_servers
from bench.common import percentile

VALUE = b"x" * 100
T = TypeVar("T")


def _on_loop(main: Callable[[], Coroutine[Any, Any, T]], loop: str) -> T:
    """Runs ``main()`` on asyncio's own loop or on uvloop."""
    if loop == "uvloop":
        import uvloop

        return uvloop.run(main())
    return asyncio.run(main())


def _whole_frames(buf: bytes) -> tuple[int, bytes]:
    """How many whole response frames ``buf`` starts with, and what follows them."""
    count = 0
    while len(buf) >= 4 and len(buf) >= 4 + (size := int.from_bytes(buf[:4], "big")):
        buf = buf[4 + size:]
        count += 1
    return count, buf


def capture_request(bootstrap: str, topic: str, bulk: int = 0,
                    batch_size: int | None = None) -> tuple[bytes, int]:
    """The bytes of the Produce request our producer writes for one record, or with
    ``bulk``, the largest one ``send_many`` writes for that many records; and the
    number of records it carries."""
    import aioproducer.net.connection as connection_module
    from aioproducer import Producer

    seen: list[tuple[bytes, int]] = []
    real_writev = os.writev

    def spy(fd: int, parts: Any) -> int:
        data = b"".join(bytes(p) for p in parts)
        if len(data) >= 6 and int.from_bytes(data[4:6], "big") == 0:  # api key 0: Produce
            # One partition, one batch: the largest part is the record batch, whose
            # record count is the int32 at byte 57 of its header.
            batch = bytes(max(parts, key=lambda p: len(bytes(p))))
            seen.append((data, int.from_bytes(batch[57:61], "big")))
        return real_writev(fd, parts)

    async def once() -> None:
        extra: dict[str, Any] = {}
        if batch_size:
            extra = {"batch_size": batch_size, "max_request_size": batch_size + 65536}
        async with Producer(bootstrap_servers=bootstrap, acks=1, linger_ms=0,
                            enable_idempotence=False, **extra) as p:
            await p.send_and_wait(topic, VALUE)  # connects, fetches metadata
            connection_module.os.writev = spy  # type: ignore[attr-defined]
            try:
                if bulk:  # as the bench's runner: 10,000 a call, one call behind
                    calls = []
                    for i in range(bulk // 10_000):
                        calls.append(await p.send_many(topic, [VALUE] * 10_000))
                        if i:
                            await calls[i - 1]
                    await p.flush()
                    await calls[-1]
                else:
                    await p.send_and_wait(topic, VALUE)
            finally:
                connection_module.os.writev = real_writev  # type: ignore[attr-defined]

    asyncio.run(once())
    if not seen or (not bulk and len(seen) != 1):
        raise SystemExit(f"expected one Produce request, captured {len(seen)}")
    return max(seen, key=lambda s: len(s[0]))


def _recv(sock: socket.socket, buf: bytes) -> bytes:
    chunk = sock.recv(65536)
    if not chunk:
        raise ConnectionError("the broker closed the connection")
    return buf + chunk


def run_blocking(bootstrap: str, request: bytes, rounds: int) -> list[float]:
    sock = socket.create_connection(parse_bootstrap_servers(bootstrap)[0])
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    perf = time.perf_counter
    lat = []
    try:
        for _ in range(rounds):
            t = perf()
            sock.sendall(request)
            buf, frames = b"", 0
            while not frames:  # one request in flight: one answer, nothing after it
                buf = _recv(sock, buf)
                frames, buf = _whole_frames(buf)
            lat.append(perf() - t)
    finally:
        sock.close()
    return lat


def run_bulk(bootstrap: str, request: bytes, requests: int, records_per_request: int,
             in_flight: int = 5) -> tuple[float, float]:
    """Records per second and CPU µs per record of writing ``request`` ``requests``
    times, pipelined, reading every answer."""
    sock = socket.create_connection(parse_bootstrap_servers(bootstrap)[0])
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sent = answered = 0
        buf = b""
        c0 = time.process_time()
        t0 = time.perf_counter()
        while answered < requests:
            while sent < requests and sent - answered < in_flight:
                sock.sendall(request)
                sent += 1
            frames, buf = _whole_frames(_recv(sock, buf))
            answered += frames
        elapsed = time.perf_counter() - t0
        cpu = time.process_time() - c0
    finally:
        sock.close()
    records = requests * records_per_request
    return records / elapsed, cpu / records * 1e6


class _Floor(asyncio.Protocol):
    """Counts the bytes of each answer; the waiting task's future is set when one is
    complete (answers are small: one frame arrives in one ``data_received``, but a
    split frame is handled too)."""

    def __init__(self) -> None:
        self.waiter: asyncio.Future[None] | None = None
        self.buf = b""

    def data_received(self, data: bytes) -> None:
        frames, self.buf = _whole_frames(self.buf + data)
        w = self.waiter
        if frames and w is not None and not w.done():
            w.set_result(None)


async def _asyncio_rounds(bootstrap: str, request: bytes, rounds: int) -> list[float]:
    loop = asyncio.get_running_loop()
    host, port = parse_bootstrap_servers(bootstrap)[0]
    transport, proto = await loop.create_connection(_Floor, host, port)
    sock = transport.get_extra_info("socket")
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    fd = sock.fileno()
    perf = time.perf_counter
    lat = []
    try:
        for _ in range(rounds):
            t = perf()
            proto.waiter = loop.create_future()
            os.writev(fd, (request,))
            await proto.waiter
            lat.append(perf() - t)
    finally:
        transport.close()
    return lat


class _Paced(asyncio.Protocol):
    """Times each answer against the moment its request was written (answers come in
    the order of the requests)."""

    def __init__(self) -> None:
        self.sent: collections.deque[float] = collections.deque()
        self.lat: list[float] = []
        self.buf = b""
        self.all_in: asyncio.Future[None] | None = None
        self.expected = 0

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        frames, self.buf = _whole_frames(self.buf + data)
        for _ in range(frames):
            self.lat.append(now - self.sent.popleft())
        if len(self.lat) >= self.expected and self.all_in is not None \
                and not self.all_in.done():
            self.all_in.set_result(None)


async def _paced_rounds(bootstrap: str, request: bytes, rate: float,
                        seconds: float) -> list[float]:
    loop = asyncio.get_running_loop()
    host, port = parse_bootstrap_servers(bootstrap)[0]
    transport, proto = await loop.create_connection(_Paced, host, port)
    transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    n = int(rate * seconds)
    proto.expected = n
    proto.all_in = loop.create_future()
    perf = time.perf_counter
    try:
        start = perf() + 0.01
        for i in range(n):
            due = start + i / rate
            wait = due - perf()
            if wait > 0:
                await asyncio.sleep(wait)
            proto.sent.append(perf())
            transport.write(request)
        await asyncio.wait_for(proto.all_in, timeout=30.0)
    finally:
        transport.close()
    return proto.lat


def run_task(bootstrap: str, request: bytes, rounds: int,
             loop: str = "asyncio") -> list[float]:
    return _on_loop(lambda: _asyncio_rounds(bootstrap, request, rounds), loop)


def run_paced(bootstrap: str, request: bytes, rate: float, seconds: float) -> list[float]:
    return asyncio.run(_paced_rounds(bootstrap, request, rate, seconds))


def run_aioproducer(bootstrap: str, topic: str, rounds: int,
                    loop: str = "asyncio") -> list[float]:
    from aioproducer import Producer

    async def main() -> list[float]:
        perf = time.perf_counter
        lat = []
        async with Producer(bootstrap_servers=bootstrap, acks=1, linger_ms=0) as p:
            await p.send_and_wait(topic, VALUE)
            for _ in range(rounds):
                t = perf()
                await p.send_and_wait(topic, VALUE)
                lat.append(perf() - t)
        return lat

    return _on_loop(main, loop)


def run_confluent(bootstrap: str, topic: str, rounds: int) -> list[float]:
    import confluent_kafka

    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": 1,
                                  "linger.ms": 0})
    p.produce(topic, VALUE)
    p.flush()
    perf = time.perf_counter
    lat = []
    for _ in range(rounds):
        t = perf()
        p.produce(topic, VALUE)
        p.flush()
        lat.append(perf() - t)
    return lat


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.studies.round_trip_floor",
                                 description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", default=os.environ.get("AIOPRODUCER_BOOTSTRAP"))
    ap.add_argument("--rounds", type=int, default=3000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--bulk", action="store_true",
                    help="the broker's ceiling for send_many's requests instead")
    ap.add_argument("--paced", type=float, default=None, metavar="RATE",
                    help="the paced row's floor instead: one-record requests at RATE/s")
    ap.add_argument("--seconds", type=float, default=5.0, help="with --paced: how long")
    ap.add_argument("--batch-size", type=int, default=None,
                    help="with --bulk: the producer's batch_size (default: its own)")
    ns = ap.parse_args(argv)
    if not ns.bootstrap:
        ap.error("--bootstrap (or $AIOPRODUCER_BOOTSTRAP) is needed")
    from bench.broker import Admin

    admin = Admin(ns.bootstrap)
    topic = f"floor-{uuid.uuid4().hex[:8]}"
    admin.create_topic(topic, 1)
    try:
        if ns.bulk:
            return _bulk(ns.bootstrap, topic, ns.rounds, ns.reps, ns.batch_size)
        request, _ = capture_request(ns.bootstrap, topic)
        if ns.paced:
            return _paced(ns.bootstrap, request, ns.paced, ns.seconds, ns.reps)
        print(f"captured a Produce request of {len(request)} bytes")
        rows: list[tuple[str, Callable[[], list[float]]]] = [
            ("blocking", lambda: run_blocking(ns.bootstrap, request, ns.rounds)),
            ("asyncio-task", lambda: run_task(ns.bootstrap, request, ns.rounds)),
            ("uvloop-task", lambda: run_task(ns.bootstrap, request, ns.rounds, "uvloop")),
            ("confluent-kafka", lambda: run_confluent(ns.bootstrap, topic, ns.rounds)),
            ("aioproducer", lambda: run_aioproducer(ns.bootstrap, topic, ns.rounds)),
            ("aioproducer+uvloop",
             lambda: run_aioproducer(ns.bootstrap, topic, ns.rounds, "uvloop")),
        ]
        print("| rep | row | p50 µs | p99 µs | CPU µs per round trip |")
        print("|---|---|---|---|---|")
        for rep in range(ns.reps):
            for name, fn in rows:
                c0 = time.process_time()
                lat = sorted(fn())
                cpu = (time.process_time() - c0) / ns.rounds * 1e6
                p50 = (percentile(lat, 0.5) or 0.0) * 1e6
                p99 = (percentile(lat, 0.99) or 0.0) * 1e6
                print(f"| {rep + 1} | {name} | {p50:.0f} | {p99:.0f} | {cpu:.0f} |",
                      flush=True)
    finally:
        admin.delete_topic(topic)
    return 0


def _paced(bootstrap: str, request: bytes, rate: float, seconds: float, reps: int) -> int:
    print(f"one-record requests at {rate:,.0f}/s for {seconds:g} s, asyncio loop")
    print("| rep | p50 µs | p99 µs | max µs | over 1 ms |")
    print("|---|---|---|---|---|")
    for rep in range(reps):
        lat = sorted(run_paced(bootstrap, request, rate, seconds))
        p50 = (percentile(lat, 0.5) or 0.0) * 1e6
        p99 = (percentile(lat, 0.99) or 0.0) * 1e6
        over = sum(1 for x in lat if x > 1e-3)
        print(f"| {rep + 1} | {p50:.0f} | {p99:.0f} | {lat[-1] * 1e6:.0f} | {over:,} |",
              flush=True)
    return 0


def _bulk(bootstrap: str, topic: str, requests: int, reps: int,
          batch_size: int | None) -> int:
    request, records = capture_request(bootstrap, topic, bulk=200_000, batch_size=batch_size)
    print(f"captured a Produce request of {len(request):,} bytes, {records:,} records")
    print("| rep | records/s the broker took | client CPU µs per record |")
    print("|---|---|---|")
    for rep in range(reps):
        rate, cpu = run_bulk(bootstrap, request, requests, records)
        print(f"| {rep + 1} | {rate:,.0f} | {cpu:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
