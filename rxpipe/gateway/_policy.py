"""Admission policy of the HTTP edge: drain-rate estimate, Retry-After, per-key token buckets."""

from __future__ import annotations

import math
from collections import OrderedDict

from ..serving._drain import RESERVATION_MARGIN, DrainMeter
from ..token_bucket import TokenBucket

__all__ = ["DrainMeter", "KeyBuckets", "Refusal", "RESERVATION_MARGIN", "clamp_retry_after", "retry_after_headers"]


def clamp_retry_after(seconds: float | None, low: float, high: float) -> float:
    """Clamp a Retry-After estimate to ``[low, high]`` seconds (None → ``low``)."""
    if seconds is None or math.isnan(seconds):
        return low
    return min(high, max(low, seconds))


def retry_after_headers(seconds: float) -> dict[str, str]:
    """``retry-after-ms`` (exact milliseconds, >= 1000) and ``Retry-After`` (its ceiling in whole
    seconds, RFC 9110 §10.2.3) for a delay of ``seconds``."""
    ms = max(1000, math.ceil(seconds * 1000))
    return {"Retry-After": str(-(-ms // 1000)), "retry-after-ms": str(ms)}


class Refusal:
    """A refusal decided before expensive work: status, reason label, Retry-After seconds.

    ``code``: the error body's ``code`` (default: the reason label); ``param`` its ``param``. A
    429/503 says Retry-After; a 4xx of another status is final (the request can never be
    admitted as it is) and says none, so no client retries it.
    """

    __slots__ = ("status", "reason", "retry_after_s", "message", "headers", "code", "param")

    def __init__(self, status: int, reason: str, retry_after_s: float, message: str,
                 headers: dict[str, str] | None = None, *, code: str | None = None,
                 param: str | None = None) -> None:
        self.status = status
        self.reason = reason
        self.retry_after_s = retry_after_s
        self.message = message
        self.headers = headers or {}
        self.code = code or reason
        self.param = param


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
