"""``join``: pairs of a left and a right item whose windows overlap (DESIGN §3, third round).

Written on :class:`rxpipe.stage.Stage`. The upstream is the left side, ``right`` an input; each
item opens a window that lasts until its duration stream (``left_duration_mapper(item)`` or
``right_duration_mapper(item)``, an input asked for one item) emits or completes. An item
arriving pairs with every open item of the other side: ``(left, right)`` tuples, emitted at once
(they wait for downstream demand in the kit's output queue, which counts against both sides'
windows). The open items are each side's ``held`` items: a side with ``prefetch`` items open
waits for windows to close before it is asked for more, so memory is bounded by the windows,
not by the streams' lengths.

Completion (reactivex's rule): when one side completed and has no open item, or when both
completed. Values and order are reactivex 6.1's (tests/operators/test_higher_order.py).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Callable

from rxpipe import Flowable
from rxpipe.stage import Input, Stage, operator

from ._flatten import inner_source

__all__ = ["join_stage"]

LEFT, RIGHT = "left", "right"


class Join(Stage):
    """One run of ``join``. State: ``open`` (per side, id → item whose window is open),
    ``done`` (per side, completed), ``right`` (the right side's input)."""

    log_hook_errors = False  # the duration mappers are the user's
    kind = "join"

    def __init__(self, right: Flowable[Any], left_duration_mapper: Callable[[Any], Any],
                 right_duration_mapper: Callable[[Any], Any], prefetch: int) -> None:
        self.right_source = right
        self.durations = {LEFT: left_duration_mapper, RIGHT: right_duration_mapper}
        self.prefetch = prefetch  # type: ignore[misc]  # the left side's window; the right's is the same
        self.open: dict[str, OrderedDict[int, Any]] = {LEFT: OrderedDict(), RIGHT: OrderedDict()}
        self.done = {LEFT: False, RIGHT: False}
        self.next_id = 0
        self.right: Input | None = None
        self.held = 0

    @classmethod
    def graph_inputs(cls, right: Flowable[Any], *args: Any) -> tuple[Flowable[Any], ...]:
        return (right,)

    def on_start(self) -> None:
        self.right = self.open_input(self.right_source, prefetch=self.prefetch, key=RIGHT)

    def on_next(self, item: Any) -> None:
        self.arrive(LEFT, item)

    def on_input_next(self, input: Input, item: Any) -> None:
        if input.key == RIGHT:
            self.arrive(RIGHT, item)
        else:
            self.expire(input)

    def arrive(self, side: str, item: Any) -> None:
        item_id = self.next_id
        self.next_id += 1
        self.open[side][item_id] = item
        self.count()
        duration = inner_source(self.durations[side](item), "join")
        self.open_input(duration, prefetch=1, key=(side, item_id))
        other = self.open[RIGHT if side == LEFT else LEFT]
        for value in list(other.values()):
            self.emit((item, value) if side == LEFT else (value, item))

    def expire(self, input: Input) -> None:
        """A duration emitted or completed: its item's window closes."""
        side, item_id = input.key
        input.cancel()
        self.open[side].pop(item_id, None)
        self.count()
        if not self.open[side] and self.done[side]:
            self.complete()

    def on_input_complete(self, input: Input) -> None:
        if input.key == RIGHT:
            self.side_done(RIGHT)
        else:
            self.expire(input)

    def on_complete(self) -> None:
        self.side_done(LEFT)

    def side_done(self, side: str) -> None:
        self.done[side] = True
        if self.done[LEFT if side == RIGHT else RIGHT] or not self.open[side]:
            self.complete()

    def count(self) -> None:
        self.held = len(self.open[LEFT])
        if self.right is not None:
            self.right.held = len(self.open[RIGHT])


join_stage = operator(Join)
