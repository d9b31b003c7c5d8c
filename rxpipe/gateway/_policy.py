"""Admission policy of the HTTP edge: drain-rate estimate, Retry-After, per-key token buckets."""

from __future__ import annotations

import math
import random
from collections import OrderedDict, deque

from ..token_bucket import TokenBucket

__all__ = ["DrainMeter", "KeyBuckets", "Refusal", "RESERVATION_MARGIN", "clamp_retry_after", "retry_after_headers"]


class DrainMeter:
    """Measures how fast admitted requests leave the queue (start running on the engine).

    ``record_admit`` when the edge admits a request into the graph, ``record_start`` when the
    engine takes it, ``record_abandon`` when it leaves without starting (client gone, error).
    ``backlog`` = admitted − started − abandoned; ``rate(now)`` = starts per second over the last
    ``horizon_s`` seconds (at most the last ``samples`` starts); ``estimated_wait(now)`` =
    backlog / rate (seconds), or None while no rate is known. A rate needs two starts at least
    ``min_span_s`` (0.25 s) apart in the window: starts come in bursts (a batch starts at once),
    and a burst alone says nothing about how fast the queue drains.
    """

    #: shortest window of starts a rate is computed over (seconds)
    min_span_s = 0.25

    __slots__ = ("horizon_s", "starts", "backlog", "services", "service_quantile", "_service_s", "_stale",
                 "reserved_until")

    def __init__(self, horizon_s: float = 10.0, samples: int = 256, service_quantile: float = 0.9) -> None:
        self.horizon_s = horizon_s
        self.starts: deque[float] = deque(maxlen=samples)
        self.backlog = 0
        self.services: deque[float] = deque(maxlen=samples)
        self.service_quantile = service_quantile
        self._service_s = 0.0
        self._stale = 0
        #: loop time of the latest admission slot promised to a refused client (see :meth:`reserve`)
        self.reserved_until = -math.inf

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
        if len(starts) < 2 or now - starts[0] < self.min_span_s:  # no rate from one burst
            return None
        return len(starts) / (now - starts[0])

    def estimated_wait(self, now: float) -> float | None:
        if self.backlog == 0:
            return 0.0
        rate = self.rate(now)
        return None if rate is None else self.backlog / rate

    def reserve(self, now: float, floor_s: float, low_s: float, high_s: float, rng: random.Random) -> float:
        """Retry-After (seconds) for one more refused client: a reservation of a future admission.

        With the drain rate ``r`` measured (times :data:`RESERVATION_MARGIN`, so that clients who
        come back when told arrive a little slower than the queue drains) and ``i = 1 / r``, the
        first refusal gets ``(backlog + 1) · i`` and each further one the slot ``i`` after the
        latest promised (``reserved_until``), never earlier than ``low_s`` nor than ``floor_s``
        (an engine's remaining pause): the k-th refusal within one drain interval gets about
        ``(backlog + k) / r`` (DESIGN §5). Plus a jitter of up to half an interval, which keeps
        the order. Clamped to ``[low_s, high_s]``; the promise horizon stops at ``high_s``, and
        once every slot up to it is promised, refusals get a time spread over its last quarter.
        Without a measured rate: ``max(low_s, floor_s)`` plus a jitter of up to ``low_s``
        (spread, not lock-step), and nothing is promised.
        """
        return self._promise(now, floor_s, low_s, high_s, rng, queue=True)

    def stagger(self, now: float, earliest_s: float, low_s: float, high_s: float, rng: random.Random) -> float:
        """Retry-After (seconds) for a refusal whose retry is useful no earlier than ``earliest_s``
        from now (a latency-budget refusal: the excess of the estimated wait over the budget, or
        an engine's pause): the slot one drain interval after the latest promised one, never
        earlier than ``earliest_s`` — so refusals made together are told times one interval apart
        instead of the same one (DESIGN §5, "Retry-After that spreads retries"). The same promise
        book, jitter and clamping as :meth:`reserve`."""
        return self._promise(now, earliest_s, low_s, high_s, rng, queue=False)

    def _promise(self, now: float, floor_s: float, low_s: float, high_s: float, rng: random.Random, *,
                 queue: bool) -> float:
        floor_s = max(low_s, floor_s)
        if floor_s >= high_s:
            # nothing can be promised before the horizon (an engine paused longer than it, say):
            # the honest wait, capped by the edge's maximum; no slot is booked
            return high_s
        rate = self.rate(now)
        if rate is None:
            return min(high_s, floor_s + rng.uniform(0.0, low_s))
        interval = 1.0 / (rate * RESERVATION_MARGIN)
        if queue:  # a place in the queue: behind everything queued now
            floor_s = max(floor_s, (self.backlog + 1) * interval)
        slot = max(self.reserved_until + interval, now + floor_s)
        if slot > now + high_s:
            # Every slot up to the horizon is promised (sustained overload): no promise can be
            # kept, so spread these over the last quarter of the horizon instead of in lock-step.
            self.reserved_until = now + high_s
            return high_s - rng.uniform(0.0, high_s / 4)
        self.reserved_until = slot
        return min(high_s, slot - now + rng.uniform(0.0, interval / 2))


#: reservations assume the queue drains at this share of the measured rate (see DrainMeter.reserve)
RESERVATION_MARGIN = 0.9


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
