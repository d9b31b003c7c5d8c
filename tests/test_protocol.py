"""One test (at least) per rule of DESIGN §2, checked at the public boundary."""

from __future__ import annotations

from typing import Any

import pytest

import rxpipe as rx
from rxpipe import UNBOUNDED, MissingBackpressureError, Subscriber, Subscription
from rxpipe.testing import TestPublisher, TestSubscriber


class Recorder(Subscriber[Any]):
    """Records every signal, in order, as (kind, value)."""

    def __init__(self, on_next_hook: Any = None, initial: int = 0) -> None:
        self.signals: list[tuple[str, Any]] = []
        self.subscription: Subscription | None = None
        self.on_next_hook = on_next_hook
        self.initial = initial

    def on_subscribe(self, subscription: Subscription) -> None:
        self.signals.append(("subscribe", None))
        self.subscription = subscription
        if self.initial:
            subscription.request(self.initial)

    def on_next(self, item: Any) -> None:
        self.signals.append(("next", item))
        if self.on_next_hook is not None:
            self.on_next_hook(self, item)

    def on_error(self, error: BaseException) -> None:
        self.signals.append(("error", error))

    def on_complete(self) -> None:
        self.signals.append(("complete", None))

    @property
    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.signals]


# §1.9 -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("source", [rx.range(0, 3), rx.empty(), rx.error(KeyError("k")), rx.just(1)])
def test_on_subscribe_is_first_and_once(source: rx.Flowable[Any]) -> None:
    recorder = Recorder(initial=10)
    source.subscribe(recorder)
    assert recorder.kinds[0] == "subscribe"
    assert recorder.kinds.count("subscribe") == 1


# §1.1 -----------------------------------------------------------------------------------------
def test_request_3_then_2_more_gives_exactly_those_items() -> None:
    ts = TestSubscriber[int]()
    rx.range(0, 10).subscribe(ts)
    assert ts.values == []
    ts.request(3)
    assert ts.values == [0, 1, 2]
    assert not ts.completed
    ts.request(2)
    assert ts.values == [0, 1, 2, 3, 4]
    assert not ts.completed


def test_completion_after_fewer_than_requested() -> None:
    ts = TestSubscriber[int](initial_request=20)
    rx.range(0, 10).subscribe(ts)
    assert ts.values == list(range(10))
    assert ts.completed and ts.error is None


def test_completion_when_demand_exactly_met_needs_no_further_request() -> None:
    for source in (rx.range(0, 3), rx.from_iterable(iter([0, 1, 2])), rx.from_iterable(x for x in range(3))):
        ts = TestSubscriber[int](initial_request=3)
        source.subscribe(ts)
        assert ts.values == [0, 1, 2]
        assert ts.completed


@pytest.mark.parametrize("source, kinds", [
    (rx.empty(), ["subscribe", "complete"]),
    (rx.from_iterable([]), ["subscribe", "complete"]),
    (rx.range(5, 5), ["subscribe", "complete"]),
    (rx.error(KeyError("k")), ["subscribe", "error"]),
])
def test_empty_and_error_signal_without_any_request(source: rx.Flowable[Any], kinds: list[str]) -> None:
    recorder = Recorder()
    source.subscribe(recorder)
    assert recorder.kinds == kinds


# §3.9 -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [0, -1])
def test_request_non_positive_signals_value_error_without_raising(n: int) -> None:
    ts = TestSubscriber[int]()
    rx.range(0, 10).subscribe(ts)
    ts.request(n)  # must not raise
    assert isinstance(ts.error, ValueError)
    assert "§3.9" in str(ts.error)
    assert ts.values == []
    ts.request(5)  # the subscription is cancelled: nothing more comes
    assert ts.values == []


def test_request_zero_inside_on_next_is_signalled_after_it_returns() -> None:
    def hook(recorder: Recorder, item: int) -> None:
        assert recorder.subscription is not None
        recorder.subscription.request(0)
        recorder.signals.append(("returned", item))

    recorder = Recorder(on_next_hook=hook, initial=5)
    rx.range(0, 10).subscribe(recorder)
    assert recorder.kinds == ["subscribe", "next", "returned", "error"]
    assert isinstance(recorder.signals[-1][1], ValueError)


