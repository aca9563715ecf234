"""Transaction soak: consume-transform-produce through one transactional producer while
the caller and the brokers misbehave; every transaction must be all or nothing.

``python -m soak.txn --seed N --version 2 --rounds 400`` (from the repository
root) starts a local Kafka cluster (three nodes by default, ``--nodes``) finalizing
``transaction.version`` ``--version`` (1 or 2), and runs ``--rounds`` transactions.

Each round (one transaction): ``workers`` tasks each own some of the ``partitions``
input partitions and, joining the one open transaction of the shared producer, turn
the next 0..``max_batch`` input records of each of their partitions into output
records (key ``p<partition>``, value ``<partition>:<offset>``) and add their input
positions with ``send_offsets_to_transaction`` (empty when nothing was read: an
empty poll). The input is generated, not read: the record at input offset ``o`` of
partition ``p`` is by definition ``(p, o)``, so the positions the group commits say
exactly which outputs must exist. Then the round ends with an action drawn from
``random.Random(seed)``:

``commit``          commit_transaction()
``abort``           abort_transaction()
``cancel-commit``   commit_transaction() cancelled at once or after 0-10 ms, then
                    called again
``cancel-abort``    abort_transaction() cancelled likewise, then called again
``close``           commit_transaction() in a task, then close(timeout=0-50 ms); the
                    outcome is learnt as a restarted application learns it: a new
                    producer's init_transactions(), then the group's committed offsets
``hand-over``       prepare_transaction(), close, and another producer's
                    resume_transaction() commits (or aborts) it and carries on
``zombie``          a second producer with the same transactional id runs
                    init_transactions(): the first is fenced (its commit raises
                    ProducerFencedError), the second carries on

With ``--faults`` (three nodes), a second lane injects broker faults every few
seconds: SIGKILL of an output partition's leader (restarted after 2-4 s), SIGSTOP of
its followers for 3-5 s (acks=all waits), and SIGKILL of the transaction
coordinator's node. A round that fails (a timeout, an abortable or fatal error) is
recovered as an application would: abort, or a new producer and the committed
offsets.

At the end a new producer fences the id (anything open is aborted), and confluent-kafka
reads the output with ``read_committed`` and the group's committed offsets
(:meth:`SoakReport.violations`): for each input partition, every output of an offset
below the committed position exactly once, in order, and none at or past it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from aioproducer import KafkaError, Producer
from aioproducer.devbroker import LocalKafka
from aioproducer.transaction_state import TxnState
from soak.cluster import create_topic, delete_topics, partition_replicas

ACTIONS = ("commit", "abort", "cancel-commit", "cancel-abort", "close", "hand-over",
           "zombie")
DEFAULT_WEIGHTS = {"commit": 8, "abort": 2, "cancel-commit": 2, "cancel-abort": 2,
                   "close": 2, "hand-over": 1, "zombie": 1}


@dataclass
class SoakConfig:
    seed: int
    rounds: int = 200
    duration: float | None = None
    """Stop starting rounds after this many seconds (None: run every round)."""
    partitions: int = 6
    out_partitions: int = 6
    workers: int = 3
    max_batch: int = 40
    empty_poll: float = 0.15
    """Chance that a round reads nothing at all (every worker's offsets are empty)."""
    weights: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    faults: bool = False
    fault_gap: tuple[float, float] = (3.0, 7.0)
    transaction_timeout_ms: int = 30_000
    max_block_ms: int = 10_000
    request_timeout_ms: int = 5_000
    delivery_timeout_ms: int = 30_000
    wall_timeout: float = 900.0
    verbose: bool = False
    verify_timeout: float = 120.0


@dataclass
class SoakReport:
    seed: int
    version: int | None
    rounds: int = 0
    actions: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    faults: list[str] = field(default_factory=list)
    recoveries: int = 0
    producers: int = 0
    committed_positions: dict[int, int] = field(default_factory=dict)
    tracked_positions: dict[int, int] = field(default_factory=dict)
    outputs_read: int = 0
    expected: int = 0
    lost: int = 0
    duplicated: int = 0
    reordered: int = 0
    beyond: int = 0
    """Outputs committed past their partition's committed position (their input
    offsets were not committed with them)."""
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def violations(self) -> list[str]:
        out = list(self.problems)
        if self.lost:
            out.append(f"{self.lost} output(s) of committed input offsets are missing")
        if self.duplicated:
            out.append(f"{self.duplicated} output(s) are duplicated")
        if self.reordered:
            out.append(f"{self.reordered} output(s) out of input order")
        if self.beyond:
            out.append(f"{self.beyond} output(s) committed past the committed position "
                       "(a partial transaction)")
        if self.tracked_positions and self.tracked_positions != self.committed_positions:
            out.append(f"the positions the rounds' outcomes imply "
                       f"{self.tracked_positions} differ from the group's committed "
                       f"offsets {self.committed_positions}")
        return out

    def line(self) -> str:
        acts = " ".join(f"{k}={v}" for k, v in sorted(self.actions.items()))
        outs = " ".join(f"{k}={v}" for k, v in sorted(self.outcomes.items()))
        return (f"txn soak seed={self.seed} version={self.version}: {self.rounds} rounds "
                f"in {self.seconds:.0f} s ({acts}; {outs}); {self.producers} producers, "
                f"{self.recoveries} recoveries, {len(self.faults)} broker faults; "
                f"{self.outputs_read} outputs read, {self.expected} expected: "
                f"lost={self.lost} duplicated={self.duplicated} reordered={self.reordered} "
                f"beyond={self.beyond}")


def _committed_offsets(bootstrap: str, group: str, topic: str,
                       partitions: int) -> dict[int, int]:
    """The group's committed offsets (stable ones: pending transactional offsets are
    waited for), 0 where none."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    deadline = time.monotonic() + 60.0
    try:
        while True:
            try:
                tps = consumer.committed(
                    [TopicPartition(topic, p) for p in range(partitions)], timeout=30)
                return {int(tp.partition): max(int(tp.offset), 0) for tp in tps}
            except KafkaException as exc:  # the group coordinator is moving, or loading
                if time.monotonic() > deadline or (not exc.args[0].retriable() and \
                        exc.args[0].code() not in (KafkaError.NOT_COORDINATOR,
                                                   KafkaError.COORDINATOR_NOT_AVAILABLE,
                                                   KafkaError.COORDINATOR_LOAD_IN_PROGRESS)):
                    raise
                time.sleep(0.5)
    finally:
        consumer.close()


def _read_committed(bootstrap: str, topic: str,
                    timeout: float) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """Every committed record of ``topic`` (read_committed, from each partition's start
    until it reports its end), as (partition, offset, key, value)."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"soak-read-{uuid.uuid4().hex}",
        "enable.auto.commit": False, "auto.offset.reset": "earliest",
        "enable.partition.eof": True, "check.crcs": True, "fetch.wait.max.ms": 100,
        "isolation.level": "read_committed"})
    deadline = time.monotonic() + timeout
    out: list[tuple[int, int, bytes | None, bytes | None]] = []
    try:
        md = consumer.list_topics(topic, timeout=30)
        parts = set(md.topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, -2) for p in sorted(parts)])
        at_end: set[int] = set()
        while at_end != parts:
            if time.monotonic() > deadline:
                raise TimeoutError(f"read {len(out)} records of {topic}; partitions "
                                   f"{sorted(parts - at_end)} not at their end")
            for msg in consumer.consume(num_messages=10_000, timeout=0.5):
                err = msg.error()
                if err is not None:
                    if err.code() == err._PARTITION_EOF:
                        at_end.add(int(msg.partition() or 0))
                        continue
                    raise KafkaException(err)
                at_end.discard(int(msg.partition() or 0))
                out.append((int(msg.partition() or 0), int(msg.offset() or 0), msg.key(),
                            msg.value()))
    finally:
        consumer.close()
    return out


