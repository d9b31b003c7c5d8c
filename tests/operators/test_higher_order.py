"""The third round's higher-order operators (DESIGN §3): ``merge(max_concurrent=)``,
``merge_all``, ``concat_all``, ``switch_latest``, ``flat_map_indexed``, ``flat_map_latest``,
``switch_map_indexed``, ``expand``, ``amb``, ``zip_latest``, ``zip_with_iterable``,
``zip_with_list``, ``join``, ``on_error_resume_next``, ``repeat``, ``do_while``, ``while_do``,
``exclusive``.

Each against reactivex 6.1 on 100 seeded inputs: synchronous inner streams (``differential.now``
on reactivex's side, ``rx.just`` on ours), and on virtual time with timed inner streams and
other sources (``differential.timeline``); the family's demand rule (bounded inners, per-inner
windows, ``expand``'s bounded FIFO) by exact requests; cancel reaching every upstream and inner.
"""

from __future__ import annotations

import random
from typing import Any, Callable

import pytest
import reactivex
import reactivex.operators as rxo

import rxpipe as rx
from rxpipe import UNBOUNDED, BufferOverflowError
from rxpipe import operators as ops
from rxpipe.testing import TestPublisher, TestSubscriber, run_virtual

from .differential import Timeline, now, now_error, reactivex_timeline, rxpipe_timeline, timeline
from .test_one_to_one import UserError
from .vocab import SYNC, TIMED, Pair, check_demand, check_sync, check_timed, register, register_timed

FAMILY = ("merge", "merge_all", "concat_all", "switch_latest", "flat_map_indexed", "flat_map_latest",
          "switch_map_indexed", "expand", "amb", "zip_latest", "zip_with_iterable", "zip_with_list", "join",
          "on_error_resume_next", "repeat", "do_while", "while_do", "exclusive")


def _inner_items(rng: random.Random) -> Callable[[int], tuple[int, ...]]:
    width = rng.randint(0, 2)
    return lambda x: tuple(x * 10 + k for k in range(width + x % 2))


def _inners(rng: random.Random) -> tuple[Callable[[int], Any], Callable[[int], Any]]:
    """item -> a synchronous inner stream on each side (sometimes one that fails)."""
    items, bad = _inner_items(rng), rng.choice((None, 3))

    def ours(x: int) -> Any:
        return rx.error(UserError(f"inner {x}")) if x == bad else rx.just(*items(x))

    def theirs(x: int) -> Any:
        return now_error(UserError(f"inner {x}")) if x == bad else now(*items(x))

    return ours, theirs


def _timed_inners(rng: random.Random, error_rate: float = 0.15) -> tuple[Callable[[int], Any], Callable[[int], Any]]:
    """item -> a timed inner stream on each side, one timeline per value (shifted apart, so no two
    inner events fall on one instant)."""
    lines = {x: timeline(rng, [x * 10 + k for k in range(rng.randint(0, 3))], error_rate=error_rate,
                         shift_s=x * 0.0013) for x in range(10)}
    return (lambda x: rxpipe_timeline(lines[x])), (lambda x: reactivex_timeline(lines[x]))


# -- merge(max_concurrent=), merge_all, concat_all, switch_latest, exclusive ------------------------------
@register_timed("merge")
def _merge(rng: random.Random) -> Pair:
    ours, theirs = _timed_inners(rng)
    n = rng.choice((1, 2, 3))
    # the timed source emits at its times whatever was asked: a buffer holds the streams waiting
    # for a slot, as reactivex's own queue of them does (rxpipe's merge asks for a stream per slot)
    return (rx.pipe(ops.map(ours), ops.buffer(64), ops.merge(max_concurrent=n)),
            reactivex.compose(rxo.map(theirs), rxo.merge(max_concurrent=n)))


@register_timed("merge_all")
def _merge_all(rng: random.Random) -> Pair:
    ours, theirs = _timed_inners(rng)
    return rx.pipe(ops.map(ours), ops.merge_all()), reactivex.compose(rxo.map(theirs), rxo.merge_all())