# §3.17 ----------------------------------------------------------------------------------------
@pytest.mark.virtual
async def test_demand_saturates_at_unbounded() -> None:
    recorder = Recorder()
    rx.interval(1.0).subscribe(recorder)  # emits only on its timer, so demand stays put
    inner = recorder.subscription.upstream  # type: ignore[union-attr]  # the source's counter
    recorder.subscription.request(UNBOUNDED)  # type: ignore[union-attr]
    recorder.subscription.request(UNBOUNDED)  # type: ignore[union-attr]
    recorder.subscription.request(7)  # type: ignore[union-attr]
    assert inner.requested == UNBOUNDED
    recorder.subscription.cancel()  # type: ignore[union-attr]


def test_drain_subscription_counter_saturates() -> None:
    from rxpipe.stage import DrainSubscription

    class Silent(DrainSubscription):
        def _drain(self) -> None:  # emits nothing: only the counter matters here
            pass

    counter = Silent(Recorder())
    counter.request(UNBOUNDED)
    counter.request(UNBOUNDED)
    counter.request(7)
    assert counter.requested == UNBOUNDED


def test_unbounded_requests_through_the_strict_boundary_saturate() -> None:
    ts = TestSubscriber[int]()
    pub = TestPublisher[int]()
    pub.subscribe(ts)
    ts.request(UNBOUNDED)
    ts.request(UNBOUNDED)
    ts.request(7)
    assert ts.subscription.upstream_outstanding == UNBOUNDED  # type: ignore[union-attr]
    pub.emit(0, 1, 2)
    pub.complete()
    assert ts.values == [0, 1, 2] and ts.completed


# §1.3 / §3.3 ----------------------------------------------------------------------------------
def test_request_one_inside_on_next_never_recurses() -> None:
    count = 0

    def hook(recorder: Recorder, item: int) -> None:
        nonlocal count
        count += 1
        recorder.subscription.request(1)  # type: ignore[union-attr]

    class Lean(Recorder):
        def on_next(self, item: Any) -> None:  # don't record 100k tuples
            hook(self, item)

    recorder = Lean(initial=1)
    rx.range(0, 100_000).subscribe(recorder)
    assert count == 100_000
    assert recorder.kinds == ["subscribe", "complete"]


def test_request_one_inside_on_next_over_a_million_items_through_fused_operators() -> None:
    from rxpipe import operators as ops

    seen = 0

    def hook(recorder: Recorder, item: int) -> None:
        nonlocal seen
        seen += 1
        recorder.subscription.request(1)  # type: ignore[union-attr]

    class Lean(Recorder):
        def on_next(self, item: Any) -> None:
            hook(self, item)

    recorder = Lean(initial=1)
    rx.range(0, 1_000_000).pipe(ops.map(lambda x: x + 1), ops.filter(lambda x: x % 2 == 0)).subscribe(recorder)
    assert seen == 500_000
    assert recorder.kinds == ["subscribe", "complete"]


# §3.5–3.7 -------------------------------------------------------------------------------------
def test_cancel_is_idempotent_and_final() -> None:
    ts = TestSubscriber[int](initial_request=2)
    rx.range(0, 10).subscribe(ts)
    ts.cancel()
    ts.cancel()
    ts.request(5)
    ts.request(0)  # after cancel even an invalid request is a no-op
    assert ts.values == [0, 1]
    assert ts.error is None and not ts.completed


def test_cancel_inside_on_next_stops_a_synchronous_source_at_once() -> None:
    def hook(recorder: Recorder, item: int) -> None:
        if item == 3:
            recorder.subscription.cancel()  # type: ignore[union-attr]

    recorder = Recorder(on_next_hook=hook, initial=UNBOUNDED)
    rx.range(0, 1_000_000).subscribe(recorder)
    assert recorder.signals == [("subscribe", None), ("next", 0), ("next", 1), ("next", 2), ("next", 3)]


def test_cancel_closes_a_generator_source() -> None:
    closed: list[bool] = []

    def gen() -> Any:
        try:
            yield from range(100)
        finally:
            closed.append(True)

    ts = TestSubscriber[int](initial_request=2)
    rx.from_iterable(gen()).subscribe(ts)
    ts.cancel()
    assert ts.values == [0, 1]
    assert closed == [True]


