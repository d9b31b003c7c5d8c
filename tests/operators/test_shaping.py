"""throttle (cost and burst), conflate (under a slow consumer) and keep_alive (injection only when
idle and only on demand), on virtual time, against Akka's documented behaviour: exact times,
values, requests and bounds."""

from __future__ import annotations

import asyncio
import operator
from datetime import timedelta
from typing import Any

import pytest

import rxpipe as rx
from rxpipe import UNBOUNDED
from rxpipe import operators as ops
from rxpipe.testing import TestPublisher, TestSubscriber

from .test_time import Told


def timed(loop: asyncio.AbstractEventLoop, source: rx.Flowable[Any], *operators: Any,
          initial_request: int = UNBOUNDED) -> tuple[TestSubscriber[Any], list[tuple[float, Any]]]:
    """Subscribe a TestSubscriber; record (loop time, item) of every delivery."""
    out: list[tuple[float, Any]] = []
    ts = TestSubscriber[Any](initial_request=initial_request)
    source.pipe(*operators, ops.tap(lambda x: out.append((round(loop.time(), 9), x)))).subscribe(ts)
    return ts, out




def akka_emission_times(costs: list[float], rate: float, burst: float) -> list[float]:
    """Akka's shaping throttle for items all available at 0 and pulled one at a time: the bucket
    (full at start) pays each cost on arrival; a short bucket delays the item until its debt is paid
    and is then empty (akka.util.TokenBucket.offer). A reference independent of the stage's code."""
    times, tokens, last, now = [], burst, 0.0, 0.0
    for cost in costs:
        tokens = min(burst, tokens + (now - last) * rate)
        last = now
        if cost <= tokens:
            tokens -= cost
        else:
            now += (cost - tokens) / rate
            tokens, last = 0.0, now
        times.append(now)
    return times


# -- throttle ------------------------------------------------------------------------------------
@pytest.mark.virtual
async def test_throttle_spends_the_burst_then_shapes_by_cost(loop: asyncio.AbstractEventLoop) -> None:
    costs = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3]
    ts, out = timed(loop, rx.from_iterable(costs), ops.throttle(10.0, 5, cost=lambda x: x))
    await ts.await_done()
    assert [x for _, x in out] == costs
    assert [t for t, _ in out] == [round(t, 9) for t in akka_emission_times(costs, 10.0, 5)]
    # by hand: 3 and 1 from the burst (1 left); 4 waits 0.3 s; 1 waits 0.1 s; 5 waits 0.5 s; ...
    assert [t for t, _ in out][:5] == [0.0, 0.0, 0.3, 0.4, 0.9]
    assert ts.completed and loop.time() == pytest.approx(sum(costs) / 10.0 - 0.5)


@pytest.mark.virtual
async def test_throttle_an_idle_bucket_refills_only_up_to_the_burst(loop: asyncio.AbstractEventLoop) -> None:
    pub = TestPublisher[int]()
    ts, out = timed(loop, pub, ops.throttle(100.0, 10, cost=lambda x: x))
    pub.emit(10)  # the whole burst
    await asyncio.sleep(60.0)  # an hour of idleness would refill the same: the cap is 10
    pub.emit(10, 10)
    await asyncio.sleep(1.0)
    assert out == [(0.0, 10), (60.0, 10), (60.1, 10)]


@pytest.mark.virtual
async def test_throttle_an_item_costing_more_than_the_burst_waits_for_its_whole_debt(
        loop: asyncio.AbstractEventLoop) -> None:
    ts, out = timed(loop, rx.from_iterable([2, 50, 1]), ops.throttle(10.0, 4, cost=lambda x: x))
    await ts.await_done()
    # 2 from the burst (2 left); 50 owes 48 units: 4.8 s; then the bucket is empty: 1 waits 0.1 s
    assert out == [(0.0, 2), (4.8, 50), (4.9, 1)]


@pytest.mark.virtual
async def test_throttle_free_items_and_the_default_unit_cost(loop: asyncio.AbstractEventLoop) -> None:
    ts, out = timed(loop, rx.from_iterable([0, 0, 0, 0]), ops.throttle(1.0, 1, cost=lambda x: x))
    await ts.await_done()
    assert [t for t, _ in out] == [0.0, 0.0, 0.0, 0.0]  # a cost of 0 is free
    ts, out = timed(loop, rx.range(0, 4), ops.throttle(4.0, 2))  # cost=None: each item costs 1
    await ts.await_done()
    assert [t - 0.0 for t, _ in out] == [0.0, 0.0, 0.25, 0.5]


