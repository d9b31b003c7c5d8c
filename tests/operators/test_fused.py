"""The fused synchronous operators: map, filter, scan, take, skip, tap (DESIGN §2–3).

Each is checked in both execution modes: fused into an iterable source's loop, and as a
subscriber over a hand-driven TestPublisher (where demand is observable).
"""

from __future__ import annotations

import asyncio
import gc
import linecache
import operator
import traceback
from typing import Any

import pytest

import rxpipe as rx
from rxpipe import UNBOUNDED
from rxpipe import operators as ops
from rxpipe.testing import TestPublisher, TestSubscriber


def drain(source: rx.Flowable[Any], n: int = UNBOUNDED) -> TestSubscriber[Any]:
    ts = TestSubscriber[Any](initial_request=n)
    source.subscribe(ts)
    return ts


# map --------------------------------------------------------------------------------------------
def test_map_passes_demand_through_exactly() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[int]()
    pub.pipe(ops.map(lambda x: x * 10)).subscribe(ts)
    ts.request(5)
    assert pub.requests == [5]
    pub.emit(1, 2)
    ts.request(3)
    assert pub.requests == [5, 3]
    assert ts.values == [10, 20]


def test_map_chain_passes_demand_through_exactly() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[int]()
    pub.pipe(ops.map(str), ops.map(len), ops.tap(lambda x: None)).subscribe(ts)
    ts.request(5)
    assert pub.requests == [5]


def test_map_transforms_over_a_fused_source() -> None:
    ts = drain(rx.range(0, 5).pipe(ops.map(lambda x: x * x)))
    assert ts.values == [0, 1, 4, 9, 16] and ts.completed


@pytest.mark.parametrize("upstream", ["fused", "subscriber"])
def test_map_raising_cancels_upstream_and_signals_the_original_exception(upstream: str) -> None:
    error = KeyError("bad item")

    def fn(x: int) -> int:
        if x == 2:
            raise error
        return x

    if upstream == "fused":
        pulled: list[int] = []

        def gen() -> Any:
            for i in range(10):
                pulled.append(i)
                yield i

        ts = drain(rx.from_iterable(gen()).pipe(ops.map(fn)))
        assert pulled == [0, 1, 2]
    else:
        pub = TestPublisher[int]()
        ts = TestSubscriber[int](initial_request=10)
        pub.pipe(ops.map(fn)).subscribe(ts)
        pub.emit(0, 1, 2, 3)
        assert pub.cancelled
    assert ts.values == [0, 1]
    assert ts.error is error


@pytest.mark.parametrize("upstream", ["fused", "subscriber"])
def test_map_returning_none_signals_type_error(upstream: str) -> None:
    fn = {1: None}.get
    if upstream == "fused":
        ts = drain(rx.just(0, 1, 2).pipe(ops.map(lambda x: fn(x, x), name="nullable")))
    else:
        pub = TestPublisher[int]()
        ts = TestSubscriber[int](initial_request=10)
        pub.pipe(ops.map(lambda x: fn(x, x), name="nullable")).subscribe(ts)
        pub.emit(0, 1, 2)
        assert pub.cancelled
    assert ts.values == [0]
    assert isinstance(ts.error, TypeError)
    assert "nullable" in str(ts.error) and "§2.13" in str(ts.error)


# filter -----------------------------------------------------------------------------------------
def test_filter_asks_one_more_per_dropped_item() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[int]()
    pub.pipe(ops.filter(lambda x: x % 2 == 0)).subscribe(ts)
    ts.request(2)
    pub.emit(1, 3, 4, 5, 6)
    assert pub.requests == [2, 1, 1, 1]
    assert ts.values == [4, 6]


def test_filter_over_unbounded_demand_does_not_re_request() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[int](initial_request=UNBOUNDED)
    pub.pipe(ops.filter(lambda x: x > 2)).subscribe(ts)
    pub.emit(1, 2, 3)
    assert pub.requests == [UNBOUNDED]
    assert ts.values == [3]


def test_filter_fused_delivers_exactly_the_requested_count() -> None:
    ts = TestSubscriber[int]()
    rx.range(0, 100).pipe(ops.filter(lambda x: x % 10 == 0)).subscribe(ts)
    ts.request(3)
    assert ts.values == [0, 10, 20]
    ts.request(100)
    assert ts.values == list(range(0, 100, 10)) and ts.completed


def test_filter_raising_is_signalled() -> None:
    ts = drain(rx.just("a", 1).pipe(ops.filter(lambda x: x.isalpha())))
    assert ts.values == ["a"]
    assert isinstance(ts.error, AttributeError)


