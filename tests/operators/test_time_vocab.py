"""The third round's time operators (DESIGN §3): ``timestamp``, ``time_interval``,
``take_with_time``, ``skip_with_time``, ``take_last_with_time``, ``skip_last_with_time``,
``take_until_with_time``, ``skip_until_with_time``, ``delay_subscription``, ``delay_with_mapper``,
``throttle_with_timeout``, ``throttle_with_mapper``, ``timeout_with_mapper``, and
``timeout(duetime, other)``.

Each against reactivex 6.1's ``TestScheduler`` on 100 seeded timed inputs, every notification's
time compared (virtual time: the loop's clock only); the family's demand rule (lossy ones
request without bound and count their drops; the others pass demand through or, for delays,
count delayed items against it) by exact requests; cancel reaching every upstream and stream.
"""

from __future__ import annotations

import asyncio
import random
from datetime import timedelta
from typing import Any, Callable

import pytest
import reactivex
import reactivex.operators as rxo

import rxpipe as rx
from rxpipe import UNBOUNDED
from rxpipe import operators as ops
from rxpipe.testing import TestPublisher, TestSubscriber, run_virtual

from .differential import reactivex_timeline, rxpipe_timeline, timeline
from .hand_driven import subscribe
from .test_time import INTERVALS_S, NO_TIE_S
from .vocab import TIMED, Pair, check_timed, register_timed

FAMILY = ("timestamp", "time_interval", "take_with_time", "skip_with_time", "take_last_with_time",
          "skip_last_with_time", "take_until_with_time", "skip_until_with_time", "delay_subscription",
          "delay_with_mapper", "throttle_with_timeout", "throttle_with_mapper", "timeout_with_mapper", "timeout")

#: reactivex's TestScheduler subscribes at 200 s of its clock (ReactiveTest.subscribed)
SUBSCRIBED_S = 200.0


def _duration(rng: random.Random) -> float:
    return rng.choice((*NO_TIE_S, *INTERVALS_S))


