"""The soaks' topic administration, with confluent-kafka (independent of the producer
under test): create a topic and wait for a leader on every partition, delete topics,
and ask where a partition's leader and replicas are now.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import Any


def _admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient
    return AdminClient({"bootstrap.servers": bootstrap})


def partition_replicas(bootstrap: str, topic: str,
                       timeout: float = 10.0) -> dict[int, tuple[int, list[int]]]:
    """partition -> (leader node id, replica node ids), as the cluster reports it now."""
    md = _admin(bootstrap).list_topics(topic, timeout=timeout)
    return {p: (info.leader, list(info.replicas))
            for p, info in md.topics[topic].partitions.items()}


def create_topic(bootstrap: str, name: str, partitions: int, replication: int,
                 config: dict[str, str], timeout: float = 60.0) -> None:
    from confluent_kafka.cimpl import NewTopic
    admin = _admin(bootstrap)
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=replication,
                  config=config)], operation_timeout=timeout, request_timeout=timeout)
    futures[name].result(timeout=timeout + 5)
    deadline = time.monotonic() + timeout
    while True:
        try:
            reps = partition_replicas(bootstrap, name, timeout=5)
            if len(reps) == partitions and all(ld >= 0 for ld, _ in reps.values()):
                return
        except Exception:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"topic {name}: no leader on every partition "
                               f"after {timeout:.0f} s")
        time.sleep(0.1)


def delete_topics(bootstrap: str, names: Sequence[str], timeout: float = 30.0) -> None:
    admin = _admin(bootstrap)  # kept alive until the futures are done
    futures = admin.delete_topics(list(names), operation_timeout=timeout,
                                  request_timeout=timeout)
    for f in futures.values():
        try:
            f.result(timeout=timeout + 5)
        except Exception as exc:
            print(f"soak: could not delete a topic: {exc}", file=sys.stderr)
