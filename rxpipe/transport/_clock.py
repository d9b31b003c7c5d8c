"""The broker's clock, read through this process's loop clock (DESIGN §8: no wall clocks across hosts).

Liveness, pauses, deadlines and cancel latency are broker times (Redis ``TIME``, NATS server
timestamps). A process never compares them with its own wall clock: each time it reads the
broker's clock it records the offset between that reading and its loop clock (taken at the
middle of the round trip), and converts with the offset of the reading with the shortest round
trip among the last few (NTP's clock filter: a reading delayed by a busy loop or network is
off by up to half its round trip, the fastest one by the least).
"""

from __future__ import annotations

import asyncio
from collections import deque

__all__ = ["BrokerClock"]


class BrokerClock:
    """``now()``: the broker's time (s since the Unix epoch) as estimated here; None until a
    first reading. ``observe(broker_s, sent_loop_s, received_loop_s)`` records a reading."""

    __slots__ = ("loop", "offset_s", "_readings")

    #: readings the filter chooses from
    WINDOW = 8

    def __init__(self, loop: asyncio.AbstractEventLoop | None) -> None:
        self.loop = loop
        #: broker time minus loop time (None: never read)
        self.offset_s: float | None = None
        self._readings: deque[tuple[float, float]] = deque(maxlen=self.WINDOW)

    def observe(self, broker_s: float, sent_loop_s: float, received_loop_s: float) -> None:
        self._readings.append((received_loop_s - sent_loop_s, broker_s - (sent_loop_s + received_loop_s) / 2))
        self.offset_s = min(self._readings)[1]

    def now(self) -> float | None:
        offset, loop = self.offset_s, self.loop
        return None if offset is None or loop is None else loop.time() + offset

    def to_loop(self, broker_s: float) -> float | None:
        """The loop time at which the broker's clock reads ``broker_s`` (None: never read)."""
        offset = self.offset_s
        return None if offset is None else broker_s - offset
