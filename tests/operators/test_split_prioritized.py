"""split_when (Akka splitWhen: substreams, their demand, the drain cancel strategy) and
merge_prioritized (Akka MergePrioritized: weighted picks among ready inputs, eager completion,
per-source windows)."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

import rxpipe as rx
from rxpipe import UNBOUNDED, ProtocolViolationError
from rxpipe import operators as ops
from rxpipe.metrics import live_stages
from rxpipe.testing import TestPublisher, TestSubscriber

from .test_time import Told


def collect_substreams(pub: TestPublisher[Any], predicate: Any, request: int = UNBOUNDED) -> tuple[
        TestSubscriber[Any], list[TestSubscriber[Any]]]:
    main = TestSubscriber[Any](initial_request=UNBOUNDED)
    subs: list[TestSubscriber[Any]] = []

    def attach(substream: Any) -> None:
        ts = TestSubscriber[Any](initial_request=request)
        subs.append(ts)
        substream.subscribe(ts)

    _NAMES.append(f"split_{len(_NAMES)}")
    pub.pipe(ops.split_when(predicate, name=_NAMES[-1]), ops.tap(attach)).subscribe(main)
    return main, subs


_NAMES: list[str] = []


def split_stage() -> Any:
    """The split_when stage collect_substreams made last (its kit run: ``logic``, ``statistics()``)."""
    (stage,) = [s for s in live_stages() if s.counters.stage == _NAMES[-1]]
    return stage


# -- split_when ----------------------------------------------------------------------------------------
async def test_split_when_starts_a_substream_at_each_chosen_item() -> None:
    turns = await rx.from_iterable("Hello there. How are you? Fine.".split()).pipe(
        ops.split_when(lambda word: word[0].isupper()), ops.concat_map(lambda s: s.pipe(ops.to_list()))).to_list()
    assert turns == [["Hello", "there."], ["How", "are", "you?"], ["Fine."]]
    # the first item opens the first substream whatever the predicate says: no empty substream
    assert await rx.from_iterable([1, 2, 3]).pipe(
        ops.split_when(lambda x: True), ops.concat_map(lambda s: s.pipe(ops.to_list()))).to_list() == [[1], [2], [3]]
    assert await rx.empty().pipe(ops.split_when(lambda x: True)).to_list() == []


async def test_a_slow_substream_consumer_bounds_upstream() -> None:
    pub = TestPublisher[int]()
    main, subs = collect_substreams(pub, lambda x: x % 100 == 0, request=0)
    assert pub.requests == [16]
    for x in range(16):
        pub.emit(x)
    assert len(subs) == 1 and subs[0].values == [] and pub.outstanding == 0  # 16 held: upstream waits
    stage = split_stage().logic
    subs[0].request(4)
    assert subs[0].values == [0, 1, 2, 3] and stage.held == 12 and pub.outstanding == 4  # the window: 16
    for x in range(16, 20):
        pub.emit(x)
    subs[0].request(8)
    assert stage.held == 8 and pub.outstanding == 8  # held + outstanding: 16, always
    subs[0].request(4)
    assert stage.held == 4 and pub.outstanding == 8  # 4 free: less than a round (12), upstream owes 8
    subs[0].cancel()
    assert stage.held == 0 and pub.outstanding == 8 and not pub.cancelled  # drained (Akka): it goes on
    for x in range(20, 28):
        pub.emit(x)  # the cancelled substream's items, dropped as they arrive: upstream keeps going
    assert pub.outstanding == 12 and split_stage().statistics().dropped == {"cancelled": 4 + 8}  # a round of 12


async def test_a_cancelled_substream_drops_its_items_until_the_next_split() -> None:
    told: list[tuple[str, str]] = []
    pub = TestPublisher[Told]()
    main, subs = collect_substreams(pub, lambda t: t.name.isupper(), request=1)
    a, b, c, d, e = (Told(n, told) for n in ("A", "b", "c", "D", "e"))
    pub.emit(a, b)
    assert subs[0].values == [a]
    subs[0].cancel()
    assert told == [("b", "cancelled")]
    pub.emit(c)  # still A's substream: dropped as it arrives
    assert told == [("b", "cancelled"), ("c", "cancelled")]
    pub.emit(d, e)  # the next split opens a new substream
    assert len(subs) == 2 and subs[1].values == [d]
    subs[1].request(1)
    assert subs[1].values == [d, e]
    pub.complete()
    assert subs[1].completed and main.completed
    assert split_stage().statistics().dropped == {"cancelled": 2}


async def test_split_when_errors_reach_the_main_stream_and_the_open_substream() -> None:
    pub = TestPublisher[int]()
    main, subs = collect_substreams(pub, lambda x: 1 // (x - 5) == 99)
    pub.emit(1, 2)
    pub.emit(5)  # the predicate raises
    assert isinstance(main.error, ZeroDivisionError) and isinstance(subs[0].error, ZeroDivisionError)
    assert subs[0].values == [1, 2] and pub.cancelled
    pub = TestPublisher[int]()
    main, subs = collect_substreams(pub, lambda x: x == 3)
    pub.emit(1, 3, 4)
    boom = RuntimeError("upstream")
    pub.error(boom)
    assert main.error is boom and subs[0].completed and subs[1].error is boom and subs[1].values == [3, 4]


async def test_a_substream_is_unicast_and_can_be_subscribed_after_the_main_stream_ended() -> None:
    substreams = await rx.from_iterable([1, 2, 10, 11]).pipe(ops.split_when(lambda x: x == 10)).to_list()
    # to_list took the main stream only: both substreams were held within the window, ended
    first, second = substreams
    assert await second.to_list() == [10, 11] and await first.to_list() == [1, 2]
    again = TestSubscriber[Any](initial_request=UNBOUNDED)
    first.subscribe(again)
    assert isinstance(again.error, ProtocolViolationError)


async def test_cancelling_the_main_stream_ends_the_open_substream_after_its_items() -> None:
    pub = TestPublisher[int]()
    main, subs = collect_substreams(pub, lambda x: False, request=0)
    pub.emit(1, 2)
    main.cancel()
    assert pub.cancelled and not subs[0].done
    subs[0].request(5)
    assert subs[0].values == [1, 2] and subs[0].completed


# -- merge_prioritized ------------------------------------------------------------------------------------
async def test_picks_follow_the_priorities_among_ready_inputs() -> None:
    def run(seed: int) -> list[str]:
        ts = TestSubscriber[str]()  # a consumer slower than both sources: picks among ready inputs
        rx.repeat_value("h").pipe(ops.merge_prioritized(rx.repeat_value("l"), priorities=(9, 1),
                                                        rng=random.Random(seed))).subscribe(ts)
        for _ in range(1000):
            ts.request(1)
        ts.cancel()
        return ts.values

    out = run(3)
    counts = Counter(out)
    assert len(out) == 1000 and 870 <= counts["h"] <= 930  # 900 expected: 9 in 10 picks
    assert out == run(3) and out != run(4)  # the rng decides: same seed, same run


async def test_a_fast_consumer_takes_items_as_they_come() -> None:
    # Akka: an item arriving while downstream waits goes at once; there is nothing to choose from
    out = await rx.from_iterable(["h"] * 30).pipe(
        ops.merge_prioritized(rx.from_iterable(["l"] * 30), priorities=(1000, 1))).to_list()
    assert Counter(out) == {"h": 30, "l": 30}


async def test_an_input_with_nothing_ready_never_delays_another() -> None:
    quiet = TestPublisher[str]()
    busy = TestPublisher[str]()
    ts = TestSubscriber[str](initial_request=UNBOUNDED)
    quiet.pipe(ops.merge_prioritized(busy, priorities=(1000, 1))).subscribe(ts)
    busy.emit("x", "y")
    assert ts.values == ["x", "y"]
    quiet.emit("a")
    busy.complete()
    quiet.complete()
    assert ts.values == ["x", "y", "a"] and ts.completed


async def test_each_source_keeps_its_own_window() -> None:
    a, b, c = TestPublisher[int](), TestPublisher[int](), TestPublisher[int]()
    ts = TestSubscriber[int]()
    a.pipe(ops.merge_prioritized(b, c, priorities=(1, 2, 3), prefetch=4)).subscribe(ts)
    assert a.requests == b.requests == c.requests == [4]
    a.emit(1, 2, 3, 4)
    b.emit(5, 6, 7, 8)
    assert a.outstanding == b.outstanding == 0 and ts.values == []  # no demand: 8 held, nothing more
    ts.request(3)
    assert len(ts.values) == 3
    ts.request(UNBOUNDED)
    a.complete()
    b.complete()
    assert not ts.completed  # c is still running
    c.complete()
    assert ts.completed and sorted(ts.values) == [1, 2, 3, 4, 5, 6, 7, 8]


async def test_eager_complete_ends_with_the_first_source_and_keeps_what_was_delivered() -> None:
    a, b = TestPublisher[int](), TestPublisher[int]()
    ts = TestSubscriber[int]()
    a.pipe(ops.merge_prioritized(b, priorities=(1, 1), eager_complete=True)).subscribe(ts)
    a.emit(1)
    b.emit(2, 3)
    b.complete()
    assert a.cancelled and not ts.completed
    ts.request(UNBOUNDED)
    assert sorted(ts.values) == [1, 2, 3] and ts.completed


async def test_merge_prioritized_errors() -> None:
    told: list[tuple[str, str]] = []
    a, b = TestPublisher[Any](), TestPublisher[Any]()
    ts = TestSubscriber[Any]()
    a.pipe(ops.merge_prioritized(b, priorities=(1, 1))).subscribe(ts)
    a.emit(Told("x", told))
    boom = RuntimeError("b failed")
    b.error(boom)
    assert ts.error is boom and a.cancelled and told == [("x", "error")]
    with pytest.raises(ValueError, match="needs 2 priorities"):
        ops.merge_prioritized(rx.empty(), priorities=(1,))
    with pytest.raises(ValueError, match="priorities"):
        ops.merge_prioritized(rx.empty(), priorities=(1, 0))
    with pytest.raises(TypeError):
        ops.merge_prioritized([1, 2], priorities=(1, 1))  # type: ignore[arg-type]
