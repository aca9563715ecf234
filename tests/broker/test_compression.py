"""Compression (gzip, snappy, lz4, zstd) end to end and in the native builder.

Against the real broker, every codec at several levels sends 50,000 mixed records
(text-like and random values, keys, headers, explicit timestamps and partitions) that
confluent-kafka reads back field for field. Kafka's own tools check the rest:
``DumpLogSegments`` reads the broker's log files and names each batch's codec and size
(the proof that the batches were compressed on the wire, and how big they were), and
the Java console consumer reads a sample back. The broker itself decompresses every
compressed batch it accepts (it validates the records), so each produce is also a
check against Kafka's Java decoders.
"""

from __future__ import annotations

import asyncio
import gzip
import random
import re
import struct
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cramjam
import pytest
from crc32c import crc32c
from support.delivery_util import gather_chunked
from support.kafka_util import consume_all, partition_offsets
from support.log_util import check_log_layout, dump_batches

from aioproducer import ConfigError, Producer
from aioproducer._native import BATCH_HEADER_SIZE, BatchBuilder, BufferPool
from aioproducer.compression import (
    CODECS,
    CompressionRatioEstimator,
    codec_id,
    decompress,
    make_compressor,
)
from aioproducer.devbroker import run_java

LEVEL_OPTION = {"gzip": "compression_gzip_level", "lz4": "compression_lz4_level",
                "zstd": "compression_zstd_level"}

#: (codec, level): each codec's default level first, then the ends of its range
#: (lz4 17 is LZ4-HC's strongest; zstd -5 is one of its fast modes).
CODEC_LEVELS = [
    ("gzip", -1), ("gzip", 1), ("gzip", 9),
    ("snappy", None),
    ("lz4", 9), ("lz4", 1), ("lz4", 17),
    ("zstd", 3), ("zstd", -5), ("zstd", 19),
]

WORDS = [b"order", b"user", b"id", b"status", b"shipped", b"warehouse", b"eu-west-1",
         b"price", b"=", b"42", b"ok", b"currency", b"EUR", b"items", b"{", b"}", b":"]


def producer_options(codec: str, level: int | None) -> dict[str, Any]:
    options: dict[str, Any] = {"compression_type": codec}
    if level is not None:
        options[LEVEL_OPTION[codec]] = level
    return options


# -- the records --------------------------------------------------------------------


@dataclass(frozen=True)
class Rec:
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    timestamp: int | None
    partition: int | None


def text_values(rng: random.Random, count: int, words: int) -> list[bytes]:
    return [b" ".join(rng.choice(WORDS) for _ in range(words)) for _ in range(count)]


def mixed_records(n: int, partitions: int, seed: int) -> list[Rec]:
    """Seven in ten records are text-like (compressible), the rest random bytes or
    tombstones; keys, headers, explicit timestamps and partitions are mixed in."""
    rng = random.Random(seed)
    texts = text_values(rng, 400, 25)
    out: list[Rec] = []
    for i in range(n):
        kind = i % 10
        text = texts[rng.randrange(len(texts))] + b" #%d" % i
        key: bytes | None = f"user-{i % 997}".encode()
        value: bytes | None = text
        headers: list[tuple[str, bytes | None]] = []
        ts = None
        partition = None
        if kind == 5:
            key, value = rng.randbytes(rng.randint(1, 32)), rng.randbytes(rng.randint(0, 400))
        elif kind == 6:
            key = None
            headers = [("trace-id", rng.randbytes(16)), ("source", b"svc-a"), ("empty", b""),
                       ("none", None)]
        elif kind == 7:
            value = rng.randbytes(rng.randint(50, 300))
            headers = [("seq", str(i).encode())]
            ts = 1_600_000_000_000 + i
        elif kind == 8:
            value = None
        elif kind == 9:
            partition = rng.randrange(partitions)
            ts = 1_700_000_000_000 - i
        out.append(Rec(key, value, headers, ts, partition))
    return out


