"""rx.timer, rx.never, rx.from_future: exact values and times on the virtual clock, demand,
cancel, errors; timer against reactivex 6.1's TestScheduler."""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime
import threading
from typing import Any

import pytest
import reactivex
import reactivex.operators as rxo

import rxpipe as rx
from rxpipe import UNBOUNDED
from rxpipe import operators as ops
from rxpipe.testing import TestSubscriber

from .operators.differential import TimedCase, timed_through_reactivex, timed_through_rxpipe
from .timeline import Timeline


# -- timer ----------------------------------------------------------------------------------------------
@pytest.mark.virtual
async def test_timer_one_value_after_duetime_then_complete() -> None:
    ts = Timeline(UNBOUNDED)
    rx.timer(2.5).subscribe(ts)
    await ts.await_done(10.0)
    assert ts.at == [(2.5, 0), (2.5, "|")]


@pytest.mark.virtual
async def test_timer_one_shot_value_waits_for_demand(loop: asyncio.AbstractEventLoop) -> None:
    ts = Timeline()
    rx.timer(1.0).subscribe(ts)
    await asyncio.sleep(5.0)
    assert ts.at == []
    ts.request(1)
    assert ts.at == [(5.0, 0), (5.0, "|")]


@pytest.mark.virtual
async def test_timer_zero_fires_at_subscribe_time(loop: asyncio.AbstractEventLoop) -> None:
    ts = Timeline(1)
    rx.timer(0).subscribe(ts)
    assert ts.at == []  # on the loop, not inside subscribe
    await ts.await_done(1.0)
    assert ts.at == [(0.0, 0), (0.0, "|")]


@pytest.mark.virtual
async def test_timer_periodic_ticks_and_numbers() -> None:
    ts = Timeline(UNBOUNDED)
    rx.timer(1.0, 0.5).pipe(ops.take(4)).subscribe(ts)
    await ts.await_done(10.0)
    assert ts.at == [(1.0, 0), (1.5, 1), (2.0, 2), (2.5, 3), (2.5, "|")]


@pytest.mark.virtual
async def test_timer_periodic_skips_a_tick_without_demand_like_interval(loop: asyncio.AbstractEventLoop) -> None:
    ts = Timeline(2)
    rx.timer(1.0, 1.0).subscribe(ts)
    await asyncio.sleep(4.5)  # ticks 0, 1 delivered; 2 (t=3), 3 (t=4) find no demand
    assert ts.values == [0, 1] and ts.subscription.upstream.skipped == 2  # type: ignore[union-attr]
    ts.request(1)
    assert ts.values == [0, 1]  # a request does not emit a skipped tick
    await asyncio.sleep(1.0)
    assert ts.at[-1] == (5.0, 4) and ts.subscription.upstream.skipped == 2  # type: ignore[union-attr]
    ts.cancel()


@pytest.mark.virtual
async def test_timer_cancel_before_due_leaves_no_timer() -> None:
    for timer in (rx.timer(5.0), rx.timer(5.0, 1.0)):
        ts = Timeline(UNBOUNDED)
        timer.subscribe(ts)
        await asyncio.sleep(1.0)
        ts.cancel()
        await asyncio.sleep(10.0)
        assert ts.at == []  # and the plugin's leak check finds no timer


def test_timer_off_a_loop_signals_runtime_error() -> None:
    for timer in (rx.timer(1.0), rx.timer(1.0, 1.0)):
        ts = TestSubscriber[int](1)
        timer.subscribe(ts)
        assert isinstance(ts.error, RuntimeError)


@pytest.mark.parametrize("args, error", [
    ((-1.0,), ValueError),
    ((float("inf"),), ValueError),
    ((1.0, 0.0), ValueError),
    ((1.0, -2.0), ValueError),
    ((True,), TypeError),
    (("1",), TypeError),
    ((datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC),), TypeError),
    ((datetime.timedelta(seconds=-1),), ValueError),
    ((1.0, datetime.timedelta(seconds=0)), ValueError),
])
def test_timer_bad_arguments(args: tuple[Any, ...], error: type[Exception]) -> None:
    with pytest.raises(error):
        rx.timer(*args)


def test_timer_refuses_an_absolute_datetime_and_says_what_to_pass() -> None:
    with pytest.raises(TypeError, match="loop's clock"):
        rx.timer(datetime.datetime(2030, 1, 1))


