"""The third round's one-to-one operators and filters (DESIGN §3): ``map_indexed``,
``filter_indexed``, ``starmap``, ``starmap_indexed``, ``pluck``, ``pluck_attr``, ``do_action``,
``do``, ``finally_action``, ``materialize``, ``dematerialize``, ``default_if_empty``,
``element_at``, ``element_at_or_default``, ``first_or_default``, ``skip_last``,
``take_while_indexed``, ``skip_while_indexed``, ``skip_until``.

Each against reactivex 6.1 on 100 seeded cold inputs (``vocab.py``); under random demand
(delivered <= requested, never a stall, reactivex's values); the demand rule of the family
(passed through, one more per dropped item, ``skip_last(n)`` holds n) by exact upstream
requests; cancel reaching every upstream.
"""

from __future__ import annotations

import logging
import random
from typing import Any, Callable

import pytest
import reactivex
import reactivex.operators as rxo
from reactivex.notification import OnCompleted, OnError, OnNext

import rxpipe as rx
from rxpipe import UNBOUNDED, ArgumentOutOfRangeError
from rxpipe import operators as ops
from rxpipe.testing import TestPublisher, TestSubscriber

from .differential import timeline
from .hand_driven import subscribe
from .vocab import SYNC, TIMED, Pair, check_demand, check_sync, check_timed, register, register_timed

FAMILY = ("map_indexed", "filter_indexed", "starmap", "starmap_indexed", "pluck", "pluck_attr", "do_action", "do",
          "finally_action", "materialize", "dematerialize", "default_if_empty", "element_at",
          "element_at_or_default", "first_or_default", "skip_last", "take_while_indexed", "skip_while_indexed",
          "skip_until", "slice")


class UserError(Exception):
    """What a user function raises."""


def raising_at(rng: random.Random, fn: Callable[..., Any], *, position: int = 0) -> Callable[..., Any]:
    """``fn``, or half the time ``fn`` raising UserError when its argument at ``position`` is a drawn value."""
    if rng.random() < 0.5:
        return fn
    trigger = rng.randint(0, 9)

    def user(*args: Any) -> Any:
        if args[position] == trigger:
            raise UserError(f"user function at {trigger}")
        return fn(*args)

    return user


@register("map_indexed")
def _map_indexed(rng: random.Random) -> Pair:
    if rng.random() < 0.2:
        return ops.map_indexed(), rxo.map_indexed()
    fn = raising_at(rng, lambda x, i: x * 100 + i)
    return ops.map_indexed(fn), rxo.map_indexed(fn)


@register("filter_indexed")
def _filter_indexed(rng: random.Random) -> Pair:
    if rng.random() < 0.2:
        return ops.filter_indexed(), rxo.filter_indexed()
    k = rng.randint(2, 4)
    fn = raising_at(rng, lambda x, i: (x + i) % k == 0)
    return ops.filter_indexed(fn), rxo.filter_indexed(fn)


def _tuples(rng: random.Random) -> tuple[Any, Any]:
    k = rng.randint(1, 3)
    return ops.map(lambda x: (x,) * k), rxo.map(lambda x: (x,) * k)


@register("starmap")
def _starmap(rng: random.Random) -> Pair:
    ours_t, theirs_t = _tuples(rng)
    if rng.random() < 0.2:
        return rx.pipe(ours_t, ops.starmap()), reactivex.compose(theirs_t, rxo.starmap())
    fn = raising_at(rng, lambda *xs: sum(xs) * len(xs))
    return rx.pipe(ours_t, ops.starmap(fn)), reactivex.compose(theirs_t, rxo.starmap(fn))


@register("starmap_indexed")
def _starmap_indexed(rng: random.Random) -> Pair:
    fn = raising_at(rng, lambda x, i: x * 100 + i)
    return (rx.pipe(ops.map_indexed(lambda x, i: (x, i)), ops.starmap_indexed(fn)),
            reactivex.compose(rxo.map_indexed(lambda x, i: (x, i)), rxo.starmap_indexed(fn)))


