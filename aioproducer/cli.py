"""The ``aioproducer`` command: ``perf`` (like kafka-producer-perf-test), ``produce`` (like
kafka-console-producer) and ``broker`` (the local development broker).

Errors print one line, ``aioproducer: error: ...``, and exit non-zero; ``--debug`` shows
the traceback instead.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import functools
import logging
import os
import queue
import stat
import sys
import threading
import time
import uuid
from collections.abc import Coroutine, Sequence
from typing import IO, TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from .config import ProducerConfig
    from .producer import Producer

__all__ = ["main"]

_LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


class CliError(Exception):
    """A usage or input error: printed as ``aioproducer: error: <message>``, exit 1."""


# -- options shared by the commands ----------------------------------------------------

def _parse_props(items: Sequence[str]) -> dict[str, str]:
    props: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise CliError(f"--producer-props expects KEY=VALUE, got {item!r}")
        props[name.strip()] = value.strip()
    return props


def _coerce(value: str) -> Any:
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    try:
        return int(value)
    except ValueError:
        return value


def _is_bootstrap_option(name: str) -> bool:
    return name.replace(".", "_").replace("-", "_").lower() == "bootstrap_servers"


def _producer_config(args: argparse.Namespace) -> ProducerConfig:
    """The producer's options from ``--producer-props`` and ``--bootstrap-server``.

    The bootstrap servers: ``--bootstrap-server``, else ``bootstrap.servers`` in
    ``--producer-props``, else ``$AIOPRODUCER_BOOTSTRAP``, else the local dev broker
    (``aioproducer broker start``) if it runs.
    """
    from .config import ProducerConfig

    options: dict[str, Any] = {k: _coerce(v) for k, v in _parse_props(args.producer_props).items()}
    given = [k for k in options if _is_bootstrap_option(k)]
    if args.bootstrap_server:
        for k in given:
            del options[k]
        options["bootstrap_servers"] = args.bootstrap_server
    elif not given:
        bootstrap = os.environ.get("AIOPRODUCER_BOOTSTRAP")
        if not bootstrap:
            from . import devbroker
            bootstrap = devbroker.running_bootstrap()
        if not bootstrap:
            raise CliError("no --bootstrap-server given and no local broker running "
                           "(start one with 'aioproducer broker start')")
        options["bootstrap_servers"] = bootstrap
    return ProducerConfig.from_options(options).validated()


async def _prepare_topic(config: ProducerConfig, topic: str, *,
                         create_partitions: int | None = None,
                         partition: int | None = None) -> None:
    """Check (or create) ``topic`` before producing, so that a wrong name fails at once
    instead of after ``max.block.ms``. Connects with the producer's own settings."""
    from .errors import for_code
    from .net.admin import Admin
    from .net.client import KafkaClient
    from .net.security import security_from_config

    client = KafkaClient(
        config.servers, client_id=f"{config.client_id}-cli",
        request_timeout_ms=config.request_timeout_ms,
        connect_timeout_ms=config.socket_connection_setup_timeout_ms,
        reconnect_backoff_ms=config.reconnect_backoff_ms,
        reconnect_backoff_max_ms=config.reconnect_backoff_max_ms,
        security=security_from_config(config))
    try:
        response = await client.bootstrap(config.max_block_ms / 1000.0, topics=[topic])
        if create_partitions is not None:
            await Admin(client).create_topics([(topic, create_partitions, -1, {})],
                                              config.request_timeout_ms / 1000.0,
                                              exist_ok=True)
            return
        found = next((t for t in response.topics if str(t.name) == topic), None)
        code = int(found.error_code) if found is not None else 3
        if code == 3:  # UNKNOWN_TOPIC_OR_PARTITION
            raise CliError(f"topic {topic!r} does not exist (the producer does not create "
                           "topics; create it, or check the name)")
        if code == 29:  # TOPIC_AUTHORIZATION_FAILED
            raise for_code(code, f"not authorized to access topic {topic!r}")
        if code == 0 and found is not None and partition is not None:
            count = len(found.partitions)
            if not 0 <= partition < count:
                raise CliError(f"--partition {partition} is out of range: topic {topic!r} "
                               f"has {count} partition(s)")
    finally:
        await client.close()


