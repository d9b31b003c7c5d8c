"""``rxpipe.stage.Stage`` and ``operator``: the kit owns credit, order, timers, errors and statistics.

Every stage here is written as a user would, with public names only.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from typing import Any

import pytest
from prometheus_client import REGISTRY

import rxpipe as rx
from rxpipe import UNBOUNDED
from rxpipe import operators as ops
from rxpipe.stage import Capabilities, Input, Stage, operator
from rxpipe.testing import TestPublisher, TestSubscriber

from .user_stages import Debounce


class DistinctUntilChanged(Stage):
    prefetch = 16

    def __init__(self, key_mapper: Any = None) -> None:
        self.key_mapper, self.last = key_mapper, Stage.NOTHING

    def on_next(self, item: Any) -> None:
        key = self.key_mapper(item) if self.key_mapper else item
        if key != self.last:
            self.emit(item)
        self.last = key


distinct_until_changed = operator(DistinctUntilChanged)


class Triple(Stage):
    prefetch = 4

    def on_next(self, item: Any) -> None:
        for _ in range(3):
            self.emit(item)


triple = operator(Triple)


debounce = operator(Debounce)


def subscribe(flowable: rx.Flowable[Any], initial: int = 0) -> TestSubscriber[Any]:
    ts = TestSubscriber[Any](initial_request=initial)
    flowable.subscribe(ts)
    return ts


# -- credit ----------------------------------------------------------------------------------------
def test_a_filtering_stage_under_request_1_never_stalls_over_a_long_run_of_dropped_items() -> None:
    pub = TestPublisher[int]()
    ts = subscribe(pub.pipe(distinct_until_changed()), initial=2)
    items = iter([1] * 10_000 + [2])
    sent = 0
    while pub.outstanding and sent < 10_001:
        pub.emit(next(items))
        sent += 1
    assert sent == 10_001 and ts.values == [1, 2]
    # 16 at start, then 12 (= 16 - 16 // 4) each time 12 inputs were consumed without output
    assert pub.requests == [16] + [12] * 833
    assert not pub.cancelled


def test_an_expanding_stage_pauses_upstream_while_prefetch_outputs_wait() -> None:
    pub = TestPublisher[int]()
    ts = subscribe(pub.pipe(triple()), initial=1)
    pub.emit(1, 2, 3, 4)  # the 4 requested: 12 outputs, 1 delivered, 11 wait
    assert ts.values == [1] and pub.requests == [4] and pub.outstanding == 0
    ts.request(7)  # 4 wait: still no room in the window of 4
    assert ts.values == [1, 1, 1, 2, 2, 2, 3, 3] and pub.requests == [4]
    ts.request(1)  # 3 wait: one input fits, but a round is 3 (= 4 - 4 // 4) and items still wait
    assert pub.requests == [4]
    ts.request(3)  # nothing waits, nothing outstanding: the whole window
    assert pub.requests == [4, 4]
    pub.emit(5)
    ts.request(UNBOUNDED)
    assert ts.values == [1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 5, 5, 5]
    assert pub.requests == [4, 4]


def test_a_slow_consumer_costs_upstream_one_request_per_round_not_per_item() -> None:
    class Same(Stage):
        prefetch = 8

        def on_next(self, item: int) -> None:
            self.emit(item)

    pub = TestPublisher[int]()
    ts = subscribe(pub.pipe(operator(Same)()))
    for k in range(40):
        while pub.outstanding:
            pub.emit(k)
        ts.request(1)  # one item at a time, from a full window
    assert len(ts.values) == 40
    # 8 at start, then rounds of 6 (= 8 - 8 // 4): never request(1) per consumed item
    assert pub.requests == [8] + [6] * 6


def test_items_held_for_more_of_the_same_upstream_never_stall_it() -> None:
    class Sixes(Stage):
        """Groups of 6: up to 5 held items, more than a quarter of the window of 16."""

        prefetch = 16

        def __init__(self) -> None:
            self.group: list[int] = []

        def on_next(self, item: int) -> None:
            self.group.append(item)
            self.held = len(self.group)
            if len(self.group) == 6:
                self.emit(tuple(self.group))
                self.group, self.held = [], 0

    pub = TestPublisher[int]()
    ts = subscribe(pub.pipe(operator(Sixes)()), initial=UNBOUNDED)
    sent = 0
    while pub.outstanding and sent < 600:
        pub.emit(sent)
        sent += 1
    assert sent == 600 and len(ts.values) == 100  # never stuck with 5 held and 11 < 12 free
    assert pub.requests[:3] == [16, 12, 12] and min(pub.requests) >= 1


def test_items_held_waiting_for_another_input_cost_one_request_per_round() -> None:
    a, b = TestPublisher[int](), TestPublisher[int]()
    ts = subscribe(a.pipe(ops.zip(b)), initial=UNBOUNDED)
    for i in range(200):
        a.emit(*range(a.outstanding))  # a runs ahead: its items wait for b's
        b.emit(i)
    assert len(ts.values) == 200
    assert a.requests == [32] + [24] * 8 and b.requests == [32] + [24] * 8


def test_a_demand_driven_stage_asks_upstream_only_for_what_downstream_asked() -> None:
    class Evens(Stage):
        prefetch = None

        def on_next(self, item: int) -> None:
            if item % 2 == 0:
                self.emit(item)

    pub = TestPublisher[int]()
    ts = subscribe(pub.pipe(operator(Evens)()))
    assert pub.requests == []
    ts.request(2)
    assert pub.requests == [2]
    pub.emit(1)  # dropped: one more
    assert pub.requests == [2, 1]
    pub.emit(2, 3, 4)
    assert ts.values == [2, 4] and pub.requests == [2, 1, 1] and pub.outstanding == 0
    ts.request(UNBOUNDED)
    assert pub.requests == [2, 1, 1, UNBOUNDED]


def test_an_unbounded_stage_requests_once() -> None:
    pub = TestPublisher[int]()
    subscribe(pub.pipe(debounce(1.0)))
    assert pub.requests == [UNBOUNDED]


def test_held_items_count_against_the_window() -> None:
    class HoldTwo(Stage):
        """Emits items in pairs: an odd one out is held."""

        prefetch = 4

        def __init__(self) -> None:
            self.pending: list[int] = []

        def on_next(self, item: int) -> None:
            self.pending.append(item)
            self.held = len(self.pending)
            if len(self.pending) == 2:
                self.emit(tuple(self.pending))
                self.pending.clear()
                self.held = 0

    pub = TestPublisher[int]()
    ts = subscribe(pub.pipe(operator(HoldTwo)()))
    pub.emit(1, 2, 3, 4)  # two pairs wait: 2 of the window free, less than a round (3)
    assert pub.requests == [4] and ts.values == []
    stats = _only_stage("hold_two")
    assert (stats.buffered, stats.capacity) == (2, 4)
    ts.request(2)  # nothing waits, nothing outstanding: the whole window
    assert ts.values == [(1, 2), (3, 4)] and pub.requests == [4, 4]
    pub.emit(5)  # held: outstanding 3 + held 1 = the window
    assert _only_stage("hold_two").buffered == 1
    pub.emit(6)  # the pair waits (no demand), nothing held: outstanding 2 + waiting 1, 1 free
    assert pub.requests == [4, 4] and _only_stage("hold_two").buffered == 1


def _only_stage(name_prefix: str) -> Any:
    from rxpipe.metrics import live_stages

    found = [s.statistics() for s in live_stages() if s.counters.stage.startswith(name_prefix)]
    assert len(found) == 1, found
    return found[0]


# -- termination order --------------------------------------------------------------------------------
def test_completion_follows_the_queued_items() -> None:
    pub = TestPublisher[int]()
    ts = subscribe(pub.pipe(triple()), initial=1)
    pub.emit(7)
    pub.complete()
    assert ts.values == [7] and not ts.completed
    ts.request(2)
    assert ts.values == [7, 7, 7] and ts.completed


def test_complete_from_on_next_cancels_upstream_and_ends_after_queued_items() -> None:
    class UpToThree(Stage):
        def on_next(self, item: int) -> None:
            self.emit(item)
            if item == 3:
                self.complete()

    pub = TestPublisher[int]()
    ts = subscribe(pub.pipe(operator(UpToThree)()), initial=2)
    pub.emit(1, 2, 3)
    assert pub.cancelled and ts.values == [1, 2] and not ts.completed
    pub.emit(4)  # in flight after the cancel: ignored (§3.12)
    ts.request(5)
    assert ts.values == [1, 2, 3] and ts.completed


def test_an_upstream_error_cuts_ahead_of_queued_items_which_are_told() -> None:
    told: list[str] = []

    class Told:
        def __init__(self, name: str) -> None:
            self.name = name

        def on_discard(self, reason: str) -> None:
            told.append(f"{self.name}:{reason}")

    pub = TestPublisher[Any]()
    ts = subscribe(pub.pipe(distinct_until_changed()))
    pub.emit(Told("a"), Told("b"))
    failure = RuntimeError("boom")
    pub.error(failure)
    assert ts.error is failure and ts.values == [] and told == ["a:error", "b:error"]


def test_a_raising_hook_fails_downstream_cancels_upstream_and_is_logged_once(caplog: Any) -> None:
    class Fragile(Stage):
        def on_next(self, item: int) -> None:
            if item == 2:
                raise KeyError("bad item")
            self.emit(item)

    caplog.set_level(logging.ERROR, logger="rxpipe")
    pub = TestPublisher[int]()
    ts = subscribe(pub.pipe(operator(Fragile)(name="fragile")), initial=UNBOUNDED)
    pub.emit(1, 2, 3)
    assert ts.values == [1] and isinstance(ts.error, KeyError) and pub.cancelled
    records = [r for r in caplog.records if r.name == "rxpipe"]
    assert len(records) == 1 and "fragile" in records[0].getMessage() and "on_next" in records[0].getMessage()


def test_emitting_none_is_a_type_error() -> None:
    class Nones(Stage):
        def on_next(self, item: int) -> None:
            self.emit(None)

    ts = subscribe(rx.just(1).pipe(operator(Nones)()), initial=1)
    assert isinstance(ts.error, TypeError) and "§2.13" in str(ts.error)


def test_emit_after_complete_is_an_error_of_the_stage() -> None:
    class Late(Stage):
        def on_complete(self) -> None:
            self.complete()
            self.emit(99)

        def on_next(self, item: int) -> None:
            self.emit(item)

    ts = subscribe(rx.just(1).pipe(operator(Late)()), initial=5)
    assert ts.values == [1] and isinstance(ts.error, RuntimeError) and not ts.completed


def test_a_downstream_cancel_runs_on_cancel_once_and_stops_upstream() -> None:
    calls: list[str] = []

    class Watch(Stage):
        def on_next(self, item: int) -> None:
            self.emit(item)

        def on_cancel(self) -> None:
            calls.append("cancel")

    pub = TestPublisher[int]()
    ts = subscribe(pub.pipe(operator(Watch)()), initial=1)
    pub.emit(1)
    ts.cancel()
    ts.cancel()
    assert calls == ["cancel"] and pub.cancelled


def test_an_invalid_request_signals_value_error_and_cancels_upstream() -> None:
    pub = TestPublisher[int]()
    ts = subscribe(pub.pipe(triple()))
    ts.request(0)
    assert isinstance(ts.error, ValueError) and "§3.9" in str(ts.error) and pub.cancelled


def test_an_upstream_beyond_demand_is_missing_backpressure() -> None:
    pub = TestPublisher[int]()
    ts = subscribe(pub.pipe(triple()))
    pub.emit(1, 2, 3, 4, 5)  # one more than the window of 4
    assert isinstance(ts.error, rx.MissingBackpressureError) and pub.cancelled


def test_a_million_items_with_request_1_inside_on_next_do_not_recurse() -> None:
    done: list[int] = []

    class Each(TestSubscriber[int]):
        def on_next(self, item: int) -> None:
            done.append(item)
            self.subscription.request(1)  # type: ignore[union-attr]

    ts = Each(initial_request=1)
    rx.range(0, 1_000_000).pipe(distinct_until_changed()).subscribe(ts)
    assert len(done) == 1_000_000 and ts.completed


# -- timers --------------------------------------------------------------------------------------------
@pytest.mark.virtual
async def test_a_timed_stage_on_virtual_time_fires_at_exact_times(loop: asyncio.AbstractEventLoop) -> None:
    pub = TestPublisher[str]()
    times: list[tuple[float, str]] = []
    pub.pipe(debounce(0.05)).subscribe(on_next=lambda x: times.append((round(loop.time(), 9), x)))
    pub.emit("a")
    await asyncio.sleep(0.02)
    pub.emit("b")  # a dropped, b due at 0.07
    await asyncio.sleep(0.08)
    pub.emit("c")  # at 0.10, due at 0.15
    await asyncio.sleep(0.1)
    assert times == [(0.07, "b"), (0.15, "c")]
    pub.complete()


@pytest.mark.virtual
async def test_a_periodic_timer_ticks_at_a_fixed_rate_and_skips_missed_ticks(loop: asyncio.AbstractEventLoop) -> None:
    class Ticks(Stage):
        prefetch = UNBOUNDED

        def on_start(self) -> None:
            self.start_timer("tick", 0.5, interval_s=1.0)

        def on_next(self, item: Any) -> None:
            pass

        def on_timer(self, key: Any) -> None:
            self.emit(round(self.now, 9))

    pub = TestPublisher[int]()
    ts = subscribe(pub.pipe(operator(Ticks)()), initial=UNBOUNDED)
    await asyncio.sleep(3.0)
    assert ts.values == [0.5, 1.5, 2.5]
    loop.advance(2.2)  # the loop is late: the ticks due at 3.5 and 4.5 are now overdue
    await asyncio.sleep(0.01)
    await asyncio.sleep(1.0)
    assert ts.values == [0.5, 1.5, 2.5, 5.2, 5.5]  # one catch-up tick, then back on the grid
    ts.cancel()  # the leak check fails the test if the timer outlived the cancel


@pytest.mark.virtual
async def test_a_cancelled_subscription_leaves_no_timer(loop: asyncio.AbstractEventLoop) -> None:
    pub = TestPublisher[int]()
    ts = subscribe(pub.pipe(debounce(5.0)), initial=1)
    pub.emit(1)
    assert [h for h in loop._scheduled if not h.cancelled()]  # type: ignore[attr-defined]
    ts.cancel()
    assert not [h for h in loop._scheduled if not h.cancelled()]  # type: ignore[attr-defined]
    assert pub.cancelled


@pytest.mark.virtual
async def test_a_raising_timer_hook_fails_the_stream(loop: asyncio.AbstractEventLoop) -> None:
    class Boom(Stage):
        def on_start(self) -> None:
            self.start_timer("t", 1.0)

        def on_next(self, item: Any) -> None:
            self.emit(item)

        def on_timer(self, key: Any) -> None:
            raise ValueError(f"timer {key}")

    pub = TestPublisher[int]()
    ts = subscribe(pub.pipe(operator(Boom)()), initial=1)
    await asyncio.sleep(1.5)
    assert isinstance(ts.error, ValueError) and str(ts.error) == "timer t" and pub.cancelled


def test_timers_need_a_running_loop() -> None:
    class Early(Stage):
        def on_start(self) -> None:
            self.start_timer("t", 1.0)

        def on_next(self, item: Any) -> None:
            pass

    ts = subscribe(TestPublisher[int]().pipe(operator(Early)()))  # subscribed off any event loop
    assert isinstance(ts.error, RuntimeError) and "event loop" in str(ts.error)


# -- inputs ----------------------------------------------------------------------------------------------
def test_open_input_continues_with_another_source_carrying_demand_over() -> None:
    class Then(Stage):
        """The source, then ``other`` (a small concat)."""

        prefetch = None

        def __init__(self, other: rx.Flowable[Any]) -> None:
            self.other = other

        def on_next(self, item: Any) -> None:
            self.emit(item)

        def on_complete(self) -> None:
            self.open_input(self.other, prefetch=None)

        def on_input_complete(self, input: Input) -> None:
            self.complete()

    first, second = TestPublisher[int](), TestPublisher[int]()
    ts = subscribe(first.pipe(operator(Then)(second)), initial=3)
    first.emit(1)
    first.complete()
    assert second.requests == [2]  # what downstream still wanted
    second.emit(2, 3)
    second.complete()
    assert ts.values == [1, 2, 3] and ts.completed


def test_a_cancelled_input_is_not_heard_even_for_signals_queued_behind_a_hook() -> None:
    heard: list[Any] = []

    class Switch(Stage):
        prefetch = 1

        def __init__(self) -> None:
            self.current: Input | None = None

        def on_next(self, item: int) -> None:
            # an empty source completes inside open_input, i.e. during this hook: queued
            inner = self.open_input(rx.empty(), prefetch=UNBOUNDED)
            inner.cancel()  # cancelled before the queued completion runs: it is not heard

        def on_input_next(self, input: Input, item: Any) -> None:
            heard.append(item)

        def on_input_complete(self, input: Input) -> None:
            heard.append("complete")

    ts = subscribe(rx.just(1, 2).pipe(operator(Switch)()), initial=UNBOUNDED)
    assert heard == [] and ts.completed


def test_an_input_error_fails_the_stage_and_cancels_the_main_upstream() -> None:
    class WithSide(Stage):
        def __init__(self, side: rx.Flowable[Any]) -> None:
            self.side = side

        def on_start(self) -> None:
            self.open_input(self.side, prefetch=1)

        def on_next(self, item: Any) -> None:
            self.emit(item)

    main, side = TestPublisher[int](), TestPublisher[int]()
    ts = subscribe(main.pipe(operator(WithSide)(side)), initial=UNBOUNDED)
    assert side.requests == [1] and main.requests == [16]
    failure = OSError("side failed")
    side.error(failure)
    assert ts.error is failure and main.cancelled


def test_an_input_subscribed_inside_a_hook_is_not_re_entered() -> None:
    order: list[str] = []

    class Inner(Stage):
        prefetch = 1

        def on_next(self, item: Any) -> None:
            order.append(f"outer {item} begins")
            self.open_inputs += 1
            self.open_input(rx.just(item * 10, item * 10 + 1), prefetch=UNBOUNDED)
            order.append(f"outer {item} ends")

        def on_input_next(self, input: Input, item: Any) -> None:
            order.append(f"inner {item}")
            self.emit(item)

        def on_input_complete(self, input: Input) -> None:
            self.open_inputs -= 1
            if self.open_inputs == 0 and self.outer_done:
                self.complete()

        def on_complete(self) -> None:
            self.outer_done = True
            if self.open_inputs == 0:
                self.complete()

        def on_start(self) -> None:
            self.open_inputs, self.outer_done = 0, False

    ts = subscribe(rx.just(1, 2).pipe(operator(Inner)()), initial=UNBOUNDED)
    assert order == ["outer 1 begins", "outer 1 ends", "inner 10", "inner 11",
                     "outer 2 begins", "outer 2 ends", "inner 20", "inner 21"]
    assert ts.values == [10, 11, 20, 21] and ts.completed


class Latest(Stage):
    """Each item with the side source's latest value (a small with_latest_from)."""

    prefetch = None

    def __init__(self, side: rx.Flowable[Any], first: bool) -> None:
        self.side, self.latest = side, Stage.NOTHING
        self.inputs_first = first  # type: ignore[misc]  # per run, for the test: a class attribute

    @classmethod
    def graph_inputs(cls, side: rx.Flowable[Any], first: bool) -> tuple[rx.Flowable[Any], ...]:
        return (side,)

    def on_start(self) -> None:
        self.open_input(self.side, prefetch=UNBOUNDED)

    def on_input_next(self, input: Input, item: Any) -> None:
        self.latest = item

    def on_next(self, item: Any) -> None:
        if self.latest is not Stage.NOTHING:
            self.emit((item, self.latest))