def payload_bytes(recs: list[Rec]) -> int:
    """Keys, values and headers: a lower bound of the uncompressed records bytes."""
    return sum(len(r.key or b"") + len(r.value or b"")
               + sum(len(k) + len(v or b"") for k, v in r.headers) for r in recs)


async def produce(bootstrap: str, topic: str, recs: list[Rec], **options: Any) -> list[Any]:
    """Fire-and-forget sends, then flush; every 5,000 records the test waits for one ack
    so that the Sender runs (and the ratio estimate adapts) mid-stream."""
    async with Producer(bootstrap_servers=bootstrap, **options) as producer:
        futs = []
        for i, r in enumerate(recs):
            futs.append(await producer.send(topic, r.value, key=r.key, partition=r.partition,
                                            timestamp_ms=r.timestamp, headers=r.headers))
            if i % 5000 == 4999:
                await futs[-1]
        await producer.flush()
        assert all(f.done() for f in futs)
        return await gather_chunked(futs)


def check_round_trip(bootstrap: str, topic: str, recs: list[Rec],
                     metas: list[Any]) -> dict[int, int]:
    """confluent-kafka reads back every record, field for field, at the offset its
    metadata named; per partition the offsets are 0..n-1. Returns {partition: count}."""
    n = len(recs)
    got = consume_all(bootstrap, topic, n, timeout=120)
    assert len(got) == n
    by_pos = {(m.partition, m.offset): m for m in got}
    assert len(by_pos) == n
    per_partition: dict[int, list[int]] = defaultdict(list)
    for meta in metas:
        per_partition[meta.partition].append(meta.offset)
    for p, offsets in per_partition.items():
        assert offsets == list(range(len(offsets))), f"partition {p}: offsets not 0..n-1"
    for r, meta in zip(recs, metas, strict=True):
        m = by_pos[(meta.partition, meta.offset)]
        assert (m.key, m.value, m.headers) == (r.key, r.value, r.headers)
        assert m.timestamp == meta.timestamp and m.timestamp_type == 1  # CreateTime
        if r.timestamp is not None:
            assert m.timestamp == r.timestamp
        if r.partition is not None:
            assert m.partition == r.partition
    watermarks = partition_offsets(bootstrap, topic)
    counts = {p: len(per_partition.get(p, [])) for p in watermarks}
    assert {p: hi - lo for p, (lo, hi) in watermarks.items()} == counts
    return counts


# -- end to end -------------------------------------------------------------------------


async def round_trip_50k(bootstrap: str, topic_factory: Any, log_dir: Path | None,
                         codec: str, level: int | None) -> None:
    partitions = 4
    topic = topic_factory(partitions=partitions)
    recs = mixed_records(50_000, partitions, seed=sum(f"{codec}{level}".encode()))
    metas = await produce(bootstrap, topic, recs, **producer_options(codec, level))
    counts = check_round_trip(bootstrap, topic, recs, metas)
    assert all(counts.values()), counts
    if log_dir is None:
        return  # not our broker: its log files are out of reach
    batches = dump_batches(log_dir, topic)
    check_log_layout(batches, counts)
    # Every batch went out compressed with the codec asked for, and the log is much
    # smaller than the keys, values and headers alone (2 in 10 values are random bytes).
    assert Counter(b.codec for b in batches) == {codec: len(batches)}
    on_disk, payload = sum(b.size for b in batches), payload_bytes(recs)
    assert on_disk < 0.75 * payload, f"{on_disk} bytes in the log for {payload} of payload"


def _level_id(codec: str, level: int | None) -> str:
    return codec if level is None else f"{codec}{level}"


DEFAULT_LEVELS = [(c, lvl) for c, lvl in CODEC_LEVELS
                  if lvl is None or lvl == CODECS[c].default_level]
OTHER_LEVELS = [cl for cl in CODEC_LEVELS if cl not in DEFAULT_LEVELS]


@pytest.mark.asyncio
@pytest.mark.parametrize(("codec", "level"), DEFAULT_LEVELS,
                         ids=[_level_id(*cl) for cl in DEFAULT_LEVELS])