@pytest.mark.parametrize("duetime, period, count", [
    (0.0, None, 1), (0.7, None, 1), (2.5, None, 1), (0.0, 0.3, 6), (0.5, 0.5, 5), (0.25, 1.1, 4), (3.0, 0.1, 12),
])
def test_timer_equals_reactivex(duetime: float, period: float | None, count: int) -> None:
    case = TimedCase((), 1000.0)  # the harness's source is not used: the timer is the source

    def ours(_: Any) -> rx.Flowable[Any]:
        return rx.timer(duetime, period).pipe(ops.take(count))

    def theirs(_: Any) -> reactivex.Observable[Any]:
        return reactivex.timer(duetime, period).pipe(rxo.take(count))

    expected = timed_through_reactivex(theirs, case)
    assert timed_through_rxpipe(ours, case) == expected
    assert len(expected) == count + 1


# -- never ----------------------------------------------------------------------------------------------
@pytest.mark.virtual
async def test_never_emits_nothing_and_never_terminates_and_cancel_works() -> None:
    ts = TestSubscriber[Any](UNBOUNDED)
    rx.never().subscribe(ts)
    await asyncio.sleep(1_000.0)
    assert ts.values == [] and not ts.done
    ts.cancel()
    ts.cancel()
    assert not ts.done


def test_never_signals_an_invalid_request_and_needs_no_loop() -> None:
    ts = TestSubscriber[Any]()
    rx.never().subscribe(ts)
    ts.request(0)
    assert isinstance(ts.error, ValueError)  # Reactive Streams §3.9


@pytest.mark.virtual
async def test_never_as_take_until_style_other_keeps_a_merge_open() -> None:
    ts = TestSubscriber[Any](UNBOUNDED)
    rx.just(1, 2).pipe(ops.merge(rx.never())).subscribe(ts)
    await asyncio.sleep(10.0)
    assert ts.values == [1, 2] and not ts.done
    ts.cancel()


# -- from_future --------------------------------------------------------------------------------------------
@pytest.mark.virtual
async def test_from_future_value_on_demand_then_complete(loop: asyncio.AbstractEventLoop) -> None:
    future: asyncio.Future[str] = loop.create_future()
    ts = Timeline()
    rx.from_future(future).subscribe(ts)
    loop.call_at(1.0, future.set_result, "x")
    await asyncio.sleep(2.0)
    assert ts.at == []
    ts.request(1)
    assert ts.at == [(2.0, "x"), (2.0, "|")]


@pytest.mark.virtual
async def test_from_future_already_done_is_delivered_at_the_request() -> None:
    future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    future.set_result(7)
    ts = TestSubscriber[int]()
    rx.from_future(future).subscribe(ts)
    assert ts.values == []
    ts.request(1)
    assert ts.values == [7] and ts.completed


@pytest.mark.virtual
async def test_from_future_error_is_signalled_at_once_whatever_the_demand(loop: asyncio.AbstractEventLoop) -> None:
    future: asyncio.Future[str] = loop.create_future()
    ts = TestSubscriber[str]()
    rx.from_future(future).subscribe(ts)
    boom = RuntimeError("boom")
    future.set_exception(boom)
    await asyncio.sleep(0)
    assert ts.error is boom


@pytest.mark.virtual
async def test_from_future_a_cancelled_future_signals_cancelled_error(loop: asyncio.AbstractEventLoop) -> None:
    future: asyncio.Future[str] = loop.create_future()
    ts = TestSubscriber[str](1)
    rx.from_future(future).subscribe(ts)
    future.cancel()
    await asyncio.sleep(0)
    assert isinstance(ts.error, asyncio.CancelledError)


@pytest.mark.virtual
async def test_from_future_none_result_is_a_type_error(loop: asyncio.AbstractEventLoop) -> None:
    future: asyncio.Future[None] = loop.create_future()
    ts = TestSubscriber[Any](1)
    rx.from_future(future).subscribe(ts)
    future.set_result(None)
    await asyncio.sleep(0)
    assert isinstance(ts.error, TypeError) and ts.values == []


