"""``buffer``: the bounded async boundary and its overflow strategies (DESIGN §3)."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator

import pytest

import rxpipe as rx
from rxpipe import UNBOUNDED, BufferOverflowError, MissingBackpressureError
from rxpipe import operators as ops
from rxpipe.metrics import StageStatistics, live_stages
from rxpipe.testing import TestPublisher, TestSubscriber


class ChunkedSubscriber(TestSubscriber[Any]):
    """Requests ``chunk`` items at subscribe and again each time ``chunk`` more arrived."""

    def __init__(self, chunk: int) -> None:
        super().__init__(initial_request=chunk)
        self.chunk = chunk

    def on_next(self, item: Any) -> None:
        super().on_next(item)
        if len(self.values) % self.chunk == 0:
            self.request(self.chunk)


def inner(ts: TestSubscriber[Any]) -> Any:
    """The operator's subscription behind the strict boundary wrapping a TestSubscriber."""
    return ts.subscription.upstream  # type: ignore[union-attr]


# shedding strategies: 10,000 items into buffer(100) with no demand, then request(UNBOUNDED) -----
def test_drop_incoming_keeps_the_first_items_and_counts_the_rest() -> None:
    ts = TestSubscriber[int]()
    rx.range(0, 10_000).pipe(ops.buffer(100, "drop_incoming")).subscribe(ts)
    stats = inner(ts).statistics()
    assert (stats.buffered, stats.capacity, stats.items_in, stats.items_out) == (100, 100, 10_000, 0)
    assert stats.dropped == {"drop_incoming": 9_900}
    assert ts.values == []
    ts.request(UNBOUNDED)
    assert ts.values == list(range(100))
    assert ts.completed


def test_drop_oldest_keeps_the_newest_items() -> None:
    ts = TestSubscriber[int]()
    rx.range(0, 10_000).pipe(ops.buffer(100, "drop_oldest")).subscribe(ts)
    assert inner(ts).statistics().dropped == {"drop_oldest": 9_900}
    ts.request(UNBOUNDED)
    assert ts.values == list(range(9_900, 10_000))
    assert ts.completed


def test_error_overflow_delivers_the_buffer_then_signals_and_cancels_upstream_at_once() -> None:
    pulled: list[int] = []

    def source() -> Any:
        for i in range(10_000):
            pulled.append(i)
            yield i

    ts = TestSubscriber[int]()
    rx.from_iterable(source()).pipe(ops.buffer(100, "error")).subscribe(ts)
    assert len(pulled) == 101  # upstream cancelled on the overflowing item
    assert ts.values == [] and ts.error is None  # what is buffered goes first, on demand
    ts.request(50)
    assert ts.values == list(range(50)) and ts.error is None
    ts.request(UNBOUNDED)
    assert ts.values == list(range(100))
    assert isinstance(ts.error, BufferOverflowError)
    assert not ts.completed
    assert inner(ts).statistics().dropped == {"error": 1}


def test_error_overflow_cancels_a_hand_driven_upstream() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[int]()
    pub.pipe(ops.buffer(3, "error")).subscribe(ts)
    assert pub.requests == [UNBOUNDED]
    pub.emit(1, 2, 3)
    assert not pub.cancelled
    pub.emit(4)
    assert pub.cancel_count == 1
    ts.request(UNBOUNDED)
    assert ts.values == [1, 2, 3] and isinstance(ts.error, BufferOverflowError)


@pytest.mark.parametrize("overflow", ["drop_incoming", "drop_oldest", "error"])
def test_shedding_buffers_shed_nothing_while_downstream_keeps_up(overflow: str) -> None:
    ts = TestSubscriber[int](initial_request=UNBOUNDED)
    rx.range(0, 10_000).pipe(ops.buffer(100, overflow)).subscribe(ts)
    assert ts.values == list(range(10_000)) and ts.completed
    assert inner(ts).statistics().dropped == {}


def test_drop_oldest_with_partial_demand() -> None:
    pub = TestPublisher[str]()
    ts = TestSubscriber[str]()
    pub.pipe(ops.buffer(2, "drop_oldest")).subscribe(ts)
    pub.emit("a", "b", "c")
    ts.request(1)
    pub.emit("d", "e")
    ts.request(5)
    pub.complete()
    assert ts.values == ["b", "d", "e"] and ts.completed
    assert inner(ts).statistics().dropped == {"drop_oldest": 2}


