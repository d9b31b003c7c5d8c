"""debounce, sample, throttle_first, delay: equal to reactivex 6.1 on virtual time under unbounded
demand; lossy ones request UNBOUNDED, hold at most one item and count every drop; delay's delayed
items count against downstream demand; exact times, values, requests and drop counts."""

from __future__ import annotations

import asyncio
import datetime
import random
import zlib
from typing import Any, Callable

import pytest
import reactivex
import reactivex.operators as rxo

import rxpipe as rx
from rxpipe import UNBOUNDED
from rxpipe import operators as ops
from rxpipe.testing import TestPublisher, TestSubscriber, check_operator, run_virtual

from .differential import TimedCase, timed_cases, timed_through_reactivex, timed_through_rxpipe


def inner(ts: TestSubscriber[Any]) -> Any:
    """The stage's run behind the strict boundary wrapping a TestSubscriber (its statistics)."""
    return ts.subscription.upstream  # type: ignore[union-attr]


def stage(op: Any, initial_request: int = 0) -> tuple[TestPublisher[Any], TestSubscriber[Any]]:
    pub = TestPublisher[Any]()
    ts = TestSubscriber[Any](initial_request=initial_request)
    pub.pipe(op).subscribe(ts)
    return pub, ts


class Told:
    """An item that records the reason it was dropped for (``on_discard``)."""

    def __init__(self, name: str, log: list[tuple[str, str]]) -> None:
        self.name, self.log = name, log

    def on_discard(self, reason: str) -> None:
        self.log.append((self.name, reason))

    def __repr__(self) -> str:
        return self.name


# -- differential against reactivex 6.1, on virtual time -----------------------------------------------
# Item times are sums of gaps that are multiples of 0.1 s. Durations that are not multiples of 0.1 s
# keep a timer of the operator from falling on the very instant of an item, where reactivex's order
# is its scheduler's insertion order and rxpipe's is the documented tie rule (tested below).
# throttle_first has no timer: both compare times (reactivex on microsecond datetimes), so its
# windows may end exactly on an item.
NO_TIE_S = (0.05, 0.15, 0.25, 0.45, 0.75, 1.05, 2.35)
INTERVALS_S = (0.3333, 0.4567, 0.7777, 1.2345)

#: name -> (parameters to draw from, rxpipe operator of a parameter, reactivex operator of it)
TIMED: dict[str, tuple[tuple[Any, ...], Callable[[Any], Any], Callable[[Any], Any]]] = {
    "debounce": (NO_TIE_S, ops.debounce, rxo.debounce),
    "throttle_first": ((0.1, 0.3, 0.5, 1.0, *NO_TIE_S), ops.throttle_first, rxo.throttle_first),
    "sample": (INTERVALS_S, ops.sample, rxo.sample),
    "sample_interval_sampler": (INTERVALS_S, lambda p: ops.sample(rx.interval(p)),
                                lambda p: rxo.sample(reactivex.interval(p))),
    "sample_timer_sampler": (((0.1234, 0.3333), (0.05, 0.7777), (1.31, 0.4567)),
                             lambda p: ops.sample(sampler=rx.timer(*p)),
                             lambda p: rxo.sample(reactivex.timer(*p))),
    "delay": ((0.0, 0.1, 0.5, 2.5, *NO_TIE_S), ops.delay, rxo.delay),
}
CASES_PER_OPERATOR = 16
PARAMETERS_PER_CASE = 3


@pytest.mark.parametrize("name", sorted(TIMED))
def test_equal_to_reactivex_on_virtual_time(name: str) -> None:
    params, ours, theirs = TIMED[name]
    rng = random.Random(name)
    compared = 0
    for case in timed_cases(seed=zlib.crc32(name.encode()), count=CASES_PER_OPERATOR):
        for param in rng.sample(params, PARAMETERS_PER_CASE):
            expected = timed_through_reactivex(lambda s, p=param: s.pipe(theirs(p)), case)
            assert timed_through_rxpipe(lambda s, p=param: s.pipe(ours(p)), case) == expected, (case, param)
            compared += 1
    assert compared == CASES_PER_OPERATOR * PARAMETERS_PER_CASE  # 48 per entry, 288 in all


