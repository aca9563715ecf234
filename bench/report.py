"""Markdown tables from the harness's run records (one table per scenario), the
repetitions that stray from their median, and the targets of issue #19.

``python -m bench.report [bench/results/latest.json]`` renders the Markdown again from
the raw records of a run (stdout), e.g. to paste into ``bench/README.md``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import CONCURRENT, PACED, REFERENCE, SCENARIOS, SEND_AND_WAIT, Scenario

OK, FAILED, SKIPPED, NA = "ok", "FAILED", "skipped", "n/a"
EN_DASH, TIMES = "\u2013", "\u00d7"
WARN = "\u26a0"
SPREAD = 0.25
"""A repetition whose value differs from the median of its cell by more than this
fraction is flagged (:data:`WARN` in the cell, listed under the table)."""
LATENCY_MODES = (SEND_AND_WAIT, PACED, CONCURRENT)

Row = dict[str, Any]
Getter = Callable[[Row], "float | None"]


def _per_million(key: str) -> Getter:
    def get(run: Row) -> float | None:
        r = run["result"]
        v = r.get(key)
        return None if v is None or not r.get("records") else v / r["records"] * 1e6
    return get


def _field(key: str, scale: float = 1.0) -> Getter:
    def get(run: Row) -> float | None:
        v = run["result"].get(key)
        return None if v is None else v * scale
    return get


RECORDS_PER_S = _field("records_per_s")
MB_PER_S = _field("mb_per_s")
CPU_LOOP = _per_million("cpu_loop_s")
CPU_PROCESS = _per_million("cpu_process_s")
RSS_MIB = _field("maxrss_kib", 1 / 1024)
P50 = _field("lat_p50_ms")
P99 = _field("lat_p99_ms")


def _values(runs: Sequence[Row], get: Getter) -> list[float]:
    return [v for v in (get(r) for r in runs) if v is not None]


def _median(runs: Sequence[Row], get: Getter) -> float | None:
    vals = _values(runs, get)
    return statistics.median(vals) if vals else None


def num(v: float) -> str:
    """A number as the tables print it: thousands grouped, 3 significant digits below."""
    if v >= 1000:
        return f"{v:,.0f}"
    if v >= 100:
        return f"{v:.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def _cell(runs: Sequence[Row], get: Getter, spread: bool = True,
          flagged: bool = False) -> str:
    vals = _values(runs, get)
    if not vals:
        return "—"
    med = num(statistics.median(vals))
    mark = f" {WARN}" if flagged else ""
    if not spread or len(vals) < 2:
        return med + mark
    return f"{med} ({num(min(vals))}{EN_DASH}{num(max(vals))}){mark}"


def _strays(runs: Sequence[Row], get: Getter) -> list[tuple[Row, float, float]]:
    """The runs whose value differs from the median over ``runs`` by more than
    :data:`SPREAD` of it: (run, value, median)."""
    vals = _values(runs, get)
    if len(vals) < 2:
        return []
    med = statistics.median(vals)
    if med == 0:
        return []
    out = []
    for r in runs:
        v = get(r)
        if v is not None and abs(v - med) > SPREAD * abs(med):
            out.append((r, v, med))
    return out


def _flagged_columns(scenario: Scenario) -> list[tuple[str, Getter]]:
    cols: list[tuple[str, Getter]] = [("records/s", RECORDS_PER_S),
                                      ("CPU s / M rec, send loop", CPU_LOOP)]
    if scenario.mode in LATENCY_MODES:
        cols += [("p50 ms", P50), ("p99 ms", P99)]
    return cols


def ratio(ours: float | None, peer: float | None) -> str:
    if ours is None or peer is None or peer == 0:
        return "—"
    return f"{ours / peer:.2f}{TIMES}"


def _cpu_for_ratio(runs: Sequence[Row]) -> tuple[float | None, bool]:
    """Send-loop CPU where the client reports it, else whole-process CPU (flagged)."""
    loop = _median(runs, CPU_LOOP)
    if loop is not None:
        return loop, False
    return _median(runs, CPU_PROCESS), True


HEADER = (f"| client | runs ok | records/s median (min{EN_DASH}max) | MB/s "
          "| CPU s / M rec, send loop | CPU s / M rec, process | peak RSS MiB | p50 ms "
          f"| p99 ms (min{EN_DASH}max) | {REFERENCE} ÷ client: records/s | CPU | p99 |")
RULE = "|" + "---|" * 12


def scenario_table(scenario: Scenario, runs: Sequence[Row], client_order: Sequence[str],
                   records: int, reps: int) -> str:
    lines = [f"### `{scenario.name}`", "",
             f"{scenario.description}. {records:,} records per run, {reps} repetition(s), "
             "clients alternated, a fresh topic per run.", ""]
    by_client: dict[str, list[Row]] = {c: [] for c in client_order}
    for run in runs:
        by_client.setdefault(run["client"], []).append(run)
    ref_ok = [r for r in by_client.get(REFERENCE, []) if r["status"] == OK]
    ref_rps = _median(ref_ok, RECORDS_PER_S)
    ref_p99 = _median(ref_ok, P99)
    ref_cpu_loop = _median(ref_ok, CPU_LOOP)
    ref_cpu_proc = _median(ref_ok, CPU_PROCESS)
    lines += [HEADER, RULE]
    footnote = False
    failures: list[str] = []
    strays: list[str] = []
    for client in client_order:
        crs = by_client.get(client, [])
        if not crs:
            continue
        ok = [r for r in crs if r["status"] == OK]
        failed = [r for r in crs if r["status"] == FAILED]
        for r in failed:
            failures.append(f"- {client}, repetition {r['rep']}: {r['reason']}")
        if not ok and not failed:
            status = crs[0]["status"]
            lines.append(f"| {client} | {status}: {crs[0]['reason']} |"
                         + " — |" * 10)
            continue
        counted = len(ok) + len(failed)
        runs_cell = f"{len(ok)}/{counted}" + (f", {len(failed)} FAILED" if failed else "")
        if not ok:
            lines.append(f"| {client} | {runs_cell} |" + " FAILED |" * 10)
            continue
        cpu, whole = _cpu_for_ratio(ok)
        ref_cpu = ref_cpu_proc if whole else ref_cpu_loop
        cpu_ratio = ratio(ref_cpu, cpu) + (" †" if whole and ref_ok else "")
        footnote = footnote or (whole and bool(ref_ok))
        flags: set[str] = set()
        for name, get in _flagged_columns(scenario):
            for r, v, med in _strays(ok, get):
                flags.add(name)
                strays.append(f"- {client}, repetition {r['rep']}: {name} {num(v)} "
                              f"against a median of {num(med)} "
                              f"({(v - med) / med * 100:+.0f} %)")
        lines.append(
            f"| {client} | {runs_cell} "
            f"| {_cell(ok, RECORDS_PER_S, flagged='records/s' in flags)} "
            f"| {_cell(ok, MB_PER_S, False)} "
            f"| {_cell(ok, CPU_LOOP, flagged='CPU s / M rec, send loop' in flags)} "
            f"| {_cell(ok, CPU_PROCESS)} | {_cell(ok, RSS_MIB, False)} "
            f"| {_cell(ok, P50, False, flagged='p50 ms' in flags)} "
            f"| {_cell(ok, P99, flagged='p99 ms' in flags)} "
            f"| {ratio(ref_rps, _median(ok, RECORDS_PER_S))} | {cpu_ratio} "
            f"| {ratio(ref_p99, _median(ok, P99))} |"
        )
    lines.append("")
    if footnote:
        lines += ["† ratio of whole-process CPU (this client reports no send-loop CPU; "
                  "the JVM's start-up and JIT are included).", ""]
    if strays:
        lines += [f"{WARN} repetitions more than {SPREAD:.0%} away from their median "
                  "(counted in the numbers above; a noisy machine or a warming broker):",
                  "", *strays, ""]
    if failures:
        lines += ["FAILED runs (not counted in any number above):", "", *failures, ""]
    return "\n".join(lines)


# -- the targets of issue #19 -------------------------------------------------------

PEER = "confluent-kafka"
BULK = "aioproducer-send_many"
BUFFER_MEMORY_MIB = 32.0
"""``buffer_memory``'s default (the Java producer's 32 MiB); every row keeps it."""
THROUGHPUT_SCENARIOS = ("nokey-100B-1p", "key16-100B-8p", "1KiB-1p", "idempotent-acks-all",
                        "lz4", "zstd")
HOLDS, FAILS, UNMEASURED = "holds", "**does not hold**", "not measured"


@dataclass
class Verdict:
    target: str
    scenario: str
    measured: str
    verdict: str


class _Medians:
    def __init__(self, runs: Sequence[Row]) -> None:
        self.ok: dict[tuple[str, str], list[Row]] = {}
        for r in runs:
            if r["status"] == OK:
                self.ok.setdefault((r["scenario"], r["client"]), []).append(r)

    def runs(self, scenario: str, client: str) -> list[Row]:
        return self.ok.get((scenario, client), [])

    def median(self, scenario: str, client: str, get: Getter) -> float | None:
        return _median(self.runs(scenario, client), get)


def _ratio_target(m: _Medians, target: str, scenario: str, ours: str, peer: str,
                  at_least: float) -> Verdict:
    a = m.median(scenario, ours, RECORDS_PER_S)
    b = m.median(scenario, peer, RECORDS_PER_S)
    if a is None or b is None or b == 0:
        return Verdict(target, scenario, "—", UNMEASURED)
    r = a / b
    return Verdict(target, scenario,
                   f"{num(a)} ÷ {num(b)} rec/s = {r:.2f}{TIMES} (target ≥ {at_least:g}{TIMES})",
                   HOLDS if r >= at_least else FAILS)


def _rate_and_ratio(m: _Medians, target: str, scenario: str, floor: float,
                    at_least: float) -> Verdict:
    a = m.median(scenario, BULK, RECORDS_PER_S)
    b = m.median(scenario, PEER, RECORDS_PER_S)
    if a is None or b is None or b == 0:
        return Verdict(target, scenario, "—", UNMEASURED)
    r = a / b
    ok = a >= floor and r >= at_least
    return Verdict(target, scenario,
                   f"{num(a)} rec/s (target ≥ {num(floor)}), {r:.2f}{TIMES} {PEER} "
                   f"(target ≥ {at_least:g}{TIMES})", HOLDS if ok else FAILS)


def evaluate_targets(runs: Sequence[Row]) -> list[Verdict]:
    """Each target row of issue #19, from the medians of this run's verified runs."""
    m = _Medians(runs)
    out = [
        _ratio_target(m, f"keyless, 1 partition, `await send()`: ≥ 1.5{TIMES} {PEER}",
                      "nokey-100B-1p", REFERENCE, PEER, 1.5),
        _ratio_target(m, f"keyless, 1 partition, `await send()`: ≥ 8{TIMES} aiokafka",
                      "nokey-100B-1p", REFERENCE, "aiokafka", 8.0),
        _ratio_target(m, f"keyed (16 B keys), 8 partitions: ≥ 1.3{TIMES} {PEER}",
                      "key16-100B-8p", REFERENCE, PEER, 1.3),
        _ratio_target(m, f"idempotent, acks=all: ≥ 1.3{TIMES} {PEER}",
                      "idempotent-acks-all", REFERENCE, PEER, 1.3),
        _ratio_target(m, f"lz4, `await send()`: ≥ 1.3{TIMES} {PEER}", "lz4", REFERENCE,
                      PEER, 1.3),
        _ratio_target(m, f"zstd, `await send()`: ≥ 1.3{TIMES} {PEER}", "zstd", REFERENCE,
                      PEER, 1.3),
        _rate_and_ratio(m, f"`send_many` keyless: ≥ 4 M rec/s and ≥ 3{TIMES} {PEER}",
                        "nokey-100B-1p", 4e6, 3.0),
        _rate_and_ratio(m, f"`send_many` keyed: ≥ 2 M rec/s and ≥ 3{TIMES} {PEER}",
                        "key16-100B-8p", 2e6, 3.0),
    ]
    # send_and_wait, linger 0 for every client: p50 and p99 <= the peer's.
    sc = "send-and-wait"
    cells, ok, missing = [], True, False
    for name, get in (("p50", P50), ("p99", P99)):
        a, b = m.median(sc, REFERENCE, get), m.median(sc, PEER, get)
        if a is None or b is None:
            missing = True
            continue
        cells.append(f"{name} {num(a)} against {num(b)} ms ({a / b:.2f}{TIMES})")
        ok = ok and a <= b
    out.append(Verdict(f"`send_and_wait`, linger 0 for every client: p50 and p99 ≤ {PEER}'s",
                       sc, ", ".join(cells) or "—",
                       UNMEASURED if missing else (HOLDS if ok else FAILS)))
    sc = "send-and-wait-defaults"
    a = m.median(sc, REFERENCE, P50)
    b = m.median(sc, PEER, P50)
    peer = f"; {PEER} {num(b)} ms" if b is not None else ""
    out.append(Verdict("`send_and_wait`, every client at its defaults: p50 ≤ 0.5 ms", sc,
                       "—" if a is None else f"p50 {num(a)} ms{peer}",
                       UNMEASURED if a is None else (HOLDS if a <= 0.5 else FAILS)))
    sc = "paced-10k"
    p99s = _values(m.runs(sc, REFERENCE), P99)
    out.append(Verdict("paced 10 k/s, linger 0: p99 ≤ 1.0 ms in every rep", sc,
                       "—" if not p99s else
                       "p99 per rep: " + ", ".join(f"{num(v)} ms" for v in p99s),
                       UNMEASURED if not p99s else
                       (HOLDS if max(p99s) <= 1.0 else FAILS)))
    cells, ok = [], True
    for sc in THROUGHPUT_SCENARIOS:
        a = m.median(sc, REFERENCE, CPU_PROCESS)
        b = m.median(sc, PEER, CPU_PROCESS)
        if a is None or b is None or b == 0:
            continue
        cells.append(f"{sc} {a / b:.2f}{TIMES}")
        ok = ok and a <= b
    out.append(Verdict(f"whole-process CPU per record ≤ {PEER}'s, every throughput "
                       "scenario", "all throughput", ", ".join(cells) or "—",
                       UNMEASURED if not cells else (HOLDS if ok else FAILS)))
    worst: tuple[float, str, str] | None = None
    for (sc, client), rs in m.ok.items():
        if not client.startswith(REFERENCE):
            continue
        for v in _values(rs, RSS_MIB):
            if worst is None or v > worst[0]:
                worst = (v, sc, client)
    limit = BUFFER_MEMORY_MIB + 40
    out.append(Verdict(f"RSS ≤ `buffer_memory` + 40 MiB ({limit:.0f} MiB) in every scenario",
                       "all", "—" if worst is None else
                       f"largest peak {num(worst[0])} MiB ({worst[2]}, {worst[1]})",
                       UNMEASURED if worst is None else
                       (HOLDS if worst[0] <= limit else FAILS)))
    return out


