"""``rxpipe.testing.check_operator``: passes correct operators of every kind, and names the rule a
broken one breaks (with the failing run's marbles)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import rxpipe as rx
from rxpipe import UNBOUNDED
from rxpipe.stage import (
    LINK_SLOTS,
    QueueDrainSubscription,
    Stage,
    StageStatistics,
    UpstreamLink,
    operator,
)
from rxpipe.testing import CHECKS, check_operator

from ..user_stages import Debounce


# -- correct user stages ------------------------------------------------------------------------------
class Evens(Stage):
    prefetch = None

    def on_next(self, item: int) -> None:
        if item % 2 == 0:
            self.emit(item)


class Pairs(Stage):
    def __init__(self) -> None:
        self.previous = Stage.NOTHING

    def on_next(self, item: Any) -> None:
        if self.previous is not Stage.NOTHING:
            self.emit((self.previous, item))
        self.previous = item


class Thrice(Stage):
    prefetch = 8

    def on_next(self, item: Any) -> None:
        for k in range(3):
            self.emit((item, k))


class Delay(Stage):
    prefetch = None

    def __init__(self, delay_s: float) -> None:
        self.delay_s, self.pending, self.next_key, self.upstream_done = delay_s, {}, 0, False

    def on_next(self, item: Any) -> None:
        self.pending[self.next_key] = item
        self.start_timer(self.next_key, self.delay_s)
        self.next_key += 1
        self.held = len(self.pending)

    def on_timer(self, key: Any) -> None:
        self.emit(self.pending.pop(key))
        self.held = len(self.pending)
        if self.upstream_done and not self.pending:
            self.complete()

    def on_complete(self) -> None:
        self.upstream_done = True
        if not self.pending:
            self.complete()


@pytest.mark.parametrize("factory, declared", [
    (operator(Evens), {"emits_every_item": False}),
    (operator(Pairs), {"emits_every_item": False}),
    (operator(Thrice), {}),
    (lambda: operator(Debounce)(0.05), {"time_based": True, "emits_every_item": False}),
    (lambda: operator(Delay)(0.03), {"time_based": True}),
], ids=["filter", "pairs", "expanding", "debounce", "delay"])
def test_correct_user_stages_pass(factory: Any, declared: dict[str, Any]) -> None:
    check_operator(factory, **declared)


def test_an_operator_itself_is_accepted_as_well_as_a_factory() -> None:
    check_operator(operator(Thrice)())
    check_operator(rx.pipe(operator(Evens)(), operator(Thrice)()), emits_every_item=False)


# -- broken low-level stages --------------------------------------------------------------------------
class LowLevel(rx.Flowable[Any]):
    """A Flowable over one of the broken stages below."""

    def __init__(self, source: rx.Flowable[Any], stage: type) -> None:
        super().__init__(upstreams=(source,))
        self.source, self.stage = source, stage

    def _subscribe(self, subscriber: Any) -> None:
        self.source._subscribe(self.stage(subscriber))


class Relay(QueueDrainSubscription, UpstreamLink):
    """A correct prefetch-4 relay the broken ones below each spoil in one way."""

    __slots__ = LINK_SLOTS

    def __init__(self, downstream: Any) -> None:
        super().__init__(downstream)
        self.link_upstream("broken_relay", 4)

    def on_next(self, item: Any) -> None:
        if self.accept(item):
            self.queue.append(item)
            self.drain()

    def _on_delivered(self, count: int) -> None:
        self.replenish(count)

    def _release(self) -> None:
        self.cancel_upstream()
        self.queue.clear()

    def statistics(self) -> StageStatistics:
        return StageStatistics(self.counters.stage, self.requested, len(self.queue), 4, 0, self.emitted)


class BeyondDemand(Relay):
    def on_next(self, item: Any) -> None:
        if self.accept(item):
            self.downstream.on_next(item)  # skips the queue and its demand count


class NeverCancels(Relay):
    def _release(self) -> None:
        self.queue.clear()  # forgets cancel_upstream()


class DropsWithoutAsking(Relay):
    def on_next(self, item: Any) -> None:
        if self.accept(item) and item % 3:
            self.queue.append(item)
            self.drain()
        # an item dropped here frees no credit: the stream stalls


class TakesEverything(Relay):
    def _upstream_ready(self) -> None:
        self.request_upstream(UNBOUNDED)


class SwallowsErrors(Relay):
    def _upstream_finished(self, error: BaseException | None) -> None:
        self.finish(None)


class LosesHeldItems(Relay):
    def _upstream_finished(self, error: BaseException | None) -> None:
        self.queue.clear()
        self.finish(error)


@pytest.mark.parametrize("stage, rule, declared", [
    (BeyondDemand, "demand", {}),
    (NeverCancels, "cancel", {}),
    (DropsWithoutAsking, "demand", {"emits_every_item": False}),
    (TakesEverything, "bounds", {}),
    (SwallowsErrors, "error", {}),
    (LosesHeldItems, "completion", {}),
], ids=lambda v: v.__name__ if isinstance(v, type) else None)
def test_a_broken_operator_fails_naming_the_rule_and_drawing_the_run(stage: type, rule: str,
                                                                      declared: dict[str, Any]) -> None:
    with pytest.raises(AssertionError) as failure:
        check_operator(lambda source: LowLevel(source, stage), **declared)
    message = str(failure.value)
    assert f"rule {rule!r} broke" in message
    for row in ("source:", "output:", "upstream:", "demand:", "legend:"):
        assert row in message


def test_the_failing_run_is_drawn_in_marbles() -> None:
    with pytest.raises(AssertionError) as failure:
        check_operator(lambda source: LowLevel(source, BeyondDemand), checks=("demand",))
    lines = str(failure.value).splitlines()
    assert lines == [
        "check_operator(flowable): rule 'demand' broke in the 'demand' run: it emitted item 2 (2) with 1 "
        "requested (Reactive Streams §1.1)",
        "  source:   ab",
        "  output:   ab",
        "  upstream: request(4)@0",
        "  demand:   request(1)@0",
        "  legend:   a=1, b=2  (one column = 0.01 s)",
    ]


def test_a_stage_that_leaves_a_timer_running_fails_the_timers_rule() -> None:
    class Forgetful(Stage):
        def on_next(self, item: Any) -> None:
            self.emit(item)
            asyncio_loop = __import__("asyncio").get_running_loop()
            asyncio_loop.call_later(100.0, lambda: None)  # a raw timer the kit does not own

    with pytest.raises(AssertionError, match="rule 'timers' broke"):
        check_operator(operator(Forgetful), checks=("cancel",))


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="checks="):
        check_operator(operator(Pairs), checks=("speed",))
    with pytest.raises(TypeError, match="operator or a factory"):
        check_operator(42)  # type: ignore[arg-type]
    assert CHECKS == ("demand", "bounds", "cancel", "error", "completion")


async def test_it_refuses_to_run_inside_an_event_loop() -> None:
    with pytest.raises(RuntimeError, match="sync"):
        check_operator(operator(Pairs), emits_every_item=False)


class SignalsAfterCompletion(Relay):
    def _complete(self) -> None:
        super()._complete()
        self.downstream.on_next(42)  # after its own on_complete: breaks §1.7
        self.downstream.on_complete()


def test_a_signal_after_the_terminal_one_breaks_the_terminal_rule() -> None:
    with pytest.raises(AssertionError, match=r"rule 'terminal' broke .*on_next\(42\) after on_complete"):
        check_operator(lambda source: LowLevel(source, SignalsAfterCompletion))


def test_a_task_left_running_breaks_the_tasks_rule() -> None:
    class LeaksATask(Stage):
        def on_start(self) -> None:
            self.task = asyncio.ensure_future(asyncio.Event().wait())  # never cancelled

        def on_next(self, item: Any) -> None:
            self.emit(item)

    with pytest.raises(AssertionError, match=r"rule 'tasks' broke .*still running"):
        check_operator(operator(LeaksATask))


def test_a_long_failing_run_is_drawn_shortened() -> None:
    with pytest.raises(AssertionError) as failure:
        check_operator(lambda source: LowLevel(source, TakesEverything), checks=("bounds",))
    lines = str(failure.value).splitlines()
    assert lines[1].endswith("columns)") and len(lines[1]) < 140
    assert "more" in lines[3] or len(lines[3]) < 200
