"""The `aioproducer` command, end to end as a subprocess against the real broker, with
the records read back (confluent-kafka): perf, produce, broker dispatch, error lines."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from support.kafka_util import Consumed, consume_all, create_topic, delete_topic, partition_offsets

from aioproducer.cli import CliError, LineParser

TopicFactory = Callable[..., str]

_SUMMARY = re.compile(r"^(\d+) records sent, (\d+) failed, (\d+) bytes read in [\d.]+ s "
                      r"\([\d.]+ records/sec, [\d.]+ MB/sec\)\.$")


def cli(*args: str, stdin: bytes | None = None, timeout: float = 120,
        ) -> subprocess.CompletedProcess[str]:
    """``python -m aioproducer ARGS``; stdin is empty unless given."""
    r = subprocess.run([sys.executable, "-m", "aioproducer", *args], input=stdin or b"",
                       capture_output=True, timeout=timeout)
    return subprocess.CompletedProcess(r.args, r.returncode, r.stdout.decode(),
                                       r.stderr.decode())


def summary(stdout: str) -> tuple[int, int, int]:
    """``(sent, failed, bytes read)`` from produce's summary line."""
    m = _SUMMARY.match(stdout.strip().splitlines()[-1])
    assert m, stdout
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def by_offset(records: list[Consumed]) -> list[Consumed]:
    return sorted(records, key=lambda r: (r.partition, r.offset))


def assert_one_error_line(r: subprocess.CompletedProcess[str], message: str) -> None:
    """Exit 1 and exactly one stderr line, ``aioproducer: error: <message...>``."""
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    assert len(r.stderr.splitlines()) == 1, r.stderr
    assert r.stderr.startswith(f"aioproducer: error: {message}"), r.stderr


# -- perf ------------------------------------------------------------------------------

_PERF_LINE = re.compile(
    r"^(\d+) records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg latency, "
    r"[\d.]+ ms max latency, \d+ ms 50th, \d+ ms 95th, \d+ ms 99th, \d+ ms 99.9th\.$",
    re.MULTILINE)
_PERF_DETAIL = re.compile(
    r"^topic=(\S+) elapsed=[\d.]+s latency samples=(\d+) p50=([\d.]+) p95=([\d.]+) "
    r"p99=([\d.]+) p99.9=([\d.]+) ms errors=(\d+)$", re.MULTILINE)


def test_perf_produces_and_reports(kafka_bootstrap: str) -> None:
    r = cli("perf", "--num-records", "20000", "--record-size", "100", "--partitions", "2",
            "--bootstrap-server", kafka_bootstrap, "--no-progress", "--print-metrics")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stderr == ""
    m = _PERF_LINE.search(r.stdout)
    assert m and m.group(1) == "20000", r.stdout  # kafka-producer-perf-test's line
    d = _PERF_DETAIL.search(r.stdout)
    assert d, r.stdout
    topic, samples = d.group(1), int(d.group(2))
    p50, p95, p99, p999 = (float(d.group(i)) for i in (3, 4, 5, 6))
    assert samples == 20000 // 16 and 0 < p50 <= p95 <= p99 <= p999
    assert d.group(7) == "0"
    # --print-metrics: Kafka's "group:name:{tags} : value" lines, from producer.metrics()
    assert re.search(r"^producer-metrics:record-send-total:\{client-id=aioproducer\} +: "
                     r"20000\.000$", r.stdout, re.MULTILINE), r.stdout
    assert re.search(rf"^producer-topic-metrics:record-send-total:\{{client-id=aioproducer, "
                     rf"topic={topic}\}} +: 20000\.000$", r.stdout, re.MULTILINE), r.stdout
    try:
        got = consume_all(kafka_bootstrap, topic, 20000)
        assert len(got) == 20000 and all(len(x.value or b"") == 100 for x in got)
        assert {x.partition for x in got} <= {0, 1} and all(x.key is None for x in got)
    finally:
        delete_topic(kafka_bootstrap, topic)


