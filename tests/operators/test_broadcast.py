"""broadcast(n): every item to every branch, upstream demand = minimum over the live branches."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import rxpipe as rx
from rxpipe import UNBOUNDED, MissingBackpressureError, ProtocolViolationError
from rxpipe import operators as ops
from rxpipe.testing import TestPublisher, TestSubscriber


def two_branches(first: int = 0, second: int = 0) -> tuple[TestPublisher[int], TestSubscriber[int],
                                                           TestSubscriber[int]]:
    pub = TestPublisher[int]()
    a, b = pub.pipe(ops.broadcast(2))
    ta, tb = TestSubscriber[int](first), TestSubscriber[int](second)
    a.subscribe(ta)
    b.subscribe(tb)
    return pub, ta, tb


def test_one_branch_requests_3_the_other_10_upstream_requested_3() -> None:
    pub, ta, tb = two_branches(3, 10)
    assert pub.requests == [3]
    pub.emit(1, 2, 3)
    assert ta.values == [1, 2, 3] and tb.values == [1, 2, 3]
    ta.request(2)
    assert pub.requests == [3, 2] and pub.total_requested == 5
    ta.request(20)
    assert pub.requests == [3, 2, 5]  # now b (10 in total) is the slowest


def test_upstream_is_subscribed_once_all_branches_are() -> None:
    pub = TestPublisher[int]()
    fan = pub.pipe(ops.broadcast(3))
    ts = [TestSubscriber[int](5) for _ in range(3)]
    fan[0].subscribe(ts[0])
    fan[2].subscribe(ts[2])
    assert pub.subscribe_count == 0
    fan[1].subscribe(ts[1])
    assert pub.subscribe_count == 1 and pub.requests == [5]


def test_a_cancelled_branch_stops_counting() -> None:
    pub, ta, tb = two_branches(3, 10)
    pub.emit(1)
    ta.cancel()
    assert pub.requests == [3, 7] and not pub.cancelled
    pub.emit(*range(2, 11))
    assert tb.values == list(range(1, 11)) and ta.values == [1]


def test_all_branches_cancelled_cancels_upstream() -> None:
    pub, ta, tb = two_branches(1, 1)
    ta.cancel()
    assert not pub.cancelled
    tb.cancel()
    assert pub.cancelled


def test_completion_and_error_reach_every_live_branch() -> None:
    pub, ta, tb = two_branches(2, 2)
    pub.emit(1).complete()
    assert ta.completed and tb.completed and ta.values == tb.values == [1]
    pub2, tc, td = two_branches(2, 2)
    td.cancel()
    boom = ValueError("upstream")
    pub2.error(boom)
    assert tc.error is boom and td.error is None


def test_emission_beyond_the_minimum_is_missing_backpressure() -> None:
    pub, ta, tb = two_branches(1, 5)
    pub.emit(1, 2)
    assert ta.values == [1] and tb.values == [1]
    assert isinstance(ta.error, MissingBackpressureError) and isinstance(tb.error, MissingBackpressureError)
    assert pub.cancelled


def test_request_zero_on_one_branch_fails_that_branch_only() -> None:
    pub, ta, tb = two_branches(0, 4)
    ta.request(0)
    assert isinstance(ta.error, ValueError)
    assert pub.requests == [4] and not pub.cancelled


def test_a_branch_takes_one_subscriber_per_run() -> None:
    pub = TestPublisher[int]()
    a, _b = pub.pipe(ops.broadcast(2))
    a.subscribe(TestSubscriber[int]())
    second = TestSubscriber[int]()
    a.subscribe(second)
    assert isinstance(second.error, ProtocolViolationError)


def test_the_broadcast_itself_unpacks_and_is_not_subscribed() -> None:
    fan = rx.range(0, 3).pipe(ops.broadcast(3, name="fan"))
    assert len(fan) == 3 and tuple(fan) == fan.branches and fan[1] is fan.branches[1]
    assert [b.name for b in fan] == ["fan[0]", "fan[1]", "fan[2]"]
    ts = TestSubscriber[int](1)
    fan.subscribe(ts)
    assert isinstance(ts.error, TypeError)


def test_a_new_run_after_the_previous_one_ended() -> None:
    source = rx.range(0, 3)
    a, b = source.pipe(ops.broadcast(2))
    for _ in range(2):
        ta, tb = TestSubscriber[int](UNBOUNDED), TestSubscriber[int](UNBOUNDED)
        a.subscribe(ta)
        b.subscribe(tb)
        assert ta.values == tb.values == [0, 1, 2] and ta.completed and tb.completed


async def test_broadcast_to_two_consumers_with_to_list() -> None:
    a, b = rx.range(0, 1000).pipe(ops.broadcast(2))
    left, right = await asyncio.gather(a.to_list(), b.pipe(ops.map(lambda x: -x)).to_list())
    assert left == list(range(1000)) and right == [-x for x in range(1000)]


@pytest.mark.virtual
async def test_the_slow_branch_paces_the_fast_one(loop: asyncio.AbstractEventLoop) -> None:
    async def slow(x: int) -> int:
        await asyncio.sleep(1.0)
        return x

    a, b = rx.range(0, 5).pipe(ops.broadcast(2))
    fast_times: list[float] = []
    done = asyncio.get_running_loop().create_future()
    a.subscribe(on_next=lambda x: fast_times.append(loop.time()))
    sink: list[Any] = []
    b.pipe(ops.map_async(slow)).subscribe(on_next=sink.append, on_complete=lambda: done.set_result(None))
    await done
    assert sink == [0, 1, 2, 3, 4]
    # map_async(concurrency=1) asks one item at a time: the fast branch gets them at that pace
    assert fast_times == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_broadcast_rejects_bad_n() -> None:
    with pytest.raises(ValueError):
        ops.broadcast(0)


def test_a_filter_after_a_branch_asks_the_run_for_what_it_dropped() -> None:
    # a fused filter drops an item by requesting one more of its branch: the minimum over the
    # branches moves, so the other branch is not starved (found through partition)
    pub = TestPublisher[int]()
    a_branch, b_branch = pub.pipe(ops.broadcast(2))
    a, b = TestSubscriber[int](initial_request=5), TestSubscriber[int](initial_request=1)
    a_branch.subscribe(a)
    b_branch.pipe(ops.filter(lambda x: x % 2 == 1)).subscribe(b)
    assert pub.requests == [1]
    pub.emit(2)  # b's filter drops it and asks one more
    assert pub.requests == [1, 1]
    pub.emit(3)
    assert a.values == [2, 3] and b.values == [3]