@register("pluck")
def _pluck(rng: random.Random) -> Pair:
    if rng.random() < 0.5:
        key = rng.choice(("a", "b"))
        # "b" is missing from odd items: KeyError, as reactivex's
        return (rx.pipe(ops.map(lambda x: {"a": x} if x % 2 else {"a": x, "b": -x}), ops.pluck(key)),
                reactivex.compose(rxo.map(lambda x: {"a": x} if x % 2 else {"a": x, "b": -x}), rxo.pluck(key)))
    index = rng.randint(0, 1)
    return (rx.pipe(ops.map(lambda x: (x, x + 1)), ops.pluck(index)),
            reactivex.compose(rxo.map(lambda x: (x, x + 1)), rxo.pluck(index)))


@register("pluck_attr")
def _pluck_attr(rng: random.Random) -> Pair:
    prop = rng.choice(("real", "imag", "numerator", "missing"))
    return (rx.pipe(ops.map(lambda x: x + (1 if x % 2 else 0)), ops.pluck_attr(prop)),
            reactivex.compose(rxo.map(lambda x: x + (1 if x % 2 else 0)), rxo.pluck_attr(prop)))


def _callbacks(rng: random.Random) -> tuple[Callable[[Any], None], list[Any]]:
    seen: list[Any] = []
    return raising_at(rng, seen.append), seen


@register("do_action")
def _do_action(rng: random.Random) -> Pair:
    fn, _ = _callbacks(rng)
    return ops.do_action(fn), rxo.do_action(fn)


class _Observer:
    def __init__(self, on_next: Callable[[Any], None]) -> None:
        self.on_next = on_next

    def on_error(self, error: Exception) -> None:
        pass

    def on_completed(self) -> None:
        pass


@register("do")
def _do(rng: random.Random) -> Pair:
    fn, _ = _callbacks(rng)
    return ops.do(_Observer(fn)), rxo.do(_Observer(fn))  # type: ignore[arg-type]


@register("finally_action")
def _finally_action(rng: random.Random) -> Pair:
    # the action's place among the signals: test_finally_action_runs_once_after_the_terminal_signal
    return ops.finally_action(lambda: None), rxo.finally_action(lambda: None)


@register("materialize")
def _materialize(rng: random.Random) -> Pair:
    # notifications compare as reactivex compares them (kind and value; an error by its text)
    return ops.materialize(), rxo.materialize()


@register("dematerialize")
def _dematerialize(rng: random.Random) -> Pair:
    stop = rng.choice((None, 3, 7))

    def notify(x: int) -> Any:
        return OnCompleted() if x == stop else OnError(UserError(f"at {x}")) if x == 9 else OnNext(x)

    return rx.pipe(ops.map(notify), ops.dematerialize()), reactivex.compose(rxo.map(notify), rxo.dematerialize())


@register("default_if_empty", none_is_nothing=True)
def _default_if_empty(rng: random.Random) -> Pair:
    if rng.random() < 0.2:
        return ops.default_if_empty(), rxo.default_if_empty()
    value = rng.randint(-5, 5)
    return ops.default_if_empty(value), rxo.default_if_empty(value)


@register("element_at")
def _element_at(rng: random.Random) -> Pair:
    index = rng.choice((0, 1, 2, 5, 60))
    return ops.element_at(index), rxo.element_at(index)


@register("element_at_or_default", none_is_nothing=True)
def _element_at_or_default(rng: random.Random) -> Pair:
    index, default = rng.choice((0, 1, 2, 5, 60)), rng.choice((None, -1, 42))
    return ops.element_at_or_default(index, default), rxo.element_at_or_default(index, default)


@register("first_or_default", none_is_nothing=True)
def _first_or_default(rng: random.Random) -> Pair:
    default = rng.choice((None, -1, 42))
    if rng.random() < 0.3:
        return ops.first_or_default(None, default), rxo.first_or_default(None, default)
    t = rng.randint(0, 10)
    p = raising_at(rng, lambda x: x > t)
    return ops.first_or_default(p, default), rxo.first_or_default(p, default)