def test_inputs_first_gives_the_inputs_their_credit_before_the_main_upstream() -> None:
    # both synchronous: whichever is requested first runs to its end before the other starts
    assert subscribe(rx.just(1, 2).pipe(operator(Latest)(rx.just("a", "b"), False)), UNBOUNDED).values == []
    ts = subscribe(rx.just(1, 2).pipe(operator(Latest)(rx.just("a", "b"), True)), UNBOUNDED)
    assert ts.values == [(1, "b"), (2, "b")] and ts.completed
    order: list[str] = []
    main, side = Ordered("main", order), Ordered("side", order)
    subscribe(main.pipe(operator(Latest)(side, True)), 3)
    assert order == ["side", "main"] and side.requests == [UNBOUNDED] and main.requests == [3]


class Ordered(TestPublisher[Any]):
    """Notes its label in a shared list at each request (which source was asked first)."""

    def __init__(self, label: str, order: list[str]) -> None:
        super().__init__()
        self.label, self.order = label, order

    def _record_request(self, n: int) -> None:
        self.order.append(self.label)
        super()._record_request(n)


def test_graph_inputs_are_listed_as_upstreams_after_the_source() -> None:
    source, side = rx.range(0, 3), rx.just("a")
    node = source.pipe(operator(Latest)(side, True))
    assert node.upstreams == (source, side)
    assert [stage.kind for stage in rx.Pipeline(node).stages] == ["range", "just", "latest"]

    class Wrong(Latest):
        @classmethod
        def graph_inputs(cls, side: rx.Flowable[Any], first: bool) -> tuple[rx.Flowable[Any], ...]:
            return ("not a flowable",)  # type: ignore[return-value]

    with pytest.raises(TypeError, match="graph_inputs"):
        source.pipe(operator(Wrong)(side, True))


