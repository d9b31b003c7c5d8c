"""``flat_map``, ``concat_map``, ``switch_map``: one inner stream per item, flattened (DESIGN §3).

Written on :class:`rxpipe.stage.Stage`; each inner stream is an input of the stage
(``open_input``), so the kit owns its credit, its cancel and its errors:

- ``flat_map``: the stage's window is ``max_concurrency`` outer items and its ``held`` items are
  the running inners, so outer outstanding + running inners + items waiting downstream <=
  ``max_concurrency``; ``replenish = 1`` asks for one outer item per finished inner. Each inner
  has a window of ``prefetch`` items (75 % replenish); its items are emitted as they come and wait
  for downstream demand in the kit's output queue (arrival order), which counts against every
  window, so at most ``max_concurrency * prefetch`` items wait in all.
- ``concat_map``: window ``prefetch + 1`` outer items (the running inner's and ``prefetch``
  ahead), one inner at a time, demand-driven (``prefetch=None``: it is asked exactly what
  downstream wants; the rest carries over to the next inner).
- ``switch_map``: the outer is requested without bound (nothing queues: an item replaces the
  inner at once, and an item whose stream was still running is counted as dropped, reason
  ``"switched"``); the inner is demand-driven, and a new one inherits the outstanding demand.

What ``fn`` may return (:func:`inner_source`): a Flowable, any Publisher, an awaitable (one
value), an async iterable or an iterable.
"""

from __future__ import annotations

import asyncio
import inspect
from collections import deque
from typing import Any, AsyncIterable, Awaitable, Callable, Iterable

from rxpipe import (
    UNBOUNDED,
    Flowable,
    Publisher,
    Subscriber,
    Subscription,
    from_async_iterable,
    from_iterable,
    from_publisher,
)
from rxpipe.stage import Input, Stage, bad_request, operator, valid_demand

__all__ = ["FlatMap", "ConcatMap", "SwitchMap", "flat_map_stage", "concat_map_stage", "switch_map_stage",
           "inner_source", "is_inner_source", "mapper"]


# -- what fn may return ------------------------------------------------------------------------------
class _AwaitableSubscription(Subscription):
    """One awaitable as a one-item stream: awaited (as a task) on the first request, its result
    emitted then completion; its exception signalled; cancel cancels the task (or closes a
    coroutine never started)."""

    __slots__ = ("downstream", "awaitable", "task", "done")

    def __init__(self, downstream: Subscriber[Any], awaitable: Awaitable[Any]) -> None:
        self.downstream = downstream
        self.awaitable: Awaitable[Any] | None = awaitable
        self.task: asyncio.Future[Any] | None = None
        self.done = False

    def request(self, n: int) -> None:
        if self.done:
            return
        if not valid_demand(n):
            self.cancel()
            self.downstream.on_error(bad_request(n))
            return
        if self.task is None:
            awaitable, self.awaitable = self.awaitable, None
            try:
                self.task = asyncio.ensure_future(awaitable)  # type: ignore[arg-type]
            except Exception as error:  # off an event loop
                self._close(awaitable)
                self.done = True
                self.downstream.on_error(error)
                return
            self.task.add_done_callback(self._finished)

    def cancel(self) -> None:
        if self.done:
            return
        self.done = True
        if self.task is not None:
            self.task.cancel()
        else:
            self._close(self.awaitable)
            self.awaitable = None

    @staticmethod
    def _close(awaitable: Any) -> None:
        close = getattr(awaitable, "close", None)  # a coroutine never awaited: no warning
        if inspect.iscoroutine(awaitable) and close is not None:
            close()

    def _finished(self, task: asyncio.Future[Any]) -> None:
        if self.done:
            return
        self.done = True
        if task.cancelled():
            self.downstream.on_error(asyncio.CancelledError("the awaitable was cancelled from outside the stage"))
            return
        error = task.exception()
        if error is not None:
            self.downstream.on_error(error)
            return
        value = task.result()
        if value is None:
            self.downstream.on_error(TypeError("the awaitable returned None; items are never None "
                                               "(Reactive Streams §2.13)"))
            return
        self.downstream.on_next(value)
        self.downstream.on_complete()


