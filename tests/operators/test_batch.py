"""``batch``: size / time / weight-closed lists with Akka groupedWithin demand (DESIGN §3)."""

from __future__ import annotations

import asyncio
import math
from typing import Any, AsyncIterator

import pytest

import rxpipe as rx
from rxpipe import UNBOUNDED, MissingBackpressureError
from rxpipe import operators as ops
from rxpipe.testing import TestPublisher, TestSubscriber


def inner(ts: TestSubscriber[Any]) -> Any:
    return ts.subscription.upstream  # type: ignore[union-attr]


def collect(source: rx.Flowable[Any], n: int = UNBOUNDED) -> TestSubscriber[Any]:
    ts = TestSubscriber[Any](initial_request=n)
    source.subscribe(ts)
    return ts


# size ---------------------------------------------------------------------------------------------
def test_batches_of_four_with_a_partial_last_batch() -> None:
    ts = collect(rx.range(0, 10).pipe(ops.batch(4)))
    assert ts.values == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]] and ts.completed


def test_batch_of_one_gives_one_list_per_item() -> None:
    ts = collect(rx.range(0, 11).pipe(ops.batch(1)))
    assert ts.values == [[i] for i in range(11)] and ts.completed


def test_never_an_empty_batch() -> None:
    assert collect(rx.range(0, 8).pipe(ops.batch(4))).values == [[0, 1, 2, 3], [4, 5, 6, 7]]
    ts = collect(rx.empty().pipe(ops.batch(4)))
    assert ts.values == [] and ts.completed


def test_one_request_is_one_batch() -> None:
    ts = collect(rx.range(0, 100).pipe(ops.batch(5)), 2)
    assert ts.values == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]] and not ts.completed
    ts.request(1)
    assert ts.values[-1] == [10, 11, 12, 13, 14]


# upstream demand ------------------------------------------------------------------------------------
def test_upstream_demand_is_one_batch_ahead_without_demand_and_two_with_it() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[list[int]]()
    pub.pipe(ops.batch(4)).subscribe(ts)
    assert pub.requests == [4]  # one batch of look-ahead
    pub.emit(0, 1, 2, 3)
    assert ts.values == [] and pub.requests == [4]  # a full batch waits for demand
    ts.request(1)
    assert ts.values == [[0, 1, 2, 3]]
    assert pub.requests == [4, 4]  # the next batch's worth
    ts.request(UNBOUNDED)
    assert pub.requests == [4, 4, 4]  # two batches in flight while demanded
    pub.emit(4, 5, 6, 7)
    assert pub.requests == [4, 4, 4, 4]  # one request per batch delivered
    assert pub.total_requested - sum(map(len, ts.values)) == 8


@pytest.mark.virtual
async def test_demand_for_one_batch_with_a_fast_source_while_time_passes() -> None:
    emitted = 0

    def count(_: int) -> None:
        nonlocal emitted
        emitted += 1

    ts = TestSubscriber[list[int]](initial_request=1)
    rx.range(0, 1_000).pipe(ops.tap(count), ops.batch(4, max_delay_s=0.01)).subscribe(ts)
    await asyncio.sleep(0.1)  # ten timer periods without demand
    assert ts.values == [[0, 1, 2, 3]] and ts.error is None
    assert emitted <= 8
    ts.request(2)
    assert ts.values == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    ts.cancel()


@pytest.mark.virtual
async def test_timer_without_demand_leaves_the_batch_open_to_fill_up() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[list[int]](initial_request=1)
    pub.pipe(ops.batch(4, max_delay_s=0.01)).subscribe(ts)
    assert pub.requests == [8]
    pub.emit(0, 1, 2, 3)
    assert ts.values == [[0, 1, 2, 3]]
    pub.emit(4, 5)
    await asyncio.sleep(0.05)  # the timer fires without demand: no emission, no error
    assert ts.values == [[0, 1, 2, 3]] and ts.error is None
    pub.emit(6, 7)  # keeps filling to max_size
    await asyncio.sleep(0.05)
    assert pub.total_requested == 8 and ts.values == [[0, 1, 2, 3]]
    ts.request(2)
    assert ts.values == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert pub.requests == [8, 8]
    pub.emit(8, 9, 10, 11)
    assert ts.values == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    ts.cancel()
    assert pub.cancelled


@pytest.mark.virtual
async def test_an_expired_batch_leaves_as_soon_as_it_is_demanded() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[list[int]]()
    pub.pipe(ops.batch(4, max_delay_s=0.01)).subscribe(ts)
    pub.emit(0, 1)
    await asyncio.sleep(0.5)
    assert ts.values == []
    ts.request(1)
    assert ts.values == [[0, 1]]
    pub.emit(2)  # a new batch, with its own timer
    await asyncio.sleep(0.5)
    ts.request(1)
    assert ts.values == [[0, 1], [2]]
    ts.cancel()


