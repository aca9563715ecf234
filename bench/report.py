"""Markdown tables from the harness's run records (one table per scenario)."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

from bench.common import REFERENCE, Scenario

OK, FAILED, SKIPPED, NA = "ok", "FAILED", "skipped", "n/a"
EN_DASH, TIMES = "\u2013", "\u00d7"

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


def _num(v: float) -> str:
    if v >= 1000:
        return f"{v:,.0f}"
    if v >= 100:
        return f"{v:.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def _cell(runs: Sequence[Row], get: Getter, spread: bool = True) -> str:
    vals = _values(runs, get)
    if not vals:
        return "—"
    med = _num(statistics.median(vals))
    if not spread or len(vals) < 2:
        return med
    return f"{med} ({_num(min(vals))}{EN_DASH}{_num(max(vals))})"


def _ratio(ours: float | None, peer: float | None) -> str:
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
        cpu_ratio = _ratio(ref_cpu, cpu) + (" †" if whole and ref_ok else "")
        footnote = footnote or (whole and bool(ref_ok))
        lines.append(
            f"| {client} | {runs_cell} | {_cell(ok, RECORDS_PER_S)} "
            f"| {_cell(ok, MB_PER_S, False)} | {_cell(ok, CPU_LOOP)} "
            f"| {_cell(ok, CPU_PROCESS)} | {_cell(ok, RSS_MIB, False)} "
            f"| {_cell(ok, P50, False)} | {_cell(ok, P99)} "
            f"| {_ratio(ref_rps, _median(ok, RECORDS_PER_S))} | {cpu_ratio} "
            f"| {_ratio(ref_p99, _median(ok, P99))} |"
        )
    lines.append("")
    if footnote:
        lines += ["† ratio of whole-process CPU (this client reports no send-loop CPU; "
                  "the JVM's start-up and JIT are included).", ""]
    if failures:
        lines += ["FAILED runs (not counted in any number above):", "", *failures, ""]
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
            "(sampled records; Java: all records, whole milliseconds).", ""]
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
