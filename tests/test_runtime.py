"""Pipeline.run without on_item: items are counted as they arrive, within demand (prefetch 256,
replenished by 192), the error is raised, cancelling the caller cancels upstream."""

from __future__ import annotations

import asyncio

import pytest

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
