"""Sources whose signals come from the event loop: ``timer``, ``never``, ``from_future``,
``generate_with_relative_time``.

``timer`` runs on ``loop.call_at`` (so a virtual clock drives it); its periodic form is
``interval``'s subscription with a first delay of its own, so a tick without demand follows
``interval``'s rule. ``from_future`` takes its one value from a future's done callback.
``generate_with_relative_time`` holds one due value at a time (its timer starts again only
once that value went downstream).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import math
from typing import Any, Awaitable, Callable, TypeVar

from ._async_sources import _IntervalSubscription
from ._demand import EMPTY_SUBSCRIPTION, DrainSubscription, log
from ._durations import as_seconds, one_of
from ._protocol import Subscriber
from .flowable import Flowable

__all__ = ["timer", "never", "from_future", "generate_with_relative_time"]

T = TypeVar("T")


# -- timer -------------------------------------------------------------------------------------------
class _PeriodicTimerSubscription(_IntervalSubscription):
    """``interval`` whose first tick is ``first_s`` after subscribe: ticks at
    ``start + first_s + k * period`` (no drift), skipped when they find no demand."""

    __slots__ = ("first_s",)

    def __init__(self, downstream: Subscriber[int], loop: asyncio.AbstractEventLoop, first_s: float,
                 period: float) -> None:
        super().__init__(downstream, loop, period)
        self.first_s = first_s

    def schedule(self) -> None:
        if not self.cancelled:
            when = self.start_time + self.first_s + self.tick * self.period
            self.handle = self.loop.call_at(when, self._fire)


class _OneShotTimerSubscription(DrainSubscription):
    """One ``0`` at ``start + duetime``, delivered then or at the first request after; then
    ``on_complete``."""

    __slots__ = ("handle", "due")

    def __init__(self, downstream: Subscriber[int]) -> None:
        super().__init__(downstream)
        self.handle: asyncio.TimerHandle | None = None
        self.due = False

    def _fire(self) -> None:
        self.handle = None
        self.due = True
        self.drain()

    def _drain(self) -> None:
        if self.due and self.requested:
            self.emitted = 1
            self.downstream.on_next(0)
            self._complete()

    def _release(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None


class _TimerFlowable(Flowable[int]):
    kind = "timer"

    def __init__(self, duetime_s: float, period_s: float | None, name: str | None) -> None:
        super().__init__(name=name)
        self.duetime_s = duetime_s
        self.period_s = period_s

    def _subscribe(self, subscriber: Subscriber[int]) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            subscriber.on_subscribe(EMPTY_SUBSCRIPTION)
            subscriber.on_error(RuntimeError("timer() must be subscribed on a running event loop"))
            return
        if self.period_s is not None:
            periodic = _PeriodicTimerSubscription(subscriber, loop, self.duetime_s, self.period_s)
            subscriber.on_subscribe(periodic)
            periodic.schedule()
            return
        start = loop.time()
        once = _OneShotTimerSubscription(subscriber)
        subscriber.on_subscribe(once)
        if not once.cancelled:
            once.handle = loop.call_at(start + self.duetime_s, once._fire)


def _check_seconds(arg: str, value: object, *, zero: bool) -> float:
    value = as_seconds(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        hint = ""
        if hasattr(value, "tzinfo"):
            hint = (" (an absolute datetime is not supported: rxpipe's time is the loop's clock; "
                    "pass the delay, when - datetime.now(when.tzinfo))")
        raise TypeError(f"timer({arg}) needs a number of seconds, got {value!r}{hint}")
    if not (0 <= value if zero else 0 < value) or not value < math.inf:
        raise ValueError(f"timer({arg}) needs a finite number of seconds {'>=' if zero else '>'} 0, got {value!r}")
    return float(value)


def timer(duetime_s: Any = None, period_s: Any = None, *, name: str | None = None, duetime: Any = None,
          period: Any = None) -> Flowable[int]:
    """Emit ``0`` after ``duetime_s`` seconds, then complete; or, with ``period_s``, the tick
    numbers ``0, 1, 2, ...`` every ``period_s`` seconds from ``duetime_s`` on.

        demand:  -----^1
        source:  -----(0|)        timer(0.03): 0 is due at frame 3, delivered when asked for

        demand:  ^2      ^1
        source:  ---0-1---3       timer(0.03, 0.02): the tick at frame 7 (number 2) finds no demand

    One-shot: the ``0`` is due at ``start + duetime_s``; delivered then if downstream asked,
    else at its first ``request`` (one value cannot pile up), followed by ``on_complete``.
    Periodic: tick ``k`` is due at ``start + duetime_s + k * period_s`` (fixed rate, no drift)
    and follows :func:`rxpipe.interval`'s rule: a tick that finds no outstanding demand is
    skipped (its number is not emitted) and counted in the subscription's ``skipped``; nothing
    queues up. It never completes; cancel to stop.
    Time: ``loop.time()`` / ``call_at`` only, so a virtual clock drives it exactly. Unlike
    reactivex, an absolute ``datetime`` is refused (TypeError): it would need the wall clock.
    Args: duetime_s (seconds or ``datetime.timedelta``, >= 0; also ``duetime=``, reactivex's
        name); period_s (seconds or ``timedelta``, > 0, or None for one value; also ``period=``).
    Signals: TypeError/ValueError (raised here) for bad times; subscribing off a running event
        loop signals RuntimeError. Cancel stops the timer.
    Anchor: reactivex ``timer(duetime, period)`` (same values and times under unbounded
        demand); Akka ``Source.tick`` (skips a tick without demand).
    """
    duetime_s = one_of("timer", "duetime_s", duetime_s, "duetime", duetime)
    period_s = one_of("timer", "period_s", period_s, "period", period)
    if duetime_s is None:
        raise TypeError("timer() missing its argument 'duetime'")
    due = _check_seconds("duetime_s", duetime_s, zero=True)
    every = None if period_s is None else _check_seconds("period_s", period_s, zero=False)
    return _TimerFlowable(due, every, name)


# -- never -------------------------------------------------------------------------------------------
class _NeverSubscription(DrainSubscription):
    __slots__ = ()

    def _drain(self) -> None:
        pass  # nothing to emit, ever; request() still checks §3.9 and cancel() is idempotent


class _NeverFlowable(Flowable[Any]):
    kind = "never"

    def _subscribe(self, subscriber: Subscriber[Any]) -> None:
        subscriber.on_subscribe(_NeverSubscription(subscriber))


def never(*, name: str | None = None) -> Flowable[Any]:
    """Emit nothing and never terminate.

        demand:  ^*
        source:  ----------       no item, no terminal signal, whatever the demand

    Demand: accepted and ignored (``request(n <= 0)`` still signals ValueError, §3.9). Cancel
    ends the subscription (idempotent). Holds no timer, task or loop: it may be subscribed
    anywhere. Useful as an "other" that never fires (``take_until``) or a sampler that never
    samples. Anchor: reactivex ``never()``; Reactor ``Flux.never()``.
    """
    return _NeverFlowable(name=name)


# -- from_future ---------------------------------------------------------------------------------------
class _FutureSubscription(DrainSubscription):
    """Waits for a future's outcome; delivers the value on demand, then completes."""

    __slots__ = ("future", "task", "value", "state")

    def __init__(self, downstream: Subscriber[Any], future: asyncio.Future[Any], task: bool) -> None:
        super().__init__(downstream)
        self.future = future
        self.task = task  # the future is a task this subscription created (it cancels it)
        self.value: Any = None
        self.state = "waiting"  # -> "value" -> done

    def done(self, future: asyncio.Future[Any]) -> None:
        if self.cancelled:
            if self.task:
                _log_late_error(future)
            return
        if future.cancelled():
            self._error(asyncio.CancelledError("from_future: the future was cancelled"))
            return
        error = future.exception()
        if error is not None:
            self._error(error)
            return
        value = future.result()
        if value is None:
            self._error(TypeError("from_future: the awaitable's result is None; items are never None "
                                  "(Reactive Streams §2.13)"))
            return
        self.value = value
        self.state = "value"
        self.drain()

    def _drain(self) -> None:
        if self.state == "value" and self.requested:
            value, self.value = self.value, None
            self.emitted = 1
            self.downstream.on_next(value)
            self._complete()

    def _release(self) -> None:
        self.value = None
        future = self.future
        if future.done():
            return
        if self.task:
            future.cancel()  # its done callback still runs: it logs what a cleanup raised
        else:
            future.remove_done_callback(self.done)  # someone else's future: left untouched


