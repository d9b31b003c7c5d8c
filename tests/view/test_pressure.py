"""Busy / backpressured / idle time from demand, on the virtual clock: exact seconds per state."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import rxpipe as rx
from rxpipe import UNBOUNDED
from rxpipe import operators as ops
from rxpipe.metrics import live_stages
from rxpipe.stage import BACKPRESSURED, BUSY, IDLE, PressureClock
from rxpipe.testing import TestPublisher, TestSubscriber


def stage(name: str) -> Any:
    found = [s for s in live_stages() if s.counters.stage == name and not s.cancelled]
    assert len(found) == 1, found
    return found[0]


def seconds(name: str) -> tuple[float, float]:
    clock = stage(name).pressure_clock
    if clock is None:
        return 0.0, 0.0
    _, busy, backpressured = clock.reading()
    return round(busy, 9), round(backpressured, 9)


def test_a_clock_accounts_each_interval_to_the_state_it_was_in() -> None:
    now = [10.0]
    clock = PressureClock(lambda: now[0])
    now[0] = 11.0
    clock.enter(BUSY)
    now[0] = 11.5
    clock.enter(BACKPRESSURED)
    now[0] = 12.25
    clock.enter(IDLE)
    now[0] = 13.0
    assert clock.reading() == (13.0, 0.5, 0.75)
    clock.enter(BUSY)
    now[0] = 13.5
    assert clock.reading() == (13.5, 1.0, 0.75)  # the open interval counts


@pytest.mark.virtual
async def test_a_buffer_is_backpressured_exactly_while_it_holds_items_without_demand(
        loop: asyncio.AbstractEventLoop) -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[int]()
    pub.pipe(ops.buffer(4, name="buf")).subscribe(ts)
    await asyncio.sleep(0.1)
    assert seconds("buf") == (0.0, 0.0)  # never left idle: no clock at all
    assert stage("buf").pressure_clock is None
    pub.emit(1)
    pub.emit(2)
    await asyncio.sleep(0.3)
    assert stage("buf").pressure_state == BACKPRESSURED
    ts.request(1)  # one of two delivered: still holds one, demand 0 again
    await asyncio.sleep(0.2)
    ts.request(5)  # empty now, demand 4 left: idle
    await asyncio.sleep(0.4)
    assert ts.values == [1, 2]
    assert seconds("buf") == (0.0, 0.5)
    assert stage("buf").pressure_state == IDLE
    ts.cancel()


@pytest.mark.virtual
async def test_map_async_is_busy_exactly_while_calls_are_in_flight(loop: asyncio.AbstractEventLoop) -> None:
    async def slow(x: int) -> int:
        await asyncio.sleep(0.25 * x)
        return x

    pub = TestPublisher[int]()
    ts = TestSubscriber[int](initial_request=UNBOUNDED)
    pub.pipe(ops.map_async(slow, concurrency=2, name="calls")).subscribe(ts)
    await asyncio.sleep(0.5)
    pub.emit(1)
    pub.emit(4)  # two calls at once: busy from the first start to the last end (1.0 s)
    await asyncio.sleep(2.0)
    pub.emit(2)
    await asyncio.sleep(1.0)
    assert ts.values == [1, 4, 2]
    assert seconds("calls") == (1.5, 0.0)
    ts.cancel()


@pytest.mark.virtual
async def test_map_async_results_held_without_demand_are_backpressure_once_no_call_runs(
        loop: asyncio.AbstractEventLoop) -> None:
    async def slow(x: int) -> int:
        await asyncio.sleep(0.5)
        return x

    pub = TestPublisher[int]()
    ts = TestSubscriber[int]()
    pub.pipe(ops.map_async(slow, concurrency=2, name="calls")).subscribe(ts)
    pub.emit(1)
    await asyncio.sleep(1.5)  # 0.5 s busy, then the result waits 1 s for demand
    ts.request(1)
    await asyncio.sleep(1.0)
    assert ts.values == [1]
    assert seconds("calls") == (0.5, 1.0)
    ts.cancel()


@pytest.mark.virtual
async def test_rate_limit_is_busy_while_it_waits_for_tokens_with_demand(loop: asyncio.AbstractEventLoop) -> None:
    ts = TestSubscriber[int](initial_request=UNBOUNDED)
    rx.range(0, 4).pipe(ops.rate_limit(2.0, burst=1, name="shaper")).subscribe(ts)
    await asyncio.sleep(0.01)
    clock = stage("shaper").pressure_clock
    await asyncio.sleep(3.0)
    assert ts.values == [0, 1, 2, 3] and ts.completed
    # one token at once, then one per 0.5 s: it waited 1.5 s for tokens with items wanted
    assert clock is not None and round(clock.busy_s, 9) == 1.5 and clock.backpressured_s == 0.0
    assert clock.state == IDLE  # terminated: idle from then on


@pytest.mark.virtual
async def test_batch_holding_a_closed_batch_without_demand_is_backpressured(loop: asyncio.AbstractEventLoop) -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[list[int]]()
    pub.pipe(ops.batch(2, max_delay_s=1.0, name="batcher")).subscribe(ts)
    pub.emit(1)
    await asyncio.sleep(0.5)  # an open batch within its delay waits for input: idle
    assert stage("batcher").pressure_clock is None
    pub.emit(2)  # closed, no demand
    await asyncio.sleep(0.75)
    ts.request(1)
    await asyncio.sleep(1.0)
    assert ts.values == [[1, 2]]
    assert seconds("batcher") == (0.0, 0.75)
    ts.cancel()
