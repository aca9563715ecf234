"""What the harness and the client runners share: scenarios, clients, the run protocol.

Only the standard library is imported here, so that a runner's CPU and memory figures
are those of its own client library.

The protocol: the harness starts ``python -m bench.client_<module> --json-args JSON``
where JSON is a :class:`RunArgs`; the runner prints exactly one JSON line on stdout
(:func:`child_main` does that), with either ``"skipped": reason`` or the measured fields
listed in :data:`RESULT_FIELDS`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import random
import resource
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# -- scenarios -------------------------------------------------------------------

THROUGHPUT = "throughput"
SEND_AND_WAIT = "send-and-wait"
PACED = "paced"
CONCURRENT = "concurrent"
"""Many callers at once (``RunArgs.concurrency``: asyncio tasks, or threads for the
synchronous clients), each sending one record at a time and awaiting its ack."""

JAVA_NO_KEYS = "ProducerPerformance cannot send keys"
JAVA_NO_SYNC = "ProducerPerformance has no send-and-wait mode"


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    mode: str = THROUGHPUT
    value_size: int = 100
    key_size: int = 0
    """0: no key; otherwise keys of this size, cycled over :data:`KEY_POOL` distinct keys."""
    partitions: int = 1
    acks: str | None = "1"
    """``"1"`` or ``"all"``; None: each client's own default."""
    idempotence: bool = False
    """True: every client is told to enable idempotence (its own option for it)."""
    linger_ms: int | None = None
    """None: each client's own default; a number: every client is set to it."""
    compression: str | None = None
    sync_api: bool = False
    """Send-and-wait through the library's own one-call way to wait for one record:
    ``send_and_wait()`` (aioproducer, aiokafka), ``produce()`` + ``flush()``
    (confluent-kafka), ``send().get()`` (kafka-python)."""
    unsupported: dict[str, str] = field(default_factory=dict)
    """Client family -> why that client cannot run this scenario (shown as n/a)."""


SCENARIOS: dict[str, Scenario] = {s.name: s for s in [
    Scenario("nokey-100B-1p", "100-byte values, no key, 1 partition, acks=1"),
    Scenario("key16-100B-8p", "100-byte values, 16-byte keys, 8 partitions, acks=1",
             key_size=16, partitions=8, unsupported={"java": JAVA_NO_KEYS}),
    Scenario("1KiB-1p", "1 KiB values, no key, 1 partition, acks=1", value_size=1024),
    Scenario("idempotent-acks-all",
             "100-byte values, no key, 1 partition, acks=all, idempotence on",
             acks="all", idempotence=True),
    Scenario("send-and-wait",
             "one 100-byte record at a time, each ack awaited before the next send; "
             "1 partition, acks=1, linger 0 for every client",
             mode=SEND_AND_WAIT, linger_ms=0, unsupported={"java": JAVA_NO_SYNC}),
    Scenario("send-and-wait-defaults",
             "one 100-byte record at a time through the library's send-and-wait call "
             "(send_and_wait(), produce() + flush(), send().get()), 1 partition, every "
             "client at its own defaults (acks, idempotence, linger)",
             mode=SEND_AND_WAIT, acks=None, sync_api=True,
             unsupported={"java": JAVA_NO_SYNC}),
    Scenario("concurrent-send-and-wait",
             "100 concurrent callers (asyncio tasks; threads for confluent-kafka and "
             "kafka-python), each sending one 100-byte record at a time through the "
             "library's send-and-wait call, 1 partition, every client at its defaults",
             mode=CONCURRENT, acks=None, sync_api=True,
             unsupported={"java": JAVA_NO_SYNC}),
    Scenario("paced-10k",
             "100-byte records paced at a fixed rate (default 10,000/s for 5 s), "
             "1 partition, acks=1, linger 0 for every client",
             mode=PACED, linger_ms=0),
    Scenario("lz4", "100-byte text-like values, lz4 compression, 1 partition, acks=1",
             compression="lz4"),
    Scenario("zstd", "100-byte text-like values, zstd compression, 1 partition, acks=1",
             compression="zstd"),
]}

