"""rxpipe operators: ``from rxpipe import operators as ops``.

Every operator is a factory returning ``Callable[[Flowable], Flowable]`` for ``flowable.pipe()``.
Each takes ``name=`` (the stage name in metrics and graphs; default ``<operator>_<index>``).
This module is the manual: each docstring gives a marble diagram, the demand rule, the errors
signalled, units and the semantics' anchor. Implementations live in private modules.

Marble legend: ``-`` time, letters items, ``|`` completion, ``#`` error, ``^n`` a ``request(n)``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Hashable, TypeVar

from rxpipe._durations import as_seconds
from rxpipe._fusion import fuse
from rxpipe._protocol import UNBOUNDED as _UNBOUNDED
from rxpipe._protocol import Publisher as _Publisher
from rxpipe.flowable import DEFAULT_PREFETCH, Flowable, Operator
from rxpipe.resilience import CircuitBreaker, Retry
from rxpipe.settings import check_int, check_number
from rxpipe.stage import Stage as _Stage

from ._batch import BatchFlowable
from ._broadcast import BroadcastFlowable
from ._buffer import OVERFLOW_STRATEGIES, BufferFlowable
from ._filters import (
    distinct_stage,
    distinct_until_changed_stage,
    first_stage,
    pairwise_stage,
    skip_while_stage,
    take_while_stage,
)
from ._group_by import GroupByFlowable, GroupedFlowable
from ._limit_rate import LimitRateFlowable
from ._map_async import map_async_stage, with_item_timeout
from ._merge import DEFAULT_MERGE_PREFETCH, MergeFlowable
from ._publishers import publisher_problem
from ._rate_limit import RateLimitFlowable
from ._recovery import catch_stage, retry_stage
from ._reducers import count_stage, last_stage, reduce_stage, to_list_stage
from ._start_with import start_with_stage
from ._take_until import take_until_stage
from ._timeout import TIMEOUT_MODES, timeout_stage

if TYPE_CHECKING:
    from rxpipe.serving import balance, cache, execute, fair_queue, prefix_affinity

__all__ = ["map", "filter", "scan", "take", "skip", "tap", "buffer", "limit_rate", "batch", "rate_limit",
           "map_async", "timeout", "merge", "broadcast", "group_by", "Retry", "CircuitBreaker",
           "GroupedFlowable", "execute", "fair_queue", "balance", "prefix_affinity", "cache",
           # second round (DESIGN §3): filters, reducers, sequencing and recovery
           "pairwise", "distinct", "distinct_until_changed", "take_while", "skip_while", "take_until", "first",
           "last", "reduce", "count", "to_list", "start_with", "catch", "retry",
           # one stream per item, several sources into one
           "flat_map", "concat_map", "switch_map", "zip", "combine_latest", "with_latest_from", "concat",
           # time
           "debounce", "sample", "throttle_first", "delay"]

# -- operators for LLM pipelines beyond RxPY (DESIGN §3; Akka/Reactor names and semantics). Their
#    factories and manuals live in their family modules; this block only exports them.
from ._flow_control import conflate, keep_alive, throttle  # noqa: E402
from ._hubs import BroadcastHub, PartitionHub, broadcast_hub, partition_hub  # noqa: E402
from ._merge_hub import HubProducer, MergeHub, merge_hub  # noqa: E402
from ._partitioned import map_async_partitioned  # noqa: E402
from ._prioritized import merge_prioritized  # noqa: E402
from ._restart import KillSwitch, kill_switch, restart_with_backoff  # noqa: E402
from ._split import Substream, split_when  # noqa: E402

__all__ += ["throttle", "map_async_partitioned", "conflate", "keep_alive", "kill_switch", "KillSwitch",
            "restart_with_backoff", "split_when", "Substream", "merge_prioritized", "merge_hub", "MergeHub",
            "HubProducer", "broadcast_hub", "BroadcastHub", "partition_hub", "PartitionHub"]


T = TypeVar("T")
R = TypeVar("R")


#: "not given" for an argument that has a reactivex name and an rxpipe name (None can be a value)
_ABSENT: Any = _Stage.NOTHING


def _either(op: str, rx_name: str, rx_value: Any, our_name: str, our_value: Any) -> Any:
    """One argument under reactivex's name or rxpipe's (DESIGN §3 "RxPY names"); both: TypeError."""
    if our_value is _ABSENT:
        return rx_value
    if rx_value is not _ABSENT and rx_value is not None:
        raise TypeError(f"{op}() got {rx_name}= and {our_name}=, two names of one argument: give one")
    return our_value


def _required(op: str, rx_name: str, value: Any) -> Any:
    if value is _ABSENT:
        raise TypeError(f"{op}() missing its argument {rx_name!r}")
    return value


def _identity(x: Any) -> Any:
    return x


def _check_callable(op: str, fn: object) -> None:
    if not callable(fn):
        raise TypeError(f"{op}() needs a callable, got {fn!r}")


def _check_count(op: str, n: object) -> None:
    check_int(n, f"{op}(n)", minimum=0)


def map(mapper: Callable[[T], R] | None = None, *, name: str | None = None,  # noqa: A001
        fn: Callable[[T], R] = _ABSENT) -> Operator:
    """Transform each item with ``mapper`` (also ``fn=``; None: the identity, as in reactivex).

        source:  -1-2-3-|
        output:  -2-4-6-|        map(lambda x: x * 2)

    Demand: passed through exactly (a ``request(n)`` from downstream reaches upstream as is).
    Fused with neighbouring synchronous operators into one call chain (no async hop).
    Signals: if ``fn`` raises, upstream is cancelled and the exception is signalled downstream;
    ``fn`` returning None signals ``TypeError`` (items are never None, Reactive Streams §2.13).
    Anchor: reactivex ``map``, Reactor ``map``.
    """
    fn = _either("map", "mapper", mapper, "fn", fn)
    fn = _identity if fn is None else fn
    _check_callable("map", fn)
    return lambda source: fuse(source, "map", name, fn)


def filter(predicate: Callable[[T], Any], *, name: str | None = None) -> Operator:  # noqa: A001
    """Pass the items for which ``predicate`` is truthy.

        source:  -1-2-3-4-|
        demand:  ^2
        output:  ---2---4-|      filter(is_even); each dropped item asks upstream for one more

    Demand: passes ``request(n)`` through, and requests 1 more from upstream per dropped item, so
    downstream gets the ``n`` items it asked for. Over rxpipe's own iterable sources the chain runs
    inside the source's loop and a dropped item simply does not count against demand.
    Signals: a raising predicate cancels upstream and is signalled downstream.
    Anchor: Reactor ``filter``.
    """
    _check_callable("filter", predicate)
    return lambda source: fuse(source, "filter", name, predicate)


def scan(accumulator: Callable[[R, T], R] = _ABSENT, seed: R = _ABSENT, *, name: str | None = None,
         fn: Callable[[R, T], R] = _ABSENT) -> Operator:
    """Emit the running accumulation ``acc = accumulator(acc, item)`` (also ``fn=``), starting
    from ``seed``; without a seed the first item is the first accumulation, emitted as is.

        source:  -1-2-3-|
        output:  -1-3-6-|        scan(operator.add, 0), and scan(operator.add) alike

    The seed itself is not emitted (one output per input). State is per subscription.
    Demand: passed through exactly. Signals: ``accumulator`` raising → cancel upstream +
    ``on_error``; returning None → ``TypeError``. Anchor: reactivex ``scan(accumulator,
    seed=NotSet)``.
    """
    fn = _required("scan", "accumulator", _either("scan", "accumulator", accumulator, "fn", fn))
    _check_callable("scan", fn)
    return lambda source: fuse(source, "scan", name, fn, seed)


def take(count: int = _ABSENT, *, name: str | None = None, n: int = _ABSENT) -> Operator:
    """Emit the first ``count`` items (also ``n=``), then cancel upstream and complete.

        source:  -a-b-c-d-
        output:  -a-(b|)         take(2): completes with b; upstream sees cancel right after b

    Demand: never requests more than ``n`` in total from upstream (Reactor's
    ``take(n, limitRequest=true)``); ``take(0)`` completes at once without subscribing upstream.
    Signals: ValueError for ``n < 0``. Anchor: Reactor ``take``.
    """
    n = _required("take", "count", _either("take", "count", count, "n", n))
    _check_count("take", n)
    return lambda source: fuse(source, "take", name, None, n)


def skip(count: int = _ABSENT, *, name: str | None = None, n: int = _ABSENT) -> Operator:
    """Drop the first ``count`` items (also ``n=``), then pass the rest.

        source:  -a-b-c-d-|
        output:  -----c-d-|      skip(2)

    Demand: passed through; each skipped item asks upstream for one more (like ``filter``).
    Signals: ValueError for ``n < 0``. Anchor: Reactor ``skip``.
    """
    n = _required("skip", "count", _either("skip", "count", count, "n", n))
    _check_count("skip", n)
    return lambda source: fuse(source, "skip", name, None, n)


def tap(on_next: Callable[[T], Any] | None = None, on_error: Callable[[BaseException], Any] | None = None,
        on_completed: Callable[[], Any] | None = None, *, name: str | None = None,
        on_complete: Callable[[], Any] | None = _ABSENT) -> Operator:
    """Call side-effect callbacks for the signals passing through; items are unchanged.

        source:  -a-b-|
        output:  -a-b-|          on_next(a), on_next(b), on_completed()

    ``on_completed`` is reactivex's name, ``on_complete=`` rxpipe's (either). An observer
    (anything with ``on_next``/``on_error``/``on_completed`` methods) as the first argument
    taps all three, as reactivex's ``tap(observer)`` does.

    Demand: passed through exactly. Signals: ``on_next`` raising cancels upstream and signals the
    exception downstream; ``on_complete`` raising turns the completion into ``on_error``;
    ``on_error`` raising is logged and the original error goes on. A tap upstream of ``take``
    does not see the completion ``take`` makes (upstream is cancelled, not completed).
    Anchor: reactivex ``do_action``, Reactor ``doOnNext``/``doOnError``/``doOnComplete``.
    """
    on_complete = _either("tap", "on_completed", on_completed, "on_complete", on_complete)
    if on_next is not None and not callable(on_next) and callable(getattr(on_next, "on_next", None)):
        observer: Any = on_next  # reactivex's tap(observer)
        if on_error is not None or on_complete is not None:
            raise TypeError("tap(observer) takes no other callbacks")
        on_next, on_error = observer.on_next, getattr(observer, "on_error", None)
        on_complete = getattr(observer, "on_completed", None) or getattr(observer, "on_complete", None)
    for label, fn in (("on_next", on_next), ("on_error", on_error), ("on_complete", on_complete)):
        if fn is not None and not callable(fn):
            raise TypeError(f"tap({label}=) needs a callable, got {fn!r}")
    return lambda source: fuse(source, "tap", name, on_next, None, on_error, on_complete)


# -- flow control: buffer, limit_rate, batch, rate_limit ------------------------------------------
def _check_int(op: str, arg: str, value: object, minimum: int) -> None:
    """``op(arg)`` must be an int >= ``minimum`` (never a bool): :class:`~rxpipe.settings.SettingError`."""
    check_int(value, f"{op}({arg})", minimum=minimum)


def _check_positive(op: str, arg: str, value: object) -> None:
    """``op(arg)`` must be a finite number > 0 (seconds, a rate, a weight; never a bool)."""
    check_number(value, f"{op}({arg})", minimum=0, exclusive_minimum=True)


def buffer(capacity: int, overflow: str = "backpressure", *, name: str | None = None) -> Operator:
    """Hold up to ``capacity`` items between a faster upstream and a slower downstream.

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
    """
    _check_int("buffer", "capacity", capacity, 1)
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
    _check_int("limit_rate", "high_tide", high_tide, 1)
    if low_tide is None:
        low_tide = high_tide - high_tide // 4
    _check_int("limit_rate", "low_tide", low_tide, 1)
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
    _check_int("batch", "max_size", max_size, 1)
    if max_delay_s is not None:
        max_delay_s = as_seconds(max_delay_s)  # type: ignore[assignment]
        _check_positive("batch", "max_delay_s", max_delay_s)
        max_delay_s = float(max_delay_s)  # type: ignore[arg-type]
    if (weight is None) != (max_weight is None):
        raise ValueError("batch(weight=, max_weight=) go together: give both or neither")
    if weight is not None:
        _check_callable("batch(weight=)", weight)
        _check_positive("batch", "max_weight", max_weight)
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
    _check_positive("rate_limit", "rate", rate)
    _check_int("rate_limit", "burst", burst, 1)
    return lambda source: RateLimitFlowable(source, float(rate), burst, name)


# -- concurrency, fan-in/out and resilience: map_async, timeout, merge, broadcast, group_by -------
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
    _check_int("map_async", "concurrency", concurrency, 1)
    if retry is not None and not isinstance(retry, Retry):
        raise TypeError(f"map_async(retry=) needs a Retry, got {retry!r}")
    if breaker is not None and not isinstance(breaker, CircuitBreaker):
        raise TypeError(f"map_async(breaker=) needs a CircuitBreaker, got {breaker!r}")
    return map_async_stage(fn, concurrency, bool(ordered), retry, breaker, None, name=name)


def timeout(duetime: float | timedelta = _ABSENT, mode: str = "idle", *, name: str | None = None,
            seconds: float | timedelta = _ABSENT) -> Operator:
    """Signal ``TimeoutError`` when a requested item is late; upstream is then cancelled.

    seconds=5, one column = 1 s. Idle mode: ``TimeoutError`` 5 s after ``a``, ``b`` still wanted::

        demand:  ^2
        source:  -a------
        output:  -a----#

    Idle mode: nothing is wanted from ``a`` to the second ``^1``, so that wait does not count::

        demand:  ^1         ^1
        source:  -a-----------b|
        output:  -a-----------b|

    Item mode: ``a``, ``b`` are due at 5 (in time); the third item is due at 3 + 5 = 8::

        demand:  ^2 ^1
        source:  -a--b----
        output:  -a--b---#

    ``mode="idle"``: fails when no item arrives for ``seconds`` while downstream demand is
    outstanding. The clock runs only while some requested item has not arrived; it restarts at
    each item and when demand resumes, so a slow consumer never fails its upstream.
    ``mode="item"``: a deadline per item. Directly after ``map_async`` it becomes that stage's
    per-call deadline: every call (every attempt) is bounded by ``seconds`` and a late call raises
    ``TimeoutError`` inside the stage, where ``retry`` and ``breaker`` apply to it (the stage
    keeps ``map_async``'s name unless ``name`` is given). After anything else, every requested
    item must arrive within ``seconds`` of the ``request(n)`` that asked for it (under
    ``UNBOUNDED`` demand that bounds the time to every item from the one request). Demand that
    came with the subscription (``to_list``, ``async for``, ``initial_request``) arms it as a
    later ``request(n)`` does, whatever the upstream (``flat_map``'s included):
    ``rx.never().pipe(timeout(0.2))`` fails after 0.2 s. The error names the stage and the wait.
    Demand: passed through exactly (no prefetch, no queue). Time: ``loop.time()`` and one timer
    per stage (``call_at``), never one per item, so the virtual clock drives it.
    Args: duetime (seconds or ``datetime.timedelta``, > 0; also ``seconds=``, rxpipe's name);
        mode ("idle" or "item").
    Signals: ValueError (raised here) for ``seconds <= 0`` or an unknown mode; ``TimeoutError``
    (the builtin, ``asyncio.TimeoutError``) downstream with upstream cancelled; upstream errors
    and completion pass through. Units: seconds.
    Anchor: Reactor ``timeout(Duration)`` (idle), Akka ``idleTimeout`` / ``completionTimeout``,
    Akka ``mapAsync`` with an ask timeout (item).
    """
    wait: Any = as_seconds(_required("timeout", "duetime", _either("timeout", "duetime", duetime, "seconds", seconds)))
    _check_positive("timeout", "seconds", wait)
    if mode not in TIMEOUT_MODES:
        raise ValueError(f"timeout(mode=) must be one of {', '.join(TIMEOUT_MODES)}; got {mode!r}")
    seconds = float(wait)

    def apply(source: Flowable[Any]) -> Flowable[Any]:
        if mode == "item":
            per_call = with_item_timeout(source, seconds, name)
            if per_call is not None:
                return per_call
        return timeout_stage(seconds, mode, name=name)(source)

    return apply


def merge(*others: Flowable[Any], prefetch: int = DEFAULT_MERGE_PREFETCH, name: str | None = None) -> Operator:
    """Interleave the source and ``others`` fairly, never beyond downstream demand.

        source:  -a---b---c-|
        other:   --1-2-3-|
        demand:  ^3         ^9
        output:  -a1-2------(b3c|)       round-robin over the inputs that have items

    ``source.pipe(ops.merge(a, b))`` merges source, a and b.
    Demand: emits at most what downstream requested, in total over all inputs. Each input is a
    bounded prefetch boundary (DESIGN §2 rule): ``prefetch`` items (default 32) requested at
    subscribe, then ``prefetch - prefetch // 4`` each time that many of its items went downstream,
    so an input's outstanding requests plus its queued items never exceed ``prefetch``. A pass
    serves the inputs in turn, one item each, resuming after the input served last: a fast
    input never starves a slow one.
    Signals: TypeError (raised here) for an argument that is not a Flowable; ValueError for
    ``prefetch < 1``. Completes when every input completed and its items went out. An error from
    any input cancels the others and is signalled at once (queued items are dropped). An input
    emitting beyond its prefetch signals ``MissingBackpressureError``. Cancel reaches every input.
    Anchor: Reactor ``Flux.merge`` (prefetch per source), Akka ``Merge`` (fair).
    """
    for other in others:
        if not isinstance(other, Flowable):
            raise TypeError(f"merge() needs Flowables, got {other!r}")
    _check_int("merge", "prefetch", prefetch, 1)
    return lambda source: MergeFlowable((source, *others), prefetch, name)


def broadcast(n: int, *, name: str | None = None) -> Operator:
    """Send every item to ``n`` branches, at the pace of the slowest: ``a, b = f.pipe(broadcast(2))``.

        source:  -x-y-z-|
        a:       ^1  ^2
        b:       ^5
        upstream: ^1 ^2                  min over the branches' total demand
        a, b:    -x--y-z-|               both get every item

    Returns a Flowable whose ``branches`` (a tuple of ``n`` Flowables) it unpacks into (also
    ``result[k]``); subscribing to the result itself signals ``TypeError``. Each branch takes one
    subscriber; upstream is subscribed once all ``n`` branches are (Reactor
    ``publish().autoConnect(n)``); when the run ends the branches may be subscribed again, which
    subscribes upstream again.
    Demand: upstream has been asked, in total, for the minimum over the live branches of what each
    asked in total, so every item is wanted by every live branch and nothing queues. A cancelled
    branch stops counting (the others may get more at once); all cancelled → upstream cancelled.
    Signals: ValueError (raised here) for ``n < 1``; a second subscriber to a branch in one run
    gets ``ProtocolViolationError``; upstream errors and completion reach every live branch;
    an upstream emitting beyond demand signals ``MissingBackpressureError`` and is cancelled.
    Anchor: Akka ``Broadcast`` (backpressures on the slowest), Reactor ``publish().autoConnect(n)``.
    """
    _check_int("broadcast", "n", n, 1)
    return lambda source: BroadcastFlowable(source, n, name)


def group_by(key_mapper: Callable[[T], Hashable] = _ABSENT, element_mapper: Callable[[T], Any] | int | None = None,
             *, max_groups: int = 1024, prefetch: int = DEFAULT_PREFETCH, name: str | None = None,
             key: Callable[[T], Hashable] = _ABSENT) -> Operator:
    """Split items into groups by ``key_mapper(item)`` (also ``key=``); emits one
    ``GroupedFlowable`` (``.key``) per key, carrying ``element_mapper(item)`` if given (reactivex's
    argument) or the item. An int second argument is ``max_groups`` (rxpipe's order:
    ``group_by(key, 8)``).

        source:  -a1-b1-a2-c1-b2-|              key = first letter, max_groups=3
        main:    -A--B--------C-----|           A, B, C: GroupedFlowable, key "a", "b", "c"
        A:        a1----a2-----------|
        B:           b1----------b2--|
        C:                 c1--------|

        source:  -a1-b1-c1                      max_groups=2: c1 would open a third group
        main:    -A--B--#                       # = TooManyGroupsError, upstream cancelled
        A:        a1----#         B: b1-#       open groups get their items, then the error

    Beyond ``max_groups``: an item whose key would open group ``max_groups + 1`` is dropped
    (counted, reason ``"too_many_groups"``), upstream is cancelled, and ``TooManyGroupsError``
    (``.key``, ``.max_groups``) is signalled on the main stream and every open group after the
    items they hold. A group is open until it completes or its subscriber cancels it; a
    cancelled group's key opens a new group when it appears again (Reactor).
    Demand: the main stream emits a group only on its demand; each group delivers on its own
    subscriber's demand. Upstream gets ``prefetch`` (default 256) at subscribe and the §2
    replenishment as items leave the groups (delivered, or dropped by a cancelled group), so the
    items held over all groups never exceed ``prefetch``. A group nobody consumes holds that
    credit and stalls the others (as in Reactor): subscribe to every group or cancel it.
    Cancelling the main stream stops new groups (their items are dropped, reason ``"no_group"``)
    and cancels upstream once no open group remains.
    Signals: ValueError (raised here) for ``max_groups < 1`` or ``prefetch < 1``; ``key`` raising
    (or an unhashable key) cancels upstream and ends every stream with that exception after the
    items held; upstream errors and completion reach the main stream and every group the same way.
    A group takes one subscriber (a second gets ``ProtocolViolationError``).
    Anchor: Reactor ``groupBy`` / ``GroupedFlux``; Akka ``groupBy(maxSubstreams, f)``
    (``TooManySubstreamsOpenException``).
    """
    key = _required("group_by", "key_mapper", _either("group_by", "key_mapper", key_mapper, "key", key))
    if not callable(key):
        raise TypeError(f"group_by() needs a key callable, got {key!r}")
    if isinstance(element_mapper, int) and not isinstance(element_mapper, bool):
        max_groups, element_mapper = element_mapper, None
    if element_mapper is not None and not callable(element_mapper):
        raise TypeError(f"group_by(element_mapper=) needs a callable, got {element_mapper!r}")
    _check_int("group_by", "max_groups", max_groups, 1)
    _check_int("group_by", "prefetch", prefetch, 1)
    return lambda source: GroupByFlowable(source, key, max_groups, prefetch, name, element_mapper)


# -- second round: filters, reducers, take_until, start_with, catch, retry ---------------------------

def _check_optional_callable(op: str, arg: str, fn: object) -> None:
    if fn is not None and not callable(fn):
        raise TypeError(f"{op}({arg}=) needs a callable or None, got {fn!r}")


def _check_reducer_prefetch(op: str, prefetch: object) -> int:
    _check_int(op, "prefetch", prefetch, 1)
    if prefetch >= _UNBOUNDED:  # type: ignore[operator]
        raise ValueError(f"{op}(prefetch) must be a finite window of items: a reducer never requests "
                         f"UNBOUNDED (DESIGN §3)")
    return prefetch  # type: ignore[return-value]


def pairwise(*, name: str | None = None) -> Operator:
    """Emit ``(previous, item)`` for each item after the first.

        source:    --a-b-c-d-|
        demand:    ^3
        upstream:  ^3^1
        output:    ----x-y-z-|       x = (a, b), y = (b, c), z = (c, d)

    Demand: passed through; the first item makes no pair and asks upstream for one more, so
    ``n`` pairs take ``n + 1`` items. A stream of fewer than two items emits nothing.
    Signals: upstream errors, completion and cancel pass through; the first item is held
    (never told: it is not dropped, only unpaired).
    Anchor: reactivex ``pairwise``, RxJS ``pairwise``.
    """
    return pairwise_stage(name=name)


def distinct(key_mapper: Callable[[T], Hashable] | None = None, max_keys: int | None = None, *,
             comparer: Callable[[Any, Any], Any] | None = None, name: str | None = None) -> Operator:
    """Pass only items whose key (``key_mapper(item)``, default the item) was not seen before.

        source:    -a-b-a-c-b-|
        demand:    ^4
        upstream:  ^4---^1--^1       each repeated key asks upstream for one more
        output:    -a-b---c---|

    With ``max_keys`` the memory is a bounded LRU, and a key evicted passes again::

        source:    -a-b-c-a-|
        demand:    ^*
        output:    -a-b-c-a-|        distinct(max_keys=2): c evicted a (least recently seen)

    Memory: without ``max_keys`` every key is kept for the life of the subscription, as
    reactivex's ``distinct`` does — it grows with the number of distinct keys, without bound.
    ``max_keys=N`` keeps at most N keys, evicting the least recently seen (a repeated key counts
    as seen): bounded memory, at the price of letting an evicted key through again — a
    deliberate difference from reactivex, which has no bound. Hashable keys cost O(1) per item;
    unhashable keys, and every key with ``comparer``, are compared one by one (O(keys) per item,
    reactivex's way).
    Demand: passed through; each dropped item asks upstream for one more (never a stall).
    Args: key_mapper (item -> key); max_keys (keys, int >= 1, or None: unbounded); comparer
        (keyword: ``(kept_key, key) -> bool``, reactivex's equality comparer; its second
        positional argument there, keyword here since ``max_keys`` took the place).
    Signals: TypeError/ValueError (raised here) for a non-callable or a bad ``max_keys``;
        ``key_mapper`` or ``comparer`` raising cancels upstream and signals the exception.
    Anchor: reactivex ``distinct(key_mapper, comparer)``; Reactor ``distinct(keySelector,
        distinctStoreSupplier)`` (a bounded store is its answer to the same growth).
    """
    _check_optional_callable("distinct", "key_mapper", key_mapper)
    if callable(max_keys):
        raise TypeError("distinct(max_keys) needs an int >= 1 or None, got a callable: reactivex's second "
                        "argument (comparer) is keyword-only here: distinct(key_mapper, comparer=...)")
    if max_keys is not None:
        _check_int("distinct", "max_keys", max_keys, 1)
    _check_optional_callable("distinct", "comparer", comparer)
    return distinct_stage(key_mapper, max_keys, comparer, name=name)


def distinct_until_changed(key_mapper: Callable[[T], Any] | None = None,
                           comparer: Callable[[Any, Any], Any] | None = None, *,
                           name: str | None = None) -> Operator:
    """Drop items whose key equals the key of the last item emitted.

        source:    -a-a-b-b-a-|
        demand:    ^3
        upstream:  ^3-^1--^1         each repeat asks upstream for one more
        output:    -a---b---a-|

    Only the last emitted key is kept (constant memory). With ``comparer``, a key judged equal
    leaves the kept key as it is (reactivex's rule).
    Demand: passed through; each dropped item asks upstream for one more (never a stall).
    Args: key_mapper (item -> key, default the item); comparer (``(kept_key, key) -> bool``,
        default ``==``).
    Signals: TypeError (raised here) for a non-callable; ``key_mapper`` or ``comparer`` raising
        cancels upstream and signals the exception.
    Anchor: reactivex ``distinct_until_changed``, Reactor ``distinctUntilChanged``.
    """
    _check_optional_callable("distinct_until_changed", "key_mapper", key_mapper)
    _check_optional_callable("distinct_until_changed", "comparer", comparer)
    return distinct_until_changed_stage(key_mapper, comparer, name=name)


def take_while(predicate: Callable[[T], Any], inclusive: bool = False, *, name: str | None = None) -> Operator:
    """Emit items while ``predicate`` holds; complete at the first item that fails it.

        source:    -1-2-3-1-|
        demand:    ^5
        upstream:  ^5
        output:    -1-2-|            take_while(lambda x: x < 3); upstream is cancelled at 3

    ``inclusive=True`` emits that first failing item before completing (``-1-2-(3|)``).
    Demand: passed through exactly; upstream is cancelled when the predicate fails.
    Signals: TypeError (raised here) for a non-callable; ``predicate`` raising cancels
        upstream and signals the exception.
    Anchor: reactivex ``take_while(predicate, inclusive)``, Reactor ``takeWhile``.
    """
    _check_callable("take_while", predicate)
    return take_while_stage(predicate, bool(inclusive), name=name)


def skip_while(predicate: Callable[[T], Any], *, name: str | None = None) -> Operator:
    """Drop items while ``predicate`` holds, then pass every item (the predicate is not asked again).

        source:    --1-2-3-1-|
        demand:    ^2
        upstream:  ^2^1^1            skip_while(lambda x: x < 3): each skipped item asks one more
        output:    ------3-1-|

    Demand: passed through; each skipped item asks upstream for one more (never a stall).
    Signals: TypeError (raised here) for a non-callable; ``predicate`` raising cancels
        upstream and signals the exception.
    Anchor: reactivex ``skip_while``, Reactor ``skipWhile``.
    """
    _check_callable("skip_while", predicate)
    return skip_while_stage(predicate, name=name)


def take_until(other: Flowable[Any], *, name: str | None = None) -> Operator:
    """Emit the upstream's items until ``other`` emits an item; then complete, cancelling both.

        source:    -a-b-c-d-|
        other:     ----x-|
        demand:    ^*
        output:    -a-b|             x completes the stream; upstream and other are cancelled

    ``other`` (a Flowable or any Publisher) is subscribed when the stage starts and asked for
    one item before anything is requested of the upstream; its first item completes the stream. ``other``
    completing without an item changes nothing; its error is signalled (the upstream is
    cancelled). An ``other`` with an item ready ends the stream before any item (reactivex
    subscribes it after the source, so a synchronous source's items all pass there).
    Demand: passed through exactly to the upstream; ``other`` is asked for 1.
    Signals: TypeError (raised here) if ``other`` is not a Publisher (a reactivex Observable:
        wrap it with ``rx.from_observable``). Cancel, completion and an error from either side
        cancel both.
    Anchor: reactivex ``take_until(other)``, Reactor ``takeUntilOther``.
    """
    problem = publisher_problem(other)
    if problem is not None:
        raise TypeError(f"take_until(other): {problem}")
    return take_until_stage(other, name=name)


def first(predicate: Callable[[T], Any] | None = None, *, name: str | None = None) -> Operator:
    """Emit the first item (the first for which ``predicate`` holds), then complete.

        source:    --1-2-3-|
        demand:    ^3
        upstream:  ^1^1              first(lambda x: x % 2 == 0): one item outstanding at a time
        output:    ----(2|)

    On a stream that completes without such an item::

        source:    --|
        demand:    ^1
        output:    --#               rxpipe.SequenceContainsNoElementsError

    Demand: nothing is requested before downstream asks; then one item at a time, one more per
    item that did not match (never more than one outstanding, like Reactor's
    ``take(1, limitRequest)``); upstream is cancelled once the item is found.
    Signals: TypeError (raised here) for a non-callable; an empty (or unmatched) stream signals
        :class:`rxpipe.SequenceContainsNoElementsError` ("Sequence contains no elements", as
        reactivex); ``predicate`` raising cancels upstream and signals the exception.
    Anchor: reactivex ``first(predicate)``, Reactor ``next()``/``filter().next()``.
    """
    _check_optional_callable("first", "predicate", predicate)
    return first_stage(predicate, name=name)


def last(predicate: Callable[[T], Any] | None = None, *, prefetch: int = 32,
         name: str | None = None) -> Operator:
    """Emit the last item (the last for which ``predicate`` holds) when upstream completes.

        source:    -1-2-3-|
        demand:    ^1
        upstream:  ^4---^3           last(prefetch=4): rounds of the window, never UNBOUNDED
        output:    -------(3|)

    Demand: a reducer — nothing is requested before downstream asks; then ``prefetch``, and
    ``prefetch - prefetch // 4`` more each time that many items were consumed (DESIGN §2).
    Memory: one item; upstream outstanding stays <= ``prefetch`` (default 32: ``last`` reads a
    whole stream to keep one item, so a small window bounds what it asks beyond downstream).
    Args: predicate (item -> bool, or None); prefetch (items, int >= 1, default 32).
    Signals: TypeError/ValueError (raised here) for a non-callable or a bad prefetch; an empty
        (or unmatched) stream signals :class:`rxpipe.SequenceContainsNoElementsError`;
        ``predicate`` raising cancels upstream and signals the exception.
    Anchor: reactivex ``last(predicate)``, Reactor ``last()``.
    """
    _check_optional_callable("last", "predicate", predicate)
    return last_stage(predicate, _check_reducer_prefetch("last", prefetch), name=name)


def reduce(accumulator: Callable[[Any, T], Any], seed: Any = _Stage.NOTHING, *, prefetch: int = DEFAULT_PREFETCH,
           name: str | None = None) -> Operator:
    """Fold the items with ``acc = accumulator(acc, item)``; emit ``acc`` when upstream completes.

        source:    -1-2-3-|
        demand:    ^1
        output:    -------(6|)       reduce(lambda acc, x: acc + x)

    Without ``seed`` the first item is the initial ``acc`` and an empty stream signals
    :class:`rxpipe.SequenceContainsNoElementsError`; with ``seed`` an empty stream emits
    ``seed``. Only the accumulated value is kept (``scan`` emits every step).
    Demand: a reducer — nothing is requested before downstream asks for the result; then
    ``prefetch`` items, and ``prefetch - prefetch // 4`` more each time that many were consumed
    (DESIGN §2), never ``UNBOUNDED``.
    Args: accumulator ((acc, item) -> acc); seed (any value, None included; omitted: none);
        prefetch (items, int >= 1, default 256).
    Signals: TypeError/ValueError (raised here) for a non-callable or a bad prefetch;
        ``accumulator`` raising cancels upstream and signals the exception; a result of None
        signals TypeError (items are never None, Reactive Streams §2.13).
    Anchor: reactivex ``reduce(accumulator, seed)``, Reactor ``reduce``, Akka ``fold``.
    """
    _check_callable("reduce", accumulator)
    return reduce_stage(accumulator, seed, _check_reducer_prefetch("reduce", prefetch), name=name)


def count(predicate: Callable[[T], Any] | None = None, *, prefetch: int = DEFAULT_PREFETCH,
          name: str | None = None) -> Operator:
    """Emit the number of items (for which ``predicate`` holds) when upstream completes.

        source:    -a-b-c-d-e-|
        demand:    ^1
        upstream:  ^4---^3           count(prefetch=4): 4, then 3 each time 3 were consumed
        output:    -----------(5|)

    An empty stream emits 0.
    Demand: a reducer — nothing is requested before downstream asks; then rounds of the
    window, never ``UNBOUNDED``. Memory: one int.
    Args: predicate (item -> bool, or None: every item); prefetch (items, int >= 1, default 256).
    Signals: TypeError/ValueError (raised here) for a non-callable or a bad prefetch;
        ``predicate`` raising cancels upstream and signals the exception.
    Anchor: reactivex ``count(predicate)``, Reactor ``count()``.
    """
    _check_optional_callable("count", "predicate", predicate)
    return count_stage(predicate, _check_reducer_prefetch("count", prefetch), name=name)


def to_list(*, prefetch: int = DEFAULT_PREFETCH, name: str | None = None) -> Operator:
    """Emit every item, in order, as one list when upstream completes.

        source:    -a-b-c-|
        demand:    ^1
        upstream:  ^4---^3           to_list(prefetch=4)
        output:    -------(x|)       x = [a, b, c]

    The operator: ``flowable.pipe(ops.to_list())`` is a Flowable of one list, for pipelines
    that go on (``ops.map(len)``...). ``await flowable.to_list()`` (the method) stays what it
    is: it runs the stream and returns its items — ``await f.pipe(ops.to_list()).to_list()`` is
    ``[[...]]``. An empty stream emits ``[]``.
    Demand: a reducer — nothing is requested before downstream asks; then rounds of the
    window, never ``UNBOUNDED``. Memory: every item, until completion (as reactivex's
    ``to_list``): bound the stream first (``take``, ``take_until``) if it may not end.
    Args: prefetch (items, int >= 1, default 256).
    Signals: ValueError (raised here) for a bad prefetch; an upstream error is signalled and
        the collected items are dropped.
    Anchor: reactivex ``to_list``, Reactor ``collectList``, Akka ``Sink.seq``.
    """
    return to_list_stage(_check_reducer_prefetch("to_list", prefetch), name=name)


def start_with(*items: T, name: str | None = None) -> Operator:
    """Emit ``items`` first, then the upstream's items.

        source:    ---c---d-|
        demand:    ^3----^1
        upstream:  ^1----^1          start_with(a, b): the demand left after a, b goes upstream
        output:    (ab)--c---d-|

    Demand: the items are delivered on demand first; upstream is asked only for the demand
    that remains (the outstanding demand carries over), never ahead of them. The upstream is
    subscribed at once (reactivex subscribes it after the items: a ``defer`` factory runs
    earlier here), and an error it signals early is delivered after the items.
    Signals: TypeError (raised here) for a None item (items are never None, Reactive Streams
        §2.13); upstream errors, completion and cancel pass through after the items.
    Anchor: reactivex ``start_with(*args)`` (a ``concat``), Reactor ``startWith``.
    """
    for item in items:
        if item is None:
            raise TypeError("start_with() items are never None (Reactive Streams §2.13)")
    return start_with_stage(items, name=name)


def catch(handler: Flowable[Any] | Callable[[BaseException, Flowable[Any]], Flowable[Any]], *,
          name: str | None = None) -> Operator:
    """On an upstream error, continue with another Flowable instead of failing.

        source:    -a-b-#
        handler:   -c-d-|            subscribed when the source fails, asked for the 2 still owed
        demand:    ^4
        output:    -a-b--c-d-|

    ``handler`` is the Flowable to continue with, or ``handler(error, source) -> Flowable``
    (``source`` is the upstream, so ``lambda e, src: src`` subscribes to it again; raise to let
    the error through). Only the upstream's error is caught: the continuation's own error is
    signalled.
    Demand: passed through; the continuation inherits the outstanding demand (what downstream
    asked for and did not get), so nothing is requested twice.
    Signals: TypeError (raised here) for a handler that is neither a Publisher nor callable;
        the handler raising signals its exception; the handler returning no Flowable/Publisher
        signals TypeError. Cancel reaches whichever source is current.
    Anchor: reactivex ``catch(handler)``, Reactor ``onErrorResume``, Akka ``recoverWithRetries``.
    """
    problem = publisher_problem(handler)
    if problem is not None and (not callable(handler) or isinstance(handler, _Publisher)):
        raise TypeError(f"catch(handler) needs a Flowable or a function (error, source) -> Flowable: {problem}")
    return catch_stage(handler, name=name)


def retry(retry_count: int | None = None, *, name: str | None = None) -> Operator:
    """On an upstream error, subscribe to the upstream again: ``retry_count`` subscriptions in all.

        source:    -a-#
        demand:    ^*
        output:    -a--a--a-#        retry(3): three subscriptions, then the third error

    ``retry_count`` counts subscriptions as reactivex does (``retry(3)`` = the first one and 2
    retries); None retries forever. The error of the last subscription is signalled. A cold
    source replays from its start: items delivered before an error are delivered again.
    Demand: passed through; each new subscription is asked for the outstanding demand only
    (what downstream asked for and did not get): what was delivered is never requested again.
    Re-subscribes on the loop's next turn, never inside the failing signal, so ``retry()`` over
    a source that fails at once does not monopolise the event loop (and a cancel stops it).
    Args: retry_count (subscriptions, int >= 1, or None: forever). ``retry(0)`` is a
        ValueError here; reactivex completes it without subscribing at all.
    Signals: ValueError/TypeError (raised here) for a bad count; cancel reaches the current
        subscription and stops a pending one.
    Anchor: reactivex ``retry(retry_count)``; Reactor ``retry(n)`` counts retries, not
        subscriptions (``retry(n)`` there is ``retry(n + 1)`` here).
    """
    if retry_count is not None:
        _check_int("retry", "retry_count", retry_count, 1)
    return retry_stage(retry_count, name=name)

# -- second round: flat_map, concat_map, switch_map, zip, combine_latest, with_latest_from, concat --
#: Items each source of ``zip`` / ``combine_latest`` and each inner stream of ``flat_map`` may have
#: requested and not yet delivered downstream (Reactor's ``Queues.XS_BUFFER_SIZE``).
DEFAULT_INNER_PREFETCH = 32


def _check_sources(op: str, others: tuple[Any, ...]) -> None:
    for other in others:
        if not isinstance(other, Flowable):
            raise TypeError(f"{op}() needs Flowables, got {other!r}")


def flat_map(mapper: Callable[[T], Any] | None = _ABSENT, max_concurrency: int = 16,
             prefetch: int = DEFAULT_INNER_PREFETCH, *, name: str | None = None, fn: Callable[[T], Any] = _ABSENT
             ) -> Operator:
    """Map each item to a stream with ``mapper`` (reactivex's name; ``fn`` below, also ``fn=``)
    and merge the streams, at most ``max_concurrency`` at a time; ``None``: the items are the
    streams (reactivex's ``merge_all``).

        source:   -abc-----|             max_concurrency=2; a, b, c: the streams fn returns,
        a:         x-----y|              drawn from the frame they are subscribed in
        b:          z-|
        c:            w-|                c waits for a free slot: b finished in frame 4
        upstream: ^2  ^1^1^1             2 at subscribe, then 1 per finished inner stream
        demand:   ^3      ^*
        output:   -xz-w---y|             y waits for demand

    ``fn(item)`` returns the inner stream: a Flowable, any Publisher, an awaitable (one item), an
    async iterable (read one item ahead of the inner's window at most: a token generator is not
    pulled further than asked) or an iterable (a ``str`` is its characters, as in reactivex). ``fn`` may also
    be a Flowable, Publisher or iterable itself: every item then maps to it (reactivex's
    ``flat_map(observable)``). Items are emitted in the order they arrive; under unbounded demand
    over synchronous inner streams that is each item's stream in turn, as in reactivex.
    Demand (never unbounded): at most ``max_concurrency`` inner streams at once — ``max_concurrency``
    items are requested at subscribe, then one per finished inner stream, as long as the items
    waiting for downstream demand leave room. Each inner stream is a prefetch window:
    ``prefetch`` requested at subscribe, then what is free again once ``prefetch - prefetch // 4``
    is (DESIGN §2, the Stage kit's window rule); the items waiting for downstream demand (one
    queue, arrival order) count against every inner's window, so an inner's items requested and
    not yet delivered never exceed ``prefetch`` (``max_concurrency * prefetch`` in all); what goes
    downstream never exceeds its demand.
    Args: fn (item -> stream); max_concurrency (inner streams, int >= 1); prefetch (items per
        inner stream, int >= 1).
    Signals: TypeError / ValueError (raised here) for a bad ``fn`` or bound. ``fn`` raising, or
        returning something else (None included: TypeError), an error of the source or of any
        inner stream: everything else is cancelled and the error is signalled at once (queued
        items are dropped). Completes once the source and every inner stream completed and
        their items went out. Cancel reaches the source and every inner stream.
    Differs from reactivex: reactivex's ``flat_map`` has no concurrency limit and reads its
        source without bound. Here the source is read on demand, so an error right after the
        items of a synchronous source is met while asking for more, before the inner streams of
        those items ran (they are cancelled); reactivex runs them first. Timed streams behave
        the same in both (tests/operators/test_flatten.py).
    Anchor: Reactor ``flatMap(mapper, concurrency, prefetch)`` (defaults 256/32), RxJava
        ``flatMap(maxConcurrency)``, Akka ``flatMapMerge(breadth)``; reactivex ``flat_map``.
    """
    from ._flatten import flat_map_stage
    from ._flatten import mapper as inner_mapper

    fn = _either("flat_map", "mapper", mapper, "fn", fn)
    fn = inner_mapper("flat_map", _identity if fn is None else _required("flat_map", "mapper", fn))
    _check_int("flat_map", "max_concurrency", max_concurrency, 1)
    _check_int("flat_map", "prefetch", prefetch, 1)
    return flat_map_stage(fn, max_concurrency, prefetch, name=name)


def concat_map(project: Callable[[T], Any] = _ABSENT, prefetch: int = 1, *, name: str | None = None,
               fn: Callable[[T], Any] = _ABSENT) -> Operator:
    """Map each item to a stream with ``project`` (reactivex's name; ``fn`` below, also ``fn=``)
    and emit the streams one after another, in order.

        source:   -ab------|             prefetch=1; a, b: the streams fn returns, drawn from the
        a:         x-y|                  frame they are subscribed in
        b:             z-w|              b's stream starts when a's completed (frame 4)
        upstream: ^2  ^1 ^1              the running item and 1 ahead; 1 more per finished stream
        demand:   ^3     ^9
        output:   -x-yz--w-|             b's stream is asked only for what is still wanted

    ``fn(item)`` returns a Flowable, a Publisher, an awaitable, an async iterable or an iterable
    (as ``flat_map``); it is called when the item's turn comes.
    Demand: one inner stream at a time, demand-driven: it is asked exactly what downstream wants,
    and what it did not deliver carries over to the next one. The source is read ``prefetch``
    items ahead of the running stream: ``prefetch + 1`` requested at subscribe, then one per
    finished stream (``prefetch=0``: the next item only once the stream before it completed).
    Args: fn (item -> stream); prefetch (items, int >= 0).
    Signals: TypeError / ValueError (raised here) for a bad ``fn`` or ``prefetch``. ``fn`` raising
        or returning something else, an error of the source or of the running stream: the other
        is cancelled and the error is signalled at once. Completes after the last stream.
        Cancel reaches the source and the running stream.
    Differs from reactivex: reactivex reads its source without bound (an error there is seen
        before streams still waiting their turn) and calls ``fn`` on arrival.
    Anchor: Reactor ``concatMap(mapper, prefetch)``, Akka ``flatMapConcat``; reactivex
        ``concat_map``.
    """
    from ._flatten import concat_map_stage

    fn = _required("concat_map", "project", _either("concat_map", "project", project, "fn", fn))
    _check_callable("concat_map", fn)
    _check_int("concat_map", "prefetch", prefetch, 0)
    return concat_map_stage(fn, prefetch, name=name)


def switch_map(project: Callable[[T], Any] | None = None, *, name: str | None = None,
               fn: Callable[[T], Any] | None = _ABSENT) -> Operator:
    """Map each item to a stream with ``project`` (reactivex's name; ``fn`` below, also ``fn=``)
    and emit only the latest one: a new item cancels the stream before it (e.g. a generation,
    when the prompt changes).

        source:   -a--b----|             a, b: the streams fn returns, drawn from the frame they
        a:         x-y-z|                are subscribed in; a's is cancelled when b arrives
        b:            u-v|
        upstream: ^*                     nothing queues: an item replaces the stream at once
        demand:   ^3    ^*
        output:   -x-yu-v--|             b's stream inherits what a's did not deliver

    ``fn(item)`` returns a Flowable, a Publisher, an awaitable, an async iterable or an iterable
    (as ``flat_map``); ``fn=None`` takes the items themselves as the streams (reactivex's
    default: ``switch_latest``).
    Demand: the source is requested without bound — it holds nothing, since each item cancels the
    running stream and takes its place, so memory stays one stream. The running stream is
    demand-driven: asked exactly what downstream wants; a new one inherits the outstanding demand.
    An item whose stream was still running when the next came is counted as dropped (reason
    ``"switched"``, metric ``rxpipe_stage_dropped_total``) and told ``on_discard("switched")``
    (a ``CompletionRequest``'s client gets ``DroppedError``).
    Synchronous sources: over ``rx.range``/``rx.from_iterable`` every outer item arrives before the
    first inner emits, so only the last item's stream is seen — as reactivex's ``from_iterable``
    gives, while reactivex's ``range`` (scheduled) lets each inner run first.
    Signals: TypeError (raised here) for a ``fn`` that is not callable. ``fn`` raising or
    returning something else, an error of the source or of the running stream: the other is
    cancelled and the error is signalled at once (a cancelled stream's error is never heard).
    Completes when the source and the running stream did. Cancel reaches both.
    Anchor: Reactor ``switchMap`` (prefetch 0: unbounded source, inner asked what downstream
    demands), RxJava ``switchMap``; reactivex ``switch_map`` / ``switch_latest``.
    """
    from ._flatten import switch_map_stage

    fn = _either("switch_map", "project", project, "fn", fn)
    if fn is not None:
        _check_callable("switch_map", fn)
    return switch_map_stage(fn, name=name)


def zip(*others: Flowable[Any], prefetch: int = DEFAULT_INNER_PREFETCH,  # noqa: A001
        name: str | None = None) -> Operator:
    """Pair the n-th items of the source and ``others`` into tuples.

        source:   -a-b---c-|
        other:    --1-2-3----|
        upstream: ^32                    the same from other: 32 each at subscribe
        demand:   ^2      ^9
        output:   --x-y---z|             x = (a, 1), y = (b, 2), z = (c, 3); other cancelled at 9

    ``source.pipe(ops.zip(a, b))`` emits ``(s, a, b)`` tuples. ``rx.zip(*sources)`` is the static form.
    Demand: each source is a prefetch window: ``prefetch`` requested at subscribe, then what is
    free again once ``prefetch - prefetch // 4`` is (DESIGN §2); its items waiting for partners and
    the tuples waiting for downstream demand count against it, so a fast source never has more
    than ``prefetch`` items requested and waiting. A tuple goes downstream only on demand.
    Signals: TypeError (raised here) for an argument that is not a Flowable; ValueError for
    ``prefetch < 1``. Completes as soon as a source has completed and its queue is empty (no
    tuple can follow); the other sources are cancelled. An error from any source cancels the
    others and is signalled at once. Cancel reaches every source.
    Anchor: Reactor ``Flux.zip`` (prefetch per source), Akka ``Zip``; reactivex ``zip``.
    """
    _check_sources("zip", others)
    _check_int("zip", "prefetch", prefetch, 1)
    from ._combine import zip_stage

    return zip_stage(others, prefetch, name=name)


def combine_latest(*others: Flowable[Any], prefetch: int = DEFAULT_INNER_PREFETCH,
                   name: str | None = None) -> Operator:
    """Emit a tuple of every source's latest item whenever one of them emits (once each has one).

        source:   -a---b-c---|
        other:    --1-2-----|
        upstream: ^32                    the same from other
        demand:   ^2    ^*
        output:   --w-x-yz---|           w = (a, 1), x = (a, 2), y = (b, 2), z = (c, 2)

    ``source.pipe(ops.combine_latest(a, b))`` emits ``(s, a, b)`` tuples; ``rx.combine_latest``
    is the static form.
    Demand: each source is a prefetch window of ``prefetch`` items (as ``zip``); each arrival's
    tuple waits, in arrival order, until downstream asks for it, and the waiting tuples count
    against every source's window, so a source never has more than ``prefetch`` items requested
    and waiting. An item arriving before every source has one only updates the latest values:
    it uses no downstream demand.
    Synchronous sources: each source is read in rounds of its window, so over a synchronous
    source longer than ``prefetch`` the tuples interleave by rounds where reactivex (which reads
    each synchronous source to its end) pairs only the last values (raise ``prefetch`` to match).
    Signals: TypeError (raised here) for an argument that is not a Flowable; ValueError for
    ``prefetch < 1``. Completes when every source completed and its items went out; a source
    that completed without ever emitting ends nothing by itself (the others go on, as in
    reactivex): the stream completes at the next item of the last source still running, or when
    it ends (Reactor and RxJS would cancel the others at once). An error from any
    source cancels the others and is signalled at once. Cancel reaches every source.
    Anchor: Reactor ``Flux.combineLatest`` (prefetch 32), RxJS ``combineLatest``; reactivex
    ``combine_latest``.
    """
    _check_sources("combine_latest", others)
    _check_int("combine_latest", "prefetch", prefetch, 1)
    from ._combine import combine_latest_stage

    return combine_latest_stage(others, prefetch, name=name)


def with_latest_from(*others: Flowable[Any], name: str | None = None) -> Operator:
    """Pair each source item with the latest item of each of ``others``.

        source:   --a-b--c|
        other:    ---1-2----|
        upstream: ^2^1                   a has no partner yet: dropped, one more asked
        demand:   ^2
        output:   ----x--y|              x = (b, 1), y = (c, 2); other cancelled at 8

    ``source.pipe(ops.with_latest_from(a, b))`` emits ``(s, a, b)`` tuples. A source item that
    comes before every other source has emitted is dropped (as in reactivex).
    Demand: the source's demand is downstream's, passed through (an item dropped for want of
    partners asks for one more); the others are requested without bound (``UNBOUNDED``) and only
    their latest item is kept, so memory is one item per other source. The others are
    subscribed and requested before the source (Reactor), so a synchronous source meets their
    values.
    Signals: TypeError (raised here) for an argument that is not a Flowable. Completes when the
    source completes (the others are cancelled); another source's completion keeps its latest
    item. An error from any source cancels the others and is signalled at once. Cancel reaches
    every source.
    Anchor: Reactor ``withLatestFrom``, RxJS ``withLatestFrom``; reactivex ``with_latest_from``.
    """
    _check_sources("with_latest_from", others)
    from ._combine import with_latest_from_stage

    return with_latest_from_stage(others, name=name)


def concat(*others: Flowable[Any], name: str | None = None) -> Operator:
    """Emit the source's items, then each of ``others``' in turn.

        source:   -a-b|
        other:        -c-d|              subscribed when the source completed (frame 4)
        upstream: ^3                     the source is asked what downstream wants
        demand:   ^3      ^9
        output:   -a-b-c--(d|)           other is asked 1 at frame 4 (3 wanted, 2 given), 9 at 8

    ``source.pipe(ops.concat(a, b))`` emits source's, then a's, then b's items; ``rx.concat`` is
    the static form.
    Demand: demand-driven, no read-ahead: each source is asked for what downstream wants and
    has not received yet, and the outstanding demand carries over to the next source. Only one
    source is subscribed at a time: the next one when the one before completed.
    Signals: TypeError (raised here) for an argument that is not a Flowable. An error from the
    running source is signalled at once (the sources after it are never subscribed). Cancel
    reaches the running source.
    Anchor: Reactor ``Flux.concat`` / ``concatWith``, Akka ``concat``; reactivex ``concat``.
    """
    _check_sources("concat", others)
    from ._combine import concat_stage

    return concat_stage(others, name=name)
# -- second round: time operators (debounce, sample, throttle_first, delay) -----------------------

def _check_duration(op: str, arg: str, value: object, *, zero: bool = False) -> float:
    """Seconds on the loop's clock: a finite int or float or a ``timedelta``, > 0 (>= 0 with
    ``zero``); returned as a float of seconds."""
    value = as_seconds(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        hint = (" (seconds on the loop's clock or a datetime.timedelta; an absolute datetime is not "
                "supported: pass the delay)") if hasattr(value, "tzinfo") else ""
        raise TypeError(f"{op}({arg}) needs a number of seconds, got {value!r}{hint}")
    if not (0 <= value if zero else 0 < value) or not value < float("inf"):
        raise ValueError(f"{op}({arg}) needs a finite number of seconds {'>=' if zero else '>'} 0, got {value!r}")
    return float(value)


def debounce(duetime: float | timedelta = _ABSENT, *, name: str | None = None,
             duration_s: float | timedelta = _ABSENT) -> Operator:
    """Emit an item only once ``duetime`` seconds (also ``duration_s=``; or a ``timedelta``)
    passed without a newer one.

        source:    -a-b------c--------d-|
        upstream:  ^*
        demand:    ^1             ^2
        output:    ------b--------c-----(d|)     debounce(0.03): one column = 10 ms

    ``b`` arrives within ``a``'s quiet period (``a`` dropped); ``b`` is due at frame 6; ``c`` is
    due at frame 13, finds no demand and is kept until the request at frame 15; ``d`` goes out
    with the completion, its quiet period cut short (as reactivex does).
    Demand: lossy by definition. Upstream is requested without bound (``UNBOUNDED``) and at most
    one item is held. An item whose quiet period ends while downstream has no demand is kept and
    delivered at the next ``request``; a newer item arriving meanwhile replaces it. Dropped items
    are counted, ``rxpipe_stage_dropped_total{reason}``: ``"superseded"`` (a newer item came
    within the quiet period), ``"no_demand"`` (due, but replaced before downstream asked),
    ``"error"``; each is told ``on_discard(reason)`` if it has one.
    Time: ``loop.time()`` and one timer, re-armed only when it fires early (never per item). A
    quiet period ending at the very instant the next item (or an error) arrives counts as
    elapsed: its item is due first (delivered ahead of that error when downstream asked).
    Args: duration_s (seconds, > 0).
    Signals: TypeError/ValueError (raised here) for a bad duration; an upstream error is
        signalled at once and the held item is dropped (reason ``"error"``); the completion
        follows the held item; cancel travels upstream and stops the timer.
    Anchor: reactivex ``debounce(duetime)`` (same values and times under unbounded demand);
        Reactor ``sampleTimeout`` / RxJava ``debounce``, which fail with an overflow error where
        rxpipe keeps the one item for the next request.
    """
    from ._time import debounce_stage

    duration_s = _required("debounce", "duetime", _either("debounce", "duetime", duetime, "duration_s", duration_s))
    return debounce_stage(_check_duration("debounce", "duetime", duration_s), name=name)


def sample(interval_s: float | Flowable[Any] | None = None, *, sampler: Flowable[Any] | None = None,
           name: str | None = None) -> Operator:
    """Emit the newest item, if a new one came, every ``interval_s`` seconds (or at each item of
    a ``sampler`` Flowable; ``sampler=`` also takes a duration, as reactivex's does; durations
    may be ``timedelta``).

        source:    -ab---c--de------|
        upstream:  ^*
        demand:    ^2            ^1
        output:    ----b---c-------e---|     sample(0.04): ticks at frames 4, 8, 12, 16, 20

    Ticks at 4 and 8 emit ``b`` and ``c`` (``a`` and ``d`` superseded); the tick at 12 finds no
    demand and is skipped, ``e`` waits for the tick at 16; the completion goes out at the first
    tick after upstream completed (reactivex).
    ``sample(sampler)`` (a Flowable, positionally as in reactivex, or ``sampler=``): each item of
    ``sampler`` is a tick (its values are ignored; it is requested without bound). When the
    sampler completes, the newest item is emitted and the stream completes (upstream
    cancelled); reactivex would stay subscribed without ever sampling again. A sampler error
    fails the stream.
    Demand: lossy by definition. Upstream is requested without bound (``UNBOUNDED``) and at most
    one item is held. A tick that finds no downstream demand is skipped (as ``rx.interval``
    skips it) and the item waits for the next tick; a newer item replaces it. Dropped items are
    counted, ``rxpipe_stage_dropped_total{reason}``: ``"superseded"`` (a newer item came before
    a tick), ``"no_demand"`` (a tick was skipped while it waited), ``"error"``.
    Time: ticks at ``start + k * interval_s`` (fixed rate; ticks missed by a busy loop are
    skipped) on ``loop.time()``, one timer. A tick due at the very instant an upstream signal
    arrives comes before it (an item then waits for the next tick; so does a completion).
    A sampler's items and upstream's come in the order the loop delivers them.
    Args: interval_s (seconds, > 0) or sampler (a Flowable or Publisher): exactly one.
    Signals: TypeError/ValueError (raised here) for a bad interval, a sampler that is not a
        Publisher, or both/neither given; an upstream error is signalled at once (the held item
        dropped, reason ``"error"``); cancel travels upstream (and to the sampler) and stops
        the timer.
    Anchor: reactivex ``sample(sampler)`` with a number or an observable (same values and times
        under unbounded demand); Reactor ``sample(Duration)`` / ``sample(Publisher)``.
    """
    from rxpipe._protocol import Publisher

    from ._time import sample_stage

    if isinstance(interval_s, Publisher):
        if sampler is not None:
            raise TypeError("sample() takes interval_s or a sampler, not both")
        interval_s, sampler = None, interval_s
    if sampler is not None:
        if interval_s is not None:
            raise TypeError("sample() takes interval_s or a sampler, not both")
        if isinstance(sampler, (int, float, timedelta)) and not isinstance(sampler, bool):
            return sample_stage(_check_duration("sample", "sampler", sampler), None, name=name)  # reactivex's
        if not isinstance(sampler, Publisher):
            raise TypeError(f"sample(sampler=) needs a Flowable, a Publisher or a duration, got {sampler!r}")
        return sample_stage(None, sampler, name=name)
    if interval_s is None:
        raise TypeError("sample() needs interval_s (seconds) or a sampler Flowable")
    return sample_stage(_check_duration("sample", "interval_s", interval_s), None, name=name)


def throttle_first(window_duration: float | timedelta = _ABSENT, *, name: str | None = None,
                   window_s: float | timedelta = _ABSENT) -> Operator:
    """Emit the first item of each window of ``window_duration`` seconds (also ``window_s=``; or
    a ``timedelta``); drop the others.

        source:    -a-b-c-d--e----|
        upstream:  ^*
        demand:    ^2           ^1
        output:    -a---c-------e-|      throttle_first(0.04): one column = 10 ms

    ``a`` opens a window (frames 1 to 5): ``b`` is dropped; ``c`` at frame 5 opens the next
    (a window ending at the very instant an item arrives has ended); ``d`` is dropped; ``e`` opens
    a window without demand and is kept until the request at frame 13.
    A window opens at the first item arriving after the previous window ended, whether or not
    that item can be delivered.
    Demand: lossy by definition. Upstream is requested without bound (``UNBOUNDED``) and at most
    one item is held: a window's first item that finds no demand is kept for the next
    ``request``; the next window's first item replaces it. Dropped items are counted,
    ``rxpipe_stage_dropped_total{reason}``: ``"throttled"`` (inside a window), ``"no_demand"``
    (kept, then replaced before downstream asked), ``"error"``.
    Time: ``loop.time()`` read per item; no timer.
    Args: window_s (seconds, > 0).
    Signals: TypeError/ValueError (raised here) for a bad window; an upstream error is signalled
        at once (the kept item dropped, reason ``"error"``); the completion follows the kept
        item; cancel travels upstream.
    Anchor: reactivex ``throttle_first(window_duration)`` (same values under unbounded demand);
        RxJava ``throttleFirst``, which fails with MissingBackpressureException where rxpipe keeps
        the item.
    """
    from ._time import throttle_first_stage

    window_s = _required("throttle_first", "window_duration",
                         _either("throttle_first", "window_duration", window_duration, "window_s", window_s))
    return throttle_first_stage(_check_duration("throttle_first", "window_duration", window_s), name=name)


def delay(duetime: float | timedelta = _ABSENT, *, name: str | None = None,
          duration_s: float | timedelta = _ABSENT) -> Operator:
    """Shift every item and the completion ``duetime`` seconds later (also ``duration_s=``; or a
    ``timedelta``).

        source:    -a-b-c---|
        demand:    ^2     ^1
        upstream:  ^2     ^1
        output:    ----a-b---c-|       delay(0.03): one column = 10 ms

    ``c`` is available at frame 5, but downstream's two requests are covered by ``a`` and ``b``
    (on their way, delayed): upstream is asked for ``c`` only at the request at frame 7.
    Demand: items being delayed count against downstream demand: upstream is requested only for
    what downstream asked and no delayed item covers (upstream outstanding + delayed items +
    items waiting <= downstream demand), so each item finds demand when it is due and nothing
    queues. ``request(n)`` downstream becomes ``request(n)`` upstream.
    Time: each item leaves ``duration_s`` after it arrived (``loop.time()``), in order; the
    completion ``duration_s`` after upstream's; one timer for the earliest due.
    Args: duration_s (seconds, >= 0).
    Signals: TypeError/ValueError (raised here) for a bad duration (an absolute datetime, which
        reactivex accepts, is refused: only the loop's clock counts). An upstream error is
        signalled at once, ahead of the delayed items (dropped, reason ``"error"``, as reactivex
        drops them); cancel travels upstream and stops the timer.
    Anchor: reactivex ``delay(duetime)`` (same values and times under unbounded demand); Reactor
        ``delaySequence``, Akka ``delay(of, DelayOverflowStrategy.backpressure)``.
    """
    from ._time import delay_stage

    duration_s = _required("delay", "duetime", _either("delay", "duetime", duetime, "duration_s", duration_s))
    return delay_stage(_check_duration("delay", "duetime", duration_s, zero=True), name=name)


# -- the serving stages: rxpipe.serving's objects, under their operator names ---------------------------
#: names resolved from :mod:`rxpipe.serving` on first use (PEP 562), so importing the generic
#: vocabulary loads no LLM record and ``ops.execute is rxpipe.serving.execute``
_SERVING = frozenset({"execute", "fair_queue", "balance", "prefix_affinity", "cache"})


def __getattr__(name: str) -> Any:
    if name in _SERVING:
        import rxpipe.serving

        value = getattr(rxpipe.serving, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
