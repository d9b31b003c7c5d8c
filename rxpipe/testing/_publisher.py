"""``TestPublisher``: a hand-driven source that records every request and cancel."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from .._protocol import Subscriber, Subscription
from ..flowable import Flowable
from ..stage import add_demand, bad_request, valid_demand

__all__ = ["TestPublisher"]

T = TypeVar("T")


class _Recorder(Subscription):
    __slots__ = ("publisher", "subscriber", "outstanding", "cancelled", "terminated")

    def __init__(self, publisher: TestPublisher[Any], subscriber: Subscriber[Any]) -> None:
        self.publisher = publisher
        self.subscriber = subscriber
        self.outstanding = 0
        self.cancelled = False
        self.terminated = False

    def request(self, n: int) -> None:
        self.publisher._record_request(n)
        if self.cancelled or self.terminated:
            return
        if not valid_demand(n):
            # Reactive Streams §3.9: signal the error (never raise) and stop this subscription.
            self.cancelled = True
            self.terminated = True
            self.subscriber.on_error(bad_request(n))
            return
        self.outstanding = add_demand(self.outstanding, n)

    def cancel(self) -> None:
        self.publisher._record_cancel(effective=not (self.cancelled or self.terminated))
        self.cancelled = True


class TestPublisher(Flowable[T], Generic[T]):
    """A Flowable the test drives by hand, recording what its subscribers ask for.

    ``emit(*items)`` delivers to every live subscriber **whatever the demand** (so a test can
    break §1.1 on purpose and check the stage under test signals ``MissingBackpressureError``);
    ``outstanding`` tells how much demand is there. ``complete()`` / ``error(e)`` terminate.

    Records: ``requests`` (every ``request(n)`` in order, invalid ones included),
    ``total_requested`` (saturating sum of the valid ones), ``cancelled`` (a subscriber
    cancelled), ``cancel_count``, ``subscribe_count``.
    """

    __test__ = False
    kind = "test_publisher"

    def __init__(self, *, name: str | None = None) -> None:
        super().__init__(name=name)
        self.requests: list[int] = []
        self.cancel_count = 0
        self.subscribe_count = 0
        self._subscriptions: list[_Recorder] = []

    def _subscribe(self, subscriber: Subscriber[T]) -> None:
        self.subscribe_count += 1
        recorder = _Recorder(self, subscriber)
        self._subscriptions.append(recorder)
        subscriber.on_subscribe(recorder)

    # Hooks for subclasses that record more (the marble sources add the frame of each signal).
    def _record_request(self, n: int) -> None:
        self.requests.append(n)

    def _record_cancel(self, effective: bool) -> None:
        """Count a ``cancel()`` call; ``effective``: the subscription was still live."""
        self.cancel_count += 1

    @property
    def total_requested(self) -> int:
        total = 0
        for n in self.requests:
            if n > 0:
                total = add_demand(total, n)
        return total

    @property
    def cancelled(self) -> bool:
        return self.cancel_count > 0

    @property
    def outstanding(self) -> int:
        """Demand not yet used up by ``emit`` (of the first live subscriber)."""
        live = self._live()
        return live[0].outstanding if live else 0

    @property
    def has_subscribers(self) -> bool:
        return bool(self._live())

    def _live(self) -> list[_Recorder]:
        return [r for r in self._subscriptions if not r.cancelled and not r.terminated]

    def emit(self, *items: T) -> TestPublisher[T]:
        """Deliver ``items`` to every live subscriber now, in order, regardless of demand."""
        for item in items:
            for recorder in self._live():
                if recorder.outstanding > 0:
                    recorder.outstanding -= 1
                recorder.subscriber.on_next(item)
        return self

    def complete(self) -> TestPublisher[T]:
        """Signal ``on_complete`` to every live subscriber."""
        for recorder in self._live():
            recorder.terminated = True
            recorder.subscriber.on_complete()
        return self

    def error(self, error: BaseException) -> TestPublisher[T]:
        """Signal ``on_error(error)`` to every live subscriber."""
        for recorder in self._live():
            recorder.terminated = True
            recorder.subscriber.on_error(error)
        return self