def _log_late_error(task: asyncio.Future[Any]) -> None:
    """A task ended after its subscription was cancelled: nobody downstream can hear of an
    error it raised (typically from cleanup while being cancelled); log it, never swallow it."""
    if not task.cancelled() and task.exception() is not None:
        log.error("from_future: the awaitable raised after its subscription was cancelled",
                  exc_info=task.exception())


class _FutureFlowable(Flowable[Any]):
    kind = "from_future"

    def __init__(self, awaitable: Any, name: str | None) -> None:
        super().__init__(name=name)
        self.awaitable = awaitable

    def _subscribe(self, subscriber: Subscriber[Any]) -> None:
        awaitable = self.awaitable
        created = False
        try:
            if isinstance(awaitable, asyncio.Future):
                future = awaitable
            elif isinstance(awaitable, concurrent.futures.Future):
                future = asyncio.wrap_future(awaitable, loop=asyncio.get_running_loop())
            else:
                if inspect.iscoroutine(awaitable) and inspect.getcoroutinestate(awaitable) != inspect.CORO_CREATED:
                    raise RuntimeError("from_future: this coroutine was already awaited (a coroutine runs "
                                       "once); for a fresh run per subscription use "
                                       "rx.defer(lambda: rx.from_future(make_coroutine()))")
                future = asyncio.ensure_future(awaitable, loop=asyncio.get_running_loop())
                created = True
        except Exception as error:  # off a running loop, or a spent coroutine
            subscriber.on_subscribe(EMPTY_SUBSCRIPTION)
            subscriber.on_error(error)
            return
        subscription = _FutureSubscription(subscriber, future, created)
        subscriber.on_subscribe(subscription)
        if subscription.cancelled:
            if created and not future.done():
                future.cancel()
            return
        if future.done():
            subscription.done(future)
        else:
            future.add_done_callback(subscription.done)