class _Outcomes:
    """Every record's future until it is done: counts failures without a callback per
    record. Futures complete roughly in send order, so done ones are dropped from the
    front as they complete; the rest are checked after the final flush."""

    def __init__(self) -> None:
        self.pending: collections.deque[tuple[Any, int]] = collections.deque()
        self.failed = 0
        self.acked = 0
        self.first_error: BaseException | None = None
        self.first_error_at = 0

    def _done(self, fut: Any, where: int) -> None:
        exc = fut.exception()
        if exc is None:
            self.acked += 1
        else:
            self.record_failure(exc, where)

    def record_failure(self, exc: BaseException, where: int) -> None:
        self.failed += 1
        if self.first_error is None:
            self.first_error, self.first_error_at = exc, where

    def prune(self) -> None:
        pending = self.pending
        while pending and pending[0][0].done():
            fut, where = pending.popleft()
            self._done(fut, where)

    def finish(self) -> None:
        """After ``flush()``: account for everything still pending."""
        pending = self.pending
        while pending:
            fut, where = pending.popleft()
            if fut.done():
                self._done(fut, where)
            else:  # not acknowledged (close() fails what is left, so rarely seen)
                self.record_failure(RuntimeError("not acknowledged"), where)


def _console() -> Any:
    from rich.console import Console
    return Console(stderr=True)


def _run(coro: Coroutine[Any, Any, int], use_uvloop: bool) -> int:
    if use_uvloop:
        import uvloop
        return int(uvloop.run(coro))
    return asyncio.run(coro)


# -- perf ------------------------------------------------------------------------------

def _percentile(sorted_values: list[float], q: float) -> float:
    """As kafka-producer-perf-test: the value at index ``int(q * n)``."""
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def _ms(value: float) -> int:
    return 0 if value != value else int(value)  # NaN (no samples) prints as 0


async def _perf(args: argparse.Namespace) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from .producer import Producer

    if args.num_records < 1 or args.record_size < 0:
        raise CliError("--num-records must be >= 1 and --record-size >= 0")
    config = _producer_config(args)
    topic = args.topic
    if topic is None:
        topic = f"aioproducer-perf-{uuid.uuid4().hex[:8]}"
    create = args.create_topic or args.topic is None
    await _prepare_topic(config, topic, create_partitions=args.partitions if create else None)

    payload = os.urandom(args.record_size)
    n = args.num_records
    # Latency is sampled on every 16th record to keep the measurement cheap (one
    # callback per sample); failures are counted for every record by the producer's
    # record-error-total metric.
    sample_every = 16
    latencies: list[float] = []
    errors: list[tuple[int, BaseException]] = []

    def on_done(sent_at: float, i: int, fut: Any) -> None:
        exc = fut.exception()
        if exc is None:
            latencies.append((time.perf_counter() - sent_at) * 1000.0)
        else:
            errors.append((i, exc))

    period = 1.0 / args.throughput if args.throughput and args.throughput > 0 else 0.0
    console = _console()
    progress = Progress(
        TextColumn("[bold]producing[/bold]"), BarColumn(), MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"), TimeElapsedColumn(),
        console=console, disable=args.no_progress or not console.is_terminal,
        transient=True,
    )
    producer = Producer(config)
    await producer.start()
    metrics: Any = None
    last: Any = None
    try:
        start = time.perf_counter()
        next_update = start
        with progress:
            task = progress.add_task("produce", total=n, rate="")
            chunk = 8192
            for i in range(n):
                last = await producer.send(topic, payload)
                if i % sample_every == 0:
                    last.add_done_callback(functools.partial(on_done, time.perf_counter(), i))
                if period:
                    delay = start + (i + 1) * period - time.perf_counter()
                    if delay > 0:
                        await asyncio.sleep(delay)
                if i % chunk == chunk - 1 or period:
                    now = time.perf_counter()
                    if now >= next_update:
                        next_update = now + 0.1
                        progress.update(task, completed=i + 1,
                                        rate=f"{(i + 1) / (now - start):,.0f} rec/s")
                    if not period:
                        await asyncio.sleep(0)
            await producer.flush()
            elapsed = time.perf_counter() - start
            progress.update(task, completed=n)
        metrics = producer.metrics()
        if last is not None and last.exception() is not None and not errors:
            errors.append((n - 1, last.exception()))
    finally:
        await producer.close()

    latencies.sort()
    failed = int(metrics.get("record-error-total", 0)) or len(errors)
    sent = n - failed
    rate = sent / elapsed
    mb = rate * args.record_size / (1024 * 1024)
    avg = sum(latencies) / len(latencies) if latencies else float("nan")
    mx = latencies[-1] if latencies else float("nan")
    pcts = [_percentile(latencies, q) for q in (0.50, 0.95, 0.99, 0.999)]
    # The line kafka-producer-perf-test prints (its format, its whole milliseconds)...
    print(f"{sent} records sent, {rate:.1f} records/sec ({mb:.2f} MB/sec), "
          f"{avg:.2f} ms avg latency, {mx:.2f} ms max latency, "
          f"{_ms(pcts[0])} ms 50th, {_ms(pcts[1])} ms 95th, {_ms(pcts[2])} ms 99th, "
          f"{_ms(pcts[3])} ms 99.9th.")
    # ... and the percentiles to 0.01 ms (sub-millisecond latencies are common here).
    print(f"topic={topic} elapsed={elapsed:.2f}s latency samples={len(latencies)} "
          f"p50={pcts[0]:.2f} p95={pcts[1]:.2f} p99={pcts[2]:.2f} p99.9={pcts[3]:.2f} ms "
          f"errors={failed}")
    if args.print_metrics:
        _print_metrics(metrics, config.client_id)
    if failed:
        first = f"; first: {type(errors[0][1]).__name__}: {errors[0][1]}" if errors else ""
        raise CliError(f"{failed} of {n} records failed{first}")
    return 0


