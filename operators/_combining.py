"""Several sources into one: ``merge``, ``zip``, ``combine_latest``, ``with_latest_from``,
``concat``, ``start_with``.
"""

from __future__ import annotations

from typing import Any, TypeVar

from rxpipe.flowable import Flowable, Operator

from ._args import DEFAULT_INNER_PREFETCH, check_int_arg, check_sources
from ._merge import DEFAULT_MERGE_PREFETCH, MergeFlowable
from ._start_with import start_with_stage

T = TypeVar("T")

__all__ = ["merge", "zip", "combine_latest", "with_latest_from", "concat", "start_with"]


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
    check_int_arg("merge", "prefetch", prefetch, 1)
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
