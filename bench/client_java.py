"""Runner for the Java producer, through Apache Kafka's own
``org.apache.kafka.tools.ProducerPerformance`` (the kafka-tools jar).

The JVM is started the way ``kafka-producer-perf-test.sh`` starts it (``-Xmx512M``),
and its summary line is parsed. Its CPU and peak RSS come from ``wait4()`` on the JVM,
so they cover the whole JVM (start-up and JIT included): ProducerPerformance cannot
report the CPU of its send loop alone. Its latency percentiles are whole milliseconds.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from aioproducer.devbroker.jars import KafkaLibsError
from aioproducer.devbroker.jars import java_executable as devbroker_java
from bench.common import (
    PACED,
    THROUGHPUT,
    Measured,
    RunArgs,
    Skip,
    child_main,
    make_value,
    unsupported_sweep,
)

MAIN_CLASS = "org.apache.kafka.tools.ProducerPerformance"
JVM_OPTS = ["-Xmx512M", "-Djava.awt.headless=true"]

SUMMARY = re.compile(
    r"(?P<records>\d+) records sent, (?P<rps>[\d.]+) records/sec \((?P<mbs>[\d.]+) MB/sec\), "
    r"(?P<avg>[\d.]+) ms avg latency, (?P<max>[\d.]+) ms max latency, "
    r"(?P<p50>\d+) ms 50th, (?P<p95>\d+) ms 95th, (?P<p99>\d+) ms 99th, "
    r"(?P<p999>\d+) ms 99\.9th"
)


def command(args: RunArgs, payload_file: str | None = None) -> list[str]:
    """The ProducerPerformance command line. With ``payload_file`` (the compression
    scenarios) every record's value is that file's one line, the same text-like value
    the other clients send; otherwise ProducerPerformance makes random letters."""
    if not args.kafka_libs:
        raise Skip("no Kafka jar directory (aioproducer.devbroker.ensure_kafka_libs() "
                   "or --kafka-libs)")
    libs = Path(args.kafka_libs)
    if not any(libs.glob("kafka-tools-*.jar")):
        raise Skip(f"no kafka-tools jar in {libs}")
    if args.key_size > 0:
        raise Skip("ProducerPerformance cannot send keys")
    unsupported_sweep(args, "ProducerPerformance")
    if args.mode not in (THROUGHPUT, PACED):
        raise Skip(f"ProducerPerformance has no {args.mode} mode")
    throughput = str(int(args.rate)) if args.mode == PACED else "-1"
    props = [f"bootstrap.servers={args.bootstrap}"]
    if args.acks is not None:
        props.append(f"acks={args.acks}")
    if args.idempotence:
        props.append("enable.idempotence=true")
    if args.linger_ms is not None:
        props.append(f"linger.ms={args.linger_ms}")
    if args.compression:
        props.append(f"compression.type={args.compression}")
    payload = (["--payload-file", payload_file] if payload_file
               else ["--record-size", str(args.value_size)])
    return [java_executable(), *JVM_OPTS, "-cp", str(libs / "*"), MAIN_CLASS,
            "--topic", args.topic, "--num-records", str(args.records),
            *payload, "--throughput", throughput, "--producer-props", *props]


def java_executable() -> str:
    """``$JAVA_HOME/bin/java`` when it exists, else ``java`` from PATH (the one the local
    broker runs, ``aioproducer.devbroker.java_executable``); plain ``java`` when there is
    none, so that starting it fails and the run is skipped."""
    try:
        return devbroker_java()
    except KafkaLibsError:
        return "java"


def _version(libs: str) -> str:
    for jar in Path(libs).glob("kafka-clients-*.jar"):
        return jar.stem.removeprefix("kafka-clients-")
    return ""


def run(args: RunArgs) -> Measured:
    with tempfile.TemporaryDirectory(prefix="bench-java-") as tmp:
        payload_file = None
        if args.compression:
            # Random letters compress far worse than the others' text-like value:
            # give ProducerPerformance the same value (one line, no delimiter in it).
            value = make_value(args.value_size, compressible=True)
            assert b"\n" not in value
            payload_file = os.path.join(tmp, "payload.txt")
            Path(payload_file).write_bytes(value)
        return _run(args, command(args, payload_file))


def _run(args: RunArgs, cmd: list[str]) -> Measured:
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        try:
            proc = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        except FileNotFoundError:
            raise Skip("no java executable on PATH") from None
        deadline = time.monotonic() + args.timeout_s
        status, rusage = 0, None
        while True:
            pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
            if pid == proc.pid:
                break
            if time.monotonic() > deadline:
                os.kill(proc.pid, signal.SIGKILL)
                _pid, status, rusage = os.wait4(proc.pid, 0)
                proc.returncode = -signal.SIGKILL
                raise TimeoutError(f"ProducerPerformance did not finish in {args.timeout_s} s")
            time.sleep(0.05)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    summary = None
    for line in stdout.splitlines():
        match = SUMMARY.search(line)
        if match:
            summary = match
    if proc.returncode != 0 or summary is None:
        tail = (stderr.strip() or stdout.strip())[-800:]
        raise RuntimeError(f"ProducerPerformance exited {proc.returncode}: {tail}")
    records = int(summary["records"])
    rps = float(summary["rps"])
    return Measured(
        records=records, elapsed_s=records / rps if rps > 0 else 0.0, cpu_loop_s=None,
        version=_version(str(args.kafka_libs)),
        p50_ms=float(summary["p50"]), p99_ms=float(summary["p99"]), lat_samples=records,
        cpu_process_s=rusage.ru_utime + rusage.ru_stime, maxrss_kib=rusage.ru_maxrss,
    )


if __name__ == "__main__":
    raise SystemExit(child_main("java", run))
