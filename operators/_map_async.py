"""``map_async``: bounded concurrent coroutine calls, ordered or not (DESIGN §3).

Written on :class:`rxpipe.stage.Stage`. A *slot* is held from the moment an item is requested
from upstream until its result has gone downstream: the stage's window is ``concurrency`` and its
``held`` items are its calls (running, or done and waiting in input order), so

    upstream outstanding + calls held + results waiting for demand <= concurrency

at all times: ``concurrency`` is requested at subscribe, then one more per result delivered
(``replenish = 1``). In ordered mode the reorder buffer is the deque of calls itself, bounded by
the same invariant. Each call is one task (the coroutine call); a finished task re-enters the
stage through ``invoke``, so its result is handled serially with every other signal.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Any, Awaitable, Callable

from rxpipe.flowable import Flowable
from rxpipe.resilience import CircuitBreaker, Retry, resilient_call
from rxpipe.stage import Stage, operator

__all__ = ["MapAsync", "map_async_stage", "with_item_timeout"]

log = logging.getLogger("rxpipe")


def _call_error(task: asyncio.Future[Any]) -> BaseException | None:
    """The error a finished call stands for, or None when it produced an item."""
    if task.cancelled():
        return RuntimeError("map_async: a call was cancelled from outside the stage")
    error = task.exception()
    if error is not None:
        return error
    if task.result() is None:
        return TypeError("map_async: the function returned None; items are never None "
                         "(Reactive Streams §2.13)")
    return None


class MapAsync(Stage):
    """One run of ``map_async``: up to ``concurrency`` calls; results emitted in input order
    (``ordered``) or as they finish.

    State: ``calls`` (ordered: every call not yet emitted, in input order, running or done;
    unordered: the running calls), ``upstream_ended``; ``held`` = the number of calls.
    """

    held_bounds_credit = True  # held = calls/inners in flight: a concurrency bound, released by them
    replenish = 1  # one more per result delivered, never in bursts
    kind = "map_async"

    def __init__(self, fn: Callable[[Any], Awaitable[Any]], concurrency: int, ordered: bool,
                 retry: Retry | None, breaker: CircuitBreaker | None, item_timeout_s: float | None) -> None:
        self.fn = fn
        self.prefetch = concurrency  # type: ignore[misc]  # this run's window: concurrency slots
        self.max_held = max(Stage.max_held, concurrency)  # type: ignore[misc]  # the window bounds held
        self.ordered = ordered
        self.retry = retry
        self.breaker = breaker
        self.timeout_s = item_timeout_s
        self.calls: deque[asyncio.Future[Any]] | set[asyncio.Future[Any]] = deque() if ordered else set()
        self.upstream_ended = False
        self.held = 0

    def on_start(self) -> None:
        self.loop = asyncio.get_running_loop()  # RuntimeError off a loop: the stream fails

    def on_next(self, item: Any) -> None:
        try:
            if self.retry is None and self.breaker is None and self.timeout_s is None:
                call: Any = self.fn(item)  # the task runs the user's coroutine itself
            else:
                call = resilient_call(self.fn, item, retry=self.retry, breaker=self.breaker,
                                      timeout_s=self.timeout_s)
            task = asyncio.ensure_future(call, loop=self.loop)
        except Exception as error:  # fn raised synchronously, or returned no awaitable
            self.fail(error)
            return
        if self.ordered:
            self.calls.append(task)  # type: ignore[union-attr]
        else:
            self.calls.add(task)  # type: ignore[union-attr]
        self.held += 1
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Future[Any]) -> None:
        if not self.invoke(self.call_done, task):
            self.call_done_after_end(task)

    def call_done(self, task: asyncio.Future[Any]) -> None:
        error = _call_error(task)
        if error is not None:
            self.fail(error)  # at once, whatever its place: cuts ahead of the results held
            return
        if self.ordered:
            calls: deque[asyncio.Future[Any]] = self.calls  # type: ignore[assignment]
            while calls and calls[0].done():  # the head and every finished call behind it
                head = calls.popleft()
                self.held -= 1
                self.settle(head)
        else:
            self.calls.discard(task)  # type: ignore[union-attr]
            self.held -= 1
            self.settle(task)
        if self.upstream_ended and not self.calls:
            self.complete()

    def settle(self, task: asyncio.Future[Any]) -> None:
        error = _call_error(task)  # done before its own callback ran: it may have failed
        if error is not None:
            self.fail(error)
        else:
            self.emit(task.result())

    def call_done_after_end(self, task: asyncio.Future[Any]) -> None:
        """A call ended after the stage terminated. Nobody downstream can receive its error, so
        an exception it raised (typically from the user function's cleanup while being
        cancelled) is logged on the ``rxpipe`` logger, never swallowed (DESIGN §2)."""
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            log.error("map_async stage %r: a call raised after the stage ended", self.stage_name, exc_info=error)

    def on_complete(self) -> None:
        self.upstream_ended = True
        if not self.calls:
            self.complete()

    # on_error: the default fail() cuts ahead (Reactor flatMap without delayError)

    def on_stop(self) -> None:
        self.cancel_calls()  # completed, failed or cancelled: no call outlives the stage

    def cancel_calls(self) -> None:
        calls = list(self.calls)
        self.calls.clear()
        self.held = 0
        for task in calls:
            task.cancel()  # no await: each task ends on its next loop iteration


#: ``map_async_stage(fn, concurrency, ordered, retry, breaker, item_timeout_s, name=None)``
map_async_stage = operator(MapAsync)


def with_item_timeout(stage: Flowable[Any], seconds: float, name: str | None) -> Flowable[Any] | None:
    """``timeout(seconds, mode="item")`` applied to a ``map_async`` stage: the same stage where
    every call (every attempt) has a deadline of ``seconds`` (the smaller one if it had one).
    None when ``stage`` is not a ``map_async`` stage."""
    if getattr(stage, "stage_class", None) is not MapAsync:
        return None
    fn, concurrency, ordered, retry, breaker, timeout_s = stage.args  # type: ignore[attr-defined]
    if timeout_s is not None:
        seconds = min(seconds, timeout_s)
    return map_async_stage(fn, concurrency, ordered, retry, breaker, seconds,
                           name=name or stage.name)(stage.upstreams[0])
