"""Batch compression: the codecs Kafka knows, with the Java producer's levels (KIP-390).

In a record batch v2 the header stays plain and the records section (everything after
the 61-byte header) is compressed as one unit; attributes bits 0-2 name the codec:

=====  ======  ===============================================  ====================
 id    name    wire format of the records section               library
=====  ======  ===============================================  ====================
 1     gzip    a gzip member (RFC 1952)                         stdlib ``zlib``
 2     snappy  one raw Snappy block (no xerial framing, which   ``cramjam``
               Kafka's old message formats used)
 3     lz4     an LZ4 *frame* with independent blocks; Kafka's  ``lz4`` (frame API)
               Java reader rejects linked blocks
 4     zstd    a Zstandard frame                                ``zstandard``
=====  ======  ===============================================  ====================

Every one of these libraries releases the GIL while it compresses. With zstd and LZ4,
full batches are compressed on a thread of the producer's own, in C without the GIL
(:func:`make_compression_thread`, ``_native/compressor.pyx``, the same library
versions vendored). The choice was
measured (docs/compression.md): ``lz4``'s frame API is about 13x faster than
``cramjam.lz4`` at its default level and lets us turn block linking off; ``zstandard``
and ``cramjam.zstd`` are on par and ``zstandard`` exposes every level; ``zlib`` is
faster than ``cramjam.gzip``; ``cramjam`` has the only maintained raw Snappy.

A :class:`CompressionRatioEstimator` keeps, per topic, how well batches compress so
that a compressed batch is allowed to hold more than ``batch_size`` of records and
approaches ``batch_size`` on the wire (Java's ``CompressionRatioEstimator`` idea).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import ConfigError

if TYPE_CHECKING:
    from ._native.compressor import CompressorThread

__all__ = [
    "CODECS",
    "CompressionRatioEstimator",
    "Compressor",
    "codec_id",
    "decompress",
    "lz4_frame_level",
    "make_compression_thread",
    "make_compressor",
    "validate_level",
]

#: Turns the records section into its compressed bytes (any bytes-like object).
Compressor = Callable[[memoryview], Any]


@dataclass(frozen=True, slots=True)
class _Codec:
    id: int
    min_level: int
    max_level: int
    default_level: int
    level_option: str | None


#: Codec name -> id and the level range the Java producer accepts.
CODECS: dict[str, _Codec] = {
    "none": _Codec(0, 0, 0, 0, None),
    # gzip: 1..9, or -1 for zlib's default (6), as in Java.
    "gzip": _Codec(1, 1, 9, -1, "compression_gzip_level"),
    "snappy": _Codec(2, 0, 0, 0, None),
    # lz4: 1..17, default 9. Java uses LZ4's fast compressor at the default level and
    # LZ4-HC at any other; liblz4 caps HC levels at 12.
    "lz4": _Codec(3, 1, 17, 9, "compression_lz4_level"),
    # zstd: negative levels are zstd's fast modes.
    "zstd": _Codec(4, -131072, 22, 3, "compression_zstd_level"),
}


def codec_id(name: str) -> int:
    return CODECS[name].id


def validate_level(name: str, level: int) -> None:
    """ConfigError unless ``level`` is accepted for codec ``name``."""
    codec = CODECS[name]
    option = codec.level_option or f"compression level of {name}"
    if isinstance(level, bool) or not isinstance(level, int):
        raise ConfigError(f"{option} must be an int, got {type(level).__name__}")
    if name == "gzip" and level == -1:
        return
    if not codec.min_level <= level <= codec.max_level:
        extra = " or -1" if name == "gzip" else ""
        raise ConfigError(
            f"{option} must be between {codec.min_level} and {codec.max_level}{extra}, "
            f"got {level}"
        )


def make_compressor(name: str, level: int) -> Compressor | None:
    """The compress function for codec ``name`` at ``level``; None for ``none``."""
    if name == "none":
        return None
    if name == "gzip":
        zlevel = 6 if level == -1 else level

        def gzip(data: memoryview) -> bytes:
            # wbits=31: a gzip member (header with mtime 0, CRC-32 and size trailer).
            return zlib.compress(data, zlevel, wbits=31)

        return gzip
    if name == "snappy":
        import cramjam

        return cramjam.snappy.compress_raw
    if name == "lz4":
        import lz4.frame  # type: ignore[import-untyped]

        # Independent 64 KiB blocks, no checksums beyond LZ4's header checksum: what
        # Kafka's Java writer produces.
        flevel = lz4_frame_level(level)
        compress = lz4.frame.compress
        block_size = lz4.frame.BLOCKSIZE_MAX64KB

        def lz4_frame(data: memoryview) -> bytes:
            out: bytes = compress(data, compression_level=flevel, block_size=block_size,
                            block_linked=False, content_checksum=False,
                            block_checksum=False, store_size=False)
            return out

        return lz4_frame
    if name == "zstd":
        import zstandard

        cctx = zstandard.ZstdCompressor(level=level)
        return cctx.compress
    raise ConfigError(f"unknown compression type {name!r}")


def lz4_frame_level(level: int) -> int:
    """LZ4's frame level for Kafka's ``compression.lz4.level``: the default (9) means
    LZ4's fast mode (frame level 0); other levels are LZ4-HC levels."""
    return 0 if level == 9 else level


