"""The long fuzz campaign: ``fuzz/targets.py`` in parallel memory-limited processes.

From the repository root::

    python -m fuzz.long                          # 1,000,000 executions, 2 jobs
    python -m fuzz.long --executions 5000000 --jobs 2 --seconds 3600
    python -m fuzz.long --memcheck 2000          # + native targets under valgrind

Each job is a child process with its own seed and ``RLIMIT_AS`` (2 GiB by default), so
a decoder that allocates out of proportion to its input dies there instead of
passing. The jobs stop at their share of ``--executions`` or at ``--seconds``; a job
that fails prints the target and seed to replay (``fuzz.targets.replay``).

``--memcheck N`` also runs N executions of the native targets (the batch builder and the
compiled Produce answer decoder) under valgrind's memcheck: a write past the end of a
pool block (which the target's own checks cannot see, since it lands outside the
block) is an "Invalid write", and a read past the end of a response body an "Invalid
read", whose stack is in ``aioproducer/_native``. Errors with no ``_native`` frame are
CPython's own valgrind noise and are not counted.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The targets run as ``python -m fuzz.targets`` from the repository root.
TARGETS = ["-m", "fuzz.targets"]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "RUST_BACKTRACE": "0"}


def _limit(memory: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))


def run_jobs(executions: int, jobs: int, seconds: float, memory: int,
             seed: int) -> tuple[Counter[str], float, list[str]]:
    share = -(-executions // jobs)
    procs = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        for j in range(jobs):
            stats = Path(tmp) / f"job{j}.json"
            cmd = [sys.executable, *TARGETS, "--executions", str(share),
                   "--seconds", str(seconds), "--seed", str(seed + j), "--stats", str(stats)]
            procs.append((j, stats, subprocess.Popen(
                cmd, env=_env(), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True, preexec_fn=lambda: _limit(memory))))
        totals: Counter[str] = Counter()
        failures = []
        for j, stats, proc in procs:
            try:
                _out, err = proc.communicate(timeout=seconds + 120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                failures.append(f"job {j} (seed {seed + j}) hung past {seconds + 120:.0f} s")
                continue
            if proc.returncode != 0:
                failures.append(f"job {j} (seed {seed + j}) exited {proc.returncode}:\n"
                                f"{err[-3000:]}")
                continue
            totals.update(json.loads(stats.read_text())["executions"])
    return totals, time.monotonic() - started, failures


def run_memcheck(executions: int, seed: int) -> tuple[int, int, str]:
    """(errors in aioproducer/_native, all memcheck errors, log excerpt)."""
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed")
    with tempfile.NamedTemporaryFile("r", suffix=".log") as log:
        subprocess.run(
            ["valgrind", "--tool=memcheck", "--leak-check=no", f"--log-file={log.name}",
             "--num-callers=30", sys.executable, *TARGETS, "--only", "builder",
             "--only", "produce_answer",
             "--executions", str(executions), "--seed", str(seed)],
            env={**_env(), "PYTHONMALLOC": "malloc"}, cwd=ROOT, check=True,
            stdout=subprocess.DEVNULL, timeout=3600)
        text = log.read()
    records = re.split(r"\n==\d+== \n", text)
    errors = [r for r in records if re.search(r"== (Invalid|Conditional|Use of|Source and)", r)]
    # A frame of ours: the .so's path (no debug info) or a Cython function name.
    ours = [r for r in errors if re.search(r"aioproducer/_native/|__pyx_\w*_native", r)]
    return len(ours), len(errors), "\n\n".join(ours[:3])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="the long fuzz campaign")
    ap.add_argument("--executions", type=int, default=1_000_000)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=1800.0, help="time bound per job")
    ap.add_argument("--memory", type=int, default=2 << 30, help="RLIMIT_AS per job, bytes")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--memcheck", type=int, default=0, metavar="N",
                    help="also run N executions of the native targets under valgrind memcheck")
    args = ap.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(2**31)
    totals, elapsed, failures = run_jobs(args.executions, args.jobs, args.seconds,
                                         args.memory, seed)
    total = sum(totals.values())
    print(f"fuzz campaign: {total:,} executions in {elapsed:.1f} s "
          f"({total / elapsed:,.0f}/s, {args.jobs} jobs, seeds {seed}..{seed + args.jobs - 1}, "
          f"RLIMIT_AS {args.memory >> 20} MiB)")
    for name, count in sorted(totals.items()):
        print(f"  {name:<12} {count:>10,}")
    status = 0
    for f in failures:
        print(f"FAILED: {f}")
        status = 1
    if args.memcheck:
        started = time.monotonic()
        ours, all_errors, excerpt = run_memcheck(args.memcheck, seed)
        print(f"memcheck: {args.memcheck:,} native-target executions in "
              f"{time.monotonic() - started:.0f} s: {ours} error(s) in aioproducer/_native "
              f"({all_errors} in CPython and other libraries, not ours)")
        if ours:
            print(excerpt)
            status = 1
    return status


if __name__ == "__main__":
    raise SystemExit(main())
