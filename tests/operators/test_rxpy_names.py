"""RxPY code runs as written (DESIGN §3, "The kit, third round"): reactivex's parameter names,
``timedelta`` durations, ``scan`` without a seed, ``on_completed``; rxpipe's own names go on
working, and giving both names of one argument is a TypeError."""

from __future__ import annotations

import datetime
import inspect
import operator
from typing import Any, Callable

import pytest
import reactivex
import reactivex.operators as rxo

import rxpipe as rx
from rxpipe import operators as ops
from rxpipe.testing import TestSubscriber

from .differential import Case, through_reactivex, through_rxpipe

IMMEDIATE = reactivex.scheduler.ImmediateScheduler()  # an inner that completes synchronously, as rx.just
ITEMS = Case((3, 1, 4, 1, 5, 9, 2, 6, 5, 3))

#: (rxpipe with reactivex's keywords, reactivex with the same keywords)
KEYWORDS: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {
    "map": (lambda: ops.map(mapper=lambda x: x * 2), lambda: rxo.map(mapper=lambda x: x * 2)),
    "map_identity": (lambda: ops.map(), lambda: rxo.map()),
    "filter": (lambda: ops.filter(predicate=lambda x: x > 2), lambda: rxo.filter(predicate=lambda x: x > 2)),
    "scan": (lambda: ops.scan(accumulator=operator.add, seed=10), lambda: rxo.scan(accumulator=operator.add, seed=10)),
    "scan_no_seed": (lambda: ops.scan(operator.add), lambda: rxo.scan(operator.add)),
    "scan_no_seed_kw": (lambda: ops.scan(accumulator=max), lambda: rxo.scan(accumulator=max)),
    "take": (lambda: ops.take(count=3), lambda: rxo.take(count=3)),
    "skip": (lambda: ops.skip(count=3), lambda: rxo.skip(count=3)),
    "reduce": (lambda: ops.reduce(accumulator=operator.add, seed=0),
               lambda: rxo.reduce(accumulator=operator.add, seed=0)),
    "count": (lambda: ops.count(predicate=lambda x: x > 2), lambda: rxo.count(predicate=lambda x: x > 2)),
    "first": (lambda: ops.first(predicate=lambda x: x > 3), lambda: rxo.first(predicate=lambda x: x > 3)),
    "last": (lambda: ops.last(predicate=lambda x: x > 3), lambda: rxo.last(predicate=lambda x: x > 3)),
    "take_while": (lambda: ops.take_while(predicate=lambda x: x != 9, inclusive=True),
                   lambda: rxo.take_while(predicate=lambda x: x != 9, inclusive=True)),
    "skip_while": (lambda: ops.skip_while(predicate=lambda x: x != 9),
                   lambda: rxo.skip_while(predicate=lambda x: x != 9)),
    "distinct": (lambda: ops.distinct(key_mapper=lambda x: x % 4), lambda: rxo.distinct(key_mapper=lambda x: x % 4)),
    "distinct_until_changed": (lambda: ops.distinct_until_changed(key_mapper=lambda x: x > 2),
                               lambda: rxo.distinct_until_changed(key_mapper=lambda x: x > 2)),
    "flat_map": (lambda: ops.flat_map(mapper=lambda x: rx.just(x, x)),
                 lambda: rxo.flat_map(mapper=lambda x: reactivex.of(x, x))),
    "concat_map": (lambda: ops.concat_map(project=lambda x: rx.just(x, -x)),
                   lambda: rxo.concat_map(project=lambda x: reactivex.of(x, -x))),
    "switch_map": (lambda: ops.switch_map(project=lambda x: rx.just(x)),
                   lambda: rxo.switch_map(project=lambda x: reactivex.return_value(x, IMMEDIATE))),
    "retry": (lambda: ops.retry(retry_count=2), lambda: rxo.retry(retry_count=2)),
    "group_by": (lambda: (lambda s: s.pipe(ops.group_by(key_mapper=lambda x: x % 2, element_mapper=lambda x: x * 10),
                                             ops.flat_map(lambda g: g.pipe(ops.to_list())))),
                 lambda: (lambda s: s.pipe(rxo.group_by(key_mapper=lambda x: x % 2, element_mapper=lambda x: x * 10),
                                           rxo.flat_map(lambda g: g.pipe(rxo.to_list()))))),
}


@pytest.mark.parametrize("name", sorted(KEYWORDS))
def test_reactivex_keywords_give_what_reactivex_gives(name: str) -> None:
    ours, theirs = KEYWORDS[name]
    expected = through_reactivex(lambda s: s.pipe(theirs()), ITEMS)
    assert through_rxpipe(lambda s: s.pipe(ours()), ITEMS) == expected
    assert expected[-1] == ("C",) and len(expected) > 1


