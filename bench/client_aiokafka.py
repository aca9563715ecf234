"""Runner for aiokafka's ``AIOKafkaProducer`` (rows ``aiokafka`` and ``aiokafka+uvloop``).

``await producer.send()`` returns an asyncio future per record; the futures are awaited
one chunk behind the sends, then ``flush()``. Library defaults apart from what the
scenario fixes (acks, idempotence, linger).
"""

from __future__ import annotations

import asyncio
from typing import Any

from bench.aio_driver import drive, run_loop
from bench.common import (
    Measured,
    RunArgs,
    Skip,
    child_main,
    make_keys,
    make_value,
    topic_names,
)


def run(args: RunArgs) -> Measured:
    try:
        import aiokafka
        from aiokafka import AIOKafkaProducer
    except ImportError as e:
        raise Skip(f"aiokafka is not installed: {e}") from None
    if args.loop == "uvloop":
        try:
            import uvloop  # noqa: F401
        except ImportError:
            raise Skip("uvloop is not installed") from None
    opts: dict[str, Any] = {"bootstrap_servers": args.bootstrap}
    if args.acks is not None:
        opts["acks"] = "all" if args.acks == "all" else int(args.acks)
    if args.idempotence:
        opts["enable_idempotence"] = True
    if args.linger_ms is not None:
        opts["linger_ms"] = args.linger_ms
    if args.compression:
        opts["compression_type"] = args.compression
    if args.max_request_size:
        opts["max_request_size"] = args.max_request_size
    value = make_value(args.value_size, compressible=bool(args.compression))
    keys = make_keys(args.key_size, args.key_pool)

    async def main() -> Measured:
        producer = AIOKafkaProducer(**opts)
        await producer.start()
        try:
            if args.warm_metadata:
                # All at once: the client asks for them together.
                await asyncio.gather(*(producer.partitions_for(t) for t in topic_names(args)))
            return await drive(args, producer.send, producer.flush, value, keys,
                               producer.send_and_wait)
        finally:
            await producer.stop()

    m = run_loop(main, args.loop)
    m.version = aiokafka.__version__
    return m


if __name__ == "__main__":
    raise SystemExit(child_main("aiokafka", run))
