"""``batch``: lists closed by size, by time or by a weight budget (Akka's groupedWeightedWithin).

State machine (one subscription):

- *open batch* ``current`` (with its weight and at most one timer, started by its first item);
- *ready* batches, closed and waiting for downstream demand (FIFO);
- on upstream item: append; close when ``max_size`` items or ``max_weight`` is reached (an item
  that would push the batch over ``max_weight`` closes it first; an item heavier than the budget
  alone goes alone); a close wakes the drain loop;
- on timer: the open batch is *expired*: it goes at once if there is demand for it, otherwise it
  stays open and keeps filling up to ``max_size`` and leaves as soon as demand arrives (Akka;
  never Reactor's bufferTimeout "could not emit buffer due to lack of requests");
- on downstream request / drain pass: deliver ready batches, then top up upstream demand;
- on upstream completion: the open batch closes (never an empty one), then ``on_complete``
  follows the ready batches; on upstream error: everything held is discarded (counted as
  dropped, reason ``"error"``) and the error is signalled at once.

Upstream demand: with ``D`` batches demanded downstream, items requested upstream but not yet
delivered downstream (outstanding + held) stay ≤ ``max_size * (1 + min(D, 1))``: one batch of
look-ahead without demand, two batches at most. Requests go out per drain pass, so a steady
stream makes one upstream request per batch delivered.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any, Callable

from rxpipe._demand import EMPTY_SUBSCRIPTION, DrainSubscription, StageLink, discard
from rxpipe._protocol import UNBOUNDED, Subscriber
from rxpipe.errors import MissingBackpressureError
from rxpipe.flowable import Flowable
from rxpipe.metrics import StageStatistics

__all__ = ["BatchFlowable", "BatchSubscription"]


class BatchSubscription(DrainSubscription, StageLink):
    """One run of ``batch``: see the module docstring for the state machine."""

    __slots__ = ("upstream", "upstream_done", "max_size", "max_delay_s", "weight", "max_weight", "loop",
                 "timer", "current", "current_weight", "expired", "ready", "finished",
                 "upstream_requested", "received", "items_out", "counters")

    def __init__(self, downstream: Subscriber[Any], max_size: int, max_delay_s: float | None,
                 weight: Callable[[Any], float] | None, max_weight: float | None,
                 loop: asyncio.AbstractEventLoop | None, name: str) -> None:
        super().__init__(downstream)
        self.upstream_done = False
        self.max_size = max_size
        self.max_delay_s = max_delay_s
        self.weight = weight
        self.max_weight = max_weight
        self.loop = loop
        self.timer: asyncio.TimerHandle | None = None
        self.current: list[Any] = []
        self.current_weight: float = 0
        self.expired = False
        self.ready: deque[list[Any]] = deque()
        self.finished = False
        #: items requested upstream in total; -1 once upstream is done (any item is then "over")
        self.upstream_requested = 0
        self.received = 0
        #: items (not batches) delivered downstream; ``emitted`` counts batches
        self.items_out = 0
        self._link_stage(name)

    # -- upstream signals ----------------------------------------------------------------------
    def _upstream_ready(self) -> None:
        self.drain()  # requests the look-ahead batch

    def on_next(self, item: Any) -> None:
        r = self.received + 1
        if r > self.upstream_requested:
            self._overrun(item)
            return
        self.received = r
        current = self.current
        if self.weight is not None:
            self._add_weighted(item)
            return
        current.append(item)
        if len(current) >= self.max_size:
            self._close()
            self.drain()
        elif len(current) == 1 and self.max_delay_s is not None:
            self._start_timer()

    def _add_weighted(self, item: Any) -> None:
        try:
            w = self.weight(item)  # type: ignore[misc]
            if not w >= 0:
                raise ValueError(f"batch weight must be a number >= 0, got {w!r} for {item!r}")
            closed = False
            if self.current and self.current_weight + w > self.max_weight:  # type: ignore[operator]
                self._close()
                closed = True
        except Exception as error:
            self._discard(1)
            self.fail(error)
            return
        current = self.current
        current.append(item)
        self.current_weight += w
        if len(current) >= self.max_size or self.current_weight >= self.max_weight:  # type: ignore[operator]
            self._close()
            closed = True
        elif len(current) == 1 and self.max_delay_s is not None:
            self._start_timer()
        if closed:
            self.drain()

    def on_error(self, error: BaseException) -> None:
        if self.upstream_done:
            return
        self.upstream_done = True
        self.upstream_requested = -1
        self._discard(0)
        self.fail(error)  # at once, ahead of ready batches (Akka and Reactor fail fast here)

    def on_complete(self) -> None:
        if self.upstream_done:
            return
        self.upstream_done = True
        self.upstream_requested = -1
        if self.current:
            self._close()
        self.finished = True
        self.drain()

    def _overrun(self, item: Any) -> None:
        if self.upstream_done or self.cancelled:
            return  # in flight after cancel, or after termination: ignored
        requested = self.upstream_requested
        self._discard(1)
        self.fail(MissingBackpressureError(
            f"Reactive Streams §1.1: upstream of stage {self.counters.stage!r} emitted {item!r} beyond "
            f"the {requested} items requested"))

    # -- timer ---------------------------------------------------------------------------------
    def _start_timer(self) -> None:
        loop = self.loop
        assert loop is not None and self.max_delay_s is not None
        self.timer = loop.call_at(loop.time() + self.max_delay_s, self._on_timer)

    def _on_timer(self) -> None:
        self.timer = None
        if self.cancelled or not self.current:
            return
        self.expired = True
        self.drain()

    # -- batches -------------------------------------------------------------------------------
    def _close(self) -> None:
        """Move the (non-empty) open batch to ``ready``."""
        self.ready.append(self.current)
        self.current = []
        self.current_weight = 0
        self.expired = False
        timer = self.timer
        if timer is not None:
            self.timer = None
            timer.cancel()

    def _held(self) -> int:
        return len(self.current) + sum(len(b) for b in self.ready)

    def _discard(self, extra: int) -> None:
        """Count everything held (plus ``extra`` items in hand) as dropped for an error."""
        count = self._held() + extra
        if count:
            self.counters.drop("error", count)
            for batch in (self.current, *self.ready):
                for item in batch:
                    discard(item, "error")

    # -- drain pass ----------------------------------------------------------------------------
    def _drain(self) -> None:
        ready = self.ready
        if self.expired and self.requested > len(ready):
            self._close()  # an expired open batch leaves once it is demanded
        r = self.requested
        if ready and r:
            on_next = self.downstream.on_next
            e = 0
            items = 0
            # Invariant: e batches delivered in this pass, e <= r (demand seen at its start).
            while e != r and ready:
                b = ready.popleft()
                items += len(b)
                on_next(b)
                e += 1
                if self.cancelled:
                    break
            self.emitted += e
            self.items_out += items
            counters = self.counters
            counters.items_in = self.received
            counters.items_out = self.items_out
            if r != UNBOUNDED:
                self.requested -= e
            if self.cancelled:
                return
        if self.finished:
            if not ready:
                self._complete()
            return
        if not self.upstream_done:
            # Outstanding upstream + held = upstream_requested - items_out; top it up to the
            # allowance: one batch of look-ahead, plus one more while a batch is demanded.
            allowance = self.max_size * (2 if self.requested else 1)
            deficit = allowance - (self.upstream_requested - self.items_out)
            if deficit > 0:
                self.upstream_requested += deficit
                self.upstream.request(deficit)  # type: ignore[union-attr]

    def _release(self) -> None:
        if not self.upstream_done:
            self.upstream_done = True
            self.upstream_requested = -1
            if self.upstream is not None:
                self.upstream.cancel()
        timer = self.timer
        if timer is not None:
            self.timer = None
            timer.cancel()
        self.current = []
        self.ready.clear()
        counters = self.counters
        counters.items_in = self.received
        counters.items_out = self.items_out

    # -- introspection -------------------------------------------------------------------------
    def statistics(self) -> StageStatistics:
        """Demand (batches), items held (open + ready), capacity (2 × max_size items), items
        in/out, drops by reason."""
        counters = self.counters
        return StageStatistics(counters.stage, self.requested, self._held(), 2 * self.max_size,
                               self.received, self.items_out, dict(counters.dropped))


class BatchFlowable(Flowable[Any]):
    """The stage ``batch(max_size, max_delay_s, weight=, max_weight=)``.

    ``max_size``, ``max_delay_s``, ``weight`` and ``max_weight`` are public: a downstream
    executor reads ``max_size`` to request a batch only when it has room for a whole one.
    """

    kind = "batch"

    def __init__(self, source: Flowable[Any], max_size: int, max_delay_s: float | None,
                 weight: Callable[[Any], float] | None, max_weight: float | None, name: str | None) -> None:
        super().__init__(name=name, upstreams=(source,))
        self.source = source
        self.max_size = max_size
        self.max_delay_s = max_delay_s
        self.weight = weight
        self.max_weight = max_weight

    def _subscribe(self, subscriber: Subscriber[Any]) -> None:
        loop: asyncio.AbstractEventLoop | None = None
        if self.max_delay_s is not None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                subscriber.on_subscribe(EMPTY_SUBSCRIPTION)
                subscriber.on_error(RuntimeError(
                    "batch(max_delay_s=...) must be subscribed on a running event loop (its timer)"))
                return
        subscription = BatchSubscription(subscriber, self.max_size, self.max_delay_s, self.weight,
                                         self.max_weight, loop, self.name)
        self.source._subscribe(subscription)