def test_map_filter_map_chain_values() -> None:
    chain = rx.range(0, 10).pipe(ops.map(lambda x: x * 2), ops.filter(lambda x: x % 3 == 0),
                                 ops.map(lambda x: x + 1))
    assert drain(chain).values == [1, 7, 13, 19]


# scan -------------------------------------------------------------------------------------------
def test_scan_emits_running_accumulation_with_state_per_subscription() -> None:
    running = rx.range(1, 5).pipe(ops.scan(operator.add, 0))
    assert drain(running).values == [1, 3, 6, 10]
    assert drain(running).values == [1, 3, 6, 10]  # fresh state for each subscriber


def test_scan_in_subscriber_mode_passes_demand_exactly() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[int]()
    pub.pipe(ops.scan(operator.mul, 1)).subscribe(ts)
    ts.request(3)
    pub.emit(2, 3, 4)
    assert pub.requests == [3]
    assert ts.values == [2, 6, 24]


def test_scan_returning_none_is_type_error() -> None:
    ts = drain(rx.just(1, 2).pipe(ops.scan(lambda acc, x: None, 0)))
    assert ts.values == [] and isinstance(ts.error, TypeError)


# take -------------------------------------------------------------------------------------------
def test_take_cancels_upstream_once_satisfied() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[int](initial_request=10)
    pub.pipe(ops.take(2)).subscribe(ts)
    pub.emit(1)
    assert not pub.cancelled
    pub.emit(2)
    assert pub.cancelled
    assert ts.values == [1, 2] and ts.completed
    pub.emit(3)  # late item after cancel (§2.8) is ignored
    assert ts.values == [1, 2]


def test_take_never_requests_more_than_n_in_total() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[int]()
    pub.pipe(ops.take(3)).subscribe(ts)
    ts.request(2)
    ts.request(5)
    ts.request(UNBOUNDED)
    assert pub.requests == [2, 1]
    assert pub.total_requested == 3


def test_take_stops_an_infinite_fused_source() -> None:
    import itertools

    ts = drain(rx.from_iterable(itertools.count()).pipe(ops.map(lambda x: x * 3), ops.take(4)))
    assert ts.values == [0, 3, 6, 9] and ts.completed


def test_take_zero_completes_without_subscribing_upstream() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[int]()
    pub.pipe(ops.take(0)).subscribe(ts)
    assert ts.completed and ts.values == []
    assert pub.subscribe_count == 0
    assert drain(rx.range(0, 5).pipe(ops.take(0))).completed


@pytest.mark.parametrize("source", [
    lambda: rx.range(0, 50), lambda: rx.from_iterable([7, 8, 9]), lambda: rx.just(1, 2),
    lambda: rx.range(0, 50).pipe(ops.map(lambda x: x + 1)),
    lambda: rx.range(0, 50).pipe(ops.scan(lambda acc, x: acc + x, 0)),
], ids=["range", "from_iterable", "just", "after_map", "after_scan"])
async def test_take_zero_over_a_synchronous_source_emits_nothing(source: Any) -> None:
    # the source used to leak its first item through take(0) to a subscriber that requested in
    # on_subscribe (to_list, async for, subscribe(on_next=...))
    assert await source().pipe(ops.take(0)).to_list() == []
    seen = []
    source().pipe(ops.take(0)).subscribe(on_next=seen.append)
    assert seen == []
    async for item in source().pipe(ops.take(0)):
        seen.append(item)
    assert seen == []
    ts = drain(source().pipe(ops.take(0)))
    assert ts.values == [] and ts.completed


def test_operators_after_take_form_a_new_chain() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[int]()
    pub.pipe(ops.take(3), ops.filter(lambda x: x > 1), ops.map(str)).subscribe(ts)
    ts.request(2)
    pub.emit(1, 2, 3)
    assert ts.values == ["2", "3"] and ts.completed
    assert pub.requests == [2, 1]
    assert drain(rx.range(0, 10).pipe(ops.take(3), ops.map(lambda x: -x))).values == [0, -1, -2]


def test_take_more_than_available_completes_with_all() -> None:
    ts = drain(rx.just(1, 2).pipe(ops.take(5)))
    assert ts.values == [1, 2] and ts.completed


# skip -------------------------------------------------------------------------------------------
def test_skip_drops_first_n_and_asks_one_more_per_skipped() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[int]()
    pub.pipe(ops.skip(2)).subscribe(ts)
    ts.request(1)
    pub.emit(10, 11, 12)
    assert pub.requests == [1, 1, 1]
    assert ts.values == [12]
    assert drain(rx.range(0, 5).pipe(ops.skip(3))).values == [3, 4]


