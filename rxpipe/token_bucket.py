"""A token bucket on an explicit clock (seconds), shared by ``rate_limit`` and the HTTP edge."""

from __future__ import annotations

import math

__all__ = ["TokenBucket"]


class TokenBucket:
    """``rate`` tokens per second into a bucket holding at most ``burst``; full at start.

    The clock is passed in (``now``, seconds, e.g. ``loop.time()``), so the virtual clock drives
    it. Refill is lazy and capped: a forward clock jump never refills beyond ``burst``; a clock
    that goes backwards adds nothing. Classic token bucket (RFC 2697's committed bucket).

    Raises ValueError unless ``rate > 0`` and ``burst >= 1``.
    """

    __slots__ = ("rate", "burst", "tokens", "last")

    def __init__(self, rate: float, burst: float, now: float) -> None:
        if not rate > 0:
            raise ValueError(f"token bucket rate must be > 0 per second, got {rate!r}")
        if not burst >= 1:
            raise ValueError(f"token bucket burst must be >= 1, got {burst!r}")
        self.rate = float(rate)
        self.burst = float(burst)
        self.tokens = float(burst)
        self.last = now

    def refill(self, now: float) -> float:
        """Add what accrued since the last call; return the tokens available."""
        if now > self.last:
            self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
            self.last = now
        return self.tokens

    def try_take(self, now: float, n: float = 1) -> bool:
        """Take ``n`` tokens if available (True), else take nothing (False)."""
        if self.refill(now) >= n:
            self.tokens -= n
            return True
        return False

    def take_whole(self, now: float, limit: int) -> int:
        """Take as many whole tokens as available, at most ``limit``; return how many."""
        whole = min(limit, math.floor(self.refill(now) + 1e-9))
        if whole > 0:
            self.tokens = max(0.0, self.tokens - whole)
        return max(0, whole)

    def time_until(self, now: float, n: float = 1) -> float:
        """Seconds until ``n`` tokens are available (0 if they are now)."""
        missing = n - self.refill(now)
        return 0.0 if missing <= 0 else missing / self.rate

    def time_until_full(self, now: float) -> float:
        """Seconds until the bucket is full again."""
        return (self.burst - self.refill(now)) / self.rate
