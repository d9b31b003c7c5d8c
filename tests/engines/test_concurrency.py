"""ConcurrencyLimit (OpenAIEngine's window): the rules one by one, then convergence against a model
backend on virtual time (C slots, 429 above C; or queueing, latency growing with load)."""

from __future__ import annotations

import asyncio
from collections import deque

import pytest

from rxpipe import CircuitBreaker
from rxpipe.engines import OpenAIEngine
from rxpipe.engines._concurrency import ConcurrencyLimit


def test_a_refusal_cuts_to_backoff_times_in_flight_once_per_window() -> None:
    limit = ConcurrencyLimit(64, 64)
    assert limit.on_throttle(started_s=1.0, in_flight=64, now=2.0)
    assert limit.limit == pytest.approx(0.9 * 64) and limit.window == 57
    # refusals of calls sent before that decrease are the same congestion event
    assert not limit.on_throttle(started_s=1.5, in_flight=60, now=2.1)
    assert limit.window == 57 and limit.decreases == 1
    assert limit.on_throttle(started_s=2.05, in_flight=50, now=2.2)
    assert limit.window == 45


def test_a_fixed_limit_grows_back_one_call_per_window_of_successes_up_to_its_maximum() -> None:
    limit = ConcurrencyLimit(8, 8, backoff=0.8)
    limit.on_throttle(0.0, 5, 1.0)
    assert limit.limit == 4.0
    for _ in range(4):
        limit.on_success(0.1, 10, 4)
    expected = 4.0
    for _ in range(4):
        expected += 1 / expected
    assert limit.limit == pytest.approx(expected) and limit.window == 4  # 4.93: about one per window
    for _ in range(200):
        limit.on_success(0.1, 10, 8)
    assert limit.limit == 8.0


def test_after_a_pause_slow_start_doubles_per_window_up_to_the_limit_before() -> None:
    limit = ConcurrencyLimit(16, 16)
    limit.on_throttle(0.0, 16, 1.0)  # 12.8
    limit.on_pause()
    assert limit.window == 1 and limit.ssthresh == 16.0
    windows = []
    for _ in range(5):
        for _ in range(limit.window):
            limit.on_success(0.1, 10, limit.window)
        windows.append(limit.window)
    assert windows == [2, 4, 8, 16, 16]
    assert limit.ssthresh == 0.0  # slow start is over


def test_adaptive_grows_at_steady_latency_and_shrinks_when_latency_grows() -> None:
    limit = ConcurrencyLimit(4, 100, adaptive=True)
    for _ in range(20):
        limit.on_success(0.5, 49, limit.window)  # 10 ms per token
    grown = limit.limit
    assert grown > 10
    for _ in range(20):
        limit.on_success(2.0, 49, limit.window)  # 40 ms per token: 4× the long-run level
    assert limit.limit < grown * 0.5


def test_adaptive_does_not_grow_while_application_limited() -> None:
    limit = ConcurrencyLimit(20, 100, adaptive=True)
    for _ in range(50):
        limit.on_success(0.1, 9, in_flight=3)
    assert limit.limit == 20.0


def test_latency_is_normalised_per_output_token() -> None:
    limit = ConcurrencyLimit(10, 100, adaptive=True)
    limit.on_success(1.0, 99, 10)  # 10 ms per token
    limit.on_success(0.1, 9, 10)  # a short answer, same per-token speed
    assert limit.long_latency == pytest.approx(0.01)