@register("skip_last")
def _skip_last(rng: random.Random) -> Pair:
    n = rng.choice((0, 1, 2, 5, 60))
    return ops.skip_last(n), rxo.skip_last(n)


@register("take_while_indexed")
def _take_while_indexed(rng: random.Random) -> Pair:
    t, inclusive = rng.randint(0, 12), rng.random() < 0.5
    p = raising_at(rng, lambda x, i: i < t and x != 9)
    return ops.take_while_indexed(p, inclusive), rxo.take_while_indexed(p, inclusive)


@register("skip_while_indexed")
def _skip_while_indexed(rng: random.Random) -> Pair:
    t = rng.randint(0, 12)
    p = raising_at(rng, lambda x, i: i < t or x == 0)
    return ops.skip_while_indexed(p), rxo.skip_while_indexed(p)


@register_timed("skip_until")
def _skip_until(rng: random.Random) -> Pair:
    from .differential import reactivex_timeline, rxpipe_timeline

    other = timeline(rng, ["open"] * rng.randint(0, 2), step_s=0.4371, error_rate=0.2)
    return ops.skip_until(rxpipe_timeline(other)), rxo.skip_until(reactivex_timeline(other))


@register("slice")
def _slice(rng: random.Random) -> Pair:
    def bound() -> int | None:
        return rng.choice((None, 0, 1, 3, 8, -1, -3, -8))
    start, stop, step = bound(), bound(), rng.choice((None, 0, 1, 2, 3))
    return ops.slice(start, stop, step), rxo.slice(start, stop, step)


# -- against reactivex, 100 seeded inputs each ---------------------------------------------------------
@pytest.mark.parametrize("name", sorted(n for n in FAMILY if n in SYNC))
def test_equal_to_reactivex_on_100_seeded_cold_inputs(name: str) -> None:
    assert check_sync(name) >= 100


@pytest.mark.parametrize("name", sorted(n for n in FAMILY if n in TIMED))
def test_timed_equal_to_reactivex_on_100_seeded_inputs(name: str) -> None:
    from .differential import timed_cases, timed_through_reactivex, timed_through_rxpipe
    from .vocab import seed_of

    if name != "skip_until":
        assert check_timed(name) >= 100
        return
    make, _ = TIMED[name]
    for i, case in enumerate(timed_cases(seed=seed_of(name), count=100)):
        ours, theirs = make(random.Random(f"{name}:{i}"))
        expected = timed_through_reactivex(lambda s, op=theirs: s.pipe(op), case, horizon_s=60.0)
        got = timed_through_rxpipe(lambda s, op=ours: s.pipe(op), case, horizon_s=60.0)
        if expected and expected[-1][1][0] in "CE":
            assert got == expected, (i, case)
        else:  # reactivex stays silent: the source ended before the gate opened
            assert got == [*expected, (case.end_s, ("C",))], (i, case)


def test_every_name_of_the_family_is_compared() -> None:
    assert set(FAMILY) <= set(SYNC) | set(TIMED)


# -- demand: random request(n) patterns --------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(n for n in FAMILY if n in SYNC))
def test_random_demand_is_never_exceeded_never_stalls_and_gives_reactivex_values(name: str) -> None:
    check_demand(name)


# -- the demand rule, exactly -----------------------------------------------------------------------------
@pytest.mark.parametrize("op, item", [
    (lambda: ops.map_indexed(lambda x, i: (x, i)), 1), (lambda: ops.starmap(lambda x: x), (1,)),
    (lambda: ops.pluck(0), (1,)), (lambda: ops.pluck_attr("real"), 1), (lambda: ops.do_action(lambda x: None), 1),
    (lambda: ops.do(_Observer(lambda x: None)), 1), (lambda: ops.finally_action(lambda: None), 1),
    (lambda: ops.materialize(), 1), (lambda: ops.default_if_empty(0), 1),
], ids=["map_indexed", "starmap", "pluck", "pluck_attr", "do_action", "do", "finally_action", "materialize",
        "default_if_empty"])
