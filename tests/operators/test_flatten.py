"""flat_map, concat_map, switch_map: against reactivex 6.1, and their demand bounds.

Differential (tests/operators/differential.py), under unbounded demand:

- on synchronous inputs (``cases``) with synchronous inner streams, every input that ends in
  completion gives exactly reactivex's notifications. An input ending in an error is compared
  exactly only where the order of two synchronous events is not a scheduling artifact:
  reactivex runs ``concat(items, throw(e))``'s error after every action already queued on its
  trampoline (so its inner streams run first), where rxpipe reads the source on demand and meets
  the error when it asks for the item after the last (so inner streams subscribed with it are
  cancelled). There rxpipe's notifications end with the source's error (never lost), or with
  an inner stream's error met before it, and that is asserted instead;
- on virtual time (``timed_cases``, inner streams on timers, against reactivex's
  ``TestScheduler``) every input, errors included, gives exactly reactivex's timed notifications.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import zlib
from collections import Counter
from typing import Any, Callable

import pytest
import reactivex
import reactivex.operators as rxo

import rxpipe as rx
from rxpipe import UNBOUNDED, MissingBackpressureError, Publisher, Subscriber, Subscription
from rxpipe import operators as ops
from rxpipe.testing import TestPublisher, TestSubscriber, run_virtual

from .differential import (
    SourceFailed,
    cases,
    now,
    now_error,
    reactivex_timeline,
    rxpipe_timeline,
    through_reactivex,
    through_rxpipe,
    timed_cases,
    timed_through_reactivex,
    timed_through_rxpipe,
    timeline,
)


class Boom(Exception):
    """An inner stream's or a function's own error."""


def _inner_rx(x: int) -> rx.Flowable[int]:
    return rx.error(Boom(f"inner {x}")) if x == 7 else rx.just(x, x + 100)




def _inner_re(x: int) -> reactivex.Observable[int]:
    return now_error(Boom(f"inner {x}")) if x == 7 else now(x, x + 100)


def _raising(x: int) -> range:
    if x == 7:
        raise Boom("fn 7")
    return range(x % 3)


#: name -> (rxpipe operator, reactivex operator, "exact", "bounded" or "multiset"); "multiset": inner
#: streams longer than their prefetch interleave by request rounds in rxpipe, where reactivex emits
#: each synchronous inner stream whole: the same items (as a multiset) and the same terminal
#: signal. "bounded" and "multiset" before a source error: an inner bounded by a small prefetch
#: has produced only what was requested of it when the error cancels it (reactivex has no
#: demand), so rxpipe's items are those of reactivex up to that point (a prefix, or a
#: sub-multiset), then the same error. The reactivex inners complete synchronously (``differential.now``),
#: as rxpipe's do (DESIGN §3, the kit's third round).
PAIRS: dict[str, tuple[Callable[[], Any], Callable[[], Any], str]] = {
    "flat_map_iterable": (lambda: ops.flat_map(lambda x: range(x % 4)),
                          lambda: rxo.flat_map(lambda x: range(x % 4)), "exact"),
    "flat_map_flowable": (lambda: ops.flat_map(lambda x: rx.just(x, x * 10)),
                          lambda: rxo.flat_map(lambda x: reactivex.of(x, x * 10)), "exact"),
    "flat_map_concurrency_1_prefetch_1": (lambda: ops.flat_map(lambda x: rx.just(x, x * 10), 1, 1),
                                          lambda: rxo.flat_map(lambda x: now(x, x * 10)), "bounded"),
    "flat_map_concurrency_3_prefetch_2": (lambda: ops.flat_map(lambda x: range(x), 3, 2),
                                          lambda: rxo.flat_map(lambda x: now(*range(x))), "multiset"),
    "flat_map_string": (lambda: ops.flat_map(lambda x: "ab" * (x % 3)),
                        lambda: rxo.flat_map(lambda x: "ab" * (x % 3)), "exact"),
    "flat_map_inner_error": (lambda: ops.flat_map(_inner_rx), lambda: rxo.flat_map(_inner_re), "exact"),
    "flat_map_fn_raising": (lambda: ops.flat_map(_raising), lambda: rxo.flat_map(lambda x: now(*_raising(x))),
                            "exact"),
    "flat_map_constant": (lambda: ops.flat_map(rx.just(1, 2)), lambda: rxo.flat_map(reactivex.of(1, 2)), "exact"),
    "concat_map": (lambda: ops.concat_map(lambda x: rx.just(x, x * 10)),
                   lambda: rxo.concat_map(lambda x: now(x, x * 10)), "exact"),
    "concat_map_prefetch_0": (lambda: ops.concat_map(lambda x: range(x % 4), prefetch=0),
                              lambda: rxo.concat_map(lambda x: now(*range(x % 4))), "exact"),
    "concat_map_inner_error": (lambda: ops.concat_map(_inner_rx), lambda: rxo.concat_map(_inner_re), "exact"),
    "switch_map": (lambda: ops.switch_map(lambda x: rx.just(x, x * 10)),
                   lambda: rxo.switch_map(lambda x: now(x, x * 10)), "exact"),
    "switch_map_identity": (lambda: rx.pipe(ops.map(lambda x: rx.just(x, -x)), ops.switch_map()),
                            lambda: reactivex.compose(rxo.map(lambda x: now(x, -x)), rxo.switch_map()),
                            "exact"),
    "switch_map_inner_error": (lambda: ops.switch_map(_inner_rx), lambda: rxo.switch_map(_inner_re), "exact"),
}


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_equal_to_reactivex_on_every_seeded_input(name: str) -> None:
    ours, theirs, mode = PAIRS[name]
    for case in cases(seed=zlib.crc32(name.encode()), count=12):
        got = through_rxpipe(lambda s: s.pipe(ours()), case)
        expected = through_reactivex(lambda s: s.pipe(theirs()), case)
        if mode == "exact" or case.error is None and mode == "bounded":  # values, order, terminal signal
            assert got == expected, case
        elif mode == "bounded":
            assert got[:-1] == expected[:len(got) - 1] and got[-1] == expected[-1], case
        elif case.error is None:
            assert sorted(got[:-1]) == sorted(expected[:-1]) and got[-1] == expected[-1], case
        else:
            assert not Counter(got[:-1]) - Counter(expected[:-1]) and got[-1] == expected[-1], case


def _inner_line(x: int, index: int) -> Any:
    # items "x.k"; a 7 ends in an error half the time; streams subscribed at the same instant
    # are shifted apart by their index (see differential.timeline)
    return timeline(random.Random(x), [f"{x}.{k}" for k in range(x % 3)], error_rate=0.5 if x == 7 else 0.0,
                    shift_s=0.000113 * index)


def _ours(make: Callable[..., Any], **kw: Any) -> Callable[[rx.Flowable[Any]], rx.Flowable[Any]]:
    def build(source: rx.Flowable[Any]) -> rx.Flowable[Any]:
        count = itertools.count()  # a fresh numbering per run
        return source.pipe(make(lambda x: rxpipe_timeline(_inner_line(x, next(count))), **kw))
    return build


def _theirs(make: Callable[..., Any]) -> Callable[[reactivex.Observable[Any]], reactivex.Observable[Any]]:
    def build(source: reactivex.Observable[Any]) -> reactivex.Observable[Any]:
        count = itertools.count()
        return source.pipe(make(lambda x: reactivex_timeline(_inner_line(x, next(count)))))
    return build


#: name -> (rxpipe build, reactivex build) over a timed source; the bounds are set so that the
#: timed source, which emits at its times whatever was requested, never outruns them
TIMED: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {
    "flat_map": (lambda: _ours(ops.flat_map, max_concurrency=64), lambda: _theirs(rxo.flat_map)),
    "concat_map": (lambda: _ours(ops.concat_map, prefetch=64), lambda: _theirs(rxo.concat_map)),
    "switch_map": (lambda: _ours(ops.switch_map), lambda: _theirs(rxo.switch_map)),
}


@pytest.mark.parametrize("name", sorted(TIMED))
def test_equal_to_reactivex_on_virtual_time_with_timed_inner_streams(name: str) -> None:
    ours, theirs = TIMED[name]
    for case in timed_cases(seed=zlib.crc32(name.encode()), count=12):
        assert timed_through_rxpipe(ours(), case) == timed_through_reactivex(theirs(), case), case


# -- flat_map: demand ----------------------------------------------------------------------------------
class Inners:
    """``fn`` for flat_map & co: a new TestPublisher per item, kept in order of creation."""

    def __init__(self) -> None:
        self.made: list[TestPublisher[Any]] = []
        self.items: list[Any] = []

    def __call__(self, item: Any) -> TestPublisher[Any]:
        pub = TestPublisher[Any](name=f"inner_{item}")
        self.made.append(pub)
        self.items.append(item)
        return pub

    def live(self) -> list[TestPublisher[Any]]:
        return [p for p in self.made if p.has_subscribers]


def test_flat_map_requests_max_concurrency_then_one_per_finished_inner() -> None:
    outer, inners = TestPublisher[str](), Inners()
    ts = TestSubscriber[Any](initial_request=UNBOUNDED)
    outer.pipe(ops.flat_map(inners, max_concurrency=3, prefetch=4)).subscribe(ts)
    assert outer.requests == [3]
    outer.emit("a", "b", "c")
    assert [p.requests for p in inners.made] == [[4], [4], [4]]  # each inner its prefetch
    inners.made[1].emit("b1").complete()
    assert outer.requests == [3, 1]
    outer.emit("d")
    inners.made[0].complete()
    inners.made[2].complete()
    assert outer.requests == [3, 1, 1, 1]
    assert len(inners.live()) == 1 and ts.values == ["b1"]


def test_flat_map_inner_replenishes_75_percent_of_its_prefetch_as_items_go_out() -> None:
    outer, inners = TestPublisher[str](), Inners()
    ts = TestSubscriber[Any](initial_request=UNBOUNDED)
    outer.pipe(ops.flat_map(inners, max_concurrency=2, prefetch=8)).subscribe(ts)
    outer.emit("a")
    inner = inners.made[0]
    for k in range(5):
        inner.emit(k)
    assert inner.requests == [8]
    inner.emit(5)
    assert inner.requests == [8, 6]  # 6 = 8 - 8 // 4 items went downstream
    for k in range(6, 12):
        inner.emit(k)
    assert inner.requests == [8, 6, 6] and ts.values == list(range(12))


def test_flat_map_inner_items_waiting_for_demand_count_against_its_prefetch() -> None:
    outer, inners = TestPublisher[str](), Inners()
    ts = TestSubscriber[Any]()
    outer.pipe(ops.flat_map(inners, max_concurrency=2, prefetch=8)).subscribe(ts)
    outer.emit("a")
    inner = inners.made[0]
    inner.emit(*range(8))
    assert inner.requests == [8]  # 8 items wait: nothing more is asked
    ts.request(5)
    # 3 wait: 5 of the window free, less than a round (6 = 8 - 8 // 4): nothing asked yet
    assert ts.values == [0, 1, 2, 3, 4] and inner.requests == [8]
    ts.request(UNBOUNDED)  # nothing waits, nothing outstanding: the whole window
    assert ts.values == list(range(8)) and inner.requests == [8, 8]
    for k in range(8, 40):  # a fast inner under unbounded demand: rounds of 6, never request(1)
        inner.emit(k)
    assert ts.values == list(range(40)) and inner.requests == [8, 8, 6, 6, 6, 6, 6]


def test_an_inner_that_completed_with_items_waiting_keeps_its_slot_until_they_went_out() -> None:
    outer, inners = TestPublisher[str](), Inners()
    ts = TestSubscriber[Any]()
    outer.pipe(ops.flat_map(inners, max_concurrency=1, prefetch=4)).subscribe(ts)
    outer.emit("a")
    inners.made[0].emit(1, 2).complete()
    assert outer.requests == [1]  # two items still held: no new inner (memory stays bounded)
    ts.request(1)
    assert outer.requests == [1]
    ts.request(1)
    assert outer.requests == [1, 1] and ts.values == [1, 2]


def test_items_wait_in_arrival_order_and_never_exceed_demand() -> None:
    outer, inners = TestPublisher[str](), Inners()
    ts = TestSubscriber[Any](initial_request=2)
    outer.pipe(ops.flat_map(inners)).subscribe(ts)
    outer.emit("a", "b")
    a, b = inners.made
    a.emit("a1")
    b.emit("b1", "b2")
    a.emit("a2")
    assert ts.values == ["a1", "b1"]
    ts.request(1)
    assert ts.values == ["a1", "b1", "b2"]
    ts.request(5)
    assert ts.values == ["a1", "b1", "b2", "a2"]


@pytest.mark.parametrize("seed", range(8))
def test_random_demand_never_exceeded_and_bounds_always_kept(seed: int) -> None:
    rng = random.Random(seed)
    max_concurrency, prefetch = rng.choice((1, 2, 4)), rng.choice((1, 2, 5))
    outer, inners = TestPublisher[int](), Inners()
    ts = TestSubscriber[Any]()
    outer.pipe(ops.flat_map(inners, max_concurrency=max_concurrency, prefetch=prefetch)).subscribe(ts)
    requested, emitted = 0, [0] * 40
    for _ in range(600):
        action = rng.random()
        live = inners.live()
        if action < 0.2:
            n = rng.choice((1, 1, 2, 3, 7))
            requested += n
            ts.request(n)
        elif action < 0.35 and outer.outstanding and len(inners.made) < 40:
            outer.emit(len(inners.made))
        elif action < 0.85 and live:
            inner = rng.choice(live)
            if inner.outstanding:
                index = inners.made.index(inner)
                inner.emit((index, emitted[index]))
                emitted[index] += 1
        elif live:
            rng.choice(live).complete()
        assert len(ts.values) <= requested and ts.error is None
        delivered = [0] * 40
        for index, _ in ts.values:
            delivered[index] += 1
        unfinished = sum(1 for i, p in enumerate(inners.made) if p.has_subscribers or delivered[i] < emitted[i])
        assert outer.outstanding + unfinished <= max_concurrency
        for i, inner in enumerate(inners.made):
            assert inner.total_requested - delivered[i] <= prefetch  # outstanding + waiting
            assert [k for j, k in ts.values if j == i] == list(range(delivered[i]))  # its order kept
    assert len(inners.made) > max_concurrency and requested > len(ts.values) > 50


def test_a_synchronous_source_with_empty_inner_streams_never_stalls_under_request_1() -> None:
    ts = TestSubscriber[int]()
    rx.range(0, 3000).pipe(ops.flat_map(lambda x: [x] if x % 7 == 0 else [])).subscribe(ts)
    for _ in range(600):
        ts.request(1)
    assert ts.values == list(range(0, 3000, 7))[:429] and ts.completed
    assert len(ts.values) == 429


def test_400_000_items_through_synchronous_inner_streams_without_recursion() -> None:
    out = run_virtual(rx.range(0, 200_000).pipe(ops.flat_map(lambda x: (x, -x), 4, 2), ops.take(400_000)).to_list())
    assert out[:4] == [0, 0, 1, -1] and len(out) == 400_000


def test_cancel_reaches_the_source_and_every_inner_stream() -> None:
    outer, inners = TestPublisher[str](), Inners()
    ts = TestSubscriber[Any](initial_request=1)
    outer.pipe(ops.flat_map(inners)).subscribe(ts)
    outer.emit("a", "b", "c")
    inners.made[0].emit("x").complete()
    ts.cancel()
    assert outer.cancelled and all(p.cancelled for p in inners.made[1:])


def test_an_inner_error_cancels_the_source_and_the_other_inners_at_once() -> None:
    outer, inners = TestPublisher[str](), Inners()
    ts = TestSubscriber[Any]()
    outer.pipe(ops.flat_map(inners)).subscribe(ts)
    outer.emit("a", "b", "c")
    inners.made[0].emit("queued")  # no demand: waits
    failure = Boom("b failed")
    inners.made[1].error(failure)
    assert ts.error is failure and ts.values == []  # at once, ahead of the queued item
    assert outer.cancelled and inners.made[0].cancelled and inners.made[2].cancelled


def test_a_source_error_cancels_every_inner_stream() -> None:
    outer, inners = TestPublisher[str](), Inners()
    ts = TestSubscriber[Any](initial_request=UNBOUNDED)
    outer.pipe(ops.flat_map(inners)).subscribe(ts)
    outer.emit("a", "b")
    failure = Boom("source failed")
    outer.error(failure)
    assert ts.error is failure and all(p.cancelled for p in inners.made)


def test_fn_raising_or_returning_no_stream_fails_and_cancels_everything() -> None:
    outer, inners = TestPublisher[Any](), Inners()
    ts = TestSubscriber[Any](initial_request=UNBOUNDED)

    def fn(x: Any) -> Any:
        if x == "boom":
            raise Boom("fn failed")
        return inners(x)

    outer.pipe(ops.flat_map(fn)).subscribe(ts)
    outer.emit("a", "boom")
    assert isinstance(ts.error, Boom) and outer.cancelled and inners.made[0].cancelled
    for bad, message in ((None, "returned None"), (42, "returned 42")):
        ts = TestSubscriber[Any](initial_request=UNBOUNDED)
        rx.just(1).pipe(ops.flat_map(lambda x, bad=bad: bad)).subscribe(ts)
        assert isinstance(ts.error, TypeError) and message in str(ts.error)


def test_an_inner_emitting_beyond_its_prefetch_is_missing_backpressure() -> None:
    outer, inners = TestPublisher[str](), Inners()
    ts = TestSubscriber[Any]()
    outer.pipe(ops.flat_map(inners, prefetch=2)).subscribe(ts)
    outer.emit("a")
    inners.made[0].emit(1, 2, 3)  # no demand downstream: 1 and 2 wait, 3 was never asked for
    assert isinstance(ts.error, MissingBackpressureError) and outer.cancelled and inners.made[0].cancelled


def test_completes_after_the_source_and_every_inner_stream_and_their_items() -> None:
    outer, inners = TestPublisher[str](), Inners()
    ts = TestSubscriber[Any]()
    outer.pipe(ops.flat_map(inners)).subscribe(ts)
    outer.emit("a")
    outer.complete()
    inners.made[0].emit(1).complete()
    assert not ts.completed
    ts.request(1)
    assert ts.values == [1] and ts.completed
    empty = TestSubscriber[Any]()
    rx.empty().pipe(ops.flat_map(inners)).subscribe(empty)
    assert empty.completed  # without any demand


# -- flat_map: what fn may return ------------------------------------------------------------------------
class PlainPublisher(Publisher[int]):
    """A Reactive Streams Publisher that is not a Flowable: emits 1, 2 on demand."""

    def subscribe(self, subscriber: Subscriber[int]) -> None:
        items = [1, 2]

        class Sub(Subscription):
            def request(self, n: int) -> None:
                while n and items:
                    n -= 1
                    subscriber.on_next(items.pop(0))
                if not items:
                    items.append(0)  # once
                    subscriber.on_complete()

            def cancel(self) -> None:
                items.clear()

        subscriber.on_subscribe(Sub())


def test_inner_streams_of_every_kind() -> None:
    async def one(x: int) -> int:
        await asyncio.sleep(0.5 - x / 10)
        return x * 10

    async def some(x: int) -> Any:
        for k in range(x):
            await asyncio.sleep(0.01)
            yield (x, k)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        assert await rx.just(1, 2, 3).pipe(ops.flat_map(one)).to_list() == [30, 20, 10]  # as they finish
        assert await rx.just(1, 2).pipe(ops.flat_map(some)).to_list() == [(1, 0), (2, 0), (2, 1)]
        assert await rx.just(1, 2).pipe(ops.flat_map(lambda x: PlainPublisher())).to_list() == [1, 2, 1, 2]

        def future(x: int) -> asyncio.Future[int]:
            f = loop.create_future()
            loop.call_later(x, f.set_result, x)
            return f

        assert await rx.just(2, 1).pipe(ops.flat_map(future)).to_list() == [1, 2]
        assert await rx.just(1, 2).pipe(ops.flat_map([7, 8])).to_list() == [7, 8, 7, 8]

    run_virtual(main())


def test_an_awaitable_returning_none_or_raising_fails_the_stream() -> None:
    async def none(x: int) -> None:
        return None

    async def boom(x: int) -> int:
        raise Boom("awaited")

    async def main() -> None:
        with pytest.raises(TypeError, match="None"):
            await rx.just(1).pipe(ops.flat_map(none)).to_list()
        with pytest.raises(Boom):
            await rx.just(1).pipe(ops.flat_map(boom)).to_list()

    run_virtual(main())


def test_cancelled_awaitables_are_cancelled_or_never_started() -> None:
    started, cancelled = [], []

    async def slow(x: int) -> int:
        started.append(x)
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append(x)
            raise
        return x

    async def main() -> None:
        ts = TestSubscriber[int](initial_request=1)
        rx.just(1, 2, 3).pipe(ops.flat_map(slow, max_concurrency=2)).subscribe(ts)
        await asyncio.sleep(1)
        ts.cancel()
        await asyncio.sleep(0)
        assert started == [1, 2] and cancelled == [1, 2]
        outer = TestPublisher[int]()
        ts = TestSubscriber[int]()
        outer.pipe(ops.flat_map(slow)).subscribe(ts)
        outer.emit(4)  # the coroutine is made and its task created, not started yet
        ts.cancel()
        await asyncio.sleep(0)
        assert started == [1, 2] and cancelled == [1, 2]  # 4's task was cancelled before its first step

    run_virtual(main())


def test_a_coroutine_whose_stream_is_cancelled_before_any_request_is_closed_not_leaked() -> None:
    made: list[Any] = []

    async def never_awaited(x: int) -> int:
        return x

    def fn(x: int) -> Any:
        made.append(never_awaited(x))
        return made[-1]

    async def main() -> None:
        outer = TestPublisher[int]()
        ts = TestSubscriber[int]()
        outer.pipe(ops.concat_map(fn, prefetch=1)).subscribe(ts)
        outer.emit(1)  # concat_map's inner is demand-driven: nothing requested of it yet
        outer.error(Boom("source failed"))
        assert isinstance(ts.error, Boom) and made[0].cr_frame is None  # closed: no "never awaited"

    run_virtual(main())


def test_flat_map_rejects_bad_arguments() -> None:
    with pytest.raises(TypeError, match="flat_map"):
        ops.flat_map(42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_concurrency"):
        ops.flat_map(lambda x: [x], 0)
    with pytest.raises(ValueError, match="prefetch"):
        ops.flat_map(lambda x: [x], prefetch=0)
    with pytest.raises(ValueError, match="max_concurrency"):
        ops.flat_map(lambda x: [x], True)  # type: ignore[arg-type]

    async def coroutine() -> int:
        return 1

    awaitable = coroutine()
    with pytest.raises(TypeError, match="flat_map"):
        ops.flat_map(awaitable)  # an awaitable is awaited once: not a stream for every item
    awaitable.close()


# -- concat_map ------------------------------------------------------------------------------------------
def test_concat_map_runs_one_inner_at_a_time_and_carries_demand_over() -> None:
    outer, inners = TestPublisher[str](), Inners()
    ts = TestSubscriber[Any](initial_request=5)
    outer.pipe(ops.concat_map(inners)).subscribe(ts)
    assert outer.requests == [2]  # the item to run and prefetch=1 ahead
    outer.emit("a", "b")
    assert inners.items == ["a"] and inners.made[0].requests == [5]  # fn("b") waits its turn
    inners.made[0].emit(1, 2).complete()
    assert inners.items == ["a", "b"] and inners.made[1].requests == [3]  # 5 wanted, 2 delivered
    assert outer.requests == [2, 1]
    ts.request(4)
    assert inners.made[1].requests == [3, 4]
    inners.made[1].emit(3, 4).complete()
    outer.complete()
    assert ts.values == [1, 2, 3, 4] and ts.completed


def test_concat_map_prefetch_0_asks_for_the_next_item_only_when_the_stream_before_ended() -> None:
    outer, inners = TestPublisher[str](), Inners()
    ts = TestSubscriber[Any](initial_request=UNBOUNDED)
    outer.pipe(ops.concat_map(inners, prefetch=0)).subscribe(ts)
    assert outer.requests == [1]
    outer.emit("a")
    inners.made[0].complete()
    assert outer.requests == [1, 1]
    outer.emit("b")
    assert outer.requests == [1, 1]


def test_concat_map_holds_at_most_prefetch_items_ahead() -> None:
    outer, inners = TestPublisher[str](), Inners()
    ts = TestSubscriber[Any](initial_request=UNBOUNDED)
    outer.pipe(ops.concat_map(inners, prefetch=3)).subscribe(ts)
    assert outer.requests == [4]
    outer.emit("a", "b", "c", "d")
    assert len(inners.made) == 1 and outer.outstanding == 0
    outer.emit("e")
    assert isinstance(ts.error, MissingBackpressureError) and inners.made[0].cancelled


@pytest.mark.parametrize("where", ["source", "inner", "fn"])
def test_concat_map_errors_cancel_the_other_side(where: str) -> None:
    outer, inners = TestPublisher[str](), Inners()
    ts = TestSubscriber[Any](initial_request=UNBOUNDED)
    failure = Boom(where)

    def fn(x: str) -> Any:
        if x == "boom":
            raise failure
        return inners(x)

    outer.pipe(ops.concat_map(fn)).subscribe(ts)
    outer.emit("a")
    if where == "source":
        outer.error(failure)
        assert inners.made[0].cancelled
    elif where == "inner":
        inners.made[0].error(failure)
        assert outer.cancelled
    else:
        outer.emit("boom")
        inners.made[0].complete()  # fn("boom") is called on its turn
        assert outer.cancelled
    assert ts.error is failure


def test_concat_map_cancel_reaches_the_source_and_the_running_stream() -> None:
    outer, inners = TestPublisher[str](), Inners()
    ts = TestSubscriber[Any](initial_request=1)
    outer.pipe(ops.concat_map(inners)).subscribe(ts)
    outer.emit("a")
    ts.cancel()
    assert outer.cancelled and inners.made[0].cancelled


def test_concat_map_rejects_bad_arguments() -> None:
    with pytest.raises(TypeError, match="concat_map"):
        ops.concat_map([1, 2])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="prefetch"):
        ops.concat_map(lambda x: [x], prefetch=-1)


# -- switch_map ------------------------------------------------------------------------------------------
def test_switch_map_cancels_the_running_stream_and_the_new_one_inherits_the_demand() -> None:
    outer, inners = TestPublisher[str](), Inners()
    ts = TestSubscriber[Any](initial_request=5)
    outer.pipe(ops.switch_map(inners)).subscribe(ts)
    assert outer.requests == [UNBOUNDED]
    outer.emit("a")
    inners.made[0].emit(1, 2)
    outer.emit("b")
    assert inners.made[0].cancelled and inners.made[1].requests == [3]
    inners.made[1].emit(3)
    outer.complete()
    assert not ts.completed  # the running stream is not done
    inners.made[1].complete()
    assert ts.values == [1, 2, 3] and ts.completed


def test_switch_map_cancels_a_generation_when_the_prompt_changes() -> None:
    """The LLM case: a prompt being edited; each version starts a token stream, and an edit
    cancels the generation of the version before it (its generator's ``finally`` runs then)."""
    log: list[str] = []

    async def generate(prompt: str) -> Any:
        try:
            for k in range(4):
                await asyncio.sleep(0.1)  # one token every 100 ms
                yield f"{prompt}:{k}"
            log.append(f"{prompt} finished")
        finally:
            log.append(f"{prompt} closed at {asyncio.get_running_loop().time():.2f}")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        prompts = TestPublisher[str]()
        ts = TestSubscriber[str](initial_request=UNBOUNDED)
        prompts.pipe(ops.switch_map(generate)).subscribe(ts)
        loop.call_at(0.0, prompts.emit, "hel")
        loop.call_at(0.25, prompts.emit, "hello")
        loop.call_at(0.3, prompts.complete)
        await ts.await_done(5)
        assert ts.values == ["hel:0", "hel:1", "hello:0", "hello:1", "hello:2", "hello:3"] and ts.completed
        assert log == ["hel closed at 0.25", "hello finished", "hello closed at 0.65"]

    run_virtual(main())


def test_a_replaced_stream_is_never_heard_again() -> None:
    outer, inners = TestPublisher[str](), Inners()
    ts = TestSubscriber[Any](initial_request=UNBOUNDED)
    outer.pipe(ops.switch_map(inners)).subscribe(ts)
    outer.emit("a", "b")
    inners.made[0].emit("late").error(Boom("late"))  # cancelled: a stream signalling anyway
    assert ts.values == [] and ts.error is None and not outer.cancelled


@pytest.mark.parametrize("where", ["source", "inner"])
def test_switch_map_errors_cancel_the_other_side(where: str) -> None:
    outer, inners = TestPublisher[str](), Inners()
    ts = TestSubscriber[Any](initial_request=UNBOUNDED)
    outer.pipe(ops.switch_map(inners)).subscribe(ts)
    outer.emit("a")
    failure = Boom(where)
    if where == "source":
        outer.error(failure)
        assert inners.made[0].cancelled
    else:
        inners.made[0].error(failure)
        assert outer.cancelled
    assert ts.error is failure


def test_switch_map_cancel_reaches_both() -> None:
    outer, inners = TestPublisher[str](), Inners()
    ts = TestSubscriber[Any](initial_request=1)
    outer.pipe(ops.switch_map(inners)).subscribe(ts)
    outer.emit("a")
    ts.cancel()
    assert outer.cancelled and inners.made[0].cancelled


def test_switch_map_rejects_bad_arguments() -> None:
    with pytest.raises(TypeError, match="switch_map"):
        ops.switch_map(3)  # type: ignore[arg-type]
    ts = TestSubscriber[Any](initial_request=UNBOUNDED)
    rx.just(1).pipe(ops.switch_map()).subscribe(ts)  # identity: 1 is not a stream
    assert isinstance(ts.error, TypeError)


def test_an_inner_error_after_a_source_error_is_not_signalled_twice() -> None:
    outer = TestPublisher[str]()
    ts = TestSubscriber[Any](initial_request=UNBOUNDED)
    inner = TestPublisher[Any]()
    outer.pipe(ops.flat_map(lambda x: inner)).subscribe(ts)
    outer.emit("a")
    first = SourceFailed("first")
    outer.error(first)
    inner.error(Boom("second"))
    assert ts.error is first


@pytest.mark.parametrize("op", ["flat_map", "concat_map", "switch_map"])
async def test_an_async_generator_inner_is_read_no_further_ahead_than_its_window(op: str) -> None:
    pulled: dict[int, int] = {}

    async def tokens(x: int) -> Any:
        for i in range(10_000):
            pulled[x] = pulled.get(x, 0) + 1
            yield i
            await asyncio.sleep(0)

    operator = {"flat_map": lambda: ops.flat_map(tokens, max_concurrency=4, prefetch=4),
                "concat_map": lambda: ops.concat_map(tokens), "switch_map": lambda: ops.switch_map(tokens)}[op]
    ts = TestSubscriber[Any]()  # no downstream demand at all
    rx.range(0, 4).pipe(operator()).subscribe(ts)
    for _ in range(50):
        await asyncio.sleep(0)
    # flat_map: each of its 4 inners its window of 4 and one item of the generator's read-ahead;
    # concat_map, switch_map: demand-driven inners, that one item (was 256 each: from_async_iterable's
    # default prefetch)
    expected = {x: 5 for x in range(4)} if op == "flat_map" else {(0 if op == "concat_map" else 3): 1}
    assert pulled == expected
    ts.cancel()
