"""Aggregates and whole-sequence operators: one value at completion (or when the answer is known:
``all``, ``some``, ``find`` … cancel upstream then), upstream requested in rounds of a window,
never UNBOUNDED (DESIGN §3). ``to_future`` is the one terminal operator: it returns a future.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, TypeVar

from rxpipe.flowable import DEFAULT_PREFETCH, Flowable, Operator
from rxpipe.stage import Stage

from ._args import check_callable, check_int_arg, check_optional_callable, check_reducer_prefetch, check_sources
from ._reducers import count_stage, last_stage, reduce_stage, to_list_stage

T = TypeVar("T")

__all__ = ["last", "reduce", "count", "to_list", "all", "some", "contains", "is_empty", "sequence_equal", "sum",
           "average", "min", "max", "min_by", "max_by", "to_dict", "to_set", "to_future", "single",
           "single_or_default", "find", "find_index", "take_last", "take_last_buffer", "last_or_default",
           "ignore_elements", "fork_join"]


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


# -- third round (DESIGN §3): aggregates and whole-sequence operators ---------------------------------
def _window(op: str, prefetch: object) -> int:
    return check_reducer_prefetch(op, prefetch)


def all(predicate: Callable[[T], Any], *, prefetch: int = DEFAULT_PREFETCH,  # noqa: A001
        name: str | None = None) -> Operator:
    """Emit whether every item satisfies ``predicate``: False at the first that does not
    (upstream cancelled then), True at completion (an empty stream: True).

        source:    -2-4-5-6-|
        demand:    ^1
        output:    -----(F|)     all(is_even); F = False, upstream cancelled at 5

    Demand: a short-circuiting aggregate: nothing is requested before downstream asks for the
    answer; then rounds of ``prefetch`` items (default 256, 75 % replenish), never
    ``UNBOUNDED``; once decided, upstream is cancelled.
    Signals: TypeError (raised here) for a non-callable, ValueError for a bad prefetch;
        ``predicate`` raising cancels upstream and signals the exception.
    Anchor: reactivex ``all``; Reactor ``all``.
    """
    from ._aggregates import all_stage

    check_callable("all", predicate)
    return all_stage(predicate, _window("all", prefetch), name=name)


def some(predicate: Callable[[T], Any] | None = None, *, prefetch: int = DEFAULT_PREFETCH,
         name: str | None = None) -> Operator:
    """Emit whether some item (some item satisfying ``predicate``) exists: True at the first
    (upstream cancelled then), False at completion.

        source:    -1-3-4-5-|
        demand:    ^1
        output:    -----(T|)     some(is_even); T = True, upstream cancelled at 4

    Demand: as ``all``'s (a short-circuiting aggregate, rounds of ``prefetch``, never UNBOUNDED).
    Signals: TypeError (raised here) for a non-callable; ``predicate`` raising cancels upstream
        and signals the exception.
    Anchor: reactivex ``some``; Reactor ``any``.
    """
    from ._aggregates import some_stage

    check_optional_callable("some", "predicate", predicate)
    return some_stage(predicate, _window("some", prefetch), name=name)


def contains(value: T, comparer: Callable[[T, T], Any] | None = None, *, prefetch: int = DEFAULT_PREFETCH,
             name: str | None = None) -> Operator:
    """Emit whether an item equals ``value`` (``comparer(item, value)``, default ``==``): True at
    the first (upstream cancelled then), False at completion.

        source:    -a-b-c-|
        demand:    ^1
        output:    ---(T|)       contains("b"); T = True

    Demand: as ``all``'s. Signals: TypeError (raised here) for a non-callable comparer; the
    comparer raising cancels upstream and signals the exception.
    Anchor: reactivex ``contains``; Reactor ``hasElement``.
    """
    from ._aggregates import contains_stage

    check_optional_callable("contains", "comparer", comparer)
    return contains_stage(value, comparer, _window("contains", prefetch), name=name)


def is_empty(*, prefetch: int = DEFAULT_PREFETCH, name: str | None = None) -> Operator:
    """Emit whether the stream completes without an item: False at the first item (upstream
    cancelled then), True at completion.

        source:    ---a-|
        demand:    ^1
        output:    ---(F|)       F = False

    Demand: as ``all``'s. Anchor: reactivex ``is_empty``; Reactor ``hasElements`` negated.
    """
    from ._aggregates import is_empty_stage

    return is_empty_stage(_window("is_empty", prefetch), name=name)


def sequence_equal(second: Any, comparer: Callable[[T, T], Any] | None = None, *,
                   prefetch: int = DEFAULT_PREFETCH, name: str | None = None) -> Operator:
    """Emit whether the stream and ``second`` (a Flowable, any Publisher, or an iterable) have
    equal items pairwise (``comparer(ours, theirs)``, default ``==``) and the same length.

        source:    -a-b-c-|
        other:     -a-x-|
        demand:    ^1
        output:    ---(F|)       b and x differ at frame 3: F = False; both are cancelled

    Decided False at the first unequal pair, or when one side ends while the other has more;
    True when both ended together.
    Demand: a short-circuiting aggregate over two sources: nothing is requested before
    downstream asks; then each source in rounds of ``prefetch`` items. The items of one side
    that wait for the other's count against their own side's window, so neither side runs more
    than ``prefetch`` ahead of the other. Both are cancelled once decided.
    Signals: TypeError (raised here) for a ``second`` that is neither a Publisher nor an
        iterable, or a non-callable comparer; an error of either side, or the comparer raising,
        cancels the other and is signalled.
    Anchor: reactivex ``sequence_equal``; Reactor ``Mono.sequenceEqual``.
    """
    from rxpipe._protocol import Publisher
    from rxpipe.sources import from_iterable

    from ._aggregates import sequence_equal_stage

    if not isinstance(second, Publisher):
        if not isinstance(second, Iterable):
            raise TypeError(f"sequence_equal(second) needs a Flowable, a Publisher or an iterable, got {second!r}")
        second = from_iterable(second)
    check_optional_callable("sequence_equal", "comparer", comparer)
    return sequence_equal_stage(second, comparer, _window("sequence_equal", prefetch), name=name)


def sum(key_mapper: Callable[[T], Any] | None = None, *, prefetch: int = DEFAULT_PREFETCH,  # noqa: A001
        name: str | None = None) -> Operator:
    """Emit the sum of the items (of ``key_mapper(item)``) when upstream completes; empty: 0.

        source:    -1-2-3-|
        demand:    ^1
        upstream:  ^4---^3       sum(prefetch=4): 4, then 3 each time 3 were consumed
        output:    -------(6|)

    ``0 + x1 + x2 + …``, as reactivex's ``reduce(add, seed=0)``.
    Demand: a reducer: nothing before downstream asks; then rounds of ``prefetch`` items
    (default 256, 75 % replenish), never ``UNBOUNDED``. Memory: one value.
    Signals: TypeError (raised here) for a non-callable; ``key_mapper`` raising, or items that
        do not add, cancel upstream and signal the exception.
    Anchor: reactivex ``sum``; Reactor's ``reduce(0, Integer::sum)``.
    """
    from ._aggregates import sum_stage

    check_optional_callable("sum", "key_mapper", key_mapper)
    return sum_stage(key_mapper, _window("sum", prefetch), name=name)


def average(key_mapper: Callable[[T], Any] | None = None, *, prefetch: int = DEFAULT_PREFETCH,
            name: str | None = None) -> Operator:
    """Emit the mean of the items (of ``key_mapper(item)``; default ``float(item)``) when upstream
    completes.

        source:    -1-2-6-|
        demand:    ^1
        output:    -------(3|)   3 = 3.0

    Demand: as ``sum``'s. Memory: a sum and a count.
    Signals: an empty stream signals :class:`rxpipe.SequenceContainsNoElementsError`;
        ``key_mapper`` raising cancels upstream and signals the exception.
    Anchor: reactivex ``average``; Reactor's ``MathFlux.averageDouble``.
    """
    from ._aggregates import average_stage

    check_optional_callable("average", "key_mapper", key_mapper)
    return average_stage(key_mapper, _window("average", prefetch), name=name)


def _extremum(op: str, stage: Any, key_mapper: Any, comparer: Any, prefetch: int, name: str | None) -> Operator:
    check_optional_callable(op, "comparer", comparer)
    return stage(key_mapper, comparer, _window(op, prefetch), name=name)  # type: ignore[no-any-return]


def max(comparer: Callable[[T, T], Any] | None = None, *, prefetch: int = DEFAULT_PREFETCH,  # noqa: A001
        name: str | None = None) -> Operator:
    """Emit the largest item when upstream completes (the first of those tied for it).

        source:    -3-7-2-7-|
        demand:    ^1
        output:    ---------(7|)

    ``comparer(a, b)`` returns a number, > 0 when ``a`` is larger (reactivex's sub-comparer;
    default ``a - b``). Demand: as ``sum``'s. Memory: the items tied for the largest so far.
    Signals: an empty stream signals :class:`rxpipe.SequenceContainsNoElementsError`; the
        comparer raising (items that do not subtract) cancels upstream and signals it.
    Anchor: reactivex ``max``; Reactor's ``MathFlux.max``.
    """
    from ._aggregates import max_stage

    return _extremum("max", max_stage, None, comparer, prefetch, name)


def min(comparer: Callable[[T, T], Any] | None = None, *, prefetch: int = DEFAULT_PREFETCH,  # noqa: A001
        name: str | None = None) -> Operator:
    """Emit the smallest item when upstream completes (the first of those tied for it).

        source:    -3-1-2-1-|
        demand:    ^1
        output:    ---------(1|)

    ``comparer(a, b)``: > 0 when ``a`` is larger (default ``a - b``). Demand: as ``sum``'s.
    Signals: as ``max``'s. Anchor: reactivex ``min``; Reactor's ``MathFlux.min``.
    """
    from ._aggregates import min_stage

    return _extremum("min", min_stage, None, comparer, prefetch, name)


def max_by(key_mapper: Callable[[T], Any], comparer: Callable[[Any, Any], Any] | None = None, *,
           prefetch: int = DEFAULT_PREFETCH, name: str | None = None) -> Operator:
    """Emit the list of the items with the largest key (``key_mapper(item)``), in order, when
    upstream completes; an empty stream emits ``[]``.

        source:    -a-b-c-d-|
        demand:    ^1
        output:    ---------(x|)     max_by(len): a = "a", b = "bb", c = "c", d = "dd"; x = [b, d]

    ``comparer(a, b)`` compares keys: > 0 when ``a`` is larger (default ``a - b``).
    Demand: as ``sum``'s. Memory: the items tied for the largest key so far.
    Signals: TypeError (raised here) for a non-callable; ``key_mapper`` or the comparer raising
        cancels upstream and signals the exception.
    Anchor: reactivex ``max_by``.
    """
    from ._aggregates import max_by_stage

    check_callable("max_by", key_mapper)
    return _extremum("max_by", max_by_stage, key_mapper, comparer, prefetch, name)


def min_by(key_mapper: Callable[[T], Any], comparer: Callable[[Any, Any], Any] | None = None, *,
           prefetch: int = DEFAULT_PREFETCH, name: str | None = None) -> Operator:
    """Emit the list of the items with the smallest key, in order, when upstream completes;
    an empty stream emits ``[]``.

        source:    -a-b-c-d-|
        demand:    ^1
        output:    ---------(x|)     min_by(len): a = "aa", b = "b", c = "cc", d = "d"; x = [b, d]

    Demand, signals: as ``max_by``'s. Anchor: reactivex ``min_by``.
    """
    from ._aggregates import min_by_stage

    check_callable("min_by", key_mapper)
    return _extremum("min_by", min_by_stage, key_mapper, comparer, prefetch, name)


def to_dict(key_mapper: Callable[[T], Any], element_mapper: Callable[[T], Any] | None = None, *,
            prefetch: int = DEFAULT_PREFETCH, name: str | None = None) -> Operator:
    """Emit one dict ``{key_mapper(item): element_mapper(item) or item}`` when upstream
    completes (a later item replaces an earlier one of the same key); empty: ``{}``.

        source:    -a-b-c-|
        demand:    ^1
        output:    -------(x|)   to_dict(lambda s: s[0]): a = "a1", b = "b1", c = "a2"; x = {"a": "a2", "b": "b1"}

    Demand: as ``sum``'s. Memory: one entry per distinct key, until completion (bound the
    stream first if it may not end).
    Signals: TypeError (raised here) for a non-callable; a mapper raising (or an unhashable
        key) cancels upstream and signals the exception.
    Anchor: reactivex ``to_dict``; Reactor ``collectMap``.
    """
    from ._aggregates import to_dict_stage

    check_callable("to_dict", key_mapper)
    check_optional_callable("to_dict", "element_mapper", element_mapper)
    return to_dict_stage(key_mapper, element_mapper, _window("to_dict", prefetch), name=name)


def to_set(*, prefetch: int = DEFAULT_PREFETCH, name: str | None = None) -> Operator:
    """Emit one set of the items when upstream completes; empty: ``set()``.

        source:    -a-b-a-|
        demand:    ^1
        output:    -------(x|)   x = {a, b}

    Demand: as ``sum``'s. Memory: every distinct item, until completion.
    Signals: an unhashable item cancels upstream and signals TypeError.
    Anchor: reactivex ``to_set``; Reactor ``collect(Collectors.toSet())``.
    """
    from ._aggregates import to_set_stage

    return to_set_stage(_window("to_set", prefetch), name=name)


def to_future(future_ctor: Callable[[], Any] | None = None, *, prefetch: int = DEFAULT_PREFETCH,
              name: str | None = None) -> Operator:
    """Subscribe at once and return a future of the last item: ``await
    source.pipe(ops.to_future())``. A terminal operator: it ends the pipe.

        source:    -a-b-c-|
        demand:    ^*
        output:    -------(c|)   the future's result is c, set at frame 7

    ``future_ctor()`` makes the future (default: the running loop's ``create_future``).
    Cancelling the future cancels the stream.
    Demand: the stream is read in rounds of ``prefetch`` items (``last``'s rule), never
    ``UNBOUNDED``; only the last item is kept.
    Signals: RuntimeError (raised here) without a running loop and without ``future_ctor``;
        the future's exception is the stream's error, or
        :class:`rxpipe.SequenceContainsNoElementsError` for an empty stream.
    Anchor: reactivex ``to_future``; Reactor ``Mono.toFuture`` over ``last()``.
    """
    import asyncio

    window = _window("to_future", prefetch)
    check_optional_callable("to_future", "future_ctor", future_ctor)

    def apply(source: Flowable[Any]) -> Any:
        if future_ctor is not None:
            future = future_ctor()
        else:
            try:
                future = asyncio.get_running_loop().create_future()
            except RuntimeError:
                raise RuntimeError("to_future() needs a running event loop (or future_ctor=)") from None

        def settle(value: Any = None, error: BaseException | None = None) -> None:
            if not future.done():
                if error is None:
                    future.set_result(value)
                else:
                    future.set_exception(error)

        handle = source.pipe(last_stage(None, window, name=name or f"to_future_{source.index + 1}")).subscribe(
            on_next=settle, on_error=lambda error: settle(error=error))
        future.add_done_callback(lambda _: handle.cancel())  # a cancelled future cancels the stream
        return future

    apply.terminal = True  # type: ignore[attr-defined]  # Flowable.pipe returns the future as is
    return apply


def single(predicate: Callable[[T], Any] | None = None, *, prefetch: int = DEFAULT_PREFETCH,
           name: str | None = None) -> Operator:
    """Emit the only item (the only one satisfying ``predicate``) when upstream completes.

        source:    -a-b-|
        demand:    ^1
        output:    ---#          a second item: rxpipe.SequenceContainsMoreThanOneElementError

    A second item fails the stream at once (upstream cancelled then); none signals
    :class:`rxpipe.SequenceContainsNoElementsError`.
    Demand: as ``sum``'s (a reducer: rounds of ``prefetch``, never UNBOUNDED).
    Signals: TypeError (raised here) for a non-callable; ``predicate`` raising cancels upstream
        and signals the exception.
    Anchor: reactivex ``single``; Reactor ``single``.
    """
    from ._aggregates import single_stage

    check_optional_callable("single", "predicate", predicate)
    return single_stage(predicate, Stage.NOTHING, _window("single", prefetch), name=name)


def single_or_default(predicate: Callable[[T], Any] | None = None, default_value: Any = None, *,
                      prefetch: int = DEFAULT_PREFETCH, name: str | None = None) -> Operator:
    """Emit the only item (satisfying ``predicate``), or ``default_value`` when there is none.

        source:    ---|
        demand:    ^1
        output:    ---(z|)       single_or_default(None, "z")

    A second item fails the stream (SequenceContainsMoreThanOneElementError, upstream
    cancelled). ``default_value=None`` (reactivex's default): no item completes the stream empty
    (None is never an item, Reactive Streams §2.13; reactivex emits None).
    Demand, signals: as ``single``'s. Anchor: reactivex ``single_or_default``; Reactor
        ``singleOrEmpty`` + ``defaultIfEmpty``.
    """
    from ._aggregates import single_or_default_stage

    check_optional_callable("single_or_default", "predicate", predicate)
    return single_or_default_stage(predicate, default_value, _window("single_or_default", prefetch), name=name)


def find(predicate: Callable[[T, int, Flowable[Any]], Any], *, prefetch: int = DEFAULT_PREFETCH,
         name: str | None = None) -> Operator:
    """Emit the first item for which ``predicate(item, index, source)`` holds, then complete
    (upstream cancelled); ``source`` is the upstream Flowable.

        source:    -a-b-c-|
        demand:    ^1
        output:    ---(b|)       find(lambda x, i, src: x == "b")

    No such item: the stream completes empty (reactivex emits None, which a Reactive Stream
    cannot carry, §2.13).
    Demand: as ``all``'s (short-circuiting, rounds of ``prefetch``, never UNBOUNDED).
    Signals: TypeError (raised here) for a non-callable; ``predicate`` raising cancels upstream
        and signals the exception.
    Anchor: reactivex ``find``; RxJS ``find``.
    """
    from ._aggregates import find_stage

    check_callable("find", predicate)
    return find_stage(predicate, _window("find", prefetch), name=name)


def find_index(predicate: Callable[[T, int, Flowable[Any]], Any], *, prefetch: int = DEFAULT_PREFETCH,
               name: str | None = None) -> Operator:
    """Emit the index of the first item for which ``predicate(item, index, source)`` holds, or
    -1 at completion; then complete.

        source:    -a-b-c-|
        demand:    ^1
        output:    ---(1|)       find_index(lambda x, i, src: x == "b")

    Demand, signals: as ``find``'s. Anchor: reactivex ``find_index``; RxJS ``findIndex``.
    """
    from ._aggregates import find_index_stage

    check_callable("find_index", predicate)
    return find_index_stage(predicate, _window("find_index", prefetch), name=name)


def take_last(count: int, *, prefetch: int = DEFAULT_PREFETCH, name: str | None = None) -> Operator:
    """Emit the last ``count`` items when upstream completes.

        source:    -a-b-c-d-|
        demand:    ^*
        output:    ---------(cd|)    take_last(2)

    Demand: a reducer: nothing before downstream asks; then rounds of ``prefetch`` items, never
    ``UNBOUNDED``; the items then go out on demand. Memory: ``count`` items (held).
    Signals: ValueError (raised here) for ``count < 0``; an upstream error is signalled and
        the kept items are dropped.
    Anchor: reactivex ``take_last``; Reactor ``takeLast``.
    """
    from ._aggregates import take_last_stage

    check_int_arg("take_last", "count", count, 0)
    return take_last_stage(count, _window("take_last", prefetch), name=name)


def take_last_buffer(count: int, *, prefetch: int = DEFAULT_PREFETCH, name: str | None = None) -> Operator:
    """Emit one list of the last ``count`` items when upstream completes (``[]`` if empty).

        source:    -a-b-c-d-|
        demand:    ^1
        output:    ---------(x|)     take_last_buffer(2): x = [c, d]

    Demand, memory, signals: as ``take_last``'s. Anchor: reactivex ``take_last_buffer``.
    """
    from ._aggregates import take_last_buffer_stage

    check_int_arg("take_last_buffer", "count", count, 0)
    return take_last_buffer_stage(count, _window("take_last_buffer", prefetch), name=name)


def last_or_default(default_value: Any = None, predicate: Callable[[T], Any] | None = None, *,
                    prefetch: int = 32, name: str | None = None) -> Operator:
    """Emit the last item (the last satisfying ``predicate``), or ``default_value`` when there is
    none, at completion. Note reactivex's argument order: the default first.

        source:    ---|
        demand:    ^1
        output:    ---(z|)       last_or_default("z")

    ``default_value=None`` (reactivex's default): no item completes the stream empty (§2.13;
    reactivex emits None). Demand: as ``last``'s (rounds of ``prefetch``, default 32).
    Signals: TypeError (raised here) for a non-callable; ``predicate`` raising cancels upstream.
    Anchor: reactivex ``last_or_default``; Reactor ``last(defaultValue)``.
    """
    check_optional_callable("last_or_default", "predicate", predicate)
    return last_stage(predicate, _window("last_or_default", prefetch), default_value,
                      name=name)


def ignore_elements(*, prefetch: int = DEFAULT_PREFETCH, name: str | None = None) -> Operator:
    """Let every item go; pass only the completion or the error.

        source:    -a-b-c-|
        demand:    ^1
        upstream:  ^4---^3       ignore_elements(prefetch=4)
        output:    -------|

    Demand: a whole-sequence operator: nothing is requested before downstream asks (for
    anything); then rounds of ``prefetch`` items, never ``UNBOUNDED``. Memory: none.
    Anchor: reactivex ``ignore_elements``; Reactor ``ignoreElements``.
    """
    from ._aggregates import ignore_elements_stage

    return ignore_elements_stage(_window("ignore_elements", prefetch), name=name)


def fork_join(*others: Flowable[Any], name: str | None = None) -> Operator:
    """Wait for the source and every one of ``others`` to complete; emit one tuple of their last
    values, then complete: ``rx.fork_join(source, *others)``.

        source:    -1--2----|
        other:     ---x---y-------|
        demand:    ^1
        output:    ---------------(z|)   z = (2, y)

    A source that completes without a value completes the result at once, empty (the others are
    cancelled); any error is signalled at once. Demand: nothing is requested before downstream
    asks; then each source in rounds of 256 (75 % replenish), never UNBOUNDED; only the last
    value of each is kept.
    Signals: TypeError (raised here) for an argument that is not a Flowable.
    Anchor: reactivex ``fork_join``; Reactor ``Mono.zip`` over ``last()``.
    """
    from rxpipe import fork_join as fork_join_sources

    check_sources("fork_join", others)
    return lambda source: fork_join_sources(source, *others, name=name)
