"""Sources driven by the event loop: ``from_async_iterable`` and ``interval``."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterable, TypeVar

from ._cleanup import failed, track
from ._demand import EMPTY_SUBSCRIPTION, DrainSubscription, QueueDrainSubscription, Replenisher
from ._protocol import UNBOUNDED, Subscriber
from .flowable import DEFAULT_PREFETCH, Flowable

__all__ = ["from_async_iterable", "interval"]

T = TypeVar("T")


class _AsyncIterableSubscription(QueueDrainSubscription):
    """One pump task pulls from the async iterator while it has credit; the drain loop delivers.

    Credit follows the prefetch rule of DESIGN §2: ``prefetch`` at start, ``limit`` more each
    time ``limit`` items went downstream. So at most ``prefetch`` items are pulled ahead of what
    was delivered, and no task or future is made per item (the pump parks only when out of credit).
    """

    __slots__ = ("iterable", "replenisher", "credit", "task", "room")

    def __init__(self, downstream: Subscriber[Any], iterable: AsyncIterable[Any], prefetch: int) -> None:
        super().__init__(downstream)
        self.iterable = iterable
        self.replenisher = Replenisher(prefetch)
        self.credit = prefetch
        self.room: asyncio.Future[None] | None = None
        self.task: asyncio.Task[None] | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        if not self.cancelled:
            self.task = loop.create_task(self._pump(), name="rxpipe from_async_iterable pump")
            track(self.task)

    async def _pump(self) -> None:
        iterator: Any = None
        try:
            iterator = aiter(self.iterable)
            while not self.cancelled:
                while self.credit == 0:
                    self.room = asyncio.get_running_loop().create_future()
                    await self.room
                    if self.cancelled:
                        return
                self.credit -= 1
                try:
                    item = await anext(iterator)
                except StopAsyncIteration:
                    self.finish()
                    return
                if item is None:
                    raise TypeError("from_async_iterable: the iterator yielded None; items are "
                                    "never None (Reactive Streams §2.13)")
                self.queue.append(item)
                self.drain()
        except asyncio.CancelledError:
            raise
        except Exception as error:
            if self.cancelled:
                # cancelled mid-anext: the generator's own cleanup (its finally) raised instead
                failed(error, "from_async_iterable: the async iterator raised while it was cancelled")
            else:
                self.finish(error)
        finally:
            aclose = getattr(iterator, "aclose", None)
            if aclose is not None:
                try:
                    await aclose()
                except Exception as error:
                    failed(error, "from_async_iterable: closing the async iterator raised")

    def _on_delivered(self, count: int) -> None:
        due = self.replenisher.consumed(count)
        if due:
            self.credit += due * self.replenisher.limit
            room = self.room
            if room is not None:
                self.room = None
                if not room.done():
                    room.set_result(None)

    def _release(self) -> None:
        task = self.task
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()
        self.queue.clear()


class _AsyncIterableFlowable(Flowable[Any]):
    kind = "from_async_iterable"

    def __init__(self, iterable: AsyncIterable[Any], prefetch: int, name: str | None) -> None:
        super().__init__(name=name)
        self.iterable = iterable
        self.prefetch = prefetch

    def _subscribe(self, subscriber: Subscriber[Any]) -> None:
        loop = asyncio.get_running_loop()
        subscription = _AsyncIterableSubscription(subscriber, self.iterable, self.prefetch)
        subscriber.on_subscribe(subscription)
        subscription.start(loop)


def from_async_iterable(iterable: AsyncIterable[T], *, prefetch: int = DEFAULT_PREFETCH,
                        name: str | None = None) -> Flowable[T]:
    """Emit the items of an async iterable (an async generator, an ``aiostream`` stream, ...).

    Pulls at most ``prefetch`` items ahead of what went downstream (DESIGN §2 rule), with one pump
    task per subscription. Cancelling cancels the task and closes the iterator (``aclose``).
    An exception from the iterator is signalled after the items pulled before it. One its cleanup
    raises after a cancel (in its ``finally`` or ``aclose``) has no subscriber left to go to: it
    is logged (logger ``rxpipe``, ERROR) and raised by the :meth:`~rxpipe.Pipeline.run` that
    started the source (:mod:`rxpipe._cleanup`).
    Must be subscribed on a running event loop (RuntimeError otherwise).
    """
    if not isinstance(iterable, AsyncIterable):
        raise TypeError(f"from_async_iterable() needs an async iterable, got {iterable!r}")
    Replenisher(prefetch)  # validates
    return _AsyncIterableFlowable(iterable, prefetch, name)


class _IntervalSubscription(DrainSubscription):
    """Fires on a fixed-rate schedule ``start + k * period`` (no drift) on the loop clock."""

    __slots__ = ("loop", "period", "start_time", "tick", "handle", "skipped")

    def __init__(self, downstream: Subscriber[int], loop: asyncio.AbstractEventLoop, period: float) -> None:
        super().__init__(downstream)
        self.loop = loop
        self.period = period
        self.start_time = loop.time()
        self.tick = 0
        #: ticks that found no demand (they are skipped, not queued)
        self.skipped = 0
        self.handle: asyncio.TimerHandle | None = None

    def schedule(self) -> None:
        if not self.cancelled:
            when = self.start_time + (self.tick + 1) * self.period
            self.handle = self.loop.call_at(when, self._fire)

    def _fire(self) -> None:
        self.handle = None
        self.tick += 1
        if self.cancelled:
            return
        if self.requested:
            self.drain()
        else:
            self.skipped += 1
        self.schedule()

    def _drain(self) -> None:
        if self.requested and self.tick > self.emitted + self.skipped:
            if self.requested != UNBOUNDED:
                self.requested -= 1
            self.emitted += 1
            self.downstream.on_next(self.tick - 1)

    def _release(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None


class _IntervalFlowable(Flowable[int]):
    kind = "interval"

    def __init__(self, period: float, name: str | None) -> None:
        super().__init__(name=name)
        self.period = period

    def _subscribe(self, subscriber: Subscriber[int]) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            subscriber.on_subscribe(EMPTY_SUBSCRIPTION)
            subscriber.on_error(RuntimeError("interval() must be subscribed on a running event loop"))
            return
        subscription = _IntervalSubscription(subscriber, loop, self.period)
        subscriber.on_subscribe(subscription)
        subscription.schedule()


def interval(period_s: Any = None, *, name: str | None = None, period: Any = None) -> Flowable[int]:
    """Emit the tick number ``k`` (0, 1, 2, ...) at ``start + (k + 1) * period_s`` seconds.

    Ticks only while there is demand: a tick that finds no outstanding demand is skipped (its
    number is not emitted) and counted in the subscription's ``skipped``; nothing queues up
    (Akka's ``tick`` semantics, not Reactor's overflow error). Runs on ``loop.time()``/
    ``call_at``, so a virtual clock drives it exactly. Never completes; cancel to stop.
    Args: period_s (seconds or ``datetime.timedelta``, > 0; also ``period=``, reactivex's name).
    Anchor: reactivex ``interval(period)`` under unbounded demand; Akka ``Source.tick``.
    """
    from ._durations import as_seconds, one_of

    period_s = one_of("interval", "period_s", period_s, "period", period)
    if period_s is None:
        raise TypeError("interval() missing its argument 'period'")
    period_s = as_seconds(period_s)
    if isinstance(period_s, bool) or not isinstance(period_s, (int, float)):
        raise TypeError(f"interval(period_s) needs a number of seconds or a timedelta, got {period_s!r}")
    if not 0 < period_s < float("inf"):
        raise ValueError(f"interval(period_s) needs period_s > 0 seconds, got {period_s!r}")
    return _IntervalFlowable(float(period_s), name)
