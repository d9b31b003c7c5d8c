"""Higher-order stages of the third round: ``expand`` and ``exclusive`` (DESIGN §3).

Written on :class:`rxpipe.stage.Stage`; every inner stream is an input (``open_input``), so the
kit owns its credit, cancel and errors, as in ``_flatten.py``.

- ``expand``: breadth first. Every item (of the upstream or of an inner stream) goes out and its
  stream, ``mapper(item)``, joins a FIFO of streams waiting to be subscribed; at most
  ``max_concurrency`` of them run at once, each demand-driven (asked what downstream wants). The
  FIFO is bounded: it and the running streams are the stage's ``held`` items, capped by
  ``max_queued`` (an expansion that grows faster than it is consumed fails with
  ``BufferOverflowError`` naming the stage, never grows without bound).
- ``exclusive``: the upstream is a stream of streams, requested without bound (its items are
  taken or dropped at once, as ``switch_map``'s); a stream arriving while one runs is dropped
  (counted, reason ``"busy"``); the running one is demand-driven.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable

from rxpipe import UNBOUNDED, Flowable
from rxpipe.stage import Input, Stage, operator

from ._flatten import _inner

__all__ = ["expand_stage", "exclusive_stage"]


class Expand(Stage):
    """One run of ``expand``. State: ``waiting`` (streams not subscribed yet, in order),
    ``running`` (inputs open), ``upstream_done``; ``held`` = waiting + running."""

    prefetch = None  # the upstream: demand-driven, as each inner stream
    held_bounds_credit = True  # held = streams waiting or running: they end on their own
    kind = "expand"

    def __init__(self, mapper: Callable[[Any], Any], max_concurrency: int, max_queued: int) -> None:
        self.mapper = mapper
        self.max_concurrency = max_concurrency
        self.max_held = max_queued  # type: ignore[misc]  # the FIFO's bound, checked by the kit
        self.waiting: deque[Flowable[Any]] = deque()
        self.running = 0
        self.upstream_done = False
        self.held = 0

    def on_next(self, item: Any) -> None:
        self.expand(item)

    def on_input_next(self, input: Input, item: Any) -> None:
        self.expand(item)

    def expand(self, item: Any) -> None:
        self.emit(item)
        source = _inner(self, self.mapper, item, "expand")
        if source is None:
            return
        self.waiting.append(source)
        self.start()

    def start(self) -> None:
        while self.waiting and self.running < self.max_concurrency:
            self.running += 1
            self.open_input(self.waiting.popleft(), prefetch=None)
        self.held = len(self.waiting) + self.running

    def on_input_complete(self, input: Input) -> None:
        self.running -= 1
        self.start()
        self.maybe_complete()

    def on_complete(self) -> None:
        self.upstream_done = True
        self.maybe_complete()

    def maybe_complete(self) -> None:
        if self.upstream_done and not self.running and not self.waiting:
            self.complete()


class Exclusive(Stage):
    """One run of ``exclusive``. State: ``current`` (the running inner stream), ``outer_done``."""

    prefetch = UNBOUNDED  # a stream is taken or dropped the moment it arrives
    kind = "exclusive"

    def __init__(self) -> None:
        self.current: Input | None = None
        self.outer_done = False

    def on_next(self, item: Any) -> None:
        if self.current is not None:
            self.drop(item, "busy")  # reactivex ignores a stream arriving while one runs
            return
        source = _inner(self, None, item, "exclusive")
        if source is not None:
            self.current = self.open_input(source, prefetch=None)
            self.pull(self.current)  # a synchronous inner runs before the next outer item

    def on_input_complete(self, input: Input) -> None:
        self.current = None
        if self.outer_done:
            self.complete()

    def on_complete(self) -> None:
        self.outer_done = True
        if self.current is None:
            self.complete()


expand_stage = operator(Expand)
exclusive_stage = operator(Exclusive)
