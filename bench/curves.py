"""``python -m bench --curves``: how each client's cost grows along four axes.

Records per second and CPU per record against the partitions of one topic (1 to 4,000),
the number of topics (1 to 1,000), the record size (10 B to 1 MiB) and the number of
concurrent callers (1 to 1,000), for aioproducer, aiokafka and confluent-kafka (the
default rows; ``--client`` picks others). It is the harness of ``python -m bench``
swept along one parameter at a time: every run is a runner process
(``bench.client_<name>``) on fresh topics, the clients alternate within each point
(A B C, A B C), and every run is read back (:func:`bench.broker.verify_topics`: every
topic's record count, every partition used where keys should reach them all, a sample
of records from each end of every partition). A run that fails any of it is FAILED and
in no number.

What every run shares: acks=all and idempotence set in every client (aioproducer's
defaults; aiokafka and confluent-kafka are told), every other option at the library's
default except where an axis needs one (below).

- ``partitions``: one topic of 1 ... 4,000 partitions, 100-byte values with 16-byte
  keys drawn from 65,536 distinct ones (each client's default partitioner spreads them
  over every partition), ``await send()`` / ``produce()`` per record.
- ``topics``: 1 ... 1,000 topics of one partition, 100-byte values without keys,
  record ``i`` to topic ``i % topics``.
- ``size``: one partition, values of 10 B ... 1 MiB without keys, at most
  ``--curve-bytes`` (256 MiB) per run; every client's largest request set to 2 MiB
  (``max_request_size``, librdkafka's ``message.max.bytes``) and the topic's
  ``max.message.bytes`` to 4 MiB, at every point of the axis, since a 1 MiB record
  with its headers does not fit the 1 MiB defaults.
- ``callers``: one partition, 100-byte values, 1 ... 1,000 callers that each send one
  record at a time and wait for its acknowledgement: asyncio tasks awaiting
  ``send_and_wait()`` (aioproducer, aiokafka), threads calling ``produce()`` then
  ``flush()`` (confluent-kafka), as in the ``concurrent-send-and-wait`` scenario.

The output: ``curves.json`` (every run, and the medians per point) and ``curves.md``
in ``--out``, and one PNG per axis (``curves-<axis>.png``) in ``--plots``: records/s,
send-loop CPU per record, and both as ratios to confluent-kafka, medians with min-max
bars. ``python -m bench.curves --from curves.json`` draws and writes them again from the
JSON, without running anything.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bench.common import CONCURRENT, THROUGHPUT, Client, RunArgs, topic_counts, topic_names
from bench.harness import (
    broker,
    git_commit,
    judge,
    loadavg,
    run_child,
    run_meta,
    safe_name,
    select_clients,
)
from bench.report import EN_DASH, FAILED, OK, PEER, SKIPPED, num, ratio

CURVE_CLIENTS = ("aioproducer", "aiokafka", "confluent-kafka")
"""The rows drawn when ``--client`` is not given."""
DEFAULT_RECORDS = 200_000
DEFAULT_BYTES = 256 << 20
KEY_SIZE = 16
KEY_POOL = 1 << 16
"""Distinct keys on the partitions axis: 16 per partition at 4,000 partitions, so that
every partition gets some (the chance that one gets none is about e^-16 each)."""
MAX_REQUEST = 2 << 20
"""Every client's largest request on the size axis."""
TOPIC_MAX_MESSAGE = 4 << 20
"""The topics' ``max.message.bytes`` on the size axis."""
BEGIN = "<!-- bench-curves:begin -->"
END = "<!-- bench-curves:end -->"


@dataclass(frozen=True)
class Axis:
    name: str
    title: str
    xlabel: str
    points: tuple[int, ...]
    fixed: str
    """What every point of the axis shares, for the page."""


