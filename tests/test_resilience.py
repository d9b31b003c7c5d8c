"""Retry and CircuitBreaker on their own, and resilient_call combining them (virtual clock)."""

from __future__ import annotations

import asyncio
import random

import pytest

import rxpipe as rx
from rxpipe import CircuitOpenError
from rxpipe.resilience import CircuitBreaker, Retry, resilient_call, retry_after_of


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Busy(Exception):
    def __init__(self, retry_after: object = None) -> None:
        super().__init__(f"busy, retry after {retry_after}")
        self.retry_after = retry_after


def test_public_names() -> None:
    from rxpipe import operators as ops

    assert rx.Retry is Retry and ops.Retry is Retry
    assert rx.CircuitBreaker is CircuitBreaker and ops.CircuitBreaker is CircuitBreaker


# Retry ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("args", [(0, 1.0, 2.0), (1.5, 1.0, 2.0), (True, 1.0, 2.0), (3, -1.0, 2.0),
                                  (3, 2.0, 1.0)])
def test_retry_rejects_bad_arguments(args: tuple[object, float, float]) -> None:
    with pytest.raises(ValueError):
        Retry(*args)  # type: ignore[arg-type]


def test_retry_full_jitter_bounds_double_up_to_the_cap() -> None:
    retry = Retry(10, 0.5, 3.0)
    assert [retry.backoff_bound(k) for k in range(1, 7)] == [0.5, 1.0, 2.0, 3.0, 3.0, 3.0]
    assert retry.backoff_bound(5000) == 3.0  # no float overflow


def test_retry_delays_are_seeded_uniform_draws_within_the_bounds() -> None:
    retry = Retry(4, 1.0, 10.0, rng=random.Random(42))
    reference = random.Random(42)
    expected = [reference.uniform(0.0, 1.0), reference.uniform(0.0, 2.0), reference.uniform(0.0, 4.0)]
    delays = [retry.delay(k, ValueError()) for k in (1, 2, 3)]
    assert delays == expected
    assert 0.0 <= expected[0] <= 1.0 and 0.0 <= expected[1] <= 2.0 and 0.0 <= expected[2] <= 4.0
    assert retry.delay(4, ValueError()) is None  # 4 calls made: attempts spent


def test_retry_after_is_the_minimum_delay_and_above_the_cap_gives_up() -> None:
    retry = Retry(5, 0.1, 30.0, rng=random.Random(1))
    assert retry.delay(1, Busy(5)) == 5.0
    assert retry.delay(1, Busy(30)) == 30.0
    assert retry.delay(1, Busy(3600)) is None
    assert retry.delay(1, Busy("soon")) is not None  # not a number: ignored
    assert retry.delay(1, Busy(-1)) is not None


def test_retry_after_of_reads_numbers_only() -> None:
    assert retry_after_of(Busy(2)) == 2.0
    assert retry_after_of(Busy("7.5")) == 7.5
    assert retry_after_of(Busy(None)) is None
    assert retry_after_of(Busy(True)) is None
    assert retry_after_of(ValueError()) is None


def test_retry_on_limits_what_is_retried() -> None:
    retry = Retry(3, 1.0, 1.0, retry_on=(ConnectionError,))
    assert retry.delay(1, ConnectionResetError()) is not None
    assert retry.delay(1, ValueError()) is None


def test_single_attempt_never_retries() -> None:
    assert Retry(1, 1.0, 1.0).delay(1, ValueError()) is None


# CircuitBreaker ----------------------------------------------------------------------------------
@pytest.mark.parametrize("args", [(0, 1.0), (1, -1.0), (2.5, 1.0)])
def test_breaker_rejects_bad_arguments(args: tuple[object, float]) -> None:
    with pytest.raises(ValueError):
        CircuitBreaker(*args)  # type: ignore[arg-type]


def test_breaker_opens_after_threshold_consecutive_failures_and_fails_fast() -> None:
    clock = Clock()
    breaker = CircuitBreaker(3, 10.0, clock=clock)
    for _ in range(2):
        assert breaker.acquire() is False
        breaker.record_failure()
    assert breaker.state == "closed" and breaker.consecutive_failures == 2
    assert breaker.acquire() is False
    breaker.record_failure()
    assert breaker.state == "open"
    clock.now = 4.0
    with pytest.raises(CircuitOpenError) as refused:
        breaker.acquire()
    assert refused.value.retry_after == 6.0
    assert breaker.retry_after == 6.0


def test_breaker_success_resets_the_consecutive_count() -> None:
    breaker = CircuitBreaker(2, 1.0, clock=Clock())
    breaker.acquire()
    breaker.record_failure()
    breaker.acquire()
    breaker.record_success()
    breaker.acquire()
    breaker.record_failure()
    assert breaker.state == "closed" and breaker.consecutive_failures == 1


