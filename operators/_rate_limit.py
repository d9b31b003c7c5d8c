"""``rate_limit``: token-bucket shaping of upstream demand on the loop clock.

The bucket (:class:`rxpipe.token_bucket.TokenBucket`) holds at most ``burst`` tokens, starts full
and refills ``rate`` tokens per second of ``loop.time()``. Each item takes a token when it
arrives, and upstream is never asked for more than the whole tokens available minus what it
already owes (``outstanding``). So outstanding ≤ tokens ≤ ``burst`` at every moment: an upstream
that stalls and then delivers everything it owes at once still sends at most ``burst`` items
back to back, and after the first burst items flow at most ``rate`` per second.

State machine: on downstream request, arrival or timer → one drain pass: deliver received items
(they were all demanded: outstanding + held never exceed demand), charge the arrivals' tokens,
then request ``min(wanted, whole tokens - outstanding)`` upstream with ``wanted = demand -
outstanding - held``. If tokens ran short, one timer (never more) wakes the loop when the next
token is due.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

from rxpipe._protocol import Subscriber
from rxpipe.flowable import Flowable
from rxpipe.metrics import StageStatistics
from rxpipe.stage import BUSY, EMPTY_SUBSCRIPTION, LINK_SLOTS, QueueDrainSubscription, UpstreamLink
from rxpipe.token_bucket import TokenBucket

__all__ = ["RateLimitFlowable", "RateLimitSubscription"]

#: Slack on whole-token counts against binary rounding (the same as ``TokenBucket.take_whole``).
_EPSILON = 1e-9


def _deadline(now: float, delay: float, rate: float) -> float:
    """``now + delay``, snapped to the nanosecond when that moves it by a negligible amount.

    Timers chain (each deadline starts from the previous one), so binary rounding accumulates:
    at 20/s the fourth token would be due at 0.15000000000000002 s, not 0.15 s. Snapping keeps
    virtual-clock schedules exact. It is applied only when the shift costs at most 1e-10 tokens,
    well inside the 1e-9 slack of whole-token counts, so an early wake-up still finds its token
    (no extra timer hop, no loop).
    """
    deadline = now + delay
    snapped = round(deadline, 9)
    return snapped if abs(snapped - deadline) * rate <= 1e-10 else deadline


class RateLimitSubscription(QueueDrainSubscription, UpstreamLink):
    """One run of ``rate_limit``: see the module docstring."""

    __slots__ = (*LINK_SLOTS, "bucket", "loop", "timer", "uncharged", "received")

    def __init__(self, downstream: Subscriber[Any], bucket: TokenBucket, loop: asyncio.AbstractEventLoop,
                 name: str) -> None:
        super().__init__(downstream)
        self.bucket = bucket
        self.loop = loop
        self.timer: asyncio.TimerHandle | None = None
        #: received items whose token is not taken yet (taken once per pass)
        self.uncharged = 0
        self.received = 0
        self.link_upstream(name)

    # -- upstream signals ----------------------------------------------------------------------
    def _upstream_ready(self) -> None:
        self.drain()

    def on_next(self, item: Any) -> None:
        if not self.accept(item):
            return
        self.uncharged += 1
        self.received += 1
        self.queue.append(item)
        self.drain()

    def _upstream_finished(self, error: BaseException | None) -> None:
        self._stop_timer()
        self.finish(error)  # after the items already received

    def _stop_timer(self) -> None:
        timer = self.timer
        if timer is not None:
            self.timer = None
            timer.cancel()

    # -- timer ---------------------------------------------------------------------------------
    def _on_timer(self) -> None:
        self.timer = None
        if not self.cancelled:
            self.drain()

    # -- drain pass ----------------------------------------------------------------------------
    def _drain(self) -> None:
        super()._drain()  # deliver held items; terminal signal once upstream is done and all went
        if self.cancelled or self.upstream_done:
            return
        bucket = self.bucket
        now = self.loop.time()
        if self.uncharged:
            bucket.take_whole(now, self.uncharged)  # each had a whole token reserved when requested
            self.uncharged = 0
        outstanding = self.upstream_outstanding
        wanted = self.requested - outstanding - len(self.queue)
        if wanted <= 0:
            return
        # Invariant: outstanding <= whole tokens. Items in flight are paid for on arrival.
        budget = math.floor(bucket.refill(now) + _EPSILON) - outstanding
        if budget > 0:
            n = min(wanted, budget)
            self.request_upstream(n)  # a synchronous upstream re-enters: drain marked missed
            if n == wanted or self.upstream_done or self.uncharged:
                return  # all wanted, or items arrived synchronously: the next pass charges them
        need = self.upstream_outstanding + 1
        if self.timer is None and need <= bucket.burst:
            # Arrivals do not move this moment (each takes a token and owes one less), so one timer
            # serves until it fires; with `burst` owed, the next arrival re-evaluates instead.
            self.timer = self.loop.call_at(_deadline(now, bucket.time_until(now, need), bucket.rate),
                                           self._on_timer)
            self._pressure_update()  # waiting for tokens while items are wanted: busy

    def _pressure_state(self) -> int:
        """Busy while it waits for tokens with downstream demand it could not ask upstream for
        (the shaping is its work), else backpressured or idle as any queue."""
        if self.timer is not None and self.requested:
            return BUSY
        return super()._pressure_state()

    def _on_delivered(self, count: int) -> None:
        counters = self.counters
        counters.items_in = self.received
        counters.items_out = self.emitted

    def _release(self) -> None:
        self._stop_timer()
        self.cancel_upstream()
        self.queue.clear()
        counters = self.counters
        counters.items_in = self.received
        counters.items_out = self.emitted

    # -- introspection -------------------------------------------------------------------------
    def statistics(self) -> StageStatistics:
        """Demand (items), items held (received, not yet delivered), no capacity (it holds at
        most what was demanded), items in/out, drops by reason (none: it never sheds)."""
        counters = self.counters
        return StageStatistics(counters.stage, self.requested, len(self.queue), None,
                               self.received, self.emitted, dict(counters.dropped))


class RateLimitFlowable(Flowable[Any]):
    """The stage ``rate_limit(rate, burst)``."""

    kind = "rate_limit"
    passes_capabilities = True

    def __init__(self, source: Flowable[Any], rate: float, burst: int, name: str | None) -> None:
        super().__init__(name=name, upstreams=(source,))
        self.source = source
        self.rate = rate
        self.burst = burst

    def _subscribe(self, subscriber: Subscriber[Any]) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            subscriber.on_subscribe(EMPTY_SUBSCRIPTION)
            subscriber.on_error(RuntimeError("rate_limit() must be subscribed on a running event loop"))
            return
        bucket = TokenBucket(self.rate, self.burst, loop.time())
        self.source._subscribe(RateLimitSubscription(subscriber, bucket, loop, self.name))
