"""pairwise, distinct, distinct_until_changed, take_while, skip_while, first (operators/_filters.py).

Differential against reactivex 6.1 on seeded inputs and parameters; demand under random
request(n) patterns (delivered <= requested, never a stall, values still reactivex's); exact
upstream requests; distinct(max_keys=)'s deliberate difference (an LRU: bounded memory, an
evicted key passes again), tested against reactivex and for memory.
"""

from __future__ import annotations

import gc
import random
import tracemalloc
from collections import OrderedDict
from typing import Any, Callable

import pytest
import reactivex.operators as rxo

import rxpipe as rx
from rxpipe import UNBOUNDED, SequenceContainsNoElementsError
from rxpipe import operators as ops
from rxpipe.testing import check_operator

from .differential import Case, through_reactivex, through_rxpipe
from .hand_driven import subscribe
from .seeded_pairs import check_random_demand, check_seeded_cases

Pair = tuple[Any, Any]


def _raising_at(value: int, then: Callable[[int], Any]) -> Callable[[int], Any]:
    def fn(x: int) -> Any:
        if x == value:
            raise ValueError(f"user function met {value}")
        return then(x)
    return fn


def _distinct_key(r: random.Random) -> Pair:
    k = r.randint(2, 5)
    return ops.distinct(lambda x: x % k), rxo.distinct(lambda x: x % k)


def _distinct_comparer(r: random.Random) -> Pair:
    d = r.randint(0, 2)
    return ops.distinct(comparer=lambda a, b: abs(a - b) <= d), rxo.distinct(None, lambda a, b: abs(a - b) <= d)


def _distinct_unhashable(r: random.Random) -> Pair:
    k = r.randint(2, 5)
    return ops.distinct(lambda x: [x % k]), rxo.distinct(lambda x: [x % k])


def _distinct_max_keys_covering(r: random.Random) -> Pair:
    # at most 10 keys (items 0..9): an LRU of >= 10 keys never evicts, so it is reactivex's distinct
    return ops.distinct(max_keys=r.randint(10, 20)), rxo.distinct()


def _distinct_raising(r: random.Random) -> Pair:
    fn = _raising_at(7, lambda x: x % 4)
    return ops.distinct(fn), rxo.distinct(fn)