AXES: dict[str, Axis] = {a.name: a for a in [
    Axis("partitions", "Partitions of one topic", "partitions", (1, 10, 100, 1000, 4000),
         "one topic, 100-byte values, 16-byte keys (65,536 distinct, every partition "
         "used), `await send()` / `produce()` per record"),
    Axis("topics", "Topics", "topics (one partition each)", (1, 10, 100, 1000),
         "topics of one partition, 100-byte values, no key, records round robin over "
         "the topics"),
    Axis("size", "Record size", "value size", (10, 100, 1024, 10240, 102400, 1 << 20),
         "one partition, no key, at most 256 MiB per run, every client's largest "
         "request 2 MiB and the topic's `max.message.bytes` 4 MiB"),
    Axis("callers", "Concurrent callers", "concurrent callers", (1, 10, 100, 1000),
         "one partition, 100-byte values; each caller sends one record and waits for "
         "its acknowledgement before the next: asyncio tasks awaiting "
         "`send_and_wait()` (aioproducer, aiokafka), threads calling `produce()` + "
         "`flush()` (confluent-kafka)"),
]}


@dataclass
class Point:
    """One point of an axis: what its runs send."""

    axis: str
    x: int
    records: int
    topics: int = 1
    partitions: int = 1
    value_size: int = 100
    key_size: int = 0
    key_pool: int = 1024
    mode: str = THROUGHPUT
    concurrency: int = 1
    sync_api: bool = False
    max_request_size: int | None = None
    topic_config: dict[str, str] = field(default_factory=dict)
    every_partition: bool = False
    """The read-back requires a record in every partition (keys that reach them all)."""

    @property
    def total_partitions(self) -> int:
        return self.topics * self.partitions

    @property
    def record_bytes(self) -> int:
        return self.value_size + self.key_size


