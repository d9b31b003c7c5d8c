"""``rate_limit``: token-bucket shaping of upstream demand on the loop clock (DESIGN §3)."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest

import rxpipe as rx
from rxpipe import UNBOUNDED, MissingBackpressureError
from rxpipe import operators as ops
from rxpipe.testing import TestPublisher, TestSubscriber, VirtualTimeLoop


def inner(ts: TestSubscriber[Any]) -> Any:
    return ts.subscription.upstream  # type: ignore[union-attr]


def timed(loop: asyncio.AbstractEventLoop, source: rx.Flowable[Any], *operators: Any,
          initial_request: int = UNBOUNDED) -> tuple[TestSubscriber[Any], list[tuple[float, Any]]]:
    """Subscribe a TestSubscriber; record (loop time, item) of every delivery."""
    out: list[tuple[float, Any]] = []
    ts = TestSubscriber[Any](initial_request=initial_request)
    source.pipe(*operators, ops.tap(lambda x: out.append((loop.time(), x)))).subscribe(ts)
    return ts, out


@pytest.mark.virtual
async def test_burst_at_start_then_the_rate(loop: asyncio.AbstractEventLoop) -> None:
    ts, out = timed(loop, rx.range(0, 10), ops.rate_limit(20, burst=5))
    await ts.await_done()
    assert out == [(0.0, 0), (0.0, 1), (0.0, 2), (0.0, 3), (0.0, 4),
                   (0.05, 5), (0.1, 6), (0.15, 7), (0.2, 8), (0.25, 9)]
    assert ts.completed and loop.time() == 0.25


@pytest.mark.virtual
async def test_default_burst_is_one(loop: asyncio.AbstractEventLoop) -> None:
    ts, out = timed(loop, rx.range(0, 5), ops.rate_limit(4))
    await ts.await_done()
    assert [t for t, _ in out] == [0.0, 0.25, 0.5, 0.75, 1.0]


@pytest.mark.virtual
async def test_a_long_run_keeps_the_rate(loop: asyncio.AbstractEventLoop) -> None:
    ts, out = timed(loop, rx.range(0, 301), ops.rate_limit(100, burst=1))
    await ts.await_done()
    assert out[-1] == (3.0, 300)
    assert all(b - a == pytest.approx(0.01) for (a, _), (b, _) in zip(out, out[1:], strict=False))


@pytest.mark.virtual
async def test_upstream_owes_at_most_the_tokens_available() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[int](initial_request=UNBOUNDED)
    pub.pipe(ops.rate_limit(10, burst=3)).subscribe(ts)
    assert pub.requests == [3]
    await asyncio.sleep(1.0)  # upstream stalls: tokens refill, but nothing more is requested
    assert pub.requests == [3]
    pub.emit(0, 1, 2)  # t=1.0: the three owed items take the three tokens
    assert pub.requests == [3]
    await asyncio.sleep(0.15)  # a token at 1.1
    assert pub.requests == [3, 1]
    await asyncio.sleep(0.1)  # 1.2: a second token, upstream still owes the first
    assert pub.requests == [3, 1, 1]
    await asyncio.sleep(0.1)
    assert pub.requests == [3, 1, 1, 1]  # owes 3 = burst: stops asking
    await asyncio.sleep(5.0)
    assert pub.requests == [3, 1, 1, 1] and inner(ts).timer is None
    pub.emit(3, 4, 5)  # a stalled upstream catching up sends at most burst back to back
    assert ts.values == [0, 1, 2, 3, 4, 5]
    ts.cancel()


@pytest.mark.virtual
async def test_demand_is_never_exceeded() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[int]()
    pub.pipe(ops.rate_limit(100, burst=10)).subscribe(ts)
    assert pub.requests == []  # no demand, no request, however many tokens
    ts.request(2)
    assert pub.requests == [2]
    pub.emit(0, 1)
    await asyncio.sleep(1.0)
    assert pub.requests == [2]
    ts.request(20)
    assert pub.requests == [2, 10]  # the full bucket
    ts.cancel()


@pytest.mark.virtual
async def test_a_forward_clock_jump_never_refills_beyond_burst(loop: VirtualTimeLoop) -> None:
    ts, out = timed(loop, rx.range(0, 20), ops.rate_limit(10, burst=3), initial_request=3)
    assert [x for _, x in out] == [0, 1, 2]
    loop.advance(100.0)
    ts.request(UNBOUNDED)
    assert [x for _, x in out] == [0, 1, 2, 3, 4, 5]  # 3 tokens, not 1,000
    await asyncio.sleep(0.1)
    assert [x for _, x in out][-1] == 6
    assert out[-1][0] == pytest.approx(100.1)
    ts.cancel()


@pytest.mark.virtual
async def test_an_idle_period_never_refills_beyond_burst(loop: asyncio.AbstractEventLoop) -> None:
    ts, out = timed(loop, rx.range(0, 20), ops.rate_limit(10, burst=2), initial_request=2)
    await asyncio.sleep(60.0)
    ts.request(UNBOUNDED)
    await ts.await_done()
    times = [t for t, _ in out]
    assert times[:4] == [0.0, 0.0, 60.0, 60.0]
    assert times[4] == pytest.approx(60.1) and times[-1] == pytest.approx(61.6)


@pytest.mark.virtual
async def test_cancel_propagates_upstream_and_stops_the_timer() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[int](initial_request=UNBOUNDED)
    pub.pipe(ops.rate_limit(1, burst=1)).subscribe(ts)
    pub.emit(0)
    sub = inner(ts)
    assert sub.timer is not None
    ts.cancel()
    assert pub.cancelled and sub.timer is None
    await asyncio.sleep(5)
    assert pub.requests == [1]


@pytest.mark.virtual
async def test_upstream_error_propagates_and_stops_the_timer() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[int](initial_request=UNBOUNDED)
    pub.pipe(ops.rate_limit(1, burst=2)).subscribe(ts)
    pub.emit(0, 1)
    boom = OSError("gone")
    pub.error(boom)
    assert ts.values == [0, 1] and ts.error is boom
    assert inner(ts).timer is None and not pub.cancelled


@pytest.mark.virtual
async def test_completion_while_waiting_for_tokens() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[int](initial_request=UNBOUNDED)
    pub.pipe(ops.rate_limit(1, burst=2)).subscribe(ts)
    pub.emit(0, 1).complete()
    assert ts.values == [0, 1] and ts.completed
    assert inner(ts).timer is None


@pytest.mark.virtual
async def test_emission_beyond_demand_is_a_protocol_violation() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[int](initial_request=UNBOUNDED)
    pub.pipe(ops.rate_limit(1, burst=2)).subscribe(ts)
    pub.emit(0, 1, 2)
    assert ts.values == [0, 1]
    assert isinstance(ts.error, MissingBackpressureError) and pub.cancelled


@pytest.mark.virtual
async def test_invalid_request_signals_value_error() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[int]()
    pub.pipe(ops.rate_limit(5)).subscribe(ts)
    ts.request(0)
    assert isinstance(ts.error, ValueError) and pub.cancelled


@pytest.mark.virtual
async def test_stage_kind_and_statistics() -> None:
    flow = rx.range(0, 10).pipe(ops.rate_limit(5, burst=4))
    assert (flow.kind, flow.name, flow.rate, flow.burst) == ("rate_limit", "rate_limit_1", 5.0, 4)
    ts = TestSubscriber[int](initial_request=6)
    flow.subscribe(ts)
    stats = inner(ts).statistics()
    assert (stats.stage, stats.demand, stats.buffered, stats.capacity, stats.items_in, stats.items_out) == (
        "rate_limit_1", 2, 0, None, 4, 4)
    ts.cancel()


def test_needs_a_running_loop() -> None:
    ts = TestSubscriber[int](initial_request=1)
    rx.range(0, 3).pipe(ops.rate_limit(5)).subscribe(ts)
    assert isinstance(ts.error, RuntimeError)


@pytest.mark.parametrize(("rate", "burst"), [(0, 1), (-1, 1), (math.inf, 1), (math.nan, 1), ("5", 1),
                                             (True, 1), (5, 0), (5, 1.5), (5, -2)])
def test_invalid_rate_or_burst_is_rejected(rate: Any, burst: Any) -> None:
    with pytest.raises(ValueError):
        ops.rate_limit(rate, burst)


async def test_paces_on_real_loops() -> None:
    loop = asyncio.get_running_loop()
    start = loop.time()
    values = await rx.range(0, 15).pipe(ops.rate_limit(500, burst=5)).to_list()
    assert values == list(range(15))
    assert loop.time() - start >= 10 / 500 - 1e-3  # 10 items after the burst, 2 ms apart
