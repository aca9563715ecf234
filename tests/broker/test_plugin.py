"""The pytest plugin (aioproducer.testing.plugin): small suites run in a child pytest.

Each suite runs with ``-W error`` in {strict, auto} mode x {function, module, session}
loop scope, against the outer session's broker (passed down in $AIOPRODUCER_BOOTSTRAP,
so no child starts a broker of its own), and must pass with no warning. The plugin
comes in through its ``pytest11`` entry point, as it does for users.
"""

from __future__ import annotations

import importlib.metadata
import textwrap
from typing import Any

import pytest

import aioproducer.testing.plugin

pytest_plugins = ["pytester"]

CHILD_TIMEOUT = 180

# Records each test's loop and topic, for the final checks (imported by the suites).
RECORDER = """
loops = []    # (file, test, loop): the loops stay alive, so their ids are distinct
topics = []
"""

# Loop scope from the module's asyncio mark.
MARKED = '''
import asyncio

import pytest
import recorder

pytestmark = pytest.mark.asyncio(loop_scope="{scope}")


async def test_producer_sends_and_awaits(producer, kafka_topic):
    recorder.loops.append(("marked", "producer", asyncio.get_running_loop()))
    recorder.topics.append(kafka_topic)
    metadata = await producer.send_and_wait(kafka_topic, b"value", key=b"key")
    assert (metadata.topic, metadata.partition, metadata.offset) == (kafka_topic, 0, 0)
    fut = await producer.send(kafka_topic, b"second", headers=[("h", b"1")])
    await producer.flush()  # IllegalStateError if the producer is on another loop
    assert fut.done() and (await fut).offset == 1


async def test_mock_producer(mock_producer):
    recorder.loops.append(("marked", "mock", asyncio.get_running_loop()))
    fut = await mock_producer.send("any-topic", b"v", key=b"k")
    assert fut.done() and (await fut).offset == 0
    assert [(r.topic, r.value) for r in mock_producer.history()] == [("any-topic", b"v")]
    await mock_producer.flush()  # IllegalStateError if the mock is on another loop
    assert mock_producer.flush_count == 1


@pytest.mark.kafka_topic(partitions=3)
async def test_topic_mark(producer, kafka_topic):
    recorder.loops.append(("marked", "partitions", asyncio.get_running_loop()))
    recorder.topics.append(kafka_topic)
    assert await producer.partitions_for(kafka_topic) == [0, 1, 2]
    metadata = await producer.send_and_wait(kafka_topic, b"v", partition=2)
    assert metadata.partition == 2
'''

# Loop scope from asyncio_default_test_loop_scope (strict mode needs a bare mark).
DEFAULT = '''
import asyncio
import os

import pytest
import recorder

{mark}
async def test_producer_default_scope(producer, kafka_topic, kafka_bootstrap):
    recorder.loops.append(("default", "producer", asyncio.get_running_loop()))
    recorder.topics.append(kafka_topic)
    assert kafka_bootstrap == os.environ["AIOPRODUCER_BOOTSTRAP"]
    futs = [await producer.send(kafka_topic, b"%d" % i) for i in range(10)]
    await producer.flush()
    assert [(await f).offset for f in futs] == list(range(10))


{mark}
async def test_mock_manual_completion(mock_producer):
    recorder.loops.append(("default", "mock", asyncio.get_running_loop()))
    mock_producer.auto_complete = False
    fut = await mock_producer.send("t", b"v")
    assert not fut.done()
    task = asyncio.ensure_future(_wait(fut))
    assert mock_producer.complete_next()
    assert (await task).offset == 0


async def _wait(fut):
    return await fut


def test_sync_test_gets_bootstrap_and_topic(kafka_bootstrap, kafka_topic):
    assert kafka_bootstrap == os.environ["AIOPRODUCER_BOOTSTRAP"]
    recorder.topics.append(kafka_topic)
'''

# Runs last: the loops each test ran in, and the topics are gone.
CHECK = '''
import time

import recorder

from aioproducer.devbroker import fetch_metadata


def test_loops_and_clean_up(kafka_bootstrap):
    ids = {{(f, t): id(loop) for f, t, loop in recorder.loops}}
    assert len(ids) == len(recorder.loops) == 5
    by_file = {{}}
    for f, _t, loop in recorder.loops:
        by_file.setdefault(f, set()).add(id(loop))
    scope = "{scope}"
    if scope == "function":
        assert len(set(ids.values())) == 5
    elif scope == "module":
        assert len(by_file["marked"]) == len(by_file["default"]) == 1
        assert by_file["marked"] != by_file["default"]
    else:
        assert len(set(ids.values())) == 1

    assert len(recorder.topics) == 4
    address = kafka_bootstrap.split(",")[0]
    deadline = time.monotonic() + 15
    while True:
        md = fetch_metadata(address, recorder.topics)
        left = [t.name for t in md.topics if t.error_code.value == 0]
        if not left:
            break
        assert time.monotonic() < deadline, f"topics not deleted: {{left}}"
        time.sleep(0.1)
'''


