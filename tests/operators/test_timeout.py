"""timeout: idle and per-item deadlines on the virtual clock; demand, cancel, errors."""

from __future__ import annotations

import asyncio
import random

import pytest

import rxpipe as rx
from rxpipe import UNBOUNDED, MissingBackpressureError
from rxpipe import operators as ops
from rxpipe.testing import TestPublisher, TestSubscriber


def timed(mode: str, seconds: float = 5.0) -> tuple[TestPublisher[str], TestSubscriber[str]]:
    pub = TestPublisher[str]()
    ts = TestSubscriber[str]()
    pub.pipe(ops.timeout(seconds, mode)).subscribe(ts)
    return pub, ts


# idle --------------------------------------------------------------------------------------------
@pytest.mark.virtual
async def test_idle_fails_when_no_item_comes_for_seconds_while_demanded(loop: asyncio.AbstractEventLoop) -> None:
    pub, ts = timed("idle")
    ts.request(3)
    await asyncio.sleep(3.0)
    pub.emit("a")
    await asyncio.sleep(4.9)
    pub.emit("b")
    await asyncio.sleep(4.9)
    assert ts.error is None
    await ts.await_done(100.0)
    assert loop.time() == 7.9 + 5.0
    assert isinstance(ts.error, TimeoutError)
    assert ts.values == ["a", "b"]
    assert pub.cancelled


@pytest.mark.virtual
async def test_idle_time_without_demand_does_not_count(loop: asyncio.AbstractEventLoop) -> None:
    pub, ts = timed("idle")
    ts.request(1)
    pub.emit("a")
    await asyncio.sleep(100.0)  # a slow consumer: nothing is awaited, so nothing times out
    assert ts.error is None and not pub.cancelled
    ts.request(1)
    await asyncio.sleep(4.0)
    pub.emit("b")
    ts.request(1)
    await ts.await_done(100.0)
    assert loop.time() == 109.0
    assert isinstance(ts.error, TimeoutError) and ts.values == ["a", "b"]


@pytest.mark.virtual
async def test_idle_never_fires_while_items_keep_coming_and_completion_passes() -> None:
    ts = TestSubscriber[int](initial_request=UNBOUNDED)
    rx.interval(1.0).pipe(ops.take(20), ops.timeout(1.5)).subscribe(ts)
    await ts.await_done(100.0)
    assert ts.values == list(range(20)) and ts.completed


# item -----------------------------------------------------------------------------------------------
@pytest.mark.virtual
async def test_item_mode_each_requested_item_is_due_seconds_after_its_request(
        loop: asyncio.AbstractEventLoop) -> None:
    pub, ts = timed("item")
    ts.request(2)  # a and b due at 5
    await asyncio.sleep(1.0)
    pub.emit("a")
    await asyncio.sleep(2.0)
    ts.request(1)  # c due at 8
    await asyncio.sleep(1.5)
    pub.emit("b")  # t=4.5: in time
    await ts.await_done(100.0)
    assert loop.time() == 8.0  # "idle" would have waited until 4.5 + 5 = 9.5
    assert isinstance(ts.error, TimeoutError) and ts.values == ["a", "b"]
    assert pub.cancelled


@pytest.mark.virtual
async def test_item_mode_late_item_of_a_group(loop: asyncio.AbstractEventLoop) -> None:
    pub, ts = timed("item")
    ts.request(3)  # all three due at t=5
    await asyncio.sleep(1.9)
    pub.emit("0")
    await asyncio.sleep(1.9)
    pub.emit("1")
    await ts.await_done(100.0)
    assert loop.time() == 5.0 and isinstance(ts.error, TimeoutError)
    assert ts.values == ["0", "1"]


