"""Chaos soak: "exactly once, in order" for the idempotent producer under faults.

``python -m soak.chaos --records 1000000 --seed N`` (run from the repository root)
starts a three-node local KRaft cluster (:class:`aioproducer.devbroker.LocalKafka`),
creates a topic with replication factor 3, ``min.insync.replicas=2`` and 16 partitions,
and streams keyed records (each value carries its send index) at a paced rate through
``Producer(bootstrap_servers=..., linger_ms=5)`` (acks=all, idempotence at its
default), while a schedule drawn from ``random.Random(seed)`` injects faults one after
the other, each bounded in time:

``kill``
    SIGKILL the node leading some partition, restart it after a few seconds.
``pause``
    SIGSTOP the two followers of some partition for ``pause_seconds``, then SIGCONT
    (acks=all waits while the leader has written).
``reset``
    close every producer connection (fault proxy).
``drop_acks``
    the next ``k`` Produce responses of the node leading some partition are lost after
    the broker wrote the batch (fault proxy).

And about once a second, two poison records, each to its own one-partition topic so
that the main topic's accounting stays clean: a record with no key to a compacted
topic (the broker refuses it: ``InvalidRecordError``), and a record of
``poison_big_bytes`` to a topic whose ``max.message.bytes`` is smaller
(``MessageTooLargeError``).

Afterwards everything is read back with confluent-kafka (an independent client) and
checked (:meth:`ChaosReport.violations`):

* every acknowledged record is in the log exactly once, at the offset the producer
  reported; per key, the log order is the send order;
* every failed record has a typed :class:`aioproducer.KafkaError`; main-topic records
  must not fail at all (``delivery_timeout_ms`` is well above the longest fault); each
  poison record fails with the error of its cause;
* no future is pending after ``await producer.close()``;
* the producer ids/epochs granted by InitProducerId (the proxies' responses, seen
  through their ``corrupt_responses`` hook, which returns them unchanged; without it,
  the requests the proxies counted) are at most 1 + the number of *epoch-bump
  events* (none by default), and every one after the first has such an event of its own at most 3 s
  before it (:func:`unexplained`).  A request retried after an error response or a
  lost connection grants nothing new, so only grants are held to this; requests and
  error responses are reported too.  The
  faults themselves (kills, pauses, resets, lost acks) are no such event.  A refused
  poison batch is one: this producer bumps its epoch after a batch the broker refused
  (like Java's idempotent producer, KIP-360;
  ``tests/broker/test_delivery_faults.py::test_fatal_batch_error_bumps_epoch``), since the
  partition's sequence numbers must start again.  The default,
  ``poison_may_bump=False``, allows exactly one request in all: the producer bumps the
  refused batch's partition epoch locally, as Java does, with no InitProducerId.
  ``poison_may_bump=True`` (``--allow-init-per-poison``) accepts one per refused poison
  batch, to compare with versions that sent InitProducerId after each;
* the longest gap between consecutive main-topic acknowledgements after the last fault
  ended (from its end to the first ack, between acks, and from the last ack to the end
  of the wait if records were still unacknowledged) is below ``max_ack_gap`` seconds;
  past ``records`` the stream goes on (by up to ``max_extra`` of it) until
  ``tail_seconds`` have passed after the last fault, so that a slow restart does not
  leave this check blind;
* ``send()`` never blocked longer than ``max_block_ms`` (plus a little slack).

The fault proxy.  The engine (:func:`run_chaos`) does not import one: the
caller passes the proxy in as ``proxy``, an object with the interface of
:class:`aioproducer.testing.faultproxy.ProxyCluster` (``bootstrap``, ``drop_connections()``,
``requests(api_key)``, ``clear_faults()``, ``proxy_for_node(node_id)`` whose result
has ``drop_after_request(api_key, count)`` and ``stats["responses_dropped"]``).
``proxies`` (node id -> proxy with ``corrupt_responses``) is used if present, to see
the InitProducerId responses. ``tests/broker/test_chaos.py`` passes a ``ProxyCluster``.
The command line imports ``aioproducer.testing.faultproxy`` (an aioproducer too old
to ship it has none); without it, or with
``--no-proxy``, the producer talks to the brokers directly, the ``reset`` and
``drop_acks`` faults are left out of the schedule, and InitProducerId requests are
not counted (reported as ``n/a``).

``--no-faults`` (``ChaosConfig(faults=False)``) runs the same stream with an empty
schedule: it checks the harness itself, and must pass on any correct producer.
``--no-poison`` leaves the poison records out.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import logging
import random
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aioproducer import KafkaError, Producer, RecordMetadata
from aioproducer.devbroker import LocalKafka
from aioproducer.errors import (
    BrokerResponseError,
    InvalidRecordError,
    MessageTooLargeError,
    RecordTooLargeError,
)
from soak.cluster import create_topic, delete_topics, partition_replicas

__all__ = ["ChaosConfig", "ChaosReport", "Event", "main", "make_schedule", "run_chaos"]

API_PRODUCE = 0
API_INIT_PRODUCER_ID = 22

KILL, PAUSE, RESET, DROP_ACKS = "kill", "pause", "reset", "drop_acks"
PROXY_FAULTS = (RESET, DROP_ACKS)

# What a poison record must fail with, by poison kind.
POISON_EXPECTED: dict[str, tuple[type[KafkaError], ...]] = {
    "null_key_compacted": (InvalidRecordError,),
    "too_large": (MessageTooLargeError, RecordTooLargeError),
}


def encode(i: int, size: int = 32) -> bytes:
    """A value that carries its send index (first 8 bytes, big-endian)."""
    return i.to_bytes(8, "big") + b"." * (size - 8)


def decode(value: bytes | None) -> int:
    if value is None or len(value) < 8:
        return -1
    return int.from_bytes(value[:8], "big")


# -- configuration and schedule ---------------------------------------------------------

@dataclass
class ChaosConfig:
    records: int = 1_000_000
    rate: float = 5_000.0               # records/s sent to the main topic
    seed: int = 0
    faults: bool = True
    poison: bool = True
    keys: int = 64
    partitions: int = 16
    value_size: int = 32
    fault_start: float = 5.0            # first fault no earlier (s after the stream starts)
    tail_seconds: float = 20.0          # faults end this long before the stream does
    max_extra: float = 0.5              # the stream may go on by this share of records
                                        # until tail_seconds have passed after the faults
    pause_seconds: float = 10.0
    kill_down: tuple[float, float] = (2.0, 5.0)   # a killed node stays down this long
    restart_estimate: float = 20.0      # planning only: how long a restart takes
    gap: tuple[float, float] = (2.0, 5.0)         # between two broker faults
    proxy_gap: tuple[float, float] = (3.0, 8.0)   # between two proxy faults
    drop_acks: tuple[int, int] = (1, 4)           # responses lost per drop_acks fault
    poison_interval: float = 1.0
    poison_big_bytes: int = 50_000
    poison_max_message_bytes: int = 20_000
    poison_may_bump: bool = False       # True: one InitProducerId per refused poison batch
    linger_ms: int = 5
    delivery_timeout_ms: int = 60_000
    max_block_ms: int = 60_000
    node_timeout: float = 120.0         # start_node / ensure_running
    settle_timeout: float = 90.0        # wait for the futures after the last send
    close_timeout: float = 30.0
    consume_timeout: float = 180.0
    max_ack_gap: float = 15.0
    wall_timeout: float | None = None   # sending stops then (default: 3 x planned)
    producer_options: dict[str, Any] = field(default_factory=dict)
    eager_compression_thread: bool = False
    """Every full batch of 64 bytes or more goes to the compression thread (with
    ``compression_type`` zstd or lz4 in ``producer_options``), whatever it costs."""

    @property
    def planned_seconds(self) -> float:
        return self.records / self.rate


@dataclass
class Event:
    at: float                 # planned start, seconds after the stream started
    kind: str
    partition: int            # the partition whose leader / followers are hit
    duration: float = 0.0     # kill: time down; pause: time paused
    count: int = 0            # drop_acks: responses lost
    # Filled in when it runs:
    started: float | None = None
    ended: float | None = None
    nodes: list[int] = field(default_factory=list)
    note: str = ""

    def describe(self) -> str:
        what = {KILL: f"kill leader(p{self.partition}) {self.duration:.1f}s",
                PAUSE: f"pause followers(p{self.partition}) {self.duration:.1f}s",
                RESET: "reset connections",
                DROP_ACKS: f"drop {self.count} acks of leader(p{self.partition})"}[self.kind]
        s = f"@{self.at:.1f}s {what}"
        if self.started is not None:
            s += f" [ran {self.started:.1f}-{(self.ended or self.started):.1f}s"
            s += f" nodes={self.nodes}" if self.nodes else ""
            s += f" {self.note}" if self.note else ""
            s += "]"
        return s


def _estimate(ev: Event, cfg: ChaosConfig) -> float:
    if ev.kind == KILL:
        return ev.duration + cfg.restart_estimate
    if ev.kind == PAUSE:
        return ev.duration + 3.0
    return 1.0


def make_schedule(cfg: ChaosConfig, *, proxy: bool) -> list[Event]:
    """Faults from ``random.Random(cfg.seed)``, in two lanes, each run one fault after
    the other (a fault starts at its planned time or when the one before it in its lane
    ended, whichever is later); the lanes overlap.

    * brokers: one ``kill`` and one ``pause`` (in a random order), then random ones
      while the window (``fault_start`` to ``planned_seconds - tail_seconds``) has room
      for their estimated length (a restart: ``restart_estimate``);
    * proxy (with a proxy only): a ``reset`` or ``drop_acks`` every ``proxy_gap``
      seconds within the window, at least one of each.

    The result is sorted by planned time."""
    if not cfg.faults:
        return []
    rng = random.Random(cfg.seed)
    window_end = cfg.planned_seconds - cfg.tail_seconds

    def draw(kind: str, at: float) -> Event:
        p = rng.randrange(cfg.partitions)
        at = round(at, 1)
        if kind == KILL:
            return Event(at, kind, p, duration=round(rng.uniform(*cfg.kill_down), 1))
        if kind == PAUSE:
            return Event(at, kind, p, duration=cfg.pause_seconds)
        if kind == DROP_ACKS:
            return Event(at, kind, p, count=rng.randint(*cfg.drop_acks))
        return Event(at, kind, p)

    events: list[Event] = []
    t = cfg.fault_start
    first = [KILL, PAUSE]
    rng.shuffle(first)
    for kind in first:  # always one of each, even past the window
        ev = draw(kind, t)
        events.append(ev)
        t += _estimate(ev, cfg) + rng.uniform(*cfg.gap)
    while True:
        ev = draw(rng.choice([KILL, PAUSE]), t)
        if t + _estimate(ev, cfg) > window_end:
            break
        events.append(ev)
        t += _estimate(ev, cfg) + rng.uniform(*cfg.gap)
    if proxy:
        first = list(PROXY_FAULTS)
        rng.shuffle(first)
        t = cfg.fault_start + rng.uniform(*cfg.proxy_gap)
        while first or t + 2.0 <= window_end:
            events.append(draw(first.pop() if first else rng.choice(PROXY_FAULTS), t))
            t += rng.uniform(*cfg.proxy_gap)
    events.sort(key=lambda e: e.at)
    return events


# -- the report -------------------------------------------------------------------------

def _error_name(exc: BaseException) -> str:
    name = type(exc).__name__
    if type(exc) is BrokerResponseError:  # the generic class: name the code too
        code = getattr(exc, "code", None)
        name += f"({getattr(code, 'name', code)})"
    return name


@dataclass
class ChaosReport:
    seed: int
    faults: bool
    schedule: list[Event]
    records: int = 0                 # planned
    sent: int = 0                    # send() returned a future
    send_errors: Counter[str] = field(default_factory=Counter)
    acknowledged: int = 0
    failed: Counter[str] = field(default_factory=Counter)
    untyped: list[str] = field(default_factory=list)
    unfinished_at_settle: int = 0
    pending_after_close: int = 0
    consumed: int = 0
    lost: int = 0
    duplicated: int = 0
    duplicates_by_partition: Counter[int] = field(default_factory=Counter)
    duplicates_by_second: Counter[int] = field(default_factory=Counter)  # by send time
    out_of_order: int = 0
    wrong_offset: int = 0
    written_but_failed: int = 0
    unknown_in_log: int = 0
    poison_sent: int = 0
    poison_outcomes: Counter[str] = field(default_factory=Counter)
    poison_wrong: int = 0
    epoch_bump_events: int = 0
    init_producer_id: int | None = None   # requests through the proxies
    init_producer_id_at: list[float] = field(default_factory=list)  # s, stream time
    # Successful responses (stream time, producer id, epoch), when the proxies let us
    # see them; error responses by error code.
    init_producer_id_granted: list[tuple[float, int, int]] | None = None
    init_producer_id_errors: Counter[int] = field(default_factory=Counter)
    unexplained_init_producer_id: int = 0
    max_send_block: float = 0.0
    max_block_limit: float = 0.0
    fault_end: float = 0.0           # s after the stream started
    stream_end: float = 0.0
    tail: float = 0.0                # time without faults after the last one
    max_ack_gap_after_faults: float = 0.0
    max_ack_gap_overall: float = 0.0
    max_ack_gap_limit: float = 0.0
    elapsed: float = 0.0
    harness_errors: list[str] = field(default_factory=list)

    def violations(self) -> list[str]:
        v: list[str] = []
        if self.harness_errors:
            v.append(f"harness errors: {self.harness_errors}")
        if self.sent + sum(self.send_errors.values()) < self.records:
            v.append(f"only {self.sent} of {self.records} records sent")
        if self.lost:
            v.append(f"{self.lost} acknowledged records lost")
        if self.duplicated:
            v.append(f"{self.duplicated} duplicates in the log")
        if self.out_of_order:
            v.append(f"{self.out_of_order} records out of send order (per key)")
        if self.wrong_offset:
            v.append(f"{self.wrong_offset} acknowledged at an offset where they are not")
        if self.unknown_in_log:
            v.append(f"{self.unknown_in_log} records in the log that were never sent")
        if sum(self.failed.values()) or sum(self.send_errors.values()):
            v.append(f"main-topic records failed: {dict(self.failed)} "
                     f"send errors: {dict(self.send_errors)}")
        if self.untyped:
            v.append(f"failures without a typed KafkaError: {self.untyped[:3]}")
        if self.pending_after_close:
            v.append(f"{self.pending_after_close} futures pending after close()")
        if self.poison_wrong:
            v.append(f"{self.poison_wrong} poison records without the error of their "
                     f"cause: {dict(self.poison_outcomes)}")
        what, count = self._init_producer_id_counted()
        if count is not None and count > 1 + self.epoch_bump_events:
            v.append(f"{count} InitProducerId {what}, allowed 1 + {self.epoch_bump_events}")
        if self.unexplained_init_producer_id:
            v.append(f"{self.unexplained_init_producer_id} InitProducerId {what} after "
                     "the first with no refused poison batch just before them")
        if self.faults and self.schedule and self.tail < self.max_ack_gap_limit:
            v.append(f"only {self.tail:.1f} s of stream after the last fault ended "
                     f"(< {self.max_ack_gap_limit:.0f} s): stalls not judged; send more "
                     "records")
        if self.max_ack_gap_after_faults >= self.max_ack_gap_limit:
            v.append(f"acks stalled {self.max_ack_gap_after_faults:.1f} s after the last "
                     f"fault (limit {self.max_ack_gap_limit:.0f} s)")
        if self.max_send_block > self.max_block_limit:
            v.append(f"send() blocked {self.max_send_block:.2f} s "
                     f"(max_block_ms {self.max_block_limit:.1f} s)")
        return v

    def _init_producer_id_counted(self) -> tuple[str, int | None]:
        """What the InitProducerId checks count: the ids/epochs granted when the
        responses could be seen (a request retried after an error response or a lost
        connection grants nothing new), else the requests."""
        if self.init_producer_id_granted is not None:
            return "grants", len(self.init_producer_id_granted)
        return "requests", self.init_producer_id

    def _init_producer_id_detail(self) -> str:
        if self.init_producer_id is None:
            return "init_producer_id=n/a "
        what, _ = self._init_producer_id_counted()
        s = f"init_producer_id: requests={self.init_producer_id} "
        if self.init_producer_id_granted is not None:
            g = self.init_producer_id_granted
            s += (f"granted={len(g)} errors={dict(self.init_producer_id_errors)} "
                  f"(granted at [stream s, producer id, epoch]: "
                  f"{[(round(t, 1), pid, ep) for t, pid, ep in g[:12]]}"
                  f"{'...' if len(g) > 12 else ''}) ")
        else:
            s += (f"(at {[round(t, 1) for t in self.init_producer_id_at[:20]]}"
                  f"{'...' if len(self.init_producer_id_at) > 20 else ''}) ")
        return s + (f"{what} allowed<={1 + self.epoch_bump_events} "
                    f"unexplained={self.unexplained_init_producer_id} ")

    def _dup_detail(self) -> str:
        if not self.duplicated:
            return ""
        top = sorted(self.duplicates_by_second.most_common(12))
        return (f"(by partition {dict(sorted(self.duplicates_by_partition.items()))}; "
                f"by send second, top 12: {dict(top)}) ")

    def line(self) -> str:
        verdict = self.violations()
        return (
            f"CHAOS seed={self.seed} faults={'on' if self.faults else 'off'} "
            f"schedule=[{'; '.join(e.describe() for e in self.schedule)}] "
            f"records={self.records} sent={self.sent} acked={self.acknowledged} "
            f"failed={sum(self.failed.values())} failures={dict(self.failed)} "
            f"send_errors={dict(self.send_errors)} untyped={len(self.untyped)} "
            f"consumed={self.consumed} lost={self.lost} duplicated={self.duplicated} "
            f"{self._dup_detail()}"
            f"out_of_order={self.out_of_order} wrong_offset={self.wrong_offset} "
            f"written_but_failed={self.written_but_failed} "
            f"unfinished_at_settle={self.unfinished_at_settle} "
            f"pending_after_close={self.pending_after_close} "
            f"poison_sent={self.poison_sent} poison={dict(self.poison_outcomes)} "
            f"poison_wrong={self.poison_wrong} {self._init_producer_id_detail()}"
            f"max_send_block={self.max_send_block:.3f}s "
            f"fault_end={self.fault_end:.1f}s stream_end={self.stream_end:.1f}s "
            f"tail={self.tail:.1f}s max_ack_gap_after_faults="
            f"{self.max_ack_gap_after_faults:.2f}s "
            f"max_ack_gap_overall={self.max_ack_gap_overall:.2f}s "
            f"elapsed={self.elapsed:.1f}s "
            f"verdict={'PASS' if not verdict else 'FAIL: ' + ' | '.join(verdict)}")


# -- Reading back (confluent-kafka: independent of the producer under test) -------------

def read_back(bootstrap: str, topic: str,
              timeout: float) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """Every record of ``topic`` as (partition, offset, key, value): each partition is
    read from its start up to its high watermark taken first (the producer is closed,
    so nothing is written any more). Raises TimeoutError if that takes over
    ``timeout`` seconds, and on any consumer error."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"chaos-{uuid.uuid4().hex}",
        "enable.auto.commit": False, "auto.offset.reset": "earliest",
        "check.crcs": True, "fetch.wait.max.ms": 100,
        "isolation.level": "read_uncommitted"})
    deadline = time.monotonic() + timeout
    out: list[tuple[int, int, bytes | None, bytes | None]] = []
    try:
        md = consumer.list_topics(topic, timeout=30)
        parts = sorted(md.topics[topic].partitions)
        ends: dict[int, int] = {}
        for p in parts:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p),
                                                       timeout=30, cached=False)
            if high > low:
                ends[p] = high
        consumer.assign([TopicPartition(topic, p, -2) for p in ends])  # -2: beginning
        while ends:
            if time.monotonic() > deadline:
                raise TimeoutError(f"read back {len(out)} records of {topic}; partitions "
                                   f"{sorted(ends)} not read to their end in {timeout:.0f} s")
            for msg in consumer.consume(num_messages=10_000, timeout=0.5):
                err = msg.error()
                if err is not None:
                    if err.code() == err._PARTITION_EOF:
                        continue
                    raise KafkaException(err)
                p, off = int(msg.partition() or 0), int(msg.offset() or 0)
                out.append((p, off, msg.key(), msg.value()))
                if p in ends and off >= ends[p] - 1:
                    del ends[p]
    finally:
        consumer.close()
    return out


