"""The Kafka test harness itself: the local broker, the topic helpers, running Java."""

from __future__ import annotations

import time
from pathlib import Path

import confluent_kafka
import pytest
from support.kafka_util import Consumed, consume_all, create_topic, partition_offsets

from aioproducer import devbroker
from aioproducer.devbroker import LocalKafka, api_versions, fetch_metadata, run_java

JAVA_DIR = Path(__file__).resolve().parents[1] / "support" / "java"


def produce(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes]],
            **config: object) -> None:
    """Produce with confluent-kafka (librdkafka) and fail on any delivery error."""
    errors: list[object] = []

    def report(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(err)

    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **config})
    for key, value in records:
        p.produce(topic, value, key=key, headers=[("h", key), ("none", None)],
                  on_delivery=report)
    assert p.flush(60) == 0
    assert errors == []


def ten_records() -> list[tuple[bytes | None, bytes]]:
    return [(None if i == 3 else f"k{i}".encode(), f"value-{i}".encode()) for i in range(10)]


def test_session_broker_answers(kafka_bootstrap: str, local_kafka: LocalKafka | None) -> None:
    for address in kafka_bootstrap.split(","):
        versions = api_versions(address)
        assert any(v.api_key == 0 for v in versions.api_keys)  # Produce
    md = fetch_metadata(kafka_bootstrap.split(",")[0])
    if local_kafka is not None:
        assert [(b.node_id, f"{b.host}:{b.port}") for b in md.brokers] == [
            (0, kafka_bootstrap)]
        assert kafka_bootstrap.startswith("127.0.0.1:")
    else:
        assert md.brokers


def test_produce_and_consume_back(kafka_bootstrap: str, topic_factory: object) -> None:
    assert callable(topic_factory)
    topic = topic_factory()
    records = ten_records()
    produce(kafka_bootstrap, topic, records)
    got = consume_all(kafka_bootstrap, topic, 10, timeout=30)
    assert [(c.offset, c.key, c.value) for c in got] == [
        (i, k, v) for i, (k, v) in enumerate(records)]
    assert all(isinstance(c, Consumed) and c.topic == topic and c.partition == 0 for c in got)
    assert got[0].headers == [("h", b"k0"), ("none", None)]
    assert got[3].headers == [("h", None), ("none", None)]
    assert all(c.timestamp_type == confluent_kafka.TIMESTAMP_CREATE_TIME for c in got)
    assert all(abs(c.timestamp - time.time() * 1000) < 120_000 for c in got)
    assert partition_offsets(kafka_bootstrap, topic) == {0: (0, 10)}


def test_consume_all_returns_extras_and_stops_at_timeout(kafka_bootstrap: str,
                                                         topic_factory: object) -> None:
    assert callable(topic_factory)
    topic = topic_factory(partitions=3)
    produce(kafka_bootstrap, topic, ten_records())
    # Asking for fewer still returns everything already in the log (duplicates show).
    assert len(consume_all(kafka_bootstrap, topic, 4, timeout=30)) == 10
    # Asking for more returns what there is once the time is up.
    started = time.monotonic()
    assert len(consume_all(kafka_bootstrap, topic, 11, timeout=3)) == 10
    assert time.monotonic() - started < 15
    assert sum(h - lo for lo, h in partition_offsets(kafka_bootstrap, topic).values()) == 10


def test_create_topic_with_config_and_name(kafka_bootstrap: str) -> None:
    name = f"t-named-{time.monotonic_ns()}"
    assert create_topic(kafka_bootstrap, name, partitions=4,
                        config={"min.insync.replicas": "1"}) == name
    assert sorted(partition_offsets(kafka_bootstrap, name)) == [0, 1, 2, 3]
    with pytest.raises(confluent_kafka.KafkaException):
        create_topic(kafka_bootstrap, name)  # already exists
    from support.kafka_util import delete_topic
    delete_topic(kafka_bootstrap, name)
    delete_topic(kafka_bootstrap, name)  # already gone: not an error


