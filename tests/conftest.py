"""Session fixtures: a real Kafka broker (started once per run) and fresh topics.

- ``kafka_bootstrap``: ``$AIOPRODUCER_BOOTSTRAP`` if set, else a one-node local KRaft
  broker started for the session (``aioproducer.devbroker.LocalKafka``).
- ``local_kafka``: that ``LocalKafka`` (None when ``$AIOPRODUCER_BOOTSTRAP`` is used).
- ``kafka_cluster3``: a three-node local cluster, started only if a test asks for it;
  nodes a test killed are restarted before the next test that uses it.
- ``secure_kafka``: a one-node local broker in the secured mode (TLS and SASL listeners,
  users, ACLs: ``LocalKafka(..., secure=True)``), started only if a test asks for it.
- ``topic_factory``: ``make(partitions=1, replication=1, config=None) -> name``; the
  topics are deleted after the test.

No event-loop fixtures here: pytest-asyncio runs in strict mode (see pyproject.toml).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kafka_util import create_topic, delete_topic
from log_util import broker_data_dir

from aioproducer.devbroker import BrokerStartError, KafkaLibsError, LocalKafka

TopicFactory = Callable[..., str]

_START_TIMEOUT = float(os.environ.get("AIOPRODUCER_BROKER_START_TIMEOUT", "180"))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "cluster: uses the three-node local Kafka cluster (kafka_cluster3)")


def _start(cluster: LocalKafka, what: str) -> float:
    started = time.monotonic()
    try:
        cluster.start(timeout=_START_TIMEOUT)
    except (BrokerStartError, KafkaLibsError) as exc:
        pytest.fail(f"could not start {what}: {exc}", pytrace=False)
    return time.monotonic() - started


@pytest.fixture(scope="session")
def local_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafka | None]:
    if os.environ.get("AIOPRODUCER_BOOTSTRAP"):
        yield None
        return
    cluster = LocalKafka(tmp_path_factory.mktemp("kafka"), nodes=1)
    try:
        _start(cluster, "the local Kafka broker")
        yield cluster
    finally:
        cluster.stop(timeout=30)


@pytest.fixture(scope="session")
def kafka_bootstrap(local_kafka: LocalKafka | None) -> str:
    if local_kafka is None:
        return os.environ["AIOPRODUCER_BOOTSTRAP"]
    return local_kafka.bootstrap


@pytest.fixture
def log_dir(local_kafka: LocalKafka | None, kafka_bootstrap: str) -> Path | None:
    """The test broker's data directory (for ``log_util.dump_batches``), or None when
    the broker is not a one-node broker of this machine."""
    return broker_data_dir(local_kafka, kafka_bootstrap)


@pytest.fixture(scope="session")
def kafka_cluster3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafka]:
    cluster = LocalKafka(tmp_path_factory.mktemp("kafka3"), nodes=3)
    try:
        _start(cluster, "the three-node local Kafka cluster")
        yield cluster
    finally:
        cluster.stop(timeout=30)


@pytest.fixture(scope="session")
def secure_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafka]:
    cluster = LocalKafka(tmp_path_factory.mktemp("kafka-secure"), nodes=1, secure=True)
    try:
        _start(cluster, "the secured local Kafka broker")
        yield cluster
    finally:
        cluster.stop(timeout=30)


@pytest.fixture(autouse=True)
def _heal_kafka_cluster3(request: pytest.FixtureRequest) -> None:
    """Before a test that uses ``kafka_cluster3``, restart nodes an earlier test left down."""
    if "kafka_cluster3" not in request.fixturenames:
        return
    cluster: LocalKafka = request.getfixturevalue("kafka_cluster3")
    try:
        cluster.ensure_running(timeout=_START_TIMEOUT)
    except (BrokerStartError, RuntimeError) as exc:
        pytest.fail(f"could not bring the three-node cluster back: {exc}", pytrace=False)


@pytest.fixture
def topic_factory(kafka_bootstrap: str) -> Iterator[TopicFactory]:
    created: list[str] = []

    def make(partitions: int = 1, replication: int = 1,
             config: dict[str, str] | None = None) -> str:
        name = create_topic(kafka_bootstrap, partitions=partitions, replication=replication,
                            config=config)
        created.append(name)
        return name

    yield make
    for name in created:
        try:
            delete_topic(kafka_bootstrap, name, timeout=10)
        except Exception as exc:  # a failed clean-up must not fail the test
            print(f"topic_factory: could not delete {name}: {exc}", file=sys.stderr)


# -- every async test runs on asyncio and on uvloop ------------------------------------

def pytest_asyncio_loop_factories(config: pytest.Config,
                                  item: pytest.Item) -> dict[str, Callable[[], Any]]:
    """pytest-asyncio hook: each async test runs once per event loop implementation."""
    import asyncio

    import uvloop
    return {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}


# -- an unhandled exception on the loop fails the test ---------------------------------

@pytest_asyncio.fixture(autouse=True)
async def _fail_on_unhandled_loop_errors() -> AsyncIterator[None]:
    """Fail the test if anything reaches the loop's exception handler while it runs
    (a task that died unobserved, "Future exception was never retrieved", ...)."""
    import asyncio
    import gc

    loop = asyncio.get_running_loop()
    seen: list[dict[str, Any]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: seen.append(context))
    try:
        yield
        await asyncio.sleep(0)
        gc.collect()  # surfaces never-retrieved future exceptions now, not later
        await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(previous)
    if seen:
        first = seen[0]
        pytest.fail(f"{len(seen)} unhandled error(s) on the event loop; first: "
                    f"{first.get('message')}: {first.get('exception')!r}", pytrace=False)