@register_timed("concat_all")
def _concat_all(rng: random.Random) -> Pair:
    ours, theirs = _timed_inners(rng)
    # the timed source emits at its times whatever was asked: concat_all reads as far ahead as
    # reactivex's own queue of waiting streams holds (as test_flatten's concat_map)
    return (rx.pipe(ops.map(ours), ops.concat_all(prefetch=64)),
            reactivex.compose(rxo.map(theirs), rxo.concat_all()))


@register_timed("switch_latest")
def _switch_latest(rng: random.Random) -> Pair:
    ours, theirs = _timed_inners(rng)
    return rx.pipe(ops.map(ours), ops.switch_latest()), reactivex.compose(rxo.map(theirs), rxo.switch_latest())


@register_timed("exclusive")
def _exclusive(rng: random.Random) -> Pair:
    ours, theirs = _timed_inners(rng)
    return rx.pipe(ops.map(ours), ops.exclusive()), reactivex.compose(rxo.map(theirs), rxo.exclusive())


# -- the indexed and latest forms ---------------------------------------------------------------------------
@register("flat_map_indexed")
def _flat_map_indexed(rng: random.Random) -> Pair:
    ours, theirs = _inners(rng)
    if rng.random() < 0.2:
        items = tuple(rng.randint(0, 9) for _ in range(rng.randint(0, 2)))
        return ops.flat_map_indexed(rx.just(*items)), rxo.flat_map_indexed(now(*items))
    trigger = rng.choice((None, 1, 4))

    def indexed(inner: Callable[[int], Any]) -> Callable[[int, int], Any]:
        def fn(x: int, i: int) -> Any:
            if i == trigger:
                raise UserError(f"user function at index {i}")
            return inner((x + i) % 10)
        return fn

    return ops.flat_map_indexed(indexed(ours)), rxo.flat_map_indexed(indexed(theirs))


@register_timed("flat_map_latest")
def _flat_map_latest(rng: random.Random) -> Pair:
    ours, theirs = _timed_inners(rng)
    return ops.flat_map_latest(ours), rxo.flat_map_latest(theirs)


@register_timed("switch_map_indexed")
def _switch_map_indexed(rng: random.Random) -> Pair:
    ours, theirs = _timed_inners(rng)
    return (ops.switch_map_indexed(lambda x, i: ours((x + i) % 10)),
            rxo.switch_map_indexed(lambda x, i: theirs((x + i) % 10)))


