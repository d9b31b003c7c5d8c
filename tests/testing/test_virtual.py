"""The virtual-time loop (DESIGN §9): sleeps and timers advance instantly and deterministically."""

from __future__ import annotations

import asyncio
import time

import pytest

import rxpipe as rx
from rxpipe.testing import TestSubscriber, VirtualTimeLoop, run_virtual


def test_a_ten_second_sleep_takes_no_wall_time_and_exactly_ten_virtual_seconds() -> None:
    async def main() -> tuple[float, float]:
        loop = asyncio.get_running_loop()
        before = loop.time()
        await asyncio.sleep(10)
        return before, loop.time()

    wall = time.perf_counter()
    before, after = run_virtual(main())
    assert time.perf_counter() - wall < 0.1
    assert before == 0.0
    assert after - before == 10.0


def test_run_virtual_returns_the_result_and_runs_on_a_virtual_loop() -> None:
    async def main() -> str:
        return type(asyncio.get_running_loop()).__name__

    assert run_virtual(main()) == "VirtualTimeLoop"


def test_timers_fire_in_time_order_at_their_exact_times() -> None:
    async def main() -> list[tuple[str, float]]:
        loop = asyncio.get_running_loop()
        fired: list[tuple[str, float]] = []
        loop.call_later(3.0, lambda: fired.append(("c", loop.time())))
        loop.call_later(1.0, lambda: fired.append(("a", loop.time())))
        loop.call_at(2.0, lambda: fired.append(("b", loop.time())))
        await asyncio.sleep(5)
        return fired

    assert run_virtual(main()) == [("a", 1.0), ("b", 2.0), ("c", 3.0)]


def test_concurrent_sleeps_interleave_deterministically() -> None:
    async def sleeper(name: str, delays: list[float], log: list[tuple[str, float]]) -> None:
        loop = asyncio.get_running_loop()
        for delay in delays:
            await asyncio.sleep(delay)
            log.append((name, loop.time()))

    async def main() -> list[tuple[str, float]]:
        log: list[tuple[str, float]] = []
        await asyncio.gather(sleeper("x", [1, 1, 1], log), sleeper("y", [1.5, 1.0], log))
        return log

    assert run_virtual(main()) == [("x", 1.0), ("y", 1.5), ("x", 2.0), ("y", 2.5), ("x", 3.0)]


def test_wait_for_times_out_at_the_exact_virtual_deadline() -> None:
    async def main() -> float:
        loop = asyncio.get_running_loop()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.sleep(3600), timeout=2.5)
        return loop.time()

    assert run_virtual(main()) == 2.5


def test_advance_jumps_the_clock_without_running_callbacks() -> None:
    async def main() -> tuple[float, list[float]]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualTimeLoop)
        fired: list[float] = []
        loop.call_later(1.0, lambda: fired.append(loop.time()))
        loop.advance(5.0)
        now = loop.time()
        await asyncio.sleep(0)
        with pytest.raises(ValueError, match="backwards"):
            loop.advance(-1.0)
        return now, fired

    now, fired = run_virtual(main())
    assert now == 5.0
    assert fired == [5.0]  # the overdue timer runs at the jumped-to time


def test_is_idle_sees_pending_timers_and_ready_callbacks() -> None:
    async def main() -> list[bool]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualTimeLoop)
        seen = [loop.is_idle()]
        handle = loop.call_later(1.0, lambda: None)
        seen.append(loop.is_idle())
        handle.cancel()
        seen.append(loop.is_idle())
        loop.call_soon(lambda: None)
        seen.append(loop.is_idle())
        await asyncio.sleep(0)
        seen.append(loop.is_idle())
        return seen

    assert run_virtual(main()) == [True, False, True, False, True]


def test_run_virtual_cancels_tasks_left_running() -> None:
    cancelled: list[bool] = []

    async def forever() -> None:
        try:
            await asyncio.sleep(1e9)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async def main() -> None:
        asyncio.get_running_loop().create_task(forever())
        await asyncio.sleep(1)

    run_virtual(main())
    assert cancelled == [True]


def test_interval_ticks_on_the_virtual_clock() -> None:
    async def main() -> list[tuple[int, float]]:
        loop = asyncio.get_running_loop()
        ticks: list[tuple[int, float]] = []
        ts = TestSubscriber[int](initial_request=3)
        rx.interval(0.25).pipe().subscribe(ts)
        while len(ts.values) < 3:
            await asyncio.sleep(0.05)
            if len(ts.values) > len(ticks):
                ticks.append((ts.values[-1], loop.time()))
        ts.cancel()
        return ticks

    # Each tick is observed by the first 0.05 s poll at or after it.
    ticks = run_virtual(main())
    assert [k for k, _ in ticks] == [0, 1, 2]
    assert [round(t, 9) for _, t in ticks] == [0.25, 0.5, 0.75]


@pytest.mark.virtual
async def test_the_plugin_runs_marked_tests_on_the_virtual_clock_from_zero(loop: asyncio.AbstractEventLoop) -> None:
    assert isinstance(loop, VirtualTimeLoop)
    assert loop.time() == 0.0
    await asyncio.sleep(86400)
    assert loop.time() == 86400.0


async def test_unmarked_async_tests_run_on_a_real_loop(loop: asyncio.AbstractEventLoop) -> None:
    assert not isinstance(loop, VirtualTimeLoop)
    assert await rx.just(1, 2).to_list() == [1, 2]


@pytest.mark.virtual
async def test_await_helpers_time_out_in_virtual_seconds(loop: asyncio.AbstractEventLoop) -> None:
    ts = TestSubscriber[int]()
    rx.interval(1.0).subscribe(ts)
    with pytest.raises(AssertionError, match="timed out after 30 s waiting for 1 items"):
        await ts.await_count(1, timeout=30)  # no demand: interval skips every tick
    assert loop.time() == 30.0
    ts.request(2)
    assert await ts.await_count(2, timeout=5) == [30, 31]
    assert loop.time() == 32.0
    ts.cancel()