# backpressure ------------------------------------------------------------------------------------
def test_backpressure_prefetches_capacity_then_replenishes_by_the_rule() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[int]()
    pub.pipe(ops.buffer(100)).subscribe(ts)
    assert pub.requests == [100]  # prefetch whatever the downstream demand
    pub.emit(*range(100))
    ts.request(74)
    assert pub.requests == [100]
    ts.request(1)  # 75 = 100 - 100 // 4 delivered
    assert pub.requests == [100, 75]
    pub.emit(*range(100, 175))
    ts.request(UNBOUNDED)  # 100 more delivered in one pass: one more request(75), 25 pending
    assert pub.requests == [100, 75, 75]
    assert ts.values == list(range(175))
    assert pub.total_requested - len(ts.values) <= 100


def test_backpressure_chunked_consumer_never_has_more_than_capacity_in_flight() -> None:
    emitted = 0
    worst = 0
    ts = ChunkedSubscriber(7)

    def on_emit(_: int) -> None:
        nonlocal emitted, worst
        emitted += 1
        worst = max(worst, emitted - len(ts.values))

    rx.range(0, 5_000).pipe(ops.tap(on_emit), ops.buffer(100)).subscribe(ts)
    assert ts.values == list(range(5_000)) and ts.completed
    assert worst == 100  # prefetch fills the buffer, never beyond


def test_backpressure_hand_driven_chunked_consumer() -> None:
    pub = TestPublisher[int]()
    ts = ChunkedSubscriber(7)
    pub.pipe(ops.buffer(100)).subscribe(ts)
    sent = 0
    while sent < 1_000:
        n = min(pub.outstanding, 1_000 - sent)  # an honest upstream emits what it was asked for
        assert n > 0
        pub.emit(*range(sent, sent + n))
        sent += n
        assert pub.total_requested - len(ts.values) <= 100
    pub.complete()
    assert ts.values == list(range(1_000)) and ts.completed
    assert set(pub.requests[1:]) == {75}


def test_backpressure_emission_beyond_demand_is_a_protocol_violation() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[int]()
    pub.pipe(ops.buffer(100)).subscribe(ts)
    pub.emit(*range(100))
    assert ts.error is None and not pub.cancelled
    pub.emit(100)
    assert isinstance(ts.error, MissingBackpressureError)  # at once, ahead of the buffered items
    assert pub.cancelled and ts.values == []
    pub.emit(101)  # in flight after the cancel: ignored
    assert ts.values == []


def test_backpressure_violation_is_caught_before_the_buffer_is_full() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[int](initial_request=2)
    pub.pipe(ops.buffer(4)).subscribe(ts)
    pub.emit(1, 2, 3, 4)  # 2 delivered, 2 held; the next request(3) is due after 3 delivered
    assert pub.requests == [4] and ts.error is None
    pub.emit(5)  # the 5th of 4 requested, with room left in the queue
    assert isinstance(ts.error, MissingBackpressureError) and pub.cancelled
    assert ts.values == [1, 2]
    assert inner(ts).statistics().dropped == {"error": 3}


# cancel, errors, completion ------------------------------------------------------------------------
@pytest.mark.parametrize("overflow", ["backpressure", "drop_oldest"])
def test_cancel_propagates_upstream_and_frees_the_buffer(overflow: str) -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[int](initial_request=1)
    pub.pipe(ops.buffer(10, overflow)).subscribe(ts)
    pub.emit(1, 2, 3)
    ts.cancel()
    assert pub.cancel_count == 1
    assert inner(ts).statistics().buffered == 0
    ts.cancel()
    assert pub.cancel_count == 1
    pub.emit(4)
    assert ts.values == [1]


@pytest.mark.parametrize("overflow", ["backpressure", "drop_incoming"])
def test_upstream_error_follows_the_buffered_items(overflow: str) -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[int]()
    pub.pipe(ops.buffer(10, overflow)).subscribe(ts)
    boom = ConnectionError("upstream gone")
    pub.emit(1, 2).error(boom)
    assert ts.error is None
    ts.request(1)
    assert ts.values == [1] and ts.error is None
    ts.request(1)
    assert ts.values == [1, 2] and ts.error is boom
    assert not pub.cancelled  # a terminated upstream is not cancelled


