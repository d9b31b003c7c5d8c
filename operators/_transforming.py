"""One-to-one operators: the fused synchronous chain (``map``, ``filter``, ``scan``, ``take``,
``skip``, ``tap``) and the third round's one-to-one names (DESIGN §3).

The fused six compile into one call chain (``rxpipe._fusion``): no async hop, no prefetch, demand
passed through (DESIGN §2); their factories only check the arguments. ``starmap``, ``pluck``,
``pluck_attr``, ``do_action`` and ``do`` are the fused ``map`` / ``tap`` under their own stage
names; ``map_indexed``, ``finally_action``, ``materialize`` and ``dematerialize`` keep state per
subscription and are demand-driven stages (``_one_to_one.py``).
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any, Callable, TypeVar

from rxpipe._fusion import fuse
from rxpipe.flowable import Operator

from ._args import ABSENT, check_callable, check_count, check_optional_callable, either, identity, required

T = TypeVar("T")
R = TypeVar("R")

__all__ = ["map", "filter", "scan", "take", "skip", "tap", "map_indexed", "starmap", "starmap_indexed", "pluck",
           "pluck_attr", "do_action", "do", "finally_action", "materialize", "dematerialize"]


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


# -- third round (DESIGN §3): one-to-one ---------------------------------------------------------------
def _stage_name(name: str | None, kind: str, source: Any) -> str:
    """A fused stage's default name under the operator's own kind (``pluck_3``, not ``map_3``)."""
    return name or f"{kind}_{source.index + 1}"


def map_indexed(mapper_indexed: Callable[[T, int], R] | None = None, *, name: str | None = None) -> Operator:
    """Transform each item with ``mapper_indexed(item, index)``, the index counting from 0 per
    subscription (None: the identity, as in reactivex).

        source:  -a-b-c-|
        output:  -x-y-z-|        map_indexed(lambda x, i: x * (i + 1)): x = a, y = bb, z = ccc

    Demand: passed through exactly (a ``Stage``, demand-driven: no read-ahead).
    Signals: TypeError (raised here) for a non-callable; ``mapper_indexed`` raising cancels
        upstream and signals the exception; returning None signals TypeError (§2.13).
    Anchor: reactivex ``map_indexed``; RxJS ``map((x, i) => …)``.
    """
    from ._one_to_one import map_indexed_stage

    check_optional_callable("map_indexed", "mapper_indexed", mapper_indexed)
    return map_indexed_stage(mapper_indexed or _first_argument, name=name)


def _first_argument(item: Any, index: int) -> Any:
    return item


def starmap(mapper: Callable[..., R] | None = None, *, name: str | None = None) -> Operator:
    """Call ``mapper(*item)`` for each item, a tuple of arguments (None: items unchanged).

        source:  -x-y-|
        output:  -3-7-|          starmap(operator.add): x = (1, 2), y = (3, 4)

    The fused ``map`` (one call chain with its neighbours, no async hop).
    Demand: passed through exactly. Signals: TypeError (raised here) for a non-callable;
        ``mapper`` raising (an item that is not a tuple of the right size included) cancels
        upstream and signals the exception; returning None signals TypeError (§2.13).
    Anchor: reactivex ``starmap``; Python's ``itertools.starmap``.
    """
    check_optional_callable("starmap", "mapper", mapper)
    if mapper is None:
        return lambda source: fuse(source, "map", _stage_name(name, "starmap", source), identity)
    star = mapper

    def starred(args: Any) -> Any:
        return star(*args)

    return lambda source: fuse(source, "map", _stage_name(name, "starmap", source), starred)


def starmap_indexed(mapper: Callable[..., R], *, name: str | None = None) -> Operator:
    """Call ``mapper(*item)`` for items already indexed as flat tuples ``(*values, index)`` (what
    ``map_indexed(lambda x, i: (*x, i))`` gives): reactivex 6.1's ``starmap_indexed``, which
    adds no index of its own.

        source:  -x-y-|
        output:  -3-8-|          starmap_indexed(lambda a, b, i: a + b + i): x = (1, 2, 0), y = (3, 4, 1)

    The fused ``map``. Demand: passed through exactly. Signals: as ``starmap``'s.
    Anchor: reactivex ``starmap_indexed``.
    """
    check_callable("starmap_indexed", mapper)
    star = mapper

    def starred(args: Any) -> Any:
        return star(*args)

    return lambda source: fuse(source, "map", _stage_name(name, "starmap_indexed", source), starred)


def pluck(key: Any, *, name: str | None = None) -> Operator:
    """Take ``item[key]`` of each item (a mapping's value, a sequence's element).

        source:  -x-y-|
        output:  -1-2-|          pluck("n"): x = {"n": 1}, y = {"n": 2}

    The fused ``map``. Demand: passed through exactly. Signals: a missing key (KeyError,
    IndexError) cancels upstream and signals the exception; a None value signals TypeError
    (§2.13). Anchor: reactivex ``pluck``.
    """
    def get(item: Any) -> Any:
        return item[key]

    return lambda source: fuse(source, "map", _stage_name(name, "pluck", source), get)


def pluck_attr(prop: str, *, name: str | None = None) -> Operator:
    """Take the attribute ``prop`` of each item (``getattr(item, prop)``).

        source:  -x-y-|
        output:  -1-2-|          pluck_attr("real"): x = 1 + 0j, y = 2 + 0j; output 1.0, 2.0

    The fused ``map``. Demand: passed through exactly. Signals: TypeError (raised here) for a
    ``prop`` that is not a str; a missing attribute (AttributeError) cancels upstream and
    signals the exception. Anchor: reactivex ``pluck_attr``.
    """
    if not isinstance(prop, str):
        raise TypeError(f"pluck_attr(prop) needs an attribute name (a str), got {prop!r}")
    get = attrgetter(prop)
    return lambda source: fuse(source, "map", _stage_name(name, "pluck_attr", source), get)


def do_action(on_next: Callable[[T], Any] | None = None, on_error: Callable[[BaseException], Any] | None = None,
              on_completed: Callable[[], Any] | None = None, *, name: str | None = None) -> Operator:
    """Call side-effect callbacks for the signals passing through: reactivex's name of ``tap``.

        source:  -a-b-|
        output:  -a-b-|          on_next(a), on_next(b), on_completed()

    The fused ``tap``, whose docstring has the rules. Demand: passed through exactly.
    Signals: TypeError (raised here) for a non-callable; ``on_next`` raising cancels upstream and
    signals the exception. Anchor: reactivex ``do_action``, Reactor ``doOnNext``.
    """
    tap(on_next, on_error, on_completed)  # the callbacks are checked now
    return lambda source: tap(on_next, on_error, on_completed, name=_stage_name(name, "do_action", source))(source)


def do(observer: Any, *, name: str | None = None) -> Operator:
    """Call an observer's ``on_next``/``on_error``/``on_completed`` (those it has) for the signals
    passing through; items are unchanged.

        source:  -a-b-|
        output:  -a-b-|          observer.on_next(a), observer.on_next(b), observer.on_completed()

    The fused ``tap``. Demand: passed through exactly. Signals: TypeError (raised here) for an
    object without a callable ``on_next``; the callbacks' errors as ``tap``'s.
    Anchor: reactivex ``do(observer)``.
    """
    if not callable(getattr(observer, "on_next", None)):
        raise TypeError(f"do(observer) needs an object with an on_next method, got {observer!r}")
    callbacks = (observer.on_next, getattr(observer, "on_error", None),
                 getattr(observer, "on_completed", None) or getattr(observer, "on_complete", None))
    return lambda source: tap(*callbacks, name=_stage_name(name, "do", source))(source)


def finally_action(action: Callable[[], Any], *, name: str | None = None) -> Operator:
    """Call ``action()`` once the stream ended: after its completion or error went downstream,
    or when downstream cancelled.

        source:  -a-b-|
        output:  -a-b-|          action() runs once, right after the completion went out

    Items and signals pass unchanged (a plain pass-through, no queue). Demand: passed through
    exactly.
    Signals: TypeError (raised here) for a non-callable. ``action`` raising is logged on the
    ``rxpipe`` logger (the stream has ended: nothing downstream can hear of it).
    Anchor: reactivex ``finally_action``; Reactor ``doFinally``.
    """
    from ._one_to_one import FinallyFlowable

    check_callable("finally_action", action)
    return lambda source: FinallyFlowable(source, action, name)


def materialize(*, name: str | None = None) -> Operator:
    """Turn every signal into an item: ``OnNext(value)`` per item, then ``OnCompleted()`` or
    ``OnError(error)``, then completion (the notification types are reactivex's own).

        source:  -a-b-#
        demand:  ^3
        output:  -x-y-(z|)       x = OnNext(a), y = OnNext(b), z = OnError(error)

    Demand: passed through exactly; the terminal notification is one more item, delivered on
    demand, then the completion follows it. Signals: never an error (it is an item now); cancel
    travels upstream. Anchor: reactivex ``materialize``; Reactor ``materialize``.
    """
    from ._one_to_one import materialize_stage

    return materialize_stage(name=name)


def dematerialize(*, name: str | None = None) -> Operator:
    """Turn notification items back into signals: ``OnNext(v)`` emits ``v``, ``OnError(e)``
    signals ``e``, ``OnCompleted()`` completes (upstream cancelled): ``materialize`` undone.

        source:  -x-y-z-
        output:  -a-b-|          x = OnNext(a), y = OnNext(b), z = OnCompleted()

    Demand: passed through exactly. Signals: an item that is no notification (no ``kind`` of
    "N", "E", "C") signals TypeError and cancels upstream; upstream errors pass through.
    Anchor: reactivex ``dematerialize``; Reactor ``dematerialize``.
    """
    from ._one_to_one import dematerialize_stage

    return dematerialize_stage(name=name)
