"""rx.generate_with_relative_time (DESIGN §3, "The kit, third round"): reactivex 6.1's values and
times on 120 seeded runs (its TestScheduler against rxpipe's virtual loop), the demand rule (one
due value at a time, the next delay starts once it went out), cancel, errors."""

from __future__ import annotations

import asyncio
import datetime
import random
from typing import Any, Callable

import pytest
import reactivex

import rxpipe as rx
from rxpipe import UNBOUNDED
from rxpipe import operators as ops
from rxpipe.testing import TestSubscriber, run_virtual

from .operators.differential import TimedCase, timed_through_reactivex, timed_through_rxpipe
from .timeline import Timeline

NO_INPUT = TimedCase((), 0.0)
DELAYS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0)  # no 0: reactivex 6.1 asserts a delay is truthy (`assert time`)


def _arguments(seed: int) -> tuple[Any, ...]:
    """Seeded arguments: a start, a bound, a step, per-state delays (timedeltas on odd seeds), and
    on some seeds a function raising at some state."""
    rng = random.Random(seed)
    start, stop, step = rng.randint(0, 5), rng.randint(0, 30), rng.choice((1, 2, 3))
    delays = [rng.choice(DELAYS) for _ in range(7)]
    raising = rng.choice((None, None, "condition", "iterate", "time_mapper"))
    bad = rng.randint(start, start + 12)

    def check(where: str, x: int) -> None:
        if where == raising and x == bad:
            raise ValueError(f"{where} at {x}")

    def condition(x: int) -> bool:
        check("condition", x)
        return x < stop

    def iterate(x: int) -> int:
        check("iterate", x)
        return x + step

    def time_mapper(x: int) -> Any:
        check("time_mapper", x)
        delay = delays[x % len(delays)]
        return datetime.timedelta(seconds=delay) if seed % 2 else delay

    return start, condition, iterate, time_mapper


@pytest.mark.parametrize("seed", range(120))
def test_equal_to_reactivex_in_values_and_times(seed: int) -> None:
    args = _arguments(seed)
    got = timed_through_rxpipe(lambda _: rx.generate_with_relative_time(*args), NO_INPUT)
    assert got == timed_through_reactivex(lambda _: reactivex.generate_with_relative_time(*args), NO_INPUT)


def _counting(calls: list[str]) -> tuple[Callable[[int], bool], Callable[[int], int], Callable[[int], float]]:
    def condition(x: int) -> bool:
        calls.append(f"c{x}")
        return x < 4

    def iterate(x: int) -> int:
        calls.append(f"i{x}")
        return x + 1

    def time_mapper(x: int) -> float:
        calls.append(f"t{x}")
        return 1.0

    return condition, iterate, time_mapper


@pytest.mark.virtual
async def test_emits_only_on_demand_and_the_next_delay_starts_when_a_value_went_out() -> None:
    calls: list[str] = []
    ts = Timeline(initial_request=1)
    rx.generate_with_relative_time(0, *_counting(calls)).subscribe(ts)
    assert calls == ["c0", "t0"]  # the first state is checked at subscribe, due 1 s later
    await asyncio.sleep(5.0)
    assert ts.at == [(1.0, 0)]
    assert calls == ["c0", "t0", "i0", "c1", "t1"]  # 1 is due at 2.0; nobody asked: it waits, alone
    ts.request(2)
    assert ts.at == [(1.0, 0), (5.0, 1)]  # delivered at the request
    await ts.await_count(3, 10.0)
    assert ts.at[-1] == (6.0, 2)  # the delay after 1 started when 1 went out (5.0), not when it was due
    assert calls[-3:] == ["i2", "c3", "t3"]  # and 3 waits for demand
    ts.request(UNBOUNDED)
    await ts.await_done(10.0)
    assert ts.at[-2:] == [(7.0, 3), (7.0, "|")]  # completion follows the last item at once


@pytest.mark.virtual
async def test_cancel_stops_the_timer_and_calls_nothing_more() -> None:
    calls: list[str] = []
    ts = TestSubscriber[int](initial_request=UNBOUNDED)
    rx.generate_with_relative_time(0, *_counting(calls)).subscribe(ts)
    await ts.await_count(1, 10.0)
    ts.cancel()
    ts.cancel()  # idempotent
    before = list(calls)
    await asyncio.sleep(10.0)
    assert calls == before and ts.values == [0] and not ts.done  # no timer left (the leak check agrees)


@pytest.mark.virtual
async def test_per_subscription_the_state_starts_again_and_take_ends_an_endless_one() -> None:
    source = rx.generate_with_relative_time(1, lambda x: True, lambda x: x * 2, lambda x: 0.5)
    assert await source.pipe(ops.take(4)).to_list() == [1, 2, 4, 8]
    assert await source.pipe(ops.take(2)).to_list() == [1, 2]


@pytest.mark.virtual
async def test_a_condition_false_at_once_completes_at_subscribe() -> None:
    ts = Timeline()
    rx.generate_with_relative_time(0, lambda x: False, lambda x: x, lambda x: 1.0).subscribe(ts)
    assert ts.at == [(0.0, "|")]


@pytest.mark.parametrize(
    "delay, error",
    [
        (-1, ValueError),
        (float("inf"), ValueError),
        (float("nan"), ValueError),
        ("1", TypeError),
        (True, TypeError),
        (None, TypeError),
    ],
)
def test_a_bad_delay_is_signalled(delay: Any, error: type[Exception]) -> None:
    async def main() -> TestSubscriber[Any]:
        ts = TestSubscriber[Any](initial_request=1)
        rx.generate_with_relative_time(0, lambda x: True, lambda x: x, lambda x: delay).subscribe(ts)
        return ts

    ts = run_virtual(main())
    assert isinstance(ts.error, error) and "time_mapper returned" in str(ts.error)


def test_errors() -> None:
    with pytest.raises(TypeError, match="time_mapper"):
        rx.generate_with_relative_time(0, lambda x: True, lambda x: x, 0.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="condition"):
        rx.generate_with_relative_time(0, True, lambda x: x, lambda x: 0.5)  # type: ignore[arg-type]
    ts = TestSubscriber[Any](initial_request=1)
    rx.generate_with_relative_time(0, lambda x: True, lambda x: x, lambda x: 0.5).subscribe(ts)
    assert isinstance(ts.error, RuntimeError) and "running event loop" in str(ts.error)

    async def none_state() -> TestSubscriber[Any]:
        ts = TestSubscriber[Any](initial_request=1)
        rx.generate_with_relative_time(None, lambda x: True, lambda x: x, lambda x: 0.5).subscribe(ts)
        return ts

    assert isinstance(run_virtual(none_state()).error, TypeError)  # §2.13

    async def bad_request() -> TestSubscriber[Any]:
        ts = TestSubscriber[Any]()
        rx.generate_with_relative_time(0, lambda x: True, lambda x: x, lambda x: 0.5).subscribe(ts)
        ts.request(0)
        await asyncio.sleep(1.0)
        return ts

    assert isinstance(run_virtual(bad_request()).error, ValueError)  # §3.9, and the timer is gone
