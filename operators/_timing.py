"""Time-based operators, on the loop's clock only (``loop.time()``, ``call_at``), so the test
kit's virtual time drives them exactly: ``timeout``, ``debounce``, ``sample``, ``throttle_first``,
``delay``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Callable

from rxpipe._durations import as_seconds
from rxpipe._protocol import Publisher
from rxpipe.flowable import Flowable, Operator

from ._args import ABSENT, check_duration, check_positive, either, required
from ._map_async import with_item_timeout
from ._timed import TimeInterval, Timestamp
from ._timeout import TIMEOUT_MODES, timeout_stage

__all__ = ["timeout", "debounce", "sample", "throttle_first", "delay", "timestamp", "time_interval", "take_with_time",
           "skip_with_time", "take_last_with_time", "skip_last_with_time", "take_until_with_time",
           "skip_until_with_time", "delay_subscription", "delay_with_mapper", "throttle_with_timeout",
           "throttle_with_mapper", "timeout_with_mapper", "Timestamp", "TimeInterval"]


def timeout(duetime: float | timedelta = ABSENT, mode: Any = "idle", *, other: Any = None, name: str | None = None,
            seconds: float | timedelta = ABSENT) -> Operator:
    """Signal ``TimeoutError`` when a requested item is late; upstream is then cancelled. With
    ``other`` (reactivex's second argument: a Flowable), continue with ``other`` instead.

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
    ``timeout(duetime, other)``: the second argument is rxpipe's ``mode`` when it is a str and
    reactivex's ``other`` when it is a Flowable (a Publisher or an awaitable, as reactivex's
    future): at the deadline (idle mode) the upstream is cancelled and ``other`` is subscribed,
    asked for the outstanding demand (it inherits it)::

        source:  -a-------b|
        other:   -x|
        demand:  ^*
        output:  -a---x|         timeout(3, other): a at 1, nothing by 4; other from 4

    Args: duetime (seconds or ``datetime.timedelta``, > 0; also ``seconds=``, rxpipe's name);
        mode ("idle" or "item"); other (a Flowable, a Publisher or an awaitable; keyword, or the
        second positional argument).
    Signals: ValueError (raised here) for ``seconds <= 0`` or an unknown mode; ``TimeoutError``
    (the builtin, ``asyncio.TimeoutError``) downstream with upstream cancelled; upstream errors
    and completion pass through. Units: seconds.
    Anchor: Reactor ``timeout(Duration)`` (idle), Akka ``idleTimeout`` / ``completionTimeout``,
    Akka ``mapAsync`` with an ask timeout (item).
    """
    wait: Any = as_seconds(required("timeout", "duetime", either("timeout", "duetime", duetime, "seconds", seconds)))
    check_positive("timeout", "seconds", wait)
    if not isinstance(mode, str):  # reactivex's timeout(duetime, other)
        if other is not None:
            raise TypeError("timeout() got other twice (as its second argument and as other=)")
        mode, other = "idle", mode
    if other is not None:
        other = _stream("timeout", "other", other)
    if mode not in TIMEOUT_MODES:
        raise ValueError(f"timeout(mode=) must be one of {', '.join(TIMEOUT_MODES)}; got {mode!r}")
    seconds = float(wait)

    def apply(source: Flowable[Any]) -> Flowable[Any]:
        if mode == "item":
            if other is not None:
                raise TypeError("timeout(other=) takes the idle mode (reactivex's); mode='item' fails")
            per_call = with_item_timeout(source, seconds, name)
            if per_call is not None:
                return per_call
        return timeout_stage(seconds, mode, other, name=name)(source)

    return apply


def _stream(op: str, arg: str, value: Any) -> Flowable[Any]:
    """A Flowable for what reactivex accepts as a stream argument: an Observable there, a
    Flowable, a Publisher or an awaitable (a future) here."""
    import inspect

    from rxpipe.sources import from_publisher

    if isinstance(value, Flowable):
        return value
    if isinstance(value, Publisher):
        return from_publisher(value)
    if inspect.isawaitable(value):
        from rxpipe import from_future

        return from_future(value)
    raise TypeError(f"{op}({arg}) needs a Flowable, a Publisher or an awaitable, got {value!r}")


def debounce(duetime: float | timedelta = ABSENT, *, name: str | None = None,
             duration_s: float | timedelta = ABSENT) -> Operator:
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

    duration_s = required("debounce", "duetime", either("debounce", "duetime", duetime, "duration_s", duration_s))
    return debounce_stage(check_duration("debounce", "duetime", duration_s), name=name)


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

    from ._time import sample_stage

    if isinstance(interval_s, Publisher):
        if sampler is not None:
            raise TypeError("sample() takes interval_s or a sampler, not both")
        interval_s, sampler = None, interval_s
    if sampler is not None:
        if interval_s is not None:
            raise TypeError("sample() takes interval_s or a sampler, not both")
        if isinstance(sampler, (int, float, timedelta)) and not isinstance(sampler, bool):
            return sample_stage(check_duration("sample", "sampler", sampler), None, name=name)  # reactivex's
        if not isinstance(sampler, Publisher):
            raise TypeError(f"sample(sampler=) needs a Flowable, a Publisher or a duration, got {sampler!r}")
        return sample_stage(None, sampler, name=name)
    if interval_s is None:
        raise TypeError("sample() needs interval_s (seconds) or a sampler Flowable")
    return sample_stage(check_duration("sample", "interval_s", interval_s), None, name=name)


def throttle_first(window_duration: float | timedelta = ABSENT, *, name: str | None = None,
                   window_s: float | timedelta = ABSENT) -> Operator:
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

    window_s = required("throttle_first", "window_duration",
                         either("throttle_first", "window_duration", window_duration, "window_s", window_s))
    return throttle_first_stage(check_duration("throttle_first", "window_duration", window_s), name=name)


def delay(duetime: float | timedelta = ABSENT, *, name: str | None = None,
          duration_s: float | timedelta = ABSENT) -> Operator:
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

    duration_s = required("delay", "duetime", either("delay", "duetime", duetime, "duration_s", duration_s))
    return delay_stage(check_duration("delay", "duetime", duration_s, zero=True), name=name)


# -- third round (DESIGN §3) --------------------------------------------------------------------------
def timestamp(*, name: str | None = None) -> Operator:
    """Pair each item with the loop's clock when it arrived: ``Timestamp(value, timestamp)``,
    ``timestamp`` in seconds of ``loop.time()``.

        source:    -a--b-|
        demand:    ^*
        output:    -x--y-|       x = Timestamp(a, 0.01), y = Timestamp(b, 0.04): one column = 10 ms

    reactivex's ``timestamp`` is a ``datetime`` of its scheduler; rxpipe's time is the loop's
    clock only (virtual time drives it). Demand: passed through exactly.
    Signals: subscribing off an event loop signals RuntimeError. Anchor: reactivex ``timestamp``;
    Reactor ``timestamp``.
    """
    from ._timed import timestamp_stage

    return timestamp_stage(name=name)


def time_interval(*, name: str | None = None) -> Operator:
    """Pair each item with the seconds since the previous one (the first: since the
    subscription): ``TimeInterval(value, interval)``.

        source:    -a--b-|
        demand:    ^*
        output:    -x--y-|       x = TimeInterval(a, 0.01), y = TimeInterval(b, 0.03)

    reactivex's ``interval`` is a ``timedelta``; rxpipe's is seconds (a float). Demand: passed
    through exactly. Anchor: reactivex ``time_interval``; Reactor ``elapsed``.
    """
    from ._timed import time_interval_stage

    return time_interval_stage(name=name)


def take_with_time(duration: float | timedelta, *, name: str | None = None) -> Operator:
    """Emit the items of the first ``duration`` seconds after the subscription, then complete
    (upstream cancelled).

        source:    -a-b-c-d-|
        demand:    ^*
        output:    -a-b-|        take_with_time(0.05): one column = 10 ms

    Demand: passed through exactly. Time: one timer; an item arriving at the very instant the
    duration ends is not taken (the end comes first, as in reactivex).
    Signals: TypeError / ValueError (raised here) for a bad duration (an absolute datetime is
        refused: only the loop's clock counts).
    Anchor: reactivex ``take_with_time``; Reactor ``take(Duration)``.
    """
    from ._timed import take_with_time_stage

    return take_with_time_stage(check_duration("take_with_time", "duration", duration, zero=True), name=name)


def take_until_with_time(end_time: float | timedelta, *, name: str | None = None) -> Operator:
    """Emit the items until ``end_time`` seconds after the subscription, then complete.

        source:    -a-b-c-d-|
        demand:    ^*
        output:    -a-b-|        take_until_with_time(0.05)

    ``end_time`` is relative (seconds or a ``timedelta``); reactivex's absolute ``datetime`` is
    refused: only the loop's clock counts. Demand: passed through exactly.
    Anchor: reactivex ``take_until_with_time``; Reactor ``take(Duration)``.
    """
    from ._timed import take_until_with_time_stage

    seconds = check_duration("take_until_with_time", "end_time", end_time, zero=True)
    return take_until_with_time_stage(seconds, name=name)


def skip_with_time(duration: float | timedelta, *, name: str | None = None) -> Operator:
    """Drop the items of the first ``duration`` seconds after the subscription; then pass every item.

        source:    --a--b--c--d-|
        demand:    ^2
        upstream:  ^2^1-^1           skip_with_time(0.06): a, b dropped, one more asked for each
        output:    --------c--d-|

    Demand: passed through; each dropped item asks upstream for one more (never a stall). An
    item arriving at the very instant the duration ends passes.
    Signals: TypeError / ValueError (raised here) for a bad duration.
    Anchor: reactivex ``skip_with_time``; Reactor ``skip(Duration)``.
    """
    from ._timed import skip_with_time_stage

    return skip_with_time_stage(check_duration("skip_with_time", "duration", duration, zero=True), name=name)


def skip_until_with_time(start_time: float | timedelta, *, name: str | None = None) -> Operator:
    """Drop the items until ``start_time`` seconds after the subscription; then pass every item.

        source:    -a-b-c-d-|
        demand:    ^*
        output:    -----c-d-|    skip_until_with_time(0.05)

    ``start_time`` is relative (seconds or a ``timedelta``; an absolute ``datetime`` is refused).
    Demand: as ``skip_with_time``'s. Anchor: reactivex ``skip_until_with_time``.
    """
    from ._timed import skip_until_with_time_stage

    seconds = check_duration("skip_until_with_time", "start_time", start_time, zero=True)
    return skip_until_with_time_stage(seconds, name=name)


def take_last_with_time(duration: float | timedelta, *, name: str | None = None) -> Operator:
    """At completion, emit the items that arrived within its last ``duration`` seconds.

        source:    -a-b---c-d-|
        demand:    ^*
        output:    -----------(cd|)  take_last_with_time(0.05): c at 7, d at 9, the end at 11

    Demand: an aggregate: nothing is requested before downstream asks; then rounds of 256
    (75 % replenish), never ``UNBOUNDED``. Memory: the items of the last ``duration``.
    Signals: TypeError / ValueError (raised here) for a bad duration; an upstream error drops
        the kept items. Anchor: reactivex ``take_last_with_time``; Reactor ``takeLast`` by time.
    """
    from ._timed import take_last_with_time_stage

    seconds = check_duration("take_last_with_time", "duration", duration, zero=True)
    return take_last_with_time_stage(seconds, name=name)


def skip_last_with_time(duration: float | timedelta, *, name: str | None = None) -> Operator:
    """Drop the items of the last ``duration`` seconds before the completion: an item goes out
    when an item (or the completion) arrives ``duration`` or more after it.

        source:    -a-b---c-d-|
        demand:    ^*
        output:    -------(ab)---(c|)    skip_last_with_time(0.04): d is within 0.04 s of the end

    No timer (reactivex's rule): items leave as later ones arrive.
    Demand: passed through, plus the recent items held (they never close the window: the stage
    asks beyond them). Signals: TypeError / ValueError (raised here) for a bad duration.
    Anchor: reactivex ``skip_last_with_time``.
    """
    from ._timed import skip_last_with_time_stage

    seconds = check_duration("skip_last_with_time", "duration", duration, zero=True)
    return skip_last_with_time_stage(seconds, name=name)


def _subscribe_after(trigger: Flowable[Any], source: Flowable[Any], name: str | None) -> Flowable[Any]:
    """``source``, subscribed when ``trigger`` emits its first item or completes."""
    from ._filtering import default_if_empty
    from ._flattening import concat_map
    from ._transforming import take

    return trigger.pipe(take(1), default_if_empty(True), concat_map(lambda _: source, prefetch=0, name=name))


def delay_subscription(duetime: float | timedelta, *, name: str | None = None) -> Operator:
    """Subscribe to the source ``duetime`` seconds later than asked.

        source:    -a-b|
        demand:    ^*
        output:    ----a-b|      delay_subscription(0.03): the source plays from frame 3

    Demand: nothing is asked before the subscription; then what downstream wants, passed
    through (the source inherits the demand that came meanwhile). A cancel before it stops the
    timer (the source is never subscribed).
    Signals: TypeError / ValueError (raised here) for a bad duration (an absolute datetime is
        refused). Anchor: reactivex ``delay_subscription``; Reactor ``delaySubscription``.
    """
    from rxpipe import timer

    seconds = check_duration("delay_subscription", "duetime", duetime, zero=True)
    return lambda source: _subscribe_after(timer(seconds), source, name)


def delay_with_mapper(subscription_delay: Any = None, delay_duration_mapper: Callable[[Any], Any] | None = None, *,
                      name: str | None = None) -> Operator:
    """Delay each item until its delay stream, ``delay_duration_mapper(item)``, emits or completes;
    with a stream as ``subscription_delay``, subscribe to the source only once it emitted or
    completed (reactivex's argument order: a function alone is the per-item mapper).

        source:    -a-b-|
        demand:    ^*
        output:    ----b(a|)     a's delay is 4 frames, b's 1: each goes out when its delay ends

    Items go out in the order their delays end; the stream completes when the source and every
    delay did. A delay may be a Flowable, a Publisher, an awaitable or an iterable (as
    ``flat_map``'s); each is asked for one item.
    Demand: items being delayed count against downstream demand (as ``delay``'s): upstream
    outstanding + delayed items + items waiting <= downstream demand, so each item finds demand
    when its delay ends.
    Signals: TypeError (raised here) for bad arguments; the mapper raising or returning no
        stream, or an error of any delay or of the subscription delay, cancels the others and
        is signalled. Cancel reaches the source and every delay.
    Anchor: reactivex ``delay_with_mapper``; Reactor ``delayUntil`` (in arrival order there).
    """
    from ._timed import delay_with_mapper_stage

    if subscription_delay is not None and not callable(subscription_delay):
        trigger: Flowable[Any] | None = _stream("delay_with_mapper", "subscription_delay", subscription_delay)
        mapper = delay_duration_mapper
    else:
        trigger, mapper = None, subscription_delay if subscription_delay is not None else delay_duration_mapper
    if mapper is None:
        raise TypeError("delay_with_mapper() needs a delay_duration_mapper (item -> stream)")
    if not callable(mapper):
        raise TypeError(f"delay_with_mapper(delay_duration_mapper) needs a callable, got {mapper!r}")
    delayed = delay_with_mapper_stage(mapper, name=name)
    if trigger is None:
        return delayed
    subscribe_after = trigger
    return lambda source: delayed(_subscribe_after(subscribe_after, source, None))


#: reactivex's other name of ``debounce``: the same object, as in reactivex
throttle_with_timeout = debounce


def throttle_with_mapper(throttle_duration_mapper: Callable[[Any], Any], *, name: str | None = None) -> Operator:
    """``debounce`` with a quiet period per item: an item goes out when its stream,
    ``throttle_duration_mapper(item)``, emits or completes, unless a newer item came first.

        source:    -a-b------c-|
        demand:    ^*
        output:    -------b----(c|)  each quiet period: 4 frames; a is superseded by b; c goes with the end

    Demand: lossy by definition, as ``debounce``'s: upstream is requested without bound, at most
    one item is held; dropped items are counted (``rxpipe_stage_dropped_total{reason}``:
    ``"superseded"``, ``"no_demand"``, ``"error"``). An item whose quiet period ended without
    demand is kept for the next request. The latest item goes out with the completion.
    Signals: TypeError (raised here) for a non-callable; the mapper raising or returning no
        stream, or an error of a quiet-period stream, fails the stream.
    Anchor: reactivex ``throttle_with_mapper``; RxJS ``debounce(durationSelector)``.
    """
    from ._timed import throttle_with_mapper_stage

    if not callable(throttle_duration_mapper):
        raise TypeError(f"throttle_with_mapper() needs a callable, got {throttle_duration_mapper!r}")
    return throttle_with_mapper_stage(throttle_duration_mapper, name=name)


def timeout_with_mapper(first_timeout: Any = None, timeout_duration_mapper: Callable[[Any], Any] | None = None,
                        other: Any = None, *, name: str | None = None) -> Operator:
    """Switch to ``other`` (None: signal ``TimeoutError``) when an item is late: the first must
    arrive before ``first_timeout`` emits or completes, each next one before
    ``timeout_duration_mapper(previous item)`` does (None: no bound).

        source:    -a--------b|
        other:     -x|
        demand:    ^*
        output:    -a----x|      each item's timeout stream: 4 frames; nothing by frame 5: other

    The timeout streams may be Flowables, Publishers, awaitables or iterables; each is asked for
    one item. The switch cancels the upstream; ``other`` inherits the outstanding demand.
    Demand: passed through exactly.
    Signals: TypeError (raised here) for bad arguments; a timeout stream's error, or the
        mapper raising, fails the stream. Cancel reaches the source, the running timeout stream
        and ``other``.
    Anchor: reactivex ``timeout_with_mapper``; Reactor ``timeout(Publisher, Function, fallback)``.
    """
    from ._timed import timeout_with_mapper_stage

    first = None if first_timeout is None else _stream("timeout_with_mapper", "first_timeout", first_timeout)
    if timeout_duration_mapper is not None and not callable(timeout_duration_mapper):
        raise TypeError(f"timeout_with_mapper(timeout_duration_mapper) needs a callable, "
                        f"got {timeout_duration_mapper!r}")
    fallback = None if other is None else _stream("timeout_with_mapper", "other", other)
    return timeout_with_mapper_stage(first, timeout_duration_mapper, fallback, name=name)
