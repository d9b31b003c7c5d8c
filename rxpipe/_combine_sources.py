"""The static forms of the combining operators: ``rx.zip``, ``rx.merge``, ``rx.concat``,
``rx.combine_latest``, ``rx.with_latest_from``, ``rx.zip_latest`` (reactivex's names). Each is
its operator applied to the first source: ``rx.zip(a, b, c) == a.pipe(ops.zip(b, c))``. The core
never imports ``rxpipe.operators`` at import time (DESIGN §1): each function imports it when called.
"""

from __future__ import annotations

from typing import Any

from .flowable import Flowable
from .sources import empty

__all__ = ["zip", "merge", "concat", "combine_latest", "with_latest_from", "zip_latest"]

_PREFETCH = 32  # = operators.DEFAULT_INNER_PREFETCH and DEFAULT_MERGE_PREFETCH (not imported: see above)


def _static(op: str, sources: tuple[Any, ...], name: str | None, **kwargs: Any) -> Flowable[Any]:
    """``sources[0].pipe(ops.<op>(*sources[1:], name=name, **kwargs))``; ``empty()`` without sources."""
    for source in sources:
        if not isinstance(source, Flowable):
            raise TypeError(f"rx.{op}() needs Flowables, got {source!r}")
    if not sources:
        return empty(name=name)
    import rxpipe.operators as ops

    return sources[0].pipe(getattr(ops, op)(*sources[1:], name=name, **kwargs))


def zip(*sources: Flowable[Any], prefetch: int = _PREFETCH, name: str | None = None) -> Flowable[tuple[Any, ...]]:  # noqa: A001
    """Pair the n-th items of every source into tuples: the static form of ``ops.zip``.

        source:   -a-b---c|
        other:    --1--2---|
        demand:   ^*
        output:   --x--y---|             x = (a, 1), y = (b, 2); c never gets a partner

    ``rx.zip(a, b, c)`` is ``a.pipe(ops.zip(b, c, prefetch=prefetch))``: ``prefetch`` (items,
    default 32) requested from each source, 75 % replenish; a tuple only on downstream demand;
    completes once a source completed with nothing queued; an error from any source cancels the
    others. ``rx.zip()`` completes at once (reactivex's never terminates).
    Signals: TypeError (raised here) for an argument that is not a Flowable; ValueError for
    ``prefetch < 1``. Anchor: reactivex ``zip``, Reactor ``Flux.zip``.
    """
    return _static("zip", sources, name, prefetch=prefetch)


def merge(*sources: Flowable[Any], prefetch: int = _PREFETCH, name: str | None = None) -> Flowable[Any]:
    """Interleave the sources fairly, never beyond downstream demand: the static form of ``ops.merge``.

        source:   -a---b|
        other:    --1-2--|
        demand:   ^*
        output:   -a1-2b-|

    ``rx.merge(a, b, c)`` is ``a.pipe(ops.merge(b, c, prefetch=prefetch))``: each source a
    prefetch boundary of ``prefetch`` items (default 32), served round-robin; completes when every
    source completed; an error from any source cancels the others. ``rx.merge()`` completes at once.
    Signals: TypeError (raised here) for an argument that is not a Flowable; ValueError for
    ``prefetch < 1``. Anchor: reactivex ``merge``, Reactor ``Flux.merge``.
    """
    return _static("merge", sources, name, prefetch=prefetch)


def concat(*sources: Flowable[Any], name: str | None = None) -> Flowable[Any]:
    """Emit each source's items in turn: the static form of ``ops.concat``.

        source:   -a-b|
        other:        -c|                subscribed when source completed
        demand:   ^*
        output:   -a-b-c|

    ``rx.concat(a, b, c)`` is ``a.pipe(ops.concat(b, c))``: one source subscribed at a time, each
    asked only for what downstream still wants (the outstanding demand carries over).
    ``rx.concat()`` completes at once.
    Signals: TypeError (raised here) for an argument that is not a Flowable.
    Anchor: reactivex ``concat``, Reactor ``Flux.concat``.
    """
    return _static("concat", sources, name)


