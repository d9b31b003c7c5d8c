"""Windows of the third round (DESIGN §3): ``window_with_count``, ``window_with_time``,
``window_with_time_or_count``, ``window(boundaries)``, ``window_when``, ``window_toggle``,
``group_by_until``, ``group_join``.

Each is a :class:`~operators._window_core.WindowStage`: a window is a Flowable whose own
subscriber's demand governs what flows into it, the items queued in the windows bound the
upstream's credit (``prefetch``, default 256), and the upstream is cancelled only once every
window is disposed (Reactor ``FluxWindow``; see ``_window_core.py``). Windows and their contents
are reactivex 6.1's.

What opens windows is paced by the main stream's demand, so windows never pile up unasked: a
tick that would open a window while the main stream wants none is skipped (the open window goes
on gathering), and the streams that open windows (``boundaries``, ``openings``) are asked for
what the main stream wants.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import Any, Callable

from rxpipe.errors import TooManyGroupsError
from rxpipe.flowable import Flowable
from rxpipe.stage import Input, operator

from ._buffers import TimeWindows
from ._flatten import inner_source
from ._window_core import Control, Window, WindowStage, WindowSubscription

__all__ = ["window_with_count_stage", "window_with_time_stage", "window_with_time_or_count_stage",
           "window_boundaries_stage", "window_when_stage", "window_toggle_stage", "group_by_until_stage",
           "group_join_stage"]


class WindowWithCount(WindowStage):
    """A window of ``count`` items every ``skip`` items (reactivex's algorithm; the first opens at
    once). ``slots`` keeps each window's place even when it was not opened (main cancelled)."""

    kind = "window_with_count"

    def __init__(self, control: Control, count: int, skip: int, prefetch: int) -> None:
        super().__init__(control, prefetch)
        self.count, self.skip = count, skip
        self.slots: deque[WindowSubscription | None] = deque()
        self.n = 0

    def on_start(self) -> None:
        self.slots.append(self.open_window())

    def on_next(self, item: Any) -> None:
        if not self.slots:
            self.drop(item, "between windows")  # skip > count: reactivex leaves it out too
        for window in self.slots:
            self.push(window, item)
        c = self.n - self.count + 1
        if c >= 0 and c % self.skip == 0:
            self.close_window(self.slots.popleft())
        self.n += 1
        if self.n % self.skip == 0:
            self.slots.append(self.open_window())


class WindowWithTime(WindowStage):
    """Windows by time (reactivex's window_with_time schedule, shared with buffer_with_time)."""

    kind = "window_with_time"

    def __init__(self, control: Control, timespan: float, timeshift: float, prefetch: int) -> None:
        super().__init__(control, prefetch)
        self.schedule = TimeWindows(timespan, timeshift)
        self.slots: deque[WindowSubscription | None] = deque()
        self.tick: tuple[bool, bool] = (False, False)

    def on_start(self) -> None:
        self.slots.append(self.open_window())
        self.arm()

    def arm(self) -> None:
        delay, shift, span = self.schedule.next_tick()
        self.tick = (shift, span)
        self.start_timer("tick", delay)

    def on_next(self, item: Any) -> None:
        for window in self.slots:
            self.push(window, item)

    def on_timer(self, key: Any) -> None:
        shift, span = self.tick
        if not (shift and not self.demanded):  # an opening tick without demand is skipped
            if shift:
                self.slots.append(self.open_window())
            if span and self.slots:
                self.close_window(self.slots.popleft())
        self.arm()


class WindowWithTimeOrCount(WindowStage):
    """One window at a time, closed by ``count`` items or ``timespan`` after it opened."""

    kind = "window_with_time_or_count"

    def __init__(self, control: Control, timespan: float, count: int, prefetch: int) -> None:
        super().__init__(control, prefetch)
        self.timespan, self.count = timespan, count
        self.current: WindowSubscription | None = None
        self.n = 0

    def on_start(self) -> None:
        self.current = self.open_window()
        self.start_timer("span", self.timespan)

    def on_next(self, item: Any) -> None:
        self.push(self.current, item)
        self.n += 1
        if self.n == self.count:
            self.next_window()
            self.start_timer("span", self.timespan)

    def on_timer(self, key: Any) -> None:
        if self.demanded:  # without demand for a new window the open one goes on a span more
            self.next_window()
        self.start_timer("span", self.timespan)

    def next_window(self) -> None:
        self.close_window(self.current)
        self.n = 0
        self.current = self.open_window()


