"""The curves' page and plots (bench/curves.py) drawn from a made-up JSON: a FAILED
run is in no number, and the ratios divide the medians."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _bench(name: str) -> Any:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return importlib.import_module(name)


def test_curves_page_shows_failed_runs_as_failed(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    curves = _bench("bench.curves")
    times = _bench("bench.report").TIMES
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
