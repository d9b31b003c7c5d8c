"""reduce, count, to_list, last (operators/_reducers.py).

Differential against reactivex 6.1 on seeded inputs and parameters (prefetch included); the
reducer demand rule exactly (nothing before downstream asks, then rounds of the window, never
UNBOUNDED) and under random request(n) patterns; ``ops.to_list()`` next to ``Flowable.to_list()``.
"""

from __future__ import annotations

import random
from typing import Any, Callable

import pytest
import reactivex.operators as rxo

import rxpipe as rx
from rxpipe import UNBOUNDED, SequenceContainsNoElementsError
from rxpipe import operators as ops

from .differential import Case, through_reactivex, through_rxpipe
from .hand_driven import subscribe
from .random_demand import Run
from .seeded_pairs import check_random_demand, check_seeded_cases

Pair = tuple[Any, Any]


def _raising_at(value: int, then: Callable[..., Any]) -> Callable[..., Any]:
    def fn(*args: Any) -> Any:
        if args[-1] == value:
            raise ValueError(f"user function met {value}")
        return then(*args)
    return fn


def _prefetch(r: random.Random) -> int:
    return r.choice((1, 2, 3, 7, 16, 256))


def _last_predicate(r: random.Random) -> Pair:
    t = r.randint(0, 10)
    return ops.last(lambda x: x < t, prefetch=_prefetch(r)), rxo.last(lambda x: x < t)


def _reduce_seed(r: random.Random) -> Pair:
    seed = r.randint(-5, 5)
    return ops.reduce(lambda a, x: a * 2 + x, seed, prefetch=_prefetch(r)), rxo.reduce(lambda a, x: a * 2 + x, seed)


def _reduce_tuple(r: random.Random) -> Pair:
    return (ops.reduce(lambda a, x: a + (x,), (), prefetch=_prefetch(r)), rxo.reduce(lambda a, x: a + (x,), ()))


def _reduce_raising(r: random.Random) -> Pair:
    fn = _raising_at(7, lambda a, x: a + x)
    return ops.reduce(fn, prefetch=_prefetch(r)), rxo.reduce(fn)


def _count_predicate(r: random.Random) -> Pair:
    k = r.randint(2, 4)
    return ops.count(lambda x: x % k == 0, prefetch=_prefetch(r)), rxo.count(lambda x: x % k == 0)


def _count_raising(r: random.Random) -> Pair:
    fn = _raising_at(8, lambda x: x > 3)
    return ops.count(fn), rxo.count(fn)


def _last_raising(r: random.Random) -> Pair:
    fn = _raising_at(8, lambda x: x > 3)
    return ops.last(fn), rxo.last(fn)


#: name -> seeded parameters -> (rxpipe operator, reactivex operator) with the same arguments
PAIRS: dict[str, Callable[[random.Random], Pair]] = {
    "last": lambda r: (ops.last(prefetch=_prefetch(r)), rxo.last()),
    "last_predicate": _last_predicate,
    "last_raising": _last_raising,
    "reduce": lambda r: (ops.reduce(lambda a, x: a + x, prefetch=_prefetch(r)), rxo.reduce(lambda a, x: a + x)),
    "reduce_seed": _reduce_seed,
    "reduce_tuple": _reduce_tuple,
    "reduce_raising": _reduce_raising,
    "count": lambda r: (ops.count(prefetch=_prefetch(r)), rxo.count()),
    "count_predicate": _count_predicate,
    "count_raising": _count_raising,
    "to_list": lambda r: (ops.to_list(prefetch=_prefetch(r)), rxo.to_list()),
}
CASES_PER_PAIR = 12


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_equal_to_reactivex_on_every_seeded_input(name: str) -> None:
    check_seeded_cases(name, PAIRS[name], CASES_PER_PAIR)


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_random_demand_never_requests_unbounded_keeps_the_window_and_gives_reactivex_values(name: str) -> None:
    def window_kept(op: Any) -> Callable[[Run], None]:
        window = _window_of(op)

        def check(run: Run) -> None:
            assert run.pub.total_requested - run.sent <= window
        return check

    check_random_demand(name, PAIRS[name], sizes=(0, 1, 5, 40, 600), never_unbounded=True, check=window_kept)


def _window_of(op: Any) -> int:
    return int(op(rx.empty()).args[-1])  # the stage's window: its last argument


# -- the reducer demand rule, exactly ----------------------------------------------------------------
@pytest.mark.parametrize("op", [ops.count, ops.to_list, lambda: ops.reduce(lambda a, x: a + x)],
                         ids=["count", "to_list", "reduce"])
def test_nothing_is_requested_before_downstream_asks_then_rounds_never_unbounded(op: Callable[[], Any]) -> None:
    pub, ts = subscribe(op())
    assert pub.requests == []
    ts.request(UNBOUNDED)
    assert pub.requests == [256]
    pub.emit(*range(191))
    assert pub.requests == [256]
    pub.emit(191)  # 192 consumed, nothing emitted: 192 = 256 - 256 // 4 free again
    assert pub.requests == [256, 192]
    pub.emit(*range(192, 1000))
    assert pub.requests == [256] + [192] * 5 and pub.outstanding == 256 + 5 * 192 - 1000  # at 192, 384, ... 960
    pub.complete()
    assert ts.completed and len(ts.values) == 1 and UNBOUNDED not in pub.requests


