"""``LocalSpark``: a Spark standalone cluster on 127.0.0.1, from the installed pyspark.

A master and ``workers`` workers, each its own JVM started with pyspark's own
``bin/spark-class`` (``org.apache.spark.deploy.master.Master`` and
``org.apache.spark.deploy.worker.Worker``) and pyspark's jars, with free ports, its own
directory under ``state_dir`` (``master/``, ``worker-<i>/``: its output, its work
directory where the executors it launches keep their ``stdout``/``stderr``) and the
cluster's state in ``<state_dir>/spark.json``, so that another process can ask for its
status or stop it. A worker launches one executor JVM per application (with the
application's ``spark.executor.cores`` equal to the worker's cores), and each executor
starts its Python workers (``pyspark.daemon``) as children: the process tree is what
:meth:`LocalSpark.kill_executor` and :meth:`LocalSpark.kill_worker` SIGKILL, all at
once, to test what a lost executor or worker does to a job.

As for ``LocalKafka``, a watchdog process stops the cluster once the Python process
that started it has gone (``stop_with_owner``) or after ``ttl`` seconds.

As a command (``make spark-cluster`` starts it beside a three-node Kafka cluster)::

    python -m aioproducer.devbroker.spark_cluster start [--workers N] [--dir DIR]
    python -m aioproducer.devbroker.spark_cluster status | stop [--dir DIR]

Needs pyspark (the ``spark`` extra) and Java 17+; nothing is downloaded.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import json
import os
import signal
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from .common import _HOST, BrokerStartError, _tail, load_state, save_state
from .jars import _source_checkout, java_executable
from .process import (
    _WATCHDOG,
    _free_ports,
    _pid_alive,
    _proc_start_time,
    _proc_stat,
    _signal,
    _spawn,
    _terminate,
    _wait_gone,
)

_STATE_FILE = "spark.json"
_WATCHDOG_MARKER = "aioproducer-spark-watchdog"
_EXECUTOR_CLASS = b"org.apache.spark.executor.CoarseGrainedExecutorBackend"


class SparkClusterError(BrokerStartError):
    """The cluster (or a worker) did not start in time, or pyspark is missing."""


def spark_home() -> Path:
    """The installed pyspark package's directory (it holds ``bin/`` and ``jars/``)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise SparkClusterError("pyspark is not installed (pip install 'aioproducer[spark]')")
    home = Path(next(iter(spec.submodule_search_locations)))
    if not (home / "bin" / "spark-class").is_file() or not (home / "jars").is_dir():
        raise SparkClusterError(f"{home} has no bin/spark-class or jars/: not a full pyspark")
    return home


def default_spark_dir() -> Path:
    """``$AIOPRODUCER_SPARK_DIR``, else ``<checkout>/.broker/spark``, else
    ``~/.cache/aioproducer/spark``."""
    env = os.environ.get("AIOPRODUCER_SPARK_DIR")
    if env:
        return Path(env).expanduser().absolute()
    checkout = _source_checkout()
    if checkout:
        return checkout / ".broker" / "spark"
    return Path.home() / ".cache" / "aioproducer" / "spark"


@dataclasses.dataclass(frozen=True)
class ExecutorProcess:
    """An executor JVM that a worker launched, and the processes below it (its Python
    daemon and workers)."""

    pid: int
    worker: int
    """Index of the worker that launched it."""
    app_id: str
    executor_id: str
    python_pids: tuple[int, ...]


def _children() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _proc_stat(int(entry))
            if stat is not None and len(stat) > 1:
                out.setdefault(int(stat[1]), []).append(int(entry))
    return out


def _descendants(pid: int, children: Mapping[int, list[int]] | None = None) -> list[int]:
    kids = _children() if children is None else children
    out: list[int] = []
    stack = list(kids.get(pid, []))
    while stack:
        p = stack.pop()
        out.append(p)
        stack.extend(kids.get(p, []))
    return out


def _cmdline(pid: int) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return []


def _arg(argv: list[bytes], name: bytes) -> str:
    with contextlib.suppress(ValueError, IndexError):
        return argv[argv.index(name) + 1].decode()
    return ""


