"""``map_async_partitioned``: coroutine calls in parallel across keys, in order within a key.

Akka's ``mapAsyncPartitioned`` on :class:`rxpipe.stage.Stage`, with ``map_async``'s slot rule:
an item takes a slot from the moment it is requested upstream until its result has gone
downstream, whether it is waiting for its key, running, or done and waiting to be emitted, so

    upstream outstanding + items held + results waiting for demand <= parallelism

(Akka: "the operator will still pull in and buffer up to a total parallelism of elements before
it applies backpressure upstream"). Per key at most ``per_partition`` calls run; the items of a
busy key wait in arrival order in that key's queue, and a key's entry exists only while it has
items in the stage, so memory is bounded by ``parallelism`` whatever the number of keys.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any, Awaitable, Callable, Hashable

from rxpipe.flowable import Operator
from rxpipe.resilience import CircuitBreaker, Retry, resilient_call
from rxpipe.stage import Stage, operator

from ._args import check_callable, check_int_arg
from ._map_async import _call_error, log

__all__ = ["map_async_partitioned", "MapAsyncPartitioned"]


class _Call:
    """One item in the stage: its key, its task once started."""

    __slots__ = ("item", "key", "task")

    def __init__(self, item: Any, key: Hashable) -> None:
        self.item = item
        self.key = key
        self.task: asyncio.Future[Any] | None = None


class MapAsyncPartitioned(Stage):
    """One run: ``order`` (ordered mode: every call not yet emitted, in input order), ``running``
    (key -> calls running), ``waiting`` (key -> calls not started, in arrival order),
    ``tasks`` (running calls' tasks); ``held`` = calls in the stage."""

    held_bounds_credit = True  # held = slots: released by finished calls, never by more input
    replenish = 1  # one more per result delivered
    log_hook_errors = False  # the partition function's error is the stream's
    kind = "map_async_partitioned"

    def __init__(self, fn: Callable[[Any], Awaitable[Any]], parallelism: int, partition: Callable[[Any], Hashable],
                 per_partition: int, ordered: bool, retry: Retry | None, breaker: CircuitBreaker | None) -> None:
        self.fn = fn
        self.prefetch = parallelism  # type: ignore[misc]  # this run's window: parallelism slots
        self.max_held = max(Stage.max_held, parallelism)  # type: ignore[misc]
        self.partition = partition
        self.per_partition = per_partition
        self.ordered = ordered
        self.retry = retry
        self.breaker = breaker
        self.order: deque[_Call] = deque()
        self.running: dict[Hashable, int] = {}
        self.waiting: dict[Hashable, deque[_Call]] = {}
        self.tasks: set[asyncio.Future[Any]] = set()
        self.upstream_ended = False
        self.held = 0

    def on_start(self) -> None:
        self.loop = asyncio.get_running_loop()  # RuntimeError off a loop: the stream fails

    def on_next(self, item: Any) -> None:
        key = self.partition(item)
        call = _Call(item, key)
        self.held += 1
        if self.ordered:
            self.order.append(call)
        if self.running.get(key, 0) < self.per_partition:
            self.start(call)  # on failure the stage has failed: nothing more to do
        else:
            self.waiting.setdefault(key, deque()).append(call)

    def start(self, call: _Call) -> bool:
        """Call ``fn`` for ``call``; False if that failed the stage."""
        try:
            if self.retry is None and self.breaker is None:
                coro: Any = self.fn(call.item)
            else:
                coro = resilient_call(self.fn, call.item, retry=self.retry, breaker=self.breaker)
            task = asyncio.ensure_future(coro, loop=self.loop)
        except Exception as error:  # fn raised synchronously, or returned no awaitable
            self.fail(error)
            return False
        call.task = task
        self.running[call.key] = self.running.get(call.key, 0) + 1
        self.tasks.add(task)
        task.add_done_callback(lambda t, c=call: self.finished(t, c))
        return True

    def finished(self, task: asyncio.Future[Any], call: _Call) -> None:
        if not self.invoke(self.call_done, task, call) and not task.cancelled() and task.exception() is not None:
            log.error("map_async_partitioned stage %r: a call raised after the stage ended", self.stage_name,
                      exc_info=task.exception())

    def call_done(self, task: asyncio.Future[Any], call: _Call) -> None:
        self.tasks.discard(task)
        error = _call_error(task)
        if error is not None:
            self.fail(error)  # at once, ahead of the results held (Akka: the stream fails)
            return
        key = call.key
        left = self.running[key] - 1
        queue = self.waiting.get(key)
        if queue:
            self.running[key] = left
            following = queue.popleft()  # the key's next item, in arrival order
            if not queue:
                del self.waiting[key]
            if not self.start(following):
                return
        elif left:
            self.running[key] = left
        else:
            del self.running[key]  # no item of this key left: its entry goes
        if self.ordered:
            order = self.order
            while order and order[0].task is not None and order[0].task.done():
                head = order.popleft().task
                assert head is not None
                error = _call_error(head)  # done before its own callback ran: it may have failed
                if error is not None:
                    self.fail(error)
                    return
                self.held -= 1
                self.emit(head.result())
        else:
            self.held -= 1
            self.emit(task.result())
        if self.upstream_ended and not self.held:
            self.complete()

    def on_complete(self) -> None:
        self.upstream_ended = True
        if not self.held:
            self.complete()

    # on_error: the default fail() cuts ahead of the results held (as map_async)

    def on_stop(self) -> None:
        tasks = list(self.tasks)
        self.tasks.clear()
        self.order.clear()
        self.waiting.clear()
        self.running.clear()
        self.held = 0
        for task in tasks:
            task.cancel()  # no await: each ends on its next loop iteration


_partitioned_stage = operator(MapAsyncPartitioned)


def map_async_partitioned(fn: Callable[[Any], Awaitable[Any]], parallelism: int,
                          partition: Callable[[Any], Hashable], *, per_partition: int = 1, ordered: bool = True,
                          retry: Retry | None = None, breaker: CircuitBreaker | None = None,
                          name: str | None = None) -> Operator:
    """Transform each item with a coroutine function, at most ``parallelism`` calls at a time and
    at most ``per_partition`` (default 1) per key ``partition(item)``: one conversation's turns
    run one after another, in order, while other conversations run in parallel.

        source:     -abA-B|                 partition=str.lower: a, A are one conversation, b, B another
        demand:     ^*                      parallelism=3; fn takes 3 s for a, A and 6 s for b, B
        ordered:    ----a---(bA)-----(B|)   results in input order; one column = 1 s
        unordered:  ----a--Ab-----(B|)      ordered=False: as they finish

    ``a`` runs from 1 to 4 s; ``A`` (same key) arrives at 3 and waits for it: 4 to 7 s. ``b``
    runs from 2 to 8 s; ``B`` arrives at 5 (a slot freed at 4) and waits for ``b``: 8 to 14 s.
    Ordered, ``A`` (done at 7) waits behind ``b`` until 8; unordered, it leaves at 7. With
    ``per_partition=1`` a key's results keep its input order in both modes.
    Demand: an item takes one of ``parallelism`` slots from when it is requested upstream until
    its result went downstream, whether it waits for its key, runs, or waits to be emitted:
    upstream outstanding + items in the stage + results waiting <= ``parallelism`` (Akka pulls
    and buffers up to ``parallelism`` before backpressuring). ``parallelism`` is requested at
    subscribe, then one more per result delivered. A key has state only while it has items in
    the stage (memory bounded by ``parallelism``, whatever the number of keys).
    Retry and breaker: as ``map_async`` (``Retry(attempts, base_s, cap_s)`` with full jitter,
    ``retry_after`` as the minimum delay; ``CircuitBreaker``); an item keeps its slot and its
    key while it waits to be called again.
    Args: fn (``async def fn(item) -> result``); parallelism (calls, int >= 1); partition
        (item -> hashable key); per_partition (calls per key, int in [1, parallelism]);
        ordered (True: results in input order, Akka ``mapAsyncPartitioned``; False: as they
        finish, Akka ``mapAsyncPartitionedUnordered``).
    Signals: TypeError/ValueError (raised here) for bad arguments; ``partition`` raising (or
        an unhashable key), a call failing after its retries, ``fn`` returning None
        (TypeError) or no awaitable: upstream and every call are cancelled and the error is
        signalled at once, ahead of the results held. An upstream error does the same;
        completion waits for the calls. Cancel cancels upstream and every call.
    Anchor: Akka ``mapAsyncPartitioned(parallelism)(partitioner)(f)`` and
        ``mapAsyncPartitionedUnordered``; Kafka's ordering per partition.
    """
    check_callable("map_async_partitioned", fn, "fn")
    check_int_arg("map_async_partitioned", "parallelism", parallelism, 1)
    check_callable("map_async_partitioned", partition, "partition")
    check_int_arg("map_async_partitioned", "per_partition", per_partition, 1)
    if per_partition > parallelism:
        raise ValueError(f"map_async_partitioned(per_partition) must be <= parallelism={parallelism}, "
                         f"got {per_partition!r}")
    if retry is not None and not isinstance(retry, Retry):
        raise TypeError(f"map_async_partitioned(retry=) needs a Retry, got {retry!r}")
    if breaker is not None and not isinstance(breaker, CircuitBreaker):
        raise TypeError(f"map_async_partitioned(breaker=) needs a CircuitBreaker, got {breaker!r}")
    return _partitioned_stage(fn, parallelism, partition, per_partition, bool(ordered), retry, breaker, name=name)
