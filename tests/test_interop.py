"""reactivex interop both ways (DESIGN §3): from_observable and Flowable.to_observable()."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
import reactivex
from reactivex.subject import Subject

import rxpipe as rx
from rxpipe import UNBOUNDED, BufferOverflowError
from rxpipe import operators as ops
from rxpipe.metrics import live_stages
from rxpipe.testing import Marbles, TestPublisher, TestSubscriber


def stage_stats(name: str) -> Any:
    (stage,) = [s for s in live_stages() if s.statistics().stage == name]
    return stage.statistics()


# from_observable --------------------------------------------------------------------------------
async def test_of_1_2_3_becomes_a_flowable() -> None:
    assert await rx.from_observable(reactivex.of(1, 2, 3), 2).to_list() == [1, 2, 3]


def test_a_synchronous_observable_meets_the_demand_requested_in_on_subscribe() -> None:
    ts = TestSubscriber[int](initial_request=UNBOUNDED)
    rx.from_observable(reactivex.from_iterable(range(1000)), 1).subscribe(ts)
    assert ts.values == list(range(1000)) and ts.completed


@pytest.mark.parametrize("overflow, values", [("drop_incoming", [1, 2]), ("drop_oldest", [4, 5])])
def test_pushes_before_any_demand_are_shed_by_the_overflow_strategy(overflow: str, values: list[int]) -> None:
    subject: Subject[int] = Subject()
    ts = TestSubscriber[int]()
    rx.from_observable(subject, 2, overflow, name=f"obs_{overflow}").subscribe(ts)
    for i in range(1, 6):
        subject.on_next(i)
    stats = stage_stats(f"obs_{overflow}")
    assert stats.buffered == 2 and stats.capacity == 2 and stats.items_in == 5
    assert stats.dropped == {overflow: 3}
    subject.on_completed()
    assert ts.values == [] and not ts.done  # completion waits behind the buffered items
    ts.request(10)
    assert ts.values == values and ts.completed


class Told:
    """An item that records the reasons it was dropped for (``on_discard``)."""

    def __init__(self, n: int, log: list[tuple[int, str]]) -> None:
        self.n = n
        self.log = log

    def on_discard(self, reason: str) -> None:
        self.log.append((self.n, reason))


@pytest.mark.parametrize("overflow, dropped, kept", [
    ("drop_incoming", [(3, "drop_incoming"), (4, "drop_incoming"), (5, "drop_incoming")], [1, 2]),
    ("drop_oldest", [(1, "drop_oldest"), (2, "drop_oldest"), (3, "drop_oldest")], [4, 5]),
    ("error", [(3, "error")], [1, 2]),
])
def test_every_shed_item_is_told_through_on_discard(overflow: str, dropped: list[tuple[int, str]],
                                                     kept: list[int]) -> None:
    log: list[tuple[int, str]] = []
    subject: Subject[Told] = Subject()
    ts = TestSubscriber[Told]()
    rx.from_observable(subject, 2, overflow).subscribe(ts)
    for i in range(1, 6):
        subject.on_next(Told(i, log))
    assert log == dropped  # as buffer does: a dropped request's reply is failed, not left pending
    ts.request(10)
    assert [t.n for t in ts.values] == kept


def test_overflow_error_delivers_the_buffer_then_buffer_overflow_error() -> None:
    subject: Subject[int] = Subject()
    ts = TestSubscriber[int]()
    rx.from_observable(subject, 2, "error", name="obs_error").subscribe(ts)
    for i in range(1, 6):
        subject.on_next(i)
    assert not subject.observers  # disposed at the overflow (item 3)
    assert stage_stats("obs_error").dropped == {"error": 1}
    assert ts.error is None
    ts.request(1)
    assert ts.values == [1] and ts.error is None
    ts.request(1)
    assert ts.values == [1, 2]
    assert isinstance(ts.error, BufferOverflowError)


def test_error_is_the_default_overflow() -> None:
    subject: Subject[int] = Subject()
    ts = TestSubscriber[int]()
    rx.from_observable(subject, 1).subscribe(ts)
    subject.on_next(1)
    subject.on_next(2)
    ts.request(5)
    assert ts.values == [1] and isinstance(ts.error, BufferOverflowError)


def test_backpressure_is_refused_because_a_push_source_cannot_be_slowed() -> None:
    with pytest.raises(ValueError, match="a push source cannot be slowed"):
        rx.from_observable(reactivex.of(1), 4, "backpressure")


@pytest.mark.parametrize("capacity, overflow", [(4, "latest"), (0, "error"), (-1, "error"), (True, "error")])
def test_invalid_arguments_raise_value_error(capacity: Any, overflow: str) -> None:
    with pytest.raises(ValueError):
        rx.from_observable(reactivex.of(1), capacity, overflow)


def test_a_non_observable_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="Observable"):
        rx.from_observable([1, 2, 3], 4)  # type: ignore[arg-type]


def test_delivery_follows_demand_item_by_item() -> None:
    subject: Subject[int] = Subject()
    ts = TestSubscriber[int]()
    rx.from_observable(subject, 8).subscribe(ts)
    subject.on_next(1)
    subject.on_next(2)
    ts.request(1)
    assert ts.values == [1]
    subject.on_next(3)
    ts.request(1)
    assert ts.values == [1, 2]
    ts.request(5)
    assert ts.values == [1, 2, 3]
    subject.on_next(4)  # demand outstanding: delivered at once
    assert ts.values == [1, 2, 3, 4]


def test_subscribes_to_the_observable_inside_subscribe_once_per_subscriber() -> None:
    subscriptions: list[int] = []

    def on_subscribe(observer: Any, scheduler: Any = None) -> Any:
        subscriptions.append(1)
        observer.on_next(len(subscriptions))
        observer.on_completed()
        return reactivex.disposable.Disposable()

    flow = rx.from_observable(reactivex.create(on_subscribe), 4)
    assert subscriptions == []  # nothing happens before subscribe()
    first, second = TestSubscriber[int](initial_request=9), TestSubscriber[int](initial_request=9)
    flow.subscribe(first)
    flow.subscribe(second)
    assert first.values == [1] and second.values == [2]
    assert first.completed and second.completed


def test_cancel_disposes_the_observable_subscription_and_frees_the_buffer() -> None:
    subject: Subject[int] = Subject()
    ts = TestSubscriber[int]()
    rx.from_observable(subject, 4, "drop_oldest", name="obs_cancel").subscribe(ts)
    subject.on_next(1)
    assert subject.observers
    ts.cancel()
    assert not subject.observers
    assert stage_stats("obs_cancel").buffered == 0
    subject.on_next(2)
    assert ts.values == [] and not ts.done


def test_cancel_from_inside_on_next_of_a_synchronous_observable() -> None:
    seen: list[int] = []
    handle = rx.from_observable(reactivex.from_iterable(range(100)), 4).pipe(ops.take(3)).subscribe(seen.append)
    assert seen == [0, 1, 2] and handle.done


def test_an_observable_error_follows_the_buffered_items() -> None:
    subject: Subject[int] = Subject()
    ts = TestSubscriber[int]()
    rx.from_observable(subject, 4).subscribe(ts)
    boom = RuntimeError("push source failed")
    subject.on_next(1)
    subject.on_error(boom)
    assert ts.error is None
    ts.request(1)
    assert ts.values == [1] and ts.error is boom


def test_a_pushed_none_is_a_type_error_and_disposes_the_observable() -> None:
    subject: Subject[Any] = Subject()
    ts = TestSubscriber[int]()
    rx.from_observable(subject, 4).subscribe(ts)
    subject.on_next(1)
    subject.on_next(None)
    assert not subject.observers
    assert isinstance(ts.error, TypeError) and "§2.13" in str(ts.error)


def test_an_observable_whose_subscribe_raises_signals_the_error() -> None:
    boom = OSError("cannot connect")

    class Broken:
        def subscribe(self, **_: Any) -> Any:
            raise boom

    ts = TestSubscriber[int](initial_request=1)
    rx.from_observable(Broken(), 4).subscribe(ts)  # type: ignore[arg-type]
    assert ts.error is boom


async def test_pushes_from_another_thread_hop_to_the_event_loop() -> None:
    subject: Subject[int] = Subject()
    ts = TestSubscriber[int](initial_request=UNBOUNDED)
    threads: set[int] = set()
    rx.from_observable(subject, 100).pipe(ops.tap(lambda _: threads.add(threading.get_ident()))).subscribe(ts)

    def producer() -> None:
        for i in range(50):
            subject.on_next(i)
        subject.on_completed()

    worker = threading.Thread(target=producer)
    worker.start()
    await ts.await_done(timeout=5)
    worker.join()
    assert ts.values == list(range(50)) and ts.completed
    assert threads == {threading.get_ident()}


@pytest.mark.virtual
async def test_marbles_a_hot_push_source_sheds_while_there_is_no_demand() -> None:
    m = Marbles()
    hot = m.hot("-1-2-3-4-5-|")
    flow = rx.from_observable(hot.to_observable(), 2, "drop_oldest")
    result = await m.run(flow, demand="^1--------^9")
    result.expect("-1--------(45)|")  # 2 and 3 evicted by 4 and 5
    assert hot.request_log == [(0, UNBOUNDED)]  # to_observable: pull became push


# to_observable ----------------------------------------------------------------------------------
def test_to_observable_of_range_delivers_and_completes() -> None:
    items: list[int] = []
    completed: list[bool] = []
    rx.range(0, 3).to_observable().subscribe(items.append, on_completed=lambda: completed.append(True))
    assert items == [0, 1, 2] and completed == [True]


def test_to_observable_requests_unbounded_and_dispose_cancels() -> None:
    pub = TestPublisher[int]()
    items: list[int] = []
    disposable = pub.to_observable().subscribe(items.append)
    assert pub.requests == [UNBOUNDED]
    pub.emit(1, 2)
    disposable.dispose()
    assert pub.cancelled
    assert items == [1, 2]


def test_to_observable_passes_errors() -> None:
    boom = ValueError("bad")
    errors: list[Exception] = []
    rx.error(boom).to_observable().subscribe(on_error=errors.append)
    assert errors == [boom]


def test_to_observable_subscribes_per_observer() -> None:
    pub = TestPublisher[int]()
    observable = pub.to_observable()
    assert pub.subscribe_count == 0
    observable.subscribe()
    observable.subscribe()
    assert pub.subscribe_count == 2


def test_to_observable_through_reactivex_operators_and_back() -> None:
    from reactivex import operators as rx_ops

    observable = rx.range(0, 10).to_observable().pipe(rx_ops.map(lambda x: x * 3), rx_ops.filter(lambda x: x % 2 == 0))
    ts = TestSubscriber[int](initial_request=UNBOUNDED)
    rx.from_observable(observable, 16).subscribe(ts)
    assert ts.values == [0, 6, 12, 18, 24] and ts.completed


async def test_to_observable_runs_on_the_loop_for_loop_driven_sources() -> None:
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    items: list[int] = []

    async def numbers() -> Any:
        for i in range(3):
            await asyncio.sleep(0)
            yield i

    rx.from_async_iterable(numbers()).to_observable().subscribe(
        items.append, on_completed=lambda: done.set_result(None))
    await asyncio.wait_for(done, 5)
    assert items == [0, 1, 2]
