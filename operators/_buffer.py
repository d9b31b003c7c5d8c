"""``buffer``: a bounded async boundary with an overflow strategy (DESIGN §3).

Two state machines share one base (upstream link, counters, statistics, release):

- :class:`BackpressureBufferSubscription` (``"backpressure"``, and ``limit_rate``): requests the
  prefetch at subscribe and replenishes by the :class:`~rxpipe.stage.Replenisher` rule, so
  items received but not yet delivered never exceed the prefetch. An upstream that emits beyond
  what was requested broke §1.1: ``MissingBackpressureError`` cuts ahead, upstream is cancelled.
- :class:`SheddingBufferSubscription` (``"drop_incoming"``, ``"drop_oldest"``, ``"error"``):
  requests ``UNBOUNDED`` and sheds when ``capacity`` items are held (Reactor's
  ``onBackpressureBuffer``/``onBackpressureDrop``), counting drops by strategy name.

The shedding one delivers through :class:`~rxpipe.stage.QueueDrainSubscription`'s pass. The
backpressured one hands items over in runs: its queue is a list that a fused source upstream
fills a run at a time (``run_sink``: one ``end_run(count)`` per run instead of one ``on_next``
per item), and each pass gives a fused chain downstream every item demand allows in one
``try_on_next_run`` call. Counters are synced once per pass, never per item.
"""

from __future__ import annotations

from operator import length_hint
from typing import Any, Callable

from rxpipe._protocol import UNBOUNDED, Subscriber
from rxpipe.errors import BufferOverflowError
from rxpipe.flowable import Flowable
from rxpipe.metrics import StageStatistics
from rxpipe.stage import LINK_SLOTS, QueueDrainSubscription, Replenisher, UpstreamLink, offer

__all__ = [
    "OVERFLOW_STRATEGIES",
    "BufferFlowable",
    "BufferSubscription",
    "BackpressureBufferSubscription",
    "SheddingBufferSubscription",
]

#: Accepted values of ``buffer(overflow=)``; the shedding ones double as drop reasons in metrics.
OVERFLOW_STRATEGIES = ("backpressure", "drop_incoming", "drop_oldest", "error")


class BufferSubscription(QueueDrainSubscription, UpstreamLink):
    """Base: subscriber to upstream, subscription to downstream, FIFO of at most ``capacity``.

    The link to upstream (outstanding counter, replenish rule, overrun, cancel-once, terminal
    flag) is :class:`~rxpipe.stage.UpstreamLink`'s.
    """

    __slots__ = (*LINK_SLOTS, "capacity", "received")

    def __init__(self, downstream: Subscriber[Any], capacity: int, name: str,
                 replenisher: Replenisher | None = None) -> None:
        super().__init__(downstream)
        self.capacity = capacity
        #: items received from upstream (synced into ``counters`` once per pass)
        self.received = 0
        self.link_upstream(name)
        self.replenisher = replenisher

    # An upstream error or completion follows the buffered items (UpstreamLink's default).

    # -- for subclasses ------------------------------------------------------------------------
    def _held_items(self) -> Any:
        return self.queue

    def _held_count(self) -> int:
        """Items buffered now."""
        return len(self.queue)

    def _items_in(self) -> int:
        """Items received from upstream so far."""
        return self.received

    def _sync_counters(self) -> None:
        counters = self.counters
        counters.items_in = self._items_in()
        counters.items_out = self.emitted

    def _on_delivered(self, count: int) -> None:
        self._sync_counters()

    def _release(self) -> None:
        self.cancel_upstream()
        self.queue.clear()
        self._sync_counters()

    # -- introspection -------------------------------------------------------------------------
    def statistics(self) -> StageStatistics:
        """Demand (items), items buffered now, capacity, items in/out, drops by reason."""
        counters = self.counters
        return StageStatistics(counters.stage, self.requested, self._held_count(), self.capacity,
                               self._items_in(), self.emitted, dict(counters.dropped))


