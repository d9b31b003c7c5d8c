"""restart_with_backoff (Akka RestartSource.withBackoff): delays, jitter bounds, ``retry_after``,
max_restarts and its reset window, demand carried over between runs; kill_switch (Akka
SharedKillSwitch): shutdown and abort from outside, across streams and threads."""

from __future__ import annotations

import asyncio
import random
import threading
from datetime import timedelta
from typing import Any

import pytest

import rxpipe as rx
from rxpipe import UNBOUNDED
from rxpipe import operators as ops
from rxpipe.testing import TestPublisher, TestSubscriber


class Runs:
    """A factory of runs: each call returns a new TestPublisher and records its start time."""

    def __init__(self) -> None:
        self.runs: list[TestPublisher[Any]] = []
        self.started: list[float] = []
        self.new_run: asyncio.Event | None = None

    def __call__(self) -> TestPublisher[Any]:
        self.started.append(round(asyncio.get_running_loop().time(), 9))
        pub = TestPublisher[Any]()
        self.runs.append(pub)
        if self.new_run is not None:
            self.new_run.set()
        return pub

    async def next_run(self) -> None:
        """Wait (on the loop clock) for the next run to start."""
        self.new_run = asyncio.Event()
        await self.new_run.wait()

    @property
    def last(self) -> TestPublisher[Any]:
        return self.runs[-1]


class Throttled(Exception):
    def __init__(self, retry_after: float) -> None:
        super().__init__(f"429, retry after {retry_after} s")
        self.retry_after = retry_after


async def fail_runs(runs: Runs, count: int, error: BaseException | None = None) -> None:
    """Let ``count`` runs fail at once, each as soon as it starts."""
    for _ in range(count):
        waiting = asyncio.ensure_future(runs.next_run())
        await asyncio.sleep(0)
        runs.last.error(error or ConnectionError("down"))
        await waiting