def test_the_differential_cases_cover_the_shapes_that_matter() -> None:
    shapes = [timed_cases(seed=zlib.crc32(name.encode()), count=CASES_PER_OPERATOR) for name in TIMED]
    for cases in shapes:
        assert any(not c.events and c.error is None for c in cases)  # empty
        assert any(c.error is not None and c.events for c in cases)  # items, then an error
        assert any(len(c.events) >= 20 for c in cases)  # long
        assert any(len({t for t, _ in c.events}) < len(c.events) for c in cases)  # a burst at one instant


def test_a_sampler_that_completes_ends_the_stream_where_reactivex_goes_silent() -> None:
    """The one deliberate difference: reactivex keeps the source after its sampler completed,
    never samples again and never completes (here: until its horizon); rxpipe takes the last
    sample and completes, cancelling the source."""
    case = TimedCase(((0.1, 1), (0.2, 2), (0.9, 3), (1.4, 4)), 3.0)
    ours = timed_through_rxpipe(lambda s: s.pipe(ops.sample(rx.timer(0.25))), case)
    theirs = timed_through_reactivex(lambda s: s.pipe(rxo.sample(reactivex.timer(0.25))), case, horizon_s=50.0)
    assert theirs == [(0.25, ("N", 2))]
    assert ours == [(0.25, ("N", 2)), (0.25, ("C",))]


# -- the tie rule: a boundary comes before an item arriving at the same instant --------------------------
@pytest.mark.virtual
async def test_debounce_an_item_at_the_end_of_the_quiet_period_does_not_cancel_it(
        loop: asyncio.AbstractEventLoop) -> None:
    pub, ts = stage(ops.debounce(0.5), UNBOUNDED)
    loop.call_at(0.2, pub.emit, "a")
    loop.call_at(0.7, pub.emit, "b")  # exactly when a's quiet period ends: a goes out first
    await asyncio.sleep(0.7)
    assert ts.values == ["a"]
    await asyncio.sleep(1.0)
    assert ts.values == ["a", "b"]
    assert inner(ts).statistics().dropped == {}
    ts.cancel()


@pytest.mark.virtual
async def test_sample_an_item_at_a_tick_goes_to_the_next_tick(loop: asyncio.AbstractEventLoop) -> None:
    pub, ts = stage(ops.sample(0.5), UNBOUNDED)
    out: list[tuple[float, Any]] = []
    ts_values = ts.values
    loop.call_at(0.2, pub.emit, "a")
    loop.call_at(0.5, pub.emit, "b")  # the tick at 0.5 samples a; b waits for the tick at 1.0
    for _ in range(4):
        await asyncio.sleep(0.25)
        out.append((loop.time(), list(ts_values)))
    assert out == [(0.25, []), (0.5, ["a"]), (0.75, ["a"]), (1.0, ["a", "b"])]
    ts.cancel()


@pytest.mark.virtual
async def test_throttle_first_an_item_at_the_end_of_a_window_opens_the_next(loop: asyncio.AbstractEventLoop) -> None:
    pub, ts = stage(ops.throttle_first(0.5), UNBOUNDED)
    for at, item in ((0.2, "a"), (0.6, "b"), (0.7, "c"), (1.1, "d"), (1.2, "e")):
        loop.call_at(at, pub.emit, item)
    await asyncio.sleep(1.5)
    assert ts.values == ["a", "c", "e"]  # windows [0.2, 0.7), [0.7, 1.2), [1.2, 1.7)
    assert inner(ts).statistics().dropped == {"throttled": 2}
    ts.cancel()