def _print_metrics(metrics: Any, client_id: str) -> None:
    """As kafka-producer-perf-test --print-metrics: ``group:name:{tags} : value``."""
    rows: list[tuple[str, float]] = []
    for name, value in metrics.items():
        rows.append((f"producer-metrics:{name}:{{client-id={client_id}}}", value))
    for topic, values in sorted(metrics.topics.items()):
        for name, value in values.items():
            rows.append((f"producer-topic-metrics:{name}:{{client-id={client_id}, "
                         f"topic={topic}}}", value))
    for node, values in sorted(metrics.nodes.items()):
        for name, value in values.items():
            rows.append((f"producer-node-metrics:{name}:{{client-id={client_id}, "
                         f"node-id=node-{node}}}", value))
    rows.sort()
    width = max((len(r[0]) for r in rows), default=11)
    print()
    print(f"{'Metric Name':<{width}}   Value")
    for label, value in rows:
        print(f"{label:<{width}} : {value:.3f}")


# -- produce ---------------------------------------------------------------------------

def _unescape(text: str) -> str:
    """``\\t``, ``\\n``, ``\\r`` and ``\\\\`` in separators given on the command line."""
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text) and text[i + 1] in "tnr\\":
            out.append({"t": "\t", "n": "\n", "r": "\r", "\\": "\\"}[text[i + 1]])
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _shown(line: bytes, limit: int = 200) -> str:
    text = line.decode("utf-8", "replace")
    return text if len(text) <= limit else text[:limit] + "..."


