"""``merge``: fair fan-in of several Flowables, never beyond downstream demand (DESIGN §3).

:class:`MergeSubscription` owns one :class:`MergeInner` per input. Each inner is a bounded
prefetch boundary (the §2 :class:`~rxpipe.stage.Replenisher` rule, default 32 items), so what
an input may have outstanding plus what waits in its queue never exceeds its prefetch. One drain
pass serves the inputs round-robin, one item each in turn, starting after the input served last
by the previous pass, so a fast input cannot starve a slow one.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from rxpipe._protocol import Subscriber
from rxpipe.errors import MissingBackpressureError
from rxpipe.flowable import Flowable
from rxpipe.metrics import StageCounters, StageStatistics, track
from rxpipe.stage import LINK_SLOTS, DrainSubscription, UpstreamLink

__all__ = ["MergeFlowable", "MergeSubscription", "MergeInner", "DEFAULT_MERGE_PREFETCH"]

#: Items each input of ``merge`` may have requested and not yet delivered downstream.
DEFAULT_MERGE_PREFETCH = 32


class MergeFlowable(Flowable[Any]):
    kind = "merge"

    def __init__(self, sources: tuple[Flowable[Any], ...], prefetch: int, name: str | None) -> None:
        super().__init__(name=name, upstreams=sources)
        self.sources = sources
        self.prefetch = prefetch

    def _subscribe(self, subscriber: Subscriber[Any]) -> None:
        subscription = MergeSubscription(subscriber, len(self.sources), self.prefetch, self.name)
        subscriber.on_subscribe(subscription)
        subscription.start(self.sources)


class MergeInner(UpstreamLink):
    """The subscriber to one input: a queue of at most ``prefetch`` items and its link (the
    prefetch rule of :class:`~rxpipe.stage.UpstreamLink`; an overrun fails the whole merge)."""

    __slots__ = (*LINK_SLOTS, "parent", "queue", "delivered")
    hands_itself_downstream = False

    def __init__(self, parent: MergeSubscription, prefetch: int) -> None:
        self.parent = parent
        self.queue: deque[Any] = deque()
        self.link_upstream(None, prefetch)
        self.counters = parent.counters
        #: items of this input delivered downstream in the current pass
        self.delivered = 0

    def on_next(self, item: Any) -> None:
        if self.accept(item):
            self.parent._inner_next(self, item)

    def _upstream_finished(self, error: BaseException | None) -> None:
        if error is None:
            self.parent._inner_complete()
        else:
            self.parent._inner_error(error)

    def _upstream_overrun(self, error: MissingBackpressureError) -> None:
        self.parent._inner_overrun(error)


class MergeSubscription(DrainSubscription):
    """Round-robin over the inputs' queues; completes when every input completed and drained.

    State: ``inners`` (one per input, source first), ``cursor`` (next input to serve),
    ``active`` (inputs not yet terminated), ``buffered`` (items queued over all inputs).
    """

    __slots__ = ("inners", "cursor", "active", "buffered", "prefetch", "counters")

    def __init__(self, downstream: Subscriber[Any], inputs: int, prefetch: int, name: str) -> None:
        super().__init__(downstream)
        self.counters = StageCounters(name)
        self.inners = [MergeInner(self, prefetch) for _ in range(inputs)]
        self.cursor = 0
        self.active = inputs
        self.buffered = 0
        self.prefetch = prefetch
        track(self)

    def start(self, sources: tuple[Flowable[Any], ...]) -> None:
        """Subscribe every input, in order (after downstream got ``on_subscribe``)."""
        for source, inner in zip(sources, self.inners, strict=True):
            if self.cancelled:
                return
            source._subscribe_safely(inner)
        if not self.cancelled and self.active == 0:
            self.drain()  # every input was empty

    # -- inputs --------------------------------------------------------------------------------
    def _inner_next(self, inner: MergeInner, item: Any) -> None:
        inner.queue.append(item)
        self.buffered += 1
        self.counters.items_in += 1
        self.drain()

    def _inner_error(self, error: BaseException) -> None:
        self.active -= 1
        self.fail(error)  # Reactor merge without delayError: cancels the other inputs

    def _inner_complete(self) -> None:
        self.active -= 1
        self.drain()

    def _inner_overrun(self, error: MissingBackpressureError) -> None:
        self.active -= 1
        self.fail(error)

    # -- downstream ----------------------------------------------------------------------------
    def _drain(self) -> None:
        r = self.requested
        e = 0
        if r and self.buffered:
            inners = self.inners
            n = len(inners)
            i = self.cursor
            on_next = self.downstream.on_next
            # Invariant: e <= r; each step serves input i once and moves on (round-robin), and
            # `buffered` counts items in all queues, so the loop ends when all are empty.
            while e != r and self.buffered:
                inner = inners[i]
                i = i + 1 if i + 1 < n else 0
                queue = inner.queue
                if queue:
                    self.buffered -= 1
                    inner.delivered += 1
                    e += 1
                    on_next(queue.popleft())
                    if self.cancelled:
                        break
            self.cursor = i
            self._delivered(e, r)
            self.counters.items_out += e
            if self.cancelled:
                return
            self._replenish()
            if self.cancelled:
                return
        if self.active == 0 and self.buffered == 0:
            self._complete()

    def _replenish(self) -> None:
        for inner in self.inners:
            count = inner.delivered
            if not count:
                continue
            inner.delivered = 0
            inner.replenish(count)

    def _release(self) -> None:
        for inner in self.inners:
            inner.cancel_upstream()
            inner.queue.clear()
        self.buffered = 0

    def _holds(self) -> bool:
        return self.buffered > 0

    def statistics(self) -> StageStatistics:
        """Demand (items), items queued over all inputs, capacity (= inputs × prefetch), in/out."""
        counters = self.counters
        return StageStatistics(counters.stage, self.requested, self.buffered,
                               self.prefetch * len(self.inners), counters.items_in, counters.items_out,
                               dict(counters.dropped))
