"""``timeout``: signal ``TimeoutError`` when items stop coming while they are wanted (DESIGN §3).

Written on :class:`rxpipe.stage.Stage`: a demand-driven stage (``prefetch = None``: demand goes
upstream exactly as downstream asked) with one timer. The timer is never re-armed per item: an
item only records the time, and a firing timer compares the real deadline with the clock,
re-arming itself for the remainder when the deadline moved. So the cost per item is one clock
read (idle mode) or one counter decrement (item mode).

- ``"idle"``: the clock runs only while some requested item has not arrived (upstream
  outstanding > 0); it restarts at each item and when demand resumes after none was outstanding.
  Time without demand never counts: a slow consumer does not fail its upstream.
- ``"item"`` (after anything but ``map_async``): each ``request(n)`` opens a group of ``n`` items
  due ``seconds`` after that request; groups are served in order by arriving items. One deadline
  per request call, never one per item.

With ``other`` (reactivex's ``timeout(duetime, other)``), the deadline cancels the upstream and
the stage goes on with ``other`` as an input, demand-driven: it inherits the outstanding demand.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from rxpipe._protocol import UNBOUNDED
from rxpipe.flowable import Flowable
from rxpipe.stage import Stage, operator

__all__ = ["Timeout", "timeout_stage", "TIMEOUT_MODES"]

TIMEOUT_MODES = ("idle", "item")

# A loop may run a timer up to its clock resolution early; a deadline this close counts as reached.
_EARLY_S = 1e-6


class Timeout(Stage):
    """One run of ``timeout(seconds, mode)``.

    State: ``idle_since`` (idle mode: when the current wait began), ``deadlines`` (item mode:
    ``[due_time, items_left]`` per request, oldest first), ``armed`` (the timer runs, due no
    later than the earliest deadline).
    """

    __slots__ = ("seconds", "idle", "idle_since", "deadlines", "armed", "other", "switched")
    prefetch = None  # demand passed through exactly: no read-ahead, no queue
    passes_capabilities = True
    kind = "timeout"

    def __init__(self, seconds: float, mode: str, other: Flowable[Any] | None = None) -> None:
        self.seconds = seconds
        self.idle = mode == "idle"
        self.idle_since = 0.0
        self.deadlines: deque[list[float]] = deque()
        self.armed = False
        self.other = other  # reactivex's timeout(duetime, other): the stream to continue with
        self.switched = False

    def on_request(self, n: int) -> None:
        if self.switched:
            return  # the continuation is an input: the kit passes demand to it
        outstanding = self.outstanding  # before the kit asks upstream for these n
        if outstanding == UNBOUNDED:
            return
        now = self.now
        if self.idle:
            if outstanding == 0:
                self.idle_since = now  # the wait starts now: time without demand did not count
        else:
            self.deadlines.append([now + self.seconds, UNBOUNDED if n >= UNBOUNDED else n])
        if not self.armed:
            self.armed = True
            self.start_timer("deadline", self.seconds)

    def on_next(self, item: Any) -> None:
        if self.idle:
            self.idle_since = self.now
        elif self.deadlines:  # (an item beyond the requests seen cannot be late: none was due)
            head = self.deadlines[0]
            head[1] -= 1
            if head[1] == 0:
                self.deadlines.popleft()
        self.emit(item)

    def on_timer(self, key: Any) -> None:
        self.armed = False
        if self.switched:
            return
        if self.idle:
            if self.outstanding == 0:
                return  # nothing is awaited; the next request re-arms
            due = self.idle_since + self.seconds
        else:
            if not self.deadlines:
                return
            due = self.deadlines[0][0]
        now = self.now
        if now + _EARLY_S >= due:
            if self.other is not None:  # the upstream is let go; ``other`` inherits the demand
                self.switched = True
                self.cancel_upstream()
                self.open_input(self.other, prefetch=None)
                return
            waiting = self.outstanding
            what = "no item" if self.idle else "a requested item did not arrive"
            self.fail(TimeoutError(
                f"timeout: {what} within {self.seconds} s at stage {self.stage_name!r} "
                f"({'unbounded' if waiting == UNBOUNDED else waiting} items outstanding)"))
        else:
            self.armed = True
            self.start_timer("deadline", due - now)


    def on_input_complete(self, input: Any) -> None:
        self.complete()


#: ``timeout_stage(seconds, mode, name=None)``: the operator (``ops.timeout`` checks the arguments)
timeout_stage = operator(Timeout)