class _AwaitableFlowable(Flowable[Any]):
    kind = "awaitable"

    def __init__(self, awaitable: Awaitable[Any]) -> None:
        super().__init__()
        self.awaitable: Awaitable[Any] | None = awaitable

    def _subscribe(self, subscriber: Subscriber[Any]) -> None:
        awaitable, self.awaitable = self.awaitable, None  # an awaitable is awaited once
        if awaitable is None:
            raise RuntimeError("an awaitable returned by the function can be subscribed to only once")
        subscriber.on_subscribe(_AwaitableSubscription(subscriber, awaitable))


def is_inner_source(value: object) -> bool:
    """True for what :func:`inner_source` accepts."""
    return isinstance(value, (Flowable, Publisher, AsyncIterable, Iterable)) or inspect.isawaitable(value)


def inner_source(value: Any, op: str, prefetch: int = 1) -> Flowable[Any]:
    """The Flowable for what ``fn(item)`` returned: a Flowable as is, a Publisher through
    ``from_publisher``, an awaitable as one item, an async iterable through
    ``from_async_iterable`` pulling at most ``prefetch`` items (default 1) ahead of the inner's
    own window (so a generator is read one item further ahead than the operator's demand rule
    asks at most: its pump awaits the next item while the last one waits), an iterable
    through ``from_iterable`` (a ``str`` is an iterable of characters, as in reactivex).
    TypeError for anything else (None included)."""
    if isinstance(value, Flowable):
        return value
    if isinstance(value, Publisher):
        return from_publisher(value)
    if inspect.isawaitable(value):
        return _AwaitableFlowable(value)
    if isinstance(value, AsyncIterable):
        return from_async_iterable(value, prefetch=prefetch)
    if isinstance(value, Iterable):
        return from_iterable(value)
    raise TypeError(f"{op}: the function returned {value!r}; it must return a Flowable, a Publisher, an "
                    f"awaitable, an async iterable or an iterable")


def mapper(op: str, fn: Any) -> Callable[[Any], Any]:
    """``fn`` if callable; for a stream (a Flowable, a Publisher, an iterable, an async iterable),
    a function mapping every item to it (reactivex's ``flat_map(observable)``); TypeError else
    (an awaitable too: it can be awaited only once)."""
    if callable(fn):
        return fn  # type: ignore[no-any-return]
    if is_inner_source(fn) and not inspect.isawaitable(fn):
        return lambda _: fn
    raise TypeError(f"{op}() needs a function item -> stream, or a stream, got {fn!r}")


def _inner(stage: Stage, fn: Callable[[Any], Any] | None, item: Any, op: str,
           prefetch: int = 1) -> Flowable[Any] | None:
    """``inner_source(fn(item), op, prefetch)``, or None after failing the stage with what ``fn``
    raised."""
    try:
        return inner_source(item if fn is None else fn(item), op, prefetch)
    except Exception as error:  # the user's function: signalled, as map does (not a stage bug)
        stage.fail(error)
        return None


def _indexing(fn: Callable[[Any, int], Any]) -> Callable[[Any], Any]:
    """``fn(item, index)`` as a function of the item, the index counting from 0 (per run: each
    stage instance makes its own)."""
    count = iter(range(2**63))

    def indexed(item: Any) -> Any:
        return fn(item, next(count))

    return indexed


# -- flat_map ----------------------------------------------------------------------------------------
class FlatMap(Stage):
    """One run of ``flat_map``. State: ``outer_done``; ``held`` = unfinished inners (their items
    wait for downstream demand in the kit's output queue)."""

    held_bounds_credit = True  # held = calls/inners in flight: a concurrency bound, released by them
    replenish = 1  # one outer item per finished inner
    kind = "flat_map"

    def __init__(self, fn: Callable[..., Any], max_concurrency: int, prefetch: int, indexed: bool = False) -> None:
        self.fn = _indexing(fn) if indexed else fn
        self.prefetch = max_concurrency  # type: ignore[misc]  # this run's window: inner slots
        self.max_held = max(Stage.max_held, max_concurrency)  # type: ignore[misc]  # the window bounds held
        self.inner_prefetch = prefetch
        self.outer_done = False
        self.held = 0

    def on_next(self, item: Any) -> None:
        source = _inner(self, self.fn, item, "flat_map")
        if source is not None:
            self.held += 1
            # pulled at once: a synchronous inner runs before the next outer signal (reactivex)
            self.pull(self.open_input(source, prefetch=self.inner_prefetch))

    def on_input_next(self, input: Input, item: Any) -> None:
        # Ready items go to the kit's output queue at once (arrival order): they wait there for
        # downstream demand and count against every window (each inner's and the outer's), so a
        # slow consumer pauses the inners and the outer, and costs one request per round.
        self.emit(item)

    def on_input_complete(self, input: Input) -> None:
        self.inner_finished()

    def inner_finished(self) -> None:
        self.held -= 1
        if self.outer_done and not self.held:
            self.complete()

    def on_complete(self) -> None:
        self.outer_done = True
        if not self.held:
            self.complete()

    # on_error / on_input_error: the default fail() cancels the outer and every inner at once


