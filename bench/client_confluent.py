"""Runner for confluent-kafka (librdkafka): ``produce()`` + ``poll(0)`` per record, then
``flush()``. A full local queue (BufferError) is waited out with ``poll()``.

Send-and-wait: ``produce()`` then ``poll()`` until the delivery callback ran; with the
library's own way to wait (``sync_api``), ``produce()`` + ``flush()``, and in the
concurrent mode that from ``concurrency`` threads (``flush()`` is thread-safe).

Delivery callbacks are attached to the sampled records only (latency); completeness is
checked by ``flush()`` returning 0 and by the harness reading the broker's offsets.
"""

from __future__ import annotations

import time
from typing import Any

from bench.common import (
    CONCURRENT,
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
    topic_names,
)

PID_WAIT_S = 0.7
"""An idempotent producer's id has arrived this long after ``Producer()``."""


def run(args: RunArgs) -> Measured:
    try:
        import confluent_kafka
    except ImportError as e:
        raise Skip(f"confluent-kafka is not installed: {e}") from None
    conf: dict[str, Any] = {"bootstrap.servers": args.bootstrap}
    if args.acks is not None:
        conf["acks"] = args.acks
    if args.idempotence:
        conf["enable.idempotence"] = True
    if args.linger_ms is not None:
        conf["linger.ms"] = args.linger_ms
    if args.compression:
        conf["compression.type"] = args.compression
    if args.max_request_size:
        conf["message.max.bytes"] = args.max_request_size
    value = make_value(args.value_size, compressible=bool(args.compression))
    keys = make_keys(args.key_size, args.key_pool)
    mask = len(keys) - 1 if keys is not None else 0
    names = topic_names(args) if args.topics > 1 else None
    ntopics = len(names) if names is not None else 1
    producer = confluent_kafka.Producer(conf)
    created = time.monotonic()
    # Connect and fetch the topic's metadata before the clock starts, like the others
    # (several topics: all the cluster's, which librdkafka's cache keeps for the
    # topics produce() then names).
    if names is None:
        producer.list_topics(args.topic, timeout=30)
    else:
        producer.list_topics(timeout=30)
    if args.idempotence:
        # The producer id, before the clock too. librdkafka asks for it when a broker
        # connection is up, and when none is yet at its first try (most runs here) on
        # a 500 ms timer; Python cannot see when it has arrived, so wait that timer out.
        # Without this, about half of the idempotent runs spent 0.5 s inside the clock
        # waiting for it (the time, not the CPU: 2,000 records took 4 ms or 504 ms).
        time.sleep(max(0.0, created + PID_WAIT_S - time.monotonic()))

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
    if args.mode == CONCURRENT or (args.mode == SEND_AND_WAIT and args.sync_api):
        _callers(args, producer, value, keys, lat, errors, deadline)
    elif args.mode == SEND_AND_WAIT:
        if names is not None:
            raise ValueError("send-and-wait runs one topic")
        for i in range(n):
            if keys is not None:
                key = keys[i & mask]
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
                key = keys[i & mask]
            if names is not None:
                topic = names[i % ntopics]
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


def _callers(args: RunArgs, producer: Any, value: bytes, keys: list[bytes] | None,
             lat: list[float], errors: list[str], deadline: float) -> None:
    """``produce()`` + ``flush()`` per record, from one caller or from
    ``args.concurrency`` threads at once (CONCURRENT)."""
    import threading

    perf = time.perf_counter
    topic = args.topic
    names = topic_names(args) if args.topics > 1 else None
    mask = len(keys) - 1 if keys is not None else 0
    counts = (split_count(args.records, args.concurrency) if args.mode == CONCURRENT
              else [args.records])

    def caller(first: int, count: int) -> None:
        key = None
        topic_i = topic
        for i in range(first, first + count):
            if keys is not None:
                key = keys[i & mask]
            if names is not None:
                topic_i = names[i % len(names)]
            t = perf()
            done: list[Any] = []
            producer.produce(topic_i, value, key,
                             on_delivery=lambda err, _msg, done=done: done.append(err))
            while not done:
                producer.flush(1.0)
                if time.monotonic() > deadline:
                    errors.append("no delivery report within the run's timeout")
                    return
            if done[0] is not None:
                errors.append(str(done[0]))
            else:
                lat.append(perf() - t)

    if len(counts) == 1:
        caller(0, counts[0])
        return
    firsts = [sum(counts[:j]) for j in range(len(counts))]
    threads = [threading.Thread(target=caller, args=(f, c), daemon=True)
               for f, c in zip(firsts, counts, strict=True)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(max(0.0, deadline - time.monotonic()))


def _version(module: Any) -> str:
    v = module.version()
    return str(v[0] if isinstance(v, tuple) else v)


if __name__ == "__main__":
    raise SystemExit(child_main("confluent-kafka", run))