def from_future(awaitable: Awaitable[T], *, name: str | None = None) -> Flowable[T]:
    """Emit the result of a future or awaitable, then complete; or signal its exception.

        future:  ---x
        demand:  -----^1
        source:  -----(x|)        the value waits for demand, then the completion follows it

    ``awaitable``: an ``asyncio.Future`` (a Task too) or a ``concurrent.futures.Future``, whose
    outcome each subscription waits for; or any other awaitable (a coroutine), wrapped as a task
    on the running loop only when subscribed (cold: nothing runs before ``subscribe``; a
    coroutine runs once, so a second subscription signals RuntimeError: use
    ``rx.defer(lambda: rx.from_future(make()))`` for a run per subscription).
    Demand: the value is delivered at the first ``request``, then ``on_complete``; an error is
    signalled as soon as the awaitable fails, whatever the demand.
    Cancel: cancels the task this subscription created; a future given to it is someone
    else's and is left running (reactivex cancels it) — only this subscription stops listening.
    Signals: TypeError (raised here) for an argument that is not awaitable; the awaitable's
        exception as ``on_error``; ``asyncio.CancelledError`` if the future is cancelled; a
        result of None signals TypeError (items are never None, Reactive Streams §2.13).
        Subscribing off a running loop signals RuntimeError (except for an asyncio future).
    Anchor: reactivex ``from_future(future)``; Reactor ``Mono.fromFuture``.
    """
    if not isinstance(awaitable, (asyncio.Future, concurrent.futures.Future)) and not inspect.isawaitable(awaitable):
        raise TypeError(f"from_future() needs a future or an awaitable, got {awaitable!r}")
    return _FutureFlowable(awaitable, name)