@pytest.mark.virtual
async def test_throttle_takes_one_item_at_a_time_and_nothing_without_demand() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[int]()
    pub.pipe(ops.throttle(1.0, 1, cost=lambda x: x)).subscribe(ts)
    await asyncio.sleep(1.0)
    assert pub.requests == []  # lazy: no downstream demand, nothing asked (the edge can still 429)
    ts.request(5)
    assert pub.requests == [1]
    pub.emit(1)  # the burst pays it: it goes at once, and the next one is asked for
    assert ts.values == [1] and pub.requests == [1, 1]
    pub.emit(3)  # owes 3 units: waits 3 s, nothing more is asked meanwhile
    await asyncio.sleep(2.9)
    assert ts.values == [1] and pub.requests == [1, 1] and pub.outstanding == 0
    await asyncio.sleep(0.1)
    assert ts.values == [1, 3] and pub.requests == [1, 1, 1]
    ts.cancel()
    assert pub.cancelled


@pytest.mark.virtual
async def test_throttle_completion_follows_the_waiting_item_and_an_error_drops_it(
        loop: asyncio.AbstractEventLoop) -> None:
    pub = TestPublisher[Any]()
    ts, out = timed(loop, pub, ops.throttle(1.0, 1, cost=lambda x: 2))
    pub.emit("a")
    pub.complete()
    assert not ts.completed
    await ts.await_done()
    assert out == [(1.0, "a")] and ts.completed
    told: list[tuple[str, str]] = []
    pub = TestPublisher[Any]()
    ts = TestSubscriber[Any](initial_request=UNBOUNDED)
    pub.pipe(ops.throttle(1.0, 1, cost=lambda x: 2)).subscribe(ts)
    pub.emit(Told("b", told))
    boom = RuntimeError("upstream failed")
    pub.error(boom)
    assert ts.error is boom and told == [("b", "error")] and ts.values == []
    await asyncio.sleep(5.0)
    assert ts.values == []  # the timer was cancelled with the stage


