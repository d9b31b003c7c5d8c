"""reactivex's asynchronous creation functions, asyncio-native: ``start_async``, ``to_async``,
``from_callback`` (DESIGN §3, "The kit, third round").

Each gives a one-item Flowable: the value waits for a request, then completion follows it.
``start_async`` and ``to_async`` are :func:`rxpipe.start`'s run (one shared run, begun at the
first subscription, on the subscriber's loop) with another way to begin it: an awaitable a
function returns, or a function's call in ``asyncio.to_thread``. ``from_callback`` is cold: the
callback-style function is called per subscription, and its callback may come from any thread
(it hops to the subscriber's loop). rxpipe has no schedulers: the loop is the only one.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import threading
from typing import Any, Awaitable, Callable, TypeVar

from ._demand import DrainSubscription
from ._protocol import Subscriber
from ._rx_sources import _Start
from .flowable import Flowable

__all__ = ["start_async", "to_async", "from_callback"]

T = TypeVar("T")


class _StartAsync(_Start):
    """``start_async(function_async)``: the run is the awaitable ``function_async()`` returns."""

    kind = "start_async"

    def _begin(self, loop: asyncio.AbstractEventLoop) -> asyncio.Future[Any]:
        awaitable = self.func()
        if isinstance(awaitable, concurrent.futures.Future):
            awaitable = asyncio.wrap_future(awaitable, loop=loop)
        if not inspect.isawaitable(awaitable):
            raise TypeError(
                f"start_async(): function_async returned {awaitable!r}, not an awaitable (a coroutine or a future)"
            )
        return asyncio.ensure_future(_item("start_async(): the awaitable's result", awaitable))


async def _item(what: str, awaitable: Awaitable[Any]) -> Any:
    """The awaitable's result, refused if None (items are never None) with a message naming it."""
    result = await awaitable
    if result is None:
        raise TypeError(f"{what} is None; items are never None (Reactive Streams §2.13)")
    return result


def start_async(function_async: Callable[[], Awaitable[T]], *, name: str | None = None) -> Flowable[T]:
    """The result of the awaitable ``function_async()`` returns, as a one-item Flowable.

        start_async(f):  ----(r|)     r = await f(), when it is done and is requested

    ``function_async`` (a coroutine function, or any function returning an awaitable: a
    coroutine, an ``asyncio`` or ``concurrent.futures`` future) is called once, at the first
    subscription (reactivex calls it at once: rxpipe needs the subscriber's loop), and its
    outcome is shared: later subscribers get the same result, and one that cancels stops
    listening without cancelling the run.
    Demand: one value, delivered when requested, then completion; an error is signalled as soon
    as the awaitable fails.
    Signals: TypeError (raised here) for ``function_async`` that is not callable; the call or the
        awaitable raising → ``on_error`` with it (for every subscriber); a result that is not
        awaitable → ``on_error(TypeError)``; a result of None → TypeError (§2.13); subscribing off
        a running event loop signals RuntimeError.
    Anchor: reactivex ``start_async``; Reactor ``Mono.fromFuture`` (shared, as an AsyncSubject).
    """
    if not callable(function_async):
        raise TypeError(f"start_async() needs a function returning an awaitable, got {function_async!r}")
    return _StartAsync(function_async, name)


class _ToAsync(_Start):
    """One call of ``to_async(func)``'s wrapper: ``func(*args)`` in a thread (or as a task)."""

    kind = "to_async"

    def __init__(self, func: Callable[..., Any], args: tuple[Any, ...], name: str | None) -> None:
        super().__init__(func, name)
        self.args = args

    def _begin(self, loop: asyncio.AbstractEventLoop) -> asyncio.Future[Any]:
        what = f"to_async(): {getattr(self.func, '__name__', 'func')}'s result"
        if inspect.iscoroutinefunction(self.func):
            return asyncio.ensure_future(_item(what, self.func(*self.args)))
        return asyncio.ensure_future(_item(what, asyncio.to_thread(self.func, *self.args)))


def to_async(func: Callable[..., T], scheduler: None = None, *, name: str | None = None) -> Callable[..., Flowable[T]]:
    """A function that returns a Flowable of ``func``'s result: ``to_async(f)(x, y)`` gives
    ``f(x, y)``'s value, computed in a thread (a coroutine function: as a task).

        to_async(f)(x):  ----(r|)     r = f(x) in asyncio.to_thread, when it returns and is requested

    Each call of the returned function is one run of ``func(*args)``, begun at its Flowable's
    first subscription (reactivex begins it at the call) and shared by that Flowable's
    subscribers (reactivex's AsyncSubject); a subscriber that cancels stops listening without
    stopping the run. A plain ``func`` runs in ``asyncio.to_thread`` (blocking work leaves the
    loop free; context variables are copied); a coroutine function runs as a task on the loop.
    Demand: one value, delivered when requested, then completion.
    Signals: TypeError (raised here) for ``func`` that is not callable; ValueError (raised here)
        for a ``scheduler``: rxpipe has no schedulers, the subscriber's event loop is the one;
        ``func`` raising → ``on_error`` with it; a result of None → TypeError (§2.13);
        subscribing off a running event loop signals RuntimeError.
    Anchor: reactivex ``to_async(func, scheduler=None)``; Python ``asyncio.to_thread``.
    """
    if scheduler is not None:
        raise ValueError(
            f"to_async(scheduler={scheduler!r}): rxpipe has no schedulers; func runs in "
            f"asyncio.to_thread on the subscriber's event loop (a coroutine function as a task)"
        )
    if not callable(func):
        raise TypeError(f"to_async() needs a callable, got {func!r}")

    def wrapper(*args: Any) -> Flowable[T]:
        return _ToAsync(func, args, name)

    wrapper.__name__ = wrapper.__qualname__ = f"to_async({getattr(func, '__name__', 'func')})"
    return wrapper


