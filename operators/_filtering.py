"""Filters: ``pairwise``, ``distinct``, ``distinct_until_changed``, ``take_while``,
``skip_while``, ``take_until``, ``first``. Each asks upstream for one more per dropped item.
"""

from __future__ import annotations

from typing import Any, Callable, Hashable, TypeVar

from rxpipe.errors import ArgumentOutOfRangeError
from rxpipe.flowable import Flowable, Operator

from ._args import check_callable, check_int_arg, check_optional_callable
from ._filters import (
    default_if_empty_stage,
    distinct_stage,
    distinct_until_changed_stage,
    element_at_stage,
    first_stage,
    pairwise_stage,
    skip_last_stage,
    skip_while_stage,
    take_while_stage,
)
from ._publishers import publisher_problem
from ._take_until import skip_until_stage, take_until_stage

T = TypeVar("T")

__all__ = ["pairwise", "distinct", "distinct_until_changed", "take_while", "skip_while", "take_until", "first",
           "filter_indexed", "take_while_indexed", "skip_while_indexed", "skip_until", "element_at",
           "element_at_or_default", "first_or_default", "skip_last", "default_if_empty", "slice"]


def pairwise(*, name: str | None = None) -> Operator:
    """Emit ``(previous, item)`` for each item after the first.

        source:    --a-b-c-d-|
        demand:    ^3
        upstream:  ^3^1
        output:    ----x-y-z-|       x = (a, b), y = (b, c), z = (c, d)

    Demand: passed through; the first item makes no pair and asks upstream for one more, so
    ``n`` pairs take ``n + 1`` items. A stream of fewer than two items emits nothing.
    Signals: upstream errors, completion and cancel pass through; the first item is held
    (never told: it is not dropped, only unpaired).
    Anchor: reactivex ``pairwise``, RxJS ``pairwise``.
    """
    return pairwise_stage(name=name)


def distinct(key_mapper: Callable[[T], Hashable] | None = None, max_keys: int | None = None, *,
             comparer: Callable[[Any, Any], Any] | None = None, name: str | None = None) -> Operator:
    """Pass only items whose key (``key_mapper(item)``, default the item) was not seen before.

        source:    -a-b-a-c-b-|
        demand:    ^4
        upstream:  ^4---^1--^1       each repeated key asks upstream for one more
        output:    -a-b---c---|

    With ``max_keys`` the memory is a bounded LRU, and a key evicted passes again::

        source:    -a-b-c-a-|
        demand:    ^*
        output:    -a-b-c-a-|        distinct(max_keys=2): c evicted a (least recently seen)

    Memory: without ``max_keys`` every key is kept for the life of the subscription, as
    reactivex's ``distinct`` does — it grows with the number of distinct keys, without bound.
    ``max_keys=N`` keeps at most N keys, evicting the least recently seen (a repeated key counts
    as seen): bounded memory, at the price of letting an evicted key through again — a
    deliberate difference from reactivex, which has no bound. Hashable keys cost O(1) per item;
    unhashable keys, and every key with ``comparer``, are compared one by one (O(keys) per item,
    reactivex's way).
    Demand: passed through; each dropped item asks upstream for one more (never a stall).
    Args: key_mapper (item -> key); max_keys (keys, int >= 1, or None: unbounded); comparer
        (keyword: ``(kept_key, key) -> bool``, reactivex's equality comparer; its second
        positional argument there, keyword here since ``max_keys`` took the place).
    Signals: TypeError/ValueError (raised here) for a non-callable or a bad ``max_keys``;
        ``key_mapper`` or ``comparer`` raising cancels upstream and signals the exception.
    Anchor: reactivex ``distinct(key_mapper, comparer)``; Reactor ``distinct(keySelector,
        distinctStoreSupplier)`` (a bounded store is its answer to the same growth).
    """
    check_optional_callable("distinct", "key_mapper", key_mapper)
    if callable(max_keys):
        raise TypeError("distinct(max_keys) needs an int >= 1 or None, got a callable: reactivex's second "
                        "argument (comparer) is keyword-only here: distinct(key_mapper, comparer=...)")
    if max_keys is not None:
        check_int_arg("distinct", "max_keys", max_keys, 1)
    check_optional_callable("distinct", "comparer", comparer)
    return distinct_stage(key_mapper, max_keys, comparer, name=name)


