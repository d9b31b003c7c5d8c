"""Admission policy of the HTTP edge: drain-rate estimate, Retry-After, per-key token buckets."""

from __future__ import annotations

import math
from collections import OrderedDict, deque

from ..token_bucket import TokenBucket

__all__ = ["DrainMeter", "KeyBuckets", "Refusal", "clamp_retry_after"]


class DrainMeter:
    """Measures how fast admitted requests leave the queue (start running on the engine).

    ``record_admit`` when the edge admits a request into the graph, ``record_start`` when the
    engine takes it, ``record_abandon`` when it leaves without starting (client gone, error).
    ``backlog`` = admitted − started − abandoned; ``rate(now)`` = starts per second over the last
    ``horizon_s`` seconds (at most the last ``samples`` starts); ``estimated_wait(now)`` =
    backlog / rate (seconds), or None while no rate is known.
    """

    __slots__ = ("horizon_s", "starts", "backlog", "services", "service_quantile", "_service_s", "_stale")

    def __init__(self, horizon_s: float = 10.0, samples: int = 256, service_quantile: float = 0.9) -> None:
        self.horizon_s = horizon_s
        self.starts: deque[float] = deque(maxlen=samples)
        self.backlog = 0
        self.services: deque[float] = deque(maxlen=samples)
        self.service_quantile = service_quantile
        self._service_s = 0.0
        self._stale = 0

    def record_service(self, seconds: float) -> None:
        """A request finished ``seconds`` after it started running (its service time)."""
        self.services.append(seconds)
        self._stale += 1

    def service_time(self) -> float:
        """The ``service_quantile`` of the last ``samples`` service times (seconds; 0.0 before
        any), re-sorted at most once per 16 new samples."""
        if self._stale and (self._stale >= 16 or len(self.services) <= 16):
            ordered = sorted(self.services)
            self._service_s = ordered[min(len(ordered) - 1, int(self.service_quantile * len(ordered)))]
            self._stale = 0
        return self._service_s

    def record_admit(self) -> None:
        self.backlog += 1

    def record_start(self, now: float) -> None:
        self.backlog = max(0, self.backlog - 1)
        self.starts.append(now)

    def record_abandon(self) -> None:
        self.backlog = max(0, self.backlog - 1)

    def rate(self, now: float) -> float | None:
        starts = self.starts
        while starts and starts[0] < now - self.horizon_s:
            starts.popleft()
        if len(starts) < 2:  # one start says nothing about a rate
            return None
        span = max(now - starts[0], 1e-3)
        return len(starts) / span

    def estimated_wait(self, now: float) -> float | None:
        if self.backlog == 0:
            return 0.0
        rate = self.rate(now)
        return None if rate is None else self.backlog / rate


def clamp_retry_after(seconds: float | None, low: float, high: float) -> float:
    """Clamp a Retry-After estimate to ``[low, high]`` seconds (None → ``low``)."""
    if seconds is None or math.isnan(seconds):
        return low
    return min(high, max(low, seconds))


class Refusal:
    """A refusal decided before expensive work: status, reason label, Retry-After seconds."""

    __slots__ = ("status", "reason", "retry_after_s", "message", "headers")

    def __init__(self, status: int, reason: str, retry_after_s: float, message: str,
                 headers: dict[str, str] | None = None) -> None:
        self.status = status
        self.reason = reason
        self.retry_after_s = retry_after_s
        self.message = message
        self.headers = headers or {}


class KeyBuckets:
    """Per-API-key token buckets, at most ``max_keys`` of them (least recently used evicted).

    Keys are the bounded key ids of the edge (``key_0`` ...), never raw secrets.
    """

    __slots__ = ("rate", "burst", "max_keys", "buckets")

    def __init__(self, rate: float, burst: int, max_keys: int = 10_000) -> None:
        self.rate = rate
        self.burst = burst
        self.max_keys = max_keys
        self.buckets: OrderedDict[str, TokenBucket] = OrderedDict()

    def bucket(self, key: str, now: float) -> TokenBucket:
        bucket = self.buckets.get(key)
        if bucket is None:
            bucket = self.buckets[key] = TokenBucket(self.rate, self.burst, now)
            if len(self.buckets) > self.max_keys:
                self.buckets.popitem(last=False)
        else:
            self.buckets.move_to_end(key)
        return bucket

    def check(self, key: str, now: float) -> tuple[bool, dict[str, str], float]:
        """Take one token for ``key``. Returns (allowed, x-ratelimit headers, seconds to a token)."""
        bucket = self.bucket(key, now)
        allowed = bucket.try_take(now)
        headers = {
            "x-ratelimit-limit-requests": str(self.burst),
            "x-ratelimit-remaining-requests": str(max(0, math.floor(bucket.tokens + 1e-9))),
            "x-ratelimit-reset-requests": f"{bucket.time_until_full(now):.2f}s",
        }
        return allowed, headers, bucket.time_until(now)