@pytest.mark.parametrize("order", ["timer first", "signal first"])
@pytest.mark.parametrize("signal", ["error", "complete"])
def test_sample_a_tick_comes_before_a_terminal_signal_at_its_instant(order: str, signal: str) -> None:
    """Whichever the loop runs first, the tick at 1.0 samples b; a completion then waits for the
    next tick, an error follows the sampled item."""
    async def main() -> list[tuple[float, Any]]:
        loop = asyncio.get_running_loop()
        pub, ts = stage(ops.sample(1.0), UNBOUNDED)
        seen: list[tuple[float, Any]] = []
        ts_on_next, ts_on_complete, ts_on_error = ts.on_next, ts.on_complete, ts.on_error
        ts.on_next = lambda x: (seen.append((loop.time(), x)), ts_on_next(x))  # type: ignore[method-assign]
        ts.on_complete = lambda: (seen.append((loop.time(), "|")), ts_on_complete())  # type: ignore[method-assign]
        ts.on_error = lambda e: (seen.append((loop.time(), "#")), ts_on_error(e))  # type: ignore[method-assign]
        loop.call_at(0.5, pub.emit, "b")
        terminal = pub.complete if signal == "complete" else lambda: pub.error(RuntimeError("x"))
        if order == "signal first":  # run the signal inside the loop iteration before the timer's
            loop.call_at(1.0 - 1e-9, terminal)
        else:
            loop.call_at(1.0 + 1e-9, terminal)
        await ts.await_done(10.0)
        return seen

    seen = run_virtual(main())
    assert [x for _, x in seen] == (["b", "|"] if signal == "complete" else ["b", "#"])
    ends = seen[-1][0]
    assert ends == pytest.approx(2.0 if signal == "complete" else 1.0, abs=1e-6)


@pytest.mark.virtual
async def test_debounce_an_error_at_the_end_of_the_quiet_period_follows_the_item(
        loop: asyncio.AbstractEventLoop) -> None:
    pub, ts = stage(ops.debounce(0.5), UNBOUNDED)
    boom = RuntimeError("boom")
    loop.call_at(0.25, pub.emit, "a")
    loop.call_at(0.75, pub.error, boom)
    await ts.await_done(10.0)
    assert ts.values == ["a"] and ts.error is boom and loop.time() == 0.75
    assert inner(ts).statistics().dropped == {}


def test_ties_differ_from_reactivex_as_documented() -> None:
    """On reactivex's TestScheduler the source's signal comes first at a tie (it was scheduled
    first); rxpipe puts the time boundary first, whatever the loop's order."""
    case = TimedCase((((0.25, "a"), (0.75, "b"))), 2.0)  # binary-exact times: true ties
    assert timed_through_reactivex(lambda s: s.pipe(rxo.debounce(0.5)), case) == [(1.25, ("N", "b")), (2.0, ("C",))]
    assert timed_through_rxpipe(lambda s: s.pipe(ops.debounce(0.5)), case) == [
        (0.75, ("N", "a")), (1.25, ("N", "b")), (2.0, ("C",))]
    case = TimedCase(((0.25, "a"), (0.5, "b")), 2.0)
    assert timed_through_reactivex(lambda s: s.pipe(rxo.sample(0.5)), case) == [(0.5, ("N", "b")), (2.0, ("C",))]
    assert timed_through_rxpipe(lambda s: s.pipe(ops.sample(0.5)), case) == [
        (0.5, ("N", "a")), (1.0, ("N", "b")), (2.5, ("C",))]
    case = TimedCase(((0.25, "a"), (0.75, "b")), 2.0)  # throttle_first: no timer, the same rule
    assert timed_through_reactivex(lambda s: s.pipe(rxo.throttle_first(0.5)), case) == \
        timed_through_rxpipe(lambda s: s.pipe(ops.throttle_first(0.5)), case) == [
            (0.25, ("N", "a")), (0.75, ("N", "b")), (2.0, ("C",))]


# -- lossy operators: demand, bounds, drops ------------------------------------------------------------
LOSSY = {
    "debounce": lambda: ops.debounce(0.3),
    "sample": lambda: ops.sample(0.3),
    "sample_sampler": lambda: ops.sample(rx.interval(0.3)),
    "throttle_first": lambda: ops.throttle_first(0.3),
}


