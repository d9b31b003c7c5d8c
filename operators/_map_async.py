"""``map_async``: bounded concurrent coroutine calls, ordered or not (DESIGN §3).

One state machine, :class:`MapAsyncSubscription`: subscriber to upstream, subscription to
downstream. A *slot* is held from the moment an item is requested from upstream until its result
has gone downstream, so

    upstream outstanding + calls held (running, or done and waiting) <= concurrency

at all times: ``concurrency`` is requested at subscribe, then one more per result delivered
(batched once per drain pass). In ordered mode the reorder buffer is the deque of calls itself,
so it is bounded by the same invariant. Each call is one task (the coroutine call); nothing else
is allocated per item. Results are delivered only on downstream demand, through the shared
drain loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Any, Awaitable, Callable

from rxpipe._protocol import Subscriber
from rxpipe.flowable import Flowable
from rxpipe.metrics import StageStatistics
from rxpipe.resilience import CircuitBreaker, Retry, resilient_call
from rxpipe.stage import LINK_SLOTS, DrainSubscription, UpstreamLink

__all__ = ["MapAsyncFlowable", "MapAsyncSubscription"]

log = logging.getLogger("rxpipe")


class MapAsyncFlowable(Flowable[Any]):
    """The ``map_async`` stage; ``item_timeout_s`` is set by ``timeout(s, mode="item")``."""

    kind = "map_async"

    def __init__(self, source: Flowable[Any], fn: Callable[[Any], Awaitable[Any]], concurrency: int,
                 ordered: bool, retry: Retry | None, breaker: CircuitBreaker | None,
                 item_timeout_s: float | None = None, name: str | None = None) -> None:
        super().__init__(name=name, upstreams=(source,))
        self.source = source
        self.fn = fn
        self.concurrency = concurrency
        self.ordered = ordered
        self.retry = retry
        self.breaker = breaker
        self.item_timeout_s = item_timeout_s

    def with_item_timeout(self, seconds: float, name: str | None = None) -> MapAsyncFlowable:
        """The same stage where every call (every attempt) has a deadline of ``seconds``."""
        if self.item_timeout_s is not None:
            seconds = min(seconds, self.item_timeout_s)
        return MapAsyncFlowable(self.source, self.fn, self.concurrency, self.ordered, self.retry,
                                self.breaker, seconds, name or self.name)

    def _subscribe(self, subscriber: Subscriber[Any]) -> None:
        loop = asyncio.get_running_loop()  # RuntimeError → on_error (Flowable._subscribe_safely)
        self.source._subscribe(MapAsyncSubscription(subscriber, self, loop))


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


class MapAsyncSubscription(DrainSubscription, UpstreamLink):
    """Runs up to ``concurrency`` calls; delivers results on demand (input order if ``ordered``).

    State: ``calls`` (ordered: every held call in input order, running or done; unordered: the
    running calls), ``ready`` (unordered: results waiting for demand), ``upstream_outstanding``
    (items requested from upstream, not yet received), ``upstream_done``.
    """

    __slots__ = (*LINK_SLOTS, "loop", "fn", "concurrency", "ordered", "retry", "breaker", "timeout_s",
                 "calls", "ready", "_on_call_done")

    def __init__(self, downstream: Subscriber[Any], stage: MapAsyncFlowable,
                 loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(downstream)
        self.loop = loop
        self.fn = stage.fn
        self.concurrency = stage.concurrency
        self.ordered = stage.ordered
        self.retry = stage.retry
        self.breaker = stage.breaker
        self.timeout_s = stage.item_timeout_s
        self.calls: deque[asyncio.Future[Any]] | set[asyncio.Future[Any]] = deque() if stage.ordered else set()
        self.ready: deque[Any] = deque()
        self.link_upstream(stage.name)
        self._on_call_done = self._call_done if stage.ordered else self._call_done_unordered

    # -- upstream signals ----------------------------------------------------------------------
    def _upstream_ready(self) -> None:
        self.request_upstream(self.concurrency)

    def on_next(self, item: Any) -> None:
        if not self.accept(item):
            return
        self.counters.items_in += 1
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
        task.add_done_callback(self._on_call_done)

    def on_error(self, error: BaseException) -> None:
        if self.upstream_terminated():
            self.fail(error)  # Reactor flatMap without delayError: cuts ahead, cancels the calls

    def on_complete(self) -> None:
        if self.upstream_terminated():
            self.drain()

    # -- call completions ----------------------------------------------------------------------
    def _call_done(self, task: asyncio.Future[Any]) -> None:
        if self.cancelled:
            self._call_done_after_cancel(task)
            return
        error = _call_error(task)
        if error is not None:
            self.fail(error)  # cuts ahead of results held in the reorder buffer
        else:
            calls: deque[asyncio.Future[Any]] = self.calls  # type: ignore[assignment]
            if calls and calls[0] is task:  # else: not the head yet, or a pass already took it
                self.drain()

    def _call_done_unordered(self, task: asyncio.Future[Any]) -> None:
        if self.cancelled:
            self._call_done_after_cancel(task)
            return
        error = _call_error(task)
        if error is not None:
            self.fail(error)
            return
        self.calls.discard(task)  # type: ignore[union-attr]
        self.ready.append(task.result())
        self.drain()

    def _call_done_after_cancel(self, task: asyncio.Future[Any]) -> None:
        """A call ended after the stage was cancelled. Nobody downstream can receive its error,
        so an exception it raised (typically from the user function's cleanup while being
        cancelled) is logged on the ``rxpipe`` logger, never swallowed (DESIGN §2)."""
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            log.error("map_async stage %r: a call raised after the stage was cancelled",
                      self.counters.stage, exc_info=error)

    # -- downstream ----------------------------------------------------------------------------
    def _drain(self) -> None:
        r = self.requested
        e = 0
        on_next = self.downstream.on_next
        # Invariant: e results delivered in this pass, e <= r (the demand seen at its start).
        if self.ordered:
            calls: deque[asyncio.Future[Any]] = self.calls  # type: ignore[assignment]
            while e != r and calls and calls[0].done():
                task = calls.popleft()
                error = _call_error(task)  # done before its callback ran: check here too
                if error is not None:
                    self.fail(error)
                    return
                on_next(task.result())
                e += 1
                if self.cancelled:
                    break
        else:
            ready = self.ready
            while e != r and ready:
                on_next(ready.popleft())
                e += 1
                if self.cancelled:
                    break
        if e:
            self._delivered(e, r)
            self.counters.items_out += e
            if self.cancelled:
                return
            if not self.upstream_done:
                # e slots freed: ask for exactly that many (never more than the free slots)
                self.request_upstream(e)
                if self.cancelled:
                    return
        if self.upstream_done and not self.calls and not self.ready:
            self._complete()

    def _release(self) -> None:
        self.cancel_upstream()
        calls = list(self.calls)
        self.calls.clear()
        self.ready.clear()
        for task in calls:
            task.cancel()  # no await: each task ends on its next loop iteration

    # -- introspection -------------------------------------------------------------------------
    @property
    def held(self) -> int:
        """Calls running plus results waiting for demand (items); never above ``concurrency``."""
        return len(self.calls) + len(self.ready)

    @property
    def running(self) -> int:
        """Calls still running (coroutines not finished)."""
        return sum(1 for task in self.calls if not task.done())

    def statistics(self) -> StageStatistics:
        """Demand (items), held calls and results, capacity (= concurrency), items in/out."""
        counters = self.counters
        return StageStatistics(counters.stage, self.requested, self.held, self.concurrency,
                               counters.items_in, counters.items_out, dict(counters.dropped))
