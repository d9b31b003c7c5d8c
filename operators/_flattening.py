"""Higher order: one inner stream per item, flattened (``flat_map``, ``concat_map``,
``switch_map``), with bounded inners.
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar

from rxpipe.flowable import Operator

from ._args import ABSENT, DEFAULT_INNER_PREFETCH, check_callable, check_int_arg, either, identity, required

T = TypeVar("T")

__all__ = ["flat_map", "concat_map", "switch_map", "merge_all", "concat_all", "switch_latest", "flat_map_indexed",
           "flat_map_latest", "switch_map_indexed", "expand", "exclusive"]


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


# -- third round (DESIGN §3) --------------------------------------------------------------------------
def merge_all(*, max_concurrent: int = 16, prefetch: int = DEFAULT_INNER_PREFETCH, name: str | None = None) -> Operator:
    """Merge the source's items, themselves streams, at most ``max_concurrent`` at once:
    ``flat_map`` of the items.

        source:   -ab-----|              a, b: the streams the source emits, drawn from the frame
        a:         x---y|                they are subscribed in
        b:          z-|
        demand:   ^*
        output:   -xz--y--|

    An item may be a Flowable, a Publisher, an awaitable, an async iterable or an iterable.
    Demand: as ``flat_map``'s (bounded: ``max_concurrent`` inner streams, default 16, the next
    one when one ends; ``prefetch`` items per inner stream, default 32); reactivex's
    ``merge_all`` has no bound.
    Signals: TypeError / ValueError (raised here) for a bad bound; an item that is no stream
        (TypeError), or an error of the source or of any inner stream, cancels all the others.
    Anchor: reactivex ``merge_all``; Reactor ``Flux.merge(Publisher<Publisher>, concurrency,
        prefetch)``.
    """
    from ._flatten import flat_map_stage

    check_int_arg("merge_all", "max_concurrent", max_concurrent, 1)
    check_int_arg("merge_all", "prefetch", prefetch, 1)
    return flat_map_stage(identity, max_concurrent, prefetch, name=name)


def concat_all(*, prefetch: int = 1, name: str | None = None) -> Operator:
    """Emit the source's items, themselves streams, one after another, in order:
    ``concat_map`` of the items.

        source:   -ab------|             a, b: the streams the source emits
        a:         x-y|
        b:             z-w|              b starts when a completed
        demand:   ^*
        output:   -x-yz-w--|

    Demand: as ``concat_map``'s (one inner stream at a time, asked what downstream wants; the
    source read ``prefetch`` items ahead, default 1). Signals: as ``concat_map``'s.
    Anchor: reactivex ``concat_all``; Reactor ``Flux.concat(Publisher<Publisher>, prefetch)``.
    """
    from ._flatten import concat_map_stage

    check_int_arg("concat_all", "prefetch", prefetch, 0)
    return concat_map_stage(identity, prefetch, name=name)


def switch_latest(*, name: str | None = None) -> Operator:
    """Emit the items of the newest of the source's items, themselves streams: a new one cancels
    the one before (``switch_map`` of the items).

        source:   -a--b----|             a, b: the streams the source emits
        a:         x-y-z|                a is cancelled when b arrives
        b:            u-v|
        demand:   ^*
        output:   -x-yu-v--|

    Demand, signals: as ``switch_map``'s (the source requested without bound, the running stream
    demand-driven; a stream switched away is counted as dropped, reason ``"switched"``).
    Anchor: reactivex ``switch_latest``; Reactor ``Flux.switchOnNext``.
    """
    from ._flatten import switch_map_stage

    return switch_map_stage(None, name=name)


def flat_map_indexed(mapper_indexed: Any = None, *, max_concurrency: int = 16,
                     prefetch: int = DEFAULT_INNER_PREFETCH, name: str | None = None) -> Operator:
    """``flat_map`` with ``mapper_indexed(item, index)``, the index counting the source's items
    from 0; a stream instead of a function maps every item to it (None: the items are the streams).

        source:   -ab-----|              a, b: the streams the function returns for (a, 0), (b, 1)
        a:         x---y|
        b:          z-|
        demand:   ^*
        output:   -xz--y--|

    Demand, signals: as ``flat_map``'s. Anchor: reactivex ``flat_map_indexed``.
    """
    from ._flatten import flat_map_stage, mapper

    check_int_arg("flat_map_indexed", "max_concurrency", max_concurrency, 1)
    check_int_arg("flat_map_indexed", "prefetch", prefetch, 1)
    if mapper_indexed is None or not callable(mapper_indexed):
        fn = mapper("flat_map_indexed", identity if mapper_indexed is None else mapper_indexed)
        return flat_map_stage(fn, max_concurrency, prefetch, name=name)
    return flat_map_stage(mapper_indexed, max_concurrency, prefetch, True, name=name)


def flat_map_latest(mapper: Callable[[T], Any], *, name: str | None = None) -> Operator:
    """``switch_map`` under reactivex's other name: each item's stream replaces the one before.

        source:   -a--b----|             a, b: the streams mapper returns
        a:         x-y-z|
        b:            u-v|
        demand:   ^*
        output:   -x-yu-v--|

    Demand, signals: as ``switch_map``'s. Anchor: reactivex ``flat_map_latest``; Reactor
    ``switchMap``.
    """
    from ._flatten import switch_map_stage

    check_callable("flat_map_latest", mapper)
    return switch_map_stage(mapper, name=name)


def switch_map_indexed(project: Callable[[T, int], Any] | None = None, *, name: str | None = None) -> Operator:
    """``switch_map`` with ``project(item, index)``, the index counting the source's items from 0
    (None: the items are the streams).

        source:   -a--b----|             a, b: the streams project returns for (a, 0), (b, 1)
        a:         x-y-z|
        b:            u-v|
        demand:   ^*
        output:   -x-yu-v--|

    Demand, signals: as ``switch_map``'s. Anchor: reactivex ``switch_map_indexed``.
    """
    from ._flatten import switch_map_stage

    if project is not None:
        check_callable("switch_map_indexed", project)
        return switch_map_stage(project, True, name=name)
    return switch_map_stage(None, name=name)


def expand(mapper: Callable[[T], Any], *, max_concurrency: int = 16, max_queued: int = 4096,
           name: str | None = None) -> Operator:
    """Emit every item, and recursively every item of ``mapper(item)``'s stream, breadth first.

        source:   -a------|              a, b: the streams mapper returns for a and b
        a:         b|
        b:          |
        demand:   ^*
        output:   -(ab)------|           a, then a's stream's b, then b's stream (empty)

    Each item goes out and its stream (a Flowable, a Publisher, an awaitable or an iterable)
    joins a FIFO; the FIFO's streams are subscribed in order, at most ``max_concurrency`` at once.
    Completes when the source and every stream completed. An endless expansion is cut by the
    consumer: ``expand(f).pipe(take(n))`` cancels everything after ``n`` items.
    Demand: the source and each running stream are demand-driven (asked what downstream
    wants); the FIFO and the running streams are bounded by ``max_queued`` (streams, default
    4096): an expansion growing faster than it is consumed fails with
    :class:`rxpipe.BufferOverflowError` naming the stage instead of growing without bound.
    Signals: TypeError / ValueError (raised here) for a bad argument; ``mapper`` raising or
        returning no stream, or an error of any stream, cancels the others and is signalled.
    Anchor: reactivex ``expand``; Reactor ``expand`` (breadth first).
    """
    from ._higher_order import expand_stage

    check_callable("expand", mapper)
    check_int_arg("expand", "max_concurrency", max_concurrency, 1)
    check_int_arg("expand", "max_queued", max_queued, 1)
    return expand_stage(mapper, max_concurrency, max_queued, name=name)


def exclusive(*, name: str | None = None) -> Operator:
    """Emit the items of the source's items, themselves streams, one stream at a time: a stream
    arriving while another runs is dropped.

        source:   -ab---c-|              a, b, c: the streams the source emits
        a:         x-y|
        b:          w|                   b arrives while a runs: dropped, never subscribed
        c:               z|
        demand:   ^*
        output:   -x-y--z-|

    Demand: the source is requested without bound (a stream is taken or dropped the moment it
    arrives, as ``switch_map``'s source); a dropped stream is counted, reason ``"busy"``
    (``rxpipe_stage_dropped_total``); the running stream is demand-driven.
    Signals: an item that is no stream signals TypeError; an error of the source or of the
        running stream cancels the other and is signalled; cancel reaches both.
    Anchor: reactivex ``exclusive``; RxJS ``exhaustAll``.
    """
    from ._higher_order import exclusive_stage

    return exclusive_stage(name=name)
