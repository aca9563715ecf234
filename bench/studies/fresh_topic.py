"""A topic just created: does a producer catch up on it as fast as confluent-kafka?
(issue #37, item 3)

    python -m bench.studies.fresh_topic                      # starts a one-node broker
    python -m bench.studies.fresh_topic --bootstrap 127.0.0.1:9092 --reps 5 --json out.json

(from the repository root). A broker named by ``--bootstrap`` is used as it is; without
it a one-node local broker (:class:`aioproducer.devbroker.LocalKafka`, in a temporary
directory) is started and stopped at the end.

For each of ``--reps`` repetitions, each client once, in alternating order (aioproducer
first in even repetitions, confluent-kafka first in odd ones): a fresh topic of
``--partitions`` partitions (replication 1) is created with confluent-kafka's
AdminClient; ``--start-delay`` seconds after ``create_topics()`` has returned, the
client, waiting in a subprocess of its own (imports done, keys built: neither client
warms the other), is told the topic's name. It then makes its producer (acks=all,
idempotent, each client's defaults otherwise: aioproducer's murmur2 partitioner,
librdkafka's consistent_random) and sends ``--records`` records, 16-byte keys from a
seeded generator (``--seed``, printed) and 100-byte values, then flushes. Each
partition answers NOT_LEADER_OR_FOLLOWER (or UNKNOWN_TOPIC_OR_PARTITION) until the
broker has made its log, while the metadata already names its leader.

Measured per run: ``ack_all``, the first send to the last acknowledgement;
``first_ack``, the first send to the first acknowledgement; the partitions' first
acknowledgements (median and 90th percentile over the partitions); the Produce and
Metadata requests; the bytes sent (aioproducer, with ``--trace`` only: the batches of
every attempt; confluent-kafka: its brokers' ``txbytes``, every request); the retries
(aioproducer: ``record-retry-total`` and ``metadata-retry-total``, batches retried
for stale metadata; confluent-kafka: ``txretries`` of its statistics, requests
retried, which does not count messages put back in their partition's queue). After
each run the high watermarks are read back: their sum must equal the records sent
and every partition must have some. The topic is deleted.

``--trace`` adds the last refusal (the last Produce answer with an error for a
batch, from the first send) and from it to the last acknowledgement: how long the
client took to notice that the broker had made the last logs. For aioproducer it
prints a time line too (metadata refreshes; Produce requests and answers per
100 ms); for confluent-kafka it turns on ``debug=msg`` and counts the "encountered
error" lines (their times are when ``poll()`` served them).
Prints a Markdown table per repetition and one of the medians (min-max); ``--json``
writes the raw runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

CLIENTS = ("aioproducer", "confluent-kafka")
KEY_SIZE = 16
VALUE_SIZE = 100


def _records(seed: int, n: int) -> tuple[list[bytes], bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(KEY_SIZE) for _ in range(n)], rng.randbytes(VALUE_SIZE)


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


# -- the clients (each in a subprocess) ---------------------------------------------------

class _Acks:
    """What a client's acknowledgements said: how many, when the first and the last
    came, each partition's first, and the first few errors."""

    def __init__(self) -> None:
        self.count = 0
        self.first_at = self.last_at = 0.0
        self.partition_first: dict[int, float] = {}
        self.errors: list[str] = []

    def ok(self, partition: int) -> None:
        now = time.monotonic()
        if not self.count:
            self.first_at = now
        self.count += 1
        self.last_at = now
        self.partition_first.setdefault(partition, now)

    def failed(self, text: str) -> None:
        if len(self.errors) < 5:
            self.errors.append(text)

    def summary(self, t0: float) -> dict[str, Any]:
        return {
            "acked": self.count,
            "first_ack_s": self.first_at - t0 if self.count else None,
            "ack_all_s": self.last_at - t0 if self.count else None,
            "partition_first_ack_s": sorted(v - t0 for v in self.partition_first.values()),
            "errors": self.errors,
        }

