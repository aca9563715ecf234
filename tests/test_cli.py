"""The `aioproducer` command: perf (the demo's main job) and broker dispatch."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from kafka_util import consume_all


def test_perf_produces_and_reports(kafka_bootstrap: str) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "aioproducer", "perf", "--num-records", "20000",
         "--record-size", "100", "--partitions", "2", "--bootstrap-server", kafka_bootstrap,
         "--no-progress"],
        capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"20000 records sent, [\d,.]+ records/sec \([\d.]+ MB/sec\), "
                     r"[\d.]+ ms avg latency, [\d.]+ ms max latency, \d+ ms 50th, "
                     r"\d+ ms 95th, \d+ ms 99th, \d+ ms 99.9th\.", r.stdout), r.stdout
    m = re.search(r"topic=(\S+) .* errors=0", r.stdout)
    assert m, r.stdout
    got = consume_all(kafka_bootstrap, m.group(1), 20000)
    assert len(got) == 20000 and all(len(x.value or b"") == 100 for x in got)


def test_broker_subcommand_passes_everything_through(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "aioproducer", "broker", "status", "--dir",
                        str(tmp_path / "none")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 3, r.stdout + r.stderr
    r = subprocess.run([sys.executable, "-m", "aioproducer", "broker", "--help"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "start" in r.stdout


def test_errors_are_one_line_without_traceback() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "aioproducer", "perf", "--num-records", "10", "--record-size",
         "10", "--bootstrap-server", "127.0.0.1:1", "--no-progress", "--topic", "t",
         "--producer-props", "max.block.ms=1000"],
        capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert r.stderr.startswith("aioproducer: error: KafkaConnectionError")
    assert "Traceback" not in r.stderr