class _Soak:
    def __init__(self, cluster: LocalKafka | None, bootstrap: str, cfg: SoakConfig) -> None:
        self.cluster = cluster
        self.bootstrap = bootstrap
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        tag = f"{cfg.seed}-{uuid.uuid4().hex[:8]}"
        self.out = f"soak-out-{tag}"
        # Its records are generated, not read: the topic exists (with no records) for
        # the group's offsets, which a broker takes only for a topic it knows.
        self.input = f"soak-in-{tag}"
        self.group = f"soak-group-{tag}"
        self.tid = f"soak-txn-{tag}"
        self.pos = dict.fromkeys(range(cfg.partitions), 0)
        self.report = SoakReport(cfg.seed, None)
        self.producer: Producer | None = None
        self._stop = asyncio.Event()

    # -- producers -----------------------------------------------------------------

    def _make(self) -> Producer:
        c = self.cfg
        self.report.producers += 1
        return Producer(bootstrap_servers=self.bootstrap, transactional_id=self.tid,
                        linger_ms=self.rng.choice([0, 2, 5]),
                        transaction_timeout_ms=c.transaction_timeout_ms,
                        max_block_ms=c.max_block_ms, request_timeout_ms=c.request_timeout_ms,
                        delivery_timeout_ms=c.delivery_timeout_ms)

    async def _fresh(self) -> Producer:
        """A new producer that fenced every earlier one (whose open transaction the
        coordinator aborted), and the positions the group has committed: what a
        restarted application starts from."""
        deadline = time.monotonic() + 120.0
        while True:
            p = self._make()
            try:
                await p.start()
                await p.init_transactions()
                break
            except KafkaError as exc:
                await p.close(timeout=1.0)
                if time.monotonic() > deadline:
                    raise
                print(f"txn soak: init_transactions() failed ({exc!r}); again",
                      file=sys.stderr)
                await asyncio.sleep(1.0)
        if self.report.version is None:
            self.report.version = p.transaction_version
        committed = await asyncio.to_thread(_committed_offsets, self.bootstrap, self.group,
                                            self.input, self.cfg.partitions)
        for part, off in committed.items():
            before = self.pos[part]
            if off != before and not self._uncertain:
                self.report.problems.append(
                    f"partition {part}: committed offset {off}, the rounds' outcomes "
                    f"say {before}")
            self.pos[part] = off
        self._uncertain = False
        return p

    _uncertain = False
    _action = ""

    async def _replace(self, why: str) -> None:
        """Recovery: drop the producer, start a fresh one from the committed offsets."""
        self.report.recoveries += 1
        old = self.producer
        if old is not None:
            await old.close(timeout=1.0)
        self._uncertain = True
        self.producer = await self._fresh()

    # -- a round ---------------------------------------------------------------------

    async def _fill(self, p: Producer, counts: dict[int, int]) -> dict[int, int]:
        """The workers' part of a round: outputs and offsets, concurrently, into the
        one open transaction. Returns the positions the round would commit."""
        c = self.cfg
        new = {part: self.pos[part] + counts[part] for part in counts}

        async def worker(parts: Sequence[int]) -> None:
            for part in parts:
                for o in range(self.pos[part], new[part]):
                    await p.send(self.out, b"%d:%d" % (part, o), key=b"p%d" % part)
            offsets = {(self.input, part): new[part] for part in parts if counts[part]}
            await p.send_offsets_to_transaction(offsets, self.group)

        await asyncio.gather(*(worker(range(k, c.partitions, c.workers))
                               for k in range(c.workers)))
        return new

    async def _round(self, action: str) -> None:
        c, rng = self.cfg, self.rng
        p = self.producer
        assert p is not None
        empty = rng.random() < c.empty_poll
        counts = {part: 0 if empty else rng.randint(0, c.max_batch)
                  for part in range(c.partitions)}
        p.begin_transaction()
        new = await self._fill(p, counts)
        if action == "commit":
            await p.commit_transaction()
            self._committed(new)
        elif action == "abort":
            await p.abort_transaction()
            self.report.outcomes["aborted"] += 1
        elif action in ("cancel-commit", "cancel-abort"):
            commit = action == "cancel-commit"
            task = asyncio.ensure_future(p.commit_transaction() if commit
                                         else p.abort_transaction())
            await asyncio.sleep(rng.choice([0.0, rng.uniform(0.0, 0.01)]))
            task.cancel()
            try:
                await task
                self.report.outcomes["finished before the cancel"] += 1
            except asyncio.CancelledError:
                self.report.outcomes["cancelled"] += 1
                if commit:
                    await p.commit_transaction()  # finishes it (or commits it anew)
                else:
                    await p.abort_transaction()
            if commit:
                self._committed(new)
            else:
                self.report.outcomes["aborted"] += 1
        elif action == "close":
            task = asyncio.ensure_future(p.commit_transaction())
            await asyncio.sleep(rng.choice([0.0, rng.uniform(0.0, 0.01)]))
            await p.close(timeout=rng.choice([0.0, rng.uniform(0.0, 0.05)]))
            try:
                await task
            except KafkaError as exc:
                self.report.outcomes[f"close: commit raised {type(exc).__name__}"] += 1
                self._uncertain = True  # learnt from the committed offsets below
            else:
                self.report.outcomes["close: committed"] += 1
                self._committed(new)
            self.producer = None
            self.producer = await self._fresh()
        elif action == "hand-over":
            handle = await p.prepare_transaction()
            await p.close()
            self.producer = None
            if handle is None:  # nothing reached the coordinator: nothing to end
                self.report.outcomes["hand-over: empty"] += 1
                self.producer = await self._fresh()
                return
            q = self._make()
            try:
                await q.start()
                await q.resume_transaction(*handle)
                if rng.random() < 0.8:
                    await q.commit_transaction()
                    self._committed(new)
                    self.report.outcomes["hand-over: committed"] += 1
                else:
                    await q.abort_transaction()
                    self.report.outcomes["hand-over: aborted"] += 1
            except BaseException:
                await q.close(timeout=1.0)
                self._uncertain = True
                raise
            self.producer = q  # carries on (its next transaction bumps the epoch first)
        elif action == "zombie":
            z = self._make()
            try:
                await z.start()
                await z.init_transactions()  # fences p; p's open transaction is aborted
            except BaseException:
                await z.close(timeout=1.0)
                raise
            try:
                await p.commit_transaction()
            except KafkaError as exc:  # fenced (or abortable, then fenced on the abort)
                self.report.outcomes[f"zombie: {type(exc).__name__}"] += 1
            else:
                # Nothing of p's transaction reached the coordinator before the fence
                # (an empty round): a commit that ends nothing is not a violation.
                if any(counts.values()):
                    self.report.problems.append("a fenced zombie committed a transaction")
                self.report.outcomes["zombie: nothing to fence"] += 1
            await p.close(timeout=1.0)
            self.producer = z
        else:
            raise ValueError(action)

    def _committed(self, new: dict[int, int]) -> None:
        self.pos.update(new)
        self.report.outcomes["committed"] += 1

    async def _recover(self, exc: BaseException) -> None:
        """A round failed (broker faults): abort if the transaction can be, else start
        over from the committed offsets."""
        p = self.producer
        self.report.outcomes[f"failed: {type(exc).__name__}"] += 1
        print(f"txn soak: round {self.report.rounds} ({self._action}) failed: {exc!r}",
              file=sys.stderr)
        if p is not None and not p.closed and p._txn is not None:
            m = p._txn.machine
            if m.state in (TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR) or (
                    m.pending_end() is False):
                try:
                    await p.abort_transaction()
                    return
                except KafkaError:
                    pass
        await self._replace(repr(exc))

    # -- broker faults -----------------------------------------------------------------

    async def _faults(self) -> None:
        cluster, rng = self.cluster, random.Random(self.cfg.seed * 7919 + 1)
        assert cluster is not None
        while not self._stop.is_set():
            try:
                await asyncio.wait_for(self._stop.wait(), rng.uniform(*self.cfg.fault_gap))
                return
            except asyncio.TimeoutError:
                pass
            kind = rng.choice(["leader-kill", "follower-stall", "coordinator-kill"])
            try:
                reps = await asyncio.to_thread(partition_replicas, self.bootstrap,
                                               self.out, 5.0)
                leader, replicas = reps[rng.randrange(self.cfg.out_partitions)]
                if kind == "coordinator-kill":
                    p = self.producer
                    node = None if p is None or p._txn is None else \
                        p._txn._coordinators.get((1, self.tid))
                    if node is None:
                        kind, node = "leader-kill", leader
                    await asyncio.to_thread(cluster.kill_node, node)
                    self.report.faults.append(f"{kind} {node}")
                    await asyncio.sleep(rng.uniform(2.0, 4.0))
                    await asyncio.to_thread(cluster.start_node, node, 90.0)
                elif kind == "leader-kill":
                    await asyncio.to_thread(cluster.kill_node, leader)
                    self.report.faults.append(f"{kind} {leader}")
                    await asyncio.sleep(rng.uniform(2.0, 4.0))
                    await asyncio.to_thread(cluster.start_node, leader, 90.0)
                else:
                    followers = [r for r in replicas if r != leader]
                    self.report.faults.append(f"{kind} {followers}")
                    try:
                        for node in followers:
                            await asyncio.to_thread(cluster.pause_node, node)
                        await asyncio.sleep(rng.uniform(3.0, 5.0))
                    finally:
                        for node in followers:
                            await asyncio.to_thread(cluster.resume_node, node)
            except Exception as exc:  # a fault that could not be injected: go on
                print(f"txn soak: fault {kind} not injected: {exc!r}", file=sys.stderr)

    async def _heal(self) -> None:
        if self.cluster is not None:
            await asyncio.to_thread(self.cluster.resume_all)
            await asyncio.to_thread(self.cluster.ensure_running, 120.0)

    # -- the run -------------------------------------------------------------------------

    async def run(self) -> SoakReport:
        c = self.cfg
        started = time.monotonic()
        nodes = self.cluster.node_count() if self.cluster is not None else 1
        replication = 3 if nodes >= 3 else 1
        config = {"min.insync.replicas": "2"} if replication == 3 else {}
        await asyncio.to_thread(create_topic, self.bootstrap, self.out, c.out_partitions,
                                replication, config)
        await asyncio.to_thread(create_topic, self.bootstrap, self.input, c.partitions,
                                replication, config)
        print(f"txn soak: seed {c.seed}, {c.rounds} rounds, faults={c.faults}")
        weights = [c.weights.get(a, 0) for a in ACTIONS]
        faults = None
        try:
            self.producer = await self._fresh()
            if c.faults and self.cluster is not None:
                faults = asyncio.ensure_future(self._faults())
            for _ in range(c.rounds):
                if c.duration is not None and time.monotonic() - started > c.duration:
                    break
                if time.monotonic() - started > c.wall_timeout:
                    self.report.problems.append(
                        f"wall timeout ({c.wall_timeout:.0f} s) after "
                        f"{self.report.rounds} rounds")
                    break
                action = self._action = self.rng.choices(ACTIONS, weights)[0]
                self.report.actions[action] += 1
                self.report.rounds += 1
                if c.verbose:
                    print(f"txn soak: round {self.report.rounds}: {action}")
                try:
                    if self.producer is None:
                        self.producer = await self._fresh()
                    await self._round(action)
                except KafkaError as exc:
                    await self._recover(exc)
        finally:
            self._stop.set()
            if faults is not None:
                await faults
            await self._heal()
            if self.producer is not None:
                await self.producer.close(timeout=10.0)
        await self._verify()
        self.report.seconds = time.monotonic() - started
        return self.report

    async def _verify(self) -> None:
        r = self.report
        r.tracked_positions = dict(self.pos)
        # A last producer fences the id: the coordinator ends whatever is still open.
        self._uncertain = True
        fence = await self._fresh()
        await fence.close()
        committed = await asyncio.to_thread(_committed_offsets, self.bootstrap, self.group,
                                            self.input, self.cfg.partitions)
        r.committed_positions = committed
        rows = await asyncio.to_thread(_read_committed, self.bootstrap, self.out,
                                       self.cfg.verify_timeout)
        r.outputs_read = len(rows)
        seen: Counter[tuple[int, int]] = Counter()
        last: dict[int, int] = {}
        for _part, _off, _key, value in rows:
            assert value is not None
            src, o = (int(x) for x in value.split(b":"))
            seen[(src, o)] += 1
            if seen[(src, o)] > 1:
                r.duplicated += 1
                continue
            if o < last.get(src, -1):
                r.reordered += 1
            last[src] = max(last.get(src, -1), o)
            if o >= committed.get(src, 0):
                r.beyond += 1
        r.expected = sum(committed.values())
        r.lost = sum(1 for src, n in committed.items() for o in range(n)
                     if seen[(src, o)] == 0)


