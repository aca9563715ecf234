"""The bench report without a broker: repetitions that stray from their median are
flagged, and the targets of issue #19 are evaluated from the medians."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench_module(name: str) -> Any:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return importlib.import_module(name)


def _run(scenario: str, client: str, rep: int, **result: Any) -> dict[str, Any]:
    base = {"ok": True, "records": 1_000_000, "records_per_s": 1e6, "mb_per_s": 100.0,
            "cpu_loop_s": 1.0, "cpu_process_s": 1.5, "maxrss_kib": 60 * 1024,
            "lat_p50_ms": 1.0, "lat_p99_ms": 2.0, "lat_samples": 100}
    base.update(result)
    return {"scenario": scenario, "client": client, "rep": rep, "status": "ok",
            "reason": "", "result": base}


def test_a_stray_repetition_is_flagged() -> None:
    common = _bench_module("bench.common")
    report = _bench_module("bench.report")
    sc = common.SCENARIOS["nokey-100B-1p"]
    runs = [_run(sc.name, "aioproducer", 1, records_per_s=1.0e6),
            _run(sc.name, "aioproducer", 2, records_per_s=1.1e6),
            _run(sc.name, "aioproducer", 3, records_per_s=0.5e6),
            _run(sc.name, "confluent-kafka", 1), _run(sc.name, "confluent-kafka", 2),
            _run(sc.name, "confluent-kafka", 3, records_per_s=1.2e6)]
    md = report.scenario_table(sc, runs, ["aioproducer", "confluent-kafka"], 1_000_000, 3)
    rows = {line.split("|")[1].strip(): line for line in md.splitlines()
            if line.startswith("| aioproducer ") or line.startswith("| confluent-kafka ")}
    rps_cell = [c.strip() for c in rows["aioproducer"].strip("|").split("|")][2]
    assert rps_cell.endswith(report.WARN)
    assert report.WARN not in rows["confluent-kafka"]  # 1.2 M is 20 % off: not flagged
    assert "- aioproducer, repetition 3: records/s 500,000 against a median of " \
           "1,000,000 (-50 %)" in md
    assert "repetition 1:" not in md and "repetition 2:" not in md


def test_targets_from_medians() -> None:
    report = _bench_module("bench.report")
    runs = [
        _run("nokey-100B-1p", "aioproducer", 1, records_per_s=1.6e6),
        _run("nokey-100B-1p", "confluent-kafka", 1, records_per_s=1.0e6),
        _run("nokey-100B-1p", "aiokafka", 1, records_per_s=0.4e6),
        _run("send-and-wait-defaults", "aioproducer", 1, lat_p50_ms=0.2),
        _run("send-and-wait-defaults", "aioproducer", 2, lat_p50_ms=0.4),
        _run("send-and-wait-defaults", "aioproducer", 3, lat_p50_ms=9.0),
        _run("send-and-wait-defaults", "confluent-kafka", 1, lat_p50_ms=0.3),
        _run("paced-10k", "aioproducer", 1, lat_p99_ms=0.8),
        _run("paced-10k", "aioproducer", 2, lat_p99_ms=1.2),
        dict(_run("paced-10k", "aioproducer", 3, lat_p99_ms=0.1), status="FAILED"),
    ]
    by_target = {v.target: v for v in report.evaluate_targets(runs)}
    x = report.TIMES
    first = by_target[f"keyless, 1 partition, `await send()`: ≥ 1.5{x} confluent-kafka"]
    assert first.verdict == report.HOLDS and f"1.60{x}" in first.measured
    aiokafka = by_target[f"keyless, 1 partition, `await send()`: ≥ 8{x} aiokafka"]
    assert aiokafka.verdict == report.FAILS and f"4.00{x}" in aiokafka.measured
    defaults = by_target["`send_and_wait`, every client at its defaults: p50 ≤ 0.5 ms"]
    assert defaults.verdict == report.HOLDS  # median of 0.2, 0.4, 9.0
    assert "0.40 ms" in defaults.measured and "0.30 ms" in defaults.measured
    paced = by_target["paced 10 k/s, linger 0: p99 ≤ 1.0 ms in every rep"]
    assert paced.verdict == report.FAILS  # 1.2 ms in one rep; the FAILED run not counted
    assert "0.10" not in paced.measured
    assert by_target[f"zstd, `await send()`: ≥ 1.3{x} confluent-kafka"].verdict \
        == report.UNMEASURED
    rss = next(v for v in by_target.values() if v.target.startswith("RSS"))
    assert rss.verdict == report.HOLDS and "60.0 MiB" in rss.measured
    block = report.targets_block(runs)
    assert block.startswith("### Targets (issue #19)")
    assert "does not hold" in block and "not measured" in block


def test_warmup_is_small_and_rendering_again_from_json(tmp_path: Path) -> None:
    import json

    common = _bench_module("bench.common")
    run = _bench_module("bench.run")
    report = _bench_module("bench.report")
    assert run.warmup_records(common.SCENARIOS["nokey-100B-1p"], 1_000_000) == 50_000
    assert run.warmup_records(common.SCENARIOS["send-and-wait-defaults"], 2000) == 200
    assert run.warmup_records(common.SCENARIOS["concurrent-send-and-wait"], 1000) == 1000
    assert common.split_count(10, 3) == [4, 3, 3]
    assert common.split_count(2, 100) == [1, 1]
    runs = [_run("nokey-100B-1p", "aioproducer", 1)]
    meta = {"date": "2026-11-25 19:00 UTC", "commit": "abc1234"}
    raw = {"meta": meta, "records_by_scenario": {"nokey-100B-1p": 1_000_000},
           "skipped_scenarios": {}, "runs": runs, "warmups": [],
           "scenarios": ["nokey-100B-1p"], "clients": ["aioproducer"]}
    path = tmp_path / "latest.json"
    path.write_text(json.dumps(raw))
    md = report.render(meta, [common.SCENARIOS["nokey-100B-1p"]],
                       raw["records_by_scenario"], runs, {}, ["aioproducer"])
    assert "- commit: abc1234" in md and "### Targets (issue #19)" in md
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert report.main([str(path)]) == 0
    assert out.getvalue() == md


def test_embed_replaces_only_the_marked_part() -> None:
    from bench.report import BEGIN, END, embed

    doc = f"# Bench\n\nintro\n\n{BEGIN}\nold table\n{END}\n\n## After\n"
    out = embed(doc, "## Benchmark results\n\n### `nokey`\n\n| a |\n")
    assert out == (f"# Bench\n\nintro\n\n{BEGIN}\n### Benchmark results\n\n#### `nokey`\n\n"
                   f"| a |\n{END}\n\n## After\n")
    again = embed(out, "## Again\n")
    assert again == f"# Bench\n\nintro\n\n{BEGIN}\n### Again\n{END}\n\n## After\n"
    with pytest.raises(ValueError):
        embed("no markers", "x")