def targets_block(runs: Sequence[Row]) -> str:
    verdicts = evaluate_targets(runs)
    lines = ["### Targets (issue #19)", "",
             "Evaluated on this run's medians (verified runs only); a target whose "
             "scenario or client was not run is \"not measured\". Throughput targets use "
             "the `aioproducer` row (16 KiB batches), the `send_many` ones the "
             f"`{BULK}` row.", "",
             "| target | scenario | measured | verdict |", "|---|---|---|---|"]
    lines += [f"| {v.target} | `{v.scenario}` | {v.measured} | {v.verdict} |"
              for v in verdicts]
    held = sum(v.verdict == HOLDS for v in verdicts)
    measured = sum(v.verdict != UNMEASURED for v in verdicts)
    lines += ["", f"{held} of {measured} measured targets hold "
              f"({len(verdicts) - measured} not measured).", ""]
    return "\n".join(lines)


def render(meta: dict[str, Any], scenarios: Sequence[Scenario],
           records_by_scenario: dict[str, int], runs: Sequence[Row],
           skipped_scenarios: dict[str, str], client_order: Sequence[str]) -> str:
    out = ["## Benchmark results", ""]
    out += [f"- {k}: {v}" for k, v in meta.items()]
    out += ["",
            f"Ratios are {REFERENCE} ÷ client on medians: records/s above 1 means "
            f"{REFERENCE} is faster; CPU and p99 below 1 mean {REFERENCE} uses less CPU "
            "per record / has lower tail latency. Latency is send → acknowledgement "
            "(sampled records; Java: all records, whole milliseconds). "
            f"{WARN}: a repetition more than {SPREAD:.0%} away from the median of its "
            "cell (listed under the table).", ""]
    out.append(targets_block(runs))
    for sc in scenarios:
        if sc.name in skipped_scenarios:
            out += [f"### `{sc.name}`", "", f"{sc.description}.", "",
                    f"_skipped: {skipped_scenarios[sc.name]}_", ""]
            continue
        sc_runs = [r for r in runs if r["scenario"] == sc.name]
        reps = max((r["rep"] for r in sc_runs), default=0)
        out.append(scenario_table(sc, sc_runs, client_order,
                                  records_by_scenario[sc.name], reps))
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.report",
                                description="Render the Markdown report of a bench run "
                                            "again from its raw records.")
    p.add_argument("json", nargs="?", type=Path,
                   default=Path(__file__).resolve().parent / "results" / "latest.json")
    p.add_argument("--into", type=Path, default=None,
                   help="a Markdown file whose part between the lines "
                        f"{BEGIN!r} and {END!r} is replaced by the report (its headings one "
                        "level down), instead of printing it")
    args = p.parse_args(argv)
    raw = json.loads(args.json.read_text())
    runs = raw["runs"]
    names = raw.get("scenarios") or list(dict.fromkeys(r["scenario"] for r in runs))
    scenarios = [SCENARIOS[n] for n in names if n in SCENARIOS]
    clients = raw.get("clients") or list(dict.fromkeys(r["client"] for r in runs))
    text = render(raw["meta"], scenarios, raw["records_by_scenario"], runs,
                  raw.get("skipped_scenarios", {}), clients)
    if args.into is None:
        sys.stdout.write(text)
        return 0
    args.into.write_text(embed(args.into.read_text(), text))
    return 0


BEGIN = "<!-- bench-results:begin -->"
END = "<!-- bench-results:end -->"


def embed(document: str, report: str) -> str:
    """``document`` with its part between the BEGIN and END marker lines replaced by
    ``report``, every heading one level down (ValueError without both markers)."""
    head, sep, rest = document.partition(BEGIN + "\n")
    _old, sep2, tail = rest.partition(END)
    if not sep or not sep2:
        raise ValueError(f"the document needs a line {BEGIN!r} and, after it, {END!r}")
    lines = [("#" + line) if line.startswith("#") else line
             for line in report.rstrip("\n").split("\n")]
    return head + sep + "\n".join(lines) + "\n" + sep2 + tail


if __name__ == "__main__":
    raise SystemExit(main())