# -- clients ---------------------------------------------------------------------


@dataclass(frozen=True)
class Client:
    name: str
    """The row name in the report."""
    module: str
    """``bench.client_<module>`` runs it."""
    family: str
    """What :attr:`Scenario.unsupported` is keyed by."""
    options: dict[str, Any] = field(default_factory=dict)
    """Extra :class:`RunArgs` fields (event loop, API)."""


CLIENTS: list[Client] = [
    Client("aioproducer", "aioproducer", "aioproducer", {"loop": "asyncio"}),
    Client("aioproducer+uvloop", "aioproducer", "aioproducer", {"loop": "uvloop"}),
    Client("aioproducer-send_many", "aioproducer", "aioproducer",
           {"loop": "asyncio", "api": "send_many"}),
    # Same batch size as librdkafka's default (batch.size 1,000,000): the rows above
    # keep the Java producer's 16 KiB default, where one Produce round trip per 16 KiB
    # dominates the per-record cost.
    Client("aioproducer@1MB", "aioproducer", "aioproducer",
           {"loop": "asyncio", "batch_size": 1_000_000}),
    Client("aioproducer-send_many@1MB", "aioproducer", "aioproducer",
           {"loop": "asyncio", "api": "send_many", "batch_size": 1_000_000}),
    # Compression on the event loop, not on the compression thread (the compressed
    # scenarios only): what the thread gives, in the same run.
    Client("aioproducer-loopcomp", "aioproducer", "aioproducer",
           {"loop": "asyncio", "compression_thread": False}),
    Client("aioproducer-send_many-loopcomp", "aioproducer", "aioproducer",
           {"loop": "asyncio", "api": "send_many", "compression_thread": False}),
    Client("aiokafka", "aiokafka", "aiokafka", {"loop": "asyncio"}),
    Client("aiokafka+uvloop", "aiokafka", "aiokafka", {"loop": "uvloop"}),
    Client("confluent-kafka", "confluent", "confluent-kafka"),
    Client("kafka-python", "kafka_python", "kafka-python"),
    Client("java", "java", "java"),
]
CLIENTS_BY_NAME = {c.name: c for c in CLIENTS}
REFERENCE = "aioproducer"

# -- one run's arguments and result ------------------------------------------------

KEY_POOL = 1024
KEY_MASK = KEY_POOL - 1


@dataclass
class RunArgs:
    bootstrap: str
    topic: str
    records: int
    value_size: int = 100
    key_size: int = 0
    partitions: int = 1
    acks: str | None = "1"
    """None: the client's default."""
    idempotence: bool = False
    linger_ms: int | None = None
    compression: str | None = None
    mode: str = THROUGHPUT
    sync_api: bool = False
    """See :attr:`Scenario.sync_api`."""
    concurrency: int = 100
    """Callers in :data:`CONCURRENT` mode."""
    rate: float = 0.0
    """Records per second in :data:`PACED` mode."""
    sample_every: int = 16
    """Latency is measured on every n-th record (send -> ack)."""
    chunk: int = 10_000
    """Futures are awaited chunk by chunk, one chunk behind the sends."""
    timeout_s: float = 300.0
    loop: str = "asyncio"
    api: str = "send"
    batch_size: int | None = None
    """Overrides the client's default batch size (aioproducer rows only)."""
    compression_thread: bool = True
    """aioproducer rows: False compresses on the event loop (``-loopcomp`` rows)."""
    kafka_libs: str | None = None
    topics: int = 1
    """Record ``i`` goes to topic ``i % topics`` of :func:`topic_names` (round robin);
    1: every record goes to ``topic``."""
    key_pool: int = KEY_POOL
    """Distinct keys, cycled (a power of two): see :func:`make_keys`."""
    max_request_size: int | None = None
    """Overrides the client's largest request / message (``max_request_size``,
    ``message.max.bytes``): records of 1 MiB do not fit the defaults."""
    warm_metadata: bool = False
    """Fetch every topic's metadata before the clock starts (``partitions_for()``,
    ``list_topics()``), so that no run pays for it inside the measured window."""

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> RunArgs:
        return cls(**json.loads(text))


