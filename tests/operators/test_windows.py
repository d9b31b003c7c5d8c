"""The third round's buffers and windows (DESIGN §3): ``buffer_with_count``, ``buffer_with_time``,
``buffer_with_time_or_count``, ``buffer(boundaries)``, ``buffer_when``, ``buffer_toggle``,
``window``, ``window_with_count``, ``window_with_time``, ``window_with_time_or_count``,
``window_when``, ``window_toggle``, ``group_by_until``, ``group_join``, ``partition``,
``partition_indexed``.

Each against reactivex 6.1 on 100 seeded inputs (windows through ``flat_map(to_list())`` on both
sides; the timed ones on virtual time); the family's demand rule: ``request(n)`` lists asks up to
``n * count`` upstream, a window's own subscriber's demand governs what flows into it, the
upstream is cancelled only once every window is disposed (Reactor ``FluxWindow``); cancel
reaching every upstream and stream.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any, Callable

import pytest
import reactivex
import reactivex.operators as rxo

import rxpipe as rx
from rxpipe import UNBOUNDED, ArgumentOutOfRangeError, ProtocolViolationError, TooManyGroupsError
from rxpipe import operators as ops
from rxpipe.testing import TestPublisher, TestSubscriber, run_virtual

from .differential import reactivex_timeline, rxpipe_timeline, timeline
from .hand_driven import subscribe
from .test_one_to_one import UserError
from .test_time import INTERVALS_S
from .vocab import SYNC, TIMED, Pair, check_demand, check_sync, check_timed, register, register_timed

FAMILY = ("buffer", "buffer_with_count", "buffer_with_time", "buffer_with_time_or_count", "buffer_when",
          "buffer_toggle", "window", "window_with_count", "window_with_time", "window_with_time_or_count",
          "window_when", "window_toggle", "group_by_until", "group_join", "partition", "partition_indexed")


def lists() -> Any:
    """Each window as one list, in the order the windows complete (flat_map of to_list)."""
    return ops.flat_map(lambda w: w.pipe(ops.to_list()), max_concurrency=64)


def rx_lists() -> Any:
    return rxo.flat_map(lambda w: w.pipe(rxo.to_list()))


# -- by count, synchronous ------------------------------------------------------------------------------------
def _count_skip(rng: random.Random) -> tuple[int, int | None]:
    count = rng.choice((1, 2, 3, 5))
    return count, rng.choice((None, 1, 2, count + 2))


@register("buffer_with_count")
def _buffer_with_count(rng: random.Random) -> Pair:
    count, skip = _count_skip(rng)
    return ops.buffer_with_count(count, skip), rxo.buffer_with_count(count, skip)


@register("window_with_count")
def _window_with_count(rng: random.Random) -> Pair:
    count, skip = _count_skip(rng)
    return (rx.pipe(ops.window_with_count(count, skip), lists()),
            reactivex.compose(rxo.window_with_count(count, skip), rx_lists()))


# -- by time --------------------------------------------------------------------------------------------------
def _span(rng: random.Random) -> float:
    # periodic ticks: no multiple of these (nor of the shifts) falls on an item's instant before
    # the inputs end (the items' times are multiples of 0.1 s); see differential.timeline on ties
    return rng.choice(INTERVALS_S)


SHIFTS_S = (0.2221, 2.1199)


@register_timed("buffer_with_time")
def _buffer_with_time(rng: random.Random) -> Pair:
    span = _span(rng)
    shift = rng.choice((None, span, *SHIFTS_S))
    return ops.buffer_with_time(span, shift), rxo.buffer_with_time(span, shift)


@register_timed("window_with_time")
def _window_with_time(rng: random.Random) -> Pair:
    span = _span(rng)
    shift = rng.choice((None, span, *SHIFTS_S))
    return (rx.pipe(ops.window_with_time(span, shift), lists()),
            reactivex.compose(rxo.window_with_time(span, shift), rx_lists()))


@register_timed("buffer_with_time_or_count")
def _buffer_with_time_or_count(rng: random.Random) -> Pair:
    span, count = _span(rng), rng.choice((1, 2, 3, 5))
    return ops.buffer_with_time_or_count(span, count), rxo.buffer_with_time_or_count(span, count)


@register_timed("window_with_time_or_count")
def _window_with_time_or_count(rng: random.Random) -> Pair:
    span, count = _span(rng), rng.choice((1, 2, 3, 5))
    return (rx.pipe(ops.window_with_time_or_count(span, count), lists()),
            reactivex.compose(rxo.window_with_time_or_count(span, count), rx_lists()))


# -- by other streams -----------------------------------------------------------------------------------------
def _ticks(rng: random.Random, error_rate: float = 0.1) -> Any:
    return timeline(rng, ["t"] * rng.randint(0, 6), step_s=0.2371, error_rate=error_rate)


@register_timed("buffer")
def _buffer(rng: random.Random) -> Pair:
    line = _ticks(rng)
    return ops.buffer(rxpipe_timeline(line)), rxo.buffer(reactivex_timeline(line))


@register_timed("window")
def _window(rng: random.Random) -> Pair:
    line = _ticks(rng)
    return (rx.pipe(ops.window(rxpipe_timeline(line)), lists()),
            reactivex.compose(rxo.window(reactivex_timeline(line)), rx_lists()))


def _closings(rng: random.Random) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """A closing stream per call: one item (or none: its completion closes) after a drawn time;
    the k-th call's stream is the same on both sides (one counter per side)."""
    lines = [timeline(rng, ["c"] * rng.randint(0, 1), step_s=rng.choice((0.1371, 0.3371, 0.6371)), shift_s=0.0007 * k)
             for k in range(64)]

    def make(play: Callable[[Any], Any]) -> Callable[..., Any]:
        calls = iter(range(10**6))
        return lambda *args: play(lines[next(calls) % 64])

    return make(rxpipe_timeline), make(reactivex_timeline)


