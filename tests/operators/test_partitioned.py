"""map_async_partitioned (Akka mapAsyncPartitioned): per-key order under random completion
orders, at most ``per_partition`` calls per key and ``parallelism`` in all, the slot bound on
upstream demand, bounded per-key state, errors, cancel."""

from __future__ import annotations

import asyncio
import random
from collections import defaultdict
from typing import Any

import pytest

import rxpipe as rx
from rxpipe import UNBOUNDED
from rxpipe import operators as ops
from rxpipe.resilience import Retry
from rxpipe.testing import TestPublisher, TestSubscriber


class Calls:
    """An async function with a random (seeded) duration per call that records what runs."""

    def __init__(self, seed: int, key: Any = lambda item: item[0]) -> None:
        self.rng = random.Random(seed)
        self.key = key
        self.running: dict[Any, int] = defaultdict(int)
        self.max_per_key = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.started: list[Any] = []

    async def __call__(self, item: Any) -> Any:
        key = self.key(item)
        self.started.append(item)
        self.running[key] += 1
        self.in_flight += 1
        self.max_per_key = max(self.max_per_key, self.running[key])
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.rng.choice((0.001, 0.01, 0.05, 0.2, 1.0)))
        finally:
            self.running[key] -= 1
            self.in_flight -= 1
        return ("done", item)


async def turns(n: int = 4) -> None:
    """A few loop iterations: a woken call runs, ends, and its done callback reaches the stage."""
    for _ in range(n):
        await asyncio.sleep(0)


def conversations(seed: int, keys: int, turns: int) -> list[tuple[int, int]]:
    """(conversation, turn) items, the turns of each conversation in order, interleaved at random."""
    rng = random.Random(seed)
    left = {k: 0 for k in range(keys)}
    items = []
    while left:
        k = rng.choice(sorted(left))
        items.append((k, left[k]))
        left[k] += 1
        if left[k] == turns:
            del left[k]
    return items


@pytest.mark.virtual
@pytest.mark.parametrize("seed", range(8))
async def test_each_key_keeps_its_order_under_random_completion_orders(seed: int) -> None:
    items = conversations(seed, keys=7, turns=12)
    calls = Calls(seed)
    out = await rx.from_iterable(items).pipe(
        ops.map_async_partitioned(calls, 5, lambda item: item[0], ordered=False)).to_list()
    results = [item for _, item in out]
    assert sorted(results) == sorted(items)  # every item once
    for key in range(7):
        assert [t for k, t in results if k == key] == list(range(12))  # each conversation in order
    assert calls.max_per_key == 1 and 1 < calls.max_in_flight <= 5  # waiting turns hold slots too
    assert results != items  # completion order differs from input order across keys


@pytest.mark.virtual
@pytest.mark.parametrize("seed", range(4))
async def test_ordered_mode_emits_in_input_order(seed: int) -> None:
    items = conversations(seed, keys=5, turns=10)
    calls = Calls(seed)
    out = await rx.from_iterable(items).pipe(ops.map_async_partitioned(calls, 4, lambda item: item[0])).to_list()
    assert [item for _, item in out] == items and calls.max_per_key == 1


@pytest.mark.virtual
@pytest.mark.parametrize("seed", range(4))
async def test_per_partition_bounds_the_calls_of_a_key(seed: int) -> None:
    items = [(k % 2, n) for n, k in enumerate(range(60))]
    calls = Calls(seed)
    out = await rx.from_iterable(items).pipe(
        ops.map_async_partitioned(calls, 6, lambda item: item[0], per_partition=2)).to_list()
    assert [item for _, item in out] == items
    assert calls.max_per_key == 2 and calls.max_in_flight == 4  # 2 keys x 2