def ini(mode: str, test_loop_scope: str) -> str:
    return textwrap.dedent(f"""
        [pytest]
        asyncio_mode = {mode}
        asyncio_default_fixture_loop_scope = function
        asyncio_default_test_loop_scope = {test_loop_scope}
        """)


@pytest.fixture
def child_env(monkeypatch: pytest.MonkeyPatch, kafka_bootstrap: str) -> str:
    monkeypatch.setenv("AIOPRODUCER_BOOTSTRAP", kafka_bootstrap)
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    monkeypatch.delenv("PYTEST_PLUGINS", raising=False)
    return kafka_bootstrap


def run_child(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-W", "error", "-p", "no:cacheprovider", "-v",
                                         *args, timeout=CHILD_TIMEOUT)


def assert_clean(result: pytest.RunResult, passed: int, errors: int = 0) -> None:
    result.assert_outcomes(passed=passed, errors=errors, warnings=0)
    summary = [line for line in result.outlines if " in " in line and "passed" in line]
    assert summary and "warning" not in summary[-1], result.stdout.str()


@pytest.mark.parametrize("scope", ["function", "module", "session"])
@pytest.mark.parametrize("mode", ["strict", "auto"])
def test_fixtures_in_every_mode_and_loop_scope(pytester: pytest.Pytester, child_env: str,
                                               mode: str, scope: str) -> None:
    pytester.makeini(ini(mode, scope))
    pytester.makepyfile(
        recorder=RECORDER,
        test_a_marked=MARKED.format(scope=scope),
        test_b_default=DEFAULT.format(mark="@pytest.mark.asyncio" if mode == "strict" else ""),
        test_z_check=CHECK.format(scope=scope),
    )
    result = run_child(pytester)
    assert_clean(result, passed=7)
    header = [line.lower() for line in result.outlines if line.startswith("asyncio: mode=")]
    assert header and mode in header[0], result.outlines[:10]
    assert f"asyncio_default_test_loop_scope={scope}" in header[0]


MIXED = '''
import asyncio

import pytest

from aioproducer import UnknownTopicError


@pytest.fixture
def producer_options():
    return {{"client_id": "custom-client", "linger.ms": 0}}


@pytest.fixture
def mock_producer_options():
    return {{"cluster": {{"orders": 4}}, "auto_complete": False}}


async def _use(producer, mock_producer, topic):
    metadata = await producer.send_and_wait(topic, b"v")
    await producer.flush()
    await mock_producer.flush()
    return metadata


@pytest.mark.asyncio(loop_scope="function")
async def test_function_loop(producer, mock_producer, kafka_topic):
    assert (await _use(producer, mock_producer, kafka_topic)).offset == 0
    assert producer.config.client_id == "custom-client" and producer.config.linger_ms == 0


@pytest.mark.asyncio(loop_scope="module")
async def test_module_loop(producer, mock_producer, kafka_topic):
    await _use(producer, mock_producer, kafka_topic)
    with pytest.raises(UnknownTopicError):
        await mock_producer.send("t", b"v")
    fut = await mock_producer.send("orders", b"v", key=b"k")
    assert not fut.done() and await mock_producer.partitions_for("orders") == [0, 1, 2, 3]


@pytest.mark.asyncio(loop_scope="package")
async def test_package_loop(producer, mock_producer, kafka_topic):
    await _use(producer, mock_producer, kafka_topic)


@pytest.mark.asyncio(loop_scope="class")
class TestClassLoop:
    async def test_one(self, producer, mock_producer, kafka_topic):
        await _use(producer, mock_producer, kafka_topic)

    async def test_two(self, producer, mock_producer, kafka_topic):
        await _use(producer, mock_producer, kafka_topic)


{session_mark}
async def test_session_loop_from_ini(producer, mock_producer, kafka_topic):
    await _use(producer, mock_producer, kafka_topic)
    assert producer is not None
'''


@pytest.mark.parametrize("mode", ["strict", "auto"])
def test_marks_override_the_default_loop_scope(pytester: pytest.Pytester, child_env: str,
                                               mode: str) -> None:
    """Tests of one run in five different loops, each getting a producer in its own."""
    pytester.makeini(ini(mode, "session"))
    pytester.makepyfile(test_mixed=MIXED.format(
        session_mark="@pytest.mark.asyncio" if mode == "strict" else ""))
    assert_clean(run_child(pytester), passed=6)


