"""Python lines and calls per record of ``send()`` or ``send_and_wait()``, by function.

A deterministic view of the Python work a record costs (the interpreter's trace
hook counts every line executed and every call, per function), where timings on a
shared machine are noise. C work (the native core, kio, socket calls) is not counted:
it shows as the line that calls it. The counts cover the producer, asyncio's event
loop and this script's own loop (listed, and left out of the total).

    python -m bench.profiling.trace_lines --bootstrap 127.0.0.1:9092 --mode send-and-wait
    python -m bench.profiling.trace_lines --mode throughput --partitions 8 --key-size 16

Tracing makes everything ~10x slower, so batches hold fewer records than untraced:
compare runs of the same mode before and after a change.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import random
import sys
import uuid
from pathlib import Path
from types import FrameType
from typing import Any

if __package__ in (None, ""):  # run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

_SELF = Path(__file__).name


def _where(frame: FrameType) -> str:
    path = frame.f_code.co_filename
    for cut in ("/site-packages/", "/lib/python3."):
        if cut in path:
            path = path.split(cut, 1)[1]
            if cut == "/lib/python3.":
                path = path.split("/", 1)[1]
            break
    else:
        path = os.path.relpath(path) if os.path.isabs(path) else path
    return f"{path}:{frame.f_code.co_name}"


async def _run(ns: argparse.Namespace, topic: str, lines: collections.Counter[str],
               calls: collections.Counter[str]) -> None:
    from aioproducer import Producer

    rng = random.Random(ns.seed)
    keys = ([rng.randbytes(ns.key_size) for _ in range(1024)] if ns.key_size else None)
    value = b"x" * ns.value_size
    opts: dict[str, Any] = {"bootstrap_servers": ns.bootstrap, "acks": ns.acks}
    if ns.mode == "send-and-wait" and ns.linger_ms >= 0:
        opts["linger_ms"] = ns.linger_ms

    def tracer(frame: FrameType, event: str, _arg: Any) -> Any:
        if event == "call":
            calls[_where(frame)] += 1
        elif event == "line":
            lines[_where(frame)] += 1
        return tracer

    async with Producer(**opts) as p:
        key = None
        for i in range(ns.warmup):  # connections, metadata, batch sizes settle first
            key = None if keys is None else keys[i & 1023]
            await p.send_and_wait(topic, value, key)
        await p.flush()
        sys.settrace(tracer)
        try:
            futs: list[Any] = []
            for i in range(ns.records):
                if keys is not None:
                    key = keys[i & 1023]
                if ns.mode == "send-and-wait":
                    await p.send_and_wait(topic, value, key)
                    continue
                futs.append(await p.send(topic, value, key))
                if len(futs) >= 10_000:
                    for f in futs:
                        await f
                    futs = []
            await p.flush()
            for f in futs:
                await f
        finally:
            sys.settrace(None)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.profiling.trace_lines", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bootstrap", default=os.environ.get("AIOPRODUCER_BOOTSTRAP"))
    p.add_argument("--mode", choices=("send-and-wait", "throughput"), default="send-and-wait")
    p.add_argument("--records", type=int, default=None,
                   help="default: 1,000 (send-and-wait) or 200,000 (throughput)")
    p.add_argument("--partitions", type=int, default=1)
    p.add_argument("--key-size", type=int, default=0)
    p.add_argument("--value-size", type=int, default=100)
    p.add_argument("--acks", type=int, choices=(-1, 0, 1), default=1)
    p.add_argument("--linger-ms", type=int, default=0,
                   help="send-and-wait mode's linger_ms (-1: the producer's default)")
    p.add_argument("--warmup", type=int, default=300)
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--seed", type=int, default=19)
    ns = p.parse_args(argv)
    if not ns.bootstrap:
        p.error("--bootstrap (or $AIOPRODUCER_BOOTSTRAP) is needed")
    if ns.records is None:
        ns.records = 1_000 if ns.mode == "send-and-wait" else 200_000
    from bench.broker import Admin

    admin = Admin(ns.bootstrap)
    topic = f"trace-lines-{uuid.uuid4().hex[:8]}"
    admin.create_topic(topic, ns.partitions)
    lines: collections.Counter[str] = collections.Counter()
    calls: collections.Counter[str] = collections.Counter()
    try:
        asyncio.run(_run(ns, topic, lines, calls))
    finally:
        admin.delete_topic(topic)
    n = ns.records
    ours = {k: v for k, v in lines.items() if _SELF not in k}
    print(f"{ns.mode}, {n:,} records, {ns.partitions} partition(s), key {ns.key_size} B: "
          f"{sum(ours.values()) / n:.2f} Python lines and "
          f"{sum(v for k, v in calls.items() if _SELF not in k) / n:.2f} calls per record "
          f"(this script's loop: {sum(lines.values()) / n - sum(ours.values()) / n:.2f} "
          "lines, not counted)")
    print(f"{'lines':>9} {'calls':>8}  function (per record)")
    for k, v in sorted(ours.items(), key=lambda kv: -kv[1])[:ns.top]:
        print(f"{v / n:9.3f} {calls[k] / n:8.4f}  {k}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
