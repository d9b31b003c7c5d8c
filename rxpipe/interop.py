"""reactivex interop, both ways (DESIGN §3): where push meets pull.

- :func:`from_observable` turns a reactivex Observable (push: it emits when it likes) into a
  Flowable (pull: ``request(n)``). **Push becomes pull inside this stage**, at a buffer of
  ``capacity`` items: the Observable is never slowed (it cannot be), so what arrives while the
  buffer is full is shed by the ``overflow`` strategy, and everything downstream of the stage
  has real backpressure again.
- :func:`to_observable` (``Flowable.to_observable()``) goes the other way: it requests
  ``UNBOUNDED``, so **pull becomes push** at the subscription and the observer receives every
  item as fast as the Flowable produces it. Nothing is shed; disposing cancels.

Anchor: Reactor's ``Flux.create(..., OverflowStrategy)`` / ``onBackpressureBuffer`` and RxJava's
``Observable.toFlowable(BackpressureStrategy)``.
"""

from __future__ import annotations

import asyncio
import threading
from typing import TYPE_CHECKING, Any, TypeVar

from ._demand import QueueDrainSubscription
from ._link import offer
from ._protocol import Subscriber
from .errors import BufferOverflowError
from .flowable import Flowable
from .metrics import StageCounters, StageStatistics, track
from .settings import check_int

if TYPE_CHECKING:
    import reactivex

__all__ = ["from_observable", "to_observable", "OBSERVABLE_OVERFLOW"]

T = TypeVar("T")

#: Accepted ``overflow`` values of :func:`from_observable` (the shedding strategies of ``buffer``).
OBSERVABLE_OVERFLOW = ("drop_incoming", "drop_oldest", "error")


class _ObservableSubscription(QueueDrainSubscription):
    """Observer of the Observable and subscription of the downstream, on the shared drain loop.

    Invariant: ``len(queue) <= capacity``. Every pushed item is counted once in exactly one of
    ``emitted``, ``queue``, ``counters.dropped`` (or discarded by a cancel). Once the Observable
    is disposed (``detached``), later pushes are ignored (a disposal may race with a push).
    """

    __slots__ = ("capacity", "overflow", "counters", "received", "disposable", "detached",
                 "loop", "thread")

    def __init__(self, downstream: Subscriber[Any], capacity: int, overflow: str, name: str) -> None:
        super().__init__(downstream)
        self.capacity = capacity
        self.overflow = overflow
        self.counters = StageCounters(name)
        #: items pushed by the Observable and taken in (synced into ``counters`` once per pass)
        self.received = 0
        self.disposable: Any = None
        self.detached = False
        try:
            self.loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self.loop = None
        self.thread = threading.get_ident()
        track(self)

    def attach(self, observable: Any) -> None:
        """Subscribe to the Observable (after downstream's ``on_subscribe``, so a synchronous
        Observable such as ``reactivex.of`` meets the demand already requested)."""
        if self.cancelled:
            return
        disposable = observable.subscribe(on_next=self.push, on_error=self.push_error,
                                          on_completed=self.push_complete)
        if self.detached:  # cancelled or overflowed while the Observable was subscribing
            disposable.dispose()
        else:
            self.disposable = disposable

    def _detach(self) -> None:
        if not self.detached:
            self.detached = True
            disposable, self.disposable = self.disposable, None
            if disposable is not None:
                disposable.dispose()

    def _foreign_thread(self) -> bool:
        # A reactivex scheduler may push from its own thread; the drain loop is the event
        # loop's, so such signals hop over (one ident comparison per push otherwise).
        return threading.get_ident() != self.thread and self.loop is not None

    # -- Observer ------------------------------------------------------------------------------
    def push(self, item: Any) -> None:
        if self._foreign_thread():
            self.loop.call_soon_threadsafe(self.push, item)  # type: ignore[union-attr]
            return
        if self.detached:
            return
        if item is None:
            self._detach()
            self.fail(TypeError(f"stage {self.counters.stage!r}: the Observable pushed None; items "
                                f"are never None (Reactive Streams §2.13)"))
            return
        # Queued while there is room; at capacity shed and told, as buffer does (one copy: offer).
        if offer(self, item):
            self._detach()
            self.finish(BufferOverflowError(
                f"stage {self.counters.stage!r}: the Observable pushed an item while "
                f"{self.capacity} were buffered without demand (overflow='error')"))

    def push_error(self, error: BaseException) -> None:
        if self._foreign_thread():
            self.loop.call_soon_threadsafe(self.push_error, error)  # type: ignore[union-attr]
            return
        if self.detached:
            return
        self.detached = True  # the Observable is done; nothing to dispose
        self.finish(error)  # delivered after the buffered items

    def push_complete(self) -> None:
        if self._foreign_thread():
            self.loop.call_soon_threadsafe(self.push_complete)  # type: ignore[union-attr]
            return
        if self.detached:
            return
        self.detached = True
        self.finish()

    # -- drain loop hooks ----------------------------------------------------------------------
    def _on_delivered(self, count: int) -> None:
        counters = self.counters
        counters.items_in = self.received
        counters.items_out = self.emitted

    def _release(self) -> None:
        self._detach()
        self.queue.clear()
        counters = self.counters
        counters.items_in = self.received
        counters.items_out = self.emitted

    def statistics(self) -> StageStatistics:
        """Demand (items), items buffered now, capacity, items in/out, drops by strategy."""
        return StageStatistics(self.counters.stage, self.requested, len(self.queue), self.capacity,
                               self.received, self.emitted, dict(self.counters.dropped))


