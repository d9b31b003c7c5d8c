"""``limit_rate``: Reactor's high/low tide request shaping (DESIGN §3)."""

from __future__ import annotations

from typing import Any

import pytest

import rxpipe as rx
from rxpipe import UNBOUNDED, MissingBackpressureError
from rxpipe import operators as ops
from rxpipe.testing import TestPublisher, TestSubscriber


def inner(ts: TestSubscriber[Any]) -> Any:
    return ts.subscription.upstream  # type: ignore[union-attr]


def test_requests_high_tide_then_low_tide_per_low_tide_delivered() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[int]()
    pub.pipe(ops.limit_rate(10, 3)).subscribe(ts)
    assert pub.requests == [10]
    pub.emit(*range(10))
    ts.request(2)
    assert pub.requests == [10]
    ts.request(1)
    assert pub.requests == [10, 3]
    ts.request(4)  # 7 delivered: one more low tide, 1 towards the next
    assert pub.requests == [10, 3, 3]
    pub.emit(*range(10, 16))
    ts.request(UNBOUNDED)
    assert ts.values == list(range(16))
    assert pub.requests == [10, 3, 3, 3, 3, 3]  # 16 delivered = 5 low tides + 1
    assert pub.total_requested - len(ts.values) <= 10


def test_default_low_tide_is_three_quarters() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[int](initial_request=UNBOUNDED)
    pub.pipe(ops.limit_rate(8)).subscribe(ts)
    pub.emit(*range(6))
    assert pub.requests == [8, 6]


def test_low_tide_equal_to_high_tide_replenishes_only_when_drained() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[int](initial_request=UNBOUNDED)
    pub.pipe(ops.limit_rate(4, 4)).subscribe(ts)
    pub.emit(1, 2, 3)
    assert pub.requests == [4]
    pub.emit(4)
    assert pub.requests == [4, 4]


def test_unbounded_downstream_is_reshaped_into_bounded_requests() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[int](initial_request=UNBOUNDED)
    pub.pipe(ops.limit_rate(5, 2)).subscribe(ts)
    sent = 0
    while sent < 100:
        n = pub.outstanding
        pub.emit(*range(sent, sent + n))
        sent += n
    assert pub.requests[0] == 5 and set(pub.requests[1:]) == {2}
    assert ts.values == list(range(sent)) and sent >= 100


def test_never_more_than_high_tide_in_flight_over_a_sync_source() -> None:
    emitted = 0
    worst = 0
    ts = TestSubscriber[int]()

    def on_emit(_: int) -> None:
        nonlocal emitted, worst
        emitted += 1
        worst = max(worst, emitted - len(ts.values))

    rx.range(0, 1_000).pipe(ops.tap(on_emit), ops.limit_rate(16, 4)).subscribe(ts)
    for _ in range(200):
        ts.request(5)
    assert ts.values == list(range(1_000)) and ts.completed
    assert worst == 16


def test_cancel_propagates_upstream() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[int](initial_request=1)
    pub.pipe(ops.limit_rate(4)).subscribe(ts)
    pub.emit(1, 2)
    ts.cancel()
    assert pub.cancelled and ts.values == [1]
    assert inner(ts).statistics().buffered == 0


def test_upstream_error_follows_the_held_items() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[int]()
    pub.pipe(ops.limit_rate(4)).subscribe(ts)
    boom = RuntimeError("boom")
    pub.emit(1, 2).error(boom)
    ts.request(5)
    assert ts.values == [1, 2] and ts.error is boom
    assert not pub.cancelled


def test_completion_flushes_held_items() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[int]()
    pub.pipe(ops.limit_rate(4)).subscribe(ts)
    pub.emit(1, 2, 3).complete()
    ts.request(2)
    assert not ts.completed
    ts.request(2)
    assert ts.values == [1, 2, 3] and ts.completed


def test_emission_beyond_the_tides_is_a_protocol_violation() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[int]()
    pub.pipe(ops.limit_rate(3)).subscribe(ts)
    pub.emit(1, 2, 3, 4)
    assert isinstance(ts.error, MissingBackpressureError) and pub.cancelled


def test_stage_kind_and_statistics() -> None:
    flow = rx.range(0, 10).pipe(ops.limit_rate(4))
    assert flow.kind == "limit_rate" and flow.name == "limit_rate_1"
    ts = TestSubscriber[int](initial_request=1)
    flow.subscribe(ts)
    stats = inner(ts).statistics()
    assert (stats.stage, stats.buffered, stats.capacity, stats.items_in, stats.items_out) == (
        "limit_rate_1", 3, 4, 4, 1)


@pytest.mark.parametrize(("high", "low"), [(0, None), (-1, None), (2.5, None), (4, 0), (4, 5), (4, 1.5)])
def test_invalid_tides_are_rejected(high: Any, low: Any) -> None:
    with pytest.raises(ValueError, match="tide"):
        ops.limit_rate(high, low)