# -- expand ------------------------------------------------------------------------------------------------
@register("expand")
def _expand(rng: random.Random) -> Pair:
    fan = rng.choice((1, 2))

    def children(x: int) -> tuple[int, ...]:
        return tuple(x // (k + 2) for k in range(fan)) if x > 1 else ()

    # reactivex's expand recurses once per item of a synchronous source: 30 of them at most
    return (rx.pipe(ops.take(30), ops.expand(lambda x: rx.just(*children(x))), ops.take(300)),
            reactivex.compose(rxo.take(30), rxo.expand(lambda x: now(*children(x))), rxo.take(300)))


# -- two sources: amb, zip_latest, join ----------------------------------------------------------------------
def _other(rng: random.Random, error_rate: float = 0.2) -> Timeline:
    return timeline(rng, [chr(97 + k) for k in range(rng.randint(0, 6))], error_rate=error_rate)


@register_timed("amb")
def _amb(rng: random.Random) -> Pair:
    line = timeline(rng, list(range(rng.randint(0, 4))), shift_s=rng.choice((0.0, 0.7, 3.3)), error_rate=0.2)
    return ops.amb(rxpipe_timeline(line)), rxo.amb(reactivex_timeline(line))


@register_timed("zip_latest")
def _zip_latest(rng: random.Random) -> Pair:
    line = _other(rng)
    return ops.zip_latest(rxpipe_timeline(line)), rxo.zip_latest(reactivex_timeline(line))


@register_timed("join")
def _join(rng: random.Random) -> Pair:
    line = _other(rng, 0.1)
    left_s, right_s = rng.choice((0.0137, 0.4137, 1.2137)), rng.choice((0.0171, 0.3171, 2.1171))

    def durations(seconds: float, timer: Callable[[float], Any]) -> Callable[[Any], Any]:
        return lambda item: timer(seconds)

    return (ops.join(rxpipe_timeline(line), durations(left_s, rx.timer), durations(right_s, rx.timer)),
            rxo.join(reactivex_timeline(line), durations(left_s, reactivex.timer),
                     durations(right_s, reactivex.timer)))


@register("zip_with_iterable")
def _zip_with_iterable(rng: random.Random) -> Pair:
    second = [rng.randint(0, 9) for _ in range(rng.choice((0, 1, 5, 300)))]
    return ops.zip_with_iterable(second), rxo.zip_with_iterable(second)


@register("zip_with_list")
def _zip_with_list(rng: random.Random) -> Pair:
    second = tuple(rng.randint(0, 9) for _ in range(rng.choice((0, 1, 5, 300))))
    return ops.zip_with_list(second), rxo.zip_with_list(second)


# -- continuing and repeating ----------------------------------------------------------------------------------
@register("on_error_resume_next")
def _on_error_resume_next(rng: random.Random) -> Pair:
    items = tuple(rng.randint(0, 9) for _ in range(rng.randint(0, 3)))
    if rng.random() < 0.3:
        return ops.on_error_resume_next(rx.error(UserError("second"))), rxo.on_error_resume_next(
            now_error(UserError("second")))
    return ops.on_error_resume_next(rx.just(*items)), rxo.on_error_resume_next(now(*items))


@register("repeat")
def _repeat(rng: random.Random) -> Pair:
    n = rng.choice((0, 1, 2, 3))
    return ops.repeat(n), rxo.repeat(n)


def _runs(rng: random.Random) -> tuple[Callable[[Any], bool], Callable[[Any], bool]]:
    """The same condition twice: true for its first ``k`` calls (one counter per side)."""
    k = rng.randint(0, 3)

    def make() -> Callable[[Any], bool]:
        calls = [0]

        def condition(source: Any) -> bool:
            calls[0] += 1
            return calls[0] <= k
        return condition
    return make(), make()


@register("do_while")
def _do_while(rng: random.Random) -> Pair:
    ours, theirs = _runs(rng)
    return ops.do_while(ours), rxo.do_while(theirs)


@register("while_do")
def _while_do(rng: random.Random) -> Pair:
    ours, theirs = _runs(rng)
    return ops.while_do(ours), rxo.while_do(theirs)


# -- against reactivex, 100 seeded inputs each ---------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(n for n in FAMILY if n in SYNC))
def test_equal_to_reactivex_on_100_seeded_cold_inputs(name: str) -> None:
    assert check_sync(name) >= 100


@pytest.mark.parametrize("name", sorted(n for n in FAMILY if n in TIMED))
def test_timed_equal_to_reactivex_on_100_seeded_inputs(name: str) -> None:
    assert check_timed(name) >= 100


def test_every_name_of_the_family_is_compared() -> None:
    assert set(FAMILY) <= set(SYNC) | set(TIMED)


#: the repeating ones subscribe to their upstream again, which a hand-driven publisher does not
#: replay: their demand is test_repeat_asks_each_run_for_the_outstanding_demand_only's
@pytest.mark.parametrize("name", ["on_error_resume_next", "zip_with_iterable", "zip_with_list"])
def test_random_demand_is_never_exceeded_never_stalls_and_gives_reactivex_values(name: str) -> None:
    check_demand(name)


def test_random_demand_on_flat_map_indexed_and_expand() -> None:
    # with demand, an error of the mapper cuts ahead of items still waiting (flat_map's rule), and
    # expand's levels interleave as demand lets them: the same items, in an order demand may change
    def no_raise(rng: random.Random) -> Pair:
        ours, theirs = _inners(rng)
        return (ops.flat_map_indexed(lambda x, i: ours((x + i) % 10)),
                rxo.flat_map_indexed(lambda x, i: theirs((x + i) % 10)))
    check_demand("flat_map_indexed", make=no_raise)
    check_demand("expand", any_order=True)


# -- the demand rule, exactly -----------------------------------------------------------------------------------
def test_merge_max_concurrent_subscribes_at_most_that_many_inners_with_their_own_window() -> None:
    outer = TestPublisher[Any]()
    inners = [TestPublisher[int]() for _ in range(4)]
    ts = TestSubscriber[int](initial_request=UNBOUNDED)
    outer.pipe(ops.merge(max_concurrent=2, prefetch=8)).subscribe(ts)
    assert outer.requests == [2]
    outer.emit(*inners[:2])
    assert inners[0].requests == [8] and inners[1].requests == [8] and outer.outstanding == 0
    inners[0].complete()
    assert outer.requests == [2, 1]
    outer.emit(inners[2])
    assert inners[2].requests == [8]
    ts.cancel()
    assert outer.cancelled and inners[1].cancelled and inners[2].cancelled


def test_merge_all_is_bounded_by_default_and_merge_max_concurrent_takes_no_other_sources() -> None:
    outer = TestPublisher[Any]()
    outer.pipe(ops.merge_all()).subscribe(TestSubscriber[int](initial_request=UNBOUNDED))
    assert outer.requests == [16]
    with pytest.raises(TypeError, match="takes no other"):
        ops.merge(rx.empty(), max_concurrent=2)


def test_exclusive_requests_the_outer_without_bound_and_counts_a_busy_drop() -> None:
    outer, a, b = TestPublisher[Any](), TestPublisher[int](), TestPublisher[int]()
    ts = TestSubscriber[int](initial_request=3)
    flow = outer.pipe(ops.exclusive())
    flow.subscribe(ts)
    assert outer.requests == [UNBOUNDED]
    outer.emit(a, b)
    assert a.requests == [3] and not b.has_subscribers
    a.emit(1)
    a.complete()
    outer.complete()
    assert ts.values == [1] and ts.completed


def test_expand_is_breadth_first_and_its_fifo_is_bounded() -> None:
    ts = TestSubscriber[int](initial_request=UNBOUNDED)
    rx.just(1).pipe(ops.expand(lambda x: rx.just(x * 2, x * 2 + 1)), ops.take(7)).subscribe(ts)
    assert ts.values == [1, 2, 3, 4, 5, 6, 7] and ts.completed
    ts = TestSubscriber[int](initial_request=UNBOUNDED)
    rx.just(1).pipe(ops.expand(lambda x: rx.just(x, x), max_concurrency=1, max_queued=64)).subscribe(ts)
    assert isinstance(ts.error, BufferOverflowError) and "max_held=64" in str(ts.error)


def test_expand_is_demand_driven() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[int](initial_request=2)
    pub.pipe(ops.expand(lambda x: rx.just(x + 1) if x < 5 else rx.empty())).subscribe(ts)
    assert pub.requests == [2]
    pub.emit(0)
    assert ts.values == [0, 1] and pub.outstanding <= 1
    ts.request(10)
    pub.complete()
    assert ts.values == [0, 1, 2, 3, 4, 5] and ts.completed


def test_repeat_asks_each_run_for_the_outstanding_demand_only() -> None:
    async def main() -> None:
        import asyncio

        subscriptions: list[TestPublisher[int]] = []

        def run() -> TestPublisher[int]:
            pub = TestPublisher[int]()
            subscriptions.append(pub)
            return pub

        ts = TestSubscriber[int](initial_request=5)
        rx.defer(run).pipe(ops.repeat(3)).subscribe(ts)
        subscriptions[0].emit(1, 2).complete()
        await asyncio.sleep(0.001)
        assert subscriptions[1].requests == [3]
        subscriptions[1].emit(3).complete()
        await asyncio.sleep(0.001)
        assert subscriptions[2].requests == [2]
        ts.cancel()
        assert subscriptions[2].cancelled
    run_virtual(main())


def test_join_keeps_each_sides_open_items_within_its_window() -> None:
    left, right = TestPublisher[int](), TestPublisher[str]()
    ts = TestSubscriber[Any](initial_request=UNBOUNDED)
    left.pipe(ops.join(right, lambda x: rx.never(), lambda x: rx.never(), prefetch=4)).subscribe(ts)
    assert left.requests == [4] and right.requests == [4]
    left.emit(1, 2, 3, 4)
    assert left.outstanding == 0 and left.requests == [4]  # four windows open: the left side waits
    right.emit("a")
    assert ts.values == [(1, "a"), (2, "a"), (3, "a"), (4, "a")]
    ts.cancel()
    assert left.cancelled and right.cancelled


def test_zip_latest_counts_what_it_replaces() -> None:
    a, b = TestPublisher[int](), TestPublisher[str]()
    ts = TestSubscriber[Any](initial_request=UNBOUNDED)
    a.pipe(ops.zip_latest(b)).subscribe(ts)
    a.emit(1, 2)
    b.emit("x")
    assert ts.values == [(2, "x")]
    ts.cancel()
    assert a.cancelled and b.cancelled


# -- cancel reaches every upstream and inner ------------------------------------------------------------------
@pytest.mark.parametrize("op", [
    lambda inner: ops.merge_all(), lambda inner: ops.concat_all(), lambda inner: ops.switch_latest(),
    lambda inner: ops.exclusive(), lambda inner: ops.merge(max_concurrent=2),
], ids=["merge_all", "concat_all", "switch_latest", "exclusive", "merge(max_concurrent)"])
def test_cancel_reaches_the_outer_and_the_running_inner(op: Callable[[Any], Any]) -> None:
    outer, inner = TestPublisher[Any](), TestPublisher[int]()
    ts = TestSubscriber[int](initial_request=1)
    outer.pipe(op(inner)).subscribe(ts)
    outer.emit(inner)
    assert inner.has_subscribers
    ts.cancel()
    assert outer.cancelled and inner.cancelled


@pytest.mark.parametrize("op", [
    lambda inner: ops.flat_map_indexed(lambda x, i: inner), lambda inner: ops.flat_map_latest(lambda x: inner),
    lambda inner: ops.switch_map_indexed(lambda x, i: inner), lambda inner: ops.expand(lambda x: inner),
], ids=["flat_map_indexed", "flat_map_latest", "switch_map_indexed", "expand"])
def test_cancel_reaches_the_source_and_the_running_inner(op: Callable[[Any], Any]) -> None:
    pub, inner = TestPublisher[int](), TestPublisher[int]()
    ts = TestSubscriber[int](initial_request=2)
    pub.pipe(op(inner)).subscribe(ts)
    pub.emit(1)
    assert inner.has_subscribers
    ts.cancel()
    assert pub.cancelled and inner.cancelled


@pytest.mark.parametrize("op", [
    lambda other: ops.amb(other), lambda other: ops.zip_latest(other),
    lambda other: ops.join(other, lambda x: rx.never(), lambda x: rx.never()),
], ids=["amb", "zip_latest", "join"])
def test_cancel_reaches_both_sources(op: Callable[[Any], Any]) -> None:
    pub, other = TestPublisher[int](), TestPublisher[int]()
    ts = TestSubscriber[Any](initial_request=1)
    pub.pipe(op(other)).subscribe(ts)
    ts.cancel()
    assert pub.cancelled and other.cancelled


def test_on_error_resume_next_cancel_reaches_the_running_source() -> None:
    pub, other = TestPublisher[int](), TestPublisher[int]()
    ts = TestSubscriber[Any](initial_request=1)
    pub.pipe(ops.on_error_resume_next(other)).subscribe(ts)
    assert not other.has_subscribers
    ts.cancel()
    assert pub.cancelled and not other.has_subscribers
    pub, other = TestPublisher[int](), TestPublisher[int]()
    ts = TestSubscriber[Any](initial_request=3)
    pub.pipe(ops.on_error_resume_next(other)).subscribe(ts)
    pub.emit(1).error(UserError("x"))
    assert other.requests == [2]  # the outstanding demand carries over
    ts.cancel()
    assert other.cancelled


@pytest.mark.parametrize("op", [lambda: ops.repeat(), lambda: ops.do_while(lambda s: True),
                                lambda: ops.while_do(lambda s: True), lambda: ops.zip_with_iterable([1, 2])],
                         ids=["repeat", "do_while", "while_do", "zip_with_iterable"])
def test_cancel_reaches_the_upstream(op: Callable[[], Any]) -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[int](initial_request=1)
    pub.pipe(op()).subscribe(ts)
    ts.cancel()
    assert pub.cancelled