@pytest.mark.virtual
async def test_item_mode_after_map_async_is_a_per_call_deadline_that_retry_sees(
        loop: asyncio.AbstractEventLoop) -> None:
    calls: list[float] = []

    async def backend(x: int) -> int:
        calls.append(loop.time())
        await asyncio.sleep(10.0 if len(calls) == 1 else 1.0)
        return x

    stage = rx.just(1).pipe(ops.map_async(backend, retry=ops.Retry(2, 0.0, 0.0), name="llm"),
                            ops.timeout(2.0, mode="item"))
    assert stage.kind == "map_async" and stage.name == "llm"
    assert await stage.to_list() == [1]
    assert calls == [0.0, 2.0] and loop.time() == 3.0


@pytest.mark.virtual
async def test_item_mode_after_map_async_without_retry_fails_and_feeds_the_breaker(
        loop: asyncio.AbstractEventLoop) -> None:
    breaker = ops.CircuitBreaker(1, 30.0)

    async def hang(x: int) -> int:
        await asyncio.sleep(100.0)
        return x

    ts = TestSubscriber[int](initial_request=1)
    rx.just(1).pipe(ops.map_async(hang, breaker=breaker), ops.timeout(2.0, "item")).subscribe(ts)
    await ts.await_done(100.0)
    assert isinstance(ts.error, TimeoutError) and loop.time() == 2.0
    assert breaker.state == "open"


@pytest.mark.virtual
async def test_item_mode_timeouts_with_retry_jitter(loop: asyncio.AbstractEventLoop) -> None:
    calls: list[float] = []

    async def hang(x: int) -> int:
        calls.append(loop.time())
        await asyncio.sleep(100.0)
        return x

    ts = TestSubscriber[int](initial_request=1)
    retry = ops.Retry(3, 1.0, 4.0, rng=random.Random(8))
    rx.just(1).pipe(ops.map_async(hang, retry=retry), ops.timeout(2.0, "item")).subscribe(ts)
    await ts.await_done(100.0)
    reference = random.Random(8)
    d1, d2 = reference.uniform(0.0, 1.0), reference.uniform(0.0, 2.0)
    assert isinstance(ts.error, TimeoutError)
    assert calls == [0.0, 2.0 + d1, 2.0 + d1 + 2.0 + d2]


# protocol --------------------------------------------------------------------------------------------
@pytest.mark.virtual
async def test_demand_is_passed_through_exactly() -> None:
    pub, ts = timed("idle")
    ts.request(2)
    ts.request(5)
    assert pub.requests == [2, 5]
    pub.emit("a", "b")
    assert ts.values == ["a", "b"]
    ts.cancel()  # 5 items still wanted: the idle timer runs until the stream ends


@pytest.mark.virtual
async def test_cancel_reaches_upstream_and_disarms_the_timer() -> None:
    pub, ts = timed("idle")
    ts.request(1)
    ts.cancel()
    assert pub.cancelled
    await asyncio.sleep(50.0)
    assert ts.error is None


@pytest.mark.virtual
async def test_upstream_error_and_completion_pass_through_and_disarm() -> None:
    pub, ts = timed("item")
    ts.request(1)
    boom = ValueError("upstream")
    pub.error(boom)
    assert ts.error is boom
    await asyncio.sleep(50.0)
    assert ts.error is boom
    pub2, ts2 = timed("idle")
    ts2.request(4)
    pub2.emit("x").complete()
    await asyncio.sleep(50.0)
    assert ts2.values == ["x"] and ts2.completed and ts2.error is None


@pytest.mark.virtual
async def test_emission_beyond_demand_is_missing_backpressure() -> None:
    pub, ts = timed("idle")
    ts.request(1)
    pub.emit("a", "b")
    assert ts.values == ["a"]
    assert isinstance(ts.error, MissingBackpressureError) and pub.cancelled


def test_timeout_rejects_bad_arguments() -> None:
    for seconds in (0, -1.0, float("inf"), True):
        with pytest.raises(ValueError):
            ops.timeout(seconds)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        ops.timeout(1.0, mode="total")