#: Records sections smaller than this stay on the event loop: handing them to the
#: compression thread costs more than compressing them (docs/performance.md).
THREAD_MIN_BYTES = {"zstd": 8192, "lz4": 16384}
#: ...and so do those the codec is expected to compress in less CPU time than this,
#: from what it cost so far on the producer's data (data that compresses very well
#: goes through zstd and LZ4 at gigabytes per second).
THREAD_MIN_SECONDS = 200e-6


def make_compression_thread(name: str, level: int) -> CompressorThread | None:
    """The compression thread for codec ``name`` at ``level`` (zstd and LZ4; None for
    the others): full batches are compressed there, off the event loop. It starts
    with its first batch."""
    from ._native.compressor import CompressorThread

    if name == "zstd":
        return CompressorThread(4, level, THREAD_MIN_BYTES[name],
                                min_seconds=THREAD_MIN_SECONDS)
    if name == "lz4":
        return CompressorThread(3, lz4_frame_level(level), THREAD_MIN_BYTES[name],
                                min_seconds=THREAD_MIN_SECONDS)
    return None


def decompress(codec: int, data: bytes | memoryview) -> bytes:
    """Decompress a records section (the reverse of the compressors; for tools and tests)."""
    if codec == 0:
        return bytes(data)
    if codec == 1:
        return zlib.decompress(data, wbits=31)
    if codec == 2:
        import cramjam

        return bytes(cramjam.snappy.decompress_raw(data))
    if codec == 3:
        import lz4.frame

        out: bytes = lz4.frame.decompress(data)
        return out
    if codec == 4:
        import zstandard

        return zstandard.ZstdDecompressor().decompressobj().decompress(data)
    raise ValueError(f"unknown compression codec id {codec}")


class CompressionRatioEstimator:
    """Per-topic estimate of compressed size ÷ records size.

    Starts at 1.0. After each batch: a worse ratio than the estimate raises it at once
    (by at least 0.05), a better one lowers it slowly (0.005 a batch), so batches may
    grow gradually but shrink quickly when the data stops compressing, as in Java.
    """

    #: estimates are inflated by this much when sizing a batch
    SAFETY = 1.05
    WORSE_STEP = 0.05
    BETTER_STEP = 0.005

    def __init__(self) -> None:
        self._ratio: dict[str, float] = {}

    def estimate(self, topic: str) -> float:
        return self._ratio.get(topic, 1.0)

    def observe(self, topic: str, records_bytes: int, compressed_bytes: int) -> None:
        if records_bytes <= 0:
            return
        observed = compressed_bytes / records_bytes
        current = self._ratio.get(topic, 1.0)
        if observed > current:
            self._ratio[topic] = max(current + self.WORSE_STEP, observed)
        elif observed < current:
            self._ratio[topic] = max(current - self.BETTER_STEP, observed)

    def forget(self, topic: str) -> None:
        """Drop the topic's estimate (the topic expired from the metadata)."""
        self._ratio.pop(topic, None)

    def reset(self, topic: str, ratio: float) -> None:
        """Start over from ``ratio`` (at least 1.0), after a batch sized from the
        estimate came out too large for the broker (Java resets it the same way)."""
        self._ratio[topic] = max(1.0, ratio)

    def records_budget(self, topic: str, batch_size: int, header: int) -> int:
        """Records bytes a batch of ``topic`` may take to land near ``batch_size``."""
        ratio = max(self.estimate(topic) * self.SAFETY, 0.01)
        return int((batch_size - header) / ratio)