@pytest.mark.parametrize("overflow", ["backpressure", "drop_oldest", "error"])
def test_completion_flushes_the_buffer_first(overflow: str) -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[int]()
    pub.pipe(ops.buffer(10, overflow)).subscribe(ts)
    pub.emit(1, 2, 3).complete()
    assert not ts.completed
    ts.request(2)
    assert ts.values == [1, 2] and not ts.completed
    ts.request(1)
    assert ts.values == [1, 2, 3] and ts.completed
    assert not pub.cancelled


def test_empty_source_completes_without_demand() -> None:
    ts = TestSubscriber[int]()
    rx.empty().pipe(ops.buffer(4)).subscribe(ts)
    assert ts.completed and ts.values == []


def test_invalid_request_signals_value_error_and_cancels_upstream() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[int]()
    pub.pipe(ops.buffer(4)).subscribe(ts)
    ts.request(0)
    assert isinstance(ts.error, ValueError) and "§3.9" in str(ts.error)
    assert pub.cancelled


def test_request_inside_on_next_does_not_recurse() -> None:
    ts = ChunkedSubscriber(1)
    rx.range(0, 200_000).pipe(ops.buffer(16)).subscribe(ts)
    assert len(ts.values) == 200_000 and ts.completed


# async upstreams ---------------------------------------------------------------------------------
async def test_buffer_over_an_async_source() -> None:
    async def gen() -> AsyncIterator[int]:
        for i in range(1_000):
            if i % 100 == 0:
                await asyncio.sleep(0)
            yield i

    values = await rx.from_async_iterable(gen()).pipe(ops.buffer(32), ops.map(lambda x: x * 2)).to_list()
    assert values == [2 * i for i in range(1_000)]


@pytest.mark.virtual
async def test_slow_consumer_bounds_what_a_fast_async_source_produces() -> None:
    produced = 0

    async def gen() -> AsyncIterator[int]:
        nonlocal produced
        for i in range(10_000):
            produced += 1
            yield i

    ts = TestSubscriber[int](initial_request=10)
    rx.from_async_iterable(gen(), prefetch=8).pipe(ops.buffer(50)).subscribe(ts)
    await asyncio.sleep(1)
    assert ts.values == list(range(10))
    # 50 prefetched, 10 delivered (no replenish before 38); the pump is at most 8 ahead of that
    assert inner(ts).statistics().buffered == 40
    assert 50 <= produced <= 50 + 8
    ts.cancel()


# factory and introspection -----------------------------------------------------------------------
@pytest.mark.parametrize("capacity", [0, -1, 1.5, True, "8", None])
def test_capacity_must_be_a_positive_int(capacity: Any) -> None:
    with pytest.raises(ValueError, match="capacity"):
        ops.buffer(capacity)


def test_unknown_overflow_strategy_is_rejected_at_factory_time() -> None:
    with pytest.raises(ValueError, match="overflow"):
        ops.buffer(4, "drop_newest")


def test_stage_names_statistics_and_tracking() -> None:
    flow = rx.range(0, 10).pipe(ops.map(str), ops.buffer(4))
    assert flow.kind == "buffer" and flow.name == "buffer_2"
    assert rx.range(0, 1).pipe(ops.buffer(4, name="queue")).name == "queue"
    ts = TestSubscriber[str](initial_request=3)
    flow.subscribe(ts)
    stage = inner(ts)
    assert stage in live_stages()
    assert stage.statistics() == StageStatistics("buffer_2", 0, 4, 4, 7, 3, {})
    ts.request(UNBOUNDED)
    assert stage.counters.items_in == 10 and stage.counters.items_out == 10


class _Tracked:
    """An item that wants to know when a stage drops it (as CompletionRequest does)."""

    def __init__(self, n: int, log: list[tuple[int, str]]) -> None:
        self.n = n
        self.log = log

    def on_discard(self, reason: str) -> None:
        self.log.append((self.n, reason))


@pytest.mark.parametrize("overflow, dropped", [
    ("drop_incoming", [(3, "drop_incoming"), (4, "drop_incoming")]),
    ("drop_oldest", [(0, "drop_oldest"), (1, "drop_oldest")]),
    ("error", [(3, "error")]),
])
def test_shed_items_are_told_why(overflow: str, dropped: list[tuple[int, str]]) -> None:
    log: list[tuple[int, str]] = []
    pub = TestPublisher[Any]()
    ts = TestSubscriber[Any]()
    pub.pipe(ops.buffer(3, overflow=overflow)).subscribe(ts)
    pub.emit(*(_Tracked(i, log) for i in range(5)))
    assert log == dropped