# -- the run ----------------------------------------------------------------------------

class _Run:
    def __init__(self, cluster: LocalKafka, cfg: ChaosConfig, proxy: Any | None,
                 log: Callable[[str], None]) -> None:
        self.cluster = cluster
        self.cfg = cfg
        self.proxy = proxy
        self.log = log
        self.bootstrap = cluster.bootstrap
        tag = f"{cfg.seed}-{uuid.uuid4().hex[:8]}"
        self.topic = f"chaos-{tag}"
        self.poison_topics = {"null_key_compacted": f"chaos-poison-compact-{tag}",
                              "too_large": f"chaos-poison-big-{tag}"}
        self.schedule = make_schedule(cfg, proxy=proxy is not None)
        self.report = ChaosReport(seed=cfg.seed, faults=cfg.faults, schedule=self.schedule,
                                  records=cfg.records,
                                  max_block_limit=cfg.max_block_ms / 1000.0 + 0.5,
                                  max_ack_gap_limit=cfg.max_ack_gap)
        room = cfg.records + int(cfg.records * cfg.max_extra)
        self.results: list[Any] = [None] * room
        self.futures: list[Any] = []                 # in send order
        self.futs: list[Any] = [None] * room         # by send index
        self.faults_done = False
        self.tapped = False
        self.grants: list[tuple[float, int, int, int]] = []  # (monotonic, err, pid, epoch)
        self.ack_times: list[float] = []
        self.poison: list[tuple[str, Any]] = []   # (kind, future or exception)
        self.t0 = 0.0
        self.sending = True
        self.send_failed: set[int] = set()
        self.refused_at: list[float] = []   # stream times of refused poison batches
        self.killed: set[int] = set()
        self.paused: set[int] = set()

    def now(self) -> float:
        return time.monotonic() - self.t0

    # -- producing --

    def _done(self, fut: Any) -> None:
        """When a main-topic record was acknowledged (for the stall detector); the
        outcomes themselves are read from the futures afterwards."""
        try:
            ok = fut.exception() is None
        except BaseException:  # cancelled
            ok = False
        if ok:
            self.ack_times.append(time.monotonic())

    def _outcomes(self) -> None:
        """``results[i]``: the RecordMetadata or exception of each record whose future
        is done (records refused by send() have their exception already)."""
        for i, fut in enumerate(self.futs):
            if fut is None or not fut.done():
                continue
            try:
                exc = fut.exception()
            except BaseException as e:  # cancelled
                exc = e
            self.results[i] = fut.result() if exc is None else exc

    async def _send_main(self, producer: Producer, deadline: float) -> None:
        cfg, rep = self.cfg, self.report
        keys = [f"key-{k:03d}".encode() for k in range(cfg.keys)]
        n, i = len(self.futs), 0  # records, plus room for the extension
        while i < n:
            now = time.monotonic()
            if now > deadline:
                if i < cfg.records:
                    rep.harness_errors.append(
                        f"wall time over: stopped sending at record {i}")
                break
            if i >= cfg.records and self._tail_done():
                break
            due = min(n if i >= cfg.records else cfg.records,
                      int((now - self.t0) * cfg.rate) + 1)
            while i < due:
                t = time.monotonic()
                try:
                    fut = await producer.send(self.topic, encode(i, cfg.value_size),
                                              key=keys[i % cfg.keys])
                except Exception as exc:
                    self.results[i] = exc
                    self.send_failed.add(i)
                    rep.send_errors[_error_name(exc)] += 1
                    if not isinstance(exc, KafkaError):
                        rep.untyped.append(repr(exc))
                else:
                    rep.sent += 1
                    self.futures.append(fut)
                    self.futs[i] = fut
                    fut.add_done_callback(self._done)
                rep.max_send_block = max(rep.max_send_block, time.monotonic() - t)
                i += 1
            if i < n:
                await asyncio.sleep(max(0.0, self.t0 + i / cfg.rate - time.monotonic()))
        self.sending = False

    def _tail_done(self) -> bool:
        """Whether the stream may end: no schedule, or every fault over for
        ``tail_seconds``. (Past ``records``, the stream goes on until then: a restart
        that took longer than planned must not leave the stall detector blind.)"""
        if not self.schedule:
            return True
        return self.faults_done and self.now() - self.report.fault_end >= (
            self.cfg.tail_seconds)

    async def _send_poison(self, producer: Producer) -> None:
        cfg = self.cfg
        # Random bytes: with compression on, a run of one byte would compress below the
        # topic's max.message.bytes and be accepted.
        big = random.Random(cfg.seed).randbytes(cfg.poison_big_bytes)
        while self.sending:
            for kind, topic in self.poison_topics.items():
                key = None if kind == "null_key_compacted" else b"big"
                value = b"poison" if kind == "null_key_compacted" else big
                t = time.monotonic()
                try:
                    fut = await producer.send(topic, value, key=key)
                except Exception as exc:
                    self.poison.append((kind, exc))
                else:
                    self.poison.append((kind, fut))
                    fut.add_done_callback(self._poison_done)
                self.report.max_send_block = max(self.report.max_send_block,
                                                 time.monotonic() - t)
            await asyncio.sleep(cfg.poison_interval)

    def _poison_done(self, fut: Any) -> None:
        try:
            exc = fut.exception()
        except BaseException:  # cancelled
            return
        if isinstance(exc, BrokerResponseError):  # refused by the broker: may bump
            self.refused_at.append(self.now())

    # -- faults --

    async def _leader_and_followers(self, partition: int,
                                    timeout: float = 20.0) -> tuple[int, list[int]]:
        """The partition's leader and followers now (retried while it has no leader or
        the metadata request fails, up to ``timeout``)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                reps = await asyncio.to_thread(partition_replicas, self.bootstrap,
                                               self.topic, 5.0)
                leader, replicas = reps[partition]
                if leader >= 0:
                    return leader, [r for r in replicas if r != leader]
                why = "no leader"
            except Exception as exc:
                why = repr(exc)
            if time.monotonic() > deadline:
                raise RuntimeError(f"partition {partition}: {why} for {timeout:.0f} s")
            await asyncio.sleep(0.5)

    async def _run_event(self, ev: Event) -> None:
        cluster, proxy = self.cluster, self.proxy
        assert proxy is not None or ev.kind not in PROXY_FAULTS
        if ev.kind == KILL:
            leader, _ = await self._leader_and_followers(ev.partition)
            ev.nodes = [leader]
            self.killed.add(leader)
            await asyncio.to_thread(cluster.kill_node, leader)
            await asyncio.sleep(ev.duration)
            await asyncio.to_thread(cluster.start_node, leader, self.cfg.node_timeout)
            self.killed.discard(leader)
        elif ev.kind == PAUSE:
            leader, followers = await self._leader_and_followers(ev.partition)
            ev.nodes = followers
            ev.note = f"leader={leader}"
            try:
                for node in followers:
                    self.paused.add(node)
                    await asyncio.to_thread(cluster.pause_node, node)
                await asyncio.sleep(ev.duration)
            finally:
                for node in followers:
                    await asyncio.to_thread(cluster.resume_node, node)
                    self.paused.discard(node)
        elif ev.kind == RESET and proxy is not None:
            proxy.drop_connections()
        elif ev.kind == DROP_ACKS and proxy is not None:
            leader, _ = await self._leader_and_followers(ev.partition)
            ev.nodes = [leader]
            fp = proxy.proxy_for_node(leader)
            before = fp.stats["responses_dropped"]
            fp.drop_after_request(API_PRODUCE, count=ev.count)
            limit = time.monotonic() + 5.0
            while (fp.stats["responses_dropped"] - before < ev.count
                   and time.monotonic() < limit):
                await asyncio.sleep(0.05)
            dropped = fp.stats["responses_dropped"] - before
            fp.drop_after_request(API_PRODUCE, count=0)  # cancel what is left
            ev.note = f"dropped={dropped}"

    async def _lane(self, events: list[Event]) -> None:
        for ev in events:
            wait = ev.at - self.now()
            if wait > 0:
                await asyncio.sleep(wait)
            if not self.sending:
                ev.note = "skipped: the stream had ended"
                continue
            ev.started = self.now()
            self.log(f"chaos: {self.now():7.1f}s start {ev.describe()}")
            try:
                await self._run_event(ev)
            except Exception as exc:  # a broken fault breaks the run
                self.report.harness_errors.append(f"{ev.kind}: {exc!r}")
                ev.note += f" error={exc!r}"
            ev.ended = self.now()
            self.report.fault_end = max(self.report.fault_end, ev.ended)
            self.log(f"chaos: {self.now():7.1f}s end   {ev.describe()}")

    async def _faults(self) -> None:
        brokers = [e for e in self.schedule if e.kind not in PROXY_FAULTS]
        proxies = [e for e in self.schedule if e.kind in PROXY_FAULTS]
        try:
            await asyncio.gather(self._lane(brokers), self._lane(proxies))
        finally:
            self.faults_done = True

    async def _watch_init_producer_id(self, before: int) -> None:
        """When InitProducerId requests reach the proxies (stream time, 0.1 s steps;
        the first one is sent before the stream starts)."""
        assert self.proxy is not None
        at = self.report.init_producer_id_at
        while True:
            n = self.proxy.requests(API_INIT_PRODUCER_ID) - before
            at.extend([self.now()] * (n - len(at)))
            await asyncio.sleep(0.1)

    def _tap(self, body: bytes) -> bytes:
        """Sees every InitProducerId response body (unchanged): throttle_time_ms
        int32, error_code int16, producer_id int64, producer_epoch int16."""
        if len(body) >= 16:
            err = int.from_bytes(body[4:6], "big", signed=True)
            pid = int.from_bytes(body[6:14], "big", signed=True)
            epoch = int.from_bytes(body[14:16], "big", signed=True)
            self.grants.append((time.monotonic(), err, pid, epoch))
        return body

    def _install_tap(self) -> None:
        """With a ProxyCluster-like proxy (``proxies``: node id -> FaultProxy with
        ``corrupt_responses``), watch InitProducerId responses through the hook that
        can rewrite them (it returns them as they are)."""
        nodes = getattr(self.proxy, "proxies", None)
        if not isinstance(nodes, dict) or not nodes:
            return
        if not all(hasattr(fp, "corrupt_responses") for fp in nodes.values()):
            return
        for fp in nodes.values():
            fp.corrupt_responses(API_INIT_PRODUCER_ID, self._tap, count=1 << 30)
        self.tapped = True

    async def _heal(self) -> None:
        """Resume paused nodes, restart killed ones, clear proxy faults."""
        if self.proxy is not None:
            self.proxy.clear_faults()
            if self.tapped:
                self._install_tap()  # clear_faults() removed it
        try:
            await asyncio.to_thread(self.cluster.resume_all)
            await asyncio.to_thread(self.cluster.ensure_running, self.cfg.node_timeout)
        except Exception as exc:
            self.report.harness_errors.append(f"could not heal the cluster: {exc!r}")

    # -- the whole run --

    async def run(self) -> ChaosReport:
        cfg, rep = self.cfg, self.report
        started = time.monotonic()
        self.log(f"chaos: seed={cfg.seed} records={cfg.records} rate={cfg.rate:.0f}/s "
                 f"faults={'on' if cfg.faults else 'off'} poison="
                 f"{'on' if cfg.poison else 'off'} proxy={'yes' if self.proxy else 'no'}")
        self.log("chaos: schedule: " + ("; ".join(e.describe() for e in self.schedule)
                                        or "(none)"))
        rf = min(3, self.cluster.nodes)
        await asyncio.to_thread(
            create_topic, self.bootstrap, self.topic, cfg.partitions, rf,
            {"min.insync.replicas": str(min(2, rf))})
        if cfg.poison:
            await asyncio.to_thread(
                create_topic, self.bootstrap, self.poison_topics["null_key_compacted"], 1,
                rf, {"min.insync.replicas": str(min(2, rf)), "cleanup.policy": "compact"})
            await asyncio.to_thread(
                create_topic, self.bootstrap, self.poison_topics["too_large"], 1, rf,
                {"min.insync.replicas": str(min(2, rf)),
                 "max.message.bytes": str(cfg.poison_max_message_bytes)})
        ipi_before = self.proxy.requests(API_INIT_PRODUCER_ID) if self.proxy else 0
        if self.proxy is not None:
            self._install_tap()
        bootstrap = self.proxy.bootstrap if self.proxy is not None else self.bootstrap
        options: dict[str, Any] = dict(linger_ms=cfg.linger_ms,
                                       delivery_timeout_ms=cfg.delivery_timeout_ms,
                                       max_block_ms=cfg.max_block_ms)
        options.update(cfg.producer_options)
        producer = Producer(bootstrap_servers=bootstrap, **options)
        if cfg.eager_compression_thread:
            from aioproducer._native.compressor import CompressorThread

            lazy = producer._accumulator.offload
            if lazy is None:
                raise SystemExit("--eager-compression-thread needs --compression zstd or lz4")
            producer._accumulator.offload = CompressorThread(lazy.codec, lazy.level, 64)
        tasks: list[asyncio.Task[None]] = []
        try:
            await asyncio.wait_for(producer.start(), cfg.max_block_ms / 1000 + 10)
            self.t0 = time.monotonic()
            wall = cfg.wall_timeout or max(3 * cfg.planned_seconds, cfg.planned_seconds + 300)
            send_task = asyncio.create_task(self._send_main(producer, self.t0 + wall))
            tasks.append(send_task)
            if cfg.poison:
                tasks.append(asyncio.create_task(self._send_poison(producer)))
            fault_task = asyncio.create_task(self._faults())
            if self.proxy is not None:
                tasks.append(asyncio.create_task(self._watch_init_producer_id(ipi_before)))
            tasks.append(fault_task)
            try:
                await asyncio.wait_for(asyncio.shield(send_task), wall + 60)
            finally:
                self.sending = False
                rep.stream_end = self.now()
                try:  # a fault still running (a restart) ends by itself, bounded
                    await asyncio.wait_for(asyncio.shield(fault_task),
                                           cfg.node_timeout + 30)
                except asyncio.TimeoutError:
                    rep.harness_errors.append("a fault did not end in time")
                await self._heal()
            # Wait for every main-topic future (bounded), then close.
            pending = [f for f in self.futures if not f.done()]
            settle_end = time.monotonic() + cfg.settle_timeout
            while pending and time.monotonic() < settle_end:
                await asyncio.sleep(0.2)
                pending = [f for f in pending if not f.done()]
            rep.unfinished_at_settle = len(pending)
            settled_at = time.monotonic()
        finally:
            for t in tasks:
                if not t.done():
                    t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            try:
                await asyncio.wait_for(producer.close(timeout=cfg.close_timeout),
                                       cfg.close_timeout + 30)
            except Exception as exc:
                rep.harness_errors.append(f"close() did not return: {exc!r}")
            waited_ns = producer._metrics.pool_wait.total
            if "buffer_memory" in cfg.producer_options:
                print(f"chaos: sends waited {waited_ns / 1e9:.1f} s for memory in all",
                      flush=True)
            thread = producer._accumulator.offload
            if thread is not None:
                print(f"chaos: {thread.compressed} batches compressed on the compression "
                      f"thread ({thread.failed} failed)", flush=True)
                if cfg.eager_compression_thread and not thread.compressed:
                    rep.harness_errors.append("no batch went to the compression thread")
            await self._heal()
        await asyncio.sleep(0)  # done callbacks scheduled by close() run now
        rep.pending_after_close = sum(1 for f in self.futures if not f.done()) + sum(
            1 for _, f in self.poison if not isinstance(f, BaseException) and not f.done())
        if self.proxy is not None:
            rep.init_producer_id = self.proxy.requests(API_INIT_PRODUCER_ID) - ipi_before
        self._outcomes()
        self._stall(settled_at, bool(rep.unfinished_at_settle))
        if self.proxy is not None:
            times = rep.init_producer_id_at
            if self.tapped:
                rep.init_producer_id_granted = [
                    (t - self.t0, pid, epoch) for t, err, pid, epoch in self.grants
                    if err == 0]
                rep.init_producer_id_errors.update(err for _, err, _, _ in self.grants
                                                   if err != 0)
                times = [t for t, _, _ in rep.init_producer_id_granted]
            rep.unexplained_init_producer_id = unexplained(
                times, self.refused_at if cfg.poison_may_bump else [])
        self._poison_outcomes()
        consumed = await asyncio.to_thread(read_back, self.bootstrap, self.topic,
                                           cfg.consume_timeout)
        self._check(consumed)
        to_delete = [self.topic, *(self.poison_topics.values() if cfg.poison else ())]
        await asyncio.to_thread(delete_topics, self.bootstrap, to_delete)
        rep.elapsed = time.monotonic() - started
        return rep

    def _stall(self, settled_at: float, unfinished: bool) -> None:
        rep = self.report
        rep.tail = max(0.0, rep.stream_end - rep.fault_end) if self.schedule else rep.stream_end
        acks = sorted(self.ack_times)
        fault_end_abs = self.t0 + (rep.fault_end if self.schedule else 0.0)
        points = [fault_end_abs] + [t for t in acks if t > fault_end_abs]
        if unfinished:  # records still unacknowledged when the wait ended: a stall
            points.append(settled_at)
        rep.max_ack_gap_after_faults = max(
            (b - a for a, b in itertools.pairwise(points)), default=0.0)
        overall = [self.t0, *acks]
        if unfinished:
            overall.append(settled_at)
        rep.max_ack_gap_overall = max(
            (b - a for a, b in itertools.pairwise(overall)), default=0.0)

    def _poison_outcomes(self) -> None:
        rep = self.report
        rep.poison_sent = len(self.poison)
        for kind, f in self.poison:
            if isinstance(f, BaseException):
                exc: BaseException | None = f
            elif not f.done():
                rep.poison_outcomes[f"{kind}:pending"] += 1
                rep.poison_wrong += 1
                continue
            else:
                try:
                    exc = f.exception()
                except BaseException as e:
                    exc = e
            if exc is None:
                rep.poison_outcomes[f"{kind}:ACCEPTED"] += 1
                rep.poison_wrong += 1
                continue
            rep.poison_outcomes[f"{kind}:{_error_name(exc)}"] += 1
            if not isinstance(exc, POISON_EXPECTED[kind]):
                rep.poison_wrong += 1
                if not isinstance(exc, KafkaError):
                    rep.untyped.append(repr(exc))
            elif isinstance(exc, BrokerResponseError) and self.cfg.poison_may_bump:
                rep.epoch_bump_events += 1  # refused by the broker after it was sent

    def _check(self, consumed: list[tuple[int, int, bytes | None, bytes | None]]) -> None:
        rep = self.report
        rep.consumed = len(consumed)
        acked: dict[int, RecordMetadata] = {}
        for i, r in enumerate(self.results):
            if isinstance(r, RecordMetadata):
                acked[i] = r
            elif isinstance(r, BaseException) and i not in self.send_failed:
                rep.failed[_error_name(r)] += 1
                if not isinstance(r, KafkaError):
                    rep.untyped.append(repr(r))
        rep.acknowledged = len(acked)
        where: dict[int, list[tuple[int, int]]] = defaultdict(list)
        for p, off, _k, v in consumed:
            where[decode(v)].append((p, off))
        n = len(self.results)
        rep.unknown_in_log = sum(len(w) for i, w in where.items() if not 0 <= i < n)
        rep.duplicated = sum(len(w) - 1 for w in where.values() if len(w) > 1)
        rep.lost = sum(1 for i in acked if i not in where)
        rep.wrong_offset = sum(
            1 for i, m in acked.items()
            if i in where and (m.partition, m.offset) not in where[i])
        rep.written_but_failed = sum(
            1 for i, w in where.items()
            if 0 <= i < n and w and isinstance(self.results[i], BaseException))
        dups = sorted(i for i, w in where.items() if len(w) > 1)
        for i in dups:
            for p, _off in where[i][1:]:
                rep.duplicates_by_partition[p] += 1
        for i in dups:  # when the duplicated records were sent (to match with faults)
            rep.duplicates_by_second[int(i / self.cfg.rate)] += len(where[i]) - 1
        # Per key (within its partition) the log holds the records in send order; a
        # duplicate's later copy is counted in ``duplicated`` only (order is judged on
        # first copies).
        last: dict[tuple[int, bytes | None], int] = {}
        seen: set[int] = set()
        for p, _off, k, v in sorted(consumed, key=lambda m: (m[0], m[1])):
            idx = decode(v)
            if idx in seen:
                continue
            seen.add(idx)
            prev = last.get((p, k), -1)
            if idx <= prev:
                rep.out_of_order += 1
            last[(p, k)] = max(prev, idx)

def unexplained(requests_at: Sequence[float], refused_at: Sequence[float],
                before: float = 3.0, after: float = 0.5) -> int:
    """How many InitProducerId requests after the first (times in ``requests_at``) have
    no refused poison batch of their own (each explains one request) between ``before``
    seconds ahead of them and ``after`` seconds behind (the times are polled)."""
    free = sorted(refused_at)
    used = [False] * len(free)
    count = 0
    for t in sorted(requests_at)[1:]:
        for j, r in enumerate(free):
            if not used[j] and t - before <= r <= t + after:
                used[j] = True
                break
        else:
            count += 1
    return count


async def run_chaos(cluster: LocalKafka, cfg: ChaosConfig, *, proxy: Any | None = None,
                    log: Callable[[str], None] = print) -> ChaosReport:
    """Run one soak on ``cluster`` (a running three-node :class:`LocalKafka`; killed and
    paused nodes are restarted and resumed before this returns) and return its report.
    ``proxy``: a started ``ProxyCluster``-like object the producer connects through
    (see the module docstring), or None."""
    return await _Run(cluster, cfg, proxy, log).run()


# -- command line -----------------------------------------------------------------------

def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m soak.chaos", description=(
        "Chaos soak of the idempotent producer on a local three-node Kafka cluster: "
        "exactly once, in order, under broker kills, pauses, connection resets, lost "
        "acks and poison records."))
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=None,
                    help="schedule seed (default: a random one, printed)")
    ap.add_argument("--rate", type=float, default=5_000.0, help="main-topic records/s")
    ap.add_argument("--pause-seconds", type=float, default=10.0)
    ap.add_argument("--max-ack-gap", type=float, default=15.0)
    ap.add_argument("--no-faults", action="store_true",
                    help="no kills, pauses or proxy faults (checks the harness)")
    ap.add_argument("--no-poison", action="store_true", help="no poison records")
    ap.add_argument("--allow-init-per-poison", action="store_true",
                    help="accept one InitProducerId per refused poison batch (older "
                         "versions sent one; by default one request in all)")
    ap.add_argument("--no-proxy", action="store_true",
                    help="connect directly (no reset/drop_acks faults, no InitProducerId "
                         "count)")
    ap.add_argument("--cluster-dir", default=None,
                    help="state directory of the three-node cluster (default: a "
                         "temporary one, stopped at the end)")
    ap.add_argument("--uvloop", action="store_true")
    ap.add_argument("--compression", choices=("none", "gzip", "snappy", "lz4", "zstd"),
                    default=None, help="the producer's compression_type")
    ap.add_argument("--batch-size", type=int, default=None,
                    help="the producer's batch_size (small ones fill at a low rate)")
    ap.add_argument("--buffer-memory", type=int, default=None,
                    help="the producer's buffer_memory (and max_request_size, at most "
                         "this): small ones make sends wait for memory, in faults most")
    ap.add_argument("--eager-compression-thread", action="store_true",
                    help="every full batch (64 bytes or more) to the compression thread")
    ap.add_argument("--verbose", action="store_true",
                    help="show the producer's warnings (retries, refused batches)")
    return ap.parse_args(argv)


def _proxy_class() -> Any | None:
    try:
        from aioproducer.testing.faultproxy import ProxyCluster
    except ImportError as exc:
        print(f"chaos: no fault proxy ({exc}): this aioproducer has no "
              "aioproducer.testing.faultproxy", file=sys.stderr)
        return None
    return ProxyCluster


async def _amain(cluster: LocalKafka, cfg: ChaosConfig, use_proxy: bool) -> ChaosReport:
    cls = _proxy_class() if use_proxy else None
    if cls is None:
        return await run_chaos(cluster, cfg)
    proxy = await cls.start(cluster.bootstrap)
    try:
        return await run_chaos(cluster, cfg, proxy=proxy)
    finally:
        await proxy.close()


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    if not args.verbose:  # every refused poison record is a warning: once a second
        logging.getLogger("aioproducer").setLevel(logging.ERROR)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    cfg = ChaosConfig(records=args.records, seed=seed, rate=args.rate,
                      faults=not args.no_faults, poison=not args.no_poison,
                      pause_seconds=args.pause_seconds, max_ack_gap=args.max_ack_gap,
                      poison_may_bump=args.allow_init_per_poison,
                      eager_compression_thread=args.eager_compression_thread)
    if args.compression:
        cfg.producer_options["compression_type"] = args.compression
    if args.batch_size:
        cfg.producer_options["batch_size"] = args.batch_size
    if args.buffer_memory:
        # The too-large poison record (poison_big_bytes) must still reach the broker.
        if args.buffer_memory < 2 * cfg.poison_big_bytes:
            raise SystemExit(f"--buffer-memory must be at least {2 * cfg.poison_big_bytes}")
        cfg.producer_options["buffer_memory"] = args.buffer_memory
        cfg.producer_options["max_request_size"] = min(1 << 20, args.buffer_memory)
    tmp = None
    if args.cluster_dir:
        state_dir = Path(args.cluster_dir)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="aioproducer-chaos-")
        state_dir = Path(tmp.name)
    cluster = LocalKafka(state_dir, nodes=3)
    print(f"chaos: starting a three-node cluster in {state_dir}", flush=True)
    cluster.ensure_running(timeout=300)
    try:
        if args.uvloop:
            import uvloop
            report = uvloop.run(_amain(cluster, cfg, not args.no_proxy))
        else:
            report = asyncio.run(_amain(cluster, cfg, not args.no_proxy))
    finally:
        if tmp is not None:
            cluster.stop(timeout=30)
            tmp.cleanup()
        else:
            cluster.resume_all()
    print(report.line(), flush=True)
    return 1 if report.violations() else 0


if __name__ == "__main__":
    sys.exit(main())
