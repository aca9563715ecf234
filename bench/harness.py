"""What the bench's harnesses share (``python -m bench`` in :mod:`bench.run`, its
curves in :mod:`bench.curves`): the broker, the clients chosen, one runner process, the
verdict on a run, and the description of the machine and the commit."""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.common import CLIENTS, Client, RunArgs
from bench.report import FAILED, OK, SKIPPED

if TYPE_CHECKING:
    from bench.broker import Verification

ROOT = Path(__file__).resolve().parent.parent
CLIENT_FAMILY = {c.name: c.family for c in CLIENTS}
"""Row name -> client library (one version line per library)."""


def safe_name(client: str) -> str:
    """``client`` as a part of a topic name."""
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in client)


def select_clients(patterns: list[str]) -> list[Client]:
    if not patterns:
        return list(CLIENTS)
    chosen = [c for c in CLIENTS if any(fnmatch.fnmatchcase(c.name, pat) for pat in patterns)]
    if not chosen:
        raise SystemExit(f"no client matches {patterns}; clients: "
                         + ", ".join(c.name for c in CLIENTS))
    return chosen


@contextlib.contextmanager
def broker(bootstrap: str | None) -> Iterator[tuple[str, str]]:
    """An existing broker, or a single-node one started (and stopped) for this run."""
    if bootstrap:
        yield bootstrap, f"existing broker at {bootstrap}"
        return
    try:
        from aioproducer.devbroker import LocalKafka
    except Exception as e:
        raise SystemExit(
            f"bench: cannot start a local broker ({type(e).__name__}: {e}); "
            "pass --bootstrap host:port or set AIOPRODUCER_BOOTSTRAP") from None
    state = Path(tempfile.mkdtemp(prefix="aioproducer-bench-broker-"))
    kafka = LocalKafka(state, nodes=1)
    try:
        kafka.start()
        print(f"bench: started a local broker at {kafka.bootstrap}", file=sys.stderr)
        yield kafka.bootstrap, "local single-node broker (aioproducer.devbroker)"
    finally:
        kafka.stop()
        shutil.rmtree(state, ignore_errors=True)


def run_child(client: Client, run_args: RunArgs, timeout: float) -> tuple[dict[str, Any], str]:
    """Start one runner process; return its JSON result and the tail of its stderr."""
    cmd = [sys.executable, "-m", f"bench.client_{client.module}",
           "--json-args", run_args.to_json()]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                cwd=ROOT, env=env, start_new_session=True)
        try:
            proc.wait(timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            # The runner leads its own session: end it and whatever it started.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            timed_out = True
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    tail = stderr.strip()[-1500:]
    if timed_out:
        return {"ok": False, "error": f"killed after the run timeout of {timeout:.0f} s"}, tail
    result: dict[str, Any] | None = None
    for line in stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            with contextlib.suppress(json.JSONDecodeError):
                result = json.loads(line)
    if result is None:
        return {"ok": False, "error": f"exit code {proc.returncode}, no result line; "
                                      f"stderr: {tail[-400:]}"}, tail
    if proc.returncode != 0 and result.get("ok"):
        result["ok"] = False
        result["error"] = f"exit code {proc.returncode}"
    return result, tail


def git_commit() -> str:
    """``git rev-parse --short HEAD``, with "+ uncommitted changes" when the package
    or the bench differ from it; "?" outside a git checkout."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                              capture_output=True, text=True, timeout=10, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "aioproducer",
                                "bench", "setup.py"], cwd=ROOT, capture_output=True,
                               text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return "?"
    commit = head.stdout.strip()
    return commit + (" + uncommitted changes" if dirty.stdout.strip() else "")


def loadavg() -> str:
    try:
        return f"{os.getloadavg()[0]:.2f}"
    except OSError:
        return "?"


def host_description() -> str:
    model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"{model}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}"


def judge(record: dict[str, Any], result: dict[str, Any], stderr_tail: str,
          verify: Callable[[], Verification]) -> dict[str, Any]:
    """``record`` with a runner's ``result`` and its status: SKIPPED or FAILED as the
    runner says, else what ``verify()`` (the read-back) finds: OK, or FAILED with its
    problems. A FAILED run is in no number of any report."""
    record["result"] = result
    if "skipped" in result:
        record.update(status=SKIPPED, reason=result["skipped"])
        return record
    if not result.get("ok"):
        record.update(status=FAILED, reason=result.get("error") or "the run failed",
                      stderr_tail=stderr_tail)
        return record
    v = verify()
    record["verification"] = v.summary()
    if v.ok:
        record.update(status=OK, reason="")
    else:
        record.update(status=FAILED, reason="verification: " + v.describe())
    return record


def run_meta(started: datetime, commit: str, broker_desc: str, runs: Sequence[dict[str, Any]],
             load_before: str, reps: int, warmup: str, command: str,
             wall_s: float | None = None) -> dict[str, Any]:
    """The description a report prints above its tables: when, which commit, the
    machine, the broker, the client libraries' versions (from the runs), the load
    before and after, the repetitions and warm-up, how long (if given), the command."""
    versions: dict[str, str] = {}
    for r in runs:
        v = r.get("result", {}).get("version")
        if v:
            versions.setdefault(CLIENT_FAMILY.get(r["client"], r["client"]), v)
    meta: dict[str, Any] = {
        "date": started.strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit,
        "host": host_description(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "broker": broker_desc,
        "client versions": ", ".join(f"{k} {v}" for k, v in sorted(versions.items())) or "—",
        "load average (1 min) before / after": f"{load_before} / {loadavg()} "
                                                 f"on {os.cpu_count()} CPUs",
        "repetitions": reps,
        "warm-up": warmup,
    }
    if wall_s is not None:
        meta["wall time"] = f"{wall_s / 60:.1f} min"
    meta["command"] = command
    return meta
