"""TestSubscriber and TestPublisher (DESIGN §9): exact records of every signal."""

from __future__ import annotations

import asyncio

import pytest

import rxpipe as rx
from rxpipe import UNBOUNDED, MissingBackpressureError
from rxpipe import operators as ops
from rxpipe.testing import TestPublisher, TestSubscriber


# TestPublisher ----------------------------------------------------------------------------------
def test_publisher_records_every_request_in_order_including_invalid_ones() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[int]()
    pub.subscribe(ts)
    ts.request(3)
    ts.request(1)
    ts.request(UNBOUNDED)
    assert pub.requests == [3, 1, UNBOUNDED]
    assert pub.total_requested == UNBOUNDED  # saturating sum
    assert pub.subscribe_count == 1
    assert not pub.cancelled and pub.cancel_count == 0


def test_publisher_total_requested_ignores_invalid_requests() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[int]()
    pub.subscribe(ts)
    ts.request(2)
    ts.request(5)
    ts.request(0)  # §3.9: recorded as asked; the stream then fails
    assert pub.requests == [2, 5, 0]
    assert pub.total_requested == 7


def test_publisher_tracks_outstanding_demand_and_emits_in_order() -> None:
    pub = TestPublisher[str]()
    ts = TestSubscriber[str](initial_request=3)
    pub.subscribe(ts)
    assert pub.outstanding == 3
    pub.emit("a", "b")
    assert pub.outstanding == 1
    assert ts.values == ["a", "b"]
    pub.emit("c").complete()
    assert ts.values == ["a", "b", "c"] and ts.completed and ts.error is None
    assert not pub.has_subscribers


def test_publisher_may_emit_beyond_demand_on_purpose() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[int](initial_request=1)
    pub.subscribe(ts)
    pub.emit(1, 2)  # the strict boundary around the user subscriber catches the violation
    assert ts.values == [1]
    assert isinstance(ts.error, MissingBackpressureError)
    assert pub.cancelled and pub.cancel_count == 1


def test_publisher_records_cancel_once_through_the_strict_boundary() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[int]()
    pub.subscribe(ts)
    ts.cancel()
    ts.cancel()  # idempotent (§3.5): the second call never reaches the publisher
    assert pub.cancelled and pub.cancel_count == 1
    assert not pub.has_subscribers
    ts.request(4)  # a no-op after cancel (§3.6)
    assert pub.requests == [] and pub.outstanding == 0


def test_publisher_error_reaches_every_live_subscriber() -> None:
    pub = TestPublisher[int]()
    first, second = TestSubscriber[int](initial_request=5), TestSubscriber[int](initial_request=5)
    pub.subscribe(first)
    pub.subscribe(second)
    assert pub.subscribe_count == 2
    pub.emit(7)
    boom = RuntimeError("boom")
    pub.error(boom)
    assert first.values == second.values == [7]
    assert first.error is boom and second.error is boom
    pub.emit(8)  # nobody is live any more
    assert first.values == [7]


def test_publisher_through_an_operator_records_what_the_operator_asked() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[int]()
    pub.pipe(ops.take(3)).subscribe(ts)
    ts.request(10)
    assert pub.requests == [3]  # take never asks more than it may deliver
    pub.emit(1, 2, 3)
    assert ts.values == [1, 2, 3] and ts.completed
    assert pub.cancelled


def test_publisher_names_its_stage() -> None:
    assert TestPublisher[int]().name == "test_publisher_0"
    assert TestPublisher[int](name="upstream").name == "upstream"


# TestSubscriber ---------------------------------------------------------------------------------
def test_subscriber_requests_only_what_it_is_told() -> None:
    ts = TestSubscriber[int]()
    rx.range(0, 10).subscribe(ts)
    assert ts.values == [] and ts.subscribe_count == 1
    ts.request(2)
    assert ts.values == [0, 1] and ts.requested == 2
    ts.request(8)
    assert ts.values == list(range(10)) and ts.completed and ts.done


def test_subscriber_initial_request_is_made_in_on_subscribe() -> None:
    ts = TestSubscriber[int](initial_request=2)
    rx.range(0, 10).subscribe(ts)
    assert ts.values == [0, 1]
    assert not ts.done


def test_subscriber_cancel_stops_the_source() -> None:
    pulled: list[int] = []

    def gen():  # type: ignore[no-untyped-def]
        for i in range(100):
            pulled.append(i)
            yield i

    ts = TestSubscriber[int](initial_request=3)
    rx.from_iterable(gen()).subscribe(ts)
    ts.cancel()
    ts.request(5)  # a no-op after cancel (§3.6)
    assert ts.values == [0, 1, 2]
    assert pulled == [0, 1, 2, 3]  # one peeked ahead to see whether the iterator ended
    assert not ts.done


def test_subscriber_request_before_subscription_is_an_error() -> None:
    with pytest.raises(AssertionError, match="before on_subscribe"):
        TestSubscriber[int]().request(1)


def test_subscriber_records_an_invalid_request_as_the_spec_error() -> None:
    ts = TestSubscriber[int]()
    rx.range(0, 3).subscribe(ts)
    ts.request(0)
    assert isinstance(ts.error, ValueError) and "§3.9" in str(ts.error)


def test_subscriber_repr_names_what_arrived() -> None:
    ts = TestSubscriber[int](initial_request=5)
    rx.just(1).subscribe(ts)
    assert repr(ts) == "<TestSubscriber values=[1] error=None completed=True>"


async def test_await_count_and_await_done_wake_on_arrival() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[int](initial_request=5)
    pub.subscribe(ts)
    loop = asyncio.get_running_loop()
    loop.call_soon(pub.emit, 1)
    loop.call_soon(pub.emit, 2)
    assert await ts.await_count(2, timeout=5) == [1, 2]
    loop.call_soon(pub.complete)
    await ts.await_done(timeout=5)
    assert ts.completed


@pytest.mark.virtual
async def test_await_done_times_out_with_what_arrived(loop: asyncio.AbstractEventLoop) -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[int](initial_request=1)
    pub.subscribe(ts)
    pub.emit(9)
    with pytest.raises(AssertionError, match=r"timed out after 2 s waiting for a terminal signal; got values=\[9\]"):
        await ts.await_done(timeout=2)
    assert loop.time() == 2.0


def test_test_publisher_signals_value_error_for_an_invalid_request() -> None:
    import rxpipe as rx
    from rxpipe import operators as ops
    from rxpipe.testing import TestPublisher, TestSubscriber

    pub = TestPublisher[int]()
    ts = TestSubscriber[str]()
    pub.pipe(ops.map(str)).subscribe(ts)
    ts.request(0)
    assert pub.requests == [0]
    assert isinstance(ts.error, ValueError) and "§3.9" in str(ts.error)
    assert not pub.has_subscribers
    pub.emit(1)  # the subscription is over: nothing more arrives
    assert ts.values == []
    assert rx.UNBOUNDED > 0
