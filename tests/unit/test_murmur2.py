"""murmur2 must be bit-for-bit Kafka's Utils.murmur2 (checked against the real jar)."""

from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

import pytest

from aioproducer._native import murmur2, murmur2_partition

JAVA_PROGRAM = Path(__file__).resolve().parent.parent / "support" / "java" / "Murmur2Vectors.java"
PARTITION_COUNTS = [1, 2, 3, 7, 12, 100, 1000, 2**31 - 1]

# Computed with kafka-clients 4.3.1 (tests/support/java/Murmur2Vectors.java).
KNOWN = {
    b"": 275646681,
    b"hello": 2132663229,
    b"\x00": 375494588,
    b"\xff": -311467685,
    b"\xff\xff": -1642832928,
    b"\xff\xff\xff": 1548199422,
}


def test_known_values() -> None:
    for key, expected in KNOWN.items():
        assert murmur2(key) == expected, key
        assert murmur2_partition(key, 1000) == (expected & 0x7FFFFFFF) % 1000


def test_accepts_any_contiguous_buffer() -> None:
    data = bytes(range(37))
    h = murmur2(data)
    assert murmur2(bytearray(data)) == h
    assert murmur2(memoryview(data)) == h
    assert murmur2(memoryview(b"xx" + data + b"yy")[2:-2]) == h
    assert murmur2_partition(bytearray(data), 12) == murmur2_partition(data, 12)


def test_errors() -> None:
    with pytest.raises(TypeError, match="bytes-like"):
        murmur2("text")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="bytes-like"):
        murmur2(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="bytes-like"):
        murmur2_partition(123, 3)  # type: ignore[arg-type]
    for n in (0, -1):
        with pytest.raises(ValueError, match="num_partitions"):
            murmur2_partition(b"k", n)


@pytest.mark.slow  # seconds: outside the quick loop (-m 'not broker and not slow')
def test_matches_the_java_client() -> None:
    java = shutil.which("java")
    if java is None:
        pytest.skip("no java on PATH")
    from aioproducer.devbroker import KafkaLibsError, ensure_kafka_libs

    try:
        libs = ensure_kafka_libs()
    except KafkaLibsError as exc:
        pytest.skip(f"Kafka jars unavailable: {exc}")

    rng = random.Random(20240517)
    keys = [b""] + [rng.randbytes(rng.randint(0, 100)) for _ in range(2000)]
    keys += [b"\xff" * n for n in range(9)] + [b"\x80" * n for n in range(1, 9)]
    done = subprocess.run(
        [java, "-cp", f"{libs}/*", str(JAVA_PROGRAM), *map(str, PARTITION_COUNTS)],
        input="".join(k.hex() + "\n" for k in keys),
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == len(keys)
    for key, line in zip(keys, lines, strict=True):
        hex_key, h, *parts = line.split(" ")
        assert hex_key == key.hex()
        assert murmur2(key) == int(h), key.hex()
        assert [murmur2_partition(key, n) for n in PARTITION_COUNTS] == [int(p) for p in parts]


def _reference_murmur2(data: bytes) -> int:
    """Kafka's Utils.murmur2 written out in Python (the wire fact: MurmurHash2,
    seed 0x9747b28c, little-endian 4-byte words, a signed 32-bit result)."""
    m, mask = 0x5BD1E995, 0xFFFFFFFF
    h = (0x9747B28C ^ len(data)) & mask
    tail = len(data) & ~3
    for i in range(0, tail, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * m) & mask
        k ^= k >> 24
        k = (k * m) & mask
        h = ((h * m) & mask) ^ k
    rest = data[tail:]
    if len(rest) >= 3:
        h ^= rest[2] << 16
    if len(rest) >= 2:
        h ^= rest[1] << 8
    if rest:
        h ^= rest[0]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def test_word_loads_match_the_reference_at_every_length_and_offset() -> None:
    # The native hash reads 4-byte words in one load on little-endian hosts: every
    # length 0..70 (all tails), from unaligned starts too, against the Python form.
    seed = 20261126
    print(f"seed={seed}")
    rnd = random.Random(seed)
    for n in range(71):
        data = rnd.randbytes(n + 3)
        for off in range(4):  # data holds n + 3 bytes: every offset has n of them
            key = data[off:off + n]
            assert murmur2(memoryview(data)[off:off + n]) == _reference_murmur2(key), (n, off)
    for key in KNOWN:
        assert _reference_murmur2(key) == KNOWN[key]