@register_timed("buffer_when")
def _buffer_when(rng: random.Random) -> Pair:
    ours, theirs = _closings(rng)
    return ops.buffer_when(ours), rxo.buffer_when(theirs)


@register_timed("window_when")
def _window_when(rng: random.Random) -> Pair:
    ours, theirs = _closings(rng)
    return rx.pipe(ops.window_when(ours), lists()), reactivex.compose(rxo.window_when(theirs), rx_lists())


@register_timed("buffer_toggle")
def _buffer_toggle(rng: random.Random) -> Pair:
    openings = _ticks(rng, 0.0)
    ours, theirs = _closings(rng)
    return ops.buffer_toggle(rxpipe_timeline(openings), ours), rxo.buffer_toggle(reactivex_timeline(openings), theirs)


@register_timed("window_toggle")
def _window_toggle(rng: random.Random) -> Pair:
    openings = _ticks(rng, 0.0)
    ours, theirs = _closings(rng)
    return (rx.pipe(ops.window_toggle(rxpipe_timeline(openings), ours), lists()),
            reactivex.compose(rxo.window_toggle(reactivex_timeline(openings), theirs), rx_lists()))


@register_timed("group_by_until")
def _group_by_until(rng: random.Random) -> Pair:
    k, seconds = rng.choice((2, 3)), rng.choice((0.3371, 0.8371, 2.5371))
    element = rng.choice((None, lambda x: x * 10))

    # each key's duration apart (two timers due on one instant fire in no defined order: see
    # differential.timeline on ties)
    def ours(s: Any) -> Any:
        return s.pipe(ops.group_by_until(lambda x: x % k, element, lambda g: rx.timer(seconds + g.key * 0.0011)),
                      ops.flat_map(lambda g: g.pipe(ops.to_list(), ops.map(lambda v: (g.key, v))), max_concurrency=64))

    def theirs(s: Any) -> Any:
        return s.pipe(rxo.group_by_until(lambda x: x % k, element,
                                         lambda g: reactivex.timer(seconds + g.key * 0.0011)),
                      rxo.flat_map(lambda g: g.pipe(rxo.to_list(), rxo.map(lambda v: (g.key, v)))))

    return ours, theirs


@register_timed("group_join")
def _group_join(rng: random.Random) -> Pair:
    right = timeline(rng, list(range(rng.randint(0, 6))), step_s=0.1771, error_rate=0.1)
    left_s, right_s = rng.choice((0.0137, 0.4137, 1.2137)), rng.choice((0.0171, 0.3171, 2.1171))

    def ours(s: Any) -> Any:
        return s.pipe(ops.group_join(rxpipe_timeline(right), lambda x: rx.timer(left_s + x * 0.0011),
                                     lambda x: rx.timer(right_s + x * 0.0013)),
                      ops.flat_map(lambda pair: pair[1].pipe(ops.to_list(), ops.map(lambda v: (pair[0], v))),
                                   max_concurrency=64))

    def theirs(s: Any) -> Any:
        return s.pipe(rxo.group_join(reactivex_timeline(right), lambda x: reactivex.timer(left_s + x * 0.0011),
                                     lambda x: reactivex.timer(right_s + x * 0.0013)),
                      rxo.flat_map(lambda pair: pair[1].pipe(rxo.to_list(), rxo.map(lambda v: (pair[0], v)))))

    return ours, theirs


