"""``buffer``: a bounded async boundary with an overflow strategy (DESIGN §3).

Two state machines share one base (upstream link, counters, statistics, release):

- :class:`BackpressureBufferSubscription` (``"backpressure"``, and ``limit_rate``): requests the
  prefetch at subscribe and replenishes by the :class:`~rxpipe._demand.Replenisher` rule, so
  items received but not yet delivered never exceed the prefetch. An upstream that emits beyond
  what was requested broke §1.1: ``MissingBackpressureError`` cuts ahead, upstream is cancelled.
- :class:`SheddingBufferSubscription` (``"drop_incoming"``, ``"drop_oldest"``, ``"error"``):
  requests ``UNBOUNDED`` and sheds when ``capacity`` items are held (Reactor's
  ``onBackpressureBuffer``/``onBackpressureDrop``), counting drops by strategy name.

Both deliver through :class:`~rxpipe._demand.QueueDrainSubscription`'s pass; counters are synced
once per pass, never per item.
"""

from __future__ import annotations

from typing import Any

from rxpipe._demand import QueueDrainSubscription, Replenisher, StageLink, discard
from rxpipe._protocol import UNBOUNDED, Subscriber
from rxpipe.errors import BufferOverflowError, MissingBackpressureError
from rxpipe.flowable import Flowable
from rxpipe.metrics import StageStatistics

__all__ = [
    "OVERFLOW_STRATEGIES",
    "BufferFlowable",
    "BufferSubscription",
    "BackpressureBufferSubscription",
    "SheddingBufferSubscription",
]

#: Accepted values of ``buffer(overflow=)``; the shedding ones double as drop reasons in metrics.
OVERFLOW_STRATEGIES = ("backpressure", "drop_incoming", "drop_oldest", "error")


class BufferSubscription(QueueDrainSubscription, StageLink):
    """Base: subscriber to upstream, subscription to downstream, FIFO of at most ``capacity``.

    ``upstream_done`` turns true once upstream terminated or was cancelled by this stage; later
    upstream signals are ignored (§3.12 allows items in flight after a cancel).
    """

    __slots__ = ("upstream", "upstream_done", "capacity", "received", "counters")

    def __init__(self, downstream: Subscriber[Any], capacity: int, name: str) -> None:
        super().__init__(downstream)
        self.upstream_done = False
        self.capacity = capacity
        #: items received from upstream (synced into ``counters`` once per pass)
        self.received = 0
        self._link_stage(name)

    # -- upstream signals ----------------------------------------------------------------------
    def on_error(self, error: BaseException) -> None:
        if self.upstream_done:
            return
        self.upstream_done = True
        self.error = error  # delivered after the buffered items, like the "error" overflow
        self.finished = True
        self.drain()

    def on_complete(self) -> None:
        if self.upstream_done:
            return
        self.upstream_done = True
        self.finished = True
        self.drain()

    # -- for subclasses ------------------------------------------------------------------------
    def _cancel_upstream(self) -> None:
        if not self.upstream_done:
            self.upstream_done = True
            if self.upstream is not None:
                self.upstream.cancel()

    def _on_delivered(self, count: int) -> None:
        counters = self.counters
        counters.items_in = self.received
        counters.items_out = self.emitted

    def _release(self) -> None:
        self._cancel_upstream()
        self.queue.clear()
        counters = self.counters
        counters.items_in = self.received
        counters.items_out = self.emitted

    # -- introspection -------------------------------------------------------------------------
    def statistics(self) -> StageStatistics:
        """Demand (items), items buffered now, capacity, items in/out, drops by reason."""
        counters = self.counters
        return StageStatistics(counters.stage, self.requested, len(self.queue), self.capacity,
                               self.received, self.emitted, dict(counters.dropped))


