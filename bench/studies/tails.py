"""What makes the slow round trips of a lone ``send_and_wait``.

One caller awaits ``send_and_wait()`` at the producer's defaults (acks=all,
idempotence, ``linger_ms=5``), ``--rounds`` times, and every round trip is tagged with
what happened inside it:

- a **garbage collection** (``gc.callbacks``: which generation, how long it took);
- a **metadata request** (the time of the producer's last metadata request, read
  before and after each round);
- **other tasks**: how many times the loop ran something other than the caller in the
  round (``loop._ready`` is sampled by a watcher callback scheduled each round).

Then the slowest 1 % (the rounds at or above p99) are split by tag, and the same run is
repeated with the collector frozen after start-up (``gc.freeze()``: the objects alive
then are never scanned again) and with it disabled, alternated with confluent-kafka's
``produce()`` + ``flush()`` at its defaults on the same topic, and with two rows at
acks=1 and linger 0: our producer, and the floor of ``round_trip_floor`` (our request
replayed by a bare asyncio task, no producer in it). A tail that moves with
the collector is the collector's; one that stays is the loop's or the broker's.

    python -m bench.studies.tails --bootstrap 127.0.0.1:9092 --rounds 5000 --reps 3
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.common import percentile

VALUE = b"x" * 100
CPU: list[float] = []
"""The process CPU (every thread) of each row's measured rounds, the start-up left out
(the floor row's includes its connect, a few ms)."""


class GcWatch:
    """Collections seen through ``gc.callbacks``: (generation, seconds) each."""

    def __init__(self) -> None:
        self.events: list[tuple[int, float]] = []
        self._t = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._t = time.perf_counter()
        else:
            self.events.append((int(info["generation"]), time.perf_counter() - self._t))

    def __enter__(self) -> GcWatch:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self)


def _metadata_attempt(p: Any) -> float:
    """When the producer last asked for metadata (a private field: a study may look)."""
    return float(p._metadata._last_attempt)


def run_aioproducer(bootstrap: str, topic: str, rounds: int, gc_mode: str,
                    **options: Any) -> tuple[list[float], list[str]]:
    """Latencies and each round's tags (``gc0``, ``gc1``, ``gc2``, ``metadata``,
    ``busy-loop``, or ``-``)."""
    from aioproducer import Producer

    async def main() -> tuple[list[float], list[str]]:
        perf = time.perf_counter
        lat: list[float] = []
        tags: list[str] = []
        loop = asyncio.get_running_loop()
        async with Producer(bootstrap_servers=bootstrap, **options) as p:
            for _ in range(50):  # the connection, the producer id, the batch path
                await p.send_and_wait(topic, VALUE)
            if gc_mode == "freeze":
                gc.collect()
                gc.freeze()
            elif gc_mode == "off":
                gc.disable()
            ready: list[int] = []
            c0 = time.process_time()
            with GcWatch() as watch:
                for _ in range(rounds):
                    seen = len(watch.events)
                    before = _metadata_attempt(p)
                    ready.clear()
                    loop.call_soon(lambda: ready.append(len(loop._ready)))  # type: ignore[attr-defined]
                    t = perf()
                    await p.send_and_wait(topic, VALUE)
                    lat.append(perf() - t)
                    tag = [f"gc{g}" for g, _s in watch.events[seen:]]
                    if _metadata_attempt(p) != before:
                        tag.append("metadata")
                    if ready and ready[0] > 2:
                        tag.append("busy-loop")
                    tags.append("+".join(tag) or "-")
            CPU.append(time.process_time() - c0)
            if gc_mode == "freeze":
                gc.unfreeze()
            gc.enable()
        return lat, tags

    return asyncio.run(main())


def run_confluent(bootstrap: str, topic: str, rounds: int) -> list[float]:
    import confluent_kafka

    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                                  "acks": "all"})
    for _ in range(50):
        p.produce(topic, VALUE)
        p.flush()
    perf = time.perf_counter
    lat = []
    c0 = time.process_time()
    for _ in range(rounds):
        t = perf()
        p.produce(topic, VALUE)
        p.flush()
        lat.append(perf() - t)
    CPU.append(time.process_time() - c0)
    return lat


def _tail(lat: list[float], tags: list[str]) -> str:
    cut = percentile(sorted(lat), 0.99) or 0.0
    slow = [t for v, t in zip(lat, tags, strict=True) if v >= cut]
    counts: dict[str, int] = {}
    for t in slow:
        counts[t] = counts.get(t, 0) + 1
    everywhere: dict[str, int] = {}
    for t in tags:
        everywhere[t] = everywhere.get(t, 0) + 1
    return ", ".join(f"{k}: {v} of {everywhere[k]}" for k, v in
                     sorted(counts.items(), key=lambda kv: -kv[1]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.studies.tails", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", default=os.environ.get("AIOPRODUCER_BOOTSTRAP"))
    ap.add_argument("--rounds", type=int, default=5000)
    ap.add_argument("--reps", type=int, default=3)
    ns = ap.parse_args(argv)
    if not ns.bootstrap:
        ap.error("--bootstrap (or $AIOPRODUCER_BOOTSTRAP) is needed")
    from bench.broker import Admin

    admin = Admin(ns.bootstrap)
    topic = f"tails-{uuid.uuid4().hex[:8]}"
    admin.create_topic(topic, 1)
    try:
        print("| rep | row | p50 µs | p99 µs | p99.9 µs | CPU µs per round trip | "
              "the rounds at or above p99, by what happened in them |")
        print("|---|---|---|---|---|---|---|")
        from bench.studies.round_trip_floor import capture_request, run_task

        request, _ = capture_request(ns.bootstrap, topic)
        for rep in range(ns.reps):
            for row in ("bare asyncio, acks=1", "aioproducer, acks=1, linger 0",
                        "confluent-kafka", "gc on", "gc frozen", "gc off"):
                c0 = time.process_time()
                CPU.clear()
                if row == "confluent-kafka":
                    lat, why = run_confluent(ns.bootstrap, topic, ns.rounds), ""
                elif row.startswith("bare"):
                    lat, why = run_task(ns.bootstrap, request, ns.rounds), ""
                elif row.startswith("aioproducer"):
                    lat, tags = run_aioproducer(ns.bootstrap, topic, ns.rounds, "on", acks=1,
                                                linger_ms=0, enable_idempotence=False)
                    why = _tail(lat, tags)
                else:
                    mode = {"gc on": "on", "gc frozen": "freeze", "gc off": "off"}[row]
                    lat, tags = run_aioproducer(ns.bootstrap, topic, ns.rounds, mode)
                    why = _tail(lat, tags)
                cpu = (CPU[0] if CPU else time.process_time() - c0) / ns.rounds * 1e6
                s = sorted(lat)
                p50, p99, p999 = ((percentile(s, q) or 0.0) * 1e6 for q in (0.5, 0.99, 0.999))
                print(f"| {rep + 1} | {row} | {p50:.0f} | {p99:.0f} | {p999:.0f} | "
                      f"{cpu:.0f} | {why} |", flush=True)
    finally:
        admin.delete_topic(topic)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
