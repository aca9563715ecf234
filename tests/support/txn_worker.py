"""Transactional processes for test_transactions, run as subprocesses so they can die
for real (SIGKILL, no clean-up of any kind).

``ctp BOOTSTRAP IN OUT GROUP TXN_ID CRASH_IN_TXN``: a consume-transform-produce loop.
A confluent-kafka consumer (assigned partitions, starting at the group's committed
offsets) reads IN; each chunk becomes one transaction that writes ``out:<value>`` to
OUT and commits the chunk's offsets with send_offsets_to_transaction. With
CRASH_IN_TXN = n > 0 the process kills itself in transaction n, after the chunk's
output is in the log but before the commit. It exits 0 once IN is fully processed.

``open BOOTSTRAP TOPIC TXN_ID COUNT TIMEOUT_MS``: begin a transaction, write COUNT
records, wait until all are acknowledged, print READY, then kill itself.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from confluent_kafka import Consumer, TopicPartition

from aioproducer import Producer

CHUNK = 150


def _die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


async def ctp(bootstrap: str, src: str, dst: str, group: str, txn_id: str,
              crash_in: int) -> None:
    async with Producer(bootstrap_servers=bootstrap, transactional_id=txn_id,
                        linger_ms=5) as producer:
        # First: fence older instances and abort what they left open, so that the
        # committed offsets read below are final.
        await producer.init_transactions()
        consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group,
            "enable.auto.commit": False, "isolation.level": "read_committed",
            "auto.offset.reset": "earliest", "enable.partition.eof": True,
        })
        try:
            md = consumer.list_topics(src, timeout=10)
            parts = sorted(md.topics[src].partitions)
            committed = consumer.committed([TopicPartition(src, p) for p in parts],
                                           timeout=10)
            starts = {tp.partition: tp.offset for tp in committed}
            print(f"START {starts}", flush=True)
            consumer.assign([TopicPartition(src, p, o if o >= 0 else -2)
                             for p, o in starts.items()])
            high = {p: consumer.get_watermark_offsets(TopicPartition(src, p), timeout=10)[1]
                    for p in parts}
            position = {p: (o if o >= 0 else 0) for p, o in starts.items()}
            txn = 0
            while any(position[p] < high[p] for p in parts):
                msgs = [m for m in consumer.consume(CHUNK, timeout=1.0) if m.error() is None]
                if not msgs:
                    continue
                txn += 1
                producer.begin_transaction()
                for m in msgs:
                    await producer.send(dst, b"out:" + m.value(), key=m.key(),
                                        partition=m.partition())
                    position[m.partition()] = m.offset() + 1
                offsets = {(src, p): position[p] for p in {m.partition() for m in msgs}}
                await producer.send_offsets_to_transaction(offsets, group)
                if txn == crash_in:
                    await producer.flush()  # the output is in the log, uncommitted
                    print(f"CRASH in transaction {txn}", flush=True)
                    _die()
                await producer.commit_transaction()
            print(f"DONE {txn} transactions", flush=True)
        finally:
            consumer.close()


async def open_txn(bootstrap: str, topic: str, txn_id: str, count: int,
                   timeout_ms: int) -> None:
    producer = Producer(bootstrap_servers=bootstrap, transactional_id=txn_id,
                        transaction_timeout_ms=timeout_ms)
    await producer.start()
    await producer.init_transactions()
    producer.begin_transaction()
    futures = [await producer.send(topic, b"open-%d" % i) for i in range(count)]
    for f in futures:
        await f
    print("READY", flush=True)
    _die()


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "ctp":
        asyncio.run(ctp(args[0], args[1], args[2], args[3], args[4], int(args[5])))
    elif mode == "open":
        asyncio.run(open_txn(args[0], args[1], args[2], int(args[3]), int(args[4])))
    else:
        raise SystemExit(f"unknown mode {mode!r}")
