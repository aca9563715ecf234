"""pytest fixtures for code that produces to Kafka with aioproducer.

Registered through the ``pytest11`` entry point (name ``aioproducer``), so installing
aioproducer makes them available; ``-p no:aioproducer`` turns the plugin off, and with
``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1``, ``-p aioproducer`` turns it on. (Do not also pass
``-p aioproducer.testing.plugin`` while autoloading: pytest would register the module
twice and stop.) Nothing happens unless a test asks for one of the fixtures:

``kafka_bootstrap`` (session)
    ``$AIOPRODUCER_BOOTSTRAP`` if set, else the address of ``kafka_local_broker``.
``kafka_local_broker`` (session)
    The one-node local KRaft broker (:class:`aioproducer.devbroker.LocalKafka`)
    started on first use and stopped at the end of the session, or None when
    ``$AIOPRODUCER_BOOTSTRAP`` is set (then nothing is started).
``kafka_topic_factory``
    ``make(partitions=1, *, replication=1, config=None) -> name``: creates a fresh
    topic and waits until it is usable (every broker's metadata gives each partition
    a leader, and each leader answers for its partitions); they are deleted after the
    test.
``kafka_topic``
    A fresh topic for this test: one partition, or what the test's
    ``@pytest.mark.kafka_topic(partitions=3, config={...})`` says.
``producer``
    A started :class:`aioproducer.Producer` on ``kafka_bootstrap``, closed after the
    test (before the test's topics are deleted, so what it left buffered is delivered).
    Override ``producer_options`` (a dict of producer options) to configure it.
``mock_producer``
    A started :class:`aioproducer.testing.MockProducer`, closed after the test; by
    default every topic exists with one partition. Override ``mock_producer_options``
    (``MockProducer`` keyword arguments) to configure it.

``producer`` and ``mock_producer`` need pytest-asyncio (strict or auto mode). Each is
started in the event loop *of the test that uses it*: the ``loop_scope`` of the test's
``asyncio`` mark, else ``asyncio_default_test_loop_scope``, whatever
``asyncio_default_fixture_loop_scope`` says. (A producer is bound to the loop that
started it, and an async fixture otherwise runs in its own default loop, which is not
the test's when the test uses a module or session loop.) An async fixture of yours
that uses them must therefore run in the test's loop too.

The topic fixtures are synchronous: the admin requests run in ``asyncio.run()`` on a
short-lived helper thread, so they work in any test, sync or async, with any loop
scope, without touching the test's loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

import pytest
from kio.static.primitive import i8, i32, i64

from ..net.admin import Admin
from ..net.client import KafkaClient
from ..net.protocol import build_entity, request_module
from ..producer import Producer
from .mock import MockProducer

if TYPE_CHECKING:
    from ..devbroker import LocalKafka

try:
    import pytest_asyncio
except ImportError:  # pragma: no cover - the async fixtures then explain what is missing
    pytest_asyncio = None  # type: ignore[assignment]

__all__ = [
    "kafka_bootstrap",
    "kafka_local_broker",
    "kafka_topic",
    "kafka_topic_factory",
    "mock_producer",
    "mock_producer_options",
    "producer",
    "producer_options",
]


def _forgive_kio_strategy_registration() -> None:
    """Keep Hypothesis's pytest plugin from failing ``-W error`` runs because of us.

    Importing aioproducer imports ``kio``, which registers Hypothesis strategies for its
    types at import time when Hypothesis is installed. If this plugin happens to load
    before Hypothesis's own, that plugin then reports the import-time strategy
    evaluation as a ``HypothesisSideeffectWarning`` ("slow code in plugin"), which
    ``-W error`` / ``filterwarnings = error`` turn into a startup error for the whole
    run. The evaluation is harmless (and done anyway at the first import), so tell
    Hypothesis to forget it. Nothing to do once Hypothesis's plugin is loaded: then it
    does not complain about the import at all.
    """
    if "_hypothesis_pytestplugin" in sys.modules:
        return
    configuration = sys.modules.get("hypothesis.configuration")
    reset = getattr(configuration, "notice_initialization_restarted", None)
    if callable(reset):
        # Another Hypothesis version may differ: at worst the warning comes back.
        with contextlib.suppress(Exception):
            reset(warn=False)


_forgive_kio_strategy_registration()

T = TypeVar("T")
TopicFactory = Callable[..., str]

_LoopScope = Literal["function", "class", "module", "package", "session"]
_LOOP_SCOPES: tuple[_LoopScope, ...] = ("function", "class", "module", "package", "session")
_ADMIN_TIMEOUT_S = 30.0


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "kafka_topic(partitions=1, replication=1, config=None): how the kafka_topic "
        "fixture creates this test's topic (aioproducer plugin)",
    )


# -- broker and topics -----------------------------------------------------------------


def _bootstrap_from_env() -> str:
    return os.environ.get("AIOPRODUCER_BOOTSTRAP", "").strip()


@pytest.fixture(scope="session")
def kafka_local_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafka | None]:
    """The one-node local broker ``kafka_bootstrap`` uses, started on first use; None
    when ``$AIOPRODUCER_BOOTSTRAP`` is set."""
    if _bootstrap_from_env():
        yield None
        return
    from ..devbroker import BrokerStartError, KafkaLibsError, LocalKafka

    timeout = float(os.environ.get("AIOPRODUCER_BROKER_START_TIMEOUT", "180"))
    cluster = LocalKafka(tmp_path_factory.mktemp("aioproducer-kafka"), nodes=1)
    try:
        try:
            cluster.start(timeout=timeout)
        except (BrokerStartError, KafkaLibsError) as exc:
            pytest.fail(f"aioproducer: could not start a local Kafka broker: {exc}",
                        pytrace=False)
        yield cluster
    finally:
        cluster.stop(timeout=30)


@pytest.fixture(scope="session")
def kafka_bootstrap(kafka_local_broker: LocalKafka | None) -> str:
    """A Kafka bootstrap address: ``$AIOPRODUCER_BOOTSTRAP``, else the local broker's."""
    if kafka_local_broker is None:
        return _bootstrap_from_env()
    return kafka_local_broker.bootstrap


