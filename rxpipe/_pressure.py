"""Where a stage spends its time: busy, backpressured or idle, accounted on state transitions.

Flink's web UI shows ``busyTimeMsPerSecond`` / ``backPressuredTimeMsPerSecond`` /
``idleTimeMsPerSecond`` per task, sampled. Here they come from demand, exactly:

- *busy*: the stage is working on an item (the executor: its engine has sequences running or
  waiting; ``map_async``: calls in flight; ``rate_limit``: items are wanted and it waits for
  tokens);
- *backpressured*: it holds an item and its downstream demand is 0;
- *idle*: the rest.

A stage keeps one small :class:`PressureClock`, made on its first transition out of idle (a stage
that never leaves idle costs nothing), and calls :meth:`PressureClock.enter` only when its state
*changes*: at the end of a drain call (``DrainSubscription.drain``), a pump pass, a call started or
done — never per item. Time is the loop's clock (``loop.time()``), so the test kit's virtual time
drives it exactly. A reader (the live view) takes :meth:`PressureClock.reading` at two moments and
divides: the three ratios of that interval sum to the interval's length.
"""

from __future__ import annotations

import asyncio
import time
from typing import Callable

__all__ = ["IDLE", "BUSY", "BACKPRESSURED", "STATES", "PressureClock", "loop_clock"]

# the three states are ints: a state is compared on every transition check
#: the state of a stage waiting for input (neither busy nor backpressured)
IDLE = 0
#: the state of a stage working on an item (the executor while its engine steps)
BUSY = 1
#: the state of a stage holding an item while its downstream demand is 0
BACKPRESSURED = 2
STATES = ("idle", "busy", "backpressured")


def loop_clock() -> Callable[[], float]:
    """The running loop's ``time`` (seconds), or ``time.monotonic`` off a loop (asyncio's loops
    read the same clock)."""
    loop = asyncio._get_running_loop()
    return loop.time if loop is not None else time.monotonic


class PressureClock:
    """Seconds one stage spent busy and backpressured so far, on a given clock.

    ``state`` (``IDLE``/``BUSY``/``BACKPRESSURED``) since ``since`` (clock seconds); ``busy_s``
    and ``backpressured_s`` hold the closed intervals. Idle time is what is left of the elapsed
    time, so the clock needs no birth time: a reader compares two readings.
    """

    __slots__ = ("state", "since", "busy_s", "backpressured_s", "clock")

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.state = IDLE
        self.since = clock()
        self.busy_s = 0.0
        self.backpressured_s = 0.0

    def enter(self, state: int) -> None:
        """Close the current interval at the clock's now and start one in ``state``."""
        now = self.clock()
        previous = self.state
        if previous == BUSY:
            self.busy_s += now - self.since
        elif previous == BACKPRESSURED:
            self.backpressured_s += now - self.since
        self.state = state
        self.since = now

    def reading(self) -> tuple[float, float, float]:
        """``(now, busy_s, backpressured_s)``: the clock's now and the totals up to it, the open
        interval included (seconds)."""
        now = self.clock()
        busy, backpressured = self.busy_s, self.backpressured_s
        if self.state == BUSY:
            busy += now - self.since
        elif self.state == BACKPRESSURED:
            backpressured += now - self.since
        return now, busy, backpressured

    def __repr__(self) -> str:
        return f"<PressureClock {STATES[self.state]} busy={self.busy_s:.3f}s backpressured={self.backpressured_s:.3f}s>"