def distinct_until_changed(key_mapper: Callable[[T], Any] | None = None,
                           comparer: Callable[[Any, Any], Any] | None = None, *,
                           name: str | None = None) -> Operator:
    """Drop items whose key equals the key of the last item emitted.

        source:    -a-a-b-b-a-|
        demand:    ^3
        upstream:  ^3-^1--^1         each repeat asks upstream for one more
        output:    -a---b---a-|

    Only the last emitted key is kept (constant memory). With ``comparer``, a key judged equal
    leaves the kept key as it is (reactivex's rule).
    Demand: passed through; each dropped item asks upstream for one more (never a stall).
    Args: key_mapper (item -> key, default the item); comparer (``(kept_key, key) -> bool``,
        default ``==``).
    Signals: TypeError (raised here) for a non-callable; ``key_mapper`` or ``comparer`` raising
        cancels upstream and signals the exception.
    Anchor: reactivex ``distinct_until_changed``, Reactor ``distinctUntilChanged``.
    """
    check_optional_callable("distinct_until_changed", "key_mapper", key_mapper)
    check_optional_callable("distinct_until_changed", "comparer", comparer)
    return distinct_until_changed_stage(key_mapper, comparer, name=name)


def take_while(predicate: Callable[[T], Any], inclusive: bool = False, *, name: str | None = None) -> Operator:
    """Emit items while ``predicate`` holds; complete at the first item that fails it.

        source:    -1-2-3-1-|
        demand:    ^5
        upstream:  ^5
        output:    -1-2-|            take_while(lambda x: x < 3); upstream is cancelled at 3

    ``inclusive=True`` emits that first failing item before completing (``-1-2-(3|)``).
    Demand: passed through exactly; upstream is cancelled when the predicate fails.
    Signals: TypeError (raised here) for a non-callable; ``predicate`` raising cancels
        upstream and signals the exception.
    Anchor: reactivex ``take_while(predicate, inclusive)``, Reactor ``takeWhile``.
    """
    check_callable("take_while", predicate)
    return take_while_stage(predicate, bool(inclusive), name=name)


def skip_while(predicate: Callable[[T], Any], *, name: str | None = None) -> Operator:
    """Drop items while ``predicate`` holds, then pass every item (the predicate is not asked again).

        source:    --1-2-3-1-|
        demand:    ^2
        upstream:  ^2^1^1            skip_while(lambda x: x < 3): each skipped item asks one more
        output:    ------3-1-|

    Demand: passed through; each skipped item asks upstream for one more (never a stall).
    Signals: TypeError (raised here) for a non-callable; ``predicate`` raising cancels
        upstream and signals the exception.
    Anchor: reactivex ``skip_while``, Reactor ``skipWhile``.
    """
    check_callable("skip_while", predicate)
    return skip_while_stage(predicate, name=name)


def take_until(other: Flowable[Any], *, name: str | None = None) -> Operator:
    """Emit the upstream's items until ``other`` emits an item; then complete, cancelling both.

        source:    -a-b-c-d-|
        other:     ----x-|
        demand:    ^*
        output:    -a-b|             x completes the stream; upstream and other are cancelled

    ``other`` (a Flowable or any Publisher) is subscribed when the stage starts and asked for
    one item before anything is requested of the upstream; its first item completes the stream. ``other``
    completing without an item changes nothing; its error is signalled (the upstream is
    cancelled). An ``other`` with an item ready ends the stream before any item (reactivex
    subscribes it after the source, so a synchronous source's items all pass there).
    Demand: passed through exactly to the upstream; ``other`` is asked for 1.
    Signals: TypeError (raised here) if ``other`` is not a Publisher (a reactivex Observable:
        wrap it with ``rx.from_observable``). Cancel, completion and an error from either side
        cancel both.
    Anchor: reactivex ``take_until(other)``, Reactor ``takeUntilOther``.
    """
    problem = publisher_problem(other)
    if problem is not None:
        raise TypeError(f"take_until(other): {problem}")
    return take_until_stage(other, name=name)


