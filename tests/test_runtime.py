"""Pipeline.run without on_item: items are counted as they arrive, within demand (prefetch 256,
replenished by 192), the error is raised, cancelling the caller cancels upstream; with on_item
too, a timeout included; a source's cleanup error after a cancel is never lost."""

from __future__ import annotations

import asyncio
import logging
from typing import AsyncIterator

import pytest

import rxpipe as rx
from rxpipe import operators as ops
from rxpipe.runtime import Pipeline
from rxpipe.testing import TestPublisher


async def test_run_counts_every_item_and_never_asks_beyond_its_prefetch() -> None:
    source: TestPublisher[int] = TestPublisher()
    task = asyncio.ensure_future(Pipeline(source).run())
    await asyncio.sleep(0)
    assert source.requests == [256]
    source.emit(*range(191))
    assert source.requests == [256]  # 191 taken: not yet the replenish limit
    source.emit(191)
    assert source.requests == [256, 192]  # one request per 192 taken, never per item
    assert source.outstanding == 256
    source.emit(*range(256))
    assert source.requests == [256, 192, 192]
    assert source.outstanding == 192
    source.complete()
    assert await task == 448
    assert not source.cancelled


async def test_run_raises_the_pipelines_error_after_counting_the_items_before_it() -> None:
    source: TestPublisher[int] = TestPublisher()
    task = asyncio.ensure_future(Pipeline(source).run())
    await asyncio.sleep(0)
    source.emit(1, 2, 3).error(ValueError("boom"))
    with pytest.raises(ValueError, match="boom"):
        await task


async def test_cancelling_run_cancels_the_subscription() -> None:
    source: TestPublisher[int] = TestPublisher()
    task = asyncio.ensure_future(Pipeline(source).run())
    await asyncio.sleep(0)
    source.emit(1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert source.cancel_count == 1


async def test_run_with_on_item_passes_each_item_in_order() -> None:
    source: TestPublisher[int] = TestPublisher()
    seen: list[int] = []
    task = asyncio.ensure_future(Pipeline(source).run(on_item=seen.append))
    await asyncio.sleep(0)
    source.emit(3, 1, 2).complete()
    assert await task == 3
    assert seen == [3, 1, 2]


async def test_run_with_on_item_stops_at_its_timeout() -> None:
    """The caller's timeout cancels the subscription at once, even while the caller still holds
    the TimeoutError (its traceback keeps run's frame, and the iterator in it, alive)."""
    source: TestPublisher[int] = TestPublisher()
    seen: list[int] = []
    with pytest.raises(TimeoutError) as info:
        async with asyncio.timeout(0.05):
            run = asyncio.ensure_future(Pipeline(source).run(on_item=seen.append))
            await asyncio.sleep(0)
            source.emit(1, 2)
            await run
    assert info.value is not None  # held, as a caller that keeps the exception does
    assert source.cancelled and source.cancel_count == 1
    assert seen == [1, 2]


async def test_run_with_on_item_that_raises_cancels_upstream() -> None:
    source: TestPublisher[int] = TestPublisher()

    def on_item(item: int) -> None:
        raise ValueError(f"bad item {item}")

    task = asyncio.ensure_future(Pipeline(source).run(on_item=on_item))
    await asyncio.sleep(0)
    source.emit(7)
    with pytest.raises(ValueError, match="bad item 7"):
        await task
    assert source.cancel_count == 1


async def _cleanup_fails(started: asyncio.Event) -> AsyncIterator[int]:
    """Yields 0, 1, 2, ... and raises from its cleanup (as a driver's close that fails does)."""
    try:
        n = 0
        while True:
            started.set()
            yield n
            n += 1
            await asyncio.sleep(0.001)
    finally:
        raise RuntimeError("the connection could not be closed")


async def test_a_source_whose_cleanup_raises_after_cancel_is_logged_and_raised_by_run(
        caplog: pytest.LogCaptureFixture) -> None:
    started = asyncio.Event()
    pipeline = Pipeline(rx.from_async_iterable(_cleanup_fails(started)), ops.take(3))
    with caplog.at_level(logging.ERROR, logger="rxpipe"):
        with pytest.raises(RuntimeError, match="the connection could not be closed"):
            await pipeline.run()
    records = [r for r in caplog.records if "from_async_iterable" in r.getMessage()]
    assert len(records) == 1 and records[0].levelno == logging.ERROR and records[0].exc_info is not None
    assert "the connection could not be closed" in records[0].getMessage()


async def test_a_source_cleanup_error_outside_a_run_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    started = asyncio.Event()
    with caplog.at_level(logging.ERROR, logger="rxpipe"):
        assert await rx.from_async_iterable(_cleanup_fails(started)).pipe(ops.take(2)).to_list() == [0, 1]
        for _ in range(20):  # the pump task finishes its cleanup after take(2) cancelled it
            if caplog.records:
                break
            await asyncio.sleep(0.01)
    assert [r.levelno for r in caplog.records] == [logging.ERROR]
    assert "the connection could not be closed" in caplog.records[0].getMessage()


async def test_a_cancelled_run_only_logs_a_cleanup_error(caplog: pytest.LogCaptureFixture) -> None:
    started = asyncio.Event()
    with caplog.at_level(logging.ERROR, logger="rxpipe"):
        task = asyncio.ensure_future(Pipeline(rx.from_async_iterable(_cleanup_fails(started))).run())
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        for _ in range(20):
            if caplog.records:
                break
            await asyncio.sleep(0.01)
    assert len(caplog.records) == 1 and "the connection could not be closed" in caplog.records[0].getMessage()