flat_map_stage = operator(FlatMap)


# -- concat_map --------------------------------------------------------------------------------------
class ConcatMap(Stage):
    """One run of ``concat_map``. State: ``pending`` (outer items waiting for their turn),
    ``current`` (the running inner), ``outer_done``; ``held`` = pending + running."""

    held_bounds_credit = True  # held = calls/inners in flight: a concurrency bound, released by them
    replenish = 1
    kind = "concat_map"

    def __init__(self, fn: Callable[[Any], Any], prefetch: int) -> None:
        self.fn = fn
        self.prefetch = prefetch + 1  # type: ignore[misc]  # the running inner's item + prefetch ahead
        self.max_held = max(Stage.max_held, prefetch + 1)  # type: ignore[misc]  # the window bounds held
        self.pending: deque[Any] = deque()
        self.current: Input | None = None
        self.outer_done = False
        self.held = 0

    def on_next(self, item: Any) -> None:
        self.pending.append(item)
        self.held += 1
        if self.current is None:
            self.start_next()

    def start_next(self) -> None:
        source = _inner(self, self.fn, self.pending.popleft(), "concat_map")  # fn is called on its turn
        if source is not None:
            self.current = self.open_input(source, prefetch=None)
            self.pull(self.current)  # a synchronous inner runs before the next outer signal

    def on_input_complete(self, input: Input) -> None:
        self.current = None
        self.held -= 1
        if self.pending:
            self.start_next()
        elif self.outer_done:
            self.complete()

    def on_complete(self) -> None:
        self.outer_done = True
        if self.current is None and not self.pending:
            self.complete()


concat_map_stage = operator(ConcatMap)


# -- switch_map --------------------------------------------------------------------------------------
class SwitchMap(Stage):
    """One run of ``switch_map``. State: ``current`` (the inner of the latest outer item, until
    it ends), ``outer_done``."""

    prefetch = UNBOUNDED  # a new item replaces the inner at once: nothing ever queues
    kind = "switch_map"

    def __init__(self, fn: Callable[..., Any] | None, indexed: bool = False) -> None:
        self.fn = _indexing(fn) if indexed and fn is not None else fn
        self.current: Input | None = None
        self.current_item: Any = None
        self.outer_done = False

    def on_next(self, item: Any) -> None:
        source = _inner(self, self.fn, item, "switch_map")
        if source is None:
            return
        if self.current is not None:  # still running: its item is switched away (counted, told)
            self.current.cancel()
            self.drop(self.current_item, "switched")
        self.current, self.current_item = self.open_input(source, prefetch=None), item
        # pulled at once: a synchronous inner delivers its items before the next outer item
        # switches it away (reactivex), and an asynchronous one is asked at once
        self.pull(self.current)

    def on_input_next(self, input: Input, item: Any) -> None:
        if input is self.current:  # a replaced inner is silent
            self.emit(item)

    def on_input_complete(self, input: Input) -> None:
        if input is self.current:
            self.current = self.current_item = None
            if self.outer_done:
                self.complete()

    def on_input_error(self, input: Input, error: BaseException) -> None:
        if input is self.current:
            self.fail(error)

    def on_complete(self) -> None:
        self.outer_done = True
        if self.current is None:
            self.complete()


switch_map_stage = operator(SwitchMap)
