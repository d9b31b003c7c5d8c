"""Marble sources: a diagram played cold (on demand) or hot (whatever the demand).

A :class:`MarbleSource` is a :class:`~rxpipe.testing.TestPublisher` that plays on the clock of
the :class:`~rxpipe.testing.Marbles` run that made it (see :mod:`rxpipe.testing._marbles`).
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any, Callable, Iterable

from .._protocol import Subscriber
from ..stage import EMPTY_SUBSCRIPTION, QueueDrainSubscription
from ._marble_parse import MarbleEvent
from ._publisher import TestPublisher

if TYPE_CHECKING:
    from ._marbles import Marbles

__all__ = ["MarbleSource"]

# Phases of a frame: the subscriber's demand marks act before sources' events.
_DEMAND, _SOURCES = 0, 1


# -- sources ----------------------------------------------------------------------------------
class _ColdSubscription(QueueDrainSubscription):
    """One playing of a cold diagram: items arrive by timer and go out on demand (drain loop)."""

    __slots__ = ("source",)
    # A marble source stands for any upstream: it shows the literal protocol (a filter after
    # it asks for one more per dropped item), not rxpipe's internal conditional delivery.
    conditional_delivery = False

    def __init__(self, source: MarbleSource, downstream: Subscriber[Any]) -> None:
        super().__init__(downstream)
        self.source = source

    # TestPublisher's view of a subscription
    @property
    def subscriber(self) -> Subscriber[Any]:
        return self.downstream

    @property
    def outstanding(self) -> int:
        return self.requested

    terminated = False  # termination sets ``cancelled`` (DrainSubscription)

    def start(self, marbles: Marbles) -> None:
        """Play the diagram from the current frame: frame-0 events now, the rest by the clock."""
        by_frame: dict[int, list[MarbleEvent]] = defaultdict(list)
        for event in self.source.events:
            by_frame[event.frame].append(event)
        origin = marbles.frame()
        for frame in sorted(by_frame):
            if frame == 0:
                self.arrive(by_frame[0])
            else:
                marbles._at(origin + frame, _SOURCES, _bind(self.arrive, by_frame[frame]))

    def arrive(self, events: Iterable[MarbleEvent]) -> None:
        if self.cancelled:
            return
        for event in events:
            if event.kind == "next":
                self.queue.append(event.value)
            else:
                self.finished = True
                if event.kind == "error":
                    self.error = event.value
        self.drain()

    def request(self, n: int) -> None:
        self.source._record_request(n)
        super().request(n)

    def cancel(self) -> None:
        self.source._record_cancel(effective=not self.cancelled)
        super().cancel()

    def _release(self) -> None:
        self.queue.clear()  # arrivals still scheduled find it cancelled


class MarbleSource(TestPublisher[Any]):
    """A :class:`~rxpipe.testing.TestPublisher` that plays a diagram on its :class:`Marbles`
    clock (make it with :meth:`Marbles.cold` or :meth:`Marbles.hot`).

    Besides TestPublisher's records: ``request_log`` (every ``request(n)`` as ``(frame, n)``),
    ``cancelled_at`` (frame of the first cancel of a live subscription, None if none; the
    clean-up cancel at the end of a run is not counted), ``subscribed_at`` (frames).
    """

    __test__ = False

    def __init__(self, marbles: Marbles, diagram: str, events: list[MarbleEvent], *, hot: bool,
                 name: str | None = None) -> None:
        self.kind = "hot" if hot else "cold"
        super().__init__(name=name)
        self.marbles = marbles
        self.diagram = diagram
        self.events = events
        self.hot = hot
        self.request_log: list[tuple[int, int]] = []
        self.cancelled_at: int | None = None
        self.subscribed_at: list[int] = []
        self._terminal: MarbleEvent | None = None

    def _record_request(self, n: int) -> None:
        super()._record_request(n)
        self.request_log.append((self.marbles.frame(), n))

    def _record_cancel(self, effective: bool) -> None:
        super()._record_cancel(effective)
        if effective and self.cancelled_at is None and not self.marbles.closing:
            self.cancelled_at = self.marbles.frame()

    def _subscribe(self, subscriber: Subscriber[Any]) -> None:
        marbles = self.marbles
        if marbles.loop is None:
            raise RuntimeError("a marble source plays only inside Marbles.run()")
        self.subscribed_at.append(marbles.frame())
        if self.hot:
            terminal = self._terminal
            if terminal is None:
                super()._subscribe(subscriber)
                return
            self.subscribe_count += 1
            subscriber.on_subscribe(EMPTY_SUBSCRIPTION)  # a finished hot source replays its end
            if terminal.kind == "error":
                subscriber.on_error(terminal.value)
            else:
                subscriber.on_complete()
            return
        self.subscribe_count += 1
        subscription = _ColdSubscription(self, subscriber)
        self._subscriptions.append(subscription)  # type: ignore[arg-type]  # same protocol
        subscriber.on_subscribe(subscription)
        subscription.start(marbles)

    # A cold source honours demand even when driven by hand.
    def emit(self, *items: Any) -> MarbleSource:
        if self.hot:
            super().emit(*items)
        else:
            for subscription in self._live():
                subscription.arrive([MarbleEvent(0, "next", x) for x in items])  # type: ignore[attr-defined]
        return self

    def complete(self) -> MarbleSource:
        return self._terminate(MarbleEvent(0, "complete"))

    def error(self, error: BaseException) -> MarbleSource:
        return self._terminate(MarbleEvent(0, "error", error))

    def _terminate(self, event: MarbleEvent) -> MarbleSource:
        if self.hot:
            self._terminal = event
            if event.kind == "error":
                super().error(event.value)
            else:
                super().complete()
        else:
            for subscription in self._live():
                subscription.arrive([event])  # type: ignore[attr-defined]
        return self


def _bind(fn: Callable[[Any], Any], arg: Any) -> Callable[[], Any]:
    return lambda: fn(arg)
