"""Consume-transform-produce, exactly once, with one action per error category.

Reads ``input`` as member of ``group`` (confluent-kafka consumer, read_committed),
writes each record upper-cased to ``output`` and commits the consumed offsets in the
same transaction. What it does about an error is decided by ``exc.category``
(KIP-1050, see docs/transactions.md):

* RETRIABLE, REFRESH_AND_RETRY: call again (the producer already retried and
  refreshed within its bounds; a timed-out commit may be repeated as is);
* ABORTABLE: abort the transaction and rewind the consumer to the committed offsets;
* APPLICATION_RECOVERABLE: this producer is finished (fenced...): close it, make a new
  one with the same transactional id (init_transactions() fences the old one and
  aborts its transaction), rewind;
* INVALID_CONFIGURATION, FATAL: close everything and raise.

    python examples/consume_transform_produce.py 127.0.0.1:9092 in out my-group
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from aioproducer import ErrorCategory, IllegalStateError, KafkaError, Producer

log = logging.getLogger("consume_transform_produce")

RETRY = (ErrorCategory.RETRIABLE, ErrorCategory.REFRESH_AND_RETRY)


def transform(value: bytes | None) -> bytes:
    return (value or b"").upper()


def rewind(consumer: Any) -> None:
    """Back to the group's committed offsets: what the aborted transaction consumed is
    read again."""
    assignment = consumer.assignment()
    if not assignment:
        return
    for tp in consumer.committed(assignment, timeout=10):
        consumer.seek(TopicPartition(tp.topic, tp.partition,
                                     tp.offset if tp.offset >= 0 else -2))  # -2: earliest


async def run(bootstrap: str, input_topic: str, output_topic: str, group: str, *,
              transactional_id: str, max_records: int | None = None,
              idle_timeout: float = 10.0, batch: int = 50,
              producer_factory: Callable[..., Producer] = Producer,
              attempts: int = 20) -> int:
    """Until ``max_records`` input records are committed, or nothing arrives for
    ``idle_timeout`` seconds. Returns the number of records committed."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed"})
    consumer.subscribe([input_topic])

    async def new_producer() -> Producer:
        producer = producer_factory(bootstrap_servers=bootstrap,
                                    transactional_id=transactional_id, linger_ms=5)
        await producer.start()
        for _ in range(attempts):
            try:
                await producer.init_transactions()
                return producer
            except KafkaError as exc:
                if exc.category not in RETRY:
                    await producer.close()
                    raise
        await producer.close()
        raise TimeoutError("init_transactions() kept failing")

    producer = await new_producer()
    committed = 0
    idle_since = time.monotonic()
    try:
        while max_records is None or committed < max_records:
            msgs = [m for m in await asyncio.to_thread(consumer.consume, batch, 0.5)
                    if m.error() is None]
            if not msgs:
                if time.monotonic() - idle_since > idle_timeout:
                    break
                continue
            idle_since = time.monotonic()
            offsets: dict[tuple[str, int], int] = {}
            for m in msgs:
                topic, partition, offset = m.topic(), m.partition(), m.offset()
                assert topic is not None and partition is not None and offset is not None
                offsets[(topic, partition)] = offset + 1
            for attempt in range(attempts):
                try:
                    producer.begin_transaction()
                    for m in msgs:
                        await producer.send(output_topic, transform(m.value()), key=m.key())
                    await producer.send_offsets_to_transaction(offsets, group)
                    await _commit(producer, attempts)
                    committed += len(msgs)
                    break
                except KafkaError as exc:
                    category = exc.category
                    log.warning("transaction failed (%s, attempt %d): %s", category.value,
                                attempt + 1, exc)
                    if category is ErrorCategory.ABORTABLE or category in RETRY:
                        # A retriable error surfaced in the middle of the transaction:
                        # its records may be half sent, so start it over.
                        await _abort_if_open(producer)
                    elif category is ErrorCategory.APPLICATION_RECOVERABLE:
                        await producer.close()  # aborts what it can
                        producer = await new_producer()
                    else:  # INVALID_CONFIGURATION, FATAL: nothing to retry
                        raise
                    rewind(consumer)
                    msgs = []
                    break  # consume again from the committed offsets
            else:
                raise TimeoutError("the transaction kept failing")
    finally:
        await producer.close()
        await asyncio.to_thread(consumer.close)
    return committed


async def _commit(producer: Producer, attempts: int) -> None:
    for _ in range(attempts):
        try:
            await producer.commit_transaction()
            return
        except KafkaError as exc:
            if exc.category not in RETRY:
                raise
            log.info("commit_transaction() will be repeated: %s", exc)
    raise TimeoutError("commit_transaction() kept timing out")


async def _abort_if_open(producer: Producer) -> None:
    # IllegalStateError: no transaction open (it failed before begin, or ended).
    with contextlib.suppress(IllegalStateError):
        await producer.abort_transaction()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bootstrap")
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("group")
    ap.add_argument("--transactional-id", default="ctp-example")
    ap.add_argument("--max-records", type=int)
    ap.add_argument("--idle-timeout", type=float, default=10.0)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    n = asyncio.run(run(args.bootstrap, args.input, args.output, args.group,
                        transactional_id=args.transactional_id,
                        max_records=args.max_records, idle_timeout=args.idle_timeout))
    print(f"committed {n} records")
    return 0


if __name__ == "__main__":
    sys.exit(main())