@pytest.mark.virtual
async def test_from_future_cancel_leaves_a_given_future_alone(loop: asyncio.AbstractEventLoop) -> None:
    future: asyncio.Future[str] = loop.create_future()
    a, b = TestSubscriber[str](1), TestSubscriber[str](1)
    flow = rx.from_future(future)
    flow.subscribe(a)
    flow.subscribe(b)
    a.cancel()
    assert not future.cancelled()  # reactivex would cancel it; it is not this subscription's
    future.set_result("x")
    await asyncio.sleep(0)
    assert a.values == [] and b.values == ["x"] and b.completed


@pytest.mark.virtual
async def test_from_future_a_coroutine_is_cold_and_run_as_a_task_on_subscribe(loop: asyncio.AbstractEventLoop) -> None:
    started: list[float] = []

    async def work() -> str:
        started.append(loop.time())
        await asyncio.sleep(2.0)
        return "done"

    flow = rx.from_future(work())
    await asyncio.sleep(5.0)
    assert started == []  # nothing ran before subscribe
    ts = Timeline(1)
    flow.subscribe(ts)
    await ts.await_done(10.0)
    assert started == [5.0] and ts.at == [(7.0, "done"), (7.0, "|")]


@pytest.mark.virtual
async def test_from_future_cancel_cancels_the_task_it_created(loop: asyncio.AbstractEventLoop) -> None:
    outcome: list[str] = []

    async def work() -> str:
        try:
            await asyncio.sleep(10.0)
        except asyncio.CancelledError:
            outcome.append("cancelled")
            raise
        return "done"

    ts = TestSubscriber[str](1)
    rx.from_future(work()).subscribe(ts)
    await asyncio.sleep(1.0)
    ts.cancel()
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert outcome == ["cancelled"] and not ts.done


@pytest.mark.virtual
async def test_from_future_an_error_raised_after_cancel_is_logged(rx_errors: Any) -> None:
    async def work() -> str:
        try:
            await asyncio.sleep(10.0)
        except asyncio.CancelledError:
            raise RuntimeError("cleanup failed") from None
        return "done"

    ts = TestSubscriber[str](1)
    rx.from_future(work()).subscribe(ts)
    await asyncio.sleep(1.0)
    ts.cancel()
    for _ in range(3):
        await asyncio.sleep(0)
    assert len(rx_errors) == 1 and "after its subscription was cancelled" in rx_errors[0].getMessage()


@pytest.mark.virtual
async def test_from_future_a_coroutine_runs_once_a_second_subscription_is_told_why() -> None:
    async def work() -> int:
        return 1

    flow = rx.from_future(work())
    first, second = TestSubscriber[int](1), TestSubscriber[int](1)
    flow.subscribe(first)
    await first.await_done(1.0)
    flow.subscribe(second)
    assert first.values == [1] and isinstance(second.error, RuntimeError)
    assert "rx.defer" in str(second.error)


@pytest.mark.virtual
async def test_from_future_defer_gives_a_fresh_run_per_subscription() -> None:
    runs: list[int] = []

    async def work() -> int:
        runs.append(1)
        return len(runs)

    flow = rx.defer(lambda: rx.from_future(work()))
    assert await flow.to_list() == [1]
    assert await flow.to_list() == [2]


@pytest.mark.loops("asyncio")
async def test_from_future_a_concurrent_future_from_a_thread() -> None:
    future: concurrent.futures.Future[str] = concurrent.futures.Future()
    ts = TestSubscriber[str](1)
    rx.from_future(future).subscribe(ts)
    threading.Timer(0.01, future.set_result, ("from a thread",)).start()
    await ts.await_done(5.0)
    assert ts.values == ["from a thread"] and ts.completed


def test_from_future_refuses_what_is_not_awaitable() -> None:
    with pytest.raises(TypeError):
        rx.from_future(42)  # type: ignore[arg-type]


def test_from_future_of_a_coroutine_off_a_loop_signals_runtime_error() -> None:
    async def work() -> int:
        return 1

    coro = work()
    ts = TestSubscriber[int](1)
    rx.from_future(coro).subscribe(ts)
    assert isinstance(ts.error, RuntimeError)
    coro.close()


@pytest.mark.virtual
async def test_from_future_invalid_request_signals_value_error(loop: asyncio.AbstractEventLoop) -> None:
    future: asyncio.Future[str] = loop.create_future()
    ts = TestSubscriber[str]()
    rx.from_future(future).subscribe(ts)
    ts.request(-1)
    assert isinstance(ts.error, ValueError)
    future.set_result("late")
    await asyncio.sleep(0)
    assert ts.values == []