@pytest.mark.virtual
async def test_throttle_a_bad_cost_fails_the_stream_and_cancels_upstream() -> None:
    for bad in (-1, float("inf"), "3", None, True):
        pub = TestPublisher[int]()
        ts = TestSubscriber[int](initial_request=UNBOUNDED)
        pub.pipe(ops.throttle(1.0, 1, cost=lambda x, bad=bad: bad)).subscribe(ts)
        pub.emit(1)
        assert isinstance(ts.error, ValueError) and "cost(1)" in str(ts.error) and pub.cancelled
    pub = TestPublisher[int]()
    ts = TestSubscriber[int](initial_request=UNBOUNDED)
    pub.pipe(ops.throttle(1.0, 1, cost=lambda x: 1 // 0)).subscribe(ts)
    pub.emit(1)
    assert isinstance(ts.error, ZeroDivisionError) and pub.cancelled


def test_throttle_refuses_bad_arguments() -> None:
    for rate in (0, -1.0, float("inf"), True, "1"):
        with pytest.raises(ValueError, match="cost_per_s"):
            ops.throttle(rate, 1)
    for burst in (0, 0.5, float("nan"), False):
        with pytest.raises(ValueError, match="burst"):
            ops.throttle(1.0, burst)
    with pytest.raises(TypeError, match="cost"):
        ops.throttle(1.0, 1, cost=3)  # type: ignore[arg-type]


# -- conflate ------------------------------------------------------------------------------------
@pytest.mark.virtual
async def test_conflate_under_a_slow_consumer_folds_what_arrived_between_its_requests() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[int]()
    pub.pipe(ops.conflate(operator.add)).subscribe(ts)
    assert pub.requests == [16]  # never backpressures: a window of 16 whatever downstream does
    ts.request(1)
    pub.emit(1)
    assert ts.values == [1]  # demand: it goes at once
    pub.emit(2, 3, 4)
    assert ts.values == [1]
    ts.request(1)
    assert ts.values == [1, 9]
    pub.emit(5)
    ts.request(2)
    pub.emit(6)
    assert ts.values == [1, 9, 5, 6]
    pub.emit(7, 8)
    pub.complete()
    assert not ts.completed  # the summary 15 waits for demand, then the completion
    ts.request(1)
    assert ts.values == [1, 9, 5, 6, 15] and ts.completed


@pytest.mark.virtual
async def test_conflate_with_a_seed_and_bounded_reading_without_demand() -> None:
    pub = TestPublisher[str]()
    ts = TestSubscriber[list[str]]()
    pub.pipe(ops.conflate(lambda acc, x: [*acc, x][-3:], seed=lambda x: [x])).subscribe(ts)
    sent = 0
    for _ in range(1000):  # a consumer that never asks: upstream is read on, 16 at most outstanding
        assert 0 < pub.outstanding <= 16
        pub.emit(f"t{sent}")
        sent += 1
    assert pub.total_requested - sent == pub.outstanding
    stats = ts.subscription.upstream.statistics()  # type: ignore[union-attr]
    assert stats.buffered == 1 and stats.items_in == 1000  # one summary, never more
    ts.request(1)
    assert ts.values == [[f"t{sent - 3}", f"t{sent - 2}", f"t{sent - 1}"]]


@pytest.mark.virtual
async def test_conflate_errors() -> None:
    told: list[tuple[str, str]] = []
    pub = TestPublisher[Any]()
    ts = TestSubscriber[Any]()
    pub.pipe(ops.conflate(lambda a, b: b)).subscribe(ts)
    pub.emit(Told("a", told))
    boom = RuntimeError("x")
    pub.error(boom)
    assert ts.error is boom and told == [("a", "error")]
    pub = TestPublisher[Any]()
    ts = TestSubscriber[Any]()
    pub.pipe(ops.conflate(lambda a, b: None)).subscribe(ts)
    pub.emit(1, 2)
    assert isinstance(ts.error, TypeError) and pub.cancelled
    with pytest.raises(TypeError):
        ops.conflate(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        ops.conflate(operator.add, seed=3)  # type: ignore[arg-type]


# -- keep_alive ----------------------------------------------------------------------------------
@pytest.mark.virtual
async def test_keep_alive_injects_only_while_idle(loop: asyncio.AbstractEventLoop) -> None:
    pub = TestPublisher[str]()
    ts, out = timed(loop, pub, ops.keep_alive(1.0, lambda: "ping"))
    await asyncio.sleep(0.5)
    pub.emit("a")  # idle for 1 s after it: ping at 1.5, 2.5
    await asyncio.sleep(2.2)
    pub.emit("b")  # at 2.7: the next ping is due at 3.7
    await asyncio.sleep(0.9)
    pub.emit("c")  # at 3.6, before it: no ping
    await asyncio.sleep(1.0)  # 4.6: a ping
    pub.complete()
    assert out == [(0.5, "a"), (1.5, "ping"), (2.5, "ping"), (2.7, "b"), (3.6, "c"), (4.6, "ping")]
    assert ts.completed


@pytest.mark.virtual
async def test_keep_alive_injects_only_on_demand_and_never_accumulates(loop: asyncio.AbstractEventLoop) -> None:
    pub = TestPublisher[str]()
    ts, out = timed(loop, pub, ops.keep_alive(timedelta(seconds=1), lambda: "ping"), initial_request=0)
    await asyncio.sleep(10.0)
    assert out == [] and not [h for h in loop._scheduled if not h.cancelled()]  # type: ignore[attr-defined]
    ts.request(5)  # idle for 10 s: one ping now, then one per second while demand lasts
    await asyncio.sleep(10.0)
    assert out == [(10.0, "ping"), (11.0, "ping"), (12.0, "ping"), (13.0, "ping"), (14.0, "ping")]
    assert not [h for h in loop._scheduled if not h.cancelled()]  # type: ignore[attr-defined]
    pub.emit("a")  # idle since 14, but a real item is waiting when demand comes: it wins
    ts.request(1)
    await asyncio.sleep(0.5)
    assert out[-1] == (20.0, "a") and len(out) == 6
    ts.request(1)  # idle since the item at 20 (not since the last ping): the next ping at 21
    await asyncio.sleep(1.0)
    assert out[-1] == (21.0, "ping")
    ts.cancel()
    assert pub.cancelled


@pytest.mark.virtual
async def test_keep_alive_prefers_the_upstream_item_waiting() -> None:
    pub = TestPublisher[str]()
    ts = TestSubscriber[str]()
    pub.pipe(ops.keep_alive(1.0, lambda: "ping")).subscribe(ts)
    assert pub.requests == [1]  # one item prefetched, demand or not
    await asyncio.sleep(0.5)
    pub.emit("a")
    await asyncio.sleep(5.0)
    assert ts.values == [] and pub.requests == [1]
    ts.request(1)  # idle since 1.5, but an upstream item waits: it goes, no ping
    assert ts.values == ["a"] and pub.requests == [1, 1]


@pytest.mark.virtual
async def test_keep_alive_inject_errors_fail_the_stream() -> None:
    pub = TestPublisher[str]()
    ts = TestSubscriber[str](initial_request=UNBOUNDED)
    pub.pipe(ops.keep_alive(1.0, lambda: None)).subscribe(ts)
    await asyncio.sleep(1.0)
    assert isinstance(ts.error, TypeError) and pub.cancelled
    pub = TestPublisher[str]()
    ts = TestSubscriber[str](initial_request=UNBOUNDED)
    pub.pipe(ops.keep_alive(1.0, lambda: 1 // 0)).subscribe(ts)
    await asyncio.sleep(1.0)
    assert isinstance(ts.error, ZeroDivisionError) and pub.cancelled


def test_keep_alive_refuses_bad_arguments() -> None:
    for idle in (0, -1, float("inf")):
        with pytest.raises(ValueError, match="idle_s"):
            ops.keep_alive(idle, lambda: "k")
    with pytest.raises(TypeError, match="idle_s"):
        ops.keep_alive("1", lambda: "k")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="inject"):
        ops.keep_alive(1.0, "k")  # type: ignore[arg-type]
