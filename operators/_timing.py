"""Time-based operators, on the loop's clock only (``loop.time()``, ``call_at``), so the test
kit's virtual time drives them exactly: ``timeout``, ``debounce``, ``sample``, ``throttle_first``,
``delay``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from rxpipe._durations import as_seconds
from rxpipe._protocol import Publisher
from rxpipe.flowable import Flowable, Operator

from ._args import ABSENT, check_duration, check_positive, either, required
from ._map_async import with_item_timeout
from ._timeout import TIMEOUT_MODES, timeout_stage

__all__ = ["timeout", "debounce", "sample", "throttle_first", "delay"]


def timeout(duetime: float | timedelta = ABSENT, mode: str = "idle", *, name: str | None = None,
            seconds: float | timedelta = ABSENT) -> Operator:
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
    wait: Any = as_seconds(required("timeout", "duetime", either("timeout", "duetime", duetime, "seconds", seconds)))
    check_positive("timeout", "seconds", wait)
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