def test_last_asks_in_rounds_of_32_at_most_beyond_downstream() -> None:
    # DESIGN §3 (the kit's third round): last's upstream bound is rounds, <= 32 beyond downstream
    pub, ts = subscribe(ops.last())
    assert pub.requests == []
    ts.request(UNBOUNDED)
    assert pub.requests == [32]
    pub.emit(*range(24))  # 24 = 32 - 32 // 4 consumed: one round more
    assert pub.requests == [32, 24] and pub.outstanding == 32
    pub.emit(*range(24, 1000))
    assert max(pub.requests) == 32 and pub.outstanding <= 32 and UNBOUNDED not in pub.requests
    pub.complete()
    assert ts.values == [999] and ts.completed


def test_prefetch_sets_the_rounds() -> None:
    pub, ts = subscribe(ops.count(prefetch=4), 1)
    pub.emit(*range(10))
    assert pub.requests == [4, 3, 3, 3] and pub.outstanding == 3  # 3 more after 3, 6 and 9 consumed
    pub.complete()
    assert ts.values == [10]


def test_the_result_waits_for_demand_and_completion_follows_it() -> None:
    pub, ts = subscribe(ops.to_list(), 1)
    pub.emit("a", "b").complete()
    assert ts.values == [["a", "b"]] and ts.completed


def test_empty_streams() -> None:
    for op, expected in ((ops.count(), [0]), (ops.to_list(), [[]]), (ops.reduce(lambda a, x: a, 5), [5])):
        pub, ts = subscribe(op, 1)
        pub.complete()
        assert ts.values == expected and ts.completed


def test_an_empty_stream_without_a_seed_signals_the_rxpipe_error_with_reactivex_message() -> None:
    for op, theirs in ((ops.last(), rxo.last()), (ops.reduce(lambda a, x: a + x), rxo.reduce(lambda a, x: a + x))):
        pub, ts = subscribe(op, 1)
        pub.complete()
        assert isinstance(ts.error, SequenceContainsNoElementsError) and isinstance(ts.error, rx.RxPipeError)
        assert through_rxpipe(op, Case(())) == through_reactivex(theirs, Case(())) == [
            ("E", "SequenceContainsNoElementsError", "Sequence contains no elements")]


def test_an_upstream_error_is_signalled_and_the_collected_items_are_dropped() -> None:
    pub, ts = subscribe(ops.to_list(), 1)
    failure = RuntimeError("upstream")
    pub.emit(1, 2).error(failure)
    assert ts.error is failure and ts.values == []


def test_a_none_result_is_a_type_error_where_reactivex_emits_none() -> None:
    ours = through_rxpipe(ops.reduce(lambda a, x: None, 0), Case((1, 2)))
    assert ours == [("E", "TypeError", "reduce: the result is None; items are never None (Reactive Streams §2.13)")]
    assert through_reactivex(rxo.reduce(lambda a, x: None, 0), Case((1, 2))) == [("N", None), ("C",)]
    assert through_rxpipe(ops.reduce(lambda a, x: a, None), Case(()))[0][1] == "TypeError"


def test_a_seed_of_none_is_a_seed() -> None:
    assert through_rxpipe(ops.reduce(lambda a, x: (a or 0) + x, None), Case((1, 2, 3))) == [("N", 6), ("C",)]


# -- ops.to_list() (the operator) and Flowable.to_list() (the awaitable) --------------------------------
async def test_the_to_list_operator_and_the_to_list_method_both_work() -> None:
    source = rx.range(0, 5)
    assert await source.to_list() == [0, 1, 2, 3, 4]
    assert await source.pipe(ops.to_list()).to_list() == [[0, 1, 2, 3, 4]]
    assert await source.pipe(ops.to_list(), ops.map(len)).to_list() == [5]
    assert await rx.range(0, 100_000).pipe(ops.count()).to_list() == [100_000]
    assert ops.to_list is not rx.Flowable.to_list
    with pytest.raises(TypeError):
        source.pipe(ops.to_list)  # type: ignore[arg-type]  # the factory, not called: no silent clash


# -- arguments -----------------------------------------------------------------------------------------
def test_factories_check_their_arguments() -> None:
    for factory in (ops.count, ops.to_list, ops.last):
        for bad in (0, -1, True, 2.5, UNBOUNDED):
            with pytest.raises(ValueError, match="prefetch"):
                factory(prefetch=bad)  # type: ignore[operator]
    with pytest.raises(ValueError, match="UNBOUNDED"):
        ops.reduce(lambda a, x: a, prefetch=UNBOUNDED)
    with pytest.raises(TypeError):
        ops.reduce(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="predicate"):
        ops.count(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="predicate"):
        ops.last(3)  # type: ignore[arg-type]
