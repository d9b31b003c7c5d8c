"""rxpipe.stage, piece by piece: the upstream link's five rules, drop-and-tell, SerialLoop, capabilities."""

from __future__ import annotations

from collections import deque
from typing import Any

import pytest

import rxpipe as rx
from rxpipe import UNBOUNDED, MissingBackpressureError
from rxpipe import operators as ops
from rxpipe.stage import (
    LINK_SLOTS,
    NO_CAPABILITIES,
    Capabilities,
    QueueDrainSubscription,
    SerialLoop,
    StageCounters,
    StageStatistics,
    UpstreamLink,
    offer,
    shed,
)
from rxpipe.testing import TestPublisher, TestSubscriber


class Told:
    def __init__(self, name: str, log: list[tuple[str, str]]) -> None:
        self.name = name
        self.log = log

    def on_discard(self, reason: str) -> None:
        self.log.append((self.name, reason))


class Relay(QueueDrainSubscription, UpstreamLink):
    """The smallest stage: a prefetch boundary built only from the public pieces."""

    __slots__ = LINK_SLOTS

    def __init__(self, downstream: Any, prefetch: int, limit: int | None = None) -> None:
        super().__init__(downstream)
        self.link_upstream("relay_stage", prefetch, limit)

    def on_next(self, item: Any) -> None:
        if self.accept(item):
            self.queue.append(item)
            self.drain()

    def _held_items(self) -> Any:
        return self.queue

    def _on_delivered(self, count: int) -> None:
        self.replenish(count)

    def _release(self) -> None:
        self.cancel_upstream()
        self.queue.clear()

    def statistics(self) -> StageStatistics:
        return StageStatistics(self.counters.stage, self.requested, len(self.queue), 0, 0, self.emitted)


class RelayFlowable(rx.Flowable[Any]):
    kind = "relay"
    passes_capabilities = True

    def __init__(self, source: rx.Flowable[Any], prefetch: int, limit: int | None = None) -> None:
        super().__init__(upstreams=(source,))
        self.source, self.prefetch, self.limit = source, prefetch, limit

    def _subscribe(self, subscriber: Any) -> None:
        self.source._subscribe(Relay(subscriber, self.prefetch, self.limit))


def relay(prefetch: int, limit: int | None = None) -> tuple[TestPublisher[Any], TestSubscriber[Any]]:
    pub = TestPublisher[Any]()
    ts = TestSubscriber[Any]()
    RelayFlowable(pub, prefetch, limit).subscribe(ts)
    return pub, ts


def test_prefetch_then_the_limit_rate_replenish_rule() -> None:
    pub, ts = relay(8)  # limit = 8 - 8 // 4 = 6
    assert pub.requests == [8]
    pub.emit(*range(8))
    ts.request(5)
    assert pub.requests == [8]  # 5 out: not yet 6
    ts.request(1)
    assert pub.requests == [8, 6] and pub.outstanding == 6
    ts.request(20)
    pub.emit(*range(8, 20))
    assert ts.values == list(range(20)) and pub.requests == [8, 6, 6, 6]


def test_an_explicit_limit_and_bad_values() -> None:
    pub, ts = relay(4, 1)
    ts.request(3)
    pub.emit(1, 2, 3)
    assert pub.requests == [4, 1, 1, 1]
    for bad in ((0, None), (4, 5)):  # raised while subscribing: signalled, as DESIGN §2 says
        _, failed = relay(*bad)
        assert isinstance(failed.error, ValueError)


def test_overrun_tells_the_item_and_what_is_held_cancels_and_fails() -> None:
    log: list[tuple[str, str]] = []
    pub, ts = relay(2)
    pub.emit(Told("a", log), Told("b", log), Told("c", log))  # c is beyond the 2 requested
    assert log == [("a", "error"), ("b", "error"), ("c", "error")]
    assert isinstance(ts.error, MissingBackpressureError) and "'relay_stage'" in str(ts.error)
    assert pub.cancel_count == 1
    assert ts.values == []


def test_late_items_and_a_second_terminal_signal_are_ignored() -> None:
    pub, ts = relay(4)
    ts.request(UNBOUNDED)
    pub.emit(1)
    pub.complete()
    assert ts.values == [1] and ts.completed
    pub.emit(2)  # after the end (a misbehaving publisher): ignored, not an overrun
    pub.error(RuntimeError("late"))
    assert ts.values == [1] and ts.error is None


def test_cancel_reaches_upstream_once_and_items_in_flight_are_ignored() -> None:
    pub, ts = relay(4)
    ts.cancel()
    ts.cancel()
    pub.emit(1, 2)  # in flight after the cancel (§3.12)
    assert pub.cancel_count == 1 and ts.values == [] and ts.error is None


def test_request_upstream_saturates_at_unbounded() -> None:
    class Unbounded(Relay):
        __slots__ = ()

        def _upstream_ready(self) -> None:
            self.request_upstream(UNBOUNDED)
            self.request_upstream(UNBOUNDED)
            self.request_upstream(5)

    pub = TestPublisher[Any]()
    ts = TestSubscriber[Any](initial_request=UNBOUNDED)
    link = Unbounded(ts, 4)
    pub.subscribe(link)
    assert link.upstream_outstanding == UNBOUNDED
    pub.emit(*range(10))
    assert link.upstream_outstanding == UNBOUNDED and ts.values == list(range(10))