def _relative(build: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``build(source, t0)`` with ``t0`` the loop's clock at the subscription (for timestamps)."""
    return lambda source: rx.defer(lambda: build(source, asyncio.get_running_loop().time()))


@register_timed("timestamp")
def _timestamp(rng: random.Random) -> Pair:
    ours = _relative(lambda s, t0: s.pipe(ops.timestamp(), ops.map(lambda t: (t.value, round(t.timestamp - t0, 6)))))
    theirs = reactivex.compose(rxo.timestamp(), rxo.map(
        lambda t: (t.value, round(t.timestamp.timestamp() - SUBSCRIBED_S, 6))))
    return ours, theirs


@register_timed("time_interval")
def _time_interval(rng: random.Random) -> Pair:
    return (rx.pipe(ops.time_interval(), ops.map(lambda t: (t.value, round(t.interval, 6)))),
            reactivex.compose(rxo.time_interval(), rxo.map(lambda t: (t.value, round(t.interval.total_seconds(), 6)))))


def _simple(name: str) -> None:
    def make(rng: random.Random) -> Pair:
        seconds = _duration(rng)
        arg: Any = timedelta(seconds=seconds) if rng.random() < 0.3 else seconds
        return getattr(ops, name)(arg), getattr(rxo, name)(arg)
    register_timed(name)(make)


for _name in ("take_with_time", "skip_with_time", "take_last_with_time", "skip_last_with_time", "take_until_with_time",
              "skip_until_with_time", "throttle_with_timeout"):
    _simple(_name)


def _cold(rng: random.Random) -> tuple[Any, Any]:
    """A cold timed source of its own on each side, played from its subscription: an operator that
    subscribes late needs one (the harness's source plays from the stage's subscription on)."""
    line = timeline(rng, [rng.randint(0, 9) for _ in range(rng.randint(0, 6))], step_s=0.1371, end_step_s=0.0311,
                    error_rate=0.2)
    return rxpipe_timeline(line), reactivex_timeline(line)


@register_timed("delay_subscription")
def _delay_subscription(rng: random.Random) -> Pair:
    seconds = _duration(rng)
    ours, theirs = _cold(rng)
    return (lambda s: ours.pipe(ops.delay_subscription(seconds))), (lambda s: theirs.pipe(
        rxo.delay_subscription(seconds)))


def _durations(rng: random.Random) -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
    """item -> a timed stream of 0 or 1 items on each side (its end or its item ends a period)."""
    # per value, times apart (no two values' streams end on one instant: which of two simultaneous
    # events comes first is a scheduling detail, see differential.timeline)
    lines = {x: timeline(rng, ["t"] * rng.randint(0, 1), step_s=0.0371 + x * 0.0101, end_step_s=0.0193 + x * 0.0017,
                         error_rate=0.05) for x in range(10)}
    return (lambda x: rxpipe_timeline(lines[x])), (lambda x: reactivex_timeline(lines[x]))


@register_timed("delay_with_mapper")
def _delay_with_mapper(rng: random.Random) -> Pair:
    ours, theirs = _durations(rng)
    if rng.random() < 0.3:  # a subscription delay: the source subscribed late must be cold (see _cold)
        first = timeline(rng, ["go"] * rng.randint(0, 1), step_s=0.2371, end_step_s=0.0413)
        source_ours, source_theirs = _cold(rng)
        return (lambda s: source_ours.pipe(ops.delay_with_mapper(rxpipe_timeline(first), ours)),
                lambda s: source_theirs.pipe(rxo.delay_with_mapper(reactivex_timeline(first), theirs)))
    return ops.delay_with_mapper(ours), rxo.delay_with_mapper(theirs)


@register_timed("throttle_with_mapper")
def _throttle_with_mapper(rng: random.Random) -> Pair:
    ours, theirs = _durations(rng)
    return ops.throttle_with_mapper(ours), rxo.throttle_with_mapper(theirs)


@register_timed("timeout_with_mapper")
def _timeout_with_mapper(rng: random.Random) -> Pair:
    first_s, next_s = rng.choice(NO_TIE_S), rng.choice(NO_TIE_S)
    other = timeline(rng, list(range(rng.randint(0, 3))), error_rate=0.2)
    pick = rng.random()
    ours_other = rxpipe_timeline(other) if pick < 0.7 else None
    theirs_other = reactivex_timeline(other) if pick < 0.7 else None
    first_ours, first_theirs = (rx.timer(first_s), reactivex.timer(first_s)) if rng.random() < 0.8 else (None, None)
    mapper = rng.random() < 0.8
    return (ops.timeout_with_mapper(first_ours, (lambda x: rx.timer(next_s)) if mapper else None, ours_other),
            rxo.timeout_with_mapper(first_theirs, (lambda x: reactivex.timer(next_s)) if mapper else None,
                                    theirs_other))


@register_timed("timeout")
def _timeout_other(rng: random.Random) -> Pair:
    seconds = rng.choice(NO_TIE_S)
    other = timeline(rng, list(range(rng.randint(0, 3))), error_rate=0.2)
    if rng.random() < 0.5:
        return ops.timeout(seconds, rxpipe_timeline(other)), rxo.timeout(seconds, reactivex_timeline(other))
    return ops.timeout(seconds, other=rxpipe_timeline(other)), rxo.timeout(seconds, other=reactivex_timeline(other))


def _timeouts_alike(notes: list[tuple[float, Any]]) -> list[tuple[float, Any]]:
    """reactivex's timeouts fail with Exception('Timeout'), rxpipe's with TimeoutError naming the stage."""
    return [(t, ("E", "Timeout") if n[0] == "E" and (n[1:] == ("Exception", "Timeout") or n[1] == "TimeoutError")
             else n) for t, n in notes]


# -- against reactivex, 100 seeded inputs each, on virtual time -----------------------------------------------
@pytest.mark.parametrize("name", FAMILY)
def test_timed_equal_to_reactivex_on_100_seeded_inputs(name: str) -> None:
    if name != "timeout_with_mapper":
        assert check_timed(name) >= 100
        return
    from .differential import timed_cases, timed_through_reactivex, timed_through_rxpipe
    from .vocab import seed_of

    make, _ = TIMED[name]
    for i, case in enumerate(timed_cases(seed=seed_of(name), count=100)):
        ours, theirs = make(random.Random(f"{name}:{i}"))
        expected = _timeouts_alike(timed_through_reactivex(lambda s, op=theirs: s.pipe(op), case))
        assert _timeouts_alike(timed_through_rxpipe(lambda s, op=ours: s.pipe(op), case)) == expected, (i, case)


def test_every_name_of_the_family_is_compared() -> None:
    assert set(FAMILY) <= set(TIMED)


# -- the demand rule, exactly --------------------------------------------------------------------------------
@pytest.mark.parametrize("op", [
    lambda: ops.timestamp(), lambda: ops.time_interval(), lambda: ops.take_with_time(10.0),
    lambda: ops.take_until_with_time(10.0), lambda: ops.timeout(10.0, rx.empty()),
    lambda: ops.timeout_with_mapper(rx.never(), lambda x: rx.never()),
], ids=["timestamp", "time_interval", "take_with_time", "take_until_with_time", "timeout(other)",
        "timeout_with_mapper"])
def test_demand_passes_through_exactly(op: Callable[[], Any]) -> None:
    async def main() -> None:
        pub, ts = subscribe(op(), 2)
        assert pub.requests == [2]
        pub.emit(1, 2)
        ts.request(3)
        assert pub.requests == [2, 3] and len(ts.values) == 2
        ts.cancel()
        assert pub.cancelled
    run_virtual(main())


@pytest.mark.parametrize("op", [lambda: ops.skip_with_time(10.0), lambda: ops.skip_until_with_time(10.0)])
def test_skipped_items_ask_one_more_each(op: Callable[[], Any]) -> None:
    async def main() -> None:
        pub, ts = subscribe(op(), 1)
        pub.emit(1)
        pub.emit(2)
        assert pub.requests == [1, 1, 1] and ts.values == []
    run_virtual(main())


def test_take_last_with_time_reads_nothing_before_asked_then_rounds() -> None:
    async def main() -> None:
        pub, ts = subscribe(ops.take_last_with_time(1.0))
        assert pub.requests == []
        ts.request(1)
        assert pub.requests == [256]
        pub.emit(*range(200))
        assert pub.requests == [256, 192] and UNBOUNDED not in pub.requests
    run_virtual(main())


def test_skip_last_with_time_holds_recent_items_and_reads_beyond_them() -> None:
    async def main() -> None:
        pub, ts = subscribe(ops.skip_last_with_time(1.0), 1)
        pub.emit("a")
        assert pub.outstanding == 1 and ts.values == []  # a is held, yet one more is asked
        await asyncio.sleep(1.5)
        pub.emit("b")
        assert ts.values == ["a"]
    run_virtual(main())


def test_delay_subscription_subscribes_late_and_passes_the_demand_then() -> None:
    async def main() -> None:
        pub = TestPublisher[int]()
        ts = TestSubscriber[int](initial_request=3)
        pub.pipe(ops.delay_subscription(0.5)).subscribe(ts)
        await asyncio.sleep(0.4)
        assert not pub.has_subscribers
        await asyncio.sleep(0.2)
        assert pub.requests == [3]
        ts.cancel()
        assert pub.cancelled
        pub2 = TestPublisher[int]()
        ts2 = TestSubscriber[int](initial_request=1)
        pub2.pipe(ops.delay_subscription(0.5)).subscribe(ts2)
        ts2.cancel()
        await asyncio.sleep(1.0)
        assert not pub2.has_subscribers  # cancelled before: never subscribed
    run_virtual(main())


def test_delay_with_mapper_counts_delayed_items_against_demand() -> None:
    async def main() -> None:
        pub = TestPublisher[int]()
        ts = TestSubscriber[int](initial_request=2)
        delays = [TestPublisher[int]() for _ in range(3)]
        pub.pipe(ops.delay_with_mapper(lambda x: delays[x])).subscribe(ts)
        assert pub.requests == [2]
        pub.emit(0, 1)
        assert pub.outstanding == 0 and delays[0].requests == [1] and delays[1].requests == [1]
        delays[1].emit(9)
        assert ts.values == [1] and delays[1].cancelled
        ts.request(1)
        assert pub.requests == [2, 1]
        ts.cancel()
        assert pub.cancelled and delays[0].cancelled
    run_virtual(main())


def test_throttle_with_mapper_is_lossy_requests_unbounded_and_counts_what_it_drops() -> None:
    async def main() -> None:
        quiet = [TestPublisher[int]() for _ in range(3)]
        pub = TestPublisher[int]()
        ts = TestSubscriber[int](initial_request=UNBOUNDED)
        flow = pub.pipe(ops.throttle_with_mapper(lambda x: quiet[x]))
        flow.subscribe(ts)
        assert pub.requests == [UNBOUNDED]
        pub.emit(0, 1)  # 0 superseded by 1: its quiet stream is cancelled
        assert quiet[0].cancelled and not quiet[1].cancelled
        quiet[1].complete()
        assert ts.values == [1]
        pub.emit(2)
        ts.cancel()
        assert pub.cancelled and quiet[2].cancelled
    run_virtual(main())


def test_timeout_with_other_inherits_the_outstanding_demand() -> None:
    async def main() -> None:
        pub, other = TestPublisher[int](), TestPublisher[int]()
        ts = TestSubscriber[int](initial_request=5)
        pub.pipe(ops.timeout(1.0, other)).subscribe(ts)
        pub.emit(1, 2)
        await asyncio.sleep(1.5)
        assert pub.cancelled and other.requests == [3]
        other.emit(7).complete()
        assert ts.values == [1, 2, 7] and ts.completed
    run_virtual(main())


def test_timeout_keeps_its_modes_and_takes_other_by_argument_type() -> None:
    with pytest.raises(ValueError, match="must be one of"):
        ops.timeout(1.0, "never")
    with pytest.raises(TypeError, match="other twice"):
        ops.timeout(1.0, rx.empty(), other=rx.empty())
    with pytest.raises(TypeError, match="needs a Flowable"):
        ops.timeout(1.0, other=42)


def test_an_absolute_datetime_is_refused_only_the_loop_clock_counts() -> None:
    from datetime import datetime

    for op in (ops.take_until_with_time, ops.skip_until_with_time, ops.delay_subscription, ops.take_with_time):
        with pytest.raises(TypeError, match="timedelta"):
            op(datetime.now())


def test_throttle_with_timeout_is_debounce() -> None:
    assert ops.throttle_with_timeout is ops.debounce
    assert rxo.throttle_with_timeout is rxo.debounce