@pytest.mark.virtual
@pytest.mark.parametrize("name", sorted(LOSSY))
async def test_lossy_random_demand_never_exceeded_one_item_held_every_item_accounted(name: str) -> None:
    for seed in range(6):
        rng = random.Random(f"{name}:{seed}")
        pub, ts = stage(LOSSY[name]())
        run = inner(ts)
        assert pub.requests == [UNBOUNDED]  # at subscribe, whatever downstream asked
        sent = 0
        for _ in range(300):
            action = rng.random()
            if action < 0.5:
                pub.emit(sent)
                sent += 1
            elif action < 0.6:
                ts.request(rng.choice((1, 1, 2, 5)))
            await asyncio.sleep(rng.choice((0.0, 0.05, 0.1, 0.2, 0.35, 1.0)))
            stats = run.statistics()
            assert len(ts.values) <= ts.requested
            assert stats.buffered <= 1
            assert sent == len(ts.values) + sum(stats.dropped.values()) + stats.buffered
            if name != "sample_sampler":  # a stage's items_in counts its inputs' items too (the ticks)
                assert stats.items_in == sent
            assert ts.values == sorted(set(ts.values))  # in order, never twice
        assert pub.requests == [UNBOUNDED] and ts.error is None
        assert set(run.statistics().dropped) <= {"superseded", "no_demand", "throttled"}
        ts.cancel()
        assert pub.cancelled


@pytest.mark.virtual
async def test_debounce_a_due_item_without_demand_waits_for_the_request(loop: asyncio.AbstractEventLoop) -> None:
    pub, ts = stage(ops.debounce(0.5))
    log: list[tuple[str, str]] = []
    a, b, c = (Told(n, log) for n in "abc")
    pub.emit(a)
    await asyncio.sleep(0.2)
    pub.emit(b)  # a superseded within its quiet period
    await asyncio.sleep(3.0)  # b due at 0.7, no demand: kept
    assert ts.values == [] and inner(ts).statistics().buffered == 1
    ts.request(1)
    assert ts.values == [b] and loop.time() == 3.2  # at the request, not at a tick
    pub.emit(c)
    await asyncio.sleep(1.0)  # c due at 3.7, no demand
    pub.emit(Told("d", log))  # c was due and is replaced before downstream asked
    assert log == [("a", "superseded"), ("c", "no_demand")]
    assert inner(ts).statistics().dropped == {"superseded": 1, "no_demand": 1}
    ts.cancel()


@pytest.mark.virtual
async def test_debounce_completion_flushes_the_held_item_at_once(loop: asyncio.AbstractEventLoop) -> None:
    pub, ts = stage(ops.debounce(0.5), 5)
    pub.emit("a")
    await asyncio.sleep(0.1)
    pub.emit("b")
    await asyncio.sleep(0.1)
    pub.complete()  # b is still in its quiet period: it goes out now, then the completion
    assert ts.values == ["b"] and ts.completed and loop.time() == 0.2
    assert inner(ts).statistics().dropped == {"superseded": 1}


@pytest.mark.virtual
async def test_debounce_completion_without_demand_delivers_the_held_item_then_completes() -> None:
    pub, ts = stage(ops.debounce(0.5))
    pub.emit("a").complete()
    assert ts.values == [] and not ts.completed
    ts.request(1)
    assert ts.values == ["a"] and ts.completed


@pytest.mark.virtual
@pytest.mark.parametrize("make", [lambda: ops.debounce(0.5), lambda: ops.sample(0.5), lambda: ops.throttle_first(0.5),
                                  lambda: ops.sample(rx.interval(0.5))], ids=["debounce", "sample", "throttle_first",
                                                                              "sample_sampler"])
async def test_an_upstream_error_is_signalled_at_once_and_the_held_item_dropped(make: Callable[[], Any]) -> None:
    pub, ts = stage(make())
    log: list[tuple[str, str]] = []
    pub.emit(Told("a", log))
    boom = RuntimeError("boom")
    pub.error(boom)
    assert ts.error is boom and ts.values == []
    assert log == [("a", "error")]
    assert inner(ts).statistics().dropped == {"error": 1}