@pytest.mark.virtual
async def test_delays_double_from_min_to_max_without_jitter() -> None:
    runs = Runs()
    ts = TestSubscriber[Any](initial_request=UNBOUNDED)
    ops.restart_with_backoff(runs, 0.5, 4.0, jitter=0.0).subscribe(ts)
    await fail_runs(runs, 6)
    starts = runs.started
    assert [round(b - a, 6) for a, b in zip(starts, starts[1:], strict=False)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    ts.cancel()
    assert runs.last.cancelled


@pytest.mark.virtual
async def test_jitter_stays_within_akkas_bounds_and_follows_the_rng() -> None:
    runs = Runs()
    ts = TestSubscriber[Any](initial_request=UNBOUNDED)
    ops.restart_with_backoff(runs, 0.1, 1.0, jitter=0.5, rng=random.Random(7)).subscribe(ts)
    await fail_runs(runs, 8)
    starts = runs.started
    delays = [b - a for a, b in zip(starts, starts[1:], strict=False)]
    mirror = random.Random(7)  # the same draws: delay = min(max, min * 2**k) * (1 + u * jitter)
    expected = [min(1.0, 0.1 * 2 ** k) * (1 + mirror.random() * 0.5) for k in range(8)]
    assert delays == pytest.approx(expected, abs=1e-6)
    for k, delay in enumerate(delays):
        base = min(1.0, 0.1 * 2 ** k)
        assert base <= delay < base * 1.5
    assert max(delays) > 1.0  # Akka's jitter is on top of max_s
    ts.cancel()


@pytest.mark.virtual
async def test_retry_after_is_the_minimum_delay_and_one_over_max_fails_at_once() -> None:
    runs = Runs()
    ts = TestSubscriber[Any](initial_request=UNBOUNDED)
    ops.restart_with_backoff(runs, 0.1, 10.0, jitter=0.0).subscribe(ts)
    await fail_runs(runs, 1, Throttled(3.0))
    await fail_runs(runs, 1, Throttled(0.01))  # shorter than the backoff (0.2 s): the backoff wins
    assert [round(t, 6) for t in runs.started] == [0.0, 3.0, 3.2]
    too_long = Throttled(11.0)
    runs.last.error(too_long)
    assert ts.error is too_long and len(runs.runs) == 3  # longer than max_s: given up at once


@pytest.mark.virtual
async def test_max_restarts_ends_with_the_last_runs_signal() -> None:
    runs = Runs()
    ts = TestSubscriber[Any](initial_request=UNBOUNDED)
    ops.restart_with_backoff(runs, 0.1, 1.0, jitter=0.0, max_restarts=2).subscribe(ts)
    await fail_runs(runs, 2)
    last = RuntimeError("third failure")
    runs.last.error(last)
    assert ts.error is last and len(runs.runs) == 3
    runs = Runs()
    ts = TestSubscriber[Any](initial_request=UNBOUNDED)
    ops.restart_with_backoff(runs, 0.1, 1.0, jitter=0.0, max_restarts=1).subscribe(ts)
    runs.last.emit("a").complete()  # a completion restarts too (withBackoff)...
    await asyncio.sleep(0.15)  # the second run starts at 0.1; it ends within the window (min_s)
    runs.last.emit("b").complete()  # ...until max_restarts: then it completes the stream
    assert ts.values == ["a", "b"] and ts.completed and len(runs.runs) == 2


@pytest.mark.virtual
async def test_a_run_lasting_the_window_resets_the_backoff() -> None:
    runs = Runs()
    ts = TestSubscriber[Any](initial_request=UNBOUNDED)
    ops.restart_with_backoff(runs, 0.1, 5.0, jitter=0.0, max_restarts=3,
                             max_restarts_within_s=timedelta(seconds=2)).subscribe(ts)
    await fail_runs(runs, 3)  # at 0, 0.1, 0.3: restarts 1, 2, 3 (delays 0.1, 0.2, 0.4)
    assert [round(t, 6) for t in runs.started] == [0.0, 0.1, 0.3, 0.7]
    await asyncio.sleep(2.5)  # the fourth run lasts longer than the window: count and delay reset
    await fail_runs(runs, 1)
    assert round(runs.started[-1] - runs.started[-2], 6) == 2.6  # 2.5 s of run + 0.1 s (min_s)
    assert ts.error is None


@pytest.mark.virtual
async def test_demand_carries_over_and_nothing_delivered_is_requested_again() -> None:
    runs = Runs()
    ts = TestSubscriber[Any]()
    ops.restart_with_backoff(runs, 1.0, 1.0, jitter=0.0).subscribe(ts)
    ts.request(5)
    assert runs.last.requests == [5]
    runs.last.emit("a", "b").error(ConnectionError("cut"))
    await asyncio.sleep(0.5)
    ts.request(2)  # during the backoff: nothing is requested, the demand waits
    await asyncio.sleep(0.5)
    assert len(runs.runs) == 2 and runs.runs[1].requests == [5]  # the new run: 3 owed + 2 more
    runs.last.emit("c", "d", "e", "f", "g")
    assert ts.values == ["a", "b", "c", "d", "e", "f", "g"] and runs.last.outstanding == 0


@pytest.mark.virtual
async def test_only_on_failures_completes_with_the_run() -> None:
    runs = Runs()
    ts = TestSubscriber[Any](initial_request=UNBOUNDED)
    ops.restart_with_backoff(runs, 0.1, 1.0, only_on_failures=True).subscribe(ts)
    await fail_runs(runs, 1)
    runs.last.emit(1).complete()
    assert ts.completed and ts.values == [1] and len(runs.runs) == 2


@pytest.mark.virtual
async def test_cancel_during_backoff_stops_the_timer_and_restarts_are_logged(
        loop: asyncio.AbstractEventLoop, caplog: pytest.LogCaptureFixture) -> None:
    runs = Runs()
    ts = TestSubscriber[Any](initial_request=UNBOUNDED)
    ops.restart_with_backoff(runs, 5.0, 5.0, jitter=0.0, name="feed").subscribe(ts)
    with caplog.at_level("WARNING", logger="rxpipe"):
        runs.last.error(ConnectionError("down"))
    assert any("restart_with_backoff 'feed': restart 1 in 5.000 s" in r.message for r in caplog.records)
    ts.cancel()
    await asyncio.sleep(10.0)
    assert len(runs.runs) == 1


@pytest.mark.virtual
async def test_each_subscription_is_its_own_restart_loop() -> None:
    flowable = ops.restart_with_backoff(lambda: rx.just(1, 2), 0.1, 0.1, max_restarts=2)
    assert await flowable.to_list() == [1, 2, 1, 2, 1, 2]
    assert await flowable.to_list() == [1, 2, 1, 2, 1, 2]


@pytest.mark.virtual
async def test_a_bad_factory_fails_the_stream() -> None:
    ts = TestSubscriber[Any](initial_request=UNBOUNDED)
    ops.restart_with_backoff(lambda: [1, 2], 0.1, 1.0).subscribe(ts)  # type: ignore[arg-type,return-value]
    assert isinstance(ts.error, TypeError) and "factory" in str(ts.error)
    ts = TestSubscriber[Any](initial_request=UNBOUNDED)
    ops.restart_with_backoff(lambda: 1 // 0, 0.1, 1.0).subscribe(ts)  # type: ignore[arg-type,return-value]
    assert isinstance(ts.error, ZeroDivisionError)


def test_restart_refuses_bad_arguments() -> None:
    def factory() -> Any:
        return rx.empty()

    with pytest.raises(ValueError, match="max_s"):
        ops.restart_with_backoff(factory, 2.0, 1.0)
    with pytest.raises(ValueError, match="min_s"):
        ops.restart_with_backoff(factory, 0, 1.0)
    with pytest.raises(ValueError, match="jitter"):
        ops.restart_with_backoff(factory, 1.0, 1.0, jitter=-0.1)
    with pytest.raises(ValueError, match="max_restarts"):
        ops.restart_with_backoff(factory, 1.0, 1.0, max_restarts=-1)
    with pytest.raises(TypeError, match="factory"):
        ops.restart_with_backoff(rx.empty(), 1.0, 1.0)  # type: ignore[arg-type]


# -- kill_switch -----------------------------------------------------------------------------------
@pytest.mark.virtual
async def test_shutdown_completes_downstream_and_cancels_upstream() -> None:
    switch = ops.kill_switch()
    pub = TestPublisher[int]()
    ts = TestSubscriber[int](initial_request=2)
    pub.pipe(switch, ops.map(lambda x: x * 10)).subscribe(ts)
    assert pub.requests == [2]  # demand passed through
    pub.emit(1, 2)
    switch.shutdown()
    assert ts.values == [10, 20] and ts.completed and pub.cancelled and switch.running == 0
    switch.abort(RuntimeError("too late"))  # the first call wins
    assert switch.state == ("shutdown", None)


@pytest.mark.virtual
async def test_abort_fails_every_stream_behind_the_switch_and_later_ones_at_once() -> None:
    switch = ops.kill_switch(name="stop")
    pubs = [TestPublisher[int]() for _ in range(3)]
    subs = [TestSubscriber[int](initial_request=UNBOUNDED) for _ in pubs]
    for pub, ts in zip(pubs, subs, strict=True):
        pub.pipe(switch).subscribe(ts)
    assert switch.running == 3
    boom = RuntimeError("operator pressed stop")
    switch.abort(boom)
    assert all(ts.error is boom for ts in subs) and all(pub.cancelled for pub in pubs)
    late = TestPublisher[int]()
    ts = TestSubscriber[int](initial_request=UNBOUNDED)
    late.pipe(switch).subscribe(ts)
    assert ts.error is boom and late.cancelled
    with pytest.raises(TypeError):
        ops.kill_switch().abort("no")  # type: ignore[arg-type]


@pytest.mark.loops("asyncio", "uvloop")
async def test_shutdown_from_another_thread_reaches_the_loop() -> None:
    switch = ops.kill_switch()
    ts = TestSubscriber[int](initial_request=UNBOUNDED)
    rx.interval(0.001).pipe(switch).subscribe(ts)
    await ts.await_count(3)
    thread = threading.Thread(target=switch.shutdown)
    thread.start()
    thread.join()
    await ts.await_done()
    assert ts.completed and ts.error is None and switch.running == 0