class WindowBoundaries(WindowStage):
    """A new window at each item of ``boundaries`` (asked for what the main stream wants)."""

    kind = "window"

    def __init__(self, control: Control, boundaries: Flowable[Any], prefetch: int) -> None:
        super().__init__(control, prefetch)
        self.boundaries = boundaries
        self.current: WindowSubscription | None = None

    def on_start(self) -> None:
        self.current = self.open_window()
        self.open_input(self.boundaries, prefetch=None)

    def on_next(self, item: Any) -> None:
        self.push(self.current, item)

    def on_input_next(self, input: Input, item: Any) -> None:
        self.close_window(self.current)
        self.current = self.open_window()

    def on_input_complete(self, input: Input) -> None:
        self.on_complete()


class WindowWhen(WindowStage):
    """A new window each time ``closing_mapper()``'s stream emits or completes (the next closing
    stream is made once the main stream wants another window)."""

    kind = "window_when"

    def __init__(self, control: Control, closing_mapper: Callable[[], Any], prefetch: int) -> None:
        super().__init__(control, prefetch)
        self.closing_mapper = closing_mapper
        self.current: WindowSubscription | None = None
        self.closing: Input | None = None

    def on_start(self) -> None:
        self.current = self.open_window()
        self.open_closing()

    def open_closing(self) -> None:
        self.closing = self.open_input(inner_source(self.closing_mapper(), "window_when"), prefetch=1)

    def on_next(self, item: Any) -> None:
        self.push(self.current, item)

    def closed(self, input: Input) -> None:
        if input is not self.closing:
            return
        input.cancel()
        self.closing = None
        if self.demanded:
            self.next_window()
        else:
            self.close_window(self.current)
            self.current = None  # opened with the demand (on_request)

    def next_window(self) -> None:
        self.close_window(self.current)
        self.current = self.open_window()
        self.open_closing()

    def on_request(self, n: int) -> None:
        if self.closing is None and self.current is None and not self.cancelled_main:
            self.current = self.open_window()
            self.open_closing()

    def on_input_next(self, input: Input, item: Any) -> None:
        self.closed(input)

    def on_input_complete(self, input: Input) -> None:
        self.closed(input)


class WindowToggle(WindowStage):
    """A window opens at each item of ``openings`` and closes when ``closing_mapper(opening)``'s
    stream emits or completes; the upstream's items go into every open window. Completes once the
    openings completed and every window closed (reactivex completes the main stream when the
    openings complete, the windows going on until their closings)."""

    kind = "window_toggle"

    def __init__(self, control: Control, openings: Flowable[Any], closing_mapper: Callable[[Any], Any],
                 prefetch: int) -> None:
        super().__init__(control, prefetch)
        self.openings_source = openings
        self.closing_mapper = closing_mapper
        self.open: dict[Input, WindowSubscription | None] = {}
        self.openings_done = False

    def on_start(self) -> None:
        self.open_input(self.openings_source, prefetch=None, key="openings")

    def on_next(self, item: Any) -> None:
        if not self.open:
            self.drop(item, "no open window")  # reactivex's too: an item outside every window is lost
            return
        for window in self.open.values():
            self.push(window, item)

    def on_input_next(self, input: Input, item: Any) -> None:
        if input.key == "openings":
            closing = inner_source(self.closing_mapper(item), "window_toggle")
            window = self.open_window()
            self.open[self.open_input(closing, prefetch=1, key="closing")] = window
        else:
            self.closed(input)

    def on_input_complete(self, input: Input) -> None:
        if input.key == "openings":
            self.openings_done = True
            self.maybe_complete()
        else:
            self.closed(input)

    def closed(self, input: Input) -> None:
        if input not in self.open:
            return
        input.cancel()
        self.close_window(self.open.pop(input))
        self.maybe_complete()

    def maybe_complete(self) -> None:
        if self.openings_done and not self.open:
            self.complete()

    def on_complete(self) -> None:
        """The upstream ended: the open windows wait for their closing streams (reactivex)."""