# §2.13 ----------------------------------------------------------------------------------------
def test_subscriber_whose_on_next_raises_is_cancelled_and_logged(rx_errors: Any) -> None:
    pulled: list[int] = []

    def gen() -> Any:
        for i in range(10):
            pulled.append(i)
            yield i

    def hook(recorder: Recorder, item: int) -> None:
        if item == 2:
            raise RuntimeError("subscriber bug")

    recorder = Recorder(on_next_hook=hook, initial=UNBOUNDED)
    rx.from_iterable(gen()).subscribe(recorder)
    assert recorder.kinds == ["subscribe", "next", "next", "next"]
    assert pulled == [0, 1, 2]
    assert len(rx_errors) == 1
    assert "on_next raised" in rx_errors[0].getMessage()
    assert rx_errors[0].exc_info[0] is RuntimeError  # type: ignore[index]


def test_callback_subscriber_whose_on_next_raises_goes_to_on_error() -> None:
    errors: list[BaseException] = []
    seen: list[int] = []

    def on_next(x: int) -> None:
        seen.append(x)
        if x == 1:
            raise KeyError("boom")

    rx.range(0, 5).subscribe(on_next, errors.append)
    assert seen == [0, 1]
    assert len(errors) == 1 and isinstance(errors[0], KeyError)


def test_callback_subscriber_without_on_error_logs_the_error(rx_errors: Any) -> None:
    rx.error(KeyError("lost?")).subscribe(on_next=print)
    assert len(rx_errors) == 1
    assert rx_errors[0].exc_info[1].args == ("lost?",)  # type: ignore[index]


# §1.11 ----------------------------------------------------------------------------------------
def test_cold_sources_are_unicast() -> None:
    source = rx.range(0, 5)
    first, second = TestSubscriber[int](initial_request=2), TestSubscriber[int](initial_request=4)
    source.subscribe(first)
    source.subscribe(second)
    assert first.values == [0, 1]
    assert second.values == [0, 1, 2, 3]
    first.request(10)
    assert first.values == [0, 1, 2, 3, 4] and first.completed
    assert second.values == [0, 1, 2, 3] and not second.completed


def test_defer_calls_its_factory_per_subscription() -> None:
    calls: list[int] = []

    def factory() -> rx.Flowable[int]:
        calls.append(1)
        return rx.just(len(calls))

    source = rx.defer(factory)
    a, b = TestSubscriber[int](initial_request=5), TestSubscriber[int](initial_request=5)
    source.subscribe(a)
    source.subscribe(b)
    assert (a.values, b.values) == ([1], [2])
    assert a.completed and b.completed


def test_defer_factory_raising_signals_on_error() -> None:
    recorder = Recorder()
    rx.defer(lambda: 1 / 0).subscribe(recorder)
    assert recorder.kinds == ["subscribe", "error"]
    assert isinstance(recorder.signals[1][1], ZeroDivisionError)


# §1.1 violated upstream -----------------------------------------------------------------------
class Firehose(rx.Publisher[int]):
    """A non-compliant Publisher: emits 5 items whatever was requested."""

    def __init__(self) -> None:
        self.cancelled = 0
        self.requests: list[int] = []

    def subscribe(self, subscriber: Subscriber[int]) -> None:
        outer = self

        class Sub(Subscription):
            def request(self, n: int) -> None:
                outer.requests.append(n)
                for i in range(5):
                    subscriber.on_next(i)

            def cancel(self) -> None:
                outer.cancelled += 1

        subscriber.on_subscribe(Sub())


def test_upstream_emitting_beyond_demand_gets_missing_backpressure_error() -> None:
    firehose = Firehose()
    ts = TestSubscriber[int]()
    rx.from_publisher(firehose).subscribe(ts)
    ts.request(2)
    assert ts.values == [0, 1]
    assert isinstance(ts.error, MissingBackpressureError)
    assert firehose.cancelled == 1
    assert firehose.requests == [2]


def test_from_publisher_forwards_requests_unchanged_without_prefetch() -> None:
    from rxpipe.testing import TestPublisher

    publisher = TestPublisher[int]()
    ts = TestSubscriber[int]()
    rx.from_publisher(Wrapped(publisher)).subscribe(ts)
    assert publisher.requests == []
    ts.request(3)
    ts.request(4)
    assert publisher.requests == [3, 4]
    publisher.emit(1, 2)
    assert ts.values == [1, 2]
    ts.cancel()
    assert publisher.cancelled