@pytest.fixture
def kafka_topic_factory(kafka_bootstrap: str,
                        request: pytest.FixtureRequest) -> Iterator[TopicFactory]:
    """``make(partitions=1, *, replication=1, config=None) -> name``; deleted after the test."""
    created: list[str] = []
    prefix = _topic_prefix(request.node.name)

    def make(partitions: int = 1, *, replication: int = 1,
             config: Mapping[str, str] | None = None) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        _run_in_thread(_create_topic(kafka_bootstrap, name, partitions, replication,
                                     dict(config or {})))
        created.append(name)
        return name

    yield make
    if created:
        try:
            _run_in_thread(_delete_topics(kafka_bootstrap, created))
        except Exception as exc:  # a failed clean-up must not fail the test
            print(f"aioproducer: could not delete topics {created}: {exc}", file=sys.stderr)


@pytest.fixture
def kafka_topic(kafka_topic_factory: TopicFactory, request: pytest.FixtureRequest) -> str:
    """A fresh topic for this test (see the ``kafka_topic`` mark)."""
    marker = request.node.get_closest_marker("kafka_topic")
    kwargs: dict[str, Any] = {}
    if marker is not None:
        if marker.args:
            pytest.fail("@pytest.mark.kafka_topic takes keyword arguments only: "
                        "partitions=, replication=, config=", pytrace=False)
        kwargs = dict(marker.kwargs)
    return kafka_topic_factory(**kwargs)


