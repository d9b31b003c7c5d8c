"""``timeout``: signal ``TimeoutError`` when items stop coming while they are wanted (DESIGN §3).

A pass-through stage (demand forwarded exactly) with one timer. The timer is never re-armed per
item: an item only records the time, and a firing timer compares the real deadline with the
clock, re-arming itself for the remainder when the deadline moved. So the cost per item is one
``loop.time()`` read (idle mode) or one counter decrement (item mode).

- ``"idle"``: the clock runs only while some requested item has not arrived (upstream
  outstanding > 0); it restarts at each item and when demand resumes after none was outstanding.
  Time without demand never counts: a slow consumer does not fail its upstream.
- ``"item"`` (after anything but ``map_async``): each ``request(n)`` opens a group of ``n`` items
  due ``seconds`` after that request; groups are served in order by arriving items. One deadline
  per request call, never one per item.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

from rxpipe._protocol import UNBOUNDED, Subscriber
from rxpipe.flowable import Flowable
from rxpipe.metrics import StageStatistics
from rxpipe.stage import LINK_SLOTS, QueueDrainSubscription, UpstreamLink

__all__ = ["TimeoutFlowable", "TimeoutSubscription", "TIMEOUT_MODES"]

TIMEOUT_MODES = ("idle", "item")

# A loop may run a timer up to its clock resolution early; a deadline this close counts as reached.
_EARLY_S = 1e-6


class TimeoutFlowable(Flowable[Any]):
    kind = "timeout"
    passes_capabilities = True

    def __init__(self, source: Flowable[Any], seconds: float, mode: str, name: str | None) -> None:
        super().__init__(name=name, upstreams=(source,))
        self.source = source
        self.seconds = seconds
        self.mode = mode

    def _subscribe(self, subscriber: Subscriber[Any]) -> None:
        loop = asyncio.get_running_loop()  # RuntimeError → on_error (Flowable._subscribe_safely)
        self.source._subscribe(TimeoutSubscription(subscriber, self, loop))


class TimeoutSubscription(QueueDrainSubscription, UpstreamLink):
    """Forwards demand and items; one timer watches the oldest pending deadline.

    State: ``upstream_outstanding`` (requested upstream, not yet received), ``idle_since`` (idle
    mode: when the current wait began), ``deadlines`` (item mode: ``[due_time, items_left]`` per
    request, oldest first), ``handle`` (the timer, armed no later than the earliest deadline).
    """

    __slots__ = (*LINK_SLOTS, "loop", "seconds", "idle", "idle_since", "deadlines", "handle")

    def __init__(self, downstream: Subscriber[Any], stage: TimeoutFlowable,
                 loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(downstream)
        self.loop = loop
        self.seconds = stage.seconds
        self.idle = stage.mode == "idle"
        self.idle_since = 0.0
        self.deadlines: deque[list[float]] = deque()
        self.handle: asyncio.TimerHandle | None = None
        self.link_upstream(stage.name)

    # -- upstream signals ----------------------------------------------------------------------
    def on_next(self, item: Any) -> None:
        if not self.accept(item):
            return
        if self.idle:
            self.idle_since = self.loop.time()
        else:
            head = self.deadlines[0]
            head[1] -= 1
            if head[1] == 0:
                self.deadlines.popleft()
        self.counters.items_in += 1
        self.queue.append(item)
        self.drain()

    def _upstream_finished(self, error: BaseException | None) -> None:
        self._disarm()
        self.finish(error)  # after the items already received

    # -- downstream demand ---------------------------------------------------------------------
    def _on_request(self, n: int) -> None:
        if self.upstream_done:
            return
        now = self.loop.time()
        due = now + self.seconds
        if self.idle:
            if self.upstream_outstanding == 0:
                self.idle_since = now  # the wait starts now: time without demand did not count
        elif self.upstream_outstanding != UNBOUNDED:
            self.deadlines.append([due, UNBOUNDED if n >= UNBOUNDED else n])
        if self.handle is None:
            self.handle = self.loop.call_at(due, self._fire)
        self.request_upstream(n)

    # -- timer ---------------------------------------------------------------------------------
    def _fire(self) -> None:
        self.handle = None
        if self.cancelled or self.upstream_done:
            return
        if self.idle:
            if self.upstream_outstanding == 0:
                return  # nothing is awaited; the next request re-arms
            due = self.idle_since + self.seconds
        else:
            if not self.deadlines:
                return
            due = self.deadlines[0][0]
        if self.loop.time() + _EARLY_S >= due:
            waiting = self.upstream_outstanding
            what = "no item" if self.idle else "a requested item did not arrive"
            self.fail(TimeoutError(
                f"timeout: {what} within {self.seconds} s at stage {self.counters.stage!r} "
                f"({'unbounded' if waiting == UNBOUNDED else waiting} items outstanding)"))
        else:
            self.handle = self.loop.call_at(due, self._fire)

    def _disarm(self) -> None:
        handle = self.handle
        if handle is not None:
            self.handle = None
            handle.cancel()

    # -- downstream ----------------------------------------------------------------------------
    def _on_delivered(self, count: int) -> None:
        self.counters.items_out += count

    def _release(self) -> None:
        self._disarm()
        self.cancel_upstream()
        self.queue.clear()
        self.deadlines.clear()

    def statistics(self) -> StageStatistics:
        """Demand (items), items held (only while a pass runs), no capacity, items in/out."""
        counters = self.counters
        return StageStatistics(counters.stage, self.requested, len(self.queue), None,
                               counters.items_in, counters.items_out, dict(counters.dropped))