@register("partition")
def _partition(rng: random.Random) -> Pair:
    t = rng.randint(0, 9)
    return _both(lambda s: s.pipe(ops.partition(lambda x: x > t)), lambda s: s.pipe(rxo.partition(lambda x: x > t)))


@register("partition_indexed")
def _partition_indexed(rng: random.Random) -> Pair:
    m = rng.randint(2, 3)
    return _both(lambda s: s.pipe(ops.partition_indexed(lambda x, i: (x + i) % m == 0)),
                 lambda s: s.pipe(rxo.partition_indexed(lambda x, i: (x + i) % m == 0)))


def _both(ours: Callable[[Any], Any], theirs: Callable[[Any], Any]) -> Pair:
    """The two partitions as one stream of ("holds", x) / ("fails", x) lists, one list per side
    (collected to the end, so the interleaving is not compared: reactivex runs a cold source
    once per side)."""
    def ours_build(s: Any) -> Any:
        holds, fails = ours(s)
        return rx.zip(holds.pipe(ops.to_list()), fails.pipe(ops.to_list()))

    def theirs_build(s: Any) -> Any:
        holds, fails = theirs(s)
        return reactivex.zip(holds.pipe(rxo.to_list()), fails.pipe(rxo.to_list()))

    return ours_build, theirs_build


# -- against reactivex, 100 seeded inputs each ------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(n for n in FAMILY if n in SYNC))
def test_equal_to_reactivex_on_100_seeded_cold_inputs(name: str) -> None:
    assert check_sync(name) >= 100


@pytest.mark.parametrize("name", sorted(n for n in FAMILY if n in TIMED))
def test_timed_equal_to_reactivex_on_100_seeded_inputs(name: str) -> None:
    assert check_timed(name) >= 100


def test_every_name_of_the_family_is_compared() -> None:
    assert set(FAMILY) <= set(SYNC) | set(TIMED)


@pytest.mark.parametrize("name", ["buffer_with_count", "window_with_count"])
def test_random_demand_is_never_exceeded_never_stalls_and_gives_reactivex_values(name: str) -> None:
    check_demand(name)


# -- buffers: request(n) lists -> up to n * count upstream ---------------------------------------------------
def test_buffer_with_count_asks_n_times_count_items_for_n_lists() -> None:
    pub, ts = subscribe(ops.buffer_with_count(100), 3)
    assert pub.requests == [300]
    pub.emit(*range(300))
    assert [len(x) for x in ts.values] == [100, 100, 100] and pub.outstanding == 0
    ts.request(UNBOUNDED)
    assert pub.requests == [300, UNBOUNDED]  # n * count, capped at UNBOUNDED


def test_buffer_with_count_overlapping_asks_within_n_times_count() -> None:
    pub, ts = subscribe(ops.buffer_with_count(3, 1), 1)
    assert pub.requests == [3]
    pub.emit(1, 2, 3)
    assert ts.values == [[1, 2, 3]]
    ts.request(1)
    assert sum(pub.requests) == 4 and pub.outstanding == 1  # one new item makes the next list
    pub.emit(4)
    assert ts.values[-1] == [2, 3, 4]


def test_a_bad_count_is_reactivexs_argument_out_of_range() -> None:
    for op in (lambda: ops.buffer_with_count(0), lambda: ops.window_with_count(2, 0)):
        with pytest.raises(ArgumentOutOfRangeError):
            op()


def test_buffer_with_time_skips_a_closing_tick_without_demand_and_stays_within_its_window() -> None:
    async def main() -> None:
        pub, ts = subscribe(ops.buffer_with_time(1.0, prefetch=8))
        assert pub.requests == [8]
        pub.emit(1, 2)
        await asyncio.sleep(2.5)  # two ticks, no demand: the list stays open
        assert ts.values == []
        pub.emit(*range(3, 9))
        assert pub.outstanding == 0  # 8 items held: the source waits
        ts.request(1)
        await asyncio.sleep(0.6)
        assert ts.values == [[1, 2, 3, 4, 5, 6, 7, 8]]
        assert pub.outstanding > 0  # the list went out: credit again
        ts.cancel()
        assert pub.cancelled
    run_virtual(main())