def _topic_prefix(test_name: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", test_name).strip("-._")[:80]
    return f"test-{cleaned}" if cleaned else "test"


def _run_in_thread(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion in ``asyncio.run()`` on a helper thread.

    Works whether or not this thread has a running (or a pytest-asyncio) loop, and
    leaves this thread's event loop alone.
    """
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="aioproducer-admin") as pool:
        return pool.submit(asyncio.run, coro).result()


async def _create_topic(bootstrap: str, name: str, partitions: int, replication: int,
                        config: dict[str, str]) -> None:
    client = KafkaClient(bootstrap)
    try:
        await Admin(client).create_topics([(name, partitions, replication, config)],
                                          _ADMIN_TIMEOUT_S, exist_ok=False)
        # Wait until the topic is usable, so the first send does not start with a
        # round of "unknown topic" / NOT_LEADER retries.
        deadline = time.monotonic() + _ADMIN_TIMEOUT_S
        while True:
            try:
                last = await _topic_not_ready(client, name, partitions,
                                              max(0.5, deadline - time.monotonic()))
            except Exception as exc:  # a node not answering yet: ask again
                last = f"{type(exc).__name__}: {exc}"
            if last is None:
                return
            if time.monotonic() >= deadline:
                raise TimeoutError(f"topic {name!r} not usable after "
                                   f"{_ADMIN_TIMEOUT_S:.0f} s ({last})")
            await asyncio.sleep(0.05)
    finally:
        await client.close()


_LIST_OFFSETS_KEY = 2
_LIST_OFFSETS_VERSIONS = (1, 7)
_LATEST_TIMESTAMP = -1


async def _topic_not_ready(client: KafkaClient, name: str, partitions: int,
                           timeout_s: float) -> str | None:
    """None once every broker's metadata has ``name`` with its ``partitions``
    partitions, each with a leader, and each leader answers a ListOffsets request for
    its partitions; else what is missing. (Metadata can name a leader a moment before
    it serves the partition: NOT_LEADER_OR_FOLLOWER until then.)"""
    response: Any = await client.fetch_metadata([name], timeout_s=timeout_s)
    client.update_nodes({int(b.node_id): (str(b.host), int(b.port))
                         for b in response.brokers})
    leaders: dict[int, list[int]] = {}
    for node in sorted(client.nodes):  # every broker, not only the one that answered
        md: Any = await client._metadata_from(node, [name], timeout_s)
        topic = next((t for t in md.topics if str(t.name) == name), None)
        if topic is None or int(topic.error_code) != 0:
            return f"node {node}: topic not listed"
        if len(topic.partitions) != partitions:
            return f"node {node}: {len(topic.partitions)} partition(s)"
        if any(int(p.leader_id) < 0 or int(p.error_code) != 0 for p in topic.partitions):
            return f"node {node}: a partition has no leader yet"
        if not leaders:
            for p in topic.partitions:
                leaders.setdefault(int(p.leader_id), []).append(int(p.partition_index))
    for leader, indexes in sorted(leaders.items()):
        conn = await client.connect(leader, timeout_s)
        version = conn.version_for(_LIST_OFFSETS_KEY, *_LIST_OFFSETS_VERSIONS)
        mod = request_module(_LIST_OFFSETS_KEY, version)
        req = build_entity(
            mod.ListOffsetsRequest, replica_id=i32(-1), isolation_level=i8(0),
            topics=(build_entity(mod.ListOffsetsTopic, name=name, partitions=tuple(
                build_entity(mod.ListOffsetsPartition, partition_index=i32(i),
                             current_leader_epoch=i32(-1),
                             timestamp=i64(_LATEST_TIMESTAMP))
                for i in indexes)),))
        resp: Any = await conn.request(req)
        for t in resp.topics:
            for p in t.partitions:
                if int(p.error_code) != 0:
                    return (f"partition {int(p.partition_index)}: leader {leader} answers "
                            f"error {int(p.error_code)}")
    return None


async def _delete_topics(bootstrap: str, names: list[str]) -> None:
    client = KafkaClient(bootstrap)
    try:
        await Admin(client).delete_topics(names, _ADMIN_TIMEOUT_S, missing_ok=True)
    finally:
        await client.close()


# -- producers -------------------------------------------------------------------------


@pytest.fixture
def producer_options() -> dict[str, Any]:
    """Options of the ``producer`` fixture's Producer; override to configure it."""
    return {}


@pytest.fixture
def mock_producer_options() -> dict[str, Any]:
    """``MockProducer`` keyword arguments for ``mock_producer``; override to configure it."""
    return {"default_partitions": 1}


@pytest.fixture
def producer(request: pytest.FixtureRequest) -> Producer:
    """A started Producer on ``kafka_bootstrap``, in the test's event loop."""
    return cast(Producer, request.getfixturevalue(_in_test_loop("producer", request)))


@pytest.fixture
def mock_producer(request: pytest.FixtureRequest) -> MockProducer:
    """A started MockProducer, in the test's event loop."""
    return cast(MockProducer, request.getfixturevalue(_in_test_loop("mock_producer", request)))


def _in_test_loop(what: str, request: pytest.FixtureRequest) -> str:
    """The name of the ``what`` fixture variant that runs in the test's loop."""
    if pytest_asyncio is None:
        pytest.fail(f"aioproducer: the {what!r} fixture needs pytest-asyncio "
                    "(pip install pytest-asyncio)", pytrace=False)
    return f"_aioproducer_{what}_{_test_loop_scope(request)}"


def _test_loop_scope(request: pytest.FixtureRequest) -> str:
    """The scope of the loop pytest-asyncio runs this test in (as pytest-asyncio decides it)."""
    scope: object = None
    marker = request.node.get_closest_marker("asyncio")
    if marker is not None:
        scope = marker.kwargs.get("loop_scope") or marker.kwargs.get("scope")
    if scope is None:
        try:
            scope = request.config.getini("asyncio_default_test_loop_scope")
        except ValueError:  # an older pytest-asyncio without the option
            scope = None
    return scope if isinstance(scope, str) and scope in _LOOP_SCOPES else "function"


def _with_bootstrap(options: Mapping[str, Any], bootstrap: str) -> dict[str, Any]:
    opts = dict(options)
    names = {k.replace(".", "_").replace("-", "_").lower() for k in opts}
    if "bootstrap_servers" not in names:
        opts["bootstrap_servers"] = bootstrap
    return opts


def _make_loop_variants(scope: _LoopScope) -> None:
    # New function objects per scope: pytest-asyncio keeps the loop scope on the function.
    async def producer_in_loop(kafka_bootstrap: str, producer_options: dict[str, Any],
                               kafka_topic_factory: TopicFactory) -> AsyncIterator[Producer]:
        # Set up after the topic factory, so torn down before it deletes the test's
        # topics: close() then still delivers what the test left buffered.
        del kafka_topic_factory
        async with Producer(_with_bootstrap(producer_options, kafka_bootstrap)) as p:
            yield p

    async def mock_producer_in_loop(
            mock_producer_options: dict[str, Any]) -> AsyncIterator[MockProducer]:
        async with MockProducer(**mock_producer_options) as p:
            yield p

    module = globals()
    for what, func in (("producer", producer_in_loop), ("mock_producer", mock_producer_in_loop)):
        name = f"_aioproducer_{what}_{scope}"
        module[name] = pytest_asyncio.fixture(func, loop_scope=scope, name=name)


# One variant of each async fixture per loop scope, each pinned to its loop with
# pytest-asyncio's public ``loop_scope``; ``producer`` / ``mock_producer`` pick the one
# matching the test. All are function-scoped: a fresh producer per test.
if pytest_asyncio is not None:
    for _scope in _LOOP_SCOPES:
        _make_loop_variants(_scope)
