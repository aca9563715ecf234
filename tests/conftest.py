"""What the suite adds to aioproducer's pytest plugin (``aioproducer.testing.plugin``,
loaded through its ``pytest11`` entry point: ``kafka_bootstrap``, ``kafka_local_broker``,
``kafka_topic_factory``, ``kafka_topic``, ``producer``, ``mock_producer``).

- ``local_kafka``, ``topic_factory``: the plugin's ``kafka_local_broker`` and
  ``kafka_topic_factory`` under the names the tests use.
- ``log_dir``: the test broker's data directory (``support.log_util``).
- ``kafka_cluster3``: a three-node local cluster, started only if a test asks for it;
  nodes a test killed are restarted before the next test that uses it.
- ``spark_cluster``: a Spark standalone cluster (a master and two workers, each its own
  JVM: ``aioproducer.devbroker.spark_cluster.LocalSpark``), started only if a test asks
  for it; workers a test killed are restarted before the next test that uses it.
- ``secure_kafka``: a one-node local broker in the secured mode (TLS and SASL listeners,
  users, ACLs: ``LocalKafka(..., secure=True)``), started only if a test asks for it.
- Markers: every test that uses a broker fixture (directly or through another fixture)
  is marked ``broker``, so ``pytest -m "not broker"`` is the quick loop; tests of the
  three-node cluster or the Spark cluster are marked ``cluster`` and ``slow``.
- Every async test runs on asyncio and on uvloop, and fails if anything reaches the
  loop's exception handler.

The layout: ``tests/unit/`` (no broker), ``tests/broker/`` (a real Kafka),
``tests/support/`` (the helpers, imported as ``support.<module>``: this directory is on
``sys.path`` because this conftest is outside any package).

No event-loop fixtures here: pytest-asyncio runs in strict mode (see pyproject.toml).
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from support.log_util import broker_data_dir

from aioproducer.devbroker import BrokerStartError, KafkaLibsError, LocalKafka

TopicFactory = Callable[..., str]

_START_TIMEOUT = float(os.environ.get("AIOPRODUCER_BROKER_START_TIMEOUT", "180"))

# A test that uses one of these fixtures (directly or through another fixture: the
# fixture closure is in item.fixturenames) needs a real broker.
BROKER_FIXTURES = frozenset({
    # aioproducer's plugin
    "kafka_bootstrap", "kafka_local_broker", "kafka_topic_factory", "kafka_topic",
    "producer",
    # this conftest
    "local_kafka", "topic_factory", "log_dir", "kafka_cluster3", "secure_kafka",
    "spark_cluster",
})


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "broker: needs a real Kafka broker (added from the fixtures a test uses; "
        "deselect with -m 'not broker' for the quick loop)")
    config.addinivalue_line(
        "markers", "cluster: uses the three-node local Kafka cluster (kafka_cluster3)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark ``broker`` every test that uses a broker fixture, and ``slow`` (as well as
    ``cluster``) every test of the three-node cluster."""
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if names & BROKER_FIXTURES:
            item.add_marker(pytest.mark.broker)
        if "kafka_cluster3" in names or "spark_cluster" in names:
            item.add_marker(pytest.mark.cluster)
            item.add_marker(pytest.mark.slow)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Move everything alive after collection (modules, test items, kio's schemas) out
    of the garbage collector's sight, so the full collection each async test's teardown
    runs (below) scans only what the tests themselves created: 0.15 s a test otherwise."""
    import gc

    gc.collect()
    gc.freeze()


def _start(cluster: LocalKafka, what: str) -> float:
    started = time.monotonic()
    try:
        cluster.start(timeout=_START_TIMEOUT)
    except (BrokerStartError, KafkaLibsError) as exc:
        pytest.fail(f"could not start {what}: {exc}", pytrace=False)
    return time.monotonic() - started


@pytest.fixture(scope="session")
def local_kafka(kafka_local_broker: LocalKafka | None) -> LocalKafka | None:
    """The plugin's ``kafka_local_broker`` (None when ``$AIOPRODUCER_BOOTSTRAP`` is used)."""
    return kafka_local_broker


@pytest.fixture
def topic_factory(kafka_topic_factory: TopicFactory) -> TopicFactory:
    """The plugin's ``kafka_topic_factory``:
    ``make(partitions=1, *, replication=1, config=None) -> name``."""
    return kafka_topic_factory


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
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    pytest.importorskip("pyspark", reason="pip install -e '.[spark]'")
    from aioproducer.devbroker.spark_cluster import LocalSpark, SparkClusterError

    cluster = LocalSpark(tmp_path_factory.mktemp("spark"), workers=2)
    try:
        try:
            cluster.start(timeout=_START_TIMEOUT)
        except SparkClusterError as exc:
            pytest.fail(f"could not start the Spark cluster: {exc}", pytrace=False)
        yield cluster
    finally:
        cluster.stop(timeout=30)


@pytest.fixture(autouse=True)
def _heal_spark_cluster(request: pytest.FixtureRequest) -> None:
    """Before a test that uses ``spark_cluster``, restart workers an earlier test killed."""
    if "spark_cluster" not in request.fixturenames:
        return
    cluster = request.getfixturevalue("spark_cluster")
    try:
        cluster.ensure_running(timeout=_START_TIMEOUT)
    except (BrokerStartError, RuntimeError) as exc:
        pytest.fail(f"could not bring the Spark cluster back: {exc}", pytrace=False)


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


# -- every async test runs on asyncio and on uvloop ------------------------------------

def pytest_asyncio_loop_factories(config: pytest.Config,
                                  item: pytest.Item) -> dict[str, Callable[[], Any]]:
    """pytest-asyncio hook: each async test runs once per event loop implementation."""
    import asyncio

    import uvloop
    return {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}


# -- an unhandled exception on the loop fails the test ---------------------------------

@pytest.fixture(autouse=True)
def _fail_on_unhandled_loop_errors(request: pytest.FixtureRequest) -> None:
    """For async tests only (a sync test has no loop to watch): the guard below."""
    import inspect

    if inspect.iscoroutinefunction(getattr(request, "function", None)):
        request.getfixturevalue("_loop_error_guard")


@pytest_asyncio.fixture
async def _loop_error_guard() -> AsyncIterator[None]:
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
        # the young generations: what this test made (a full collection would also
        # rescan everything earlier tests left alive, 0.1 s and more a test)
        gc.collect(1)  # surfaces never-retrieved future exceptions now, not later
        await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(previous)
    if seen:
        first = seen[0]
        pytest.fail(f"{len(seen)} unhandled error(s) on the event loop; first: "
                    f"{first.get('message')}: {first.get('exception')!r}", pytrace=False)