async def run_soak(cluster: LocalKafka | None, bootstrap: str, cfg: SoakConfig,
                   *, cleanup: bool = True) -> SoakReport:
    soak = _Soak(cluster, bootstrap, cfg)
    try:
        return await asyncio.wait_for(soak.run(), cfg.wall_timeout + 300.0)
    finally:
        if cleanup:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(delete_topics, bootstrap, [soak.out, soak.input])


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m soak.txn", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--version", type=int, choices=[1, 2], default=2)
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--seconds", type=float, default=None,
                    help="stop starting rounds after this long")
    ap.add_argument("--faults", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--bootstrap", help="an existing cluster (no broker faults then)")
    ap.add_argument("--verbose", action="store_true", help="print each round's action")
    return ap.parse_args(argv)


async def _amain(args: argparse.Namespace, seed: int) -> SoakReport:
    cfg = SoakConfig(seed=seed, rounds=args.rounds, duration=args.seconds,
                     faults=args.faults and not args.bootstrap and args.nodes >= 3,
                     verbose=args.verbose)
    if args.bootstrap:
        return await run_soak(None, args.bootstrap, cfg)
    with tempfile.TemporaryDirectory(prefix="aioproducer-txn-soak-") as tmp:
        cluster = LocalKafka(Path(tmp), nodes=args.nodes,
                             features={"transaction.version": args.version})
        await asyncio.to_thread(cluster.start, 240.0)
        try:
            return await run_soak(cluster, cluster.bootstrap, cfg)
        finally:
            await asyncio.to_thread(cluster.stop, 60.0)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 30)
    print(f"txn soak: seed {seed} (--seed {seed} repeats this schedule)")
    report = asyncio.run(_amain(args, seed))
    print(report.line())
    for f in report.faults:
        print(f"  fault: {f}")
    problems = report.violations()
    for v in problems:
        print(f"VIOLATION: {v}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
