"""reactivex's creation functions (DESIGN §3, "The kit, third round"): what reactivex 6.1 emits,
with reactivex's argument order, plus each one's demand rule."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Callable

import pytest
import reactivex

import rxpipe as rx
from rxpipe import UNBOUNDED, BufferOverflowError
from rxpipe import operators as ops
from rxpipe.testing import TestPublisher, TestSubscriber

from .operators.differential import Case, through_reactivex, through_rxpipe

NONE = Case(())


def notes_rx(source: reactivex.Observable[Any]) -> list[Any]:
    return through_reactivex(lambda _: source, NONE)


def notes_ours(source: rx.Flowable[Any]) -> list[Any]:
    return through_rxpipe(lambda _: source, NONE)


def boom() -> Any:
    raise ValueError("boom")


SAME: dict[str, tuple[Callable[[], rx.Flowable[Any]], Callable[[], reactivex.Observable[Any]]]] = {
    "of": (lambda: rx.of(1, 2, 3), lambda: reactivex.of(1, 2, 3)),
    "of_empty": (lambda: rx.of(), lambda: reactivex.of()),
    "from_": (lambda: rx.from_(range(4)), lambda: reactivex.from_(range(4))),
    "from_list": (lambda: rx.from_list([5, 6]), lambda: reactivex.from_list([5, 6])),
    "return_value": (lambda: rx.return_value(9), lambda: reactivex.return_value(9)),
    "throw": (lambda: rx.throw(ValueError("x")), lambda: reactivex.throw(ValueError("x"))),
    "throw_str": (lambda: rx.throw("message"), lambda: reactivex.throw("message")),
    "generate": (lambda: rx.generate(1, lambda x: x < 50, lambda x: x * 3),
                 lambda: reactivex.generate(1, lambda x: x < 50, lambda x: x * 3)),
    "generate_none": (lambda: rx.generate(5, lambda x: x < 0, lambda x: x),
                      lambda: reactivex.generate(5, lambda x: x < 0, lambda x: x)),
    "generate_raises": (lambda: rx.generate(0, lambda x: x < 9, lambda x: boom() if x == 2 else x + 1),
                        lambda: reactivex.generate(0, lambda x: x < 9, lambda x: boom() if x == 2 else x + 1)),
    "repeat_value": (lambda: rx.repeat_value("a", 3), lambda: reactivex.repeat_value("a", 3)),
    "repeat_value_0": (lambda: rx.repeat_value("a", 0), lambda: reactivex.repeat_value("a", 0)),
    "repeat_value_forever": (lambda: rx.repeat_value("a").pipe(ops.take(5)),
                             lambda: reactivex.repeat_value("a").pipe(reactivex.operators.take(5))),
    "from_callable": (lambda: rx.from_callable(lambda: 42), lambda: reactivex.from_callable(lambda: 42)),
    "from_callable_raises": (lambda: rx.from_callable(boom), lambda: reactivex.from_callable(boom)),
    "case": (lambda: rx.case(lambda: "b", {"a": rx.of(1), "b": rx.of(2, 3)}),
             lambda: reactivex.case(lambda: "b", {"a": reactivex.of(1), "b": reactivex.of(2, 3)})),
    "case_default": (lambda: rx.case(lambda: "z", {"a": rx.of(1)}, rx.of(7)),
                     lambda: reactivex.case(lambda: "z", {"a": reactivex.of(1)}, reactivex.of(7))),
    "case_missing": (lambda: rx.case(lambda: "z", {"a": rx.of(1)}),
                     lambda: reactivex.case(lambda: "z", {"a": reactivex.of(1)})),
    "if_then": (lambda: rx.if_then(lambda: True, rx.of(1), rx.of(2)),
                lambda: reactivex.if_then(lambda: True, reactivex.of(1), reactivex.of(2))),
    "if_then_else": (lambda: rx.if_then(lambda: False, rx.of(1), rx.of(2)),
                     lambda: reactivex.if_then(lambda: False, reactivex.of(1), reactivex.of(2))),
    "if_then_no_else": (lambda: rx.if_then(lambda: False, rx.of(1)),
                        lambda: reactivex.if_then(lambda: False, reactivex.of(1))),
    "fork_join": (lambda: rx.fork_join(rx.of(1, 2), rx.of(3), rx.range(0, 300)),
                  lambda: reactivex.fork_join(reactivex.of(1, 2), reactivex.of(3), reactivex.range(0, 300))),
    "fork_join_empty_source": (lambda: rx.fork_join(rx.of(1, 2), rx.empty(), rx.of(3)),
                               lambda: reactivex.fork_join(reactivex.of(1, 2), reactivex.empty(), reactivex.of(3))),
    "fork_join_error": (lambda: rx.fork_join(rx.of(1), rx.throw(ValueError("x"))),
                        lambda: reactivex.fork_join(reactivex.of(1), reactivex.throw(ValueError("x")))),
    "on_error_resume_next": (
        lambda: rx.on_error_resume_next(rx.of(1), rx.throw(ValueError("x")), rx.of(2), rx.throw(ValueError("y"))),
        lambda: reactivex.on_error_resume_next(reactivex.of(1), reactivex.throw(ValueError("x")), reactivex.of(2),
                                               reactivex.throw(ValueError("y")))),
    "on_error_resume_next_fn": (
        lambda: rx.on_error_resume_next(rx.throw(ValueError("z")), lambda e: rx.of(repr(e))),
        lambda: reactivex.on_error_resume_next(reactivex.throw(ValueError("z")), lambda e: reactivex.of(repr(e)))),
    "on_error_resume_next_fn_after_completion": (
        lambda: rx.on_error_resume_next(rx.of(1), lambda e: rx.of(repr(e))),
        lambda: reactivex.on_error_resume_next(reactivex.of(1), lambda e: reactivex.of(repr(e)))),
    "on_error_resume_next_none": (lambda: rx.on_error_resume_next(), lambda: reactivex.on_error_resume_next()),
    "create": (lambda: rx.create(_pushes), lambda: reactivex.create(_pushes)),
    "create_raises": (lambda: rx.create(lambda o, s: boom()), lambda: reactivex.create(lambda o, s: boom())),
}


def _pushes(observer: Any, scheduler: Any) -> None:
    for x in (1, 2, 3):
        observer.on_next(x)
    observer.on_completed()
    observer.on_next(4)  # after the end: ignored by both


@pytest.mark.parametrize("name", sorted(SAME))
def test_equal_to_reactivex(name: str) -> None:
    ours, theirs = SAME[name]
    assert notes_ours(ours()) == notes_rx(theirs())


def test_pull_sources_emit_exactly_what_is_requested() -> None:
    calls: list[int] = []

    def iterate(x: int) -> int:
        calls.append(x)
        return x + 1

    for source in (rx.of(1, 2, 3, 4), rx.repeat_value(7), rx.generate(0, lambda x: True, iterate)):
        ts = TestSubscriber[Any](initial_request=2)
        source.subscribe(ts)
        assert len(ts.values) == 2 and not ts.done
        ts.request(1)
        assert len(ts.values) == 3
        ts.cancel()
    assert calls == [0, 1, 2]  # iterate ran for the 3 requested items, the last one to see the end


def test_create_buffers_pushes_up_to_capacity_then_applies_overflow() -> None:
    def five(observer: Any, scheduler: Any) -> Callable[[], None]:
        for x in range(5):
            observer.on_next(x)
        return lambda: disposed.append(True)

    for overflow, values, error in (("drop_incoming", [0, 1], None), ("drop_oldest", [3, 4], None),
                                    ("error", [0, 1], BufferOverflowError)):
        disposed: list[bool] = []
        ts = TestSubscriber[Any](initial_request=0)
        rx.create(five, capacity=2, overflow=overflow).subscribe(ts)
        ts.request(10)
        assert ts.values == values
        assert (type(ts.error) if ts.error else None) is error
        if overflow == "error":
            assert disposed == [True]
        else:
            ts.cancel()
            assert disposed == [True]
    with pytest.raises(ValueError, match="cannot be slowed"):
        rx.create(five, overflow="backpressure")
    with pytest.raises(ValueError):
        rx.create(five, capacity=0)


def test_using_releases_the_resource_after_completion_error_and_cancel() -> None:
    class Resource:
        def __init__(self) -> None:
            self.disposed = 0

        def dispose(self) -> None:
            self.disposed += 1

    made: list[Resource] = []

    def factory() -> Resource:
        made.append(Resource())
        return made[-1]

    ts = TestSubscriber[Any](initial_request=UNBOUNDED)
    rx.using(factory, lambda r: rx.of(1, 2)).subscribe(ts)
    assert ts.values == [1, 2] and ts.completed and made[-1].disposed == 1
    ts = TestSubscriber[Any](initial_request=UNBOUNDED)
    rx.using(factory, lambda r: rx.throw(ValueError("x"))).subscribe(ts)
    assert isinstance(ts.error, ValueError) and made[-1].disposed == 1
    pub = TestPublisher[int]()
    ts = TestSubscriber[Any](initial_request=1)
    rx.using(factory, lambda r: pub).subscribe(ts)
    assert pub.requests == [1] and made[-1].disposed == 0
    ts.cancel()
    assert pub.cancelled and made[-1].disposed == 1
    ts = TestSubscriber[Any](initial_request=1)
    rx.using(factory, lambda r: boom()).subscribe(ts)
    assert isinstance(ts.error, ValueError) and made[-1].disposed == 1
    assert notes_ours(rx.using(lambda: None, lambda r: rx.of(r is None))) == [("N", True), ("C",)]


@pytest.mark.virtual
async def test_amb_takes_the_first_source_to_signal_and_cancels_the_others() -> None:
    slow, fast = rx.timer(2.0).pipe(ops.map(lambda _: "slow")), rx.timer(1.0).pipe(ops.map(lambda _: "fast"))
    assert await rx.amb(slow, fast).to_list() == ["fast"]
    pubs = [TestPublisher[int]() for _ in range(3)]
    ts = TestSubscriber[Any](initial_request=2)
    rx.amb(*pubs).subscribe(ts)
    assert [p.requests for p in pubs] == [[2], [2], [2]]
    pubs[1].emit(5)
    assert pubs[0].cancelled and pubs[2].cancelled and not pubs[1].cancelled
    pubs[1].emit(6).complete()
    assert ts.values == [5, 6] and ts.completed
    ts = TestSubscriber[Any](initial_request=1)
    rx.amb(rx.never(), rx.empty()).subscribe(ts)
    assert ts.completed  # a completion wins too


def test_amb_of_nothing_never_signals_and_sources_must_be_flowables() -> None:
    ts = TestSubscriber[Any](initial_request=1)
    rx.amb().subscribe(ts)
    assert not ts.done and ts.values == []
    ts.cancel()
    with pytest.raises(TypeError):
        rx.amb([1, 2])  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        rx.fork_join()


def test_fork_join_reads_in_rounds_only_once_asked() -> None:
    a, b = TestPublisher[int](), TestPublisher[int]()
    ts = TestSubscriber[Any](initial_request=0)
    rx.fork_join(a, b).subscribe(ts)
    assert a.requests == [] and b.requests == []  # lazy: nobody asked for the result yet
    ts.request(1)
    assert a.requests == [256] and b.requests == [256]
    a.emit(*range(256))
    assert a.requests == [256, 192]  # rounds (75 % replenish), never UNBOUNDED
    a.complete()
    b.emit(9).complete()
    assert ts.values == [(255, 9)] and ts.completed


async def test_start_runs_a_function_on_a_thread_once_for_every_subscriber() -> None:
    threads: list[int] = []

    def work() -> int:
        threads.append(threading.get_ident())
        return 7

    source = rx.start(work)
    assert await source.to_list() == [7]
    assert await source.to_list() == [7]
    assert len(threads) == 1 and threads[0] != threading.get_ident()

    async def job() -> str:
        await asyncio.sleep(0)
        return "done"

    assert await rx.start(job).to_list() == ["done"]
    with pytest.raises(ValueError, match="boom"):
        await rx.start(boom).to_list()

