"""Several sources into one: ``merge``, ``zip``, ``combine_latest``, ``with_latest_from``,
``concat``, ``start_with``.
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar

from rxpipe.flowable import DEFAULT_PREFETCH, Flowable, Operator

from ._args import DEFAULT_INNER_PREFETCH, check_callable, check_int_arg, check_sources, identity
from ._merge import DEFAULT_MERGE_PREFETCH, MergeFlowable
from ._start_with import start_with_stage

T = TypeVar("T")

__all__ = ["merge", "zip", "combine_latest", "with_latest_from", "concat", "start_with", "amb", "zip_latest",
           "zip_with_iterable", "zip_with_list", "join"]


def merge(*others: Flowable[Any], max_concurrent: int | None = None, prefetch: int = DEFAULT_MERGE_PREFETCH,
          name: str | None = None) -> Operator:
    """Interleave the source and ``others`` fairly, never beyond downstream demand; with
    ``max_concurrent``, merge the source's items, themselves streams, at most that many at once.

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
    ``merge(max_concurrent=n)`` (reactivex's higher-order form) is ``flat_map`` of the items
    themselves: at most ``n`` inner streams subscribed, the next one when one ends, each a window
    of ``prefetch`` items; it takes no ``others`` (reactivex ignores them there: a TypeError
    here). ``merge_all()`` is the same with a default bound.
    Anchor: Reactor ``Flux.merge`` (prefetch per source), Akka ``Merge`` (fair); reactivex
        ``merge(*sources, max_concurrent=None)``, Reactor ``Flux.merge(Publisher<Publisher>,
        concurrency)``.
    """
    for other in others:
        if not isinstance(other, Flowable):
            raise TypeError(f"merge() needs Flowables, got {other!r}")
    check_int_arg("merge", "prefetch", prefetch, 1)
    if max_concurrent is not None:
        check_int_arg("merge", "max_concurrent", max_concurrent, 1)
        if others:
            raise TypeError("merge(max_concurrent=) merges the source's items (streams): it takes no other "
                            "sources (reactivex ignores them)")
        from ._flatten import flat_map_stage

        return flat_map_stage(identity, max_concurrent, prefetch, name=name)
    return lambda source: MergeFlowable((source, *others), prefetch, name)


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
    check_sources("zip", others)
    check_int_arg("zip", "prefetch", prefetch, 1)
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
    check_sources("combine_latest", others)
    check_int_arg("combine_latest", "prefetch", prefetch, 1)
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
    check_sources("with_latest_from", others)
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
    check_sources("concat", others)
    from ._combine import concat_stage

    return concat_stage(others, name=name)


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


# -- third round (DESIGN §3) --------------------------------------------------------------------------
def amb(right_source: Flowable[Any], *, name: str | None = None) -> Operator:
    """Mirror whichever of the source and ``right_source`` signals first (an item, its
    completion or its error); the other is cancelled: ``rx.amb(source, right_source)``.

        source:    ---x-y|
        other:     --u---v|
        demand:    ^*
        output:    --u---v|      the other signalled first: the source is cancelled

    Demand: until one wins, each is asked for what downstream wants (demand-driven, no
    read-ahead); then only the winner. Between synchronous sources the source wins (it is
    subscribed and asked first).
    Signals: TypeError (raised here) for an argument that is not a Flowable; the winner's
        error is signalled; cancel reaches both.
    Anchor: reactivex ``amb``; Reactor ``ambWith`` / ``Flux.firstWithSignal``.
    """
    from rxpipe import amb as amb_sources

    check_sources("amb", (right_source,))
    return lambda source: amb_sources(source, right_source, name=name)


def zip_latest(*others: Flowable[Any], prefetch: int = DEFAULT_INNER_PREFETCH, name: str | None = None) -> Operator:
    """Emit a tuple of every source's newest value each time every source has a value it has
    not yet been paired in.

        source:    -a---b-c----|
        other:     --1-------2-|
        demand:    ^*
        output:    --x-------y-|     x = (a, 1), y = (c, 2); b was replaced by c (dropped)

    A source's newer value replaces its unpaired one (the older one is dropped, counted with
    reason ``"superseded"``, as reactivex loses it). Completes at the tuple following any
    source's completion, or when a source completes without an unpaired value.
    Demand: each source is a window of ``prefetch`` items (as ``zip``'s); a tuple waits for
    downstream demand in the output queue, which counts against every window, so a slow
    consumer pauses every source.
    Signals: TypeError (raised here) for an argument that is not a Flowable; an error from any
        source cancels the others; cancel reaches every source.
    Anchor: reactivex ``zip_latest``; RxJava ``zipLatest`` (RxJava2Extensions).
    """
    from ._combine import zip_latest_stage

    check_sources("zip_latest", others)
    check_int_arg("zip_latest", "prefetch", prefetch, 1)
    return zip_latest_stage(others, prefetch, name=name)


def zip_with_iterable(second: Any, *, name: str | None = None) -> Operator:
    """Pair each item with the next item of the iterable ``second``: ``(item, value)`` tuples;
    the first item that finds the iterable exhausted completes the stream (upstream cancelled).

        source:    -a-b-c-|
        demand:    ^*
        output:    -x-y-|        zip_with_iterable([1, 2]): x = (a, 1), y = (b, 2); c meets its end

    ``iter(second)`` is taken per subscription. Demand: passed through exactly.
    Signals: TypeError (raised here) for a ``second`` that is not iterable; the iterator raising
        cancels upstream and signals the exception.
    Anchor: reactivex ``zip_with_iterable``; Reactor ``zipWithIterable``.
    """
    from collections.abc import Iterable

    from ._combine import zip_with_iterable_stage

    if not isinstance(second, Iterable):
        raise TypeError(f"zip_with_iterable(second) needs an iterable, got {second!r}")
    return zip_with_iterable_stage(second, name=name)


def zip_with_list(second: Any, *, name: str | None = None) -> Operator:
    """``zip_with_iterable`` under reactivex's other name (any iterable).

        source:    -a-b-c-|
        demand:    ^*
        output:    -x-y-|        zip_with_list([1, 2]): x = (a, 1), y = (b, 2); c meets its end

    Demand, signals: as ``zip_with_iterable``'s. Anchor: reactivex ``zip_with_list``.
    """
    return zip_with_iterable(second, name=name)


def join(right: Flowable[Any], left_duration_mapper: Callable[[Any], Any],
         right_duration_mapper: Callable[[Any], Any], *, prefetch: int = DEFAULT_PREFETCH,
         name: str | None = None) -> Operator:
    """Pair each item of the source with each item of ``right`` whose windows overlap: an item's
    window lasts until its duration stream (``left_duration_mapper(item)`` /
    ``right_duration_mapper(item)``) emits or completes.

        source:    -a-----b---|
        other:     ---1-2-----|
        demand:    ^*
        output:    ---x-y-----|      x = (a, 1), y = (a, 2): a's window is still open, b's meets none

    (each duration here: ``rx.timer`` of 5 frames for ``a``, 1 frame for the others). A
    duration may be a Flowable, a Publisher, an awaitable or an iterable (as ``flat_map``'s).
    Completes when one side completed and has no open window, or when both completed.
    Demand: each side is a window of ``prefetch`` items (default 256) counting its open
    items: a side with that many windows open is asked for nothing more until some close;
    pairs wait for downstream demand in the output queue, which counts against both windows;
    each duration is asked for one item.
    Signals: TypeError (raised here) for a bad argument; a mapper raising or returning no
        stream, or an error of any stream, cancels the others and is signalled. Cancel reaches
        both sides and every duration.
    Anchor: reactivex ``join``; Rx.NET ``Join``.
    """
    from ._join import join_stage

    check_sources("join", (right,))
    check_callable("join", left_duration_mapper)
    check_callable("join", right_duration_mapper)
    check_int_arg("join", "prefetch", prefetch, 1)
    return join_stage(right, left_duration_mapper, right_duration_mapper, prefetch, name=name)