# -- the operator factory ------------------------------------------------------------------------------
def test_the_factory_checks_arguments_at_once_and_names_stages() -> None:
    with pytest.raises(ValueError, match="duration_s"):
        debounce(-1)
    flowable = rx.range(0, 3).pipe(debounce(1.0))
    assert flowable.kind == "debounce" and flowable.name == "debounce_1"
    assert rx.range(0, 3).pipe(debounce(1.0, name="quiet")).name == "quiet"
    assert debounce.__name__ == "debounce" and debounce.__doc__ == Debounce.__doc__
    with pytest.raises(TypeError, match="subclass of rxpipe.stage.Stage"):
        operator(int)  # type: ignore[arg-type]

    class Broken(Stage):
        prefetch = 0

        def on_next(self, item: Any) -> None:
            pass

    with pytest.raises(ValueError, match="prefetch"):
        operator(Broken)


def test_a_pass_through_stage_shows_its_upstreams_capabilities() -> None:
    class Same(Stage):
        passes_capabilities = True

        def on_next(self, item: Any) -> None:
            self.emit(item)

    batched = rx.range(0, 10).pipe(ops.batch(4), operator(Same)())
    assert batched.capabilities == Capabilities(max_batch_size=4)
    assert rx.range(0, 10).pipe(ops.batch(4), triple()).capabilities == Capabilities()


