"""take_until (operators/_take_until.py): differential against reactivex 6.1 on virtual time (the
other source a timer that emits, completes empty, fails, or never signals), and untimed; demand
passed through, the other asked for one; both sources cancelled whichever way the stream ends.
"""

from __future__ import annotations

import random
import zlib
from typing import Any, Callable

import pytest
import reactivex
import reactivex.operators as rxo

import rxpipe as rx
from rxpipe import UNBOUNDED
from rxpipe import operators as ops
from rxpipe.testing import TestPublisher, TestSubscriber

from .differential import (
    Case,
    cases,
    through_reactivex,
    through_rxpipe,
    timed_cases,
    timed_through_reactivex,
    timed_through_rxpipe,
)
from .random_demand import drive


def _boom(_: Any) -> Any:
    raise ValueError("the other source failed")


#: how ``other`` behaves at its time t: (rxpipe other, reactivex other)
OTHERS: dict[str, Callable[[float], tuple[Any, Any]]] = {
    "emits": lambda t: (rx.interval(t).pipe(ops.take(1)), reactivex.timer(t)),
    "completes_empty": lambda t: (rx.interval(t).pipe(ops.take(1), ops.filter(lambda _: False)),
                                  reactivex.timer(t).pipe(rxo.ignore_elements())),
    "fails": lambda t: (rx.interval(t).pipe(ops.take(1), ops.map(_boom)), reactivex.timer(t).pipe(rxo.map(_boom))),
    "never": lambda t: (TestPublisher[Any](), reactivex.never()),
}
TIMED_CASES = 10


@pytest.mark.parametrize("behaviour", sorted(OTHERS))
def test_equal_to_reactivex_on_virtual_time(behaviour: str) -> None:
    rng = random.Random(zlib.crc32(behaviour.encode()))
    for case in timed_cases(seed=zlib.crc32(behaviour.encode()), count=TIMED_CASES):
        # t between the items' times (multiples of 0.1 s): no tie whose order the two schedulers decide
        t = round(rng.choice((0.0, 0.1, 0.3, 0.7, 1.2, 2.5, 6.0)) + 0.05, 6)
        ours, theirs = OTHERS[behaviour](t)
        expected = timed_through_reactivex(lambda s, o=theirs: s.pipe(rxo.take_until(o)), case)
        assert timed_through_rxpipe(lambda s, o=ours: s.pipe(ops.take_until(o)), case) == expected, (case, t)


UNTIMED: dict[str, Callable[[], tuple[Any, Any]]] = {
    "empty": lambda: (rx.empty(), reactivex.empty()),
    "never": lambda: (TestPublisher[Any](), reactivex.never()),
}


@pytest.mark.parametrize("other", sorted(UNTIMED))
def test_equal_to_reactivex_on_seeded_inputs_when_other_does_not_emit(other: str) -> None:
    for case in cases(seed=zlib.crc32(other.encode()), count=12):
        ours, theirs = UNTIMED[other]()
        assert through_rxpipe(ops.take_until(ours), case) == through_reactivex(rxo.take_until(theirs), case), case


def test_an_other_emitting_at_subscribe_ends_the_stream_before_any_item_unlike_reactivex() -> None:
    # rxpipe subscribes `other` first (Reactor's takeUntilOther); reactivex subscribes it after the
    # source, so a synchronous source has already run to its end there
    pub, ts = TestPublisher[int](), TestSubscriber[int](initial_request=UNBOUNDED)
    pub.pipe(ops.take_until(rx.just("stop"))).subscribe(ts)
    assert ts.values == [] and ts.completed and pub.requests == [] and pub.cancelled
    case = Case((1, 2, 3))
    assert through_rxpipe(ops.take_until(rx.just("stop")), case) == [("C",)]
    assert through_reactivex(rxo.take_until(reactivex.just("stop")), case) == [("N", 1), ("N", 2), ("N", 3), ("C",)]


# -- demand and cancellation ---------------------------------------------------------------------------
def setup(initial: int = 0) -> tuple[TestPublisher[int], TestPublisher[str], TestSubscriber[int]]:
    pub, other, ts = TestPublisher[int](), TestPublisher[str](), TestSubscriber[int](initial_request=initial)
    pub.pipe(ops.take_until(other)).subscribe(ts)
    return pub, other, ts


def test_demand_passes_through_and_other_is_asked_for_one() -> None:
    pub, other, ts = setup()
    assert other.requests == [1] and pub.requests == []
    ts.request(3)
    assert pub.requests == [3]
    pub.emit(1, 2)
    ts.request(UNBOUNDED)
    assert pub.requests == [3, UNBOUNDED] and other.requests == [1] and ts.values == [1, 2]


def test_other_emitting_completes_and_cancels_both() -> None:
    pub, other, ts = setup(UNBOUNDED)
    pub.emit(1)
    other.emit("stop")
    assert ts.values == [1] and ts.completed and pub.cancelled and other.cancelled


def test_downstream_cancel_cancels_both() -> None:
    pub, other, ts = setup(2)
    ts.cancel()
    assert pub.cancelled and other.cancelled


def test_the_source_completing_cancels_other() -> None:
    pub, other, ts = setup(2)
    pub.emit(1).complete()
    assert ts.completed and other.cancelled and not pub.cancelled


def test_an_error_from_either_side_cancels_the_other_one() -> None:
    pub, other, ts = setup(2)
    failure = RuntimeError("source")
    pub.error(failure)
    assert ts.error is failure and other.cancelled
    pub, other, ts = setup(2)
    failure = RuntimeError("other")
    other.error(failure)
    assert ts.error is failure and pub.cancelled


def test_other_completing_without_an_item_changes_nothing() -> None:
    pub, other, ts = setup(UNBOUNDED)
    other.complete()
    pub.emit(1, 2).complete()
    assert ts.values == [1, 2] and ts.completed and other.cancel_count == 0


def test_random_demand_with_an_other_that_never_emits() -> None:
    for seed in range(8):
        rng = random.Random(seed)
        items = [rng.randint(0, 9) for _ in range(rng.choice((0, 3, 50)))]
        other = TestPublisher[str]()
        run = drive(ops.take_until(other), items, seed)
        assert run.ts.values == items and run.ts.completed and other.cancelled


def test_a_publisher_that_is_not_a_flowable_is_accepted_and_anything_else_refused() -> None:
    class Bare(rx.Publisher[str]):
        def subscribe(self, subscriber: Any) -> None:
            TestPublisher[str]().subscribe(subscriber)

    pub, ts = TestPublisher[int](), TestSubscriber[int](initial_request=UNBOUNDED)
    pub.pipe(ops.take_until(Bare())).subscribe(ts)  # type: ignore[arg-type]
    pub.emit(1).complete()
    assert ts.values == [1] and ts.completed
    with pytest.raises(TypeError, match="from_observable"):
        ops.take_until(reactivex.never())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Flowable or a Publisher"):
        ops.take_until(None)  # type: ignore[arg-type]