def callers_records(callers: int, base: int) -> int:
    """Records of a callers point: 2,000 * callers ** 0.75 (each caller sends fewer as
    they multiply, the runs last about as long), at most half of ``base``."""
    return max(1, min(base // 2, 2000 * math.ceil(callers ** 0.75)))


def make_point(axis: str, x: int, base: int, size_budget: int) -> Point:
    if axis == "partitions":
        pool = KEY_POOL
        return Point(axis, x, base, partitions=x, key_size=KEY_SIZE, key_pool=pool,
                     every_partition=min(base, pool) >= 16 * x)
    if axis == "topics":
        return Point(axis, x, base, topics=x)
    if axis == "size":
        return Point(axis, x, max(1, min(base, size_budget // x)), value_size=x,
                     max_request_size=MAX_REQUEST,
                     topic_config={"max.message.bytes": str(TOPIC_MAX_MESSAGE)})
    if axis == "callers":
        return Point(axis, x, callers_records(x, base), mode=CONCURRENT, concurrency=x,
                     sync_api=True)
    raise ValueError(f"unknown axis {axis!r}")


def size_label(n: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def x_label(axis: str, x: int) -> str:
    return size_label(x) if axis == "size" else f"{x:,}"


# -- running ---------------------------------------------------------------------------


def run_timeout(pt: Point, explicit: float | None) -> float:
    """A run still going then is killed (FAILED): generous for every client here."""
    if explicit:
        return explicit
    return (60.0 + pt.records / 1000.0 + pt.records * pt.record_bytes / 20e6
            + pt.total_partitions / 100.0)


def settle_seconds(pt: Point) -> float:
    """A pause between a topic's creation and the run: the broker keeps working for
    a moment after it leads many new partitions."""
    return min(3.0, 0.25 + pt.total_partitions / 2000.0)


def curve_run(admin: Any, bootstrap: str, pt: Point, client: Client, rep: int,
              records: int, args: argparse.Namespace) -> dict[str, Any]:
    """One runner process on fresh topics, then the read-back."""
    from bench.broker import verify_topics

    base = f"curve-{pt.axis}-{pt.x}-{safe_name(client.name)}-r{rep}-{uuid.uuid4().hex[:8]}"
    timeout = run_timeout(pt, args.run_timeout)
    run_args = RunArgs(
        bootstrap=bootstrap, topic=base, records=records, value_size=pt.value_size,
        key_size=pt.key_size, partitions=pt.partitions, acks="all", idempotence=True,
        mode=pt.mode, sync_api=pt.sync_api, concurrency=pt.concurrency,
        sample_every=1 if pt.mode == CONCURRENT else 16,
        timeout_s=max(10.0, timeout - 20.0), topics=pt.topics, key_pool=pt.key_pool,
        max_request_size=pt.max_request_size, warm_metadata=True, **client.options)
    names = topic_names(run_args)
    record: dict[str, Any] = {"axis": pt.axis, "x": pt.x, "client": client.name,
                              "rep": rep, "records": records, "topics": pt.topics,
                              "partitions": pt.partitions, "topic": base}
    t0 = time.monotonic()
    try:
        record["setup_s"] = round(admin.create_topics(names, pt.partitions,
                                                      pt.topic_config), 3)
    except Exception as e:
        record.update(status=FAILED, reason=f"topic creation: {type(e).__name__}: {e}",
                      result={})
        with contextlib.suppress(Exception):
            admin.delete_topics(names)
        return record
    try:
        time.sleep(settle_seconds(pt))
        result, stderr_tail = run_child(client, run_args, timeout)
        record["wall_s"] = round(time.monotonic() - t0, 3)
        expected = dict(zip(names, topic_counts(records, len(names)), strict=True))
        return judge(record, result, stderr_tail, lambda: verify_topics(
            bootstrap, expected, pt.partitions, pt.value_size, pt.key_size,
            every_partition=pt.every_partition and records == pt.records))
    except Exception as e:
        record.update(status=FAILED, reason=f"{type(e).__name__}: {e}")
        record.setdefault("result", {})
        return record
    finally:
        if not args.keep_topics:
            admin.delete_topics(names)


def warmup_count(pt: Point) -> int:
    return min(pt.records, 2000 if pt.mode == CONCURRENT else 20_000)


def _summary(record: dict[str, Any]) -> str:
    if record["status"] != OK:
        return f"{record['status']}: {record['reason']}"
    r = record["result"]
    cpu = r.get("cpu_loop_s")
    cpu_s = "—" if cpu is None else f"{cpu / r['records'] * 1e6:.2f} µs/rec"
    return (f"{r['records_per_s']:,.0f} rec/s, {cpu_s}, verified "
            f"({record['verification']['held']:,} records, "
            f"{record['verification']['partitions_used']:,} partitions used)")


def select_axes(names: Sequence[str], points: str | None) -> list[tuple[Axis, tuple[int, ...]]]:
    axes = [AXES[n] for n in dict.fromkeys(names)] if names else list(AXES.values())
    if points is None:
        return [(a, a.points) for a in axes]
    if len(axes) != 1:
        raise SystemExit("bench: --points needs exactly one --axis")
    try:
        xs = tuple(int(p) for p in points.split(",") if p.strip())
    except ValueError:
        raise SystemExit(f"bench: --points takes integers separated by commas: {points!r}") \
            from None
    if not xs or min(xs) <= 0:
        raise SystemExit("bench: --points must be positive")
    return [(axes[0], xs)]


def run_curves(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """``python -m bench --curves ...`` (``args`` from :func:`bench.run.parse_args`)."""
    try:
        import matplotlib  # noqa: F401  # the plots need it; fail before the long run
    except ImportError:
        raise SystemExit("bench: --curves draws with matplotlib, which is not installed "
                         "(it is in the test extra: `make build`)") from None
    axes = select_axes(args.axis, args.points)
    clients = select_clients(args.client or list(CURVE_CLIENTS))
    reps = args.reps or 2
    base, budget = int(args.curve_records), int(args.curve_bytes)
    deadline = time.monotonic() + args.max_minutes * 60.0
    runs: list[dict[str, Any]] = []
    warmups: list[dict[str, Any]] = []
    points: dict[str, list[Point]] = {}
    started = datetime.now(timezone.utc)
    t_start = time.monotonic()
    load_before = loadavg()
    commit = git_commit()
    out_of_time = False
    from bench.broker import Admin

    with broker(args.bootstrap) as (bootstrap, broker_desc):
        admin = Admin(bootstrap)
        for axis, xs in axes:
            pts = [make_point(axis.name, x, base, budget) for x in xs]
            points[axis.name] = pts
            skipped: set[str] = set()
            if not args.no_warmup and pts and not out_of_time:
                # One unmeasured run per client at the axis's first point: the first
                # run of a client (and of the broker on a new kind of load) is slowest.
                wn = warmup_count(pts[0])
                for c in clients:
                    label = f"[{axis.name} warm-up] {c.name}"
                    print(f"bench: {label} ({wn:,} records, not reported) ...",
                          file=sys.stderr, flush=True)
                    rec = curve_run(admin, bootstrap, pts[0], c, 0, wn, args)
                    warmups.append(rec)
                    print(f"bench: {label}: {_summary(rec)}", file=sys.stderr, flush=True)
                    if rec["status"] == SKIPPED:
                        skipped.add(c.name)
            for pt in pts:
                for rep in range(1, reps + 1):
                    for c in clients:
                        if c.name in skipped:
                            continue
                        label = (f"[{axis.name} {x_label(axis.name, pt.x)}, "
                                 f"{pt.records:,} records, {rep}/{reps}] {c.name}")
                        if time.monotonic() > deadline:
                            out_of_time = True
                            runs.append({"axis": axis.name, "x": pt.x, "client": c.name,
                                         "rep": rep, "records": pt.records,
                                         "status": SKIPPED, "result": {},
                                         "reason": f"not run: the --max-minutes "
                                                   f"{args.max_minutes:g} budget was spent"})
                            continue
                        print(f"bench: {label} ...", file=sys.stderr, flush=True)
                        rec = curve_run(admin, bootstrap, pt, c, rep, pt.records, args)
                        runs.append(rec)
                        print(f"bench: {label}: {_summary(rec)}", file=sys.stderr,
                              flush=True)
                        if rec["status"] == SKIPPED:
                            skipped.add(c.name)

    meta = run_meta(
        started, commit, broker_desc, runs, load_before, reps,
        "none" if args.no_warmup else ("one unmeasured run per client and axis, at the "
                                       "axis's first point"),
        "python -m bench " + " ".join(argv), wall_s=time.monotonic() - t_start)
    raw = {
        "meta": meta,
        "clients": [c.name for c in clients],
        "axes": {a.name: list(xs) for a, xs in axes},
        "points": {name: [vars(p) for p in pts] for name, pts in points.items()},
        "runs": runs,
        "warmups": warmups,
        "curve_records": base,
        "curve_bytes": budget,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "curves.json").write_text(json.dumps(raw, indent=1) + "\n")
    print(f"bench: wrote {args.out / 'curves.json'}", file=sys.stderr)
    write_outputs(raw, args.out, args.plots or args.out, args.into)
    failed = sum(1 for r in runs if r["status"] == FAILED)
    return 1 if failed or out_of_time else 0


# -- the numbers -----------------------------------------------------------------------


def cpu_us(run: dict[str, Any]) -> float | None:
    r = run.get("result") or {}
    cpu, n = r.get("cpu_loop_s"), r.get("records")
    return None if cpu is None or not n else cpu / n * 1e6


def rps(run: dict[str, Any]) -> float | None:
    v = (run.get("result") or {}).get("records_per_s")
    return None if v is None else float(v)


@dataclass
class Cell:
    """The verified runs of one client at one point."""

    runs: int
    ok: int
    rps: list[float]
    cpu: list[float]

    def med(self, what: str) -> float | None:
        vals = self.rps if what == "rps" else self.cpu
        return statistics.median(vals) if vals else None


def cells(raw: dict[str, Any]) -> dict[tuple[str, int, str], Cell]:
    out: dict[tuple[str, int, str], Cell] = {}
    for r in raw["runs"]:
        key = (r["axis"], r["x"], r["client"])
        cell = out.setdefault(key, Cell(0, 0, [], []))
        if r["status"] == SKIPPED:
            continue
        cell.runs += 1
        if r["status"] != OK:
            continue
        cell.ok += 1
        if (v := rps(r)) is not None:
            cell.rps.append(v)
        if (c := cpu_us(r)) is not None:
            cell.cpu.append(c)
    return out


# -- the plots -------------------------------------------------------------------------

COLORS = {"aioproducer": "#1f77b4", "aioproducer+uvloop": "#17becf",
          "aiokafka": "#ff7f0e", "aiokafka+uvloop": "#bcbd22",
          "confluent-kafka": "#2ca02c"}


def plot_axis(raw: dict[str, Any], axis: Axis, xs: Sequence[int], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # no display, whatever $MPLBACKEND says
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, NullLocator

    table = cells(raw)
    clients = raw["clients"]
    fig, (ax_rps, ax_cpu, ax_ratio) = plt.subplots(1, 3, figsize=(15, 4.6))
    fallback = iter(["#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#d62728"])
    peer_med = {x: (table[(axis.name, x, PEER)].med("rps"), table[(axis.name, x, PEER)].med("cpu"))
                for x in xs if (axis.name, x, PEER) in table}
    for client in clients:
        color = COLORS.get(client) or next(fallback, "#000000")
        for ax, what in ((ax_rps, "rps"), (ax_cpu, "cpu")):
            px, py, lo, hi = [], [], [], []
            for x in xs:
                cell = table.get((axis.name, x, client))
                if cell is None:
                    continue
                vals = cell.rps if what == "rps" else cell.cpu
                if not vals:
                    continue
                m = statistics.median(vals)
                px.append(x)
                py.append(m)
                lo.append(m - min(vals))
                hi.append(max(vals) - m)
            if px:
                ax.errorbar(px, py, yerr=[lo, hi], marker="o", ms=4, capsize=3,
                            color=color, label=client)
        if client == PEER:
            continue
        for what, style, label in (("rps", "-", "records/s"), ("cpu", "--", "CPU / record")):
            px, py = [], []
            for x in xs:
                cell = table.get((axis.name, x, client))
                peer = peer_med.get(x)
                mine = cell.med(what) if cell else None
                theirs = None if peer is None else peer[0 if what == "rps" else 1]
                if mine is None or not theirs:
                    continue
                px.append(x)
                py.append(mine / theirs)
            if px:
                ax_ratio.plot(px, py, style, marker="o", ms=4, color=color,
                              label=f"{client}: {label}")
    ax_rps.set_title(f"records/s (median, min{EN_DASH}max)")
    ax_cpu.set_title("send-loop CPU per record, µs")
    ax_ratio.set_title(f"÷ {PEER} (records/s: above 1 is faster;\nCPU: below 1 is cheaper)",
                       fontsize=10)
    ax_ratio.axhline(1.0, color="#2ca02c", lw=1, ls=":")
    for ax in (ax_rps, ax_cpu, ax_ratio):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(axis.xlabel)
        ax.xaxis.set_major_locator(FixedLocator(list(xs)))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticklabels([x_label(axis.name, x) for x in xs], fontsize=8)
        ax.grid(True, which="major", alpha=0.3)
        ax.grid(True, which="minor", alpha=0.1)
    ax_rps.legend(fontsize=8)
    if ax_ratio.lines:
        ax_ratio.legend(fontsize=7)
    meta = raw["meta"]
    fig.suptitle(f"{axis.title}: {meta['date']}, commit {meta['commit']}, acks=all + "
                 f"idempotence, {meta['repetitions']} repetitions", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


# -- the page --------------------------------------------------------------------------


def axis_table(raw: dict[str, Any], axis: Axis, xs: Sequence[int]) -> list[str]:
    table = cells(raw)
    clients = raw["clients"]
    others = [c for c in clients if c != PEER]
    pts = {p["x"]: p for p in raw["points"].get(axis.name, [])}
    head = (f"| {axis.xlabel} | records per run | "
            + " | ".join(f"{c}: records/s, CPU µs/rec" for c in clients))
    if PEER in clients:
        head += " | " + " | ".join(f"{c} ÷ {PEER}: records/s, CPU" for c in others)
    head += " |"
    cols = 2 + len(clients) + (len(others) if PEER in clients else 0)
    lines = [head, "|" + "---|" * 2 + "---:|" * (cols - 2)]
    for x in xs:
        row = [x_label(axis.name, x), f"{pts.get(x, {}).get('records', 0):,}"]
        for c in clients:
            cell = table.get((axis.name, x, c))
            if cell is None or (cell.runs == 0):
                row.append("not run")
                continue
            if cell.ok == 0:
                row.append(f"FAILED ({cell.runs - cell.ok} of {cell.runs})")
                continue
            r, u = cell.med("rps"), cell.med("cpu")
            text = f"{num(r) if r is not None else '—'}, {num(u) if u is not None else '—'}"
            if cell.ok < cell.runs:
                text += f" ({cell.runs - cell.ok} of {cell.runs} FAILED)"
            row.append(text)
        if PEER in clients:
            peer = table.get((axis.name, x, PEER))
            for c in others:
                cell = table.get((axis.name, x, c))
                if cell is None or peer is None:
                    row.append("—")
                    continue
                row.append(f"{ratio(cell.med('rps'), peer.med('rps'))}, "
                           f"{ratio(cell.med('cpu'), peer.med('cpu'))}")
        lines.append("| " + " | ".join(row) + " |")
    return lines


def failures(raw: dict[str, Any], axis: str) -> list[str]:
    return [f"- {r['client']}, {x_label(axis, r['x'])}, repetition {r['rep']}: {r['reason']}"
            for r in raw["runs"] if r["axis"] == axis and r["status"] == FAILED]


def render_markdown(raw: dict[str, Any], image_prefix: str) -> str:
    meta = raw["meta"]
    lines = [f"- {k}: {v if k != 'command' else f'`{v}`'}" for k, v in meta.items()]
    lines += [
        "",
        "Every client: acks=all and idempotence on (aioproducer's defaults; set in "
        "aiokafka and confluent-kafka), every other option at its library's default "
        "unless the axis says otherwise. Each run is its own process on fresh topics; "
        "the clients alternate within each point; a run counts only when every "
        "topic's record count read back from the broker matches what was sent (and, "
        "keyed, every partition holds records) and a sample from each end of every "
        f"partition has the right sizes. Points: medians with min{EN_DASH}max bars. "
        "CPU: the "
        "runner process's user + system CPU (every thread) from the first send to the "
        "last acknowledgement, per record. Ratios: the client ÷ "
        f"{PEER} on medians (records/s above 1: faster; CPU below 1: cheaper).",
        "",
    ]
    for name, xs in raw["axes"].items():
        axis = AXES[name]
        lines += [f"### {axis.title}", "", f"{axis.fixed[0].upper()}{axis.fixed[1:]}.", "",
                  f"![{axis.title}: records/s and CPU per record]"
                  f"({image_prefix}curves-{name}.png)", ""]
        lines += axis_table(raw, axis, xs)
        lines.append("")
        fails = failures(raw, name)
        if fails:
            lines += ["FAILED runs (in no number above):", "", *fails, ""]
    return "\n".join(lines).rstrip() + "\n"


def embed(document: str, block: str) -> str:
    """``document`` with its part between :data:`BEGIN` and :data:`END` replaced."""
    head, sep, rest = document.partition(BEGIN + "\n")
    _old, sep2, tail = rest.partition(END)
    if not sep or not sep2:
        raise ValueError(f"the document needs a line {BEGIN!r} and, after it, {END!r}")
    return head + sep + block.rstrip("\n") + "\n" + sep2 + tail


def write_outputs(raw: dict[str, Any], out: Path, plots: Path, into: Path | None) -> None:
    """The PNGs into ``plots``, ``curves.md`` into ``out``, and the same block into
    ``into`` between its markers when given."""
    plots.mkdir(parents=True, exist_ok=True)
    for name, xs in raw["axes"].items():
        path = plots / f"curves-{name}.png"
        plot_axis(raw, AXES[name], xs, path)
        print(f"bench: wrote {path}", file=sys.stderr)
    page_dir = into.parent if into is not None else out
    prefix = os.path.relpath(plots.resolve(), page_dir.resolve()).replace(os.sep, "/")
    prefix = "" if prefix == "." else prefix + "/"
    md = render_markdown(raw, prefix)
    out.mkdir(parents=True, exist_ok=True)
    (out / "curves.md").write_text(md)
    print(f"bench: wrote {out / 'curves.md'}", file=sys.stderr)
    if into is not None:
        into.write_text(embed(into.read_text(), md))
        print(f"bench: wrote the block between the markers of {into}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.curves",
                                description="Draw the curves and write their page again "
                                            "from a curves.json, without running anything "
                                            "(to run them: python -m bench --curves).")
    p.add_argument("--from", dest="source", type=Path, required=True, metavar="JSON")
    p.add_argument("--out", type=Path, default=None,
                   help="where curves.md goes (default: the JSON's directory)")
    p.add_argument("--plots", type=Path, default=None,
                   help="where the PNGs go (default: --out)")
    p.add_argument("--into", type=Path, default=None,
                   help=f"a Markdown file whose part between {BEGIN!r} and {END!r} is "
                        "replaced by the page")
    args = p.parse_args(argv)
    raw = json.loads(args.source.read_text())
    out = args.out or args.source.parent
    write_outputs(raw, out, args.plots or out, args.into)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