# demand that came at subscription (to_list, async for, initial_request) ------------------------------
@pytest.mark.virtual
@pytest.mark.parametrize("mode", ["idle", "item"])
async def test_never_under_to_list_raises_timeout_error_naming_the_stage_and_the_wait(
        loop: asyncio.AbstractEventLoop, mode: str) -> None:
    with pytest.raises(TimeoutError) as failure:
        await rx.never().pipe(ops.timeout(0.2, mode, name="llm_call")).to_list()
    assert loop.time() == pytest.approx(0.2)
    assert "within 0.2 s at stage 'llm_call'" in str(failure.value)


@pytest.mark.virtual
@pytest.mark.parametrize("mode", ["idle", "item"])
async def test_never_under_async_for_raises_timeout_error(loop: asyncio.AbstractEventLoop, mode: str) -> None:
    seen = []
    with pytest.raises(TimeoutError):
        async for x in rx.never().pipe(ops.timeout(0.2, mode)):
            seen.append(x)
    assert seen == [] and loop.time() == pytest.approx(0.2)


@pytest.mark.virtual
@pytest.mark.parametrize("mode", ["idle", "item"])
async def test_an_initial_request_arms_the_timer_as_a_later_request_does(
        loop: asyncio.AbstractEventLoop, mode: str) -> None:
    pub = TestPublisher[str]()
    ts = TestSubscriber[str](initial_request=2)  # requests inside on_subscribe, before upstream is linked
    pub.pipe(ops.timeout(5.0, mode)).subscribe(ts)
    assert pub.requests == [2]
    await asyncio.sleep(1.0)
    pub.emit("a")
    await ts.await_done(100.0)
    # idle: 5 s after a (t=6); item: both were due 5 s after the request (t=5)
    assert loop.time() == (6.0 if mode == "idle" else 5.0)
    assert isinstance(ts.error, TimeoutError) and ts.values == ["a"] and pub.cancelled


async def _late(x: int) -> int:
    await asyncio.sleep(3.0 if x == 2 else 0.1 * x)
    return x


@pytest.mark.virtual
@pytest.mark.parametrize("mode", ["idle", "item"])
async def test_after_flat_map_a_late_inner_item_times_out(loop: asyncio.AbstractEventLoop, mode: str) -> None:
    ts = TestSubscriber[int](initial_request=UNBOUNDED)
    rx.range(0, 4).pipe(ops.flat_map(lambda x: rx.from_future(_late(x))), ops.timeout(1.0, mode)).subscribe(ts)
    await ts.await_done(100.0)
    assert sorted(ts.values) == [0, 1, 3] and isinstance(ts.error, TimeoutError)
    # idle: 1 s after the last item (3, at 0.3 s); item: 1 s after the one request
    assert loop.time() == pytest.approx(1.3 if mode == "idle" else 1.0)


@pytest.mark.virtual
@pytest.mark.parametrize("mode", ["idle", "item"])
async def test_after_flat_map_items_in_time_pass_and_complete(mode: str) -> None:
    got = await rx.range(0, 40).pipe(ops.flat_map(lambda x: rx.range(0, x % 3)), ops.timeout(0.2, mode)).to_list()
    assert sorted(got) == sorted(y for x in range(40) for y in range(x % 3))


@pytest.mark.virtual
async def test_item_mode_under_request_1_after_flat_map(loop: asyncio.AbstractEventLoop) -> None:
    ts = TestSubscriber[int](initial_request=1)
    rx.range(0, 3).pipe(ops.flat_map(lambda x: rx.from_future(_late(x))), ops.timeout(1.0, "item")).subscribe(ts)
    await asyncio.sleep(0.5)
    assert ts.values == [0] and ts.error is None
    ts.request(1)  # 1 arrived at 0.1 and waited in flat_map's queue: delivered at once
    assert ts.values == [0, 1]
    ts.request(1)  # 2 arrives at 3.0: 1 s after this request it is late
    await ts.await_done(100.0)
    assert loop.time() == pytest.approx(1.5) and isinstance(ts.error, TimeoutError)