class _ObservableFlowable(Flowable[Any]):
    kind = "from_observable"

    def __init__(self, observable: Any, capacity: int, overflow: str, name: str | None) -> None:
        super().__init__(name=name)
        self.observable = observable
        self.capacity = capacity
        self.overflow = overflow

    def _subscribe(self, subscriber: Subscriber[Any]) -> None:
        subscription = _ObservableSubscription(subscriber, self.capacity, self.overflow, self.name)
        subscriber.on_subscribe(subscription)
        try:
            subscription.attach(self.observable)
        except Exception as error:  # Observable.subscribe itself raised
            subscription.detached = True
            subscription.fail(error)


def from_observable(obs: reactivex.Observable[T], capacity: int, overflow: str = "error", *,
                    name: str | None = None) -> Flowable[T]:
    """Adapt a reactivex Observable (push) to a Flowable (``request(n)`` pull).

        observable:     (12345|)    five pushes and the end, before any demand; capacity=2
        demand:         -^9
        drop_incoming:  -(12|)
        drop_oldest:    -(45|)
        error:          -(12#)      BufferOverflowError after the buffered items

    The Observable is subscribed inside each ``subscribe()`` (per subscriber, after its
    ``on_subscribe``). Pushes are buffered, at most ``capacity`` items, and delivered on demand:
    this stage is where push becomes pull. When an item arrives with the buffer full, ``overflow``
    decides what is shed (Reactor's ``onBackpressureBuffer``/``onBackpressureDrop`` meanings, as
    ``buffer``): ``"drop_incoming"`` discards the arriving item, ``"drop_oldest"`` evicts the oldest
    buffered one, ``"error"`` disposes the Observable's subscription, delivers what is buffered,
    then signals ``BufferOverflowError``. Each shed item is told through its
    ``on_discard(strategy)`` method if it has one (so a dropped request's reply fails instead of
    pending forever) and counted under its strategy name (``statistics().dropped``, metric
    ``rxpipe_stage_dropped_total``). An ``on_error`` from the Observable is signalled after the
    buffered items. Cancelling disposes the Observable's subscription and discards the buffer.
    Pushes from another thread (a reactivex scheduler) hop to the event loop that subscribed.

    Args:
        obs: a reactivex Observable (anything with ``subscribe(on_next=, on_error=, on_completed=)``
            returning a disposable).
        capacity: items held at most (>= 1).
        overflow: ``"drop_incoming"``, ``"drop_oldest"`` or ``"error"`` (default).
        name: stage name (default ``from_observable_0``).

    Raises:
        ValueError: ``overflow="backpressure"`` (a push source cannot be slowed: choose what to
            shed) or any other unknown strategy; ``capacity < 1``.
        TypeError: ``obs`` has no ``subscribe``.
    Signals: ``BufferOverflowError`` (overflow ``"error"``), ``TypeError`` for a pushed ``None``
        (§2.13), the Observable's own error.
    """
    if overflow == "backpressure":
        raise ValueError("from_observable(overflow='backpressure'): a push source cannot be slowed; "
                         f"choose what to shed: one of {', '.join(OBSERVABLE_OVERFLOW)}")
    if overflow not in OBSERVABLE_OVERFLOW:
        raise ValueError(f"from_observable(overflow={overflow!r}): expected one of "
                         f"{', '.join(OBSERVABLE_OVERFLOW)}")
    check_int(capacity, "from_observable(capacity)", minimum=1)
    if not callable(getattr(obs, "subscribe", None)):
        raise TypeError(f"from_observable() needs a reactivex Observable, got {obs!r}")
    return _ObservableFlowable(obs, capacity, overflow, name)


def to_observable(flowable: Flowable[T]) -> reactivex.Observable[T]:
    """A reactivex Observable over ``flowable`` (also ``flowable.to_observable()``).

    Each ``subscribe`` of the Observable subscribes to the Flowable with ``UNBOUNDED`` demand:
    pull becomes push here, and the observer gets every item as fast as it is produced (no
    buffer, nothing shed). Disposing the reactivex subscription cancels the Flowable's. An
    observer whose ``on_next`` raises has the subscription cancelled and gets ``on_error``.
    Sources that need an event loop (``interval``, ``from_async_iterable``) must be subscribed
    on the loop's thread.
    """
    import reactivex
    from reactivex.disposable import Disposable

    def subscribe(observer: Any, scheduler: Any = None) -> Disposable:
        handle = flowable.subscribe(on_next=observer.on_next, on_error=observer.on_error,
                                    on_complete=observer.on_completed)
        return Disposable(handle.dispose)

    return reactivex.create(subscribe)