def test_buffer_boundaries_asks_the_boundaries_what_downstream_wants() -> None:
    pub, boundaries = TestPublisher[int](), TestPublisher[str]()
    ts = TestSubscriber[Any](initial_request=2)
    pub.pipe(ops.buffer(boundaries)).subscribe(ts)
    assert boundaries.requests == [2]
    pub.emit(1, 2)
    boundaries.emit("|")
    pub.emit(3)
    boundaries.emit("|")
    assert ts.values == [[1, 2], [3]] and boundaries.outstanding == 0
    ts.cancel()
    assert pub.cancelled and boundaries.cancelled


def test_buffer_keeps_its_capacity_meaning_and_takes_boundaries_by_type() -> None:
    with pytest.raises(TypeError, match="takes no overflow"):
        ops.buffer(rx.never(), "drop_oldest")
    ts = TestSubscriber[int](initial_request=UNBOUNDED)
    rx.range(0, 5).pipe(ops.buffer(2)).subscribe(ts)
    assert ts.values == [0, 1, 2, 3, 4]


# -- windows: a window's own demand, upstream cancelled once every window is disposed ---------------------------
def test_a_windows_subscriber_governs_what_flows_into_it_and_the_credit_bounds_the_upstream() -> None:
    pub = TestPublisher[int]()
    main = TestSubscriber[Any](initial_request=UNBOUNDED)
    pub.pipe(ops.window_with_count(100, prefetch=8)).subscribe(main)
    window = main.values[0]
    inside = TestSubscriber[int](initial_request=2)
    window.subscribe(inside)
    assert pub.requests == [8]
    pub.emit(*range(8))
    # 6 wait in the window: with the 2 asked again, the window of 8 is used up
    assert inside.values == [0, 1] and pub.outstanding == 2 and sum(pub.requests) == 10
    pub.emit(8, 9)
    assert pub.outstanding == 0 and sum(pub.requests) == 10  # 8 wait: no credit left
    inside.request(6)
    assert inside.values == list(range(8)) and sum(pub.requests) == 16  # what left gave credit back


def test_the_upstream_lives_while_a_window_is_open_after_the_main_stream_cancelled() -> None:
    pub = TestPublisher[int]()
    main = TestSubscriber[Any](initial_request=1)
    pub.pipe(ops.window_with_count(3)).subscribe(main)
    window = main.values[0]
    inside = TestSubscriber[int](initial_request=UNBOUNDED)
    window.subscribe(inside)
    main.cancel()
    assert not pub.cancelled  # the window is still open
    pub.emit(1, 2, 3)  # the window is full: it completes; the next would open, but the main stream is gone
    assert inside.values == [1, 2, 3] and inside.completed
    assert pub.cancelled


def test_disposing_the_last_window_cancels_the_upstream() -> None:
    pub = TestPublisher[int]()
    main = TestSubscriber[Any](initial_request=1)
    pub.pipe(ops.window_with_count(10)).subscribe(main)
    inside = TestSubscriber[int](initial_request=1)
    main.values[0].subscribe(inside)
    main.cancel()
    pub.emit(1)
    assert not pub.cancelled
    inside.cancel()
    assert pub.cancelled


def test_a_window_is_unicast() -> None:
    pub = TestPublisher[int]()
    main = TestSubscriber[Any](initial_request=1)
    pub.pipe(ops.window_with_count(2)).subscribe(main)
    first, second = TestSubscriber[int](), TestSubscriber[int]()
    main.values[0].subscribe(first)
    main.values[0].subscribe(second)
    assert isinstance(second.error, ProtocolViolationError)


def test_windows_open_only_as_the_main_stream_asks() -> None:
    async def main() -> None:
        pub = TestPublisher[int]()
        ts = TestSubscriber[Any](initial_request=1)
        pub.pipe(ops.window_with_time(1.0)).subscribe(ts)
        await asyncio.sleep(5.5)  # five ticks without demand for a second window
        assert len(ts.values) == 1
        ts.request(2)
        await asyncio.sleep(2.0)
        assert len(ts.values) == 3
        ts.cancel()
        for window in ts.values:
            window.dispose()
        await asyncio.sleep(0)
        assert pub.cancelled
    run_virtual(main())


