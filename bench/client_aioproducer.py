"""Runner for aioproducer (ours), through its public API only.

Rows: ``aioproducer`` (asyncio loop), ``aioproducer+uvloop``, ``aioproducer-send_many``
(the bulk API), ``@1MB`` variants with librdkafka's default batch size, and
``-loopcomp`` variants that compress on the event loop (``compression_thread=False``;
compressed scenarios only).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from typing import Any

from bench.aio_driver import drive, run_loop
from bench.common import (
    THROUGHPUT,
    Measured,
    RunArgs,
    Skip,
    child_main,
    cpu_seconds,
    make_keys,
    make_value,
    topic_names,
)


def _options(args: RunArgs) -> dict[str, Any]:
    opts: dict[str, Any] = {"bootstrap_servers": args.bootstrap}
    if args.acks is not None:
        opts["acks"] = "all" if args.acks == "all" else int(args.acks)
    if args.idempotence:
        opts["enable_idempotence"] = True
    if args.linger_ms is not None:
        opts["linger_ms"] = args.linger_ms
    if args.compression:
        opts["compression_type"] = args.compression
        if not args.compression_thread:
            opts["compression_thread"] = False
    if args.batch_size:
        opts["batch_size"] = args.batch_size
        opts["max_request_size"] = max(args.batch_size + 65536, 1048576)
    if args.max_request_size:
        opts["max_request_size"] = max(args.max_request_size,
                                       opts.get("max_request_size", 0))
    return opts


async def _send_many(args: RunArgs, p: Any, value: bytes, keys: list[bytes] | None) -> Measured:
    """Bulk API: one ``send_many(topic, values, keys=...)`` call per chunk.

    Whatever it returns is awaited: a list of per-record awaitables, or one awaitable.
    Latency is sampled on every n-th record of a list, or per call otherwise.

    The keys of a chunk are a slice of the key pool repeated (built before the clock
    starts): record ``i`` gets ``keys[i & (len(keys) - 1)]``, as in the per-record loops, but
    the chunk's list is made as a bulk caller with a column of keys makes it, not by a
    Python loop over its records (which cost more than the send itself: ~570 of the
    ~1,550 instructions per record under callgrind).
    """
    topic, n, chunk, every = args.topic, args.records, args.chunk, args.sample_every
    perf = time.perf_counter
    lat: list[float] = []
    pending: list[Any] = []
    tiled = None if keys is None else keys * (chunk // len(keys) + 2)
    mask = 0 if keys is None else len(keys) - 1
    cpu0 = cpu_seconds()
    t0 = perf()
    for start in range(0, n, chunk):
        count = min(chunk, n - start)
        values = [value] * count
        ks = None if tiled is None else tiled[start & mask:(start & mask) + count]
        t = perf()
        res = await p.send_many(topic, values, keys=ks)
        if isinstance(res, list | tuple):
            for j in range(0, len(res), every):
                res[j].add_done_callback(lambda _f, t=t: lat.append(perf() - t))
            prev, pending = pending, list(res)
        else:
            prev, pending = pending, [res]
        for f in prev:
            if inspect.isawaitable(f):
                await f
    await p.flush()
    for f in pending:
        if inspect.isawaitable(f):
            await f
    elapsed = perf() - t0
    return Measured(records=n, elapsed_s=elapsed, cpu_loop_s=cpu_seconds() - cpu0,
                    latencies_s=lat)


def run(args: RunArgs) -> Measured:
    try:
        import aioproducer
        from aioproducer import Producer
    except Exception as e:  # the native core may not be built
        raise Skip(f"aioproducer is not importable: {type(e).__name__}: {e}") from None
    if args.api == "send_many" and not hasattr(Producer, "send_many"):
        raise Skip("Producer has no send_many() yet")
    if args.api == "send_many" and args.mode != THROUGHPUT:
        raise Skip("send_many is measured in throughput scenarios only")
    if args.api == "send_many" and args.topics != 1:
        raise Skip("send_many is measured with one topic only")
    if not args.compression_thread and not args.compression:
        raise Skip("the rows that compress on the loop are for compressed scenarios")
    if args.loop == "uvloop":
        try:
            import uvloop  # noqa: F401
        except ImportError:
            raise Skip("uvloop is not installed") from None
    value = make_value(args.value_size, compressible=bool(args.compression))
    keys = make_keys(args.key_size, args.key_pool)
    opts = _options(args)

    async def main() -> Measured:
        async with Producer(**opts) as p:
            if args.warm_metadata:
                # All at once: the client asks for them together.
                await asyncio.gather(*(p.partitions_for(t) for t in topic_names(args)))
            if args.api == "send_many":
                m = await _send_many(args, p, value, keys)
            else:
                m = await drive(args, p.send, p.flush, value, keys, p.send_and_wait)
        return m

    m = run_loop(main, args.loop)
    m.version = getattr(aioproducer, "__version__", "") or _dist_version("aioproducer")
    return m


def _dist_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return ""


if __name__ == "__main__":
    raise SystemExit(child_main("aioproducer", run))