# -- generate_with_relative_time ------------------------------------------------------------------------
class _RelativeGenerateSubscription(DrainSubscription):
    """One run: ``state`` is due ``time_mapper(state)`` seconds after the one before went out
    (after subscribe for the first); ``due`` once its timer fired, until it is delivered."""

    __slots__ = ("loop", "condition", "iterate", "time_mapper", "state", "handle", "due")

    def __init__(self, downstream: Subscriber[Any], loop: asyncio.AbstractEventLoop, initial_state: Any,
                 condition: Callable[[Any], Any], iterate: Callable[[Any], Any],
                 time_mapper: Callable[[Any], Any]) -> None:
        super().__init__(downstream)
        self.loop = loop
        self.condition, self.iterate, self.time_mapper = condition, iterate, time_mapper
        self.state = initial_state
        self.handle: asyncio.TimerHandle | None = None
        self.due = False

    def advance(self, first: bool) -> None:
        """The next state (the initial one first): complete if ``condition`` fails, else its timer.
        Called in a serial context (after ``on_subscribe``, or inside the drain loop)."""
        try:
            if not first:
                self.state = self.iterate(self.state)
            if not self.condition(self.state):
                self._complete()
                return
            if self.state is None:
                raise TypeError("generate_with_relative_time: the state is None; items are never None "
                                "(Reactive Streams §2.13)")
            delay = _relative_delay(self.time_mapper(self.state))
        except Exception as error:  # a user function raised: the stream's error
            self._error(error)
            return
        self.handle = self.loop.call_later(delay, self._fire)

    def _fire(self) -> None:
        self.handle = None
        self.due = True
        self.drain()

    def _drain(self) -> None:
        if self.due and self.requested:
            self.due = False
            self._delivered(1, self.requested)
            self.downstream.on_next(self.state)
            if not self.cancelled:
                self.advance(first=False)

    def _holds(self) -> bool:
        return self.due

    def _release(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None


def _relative_delay(value: object) -> float:
    seconds = as_seconds(value)
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError(f"generate_with_relative_time: time_mapper returned {value!r}, not a number of seconds "
                        f"or a timedelta")
    if not 0 <= seconds < math.inf:
        raise ValueError(f"generate_with_relative_time: time_mapper returned {value!r}; a delay is a finite "
                         f"number of seconds >= 0")
    return float(seconds)


class _RelativeGenerateFlowable(Flowable[Any]):
    kind = "generate_with_relative_time"

    def __init__(self, initial_state: Any, condition: Callable[[Any], Any], iterate: Callable[[Any], Any],
                 time_mapper: Callable[[Any], Any], name: str | None) -> None:
        super().__init__(name=name)
        self.initial_state = initial_state
        self.functions = (condition, iterate, time_mapper)  # not self.iterate: Flowable.iterate() is public

    def _subscribe(self, subscriber: Subscriber[Any]) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            subscriber.on_subscribe(EMPTY_SUBSCRIPTION)
            subscriber.on_error(RuntimeError("generate_with_relative_time() must be subscribed on a running "
                                             "event loop"))
            return
        run = _RelativeGenerateSubscription(subscriber, loop, self.initial_state, *self.functions)
        subscriber.on_subscribe(run)
        if not run.cancelled:
            run.advance(first=True)


def generate_with_relative_time(initial_state: Any, condition: Callable[[Any], Any], iterate: Callable[[Any], Any],
                                time_mapper: Callable[[Any], Any], *, name: str | None = None) -> Flowable[Any]:
    """``initial_state``, ``iterate(initial_state)``, ... while ``condition(state)`` holds, each
    state ``time_mapper(state)`` seconds after the one before.

        demand:  ^2     ^2
        source:  --0-1--2-(3|)    (0, x < 4, x + 1, 0.02 s): 2 is due at frame 6, asked for at 7

    State ``s`` is due ``time_mapper(s)`` seconds after the state before it went downstream (the
    first: after subscribe), and delivered then if downstream asked, else at its first
    ``request``: one due value at most, and the next delay starts only once it went out, so the
    spacing between items is never shorter than ``time_mapper`` says. ``iterate`` and
    ``condition`` run when the value before went out; completion follows the last item at once.
    Under unbounded demand the values and times are reactivex's (subscribe + the sum of the
    delays). Per subscription the state starts again.
    Time: ``loop.time()`` / ``call_later`` only, so a virtual clock drives it exactly.
    Args: time_mapper (state -> seconds or ``datetime.timedelta``, >= 0).
    Signals: TypeError (raised here) for an argument that is not callable; ``condition``,
        ``iterate`` or ``time_mapper`` raising → ``on_error`` with it; a delay that is not a
        finite number >= 0 → ``on_error(TypeError/ValueError)``; a None state → TypeError
        (§2.13); subscribing off a running event loop signals RuntimeError. Cancel stops the timer.
    Anchor: reactivex ``generate_with_relative_time``; Reactor ``Flux.generate`` with
        ``delayElements`` per item.
    """
    for label, fn in (("condition", condition), ("iterate", iterate), ("time_mapper", time_mapper)):
        if not callable(fn):
            raise TypeError(f"generate_with_relative_time({label}) needs a callable, got {fn!r}")
    return _RelativeGenerateFlowable(initial_state, condition, iterate, time_mapper, name)