def test_group_by_until_bounds_its_open_groups() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[Any](initial_request=UNBOUNDED)
    pub.pipe(ops.group_by_until(lambda x: x, None, lambda g: rx.never(), max_groups=2)).subscribe(ts)
    pub.emit(1, 2, 3)
    assert isinstance(ts.error, TooManyGroupsError) and pub.cancelled
    with pytest.raises(TypeError, match="subject_mapper"):
        ops.group_by_until(lambda x: x, None, lambda g: rx.never(), lambda: None)


def test_partition_unpacks_into_two_and_the_slowest_governs() -> None:
    pub = TestPublisher[int]()
    holds, fails = pub.pipe(ops.partition(lambda x: x % 2 == 0))
    a, b = TestSubscriber[int](initial_request=5), TestSubscriber[int](initial_request=1)
    holds.subscribe(a)
    fails.subscribe(b)
    assert pub.requests == [1]
    pub.emit(2)  # holds takes it; fails drops it and asks one more
    assert a.values == [2] and pub.requests[-1] == 1
    pub.emit(1)
    assert b.values == [1]
    pub.complete()
    assert a.completed and b.completed
    whole = TestSubscriber[int]()
    TestPublisher[int]().pipe(ops.partition(bool)).subscribe(whole)
    assert isinstance(whole.error, TypeError) and "subscribe to the two" in str(whole.error)


def test_partition_calls_the_predicate_once_per_item_and_a_raise_fails_both() -> None:
    calls: list[int] = []

    def even(x: int) -> bool:
        calls.append(x)
        if x == 3:
            raise UserError("three")
        return x % 2 == 0

    holds, fails = rx.just(1, 2, 3, 4).pipe(ops.partition(even))
    a, b = TestSubscriber[int](initial_request=UNBOUNDED), TestSubscriber[int](initial_request=UNBOUNDED)
    holds.subscribe(a)
    fails.subscribe(b)
    assert calls == [1, 2, 3] and isinstance(a.error, UserError) and isinstance(b.error, UserError)


# -- cancel reaches every upstream and stream ---------------------------------------------------------------------
@pytest.mark.parametrize("op", [
    lambda o: ops.buffer(o), lambda o: ops.buffer_toggle(o, lambda x: rx.never()),
    lambda o: ops.window(o), lambda o: ops.window_toggle(o, lambda x: rx.never()),
    lambda o: ops.group_join(o, lambda x: rx.never(), lambda x: rx.never()),
], ids=["buffer(boundaries)", "buffer_toggle", "window", "window_toggle", "group_join"])
def test_cancel_reaches_both_sources(op: Callable[[Any], Any]) -> None:
    pub, other = TestPublisher[int](), TestPublisher[int]()
    ts = TestSubscriber[Any](initial_request=1)
    pub.pipe(op(other)).subscribe(ts)
    ts.cancel()
    for item in ts.values:  # windows the main stream got: disposed, so nothing keeps the upstream
        window = item[1] if isinstance(item, tuple) else item
        if isinstance(window, ops.Window):
            window.dispose()
    assert pub.cancelled and other.cancelled


@pytest.mark.parametrize("op", [
    lambda: ops.buffer_with_count(2), lambda: ops.buffer_with_time(1.0), lambda: ops.buffer_with_time_or_count(1.0, 2),
    lambda: ops.buffer_when(lambda: rx.never()), lambda: ops.window_with_count(2), lambda: ops.window_with_time(1.0),
    lambda: ops.window_with_time_or_count(1.0, 2), lambda: ops.window_when(lambda: rx.never()),
    lambda: ops.group_by_until(lambda x: x, None, lambda g: rx.never()),
], ids=["buffer_with_count", "buffer_with_time", "buffer_with_time_or_count", "buffer_when", "window_with_count",
        "window_with_time", "window_with_time_or_count", "window_when", "group_by_until"])
def test_cancel_reaches_the_upstream(op: Callable[[], Any]) -> None:
    async def main() -> None:
        pub, ts = subscribe(op(), 1)
        pub.emit(1)
        ts.cancel()
        for item in ts.values:
            if isinstance(item, ops.Window):
                item.dispose()
        await asyncio.sleep(0)
        assert pub.cancelled
    run_virtual(main())