# time -----------------------------------------------------------------------------------------------
@pytest.mark.virtual
async def test_time_closes_a_batch_after_its_first_item(loop: asyncio.AbstractEventLoop) -> None:
    async def source() -> AsyncIterator[int]:
        yield 0
        yield 1
        await asyncio.sleep(0.5)
        yield 2

    out: list[tuple[float, list[int]]] = []
    ts = TestSubscriber[list[int]](initial_request=UNBOUNDED)
    rx.from_async_iterable(source()).pipe(
        ops.batch(10, max_delay_s=0.05), ops.tap(lambda b: out.append((loop.time(), b)))).subscribe(ts)
    await ts.await_done()
    assert out == [(0.05, [0, 1]), (0.5, [2])]
    assert ts.completed and loop.time() == 0.5


@pytest.mark.virtual
async def test_the_timer_starts_at_the_batch_first_item_not_at_the_last_emission(
        loop: asyncio.AbstractEventLoop) -> None:
    pub = TestPublisher[str]()
    out: list[tuple[float, list[str]]] = []
    ts = TestSubscriber[list[str]](initial_request=UNBOUNDED)
    pub.pipe(ops.batch(3, max_delay_s=0.1), ops.tap(lambda b: out.append((loop.time(), b)))).subscribe(ts)
    await asyncio.sleep(1.0)
    pub.emit("a")
    await asyncio.sleep(0.05)
    pub.emit("b")
    await asyncio.sleep(0.08)
    pub.emit("c", "d", "e")  # at 1.13: [c, d, e] closes by size
    await asyncio.sleep(0.2)
    assert [b for _, b in out] == [["a", "b"], ["c", "d", "e"]]
    assert [t for t, _ in out] == pytest.approx([1.1, 1.13], abs=1e-12)
    pub.complete()
    assert ts.completed


@pytest.mark.virtual
async def test_a_slow_source_with_demand_for_one_batch() -> None:
    emitted = 0

    async def ticks() -> AsyncIterator[int]:
        for i in range(1_000):
            await asyncio.sleep(0.004)
            yield i

    def count(_: int) -> None:
        nonlocal emitted
        emitted += 1

    ts = TestSubscriber[list[int]](initial_request=1)
    rx.from_async_iterable(ticks()).pipe(ops.tap(count), ops.batch(4, max_delay_s=0.01)).subscribe(ts)
    await asyncio.sleep(1.0)
    # [0, 1, 2] by time at 0.014; then [3..6] by size (its timer fired without demand); [7] open
    assert ts.values == [[0, 1, 2]] and emitted == 8
    ts.request(2)
    assert ts.values == [[0, 1, 2], [3, 4, 5, 6], [7]]
    ts.cancel()


# weight ---------------------------------------------------------------------------------------------
def test_weight_budget_closes_batches() -> None:
    ts = collect(rx.from_iterable(["aaaa", "bbbb", "cc", "dddddddddddd", "e"]).pipe(
        ops.batch(10, weight=len, max_weight=10)))
    assert ts.values == [["aaaa", "bbbb", "cc"], ["dddddddddddd"], ["e"]] and ts.completed


def test_an_item_over_the_budget_closes_the_open_batch_first_and_goes_alone() -> None:
    ts = collect(rx.from_iterable(["aa", "bbbbbbbbbbbbb", "c", "ddddddddd", "ee"]).pipe(
        ops.batch(10, weight=len, max_weight=10)))
    assert ts.values == [["aa"], ["bbbbbbbbbbbbb"], ["c", "ddddddddd"], ["ee"]]


def test_max_size_still_applies_with_a_weight() -> None:
    ts = collect(rx.range(0, 7).pipe(ops.batch(3, weight=lambda _: 1, max_weight=100)))
    assert ts.values == [[0, 1, 2], [3, 4, 5], [6]]


def test_a_raising_weight_cancels_upstream_and_signals_the_original_exception() -> None:
    pub = TestPublisher[str]()
    ts = TestSubscriber[list[str]](initial_request=UNBOUNDED)
    error = KeyError("no tokenizer")

    def weigh(item: str) -> int:
        if item == "x":
            raise error
        return 1

    pub.pipe(ops.batch(3, weight=weigh, max_weight=5)).subscribe(ts)
    pub.emit("a", "b", "c", "d", "x")
    assert ts.values == [["a", "b", "c"]] and ts.error is error
    assert pub.cancelled
    assert inner(ts).statistics().dropped == {"error": 2}


def test_a_negative_weight_is_an_error() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[list[int]](initial_request=UNBOUNDED)
    pub.pipe(ops.batch(3, weight=lambda x: x, max_weight=5)).subscribe(ts)
    pub.emit(1, -2)
    assert isinstance(ts.error, ValueError) and pub.cancelled


# errors, cancel, completion -----------------------------------------------------------------------
@pytest.mark.virtual
async def test_upstream_error_is_signalled_at_once_and_held_batches_are_dropped() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[list[int]]()
    pub.pipe(ops.batch(4, max_delay_s=1.0)).subscribe(ts)
    ts.request(1)
    pub.emit(*range(8))  # [0..3] delivered, [4..7] ready
    ts.request(1)
    pub.emit(8, 9)  # [4..7] delivered; [8, 9] open with a timer
    sub = inner(ts)
    assert sub.timer is not None
    boom = ConnectionError("lost")
    pub.error(boom)
    assert ts.error is boom
    assert ts.values == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert sub.statistics().dropped == {"error": 2}
    assert sub.timer is None and not pub.cancelled