class ModelBackend:
    """``slots`` calls served at once for ``service_s`` each; above that a 429 (after 1 ms) with a
    Retry-After of ``retry_after_s`` — the issue's stub, on virtual time. A client with unbounded
    demand sends as many calls as the window allows."""

    def __init__(self, limit: ConcurrencyLimit, slots: int, service_s: float, retry_after_s: float = 1.0) -> None:
        self.limit = limit
        self.slots = slots
        self.service_s = service_s
        self.retry_after_s = retry_after_s
        self.in_flight = 0
        self.ready: deque[int] = deque(range(100_000))
        self.served = 0
        self.windows: list[tuple[float, int]] = []
        self.open = False

    def fill(self) -> None:
        """Send calls while the window has room (after every start, answer and retry timer)."""
        loop = asyncio.get_running_loop()
        while self.open and self.ready and self.in_flight < self.limit.window:
            self.in_flight += 1
            task = loop.create_task(self.call(self.ready.popleft(), loop.time()))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def run(self, duration_s: float) -> None:
        loop = asyncio.get_running_loop()
        end = loop.time() + duration_s
        self.open = True
        self.tasks: set[asyncio.Task[None]] = set()
        self.fill()
        while loop.time() < end:
            self.windows.append((loop.time(), self.limit.window))
            await asyncio.sleep(0.01)
        self.open = False
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    async def call(self, n: int, started: float) -> None:
        loop = asyncio.get_running_loop()
        if self.in_flight > self.slots:
            await asyncio.sleep(0.001)
            self.limit.on_throttle(started, self.in_flight, loop.time())
            self.in_flight -= 1
            self.fill()
            await asyncio.sleep(self.retry_after_s)
            self.ready.appendleft(n)
            self.fill()
            return
        await asyncio.sleep(self.service_s)
        self.limit.on_success(loop.time() - started, 8, self.in_flight)
        self.in_flight -= 1
        self.served += 1
        self.fill()


@pytest.mark.loops("virtual")
@pytest.mark.parametrize("slots", [2, 8, 16])
async def test_auto_converges_within_25_percent_of_the_true_concurrency_with_90_percent_goodput(slots: int) -> None:
    limit = ConcurrencyLimit(4, 256, adaptive=True)
    backend = ModelBackend(limit, slots, service_s=0.05)
    await backend.run(30.0)
    settled = [w for t, w in backend.windows if t >= 10.0]
    mean = sum(settled) / len(settled)
    assert abs(mean - slots) <= 0.25 * slots, (slots, mean)
    # a hand-tuned fixed limit (= slots) serves slots / service_s per second, never refused
    fixed = slots / 0.05 * 30.0
    assert backend.served >= 0.9 * fixed, (backend.served, fixed)


@pytest.mark.loops("virtual")
async def test_a_fixed_limit_of_64_settles_at_the_backends_4_slots() -> None:
    limit = ConcurrencyLimit(64, 64)
    backend = ModelBackend(limit, 4, service_s=0.05, retry_after_s=2.0)
    await backend.run(20.0)
    settled = [w for t, w in backend.windows if t >= 5.0]
    assert abs(sum(settled) / len(settled) - 4) <= 1.0
    assert backend.served >= 0.9 * 4 / 0.05 * 20.0


class _CountingBreaker(CircuitBreaker):
    """A breaker that counts reads of its ``state`` (which may read the clock)."""

    __slots__ = ("reads",)

    def __init__(self) -> None:
        super().__init__(1, 10.0, clock=lambda: 0.0)
        self.reads = 0

    @property
    def state(self) -> str:
        self.reads += 1
        return super().state


def test_free_slots_in_the_usual_state_are_the_window_less_the_calls_held_without_reading_the_breaker() -> None:
    breaker = _CountingBreaker()
    engine = OpenAIEngine("http://127.0.0.1:9/v1", "m", 8, breaker=breaker)
    assert (engine.free_slots, engine.available, breaker.reads) == (8, True, 0)
    for limit, free in ((2.7, 2), (0.5, 1), (20.0, 8)):  # window = max(1, int(limit)), at most max_in_flight
        engine.limiter.limit = limit
        assert (engine.concurrency_limit, engine.free_slots) == (max(1, int(limit)), free)
    assert breaker.reads == 0
    breaker.acquire()
    breaker.record_failure()  # open: the general rule, which asks the breaker
    assert engine.available is False and breaker.reads >= 1