class GroupByUntil(WindowStage):
    """Keyed windows (``Window.key``) that close when their duration stream, ``duration_mapper(group)``,
    emits or completes; the key's next item opens a new group. At most ``max_groups`` open."""

    kind = "group_by_until"

    def __init__(self, control: Control, key_mapper: Callable[[Any], Any], element_mapper: Callable[[Any], Any] | None,
                 duration_mapper: Callable[[Any], Any], max_groups: int, prefetch: int) -> None:
        super().__init__(control, prefetch)
        self.key_mapper, self.element_mapper, self.duration_mapper = key_mapper, element_mapper, duration_mapper
        self.max_groups = max_groups
        self.groups: OrderedDict[Any, WindowSubscription | None] = OrderedDict()
        self.durations: dict[Input, Any] = {}

    def on_next(self, item: Any) -> None:
        key = self.key_mapper(item)
        if key not in self.groups:
            if len(self.groups) >= self.max_groups:
                self.drop(item, "too_many_groups")
                error = TooManyGroupsError(f"stage {self.stage_name!r}: key {key!r} would open group "
                                           f"{self.max_groups + 1} of max_groups={self.max_groups}",
                                           key, self.max_groups)
                self.close_all(error)
                self.fail(error)
                return
            window = self.open_window(key)
            if window is None:  # the main stream was cancelled: no new group
                self.drop(item, "no_group")
                return
            self.groups[key] = window
            duration = inner_source(self.duration_mapper(window.flowable), "group_by_until")
            self.durations[self.open_input(duration, prefetch=1)] = key
        element = item if self.element_mapper is None else self.element_mapper(item)
        if element is None:
            raise TypeError(f"stage {self.stage_name!r}: element_mapper returned None; items are never None "
                            f"(Reactive Streams §2.13)")
        self.push(self.groups[key], element)

    def expire(self, input: Input) -> None:
        key = self.durations.pop(input, None)
        input.cancel()
        if key is not None and key in self.groups:
            self.close_window(self.groups.pop(key))

    def on_input_next(self, input: Input, item: Any) -> None:
        self.expire(input)

    def on_input_complete(self, input: Input) -> None:
        self.expire(input)


class GroupJoin(WindowStage):
    """Each item of the upstream (left) opens a window, emitted as ``(left, window)``, holding
    every item of ``right`` whose window overlaps: those open now and those arriving until the
    left's duration ends; a right item's window lasts until its own duration ends. The right
    side's completion ends nothing; the left's completes the stream once its windows closed."""

    kind = "group_join"

    def __init__(self, control: Control, right: Flowable[Any], left_duration_mapper: Callable[[Any], Any],
                 right_duration_mapper: Callable[[Any], Any], prefetch: int) -> None:
        super().__init__(control, prefetch)
        self.right_source = right
        self.left_duration_mapper, self.right_duration_mapper = left_duration_mapper, right_duration_mapper
        self.lefts: OrderedDict[Input, WindowSubscription | None] = OrderedDict()  # duration -> window
        self.rights: OrderedDict[Input, Any] = OrderedDict()  # duration -> right item
        self.right: Input | None = None
        self.left_done = False

    def on_start(self) -> None:
        self.right = self.open_input(self.right_source, prefetch=self.prefetch, key="right")

    def wrap(self, window: Window, key: Any) -> Any:
        return (key, window)  # the main stream's items are (left, window) pairs (reactivex)

    def on_next(self, item: Any) -> None:
        window = self.open_window(item)
        for value in list(self.rights.values()):
            self.push(window, value)
        duration = inner_source(self.left_duration_mapper(item), "group_join")
        self.lefts[self.open_input(duration, prefetch=1, key="left")] = window

    def on_input_next(self, input: Input, item: Any) -> None:
        if input.key == "right":
            duration = inner_source(self.right_duration_mapper(item), "group_join")
            self.rights[self.open_input(duration, prefetch=1, key="right_duration")] = item
            self.count_rights()
            for window in list(self.lefts.values()):
                self.push(window, item)
        else:
            self.expire(input)

    def on_input_complete(self, input: Input) -> None:
        if input.key != "right":  # the right side's own completion ends nothing (reactivex)
            self.expire(input)

    def expire(self, input: Input) -> None:
        input.cancel()
        if input.key == "left":
            if input in self.lefts:
                self.close_window(self.lefts.pop(input))
                if self.left_done and not self.lefts:
                    self.complete()
        else:
            self.rights.pop(input, None)
            self.count_rights()

    def count_rights(self) -> None:
        if self.right is not None:
            self.right.held = len(self.rights)

    def on_complete(self) -> None:
        """The left side ended: the open windows go on until their durations (reactivex); the
        stream completes after the last one."""
        self.left_done = True
        if not self.lefts:
            self.complete()


window_with_count_stage = operator(WindowWithCount)
window_with_time_stage = operator(WindowWithTime)
window_with_time_or_count_stage = operator(WindowWithTimeOrCount)
window_boundaries_stage = operator(WindowBoundaries)
window_when_stage = operator(WindowWhen)
window_toggle_stage = operator(WindowToggle)
group_by_until_stage = operator(GroupByUntil)
group_join_stage = operator(GroupJoin)
