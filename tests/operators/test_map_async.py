"""map_async: bounded concurrency, ordering, free-slot demand, cancel, errors, Retry, CircuitBreaker."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

import rxpipe as rx
from rxpipe import UNBOUNDED, CircuitOpenError, MissingBackpressureError
from rxpipe import operators as ops
from rxpipe.metrics import live_stages
from rxpipe.testing import TestPublisher, TestSubscriber


class InFlight:
    """Counts concurrent calls of an async function and remembers the peak."""

    def __init__(self) -> None:
        self.now = 0
        self.peak = 0
        self.calls = 0

    def enter(self) -> None:
        self.calls += 1
        self.now += 1
        self.peak = max(self.peak, self.now)

    def exit(self) -> None:
        self.now -= 1


def stage(name: str) -> Any:
    found = [s for s in live_stages() if s.counters.stage == name]
    assert len(found) == 1, found
    return found[0]


# ordering and concurrency -----------------------------------------------------------------------
@pytest.mark.virtual
async def test_forty_items_varying_delays_concurrency_3_ordered_peak_3(loop: asyncio.AbstractEventLoop) -> None:
    flight = InFlight()

    async def work(x: int) -> int:
        flight.enter()
        try:
            await asyncio.sleep(((x * 7) % 5 + 1) * 0.1)  # 0.1 .. 0.5 s, out of order
            return x * 10
        finally:
            flight.exit()

    out = await rx.range(0, 40).pipe(ops.map_async(work, concurrency=3)).to_list()
    assert out == [x * 10 for x in range(40)]
    assert flight.peak == 3
    assert flight.calls == 40


@pytest.mark.virtual
async def test_unordered_emits_in_completion_order(loop: asyncio.AbstractEventLoop) -> None:
    delays = {0: 3.0, 1: 1.0, 2: 2.0}

    async def work(x: int) -> str:
        await asyncio.sleep(delays[x])
        return f"{x}@{loop.time()}"

    out = await rx.range(0, 3).pipe(ops.map_async(work, concurrency=3, ordered=False)).to_list()
    assert out == ["1@1.0", "2@2.0", "0@3.0"]


@pytest.mark.virtual
async def test_ordered_holds_early_results_until_the_head_finishes(loop: asyncio.AbstractEventLoop) -> None:
    delays = {0: 3.0, 1: 1.0, 2: 2.0}
    arrivals: list[tuple[int, float]] = []

    async def work(x: int) -> int:
        await asyncio.sleep(delays[x])
        return x

    done = asyncio.get_running_loop().create_future()
    rx.range(0, 3).pipe(ops.map_async(work, concurrency=3)).subscribe(
        on_next=lambda x: arrivals.append((x, loop.time())), on_complete=lambda: done.set_result(None))
    await done
    assert arrivals == [(0, 3.0), (1, 3.0), (2, 3.0)]


# demand ------------------------------------------------------------------------------------------
async def test_gate_blocking_every_call_concurrency_4_upstream_emitted_and_requested_exactly_4() -> None:
    gate = asyncio.Event()
    started: list[int] = []

    async def blocked(x: int) -> int:
        started.append(x)
        await gate.wait()
        return x

    emitted: list[int] = []
    ts = TestSubscriber[int](initial_request=100)
    rx.range(0, 100).pipe(ops.tap(emitted.append), ops.map_async(blocked, concurrency=4)).subscribe(ts)
    pub = TestPublisher[int]()
    ts2 = TestSubscriber[int](initial_request=100)
    pub.pipe(ops.map_async(blocked, concurrency=4)).subscribe(ts2)
    assert pub.requests == [4]
    pub.emit(*range(4))
    for _ in range(5):
        await asyncio.sleep(0)
    assert emitted == [0, 1, 2, 3]
    assert sorted(started) == [0, 0, 1, 1, 2, 2, 3, 3]
    assert pub.requests == [4] and pub.total_requested == 4
    assert ts.values == [] and ts2.values == []
    gate.set()
    await ts2.await_count(4)
    assert ts2.values == [0, 1, 2, 3]
    assert pub.total_requested == 8  # one more per result delivered, never more
    ts.cancel()
    ts2.cancel()


@pytest.mark.virtual
async def test_upstream_demand_never_exceeds_free_slots_with_a_slow_consumer() -> None:
    async def instant(x: int) -> int:
        return x

    pub = TestPublisher[int]()
    ts = TestSubscriber[int](initial_request=1)
    pub.pipe(ops.map_async(instant, concurrency=2, name="slots")).subscribe(ts)
    assert pub.requests == [2]
    pub.emit(1, 2)
    await asyncio.sleep(0.1)
    # one result went out (slot freed → request(1)); the other waits for demand, holding its slot
    assert ts.values == [1]
    assert pub.requests == [2, 1]
    assert stage("slots").statistics().buffered == 1
    pub.emit(3)
    await asyncio.sleep(0.1)
    assert pub.requests == [2, 1]  # two slots held by results waiting: nothing more asked
    assert stage("slots").statistics().buffered == 2
    ts.request(5)
    assert ts.values == [1, 2, 3]
    assert pub.requests == [2, 1, 2]
    pub.complete()
    assert ts.completed


@pytest.mark.virtual
async def test_unordered_also_holds_a_slot_until_the_result_went_out() -> None:
    async def instant(x: int) -> int:
        return x

    pub = TestPublisher[int]()
    ts = TestSubscriber[int]()
    pub.pipe(ops.map_async(instant, concurrency=3, ordered=False)).subscribe(ts)
    pub.emit(1, 2, 3)
    await asyncio.sleep(0.1)
    assert pub.requests == [3]
    ts.request(2)
    assert sorted(ts.values) == [1, 2] and pub.requests == [3, 2]


@pytest.mark.virtual
async def test_emitting_beyond_the_free_slots_is_missing_backpressure() -> None:
    async def forever(x: int) -> int:
        await asyncio.sleep(1000.0)
        return x

    pub = TestPublisher[int]()
    ts = TestSubscriber[int](initial_request=10)
    pub.pipe(ops.map_async(forever, concurrency=2)).subscribe(ts)
    pub.emit(1, 2, 3)
    assert isinstance(ts.error, MissingBackpressureError)
    assert pub.cancelled


@pytest.mark.virtual
async def test_request_zero_is_a_value_error() -> None:
    async def fn(x: int) -> int:
        return x

    pub = TestPublisher[int]()
    ts = TestSubscriber[int]()
    pub.pipe(ops.map_async(fn)).subscribe(ts)
    ts.request(0)
    assert isinstance(ts.error, ValueError) and pub.cancelled


# cancel --------------------------------------------------------------------------------------------
async def test_cancel_mid_flight_cancels_every_call_and_leaves_no_task() -> None:
    cancelled: list[int] = []
    started = 0

    async def blocked(x: int) -> int:
        nonlocal started
        started += 1
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(x)
            raise
        return x

    pub = TestPublisher[int]()
    ts = TestSubscriber[int](initial_request=UNBOUNDED)
    pub.pipe(ops.map_async(blocked, concurrency=3)).subscribe(ts)
    pub.emit(1, 2, 3)
    await asyncio.sleep(0)
    assert started == 3
    before = len(asyncio.all_tasks())
    ts.cancel()
    assert pub.cancelled
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert sorted(cancelled) == [1, 2, 3]
    assert len(asyncio.all_tasks()) == before - 3
    assert ts.values == [] and ts.error is None and not ts.completed


async def test_an_exception_raised_by_a_call_s_cleanup_on_cancel_is_logged(rx_errors: Any) -> None:
    class CleanupFailed(Exception):
        pass

    async def fragile(x: int) -> int:
        try:
            await asyncio.Event().wait()
        finally:
            raise CleanupFailed(f"cleanup of {x}")  # replaces the CancelledError
        return x

    pub = TestPublisher[int]()
    ts = TestSubscriber[int](initial_request=UNBOUNDED)
    pub.pipe(ops.map_async(fragile, concurrency=2, name="fragile16")).subscribe(ts)
    pub.emit(1, 2)
    await asyncio.sleep(0)
    ts.cancel()
    for _ in range(3):
        await asyncio.sleep(0)
    assert [str(r.exc_info[1]) for r in rx_errors.records] == ["cleanup of 1", "cleanup of 2"]
    assert all("'fragile16'" in r.getMessage() for r in rx_errors.records)
    assert ts.values == [] and ts.error is None and not ts.completed


@pytest.mark.virtual
async def test_break_out_of_async_for_cancels_the_calls() -> None:
    cancelled = 0

    async def slow(x: int) -> int:
        nonlocal cancelled
        try:
            await asyncio.sleep(1.0 if x == 0 else 50.0)
        except asyncio.CancelledError:
            cancelled += 1
            raise
        return x

    async for x in rx.range(0, 10).pipe(ops.map_async(slow, concurrency=4)):
        assert x == 0
        break
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert cancelled == 3


# errors -----------------------------------------------------------------------------------------
@pytest.mark.virtual
async def test_a_failing_call_cancels_upstream_and_other_calls_and_cuts_ahead(loop: asyncio.AbstractEventLoop) -> None:
    error = KeyError("bad item")
    cancelled: list[int] = []

    async def fn(x: int) -> int:
        try:
            await asyncio.sleep({0: 10.0, 1: 1.0, 2: 2.0}[x])
        except asyncio.CancelledError:
            cancelled.append(x)
            raise
        if x == 2:
            raise error
        return x

    pub = TestPublisher[int]()
    ts = TestSubscriber[int](initial_request=10)
    pub.pipe(ops.map_async(fn, concurrency=3)).subscribe(ts)
    pub.emit(0, 1, 2)
    await ts.await_done(100.0)
    assert ts.error is error and ts.values == []  # 1 finished but waited behind 0: dropped
    assert loop.time() == 2.0
    assert pub.cancelled
    await asyncio.sleep(0)
    assert cancelled == [0]


@pytest.mark.virtual
async def test_none_result_is_a_type_error() -> None:
    async def nothing(x: int) -> None:
        return None

    ts = TestSubscriber[Any](initial_request=5)
    rx.just(1).pipe(ops.map_async(nothing)).subscribe(ts)
    await ts.await_done()
    assert isinstance(ts.error, TypeError) and "§2.13" in str(ts.error)


@pytest.mark.virtual
async def test_a_plain_function_is_a_type_error() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[Any](initial_request=5)
    pub.pipe(ops.map_async(lambda x: x)).subscribe(ts)  # type: ignore[arg-type, return-value]
    pub.emit(1)
    assert isinstance(ts.error, TypeError) and pub.cancelled


@pytest.mark.virtual
async def test_upstream_error_cancels_calls_and_is_signalled_at_once() -> None:
    cancelled = 0

    async def slow(x: int) -> int:
        nonlocal cancelled
        try:
            await asyncio.sleep(10.0)
        except asyncio.CancelledError:
            cancelled += 1
            raise
        return x

    pub = TestPublisher[int]()
    ts = TestSubscriber[int](initial_request=5)
    pub.pipe(ops.map_async(slow, concurrency=2)).subscribe(ts)
    pub.emit(1, 2)
    await asyncio.sleep(0)
    boom = RuntimeError("source broke")
    pub.error(boom)
    assert ts.error is boom
    await asyncio.sleep(0)
    assert cancelled == 2


@pytest.mark.virtual
async def test_completion_waits_for_the_calls_and_for_demand(loop: asyncio.AbstractEventLoop) -> None:
    async def slow(x: int) -> int:
        await asyncio.sleep(float(x))
        return x

    pub = TestPublisher[int]()
    ts = TestSubscriber[int](initial_request=1)
    pub.pipe(ops.map_async(slow, concurrency=3, name="partial")).subscribe(ts)
    pub.emit(1, 2, 3)
    pub.complete()
    assert not ts.completed
    await asyncio.sleep(5.0)
    assert ts.values == [1] and not ts.completed  # 2 and 3 are done but not demanded
    stats = stage("partial").statistics()
    assert (stats.buffered, stats.capacity, stats.items_in, stats.items_out) == (2, 3, 3, 1)
    ts.request(2)
    assert ts.values == [1, 2, 3] and ts.completed


def test_map_async_rejects_bad_arguments() -> None:
    async def fn(x: int) -> int:
        return x

    with pytest.raises(ValueError):
        ops.map_async(fn, concurrency=0)
    with pytest.raises(TypeError):
        ops.map_async(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        ops.map_async(fn, retry=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        ops.map_async(fn, breaker="open")  # type: ignore[arg-type]


def test_subscribing_without_a_running_loop_signals_runtime_error() -> None:
    async def fn(x: int) -> int:
        return x

    ts = TestSubscriber[int](initial_request=1)
    rx.just(1).pipe(ops.map_async(fn)).subscribe(ts)
    assert isinstance(ts.error, RuntimeError)


# Retry ------------------------------------------------------------------------------------------
@pytest.mark.virtual
async def test_retry_failing_twice_then_succeeding_is_called_3_times_within_jitter_bounds(
        loop: asyncio.AbstractEventLoop) -> None:
    times: list[float] = []

    async def flaky(x: int) -> int:
        times.append(loop.time())
        if len(times) <= 2:
            raise ConnectionError("reset by peer")
        return x

    retry = ops.Retry(attempts=3, base_s=1.0, cap_s=10.0, rng=random.Random(2024))
    out = await rx.just(5).pipe(ops.map_async(flaky, retry=retry)).to_list()
    reference = random.Random(2024)
    d1, d2 = reference.uniform(0.0, 1.0), reference.uniform(0.0, 2.0)
    assert out == [5]
    assert times == [0.0, d1, d1 + d2]
    assert 0.0 <= times[1] - times[0] <= 1.0 and 0.0 <= times[2] - times[1] <= 2.0


@pytest.mark.virtual
async def test_retry_gives_up_after_attempts_with_the_original_error(loop: asyncio.AbstractEventLoop) -> None:
    calls = 0
    last = OSError("still down")

    async def down(x: int) -> int:
        nonlocal calls
        calls += 1
        raise last

    ts = TestSubscriber[int](initial_request=1)
    rx.just(1).pipe(ops.map_async(down, retry=ops.Retry(4, 0.5, 1.0, rng=random.Random(9)))).subscribe(ts)
    await ts.await_done(100.0)
    assert ts.error is last and calls == 4


@pytest.mark.virtual
async def test_retry_after_5_with_cap_30_waits_at_least_5(loop: asyncio.AbstractEventLoop) -> None:
    times: list[float] = []

    class RateLimited(Exception):
        retry_after = 5

    async def fn(x: int) -> int:
        times.append(loop.time())
        if len(times) == 1:
            raise RateLimited("429")
        return x

    out = await rx.just(1).pipe(ops.map_async(fn, retry=ops.Retry(3, 0.5, 30.0))).to_list()
    assert out == [1]
    assert times == [0.0, 5.0]  # jitter <= 0.5 s, so retry_after decides: exactly 5 s


@pytest.mark.virtual
async def test_retry_after_3600_fails_after_one_call_without_sleeping(loop: asyncio.AbstractEventLoop) -> None:
    calls = 0

    class Overloaded(Exception):
        retry_after = 3600

    error = Overloaded("503")

    async def fn(x: int) -> int:
        nonlocal calls
        calls += 1
        raise error

    ts = TestSubscriber[int](initial_request=1)
    rx.just(1).pipe(ops.map_async(fn, retry=ops.Retry(5, 1.0, 30.0))).subscribe(ts)
    await ts.await_done()
    assert ts.error is error and calls == 1
    assert loop.time() == 0.0


@pytest.mark.virtual
async def test_an_item_keeps_its_slot_while_it_waits_to_retry(loop: asyncio.AbstractEventLoop) -> None:
    flight = InFlight()
    failed: set[int] = set()

    async def fn(x: int) -> int:
        flight.enter()
        try:
            await asyncio.sleep(0.1)
            if x not in failed:
                failed.add(x)
                raise ConnectionError(x)
            return x
        finally:
            flight.exit()

    pub = TestPublisher[int]()
    ts = TestSubscriber[int](initial_request=10)
    retry = ops.Retry(2, 1.0, 1.0, rng=random.Random(5))  # draws 0.6229... then 0.7417...
    pub.pipe(ops.map_async(fn, concurrency=2, retry=retry, name="retrying")).subscribe(ts)
    pub.emit(1, 2)
    await asyncio.sleep(0.5)
    # both failed at t=0.1 and sleep before their second call: no call runs, yet no slot is free
    assert flight.now == 0 and flight.calls == 2
    assert stage("retrying").statistics().buffered == 2
    assert pub.requests == [2]
    await ts.await_count(2, 10.0)
    assert ts.values == [1, 2] and flight.calls == 4
    assert pub.requests == [2, 1, 1]
    assert loop.time() == pytest.approx(0.2 + 0.7417869892607294)


# CircuitBreaker ------------------------------------------------------------------------------------
@pytest.mark.virtual
async def test_breaker_fails_fast_without_reaching_fn_until_reset_then_one_trial(
        loop: asyncio.AbstractEventLoop) -> None:
    breaker = ops.CircuitBreaker(failure_threshold=2, reset_timeout_s=10.0)
    calls: list[float] = []
    healthy = False

    async def backend(x: int) -> int:
        calls.append(loop.time())
        await asyncio.sleep(0.5)
        if not healthy:
            raise ConnectionError("refused")
        return x

    async def run(*items: int) -> TestSubscriber[int]:
        ts = TestSubscriber[int](initial_request=10)
        rx.from_iterable(items).pipe(ops.map_async(backend, concurrency=3, breaker=breaker)).subscribe(ts)
        await ts.await_done(100.0)
        return ts

    for _ in range(2):
        assert isinstance((await run(1)).error, ConnectionError)
    assert breaker.state == "open" and calls == [0.0, 0.5]  # opened at t=1.0
    await asyncio.sleep(5.0)
    ts = await run(1, 2, 3)
    assert isinstance(ts.error, CircuitOpenError) and ts.error.retry_after == 5.0
    assert len(calls) == 2  # failed fast: fn not reached
    await asyncio.sleep(4.999)
    assert isinstance((await run(1)).error, CircuitOpenError) and len(calls) == 2
    await asyncio.sleep(0.001)
    assert breaker.state == "half_open"
    healthy = True
    ts = await run(7, 8, 9)
    assert len(calls) == 3 and calls[2] == pytest.approx(11.0)  # exactly one trial call went through
    # 8 and 9 were refused while the trial ran; without a retry that fails the stream, which
    # cancels the trial: its permit goes back, the breaker stays half-open
    assert isinstance(ts.error, CircuitOpenError) and ts.error.retry_after is None
    await asyncio.sleep(0)
    assert breaker.state == "half_open"
    assert (await run(4)).values == [4]  # the next trial succeeds and closes the circuit
    assert len(calls) == 4 and breaker.state == "closed"
    assert (await run(5, 6)).values == [5, 6]


@pytest.mark.virtual
async def test_breaker_with_retry_waits_for_the_trial(loop: asyncio.AbstractEventLoop) -> None:
    breaker = ops.CircuitBreaker(failure_threshold=2, reset_timeout_s=10.0)
    calls: list[float] = []

    async def backend(x: int) -> int:
        calls.append(loop.time())
        if len(calls) <= 2:
            raise ConnectionError("refused")
        return x

    retry = ops.Retry(attempts=4, base_s=0.001, cap_s=30.0, rng=random.Random(11))
    out = await rx.just(1).pipe(ops.map_async(backend, retry=retry, breaker=breaker)).to_list()
    assert out == [1]
    assert len(calls) == 3
    assert calls[2] == pytest.approx(calls[1] + 10.0, abs=1e-9)  # attempt 3 refused, 4 = the trial
    assert breaker.state == "closed"


@pytest.mark.virtual
async def test_breaker_open_longer_than_the_cap_fails_at_once(loop: asyncio.AbstractEventLoop) -> None:
    breaker = ops.CircuitBreaker(failure_threshold=1, reset_timeout_s=60.0)
    calls = 0

    async def backend(x: int) -> int:
        nonlocal calls
        calls += 1
        raise ConnectionError("refused")

    ts = TestSubscriber[int](initial_request=1)
    retry = ops.Retry(attempts=5, base_s=0.1, cap_s=1.0, rng=random.Random(1))
    rx.just(1).pipe(ops.map_async(backend, retry=retry, breaker=breaker)).subscribe(ts)
    await ts.await_done()
    assert isinstance(ts.error, CircuitOpenError) and calls == 1
    assert ts.error.retry_after is not None and ts.error.retry_after > 59.0


@pytest.mark.virtual
async def test_cancelled_trial_gives_its_permit_back(loop: asyncio.AbstractEventLoop) -> None:
    breaker = ops.CircuitBreaker(failure_threshold=1, reset_timeout_s=1.0)
    breaker.acquire()
    breaker.record_failure()
    await asyncio.sleep(1.0)

    async def hang(x: int) -> int:
        await asyncio.sleep(100.0)
        return x

    ts = TestSubscriber[int](initial_request=1)
    rx.just(1).pipe(ops.map_async(hang, breaker=breaker)).subscribe(ts)
    await asyncio.sleep(0.1)
    assert breaker.retry_after is None  # trial in flight
    ts.cancel()
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert breaker.state == "half_open" and breaker.retry_after == 0.0
