"""rxpipe operators: ``from rxpipe import operators as ops``.

Every operator is a factory returning ``Callable[[Flowable], Flowable]`` for ``flowable.pipe()``.
Each takes ``name=`` (the stage name in metrics and graphs; default ``<operator>_<index>``).
This module is the manual: each docstring gives a marble diagram, the demand rule, the errors
signalled, units and the semantics' anchor. Implementations live in private modules.

Marble legend: ``-`` time, letters items, ``|`` completion, ``#`` error, ``^n`` a ``request(n)``.
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar

from rxpipe._fusion import fuse
from rxpipe.flowable import Operator

__all__ = ["map", "filter", "scan", "take", "skip", "tap"]

T = TypeVar("T")
R = TypeVar("R")


def _check_callable(op: str, fn: object) -> None:
    if not callable(fn):
        raise TypeError(f"{op}() needs a callable, got {fn!r}")


def _check_count(op: str, n: object) -> None:
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ValueError(f"{op}(n) needs an int n >= 0 items, got {n!r}")


def map(fn: Callable[[T], R], *, name: str | None = None) -> Operator:  # noqa: A001
    """Transform each item with ``fn``.

        source:  -1-2-3-|
        output:  -2-4-6-|        map(lambda x: x * 2)

    Demand: passed through exactly (a ``request(n)`` from downstream reaches upstream as is).
    Fused with neighbouring synchronous operators into one call chain (no async hop).
    Signals: if ``fn`` raises, upstream is cancelled and the exception is signalled downstream;
    ``fn`` returning None signals ``TypeError`` (items are never None, Reactive Streams §2.13).
    Anchor: reactivex ``map``, Reactor ``map``.
    """
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


def scan(fn: Callable[[R, T], R], seed: R, *, name: str | None = None) -> Operator:
    """Emit the running accumulation ``acc = fn(acc, item)``, starting from ``seed``.

        source:  -1-2-3-|
        output:  -1-3-6-|        scan(operator.add, 0)

    The seed itself is not emitted (one output per input). State is per subscription.
    Demand: passed through exactly. Signals: ``fn`` raising → cancel upstream + ``on_error``;
    ``fn`` returning None → ``TypeError``. Anchor: reactivex ``scan`` with a seed.
    """
    _check_callable("scan", fn)
    return lambda source: fuse(source, "scan", name, fn, seed)


def take(n: int, *, name: str | None = None) -> Operator:
    """Emit the first ``n`` items, then cancel upstream and complete.

        source:  -a-b-c-d-
        output:  -a-b|           take(2): upstream sees cancel right after b

    Demand: never requests more than ``n`` in total from upstream (Reactor's
    ``take(n, limitRequest=true)``); ``take(0)`` completes at once without subscribing upstream.
    Signals: ValueError for ``n < 0``. Anchor: Reactor ``take``.
    """
    _check_count("take", n)
    return lambda source: fuse(source, "take", name, None, n)


def skip(n: int, *, name: str | None = None) -> Operator:
    """Drop the first ``n`` items, then pass the rest.

        source:  -a-b-c-d-|
        output:  -----c-d-|      skip(2)

    Demand: passed through; each skipped item asks upstream for one more (like ``filter``).
    Signals: ValueError for ``n < 0``. Anchor: Reactor ``skip``.
    """
    _check_count("skip", n)
    return lambda source: fuse(source, "skip", name, None, n)


def tap(on_next: Callable[[T], Any] | None = None, on_error: Callable[[BaseException], Any] | None = None,
        on_complete: Callable[[], Any] | None = None, *, name: str | None = None) -> Operator:
    """Call side-effect callbacks for the signals passing through; items are unchanged.

        source:  -a-b-|
        output:  -a-b-|          on_next(a), on_next(b), on_complete()

    Demand: passed through exactly. Signals: ``on_next`` raising cancels upstream and signals the
    exception downstream; ``on_complete`` raising turns the completion into ``on_error``;
    ``on_error`` raising is logged and the original error goes on. A tap upstream of ``take``
    does not see the completion ``take`` makes (upstream is cancelled, not completed).
    Anchor: reactivex ``do_action``, Reactor ``doOnNext``/``doOnError``/``doOnComplete``.
    """
    for label, fn in (("on_next", on_next), ("on_error", on_error), ("on_complete", on_complete)):
        if fn is not None and not callable(fn):
            raise TypeError(f"tap({label}=) needs a callable, got {fn!r}")
    return lambda source: fuse(source, "tap", name, on_next, None, on_error, on_complete)
