"""The compiled core of aioproducer: batch memory, record batch encoding, murmur2.

Everything here is Cython (``*.pyx``). The core (``pool``, ``batch``, ``wire``,
``murmur2``, ``scan``, and ``records``: batches, routes, the partition choice and
the appends) knows nothing of asyncio; ``aio`` is its asyncio glue: the batches'
private waiter futures, the record futures, and the appender's binding to its event
loop. There is no pure-Python fallback: if the extension modules are not built,
importing this package fails with an ImportError that says how to build them.
"""

from __future__ import annotations

try:
    from .aio import Appender, ProducerBatch, RecordFuture, new_future
    from .batch import BATCH_HEADER_SIZE, BatchBuilder, record_size_upper_bound
    from .murmur2 import murmur2, murmur2_partition
    from .pool import DEBUG_BUILD, Block, BufferPool
    from .records import RecordMetadata, TopicRoute
except ImportError as exc:  # pragma: no cover - depends on the build
    raise ImportError(
        "aioproducer's compiled core (aioproducer._native) is not built: "
        f"{exc}. Build it with `pip install -e .` (or `make build`) in the source "
        "checkout; there is no pure-Python fallback."
    ) from exc

__all__ = [
    "BATCH_HEADER_SIZE",
    "DEBUG_BUILD",
    "Appender",
    "BatchBuilder",
    "Block",
    "BufferPool",
    "ProducerBatch",
    "RecordFuture",
    "RecordMetadata",
    "TopicRoute",
    "murmur2",
    "murmur2_partition",
    "new_future",
    "record_size_upper_bound",
]
