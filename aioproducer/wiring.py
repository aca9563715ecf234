"""Where the producer's parts are connected: every callback one part gives another is
assigned here, and nowhere else (the Producer calls these two functions; a test that
builds parts by hand calls them too).

- :func:`wire_buffering`, at construction: the accumulator (with its buffer memory)
  and the partitioner, which share the producer's native appender, and the metrics.
- :func:`wire_sender`, at ``start()``: the Sender, the client and the metadata.
- :func:`wire_new_batches`, at ``start()``: the native ``send()``'s new batches.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ._native import Appender, ProducerBatch
    from .accumulator import RecordAccumulator
    from .metadata import Metadata
    from .metrics import ProducerMetrics
    from .net.client import KafkaClient
    from .partitioner import RecordPartitioner
    from .sender import Sender

__all__ = ["NewBatchOwner", "wire_buffering", "wire_new_batches", "wire_sender"]


class NewBatchOwner(Protocol):
    """What :func:`wire_new_batches` hands a new batch to (the Producer)."""

    def _on_new_batch(self, batch: ProducerBatch) -> None: ...


def wire_buffering(accumulator: RecordAccumulator, partitioner: RecordPartitioner,
                   metrics: ProducerMetrics) -> None:
    """The accumulator and the partitioner (adaptive partitioning, KIP-794: the
    accumulator's queue sizes reach the partitioner, which asks for a topic's backlog
    when its sticky partition moves), and the time sends wait for memory."""
    accumulator.load_stats = partitioner
    partitioner.backlog = accumulator.topic_backlog

    def waited(ns: int) -> None:
        metrics.pool_waited(ns, time.monotonic())

    accumulator.memory.on_waited = waited


def wire_sender(sender: Sender, client: KafkaClient, metadata: Metadata,
                accumulator: RecordAccumulator) -> None:
    """The Sender wakes when a connection becomes ready, the metadata asks for a
    refresh or a send needs one; the metadata asks it which topics are in use (they do
    not expire) and tells it which expired; a lost connection asks for a refresh; a
    partition count change resizes the accumulator's routes in the same step; the
    accumulator asks it to learn a topic's batch size limit (only when batches may
    grow past ``batch_size``); the compression thread wakes it when a batch is
    compressed."""
    client.on_ready_change = sender.wakeup
    client.on_disconnect = lambda node: metadata.request_update()
    metadata.on_update_request = sender.wakeup
    metadata.busy_topics = sender.busy_topics
    metadata.on_topics_expired = sender.forget_topics
    metadata.on_partition_counts = accumulator.resize_routes
    if accumulator.batch_max_size > accumulator.batch_size:
        accumulator.on_growth_cap_needed = sender.learn_growth_cap
    if accumulator.offload is not None:
        # A batch done on the compression thread wakes the Sender (through a pipe the
        # loop reads); Sender.stop() closes the thread.
        accumulator.offload.attach(asyncio.get_running_loop(), sender.wakeup)


def wire_new_batches(appender: Appender, accumulator: RecordAccumulator,
                     metadata: Metadata, producer: Callable[[], NewBatchOwner | None]
                     ) -> None:
    """The native ``send()`` opens a partition's new batch itself when nothing makes the
    record wait (``Appender.opener``; see :meth:`RecordAccumulator.open_now`), and
    hands the batch to the producer's ``_on_new_batch`` as the Python path does.
    ``producer`` is a weak reference to it (``weakref.ref``, called in C): the appender
    must not keep an abandoned producer alive (once it is gone, records take the
    Python path)."""
    loop = asyncio.get_running_loop()

    def open_now(topic: str, partition: int, timestamp: int, key: bytes | None,
                 value: bytes | None) -> ProducerBatch | None:
        info = metadata.cluster.topics.get(topic)
        owner = producer()
        if info is None or owner is None:
            return None
        batch = accumulator.open_now(topic, len(info.partitions), partition, timestamp,
                                     key, value, loop)
        if batch is not None:
            owner._on_new_batch(batch)
        return batch

    appender.opener = open_now
