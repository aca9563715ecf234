"""Runner for kafka-python's ``KafkaProducer``: ``send()`` per record, then ``flush()``.

Callbacks are attached to the sampled records only (latency); completeness is checked
by the harness reading the broker's offsets.
"""

from __future__ import annotations

import time
from typing import Any

from bench.common import (
    CONCURRENT,
    KEY_MASK,
    PACED,
    SEND_AND_WAIT,
    Measured,
    RunArgs,
    Skip,
    child_main,
    cpu_seconds,
    make_keys,
    make_value,
    split_count,
    unsupported_sweep,
)


def run(args: RunArgs) -> Measured:
    unsupported_sweep(args, "the kafka-python runner")
    try:
        import kafka
        from kafka import KafkaProducer
    except ImportError as e:
        raise Skip(f"kafka-python is not installed: {e}") from None
    opts: dict[str, Any] = {"bootstrap_servers": args.bootstrap}
    if args.acks is not None:
        opts["acks"] = "all" if args.acks == "all" else int(args.acks)
    if args.idempotence:
        opts["enable_idempotence"] = True
    if args.linger_ms is not None:
        opts["linger_ms"] = args.linger_ms
    if args.compression:
        opts["compression_type"] = args.compression
    value = make_value(args.value_size, compressible=bool(args.compression))
    keys = make_keys(args.key_size)
    producer = KafkaProducer(**opts)

    errors: list[str] = []
    lat: list[float] = []
    perf = time.perf_counter

    def on_error(exc: BaseException) -> None:
        errors.append(f"{type(exc).__name__}: {exc}")

    topic, n, every = args.topic, args.records, args.sample_every
    send = producer.send
    key = None
    try:
        cpu0 = cpu_seconds()
        t0 = perf()
        if args.mode == CONCURRENT:
            _threads(args, send, value, keys, lat, errors)
        elif args.mode == SEND_AND_WAIT:
            for i in range(n):
                if keys is not None:
                    key = keys[i & KEY_MASK]
                t = perf()
                send(topic, value=value, key=key).get(timeout=args.timeout_s)
                lat.append(perf() - t)
        else:
            paced = args.mode == PACED
            interval = 1.0 / args.rate if paced else 0.0
            sleep = time.sleep
            for i in range(n):
                if paced:
                    delay = t0 + i * interval - perf()
                    if delay > 0:
                        sleep(delay)
                if keys is not None:
                    key = keys[i & KEY_MASK]
                if i % every == 0:
                    t = perf()
                    fut = send(topic, value=value, key=key)
                    fut.add_callback(lambda _md, t=t: lat.append(perf() - t))
                    fut.add_errback(on_error)
                else:
                    send(topic, value=value, key=key)
            producer.flush(timeout=args.timeout_s)
        elapsed = perf() - t0
        cpu = cpu_seconds() - cpu0
    finally:
        producer.close(timeout=10)
    return Measured(records=n, elapsed_s=elapsed, cpu_loop_s=cpu, latencies_s=lat,
                    version=kafka.__version__, errors=errors)


def _threads(args: RunArgs, send: Any, value: bytes, keys: list[bytes] | None,
             lat: list[float], errors: list[str]) -> None:
    """``send(...).get()`` per record from ``args.concurrency`` threads at once."""
    import threading

    perf = time.perf_counter
    counts = split_count(args.records, args.concurrency)
    firsts = [sum(counts[:j]) for j in range(len(counts))]

    def caller(first: int, count: int) -> None:
        key = None
        try:
            for i in range(first, first + count):
                if keys is not None:
                    key = keys[i & KEY_MASK]
                t = perf()
                send(args.topic, value=value, key=key).get(timeout=args.timeout_s)
                lat.append(perf() - t)
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=caller, args=(f, c), daemon=True)
               for f, c in zip(firsts, counts, strict=True)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(args.timeout_s)


if __name__ == "__main__":
    raise SystemExit(child_main("kafka-python", run))