@pytest.mark.virtual
async def test_sample_skips_a_tick_without_demand_and_names_the_drop(loop: asyncio.AbstractEventLoop) -> None:
    pub, ts = stage(ops.sample(1.0))
    log: list[tuple[str, str]] = []
    ts.request(1)
    pub.emit(Told("a", log))
    await asyncio.sleep(0.5)
    pub.emit(Told("b", log))  # a superseded before any tick
    await asyncio.sleep(0.6)  # tick at 1.0: b
    assert [x.name for x in ts.values] == ["b"]
    pub.emit(Told("c", log))
    await asyncio.sleep(1.0)  # tick at 2.0: no demand, skipped; c waits
    pub.emit(Told("d", log))  # c missed a tick for lack of demand
    ts.request(1)
    assert [x.name for x in ts.values] == ["b"]  # a request does not sample: ticks do
    await asyncio.sleep(1.0)  # tick at 3.0: d
    assert [x.name for x in ts.values] == ["b", "d"]
    assert log == [("a", "superseded"), ("c", "no_demand")]
    ts.cancel()


@pytest.mark.virtual
async def test_sample_completes_at_the_tick_after_upstream_completed(loop: asyncio.AbstractEventLoop) -> None:
    pub, ts = stage(ops.sample(1.0))
    pub.emit("a")
    await asyncio.sleep(1.5)  # tick at 1.0 without demand: skipped
    pub.complete()
    assert not ts.completed
    await asyncio.sleep(0.6)  # tick at 2.0: the item is queued ahead of the completion
    assert ts.values == [] and not ts.completed
    ts.request(1)
    assert ts.values == ["a"] and ts.completed and loop.time() == 2.1


@pytest.mark.virtual
async def test_throttle_first_keeps_a_windows_first_item_until_asked_and_the_next_window_replaces_it(
        loop: asyncio.AbstractEventLoop) -> None:
    pub, ts = stage(ops.throttle_first(1.0))
    log: list[tuple[str, str]] = []
    pub.emit(Told("a", log))  # opens [0, 1), no demand: kept
    await asyncio.sleep(0.5)
    pub.emit(Told("b", log))  # throttled
    await asyncio.sleep(0.5)
    pub.emit(Told("c", log))  # opens [1, 2): replaces a
    ts.request(2)
    assert [x.name for x in ts.values] == ["c"]
    await asyncio.sleep(0.2)
    pub.emit(Told("d", log))  # throttled although there is demand
    await asyncio.sleep(1.0)
    pub.emit(Told("e", log))  # opens [2.2, 3.2)
    assert [x.name for x in ts.values] == ["c", "e"]
    assert log == [("b", "throttled"), ("a", "no_demand"), ("d", "throttled")]
    pub.complete()
    assert ts.completed


@pytest.mark.virtual
async def test_throttle_first_completion_follows_the_kept_item() -> None:
    pub, ts = stage(ops.throttle_first(1.0))
    pub.emit("a", "b").complete()
    assert ts.values == [] and not ts.completed
    ts.request(3)
    assert ts.values == ["a"] and ts.completed


# -- sample(sampler) --------------------------------------------------------------------------------------
@pytest.mark.virtual
async def test_sample_sampler_ticks_are_its_items_requested_without_bound_and_cancel_reaches_both() -> None:
    pub, ts = stage(ops.sample(sampler := TestPublisher[str]()), UNBOUNDED)
    assert sampler.requests == [UNBOUNDED] and pub.requests == [UNBOUNDED]
    pub.emit(1, 2)
    sampler.emit("tick")
    pub.emit(3)
    sampler.emit("tick", "tick")  # the second finds nothing new
    assert ts.values == [2, 3]
    ts.cancel()
    assert pub.cancelled and sampler.cancelled


@pytest.mark.virtual
async def test_sample_sampler_positional_and_keyword_are_the_same() -> None:
    for make in (lambda s: ops.sample(s), lambda s: ops.sample(sampler=s)):
        sampler = TestPublisher[str]()
        pub, ts = stage(make(sampler), UNBOUNDED)
        pub.emit("a")
        sampler.emit("x")
        assert ts.values == ["a"]
        ts.cancel()


