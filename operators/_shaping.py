"""Shaping the flow of LLM pipelines: ``throttle`` (by cost), ``conflate``, ``keep_alive``.

Akka Streams' operators of those names, written on :class:`rxpipe.stage.Stage` and on the loop's
clock only (``Stage.now``, the kit's timers), so virtual time drives them exactly:

- ``throttle`` is Akka's token bucket (``akka.util.TokenBucket``): full at start, refilled at
  ``cost_per_s``, an item paying its cost when it arrives; an item costing more than the tokens
  left waits until its debt is paid (the bucket is then empty). One item at a time, pulled only
  when downstream wants one (``lazy``, a window of one): nothing queues in front of the bucket.
- ``conflate`` never backpressures: while downstream has no demand, arriving items are folded
  into one summary (``aggregate``), emitted as soon as downstream asks.
- ``keep_alive`` injects an item when upstream was idle for ``idle_s`` and downstream wants one;
  one upstream item is prefetched so a real item always wins over an injected one.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Callable

from rxpipe.flowable import Operator
from rxpipe.settings import check_number
from rxpipe.stage import Stage, operator
from rxpipe.token_bucket import TokenBucket

from ._args import check_callable, check_duration, check_optional_callable
from ._time import drop_held

__all__ = ["throttle", "conflate", "keep_alive", "Throttle", "Conflate", "KeepAlive"]

NOTHING = Stage.NOTHING

# A loop may run a timer up to its clock resolution early: a deadline this close counts as reached.
_EARLY_S = 1e-6


def _unit_cost(item: Any) -> int:
    return 1


class Throttle(Stage):
    """One run of ``throttle``: ``bucket`` (the tokens), ``waiting`` (the one item paying off its
    debt on the timer, or NOTHING), ``ended`` (upstream completed while an item waited)."""

    prefetch = 1
    lazy = True  # Akka pulls only on downstream's pull: nothing is taken before it is wanted
    held_bounds_credit = True  # the waiting item is released by the timer, never by more input
    passes_capabilities = True
    log_hook_errors = False  # the cost function's error is the stream's
    kind = "throttle"

    def __init__(self, cost_per_s: float, burst: float, cost: Callable[[Any], float]) -> None:
        self.cost_per_s = cost_per_s
        self.burst = burst
        self.cost = cost
        self.bucket: TokenBucket | None = None
        self.waiting: Any = NOTHING
        self.ended = False
        self.held = 0

    def on_start(self) -> None:
        self.bucket = TokenBucket(self.cost_per_s, self.burst, self.now)

    def on_next(self, item: Any) -> None:
        cost = self.cost(item)
        if isinstance(cost, bool) or not isinstance(cost, (int, float)) or not 0 <= cost < float("inf"):
            raise ValueError(f"throttle {self.stage_name!r}: cost({item!r}) must be a finite number >= 0, "
                             f"got {cost!r}")
        bucket = self.bucket
        assert bucket is not None
        bucket.tokens = bucket.refill(self.now) - cost  # may go negative: a debt paid at cost_per_s
        if bucket.tokens >= 0:
            self.emit(item)
            return
        self.waiting = item
        self.held = 1
        self.start_timer("paid", -bucket.tokens / self.cost_per_s)

    def on_timer(self, key: Any) -> None:
        item, self.waiting = self.waiting, NOTHING
        self.held = 0
        self.emit(item)
        if self.ended:
            self.complete()

    def on_complete(self) -> None:
        if self.waiting is NOTHING:
            self.complete()
        else:
            self.ended = True  # the waiting item goes out first (Akka: willStop)

    def on_error(self, error: BaseException) -> None:
        drop_held(self, error, ("waiting",))

    def on_stop(self) -> None:
        self.waiting = NOTHING
        self.held = 0


class Conflate(Stage):
    """One run of ``conflate``: ``summary`` (the items folded while downstream had no demand,
    or NOTHING)."""

    prefetch = 16
    log_hook_errors = False  # aggregate's and seed's errors are the stream's
    kind = "conflate"

    def __init__(self, aggregate: Callable[[Any, Any], Any], seed: Callable[[Any], Any] | None) -> None:
        self.aggregate = aggregate
        self.seed = seed
        self.summary: Any = NOTHING
        self.held = 0

    def on_next(self, item: Any) -> None:
        if self.summary is NOTHING:
            summary = item if self.seed is None else self.seed(item)
        else:
            summary = self.aggregate(self.summary, item)
        if summary is None:
            raise TypeError(f"conflate {self.stage_name!r}: the summary is None; items are never None "
                            f"(Reactive Streams §2.13)")
        if self.demanded:
            self.summary = NOTHING
            self.held = 0
            self.emit(summary)
        else:
            self.summary = summary
            self.held = 1

    def on_request(self, n: int) -> None:
        if self.summary is not NOTHING and self.demanded:
            summary, self.summary = self.summary, NOTHING
            self.held = 0
            self.emit(summary)

    def on_complete(self) -> None:
        if self.summary is not NOTHING:  # the last summary goes out, on demand, before completion
            summary, self.summary = self.summary, NOTHING
            self.held = 0
            self.emit(summary)
        self.complete()

    def on_error(self, error: BaseException) -> None:
        drop_held(self, error, ("summary",))


class KeepAlive(Stage):
    """One run of ``keep_alive``: ``deadline`` (loop time at which the stream counts as idle:
    ``idle_s`` after the last upstream or injected item), ``armed`` (the idle timer runs)."""

    prefetch = 1  # one upstream item prefetched: a real item always wins over an injected one
    log_hook_errors = False  # inject's error is the stream's
    kind = "keep_alive"

    def __init__(self, idle_s: float, inject: Callable[[], Any]) -> None:
        self.idle_s = idle_s
        self.inject = inject
        self.deadline = 0.0
        self.armed = False

    def on_start(self) -> None:
        self.deadline = self.now + self.idle_s

    def on_next(self, item: Any) -> None:
        self.deadline = self.now + self.idle_s
        self.emit(item)
        self.check()

    def on_request(self, n: int) -> None:
        self.check()

    def on_timer(self, key: Any) -> None:
        self.armed = False
        self.check()

    def check(self) -> None:
        """Inject if idle and wanted; else arm the timer for the deadline while wanted."""
        if not self.demanded:
            return  # downstream backpressures: nothing is injected, nothing accumulates
        now = self.now
        if now + _EARLY_S >= self.deadline:
            injected = self.inject()
            if injected is None:
                raise TypeError(f"keep_alive {self.stage_name!r}: inject() returned None; items are never None "
                                f"(Reactive Streams §2.13)")
            self.deadline = now + self.idle_s
            self.emit(injected)
            if not self.demanded:
                return
        if not self.armed:
            self.armed = True
            self.start_timer("idle", self.deadline - now)


_throttle_stage = operator(Throttle)
_conflate_stage = operator(Conflate)
_keep_alive_stage = operator(KeepAlive)


def throttle(cost_per_s: float, burst: float, cost: Callable[[Any], float] | None = None, *,
             name: str | None = None) -> Operator:
    """Shape the flow to ``cost_per_s`` cost units per second, each item costing ``cost(item)``
    (e.g. its tokens), with bursts of up to ``burst`` units.

        source:  (1231|)
        demand:  ^*
        output:  (12)--3(1|)      throttle(100, burst=3, cost=int): one column = 10 ms = 1 unit

    The bucket holds ``burst`` units, full at start. ``1`` and ``2`` pay 3 units at once; ``3``
    finds the bucket empty and waits 3 columns for its cost; ``1`` then waits one more.
    A token bucket on the loop clock, Akka's (``akka.util.TokenBucket``): refilled at
    ``cost_per_s`` up to ``burst``; an item pays its cost when it arrives and goes on at once if
    the bucket held enough, else it waits until the missing units have accrued (its debt), and
    the bucket is empty when it leaves. An item may cost more than ``burst`` (it waits longer);
    a cost of 0 is free. ``cost=None``: every item costs 1 (Akka's ``throttle(elements, per)``).
    Demand: one item at a time, taken only when downstream wants one (Akka pulls on pull):
    upstream outstanding + the waiting item <= 1, nothing is requested without downstream
    demand, so nothing queues in front of the bucket and a 429 at the edge stays possible.
    Args: cost_per_s (units per second, > 0); burst (units, >= 1); cost (item -> number >= 0,
        e.g. ``lambda r: r.prompt_tokens + r.max_tokens``).
    Signals: TypeError/ValueError (raised here) for bad arguments; ``cost`` raising, or
        returning a negative, infinite or non-number value, fails the stream with that error
        (ValueError) and cancels upstream; an upstream error is signalled at once (the waiting
        item dropped, reason ``"error"``); the completion follows the waiting item; cancel
        travels upstream and stops the timer. Subscribing off an event loop signals RuntimeError.
    Anchor: Akka ``throttle(cost, per, maximumBurst, costCalculation, ThrottleMode.Shaping)``;
        token bucket (RFC 2697's committed bucket); rxpipe ``rate_limit`` is the same bucket
        over item counts, with read-ahead of whole tokens.
    """
    check_number(cost_per_s, "throttle(cost_per_s)", minimum=0, exclusive_minimum=True)
    check_number(burst, "throttle(burst)", minimum=1)
    check_optional_callable("throttle", "cost", cost)
    fn = cost or _unit_cost
    return _throttle_stage(float(cost_per_s), float(burst), fn, name=name)


def conflate(aggregate: Callable[[Any, Any], Any], seed: Callable[[Any], Any] | None = None, *,
             name: str | None = None) -> Operator:
    """While downstream has no demand, fold arriving items into one summary; emit the summary
    as soon as downstream asks.

        source:  -1-2-3-4-|
        demand:  ^1    ^1  ^1
        output:  -1----5---(4|)      conflate(operator.add)

    ``1`` finds demand and goes at once; ``2`` and ``3`` arrive without demand and become one
    summary ``5``, emitted at the request in column 6; ``4`` waits as the next summary and goes
    out with the completion, once asked for.
    The summary starts as the first item (``seed=None``) or ``seed(item)`` (Akka's
    ``conflateWithSeed``), then ``summary = aggregate(summary, item)`` for each item that arrives
    before downstream asks. Use it to coalesce token chunks for a slow SSE client, or to keep
    only the latest state (``aggregate=lambda old, new: new``).
    Demand: never backpressures: upstream is kept at a window of 16 requested items whatever
    downstream does (an item folded into the summary frees its credit at once); at most one
    summary is held. Items are many-to-one, never dropped.
    Args: aggregate ((summary, item) -> summary); seed (item -> summary, or None).
    Signals: TypeError (raised here) for a non-callable; ``aggregate`` or ``seed`` raising, or
        a summary of None (TypeError), fails the stream and cancels upstream; an upstream error
        is signalled at once (the summary dropped, reason ``"error"``); the completion follows
        the last summary; cancel travels upstream.
    Anchor: Akka ``conflate(aggregate)`` / ``conflateWithSeed(seed)(aggregate)``; Reactor
        ``onBackpressureReduce``.
    """
    check_callable("conflate", aggregate, "aggregate")
    check_optional_callable("conflate", "seed", seed)
    return _conflate_stage(aggregate, seed, name=name)


def keep_alive(idle_s: float | timedelta, inject: Callable[[], Any], *, name: str | None = None) -> Operator:
    """Inject ``inject()`` when upstream was idle for ``idle_s`` seconds and downstream wants an
    item (e.g. an SSE comment that keeps a proxy from closing a quiet stream).

        source:  -a---------b|
        demand:  ^1       ^2
        output:  -a-------k-b|      keep_alive(0.03, lambda: "k"): one column = 10 ms

    After ``a`` the stream is idle from column 4 on, but downstream has no demand: nothing is
    injected. The request in column 9 finds the stream idle: one ``k`` at once (injected items
    never accumulate); ``b`` comes before the next deadline (column 12).
    The stream counts as idle ``idle_s`` after the last upstream item or injected item (from
    subscription for the first). Upstream items are always preferred: one is prefetched, and
    an injected item is made only while none is waiting.
    Demand: upstream is asked for one item ahead (a window of 1, whatever downstream does);
    an item is injected only while downstream has demand left, at most one per ``idle_s``, and
    injected items count against that demand like any other. One timer, armed only while
    downstream wants an item.
    Args: idle_s (seconds or ``timedelta``, > 0); inject (() -> item, never None).
    Signals: TypeError/ValueError (raised here) for bad arguments; ``inject`` raising or
        returning None (TypeError) fails the stream and cancels upstream; upstream errors and
        completion pass through after the prefetched item; cancel travels upstream and stops
        the timer. Subscribing off an event loop signals RuntimeError.
    Anchor: Akka ``keepAlive(maxIdle, injectedElem)``.
    """
    seconds = check_duration("keep_alive", "idle_s", idle_s)
    check_callable("keep_alive", inject, "inject")
    return _keep_alive_stage(seconds, inject, name=name)
