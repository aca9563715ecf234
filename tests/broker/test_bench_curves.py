"""``python -m bench --curves``: a tiny sweep on the test broker, and the page and plots
drawn again from its JSON.

The full curves are a long bench run (docs/performance.md); this checks that the
harness runs every client at every point, reads every run back, never turns a FAILED
run into a number, and writes valid PNGs and the Markdown block.
"""

from __future__ import annotations

import importlib
import json
import subprocess
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


def test_curves_two_axes_two_clients_verified(kafka_bootstrap: str, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
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
