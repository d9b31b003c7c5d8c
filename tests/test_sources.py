"""Sources: from_iterable, range, just, empty, error, defer, from_async_iterable, interval."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator

import pytest

import rxpipe as rx
from rxpipe import UNBOUNDED
from rxpipe import operators as ops
from rxpipe.testing import TestSubscriber


def test_just_range_and_from_iterable_values() -> None:
    for source, expected in [(rx.just(1, 2, 3), [1, 2, 3]), (rx.range(3), [0, 1, 2]),
                             (rx.range(10, 0, -3), [10, 7, 4, 1]), (rx.from_iterable("ab"), ["a", "b"]),
                             (rx.from_iterable({"k": 1}), ["k"])]:
        ts = TestSubscriber[Any](initial_request=UNBOUNDED)
        source.subscribe(ts)
        assert ts.values == expected and ts.completed


def test_just_rejects_none() -> None:
    with pytest.raises(TypeError, match="§2.13"):
        rx.just(1, None)


def test_iterator_raising_is_signalled_after_the_items_before_it() -> None:
    def gen() -> Any:
        yield 1
        raise LookupError("disk gone")

    ts = TestSubscriber[int](initial_request=5)
    rx.from_iterable(gen()).subscribe(ts)
    assert ts.values == [1]
    assert isinstance(ts.error, LookupError)


def test_iter_raising_at_subscribe_is_signalled() -> None:
    class Broken:
        def __iter__(self) -> Any:
            raise PermissionError("no")

    ts = TestSubscriber[int]()
    rx.from_iterable(Broken()).subscribe(ts)  # type: ignore[arg-type]
    assert isinstance(ts.error, PermissionError)


def test_one_shot_iterator_serves_only_the_first_subscriber() -> None:
    source = rx.from_iterable(iter([1, 2]))
    first, second = TestSubscriber[int](initial_request=5), TestSubscriber[int](initial_request=5)
    source.subscribe(first)
    source.subscribe(second)
    assert first.values == [1, 2] and second.values == [] and second.completed


def test_error_factory_gives_a_fresh_exception_per_subscription() -> None:
    source = rx.error(lambda: KeyError("fresh"))
    a, b = TestSubscriber[int](), TestSubscriber[int]()
    source.subscribe(a)
    source.subscribe(b)
    assert isinstance(a.error, KeyError) and a.error is not b.error


def test_defer_accepts_iterables_and_rejects_others() -> None:
    ts = TestSubscriber[int](initial_request=5)
    rx.defer(lambda: [7, 8]).subscribe(ts)
    assert ts.values == [7, 8] and ts.completed
    bad = TestSubscriber[int]()
    rx.defer(lambda: 42).subscribe(bad)  # type: ignore[arg-type, return-value]
    assert isinstance(bad.error, TypeError)


# from_async_iterable ----------------------------------------------------------------------------
class Counting:
    """An async iterable that records how far it was pulled and whether it was closed."""

    def __init__(self, n: int, fail_at: int | None = None) -> None:
        self.n = n
        self.fail_at = fail_at
        self.pulled = 0
        self.closed = False

    async def gen(self) -> AsyncIterator[int]:
        try:
            for i in range(self.n):
                if i == self.fail_at:
                    raise ConnectionError("upstream died")
                self.pulled += 1
                yield i
                await asyncio.sleep(0)
        finally:
            self.closed = True


@pytest.mark.virtual
async def test_from_async_iterable_pulls_at_most_prefetch_ahead() -> None:
    counting = Counting(1000)
    ts = TestSubscriber[int]()
    rx.from_async_iterable(counting.gen(), prefetch=8).subscribe(ts)
    await asyncio.sleep(1)
    assert counting.pulled == 8 and ts.values == []
    ts.request(6)  # 6 delivered → one replenish of 8 - 8 // 4 = 6
    await asyncio.sleep(1)
    assert ts.values == list(range(6))
    assert counting.pulled == 14
    ts.request(UNBOUNDED)
    await ts.await_done()
    assert ts.values == list(range(1000)) and ts.completed
    assert counting.closed


@pytest.mark.virtual
async def test_from_async_iterable_cancel_stops_the_pump_and_closes_the_iterator() -> None:
    counting = Counting(1000)
    ts = TestSubscriber[int](initial_request=3)
    rx.from_async_iterable(counting.gen(), prefetch=4).subscribe(ts)
    await ts.await_count(3)
    ts.cancel()
    await asyncio.sleep(0.1)
    assert counting.closed
    assert ts.values == [0, 1, 2] and not ts.done


@pytest.mark.virtual
async def test_from_async_iterable_error_follows_the_items() -> None:
    counting = Counting(10, fail_at=3)
    ts = TestSubscriber[int](initial_request=10)
    rx.from_async_iterable(counting.gen()).subscribe(ts)
    await ts.await_done()
    assert ts.values == [0, 1, 2]
    assert isinstance(ts.error, ConnectionError)


@pytest.mark.virtual
async def test_from_async_iterable_rejects_none_items() -> None:
    async def gen() -> AsyncIterator[Any]:
        yield 1
        yield None

    ts = TestSubscriber[int](initial_request=10)
    rx.from_async_iterable(gen()).subscribe(ts)
    await ts.await_done()
    assert ts.values == [1] and isinstance(ts.error, TypeError)


def test_from_async_iterable_needs_a_running_loop() -> None:
    async def gen() -> AsyncIterator[int]:
        yield 1

    agen = gen()
    ts = TestSubscriber[int](initial_request=1)
    rx.from_async_iterable(agen).subscribe(ts)
    assert isinstance(ts.error, RuntimeError)
    with pytest.raises(TypeError):
        rx.from_async_iterable([1, 2])  # type: ignore[arg-type]
    asyncio.run(agen.aclose())


async def test_from_async_iterable_with_fused_operators() -> None:
    async def gen() -> AsyncIterator[int]:
        for i in range(20):
            yield i

    values = await rx.from_async_iterable(gen()).pipe(ops.filter(lambda x: x % 5 == 0), ops.map(str)).to_list()
    assert values == ["0", "5", "10", "15"]


# interval ---------------------------------------------------------------------------------------
@pytest.mark.virtual
async def test_interval_ticks_on_the_loop_clock(loop: asyncio.AbstractEventLoop) -> None:
    times: list[float] = []
    ts = TestSubscriber[int](initial_request=3)
    rx.interval(0.25).pipe(ops.tap(lambda _: times.append(loop.time()))).subscribe(ts)
    await ts.await_count(3)
    assert ts.values == [0, 1, 2]
    assert times == [0.25, 0.5, 0.75]
    ts.cancel()


@pytest.mark.virtual
async def test_interval_skips_and_counts_ticks_without_demand() -> None:
    ts = TestSubscriber[int](initial_request=2)
    rx.interval(1.0).subscribe(ts)
    inner = ts.subscription.upstream  # type: ignore[union-attr]
    await asyncio.sleep(5.5)  # ticks at 1..5; demand for two
    assert ts.values == [0, 1]
    assert inner.skipped == 3
    ts.request(1)
    await asyncio.sleep(1.0)  # tick 6 (index 5) finds demand
    assert ts.values == [0, 1, 5]
    ts.cancel()
    assert inner.handle is None


def test_interval_rejects_non_positive_period() -> None:
    with pytest.raises(ValueError, match="period_s"):
        rx.interval(0)


def test_interval_without_a_loop_signals_runtime_error() -> None:
    ts = TestSubscriber[int](initial_request=1)
    rx.interval(1).subscribe(ts)
    assert isinstance(ts.error, RuntimeError)