async def _run_aioproducer(bootstrap: str, topic: str, keys: list[bytes], value: bytes,
                           trace: bool) -> dict[str, Any]:
    from aioproducer import Producer

    acks = _Acks()
    timeline: list[tuple[float, str, Any]] = []

    def on_ack(fut: Any) -> None:
        exc = fut.exception()
        if exc is not None:
            acks.failed(repr(exc))
        else:
            acks.ok(fut.partition)

    producer = Producer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    if trace:
        _instrument(producer, timeline)
    async with producer:
        t0 = time.monotonic()
        send = producer.send
        for k in keys:
            fut = await send(topic, value, key=k)
            fut.add_done_callback(on_ack)
        sent = time.monotonic()
        await producer.flush()
        done = time.monotonic()
        m = producer.metrics()
        md_requests = producer._metadata.requests
    out = {
        "t0": t0, "send_s": sent - t0, "flush_done_s": done - t0,
        **acks.summary(t0),
        "produce_requests": int(m["request-total"]),
        "metadata_requests": md_requests,
        "record_retries": int(m["record-retry-total"]),
        "metadata_retries": int(m["metadata-retry-total"]),
    }
    if trace:
        out["timeline"] = [(round(t - t0, 4), what, arg) for t, what, arg in timeline]
        refused = [t for t, what, arg in timeline if what == "answer" and arg[1] != 0]
        out["bytes_sent"] = sum(arg[1] for _t, what, arg in timeline if what == "produce")
        out["last_refusal_s"] = max(refused) - t0 if refused else None
        out["refusals"] = len(refused)
    return out


def _instrument(producer: Any, timeline: list[tuple[float, str, Any]]) -> None:
    """Record metadata refreshes and Produce answers (the Sender's own methods,
    wrapped on this instance only)."""
    md = producer._metadata
    started, done = md.refresh_started, md.refresh_done

    def refresh_started(now: float) -> Any:
        timeline.append((time.monotonic(), "md-start", None))
        return started(now)

    def refresh_done(now: float, cluster: Any, requested: Any) -> None:
        done(now, cluster, requested)
        timeline.append((time.monotonic(), "md-done", round(md._backoff * 1000)))

    md.refresh_started, md.refresh_done = refresh_started, refresh_done

    orig_start = producer.start

    async def start() -> None:
        await orig_start()
        sender = producer._sender
        on_part = sender._on_partition_response
        send_produce = sender._send_produce

        def on_partition_response(node: int, b: Any, p: Any, now: float,
                                  endpoints: Any = None) -> None:
            code = p.error_code if p is not None else -1
            on_part(node, b, p, now, endpoints)
            nxt = round(b.next_attempt - now, 3) if code else None
            timeline.append((now, "answer", (b.partition, code, b.attempts, nxt)))

        def send_produce_(node: int, batches: list[Any], cluster: Any, now: float) -> None:
            size = sum(b.builder.size_in_bytes for b in batches)
            timeline.append((time.monotonic(), "produce", (len(batches), size)))
            send_produce(node, batches, cluster, now)

        sender._on_partition_response = on_partition_response
        sender._send_produce = send_produce_

    producer.start = start


class _Refusals(logging.Handler):
    """librdkafka's ``debug=msg`` lines for a message set the broker refused (they
    reach Python in ``poll()``: the times are when poll served them)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0
        self.last = 0.0

    def emit(self, record: logging.LogRecord) -> None:
        if "encountered error" in record.getMessage():
            self.count += 1
            self.last = time.monotonic()


def _run_confluent(bootstrap: str, topic: str, keys: list[bytes],
                   value: bytes, trace: bool) -> dict[str, Any]:
    from confluent_kafka import Producer

    acks = _Acks()
    stats: list[dict[str, Any]] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            acks.failed(str(err))
        else:
            acks.ok(msg.partition())

    def on_stats(text: str) -> None:
        stats[:] = [json.loads(text)]

    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "acks": "all",
                            "enable.idempotence": True, "statistics.interval.ms": 100,
                            "stats_cb": on_stats}
    refusals = _Refusals()
    if trace:
        logger = logging.getLogger("fresh_topic.librdkafka")
        logger.propagate = False
        logger.setLevel(logging.DEBUG)
        logger.addHandler(refusals)
        conf.update({"debug": "msg", "logger": logger})
    producer = Producer(conf)
    t0 = time.monotonic()
    produce = producer.produce
    poll = producer.poll
    for k in keys:
        while True:
            try:
                produce(topic, value, k, on_delivery=on_delivery)
                break
            except BufferError:
                poll(0.001)
        poll(0)
    sent = time.monotonic()
    left = producer.flush(120)
    done = time.monotonic()
    stats.clear()
    end = time.monotonic() + 1.0
    while not stats and time.monotonic() < end:
        producer.poll(0.05)
    st = stats[0] if stats else {}
    brokers = [b for b in st.get("brokers", {}).values() if b.get("nodeid", -1) >= 0]
    traced = ({"last_refusal_s": refusals.last - t0 if refusals.count else None,
               "refusals": refusals.count} if trace else {})
    return {
        **traced,
        "t0": t0, "send_s": sent - t0, "flush_done_s": done - t0, "unflushed": left,
        **acks.summary(t0),
        "produce_requests": sum(b.get("req", {}).get("Produce", 0) for b in brokers),
        "bytes_sent": sum(b.get("txbytes", 0) for b in brokers),
        "metadata_requests": sum(b.get("req", {}).get("Metadata", 0)
                                 for b in st.get("brokers", {}).values()),
        "request_retries": sum(b.get("txretries", 0) for b in brokers),
    }


def _child(client: str, bootstrap: str, records: int, seed: int, trace: bool) -> int:
    """Build the records, say ``ready``, wait for the topic's name on stdin, run."""
    keys, value = _records(seed, records)
    if client == "aioproducer":
        import aioproducer  # noqa: F401  (imported before the clock starts)
    else:
        import confluent_kafka  # noqa: F401
    print("ready", flush=True)
    topic = sys.stdin.readline().strip()
    if client == "aioproducer":
        result = asyncio.run(_run_aioproducer(bootstrap, topic, keys, value, trace))
    else:
        result = _run_confluent(bootstrap, topic, keys, value, trace)
    print(json.dumps(result), flush=True)
    return 0