def test_each_subscription_runs_a_new_stage() -> None:
    source = rx.from_iterable([1, 1, 2]).pipe(distinct_until_changed())
    assert subscribe(source, UNBOUNDED).values == [1, 2]
    assert subscribe(source, UNBOUNDED).values == [1, 2]


def test_a_stage_with_slots_of_its_own_works() -> None:
    class Slotted(Stage):
        __slots__ = ("count",)

        def __init__(self) -> None:
            self.count = 0

        def on_next(self, item: Any) -> None:
            self.count += 1
            self.emit((self.count, item))

    assert subscribe(rx.just("a", "b").pipe(operator(Slotted)()), UNBOUNDED).values == [(1, "a"), (2, "b")]


# -- statistics and metrics ------------------------------------------------------------------------------
def test_a_user_stage_is_exported_as_rxpipe_stage_metrics_without_writing_statistics() -> None:
    def sample(name: str, **labels: str) -> float | None:
        return REGISTRY.get_sample_value(name, {"stage": "kit_metrics", **labels})

    pub = TestPublisher[int]()
    ts = subscribe(pub.pipe(triple(name="kit_metrics")), initial=2)
    pub.emit(1, 2)
    assert sample("rxpipe_stage_items_total", direction="in") == 2
    assert sample("rxpipe_stage_items_total", direction="out") == 2
    assert sample("rxpipe_stage_demand") == 0
    assert sample("rxpipe_stage_buffered_items") == 4
    assert sample("rxpipe_stage_capacity_items") == 4
    ts.request(UNBOUNDED)
    pub.complete()
    assert ts.completed
    del ts, pub
    gc.collect()
    # the stage is gone; its totals stay
    assert sample("rxpipe_stage_items_total", direction="out") == 6
    assert sample("rxpipe_stage_items_total", direction="in") == 2