@pytest.mark.virtual
async def test_slots_bound_upstream_demand_and_a_waiting_key_holds_its_slots() -> None:
    pub = TestPublisher[tuple[str, int]]()
    ts = TestSubscriber[Any](initial_request=UNBOUNDED)
    gates: dict[tuple[str, int], asyncio.Event] = {}

    async def fn(item: tuple[str, int]) -> tuple[str, int]:
        gates[item] = asyncio.Event()
        await gates[item].wait()
        return item

    pub.pipe(ops.map_async_partitioned(fn, 3, lambda item: item[0], ordered=False)).subscribe(ts)
    assert pub.requests == [3]
    pub.emit(("a", 0), ("a", 1), ("a", 2))  # one key: one call runs, two wait, all hold slots
    await turns()
    assert list(gates) == [("a", 0)] and pub.outstanding == 0
    gates[("a", 0)].set()
    await turns()
    assert ts.values == [("a", 0)] and list(gates) == [("a", 0), ("a", 1)] and pub.requests == [3, 1]
    pub.emit(("b", 0))  # another key runs beside it
    await turns()
    assert list(gates)[-1] == ("b", 0) and pub.outstanding == 0
    stage = ts.subscription.upstream  # type: ignore[union-attr]
    assert stage.logic.held == 3 and set(stage.logic.running) == {"a", "b"}
    for item in [("b", 0), ("a", 1)]:
        gates[item].set()
        await turns()
    await turns()
    gates[("a", 2)].set()
    await turns()
    assert ts.values == [("a", 0), ("b", 0), ("a", 1), ("a", 2)]
    assert stage.logic.running == {} and stage.logic.waiting == {}  # no key state without items
    pub.complete()
    assert ts.completed


@pytest.mark.virtual
async def test_without_demand_results_keep_their_slots() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[int]()

    async def fn(x: int) -> int:
        return x

    pub.pipe(ops.map_async_partitioned(fn, 2, lambda x: x % 2)).subscribe(ts)
    assert pub.requests == [2]
    pub.emit(1, 2)
    await asyncio.sleep(0.1)
    assert ts.values == [] and pub.requests == [2]  # done, waiting for demand: still 2 slots
    ts.request(1)
    await asyncio.sleep(0)
    assert ts.values == [1] and pub.requests == [2, 1]


@pytest.mark.virtual
async def test_a_failing_call_cancels_the_others_and_fails_at_once() -> None:
    cancelled: list[int] = []

    async def fn(x: int) -> int:
        try:
            if x == 3:
                await asyncio.sleep(0.1)
                raise ConnectionError("backend gone")
            await asyncio.sleep(10.0)
            return x
        except asyncio.CancelledError:
            cancelled.append(x)
            raise

    pub = TestPublisher[int]()
    ts = TestSubscriber[int](initial_request=UNBOUNDED)
    pub.pipe(ops.map_async_partitioned(fn, 4, lambda x: x)).subscribe(ts)
    pub.emit(1, 2, 3)
    await asyncio.sleep(0.2)
    assert isinstance(ts.error, ConnectionError) and pub.cancelled
    await asyncio.sleep(0)
    assert sorted(cancelled) == [1, 2]


@pytest.mark.virtual
async def test_partition_errors_and_retries() -> None:
    pub = TestPublisher[Any]()
    ts = TestSubscriber[Any](initial_request=UNBOUNDED)

    async def same(x: Any) -> Any:
        return x

    pub.pipe(ops.map_async_partitioned(same, 2, lambda x: {"unhashable": x})).subscribe(ts)
    pub.emit(1)
    assert isinstance(ts.error, TypeError) and pub.cancelled  # an unhashable key
    attempts: list[int] = []

    async def flaky(x: int) -> int:
        attempts.append(x)
        if len(attempts) < 3:
            raise ConnectionError("try again")
        return x * 10

    out = await rx.just(7).pipe(ops.map_async_partitioned(flaky, 1, lambda x: 0,
                                                          retry=Retry(3, 0.01, 0.1, rng=random.Random(1)))).to_list()
    assert out == [70] and attempts == [7, 7, 7]


@pytest.mark.virtual
async def test_cancel_cancels_every_call() -> None:
    cancelled: list[int] = []

    async def fn(x: int) -> int:
        try:
            await asyncio.sleep(10.0)
        except asyncio.CancelledError:
            cancelled.append(x)
            raise
        return x

    ts = TestSubscriber[int](initial_request=UNBOUNDED)
    rx.range(0, 10).pipe(ops.map_async_partitioned(fn, 4, lambda x: x % 3)).subscribe(ts)
    await asyncio.sleep(0)
    ts.cancel()
    await asyncio.sleep(0)
    assert sorted(cancelled) == [0, 1, 2]  # keys 0, 1, 2 ran; 3 waited for key 0


def test_bad_arguments() -> None:
    async def fn(x: Any) -> Any:
        return x

    with pytest.raises(ValueError, match="parallelism"):
        ops.map_async_partitioned(fn, 0, lambda x: x)
    with pytest.raises(ValueError, match="per_partition"):
        ops.map_async_partitioned(fn, 2, lambda x: x, per_partition=3)
    with pytest.raises(TypeError, match="partition"):
        ops.map_async_partitioned(fn, 2, "key")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="retry"):
        ops.map_async_partitioned(fn, 2, lambda x: x, retry=3)  # type: ignore[arg-type]
