"""Exponential backoff with jitter (KIP-580), as the Java client computes it.

``backoff(attempts) = initial * multiplier ** attempts * uniform(1 - jitter, 1 + jitter)``,
the exponent capped where the term reaches ``max``, and the result never above
``max``. Used for metadata refresh attempts (``retry_backoff_ms`` up to
``retry_backoff_max_ms``) and for batch retries; the client's reconnect backoff
(``reconnect_backoff_ms`` up to ``reconnect_backoff_max_ms``) follows the same shape.
"""

from __future__ import annotations

import math
import random

__all__ = ["ExponentialBackoff"]


class ExponentialBackoff:
    """Backoff intervals in seconds for attempt ``0, 1, 2, ...`` (0: the first retry)."""

    __slots__ = ("_exp_max", "_rng", "initial_ms", "jitter", "max_ms", "multiplier")

    def __init__(self, initial_ms: int, max_ms: int, *, multiplier: int = 2,
                 jitter: float = 0.2, rng: random.Random | None = None) -> None:
        if initial_ms < 0 or max_ms < 0:
            raise ValueError("backoff intervals must be >= 0")
        if multiplier < 1:
            raise ValueError("the backoff multiplier must be >= 1")
        if not 0.0 <= jitter < 1.0:
            raise ValueError("the backoff jitter must be in [0, 1)")
        self.initial_ms = min(initial_ms, max_ms)
        self.max_ms = max_ms
        self.multiplier = multiplier
        self.jitter = jitter
        self._rng = rng if rng is not None else random.Random()
        # The exponent at which the term reaches max_ms (0: a constant backoff).
        self._exp_max = (math.log(max_ms / max(self.initial_ms, 1)) / math.log(multiplier)
                         if max_ms > self.initial_ms and multiplier > 1 else 0.0)

    def backoff_ms(self, attempts: int) -> float:
        """Milliseconds to wait after ``attempts`` earlier failures (0: the first)."""
        if self._exp_max == 0.0:
            return float(self.initial_ms)
        exp = min(max(attempts, 0), self._exp_max)
        term = self.initial_ms * self.multiplier ** exp
        factor = (self._rng.uniform(1.0 - self.jitter, 1.0 + self.jitter)
                  if self.jitter > 0 else 1.0)
        return float(min(int(term * factor), self.max_ms))

    def backoff_s(self, attempts: int) -> float:
        """:meth:`backoff_ms` in seconds."""
        return self.backoff_ms(attempts) / 1000.0

    def __repr__(self) -> str:
        return (f"ExponentialBackoff(initial_ms={self.initial_ms}, max_ms={self.max_ms}, "
                f"multiplier={self.multiplier}, jitter={self.jitter})")
