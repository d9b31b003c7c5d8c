"""The Stage kit cannot hang (DESIGN §3, "The kit, third round"): what a stage holds never closes
its own window, ``held`` is bounded by ``max_held`` and validated, and ``check_operator`` names
the real cause of what it finds.

Every stage here is written as a user would, with public names only.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import rxpipe as rx
from rxpipe import UNBOUNDED, BufferOverflowError
from rxpipe.stage import Stage, operator
from rxpipe.testing import TestPublisher, TestSubscriber, check_operator


class BufferWithCount(Stage):
    """A many-to-one stage written as the Stage docstring says: the partial group is held."""

    def __init__(self, count: int) -> None:
        self.count, self.group = count, []

    def on_next(self, item: Any) -> None:
        self.group.append(item)
        self.held = len(self.group)
        if len(self.group) == self.count:
            self.emit(self.group)
            self.group, self.held = [], 0

    def on_complete(self) -> None:
        if self.group:
            self.emit(self.group)
            self.group, self.held = [], 0
        self.complete()


buffer_with_count = operator(BufferWithCount)
EXPECTED_17 = [list(range(0, 17)), list(range(17, 34)), list(range(34, 40))]


async def test_a_stage_holding_more_than_its_window_completes_under_to_list() -> None:
    assert await asyncio.wait_for(rx.range(0, 40).pipe(buffer_with_count(17)).to_list(), 10) == EXPECTED_17


async def test_a_stage_holding_more_than_its_window_completes_under_async_for() -> None:
    async def collect() -> list[Any]:
        return [group async for group in rx.range(0, 40).pipe(buffer_with_count(17))]

    assert await asyncio.wait_for(collect(), 10) == EXPECTED_17


def test_a_stage_holding_more_than_its_window_delivers_under_request_1() -> None:
    ts = TestSubscriber[Any](initial_request=1)
    rx.range(0, 40).pipe(buffer_with_count(17)).subscribe(ts)
    assert ts.values == [EXPECTED_17[0]] and not ts.done
    ts.request(1)
    assert ts.values == EXPECTED_17[:2] and not ts.done
    ts.request(1)
    assert ts.values == EXPECTED_17 and ts.completed


def test_held_items_are_passed_only_when_nothing_else_can_make_progress() -> None:
    # Window 16: 16 items held fill it; nothing queued or outstanding and downstream wants a
    # group, so the kit asks for the window again beyond the held items (not one at a time).
    pub = TestPublisher[int]()
    ts = TestSubscriber[Any](initial_request=1)
    pub.pipe(buffer_with_count(40)).subscribe(ts)
    assert pub.requests == [16]
    pub.emit(*range(16))
    assert pub.requests == [16, 16]
    pub.emit(*range(16, 32))
    assert pub.requests == [16, 16, 16]
    pub.emit(*range(32, 40))
    assert ts.values == [list(range(40))]
    # the group went out, 8 of the last 16 are outstanding; no downstream demand: no more asked
    assert pub.requests == [16, 16, 16] and pub.outstanding == 8


def test_held_items_without_downstream_demand_do_not_pull_upstream() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[Any](initial_request=0)
    pub.pipe(buffer_with_count(40)).subscribe(ts)
    pub.emit(*range(16))
    assert pub.requests == [16] and ts.values == []  # nobody wants a group: the window holds


def test_a_demand_driven_stage_holding_items_asks_again_instead_of_stalling() -> None:
    class Pairs(BufferWithCount):
        prefetch = None

    ts = TestSubscriber[Any](initial_request=2)
    rx.range(0, 7).pipe(operator(Pairs)(2)).subscribe(ts)
    assert ts.values == [[0, 1], [2, 3]] and not ts.done
    ts.request(UNBOUNDED)
    assert ts.values == [[0, 1], [2, 3], [4, 5], [6]] and ts.completed


def test_held_over_max_held_fails_loudly_naming_the_stage_and_the_cap() -> None:
    pub = TestPublisher[int]()
    ts = TestSubscriber[Any](initial_request=1)
    pub.pipe(buffer_with_count(10_000, name="groups")).subscribe(ts)
    sent = 0
    while pub.outstanding and sent < 10_000:
        pub.emit(sent)
        sent += 1
    assert sent == 4097 and pub.cancelled  # the 4097th held item is one over the default cap
    assert isinstance(ts.error, BufferOverflowError)
    assert "stage 'groups' holds 4097 items, over max_held=4096 items" in str(ts.error)


def test_max_held_is_configurable_per_class_and_per_instance() -> None:
    class Small(BufferWithCount):
        max_held = 5

    ts = TestSubscriber[Any](initial_request=UNBOUNDED)
    rx.range(0, 100).pipe(operator(Small)(10, name="small")).subscribe(ts)
    assert ts.values == [] and "holds 6 items, over max_held=5 items" in str(ts.error)

    class PerRun(BufferWithCount):
        def __init__(self, count: int, cap: int) -> None:
            super().__init__(count)
            self.max_held = cap  # type: ignore[misc]

    ts = TestSubscriber[Any](initial_request=UNBOUNDED)
    rx.range(0, 100).pipe(operator(PerRun)(12, 9)).subscribe(ts)
    assert ts.values == [] and "holds 10 items, over max_held=9 items" in str(ts.error)
    ts = TestSubscriber[Any](initial_request=UNBOUNDED)
    rx.range(0, 20).pipe(operator(PerRun)(10, 10)).subscribe(ts)
    assert ts.values == [list(range(10)), list(range(10, 20))] and ts.completed


def test_an_invalid_max_held_is_a_value_error() -> None:
    class Bad(BufferWithCount):
        max_held = 0

    with pytest.raises(ValueError, match=r"Bad: max_held must be an int >= 1 item, got 0"):
        operator(Bad)

    class BadRun(BufferWithCount):
        def __init__(self, count: int) -> None:
            super().__init__(count)
            self.max_held = -3  # type: ignore[misc]

    ts = TestSubscriber[Any](initial_request=1)
    rx.range(0, 3).pipe(operator(BadRun)(2)).subscribe(ts)
    assert isinstance(ts.error, ValueError) and str(ts.error) == "BadRun: max_held must be an int >= 1 item, got -3"


def test_a_negative_held_fails_the_stage_with_value_error() -> None:
    class Miscounts(Stage):
        def on_next(self, item: int) -> None:
            self.held -= 1

    pub = TestPublisher[int]()
    ts = TestSubscriber[Any](initial_request=5)
    pub.pipe(operator(Miscounts)(name="miscounts")).subscribe(ts)
    pub.emit(1)
    assert pub.cancelled and isinstance(ts.error, ValueError)
    assert str(ts.error) == "stage 'miscounts': held must be an int >= 0 (the items the stage keeps), got -1"


def test_held_bounds_credit_keeps_a_concurrency_limit_strict() -> None:
    # held = jobs in flight, released from outside (here: by the test), never by more input
    class Jobs(Stage):
        prefetch = 2
        held_bounds_credit = True

        def __init__(self) -> None:
            self.jobs: list[int] = []

        def on_next(self, item: int) -> None:
            self.jobs.append(item)
            self.held = len(self.jobs)

        def finish(self) -> None:
            self.emit(self.jobs.pop(0))
            self.held = len(self.jobs)

    stages: list[Jobs] = []

    class Recorded(Jobs):
        def on_start(self) -> None:
            stages.append(self)

    pub = TestPublisher[int]()
    ts = TestSubscriber[Any](initial_request=UNBOUNDED)
    pub.pipe(operator(Recorded)()).subscribe(ts)
    pub.emit(1, 2)
    assert pub.requests == [2] and pub.outstanding == 0  # two in flight: the window is full, no more
    stages[0].invoke(stages[0].finish)
    assert ts.values == [1] and pub.requests == [2, 1]


@pytest.mark.virtual
async def test_a_stage_holding_on_a_timer_asks_for_no_more_while_the_timer_runs() -> None:
    class Later(Stage):
        prefetch = 1

        def __init__(self) -> None:
            self.kept: list[int] = []

        def on_next(self, item: int) -> None:
            self.kept.append(item)
            self.held = len(self.kept)
            self.start_timer("out", 1.0)

        def on_timer(self, key: Any) -> None:
            self.emit(self.kept.pop())
            self.held = 0

    pub = TestPublisher[int]()
    ts = TestSubscriber[Any](initial_request=UNBOUNDED)
    pub.pipe(operator(Later)()).subscribe(ts)
    pub.emit(7)
    assert pub.requests == [1]  # the held item waits on a timer: nothing more is asked meanwhile
    await asyncio.sleep(1.5)
    assert ts.values == [7] and pub.requests == [1, 1]


# -- check_operator names the real cause ------------------------------------------------------------
class Swallows(Stage):
    """Consumes every other item without emitting, counting, or holding it."""

    def __init__(self) -> None:
        self.odd = False

    def on_next(self, item: Any) -> None:
        self.odd = not self.odd
        if self.odd:
            self.emit(item)


def test_check_operator_tells_a_many_to_one_stage_to_pass_emits_every_item_false() -> None:
    with pytest.raises(AssertionError) as failure:
        check_operator(lambda: buffer_with_count(3))
    message = str(failure.value)
    assert "emits fewer items than it takes" in message and "emits_every_item=False" in message
    assert "must be asked for again" not in message and "held items were lost" not in message
    check_operator(lambda: buffer_with_count(3), emits_every_item=False)
    check_operator(lambda: buffer_with_count(17), emits_every_item=False)


def test_check_operator_tells_a_stage_that_loses_items_to_drop_or_hold_them() -> None:
    with pytest.raises(AssertionError) as failure:
        check_operator(operator(Swallows))
    message = str(failure.value)
    assert "consumed without output and not counted" in message
    assert "self.drop(item, reason)" in message and "self.held" in message