# -- from_callback ------------------------------------------------------------------------------------
class _CallbackSubscription(DrainSubscription):
    """Waits for the callback; delivers its value on demand, then completes."""

    __slots__ = ("loop", "thread", "mapper", "value", "arrived")

    def __init__(
        self,
        downstream: Subscriber[Any],
        loop: asyncio.AbstractEventLoop | None,
        mapper: Callable[[tuple[Any, ...]], Any] | None,
    ) -> None:
        super().__init__(downstream)
        self.loop = loop
        self.thread = threading.get_ident()
        self.mapper = mapper
        self.value: Any = None
        self.arrived = False

    def callback(self, *args: Any) -> None:
        """The callback handed to the user's function; from another thread it hops to the loop."""
        if self.cancelled:
            return
        if self.loop is not None and threading.get_ident() != self.thread:
            self.loop.call_soon_threadsafe(self.arrive, args)
        else:
            self.arrive(args)

    def arrive(self, args: tuple[Any, ...]) -> None:
        if self.cancelled or self.arrived:
            return  # a second call, or after the end: ignored (reactivex's auto-detach)
        self.arrived = True
        try:
            value = _callback_value(args, self.mapper)
        except Exception as error:  # the mapper's error (or a missing value) is the stream's
            self.fail(error)
            return
        self.value = value
        self.drain()

    def _drain(self) -> None:
        if self.arrived and self.requested:
            value, self.value = self.value, None
            self._delivered(1, self.requested)
            self.downstream.on_next(value)
            self._complete()

    def _holds(self) -> bool:
        return self.arrived

    def _release(self) -> None:
        self.value = None


def _callback_value(args: tuple[Any, ...], mapper: Callable[[tuple[Any, ...]], Any] | None) -> Any:
    """reactivex's rule: ``mapper(args)`` if given, else the one argument, else the list of them."""
    if mapper is not None:
        value = mapper(args)
    elif len(args) == 1:
        value = args[0]
    elif args:
        value = list(args)
    else:
        raise TypeError(
            "from_callback: the callback was called without arguments, so there is no item "
            "(pass mapper=, e.g. lambda args: True)"
        )
    if value is None:
        raise TypeError("from_callback: the callback's value is None; items are never None (Reactive Streams §2.13)")
    return value


class _CallbackFlowable(Flowable[Any]):
    kind = "from_callback"

    def __init__(
        self,
        func: Callable[..., Any],
        args: tuple[Any, ...],
        mapper: Callable[[tuple[Any, ...]], Any] | None,
        name: str | None,
    ) -> None:
        super().__init__(name=name)
        self.func, self.args, self.mapper = func, args, mapper

    def _subscribe(self, subscriber: Subscriber[Any]) -> None:
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None  # a callback from another thread then has no loop to hop to: called in place
        run = _CallbackSubscription(subscriber, loop, self.mapper)
        subscriber.on_subscribe(run)
        if run.cancelled:
            return
        try:
            self.func(*self.args, run.callback)
        except Exception as error:
            run.fail(error)


def from_callback(
    func: Callable[..., Any], mapper: Callable[[tuple[Any, ...]], Any] | None = None, *, name: str | None = None
) -> Callable[..., Flowable[Any]]:
    """Turn a callback-style function into one returning a Flowable: ``from_callback(f)(x)``
    calls ``f(x, callback)`` and gives what the callback receives.

        from_callback(f)(x):  ----(v|)     v = the callback's argument, when called and requested

    The returned function's Flowable is cold: each subscription calls ``func(*args, callback)``
    (after ``on_subscribe``). The callback's arguments become the one item as in reactivex:
    ``mapper(args)`` (the tuple of arguments) if given, else the single argument, else a list of
    them. The callback may be called at once, later, or from another thread (it hops to the
    subscriber's event loop); only its first call counts, and calls after cancel are ignored.
    Demand: the one value waits for a request, then completion follows it.
    Signals: TypeError (raised here) for ``func`` or ``mapper`` that is not callable; ``func`` or
        ``mapper`` raising → ``on_error`` with it; a callback called without arguments and no
        ``mapper``, or a None value → ``on_error(TypeError)`` (items are never None, §2.13).
    Anchor: reactivex ``from_callback(func, mapper=None)``; Reactor ``Mono.create(sink)``.
    """
    if not callable(func):
        raise TypeError(f"from_callback() needs a function taking a callback last, got {func!r}")
    if mapper is not None and not callable(mapper):
        raise TypeError(f"from_callback(mapper) needs a callable or None, got {mapper!r}")

    def function(*args: Any) -> Flowable[Any]:
        return _CallbackFlowable(func, args, mapper, name)

    function.__name__ = function.__qualname__ = f"from_callback({getattr(func, '__name__', 'func')})"
    return function