class BackpressureBufferSubscription(BufferSubscription):
    """Prefetch ``replenisher.initial`` at subscribe, then ``replenisher.limit`` per ``limit``
    items delivered. Invariant: ``received - emitted <= capacity`` (the prefetch), because
    ``upstream_requested <= capacity + emitted``; so the queue never needs a bound check."""

    __slots__ = ("replenisher", "upstream_requested", "prefetch_due")

    def __init__(self, downstream: Subscriber[Any], replenisher: Replenisher, name: str) -> None:
        super().__init__(downstream, replenisher.initial, name)
        self.replenisher = replenisher
        self.prefetch_due = False
        #: total requested from upstream; -1 once upstream is done, so any item is "over"
        self.upstream_requested = 0

    def _upstream_ready(self) -> None:
        self.prefetch_due = True
        self.drain()  # the prefetch request is made from inside the drain loop (see _drain)

    def _drain(self) -> None:
        # Every upstream request is made from inside the drain loop: a synchronous upstream then
        # emits into the queue (the loop is only marked missed) and its items go downstream in
        # passes of up to `limit`, instead of one pass per item driven by the upstream's loop.
        if self.prefetch_due:
            self.prefetch_due = False
            if not self.upstream_done:
                self.upstream_requested = self.replenisher.initial
                self.upstream.request(self.replenisher.initial)  # type: ignore[union-attr]
        super()._drain()

    def on_next(self, item: Any) -> None:
        r = self.received + 1
        if r > self.upstream_requested:
            self._overrun(item)
            return
        self.received = r
        self.queue.append(item)
        # The hottest line of a boundary: drain()'s own "already running → mark missed" exit,
        # inlined (a synchronous upstream emits its whole burst from inside our drain pass).
        if self._wip:
            self._missed = True
        else:
            self.drain()

    def _overrun(self, item: Any) -> None:
        if self.upstream_done or self.cancelled:
            return  # in flight after cancel or after termination: ignored
        self.counters.drop("error", len(self.queue) + 1)
        for held in (*self.queue, item):
            discard(held, "error")
        self.fail(MissingBackpressureError(
            f"Reactive Streams §1.1: upstream of stage {self.counters.stage!r} emitted {item!r} beyond "
            f"the {self.upstream_requested} items requested"))

    def _cancel_upstream(self) -> None:
        self.upstream_requested = -1
        super()._cancel_upstream()

    def on_error(self, error: BaseException) -> None:
        self.upstream_requested = -1
        super().on_error(error)

    def on_complete(self) -> None:
        self.upstream_requested = -1
        super().on_complete()

    def _on_delivered(self, count: int) -> None:
        counters = self.counters
        counters.items_in = self.received
        counters.items_out = self.emitted
        due = self.replenisher.consumed(count)
        if due and not self.upstream_done:
            limit = self.replenisher.limit
            upstream = self.upstream
            assert upstream is not None
            for _ in range(due):  # one request(limit) per limit items, as the rule reads
                self.upstream_requested += limit
                upstream.request(limit)
                if self.upstream_done:
                    break


class SheddingBufferSubscription(BufferSubscription):
    """Requests ``UNBOUNDED``; when ``capacity`` items are held, sheds per ``overflow``."""

    __slots__ = ("overflow",)

    def __init__(self, downstream: Subscriber[Any], capacity: int, overflow: str, name: str) -> None:
        super().__init__(downstream, capacity, name)
        self.overflow = overflow

    def _upstream_ready(self) -> None:
        # Outside the drain loop on purpose: a synchronous upstream then delivers each item while
        # there is demand, and sheds only when downstream really is behind.
        self.upstream.request(UNBOUNDED)  # type: ignore[union-attr]

    def on_next(self, item: Any) -> None:
        if self.upstream_done:
            return
        self.received += 1
        queue = self.queue
        if len(queue) < self.capacity:
            queue.append(item)
            self.drain()
            return
        # Full: downstream has no demand (or is inside its on_next); shed without draining.
        overflow = self.overflow
        self.counters.drop(overflow)
        if overflow == "drop_oldest":
            discard(queue.popleft(), overflow)
            queue.append(item)
            return
        discard(item, overflow)
        if overflow == "error":
            self._cancel_upstream()
            self.error = BufferOverflowError(
                f"stage {self.counters.stage!r} received an item while holding its capacity of "
                f"{self.capacity} items (overflow='error')")
            self.finished = True
            self.drain()
        # "drop_incoming": the arriving item is simply not kept


class BufferFlowable(Flowable[Any]):
    """The stage ``buffer(capacity, overflow)``."""

    kind = "buffer"

    def __init__(self, source: Flowable[Any], capacity: int, overflow: str, name: str | None) -> None:
        super().__init__(name=name, upstreams=(source,))
        self.source = source
        self.capacity = capacity
        self.overflow = overflow

    def _subscribe(self, subscriber: Subscriber[Any]) -> None:
        subscription: BufferSubscription
        if self.overflow == "backpressure":
            subscription = BackpressureBufferSubscription(subscriber, Replenisher(self.capacity), self.name)
        else:
            subscription = SheddingBufferSubscription(subscriber, self.capacity, self.overflow, self.name)
        self.source._subscribe(subscription)