async def test_drops_are_counted_by_reason() -> None:
    def dropped() -> float:
        labels = {"stage": "kit_drops", "reason": "debounced"}
        return REGISTRY.get_sample_value("rxpipe_stage_dropped_total", labels) or 0.0

    before = dropped()  # the test runs once per loop; a stage's totals outlive it
    pub = TestPublisher[int]()
    subscribe(pub.pipe(debounce(1.0, name="kit_drops")))
    pub.emit(1, 2, 3)
    assert dropped() - before == 2
    pub.complete()


# -- second round of operators: lazy stages and errors after the queued items -------------------------
class Total(Stage):
    """A reducer: sums its input, emits the sum at completion."""

    prefetch = 4
    lazy = True

    def __init__(self) -> None:
        self.total = 0

    def on_next(self, item: int) -> None:
        self.total += item

    def on_complete(self) -> None:
        self.emit(self.total)
        self.complete()


def test_a_lazy_stage_requests_nothing_until_downstream_asks_then_keeps_its_window_topped_up() -> None:
    pub = TestPublisher[int]()
    ts = subscribe(pub.pipe(operator(Total)()))
    assert pub.requests == []
    ts.request(1)
    assert pub.requests == [4]
    pub.emit(1, 2, 3)  # 3 consumed, nothing emitted: the replenish amount (3) is free
    assert pub.requests == [4, 3]
    pub.emit(4, 5, 6, 7)
    assert pub.requests == [4, 3, 3] and pub.outstanding == 3
    pub.emit(8).complete()
    assert ts.values == [36] and ts.completed
    assert UNBOUNDED not in pub.requests