def test_registered_through_the_entry_point(pytester: pytest.Pytester, child_env: str) -> None:
    (ep,) = [e for e in importlib.metadata.entry_points(group="pytest11")
             if e.name == "aioproducer"]
    assert ep.value == "aioproducer.testing.plugin"
    assert ep.load() is aioproducer.testing.plugin

    pytester.makeini(ini("strict", "function"))
    pytester.makepyfile(test_registered='''
        import aioproducer.testing.plugin

        def test_registered(pytestconfig):
            assert pytestconfig.pluginmanager.get_plugin("aioproducer") is \\
                aioproducer.testing.plugin
    ''')
    result = run_child(pytester, "--trace-config")
    assert_clean(result, passed=1)
    result.stdout.fnmatch_lines([f"*aioproducer-{aioproducer.__version__}*"])

    # -p no:aioproducer turns it off.
    pytester.makepyfile(test_off='''
        def test_off(pytestconfig):
            assert not pytestconfig.pluginmanager.has_plugin("aioproducer")
    ''')
    assert_clean(run_child(pytester, "-p", "no:aioproducer", "test_off.py"), passed=1)


def test_with_plugin_autoload_disabled(pytester: pytest.Pytester, child_env: str,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """With PYTEST_DISABLE_PLUGIN_AUTOLOAD, ``-p aioproducer`` (the entry point name) loads it."""
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makeini(ini("strict", "module"))
    pytester.makepyfile(test_p='''
        import pytest

        @pytest.mark.asyncio
        async def test_p(producer, kafka_topic, mock_producer):
            assert (await producer.send_and_wait(kafka_topic, b"v")).offset == 0
            await mock_producer.send("x", b"v")
    ''')
    assert_clean(run_child(pytester, "-p", "asyncio", "-p", "aioproducer"), passed=1)


def test_local_broker_is_none_with_a_bootstrap(pytester: pytest.Pytester,
                                               child_env: str) -> None:
    """With $AIOPRODUCER_BOOTSTRAP, ``kafka_local_broker`` is None (nothing started)."""
    pytester.makeini(ini("strict", "function"))
    pytester.makepyfile(test_local='''
        import os

        def test_local(kafka_local_broker, kafka_bootstrap):
            assert kafka_local_broker is None
            assert kafka_bootstrap == os.environ["AIOPRODUCER_BOOTSTRAP"]
    ''')
    assert_clean(run_child(pytester), passed=1)


def test_local_broker_is_the_one_kafka_bootstrap_names(kafka_local_broker: Any,
                                                       kafka_bootstrap: str) -> None:
    """Without $AIOPRODUCER_BOOTSTRAP, ``kafka_local_broker`` is the LocalKafka the
    plugin started, and ``kafka_bootstrap`` its address."""
    if kafka_local_broker is None:
        pytest.skip("$AIOPRODUCER_BOOTSTRAP names the broker: no local one")
    assert kafka_local_broker.bootstrap == kafka_bootstrap
    assert kafka_local_broker.status().running


@pytest.mark.slow  # seconds: outside the quick loop (-m 'not broker and not slow')
def test_no_broker_unless_a_test_asks(pytester: pytest.Pytester,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Without $AIOPRODUCER_BOOTSTRAP, only a test using kafka_bootstrap starts a broker."""
    monkeypatch.delenv("AIOPRODUCER_BOOTSTRAP", raising=False)
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    pytester.makeini(ini("auto", "function"))
    pytester.makeconftest('''
        from aioproducer.devbroker import LocalKafka

        def refuse(self, timeout=120.0):
            raise RuntimeError("LocalKafka.start() called for " + str(self.state_dir))

        LocalKafka.start = refuse
    ''')
    pytester.makepyfile(test_lazy='''
        async def test_mock_only(mock_producer):
            await mock_producer.send("t", b"v")

        def test_nothing():
            pass

        def test_wants_a_broker(kafka_bootstrap):
            pass
    ''')
    result = run_child(pytester)
    assert_clean(result, passed=2, errors=1)
    result.stdout.fnmatch_lines(["*LocalKafka.start() called for *aioproducer-kafka*"])


def test_producer_closes_before_the_topic_is_deleted(pytester: pytest.Pytester,
                                                     child_env: str) -> None:
    """What a test leaves buffered is delivered at teardown, whatever the fixture order."""
    pytester.makeini(ini("strict", "function"))
    pytester.makepyfile(test_order='''
        import pytest

        FUTURES = []

        @pytest.fixture
        def producer_options():
            return {"linger_ms": 500, "delivery_timeout_ms": 6000,
                    "request_timeout_ms": 3000}

        @pytest.mark.asyncio
        async def test_topic_first(kafka_topic, producer):
            FUTURES.append(await producer.send(kafka_topic, b"left buffered"))

        @pytest.mark.asyncio
        async def test_producer_first(producer, kafka_topic):
            FUTURES.append(await producer.send(kafka_topic, b"left buffered"))

        def test_all_delivered():
            assert len(FUTURES) == 2
            assert [f.result().offset for f in FUTURES] == [0, 0]
    ''')
    assert_clean(run_child(pytester), passed=3)