def first(predicate: Callable[[T], Any] | None = None, *, name: str | None = None) -> Operator:
    """Emit the first item (the first for which ``predicate`` holds), then complete.

        source:    --1-2-3-|
        demand:    ^3
        upstream:  ^1^1              first(lambda x: x % 2 == 0): one item outstanding at a time
        output:    ----(2|)

    On a stream that completes without such an item::

        source:    --|
        demand:    ^1
        output:    --#               rxpipe.SequenceContainsNoElementsError

    Demand: nothing is requested before downstream asks; then one item at a time, one more per
    item that did not match (never more than one outstanding, like Reactor's
    ``take(1, limitRequest)``); upstream is cancelled once the item is found.
    Signals: TypeError (raised here) for a non-callable; an empty (or unmatched) stream signals
        :class:`rxpipe.SequenceContainsNoElementsError` ("Sequence contains no elements", as
        reactivex); ``predicate`` raising cancels upstream and signals the exception.
    Anchor: reactivex ``first(predicate)``, Reactor ``next()``/``filter().next()``.
    """
    check_optional_callable("first", "predicate", predicate)
    return first_stage(predicate, name=name)


# -- third round (DESIGN §3): filters ---------------------------------------------------------------------
def filter_indexed(predicate_indexed: Callable[[T, int], Any] | None = None, *, name: str | None = None) -> Operator:
    """Pass the items for which ``predicate_indexed(item, index)`` holds, the index counting
    every item from 0 (None: every item passes).

        source:    -a-b-c-d-|
        demand:    ^3
        upstream:  ^3-^1--^1
        output:    -a---c---|    filter_indexed(lambda x, i: i % 2 == 0); b, d ask one more each

    Demand: passed through; each dropped item asks upstream for one more (never a stall).
    Signals: TypeError (raised here) for a non-callable; ``predicate_indexed`` raising cancels
        upstream and signals the exception.
    Anchor: reactivex ``filter_indexed``; RxJS ``filter((x, i) => …)``.
    """
    from ._one_to_one import filter_indexed_stage

    check_optional_callable("filter_indexed", "predicate_indexed", predicate_indexed)
    return filter_indexed_stage(predicate_indexed, name=name)


def take_while_indexed(predicate: Callable[[T, int], Any], inclusive: bool = False, *,
                       name: str | None = None) -> Operator:
    """Emit items while ``predicate(item, index)`` holds; complete at the first that fails it.

        source:    -a-b-c-d-|
        demand:    ^5
        output:    -a-b-|        take_while_indexed(lambda x, i: i < 2); upstream cancelled at c

    ``inclusive=True`` emits that first failing item before completing.
    Demand: passed through exactly; upstream is cancelled when the predicate fails.
    Signals: TypeError (raised here) for a non-callable; ``predicate`` raising cancels upstream
        and signals the exception.
    Anchor: reactivex ``take_while_indexed``; RxJS ``takeWhile((x, i) => …)``.
    """
    check_callable("take_while_indexed", predicate)
    return take_while_stage(predicate, bool(inclusive), True, name=name)


def skip_while_indexed(predicate: Callable[[T, int], Any], *, name: str | None = None) -> Operator:
    """Drop items while ``predicate(item, index)`` holds, then pass every item.

        source:    --a-b-c-d-|
        demand:    ^2
        upstream:  ^2^1^1
        output:    ------c-d-|   skip_while_indexed(lambda x, i: i < 2): each skipped item asks one more

    Demand: passed through; each skipped item asks upstream for one more (never a stall).
    Signals: TypeError (raised here) for a non-callable; ``predicate`` raising cancels upstream
        and signals the exception.
    Anchor: reactivex ``skip_while_indexed``.
    """
    check_callable("skip_while_indexed", predicate)
    return skip_while_stage(predicate, True, name=name)


