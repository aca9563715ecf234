"""Runner for confluent-kafka (librdkafka): ``produce()`` + ``poll(0)`` per record, then
``flush()``. A full local queue (BufferError) is waited out with ``poll()``.

Delivery callbacks are attached to the sampled records only (latency); completeness is
checked by ``flush()`` returning 0 and by the harness reading the broker's offsets.
"""

from __future__ import annotations

import time
from typing import Any

from bench.common import (
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
)


def run(args: RunArgs) -> Measured:
    try:
        import confluent_kafka
    except ImportError as e:
        raise Skip(f"confluent-kafka is not installed: {e}") from None
    conf: dict[str, Any] = {"bootstrap.servers": args.bootstrap, "acks": args.acks}
    if args.idempotence:
        conf["enable.idempotence"] = True
    if args.linger_ms is not None:
        conf["linger.ms"] = args.linger_ms
    if args.compression:
        conf["compression.type"] = args.compression
    value = make_value(args.value_size, compressible=bool(args.compression))
    keys = make_keys(args.key_size)
    producer = confluent_kafka.Producer(conf)
    # Connect and fetch the topic's metadata before the clock starts, like the others.
    producer.list_topics(args.topic, timeout=30)

    errors: list[str] = []
    lat: list[float] = []
    perf = time.perf_counter

    def sampled(t_sent: float) -> Any:
        def on_delivery(err: Any, _msg: Any) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                lat.append(perf() - t_sent)
        return on_delivery

    topic, n, every = args.topic, args.records, args.sample_every
    produce, poll = producer.produce, producer.poll
    deadline = time.monotonic() + args.timeout_s
    key = None
    cpu0 = cpu_seconds()
    t0 = perf()
    if args.mode == SEND_AND_WAIT:
        for i in range(n):
            if keys is not None:
                key = keys[i & KEY_MASK]
            before = len(lat) + len(errors)
            produce(topic, value, key, on_delivery=sampled(perf()))
            while len(lat) + len(errors) == before:
                poll(1.0)
                if time.monotonic() > deadline:
                    raise TimeoutError("no delivery report within the run's timeout")
    else:
        paced = args.mode == PACED
        interval = 1.0 / args.rate if paced else 0.0
        for i in range(n):
            if paced:
                # Wait for this record's slot inside poll() (serves callbacks, no spin).
                while True:
                    delay = t0 + i * interval - perf()
                    if delay <= 0:
                        break
                    poll(delay)
            if keys is not None:
                key = keys[i & KEY_MASK]
            while True:
                try:
                    if i % every == 0:
                        produce(topic, value, key, on_delivery=sampled(perf()))
                    else:
                        produce(topic, value, key)
                    break
                except BufferError:
                    poll(0.1)
                    if time.monotonic() > deadline:
                        raise TimeoutError("the local queue stayed full") from None
            poll(0)
        remaining = producer.flush(max(1.0, deadline - time.monotonic()))
        if remaining:
            errors.append(f"flush() timed out with {remaining} record(s) undelivered")
    elapsed = perf() - t0
    cpu = cpu_seconds() - cpu0
    return Measured(records=n, elapsed_s=elapsed, cpu_loop_s=cpu, latencies_s=lat,
                    version=_version(confluent_kafka), errors=errors)


def _version(module: Any) -> str:
    v = module.version()
    return str(v[0] if isinstance(v, tuple) else v)


if __name__ == "__main__":
    raise SystemExit(child_main("confluent-kafka", run))