def test_one_to_one_passes_demand_through_exactly(op: Callable[[], Any], item: Any) -> None:
    pub, ts = subscribe(op(), 3)
    assert pub.requests == [3]
    pub.emit(item, item, item)
    assert len(ts.values) == 3 and not ts.done
    ts.request(2)
    assert pub.requests == [3, 2]
    ts.request(UNBOUNDED)
    assert pub.requests == [3, 2, UNBOUNDED]


@pytest.mark.parametrize("op, drops", [
    (lambda: ops.filter_indexed(lambda x, i: i % 3 == 2), 2),
    (lambda: ops.skip_while_indexed(lambda x, i: i < 2), 2),
    (lambda: ops.skip_until(rx.never()), 3),
], ids=["filter_indexed", "skip_while_indexed", "skip_until (shut)"])
def test_filters_ask_one_more_per_dropped_item(op: Callable[[], Any], drops: int) -> None:
    pub, ts = subscribe(op(), 1)
    assert pub.requests == [1]
    for k in range(drops):
        pub.emit(k)
        assert pub.requests == [1] * (k + 2) and pub.outstanding == 1


def test_element_at_reads_nothing_before_it_is_asked_then_index_plus_one_items_once() -> None:
    pub, ts = subscribe(ops.element_at(2))
    assert pub.requests == []
    ts.request(5)
    assert pub.requests == [3]
    pub.emit("a")
    pub.emit("b")
    assert pub.requests == [3] and ts.values == []
    pub.emit("c")
    assert ts.values == ["c"] and ts.completed and pub.cancelled


def test_element_at_and_first_or_default_end_a_short_stream_with_the_default_or_the_error() -> None:
    pub, ts = subscribe(ops.element_at(3), 1)
    pub.emit("a").complete()
    assert isinstance(ts.error, ArgumentOutOfRangeError) and str(ts.error) == "Argument out of range"
    for op in (ops.element_at_or_default(3, "z"), ops.first_or_default(lambda x: x == "q", "z")):
        pub, ts = subscribe(op)
        pub.complete()
        assert ts.values == [] and not ts.completed  # the default waits for demand
        ts.request(1)
        assert ts.values == ["z"] and ts.completed


@pytest.mark.parametrize("op", [lambda: ops.element_at(-1), lambda: ops.element_at_or_default(-2, 0)])
def test_a_negative_index_is_refused_at_once_as_reactivex_does(op: Callable[[], Any]) -> None:
    with pytest.raises(ArgumentOutOfRangeError):
        op()


@pytest.mark.parametrize("op", [
    lambda: ops.default_if_empty(), lambda: ops.element_at_or_default(0), lambda: ops.first_or_default(),
])
def test_a_none_default_completes_empty_none_is_never_an_item(op: Callable[[], Any]) -> None:
    pub, ts = subscribe(op(), 1)
    pub.complete()
    assert ts.values == [] and ts.completed


def test_skip_last_holds_its_count_and_reads_beyond_it() -> None:
    pub, ts = subscribe(ops.skip_last(2), 1)
    pub.emit("a")
    pub.emit("b")
    assert ts.values == [] and pub.outstanding == 1  # the two held never close the window
    pub.emit("c")
    assert ts.values == ["a"] and pub.outstanding == 0
    assert sum(pub.requests) == 3  # n + count
    ts.request(2)
    pub.emit("d", "e")
    pub.complete()
    assert ts.values == ["a", "b", "c"] and ts.completed


def test_materialize_delivers_the_terminal_notification_on_demand() -> None:
    pub, ts = subscribe(ops.materialize(), 1)
    pub.emit("a")
    failure = UserError("boom")
    pub.error(failure)
    assert ts.values == [OnNext("a")] and not ts.done
    ts.request(1)
    assert ts.values[1].kind == "E" and ts.values[1].exception is failure and ts.completed


def test_dematerialize_completes_on_on_completed_and_cancels_upstream() -> None:
    pub, ts = subscribe(ops.dematerialize(), UNBOUNDED)
    pub.emit(OnNext(1), OnCompleted())
    assert ts.values == [1] and ts.completed and pub.cancelled
    pub, ts = subscribe(ops.dematerialize(), UNBOUNDED)
    pub.emit(1)
    assert isinstance(ts.error, TypeError) and "takes notifications" in str(ts.error) and pub.cancelled


