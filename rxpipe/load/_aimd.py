"""``rxpipe load --aimd``: a closed-loop client whose concurrency is an AIMD window read from the
server's credit headers, in the style of llm-d-async's dispatch gate (DESIGN §8b).

The gate (:class:`AimdGate`) holds a window ``W`` (requests in flight, a float; at least
``min_window``, at most ``max_window``). A request is sent whenever fewer than ``floor(W)`` are in
flight. Until its first decrease the gate is in slow start (TCP's): each answer with room adds
``increase`` (the window doubles per round trip), never past the requests in flight plus the room
the answer said. Then each answer adjusts it:

- additive increase: a 2xx whose head says room beyond the next request (``x-rxpipe-queue-room``
  or llm-d's ``x-llm-d-flow-band-headroom-requests`` >= 2, or no such header at all) adds
  ``increase / W`` (about ``increase`` per window of answers: TCP's congestion avoidance); room
  for exactly one more holds the window (the request the increase would add takes the last
  place: growing further is what a 429 answers);
- multiplicative decrease: a 429, or an answer that says 0 room, multiplies ``W`` by ``decrease``,
  at most once per window of answers (the answers to requests sent before the last decrease
  are of the old window: they do not cut again, as TCP counts one loss per round trip).

A 503 (draining, unavailable) is a decrease too. The window's path is kept per second
(``series``) with the counts of increases and decreases.

Anchors: Jacobson's AIMD (TCP, 1988); llm-d-async's AIMD gate on the response-feedback headers
(llm-d-router #2485/#2488).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["AimdConfig", "AimdGate", "parse_room"]

#: the headers that say a server's room, in the order they are read
ROOM_HEADERS = ("x-rxpipe-queue-room", "x-llm-d-flow-band-headroom-requests")


def parse_room(headers: Mapping[str, str]) -> int | None:
    """The admissions an answer says the server would take now (>= 0), or None without (a
    readable) credit header."""
    for name in ROOM_HEADERS:
        raw = headers.get(name)
        if raw is None:
            continue
        try:
            value = int(raw.strip())
        except ValueError:
            continue
        return max(0, value)
    return None


@dataclass(frozen=True)
class AimdConfig:
    """The gate's settings: ``initial``, ``min_window``, ``max_window`` (requests in flight);
    ``increase`` (requests per window of answers, > 0); ``decrease`` (the factor, in (0, 1)).
    Raises ValueError for bounds out of order or out of range."""

    initial: float = 1.0
    min_window: float = 1.0
    max_window: float = 1024.0
    increase: float = 1.0
    decrease: float = 0.5

    def __post_init__(self) -> None:
        if not 1.0 <= self.min_window <= self.initial <= self.max_window:
            raise ValueError(
                f"AIMD window bounds must satisfy 1 <= min_window ({self.min_window:g}) <= initial "
                f"({self.initial:g}) <= max_window ({self.max_window:g}) (requests)"
            )
        if not self.increase > 0:
            raise ValueError(f"AIMD increase must be > 0 requests per window, got {self.increase!r}")
        if not 0.0 < self.decrease < 1.0:
            raise ValueError(f"AIMD decrease must be a factor in (0, 1), got {self.decrease!r}")


class AimdGate:
    """The window and its bookkeeping (see the module docstring). ``sent()`` when a request goes
    (returns its sequence number), ``answered(seq, status, room)`` when its answer's head came."""

    __slots__ = ("config", "window", "in_flight", "seq", "barrier", "increases", "decreases", "slow_start")

    def __init__(self, config: AimdConfig) -> None:
        self.config = config
        self.window = config.initial
        self.in_flight = 0
        self.seq = 0
        #: answers to requests numbered below this belong to the window before the last decrease
        self.barrier = 0
        self.increases = 0
        self.decreases = 0
        #: until the first decrease: + increase per answer with room, not per window (TCP's slow start)
        self.slow_start = True

    @property
    def open(self) -> bool:
        """True while one more request may be sent (fewer than ``floor(W)`` in flight)."""
        return self.in_flight < math.floor(self.window)

    def sent(self) -> int:
        self.in_flight += 1
        self.seq += 1
        return self.seq

    def answered(self, seq: int, status: int | None, room: int | None) -> None:
        """The answer to request ``seq`` arrived (``status`` None: no answer, a network error or
        timeout: the window is left alone); ``room``: what its head said (None: no header)."""
        self.in_flight -= 1
        if status is None:
            return
        cfg = self.config
        refused = status in (429, 503) or room == 0
        if refused:
            if seq > self.barrier:  # once per window of answers
                self.slow_start = False
                self.window = max(cfg.min_window, self.window * cfg.decrease)
                self.barrier = self.seq
                self.decreases += 1
            return
        if 200 <= status < 300 and (room is None or room > 1):
            if self.slow_start:
                # one more per answer (the window doubles per round trip), never past what the
                # server said it has room for beside what is in flight
                grown = self.window + cfg.increase
                if room is not None:
                    grown = min(grown, float(self.in_flight + room))
                self.window = min(cfg.max_window, max(self.window, grown))
            else:
                self.window = min(cfg.max_window, self.window + cfg.increase / self.window)
            self.increases += 1
