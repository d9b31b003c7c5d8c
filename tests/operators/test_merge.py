"""merge: fair fan-in, total never beyond demand, bounded prefetch per input, errors and cancel."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import rxpipe as rx
from rxpipe import UNBOUNDED, MissingBackpressureError
from rxpipe import operators as ops
from rxpipe.metrics import live_stages
from rxpipe.testing import TestPublisher, TestSubscriber


def test_merge_of_two_ranges_with_request_5_gives_exactly_5_then_all_200() -> None:
    ts = TestSubscriber[int]()
    rx.range(0, 100).pipe(ops.merge(rx.range(1000, 1100))).subscribe(ts)
    ts.request(5)
    assert ts.values == [0, 1000, 1, 1001, 2]
    assert not ts.completed
    ts.request(UNBOUNDED)
    assert len(ts.values) == 200 and ts.completed
    assert ts.values == [x for pair in zip(range(100), range(1000, 1100), strict=True) for x in pair]


def test_each_input_gets_a_bounded_prefetch_and_the_replenish_rule() -> None:
    a, b = TestPublisher[int](), TestPublisher[int]()
    ts = TestSubscriber[int]()
    a.pipe(ops.merge(b, name="fan_in")).subscribe(ts)
    assert a.requests == [32] and b.requests == [32]
    a.emit(*range(32))
    b.emit(*range(100, 132))
    stats = [s for s in live_stages() if s.counters.stage == "fan_in"][0].statistics()
    assert (stats.buffered, stats.capacity, stats.items_in) == (64, 64, 64)
    ts.request(47)  # 24 from a, 23 from b: 24 of a's items went downstream → request 32 - 32 // 4
    assert a.requests == [32, 24] and b.requests == [32]
    ts.request(1)
    assert a.requests == [32, 24] and b.requests == [32, 24]


def test_total_delivered_never_exceeds_demand() -> None:
    a, b, c = TestPublisher[str](), TestPublisher[str](), TestPublisher[str]()
    ts = TestSubscriber[str](initial_request=2)
    a.pipe(ops.merge(b, c)).subscribe(ts)
    a.emit("a1", "a2")
    b.emit("b1")
    c.emit("c1")
    assert ts.values == ["a1", "a2"]
    ts.request(1)
    assert ts.values == ["a1", "a2", "b1"]
    ts.request(10)
    assert ts.values == ["a1", "a2", "b1", "c1"]


def test_round_robin_is_fair_and_resumes_after_the_input_served_last() -> None:
    a, b, c = TestPublisher[str](), TestPublisher[str](), TestPublisher[str]()
    ts = TestSubscriber[str]()
    a.pipe(ops.merge(b, c)).subscribe(ts)
    a.emit(*(f"a{k}" for k in range(10)))
    b.emit(*(f"b{k}" for k in range(2)))
    c.emit(*(f"c{k}" for k in range(10)))
    ts.request(1)
    ts.request(1)
    ts.request(4)
    assert ts.values == ["a0", "b0", "c0", "a1", "b1", "c1"]
    ts.request(4)
    assert ts.values[6:] == ["a2", "c2", "a3", "c3"]  # b is empty: skipped, not waited for


def test_completes_when_every_input_completed_and_drained() -> None:
    a, b = TestPublisher[int](), TestPublisher[int]()
    ts = TestSubscriber[int]()
    a.pipe(ops.merge(b)).subscribe(ts)
    a.emit(1).complete()
    b.emit(2)
    assert not ts.completed
    b.complete()
    assert not ts.completed  # two items still queued, no demand
    ts.request(1)
    assert ts.values == [1] and not ts.completed
    ts.request(1)
    assert ts.values == [1, 2] and ts.completed


def test_merge_of_empty_inputs_completes_without_demand() -> None:
    ts = TestSubscriber[Any]()
    rx.empty().pipe(ops.merge(rx.empty(), rx.empty())).subscribe(ts)
    assert ts.completed and ts.values == []


def test_an_input_error_cancels_the_others_and_cuts_ahead() -> None:
    a, b, c = TestPublisher[int](), TestPublisher[int](), TestPublisher[int]()
    ts = TestSubscriber[int](initial_request=1)
    a.pipe(ops.merge(b, c)).subscribe(ts)
    a.emit(1, 2)
    boom = OSError("input b broke")
    b.error(boom)
    assert ts.values == [1] and ts.error is boom
    assert a.cancelled and c.cancelled and not b.cancelled


def test_error_at_subscribe_of_a_later_input_cancels_the_earlier_ones() -> None:
    a = TestPublisher[int]()
    ts = TestSubscriber[int](initial_request=5)
    boom = LookupError("no such stream")
    a.pipe(ops.merge(rx.error(boom), rx.range(0, 3))).subscribe(ts)
    assert ts.error is boom and a.cancelled and ts.values == []


def test_cancel_reaches_every_input() -> None:
    a, b = TestPublisher[int](), TestPublisher[int]()
    ts = TestSubscriber[int](initial_request=3)
    a.pipe(ops.merge(b)).subscribe(ts)
    ts.cancel()
    assert a.cancelled and b.cancelled


def test_an_input_beyond_its_prefetch_is_missing_backpressure() -> None:
    a, b = TestPublisher[int](), TestPublisher[int]()
    ts = TestSubscriber[int]()
    a.pipe(ops.merge(b, prefetch=2)).subscribe(ts)
    assert a.requests == [2]
    b.emit(1, 2, 3)
    assert isinstance(ts.error, MissingBackpressureError)
    assert a.cancelled and b.cancelled


def test_request_zero_is_a_value_error_and_cancels_the_inputs() -> None:
    a, b = TestPublisher[int](), TestPublisher[int]()
    ts = TestSubscriber[int]()
    a.pipe(ops.merge(b)).subscribe(ts)
    ts.request(-1)
    assert isinstance(ts.error, ValueError) and a.cancelled and b.cancelled


@pytest.mark.virtual
async def test_merge_of_timed_sources(loop: asyncio.AbstractEventLoop) -> None:
    fast = rx.interval(1.0).pipe(ops.take(4), ops.map(lambda k: f"f{k}"))
    slow = rx.interval(1.6).pipe(ops.take(2), ops.map(lambda k: f"s{k}"))
    out = await fast.pipe(ops.merge(slow)).to_list()
    assert out == ["f0", "s0", "f1", "f2", "s1", "f3"]
    assert loop.time() == 4.0


def test_merge_rejects_bad_arguments() -> None:
    with pytest.raises(TypeError):
        ops.merge([1, 2])  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        ops.merge(rx.empty(), prefetch=0)