@pytest.mark.parametrize("call, message", [
    (lambda: ops.map(mapper=abs, fn=abs), "map() got mapper= and fn="),
    (lambda: ops.take(count=1, n=1), "take() got count= and n="),
    (lambda: ops.skip(2, n=1), "skip() got count= and n="),
    (lambda: ops.scan(operator.add, fn=operator.add), "scan() got accumulator= and fn="),
    (lambda: ops.tap(on_completed=print, on_complete=print), "tap() got on_completed= and on_complete="),
    (lambda: ops.debounce(1.0, duration_s=1.0), "debounce() got duetime= and duration_s="),
    (lambda: ops.delay(duetime=1.0, duration_s=1.0), "delay() got duetime= and duration_s="),
    (lambda: ops.throttle_first(1.0, window_s=1.0), "throttle_first() got window_duration= and window_s="),
    (lambda: ops.timeout(1.0, seconds=1.0), "timeout() got duetime= and seconds="),
    (lambda: ops.concat_map(abs, fn=abs), "concat_map() got project= and fn="),
    (lambda: ops.switch_map(abs, fn=abs), "switch_map() got project= and fn="),
    (lambda: ops.flat_map(abs, fn=abs), "flat_map() got mapper= and fn="),
    (lambda: ops.group_by(abs, key=abs), "group_by() got key_mapper= and key="),
    (lambda: ops.take(), "take() missing its argument 'count'"),
    (lambda: ops.scan(), "scan() missing its argument 'accumulator'"),
    (lambda: ops.debounce(), "debounce() missing its argument 'duetime'"),
])
def test_two_names_of_one_argument_or_none_is_a_type_error(call: Callable[[], Any], message: str) -> None:
    with pytest.raises(TypeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        call()


def test_rxpipe_names_keep_working() -> None:
    ts = TestSubscriber[Any](initial_request=100)
    done: list[str] = []
    rx.range(0, 10).pipe(ops.map(fn=lambda x: x + 1), ops.skip(n=1), ops.take(n=5), ops.scan(fn=operator.add, seed=0),
                         ops.tap(on_complete=lambda: done.append("tap"))).subscribe(ts)
    assert ts.values == [2, 5, 9, 14, 20] and ts.completed and done == ["tap"]


def test_scan_without_seed_emits_the_first_item_then_accumulates_and_fails_like_reactivex() -> None:
    def boom(acc: int, x: int) -> int:
        if x == 4:
            raise ValueError("four")
        return acc + x

    for case in (Case(()), Case((7,)), Case((1, 2, 3, 4, 5))):
        assert (through_rxpipe(lambda s: s.pipe(ops.scan(boom)), case)
                == through_reactivex(lambda s: s.pipe(rxo.scan(boom)), case))
    assert through_rxpipe(lambda s: s.pipe(ops.scan(boom)), Case((1, 2, 3, 4, 5))) == [
        ("N", 1), ("N", 3), ("N", 6), ("E", "ValueError", "four")]
    # each subscription starts without an accumulation again
    flow = rx.range(1, 4).pipe(ops.scan(operator.mul))
    for _ in range(2):
        ts = TestSubscriber[Any](initial_request=10)
        flow.subscribe(ts)
        assert ts.values == [1, 2, 6]


def test_subscribe_takes_on_completed_and_a_reactivex_observer() -> None:
    got: list[Any] = []
    rx.just(1, 2).subscribe(on_next=got.append, on_completed=lambda: got.append("C"))
    rx.just(3).subscribe(got.append, None, lambda: got.append("C2"))

    class Observer:
        def on_next(self, x: Any) -> None:
            got.append(("obs", x))

        def on_error(self, e: BaseException) -> None:
            got.append(("err", e))

        def on_completed(self) -> None:
            got.append("obs done")

    rx.just(4).subscribe(Observer())
    rx.just(5).pipe(ops.tap(Observer())).subscribe()
    assert got == [1, 2, "C", 3, "C2", ("obs", 4), "obs done", ("obs", 5), "obs done"]
    with pytest.raises(TypeError, match="two names of one argument"):
        rx.just(1).subscribe(on_completed=print, on_complete=print)


def test_defer_calls_a_one_parameter_factory_with_a_scheduler_of_none() -> None:
    seen: list[Any] = []

    def factory(scheduler: Any) -> rx.Flowable[int]:
        seen.append(scheduler)
        return rx.just(1, 2)

    ts = TestSubscriber[Any](initial_request=10)
    rx.defer(factory).subscribe(ts)
    assert ts.values == [1, 2] and seen == [None]


@pytest.mark.virtual
async def test_durations_accept_timedelta_everywhere() -> None:
    td = datetime.timedelta
    assert await rx.interval(td(milliseconds=10)).pipe(ops.take(3)).to_list() == [0, 1, 2]
    assert await rx.interval(period=td(milliseconds=10)).pipe(ops.take(1)).to_list() == [0]
    assert await rx.timer(td(seconds=1)).to_list() == [0]
    assert await rx.just(1).pipe(ops.timeout(td(seconds=1))).to_list() == [1]
    with pytest.raises(TimeoutError):
        await rx.never().pipe(ops.timeout(duetime=td(milliseconds=200))).to_list()
    assert await rx.just(1, 2, 3).pipe(ops.batch(10, td(milliseconds=5))).to_list() == [[1, 2, 3]]
    retry = rx.Retry(3, td(milliseconds=10), td(seconds=1))
    breaker = rx.CircuitBreaker(2, td(seconds=5))
    assert (retry.base_s, retry.cap_s, breaker.reset_timeout_s) == (0.01, 1.0, 5.0)


def test_every_shared_operator_accepts_reactivexs_parameter_names() -> None:
    # Every named parameter of reactivex 6.1's operator is a parameter of ours, except the
    # scheduler (rxpipe's time is the loop's clock) and what the third round adds.
    later = {("buffer", "boundaries"), ("merge", "max_concurrent"), ("timeout", "other"),
             ("group_by", "subject_mapper")}
    missing = []
    for name in sorted(set(ops.__all__) & set(dir(rxo))):
        ours = inspect.signature(getattr(ops, name)).parameters
        for param in inspect.signature(getattr(rxo, name)).parameters.values():
            if param.kind is param.VAR_POSITIONAL or param.name == "scheduler" or (name, param.name) in later:
                continue
            if param.name not in ours:
                missing.append((name, param.name))
    assert missing == [], missing
