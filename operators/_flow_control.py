"""Flow control: ``buffer`` (the bounded queue), ``limit_rate``, ``batch``, ``rate_limit`` and
``map_async`` (bounded concurrency), each a low-level stage on a hot path.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, TypeVar

from rxpipe._durations import as_seconds
from rxpipe.flowable import DEFAULT_PREFETCH, Operator
from rxpipe.resilience import CircuitBreaker, Retry

from ._args import (
    check_callable,
    check_int_arg,
    check_positive,
)
from ._batch import BatchFlowable
from ._buffer import OVERFLOW_STRATEGIES, BufferFlowable
from ._limit_rate import LimitRateFlowable
from ._map_async import map_async_stage
from ._rate_limit import RateLimitFlowable

T = TypeVar("T")
R = TypeVar("R")

__all__ = ["buffer", "limit_rate", "batch", "rate_limit", "map_async"]


def buffer(capacity: Any, overflow: str = "backpressure", *, prefetch: int = DEFAULT_PREFETCH,
           name: str | None = None) -> Operator:
    """Hold up to ``capacity`` items between a faster upstream and a slower downstream; with a
    Flowable instead of a capacity, reactivex's ``buffer(boundaries)``: lists closed by its items.

    An async boundary (a queue stage). ``overflow="backpressure"`` (capacity=4: request(4) at
    subscribe, then request(3) each time 3 = 4 - 4 // 4 more items went downstream)::

        upstream:  ^4       ^3
        source:    -a-b-c-d----e-f-g-|
        demand:    ---------^3----------^9
        output:    ---------(abc)-----------(defg|)

    Shedding strategies (capacity=2; upstream is asked for UNBOUNDED at subscribe)::

        source:         -a-b-c-d-|
        demand:         ----------^9
        drop_incoming:  ----------(ab|)    c, d dropped on arrival
        drop_oldest:    ----------(cd|)    a, b evicted by c, d
        error:          ----------(ab#)    BufferOverflowError; upstream cancelled when c arrived

    Demand: ``"backpressure"`` prefetches ``capacity`` at subscribe whatever the downstream
    demand, then replenishes by the DESIGN §2 rule, so items emitted upstream but not yet
    delivered never exceed ``capacity``; it never drops. The shedding strategies request
    ``UNBOUNDED`` and shed when ``capacity`` items are held. Drops are counted per subscription
    with the strategy name as reason (metric ``rxpipe_stage_dropped_total{reason}``).
    Args: capacity (items, int >= 1); overflow: ``"backpressure"``, ``"drop_incoming"``,
        ``"drop_oldest"`` or ``"error"``.
    Signals: ValueError (raised here) for a bad capacity or an unknown overflow. ``"backpressure"``:
        an upstream emitting beyond what was requested signals ``MissingBackpressureError`` at
        once and is cancelled. ``"error"``: the buffered items are delivered, then
        ``BufferOverflowError``; upstream is cancelled when the overflow happens. An upstream error
        or completion is signalled after the buffered items. Cancel travels upstream and frees
        the buffer.
    Anchor: Reactor ``onBackpressureBuffer(maxSize, BufferOverflowStrategy)`` /
        ``onBackpressureDrop``, ``publishOn`` prefetch; Akka ``buffer(size, OverflowStrategy)``.

    ``buffer(boundaries)`` (a Flowable or any Publisher, by argument type): the items between two
    items of ``boundaries`` in one list, empty lists included; the boundaries' completion closes
    the last list and completes the stream::

        source:     -a-b---c-----|
        other:      ----x-----x|
        demand:     ^*
        output:     ----p-----q(r|)    p = [a, b], q = [c], r = []

    Demand there: the boundaries are asked for what downstream wants (one boundary, one list), so
    lists never pile up unasked; the items come in a window of ``prefetch`` (default 256) items
    held in the open list. Signals: an error of either stream fails the stream and cancels the
    other. Anchor: reactivex ``buffer(boundaries)``; Reactor ``buffer(Publisher)``.
    """
    from rxpipe._protocol import Publisher

    if isinstance(capacity, Publisher):
        from ._windowing import buffer_boundaries

        if overflow != "backpressure":
            raise TypeError("buffer(boundaries) takes no overflow: that is buffer(capacity, overflow)'s")
        return buffer_boundaries(capacity, prefetch=prefetch, name=name)
    check_int_arg("buffer", "capacity", capacity, 1)
    if overflow not in OVERFLOW_STRATEGIES:
        raise ValueError(f"buffer(overflow=) must be one of {', '.join(OVERFLOW_STRATEGIES)}; got {overflow!r}")
    return lambda source: BufferFlowable(source, capacity, overflow, name)


def limit_rate(high_tide: int, low_tide: int | None = None, *, name: str | None = None) -> Operator:
    """Reshape downstream demand into requests of ``high_tide`` then ``low_tide`` items.

        upstream:  ^8          ^2          ^2         limit_rate(8, 2)
        source:    -abcdefgh-----ij----------kl-
        demand:    ---------^1-^1-------^1-^1-
        output:    ---------a--b--------c--d--

    Demand: requests ``high_tide`` at subscribe (whatever the downstream demand), then
    ``low_tide`` each time ``low_tide`` more items went downstream; items received but not
    delivered never exceed ``high_tide``. A chatty ``request(1)`` consumer thus costs upstream one
    request per ``low_tide`` items, and an ``UNBOUNDED`` one is capped to batches of ``low_tide``.
    Args: high_tide (items, int >= 1); low_tide (items, int in [1, high_tide]; default
        ``high_tide - high_tide // 4``, Reactor's 75 % replenish).
    Signals: ValueError (raised here) for bad tides; an upstream emitting beyond the requests
        signals ``MissingBackpressureError`` and is cancelled; upstream errors and completion
        follow the held items; cancel travels upstream.
    Anchor: Reactor ``limitRate(highTide, lowTide)`` (a ``publishOn`` prefetch on the same thread).
    """
    check_int_arg("limit_rate", "high_tide", high_tide, 1)
    if low_tide is None:
        low_tide = high_tide - high_tide // 4
    check_int_arg("limit_rate", "low_tide", low_tide, 1)
    if low_tide > high_tide:
        raise ValueError(f"limit_rate(low_tide) must be <= high_tide={high_tide}, got {low_tide!r}")
    return lambda source: LimitRateFlowable(source, high_tide, low_tide, name)


def batch(max_size: int, max_delay_s: float | None = None, *, weight: Callable[[Any], float] | None = None,
          max_weight: float | None = None, name: str | None = None) -> Operator:
    """Group items into lists closed by size, by time, or by a weight budget.

        source:  -a-b-c----d---------e-|
        demand:  ^1-------^1------------^1
        output:  -----x--------y--------(z|)     batch(3, max_delay_s=4 columns)

    ``x = [a, b, c]`` by size; ``y = [d]`` by time, 4 columns after ``d``; ``z = [e]`` at
    completion, once demanded.

    A batch closes when it holds ``max_size`` items, when ``max_delay_s`` passed since its first
    item, or when the next item would push its weight over ``max_weight`` (that item starts the
    next batch; an item heavier than ``max_weight`` on its own goes alone)::

        source:  -a-b-c-d-e-|        a="aaaa" b="bbbb" c="cc" d="dddddddddddd" e="e"
        demand:  ^*
        output:  -----x-y---(z|)     batch(8, weight=len, max_weight=10)

    ``x = [a, b, c]`` (weight 10 reached), ``y = [d]`` (12 > 10 alone), ``z = [e]``.

    Demand (Akka ``groupedWithin``): a batch is emitted only when downstream asked for one (one
    ``request(1)`` = one batch). A timer that fires without demand leaves the batch open: it
    keeps filling up to ``max_size`` and leaves as soon as it is demanded — never an overflow
    error. Upstream demand stays within two batches: items requested upstream and not yet
    delivered downstream (outstanding + held) ≤ ``max_size`` without downstream demand (one batch
    of look-ahead), ≤ ``2 * max_size`` with it. The partial batch is emitted at completion;
    never an empty batch. One timer per open batch, on the loop clock (``loop.call_at``).
    Args: max_size (items, int >= 1); max_delay_s (seconds after a batch's first item, > 0, or
        None: no timer); weight (item -> number >= 0, e.g. prompt tokens) and max_weight (same
        unit, > 0; the per-step token budget of an LLM engine) go together.
    Signals: ValueError / TypeError (raised here) for invalid bounds or a non-callable weight.
        An upstream error is signalled at once; the open and ready batches are discarded and
        counted as dropped (reason ``"error"``). ``weight`` raising (or returning a negative
        number) cancels upstream and signals its exception. An upstream emitting beyond demand
        signals ``MissingBackpressureError``. With ``max_delay_s``, subscribing off an event loop
        signals RuntimeError.
    Anchor: Akka Streams ``groupedWithin`` / ``groupedWeightedWithin``; Triton's dynamic batcher
        (``max_batch_size``, ``max_queue_delay_microseconds``); vLLM's ``max_num_batched_tokens``.
    """
    check_int_arg("batch", "max_size", max_size, 1)
    if max_delay_s is not None:
        max_delay_s = as_seconds(max_delay_s)  # type: ignore[assignment]
        check_positive("batch", "max_delay_s", max_delay_s)
        max_delay_s = float(max_delay_s)  # type: ignore[arg-type]
    if (weight is None) != (max_weight is None):
        raise ValueError("batch(weight=, max_weight=) go together: give both or neither")
    if weight is not None:
        check_callable("batch(weight=)", weight)
        check_positive("batch", "max_weight", max_weight)
    return lambda source: BatchFlowable(source, max_size, max_delay_s, weight, max_weight, name)


def rate_limit(rate: float, burst: int = 1, *, name: str | None = None) -> Operator:
    """Shape the flow to at most ``rate`` items per second, with bursts of up to ``burst``.

        source:  (0123456789|)                   rate_limit(20, burst=5); one column = 10 ms
        demand:  ^*
        output:  (01234)----5----6----7----8----(9|)

    A token bucket on the loop clock: capacity ``burst`` tokens, full at start, refilled at
    ``rate`` tokens per second; an idle period or a forward clock jump never refills it beyond
    ``burst``. Demand: requests upstream only what both downstream demand and whole tokens allow;
    each item takes a token when it arrives, and outstanding upstream demand never exceeds the
    whole tokens available (so a stalled upstream that catches up still sends at most ``burst``
    items back to back); when tokens run out, one timer wakes the stage when the next is due.
    Args: rate (items per second, > 0); burst (items, int >= 1).
    Signals: ValueError (raised here) for a bad rate or burst; upstream errors and completion
        pass through after the items already received; an upstream emitting beyond demand
        signals ``MissingBackpressureError``; cancel travels upstream and stops the timer.
        Subscribing off an event loop signals RuntimeError.
    Anchor: token bucket (RFC 2697's committed bucket); Akka ``throttle(elements, per,
        maximumBurst, Shaping)``; Guava ``RateLimiter``.
    """
    check_positive("rate_limit", "rate", rate)
    check_int_arg("rate_limit", "burst", burst, 1)
    return lambda source: RateLimitFlowable(source, float(rate), burst, name)


def map_async(fn: Callable[[T], Awaitable[R]], concurrency: int = 1, ordered: bool = True,
              retry: Retry | None = None, breaker: CircuitBreaker | None = None, *,
              name: str | None = None) -> Operator:
    """Transform each item with a coroutine function, at most ``concurrency`` calls at a time.

        source:     -a-b-c|          concurrency=2, one column = 1 s; fn takes 4 s for a, 1 s for b, c
        demand:     ^*
        ordered:    -----(ab)(c|)    b, done at 4, waits for a: (ab) = the same instant (t=5)
        unordered:  ----ba(c|)       ordered=False: completion order (t=4, 5, 6)

    ``fn``: ``async def fn(item) -> result``; one task per call, nothing else per item.
    Demand: a slot is taken when an item is requested upstream and freed when its result went
    downstream, so upstream outstanding + calls running + results waiting <= ``concurrency``
    (the ordered mode's reorder buffer included). ``concurrency`` items are requested at
    subscribe (an async boundary's prefetch, DESIGN §2), then exactly one per result delivered;
    results are emitted only on downstream demand.
    Retry: ``retry=Retry(attempts, base_s, cap_s)`` re-calls a failed item after
    ``uniform(0, min(cap_s, base_s * 2 ** (k - 1)))`` seconds (full jitter, k = failures so far),
    up to ``attempts`` calls in total; an exception's ``retry_after`` (seconds) is the minimum
    delay, and one above ``cap_s`` fails at once. The item keeps its slot while it waits.
    Breaker: ``breaker=CircuitBreaker(failure_threshold, reset_timeout_s)`` is asked before every
    call; open, it refuses with ``rxpipe.CircuitOpenError`` without calling ``fn``. That error goes
    through ``retry`` like any other, its ``retry_after`` being the seconds until half-open: with a
    retry, an item waits for the trial call (or fails at once when that is over ``cap_s``); without
    one, the stream fails fast. Every failure of ``fn`` (a ``TimeoutError`` from
    ``timeout(s, mode="item")`` included) counts towards opening the breaker.
    Signals: ValueError (raised here) for ``concurrency < 1``. A call failing after its retries,
    ``fn`` returning None (TypeError, §2.13) or not returning an awaitable (TypeError) cancels
    upstream and the other calls and signals the original exception downstream at once, ahead of
    results still held. An upstream error does the same; completion waits for the calls.
    Cancel cancels upstream and every call, and awaits nothing: the tasks end on the next loop
    iteration. Units: seconds for every delay.
    Anchor: Akka ``mapAsync(parallelism)`` / ``mapAsyncUnordered``, Reactor
    ``flatMapSequential``/``flatMap(maxConcurrency)``; Resilience4j Retry + CircuitBreaker.
    """
    if not callable(fn):
        raise TypeError(f"map_async() needs an async callable, got {fn!r}")
    check_int_arg("map_async", "concurrency", concurrency, 1)
    if retry is not None and not isinstance(retry, Retry):
        raise TypeError(f"map_async(retry=) needs a Retry, got {retry!r}")
    if breaker is not None and not isinstance(breaker, CircuitBreaker):
        raise TypeError(f"map_async(breaker=) needs a CircuitBreaker, got {breaker!r}")
    return map_async_stage(fn, concurrency, bool(ordered), retry, breaker, None, name=name)