async def test_round_trip_50k_every_codec(kafka_bootstrap: str, topic_factory: Any,
                                          log_dir: Path | None, codec: str,
                                          level: int | None) -> None:
    await round_trip_50k(kafka_bootstrap, topic_factory, log_dir, codec, level)


# The other levels only change the function the builder calls at close(), nothing on the
# event loop: each runs once, half of them on each loop, to keep the suite's time down.
@pytest.mark.asyncio(loop_factories=["asyncio"])
@pytest.mark.parametrize(("codec", "level"), OTHER_LEVELS[::2],
                         ids=[_level_id(*cl) for cl in OTHER_LEVELS[::2]])
async def test_round_trip_50k_other_levels_asyncio(kafka_bootstrap: str, topic_factory: Any,
                                                   log_dir: Path | None, codec: str,
                                                   level: int | None) -> None:
    await round_trip_50k(kafka_bootstrap, topic_factory, log_dir, codec, level)


@pytest.mark.asyncio(loop_factories=["uvloop"])
@pytest.mark.parametrize(("codec", "level"), OTHER_LEVELS[1::2],
                         ids=[_level_id(*cl) for cl in OTHER_LEVELS[1::2]])
async def test_round_trip_50k_other_levels_uvloop(kafka_bootstrap: str, topic_factory: Any,
                                                  log_dir: Path | None, codec: str,
                                                  level: int | None) -> None:
    await round_trip_50k(kafka_bootstrap, topic_factory, log_dir, codec, level)


@pytest.mark.asyncio
@pytest.mark.parametrize(("topic_codec", "producer_codec"),
                         [("zstd", "gzip"), ("uncompressed", "lz4"), ("lz4", "zstd"),
                          ("producer", "snappy")])
async def test_topic_compression_type_differs_from_the_producers(
        kafka_bootstrap: str, topic_factory: Any, log_dir: Path | None,
        topic_codec: str, producer_codec: str) -> None:
    """The broker decompresses our batches and recompresses them with the topic's
    ``compression.type``; the records come through unchanged."""
    topic = topic_factory(partitions=3, config={"compression.type": topic_codec})
    recs = mixed_records(5_000, 3, seed=7)
    metas = await produce(kafka_bootstrap, topic, recs, compression_type=producer_codec)
    counts = check_round_trip(kafka_bootstrap, topic, recs, metas)
    if log_dir is None:
        return
    batches = dump_batches(log_dir, topic)
    check_log_layout(batches, counts)
    stored = {"uncompressed": "none", "producer": producer_codec}.get(topic_codec, topic_codec)
    assert {b.codec for b in batches} == {stored}


def _console_line(ts: int, partition: int, offset: int, r: Rec) -> str:
    headers = ",".join(f"{k}:{'<null>' if v is None else v.decode()}" for k, v in r.headers)
    key = "<null>" if r.key is None else r.key.decode()
    value = "<null>" if r.value is None else r.value.decode()
    return f"CreateTime:{ts}\tPartition:{partition}\tOffset:{offset}\t" \
           f"{headers or 'NO_HEADERS'}\t{key}\t{value}"


