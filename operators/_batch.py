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

from rxpipe._protocol import Subscriber
from rxpipe.flowable import Flowable
from rxpipe.metrics import StageStatistics
from rxpipe.stage import EMPTY_SUBSCRIPTION, LINK_SLOTS, Capabilities, DrainSubscription, UpstreamLink, discard_all

__all__ = ["BatchFlowable", "BatchSubscription"]


class BatchSubscription(DrainSubscription, UpstreamLink):
    """One run of ``batch``: see the module docstring for the state machine."""

    __slots__ = (*LINK_SLOTS, "max_size", "max_delay_s", "weight", "max_weight", "loop",
                 "timer", "current", "current_weight", "expired", "ready", "finished",
                 "received", "items_out")

    def __init__(self, downstream: Subscriber[Any], max_size: int, max_delay_s: float | None,
                 weight: Callable[[Any], float] | None, max_weight: float | None,
                 loop: asyncio.AbstractEventLoop | None, name: str) -> None:
        super().__init__(downstream)
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
        self.received = 0
        #: items (not batches) delivered downstream; ``emitted`` counts batches
        self.items_out = 0
        self.link_upstream(name)

    # -- upstream signals ----------------------------------------------------------------------
    def _upstream_ready(self) -> None:
        self.drain()  # requests the look-ahead batch

    def on_next(self, item: Any) -> None:
        if not self.accept(item):
            return
        self.received += 1
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
            self.cancel_upstream()
            discard_all((*self._held_items(), item), "error", self.counters)
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
        if not self.upstream_terminated():
            return
        discard_all(self._held_items(), "error", self.counters)
        self.fail(error)  # at once, ahead of ready batches (Akka and Reactor fail fast here)

    def on_complete(self) -> None:
        if not self.upstream_terminated():
            return
        if self.current:
            self._close()
        self.finished = True
        self.drain()

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

    def _holds(self) -> bool:
        # a closed batch, or an open one whose delay ran out: what goes out on demand (an open
        # batch within its delay waits for input, which is idle time)
        return bool(self.ready) or self.expired

    def _held(self) -> int:
        return len(self.current) + sum(len(b) for b in self.ready)

    def _held_items(self) -> list[Any]:
        return [item for batch in (self.current, *self.ready) for item in batch]

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
            self._delivered(e, r)
            self.items_out += items
            counters = self.counters
            counters.items_in = self.received
            counters.items_out = self.items_out
            if self.cancelled:
                return
        if self.finished:
            if not ready:
                self._complete()
            return
        if not self.upstream_done:
            # Top outstanding upstream + held up to the allowance: one batch of look-ahead, plus
            # one more while a batch is demanded.
            allowance = self.max_size * (2 if self.requested else 1)
            deficit = allowance - self.upstream_outstanding - (self.received - self.items_out)
            if deficit > 0:
                self.request_upstream(deficit)

    def _release(self) -> None:
        self.cancel_upstream()
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

    It declares ``Capabilities(max_batch_size=max_size)``: a downstream executor (through any
    pass-through stages) reads it to request a batch only when it has room for a whole one.
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

    @property
    def capabilities(self) -> Capabilities:
        """Items are lists of at most ``max_size`` elements."""
        return Capabilities(max_batch_size=self.max_size)

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