class LineParser:
    """Lines to records as kafka-console-producer's ``LineMessageReader`` does.

    A line is ``[headers <headers-delimiter>] [key <key-separator>] value``; headers are
    ``k1<headers-key-separator>v1<headers-separator>k2...``. Everything is bytes (the
    line's UTF-8); header keys are decoded to ``str``. ``null_marker``: a key, value or
    header value equal to it is null. ``ignore_error``: a line without the key separator
    (or headers delimiter) gets a null key (no headers), as Kafka's ``ignore.error``.
    """

    def __init__(self, *, key_separator: str | None = None, parse_headers: bool = False,
                 headers_delimiter: str = "\t", headers_separator: str = ",",
                 headers_key_separator: str = ":", null_marker: str | None = None,
                 ignore_error: bool = False,
                 static_headers: Sequence[tuple[str, bytes]] = ()) -> None:
        if key_separator == "":
            raise CliError("--key-separator must not be empty")
        if parse_headers:
            names = {"--headers-delimiter": headers_delimiter,
                     "--headers-separator": headers_separator,
                     "--headers-key-separator": headers_key_separator}
            if null_marker is not None:
                names["--null-marker"] = null_marker
            items = list(names.items())
            for i, (a, va) in enumerate(items):
                if not va:
                    raise CliError(f"{a} must not be empty")
                for b, vb in items[i + 1:]:
                    if va == vb:
                        raise CliError(f"{a} and {b} may not be equal")
        self.key_separator = key_separator.encode() if key_separator is not None else None
        self.parse_headers = parse_headers
        self.headers_delimiter = headers_delimiter.encode()
        self.headers_separator = headers_separator.encode()
        self.headers_key_separator = headers_key_separator.encode()
        self.null_marker = null_marker.encode() if null_marker is not None else None
        self.ignore_error = ignore_error
        self.static_headers = list(static_headers)

    def parse(self, line: bytes, number: int
              ) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]] | None]:
        """``(key, value, headers)`` for line ``number`` (from 1); raises CliError."""
        rest = line
        headers: list[tuple[str, bytes | None]] | None = (
            list(self.static_headers) if self.static_headers else None)
        if self.parse_headers:
            i = rest.find(self.headers_delimiter)
            if i < 0:
                if not self.ignore_error:
                    raise CliError(f"No headers delimiter found on line number {number}: "
                                   f"'{_shown(line)}'")
            else:
                part, rest = rest[:i], rest[i + len(self.headers_delimiter):]
                if part and part != self.null_marker:
                    headers = (headers or []) + self._headers(part, number)
        key = None
        if self.key_separator is not None:
            i = rest.find(self.key_separator)
            if i < 0:
                if not self.ignore_error:
                    raise CliError(f"No key separator found on line number {number}: "
                                   f"'{_shown(line)}'")
            else:
                key, rest = rest[:i], rest[i + len(self.key_separator):]
                if key == self.null_marker:
                    key = None
        value: bytes | None = None if rest == self.null_marker else rest
        return key, value, headers

    def _headers(self, part: bytes, number: int) -> list[tuple[str, bytes | None]]:
        out: list[tuple[str, bytes | None]] = []
        for pair in part.split(self.headers_separator):
            if not pair:
                continue
            i = pair.find(self.headers_key_separator)
            hvalue: bytes | None
            if i < 0:
                if not self.ignore_error:
                    raise CliError(f"No header key separator found in pair '{_shown(pair)}' "
                                   f"on line number {number}")
                hkey, hvalue = pair, None
            else:
                hkey, hvalue = pair[:i], pair[i + len(self.headers_key_separator):]
                if hvalue == self.null_marker:
                    hvalue = None
            if hkey == self.null_marker:
                raise CliError(f"Header keys should not be equal to the null marker "
                               f"'{_shown(hkey)}' as they can't be null (line number {number})")
            try:
                name = hkey.decode("utf-8")
            except UnicodeDecodeError:
                raise CliError(f"header key '{_shown(hkey)}' on line number {number} is not "
                               "valid UTF-8") from None
            out.append((name, hvalue))
        return out


def _open_input(path: str | None) -> tuple[IO[bytes], int | None, str]:
    """The input (binary), its size if it is a regular file, and its name for messages."""
    if path is None or path == "-":
        stream: IO[bytes] = sys.stdin.buffer
        name = "<stdin>"
    else:
        try:
            stream = open(path, "rb")  # noqa: SIM115 (closed by the caller)
        except OSError as exc:
            raise CliError(f"cannot read {path}: {exc.strerror or exc}") from None
        name = path
    try:
        st = os.fstat(stream.fileno())
        size = st.st_size if stat.S_ISREG(st.st_mode) else None
    except (OSError, ValueError):
        size = None
    return stream, size, name


