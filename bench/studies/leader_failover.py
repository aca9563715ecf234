"""How fast the producer follows a partition leader that moves, with and without the
KIP-951 leader hint.

``python -m bench.studies.leader_failover`` (from the repository root) starts a three-node
local KRaft cluster (:class:`aioproducer.devbroker.LocalKafka`, in a temporary
directory, stopped at the end) unless ``--bootstrap`` names one (``kill`` needs the
local cluster). For each event, for hints on and off, ``--runs`` times: a fresh topic
(one partition, replication 3), a producer sending one record at a time
(``send_and_wait``, ``linger_ms=0``, ``acks`` as given (default all),
``retry_backoff_ms`` as given (default 100, Java's)), and after ``--warm-up``
seconds of that, the event:

``elect``
    the leader moves to another replica (AlterPartitionReassignments puts it first,
    ElectLeaders elects it): the old leader answers NOT_LEADER_OR_FOLLOWER with the
    new leader (KIP-951).
``kill``
    SIGKILL the leader's node (restarted after the run): no answer carries a hint;
    both modes wait for metadata.

Measured per run: ``redirect``, from the first NOT_LEADER_OR_FOLLOWER answer the
Sender handles to the next acknowledgement (the client's part: the hint's retry
goes at once, without it the retry waits for the backoff and a metadata refresh);
``to_ack``, from the end of the event (ElectLeaders answered; the
killed process gone) to the first acknowledgement after it, which is the record in
flight at the move (its retry) or the next one; and ``gap``, the longest time between two
consecutive acknowledgements from one second before the event to the end of the run.
Every run is bounded (``--run-seconds`` of sending after the event); records that fail
are counted and make the exit status 1.

Prints one line per run and a Markdown table of the medians; ``--json`` prints the raw
numbers as JSON as well.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import itertools
import json
import logging
import statistics
import sys
import tempfile
import time
import uuid
from typing import Any

from kio.static.primitive import i8, i32, i32Timedelta

from aioproducer import Producer
from aioproducer.devbroker import LocalKafka
from aioproducer.net.admin import Admin
from aioproducer.net.client import KafkaClient
from aioproducer.net.protocol import build_entity, request_module

ALTER_REASSIGNMENTS = 45
ELECT_LEADERS = 43
BOUND = 60.0


async def partition_leader(client: KafkaClient, topic: str,
                           partition: int = 0) -> tuple[int, int, list[int]]:
    """``(leader, leader_epoch, replicas)`` of ``topic``-``partition``."""
    resp = await client.fetch_metadata([topic], timeout_s=BOUND)
    for t in resp.topics:
        for p in t.partitions:
            if int(p.partition_index) == partition:
                return (int(p.leader_id), int(p.leader_epoch),
                        [int(r) for r in p.replica_nodes])
    raise RuntimeError(f"no metadata for {topic}-{partition}")


async def move_leader(client: KafkaClient, topic: str, new_leader: int,
                      partition: int = 0) -> int:
    """Make ``new_leader`` (a replica of ``topic``-``partition``) its preferred replica
    (AlterPartitionReassignments with the same replicas, reordered) and elect it
    (ElectLeaders, preferred). Returns the new leader epoch once the metadata shows
    the new leader; raises after 60 s."""
    _, _, replicas = await partition_leader(client, topic, partition)
    order = [new_leader] + [r for r in replicas if r != new_leader]
    timeout = i32Timedelta.parse(datetime.timedelta(seconds=30))

    async def reassign(node: int, remaining: float) -> None:
        conn = await client.connect(node, remaining)
        mod = request_module(ALTER_REASSIGNMENTS,
                             conn.version_for(ALTER_REASSIGNMENTS, 0, 0))
        req = build_entity(
            mod.AlterPartitionReassignmentsRequest, timeout=timeout,
            topics=(build_entity(mod.ReassignableTopic, name=topic, partitions=(
                build_entity(mod.ReassignablePartition, partition_index=i32(partition),
                             replicas=tuple(i32(r) for r in order)),)),))
        resp: Any = await conn.request(req)
        codes = [int(resp.error_code)] + [int(p.error_code) for t in resp.responses
                                          for p in t.partitions]
        if any(codes):
            raise RuntimeError(f"AlterPartitionReassignments failed: {resp}")

    async def elect(node: int, remaining: float) -> None:
        conn = await client.connect(node, remaining)
        mod = request_module(ELECT_LEADERS, conn.version_for(ELECT_LEADERS, 1, 2))
        req = build_entity(
            mod.ElectLeadersRequest, election_type=i8(0), timeout=timeout,
            topic_partitions=(build_entity(mod.TopicPartitions, topic=topic,
                                           partitions=(i32(partition),)),))
        await conn.request(req)  # ELECTION_NOT_NEEDED etc.: the loop below checks

    await client.on_any_node(reassign, BOUND, "reassign partitions")
    deadline = time.monotonic() + BOUND
    while True:
        await client.on_any_node(elect, BOUND, "elect leaders")
        leader, epoch, _ = await partition_leader(client, topic, partition)
        if leader == new_leader:
            return epoch
        if time.monotonic() > deadline:
            raise RuntimeError(f"{topic}-{partition}: leader still {leader}")
        await asyncio.sleep(0.1)


async def _wait_leader(client: KafkaClient, topic: str) -> tuple[int, int, list[int]]:
    deadline = time.monotonic() + BOUND
    while True:
        with contextlib.suppress(Exception):
            leader, epoch, replicas = await partition_leader(client, topic)
            if leader >= 0 and len(replicas) == 3:
                return leader, epoch, replicas
        if time.monotonic() > deadline:
            raise RuntimeError(f"{topic}: no leader")
        await asyncio.sleep(0.2)


class _NotLeaderWatch(logging.Handler):
    """Notes when the Sender handles a NOT_LEADER_OR_FOLLOWER answer (its retry log)."""

    def __init__(self, times: list[float]) -> None:
        super().__init__(logging.WARNING)
        self.times = times

    def emit(self, record: logging.LogRecord) -> None:
        if "NOT_LEADER_OR_FOLLOWER" in record.getMessage():
            self.times.append(time.monotonic())


async def one_run(bootstrap: str, kafka: LocalKafka | None, event: str, hints: bool,
                  args: argparse.Namespace) -> dict[str, Any]:
    topic = f"failover-{event}-{uuid.uuid4().hex[:8]}"
    client = KafkaClient(bootstrap, client_id="failover-admin")
    await client.bootstrap(BOUND)
    try:
        await Admin(client).create_topics([(topic, 1, 3, {})], BOUND)
        leader, _epoch, replicas = await _wait_leader(client, topic)
        acks: list[float] = []
        failed = 0
        stop = asyncio.Event()
        async with Producer(bootstrap_servers=bootstrap, linger_ms=0, acks=args.acks,
                            retry_backoff_ms=args.retry_backoff_ms,
                            retry_backoff_max_ms=max(1000, args.retry_backoff_ms),
                            request_timeout_ms=10000,
                            delivery_timeout_ms=120000) as producer:
            assert producer._sender is not None
            producer._sender.use_leader_hints = hints

            async def pump() -> None:
                nonlocal failed
                i = 0
                while not stop.is_set():
                    try:
                        await producer.send_and_wait(topic, b"%d" % i)
                        acks.append(time.monotonic())
                    except Exception:
                        failed += 1
                    i += 1

            refused: list[float] = []
            watch = _NotLeaderWatch(refused)
            logging.getLogger("aioproducer.sender").addHandler(watch)
            task = asyncio.create_task(pump())
            # Warm up: at least --warm-up seconds and 20 acknowledgements (bounded).
            t_warm = time.monotonic()
            while (time.monotonic() - t_warm < args.warm_up or len(acks) < 20) \
                    and time.monotonic() - t_warm < BOUND:
                await asyncio.sleep(0.05)
            t_start = time.monotonic()
            if event == "elect":
                new = next(r for r in replicas if r != leader)
                await move_leader(client, topic, new)
            else:
                assert kafka is not None
                await asyncio.to_thread(kafka.kill_node, leader)
            t_event = time.monotonic()
            await asyncio.sleep(args.run_seconds)
            stop.set()
            await asyncio.wait_for(task, BOUND)
            logging.getLogger("aioproducer.sender").removeHandler(watch)
            m = producer.metrics()
        after = [a for a in acks if a >= t_event]
        redirect = None
        if refused:
            later = [a for a in acks if a >= refused[0]]
            redirect = (later[0] - refused[0]) * 1000.0 if later else None
        window = [a for a in acks if a >= t_start - 1.0]
        gaps = [b - a for a, b in itertools.pairwise(window)]
        before = [b - a for a, b in itertools.pairwise(a for a in acks if a < t_start)]
        return {
            "event": event, "hints": hints, "topic": topic, "leader": leader,
            "event_s": t_event - t_start,
            "to_ack_ms": (after[0] - t_event) * 1000.0 if after else None,
            "redirect_ms": redirect,
            "gap_ms": max(gaps) * 1000.0 if gaps else None,
            "ack_interval_ms": statistics.median(before) * 1000.0 if before else None,
            "acks": len(acks), "failed": failed,
            "hints_used": m["leader-hints-used-total"],
        }
    finally:
        await client.close()
        if event == "kill" and kafka is not None:
            await asyncio.to_thread(kafka.ensure_running)


def _median(values: list[float | None]) -> str:
    got = [v for v in values if v is not None]
    return f"{statistics.median(got):.0f}" if got else "-"


async def main_async(args: argparse.Namespace) -> int:
    kafka: LocalKafka | None = None
    tmp: tempfile.TemporaryDirectory[str] | None = None
    bootstrap = args.bootstrap
    events = ["elect", "kill"] if args.event == "both" else [args.event]
    if bootstrap is None:
        tmp = tempfile.TemporaryDirectory(prefix="failover-")
        kafka = LocalKafka(tmp.name, nodes=3)
        t0 = time.monotonic()
        bootstrap = await asyncio.to_thread(kafka.start, 180.0)
        print(f"three-node cluster up in {time.monotonic() - t0:.0f} s: {bootstrap}")
    elif "kill" in events:
        print("--event kill needs the local cluster (no --bootstrap)", file=sys.stderr)
        return 2
    results = []
    try:
        for event in events:
            for r in range(args.runs):
                for hints in (True, False):
                    res = await one_run(bootstrap, kafka, event, hints, args)
                    results.append(res)
                    print(f"{event:5} hints={'on ' if hints else 'off'} run {r + 1}: "
                          f"NOT_LEADER→ack {res['redirect_ms'] or float('nan'):7.1f} ms, "
                          f"event→ack {res['to_ack_ms'] or float('nan'):7.1f} ms, "
                          f"longest ack gap {res['gap_ms'] or float('nan'):7.1f} ms "
                          f"(usual {res['ack_interval_ms'] or float('nan'):5.1f} ms), "
                          f"hints used {res['hints_used']:.0f}, acks {res['acks']}, "
                          f"failed {res['failed']}", flush=True)
    finally:
        if kafka is not None:
            await asyncio.to_thread(kafka.stop)
        if tmp is not None:
            tmp.cleanup()
    print(f"\nacks={args.acks}, retry_backoff_ms={args.retry_backoff_ms}, {args.runs} run(s) "
          "each, medians:\n")
    print("| event | leader hints | NOT_LEADER answer → ack (ms) | longest ack gap (ms) "
          "| event end → first ack (ms) | usual ack interval (ms) |")
    print("|---|---|---|---|---|---|")
    for event in events:
        for hints in (True, False):
            rows = [x for x in results if x["event"] == event and x["hints"] == hints]
            print(f"| {event} | {'on' if hints else 'off'} | "
                  f"{_median([x['redirect_ms'] for x in rows])} | "
                  f"{_median([x['gap_ms'] for x in rows])} | "
                  f"{_median([x['to_ack_ms'] for x in rows])} | "
                  f"{_median([x['ack_interval_ms'] for x in rows])} |")
    if args.json:
        print(json.dumps(results))
    return 1 if any(x["failed"] for x in results) else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--event", choices=("elect", "kill", "both"), default="both")
    ap.add_argument("--runs", type=int, default=3, help="runs per event and mode")
    ap.add_argument("--retry-backoff-ms", type=int, default=100)
    ap.add_argument("--acks", type=int, choices=(-1, 1), default=-1)
    ap.add_argument("--warm-up", type=float, default=1.0, help="seconds before the event")
    ap.add_argument("--run-seconds", type=float, default=3.0,
                    help="seconds of sending after the event")
    ap.add_argument("--bootstrap", default=None, help="an existing 3-node cluster")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--debug", action="store_true", help="the producer's debug log")
    args = ap.parse_args(argv)
    if args.debug:
        logging.basicConfig(level=logging.DEBUG,
                            format="%(relativeCreated)8.1f %(name)s %(message)s")
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