def _dup_key(r: random.Random) -> Pair:
    k = r.randint(2, 4)
    return ops.distinct_until_changed(lambda x: x // k), rxo.distinct_until_changed(lambda x: x // k)


def _dup_comparer(r: random.Random) -> Pair:
    d = r.randint(1, 3)  # not transitive: which key is kept matters
    def same(a: int, b: int) -> bool:
        return abs(a - b) <= d
    return ops.distinct_until_changed(None, same), rxo.distinct_until_changed(None, same)


def _dup_raising(r: random.Random) -> Pair:
    fn = _raising_at(7, lambda x: x // 2)
    return ops.distinct_until_changed(fn), rxo.distinct_until_changed(fn)


def _take_while(r: random.Random) -> Pair:
    t, inclusive = r.randint(0, 10), r.random() < 0.5
    return ops.take_while(lambda x: x < t, inclusive), rxo.take_while(lambda x: x < t, inclusive)


def _take_while_raising(r: random.Random) -> Pair:
    fn = _raising_at(8, lambda x: x != 9)
    return ops.take_while(fn, True), rxo.take_while(fn, True)


def _skip_while(r: random.Random) -> Pair:
    t = r.randint(0, 10)
    return ops.skip_while(lambda x: x < t), rxo.skip_while(lambda x: x < t)


def _skip_while_raising(r: random.Random) -> Pair:
    fn = _raising_at(8, lambda x: x < 6)
    return ops.skip_while(fn), rxo.skip_while(fn)


def _first_predicate(r: random.Random) -> Pair:
    t = r.randint(0, 10)
    return ops.first(lambda x: x > t), rxo.first(lambda x: x > t)


def _first_raising(r: random.Random) -> Pair:
    fn = _raising_at(3, lambda x: x > 8)
    return ops.first(fn), rxo.first(fn)


#: name -> seeded parameters -> (rxpipe operator, reactivex operator) with the same arguments
PAIRS: dict[str, Callable[[random.Random], Pair]] = {
    "pairwise": lambda r: (ops.pairwise(), rxo.pairwise()),
    "distinct": lambda r: (ops.distinct(), rxo.distinct()),
    "distinct_key": _distinct_key,
    "distinct_comparer": _distinct_comparer,
    "distinct_unhashable_keys": _distinct_unhashable,
    "distinct_max_keys_covering": _distinct_max_keys_covering,
    "distinct_raising": _distinct_raising,
    "distinct_until_changed": lambda r: (ops.distinct_until_changed(), rxo.distinct_until_changed()),
    "distinct_until_changed_key": _dup_key,
    "distinct_until_changed_comparer": _dup_comparer,
    "distinct_until_changed_raising": _dup_raising,
    "take_while": _take_while,
    "take_while_raising": _take_while_raising,
    "skip_while": _skip_while,
    "skip_while_raising": _skip_while_raising,
    "first": lambda r: (ops.first(), rxo.first()),
    "first_predicate": _first_predicate,
    "first_raising": _first_raising,
}
CASES_PER_PAIR = 12


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_equal_to_reactivex_on_every_seeded_input(name: str) -> None:
    check_seeded_cases(name, PAIRS[name], CASES_PER_PAIR)


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_random_demand_is_never_exceeded_never_stalls_and_gives_reactivex_values(name: str) -> None:
    check_random_demand(name, PAIRS[name])


# -- exact upstream requests --------------------------------------------------------------------------
def test_pairwise_asks_one_more_for_the_unpaired_first_item() -> None:
    pub, ts = subscribe(ops.pairwise(), 3)
    assert pub.requests == [3]
    pub.emit("a")
    assert pub.requests == [3, 1] and ts.values == []
    pub.emit("b", "c", "d")
    assert ts.values == [("a", "b"), ("b", "c"), ("c", "d")] and pub.requests == [3, 1]
    pub.complete()
    assert ts.completed


@pytest.mark.parametrize("op, first_request", [
    (lambda: ops.distinct(), 2),
    (lambda: ops.distinct(max_keys=1), 2),
    (lambda: ops.distinct_until_changed(), 2),
    (lambda: ops.skip_while(lambda x: x == 1), 1),
], ids=["distinct", "distinct_max_keys", "distinct_until_changed", "skip_while"])
def test_a_long_run_of_dropped_items_under_request_1_never_stalls(op: Callable[[], Any], first_request: int) -> None:
    pub, ts = subscribe(op())
    ts.request(first_request)
    for item in [1] * 10_000 + [2]:
        assert pub.outstanding == 1 or (pub.outstanding == 2 and item == 1 and not ts.values)
        pub.emit(item)
    dropped = 10_000 - (first_request - 1)
    assert ts.values == [1, 2][2 - first_request:]
    assert pub.requests == [first_request] + [1] * dropped and pub.outstanding == 0


def test_filters_pass_demand_through_and_ask_one_more_per_drop() -> None:
    pub, ts = subscribe(ops.distinct(), 2)
    pub.emit(1, 1, 1, 2)
    assert ts.values == [1, 2] and pub.requests == [2, 1, 1] and pub.outstanding == 0
    ts.request(UNBOUNDED)
    assert pub.requests == [2, 1, 1, UNBOUNDED]


def test_take_while_cancels_upstream_when_the_predicate_fails() -> None:
    pub, ts = subscribe(ops.take_while(lambda x: x < 3), 5)
    pub.emit(1, 2, 3)
    assert ts.values == [1, 2] and ts.completed and pub.cancelled and pub.requests == [5]
    pub, ts = subscribe(ops.take_while(lambda x: x < 3, inclusive=True), 1)
    pub.emit(1)
    ts.request(1)
    pub.emit(5)
    assert ts.values == [1, 5] and ts.completed and pub.cancelled and pub.requests == [1, 1]


def test_first_reads_nothing_before_it_is_asked_then_one_item_at_a_time() -> None:
    pub, ts = subscribe(ops.first(lambda x: x > 2))
    assert pub.requests == []
    ts.request(UNBOUNDED)
    assert pub.requests == [1]
    pub.emit(1)
    pub.emit(2)
    assert pub.requests == [1, 1, 1] and ts.values == []
    pub.emit(3)
    assert ts.values == [3] and ts.completed and pub.cancelled and pub.requests == [1, 1, 1]


def test_first_on_an_empty_stream_signals_sequence_contains_no_elements() -> None:
    pub, ts = subscribe(ops.first(), 1)
    pub.complete()
    assert isinstance(ts.error, SequenceContainsNoElementsError)
    assert isinstance(ts.error, rx.RxPipeError) and str(ts.error) == "Sequence contains no elements"
    pub, ts = subscribe(ops.first(lambda x: x > 5), 1)
    pub.emit(1, 2).complete()
    assert isinstance(ts.error, SequenceContainsNoElementsError) and ts.values == []


def test_an_upstream_error_passes_through_each_filter() -> None:
    for op in (ops.pairwise(), ops.distinct(), ops.distinct_until_changed(), ops.take_while(bool),
               ops.skip_while(bool), ops.first(lambda x: False)):
        pub, ts = subscribe(op, UNBOUNDED)
        failure = RuntimeError("upstream")
        pub.emit(1)
        pub.error(failure)
        assert ts.error is failure


def test_a_raising_key_mapper_cancels_upstream_and_is_signalled() -> None:
    pub, ts = subscribe(ops.distinct(_raising_at(2, lambda x: x)), UNBOUNDED)
    pub.emit(1, 2)
    assert ts.values == [1] and str(ts.error) == "user function met 2" and pub.cancelled


# -- distinct_until_changed with a comparer keeps the key of the last emitted item ---------------------
def test_distinct_until_changed_keeps_the_last_emitted_key_as_reactivex_does() -> None:
    def near(a: int, b: int) -> bool:
        return abs(a - b) <= 1

    case = Case((1, 2, 3, 4, 5))
    expected = [("N", 1), ("N", 3), ("N", 5), ("C",)]  # 2 ~ 1 and 4 ~ 3: dropped; 3 compared with 1
    assert through_rxpipe(lambda s: s.pipe(ops.distinct_until_changed(None, near)), case) == expected
    assert through_reactivex(lambda s: s.pipe(rxo.distinct_until_changed(None, near)), case) == expected


# -- distinct(max_keys=): an LRU, a deliberate difference from reactivex --------------------------------
def lru_distinct(items: list[Any], max_keys: int) -> list[Any]:
    """The documented rule, written plainly: at most max_keys keys, least recently seen evicted."""
    kept: OrderedDict[Any, None] = OrderedDict()
    out = []
    for item in items:
        if item in kept:
            kept.move_to_end(item)
            continue
        out.append(item)
        kept[item] = None
        if len(kept) > max_keys:
            kept.popitem(last=False)
    return out


def test_distinct_max_keys_lets_an_evicted_key_through_again_where_reactivex_does_not() -> None:
    case = Case(("a", "b", "c", "a", "c", "b"))
    ours = through_rxpipe(lambda s: s.pipe(ops.distinct(max_keys=2)), case)
    theirs = through_reactivex(lambda s: s.pipe(rxo.distinct()), case)
    # c evicts a; a comes back and evicts b; c, seen again, becomes the most recent; b comes back
    assert ours == [("N", "a"), ("N", "b"), ("N", "c"), ("N", "a"), ("N", "b"), ("C",)]
    assert theirs == [("N", "a"), ("N", "b"), ("N", "c"), ("C",)]
    # unbounded, rxpipe is reactivex
    assert through_rxpipe(lambda s: s.pipe(ops.distinct()), case) == theirs


@pytest.mark.parametrize("seed", range(8))
def test_distinct_max_keys_is_a_least_recently_seen_lru(seed: int) -> None:
    rng = random.Random(seed)
    items = [rng.randint(0, 12) for _ in range(300)]
    max_keys = rng.randint(1, 10)
    expected = [("N", x) for x in lru_distinct(items, max_keys)] + [("C",)]
    assert through_rxpipe(lambda s: s.pipe(ops.distinct(max_keys=max_keys)), Case(tuple(items))) == expected
    # the same rule for keys compared one by one: unhashable keys, or a comparer
    listed = through_rxpipe(lambda s: s.pipe(ops.distinct(lambda x: [x], max_keys)), Case(tuple(items)))
    compared = through_rxpipe(lambda s: s.pipe(ops.distinct(max_keys=max_keys, comparer=lambda a, b: a == b)),
                              Case(tuple(items)))
    assert listed == compared == expected


def test_distinct_max_keys_mixes_hashable_and_unhashable_keys_in_one_lru() -> None:
    items: list[Any] = [1, [2], 3, 1, [2], 3]
    # max_keys=2, one recency order over both stores: 3 evicts 1, 1 evicts [2], [2] evicts 3, 3 evicts 1
    ours = through_rxpipe(lambda s: s.pipe(ops.distinct(lambda x: x, 2)), Case(tuple(items)))
    assert ours == [("N", 1), ("N", [2]), ("N", 3), ("N", 1), ("N", [2]), ("N", 3), ("C",)]
    ours = through_rxpipe(lambda s: s.pipe(ops.distinct(lambda x: x, 3)), Case(tuple(items)))
    assert ours == [("N", 1), ("N", [2]), ("N", 3), ("C",)]


def _memory_of_distinct(max_keys: int | None, n: int) -> int:
    """Bytes still allocated by a distinct stage that saw ``n`` distinct keys (stream still open)."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        pub, ts = subscribe(ops.distinct(max_keys=max_keys), UNBOUNDED)
        for i in range(n):
            pub.emit(i * 1_000_003)  # ints beyond the small-int cache: each key is an object
        assert len(ts.values) == n
        ts.values.clear()  # what the subscriber kept is not the stage's
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
        ts.cancel()
        return held
    finally:
        tracemalloc.stop()


def test_distinct_max_keys_bounds_memory_where_unbounded_distinct_grows() -> None:
    unbounded = _memory_of_distinct(None, 50_000)
    bounded = _memory_of_distinct(100, 50_000)
    assert unbounded > 2_000_000  # every key kept: ~50,000 dict entries and ints
    assert bounded < 100_000  # 100 keys: a few kB, whatever the number of keys seen


def test_distinct_check_operator_with_a_bounded_memory() -> None:
    check_operator(lambda: ops.distinct(lambda x: x % 5, max_keys=3), emits_every_item=False, max_held=0)


# -- arguments -----------------------------------------------------------------------------------------
def test_factories_check_their_arguments() -> None:
    with pytest.raises(TypeError, match="comparer"):
        ops.distinct(None, lambda a, b: a == b)  # reactivex's positional comparer
    with pytest.raises(ValueError, match="max_keys"):
        ops.distinct(max_keys=0)
    with pytest.raises(ValueError, match="max_keys"):
        ops.distinct(max_keys=True)
    with pytest.raises(TypeError, match="key_mapper"):
        ops.distinct(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="comparer"):
        ops.distinct_until_changed(None, 3)  # type: ignore[arg-type]
    for factory in (ops.take_while, ops.skip_while):
        with pytest.raises(TypeError):
            factory(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="predicate"):
        ops.first(5)  # type: ignore[arg-type]


def test_stages_are_named_like_every_operator() -> None:
    source = rx.just(1)
    assert source.pipe(ops.pairwise()).name == "pairwise_1"
    assert source.pipe(ops.distinct(name="dedupe")).name == "dedupe"
    assert source.pipe(ops.distinct_until_changed(), ops.first()).name == "first_2"