def skip_until(other: Flowable[Any], *, name: str | None = None) -> Operator:
    """Drop the upstream's items until ``other`` emits an item; then pass every item.

        source:    -a-b-c-d-|
        other:     ----x-|
        demand:    ^*
        output:    -----c-d-|    x opens the gate at frame 4; other is cancelled then

    ``other`` (a Flowable or any Publisher) is subscribed when the stage starts and asked for
    one item before anything is requested of the upstream; its first item opens the gate and
    it is cancelled. ``other`` completing without an item leaves the gate shut.
    Demand: passed through; each dropped item asks upstream for one more; ``other`` is asked 1.
    Signals: TypeError (raised here) if ``other`` is not a Publisher. The upstream's completion
        completes the stream, open or not (reactivex never terminates when the upstream ends
        before the gate opened; Reactor ``skipUntilOther`` completes). An error from either side
        cancels both; cancel reaches both.
    Anchor: reactivex ``skip_until(other)``; Reactor ``skipUntilOther``.
    """
    problem = publisher_problem(other)
    if problem is not None:
        raise TypeError(f"skip_until(other): {problem}")
    return skip_until_stage(other, name=name)


def _check_index(op: str, index: object) -> int:
    if isinstance(index, int) and not isinstance(index, bool) and index < 0:
        raise ArgumentOutOfRangeError(f"{op}(index) needs an index >= 0, got {index!r}")
    check_int_arg(op, "index", index, 0)
    return index  # type: ignore[return-value]


def element_at(index: int, *, name: str | None = None) -> Operator:
    """Emit the item at ``index`` (counting from 0), then complete.

        source:    -a-b-c-d-|
        demand:    ^1
        upstream:  ^3
        output:    -----(c|)     element_at(2): index + 1 items, asked once; upstream cancelled at c

    On a stream of ``index`` items or fewer::

        source:    -a-|
        demand:    ^1
        output:    ---#          element_at(2): rxpipe.ArgumentOutOfRangeError

    Demand: nothing is requested before downstream asks; then ``index + 1`` items, once (never
    an item beyond the one wanted); upstream is cancelled once it arrived.
    Signals: :class:`rxpipe.ArgumentOutOfRangeError` (raised here) for ``index < 0``, as
        reactivex raises; signalled for a stream too short ("Argument out of range").
    Anchor: reactivex ``element_at``; Reactor ``elementAt``.
    """
    return element_at_stage(_check_index("element_at", index), name=name)


def element_at_or_default(index: int, default_value: T | None = None, *, name: str | None = None) -> Operator:
    """Emit the item at ``index``, or ``default_value`` when the stream has ``index`` items or
    fewer; then complete.

        source:    -a-|
        demand:    ^1
        output:    ---(z|)       element_at_or_default(2, "z")

    ``default_value=None`` (reactivex's default): a stream too short completes without an item,
    since None is never an item (Reactive Streams §2.13), where reactivex emits None.
    Demand: as ``element_at``'s. Signals: ArgumentOutOfRangeError (raised here) for ``index < 0``.
    Anchor: reactivex ``element_at_or_default``; Reactor ``elementAt(index, defaultValue)``.
    """
    return element_at_stage(_check_index("element_at_or_default", index), default_value, name=name)


def first_or_default(predicate: Callable[[T], Any] | None = None, default_value: T | None = None, *,
                     name: str | None = None) -> Operator:
    """Emit the first item (the first for which ``predicate`` holds), or ``default_value`` when
    there is none; then complete.

        source:    --1-3-|
        demand:    ^1
        output:    ------(0|)    first_or_default(lambda x: x % 2 == 0, 0)

    ``default_value=None`` (reactivex's default): no such item completes the stream without an
    item (None is never an item, Reactive Streams §2.13; reactivex emits None).
    Demand: as ``first``'s: nothing before downstream asks, then one item at a time; upstream is
    cancelled once the item is found. Signals: TypeError (raised here) for a non-callable;
    ``predicate`` raising cancels upstream and signals the exception.
    Anchor: reactivex ``first_or_default``; Reactor ``next()`` + ``defaultIfEmpty``.
    """
    check_optional_callable("first_or_default", "predicate", predicate)
    return first_stage(predicate, default_value, name=name)


def skip_last(count: int, *, name: str | None = None) -> Operator:
    """Drop the last ``count`` items: an item goes out once ``count`` newer items have arrived.

        source:    -a-b-c-d-|
        demand:    ^*
        output:    -----a-b-|    skip_last(2): a leaves when c arrives; c, d are the last two

    Memory: ``count`` items (held, counted in the stage's statistics).
    Demand: passed through, plus the ``count`` items held: with ``request(n)`` upstream is asked
    for what is missing of ``n + count`` (the items held never close the window).
    Signals: ValueError (raised here) for ``count < 0``; upstream errors pass through (the held
        items are dropped with the stream), the completion follows the items out.
    Anchor: reactivex ``skip_last``; Reactor ``skipLast``.
    """
    check_int_arg("skip_last", "count", count, 0)
    return skip_last_stage(count, name=name)