def test_a_lazy_stage_pauses_once_its_output_covers_the_demand() -> None:
    class Firsts(Stage):
        """Emits every item, lazily: reads only while an output is wanted."""

        prefetch = 2
        lazy = True

        def on_next(self, item: int) -> None:
            self.emit(item)

    pub = TestPublisher[int]()
    ts = subscribe(pub.pipe(operator(Firsts)()), initial=1)
    assert pub.requests == [2]
    pub.emit(1, 2)  # 1 delivered, 2 waits: the demand is covered, nothing more is asked
    assert ts.values == [1] and pub.requests == [2]
    ts.request(1)  # 2 goes out; downstream wants nothing more
    assert ts.values == [1, 2] and pub.requests == [2]
    ts.request(3)
    assert pub.requests == [2, 2]


def test_fail_after_queued_signals_the_error_behind_the_emitted_items() -> None:
    class Prefix(Stage):
        prefetch = None

        def on_start(self) -> None:
            self.emit("a")
            self.emit("b")

        def on_next(self, item: str) -> None:
            self.emit(item)

        def on_error(self, error: BaseException) -> None:
            self.fail(error, after_queued=True)

    failure = RuntimeError("at subscribe")
    ts = subscribe(rx.error(failure).pipe(operator(Prefix)()), initial=1)
    assert ts.values == ["a"] and ts.error is None
    ts.request(1)
    assert ts.values == ["a", "b"] and ts.error is failure