class _ChunkReader:
    """Reads ``stream`` in a daemon thread, one chunk ahead: stdin may block for ever,
    and the event loop (the producer's Sender) must keep running meanwhile. A daemon
    thread, so that a read still blocked at exit (Ctrl-C on a terminal) does not hold
    the process.

    The thread reads the file descriptor with ``os.read``, not the buffered stream: a
    daemon thread blocked in ``BufferedReader.read1`` holds the reader's lock, and the
    interpreter, flushing ``sys.stdin`` at exit, then aborts ("Fatal Python error:
    _enter_buffered_busy"). ``os.read`` holds no lock while it waits."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._loop = asyncio.get_running_loop()
        fd = stream.fileno()
        self._read = functools.partial(os.read, fd)
        self._requests: queue.SimpleQueue[asyncio.Future[tuple[bytes, BaseException | None]]
                                          | None] = queue.SimpleQueue()
        self._next: asyncio.Future[tuple[bytes, BaseException | None]] | None = None
        threading.Thread(target=self._run, name="aioproducer-produce-reader",
                         daemon=True).start()

    def _run(self) -> None:
        while True:
            fut = self._requests.get()
            if fut is None:
                return
            try:
                result: tuple[bytes, BaseException | None] = (self._read(1 << 16), None)
            except Exception as exc:  # handed to the event loop
                result = (b"", exc)
            try:
                self._loop.call_soon_threadsafe(self._resolve, fut, result)
            except RuntimeError:  # the loop is closed: nobody is listening any more
                return

    @staticmethod
    def _resolve(fut: asyncio.Future[tuple[bytes, BaseException | None]],
                 result: tuple[bytes, BaseException | None]) -> None:
        if not fut.done():
            fut.set_result(result)

    def _request(self) -> None:
        self._next = self._loop.create_future()
        self._requests.put(self._next)

    async def read(self) -> bytes:
        """The next chunk, ``b""`` at the end; asks for the one after at once."""
        if self._next is None:
            self._request()
        assert self._next is not None
        data, exc = await self._next
        self._next = None
        if exc is not None:
            raise exc
        if data:
            self._request()
        return data

    def close(self) -> None:
        self._requests.put(None)


async def _produce(args: argparse.Namespace) -> int:
    from .producer import Producer

    static: list[tuple[str, bytes]] = []
    for item in args.header:  # kept as given: repeated keys are repeated headers
        hkey, sep, hvalue = item.partition("=")
        if not sep:
            raise CliError(f"--header expects KEY=VALUE, got {item!r}")
        static.append((hkey, hvalue.encode()))
    parser = LineParser(
        key_separator=_unescape(args.key_separator) if args.key_separator is not None else None,
        parse_headers=args.headers, headers_delimiter=_unescape(args.headers_delimiter),
        headers_separator=_unescape(args.headers_separator),
        headers_key_separator=_unescape(args.headers_key_separator),
        null_marker=args.null_marker, ignore_error=args.ignore_error, static_headers=static)
    if args.partition is not None and args.partition < 0:
        raise CliError(f"--partition must be >= 0, got {args.partition}")
    config = _producer_config(args)
    stream, size, name = _open_input(args.file)
    try:
        await _prepare_topic(config, args.topic, partition=args.partition)
        producer = Producer(config)
        await producer.start()
        return await _produce_lines(args, producer, parser, stream, size, name)
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()


async def _produce_lines(args: argparse.Namespace, producer: Producer, parser: LineParser,
                         stream: IO[bytes], size: int | None, name: str) -> int:
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from .errors import RecordTooLargeError

    console = _console()
    progress = Progress(
        TextColumn("[bold]producing[/bold]"), BarColumn(), DownloadColumn(),
        TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), TimeRemainingColumn(),
        console=console, transient=True,
        disable=args.no_progress or size is None or not console.is_terminal)
    topic, partition = args.topic, args.partition
    outcomes = _Outcomes()
    track = outcomes.pending.append
    send = producer.send
    parse = parser.parse
    records = nbytes = 0
    failure: BaseException | None = None
    start = time.perf_counter()
    reader = _ChunkReader(stream)
    try:
        with progress:
            task = progress.add_task("produce", total=size, rate="")
            tail = b""
            eof = False
            while not eof:
                try:
                    chunk = await reader.read()
                except OSError as exc:
                    raise CliError(f"cannot read {name}: {exc.strerror or exc}") from None
                nbytes += len(chunk)
                if chunk:
                    lines = (tail + chunk).split(b"\n")
                    tail = lines.pop()
                else:
                    eof = True
                    lines = [tail] if tail else []
                for line in lines:
                    records += 1
                    if line.endswith(b"\r"):
                        line = line[:-1]
                    key, value, headers = parse(line, records)
                    try:
                        fut = await send(topic, value, key, partition=partition,
                                         headers=headers)
                    except RecordTooLargeError as exc:
                        # This record only (Java's send() returns a failed future).
                        outcomes.record_failure(exc, records)
                        continue
                    track((fut, records))
                outcomes.prune()
                elapsed = time.perf_counter() - start
                progress.update(task, completed=nbytes,
                                rate=f"{records / max(elapsed, 1e-9):,.0f} rec/s")
    except (Exception, asyncio.CancelledError) as exc:
        failure = exc
    finally:
        reader.close()
        # As the console producer's shutdown hook: what was sent is delivered first.
        await producer.close()
        outcomes.finish()
    elapsed = max(time.perf_counter() - start, 1e-9)
    print(f"{outcomes.acked} records sent, {outcomes.failed} failed, {nbytes} bytes read "
          f"in {elapsed:.2f} s ({outcomes.acked / elapsed:.1f} records/sec, "
          f"{nbytes / elapsed / (1024 * 1024):.2f} MB/sec).", flush=True)
    if failure is not None:
        raise failure
    if outcomes.failed:
        first = outcomes.first_error
        raise CliError(f"{outcomes.failed} record(s) failed; first (line number "
                       f"{outcomes.first_error_at}): {type(first).__name__}: {first}")
    return 0


# -- the command -----------------------------------------------------------------------

class _Parser(argparse.ArgumentParser):
    """A command-line mistake is one line too (and exit 2), with a pointer to --help."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"aioproducer: error: {message} (see '{self.prog} --help')\n")


