"""Smoke test of ``python -m bench``: one tiny scenario, two clients, on the test broker.

Also checks, without a broker, that the report never turns a FAILED run into a number.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def _bench_module(name: str) -> Any:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return importlib.import_module(name)


def test_bench_two_clients_verified(kafka_bootstrap: str, tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "bench", "--bootstrap", kafka_bootstrap,
           "--scenario", "nokey-100B-1p", "--records", "2000", "--reps", "1",
           "--client", "confluent-kafka", "--client", "aioproducer",
           "--run-timeout", "40", "--out", str(tmp_path)]
    # Four runs: one unmeasured warm-up per client, then the measured repetition.
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=110,
                          stdin=subprocess.DEVNULL, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]

    raw = json.loads((tmp_path / "latest.json").read_text())
    runs = {r["client"]: r for r in raw["runs"]}
    assert set(runs) == {"aioproducer", "confluent-kafka"}
    assert sorted((w["client"], w["rep"]) for w in raw["warmups"]) == [
        ("aioproducer", 0), ("confluent-kafka", 0)]
    for client, run in runs.items():
        assert run["status"] == "ok", (client, run.get("reason"), run.get("stderr_tail"))
        assert run["verification"]["ok"], run["verification"]
        assert run["verification"]["held"] == 2000
        assert run["verification"]["sampled"] == 200  # 100 from each end of 1 partition
        assert run["result"]["records"] == 2000
        assert run["result"]["records_per_s"] > 0
        assert run["result"]["lat_samples"] > 0

    md = (tmp_path / "latest.md").read_text()
    assert proc.stdout == md
    assert "### `nokey-100B-1p`" in md
    rows = {line.split("|")[1].strip(): line for line in md.splitlines()
            if line.startswith("| aioproducer ") or line.startswith("| confluent-kafka ")}
    assert set(rows) == {"aioproducer", "confluent-kafka"}
    for line in rows.values():
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[1] == "1/1"
        assert cells[2][0].isdigit()  # records/s
    assert "FAILED" not in md


def test_report_shows_failed_runs_as_failed() -> None:
    common = _bench_module("bench.common")
    report = _bench_module("bench.report")
    sc = common.SCENARIOS["nokey-100B-1p"]
    good = {"ok": True, "records": 1000, "records_per_s": 5000.0, "mb_per_s": 0.5,
            "cpu_loop_s": 0.1, "cpu_process_s": 0.3, "maxrss_kib": 40_000,
            "lat_p50_ms": 1.0, "lat_p99_ms": 2.0, "lat_samples": 63}
    runs = [
        {"scenario": sc.name, "client": "aioproducer", "rep": 1, "status": "ok",
         "reason": "", "result": good},
        {"scenario": sc.name, "client": "confluent-kafka", "rep": 1, "status": "FAILED",
         "reason": "verification: broker holds 999 records, 1000 were sent",
         "result": dict(good, records_per_s=123456.0)},
        {"scenario": sc.name, "client": "java", "rep": 1, "status": "n/a",
         "reason": "no keys", "result": {}},
    ]
    md = report.scenario_table(sc, runs, ["aioproducer", "confluent-kafka", "java"], 1000, 1)
    lines = {line.split("|")[1].strip(): line for line in md.splitlines()
             if line.startswith("| ") and not line.startswith("| client")}
    assert "5,000" in lines["aioproducer"]
    assert "0/1, 1 FAILED" in lines["confluent-kafka"]
    assert "123" not in lines["confluent-kafka"]
    assert "n/a: no keys" in lines["java"]
    assert "broker holds 999 records" in md
    assert all(line.count("|") == md.splitlines()[4].count("|") for line in lines.values())


def test_percentile_nearest_rank() -> None:
    common = _bench_module("bench.common")
    values = [float(i) for i in range(1, 101)]
    assert common.percentile(values, 0.50) == 50.0
    assert common.percentile(values, 0.99) == 99.0
    assert common.percentile([], 0.5) is None
    assert common.percentile([3.0], 0.99) == 3.0
