"""The third round's aggregates and whole-sequence operators (DESIGN §3): ``all``, ``some``,
``contains``, ``is_empty``, ``sequence_equal``, ``sum``, ``average``, ``min``, ``max``,
``min_by``, ``max_by``, ``to_dict``, ``to_set``, ``to_future``, ``single``,
``single_or_default``, ``find``, ``find_index``, ``take_last``, ``take_last_buffer``,
``last_or_default``, ``ignore_elements``, ``fork_join``.

Each against reactivex 6.1 on 100 seeded cold inputs; under random demand (never
``request(UNBOUNDED)`` upstream); the family's demand rule exactly: nothing before downstream
asks, rounds of at most 256 outstanding, and the short-circuiting ones cancel upstream once
decided; cancel reaching every upstream.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any, Callable

import pytest
import reactivex
import reactivex.operators as rxo

import rxpipe as rx
from rxpipe import UNBOUNDED, SequenceContainsMoreThanOneElementError, SequenceContainsNoElementsError
from rxpipe import operators as ops
from rxpipe.testing import TestPublisher, TestSubscriber, run_virtual

from .differential import now
from .hand_driven import subscribe
from .test_one_to_one import raising_at
from .vocab import SYNC, Pair, check_demand, check_sync, register

FAMILY = ("all", "some", "contains", "is_empty", "sequence_equal", "sum", "average", "min", "max", "min_by", "max_by",
          "to_dict", "to_set", "to_future", "single", "single_or_default", "find", "find_index", "take_last",
          "take_last_buffer", "last_or_default", "ignore_elements", "fork_join")


def _pred(rng: random.Random) -> Callable[[int], Any]:
    t = rng.randint(0, 9)
    return raising_at(rng, rng.choice((lambda x: x > t, lambda x: x % 3 == t % 3, lambda x: x != t)))


@register("all")
def _all(rng: random.Random) -> Pair:
    p = _pred(rng)
    return ops.all(p), rxo.all(p)


@register("some")
def _some(rng: random.Random) -> Pair:
    if rng.random() < 0.3:
        return ops.some(), rxo.some()
    p = _pred(rng)
    return ops.some(p), rxo.some(p)


@register("contains")
def _contains(rng: random.Random) -> Pair:
    value = rng.randint(0, 12)
    if rng.random() < 0.5:
        return ops.contains(value), rxo.contains(value)
    same = raising_at(rng, lambda a, b: a % 4 == b % 4)
    return ops.contains(value, same), rxo.contains(value, same)


@register("is_empty")
def _is_empty(rng: random.Random) -> Pair:
    return ops.is_empty(), rxo.is_empty()


@register("sequence_equal")
def _sequence_equal(rng: random.Random) -> Pair:
    items = [rng.randint(0, 9) for _ in range(rng.choice((0, 1, 3, 8)))]
    same = None if rng.random() < 0.6 else raising_at(rng, lambda a, b: a % 5 == b % 5)
    if rng.random() < 0.5:
        return ops.sequence_equal(items, same), rxo.sequence_equal(items, same)
    return ops.sequence_equal(rx.just(*items), same), rxo.sequence_equal(now(*items), same)


@register("sum")
def _sum(rng: random.Random) -> Pair:
    if rng.random() < 0.4:
        return ops.sum(), rxo.sum()
    k = raising_at(rng, lambda x: x * 3 - 7)
    return ops.sum(k), rxo.sum(k)


@register("average")
def _average(rng: random.Random) -> Pair:
    if rng.random() < 0.4:
        return ops.average(), rxo.average()
    k = raising_at(rng, lambda x: x * 3 - 7)
    return ops.average(k), rxo.average(k)


def _comparer(rng: random.Random) -> Callable[[Any, Any], Any] | None:
    return None if rng.random() < 0.5 else raising_at(rng, lambda a, b: (a % 4) - (b % 4))


@register("min")
def _min(rng: random.Random) -> Pair:
    c = _comparer(rng)
    return ops.min(c), rxo.min(c)


@register("max")
def _max(rng: random.Random) -> Pair:
    c = _comparer(rng)
    return ops.max(c), rxo.max(c)


@register("min_by")
def _min_by(rng: random.Random) -> Pair:
    k, c = raising_at(rng, lambda x: x % 3), _comparer(rng)
    return ops.min_by(k, c), rxo.min_by(k, c)


@register("max_by")
def _max_by(rng: random.Random) -> Pair:
    k, c = raising_at(rng, lambda x: x % 3), _comparer(rng)
    return ops.max_by(k, c), rxo.max_by(k, c)


@register("to_dict")
def _to_dict(rng: random.Random) -> Pair:
    k = raising_at(rng, lambda x: x % 4)
    e = None if rng.random() < 0.5 else raising_at(rng, lambda x: x * 10)
    return ops.to_dict(k, e), rxo.to_dict(k, e)


@register("to_set")
def _to_set(rng: random.Random) -> Pair:
    return ops.to_set(), rxo.to_set()


@register("to_future")
def _to_future(rng: random.Random) -> Pair:
    # the future's outcome as a one-item stream on each side (ours: awaited on the loop)
    def ours(source: Any) -> Any:
        return rx.defer(lambda: rx.from_future(source.pipe(ops.to_future())))

    return ours, _theirs_future


def _theirs_future(source: Any) -> Any:
    """reactivex's future, awaited on a loop of its own before anything subscribes (inside a
    subscription, its trampoline would queue the source behind the waiting loop)."""
    async def outcome() -> Any:
        return await source.pipe(rxo.to_future())

    loop = asyncio.new_event_loop()
    try:
        value = loop.run_until_complete(outcome())
    except Exception as error:
        return reactivex.throw(error)
    finally:
        loop.close()
    return reactivex.of(value)


@register("single")
def _single(rng: random.Random) -> Pair:
    if rng.random() < 0.3:
        return ops.single(), rxo.single()
    p = _pred(rng)
    return ops.single(p), rxo.single(p)


@register("single_or_default", none_is_nothing=True)
def _single_or_default(rng: random.Random) -> Pair:
    default = rng.choice((None, -1, 42))
    p = None if rng.random() < 0.3 else _pred(rng)
    return ops.single_or_default(p, default), rxo.single_or_default(p, default)


def _find_pred(rng: random.Random) -> Callable[..., Any]:
    t = rng.randint(0, 12)
    return raising_at(rng, lambda x, i, source: x == t or i > 40)


@register("find", none_is_nothing=True)
def _find(rng: random.Random) -> Pair:
    p = _find_pred(rng)
    return ops.find(p), rxo.find(p)


@register("find_index")
def _find_index(rng: random.Random) -> Pair:
    p = _find_pred(rng)
    return ops.find_index(p), rxo.find_index(p)


@register("take_last")
def _take_last(rng: random.Random) -> Pair:
    n = rng.choice((0, 1, 2, 5, 60))
    return ops.take_last(n), rxo.take_last(n)


@register("take_last_buffer")
def _take_last_buffer(rng: random.Random) -> Pair:
    n = rng.choice((0, 1, 2, 5, 60))
    return ops.take_last_buffer(n), rxo.take_last_buffer(n)


@register("last_or_default", none_is_nothing=True)
def _last_or_default(rng: random.Random) -> Pair:
    default = rng.choice((None, -1, 42))
    p = None if rng.random() < 0.3 else _pred(rng)
    return ops.last_or_default(default, p), rxo.last_or_default(default, p)


@register("ignore_elements")
def _ignore_elements(rng: random.Random) -> Pair:
    return ops.ignore_elements(), rxo.ignore_elements()


@register("fork_join")
def _fork_join(rng: random.Random) -> Pair:
    others = [tuple(rng.randint(0, 9) for _ in range(rng.choice((0, 1, 3)))) for _ in range(rng.randint(1, 2))]
    return ops.fork_join(*(rx.just(*o) for o in others)), rxo.fork_join(*(now(*o) for o in others))


# -- against reactivex, 100 seeded inputs each ---------------------------------------------------------
@pytest.mark.parametrize("name", FAMILY)
def test_equal_to_reactivex_on_100_seeded_cold_inputs(name: str) -> None:
    assert check_sync(name) >= 100


# -- demand: random request(n) patterns, never UNBOUNDED upstream ------------------------------------------
@pytest.mark.parametrize("name", sorted(set(FAMILY) - {"to_future", "fork_join"}))
def test_random_demand_never_requests_unbounded_never_stalls_and_gives_reactivex_values(name: str) -> None:
    check_demand(name, never_unbounded=True)


# -- the demand rule, exactly --------------------------------------------------------------------------------
WHOLE: dict[str, Callable[[], Any]] = {
    "all": lambda: ops.all(lambda x: True), "some": lambda: ops.some(lambda x: False),
    "contains": lambda: ops.contains(-1), "is_empty": lambda: ops.is_empty(),
    "sequence_equal": lambda: ops.sequence_equal(rx.range(0, 10_000)), "sum": lambda: ops.sum(),
    "average": lambda: ops.average(), "min": lambda: ops.min(), "max": lambda: ops.max(),
    "min_by": lambda: ops.min_by(lambda x: x), "max_by": lambda: ops.max_by(lambda x: x),
    "to_dict": lambda: ops.to_dict(lambda x: x), "to_set": lambda: ops.to_set(), "single": lambda: ops.single(),
    "single_or_default": lambda: ops.single_or_default(), "find": lambda: ops.find(lambda x, i, s: False),
    "find_index": lambda: ops.find_index(lambda x, i, s: False), "take_last": lambda: ops.take_last(3),
    "take_last_buffer": lambda: ops.take_last_buffer(3), "ignore_elements": lambda: ops.ignore_elements(),
}
@pytest.mark.parametrize("name", sorted(WHOLE))
def test_nothing_before_downstream_asks_then_rounds_of_at_most_256(name: str) -> None:
    pub, ts = subscribe(WHOLE[name]())
    assert pub.requests == []
    ts.request(1)
    assert pub.requests == [256]
    item = 0 if name not in ("sequence_equal",) else None
    for k in range(1000):
        if pub.cancelled or ts.done:
            break
        pub.emit(item if item is not None else k)
        assert 0 < pub.outstanding <= 256 or pub.cancelled
    assert UNBOUNDED not in pub.requests and max(pub.requests) == 256
    assert all(n == 192 for n in pub.requests[1:])  # 256 - 256 // 4: the §2 replenish rule


def test_a_larger_window_is_a_choice_and_unbounded_is_refused() -> None:
    pub, ts = subscribe(ops.sum(prefetch=1000), 1)
    assert pub.requests == [1000]
    with pytest.raises(ValueError, match="never requests UNBOUNDED"):
        ops.sum(prefetch=UNBOUNDED)


@pytest.mark.parametrize("op, items, answer", [
    (lambda: ops.all(lambda x: x < 3), [1, 5], False), (lambda: ops.some(lambda x: x > 3), [1, 5], True),
    (lambda: ops.contains(5), [1, 5], True), (lambda: ops.is_empty(), [1], False),
    (lambda: ops.find(lambda x, i, s: x == 5), [1, 5], 5), (lambda: ops.find_index(lambda x, i, s: x == 5), [1, 5], 1),
    (lambda: ops.sequence_equal([1, 2]), [1, 7], False),
], ids=["all", "some", "contains", "is_empty", "find", "find_index", "sequence_equal"])
def test_short_circuiting_ones_cancel_upstream_once_decided(op: Callable[[], Any], items: list[int],
                                                             answer: Any) -> None:
    pub, ts = subscribe(op(), 1)
    pub.emit(*items)
    assert ts.values == [answer] and ts.completed and pub.cancelled


def test_sequence_equal_cancels_second_once_decided_and_keeps_each_side_within_its_window() -> None:
    pub, second = TestPublisher[int](), TestPublisher[int]()
    ts = TestSubscriber[bool](initial_request=1)
    pub.pipe(ops.sequence_equal(second, prefetch=8)).subscribe(ts)
    assert second.requests == [8] and pub.requests == [8]
    pub.emit(*range(8))  # the other side is silent: the source's items wait, its window is full
    assert pub.outstanding == 0 and len(pub.requests) == 1
    second.emit(0, 1, 2, 3, 4, 5)  # six pairs equal: their credit comes back on both sides
    assert pub.requests[1:] and second.requests[1:]
    second.emit(99)  # 6 vs 99
    assert ts.values == [False] and ts.completed and second.cancelled and pub.cancelled


def test_single_fails_at_the_second_item_and_cancels_upstream() -> None:
    pub, ts = subscribe(ops.single(), 1)
    pub.emit(1)
    assert not ts.done
    pub.emit(2)
    assert isinstance(ts.error, SequenceContainsMoreThanOneElementError) and pub.cancelled
    assert str(ts.error) == "Sequence contains more than one element"


def test_take_last_holds_count_items_and_emits_them_on_demand() -> None:
    pub, ts = subscribe(ops.take_last(3), 1)
    pub.emit(*range(10)).complete()
    assert ts.values == [7] and not ts.done
    ts.request(5)
    assert ts.values == [7, 8, 9] and ts.completed


def test_take_last_holds_more_than_max_held_when_its_count_says_so() -> None:
    ts = TestSubscriber[int](initial_request=UNBOUNDED)
    rx.range(0, 6000).pipe(ops.take_last(5000)).subscribe(ts)
    assert ts.values == list(range(1000, 6000)) and ts.completed


def test_average_and_max_of_an_empty_stream_signal_no_elements() -> None:
    for op in (ops.average(), ops.max(), ops.min(), ops.single()):
        pub, ts = subscribe(op, 1)
        pub.complete()
        assert isinstance(ts.error, SequenceContainsNoElementsError)


def test_find_without_a_match_completes_empty_where_reactivex_emits_none() -> None:
    pub, ts = subscribe(ops.find(lambda x, i, s: False), 1)
    pub.emit(1).complete()
    assert ts.values == [] and ts.completed
    seen: list[Any] = []
    reactivex.of(1).pipe(rxo.find(lambda x, i, s: False)).subscribe(seen.append)
    assert seen == [None]


def test_find_gives_the_predicate_the_upstream_flowable() -> None:
    got: list[Any] = []
    source = rx.just("a", "b")
    ts = TestSubscriber[Any](initial_request=UNBOUNDED)
    source.pipe(ops.find(lambda x, i, s: got.append((x, i, s)) or x == "b")).subscribe(ts)
    assert got == [("a", 0, source), ("b", 1, source)] and ts.values == ["b"]


# -- to_future ----------------------------------------------------------------------------------------------
def test_to_future_returns_a_future_of_the_last_item_reading_in_rounds() -> None:
    async def main() -> None:
        pub = TestPublisher[int]()
        future = pub.pipe(ops.map(lambda x: x * 2), ops.to_future())
        assert isinstance(future, asyncio.Future) and not future.done()
        assert pub.requests == [256]
        pub.emit(1, 2, 3).complete()
        assert await future == 6
    run_virtual(main())


def test_to_future_of_an_empty_stream_and_of_an_error() -> None:
    async def main() -> None:
        with pytest.raises(SequenceContainsNoElementsError):
            await rx.empty().pipe(ops.to_future())
        failure = RuntimeError("x")
        with pytest.raises(RuntimeError) as caught:
            await rx.error(failure).pipe(ops.to_future())
        assert caught.value is failure
    run_virtual(main())


def test_cancelling_the_future_cancels_the_stream() -> None:
    async def main() -> None:
        pub = TestPublisher[int]()
        future = pub.pipe(ops.to_future())
        future.cancel()
        await asyncio.sleep(0)
        assert pub.cancelled
    run_virtual(main())


def test_to_future_needs_a_loop_or_a_future_ctor() -> None:
    with pytest.raises(RuntimeError, match="running event loop"):
        rx.just(1).pipe(ops.to_future())
    import concurrent.futures
    future = rx.just(1, 2).pipe(ops.to_future(concurrent.futures.Future))
    assert future.result(timeout=1) == 2


def test_to_future_ends_the_pipe_nothing_may_follow() -> None:
    import concurrent.futures

    with pytest.raises(TypeError, match="not a Flowable"):
        rx.just(1).pipe(ops.to_future(concurrent.futures.Future), ops.map(str))


# -- cancel reaches every upstream --------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(WHOLE))
def test_cancel_reaches_the_upstream(name: str) -> None:
    pub, ts = subscribe(WHOLE[name](), 1)
    pub.emit(0)
    ts.cancel()
    assert pub.cancelled


def test_fork_join_and_sequence_equal_cancel_reaches_every_source() -> None:
    a, b, c = TestPublisher[int](), TestPublisher[int](), TestPublisher[int]()
    ts = TestSubscriber[Any](initial_request=1)
    a.pipe(ops.fork_join(b, c)).subscribe(ts)
    ts.cancel()
    assert a.cancelled and b.cancelled and c.cancelled
    a, b = TestPublisher[int](), TestPublisher[int]()
    ts = TestSubscriber[Any](initial_request=1)
    a.pipe(ops.sequence_equal(b)).subscribe(ts)
    ts.cancel()
    assert a.cancelled and b.cancelled


def test_every_name_of_the_family_is_compared() -> None:
    assert set(FAMILY) <= set(SYNC)