def test_upstream_error_does_not_wait_for_ready_batches() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[list[int]]()
    pub.pipe(ops.batch(2)).subscribe(ts)
    pub.emit(1, 2)
    boom = RuntimeError("boom")
    pub.error(boom)
    assert ts.values == [] and ts.error is boom
    assert inner(ts).statistics().dropped == {"error": 2}


@pytest.mark.virtual
async def test_cancel_propagates_upstream_and_stops_the_timer() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[list[int]](initial_request=5)
    pub.pipe(ops.batch(4, max_delay_s=1.0)).subscribe(ts)
    pub.emit(1)
    sub = inner(ts)
    assert sub.timer is not None
    ts.cancel()
    assert pub.cancelled and sub.timer is None
    await asyncio.sleep(2.0)
    assert ts.values == []


def test_completion_emits_the_partial_batch_after_the_ready_ones_on_demand() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[list[int]]()
    pub.pipe(ops.batch(4)).subscribe(ts)
    ts.request(1)
    pub.emit(0, 1, 2, 3, 4, 5, 6)
    pub.complete()
    assert ts.values == [[0, 1, 2, 3]] and not ts.completed
    ts.request(1)
    assert ts.values == [[0, 1, 2, 3], [4, 5, 6]] and ts.completed
    assert not pub.cancelled


def test_emission_beyond_demand_is_a_protocol_violation() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[list[int]]()
    pub.pipe(ops.batch(4)).subscribe(ts)
    pub.emit(0, 1, 2, 3, 4)
    assert isinstance(ts.error, MissingBackpressureError) and pub.cancelled
    assert inner(ts).statistics().dropped == {"error": 5}


def test_invalid_request_signals_value_error() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[list[int]]()
    pub.pipe(ops.batch(4)).subscribe(ts)
    ts.request(-1)
    assert isinstance(ts.error, ValueError) and pub.cancelled


def test_request_inside_on_next_does_not_recurse() -> None:
    class OneByOne(TestSubscriber[list[int]]):
        def on_next(self, item: list[int]) -> None:
            super().on_next(item)
            self.request(1)

    ts = OneByOne(initial_request=1)
    rx.range(0, 300_000).pipe(ops.batch(3)).subscribe(ts)
    assert len(ts.values) == 100_000 and ts.completed


# factory, attributes, statistics -------------------------------------------------------------------
def test_public_attributes_for_the_executor() -> None:
    flow = rx.range(0, 1).pipe(ops.batch(8, 0.02))
    assert (flow.kind, flow.name, flow.max_size, flow.max_delay_s, flow.max_weight) == (
        "batch", "batch_1", 8, 0.02, None)
    weighted = rx.range(0, 1).pipe(ops.batch(8, weight=len, max_weight=4096, name="prefill"))
    assert (weighted.name, weighted.max_weight, weighted.max_delay_s) == ("prefill", 4096, None)


def test_statistics() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[list[int]](initial_request=1)
    pub.pipe(ops.batch(4)).subscribe(ts)
    pub.emit(*range(7))
    stats = inner(ts).statistics()
    assert (stats.stage, stats.demand, stats.buffered, stats.capacity, stats.items_in, stats.items_out) == (
        "batch_1", 0, 3, 8, 7, 4)


@pytest.mark.parametrize("kwargs", [
    {"max_size": 0}, {"max_size": 2.0}, {"max_size": 4, "max_delay_s": 0},
    {"max_size": 4, "max_delay_s": -1.0}, {"max_size": 4, "max_delay_s": math.inf},
    {"max_size": 4, "max_delay_s": math.nan}, {"max_size": 4, "weight": len},
    {"max_size": 4, "max_weight": 10}, {"max_size": 4, "weight": len, "max_weight": 0},
])
def test_invalid_bounds_are_rejected(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        ops.batch(**kwargs)


def test_weight_must_be_callable() -> None:
    with pytest.raises(TypeError):
        ops.batch(4, weight=3, max_weight=10)  # type: ignore[arg-type]


def test_a_timed_batch_needs_a_running_loop_an_untimed_one_does_not() -> None:
    ts = collect(rx.range(0, 3).pipe(ops.batch(2, 0.1)))
    assert isinstance(ts.error, RuntimeError)
    assert collect(rx.range(0, 3).pipe(ops.batch(2))).values == [[0, 1], [2]]


async def test_timed_batches_on_real_loops() -> None:
    async def source() -> AsyncIterator[int]:
        for i in range(3):
            yield i
        await asyncio.sleep(0.05)
        yield 3

    values = await rx.from_async_iterable(source()).pipe(ops.batch(10, max_delay_s=0.01)).to_list()
    assert values == [[0, 1, 2], [3]]