# tap --------------------------------------------------------------------------------------------
def test_tap_sees_items_and_completion_in_order() -> None:
    events: list[Any] = []
    ts = drain(rx.just(1, 2).pipe(ops.tap(events.append, on_complete=lambda: events.append("done"))))
    assert events == [1, 2, "done"]
    assert ts.values == [1, 2] and ts.completed


def test_tap_sees_upstream_errors_but_not_its_own_downstream() -> None:
    seen: list[str] = []
    failing = rx.just(1, 2).pipe(
        ops.tap(on_error=lambda e: seen.append(f"first:{e!r}")),
        ops.map(lambda x: 1 // (x - 2)),
        ops.tap(on_error=lambda e: seen.append("second")),
    )
    ts = drain(failing)
    assert isinstance(ts.error, ZeroDivisionError)
    assert seen == ["second"]


def test_tap_on_complete_raising_turns_completion_into_error() -> None:
    error = RuntimeError("tap failed")

    def boom() -> None:
        raise error

    ts = drain(rx.just(1).pipe(ops.tap(on_complete=boom)))
    assert ts.values == [1] and ts.error is error and not ts.completed


def test_tap_upstream_of_take_sees_no_completion() -> None:
    completions: list[str] = []
    ts = drain(rx.range(0, 10).pipe(ops.tap(on_complete=lambda: completions.append("up")), ops.take(2)))
    assert ts.values == [0, 1] and ts.completed
    assert completions == []


def test_tap_on_error_for_errors_from_a_subscriber_mode_upstream() -> None:
    pub = TestPublisher[int]()
    seen: list[BaseException] = []
    ts = TestSubscriber[int](initial_request=5)
    pub.pipe(ops.tap(on_error=seen.append)).subscribe(ts)
    error = OSError("upstream")
    pub.error(error)
    assert seen == [error] and ts.error is error


# names and validation ---------------------------------------------------------------------------
def test_stage_names_default_to_kind_and_index() -> None:
    chain = rx.range(0, 3).pipe(ops.map(str), ops.filter(bool, name="keep"), ops.take(2))
    assert chain.name == "take_3"
    assert [s.name for s in chain.stages] == ["map_1", "keep", "take_3"]  # type: ignore[attr-defined]
    assert chain.upstreams[0].name == "range_0"


@pytest.mark.parametrize("factory, args, error", [
    (ops.map, (1,), TypeError), (ops.filter, (None,), TypeError), (ops.take, (-1,), ValueError),
    (ops.skip, ("2",), ValueError), (ops.scan, (3, 0), TypeError), (ops.tap, (5,), TypeError),
])
def test_factories_reject_bad_arguments(factory: Any, args: tuple[Any, ...], error: type) -> None:
    with pytest.raises(error):
        factory(*args)


def test_a_fused_chain_is_reusable_and_cold() -> None:
    chain = rx.range(0, 4).pipe(ops.map(lambda x: x + 1), ops.take(3))
    assert drain(chain).values == [1, 2, 3]
    assert drain(chain, 2).values == [1, 2]
    assert drain(chain).values == [1, 2, 3]


def test_emission_beyond_demand_in_subscriber_mode_is_caught_at_the_boundary() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[int](initial_request=1)
    pub.pipe(ops.map(lambda x: x)).subscribe(ts)
    pub.emit(1, 2)
    assert ts.values == [1]
    assert isinstance(ts.error, rx.MissingBackpressureError)
    assert pub.cancelled


# tracebacks through a fused chain ----------------------------------------------------------------
def test_a_traceback_through_a_fused_chain_shows_the_generated_line_and_the_user_s_lambda() -> None:
    ts = TestSubscriber[int](initial_request=10)
    boom = lambda x: 10 // (x - 3)  # noqa: E731
    line = boom.__code__.co_firstlineno
    rx.range(0, 5).pipe(ops.map(lambda x: x + 1), ops.map(boom, name="boom")).subscribe(ts)
    assert isinstance(ts.error, ZeroDivisionError)
    text = "".join(traceback.format_exception(ts.error))
    assert f"    x = f1(x)  # map 'boom': {__file__}:{line}\n" in text  # the fused frame's source
    assert "boom = lambda x: 10 // (x - 3)" in text  # then the user's own line


def test_the_generated_source_leaves_linecache_with_its_chain() -> None:
    flow = rx.range(0, 3).pipe(ops.filter(lambda x: True, name="lc_keep"))
    assert asyncio.run(flow.to_list()) == [0, 1, 2]
    names = [name for name in linecache.cache if "lc_keep" in name]
    assert len(names) == 1 and "if not f0(x):  # filter 'lc_keep'" in "".join(linecache.getlines(names[0]))
    del flow
    gc.collect()
    assert not [name for name in linecache.cache if "lc_keep" in name]