def test_perf_existing_topic_throughput_and_props(kafka_bootstrap: str,
                                                  topic_factory: TopicFactory) -> None:
    """--topic (existing), --throughput paces the run, --producer-props reach the
    producer (acks=all, linger.ms=0 as Java names; the bootstrap from the props)."""
    topic = topic_factory(partitions=3)
    started = time.monotonic()
    r = cli("perf", "--num-records", "1500", "--record-size", "10", "--topic", topic,
            "--throughput", "1000", "--no-progress",
            "--producer-props", "acks=all", "linger.ms=0", f"bootstrap.servers={kafka_bootstrap}")
    assert r.returncode == 0, r.stdout + r.stderr
    assert time.monotonic() - started >= 1.4
    rate = float(re.search(r"records sent, ([\d.]+) records/sec", r.stdout).group(1))  # type: ignore[union-attr]
    assert rate <= 1100, r.stdout
    assert f"topic={topic} " in r.stdout
    got = consume_all(kafka_bootstrap, topic, 1500)
    assert len(got) == 1500 and all(x.value is not None and len(x.value) == 10 for x in got)


def test_perf_create_topic_with_partitions(kafka_bootstrap: str) -> None:
    topic = f"cli-perf-{os.getpid()}-{time.monotonic_ns()}"
    try:
        r = cli("perf", "--num-records", "100", "--record-size", "1", "--topic", topic,
                "--create-topic", "--partitions", "4", "--bootstrap-server", kafka_bootstrap,
                "--no-progress")
        assert r.returncode == 0, r.stdout + r.stderr
        assert sorted(partition_offsets(kafka_bootstrap, topic)) == [0, 1, 2, 3]
        assert len(consume_all(kafka_bootstrap, topic, 100)) == 100
    finally:
        delete_topic(kafka_bootstrap, topic)


# -- produce ---------------------------------------------------------------------------

def test_produce_file_with_keys_and_headers(kafka_bootstrap: str, topic_factory: TopicFactory,
                                            tmp_path: Path) -> None:
    """Kafka's parse.headers/parse.key line format, read back field for field."""
    topic = topic_factory(partitions=1)
    lines = [
        "trace:abc,tenant:t1\tuser-1\t{\"n\": 1}",       # two headers, key, value
        "\tuser-2\tvalue with\ttabs",                     # no headers; only the 1st tab splits
        "h:\t\t",                                         # empty header value, key and value
        "h:<null>\t<null>\t<null>",                       # the null marker: nulls
        "言語:日本語\tキー\t値 ✓ 🚀",                          # UTF-8 everywhere
        "crlf:yes\tk\tv\r",                               # a CRLF line ending
        "last:no-newline\tk-last\tv-last",                # the last line has no newline
    ]
    data = "\n".join(lines).encode()
    path = tmp_path / "in.txt"
    path.write_bytes(data)
    r = cli("produce", "--bootstrap-server", kafka_bootstrap, "--topic", topic,
            "--file", str(path), "--key-separator", "--headers", "--null-marker", "<null>",
            "--header", "source=cli", "--header", "source=cli")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stderr == ""
    assert summary(r.stdout) == (7, 0, len(data))
    got = by_offset(consume_all(kafka_bootstrap, topic, 7))
    src = ("source", b"cli")  # --header, given twice: the header twice, first
    assert [(x.key, x.value, x.headers) for x in got] == [
        (b"user-1", b'{"n": 1}', [src, src, ("trace", b"abc"), ("tenant", b"t1")]),
        (b"user-2", b"value with\ttabs", [src, src]),
        (b"", b"", [src, src, ("h", b"")]),
        (None, None, [src, src, ("h", None)]),
        ("キー".encode(), "値 ✓ 🚀".encode(), [src, src, ("言語", "日本語".encode())]),
        (b"k", b"v", [src, src, ("crlf", b"yes")]),
        (b"k-last", b"v-last", [src, src, ("last", b"no-newline")]),
    ]
    assert [x.offset for x in got] == list(range(7))
    assert all(x.topic == topic and x.partition == 0 and x.timestamp_type == 1 for x in got)
    now_ms = time.time() * 1000
    assert all(now_ms - 120_000 < x.timestamp <= now_ms + 5_000 for x in got)


def test_produce_stdin_values_only(kafka_bootstrap: str, topic_factory: TopicFactory) -> None:
    """The default: stdin, each line's bytes are the value, null key, no headers; an
    empty line is an empty value; --partition sends everything to one partition."""
    topic = topic_factory(partitions=3)
    data = b"first\n\nthird: a:b\tc\n" + "\u00e9\n".encode() + b"\xff\xfe raw bytes\n"
    r = cli("produce", "--bootstrap-server", kafka_bootstrap, "--topic", topic,
            "--partition", "2", stdin=data)
    assert r.returncode == 0, r.stdout + r.stderr
    assert summary(r.stdout) == (5, 0, len(data))
    got = by_offset(consume_all(kafka_bootstrap, topic, 5))
    assert [(x.partition, x.offset, x.key, x.value, x.headers) for x in got] == [
        (2, 0, None, b"first", []), (2, 1, None, b"", []), (2, 2, None, b"third: a:b\tc", []),
        (2, 3, None, "\u00e9".encode(), []), (2, 4, None, b"\xff\xfe raw bytes", []),
    ]