def test_offer_queues_then_sheds_by_strategy_and_tells() -> None:
    class Holder:
        def __init__(self, overflow: str) -> None:
            self.queue: deque[Any] = deque()
            self.capacity = 2
            self.overflow = overflow
            self.counters = StageCounters("holder")
            self.received = 0
            self.drains = 0

        def drain(self) -> None:
            self.drains += 1

    outcomes = {}
    for overflow in ("drop_incoming", "drop_oldest", "error"):
        log: list[tuple[str, str]] = []
        holder = Holder(overflow)
        results = [offer(holder, Told(name, log)) for name in "abc"]
        outcomes[overflow] = (results, [t.name for t in holder.queue], log, holder.counters.dropped,
                              holder.received, holder.drains)
    assert outcomes == {
        "drop_incoming": ([False, False, False], ["a", "b"], [("c", "drop_incoming")], {"drop_incoming": 1}, 3, 2),
        "drop_oldest": ([False, False, False], ["b", "c"], [("a", "drop_oldest")], {"drop_oldest": 1}, 3, 2),
        "error": ([False, False, True], ["a", "b"], [("c", "error")], {"error": 1}, 3, 2),
    }
    queue: deque[Any] = deque([1])
    assert shed(queue, 2, "drop_oldest", StageCounters("s")) is False and list(queue) == [2]


def test_serial_loop_folds_reentrant_calls_without_recursion() -> None:
    runs: list[int] = []

    def step() -> None:
        runs.append(len(runs))
        if len(runs) < 100_000:
            loop()  # re-entrant: only marks the running loop as missed

    loop = SerialLoop(step)
    loop()
    assert len(runs) == 100_000 and not loop.running and not loop.missed


def test_capabilities_pass_through_any_number_of_pass_through_stages() -> None:
    batched = rx.range(0, 3).pipe(ops.batch(5))
    assert batched.capabilities == Capabilities(max_batch_size=5)
    chain = batched.pipe(ops.tap(print), ops.map(lambda b: b), ops.filter(bool), ops.buffer(4),
                         ops.timeout(1.0), ops.limit_rate(2), ops.rate_limit(5.0))
    assert RelayFlowable(chain, 4).capabilities == Capabilities(max_batch_size=5)
    assert batched.pipe(ops.scan(lambda acc, b: b, [])).capabilities is NO_CAPABILITIES
    assert batched.pipe(ops.map_async(lambda b: b)).capabilities is NO_CAPABILITIES  # type: ignore[arg-type]
    assert rx.range(0, 3).capabilities is NO_CAPABILITIES


# -- guards of the low-level layer ----------------------------------------------------------------------
class NoStatistics(QueueDrainSubscription, UpstreamLink):
    """A low-level stage that forgot statistics()."""

    def __init__(self, downstream: Any) -> None:
        super().__init__(downstream)
        self.link_upstream("no_statistics", 4)

    def on_next(self, item: Any) -> None:
        if self.accept(item):
            self.counters.items_in += 1
            self.queue.append(item)
            self.drain()

    def _on_delivered(self, count: int) -> None:
        self.counters.items_out += count
        self.replenish(count)


class NoStatisticsFlowable(rx.Flowable[Any]):
    def __init__(self, source: rx.Flowable[Any]) -> None:
        super().__init__(upstreams=(source,))
        self.source = source

    def _subscribe(self, subscriber: Any) -> None:
        self.source._subscribe(NoStatistics(subscriber))


def test_a_stage_without_statistics_is_an_error_at_subscribe_in_debug_mode() -> None:
    # rxpipe's pytest plugin turns debug mode on for the test run
    ts = TestSubscriber[Any](initial_request=1)
    NoStatisticsFlowable(rx.just(1)).subscribe(ts)
    assert isinstance(ts.error, TypeError) and "no statistics()" in str(ts.error)


def test_without_debug_mode_it_is_logged_once_and_its_counters_are_still_exported(caplog: Any) -> None:
    from prometheus_client import REGISTRY

    from rxpipe.stage import set_debug

    caplog.set_level("WARNING", logger="rxpipe")
    set_debug(False)
    try:
        results = []
        for _ in range(3):
            ts = TestSubscriber[Any](initial_request=UNBOUNDED)
            NoStatisticsFlowable(rx.just(1, 2)).subscribe(ts)
            results.append((ts.values, ts.completed))
            assert REGISTRY.get_sample_value("rxpipe_stage_items_total",
                                             {"stage": "no_statistics", "direction": "out"}) is not None
    finally:
        set_debug(True)
    assert results == [([1, 2], True)] * 3
    warnings = [r.getMessage() for r in caplog.records if "no statistics()" in r.getMessage()]
    assert len(warnings) == 1  # once per class and process, not once per subscription


def test_slots_without_link_slots_name_link_slots() -> None:
    class Slotted(QueueDrainSubscription, UpstreamLink):
        __slots__ = ("extra",)

        def __init__(self, downstream: Any) -> None:
            super().__init__(downstream)
            self.link_upstream("slotted", 4)

        def on_next(self, item: Any) -> None:
            pass

    with pytest.raises(TypeError, match=r"LINK_SLOTS"):
        Slotted(TestSubscriber[Any]())