def kill_tree(pids: list[int]) -> None:
    """SIGSTOP every process of ``pids`` first (none of them can react to the others'
    deaths: a Python worker does not get to abort its transaction when its JVM's
    socket closes), then SIGKILL them all."""
    for pid in pids:
        _signal(pid, signal.SIGSTOP)
    for pid in pids:
        _signal(pid, signal.SIGKILL)
    _wait_gone({p: None for p in pids}, 10.0)


def executor_of(pid: int) -> int | None:
    """The executor JVM that ``pid`` (a Python worker, say) runs under, if any."""
    seen = 0
    while pid > 1 and seen < 64:
        if _EXECUTOR_CLASS in _cmdline(pid):
            return pid
        stat = _proc_stat(pid)
        if stat is None:
            return None
        pid = int(stat[1])
        seen += 1
    return None


class LocalSpark:
    """A Spark standalone cluster on 127.0.0.1: one master, ``workers`` workers of
    ``cores`` cores and ``memory`` for executors each; daemons with
    ``daemon_memory`` heaps. ``master_url`` is what ``SparkSession.builder.master()``
    takes; :meth:`session_config` the rest of a driver's settings."""

    def __init__(self, state_dir: str | os.PathLike[str], workers: int = 2, *,
                 cores: int = 1, memory: str = "1536m", daemon_memory: str = "256m",
                 stop_with_owner: bool = True, ttl: float | None = None) -> None:
        if workers < 1:
            raise ValueError("workers must be at least 1")
        self.state_dir = Path(state_dir).expanduser().absolute()
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.daemon_memory = daemon_memory
        self.stop_with_owner = stop_with_owner
        self.ttl = ttl

    # ---- state ------------------------------------------------------------------------

    @property
    def state_file(self) -> Path:
        return self.state_dir / _STATE_FILE

    def _load(self) -> dict[str, Any] | None:
        return load_state(self.state_file)

    def _save(self, state: dict[str, Any]) -> None:
        save_state(self.state_file, state)

    def _state(self) -> dict[str, Any]:
        state = self._load()
        if state is None or not state.get("nodes"):
            raise RuntimeError(f"no Spark cluster in {self.state_dir} (start it first)")
        return state

    @property
    def master_url(self) -> str:
        return f"spark://{_HOST}:{self._state()['nodes'][0]['port']}"

    @property
    def master_ui(self) -> str:
        return f"http://{_HOST}:{self._state()['nodes'][0]['ui_port']}"

    def node_dir(self, name: str) -> Path:
        return self.state_dir / name

    def worker_pid(self, i: int) -> int | None:
        node = self._state()["nodes"][1 + i]
        pid = node.get("pid")
        return int(pid) if pid and _pid_alive(pid, node["marker"]) else None

    def worker_alive(self, i: int) -> bool:
        return self.worker_pid(i) is not None

    # ---- processes ----------------------------------------------------------------------

    def _env(self, marker: str, role_opts: str) -> dict[str, str]:
        java = java_executable()
        env = dict(os.environ)
        env.update({
            "SPARK_HOME": str(spark_home()),
            "JAVA_HOME": str(Path(java).resolve().parent.parent),
            "SPARK_LOCAL_IP": _HOST,
            "SPARK_DAEMON_MEMORY": self.daemon_memory,
            # The marker keeps a pid check from matching another process that reused
            # the pid; the REST submission server is not needed.
            "SPARK_DAEMON_JAVA_OPTS": f"-Daioproducer.spark.node={marker}",
            "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
            "SPARK_WORKER_OPTS": role_opts,
            "PYSPARK_PYTHON": env.get("PYSPARK_PYTHON") or sys.executable,
        })
        env.pop("SPARK_CONF_DIR", None)
        return env

    def _spawn_node(self, state: dict[str, Any], index: int) -> None:
        node = state["nodes"][index]
        d = self.node_dir(node["name"])
        d.mkdir(parents=True, exist_ok=True)
        spark_class = str(spark_home() / "bin" / "spark-class")
        if node["name"] == "master":
            argv = [spark_class, "org.apache.spark.deploy.master.Master", "--host", _HOST,
                    "--port", str(node["port"]), "--webui-port", str(node["ui_port"])]
            opts = ""
        else:
            work = d / "work"
            work.mkdir(exist_ok=True)
            argv = [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", _HOST,
                    "--port", str(node["port"]), "--webui-port", str(node["ui_port"]),
                    "--cores", str(self.cores), "--memory", self.memory,
                    "--work-dir", str(work), self.master_url_of(state)]
            # Application directories of finished apps are left (their executor logs
            # are what one reads after a failed test); the state dir is per cluster.
            opts = "-Dspark.worker.cleanup.enabled=false"
        out = d / "output.log"
        node["log_start"] = out.stat().st_size if out.exists() else 0
        node["pid"] = _spawn(argv, out, self._env(node["marker"], opts))

    @staticmethod
    def master_url_of(state: dict[str, Any]) -> str:
        return f"spark://{_HOST}:{state['nodes'][0]['port']}"

    def _ensure_watchdog(self, state: dict[str, Any]) -> None:
        if not self.stop_with_owner and not self.ttl:
            return
        if _pid_alive(state.get("watchdog_pid"), _WATCHDOG_MARKER):
            return
        owner = os.getpid() if self.stop_with_owner else 0
        state.setdefault("owner_pid", owner)
        state.setdefault("owner_start", (_proc_start_time(owner) or "") if owner else "")
        state.setdefault("deadline", time.time() + self.ttl if self.ttl else 0.0)
        argv = [sys.executable, "-I", "-c", _WATCHDOG, str(self.state_file),
                str(state["owner_pid"]), state["owner_start"], str(state["deadline"]),
                _WATCHDOG_MARKER]
        state["watchdog_pid"] = _spawn(argv, self.state_dir / "watchdog.log")

    def master_json(self, timeout: float = 5.0) -> dict[str, Any]:
        """The master's status page as JSON (``/json``: workers, applications)."""
        with urllib.request.urlopen(f"{self.master_ui}/json", timeout=timeout) as r:
            data: dict[str, Any] = json.load(r)
        return data

    def alive_workers(self) -> int:
        """Workers the master lists as ALIVE."""
        try:
            data = self.master_json()
        except (OSError, ValueError):
            return 0
        return sum(1 for w in data.get("workers", []) if w.get("state") == "ALIVE")

    def _wait(self, want: int, deadline: float, what: str) -> None:
        state = self._state()
        while self.alive_workers() < want:
            for node in state["nodes"]:
                if node.get("pid") and not _pid_alive(node["pid"], node["marker"]):
                    raise SparkClusterError(f"Spark {node['name']} exited while starting",
                                            self.log_tail(node["name"]))
            if time.monotonic() > deadline:
                raise SparkClusterError(f"{what}: {self.alive_workers()} of {want} workers "
                                        "registered in time",
                                        "\n".join(self.log_tail(n["name"])
                                                  for n in state["nodes"]))
            time.sleep(0.2)

    def log_tail(self, name: str, lines: int = 40) -> str:
        path = self.node_dir(name) / "output.log"
        try:
            text = path.read_text(errors="replace")
        except OSError:
            return f"--- {name}: no log ---"
        return f"--- {path} ---\n{_tail(text, lines)}"

    def start(self, timeout: float = 180.0) -> str:
        """Start a fresh cluster and wait until the master lists every worker as ALIVE;
        returns the master URL. Keeps a running cluster of this directory as it is."""
        state = self._load()
        if (state and state.get("state") == "running"
                and len(state.get("nodes", [])) == 1 + self.workers
                and all(_pid_alive(n.get("pid"), n["marker"]) for n in state["nodes"])
                and self.alive_workers() == self.workers):
            return self.master_url
        self._kill_leftovers()
        spark_home()
        deadline = time.monotonic() + timeout
        ports = _free_ports(2 * (1 + self.workers))
        names = ["master", *(f"worker-{i}" for i in range(self.workers))]
        nodes: list[dict[str, Any]] = [
            {"name": name, "port": ports[2 * k], "ui_port": ports[2 * k + 1], "pid": None,
             "marker": str(self.node_dir(name))} for k, name in enumerate(names)]
        state = {"state": "running", "started": time.time(), "watchdog_pid": None,
                 "nodes": nodes}
        try:
            self._spawn_node(state, 0)
            self._ensure_watchdog(state)
            self._save(state)
            while True:  # the master's UI answers: it is up
                try:
                    self.master_json(2.0)
                    break
                except (OSError, ValueError):
                    if not _pid_alive(nodes[0]["pid"], nodes[0]["marker"]):
                        raise SparkClusterError("the Spark master exited while starting",
                                                self.log_tail("master")) from None
                    if time.monotonic() > deadline:
                        raise SparkClusterError("the Spark master did not answer in time",
                                                self.log_tail("master")) from None
                    time.sleep(0.2)
            for i in range(self.workers):
                self._spawn_node(state, 1 + i)
            self._save(state)
            self._wait(self.workers, deadline, "starting")
        except BaseException:
            self.stop(10.0)
            raise
        return self.master_url

    def _kill_leftovers(self) -> None:
        state = self._load()
        if state is None:
            return
        self._stop_state(state, 10.0)

    def _stop_state(self, state: dict[str, Any], timeout: float) -> None:
        state["state"] = "stopped"
        self._save(state)  # the watchdog sees this and exits
        nodes = state.get("nodes", [])
        # Executors (and their Python workers) first: a worker's shutdown kills them
        # too, but not if it is SIGKILLed after the timeout.
        below: list[int] = []
        children = _children()
        for node in nodes[1:]:
            if node.get("pid") and _pid_alive(node["pid"], node["marker"]):
                below += _descendants(int(node["pid"]), children)
        workers = {int(n["pid"]): n["marker"] for n in nodes[1:] if n.get("pid")}
        _terminate(workers, timeout)
        kill_tree([p for p in below if _pid_alive(p)])
        master = {int(n["pid"]): n["marker"] for n in nodes[:1] if n.get("pid")}
        _terminate(master, timeout)
        for node in nodes:
            node["pid"] = None
        wd = state.get("watchdog_pid")
        if wd and _pid_alive(wd, _WATCHDOG_MARKER):
            _signal(wd, signal.SIGTERM)
            _wait_gone({wd: None}, 5.0)
        state["watchdog_pid"] = None
        self._save(state)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the workers (which stop their executors), then the master."""
        state = self._load()
        if state is not None:
            self._stop_state(state, timeout)

    def ensure_running(self, timeout: float = 120.0) -> str:
        """Restart the workers that are down (or start the cluster)."""
        state = self._load()
        if (state is None or state.get("state") != "running"
                or not _pid_alive(state["nodes"][0].get("pid"), state["nodes"][0]["marker"])):
            return self.start(timeout)
        for i in range(self.workers):
            if not self.worker_alive(i):
                self.start_worker(i, timeout)
        self._wait(self.workers, time.monotonic() + timeout, "restarting workers")
        return self.master_url

    # ---- faults -----------------------------------------------------------------------

    def executors(self, app_id: str | None = None) -> list[ExecutorProcess]:
        """The executor JVMs running under the workers (of application ``app_id`` only,
        if given), with their Python processes."""
        state = self._state()
        children = _children()
        out = []
        for i, node in enumerate(state["nodes"][1:]):
            pid = node.get("pid")
            if not pid or not _pid_alive(pid, node["marker"]):
                continue
            for child in _descendants(int(pid), children):
                argv = _cmdline(child)
                if _EXECUTOR_CLASS not in argv:
                    continue
                app = _arg(argv, b"--app-id")
                if app_id is not None and app != app_id:
                    continue
                out.append(ExecutorProcess(child, i, app, _arg(argv, b"--executor-id"),
                                           tuple(_descendants(child, children))))
        return out

    def kill_executor(self, pid: int) -> ExecutorProcess:
        """SIGKILL an executor JVM and its Python processes, all at once (a crash of
        that executor's machine, as its tasks see it); its worker stays up and the
        master may give the application a new executor there."""
        for ex in self.executors():
            if ex.pid == pid:
                kill_tree([ex.pid, *ex.python_pids])
                return ex
        raise RuntimeError(f"no executor with pid {pid}")

    def kill_worker(self, i: int) -> list[int]:
        """SIGKILL worker ``i``, its executors and their Python processes, all at once
        (a lost machine); it stays down until :meth:`start_worker`. Returns the pids."""
        state = self._state()
        node = state["nodes"][1 + i]
        pid = node.get("pid")
        if not pid or not _pid_alive(pid, node["marker"]):
            raise RuntimeError(f"worker {i} does not run")
        pids = [int(pid), *_descendants(int(pid))]
        kill_tree(pids)
        node["pid"] = None
        self._save(state)
        return pids

    def start_worker(self, i: int, timeout: float = 120.0) -> None:
        """(Re)start worker ``i`` on its ports and wait until the master lists it."""
        state = self._state()
        if not self.worker_alive(i):
            self._spawn_node(state, 1 + i)
            self._ensure_watchdog(state)
            self._save(state)
        want = sum(1 for k in range(self.workers) if self.worker_alive(k))
        self._wait(want, time.monotonic() + timeout, f"restarting worker {i}")

    # ---- drivers ------------------------------------------------------------------------

    def session_config(self, **extra: str) -> dict[str, str]:
        """A driver's settings for this cluster: the master, everything on 127.0.0.1,
        one executor of the worker's cores and 1 GiB per worker, a failed task tried up
        to 4 times."""
        config = {
            "spark.master": self.master_url,
            "spark.driver.host": _HOST,
            "spark.driver.bindAddress": _HOST,
            "spark.executor.cores": str(self.cores),
            "spark.executor.memory": "1g",
            "spark.cores.max": str(self.cores * self.workers),
            "spark.task.maxFailures": "4",
            "spark.ui.showConsoleProgress": "false",
        }
        config.update(extra)
        return config

    def __enter__(self) -> LocalSpark:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"LocalSpark({str(self.state_dir)!r}, workers={self.workers})"

    def describe(self) -> str:
        state = self._load()
        if not state or not state.get("nodes"):
            return f"no Spark cluster in {self.state_dir}"
        lines = [f"Spark standalone cluster, state in {self.state_dir}"]
        for node in state["nodes"]:
            up = node.get("pid") and _pid_alive(node["pid"], node["marker"])
            lines.append(f"  {node['name']}: {_HOST}:{node['port']} (UI :{node['ui_port']}), "
                         + (f"pid {node['pid']}" if up else "down"))
        if state.get("state") == "running":
            lines.append(f"  master URL: {self.master_url}; "
                         f"{self.alive_workers()} worker(s) ALIVE")
        return "\n".join(lines)


class SparkConnectServer:
    """A Spark Connect server on 127.0.0.1 (pyspark's ``spark-submit`` running
    ``org.apache.spark.sql.connect.service.SparkConnectServer``, from the
    ``spark-connect`` jar pyspark ships): the driver of the sessions that Spark Connect
    clients (``SparkSession.builder.remote(server.remote)``, ``pyspark[connect]``) open.
    ``master`` is where its executors run (``local[2]``, or a :class:`LocalSpark`'s
    ``master_url``). Its Python workers (which run a Python data source's ``writer()``,
    ``commit()`` and, in local mode, its tasks) use ``PYSPARK_PYTHON`` (default: this
    interpreter). Stopped with the process that started it (a watchdog), like the
    clusters."""

    def __init__(self, state_dir: str | os.PathLike[str], master: str = "local[2]", *,
                 conf: Mapping[str, str] | None = None, memory: str = "1g",
                 stop_with_owner: bool = True, ttl: float | None = None) -> None:
        self.state_dir = Path(state_dir).expanduser().absolute()
        self.memory = memory
        self.master = master
        self.conf = dict(conf or {})
        self.stop_with_owner = stop_with_owner
        self.ttl = ttl
        self.port: int | None = None
        self.pid: int | None = None

    @property
    def remote(self) -> str:
        """The ``sc://`` address clients connect to."""
        if self.port is None:
            raise RuntimeError("the Spark Connect server is not started")
        return f"sc://{_HOST}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.state_dir / "output.log"

    def start(self, timeout: float = 180.0) -> str:
        """Start the server and wait until it accepts connections; returns ``remote``."""
        import socket

        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.port = _free_ports(1)[0]
        marker = str(self.state_dir)
        conf = {"spark.connect.grpc.binding.address": _HOST,
                "spark.connect.grpc.binding.port": str(self.port),
                "spark.driver.host": _HOST, "spark.driver.bindAddress": _HOST,
                "spark.ui.enabled": "false",
                "spark.driver.extraJavaOptions": f"-Daioproducer.spark.node={marker}",
                **self.conf}
        argv = [str(spark_home() / "bin" / "spark-submit"), "--class",
                "org.apache.spark.sql.connect.service.SparkConnectServer",
                "--name", "aioproducer Spark Connect server", "--master", self.master]
        for k, v in conf.items():
            argv += ["--conf", f"{k}={v}"]
        env = LocalSpark(self.state_dir)._env(marker, "")
        # spark-submit sizes a Spark Connect server's heap as a daemon's (as the Thrift
        # server's): SPARK_DAEMON_MEMORY, which the clusters' daemons set small.
        env["SPARK_DAEMON_MEMORY"] = self.memory
        self.pid = _spawn(argv, self.log_path, env)
        state: dict[str, Any] = {
            "state": "running", "watchdog_pid": None,
            "nodes": [{"name": "connect", "pid": self.pid, "marker": marker}]}
        if self.stop_with_owner or self.ttl:
            owner = os.getpid() if self.stop_with_owner else 0
            deadline = time.time() + self.ttl if self.ttl else 0.0
            state_file = self.state_dir / _STATE_FILE
            state["watchdog_pid"] = _spawn(
                [sys.executable, "-I", "-c", _WATCHDOG, str(state_file), str(owner),
                 (_proc_start_time(owner) or "") if owner else "", str(deadline),
                 _WATCHDOG_MARKER], self.state_dir / "watchdog.log")
            state_file.write_text(json.dumps(state))
        self._state = state
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(OSError), socket.create_connection(
                    (_HOST, self.port), timeout=1.0):
                return self.remote
            if not _pid_alive(self.pid):
                raise SparkClusterError("the Spark Connect server exited while starting",
                                        _tail(self.log_path.read_text(errors="replace"), 40))
            if time.monotonic() > deadline:
                self.stop()
                raise SparkClusterError("the Spark Connect server did not listen in time",
                                        _tail(self.log_path.read_text(errors="replace"), 40))
            time.sleep(0.2)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the server (SIGTERM, then SIGKILL) and the Python workers below it."""
        if self.pid is None:
            return
        below = _descendants(self.pid)
        state = getattr(self, "_state", None)
        if state is not None:
            state["state"] = "stopped"
            (self.state_dir / _STATE_FILE).write_text(json.dumps(state))
        _terminate({self.pid: None}, timeout)
        kill_tree([p for p in below if _pid_alive(p)])
        wd = state.get("watchdog_pid") if state else None
        if wd and _pid_alive(wd, _WATCHDOG_MARKER):
            _signal(wd, signal.SIGTERM)
            _wait_gone({wd: None}, 5.0)
        self.pid = None

    def __enter__(self) -> SparkConnectServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def iter_pids(cluster: LocalSpark) -> Iterator[int]:
    """Every live process of the cluster (daemons, executors, Python workers)."""
    state = cluster._load() or {}
    children = _children()
    for node in state.get("nodes", []):
        if node.get("pid") and _pid_alive(node["pid"], node["marker"]):
            yield int(node["pid"])
            yield from _descendants(int(node["pid"]), children)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m aioproducer.devbroker.spark_cluster",
                                description="A local Spark standalone cluster (127.0.0.1).")
    p.add_argument("command", choices=("start", "stop", "status"))
    p.add_argument("--dir", type=Path, default=None, help="state directory")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--cores", type=int, default=1, help="cores per worker")
    p.add_argument("--memory", default="1536m", help="executor memory per worker")
    p.add_argument("--timeout", type=float, default=180.0)
    args = p.parse_args(argv)
    cluster = LocalSpark(args.dir or default_spark_dir(), args.workers, cores=args.cores,
                         memory=args.memory, stop_with_owner=False)
    if args.command == "start":
        try:
            url = cluster.start(args.timeout)
        except SparkClusterError as exc:
            print(f"spark-cluster: {exc}", file=sys.stderr)
            return 1
        print(cluster.describe())
        print(url)
    elif args.command == "stop":
        cluster.stop()
        print(f"stopped the Spark cluster in {cluster.state_dir}")
    else:
        print(cluster.describe())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
