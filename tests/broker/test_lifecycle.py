"""Lifecycle: loops, garbage collection, cancellation, sharing between tasks."""

from __future__ import annotations

import asyncio
import gc
import threading
from typing import Any

import pytest
from support.kafka_util import consume_all

from aioproducer import IllegalStateError, Producer
from aioproducer.testing.faultproxy import ProxyCluster


def test_constructed_outside_a_loop_and_started_in_one(kafka_bootstrap: str,
                                                       topic_factory: Any) -> None:
    topic = topic_factory()
    producer = Producer(bootstrap_servers=kafka_bootstrap)  # no loop running here

    async def use() -> int:
        async with producer:
            return (await producer.send_and_wait(topic, b"v")).offset

    assert asyncio.run(use()) == 0


def test_use_from_another_loop_is_a_clear_error(kafka_bootstrap: str,
                                                topic_factory: Any) -> None:
    topic = topic_factory()
    producer = Producer(bootstrap_servers=kafka_bootstrap)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        asyncio.run_coroutine_threadsafe(producer.start(), loop).result(30)

        async def other() -> None:
            with pytest.raises(IllegalStateError, match="another event loop"):
                await producer.send(topic, b"v")
            with pytest.raises(IllegalStateError, match="another event loop"):
                await producer.flush()

        asyncio.run(other())
        asyncio.run_coroutine_threadsafe(producer.close(), loop).result(30)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


@pytest.mark.asyncio
async def test_unclosed_producer_warns_once_and_is_cleaned_up(kafka_bootstrap: str,
                                                              topic_factory: Any) -> None:
    topic = topic_factory()
    producer = Producer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    await producer.send_and_wait(topic, b"v")
    sender_task = producer._sender.task  # type: ignore[union-attr]
    client = producer._client
    assert sender_task is not None and client is not None
    with pytest.warns(ResourceWarning, match="unclosed <Producer") as caught:
        del producer
        gc.collect()
    assert len(caught) == 1
    for _ in range(100):
        if sender_task.done() and client.closed:
            break
        await asyncio.sleep(0.02)
    assert sender_task.done() and client.closed


@pytest.mark.asyncio
async def test_cancelled_send_waiting_for_memory_leaks_nothing(kafka_bootstrap: str,
                                                               topic_factory: Any) -> None:
    topic = topic_factory()
    memory = 64 * 1024
    async with ProxyCluster.start(kafka_bootstrap) as proxies, \
            Producer(bootstrap_servers=proxies.bootstrap, buffer_memory=memory,
                     max_request_size=memory, linger_ms=0, request_timeout_ms=5000,
                     batch_max_size=16384) as producer:
        await producer.send_and_wait(topic, b"warm-up")
        proxies.blackhole(True)
        # Records that fill a 16 KiB batch each: one block per send.
        held = [await producer.send(topic, b"x" * 16000) for _ in range(memory // 16384)]
        pool = producer._accumulator.pool
        assert pool.available_memory == 0
        blocked = asyncio.create_task(producer.send(topic, b"b" * 16000))
        await asyncio.sleep(0.2)
        assert not blocked.done() and producer._accumulator.memory_waiters == 1
        blocked.cancel()
        with pytest.raises(asyncio.CancelledError):
            await blocked
        assert producer._accumulator.memory_waiters == 0
        proxies.blackhole(False)
        await asyncio.gather(*held)
        await producer.flush()
        pool.reclaim()
        assert pool.allocated_bytes == 0, "a cancelled send kept pool memory"
        # The producer still works, and the cancelled record was never half-appended.
        await producer.send_and_wait(topic, b"after")
    got = consume_all(kafka_bootstrap, topic, len(held) + 2)
    assert [m.value for m in got] == [b"warm-up"] + [b"x" * 16000] * len(held) + [b"after"]


@pytest.mark.asyncio
async def test_cancelled_send_waiting_for_metadata(kafka_bootstrap: str) -> None:
    async with Producer(bootstrap_servers=kafka_bootstrap, max_block_ms=10_000) as producer:
        task = asyncio.create_task(producer.send("does-not-exist-yet", b"v"))
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert producer._accumulator.pool.allocated_bytes == 0


@pytest.mark.asyncio
async def test_many_tasks_share_one_producer(kafka_bootstrap: str, topic_factory: Any) -> None:
    topic = topic_factory(partitions=4)

    async with Producer(bootstrap_servers=kafka_bootstrap, buffer_memory=256 * 1024,
                        max_request_size=256 * 1024) as producer:
        async def worker(w: int) -> list[Any]:
            return [await producer.send_and_wait(topic, f"{w}-{i}".encode(), key=str(w).encode())
                    for i in range(200)]

        results = await asyncio.gather(*(worker(w) for w in range(20)))
    for per_worker in results:  # one key per worker: one partition, offsets increasing
        assert len({m.partition for m in per_worker}) == 1
        offsets = [m.offset for m in per_worker]
        assert offsets == sorted(offsets)
    assert len(consume_all(kafka_bootstrap, topic, 4000)) == 4000


def test_sigterm_in_a_service_closes_cleanly(kafka_bootstrap: str, topic_factory: Any) -> None:
    import os
    import signal
    import subprocess
    import sys

    topic = topic_factory()
    script = os.path.join(os.path.dirname(os.path.dirname(__file__)), "support",
                          "service_sigterm.py")
    proc = subprocess.Popen([sys.executable, "-W", "error", "-X", "dev", script,
                             kafka_bootstrap, topic],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "READY"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "CANCELLED" in out
    sent = int(out.split("SENT ")[1].split()[0])
    assert "Task was destroyed" not in err and "unclosed" not in err.lower(), err
    assert "Traceback" not in err, err
    got = consume_all(kafka_bootstrap, topic, sent)
    assert len(got) >= sent  # every acknowledged record is there


@pytest.mark.asyncio
async def test_cancelling_one_awaiter_leaves_its_batch_mates_alone(
        kafka_bootstrap: str, topic_factory: Any) -> None:
    topic = topic_factory()
    async with Producer(bootstrap_servers=kafka_bootstrap, linger_ms=300) as producer:
        first = await producer.send(topic, b"1")
        second = await producer.send(topic, b"2")  # same batch, held by linger_ms
        waiter = asyncio.create_task(_await(first))
        await asyncio.sleep(0.05)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert (await second).offset == 1
        assert (await first).offset == 0  # the record itself was not cancelled
    assert [m.value for m in consume_all(kafka_bootstrap, topic, 2)] == [b"1", b"2"]


async def _await(fut: Any) -> Any:
    return await fut