def test_breaker_half_open_lets_exactly_one_trial_through_then_closes_on_success() -> None:
    clock = Clock()
    breaker = CircuitBreaker(1, 10.0, clock=clock)
    breaker.acquire()
    breaker.record_failure()
    clock.now = 9.5
    assert breaker.state == "open"
    clock.now = 10.0
    assert breaker.state == "half_open" and breaker.retry_after == 0.0
    assert breaker.acquire() is True  # the trial
    with pytest.raises(CircuitOpenError) as refused:
        breaker.acquire()
    assert refused.value.retry_after is None
    assert breaker.retry_after is None
    breaker.record_success()
    assert breaker.state == "closed" and breaker.consecutive_failures == 0
    assert breaker.acquire() is False and breaker.acquire() is False


def test_breaker_failed_trial_reopens_for_another_reset_timeout() -> None:
    clock = Clock()
    breaker = CircuitBreaker(2, 10.0, clock=clock)
    for _ in range(2):
        breaker.acquire()
        breaker.record_failure()
    clock.now = 10.0
    assert breaker.acquire() is True
    clock.now = 11.0
    breaker.record_failure()
    assert breaker.state == "open"
    with pytest.raises(CircuitOpenError) as refused:
        breaker.acquire()
    assert refused.value.retry_after == 10.0
    clock.now = 21.0
    assert breaker.state == "half_open"


def test_breaker_release_gives_back_an_abandoned_trial() -> None:
    clock = Clock()
    breaker = CircuitBreaker(1, 1.0, clock=clock)
    breaker.acquire()
    breaker.record_failure()
    clock.now = 1.0
    assert breaker.acquire() is True
    breaker.release()
    assert breaker.state == "half_open"
    assert breaker.acquire() is True


def test_breaker_ignores_outcomes_of_calls_admitted_before_it_opened() -> None:
    clock = Clock()
    breaker = CircuitBreaker(1, 5.0, clock=clock)
    breaker.acquire()
    breaker.acquire()
    breaker.record_failure()
    clock.now = 2.0
    breaker.record_success()  # the other call, admitted while closed
    breaker.record_failure()
    assert breaker.state == "open" and breaker.retry_after == 3.0


@pytest.mark.virtual
async def test_breaker_reads_the_loop_clock_by_default(loop: asyncio.AbstractEventLoop) -> None:
    breaker = CircuitBreaker(1, 10.0)

    async def boom() -> None:
        raise OSError("down")

    with pytest.raises(OSError):
        await breaker.call(boom)
    await asyncio.sleep(7.0)
    with pytest.raises(CircuitOpenError) as refused:
        await breaker.call(boom)
    assert refused.value.retry_after == 3.0
    await asyncio.sleep(3.0)
    assert breaker.state == "half_open"

    async def ok() -> str:
        return "ok"

    assert await breaker.call(ok) == "ok"
    assert breaker.state == "closed" and loop.time() == 10.0


# resilient_call ----------------------------------------------------------------------------------
@pytest.mark.virtual
async def test_resilient_call_retries_with_the_drawn_delays(loop: asyncio.AbstractEventLoop) -> None:
    times: list[float] = []

    async def flaky(x: int) -> int:
        times.append(loop.time())
        if len(times) < 3:
            raise ConnectionError("reset")
        return x * 2

    result = await resilient_call(flaky, 21, retry=Retry(3, 1.0, 10.0, rng=random.Random(3)))
    reference = random.Random(3)
    d1, d2 = reference.uniform(0.0, 1.0), reference.uniform(0.0, 2.0)
    assert result == 42
    assert times == [0.0, d1, d1 + d2]


@pytest.mark.virtual
async def test_resilient_call_waits_for_the_breaker_through_retry_after(loop: asyncio.AbstractEventLoop) -> None:
    breaker = CircuitBreaker(2, 10.0)
    times: list[float] = []

    async def fn(x: int) -> int:
        times.append(loop.time())
        if len(times) <= 2:
            raise OSError("backend down")
        return x

    retry = Retry(4, 0.001, 30.0, rng=random.Random(0))
    assert await resilient_call(fn, 7, retry=retry, breaker=breaker) == 7
    # two failures opened the breaker at times[1]; the refused third attempt waited for half-open
    assert len(times) == 3
    assert times[2] == pytest.approx(times[1] + 10.0, abs=1e-9)
    assert breaker.state == "closed"


@pytest.mark.virtual
async def test_resilient_call_deadline_raises_timeout_error(loop: asyncio.AbstractEventLoop) -> None:
    async def slow(x: int) -> int:
        await asyncio.sleep(100.0)
        return x

    with pytest.raises(TimeoutError):
        await resilient_call(slow, 1, timeout_s=2.5)
    assert loop.time() == 2.5


def test_breaker_closed_is_the_closed_state_without_a_clock_reading() -> None:
    readings = []
    clock = Clock()

    def reading() -> float:
        readings.append(clock.now)
        return clock.now

    breaker = CircuitBreaker(1, 10.0, clock=reading)
    assert breaker.closed is True and readings == []  # polled per request: no clock while closed
    breaker.acquire()
    breaker.record_failure()
    assert (breaker.closed, breaker.state) == (False, "open")
    clock.now = 10.0
    assert (breaker.closed, breaker.state) == (False, "half_open")
    assert breaker.acquire() is True
    breaker.record_success()
    assert (breaker.closed, breaker.state) == (True, "closed")
