"""Shared checks for delivery-guarantee tests: exactly once, in order, nothing lost."""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import confluent_kafka.admin

from aioproducer import KafkaError, RecordMetadata

from .kafka_util import Consumed


def encode(i: int, size: int = 32) -> bytes:
    """A value that carries its send index (first 8 bytes)."""
    return i.to_bytes(8, "big") + b"." * (size - 8)


def decode(value: bytes | None) -> int:
    assert value is not None
    return int.from_bytes(value[:8], "big")


def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    """partition -> leader node id, as the cluster reports it now."""
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
    md = admin.list_topics(topic, timeout=10)
    return {p: info.leader for p, info in md.topics[topic].partitions.items()}


@dataclass
class Outcome:
    sent: int = 0
    acknowledged: int = 0
    failed: int = 0
    duplicated: int = 0
    lost: int = 0
    out_of_order: int = 0
    untyped_failures: list[BaseException] = field(default_factory=list)
    failure_types: Counter[str] = field(default_factory=Counter)

    def line(self) -> str:
        return (f"sent={self.sent} acknowledged={self.acknowledged} failed={self.failed} "
                f"duplicated={self.duplicated} lost={self.lost} "
                f"out_of_order={self.out_of_order} failures={dict(self.failure_types)}")


def check(keys: Sequence[bytes | None], results: Sequence[Any],
          consumed: Sequence[Consumed], *, allow_duplicates: bool = False) -> Outcome:
    """Compare what the producer reported with what an independent consumer read.

    ``results[i]`` is the RecordMetadata or exception of the record with send index i.
    """
    out = Outcome(sent=len(results))
    acked: set[int] = set()
    for i, r in enumerate(results):
        if isinstance(r, RecordMetadata):
            acked.add(i)
        else:
            out.failed += 1
            out.failure_types[type(r).__name__] += 1
            if not isinstance(r, KafkaError):
                out.untyped_failures.append(r)
    out.acknowledged = len(acked)
    counts = Counter(decode(m.value) for m in consumed)
    out.duplicated = sum(c - 1 for c in counts.values() if c > 1)
    out.lost = sum(1 for i in acked if i not in counts)
    # Per key (and per partition), the log must hold records in send order.
    by_partition: dict[int, list[Consumed]] = defaultdict(list)
    for m in consumed:
        by_partition[m.partition].append(m)
    for msgs in by_partition.values():
        msgs.sort(key=lambda m: m.offset)
        last_by_key: dict[bytes | None, int] = {}
        seen: set[int] = set()
        for m in msgs:
            idx = decode(m.value)
            if allow_duplicates and idx in seen:
                continue  # a resent copy (no idempotence): order is judged on first copies
            seen.add(idx)
            prev = last_by_key.get(m.key, -1)
            if idx <= prev:
                out.out_of_order += 1
            last_by_key[m.key] = max(prev, idx)
    return out


async def settle(futs: Sequence[Any]) -> list[Any]:
    """Every future's result or exception, in order."""
    out: list[Any] = []
    for i in range(0, len(futs), 5000):
        out.extend(await asyncio.gather(*futs[i:i + 5000], return_exceptions=True))
    return out


async def gather_chunked(futs: list[Any], chunk: int = 5000) -> list[RecordMetadata]:
    out: list[RecordMetadata] = []
    for i in range(0, len(futs), chunk):
        out.extend(await asyncio.gather(*futs[i:i + chunk]))
    return out