# -- finally_action: once, after the terminal signal (or the cancel) ---------------------------------------
@pytest.mark.parametrize("end", ["complete", "error", "cancel"])
def test_finally_action_runs_once_after_the_terminal_signal(end: str) -> None:
    seen: list[str] = []
    pub = TestPublisher[int]()
    ts = TestSubscriber[int](initial_request=UNBOUNDED)
    pub.pipe(ops.finally_action(lambda: seen.append("action")),
             ops.tap(on_complete=lambda: seen.append("|"), on_error=lambda e: seen.append("#"))).subscribe(ts)
    pub.emit(1)
    assert seen == []
    if end == "complete":
        pub.complete()
    elif end == "error":
        pub.error(UserError("x"))
    else:
        ts.cancel()
        assert pub.cancelled
    assert seen == {"complete": ["|", "action"], "error": ["#", "action"], "cancel": ["action"]}[end]
    ts.cancel()
    assert seen.count("action") == 1


def test_reactivex_runs_finally_action_after_the_terminal_signal_too() -> None:
    seen: list[str] = []
    reactivex.of(1).pipe(rxo.finally_action(lambda: seen.append("action")),
                         rxo.do_action(on_completed=lambda: seen.append("|"))).subscribe()
    assert seen == ["|", "action"]


def test_a_raising_finally_action_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    def action() -> None:
        raise UserError("in the action")

    ts = TestSubscriber[int](initial_request=UNBOUNDED)
    with caplog.at_level(logging.ERROR, logger="rxpipe"):
        rx.just(1).pipe(ops.finally_action(action)).subscribe(ts)
    assert ts.values == [1] and ts.completed
    assert "finally_action's action raised" in caplog.text


# -- cancel reaches every upstream --------------------------------------------------------------------------
def test_skip_until_cancel_reaches_the_source_and_other() -> None:
    pub, other = TestPublisher[int](), TestPublisher[str]()
    ts = TestSubscriber[int](initial_request=2)
    pub.pipe(ops.skip_until(other)).subscribe(ts)
    assert other.requests == [1] and pub.requests == [2]
    ts.cancel()
    assert pub.cancelled and other.cancelled


def test_skip_until_opens_at_others_first_item_and_cancels_it() -> None:
    pub, other = TestPublisher[int](), TestPublisher[str]()
    ts = TestSubscriber[int](initial_request=UNBOUNDED)
    pub.pipe(ops.skip_until(other)).subscribe(ts)
    pub.emit(1, 2)
    other.emit("go")
    assert other.cancelled
    pub.emit(3).complete()
    assert ts.values == [3] and ts.completed


def test_skip_until_an_error_of_other_cancels_the_source() -> None:
    pub, other = TestPublisher[int](), TestPublisher[str]()
    ts = TestSubscriber[int](initial_request=UNBOUNDED)
    pub.pipe(ops.skip_until(other)).subscribe(ts)
    failure = UserError("other failed")
    other.error(failure)
    assert ts.error is failure and pub.cancelled


def test_slice_refuses_a_negative_step_as_reactivex_does_and_names_its_parts() -> None:
    with pytest.raises(TypeError, match="Negative step not supported"):
        ops.slice(0, 5, -1)
    flow = rx.range(0, 10).pipe(ops.slice(1, -2, 2, name="page"))
    names = []
    node: Any = flow
    while node.upstreams:
        names.append(node.name)
        node = node.upstreams[0]
    assert "page.filter_indexed" in names and "page.skip_last" in names


@pytest.mark.parametrize("name", FAMILY)
def test_cancel_reaches_the_upstream(name: str) -> None:
    make = (SYNC.get(name) or TIMED[name])[0]
    ours, _ = make(random.Random(0))
    pub = TestPublisher[Any]()
    ts = TestSubscriber[Any](initial_request=1)
    pub.pipe(ours).subscribe(ts)
    ts.cancel()
    assert pub.cancelled