@pytest.mark.virtual
async def test_sample_sampler_completion_takes_the_last_sample_and_cancels_upstream() -> None:
    sampler = TestPublisher[str]()
    pub, ts = stage(ops.sample(sampler), UNBOUNDED)
    pub.emit("a")
    sampler.complete()
    assert ts.values == ["a"] and ts.completed and pub.cancelled


@pytest.mark.virtual
async def test_sample_sampler_error_fails_the_stream_and_cancels_upstream() -> None:
    sampler = TestPublisher[str]()
    pub, ts = stage(ops.sample(sampler), UNBOUNDED)
    pub.emit("a")
    boom = RuntimeError("sampler")
    sampler.error(boom)
    assert ts.error is boom and pub.cancelled and ts.values == []
    assert inner(ts).statistics().dropped == {"error": 1}


@pytest.mark.virtual
async def test_sample_source_error_cancels_the_sampler() -> None:
    sampler = TestPublisher[str]()
    pub, ts = stage(ops.sample(sampler), UNBOUNDED)
    boom = RuntimeError("source")
    pub.error(boom)
    assert ts.error is boom and sampler.cancelled


@pytest.mark.virtual
async def test_sample_source_completion_waits_for_the_next_sampler_item() -> None:
    sampler = TestPublisher[str]()
    pub, ts = stage(ops.sample(sampler), UNBOUNDED)
    pub.emit("a").complete()
    assert not ts.completed and not sampler.cancelled
    sampler.emit("x")
    assert ts.values == ["a"] and ts.completed and sampler.cancelled


# -- delay ---------------------------------------------------------------------------------------------------
@pytest.mark.virtual
async def test_delay_random_demand_upstream_gets_exactly_the_downstream_requests(
        loop: asyncio.AbstractEventLoop) -> None:
    for seed in range(8):
        rng = random.Random(f"delay:{seed}")
        pub, ts = stage(ops.delay(0.5))
        run = inner(ts)
        asked: list[int] = []
        arrived: dict[int, float] = {}
        delivered: list[tuple[int, float]] = []
        ts_on_next = ts.on_next

        def record(item: int, on_next: Callable[[int], None] = ts_on_next,
                   delivered: list[tuple[int, float]] = delivered) -> None:
            delivered.append((item, loop.time()))
            on_next(item)

        ts.on_next = record  # type: ignore[method-assign]
        sent = 0
        for _ in range(200):
            if rng.random() < 0.3:
                n = rng.choice((1, 1, 2, 3, 7))
                asked.append(n)
                ts.request(n)
            while pub.outstanding and rng.random() < 0.6:
                arrived[sent] = loop.time()
                pub.emit(sent)
                sent += 1
            stats = run.statistics()
            assert pub.outstanding + stats.buffered + len(ts.values) == ts.requested  # delayed items count
            await asyncio.sleep(rng.choice((0.0, 0.1, 0.25, 0.5, 1.0)))
        assert pub.requests == asked
        assert [item for item, _ in delivered] == list(range(len(delivered)))
        assert all(at == pytest.approx(arrived[item] + 0.5, abs=1e-9) for item, at in delivered)
        ts.cancel()
        assert pub.cancelled


@pytest.mark.virtual
async def test_delay_shifts_items_and_completion(loop: asyncio.AbstractEventLoop) -> None:
    pub, ts = stage(ops.delay(1.0), UNBOUNDED)
    seen: list[tuple[float, Any]] = []
    loop.call_at(0.0, pub.emit, "a")
    loop.call_at(0.5, pub.emit, "b", "c")
    loop.call_at(2.0, pub.emit, "d")
    loop.call_at(2.5, pub.complete)
    ts_on_next, ts_on_complete = ts.on_next, ts.on_complete
    ts.on_next = lambda x: (seen.append((loop.time(), x)), ts_on_next(x))  # type: ignore[method-assign]
    ts.on_complete = lambda: (seen.append((loop.time(), "|")), ts_on_complete())  # type: ignore[method-assign]
    await ts.await_done(10.0)
    assert seen == [(1.0, "a"), (1.5, "b"), (1.5, "c"), (3.0, "d"), (3.5, "|")]


