"""``python -m bench --curves``: a tiny sweep on the test broker, and the page and plots
drawn from a made-up JSON (no broker): a FAILED run is in no number, and the ratios
divide the medians.

The full curves are a long bench run (docs/performance.md); this checks that the
harness runs every client at every point, reads every run back, never turns a FAILED
run into a number, and writes valid PNGs and the Markdown block.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_curves_two_axes_two_clients_verified(kafka_bootstrap: str, tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# before\n\n<!-- bench-curves:begin -->\nold\n"
                    "<!-- bench-curves:end -->\n\nafter\n")
    raw: dict[str, Any] = {"axes": {}, "runs": []}
    for axis, points in (("topics", "1,5"), ("partitions", "1,16")):
        # --points takes one axis per call; the second call's page replaces the first's.
        cmd = [sys.executable, "-m", "bench", "--curves", "--bootstrap", kafka_bootstrap,
               "--axis", axis, "--points", points, "--curve-records", "3000",
               "--reps", "1", "--no-warmup", "--client", "aioproducer",
               "--client", "confluent-kafka", "--run-timeout", "60", "--max-minutes", "3",
               "--out", str(tmp_path), "--plots", str(tmp_path / "img"),
               "--into", str(page)]
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=200,
                              stdin=subprocess.DEVNULL, check=False)
        assert proc.returncode == 0, proc.stderr[-4000:]
        one = json.loads((tmp_path / "curves.json").read_text())
        raw["axes"].update(one["axes"])
        raw["runs"] += one["runs"]
    assert raw["axes"] == {"topics": [1, 5], "partitions": [1, 16]}
    got = {(r["axis"], r["x"], r["client"]) for r in raw["runs"]}
    want = {(a, x, c) for a, xs in raw["axes"].items() for x in xs
            for c in ("aioproducer", "confluent-kafka")}
    assert got == want
    for r in raw["runs"]:
        where = (r["axis"], r["x"], r["client"], r.get("reason"))
        assert r["status"] == "ok", where
        v = r["verification"]
        assert v["ok"] and v["held"] == v["expected"] == 3000, (where, v)
        assert r["result"]["records"] == 3000
        if r["axis"] == "topics":
            # One partition per topic, and round robin reaches every topic.
            assert v["partitions_used"] == r["x"], (where, v)
        else:
            # 3,000 keyed records (distinct keys, fixed seed) reach all 16 partitions.
            assert v["partitions_used"] == r["x"], (where, v)

    for axis in ("partitions", "topics"):
        png = tmp_path / "img" / f"curves-{axis}.png"
        assert png.read_bytes()[:8] == PNG_MAGIC
        assert png.stat().st_size > 10_000
    text = page.read_text()
    assert text.startswith("# before\n\n<!-- bench-curves:begin -->\n")
    assert text.endswith("<!-- bench-curves:end -->\n\nafter\n")
    assert "\nold\n" not in text
    assert "![Partitions of one topic: records/s and CPU per record](img/curves-partitions.png)" \
        in text
    assert "FAILED" not in text
    assert text.count("| 16 | 3,000 |") == 1


def test_curves_page_shows_failed_runs_as_failed(tmp_path: Path) -> None:
    from bench import curves
    from bench.report import TIMES as times

    good = {"ok": True, "records": 1000, "records_per_s": 5000.0, "cpu_loop_s": 0.002}
    runs = [
        {"axis": "callers", "x": 1, "client": "aioproducer", "rep": 1, "status": "ok",
         "reason": "", "result": good},
        {"axis": "callers", "x": 1, "client": "confluent-kafka", "rep": 1, "status": "ok",
         "reason": "", "result": dict(good, records_per_s=2500.0, cpu_loop_s=0.004)},
        {"axis": "callers", "x": 10, "client": "aioproducer", "rep": 1, "status": "FAILED",
         "reason": "verification: 999 of 1000 read back",
         "result": dict(good, records_per_s=999_999.0)},
        {"axis": "callers", "x": 10, "client": "confluent-kafka", "rep": 1, "status": "ok",
         "reason": "", "result": good},
    ]
    raw = {"meta": {"date": "2026-11-27 00:00 UTC", "commit": "abc1234", "repetitions": 1},
           "clients": ["aioproducer", "confluent-kafka"], "axes": {"callers": [1, 10]},
           "points": {"callers": [{"x": 1, "records": 1000}, {"x": 10, "records": 1000}]},
           "runs": runs}
    curves.write_outputs(raw, tmp_path, tmp_path, None)
    md = (tmp_path / "curves.md").read_text()
    rows = {line.split("|")[1].strip(): line for line in md.splitlines()
            if line.startswith("| 1 ") or line.startswith("| 10 ")}
    # Point 1: 5,000 against 2,500 records/s and 2 against 4 µs: 2.00x and 0.50x.
    assert "5,000, 2.00" in rows["1"] and f"2.00{times}, 0.50{times}" in rows["1"]
    # Point 10: the failed run is in no number, and the ratio has nothing to divide.
    assert "999,999" not in md
    assert "FAILED (1 of 1)" in rows["10"]
    assert "verification: 999 of 1000 read back" in md
    assert (tmp_path / "curves-callers.png").read_bytes()[:8] == PNG_MAGIC
    with pytest.raises(ValueError):
        curves.embed("no markers here\n", md)