def test_produce_custom_separators(kafka_bootstrap: str, topic_factory: TopicFactory) -> None:
    """Multi-character separators, as Kafka's testDemarcationsLongerThanOne; '\\t' in
    an option is a tab; '-' is stdin."""
    topic = topic_factory()
    data = b"a=1;b=2|k::v::w\nc=3|key\t\t::value\n"
    r = cli("produce", "--bootstrap-server", kafka_bootstrap, "--topic", topic, "--file", "-",
            "--key-separator", "::", "--headers", "--headers-delimiter", "|",
            "--headers-separator", ";", "--headers-key-separator", "=", stdin=data)
    assert r.returncode == 0, r.stdout + r.stderr
    r2 = cli("produce", "--bootstrap-server", kafka_bootstrap, "--topic", topic,
             "--key-separator", "\\t", stdin=b"tab-key\ttab-value\n")
    assert r2.returncode == 0, r2.stdout + r2.stderr
    got = by_offset(consume_all(kafka_bootstrap, topic, 3))
    assert [(x.key, x.value, x.headers) for x in got] == [
        (b"k", b"v::w", [("a", b"1"), ("b", b"2")]),
        (b"key\t\t", b"value", [("c", b"3")]),
        (b"tab-key", b"tab-value", []),
    ]


def test_produce_line_without_key_separator_stops(kafka_bootstrap: str,
                                                  topic_factory: TopicFactory) -> None:
    """As kafka-console-producer: "No key separator found on line number N: '...'";
    the lines before it are delivered, none after it; exit 1, one error line."""
    topic = topic_factory()
    data = b"k1:v1\nk2:v2\nno separator here\nk4:v4\n"
    r = cli("produce", "--bootstrap-server", kafka_bootstrap, "--topic", topic,
            "--key-separator", ":", stdin=data)
    assert_one_error_line(r, "No key separator found on line number 3: 'no separator here'")
    assert r.stderr.strip() == ("aioproducer: error: No key separator found on line number 3: "
                                "'no separator here'")
    assert summary(r.stdout)[:2] == (2, 0)
    got = by_offset(consume_all(kafka_bootstrap, topic, 2, timeout=15))
    assert [(x.key, x.value) for x in got] == [(b"k1", b"v1"), (b"k2", b"v2")]


def test_produce_header_errors_name_the_line(kafka_bootstrap: str,
                                             topic_factory: TopicFactory) -> None:
    topic = topic_factory()
    r = cli("produce", "--bootstrap-server", kafka_bootstrap, "--topic", topic, "--headers",
            stdin=b"h:1\tv\nno delimiter\n")
    assert_one_error_line(r, "No headers delimiter found on line number 2: 'no delimiter'")
    r = cli("produce", "--bootstrap-server", kafka_bootstrap, "--topic", topic, "--headers",
            stdin=b"h:1,broken\tv\n")
    assert_one_error_line(r, "No header key separator found in pair 'broken' on line "
                             "number 1")
    got = consume_all(kafka_bootstrap, topic, 1, timeout=15)
    assert [(x.key, x.value, x.headers) for x in got] == [(None, b"v", [("h", b"1")])]


def test_produce_ignore_error(kafka_bootstrap: str, topic_factory: TopicFactory) -> None:
    """--ignore-error (Kafka's ignore.error): the whole line is the value, null key."""
    topic = topic_factory()
    r = cli("produce", "--bootstrap-server", kafka_bootstrap, "--topic", topic,
            "--key-separator", ":", "--ignore-error", stdin=b"k:v\nplain line\n")
    assert r.returncode == 0, r.stdout + r.stderr
    got = by_offset(consume_all(kafka_bootstrap, topic, 2))
    assert [(x.key, x.value) for x in got] == [(b"k", b"v"), (None, b"plain line")]