# -- the harness ---------------------------------------------------------------------------

def run_one(bootstrap: str, client: str, args: argparse.Namespace) -> dict[str, Any]:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import OffsetSpec

    from bench.broker import Admin, list_offsets

    repo = Path(__file__).resolve().parents[2]
    cmd = [sys.executable, "-m", "bench.studies.fresh_topic", "--child", client,
           "--bootstrap", bootstrap, "--records", str(args.records), "--seed", str(args.seed)]
    if args.trace:
        cmd.append("--trace")
    proc = subprocess.Popen(cmd, cwd=str(repo), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(repo)})
    admin = Admin(bootstrap)
    topic = f"fresh-{client[:3]}-{uuid.uuid4().hex[:8]}"
    try:
        assert proc.stdin is not None and proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"{client}: the child did not start")
        from confluent_kafka.cimpl import NewTopic
        created_at = time.monotonic()
        futures = admin.client.create_topics(
            [NewTopic(topic, num_partitions=args.partitions, replication_factor=1)],
            operation_timeout=60, request_timeout=60)
        for fut in futures.values():
            fut.result(60)
        created = time.monotonic()
        time.sleep(max(0.0, created + args.start_delay - time.monotonic()))
        told = time.monotonic()
        proc.stdin.write(topic + "\n")
        proc.stdin.flush()
        line = proc.stdout.readline()
        proc.wait(timeout=60)
        if not line:
            raise RuntimeError(f"{client}: the child ended without a result")
        result: dict[str, Any] = json.loads(line)
        result["create_s"] = created - created_at
        result["told_to_first_send_s"] = result.pop("t0") - told
        tps = [TopicPartition(topic, p) for p in range(args.partitions)]
        hw = list_offsets(bootstrap, tps, OffsetSpec.latest(), 60)
        held = sum(hw.values())
        reached = sum(1 for v in hw.values() if v > 0)
        result["held"] = held
        result["partitions_reached"] = reached
        result["ok"] = (held == args.records == result["acked"] and reached == args.partitions
                        and not result["errors"])
        result["client"] = client
        return result
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        with contextlib.suppress(Exception):
            admin.delete_topic(topic)


def _fmt(v: Any, unit: str = "") -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.2f}{unit}"
    return f"{v}{unit}"


ROWS = [
    ("ack_all (s)", lambda r: r["ack_all_s"]),
    ("first_ack (s)", lambda r: r["first_ack_s"]),
    ("partitions' first ack, median (s)", lambda r: _quantile(r["partition_first_ack_s"], 0.5)),
    ("partitions' first ack, p90 (s)", lambda r: _quantile(r["partition_first_ack_s"], 0.9)),
    ("last refusal (s)", lambda r: r.get("last_refusal_s")),
    ("last refusal to last ack (s)", lambda r: (r["ack_all_s"] - r["last_refusal_s"]
                                                if r.get("last_refusal_s") else None)),
    ("sending (s)", lambda r: r["send_s"]),
    ("Produce requests", lambda r: r["produce_requests"]),
    ("Metadata requests", lambda r: r["metadata_requests"]),
    ("MB sent", lambda r: r["bytes_sent"] / 1e6 if "bytes_sent" in r else None),
    ("retries", lambda r: (f"{r['record_retries']} records, {r['metadata_retries']} batches"
                           if "record_retries" in r else f"{r['request_retries']} requests")),
    ("read back", lambda r: (f"{r['held']} in {r['partitions_reached']} partitions"
                             + ("" if r["ok"] else " FAILED"))),
]


