"""Processes and ports: whether a pid runs (guarded by its command line against a
reused pid), paused or not, starting a detached process, stopping processes (SIGTERM, then
SIGKILL), free ports, and the watchdog that stops a cluster whose owner has gone."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from .common import _HOST


def _proc_stat(pid: int) -> list[str] | None:
    """Fields 3.. of /proc/<pid>/stat (state first), or None when there is no such process."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rfind(")") + 2:].split()


def _proc_start_time(pid: int) -> str | None:
    stat = _proc_stat(pid)
    return stat[19] if stat and len(stat) > 19 else None


def _pid_alive(pid: int | None, marker: str | None = None) -> bool:
    """Whether ``pid`` runs (and is not a zombie); with ``marker``, also that its command
    line contains it (guards against a reused pid)."""
    if not pid or pid <= 0:
        return False
    try:
        reaped, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass  # not our child: look it up
    else:
        return reaped == 0
    if Path("/proc/self/stat").exists():
        stat = _proc_stat(pid)
        if stat is None or stat[0] in ("Z", "X", "x"):
            return False
        if marker is None:
            return True
        try:
            return marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _signal(pid: int | None, sig: int) -> None:
    if pid:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _pid_paused(pid: int | None) -> bool:
    """Whether ``pid`` is stopped by a signal (SIGSTOP): ``T`` in /proc/<pid>/stat."""
    if not pid:
        return False
    stat = _proc_stat(pid)
    return stat is not None and stat[0] == "T"


def _wait_paused(pid: int, paused: bool, timeout: float) -> bool:
    """Until ``pid`` is (``paused``) or is not stopped; False on timeout. Without /proc
    there is nothing to look at: True at once."""
    if not Path("/proc/self/stat").exists():
        return True
    deadline = time.monotonic() + timeout
    while _pid_paused(pid) != paused:
        if time.monotonic() > deadline or not _pid_alive(pid):
            return False
        time.sleep(0.01)
    return True


def _spawn(argv: Sequence[str], output: Path, env: Mapping[str, str] | None = None) -> int:
    """Start ``argv`` detached (own session, stdin from /dev/null, stdout and stderr
    appended to ``output``) and return its pid."""
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, str(output), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644),
        (os.POSIX_SPAWN_DUP2, 1, 2),
    ]
    defaults = [signal.SIGPIPE, signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT]
    if hasattr(signal, "SIGXFSZ"):
        defaults.append(signal.SIGXFSZ)
    return os.posix_spawn(argv[0], list(argv), dict(os.environ if env is None else env),
                          file_actions=actions, setsid=True, setsigdef=defaults,
                          setsigmask=())


def _wait_gone(pids: Mapping[int, str | None], timeout: float) -> list[int]:
    """Wait until none of ``pids`` (pid -> cmdline marker) runs; returns the ones left."""
    deadline = time.monotonic() + timeout
    left = [p for p, m in pids.items() if _pid_alive(p, m)]
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = [p for p in left if _pid_alive(p, pids[p])]
    return left


def _terminate(pids: Mapping[int, str | None], timeout: float) -> None:
    """SIGTERM, then SIGKILL whatever still runs after ``timeout`` seconds."""
    alive = {p: m for p, m in pids.items() if _pid_alive(p, m)}
    for pid in alive:
        _signal(pid, signal.SIGTERM)
        _signal(pid, signal.SIGCONT)  # a paused (SIGSTOP) process must run to exit
    left = _wait_gone(alive, timeout)
    for pid in left:
        _signal(pid, signal.SIGKILL)
    _wait_gone({p: alive[p] for p in left}, 10.0)


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((_HOST, port))
        except OSError:
            return False
    return True


def _free_ports(n: int) -> list[int]:
    """``n`` distinct free ports, below the ephemeral range when possible (so that a port
    of a stopped node is not taken as the source port of some connection before the node
    restarts)."""
    low = 32768
    with contextlib.suppress(OSError, ValueError):
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports: list[int] = []
    if low > 12000:
        rng = random.SystemRandom()
        for _ in range(400):
            port = rng.randrange(max(10000, low - 12000), low)
            if port not in ports and _port_free(port):
                ports.append(port)
                if len(ports) == n:
                    return ports
    socks: list[socket.socket] = []
    try:  # fall back to the kernel's choice
        while len(ports) < n:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(s)
            s.bind((_HOST, 0))
            port = s.getsockname()[1]
            if port not in ports:
                ports.append(port)
    finally:
        for s in socks:
            s.close()
    return ports


# The watchdog: a tiny separate Python process that stops the cluster when the process
# that started it has gone (a test run that crashed or was killed) or when its time to
# live is over. It exits once the cluster is marked stopped.
_WATCHDOG = r"""
import json, os, signal, sys, time
from pathlib import Path

state_file, owner, owner_start = sys.argv[1], int(sys.argv[2]), sys.argv[3]
deadline = float(sys.argv[4])

def stat(pid):
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rfind(")") + 2:].split()

def alive(pid, marker=None, start=None):
    if not pid:
        return False
    if not Path("/proc/self/stat").exists():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        return True
    s = stat(pid)
    if s is None or s[0] in ("Z", "X", "x"):
        return False
    if start and len(s) > 19 and s[19] != start:
        return False
    if marker:
        try:
            return marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return False
    return True

def load():
    try:
        return json.loads(Path(state_file).read_text())
    except (OSError, ValueError):
        return None

while True:
    state = load()
    if state is None or state.get("state") != "running" or state.get("watchdog_pid") != os.getpid():
        sys.exit(0)
    expired = deadline > 0 and time.time() > deadline
    if expired or (owner > 0 and not alive(owner, None, owner_start or None)):
        why = "time to live over" if expired else f"owner process {owner} has gone"
        print(f"watchdog: {why}: stopping the cluster", flush=True)
        state["state"] = "stopped"
        tmp = Path(state_file + ".watchdog.tmp")
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(state_file)
        nodes = [(n.get("pid"), n.get("marker")) for n in state.get("nodes", [])]
        zk = state.get("zookeeper") or {}
        if zk.get("pid"):  # Kafka 2.x: its ZooKeeper server too
            nodes.append((zk.get("pid"), zk.get("marker")))
        for pid, marker in nodes:
            if alive(pid, marker):
                os.kill(pid, signal.SIGTERM)
                os.kill(pid, signal.SIGCONT)  # a paused (SIGSTOP) node must run to exit
        end = time.monotonic() + 30
        while time.monotonic() < end and any(alive(p, m) for p, m in nodes):
            time.sleep(0.2)
        for pid, marker in nodes:
            if alive(pid, marker):
                os.kill(pid, signal.SIGKILL)
        sys.exit(0)
    time.sleep(1.0)
"""
