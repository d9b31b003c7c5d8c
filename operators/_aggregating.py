"""Aggregates: ``last``, ``reduce``, ``count``, ``to_list``; one value at completion, upstream
requested in rounds of a window, never UNBOUNDED.
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar

from rxpipe.flowable import DEFAULT_PREFETCH, Operator
from rxpipe.stage import Stage

from ._args import check_callable, check_optional_callable, check_reducer_prefetch
from ._reducers import count_stage, last_stage, reduce_stage, to_list_stage

T = TypeVar("T")

__all__ = ["last", "reduce", "count", "to_list"]


def last(predicate: Callable[[T], Any] | None = None, *, prefetch: int = 32,
         name: str | None = None) -> Operator:
    """Emit the last item (the last for which ``predicate`` holds) when upstream completes.

        source:    -1-2-3-|
        demand:    ^1
        upstream:  ^4---^3           last(prefetch=4): rounds of the window, never UNBOUNDED
        output:    -------(3|)

    Demand: a reducer — nothing is requested before downstream asks; then ``prefetch``, and
    ``prefetch - prefetch // 4`` more each time that many items were consumed (DESIGN §2).
    Memory: one item; upstream outstanding stays <= ``prefetch`` (default 32: ``last`` reads a
    whole stream to keep one item, so a small window bounds what it asks beyond downstream).
    Args: predicate (item -> bool, or None); prefetch (items, int >= 1, default 32).
    Signals: TypeError/ValueError (raised here) for a non-callable or a bad prefetch; an empty
        (or unmatched) stream signals :class:`rxpipe.SequenceContainsNoElementsError`;
        ``predicate`` raising cancels upstream and signals the exception.
    Anchor: reactivex ``last(predicate)``, Reactor ``last()``.
    """
    check_optional_callable("last", "predicate", predicate)
    return last_stage(predicate, check_reducer_prefetch("last", prefetch), name=name)


def reduce(accumulator: Callable[[Any, T], Any], seed: Any = Stage.NOTHING, *, prefetch: int = DEFAULT_PREFETCH,
           name: str | None = None) -> Operator:
    """Fold the items with ``acc = accumulator(acc, item)``; emit ``acc`` when upstream completes.

        source:    -1-2-3-|
        demand:    ^1
        output:    -------(6|)       reduce(lambda acc, x: acc + x)

    Without ``seed`` the first item is the initial ``acc`` and an empty stream signals
    :class:`rxpipe.SequenceContainsNoElementsError`; with ``seed`` an empty stream emits
    ``seed``. Only the accumulated value is kept (``scan`` emits every step).
    Demand: a reducer — nothing is requested before downstream asks for the result; then
    ``prefetch`` items, and ``prefetch - prefetch // 4`` more each time that many were consumed
    (DESIGN §2), never ``UNBOUNDED``.
    Args: accumulator ((acc, item) -> acc); seed (any value, None included; omitted: none);
        prefetch (items, int >= 1, default 256).
    Signals: TypeError/ValueError (raised here) for a non-callable or a bad prefetch;
        ``accumulator`` raising cancels upstream and signals the exception; a result of None
        signals TypeError (items are never None, Reactive Streams §2.13).
    Anchor: reactivex ``reduce(accumulator, seed)``, Reactor ``reduce``, Akka ``fold``.
    """
    check_callable("reduce", accumulator)
    return reduce_stage(accumulator, seed, check_reducer_prefetch("reduce", prefetch), name=name)


def count(predicate: Callable[[T], Any] | None = None, *, prefetch: int = DEFAULT_PREFETCH,
          name: str | None = None) -> Operator:
    """Emit the number of items (for which ``predicate`` holds) when upstream completes.

        source:    -a-b-c-d-e-|
        demand:    ^1
        upstream:  ^4---^3           count(prefetch=4): 4, then 3 each time 3 were consumed
        output:    -----------(5|)

    An empty stream emits 0.
    Demand: a reducer — nothing is requested before downstream asks; then rounds of the
    window, never ``UNBOUNDED``. Memory: one int.
    Args: predicate (item -> bool, or None: every item); prefetch (items, int >= 1, default 256).
    Signals: TypeError/ValueError (raised here) for a non-callable or a bad prefetch;
        ``predicate`` raising cancels upstream and signals the exception.
    Anchor: reactivex ``count(predicate)``, Reactor ``count()``.
    """
    check_optional_callable("count", "predicate", predicate)
    return count_stage(predicate, check_reducer_prefetch("count", prefetch), name=name)


def to_list(*, prefetch: int = DEFAULT_PREFETCH, name: str | None = None) -> Operator:
    """Emit every item, in order, as one list when upstream completes.

        source:    -a-b-c-|
        demand:    ^1
        upstream:  ^4---^3           to_list(prefetch=4)
        output:    -------(x|)       x = [a, b, c]

    The operator: ``flowable.pipe(ops.to_list())`` is a Flowable of one list, for pipelines
    that go on (``ops.map(len)``...). ``await flowable.to_list()`` (the method) stays what it
    is: it runs the stream and returns its items — ``await f.pipe(ops.to_list()).to_list()`` is
    ``[[...]]``. An empty stream emits ``[]``.
    Demand: a reducer — nothing is requested before downstream asks; then rounds of the
    window, never ``UNBOUNDED``. Memory: every item, until completion (as reactivex's
    ``to_list``): bound the stream first (``take``, ``take_until``) if it may not end.
    Args: prefetch (items, int >= 1, default 256).
    Signals: ValueError (raised here) for a bad prefetch; an upstream error is signalled and
        the collected items are dropped.
    Anchor: reactivex ``to_list``, Reactor ``collectList``, Akka ``Sink.seq``.
    """
    return to_list_stage(check_reducer_prefetch("to_list", prefetch), name=name)
