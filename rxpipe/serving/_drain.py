"""The queue's drain as measured from its requests' admissions, starts and ends
(:class:`DrainMeter`): the edge's admission policy (Retry-After, latency budget) and a broker
gateway's wait bound read it (DESIGN §5, §8)."""

from __future__ import annotations

import bisect
import random
from collections import deque

__all__ = ["DrainMeter", "RESERVATION_MARGIN"]


class DrainMeter:
    """Measures how fast the queue drains, and keeps the book of admission slots promised to
    refused clients.

    ``record_admit`` when the edge admits a request into the graph, ``record_start`` when the
    engine takes it, ``record_abandon`` when it leaves without starting (client gone, error),
    ``record_finish`` when a started request ends, any outcome (its slot is free): each with the
    loop time. ``backlog`` = admitted − started − abandoned.

    The drain rate is measured *while requests wait*: finishes while the backlog is above zero,
    per second of the time the engine was full meanwhile (each such finish lets one waiting
    request in). A wait begins with the engine full since its last finish or start; a start that
    no finish made room for (the engine had room: it fills up as a wait begins, or a batch
    stage let go of its items) restarts that clock, and one interval counts at most the p90
    service time (no slot runs longer). Time with an empty queue does not count: a burst's slow
    tail and the quiet after it, while refused clients are still away, say how fast clients
    come, not how fast the engine drains, and must not make the next burst's promises longer
    (issue 26). ``rate(now)`` = those finishes over the last ``horizon_s`` seconds (at most the
    last ``samples``) per second of their intervals, or None before two of them over at least
    ``min_span_s`` (sequences end in groups: a batch finishes at once); ``estimated_wait(now)``
    = backlog / rate (seconds), or None while no rate is known.

    The book (:meth:`reserve`, :meth:`stagger`) holds the loop time each refused client was told
    to come back at; a promise leaves it when that time passes — a client that honours
    Retry-After comes back then — so the book describes the clients still away, never an
    earlier burst's. At most ``max_promises`` are kept (more than the horizon holds at any drain
    rate up to ``max_promises / 60`` per second).
    """

    #: shortest waiting time a rate is computed over (seconds)
    min_span_s = 0.25

    __slots__ = ("horizon_s", "intervals", "backlog", "services", "service_quantile", "_ordered",
                 "_span", "_mark", "_last", "_freed", "book", "_head", "max_promises")

    def __init__(self, horizon_s: float = 10.0, samples: int = 256, service_quantile: float = 0.9,
                 max_promises: int = 1 << 16) -> None:
        self.horizon_s = horizon_s
        #: (loop time of a finish while requests waited, seconds they waited since the previous one)
        self.intervals: deque[tuple[float, float]] = deque(maxlen=samples)
        #: the sum of those seconds
        self._span = 0.0
        self.backlog = 0
        self.services: deque[float] = deque(maxlen=samples)
        self.service_quantile = service_quantile
        #: the same samples, sorted (kept so at each sample: a quantile is then one index)
        self._ordered: list[float] = []
        #: since when the engine is full and not counted in a sample yet (loop time)
        self._mark = 0.0
        #: loop time of the last finish or start
        self._last = 0.0
        #: slots freed by finishes while requests waited, not yet taken by a start
        self._freed = 0
        #: loop times refused clients were told to come back at, sorted; entries before ``_head`` are spent
        self.book: list[float] = []
        self._head = 0
        self.max_promises = max_promises

    def record_service(self, seconds: float) -> None:
        """A request finished ``seconds`` after it started running (its service time). Once per
        request: the sample that leaves the window leaves the sorted copy (a bisection and one
        ``del``), the new one is inserted (``bisect.insort``), instead of a sort per read."""
        services = self.services
        ordered = self._ordered
        if len(services) == services.maxlen:
            del ordered[bisect.bisect_left(ordered, services[0])]
        services.append(seconds)
        bisect.insort(ordered, seconds)

    def service_time(self) -> float:
        """The ``service_quantile`` of the last ``samples`` service times (seconds; 0.0 before any)."""
        ordered = self._ordered
        if not ordered:
            return 0.0
        return ordered[min(len(ordered) - 1, int(self.service_quantile * len(ordered)))]

    def record_admit(self, now: float) -> None:
        if self.backlog == 0:
            self._mark = self._last  # a wait begins: nothing finished or started since
        self.backlog += 1

    def record_start(self, now: float) -> None:
        self._last = now
        if self._freed:
            self._freed -= 1  # the room a finish made
        elif self.backlog:
            self._mark = now  # room the engine had: full (at most) from now on
        if self.backlog:
            self.backlog -= 1
        if not self.backlog:
            self._freed = 0

    def record_abandon(self, now: float) -> None:
        if self.backlog:
            self.backlog -= 1
        if not self.backlog:
            self._freed = 0

    def record_finish(self, now: float) -> None:
        self._last = now
        if not self.backlog:
            return  # nobody waits: the slot stays free, the next arrival starts at once
        self._freed += 1
        seconds = now - self._mark
        self._mark = now
        longest = self.service_time()
        if longest and seconds > longest:
            seconds = longest
        intervals = self.intervals
        if len(intervals) == intervals.maxlen:
            self._span -= intervals.popleft()[1]
        intervals.append((now, seconds))
        self._span += seconds

    def rate(self, now: float) -> float | None:
        intervals = self.intervals
        while intervals and intervals[0][0] < now - self.horizon_s:
            self._span -= intervals.popleft()[1]
        if len(intervals) < 2:
            # no rounding drift carried on (no sum(<genexpr>): asked for every refusal)
            self._span = intervals[0][1] if intervals else 0.0
            return None
        if self._span < self.min_span_s:  # no rate from one group of finishes
            return None
        return len(intervals) / self._span

    def estimated_wait(self, now: float) -> float | None:
        if self.backlog == 0:
            return 0.0
        rate = self.rate(now)
        return None if rate is None else self.backlog / rate

    def promised(self, now: float, after: float | None = None) -> int:
        """Refused clients told to come back later than ``now`` (or than ``after``, if given)."""
        book = self.book
        head = bisect.bisect_right(book, now, self._head)
        if head > 4096 and head > len(book) // 2:  # spent promises leave in blocks (amortized O(1))
            del book[:head]
            head = 0
        self._head = head
        return len(book) - (head if after is None else bisect.bisect_left(book, after, head))

    def reserve(self, now: float, floor_s: float, low_s: float, high_s: float, rng: random.Random) -> float:
        """Retry-After (seconds) for one more refused client: a reservation of a future admission.

        With the drain rate ``r`` measured (times :data:`RESERVATION_MARGIN`) and ``i = 1 / r``, the
        slot is behind everything waiting now and every client still away:
        ``(backlog + promised + 1) · i`` — the k-th refusal within one drain interval gets about
        ``(backlog + k) / r`` (DESIGN §5) — never earlier than ``low_s`` nor than ``floor_s``
        (an engine's remaining pause), and behind the clients already told to come back after
        that floor (one interval each). Plus a jitter of up to half an interval, which keeps
        the order. Clamped to ``[low_s, high_s]``; once the promises reach ``high_s``, refusals
        get a time spread over its last quarter. Without a measured rate: ``max(low_s, floor_s)``
        plus a jitter of up to ``low_s`` (spread, not lock-step). Every answer is booked, and
        leaves the book when its time passes (see the class docstring).
        """
        return self._promise(now, floor_s, low_s, high_s, rng, queue=True)

    def stagger(self, now: float, earliest_s: float, low_s: float, high_s: float, rng: random.Random) -> float:
        """Retry-After (seconds) for a refusal whose retry is useful no earlier than ``earliest_s``
        from now (a latency-budget refusal: the excess of the estimated wait over the budget, or
        an engine's pause): the slot one drain interval after the clients already told to come
        back after ``earliest_s``, and behind every client still away — so refusals made
        together are told times one interval apart instead of the same one (DESIGN §5,
        "Retry-After that spreads retries"). The same book, jitter and clamping as
        :meth:`reserve`, without the queue's backlog ahead."""
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
            told = slot_s = min(high_s, floor_s + rng.uniform(0.0, low_s))
        else:
            interval = 1.0 / (rate * RESERVATION_MARGIN)
            ahead = self.backlog if queue else 0
            away = self.promised(now)
            book = self.book
            # the next slot after the latest promised, unless that chain is longer than what is
            # still promised now at today's rate (promises made at a slower rate, or whose time
            # passed): then the slot behind everything waiting and every client still away
            slot_s = (ahead + 1) * interval
            if away:
                slot_s = max(slot_s, min(book[-1] - now + interval, (ahead + away + 1) * interval))
            if floor_s + away * interval > slot_s:  # behind the clients told to come after the floor
                after = len(book) - bisect.bisect_left(book, now + floor_s, self._head)
                slot_s = max(slot_s, floor_s + after * interval)
            if slot_s > high_s:
                # Every slot up to the horizon is promised (sustained overload): no promise can be
                # kept, so spread these over the last quarter of the horizon instead of in lock-step.
                told = slot_s = high_s - rng.uniform(0.0, high_s / 4)
            else:
                # the jitter keeps the order of promises and is not booked: it never accumulates
                told = min(high_s, slot_s + rng.uniform(0.0, interval / 2))
        if len(self.book) - self._head < self.max_promises:
            bisect.insort(self.book, now + slot_s, self._head)
        return told


#: reservations assume the queue drains at this share of the measured rate (see DrainMeter.reserve).
#: 1.0: the backlog ahead of the k-th refused client is already the cushion for clients who come
#: back early (the queue has room for them); a smaller share made them come back slower than the
#: engine drains, and it idled at the end of every burst (0.9: 22 % of the samples of a 200-client
#: burst, 8 % longer; bench/retry_bursts.py)
RESERVATION_MARGIN = 1.0