def test_produce_sends_while_stdin_stays_open(kafka_bootstrap: str,
                                              topic_factory: TopicFactory) -> None:
    """Lines typed at a terminal go out at once (the reading thread does not block the
    event loop), and Ctrl-C delivers what was read, then exits 130."""
    topic = topic_factory()
    p = subprocess.Popen(
        [sys.executable, "-m", "aioproducer", "produce", "--bootstrap-server", kafka_bootstrap,
         "--topic", topic], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert p.stdin is not None
        p.stdin.write(b"typed 1\ntyped 2\n")
        p.stdin.flush()
        got = consume_all(kafka_bootstrap, topic, 2, timeout=30)
        assert [x.value for x in by_offset(got)] == [b"typed 1", b"typed 2"]
        assert p.poll() is None  # still reading
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 130, (out, err)
    assert summary(out.decode())[:2] == (2, 0) and err == b""


def test_produce_failed_records_exit_1(kafka_bootstrap: str, topic_factory: TopicFactory,
                                       tmp_path: Path) -> None:
    """A record the broker refuses (bigger than the topic's max.message.bytes) and one
    the producer refuses (bigger than max.request.size) fail; the others are delivered;
    the summary counts them and the exit code is 1."""
    topic = topic_factory(config={"max.message.bytes": "2000"})
    path = tmp_path / "big.txt"
    path.write_bytes(b"x" * 5000 + b"\n")
    r = cli("produce", "--bootstrap-server", kafka_bootstrap, "--topic", topic,
            "--file", str(path))
    assert_one_error_line(r, "1 record(s) failed; first (line number 1): ")
    assert "MessageTooLargeError" in r.stderr or "RecordTooLarge" in r.stderr, r.stderr
    assert summary(r.stdout) == (0, 1, 5001)

    data = b"small\n" + b"y" * 1500 + b"\nsmall again\n"
    r = cli("produce", "--bootstrap-server", kafka_bootstrap, "--topic", topic,
            "--producer-props", "max.request.size=1000", stdin=data)
    assert_one_error_line(r, "1 record(s) failed; first (line number 2): RecordTooLargeError")
    assert summary(r.stdout) == (2, 1, len(data))
    got = by_offset(consume_all(kafka_bootstrap, topic, 2, timeout=15))
    assert [x.value for x in got] == [b"small", b"small again"]


def test_produce_progress_and_bulk(kafka_bootstrap: str, topic_factory: TopicFactory,
                                   tmp_path: Path) -> None:
    """A bigger file (many read chunks, lines across chunk boundaries), on uvloop."""
    topic = topic_factory(partitions=2)
    n = 50_000
    path = tmp_path / "bulk.txt"
    path.write_bytes(b"".join(b"key-%d,value-%d\n" % (i, i) for i in range(n)))
    r = cli("produce", "--bootstrap-server", kafka_bootstrap, "--topic", topic,
            "--file", str(path), "--key-separator", ",", "--uvloop")
    assert r.returncode == 0, r.stdout + r.stderr
    assert summary(r.stdout) == (n, 0, path.stat().st_size)
    got = consume_all(kafka_bootstrap, topic, n)
    assert len(got) == n
    pairs = {(x.key, x.value) for x in got}
    assert pairs == {(b"key-%d" % i, b"value-%d" % i) for i in range(n)}


def _on_a_terminal(*args: str) -> tuple[int, str, str]:
    """Run the command with stderr on a pseudo-terminal: ``(exit code, stdout, what the
    terminal showed)``."""
    import pty
    import threading

    master, slave = pty.openpty()
    shown: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the last writer closed
                return
            if not data:
                return
            shown.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    env = dict(os.environ, TERM="xterm-256color", COLUMNS="120")
    try:
        r = subprocess.run([sys.executable, "-m", "aioproducer", *args], stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=slave, env=env, timeout=120)
    finally:
        os.close(slave)
        reader.join(10)
        os.close(master)
    return r.returncode, r.stdout.decode(), b"".join(shown).decode(errors="replace")


def test_progress_bars_on_a_terminal(kafka_bootstrap: str, topic_factory: TopicFactory,
                                     tmp_path: Path) -> None:
    """perf shows records done / total and records/s; produce shows bytes read / the
    file's size and records/s. The bars go to stderr and are gone at the end."""
    code, out, shown = _on_a_terminal(
        "perf", "--num-records", "30000", "--record-size", "100", "--throughput", "20000",
        "--bootstrap-server", kafka_bootstrap)
    assert code == 0, out + shown
    assert "producing" in shown and "/30000" in shown and "rec/s" in shown, shown
    assert _PERF_LINE.search(out) and "producing" not in out
    delete_topic(kafka_bootstrap, _PERF_DETAIL.search(out).group(1))  # type: ignore[union-attr]

    topic = topic_factory()
    path = tmp_path / "lines.txt"
    path.write_bytes(b"".join(b"%099d\n" % i for i in range(200_000)))
    code, out, shown = _on_a_terminal("produce", "--bootstrap-server", kafka_bootstrap,
                                      "--topic", topic, "--file", str(path))
    assert code == 0, out + shown
    assert "producing" in shown and "/20.0 MB" in shown and "rec/s" in shown, shown
    assert summary(out) == (200_000, 0, 20_000_000)


# -- errors: one line, no traceback ----------------------------------------------------

def test_errors_are_one_line_without_traceback(kafka_bootstrap: str, tmp_path: Path) -> None:
    b = kafka_bootstrap
    existing = create_topic(b, partitions=2)
    try:
        cases: list[tuple[tuple[str, ...], str]] = [
            (("perf", "--num-records", "10", "--record-size", "10", "--bootstrap-server",
              "127.0.0.1:1", "--no-progress", "--topic", "t", "--producer-props",
              "max.block.ms=1000"), "KafkaConnectionError: could not bootstrap"),
            (("produce", "--bootstrap-server", "127.0.0.1:1", "--topic", "t",
              "--producer-props", "max.block.ms=1000"), "KafkaConnectionError"),
            (("produce", "--bootstrap-server", b, "--topic", "no-such-topic-cli"),
             "topic 'no-such-topic-cli' does not exist"),
            (("perf", "--num-records", "10", "--record-size", "10", "--bootstrap-server", b,
              "--topic", "no-such-topic-cli"), "topic 'no-such-topic-cli' does not exist"),
            (("produce", "--bootstrap-server", b, "--topic", existing, "--producer-props",
              "linger.ms"), "--producer-props expects KEY=VALUE, got 'linger.ms'"),
            (("produce", "--bootstrap-server", b, "--topic", existing, "--producer-props",
              "no.such.option=1"), "ConfigError: unknown producer option"),
            (("perf", "--num-records", "10", "--record-size", "10", "--bootstrap-server", b,
              "--producer-props", "acks=2"), "ConfigError: acks must be"),
            (("produce", "--bootstrap-server", b, "--topic", existing, "--file",
              str(tmp_path / "missing.txt")),
             f"cannot read {tmp_path / 'missing.txt'}: No such file or directory"),
            (("produce", "--bootstrap-server", b, "--topic", existing, "--partition", "2"),
             f"--partition 2 is out of range: topic '{existing}' has 2 partition(s)"),
            (("produce", "--bootstrap-server", b, "--topic", existing, "--headers",
              "--headers-separator", ":"),
             "--headers-separator and --headers-key-separator may not be equal"),
        ]
        for args, message in cases:
            r = cli(*args, stdin=b"k:v\n", timeout=60)
            assert_one_error_line(r, message)
            assert "records sent" not in r.stdout  # nothing was read before the check
        # A command-line mistake: one line too, exit 2 (argparse's code).
        r = cli("produce", "--topic", existing, "--partition", "x")
        assert r.returncode == 2 and r.stdout == "", r.stdout + r.stderr
        assert r.stderr == ("aioproducer: error: argument --partition: invalid int value: "
                            "'x' (see 'aioproducer produce --help')\n")
        # --debug (before or after the command): the traceback instead
        for args in (("--debug", "produce"), ("produce", "--debug")):
            r = cli(*args, "--bootstrap-server", b, "--topic", "no-such-topic-cli")
            assert r.returncode == 1 and "Traceback" in r.stderr, r.stderr
            assert "CliError: topic 'no-such-topic-cli' does not exist" in r.stderr
    finally:
        delete_topic(b, existing)


@pytest.mark.slow  # seconds: outside the quick loop (-m 'not broker and not slow')
def test_broker_subcommand_passes_everything_through(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "aioproducer", "broker", "status", "--dir",
                        str(tmp_path / "none")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 3, r.stdout + r.stderr
    r = subprocess.run([sys.executable, "-m", "aioproducer", "broker", "--help"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "start" in r.stdout


# -- the line format, without a broker (Kafka's LineMessageReaderTest cases) -----------

def _kafka_parser(**overrides: object) -> LineParser:
    options: dict[str, object] = {"key_separator": "\t", "parse_headers": True}
    options.update(overrides)
    return LineParser(**options)  # type: ignore[arg-type]


@pytest.mark.parametrize(("options", "line", "expected"), [
    ({"parse_headers": False}, b"key0\tvalue0", (b"key0", b"value0", None)),
    ({}, b"hk0:hv0,hk1:hv1\tkey0\tvalue0",
     (b"key0", b"value0", [("hk0", b"hv0"), ("hk1", b"hv1")])),
    ({}, b":\t\t", (b"", b"", [("", b"")])),
    ({"parse_headers": False}, b"key\t", (b"key", b"", None)),
    ({"key_separator": "\t\t", "headers_delimiter": "\t\t", "headers_separator": "---",
      "headers_key_separator": "::::"}, b"h0::::v0---h1::::\t\tkey\t\tvalue",
     (b"key", b"value", [("h0", b"v0"), ("h1", b"")])),
    ({"key_separator": None}, b"hk:hv\tvalue", (None, b"value", [("hk", b"hv")])),
    ({"key_separator": None, "parse_headers": False}, b"value", (None, b"value", None)),
    ({"ignore_error": True}, b"hk:hv\tkey2[MISSING]value2",
     (None, b"key2[MISSING]value2", [("hk", b"hv")])),
    ({"ignore_error": True}, b"hk:hv[MISSING]key3[MISSING]value3",
     (None, b"hk:hv[MISSING]key3[MISSING]value3", None)),
    ({"ignore_error": True}, b"key-val\tkey0\tvalue0", (b"key0", b"value0", [("key-val", None)])),
    ({"parse_headers": False, "null_marker": "<NULL>"}, b"key\t<NULL>", (b"key", None, None)),
    ({"parse_headers": False, "null_marker": "<NULL>"}, b"key\t<NULL>value",
     (b"key", b"<NULL>value", None)),
    ({"parse_headers": False, "null_marker": "<NULL>"}, b"<NULL>\t<NULL>", (None, None, None)),
    ({"parse_headers": False}, b"<NULL>\t<NULL>", (b"<NULL>", b"<NULL>", None)),
    ({"null_marker": "<NULL>"}, b"<NULL>\tkey\t<NULL>", (b"key", None, None)),
    ({"null_marker": "<NULL>"}, b"h0:<NULL>,h1:v1\tkey\t<NULL>",
     (b"key", None, [("h0", None), ("h1", b"v1")])),
    ({"static_headers": [("s", b"1")]}, b"h:2\tk\tv", (b"k", b"v", [("s", b"1"), ("h", b"2")])),
    ({"static_headers": [("s", b"1")], "parse_headers": False}, b"k\tv",
     (b"k", b"v", [("s", b"1")])),
])
def test_line_format_as_kafka(options: dict[str, object], line: bytes,
                              expected: tuple[object, object, object]) -> None:
    assert _kafka_parser(**options).parse(line, 1) == expected


@pytest.mark.parametrize(("options", "line", "message"), [
    ({}, b"h:1\tkey1[MISSING]value1",
     "No key separator found on line number 7: 'h:1\tkey1[MISSING]value1'"),
    ({}, b"key[MISSING]val\tkey0\tvalue0",
     "No header key separator found in pair 'key[MISSING]val' on line number 7"),
    ({}, b"no delimiter", "No headers delimiter found on line number 7: 'no delimiter'"),
    ({"null_marker": "<NULL>"}, b"<NULL>:v0,h1:v1\tkey\tvalue",
     "Header keys should not be equal to the null marker '<NULL>'"),
])
def test_line_format_errors(options: dict[str, object], line: bytes, message: str) -> None:
    with pytest.raises(CliError) as info:
        _kafka_parser(**options).parse(line, 7)
    assert str(info.value).startswith(message)


@pytest.mark.parametrize(("options", "message"), [
    ({"headers_separator": "\t"}, "--headers-delimiter and --headers-separator may not be equal"),
    ({"headers_key_separator": "\t"},
     "--headers-delimiter and --headers-key-separator may not be equal"),
    ({"headers_separator": ":"},
     "--headers-separator and --headers-key-separator may not be equal"),
    ({"null_marker": ","}, "--headers-separator and --null-marker may not be equal"),
    ({"key_separator": ""}, "--key-separator must not be empty"),
])
def test_line_format_bad_options(options: dict[str, object], message: str) -> None:
    with pytest.raises(CliError, match=re.escape(message)):
        _kafka_parser(**options)