def table(runs: dict[str, dict[str, Any]]) -> str:
    lines = ["| | " + " | ".join(runs) + " |", "|---" * (len(runs) + 1) + "|"]
    for name, get in ROWS:
        lines.append(f"| {name} | " + " | ".join(_fmt(get(r)) for r in runs.values()) + " |")
    return "\n".join(lines)


def medians(runs: list[dict[str, Any]]) -> str:
    lines = ["| median (min-max) | " + " | ".join(CLIENTS) + " |", "|---|---|---|"]
    for name, get in ROWS:
        cells = []
        for client in CLIENTS:
            vals = [get(r) for r in runs if r["client"] == client]
            vals = [float(v) for v in vals if isinstance(v, (int, float))]
            if not vals:
                cells.append("-")
                continue
            digits = 2 if "(s)" in name else 0
            cells.append(f"{statistics.median(vals):.{digits}f} "
                         f"({min(vals):.{digits}f}-{max(vals):.{digits}f})")
        if any(c != "-" for c in cells):
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def measure(bootstrap: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = []
    for rep in range(args.reps):
        order = CLIENTS if rep % 2 == 0 else CLIENTS[::-1]
        this: dict[str, dict[str, Any]] = {}
        for client in order:
            if args.only and client != args.only:
                continue
            r = run_one(bootstrap, client, args)
            r["rep"] = rep
            runs.append(r)
            this[client] = r
            if args.trace and "timeline" in r:
                print(f"rep {rep + 1}, {client}, time line:")
                print(summarize_timeline(r["timeline"]))
            time.sleep(args.pause)
        print(f"\nrep {rep + 1} of {args.reps} (order: {', '.join(order)})\n")
        print(table(this), flush=True)
    return runs


def summarize_timeline(timeline: list[Any]) -> str:
    """Metadata refreshes, and the Produce answers per 100 ms."""
    out = []
    buckets: dict[int, list[int]] = {}
    for t, what, arg in timeline:
        if what in ("md-start", "md-done"):
            out.append(f"  {t:7.3f} s {what}" + (f" (next backoff {arg} ms)" if arg else ""))
        elif what == "answer":
            b = buckets.setdefault(int(t * 10), [0, 0, 0])
            b[0 if arg[1] == 0 else 1] += 1
        elif what == "produce":
            buckets.setdefault(int(t * 10), [0, 0, 0])[2] += 1  # (batches, bytes)
    for k in sorted(buckets):
        ok, err, req = buckets[k]
        out.append(f"  {k / 10:5.1f} s: {req} Produce requests sent, {ok} batches acked, "
                   f"{err} refused")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.studies.fresh_topic",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", help="an existing broker (default: start one)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--start-delay", type=float, default=0.5,
                    help="seconds from create_topics() returning to the client's start")
    ap.add_argument("--seed", type=int, default=37)
    ap.add_argument("--pause", type=float, default=2.0, help="seconds between runs")
    ap.add_argument("--only", choices=CLIENTS, help="run one client only")
    ap.add_argument("--trace", action="store_true", help="aioproducer's time line")
    ap.add_argument("--json", help="write the runs here")
    ap.add_argument("--child", choices=CLIENTS, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return _child(args.child, args.bootstrap, args.records, args.seed, args.trace)
    print(f"fresh_topic: {args.reps} reps, {args.partitions} partitions, {args.records} "
          f"records, start delay {args.start_delay} s, seed {args.seed}", flush=True)
    if args.bootstrap:
        runs = measure(args.bootstrap, args)
    else:
        from aioproducer.devbroker import LocalKafka
        with tempfile.TemporaryDirectory(prefix="aioproducer-fresh-") as tmp:
            broker = LocalKafka(tmp, nodes=1)
            broker.start(timeout=120)
            try:
                runs = measure(broker.bootstrap, args)
            finally:
                broker.stop(timeout=30)
    print(f"\nmedians over {args.reps} reps (seed {args.seed})\n")
    print(medians(runs))
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1))
    return 0 if all(r["ok"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
