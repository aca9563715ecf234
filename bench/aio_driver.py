"""The produce loops of the asyncio clients (aioproducer, aiokafka), written once.

A client is given as two coroutine functions: ``send(topic, value, key)`` returning an
awaitable with ``add_done_callback`` (resolved on the ack), and ``flush()``; for the
scenarios with ``sync_api``, also ``send_and_wait(topic, value, key)`` (the library's
own call that returns on the ack).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from bench.common import (
    CONCURRENT,
    PACED,
    SEND_AND_WAIT,
    Measured,
    RunArgs,
    cpu_seconds,
    split_count,
    topic_names,
)

Send = Callable[[str, bytes, "bytes | None"], Awaitable[Any]]
Flush = Callable[[], Awaitable[Any]]


async def drive(args: RunArgs, send: Send, flush: Flush, value: bytes,
                keys: list[bytes] | None, send_and_wait: Send | None = None) -> Measured:
    if args.sync_api and args.mode in (SEND_AND_WAIT, CONCURRENT):
        if send_and_wait is None:
            raise ValueError("this scenario needs the client's send_and_wait()")
        return await _callers(args, send_and_wait, value, keys)
    if args.mode == SEND_AND_WAIT:
        return await _send_and_wait(args, send, value, keys)
    return await _pipelined(args, send, flush, value, keys)


async def _callers(args: RunArgs, send_and_wait: Send, value: bytes,
                   keys: list[bytes] | None) -> Measured:
    """``await send_and_wait(...)`` in a loop: one caller (SEND_AND_WAIT), or
    ``args.concurrency`` tasks at once (CONCURRENT) sharing the records."""
    topic = args.topic
    names = topic_names(args) if args.topics > 1 else None
    mask = len(keys) - 1 if keys is not None else 0
    counts = (split_count(args.records, args.concurrency) if args.mode == CONCURRENT
              else [args.records])
    perf = time.perf_counter
    lat: list[float] = []

    async def caller(first: int, count: int) -> None:
        key = None
        topic_i = topic
        for i in range(first, first + count):
            if keys is not None:
                key = keys[i & mask]
            if names is not None:
                topic_i = names[i % len(names)]
            t = perf()
            await send_and_wait(topic_i, value, key)
            lat.append(perf() - t)

    firsts = [sum(counts[:j]) for j in range(len(counts))]
    cpu0 = cpu_seconds()
    t0 = perf()
    if len(counts) == 1:
        await caller(0, counts[0])
    else:
        await asyncio.gather(*(caller(f, c) for f, c in zip(firsts, counts, strict=True)))
    elapsed = perf() - t0
    cpu = cpu_seconds() - cpu0
    return Measured(records=args.records, elapsed_s=elapsed, cpu_loop_s=cpu,
                    latencies_s=lat)


async def _await_all(futs: list[Any]) -> None:
    for f in futs:
        await f


async def _pipelined(args: RunArgs, send: Send, flush: Flush, value: bytes,
                     keys: list[bytes] | None) -> Measured:
    """Throughput and paced modes: futures are awaited one chunk behind the sends."""
    topic, n, every, chunk = args.topic, args.records, args.sample_every, args.chunk
    # Several topics (the curves): record i goes to names[i % len(names)].
    names = topic_names(args) if args.topics > 1 else None
    ntopics = len(names) if names is not None else 1
    mask = len(keys) - 1 if keys is not None else 0
    paced = args.mode == PACED
    interval = 1.0 / args.rate if paced else 0.0
    perf = time.perf_counter
    sleep = asyncio.sleep
    lat: list[float] = []
    append_lat = lat.append
    prev: list[Any] = []
    cur: list[Any] = []
    key = None
    cpu0 = cpu_seconds()
    t0 = perf()
    for i in range(n):
        if paced:
            # Sleep until this record's slot; never spin.
            delay = t0 + i * interval - perf()
            if delay > 0:
                await sleep(delay)
        if keys is not None:
            key = keys[i & mask]
        if names is not None:
            topic = names[i % ntopics]
        if i % every == 0:
            t = perf()
            fut = await send(topic, value, key)
            fut.add_done_callback(lambda _f, t=t: append_lat(perf() - t))
        else:
            fut = await send(topic, value, key)
        cur.append(fut)
        if len(cur) >= chunk:
            await _await_all(prev)
            prev = cur
            cur = []
    await flush()
    await _await_all(prev)
    await _await_all(cur)
    elapsed = perf() - t0
    cpu = cpu_seconds() - cpu0
    return Measured(records=n, elapsed_s=elapsed, cpu_loop_s=cpu, latencies_s=lat)


async def _send_and_wait(args: RunArgs, send: Send, value: bytes,
                         keys: list[bytes] | None) -> Measured:
    topic, n = args.topic, args.records
    if args.topics > 1:
        raise ValueError("send-and-wait runs one topic")
    mask = len(keys) - 1 if keys is not None else 0
    perf = time.perf_counter
    lat: list[float] = []
    key = None
    cpu0 = cpu_seconds()
    t0 = perf()
    for i in range(n):
        if keys is not None:
            key = keys[i & mask]
        t = perf()
        fut = await send(topic, value, key)
        await fut
        lat.append(perf() - t)
    elapsed = perf() - t0
    cpu = cpu_seconds() - cpu0
    return Measured(records=n, elapsed_s=elapsed, cpu_loop_s=cpu, latencies_s=lat)


def run_loop(coro_fn: Callable[[], Coroutine[Any, Any, Measured]], loop: str) -> Measured:
    """Run on the default asyncio loop or on uvloop.

    The main task returns None and the measurement comes back through ``box``: at exit
    CPython 3.11's ``asyncio.run`` formats the main task's repr (``signal.getsignal``
    builds a ValueError that names its SIGINT handler, which holds the task), and the
    repr of a result holding thousands of latencies cost ~830 instructions per record
    in ``bench/profiling/callgrind_producer.sh`` (after the clock stops, so not in the bench's
    own figures).
    """
    box: list[Measured] = []

    async def main() -> None:
        box.append(await coro_fn())

    if loop == "uvloop":
        import uvloop

        uvloop.run(main())
    elif loop == "asyncio":
        asyncio.run(main())
    else:
        raise ValueError(f"unknown event loop {loop!r}")
    return box[0]