def default_if_empty(default_value: T | None = None, *, name: str | None = None) -> Operator:
    """Emit the items, or ``default_value`` if the stream completes without any.

        source:    ---|
        demand:    ^1
        output:    ---(z|)       default_if_empty("z")

    ``default_value=None`` (reactivex's default): an empty stream stays empty, since None is
    never an item (Reactive Streams §2.13; reactivex emits None).
    Demand: passed through exactly; the default is one item, delivered on demand.
    Signals: upstream errors pass through. Anchor: reactivex ``default_if_empty``; Reactor
        ``defaultIfEmpty``.
    """
    return default_if_empty_stage(default_value, name=name)


def slice(start: int | None = None, stop: int | None = None, step: int | None = None, *,  # noqa: A001
          name: str | None = None) -> Operator:
    """Take the items ``[start:stop:step]`` of the stream, as a Python slice does; a negative
    ``start`` or ``stop`` counts from the end (known at completion).

        source:    -a-b-c-d-e-|
        demand:    ^*
        output:    ---b---(d|)   slice(1, 4, 2): the take(4) in it completes at d

    Made of the other operators, as reactivex's: ``take(stop)`` for ``stop >= 0``, ``skip(start)``
    or ``take_last(-start)``, ``skip_last(-stop)``, a ``filter_indexed`` for ``step > 1``
    (``step`` 0 or None: 1, as in reactivex). A negative ``start`` with a positive ``stop`` keeps
    the indices until the tail is known (``map_indexed``, ``take_last``, ``take_while``).
    Demand: each part's rule: positive bounds pass demand through (``take`` never asks beyond
    ``stop``, ``skip`` asks one more per skipped item); a negative ``start`` is a ``take_last``
    (rounds of 256 until completion, ``-start`` items held); a negative ``stop`` holds
    ``-stop`` items.
    ``name="page"`` names the parts ``page.take``, ``page.skip`` … (metrics, graphs).
    Signals: TypeError (raised here) for a negative ``step`` (reactivex's "Negative step not
        supported.") or a bound that is not an int.
    Anchor: reactivex ``slice``; Python's slice semantics.
    """
    import sys

    from rxpipe._fusion import fuse

    from ._aggregates import take_last_stage
    from ._one_to_one import filter_indexed_stage, map_indexed_stage

    for arg, value in (("start", start), ("stop", stop), ("step", step)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise TypeError(f"slice({arg}) needs an int or None, got {value!r}")
    first = 0 if start is None else start
    last = sys.maxsize if stop is None else stop
    stride = 1 if step is None else step
    if stride < 0:
        raise TypeError("Negative step not supported.")
    parts: list[Operator] = []

    def part(kind: str) -> str | None:  # with name="page": page.take, page.skip ...
        return None if name is None else f"{name}.{kind}"

    def fused(kind: str, fn: Any = None, arg: Any = None) -> Operator:
        return lambda source: fuse(source, kind, part(kind), fn, arg)

    if first < 0 and stop is not None and last > 0:  # the tail's indices, then the stop
        parts += [map_indexed_stage(lambda x, i: (x, i), name=part("map_indexed")),
                  take_last_stage(-first, 256, name=part("take_last")),
                  take_while_stage(lambda pair: pair[1] < last, False, name=part("take_while")),
                  fused("map", _first_of_pair)]
    else:
        if last >= 0:
            parts.append(fused("take", None, last))
        if first > 0:
            parts.append(fused("skip", None, first))
        elif first < 0:
            parts.append(take_last_stage(-first, 256, name=part("take_last")))
        if last < 0:
            parts.append(skip_last_stage(-last, name=part("skip_last")))
    if stride > 1:
        parts.append(filter_indexed_stage(lambda x, i: i % stride == 0, name=part("filter_indexed")))
    return lambda source: source.pipe(*parts)


def _first_of_pair(pair: tuple[Any, int]) -> Any:
    return pair[0]