RESULT_FIELDS = (
    "ok", "client", "version", "records", "elapsed_s", "records_per_s", "mb_per_s",
    "cpu_loop_s", "cpu_process_s", "maxrss_kib", "lat_p50_ms", "lat_p99_ms",
    "lat_samples", "error",
)


class Skip(Exception):
    """Raised by a runner that cannot run here (library missing, feature missing)."""


@dataclass
class Measured:
    """What a runner's produce loop hands back to :func:`child_main`."""

    records: int
    """Records acknowledged by the client."""
    elapsed_s: float
    """From just before the first send to the last acknowledgement (flush returned)."""
    cpu_loop_s: float | None
    """Process CPU (user + system, all threads) over the same window."""
    latencies_s: list[float] = field(default_factory=list)
    version: str = ""
    errors: list[str] = field(default_factory=list)
    p50_ms: float | None = None
    """Set directly by runners that get percentiles from elsewhere (Java)."""
    p99_ms: float | None = None
    cpu_process_s: float | None = None
    """Set by runners that measure another process (Java); else this process's total."""
    maxrss_kib: int | None = None
    lat_samples: int | None = None
    """Set when the percentiles cover records not in ``latencies_s`` (Java: all of them)."""


def cpu_seconds() -> float:
    """User + system CPU of this process so far, all threads included."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def peak_rss_kib() -> int:
    """This process's peak resident set, in KiB.

    ``VmHWM`` belongs to the address space made by ``exec``; ``ru_maxrss`` would also
    carry the peak of the harness process this one was forked from.
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def percentile(sorted_values: list[float], q: float) -> float | None:
    """Nearest-rank percentile of already sorted values (None when empty)."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def make_value(size: int, compressible: bool = False) -> bytes:
    """One payload reused for every record (as ProducerPerformance does)."""
    rng = random.Random(20261122)
    if compressible:
        words = [b"kafka", b"event", b"user", b"id", b"=", b"42", b"ok", b"status", b" "]
        out = bytearray()
        while len(out) < size:
            out += rng.choice(words) + b" "
        return bytes(out[:size])
    return bytes(rng.randrange(65, 91) for _ in range(size))


def make_keys(size: int, pool: int = KEY_POOL) -> list[bytes] | None:
    """``pool`` distinct keys of ``size`` bytes (record ``i`` takes key
    ``i & (pool - 1)``), or None for keyless scenarios."""
    if size <= 0:
        return None
    if pool <= 0 or pool & (pool - 1):
        raise ValueError(f"the key pool must be a power of two, got {pool}")
    rng = random.Random(16)
    return [rng.randbytes(size) for _ in range(pool)]


def topic_names(args: RunArgs) -> list[str]:
    """The run's topics: ``args.topic`` alone, or ``args.topic`` + ``.0000`` ... when
    ``args.topics`` > 1 (the harness creates them, the runners send round robin)."""
    if args.topics <= 1:
        return [args.topic]
    return [f"{args.topic}.{j:04d}" for j in range(args.topics)]


def topic_counts(records: int, topics: int) -> list[int]:
    """Records each topic of :func:`topic_names` gets from a round-robin run."""
    base, extra = divmod(records, max(1, topics))
    return [base + (1 if j < extra else 0) for j in range(max(1, topics))]


def unsupported_sweep(args: RunArgs, what: str) -> None:
    """Raise :class:`Skip` for a runner that sends to one topic with the default key
    pool only (``what``: the runner)."""
    if args.topics != 1 or args.key_pool != KEY_POOL or args.max_request_size is not None:
        raise Skip(f"{what} runs one topic, {KEY_POOL} keys and its default request size "
                   "only (not the curves' sweeps)")


def payload_bytes(args: RunArgs) -> int:
    return args.value_size + (args.key_size if args.key_size > 0 else 0)


def emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


TEST_ONLY_PACKAGES = ("hypothesis",)
"""Packages of this repository's test environment that no client needs. Runners hide
them (importing one fails, as where they are not installed): kio imports hypothesis
whenever it is importable, only to register test strategies for its types, which
costs ~0.12 s of CPU at ``import aioproducer`` that a user's installation (where
hypothesis is not a dependency of anything the clients use) does not pay. Set
``BENCH_KEEP_TEST_PACKAGES=1`` to measure with them."""


def hide_test_only_packages() -> None:
    """See :data:`TEST_ONLY_PACKAGES` (before any client library is imported)."""
    if os.environ.get("BENCH_KEEP_TEST_PACKAGES") == "1":
        return
    for name in TEST_ONLY_PACKAGES:
        if name not in sys.modules:
            sys.modules[name] = None  # type: ignore[assignment]  # "import name" fails


def child_main(client: str, run: Callable[[RunArgs], Measured],
               argv: list[str] | None = None) -> int:
    """Parse ``--json-args``, call ``run`` and print the one result line."""
    parser = argparse.ArgumentParser(prog=f"python -m bench.client_{client}")
    parser.add_argument("--json-args", required=True, help="a RunArgs object as JSON")
    ns = parser.parse_args(argv)
    args = RunArgs.from_json(ns.json_args)
    hide_test_only_packages()
    try:
        m = run(args)
    except Skip as e:
        emit({"client": client, "skipped": str(e)})
        return 0
    except BaseException as e:  # the run failed: report it, never a number
        emit({"client": client, "ok": False, "error": f"{type(e).__name__}: {e}"})
        return 1
    ru = resource.getrusage(resource.RUSAGE_SELF)
    lat = sorted(m.latencies_s)
    p50 = m.p50_ms if m.p50_ms is not None else _ms(percentile(lat, 0.50))
    p99 = m.p99_ms if m.p99_ms is not None else _ms(percentile(lat, 0.99))
    elapsed = max(m.elapsed_s, 1e-9)
    ok = not m.errors and m.records == args.records
    error = None
    if m.errors:
        error = f"{len(m.errors)} delivery error(s), first: {m.errors[0]}"
    elif m.records != args.records:
        error = f"{m.records} of {args.records} records acknowledged"
    emit({
        "ok": ok,
        "client": client,
        "version": m.version,
        "records": m.records,
        "elapsed_s": m.elapsed_s,
        "records_per_s": m.records / elapsed,
        "mb_per_s": m.records * payload_bytes(args) / elapsed / 1e6,
        "cpu_loop_s": m.cpu_loop_s,
        "cpu_process_s": (m.cpu_process_s if m.cpu_process_s is not None
                          else ru.ru_utime + ru.ru_stime),
        "maxrss_kib": m.maxrss_kib if m.maxrss_kib is not None else peak_rss_kib(),
        "lat_p50_ms": p50,
        "lat_p99_ms": p99,
        "lat_samples": m.lat_samples if m.lat_samples is not None else len(lat),
        "error": error,
    })
    return 0 if ok else 1


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0


def latency_stamp(samples: list[float], t_sent: float) -> Callable[..., None]:
    """A done-callback that records ``now - t_sent`` (any arguments are ignored)."""
    perf = time.perf_counter

    def stamp(*_a: Any) -> None:
        samples.append(perf() - t_sent)

    return stamp


def split_count(n: int, parts: int) -> list[int]:
    """``n`` records shared by ``parts`` callers as evenly as possible (CONCURRENT)."""
    parts = max(1, min(parts, n))
    base, extra = divmod(n, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]