class BackpressureBufferSubscription(BufferSubscription):
    """Prefetch ``replenisher.initial`` at subscribe, then ``replenisher.limit`` per ``limit``
    items delivered. Invariant: ``received - emitted <= capacity`` (the prefetch), because
    outstanding + queued <= prefetch; so the queue never needs a bound check.

    Items cross in runs, not one by one: the queue is a list, a fused source upstream appends
    a whole run to it (:meth:`run_sink`), and each pass hands downstream everything demand
    allows in one call (a fused chain's ``try_on_next_run``) or one tight loop. The items still
    held are ``queue[head:]``; the delivered prefix is cut off once it is at least half of the
    list, so a consumer taking one item per pass costs O(1) per item, amortized.
    """

    __slots__ = ("prefetch_due", "head")

    queue: list[Any]  # type: ignore[assignment]  # a list: iterated in place by each pass

    def __init__(self, downstream: Subscriber[Any], replenisher: Replenisher, name: str) -> None:
        super().__init__(downstream, replenisher.initial, name, replenisher)
        self.queue = []
        #: index in ``queue`` of the oldest item not yet taken by a pass
        self.head = 0
        self.prefetch_due = False

    def _held_items(self) -> Any:
        return self.queue[self.head:]

    def _held_count(self) -> int:
        return len(self.queue) - self.head

    def _holds(self) -> bool:
        return len(self.queue) > self.head

    def _items_in(self) -> int:
        # Not counted per item: a backpressured buffer drops nothing while it runs, so what it
        # received is what it delivered plus what it holds (frozen into `received` at release).
        return self.received if self._released else self.emitted + self._held_count()

    def _release(self) -> None:
        self.received = self.emitted + self._held_count()
        self.cancel_upstream()
        # A new list: nothing a run sink appends after the cancel reaches the stage. The old
        # one is cleared now, or, when a pass is iterating it (a cancel from inside on_next),
        # by that pass once it has counted what it took.
        held = self.queue
        self.queue = []
        self.head = 0
        if not self._wip:
            held.clear()
        self._sync_counters()

    def _upstream_ready(self) -> None:
        self.prefetch_due = True
        self.drain()  # the prefetch request is made from inside the drain loop (see _drain)

    def _drain(self) -> None:
        # Every upstream request is made from inside the drain loop: a synchronous upstream then
        # emits into the queue (the loop is only marked missed) and its items go downstream in
        # passes of up to `limit`, instead of one pass per item driven by the upstream's loop.
        if self.prefetch_due:
            self.prefetch_due = False
            UpstreamLink._upstream_ready(self)
        q = self.queue
        r = self.requested
        head = self.head
        if len(q) > head and r:
            it = iter(q)
            if head:
                it.__setstate__(head)  # type: ignore[attr-defined]  # list_iterator: start at head
            try_run = getattr(self.downstream, "try_on_next_run", None) if self.conditional_delivery else None
            if try_run is not None:
                # A fused chain takes the run in one call; an item it drops uses no demand.
                e = try_run(self, it, r)
            else:
                e = 0
                on_next = self.downstream.on_next
                for x in it:
                    on_next(x)
                    e += 1
                    if e == r or self.cancelled:
                        break
            # Invariant: e <= r delivered; `taken` (delivered + dropped by the chain) is how far
            # the iterator moved (items appended during the pass are part of it: a list iterator
            # tolerates appends, and a cancel replaces the queue instead of clearing it).
            end = len(q) - length_hint(it)
            taken = end - head
            if not self.cancelled:
                if end == len(q):
                    q.clear()
                    self.head = 0
                elif end >= len(q) - end:
                    del q[:end]  # moves at most as many items as were taken since the last cut
                    self.head = 0
                else:
                    self.head = end
            self.emitted += taken
            if r != UNBOUNDED:
                self.requested -= e
            self._on_delivered(taken)
            if self.cancelled:
                q.clear()  # the list a cancel during this pass replaced (see _release)
                return
        if len(q) == self.head and self.finished:
            if self.error is not None:
                self._error(self.error)
            else:
                self._complete()

    def on_next(self, item: Any) -> None:
        # UpstreamLink.accept's fast path, inlined on the hottest line of a boundary. Never
        # UNBOUNDED here (the prefetch is finite), so no saturation check; 0 = overrun or late.
        outstanding = self.upstream_outstanding
        if not outstanding:
            self.refuse(item)
            return
        self.upstream_outstanding = outstanding - 1
        self.queue.append(item)
        # drain()'s own "already running → mark missed" exit, inlined (a synchronous upstream
        # emits its whole burst from inside our drain pass).
        if self._wip:
            self._missed = True
        else:
            self.drain()

    # -- runs from a fused source (the batch-aware signal between fused segments) -------------
    def run_sink(self) -> tuple[list[Any], Callable[[int], None]]:
        """``(queue, end_run)`` for a trusted synchronous upstream (a fused source's pass).

        The upstream appends a run of items to ``queue`` with no per-item accounting, then calls
        ``end_run(count)``: the run's ``count`` items are counted against the outstanding demand
        and drained as one run. Only an upstream that never emits beyond what this stage
        requested may use it (the fused source's pass stops at its ``requested``, which is this
        stage's outstanding demand). Once this stage is released the queue is a new list, so
        nothing appended after a cancel can reach downstream.
        """
        return self.queue, self._end_run

    def _end_run(self, count: int) -> None:
        if self.upstream_done:
            # The run ended with upstream's terminal signal (a failed stage, take's end), whose
            # finish() drains what it queued; or this stage was cancelled (then nothing follows).
            return
        outstanding = self.upstream_outstanding
        if count > outstanding:
            self.refuse(self.queue.pop())  # §1.1 overrun: drop and tell the run, fail
            return
        self.upstream_outstanding = outstanding - count
        if self._wip:
            self._missed = True
        else:
            self.drain()

    def _on_delivered(self, count: int) -> None:
        self._sync_counters()
        self.replenish(count)


class SheddingBufferSubscription(BufferSubscription):
    """Requests ``UNBOUNDED``; when ``capacity`` items are held, sheds per ``overflow``."""

    __slots__ = ("overflow",)

    def __init__(self, downstream: Subscriber[Any], capacity: int, overflow: str, name: str) -> None:
        super().__init__(downstream, capacity, name)
        self.overflow = overflow

    def _upstream_ready(self) -> None:
        # Outside the drain loop on purpose: a synchronous upstream then delivers each item while
        # there is demand, and sheds only when downstream really is behind.
        self.request_upstream(UNBOUNDED)

    def on_next(self, item: Any) -> None:
        if self.accept(item) and offer(self, item):
            self.cancel_upstream()
            self.finish(BufferOverflowError(
                f"stage {self.counters.stage!r} received an item while holding its capacity of "
                f"{self.capacity} items (overflow='error')"))


class BufferFlowable(Flowable[Any]):
    """The stage ``buffer(capacity, overflow)``."""

    kind = "buffer"
    passes_capabilities = True

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
