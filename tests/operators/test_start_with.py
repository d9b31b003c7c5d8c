"""start_with (operators/_start_with.py): differential against reactivex 6.1; the items go first,
on demand, and the upstream is asked only for the demand left (exact requests); an early
upstream error waits behind the items.
"""

from __future__ import annotations

import random
import zlib
from typing import Any

import pytest
import reactivex.operators as rxo

import rxpipe as rx
from rxpipe import UNBOUNDED
from rxpipe import operators as ops
from rxpipe.testing import TestSubscriber

from .differential import cases, through_reactivex, through_rxpipe
from .hand_driven import subscribe
from .random_demand import drive

CASES = 12


@pytest.mark.parametrize("count", [0, 1, 3])
def test_equal_to_reactivex_on_every_seeded_input(count: int) -> None:
    rng = random.Random(count)
    for case in cases(seed=zlib.crc32(f"start_with:{count}".encode()), count=CASES):
        items = [rng.randint(-9, -1) for _ in range(count)]
        assert through_rxpipe(ops.start_with(*items), case) == through_reactivex(rxo.start_with(*items), case), case


def test_the_demand_left_after_the_items_goes_upstream() -> None:
    pub, ts = subscribe(ops.start_with("a", "b"), 5)
    assert ts.values == ["a", "b"] and pub.requests == [3]
    pub.emit("c", "d", "e")
    ts.request(UNBOUNDED)
    assert pub.requests == [3, UNBOUNDED]


def test_nothing_is_requested_upstream_before_the_items_went_out() -> None:
    pub, ts = subscribe(ops.start_with("a", "b", "c"))
    assert pub.requests == [] and ts.values == []
    ts.request(1)
    ts.request(1)
    assert ts.values == ["a", "b"] and pub.requests == []
    ts.request(3)  # c, then 2 for the upstream
    assert ts.values == ["a", "b", "c"] and pub.requests == [2]
    pub.emit("d")
    pub.complete()
    assert ts.values == ["a", "b", "c", "d"] and ts.completed


def test_an_early_upstream_error_waits_behind_the_items() -> None:
    failure = RuntimeError("at subscribe")
    ts = TestSubscriber[Any](initial_request=1)
    rx.error(failure).pipe(ops.start_with("a", "b")).subscribe(ts)
    assert ts.values == ["a"] and ts.error is None
    ts.request(1)
    assert ts.values == ["a", "b"] and ts.error is failure


def test_an_empty_upstream_completes_after_the_items() -> None:
    pub, ts = subscribe(ops.start_with("a"), 0)
    pub.complete()
    assert not ts.completed
    ts.request(1)
    assert ts.values == ["a"] and ts.completed


def test_cancel_while_the_items_wait_cancels_upstream() -> None:
    pub, ts = subscribe(ops.start_with("a", "b"), 1)
    ts.cancel()
    assert pub.cancelled and ts.values == ["a"]


def test_the_upstream_is_subscribed_at_once_reactivex_subscribes_it_after_the_items() -> None:
    made: list[int] = []
    ts = TestSubscriber[Any]()
    rx.defer(lambda: made.append(1) or rx.just("x")).pipe(ops.start_with("a")).subscribe(ts)
    assert made == [1] and ts.values == []  # subscribed, nothing requested of it
    ts.request(2)
    assert ts.values == ["a", "x"]


def test_random_demand() -> None:
    for seed in range(10):
        rng = random.Random(seed)
        items = [rng.randint(0, 9) for _ in range(rng.choice((0, 2, 30)))]
        prefix = [rng.randint(-9, -1) for _ in range(rng.randint(0, 4))]
        run = drive(ops.start_with(*prefix), items, seed)
        assert run.ts.values == prefix + items and run.ts.completed


def test_items_are_never_none() -> None:
    with pytest.raises(TypeError, match="None"):
        ops.start_with(1, None)