@pytest.mark.virtual
async def test_delay_error_is_signalled_at_once_and_the_delayed_items_dropped() -> None:
    pub, ts = stage(ops.delay(1.0), 3)
    log: list[tuple[str, str]] = []
    pub.emit(Told("a", log), Told("b", log))
    boom = RuntimeError("boom")
    pub.error(boom)
    assert ts.error is boom and ts.values == []
    assert log == [("a", "error"), ("b", "error")]
    assert inner(ts).statistics().dropped == {"error": 2}


@pytest.mark.virtual
async def test_delay_without_demand_takes_nothing_and_cancel_stops_the_timer() -> None:
    pub, ts = stage(ops.delay(1.0))
    assert pub.requests == []
    ts.request(2)
    pub.emit("a")
    assert pub.requests == [2] and inner(ts).statistics().buffered == 1
    ts.cancel()
    assert pub.cancelled  # the leak check fails the test if the timer were left


# -- the contract, with a sampler --------------------------------------------------------------------------
def test_sample_with_a_sampler_keeps_the_contract() -> None:
    check_operator(lambda: ops.sample(rx.interval(0.05)), emits_every_item=False, time_based=True, max_held=1)


# -- arguments -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("make, error", [
    (lambda: ops.debounce(0), ValueError),
    (lambda: ops.debounce(-1.0), ValueError),
    (lambda: ops.debounce(float("inf")), ValueError),
    (lambda: ops.debounce(float("nan")), ValueError),
    (lambda: ops.debounce(True), TypeError),
    (lambda: ops.debounce("1"), TypeError),
    (lambda: ops.debounce(datetime.timedelta(seconds=0)), ValueError),
    (lambda: ops.throttle_first(0.0), ValueError),
    (lambda: ops.sample(0), ValueError),
    (lambda: ops.sample(), TypeError),
    (lambda: ops.sample(1.0, sampler=rx.never()), TypeError),
    (lambda: ops.sample(rx.never(), sampler=rx.never()), TypeError),
    (lambda: ops.sample(sampler=[1, 2]), TypeError),
    (lambda: ops.delay(-0.1), ValueError),
    (lambda: ops.delay(datetime.datetime(2030, 1, 1)), TypeError),
])
def test_bad_arguments_are_refused_by_the_factory(make: Callable[[], Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        make()


def test_an_absolute_datetime_gets_a_hint_in_the_error() -> None:
    with pytest.raises(TypeError, match="an absolute datetime is not supported"):
        ops.delay(datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC))


@pytest.mark.virtual
async def test_durations_take_timedelta_as_reactivex_does(loop: asyncio.AbstractEventLoop) -> None:
    ms = datetime.timedelta(milliseconds=1)
    start = loop.time()
    assert await rx.just(1, 2).pipe(ops.delay(duetime=30 * ms)).to_list() == [1, 2]
    assert loop.time() - start == pytest.approx(0.03)
    assert await rx.just(1, 2).pipe(ops.debounce(duetime=10 * ms)).to_list() == [2]
    assert await rx.just(1, 2).pipe(ops.throttle_first(window_duration=10 * ms)).to_list() == [1]
    assert await rx.interval(10 * ms).pipe(ops.take(2), ops.sample(sampler=5 * ms)).to_list() == [0, 1]
    assert await rx.timer(duetime=10 * ms, period=10 * ms).pipe(ops.take(3)).to_list() == [0, 1, 2]


@pytest.mark.virtual
async def test_delay_zero_passes_items_on_the_next_loop_iteration() -> None:
    out = await rx.range(0, 5).pipe(ops.delay(0)).to_list()
    assert out == [0, 1, 2, 3, 4]


@pytest.mark.virtual
async def test_stage_names_and_kinds() -> None:
    pub = TestPublisher[int]()
    flows = [pub.pipe(ops.debounce(1.0)), pub.pipe(ops.sample(1.0)), pub.pipe(ops.throttle_first(1.0)),
             pub.pipe(ops.delay(1.0, name="later"))]
    assert [f.kind for f in flows] == ["debounce", "sample", "throttle_first", "delay"]
    assert [f.name for f in flows] == ["debounce_1", "sample_1", "throttle_first_1", "later"]
