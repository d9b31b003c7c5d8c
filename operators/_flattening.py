"""Higher order: one inner stream per item, flattened (``flat_map``, ``concat_map``,
``switch_map``), with bounded inners.
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar

from rxpipe.flowable import Operator

from ._args import ABSENT, DEFAULT_INNER_PREFETCH, check_callable, check_int_arg, either, identity, required

T = TypeVar("T")

__all__ = ["flat_map", "concat_map", "switch_map"]


def flat_map(mapper: Callable[[T], Any] | None = ABSENT, max_concurrency: int = 16,
             prefetch: int = DEFAULT_INNER_PREFETCH, *, name: str | None = None, fn: Callable[[T], Any] = ABSENT
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

    fn = either("flat_map", "mapper", mapper, "fn", fn)
    fn = inner_mapper("flat_map", identity if fn is None else required("flat_map", "mapper", fn))
    check_int_arg("flat_map", "max_concurrency", max_concurrency, 1)
    check_int_arg("flat_map", "prefetch", prefetch, 1)
    return flat_map_stage(fn, max_concurrency, prefetch, name=name)


def concat_map(project: Callable[[T], Any] = ABSENT, prefetch: int = 1, *, name: str | None = None,
               fn: Callable[[T], Any] = ABSENT) -> Operator:
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

    fn = required("concat_map", "project", either("concat_map", "project", project, "fn", fn))
    check_callable("concat_map", fn)
    check_int_arg("concat_map", "prefetch", prefetch, 0)
    return concat_map_stage(fn, prefetch, name=name)


def switch_map(project: Callable[[T], Any] | None = None, *, name: str | None = None,
               fn: Callable[[T], Any] | None = ABSENT) -> Operator:
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

    fn = either("switch_map", "project", project, "fn", fn)
    if fn is not None:
        check_callable("switch_map", fn)
    return switch_map_stage(fn, name=name)