def _version_line() -> str:
    """``aioproducer X.Y.Z (CPython 3.12.1, GIL on)``: the package, the interpreter, and
    whether the GIL runs (a free-threaded build re-enables it for the compiled core)."""
    import platform

    from ._version import __version__

    gil = getattr(sys, "_is_gil_enabled", lambda: True)()
    return (f"aioproducer {__version__} ({platform.python_implementation()} "
            f"{platform.python_version()}, GIL {'on' if gil else 'off'})")


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="aioproducer", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="aioproducer's command line: perf (as kafka-producer-perf-test), produce\n"
                    "(as kafka-console-producer) and broker (the local development broker).",
        epilog="Errors print one line (aioproducer: error: ...) and exit 1; --debug shows "
               "the traceback.")
    # Accepted before or after the command; SUPPRESS keeps a sub-command's default from
    # overwriting a value given before it.
    common = _Parser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show tracebacks on errors")
    common.add_argument("--log-level", choices=_LOG_LEVELS, default=argparse.SUPPRESS,
                        help="log the producer's aioproducer.* loggers from this level, to "
                             "stderr (default: error)")
    parser.add_argument("--version", action="version", version=_version_line(),
                        help="print aioproducer's version (and Python's) and exit")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    parser.add_argument("--log-level", choices=_LOG_LEVELS, default="error",
                        help="log the producer's aioproducer.* loggers from this level, to "
                             "stderr (default: error)")
    sub = parser.add_subparsers(dest="command", required=True)

    def connection(p: argparse.ArgumentParser) -> None:
        p.add_argument("--bootstrap-server", default=None, metavar="HOST:PORT[,...]",
                       help="default: bootstrap.servers in --producer-props, else "
                            "$AIOPRODUCER_BOOTSTRAP, else the local dev broker")
        p.add_argument("--producer-props", nargs="*", default=[], metavar="KEY=VALUE",
                       help="producer options, Java (linger.ms=5) or Python (linger_ms=5) "
                            "names")
        p.add_argument("--uvloop", action="store_true", help="run on uvloop")
        p.add_argument("--no-progress", action="store_true", help="no progress bar")

    perf = sub.add_parser("perf", parents=[common],
                          help="producer throughput and latency test "
                               "(as kafka-producer-perf-test)")
    perf.add_argument("--num-records", type=int, required=True)
    perf.add_argument("--record-size", type=int, required=True, help="value size in bytes")
    perf.add_argument("--throughput", type=float, default=-1,
                      help="records/s to aim for (-1: as fast as possible)")
    perf.add_argument("--topic", default=None,
                      help="topic (default: a fresh one, created with --partitions)")
    perf.add_argument("--create-topic", action="store_true",
                      help="create --topic (with --partitions) if missing")
    perf.add_argument("--partitions", type=int, default=1,
                      help="partitions of a topic this command creates (default: 1)")
    perf.add_argument("--print-metrics", action="store_true",
                      help="print the producer's metrics at the end")
    connection(perf)

    produce = sub.add_parser(
        "produce", parents=[common], formatter_class=argparse.RawDescriptionHelpFormatter,
        help="lines from stdin or a file to a topic (as kafka-console-producer)",
        description=(
            "Each input line (its UTF-8 bytes, without the newline) is one record:\n"
            "  [HEADERS <headers-delimiter>] [KEY <key-separator>] VALUE\n"
            "HEADERS (with --headers) is k1:v1,k2:v2. Separators accept \\t. A line\n"
            "without the key separator (or headers delimiter) is an error that stops the\n"
            "input, unless --ignore-error (then: a null key, no headers). Every record\n"
            "sent is acknowledged before the command exits; it exits 1 if any failed."))
    produce.add_argument("--topic", required=True)
    produce.add_argument("--file", default=None, metavar="PATH",
                         help="read this file (default, or '-': stdin)")
    produce.add_argument("--key-separator", nargs="?", const="\t", default=None,
                         metavar="SEP",
                         help="lines are KEY SEP VALUE (as parse.key=true, key.separator; "
                              "SEP defaults to a tab)")
    produce.add_argument("--headers", action="store_true",
                         help="lines start with headers (as parse.headers=true)")
    produce.add_argument("--headers-delimiter", default="\t", metavar="SEP",
                         help="between the headers and the rest (default: a tab)")
    produce.add_argument("--headers-separator", default=",", metavar="SEP",
                         help="between two headers (default: ,)")
    produce.add_argument("--headers-key-separator", default=":", metavar="SEP",
                         help="between a header's key and value (default: :)")
    produce.add_argument("--header", action="append", default=[], metavar="KEY=VALUE",
                         help="a header for every record (repeat for more); before the "
                              "line's own headers")
    produce.add_argument("--null-marker", default=None, metavar="TEXT",
                         help="a key, value or header value equal to TEXT is null")
    produce.add_argument("--ignore-error", action="store_true",
                         help="a line without the key separator or headers delimiter "
                              "becomes a record with a null key (as ignore.error=true)")
    produce.add_argument("--partition", type=int, default=None,
                         help="send every record to this partition (default: the "
                              "partitioner's choice)")
    connection(produce)

    broker = sub.add_parser("broker", help="the local development broker (start|stop|status...)",
                            add_help=False)
    broker.add_argument("broker_args", nargs=argparse.REMAINDER)
    return parser


def _setup_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("aioproducer")
    logger.addHandler(handler)
    logger.setLevel(level.upper())
    logger.propagate = False


def _one_line(text: str) -> str:
    return " ".join(part.strip() for part in text.splitlines() if part.strip())


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "broker":
        # Everything after "broker" (--help included) belongs to the broker's own CLI.
        from . import devbroker
        return devbroker.main(argv[1:])
    args = _build_parser().parse_args(argv)
    _setup_logging(args.log_level)
    try:
        if args.command == "broker":
            from . import devbroker
            return devbroker.main(list(args.broker_args))
        if args.command == "perf":
            return _run(_perf(args), args.uvloop)
        if args.command == "produce":
            return _run(_produce(args), args.uvloop)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # stdout was closed early (| head): stop quietly, and keep Python from
        # complaining again when it flushes stdout at exit.
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except Exception as exc:
        if args.debug:
            raise
        if isinstance(exc, CliError):
            print(f"aioproducer: error: {_one_line(str(exc))}", file=sys.stderr)
        else:
            print(f"aioproducer: error: {type(exc).__name__}: {_one_line(str(exc))}",
                  file=sys.stderr)
        return 1
    return 2
