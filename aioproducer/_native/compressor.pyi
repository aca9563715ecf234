"""Type stubs for the compression thread (compressor.pyx)."""

from collections.abc import Callable
from typing import final

from typing_extensions import Buffer

@final
class CompressJob:
    """One batch's records section, compressed by the thread."""

    @property
    def done(self) -> bool:
        """Whether the thread is done with it (compressed, or failed)."""
    def result(self) -> bytes | None:
        """The compressed bytes, or None if the thread could not compress them;
        waits for the thread (without the GIL)."""

@final
class CompressorThread:
    """A C thread (no GIL) that compresses batches of one codec and level."""

    codec: int
    level: int
    min_bytes: int
    min_ns: float
    max_pending: int
    def __init__(self, codec: int, level: int, min_bytes: int = 8192,
                 max_pending: int = 8, min_seconds: float = 0.0) -> None: ...
    def observe(self, nbytes: int, ns: int) -> None:
        """A sample of the codec's cost: ``nbytes`` compressed in ``ns`` CPU ns."""
    @property
    def seconds_per_mib(self) -> float:
        """The codec's cost on this data so far, CPU seconds per MiB (0: unknown)."""
    @property
    def pending(self) -> int:
        """Jobs queued or running."""
    @property
    def compressed(self) -> int:
        """Jobs compressed so far."""
    @property
    def failed(self) -> int:
        """Jobs the thread could not compress (left to the loop)."""
    @property
    def running(self) -> bool:
        """Started and not closed."""
    def hold(self, held: bool) -> None:
        """Tests: keep the thread from taking a job until released."""
    def attach(self, loop: object, on_done: Callable[[], object]) -> None:
        """Call ``on_done()`` in ``loop`` when jobs finish."""
    def submit(self, data: Buffer) -> CompressJob | None:
        """Copy ``data`` and queue it; None when declined."""
    def close(self) -> None:
        """Stop the thread and stop listening in the loop (idempotent)."""
