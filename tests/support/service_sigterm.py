"""A tiny service for test_lifecycle: produces until SIGTERM, then shuts down cleanly."""

import asyncio
import signal
import sys

from aioproducer import Producer


async def main(bootstrap: str, topic: str) -> None:
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    async with Producer(bootstrap_servers=bootstrap, linger_ms=20) as producer:
        i = 0
        try:
            while True:
                await producer.send_and_wait(topic, b"%d" % i)
                i += 1
                if i == 50:
                    print("READY", flush=True)
        finally:
            print(f"SENT {i}", flush=True)


if __name__ == "__main__":
    try:
        asyncio.run(main(sys.argv[1], sys.argv[2]))
    except asyncio.CancelledError:
        print("CANCELLED", flush=True)
