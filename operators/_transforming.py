"""One-to-one operators: the fused synchronous chain (``map``, ``filter``, ``scan``, ``take``,
``skip``, ``tap``).

The fused six compile into one call chain (``rxpipe._fusion``): no async hop, no prefetch, demand
passed through (DESIGN §2); their factories only check the arguments.
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar

from rxpipe._fusion import fuse
from rxpipe.flowable import Operator

from ._args import ABSENT, check_callable, check_count, either, identity, required

T = TypeVar("T")
R = TypeVar("R")

__all__ = ["map", "filter", "scan", "take", "skip", "tap"]


def map(mapper: Callable[[T], R] | None = None, *, name: str | None = None,  # noqa: A001
        fn: Callable[[T], R] = ABSENT) -> Operator:
    """Transform each item with ``mapper`` (also ``fn=``; None: the identity, as in reactivex).

        source:  -1-2-3-|
        output:  -2-4-6-|        map(lambda x: x * 2)

    Demand: passed through exactly (a ``request(n)`` from downstream reaches upstream as is).
    Fused with neighbouring synchronous operators into one call chain (no async hop).
    Signals: if ``fn`` raises, upstream is cancelled and the exception is signalled downstream;
    ``fn`` returning None signals ``TypeError`` (items are never None, Reactive Streams §2.13).
    Anchor: reactivex ``map``, Reactor ``map``.
    """
    fn = either("map", "mapper", mapper, "fn", fn)
    fn = identity if fn is None else fn
    check_callable("map", fn)
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
    check_callable("filter", predicate)
    return lambda source: fuse(source, "filter", name, predicate)


def scan(accumulator: Callable[[R, T], R] = ABSENT, seed: R = ABSENT, *, name: str | None = None,
         fn: Callable[[R, T], R] = ABSENT) -> Operator:
    """Emit the running accumulation ``acc = accumulator(acc, item)`` (also ``fn=``), starting
    from ``seed``; without a seed the first item is the first accumulation, emitted as is.

        source:  -1-2-3-|
        output:  -1-3-6-|        scan(operator.add, 0), and scan(operator.add) alike

    The seed itself is not emitted (one output per input). State is per subscription.
    Demand: passed through exactly. Signals: ``accumulator`` raising → cancel upstream +
    ``on_error``; returning None → ``TypeError``. Anchor: reactivex ``scan(accumulator,
    seed=NotSet)``.
    """
    fn = required("scan", "accumulator", either("scan", "accumulator", accumulator, "fn", fn))
    check_callable("scan", fn)
    return lambda source: fuse(source, "scan", name, fn, seed)


def take(count: int = ABSENT, *, name: str | None = None, n: int = ABSENT) -> Operator:
    """Emit the first ``count`` items (also ``n=``), then cancel upstream and complete.

        source:  -a-b-c-d-
        output:  -a-(b|)         take(2): completes with b; upstream sees cancel right after b

    Demand: never requests more than ``n`` in total from upstream (Reactor's
    ``take(n, limitRequest=true)``); ``take(0)`` completes at once without subscribing upstream.
    Signals: ValueError for ``n < 0``. Anchor: Reactor ``take``.
    """
    n = required("take", "count", either("take", "count", count, "n", n))
    check_count("take", n)
    return lambda source: fuse(source, "take", name, None, n)


def skip(count: int = ABSENT, *, name: str | None = None, n: int = ABSENT) -> Operator:
    """Drop the first ``count`` items (also ``n=``), then pass the rest.

        source:  -a-b-c-d-|
        output:  -----c-d-|      skip(2)

    Demand: passed through; each skipped item asks upstream for one more (like ``filter``).
    Signals: ValueError for ``n < 0``. Anchor: Reactor ``skip``.
    """
    n = required("skip", "count", either("skip", "count", count, "n", n))
    check_count("skip", n)
    return lambda source: fuse(source, "skip", name, None, n)


def tap(on_next: Callable[[T], Any] | None = None, on_error: Callable[[BaseException], Any] | None = None,
        on_completed: Callable[[], Any] | None = None, *, name: str | None = None,
        on_complete: Callable[[], Any] | None = ABSENT) -> Operator:
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
    on_complete = either("tap", "on_completed", on_completed, "on_complete", on_complete)
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
