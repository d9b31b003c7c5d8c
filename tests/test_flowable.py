"""Flowable consumption: ``async for`` (prefetch/replenish, cancel on exit), ``to_list``,
callback ``subscribe`` handles, ``pipe``."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import rxpipe as rx
from rxpipe import operators as ops
from rxpipe.testing import TestPublisher


async def test_async_for_prefetches_256_then_replenishes_192() -> None:
    pub = TestPublisher[int]()
    iterator = pub.__aiter__()
    assert pub.requests == [256]
    pub.emit(*range(256))
    got = [await iterator.__anext__() for _ in range(191)]
    assert pub.requests == [256]
    got.append(await iterator.__anext__())
    assert pub.requests == [256, 192]
    assert got == list(range(192))
    await iterator.aclose()
    assert pub.cancelled


async def test_a_timed_out_anext_is_not_leaving_the_loop() -> None:
    async def producer() -> Any:
        for i in range(6):
            yield i
            if i == 3:
                await asyncio.sleep(0.05)  # a pause longer than the consumer's timeout

    iterator = rx.from_async_iterable(producer()).__aiter__()
    got: list[int] = []
    timeouts = 0
    while True:
        try:
            got.append(await asyncio.wait_for(iterator.__anext__(), 0.01))
        except TimeoutError:
            timeouts += 1  # the stream goes on: the next __anext__ gets the next item
        except StopAsyncIteration:
            break
    assert got == [0, 1, 2, 3, 4, 5] and timeouts >= 1


async def test_a_timed_out_anext_keeps_the_subscription_and_what_was_received() -> None:
    pub = TestPublisher[int]()
    iterator = pub.__aiter__()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(iterator.__anext__(), 0.001)
    assert not pub.cancelled
    pub.emit(7, 8)
    pub.complete()
    assert [await iterator.__anext__(), await iterator.__anext__()] == [7, 8]
    with pytest.raises(StopAsyncIteration):
        await iterator.__anext__()


async def test_async_for_break_cancels_upstream_at_once() -> None:
    pub = TestPublisher[int]()
    pub_values = list(range(10))
    seen = []

    async def consume() -> None:
        async for x in pub:
            seen.append(x)
            if x == 3:
                break
        # the loop is left: upstream must already be cancelled, before any await
        assert pub.cancelled

    task = asyncio.ensure_future(consume())
    await asyncio.sleep(0)
    pub.emit(*pub_values)
    await task
    assert seen == [0, 1, 2, 3]


async def test_async_for_exception_in_body_cancels_upstream() -> None:
    pub = TestPublisher[int]()
    with pytest.raises(KeyError):
        async def consume() -> None:
            async for x in pub:
                raise KeyError(x)

        task = asyncio.ensure_future(consume())
        await asyncio.sleep(0)
        pub.emit(1)
        await task
    assert pub.cancelled  # at once: the iterator died with the frame, no gc needed


async def test_abandoned_iterator_is_not_kept_alive() -> None:
    pub = TestPublisher[int]()
    iterator = pub.__aiter__()
    pub.emit(1)
    assert await iterator.__anext__() == 1
    del iterator  # CPython frees it here; nothing else holds it
    assert pub.cancelled


async def test_async_for_raises_the_stream_error_after_its_items() -> None:
    seen = []
    with pytest.raises(ZeroDivisionError):
        async for x in rx.range(0, 5).pipe(ops.map(lambda x: 1 // (2 - x))):
            seen.append(x)
    assert seen == [0, 1]


async def test_async_for_over_a_long_source_is_bounded_by_prefetch() -> None:
    pulled = 0

    def gen() -> Any:
        nonlocal pulled
        for i in range(10_000):
            pulled += 1
            yield i

    async for x in rx.from_iterable(gen()):
        if x == 0:
            assert pulled <= 257  # 256 requested, plus the one peeked for completion
        if x == 100:
            break
    assert pulled <= 257


async def test_to_list_collects_and_raises() -> None:
    assert await rx.range(0, 5).to_list() == [0, 1, 2, 3, 4]
    assert await rx.empty().to_list() == []
    with pytest.raises(KeyError):
        await rx.error(KeyError("x")).to_list()


async def test_cancelling_to_list_cancels_the_subscription() -> None:
    pub = TestPublisher[int]()
    task = asyncio.ensure_future(pub.to_list())
    await asyncio.sleep(0)
    assert pub.requests == [rx.UNBOUNDED]
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert pub.cancelled


def test_subscribe_with_callbacks_returns_a_cancellable_handle() -> None:
    pub = TestPublisher[int]()
    got: list[int] = []
    done: list[bool] = []
    handle = pub.subscribe(got.append, on_complete=lambda: done.append(True))
    pub.emit(1, 2)
    handle.cancel()
    handle.dispose()
    pub.emit(3)
    assert got == [1, 2] and done == [] and pub.cancel_count == 1


def test_subscribe_keyword_on_next() -> None:
    got: list[int] = []
    rx.just(5).subscribe(on_next=got.append)
    assert got == [5]


def test_pipe_and_module_level_pipe_compose_left_to_right() -> None:
    double_then_str = rx.pipe(ops.map(lambda x: x * 2), ops.map(str))
    chain = rx.range(0, 3).pipe(double_then_str, ops.map(lambda s: s + "!"))
    got: list[str] = []
    chain.subscribe(got.append)
    assert got == ["0!", "2!", "4!"]


def test_pipe_rejects_operators_that_return_non_flowables() -> None:
    with pytest.raises(TypeError, match="not a Flowable"):
        rx.range(0, 3).pipe(lambda source: 42)  # type: ignore[arg-type, return-value]


async def test_next_window_takes_every_ready_item_in_one_wake_within_the_credit_asked() -> None:
    source: TestPublisher[int] = TestPublisher()
    it = source.iterate(3, credit=True)
    assert source.requests == [3]
    waiting = asyncio.ensure_future(it.next_window())
    await asyncio.sleep(0)
    source.emit(1, 2)
    assert await waiting == [1, 2]  # one wake for both
    source.emit(3)
    assert await it.next_window() == [3]
    assert source.requests == [3]  # credit only through grant: never more than asked
    it.grant(2)
    assert source.requests == [3, 2]
    source.emit(4, 5)
    source.emit(6)  # beyond the credit granted: the link's overrun rule, not a bigger window
    assert await it.next_window() == [4, 5]
    with pytest.raises(rx.MissingBackpressureError):
        await it.next_window()


async def test_next_window_delivers_what_came_before_the_end_then_ends() -> None:
    source: TestPublisher[int] = TestPublisher()
    it = source.iterate(8)
    source.emit(1, 2, 3)
    source.error(ValueError("boom"))
    assert await it.next_window() == [1, 2, 3]
    assert source.requests == [8]  # replenish rule: 6 consumed of 8 would ask 6 more; 3 is not due
    with pytest.raises(ValueError, match="boom"):
        await it.next_window()
    done: TestPublisher[int] = TestPublisher()
    it = done.iterate(4)
    done.emit(7)
    done.complete()
    assert await it.next_window() == [7]
    with pytest.raises(StopAsyncIteration):
        await it.next_window()
