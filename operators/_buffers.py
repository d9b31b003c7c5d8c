"""Buffers of the third round (DESIGN §3): ``buffer_with_count``, ``buffer_with_time``,
``buffer_with_time_or_count``, ``buffer(boundaries)``, ``buffer_when``, ``buffer_toggle``.

Written on :class:`rxpipe.stage.Stage` as many-to-one stages: each keeps its open lists (their
items are its ``held`` items) and emits a list when it closes. Lists and their order are
reactivex 6.1's (its ``window_*`` + ``flat_map(to_list())``): overlapping lists in the order they
close, empty lists where reactivex has them (only ``buffer_with_count`` leaves them out).

Demand, by what closes a list:

- by count (``buffer_with_count``, ``buffer_with_time_or_count``): demand-driven with
  ``items_per_output = count``: ``request(n)`` lists asks upstream for up to ``n * count`` items
  (capped at ``UNBOUNDED``, Reactor ``FluxBuffer``);
- by time (``buffer_with_time``, and ``buffer_with_time_or_count``'s timer): a window of
  ``prefetch`` items (open lists + lists waiting for demand); a tick that would close a list while
  downstream wants none is skipped (the list goes on gathering, within the window), so a slow
  consumer never makes lists pile up (Akka ``groupedWithin``'s rule);
- by another stream (``buffer(boundaries)``, ``buffer_when``, ``buffer_toggle``): the closing
  streams are asked only for what downstream wants (a boundary closes a list), the items come in
  a window of ``prefetch``.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable

from rxpipe.flowable import Flowable
from rxpipe.stage import Input, Stage, operator

from ._flatten import inner_source

__all__ = ["buffer_with_count_stage", "buffer_with_time_stage", "buffer_with_time_or_count_stage",
           "buffer_boundaries_stage", "buffer_when_stage", "buffer_toggle_stage", "TimeWindows"]

_EPSILON_S = 1e-9  # float sums of the same spans: equal within this


class BufferWithCount(Stage):
    """Lists of ``count`` items, a new one every ``skip`` items (reactivex's window_with_count)."""

    prefetch = None
    kind = "buffer_with_count"

    def __init__(self, count: int, skip: int) -> None:
        self.count, self.skip = count, skip
        self.items_per_output = count  # type: ignore[misc]  # request(n) lists -> n * count items
        self.max_held = max(Stage.max_held, count)  # type: ignore[misc]
        self.lists: deque[list[Any]] = deque([[]])
        self.n = 0
        self.held = 0

    def on_next(self, item: Any) -> None:
        lists = self.lists
        if not lists:
            self.drop(item, "between lists")  # skip > count: reactivex leaves it out too
        for group in lists:
            group.append(item)
        c = self.n - self.count + 1
        if c >= 0 and c % self.skip == 0:
            self.emit(lists.popleft())
        self.n += 1
        if self.n % self.skip == 0:
            lists.append([])
        self.held = len(lists[0]) if lists else 0

    def on_complete(self) -> None:
        for group in self.lists:
            if group:  # reactivex leaves the empty ones out
                self.emit(group)
        self.lists.clear()
        self.held = 0
        self.complete()


class TimeWindows:
    """reactivex's window_with_time schedule: windows open every ``timeshift`` and last
    ``timespan`` (the first opens at the subscription). :meth:`next_tick` gives the delay to the
    next tick and whether it opens (``shift``) and/or closes the oldest (``span``)."""

    __slots__ = ("timespan", "timeshift", "next_span", "next_shift", "total")

    def __init__(self, timespan: float, timeshift: float) -> None:
        self.timespan, self.timeshift = timespan, timeshift
        self.next_span, self.next_shift, self.total = timespan, timeshift, 0.0

    def next_tick(self) -> tuple[float, bool, bool]:
        if abs(self.next_span - self.next_shift) <= _EPSILON_S:
            span = shift = True
        else:
            span = self.next_span < self.next_shift
            shift = not span
        at = self.next_span if span else self.next_shift
        delay, self.total = at - self.total, at
        if span:
            self.next_span += self.timeshift
        if shift:
            self.next_shift += self.timeshift
        return max(delay, 0.0), shift, span


class BufferWithTime(Stage):
    """Lists by time: each window's items in one list, emitted when the window closes."""

    kind = "buffer_with_time"

    def __init__(self, timespan: float, timeshift: float, prefetch: int) -> None:
        self.prefetch = prefetch  # type: ignore[misc]
        self.max_held = max(Stage.max_held, prefetch)  # type: ignore[misc]
        self.windows = TimeWindows(timespan, timeshift)
        self.lists: deque[list[Any]] = deque([[]])
        self.tick: tuple[bool, bool] = (False, False)
        self.held = 0

    def on_start(self) -> None:
        self.arm()

    def arm(self) -> None:
        delay, shift, span = self.windows.next_tick()
        self.tick = (shift, span)
        self.start_timer("tick", delay)

    def on_next(self, item: Any) -> None:
        for group in self.lists:
            group.append(item)
        self.count()

    def on_timer(self, key: Any) -> None:
        shift, span = self.tick
        if not (span and not self.demanded):  # a closing tick without demand is skipped
            if shift:
                self.lists.append([])
            if span and self.lists:
                self.emit(self.lists.popleft())
        self.count()
        self.arm()

    def count(self) -> None:
        self.held = max((len(group) for group in self.lists), default=0)

    def on_complete(self) -> None:
        for group in self.lists:
            self.emit(group)
        self.lists.clear()
        self.held = 0
        self.complete()


class BufferWithTimeOrCount(Stage):
    """One list at a time, closed by ``count`` items or ``timespan`` seconds after it opened."""

    prefetch = None
    kind = "buffer_with_time_or_count"

    def __init__(self, timespan: float, count: int) -> None:
        self.timespan, self.count = timespan, count
        self.items_per_output = count  # type: ignore[misc]
        self.max_held = max(Stage.max_held, count)  # type: ignore[misc]
        self.group: list[Any] = []
        self.held = 0

    def on_start(self) -> None:
        self.start_timer("span", self.timespan)

    def on_next(self, item: Any) -> None:
        self.group.append(item)
        self.held = len(self.group)
        if len(self.group) == self.count:
            self.close()
            self.start_timer("span", self.timespan)  # the next list's own timespan

    def on_timer(self, key: Any) -> None:
        if self.demanded:
            self.close()
        self.start_timer("span", self.timespan)  # without demand: the list stays open a span more

    def close(self) -> None:
        group, self.group, self.held = self.group, [], 0
        self.emit(group)

    def on_complete(self) -> None:
        self.close()
        self.complete()


class BufferBoundaries(Stage):
    """The items between two items of ``boundaries`` in one list (each boundary closes one)."""

    kind = "buffer"

    def __init__(self, boundaries: Flowable[Any], prefetch: int) -> None:
        self.boundaries = boundaries
        self.prefetch = prefetch  # type: ignore[misc]
        self.max_held = max(Stage.max_held, prefetch)  # type: ignore[misc]
        self.group: list[Any] = []
        self.held = 0

    @classmethod
    def graph_inputs(cls, boundaries: Flowable[Any], *args: Any) -> tuple[Flowable[Any], ...]:
        return (boundaries,)

    def on_start(self) -> None:
        self.open_input(self.boundaries, prefetch=None)  # asked what downstream wants: a boundary a list

    def on_next(self, item: Any) -> None:
        self.group.append(item)
        self.held = len(self.group)

    def close(self) -> None:
        group, self.group, self.held = self.group, [], 0
        self.emit(group)

    def on_input_next(self, input: Input, item: Any) -> None:
        self.close()

    def on_input_complete(self, input: Input) -> None:
        self.on_complete()

    def on_complete(self) -> None:
        self.close()
        self.complete()


class BufferWhen(BufferBoundaries):
    """Each list closes when ``closing_mapper()``'s stream emits or completes; then a new one opens
    with a new closing stream (created once downstream wants another list)."""

    kind = "buffer_when"

    def __init__(self, closing_mapper: Callable[[], Any], prefetch: int) -> None:
        super().__init__(None, prefetch)  # type: ignore[arg-type]
        self.closing_mapper = closing_mapper
        self.closing: Input | None = None

    @classmethod
    def graph_inputs(cls, *args: Any) -> tuple[Flowable[Any], ...]:
        return ()

    def on_start(self) -> None:
        self.open_closing()

    def open_closing(self) -> None:
        self.closing = self.open_input(inner_source(self.closing_mapper(), "buffer_when"), prefetch=1)

    def on_input_next(self, input: Input, item: Any) -> None:
        self.closed(input)

    def on_input_complete(self, input: Input) -> None:
        self.closed(input)

    def closed(self, input: Input) -> None:
        if input is not self.closing:
            return
        input.cancel()
        self.closing = None
        self.close()
        if self.demanded:
            self.open_closing()

    def on_request(self, n: int) -> None:
        if self.closing is None and self.demanded:
            self.open_closing()


class BufferToggle(Stage):
    """A list opens at each item of ``openings`` and closes when ``closing_mapper(opening)``'s
    stream emits or completes; the upstream's items go into every open list. Completes once the
    openings completed and every list closed (the upstream's completion ends nothing: reactivex)."""

    kind = "buffer_toggle"

    def __init__(self, openings: Flowable[Any], closing_mapper: Callable[[Any], Any], prefetch: int) -> None:
        self.openings_source = openings
        self.closing_mapper = closing_mapper
        self.prefetch = prefetch  # type: ignore[misc]
        self.max_held = max(Stage.max_held, prefetch)  # type: ignore[misc]
        self.open: dict[Input, list[Any]] = {}  # closing stream -> its list, in opening order
        self.openings: Input | None = None
        self.openings_done = False
        self.held = 0

    @classmethod
    def graph_inputs(cls, openings: Flowable[Any], *args: Any) -> tuple[Flowable[Any], ...]:
        return (openings,)

    def on_start(self) -> None:
        self.openings = self.open_input(self.openings_source, prefetch=None, key="openings")

    def on_next(self, item: Any) -> None:
        if not self.open:
            self.drop(item, "no open list")  # reactivex's too: an item outside every list is lost
            return
        for group in self.open.values():
            group.append(item)
        self.count()

    def count(self) -> None:
        self.held = sum(len(group) for group in self.open.values())
        if self.openings is not None:
            self.openings.held = len(self.open)  # open lists are owed to downstream: fewer openings asked

    def on_input_next(self, input: Input, item: Any) -> None:
        if input.key == "openings":
            closing = inner_source(self.closing_mapper(item), "buffer_toggle")
            self.open[self.open_input(closing, prefetch=1, key="closing")] = []
        else:
            self.closed(input)
        self.count()

    def on_input_complete(self, input: Input) -> None:
        if input.key == "openings":
            self.openings_done = True
            self.maybe_complete()
        else:
            self.closed(input)
            self.count()

    def closed(self, input: Input) -> None:
        group = self.open.pop(input, None)
        if group is None:
            return
        input.cancel()
        self.emit(group)
        self.maybe_complete()

    def maybe_complete(self) -> None:
        if self.openings_done and not self.open:
            self.complete()

    def on_complete(self) -> None:
        """The upstream ended: the open lists wait for their closing streams (reactivex)."""


buffer_with_count_stage = operator(BufferWithCount)
buffer_with_time_stage = operator(BufferWithTime)
buffer_with_time_or_count_stage = operator(BufferWithTimeOrCount)
buffer_boundaries_stage = operator(BufferBoundaries)
buffer_when_stage = operator(BufferWhen)
buffer_toggle_stage = operator(BufferToggle)