def test_fail_after_queued_is_ignored_after_complete_and_fail_still_cuts_ahead() -> None:
    class Closing(Stage):
        def on_next(self, item: int) -> None:
            self.emit(item)
            if item == 1:
                self.complete()
                self.fail(RuntimeError("too late"), after_queued=True)
            elif item == 2:
                self.fail(RuntimeError("late but first"), after_queued=True)
                self.fail(RuntimeError("now"))

    pub = TestPublisher[int]()
    ts = subscribe(pub.pipe(operator(Closing)()))
    pub.emit(1)
    ts.request(1)
    assert ts.values == [1] and ts.completed
    pub2 = TestPublisher[int]()
    ts2 = subscribe(pub2.pipe(operator(Closing)()))
    pub2.emit(2)
    assert ts2.values == [] and str(ts2.error) == "now" and pub2.cancelled


def test_by_default_the_main_upstream_is_asked_before_the_inputs() -> None:
    order: list[str] = []

    class Recording(TestPublisher[int]):
        def __init__(self, label: str) -> None:
            super().__init__()
            self.label = label

        def _record_request(self, n: int) -> None:
            super()._record_request(n)
            order.append(self.label)

    class WithSide(Stage):
        prefetch = None

        def __init__(self, side: Any) -> None:
            self.side = side

        def on_start(self) -> None:
            self.open_input(self.side, prefetch=1)

        def on_next(self, item: int) -> None:
            self.emit(item)

    main, side = Recording("main"), Recording("side")
    subscribe(main.pipe(operator(WithSide)(side)), initial=2)
    assert order == ["main", "side"]  # inputs_first = True reverses it (take_until, with_latest_from)