def test_status_cli(local_kafka: LocalKafka | None, tmp_path: Path,
                    capsys: pytest.CaptureFixture[str]) -> None:
    assert devbroker.main(["status", "--dir", str(tmp_path / "nothing")]) == 3
    assert devbroker.running_bootstrap(tmp_path / "nothing") is None
    if local_kafka is None:
        pytest.skip("AIOPRODUCER_BOOTSTRAP is set: no local broker to look at")
    capsys.readouterr()
    assert devbroker.main(["status", "--dir", str(local_kafka.state_dir)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == local_kafka.bootstrap
    status = local_kafka.status()
    assert status.running and len(status.nodes) == 1
    assert status.nodes[0].pid == local_kafka.node_pid(0)
    assert devbroker.running_bootstrap(local_kafka.state_dir) == local_kafka.bootstrap
    # Another process sees the same (the state is in cluster.json).
    assert LocalKafka(local_kafka.state_dir).status().running


@pytest.mark.broker  # starts a broker of its own
def test_cli_start_is_idempotent_and_stop_stops(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    state = str(tmp_path / "cli")
    # --ttl bounds the broker's life even if this test dies half-way.
    try:
        assert devbroker.main(["start", "--dir", state, "--ttl", "300"]) == 0
        bootstrap = capsys.readouterr().out.splitlines()[-1]
        assert bootstrap.startswith("127.0.0.1:")
        api_versions(bootstrap)
        pid = LocalKafka(state).node_pid(0)
        assert pid is not None
        assert devbroker.main(["start", "--dir", state]) == 0  # already running: kept
        assert capsys.readouterr().out.splitlines()[-1] == bootstrap
        assert LocalKafka(state).node_pid(0) == pid
    finally:
        assert devbroker.main(["stop", "--dir", state]) == 0
    assert devbroker.main(["status", "--dir", state]) == 3
    assert pid is not None and not devbroker._pid_alive(pid)
    with pytest.raises(OSError):
        api_versions(bootstrap, timeout=1.0)


def test_console_consumer_reads_what_was_produced(kafka_bootstrap: str,
                                                  topic_factory: object) -> None:
    assert callable(topic_factory)
    topic = topic_factory()
    records = ten_records()
    produce(kafka_bootstrap, topic, records)
    done = run_java("org.apache.kafka.tools.consumer.ConsoleConsumer",
                    ["--bootstrap-server", kafka_bootstrap, "--topic", topic,
                     "--from-beginning", "--max-messages", "10", "--timeout-ms", "20000"],
                    timeout=90)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [v.decode() for _, v in records]


@pytest.mark.slow  # seconds: outside the quick loop (-m 'not broker and not slow')
def test_run_java_single_file_source() -> None:
    # Test vectors from Kafka's own UtilsTest.testMurmur2.
    cases = {b"21": -973932308, b"foobar": -790332482,
             b"a-little-bit-long-string": -985981536,
             b"a-little-bit-longer-string": -1486304829,
             b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
             b"abc": 479470107}
    done = run_java(JAVA_DIR / "KeyPartitions.java", ["7"],
                    input="".join(k.hex() + "\n" for k in cases), timeout=90)
    assert done.returncode == 0, done.stderr
    got = [tuple(int(x) for x in line.split()) for line in done.stdout.splitlines()]
    assert got == [(h, (h & 0x7FFFFFFF) % 7) for h in cases.values()]


@pytest.mark.cluster
def test_cluster3_survives_a_node_crash(kafka_cluster3: LocalKafka) -> None:
    cluster = kafka_cluster3
    bootstrap = cluster.bootstrap
    assert len(bootstrap.split(",")) == 3
    assert cluster.broker_ids() == {0, 1, 2}
    topic = create_topic(bootstrap, partitions=3, replication=3,
                         config={"min.insync.replicas": "2"})
    produce(bootstrap, topic, ten_records(), acks="all")

    pid = cluster.node_pid(1)
    assert pid is not None
    cluster.kill_node(1)
    assert cluster.node_pid(1) is None and not devbroker._pid_alive(pid)
    assert not cluster.status().running and cluster.status().degraded
    # Two of three replicas are enough for acks=all with min.insync.replicas=2.
    produce(bootstrap, topic, ten_records(), acks="all", **{"message.timeout.ms": 60000})

    cluster.start_node(1, timeout=60)
    assert cluster.node_pid(1) not in (None, pid)
    for i in range(3):
        assert cluster.broker_ids(i) == {0, 1, 2}
    # The restarted node catches up and is back in every partition's ISR.
    deadline = time.monotonic() + 60
    while True:
        md = fetch_metadata(cluster.node_address(0), [topic])
        isrs = [set(p.isr_nodes) for p in md.topics[0].partitions]
        if all(isr == {0, 1, 2} for isr in isrs):
            break
        assert time.monotonic() < deadline, f"node 1 did not rejoin the ISRs: {isrs}"
        time.sleep(0.2)
    got = consume_all(bootstrap, topic, 20, timeout=60)
    assert sorted(c.value or b"" for c in got) == sorted(
        v for _, v in ten_records() * 2)
    assert cluster.status().running