def combine_latest(*sources: Flowable[Any], prefetch: int = _PREFETCH,
                   name: str | None = None) -> Flowable[tuple[Any, ...]]:
    """A tuple of every source's latest item whenever one emits: the static form of ``ops.combine_latest``.

        source:   -a--b|
        other:    --1---2|
        demand:   ^*
        output:   --w-x-y|               w = (a, 1), x = (b, 1), y = (b, 2)

    ``rx.combine_latest(a, b)`` is ``a.pipe(ops.combine_latest(b, prefetch=prefetch))``:
    ``prefetch`` (items, default 32) requested from each source, 75 % replenish; a tuple only on
    downstream demand; completes when every source completed (at once if one completes without
    ever emitting); an error from any source cancels the others.
    Signals: ValueError (raised here) without sources (as reactivex) or for ``prefetch < 1``;
    TypeError for an argument that is not a Flowable.
    Anchor: reactivex ``combine_latest``, Reactor ``Flux.combineLatest``.
    """
    if not sources:
        raise ValueError("rx.combine_latest() needs at least one source")
    return _static("combine_latest", sources, name, prefetch=prefetch)


def with_latest_from(*sources: Flowable[Any], name: str | None = None) -> Flowable[tuple[Any, ...]]:
    """Pair each item of the first source with the latest item of each other source: the
    static form of ``ops.with_latest_from``.

        source:   --a-b--c|
        other:    ---1-2----|
        upstream: ^2^1                   a has no partner yet: dropped, one more asked
        demand:   ^2
        output:   ----x--y|              x = (b, 1), y = (c, 2)

    ``rx.with_latest_from(a, b, c)`` is ``a.pipe(ops.with_latest_from(b, c))``: the first source
    is asked for downstream's demand, passed through (an item dropped for want of partners asks
    for one more); the others are requested without bound (``UNBOUNDED``) and only their latest
    item is kept. An item of the first source before every other has emitted is dropped (as in
    reactivex). Completes when the first source completes (the others are cancelled).
    Signals: TypeError (raised here) without sources (reactivex's needs the first) or for an
    argument that is not a Flowable; an error from any source cancels the others.
    Anchor: reactivex ``with_latest_from(*sources)``, Reactor ``withLatestFrom``.
    """
    if not sources:
        raise TypeError("rx.with_latest_from() needs at least one source (the one whose items are paired)")
    return _static("with_latest_from", sources, name)


def zip_latest(*sources: Flowable[Any], prefetch: int = _PREFETCH,
               name: str | None = None) -> Flowable[tuple[Any, ...]]:
    """A tuple of every source's newest value each time every source has a value not yet paired:
    the static form of ``ops.zip_latest``.

        source:    -a---b-c----|
        other:     --1-------2-|
        demand:    ^*
        output:    --x-------y-|     x = (a, 1), y = (c, 2); b was replaced by c (dropped)

    ``rx.zip_latest(a, b)`` is ``a.pipe(ops.zip_latest(b, prefetch=prefetch))``: a newer value
    replaces its source's unpaired one (counted dropped, reason ``"superseded"``); completes at
    the tuple following any source's completion, or when a source completes without an unpaired
    value. Demand: each source a window of ``prefetch`` items (default 32, as ``zip``'s); a
    tuple waits for downstream demand, which pauses every source.
    Signals: ValueError (raised here) without sources (as reactivex) or for ``prefetch < 1``;
    TypeError for an argument that is not a Flowable; an error from any source cancels the others.
    Anchor: reactivex ``zip_latest``; RxJava ``zipLatest`` (RxJava2Extensions).
    """
    if not sources:
        raise ValueError("rx.zip_latest() needs at least one source")
    return _static("zip_latest", sources, name, prefetch=prefetch)