@pytest.mark.asyncio
async def test_java_console_consumer_reads_every_codec(
        kafka_bootstrap: str, topic_factory: Any, log_dir: Path | None) -> None:
    """Kafka's ``ConsoleConsumer`` (the Java client's decoders: ``Lz4BlockInputStream``,
    zstd-jni, snappy-java, ``GZIPInputStream``) reads a sample of each codec back.

    ``batch_size`` is 256 KiB so that batches hold several 64 KiB LZ4 blocks (Java's
    LZ4 reader refuses frames whose blocks depend on each other).
    """
    rng = random.Random(11)
    n = 4000
    topics: dict[str, str] = {}
    sent: dict[str, list[Rec]] = {}
    metas: dict[str, list[Any]] = {}
    for codec in ("gzip", "snappy", "lz4", "zstd"):
        topic = topics[codec] = topic_factory(partitions=2)
        texts = [t.decode() for t in text_values(rng, 50, 12)]
        sent[codec] = [
            Rec(key=None if i % 7 == 0 else f"{codec}-key-{i % 31}".encode(),
                value=None if i % 50 == 0 else f"{codec} {i} {rng.choice(texts)}".encode(),
                headers=[("codec", codec.encode()), ("i", str(i).encode()), ("none", None)]
                if i % 3 == 0 else [],
                timestamp=1_650_000_000_000 + i if i % 5 == 0 else None,
                partition=None)
            for i in range(n)]
        metas[codec] = await produce(kafka_bootstrap, topic, sent[codec],
                                     compression_type=codec, batch_size=262_144,
                                     linger_ms=50)
    pattern = "|".join(re.escape(t) for t in topics.values())
    fmt = ["print.timestamp=true", "print.partition=true", "print.offset=true",
           "print.headers=true", "print.key=true", "null.literal=<null>"]
    proc = await asyncio.to_thread(
        run_java, "org.apache.kafka.tools.consumer.ConsoleConsumer",
        ["--bootstrap-server", kafka_bootstrap, "--include", pattern, "--from-beginning",
         "--group", f"console-{uuid.uuid4().hex}", "--max-messages", str(4 * n),
         "--timeout-ms", "60000",
         *(a for prop in fmt for a in ("--formatter-property", prop))],
        timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    expected = sorted(_console_line(m.timestamp, m.partition, m.offset, r)
                      for codec in topics for r, m in zip(sent[codec], metas[codec],
                                                          strict=True))
    assert sorted(proc.stdout.splitlines()) == expected
    if log_dir is None:
        return
    batches = dump_batches(log_dir, *topics.values())
    for codec, topic in topics.items():
        assert {b.codec for b in batches if b.topic == topic} == {codec}
        # The biggest batch holds more than one 64 KiB LZ4 block of keys and values.
        size_at = {(m.partition, m.offset): len(r.key or b"") + len(r.value or b"")
                   for r, m in zip(sent[codec], metas[codec], strict=True)}
        assert max(sum(size_at[(b.partition, o)] for o in range(b.base_offset,
                                                                  b.last_offset + 1))
                   for b in batches if b.topic == topic) > 65536


@pytest.mark.asyncio
@pytest.mark.parametrize("codec", ["lz4", "zstd"])
async def test_compressed_batches_approach_batch_size_on_the_wire(
        kafka_bootstrap: str, topic_factory: Any, log_dir: Path | None, codec: str) -> None:
    """The ratio estimate lets a batch of compressible records hold more than
    ``batch_size`` of records, so that it approaches ``batch_size`` once compressed
    (with ``batch_max_size=batch_size``: no growth of busy partitions' batches).

    The first batches, before anything was learnt, hold at most ``batch_size``. The
    estimate moves in steps (down 0.005 a batch, up at least 0.05 on a worse batch, as
    in Java), so the sizes wobble: the test looks at the upper decile and the median of
    the last quarter of the batches.

    Every batch but the last is full by construction, so that the sizes depend on the
    data and the estimator only, not on timing: one ``send_many`` call (a partial
    batch at the end of each of several awaited calls would compress worse, the worse
    the fewer records it happened to get, and set the estimate for the next call's
    batches), ``linger_ms`` far longer than the test (no batch is taken before it is
    full but the last, at the flush), and a ``buffer_memory`` of a few batches (the
    appending waits for the Sender, which closes the batches, so the estimate follows
    them instead of lagging behind a buffer full of batches sized before anything was
    learnt).
    """
    if log_dir is None:
        pytest.skip("needs the broker's log files (a one-node broker on this machine)")
    batch_size = 16_384
    topic = topic_factory(partitions=1)
    rng = random.Random(3)
    texts = text_values(rng, 500, 24)
    width = max(map(len, texts))
    values = [t.ljust(width) for t in texts] * 200  # 100,000 records, all one size
    async with Producer(bootstrap_servers=kafka_bootstrap, compression_type=codec,
                        batch_size=batch_size, batch_max_size=batch_size,
                        linger_ms=60_000, buffer_memory=512 * 1024,
                        max_request_size=512 * 1024) as producer:
        result = await producer.send_many(topic, values)
        # The last, partial batch goes now, not when linger_ms runs out (awaiting the
        # result alone waited the whole minute for it).
        await producer.flush()
        assert await result == len(values)
    batches = dump_batches(log_dir, topic)
    check_log_layout(batches, {0: len(values)})
    assert {b.codec for b in batches} == {codec}
    # A lower bound of a record's bytes: + length, attributes, deltas, key/value
    # lengths, header count.
    record_bytes = len(values[0]) + 8
    assert batches[0].count * record_bytes <= batch_size
    assert max(b.size for b in batches) <= batch_size
    assert batches[-1].last_offset == len(values) - 1
    full = batches[:-1]  # the last one was sent at the flush, however full
    late = full[-len(full) // 4:]
    by_size = sorted(b.size for b in late)
    assert by_size[len(by_size) * 9 // 10] >= 0.8 * batch_size, by_size
    counts = sorted(b.count for b in late)
    assert counts[len(counts) // 2] * record_bytes > 1.5 * batch_size, counts


@pytest.mark.asyncio
async def test_random_data_batches_stay_near_batch_size(
        kafka_bootstrap: str, topic_factory: Any, log_dir: Path | None) -> None:
    """Data that does not compress: batches stay about ``batch_size`` (the estimate
    never lets them grow) and every record still arrives."""
    topic = topic_factory(partitions=2)
    rng = random.Random(5)
    recs = [Rec(rng.randbytes(8), rng.randbytes(rng.randint(200, 1500)), [], None, None)
            for _ in range(4000)]
    metas = await produce(kafka_bootstrap, topic, recs, compression_type="gzip",
                          batch_max_size=16_384)
    counts = check_round_trip(kafka_bootstrap, topic, recs, metas)
    if log_dir is None:
        return
    batches = dump_batches(log_dir, topic)
    check_log_layout(batches, counts)
    assert max(b.size for b in batches) <= 16_384 + 256


# -- configuration --------------------------------------------------------------------


@pytest.mark.parametrize("options", [
    {"compression_type": "brotli"},
    {"compression_type": "LZ4"},
    {"compression_type": None},
    {"compression_type": "gzip", "compression_gzip_level": 0},
    {"compression_type": "gzip", "compression_gzip_level": 10},
    {"compression_gzip_level": -2},
    {"compression_lz4_level": 0},
    {"compression_lz4_level": 18},
    {"compression_zstd_level": 23},
    {"compression_zstd_level": -131073},
    {"compression_zstd_level": "three"},  # "3" is valid: a .properties file's value
    {"compression_lz4_level": 9.0},
    {"compression_gzip_level": True},
    {"compression.type": "zip"},
    {"compression.zstd.level": 99},
])
def test_bad_compression_options_raise_config_error(options: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match="compression"):
        Producer({"bootstrap.servers": "127.0.0.1:1", **options})


@pytest.mark.parametrize("options", [
    {"compression_type": "none"},
    {"compression_type": "gzip", "compression_gzip_level": -1},
    {"compression_type": "gzip", "compression_gzip_level": 1},
    {"compression_type": "gzip", "compression_gzip_level": 9},
    {"compression_type": "snappy"},
    {"compression_type": "lz4", "compression_lz4_level": 1},
    {"compression_type": "lz4", "compression_lz4_level": 17},
    {"compression_type": "zstd", "compression_zstd_level": -131072},
    {"compression_type": "zstd", "compression_zstd_level": 22},
    {"compression.type": "zstd", "compression.zstd.level": 7},
])
def test_good_compression_options_are_accepted(options: dict[str, Any]) -> None:
    config = Producer({"bootstrap.servers": "127.0.0.1:1", **options}).config
    codec = options.get("compression_type", options.get("compression.type"))
    assert config.compression_type == codec
    level = next((v for k, v in options.items() if "level" in k), None)
    if level is not None:
        assert config.compression_level == level


def test_defaults_are_javas() -> None:
    config = Producer(bootstrap_servers="127.0.0.1:1").config
    assert config.compression_type == "none"
    assert (config.compression_gzip_level, config.compression_lz4_level,
            config.compression_zstd_level) == (-1, 9, 3)


# -- the codecs -------------------------------------------------------------------------


SAMPLE = b"".join(b"record %d: " % i + b" ".join(WORDS[i % 7:]) for i in range(3000))


@pytest.mark.parametrize(("codec", "level"), [
    *CODEC_LEVELS, ("gzip", 5), ("lz4", 12), ("zstd", 1), ("zstd", 22), ("zstd", -131072)])
def test_compressors_round_trip_and_shrink_text(codec: str, level: int | None) -> None:
    compress = make_compressor(codec, 0 if level is None else level)
    assert compress is not None
    out = bytes(compress(memoryview(SAMPLE)))
    assert decompress(codec_id(codec), out) == SAMPLE
    if level != -131072:  # zstd's fastest mode barely compresses
        assert len(out) < len(SAMPLE) // 3
    # Read back with a second, independent implementation of each format.
    independent = {
        "gzip": gzip.decompress,
        "snappy": lambda b: bytes(cramjam.snappy.decompress_raw(b)),
        "lz4": lambda b: bytes(cramjam.lz4.decompress(b)),
        "zstd": lambda b: bytes(cramjam.zstd.decompress(b)),
    }[codec]
    assert independent(out) == SAMPLE


def test_lz4_frames_have_independent_blocks_and_no_checksums() -> None:
    """Kafka's Java ``Lz4BlockInputStream`` refuses linked blocks ("Dependent block
    stream is unsupported")."""
    compress = make_compressor("lz4", 9)
    assert compress is not None
    out = bytes(compress(memoryview(SAMPLE * 4)))  # several 64 KiB blocks
    assert struct.unpack_from("<I", out)[0] == 0x184D2204  # LZ4 frame magic
    flg, bd = out[4], out[5]
    assert flg >> 6 == 0b01  # version
    assert flg & 0x20, "block independence flag not set"
    assert not flg & 0x10 and not flg & 0x04  # no block or content checksum
    assert not flg & 0x08  # no content size (Java's writer writes none)
    assert (bd >> 4) & 0x7 == 4  # 64 KiB maximum block size


def test_gzip_level_minus_one_is_zlibs_default() -> None:
    default, six = make_compressor("gzip", -1), make_compressor("gzip", 6)
    assert default is not None and six is not None
    assert bytes(default(memoryview(SAMPLE))) == bytes(six(memoryview(SAMPLE)))


def test_lz4_default_level_is_the_fast_compressor() -> None:
    fast, hc = make_compressor("lz4", 9), make_compressor("lz4", 10)
    assert fast is not None and hc is not None
    data = memoryview(SAMPLE * 4)
    assert len(bytes(hc(data))) < len(bytes(fast(data)))


def test_codec_ids_are_kafkas() -> None:
    assert {name: c.id for name, c in CODECS.items()} == {
        "none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def test_ratio_estimator_grows_slowly_and_shrinks_fast() -> None:
    est = CompressionRatioEstimator()
    assert est.estimate("t") == 1.0
    assert est.records_budget("t", 16_384, 61) == int((16_384 - 61) / 1.05)
    for _ in range(10):
        est.observe("t", 10_000, 2_000)
    assert est.estimate("t") == pytest.approx(1.0 - 10 * 0.005)
    for _ in range(1000):
        est.observe("t", 10_000, 2_000)
    assert est.estimate("t") == pytest.approx(0.2)  # never below what was observed
    assert est.records_budget("t", 16_384, 61) == int((16_384 - 61) / (0.2 * 1.05))
    est.observe("t", 10_000, 9_000)  # the data stopped compressing: at once
    assert est.estimate("t") == pytest.approx(0.9)
    est.observe("t", 10_000, 9_100)
    assert est.estimate("t") == pytest.approx(0.95)  # worse: at least one step up
    assert est.estimate("other") == 1.0  # per topic


# -- the native builder -----------------------------------------------------------------


def build(capacity: int, records: list[tuple[int, bytes | None, bytes | None, Any]],
          codec: str = "none", level: int = 0, limit: int = -1,
          ) -> tuple[BufferPool, BatchBuilder, bytes]:
    pool = BufferPool(max(capacity, 1 << 16), capacity)
    block = pool.try_allocate(capacity)
    assert block is not None
    builder = BatchBuilder(block)
    if codec != "none" or limit != -1:
        builder.set_compression(codec_id(codec), make_compressor(codec, level), limit)
    for ts, key, value, headers in records:
        builder.append(ts, key, value, headers)  # -1 (did not fit): skipped
    builder.close(1234, 5, 678)
    view = builder.view()
    data = bytes(view)
    view.release()
    return pool, builder, data


def sample_records(n: int, seed: int = 1,
                   compressible: bool = True) -> list[tuple[int, bytes | None, bytes | None, Any]]:
    rng = random.Random(seed)
    out: list[tuple[int, bytes | None, bytes | None, Any]] = []
    for i in range(n):
        value = (b" ".join(rng.choice(WORDS) for _ in range(12)) if compressible
                 else rng.randbytes(rng.randint(20, 200)))
        out.append((1_700_000_000_000 + i * 3,
                    None if i % 4 == 0 else b"key-%d" % (i % 9),
                    None if i % 17 == 0 else value,
                    [("h", b"v%d" % i), ("n", None)] if i % 5 == 0 else None))
    return out


def check_header_crc(data: bytes) -> int:
    """The batch's CRC-32C and length are right; returns its attributes."""
    (length,) = struct.unpack_from(">i", data, 8)
    assert length == len(data) - 12
    (crc,) = struct.unpack_from(">I", data, 17)
    assert crc == crc32c(data[21:])
    (attributes,) = struct.unpack_from(">h", data, 21)
    return int(attributes)


@pytest.mark.parametrize(("codec", "level"),
                         [(c, 0 if lvl is None else lvl) for c, lvl in CODEC_LEVELS])
def test_builder_compresses_the_records_section(codec: str, level: int) -> None:
    records = sample_records(300)
    _p1, plain, plain_data = build(1 << 16, records)
    _p2, comp, comp_data = build(1 << 16, records, codec, level)
    assert comp.record_count == plain.record_count == 300
    assert comp.compression == codec_id(codec) and plain.compression == 0
    assert comp.records_size == plain.records_size == len(plain_data) - BATCH_HEADER_SIZE
    assert comp.size_in_bytes == len(comp_data) < 0.8 * len(plain_data)
    attributes = check_header_crc(comp_data)
    assert attributes & 0x7 == codec_id(codec)
    assert attributes & ~0x7 == struct.unpack_from(">h", plain_data, 21)[0] & ~0x7
    # The header is the plain batch's but for length, CRC and codec bits...
    for start, end in [(0, 8), (12, 17), (23, BATCH_HEADER_SIZE)]:
        assert comp_data[start:end] == plain_data[start:end]
    # ...and the records section decompresses to the plain batch's records.
    section = decompress(codec_id(codec), comp_data[BATCH_HEADER_SIZE:])
    assert section == plain_data[BATCH_HEADER_SIZE:]


def fill_with_random(builder: BatchBuilder, rng: random.Random) -> list[bytes]:
    """Random values until the block is full to the last byte (or within one)."""
    values: list[bytes] = []
    while builder.remaining > 1100:
        values.append(rng.randbytes(rng.randint(20, 1000)))
        assert builder.append(1_700_000_000_000, None, values[-1]) >= 0
    for size in range(builder.remaining, 0, -1):
        if builder.append(1_700_000_000_000, None, last := rng.randbytes(size)) >= 0:
            values.append(last)
            break
    return values


def test_builder_sends_incompressible_records_plain_when_they_would_not_fit() -> None:
    """A block full to the last byte (limit = capacity) of random records: compressed,
    they need more bytes than the block has, so the batch goes out plain (codec 0),
    byte for byte the uncompressed batch."""
    pool = BufferPool(1 << 16, 8192)
    for codec in ("gzip", "snappy", "lz4", "zstd"):
        plain_block, comp_block = pool.try_allocate(8192), pool.try_allocate(8192)
        assert plain_block is not None and comp_block is not None
        plain, comp = BatchBuilder(plain_block), BatchBuilder(comp_block)
        comp.set_compression(codec_id(codec), make_compressor(codec, CODECS[codec].default_level))
        values = fill_with_random(plain, random.Random(codec))
        assert plain.remaining <= 1
        for v in values:
            assert comp.append(1_700_000_000_000, None, v) >= 0
        plain.close(7, 0, 0)
        comp.close(7, 0, 0)
        assert comp.compression == 0 and comp.record_count == plain.record_count
        assert comp.records_size == plain.records_size
        plain_view, comp_view = plain.view(), comp.view()
        try:
            assert bytes(comp_view) == bytes(plain_view)
            assert check_header_crc(bytes(comp_view)) & 0x7 == 0
        finally:
            plain_view.release()
            comp_view.release()
        pool.release(plain_block)
        pool.release(comp_block)


def test_builder_limit_bounds_random_records_and_the_batch_stays_valid() -> None:
    """With a limit below capacity, random records stop at the limit. Whether the batch
    goes out compressed or plain, it is valid and its records section is the plain one.

    The codec is not asserted: the records do not shrink, and sending them plain
    would be as right as sending them compressed.
    """
    records = sample_records(2000, compressible=False)
    _p1, plain, plain_data = build(8192, records, limit=8192 - 128)
    for codec in ("gzip", "snappy", "lz4", "zstd"):
        _p2, comp, data = build(8192, records, codec, CODECS[codec].default_level,
                                limit=8192 - 128)
        assert comp.records_size == plain.records_size <= 8192 - 128 - BATCH_HEADER_SIZE
        applied = check_header_crc(data) & 0x7
        assert applied == comp.compression in (0, codec_id(codec))
        assert decompress(applied, data[BATCH_HEADER_SIZE:]) == plain_data[BATCH_HEADER_SIZE:]


def test_builder_limit_bounds_all_but_the_first_record() -> None:
    pool = BufferPool(1 << 16, 4096)
    block = pool.try_allocate(4096)
    assert block is not None
    builder = BatchBuilder(block)
    builder.set_compression(codec_id("zstd"), make_compressor("zstd", 3), 200)
    assert builder.limit_bytes == 200
    assert builder.append(1, None, b"x" * 1000) == 0  # the first record may exceed it
    assert builder.append(1, None, b"y") == -1
    builder.close()
    assert builder.record_count == 1 and builder.compression == codec_id("zstd")


def test_set_compression_is_checked() -> None:
    pool = BufferPool(1 << 16, 4096)
    block = pool.try_allocate(4096)
    assert block is not None
    builder = BatchBuilder(block)
    compress = make_compressor("lz4", 9)
    with pytest.raises(ValueError, match="codec id"):
        builder.set_compression(5, compress)
    with pytest.raises(TypeError, match="callable"):
        builder.set_compression(3, None)
    with pytest.raises(ValueError, match="limit"):
        builder.set_compression(3, compress, 4097)
    with pytest.raises(ValueError, match="limit"):
        builder.set_compression(3, compress, BATCH_HEADER_SIZE)
    builder.set_compression(3, compress)
    assert builder.compression == 3
    builder.append(1, b"k", b"v")
    with pytest.raises(RuntimeError, match="before the first append"):
        builder.set_compression(4, make_compressor("zstd", 3))
    builder.close()
    with pytest.raises(RuntimeError, match="before the first append"):
        builder.set_compression(3, compress)