class Wrapped(rx.Publisher[int]):
    """Hides a Flowable behind the bare Publisher interface."""

    def __init__(self, inner: rx.Publisher[int]) -> None:
        self.inner = inner

    def subscribe(self, subscriber: Subscriber[int]) -> None:
        self.inner.subscribe(subscriber)


def test_from_publisher_guards_request_zero_even_if_the_publisher_ignores_it() -> None:
    firehose = Firehose()
    ts = TestSubscriber[int]()
    rx.from_publisher(firehose).subscribe(ts)
    ts.request(0)
    assert isinstance(ts.error, ValueError)
    assert firehose.cancelled == 1
    assert firehose.requests == []


def test_from_publisher_rejects_none_items() -> None:
    class NoneEmitter(rx.Publisher[Any]):
        def subscribe(self, subscriber: Subscriber[Any]) -> None:
            class Sub(Subscription):
                def request(self, n: int) -> None:
                    subscriber.on_next(None)

                def cancel(self) -> None:
                    pass

            subscriber.on_subscribe(Sub())

    ts = TestSubscriber[Any](initial_request=1)
    rx.from_publisher(NoneEmitter()).subscribe(ts)
    assert ts.values == []
    assert isinstance(ts.error, TypeError)


def test_second_on_subscribe_is_cancelled() -> None:
    from rxpipe._subscribers import StrictSubscriber

    cancelled: list[int] = []

    class Sub(Subscription):
        def request(self, n: int) -> None: ...

        def cancel(self) -> None:
            cancelled.append(1)

    recorder = Recorder()
    strict = StrictSubscriber(recorder)
    strict.on_subscribe(Sub())
    strict.on_subscribe(Sub())
    assert recorder.kinds == ["subscribe"]
    assert cancelled == [1]


def test_nothing_after_a_terminal_signal() -> None:
    from rxpipe._subscribers import StrictSubscriber

    recorder = Recorder()
    strict = StrictSubscriber(recorder)
    strict.on_subscribe(_NoopSub())
    strict.request(5)
    strict.on_complete()
    strict.on_next(1)
    strict.on_error(KeyError())
    strict.on_complete()
    assert recorder.kinds == ["subscribe", "complete"]


class _NoopSub(Subscription):
    def request(self, n: int) -> None: ...

    def cancel(self) -> None: ...


def test_subscribe_rejects_non_subscribers() -> None:
    with pytest.raises(TypeError, match="Subscriber or callables"):
        rx.range(0, 1).subscribe(42)


def test_subscriber_abc_accepts_duck_typed_objects() -> None:
    class Duck:
        def on_subscribe(self, s: Subscription) -> None:
            s.request(3)

        def on_next(self, item: int) -> None:
            self.last = item

        def on_error(self, error: BaseException) -> None: ...

        def on_complete(self) -> None:
            self.done = True

    duck = Duck()
    assert isinstance(duck, Subscriber)
    rx.range(0, 3).subscribe(duck)  # type: ignore[arg-type]
    assert duck.last == 2 and duck.done


@pytest.mark.parametrize("n", [0.5, 2.5, "3", None, True])
def test_request_with_a_non_int_signals_value_error_and_never_raises(n: Any) -> None:
    for source in (rx.range(0, 1000), rx.range(0, 1000).pipe(ops_map_identity()),
                   rx.range(0, 1000).pipe(ops_buffer(16))):
        ts = TestSubscriber[int]()
        source.subscribe(ts)
        ts.request(n)  # must not raise
        assert ts.values == []
        assert isinstance(ts.error, ValueError) and "§3.9" in str(ts.error)


def ops_map_identity() -> Any:
    from rxpipe import operators as ops

    return ops.map(lambda x: x)


def ops_buffer(n: int) -> Any:
    from rxpipe import operators as ops

    return ops.buffer(n)


@pytest.mark.parametrize("chain", ["plain", "fused", "boundary"])
def test_iterable_sources_never_emit_none(chain: str) -> None:
    from rxpipe import operators as ops

    source = rx.from_iterable([1, None, 3])
    if chain == "fused":
        source = source.pipe(ops.map(lambda x: x))
    elif chain == "boundary":
        source = source.pipe(ops.buffer(4))
    ts = TestSubscriber[int](initial_request=5)
    source.subscribe(ts)
    assert ts.values == [1]
    assert isinstance(ts.error, TypeError)
    assert str(ts.error) == "the source iterable yielded None; items are never None (Reactive Streams §2.13)"
