"""The broker's log files, read by Kafka's own ``DumpLogSegments``: what each batch
looked like on the wire (its size, record count and codec), whoever wrote it."""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from aioproducer.devbroker import LocalKafka, default_state_dir, run_java


@dataclass(frozen=True)
class DumpedBatch:
    topic: str
    partition: int
    base_offset: int
    last_offset: int
    count: int
    size: int
    """Bytes of the whole batch in the log, as the producer sent it (or the broker
    recompressed it)."""
    codec: str
    """``none``, ``gzip``, ``snappy``, ``lz4`` or ``zstd``."""


_BATCH_LINE = re.compile(
    r"baseOffset: (\d+) lastOffset: (\d+) count: (\d+) .*? size: (\d+) magic: 2 "
    r"compresscodec: (\w+) .*? isvalid: (\w+)")


def broker_data_dir(local_kafka: LocalKafka | None, kafka_bootstrap: str) -> Path | None:
    """The data directory of the test broker when it is a one-node broker of this
    machine: the session's own, or the dev broker (``.broker/default``) that
    ``$AIOPRODUCER_BOOTSTRAP`` points at. None otherwise."""
    cluster = local_kafka or LocalKafka(default_state_dir())
    try:
        if cluster.bootstrap != kafka_bootstrap or cluster.node_count() != 1:
            return None
    except RuntimeError:  # no cluster state there
        return None
    path = cluster.node_dir(0) / "data"
    return path if path.is_dir() else None


def dump_batches(data_dir: Path, *topics: str) -> list[DumpedBatch]:
    """Every batch of every partition of ``topics``, in log order, from Kafka's
    ``DumpLogSegments`` (one JVM for all the segment files)."""
    files: dict[str, tuple[str, int]] = {}
    for topic in topics:
        for part_dir in data_dir.glob(f"{topic}-*"):
            partition = int(part_dir.name.rsplit("-", 1)[1])
            for log in part_dir.glob("*.log"):
                files[str(log)] = (topic, partition)
    assert {t for t, _ in files.values()} == set(topics), f"log segments missing: {data_dir}"
    proc = run_java("org.apache.kafka.tools.DumpLogSegments",
                    ["--files", ",".join(sorted(files))], timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out: list[DumpedBatch] = []
    topic, partition = "", -1
    for line in proc.stdout.splitlines():
        if line.startswith("Dumping "):
            topic, partition = files[line.removeprefix("Dumping ").strip()]
            continue
        m = _BATCH_LINE.search(line)
        if m is None:
            continue
        assert m[6] == "true", f"DumpLogSegments: invalid batch: {line}"
        out.append(DumpedBatch(topic, partition, int(m[1]), int(m[2]), int(m[3]), int(m[4]), m[5]))
    return out


def check_log_layout(batches: list[DumpedBatch], partitions_counts: dict[int, int]) -> None:
    """Per partition, the batches tile offsets 0..count-1 with no gap or overlap."""
    by_partition: dict[int, list[DumpedBatch]] = defaultdict(list)
    for b in batches:
        by_partition[b.partition].append(b)
    assert {p: sum(b.count for b in bs) for p, bs in by_partition.items()} == {
        p: c for p, c in partitions_counts.items() if c}
    for bs in by_partition.values():
        expected = 0
        for b in sorted(bs, key=lambda b: b.base_offset):
            assert b.base_offset == expected and b.last_offset == expected + b.count - 1
            expected += b.count
