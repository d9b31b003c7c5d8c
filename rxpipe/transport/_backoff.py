"""Exponential backoff with full jitter, for every retry loop of the transport."""

from __future__ import annotations

import random

__all__ = ["Backoff"]


class Backoff:
    """Exponential backoff with full jitter (AWS Architecture Blog, "Exponential Backoff And
    Jitter"): the n-th consecutive failure waits ``uniform(0, min(cap_s, base_s * 2**n))`` s."""

    __slots__ = ("base_s", "cap_s", "failures", "_rng")

    def __init__(self, base_s: float, cap_s: float, rng: random.Random | None = None) -> None:
        self.base_s = base_s
        self.cap_s = cap_s
        self.failures = 0
        self._rng = rng or random.Random()

    def next_delay(self) -> float:
        """Record a failure; return the seconds to wait before the next attempt."""
        bound = min(self.cap_s, self.base_s * 2.0 ** min(self.failures, 30))
        self.failures += 1
        return self._rng.uniform(0.0, bound)

    def reset(self) -> None:
        self.failures = 0