async def test_a_hook_raising_cancelled_error_fails_the_stream_instead_of_hanging_it() -> None:
    class ResultOfACancelledFuture(Stage):
        prefetch = 4

        def on_next(self, item: int) -> None:
            if item == 2:
                future = asyncio.get_running_loop().create_future()
                future.cancel()
                future.result()  # raises asyncio.CancelledError, a BaseException
            self.emit(item)

    pub = TestPublisher[int]()
    ts = subscribe(pub.pipe(operator(ResultOfACancelledFuture)()), initial=UNBOUNDED)
    pub.emit(1, 2)
    assert ts.values == [1] and isinstance(ts.error, asyncio.CancelledError) and pub.cancelled

    class CallbackSeesACancelledTask(Stage):
        prefetch = 1

        def on_next(self, item: int) -> None:
            task = asyncio.ensure_future(asyncio.sleep(10))
            task.add_done_callback(lambda t: self.invoke(lambda: t.result()))
            task.cancel()

    pub2 = TestPublisher[int]()
    ts2 = subscribe(pub2.pipe(operator(CallbackSeesACancelledTask)()), initial=1)
    pub2.emit(1)
    await ts2.await_done(timeout=5)
    assert isinstance(ts2.error, asyncio.CancelledError) and pub2.cancelled


def test_a_user_function_raising_in_a_built_in_is_signalled_without_a_log_line(caplog: Any) -> None:
    caplog.set_level(logging.DEBUG, logger="rxpipe")
    for op in (ops.distinct(lambda x: 1 // x), ops.take_while(lambda x: 1 // x),
               ops.reduce(lambda acc, x: acc // x, 10)):
        ts = subscribe(rx.just(1, 0).pipe(op), initial=UNBOUNDED)
        assert isinstance(ts.error, ZeroDivisionError)
    assert [r for r in caplog.records if r.name.startswith("rxpipe")] == []


def test_on_request_hears_the_demand_that_came_before_the_start_then_each_request() -> None:
    heard: list[tuple[str, int, int]] = []

    class Listens(Stage):
        prefetch = None

        def on_start(self) -> None:
            heard.append(("start", self.demanded, self.outstanding))

        def on_request(self, n: int) -> None:
            heard.append(("request", n, self.outstanding))  # before the kit passes n upstream

        def on_next(self, item: int) -> None:
            self.emit(item)

    pub = TestPublisher[int]()
    ts = subscribe(pub.pipe(operator(Listens)()), initial=3)
    assert heard == [("start", 3, 0), ("request", 3, 0)] and pub.requests == [3]
    ts.request(2)
    assert heard[-1] == ("request", 2, 3) and pub.requests == [3, 2]


class SwitchAtThree(Stage):
    """Passes three upstream items, then cancels the upstream and goes on with ``other``."""

    prefetch = None

    def __init__(self, other: rx.Flowable[Any]) -> None:
        self.other, self.seen = other, 0

    def on_next(self, item: Any) -> None:
        self.emit(item)
        self.seen += 1
        if self.seen == 3:
            self.cancel_upstream()
            self.cancel_upstream()  # idempotent
            self.open_input(self.other, prefetch=None)

    def on_input_complete(self, input: Input) -> None:
        self.complete()


def test_cancel_upstream_stops_the_main_upstream_and_the_stage_goes_on_with_its_inputs() -> None:
    pub, other = TestPublisher[int](), TestPublisher[int]()
    ts = subscribe(pub.pipe(operator(SwitchAtThree)(other)), 5)
    pub.emit(1, 2, 3)
    assert pub.cancelled and pub.requests == [5]
    assert other.requests == [2]  # the demand still outstanding goes to the input
    pub.complete()  # not heard: the upstream was cancelled
    assert not ts.done
    other.emit(4, 5).complete()
    assert ts.values == [1, 2, 3, 4, 5] and ts.completed
