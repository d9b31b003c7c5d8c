"""Time operators: ``debounce``, ``sample``, ``throttle_first`` and ``delay`` (DESIGN §3, second round).

Written on :class:`rxpipe.stage.Stage`, on the loop's clock only (``Stage.now``, the kit's
timers), so virtual time drives them exactly.

The first three are lossy by definition: they request upstream without bound
(``prefetch = UNBOUNDED``), keep at most one item (``held`` is 0 or 1) and count every item they
let go with :meth:`~rxpipe.stage.Stage.drop` (metric ``rxpipe_stage_dropped_total{reason}``):

- ``"superseded"``: a newer item replaced it before it was due (debounce's quiet period, a
  sample's interval);
- ``"throttled"``: it arrived inside a throttle_first window;
- ``"no_demand"``: it was due while downstream had not asked, and a newer due item replaced it;
- ``"error"``: it was held when the stream failed.

An item that becomes due while downstream has no demand is kept (the one held item) and goes out
at the next ``request``; it is never queued behind others. ``delay`` loses nothing: it is
demand-driven (``prefetch = None``), its delayed items count against downstream demand, so each
one finds demand when its time comes.

Ties. Time boundaries come before upstream signals arriving at the same instant: a quiet period,
a sample tick or a throttle window that ends exactly when an item (or the completion, or an
error) arrives has ended for it. Each stage checks the clock when a signal arrives, so the rule
holds whatever order the loop runs a timer and a signal due at the same time; an item emitted at
such a boundary goes downstream before an error arriving at it (the error waits for a zero-delay
timer, since ``fail`` cuts ahead of emitted items). reactivex's order at a tie is its scheduler's
insertion order (on its TestScheduler: the source's signal first).
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

from rxpipe._protocol import UNBOUNDED
from rxpipe.flowable import Flowable
from rxpipe.stage import Input, Stage, operator

__all__ = ["KeepsOne", "Debounce", "Sample", "ThrottleFirst", "Delay", "debounce_stage", "sample_stage",
           "throttle_first_stage", "delay_stage"]

NOTHING = Stage.NOTHING

# A loop may run a timer up to its clock resolution early, and sums of float seconds round: a
# boundary this close counts as reached (as in operators/_timeout.py).
_EARLY_S = 1e-6


class KeepsOne(Stage):
    """Base of the lossy stages that keep one due item while downstream has no demand.

    State: ``kept`` (that item, or NOTHING). :meth:`offer` emits a due item or keeps it,
    :meth:`on_request` delivers the kept item as soon as downstream asks, :meth:`replace_kept`
    drops it for a newer one (reason ``"no_demand"``).
    """

    prefetch = UNBOUNDED
    passes_capabilities = True

    def __init__(self) -> None:
        self.kept: Any = NOTHING
        self.held = 0

    def offer(self, item: Any) -> bool:
        """``item`` is due: emit it if downstream asked, else keep it. True if emitted."""
        if self.demanded:
            self.emit(item)
            return True
        self.kept = item
        self.held = 1
        return False

    def replace_kept(self) -> None:
        if self.kept is not NOTHING:
            self.drop(self.kept, "no_demand")
            self.kept = NOTHING
            self.held = 0

    def on_request(self, n: int) -> None:
        if self.kept is not NOTHING and self.demanded:
            item, self.kept = self.kept, NOTHING
            self.held = 0
            self.emit(item)


class Debounce(KeepsOne):
    """One run of ``debounce(duration_s)``.

    State: ``pending`` (the latest item, in its quiet period), ``due`` (when that period ends),
    ``kept`` (an item whose quiet period ended while downstream had no demand), ``armed`` (the
    timer runs, due no later than ``due``). At most one of ``pending``/``kept`` is set.
    The timer is not re-armed per item: an item only moves ``due``, and a timer firing early
    re-arms itself for the remainder.
    """

    kind = "debounce"

    def __init__(self, duration_s: float) -> None:
        super().__init__()
        self.duration_s = duration_s
        self.pending: Any = NOTHING
        self.due = 0.0
        self.armed = False
        self.failing: BaseException | None = None

    def on_next(self, item: Any) -> None:
        now = self.now
        if self.pending is not NOTHING:
            if now + _EARLY_S >= self.due:  # its quiet period ended at this very instant
                self.settle()
            else:
                self.drop(self.pending, "superseded")
        self.replace_kept()
        self.pending = item
        self.held = 1
        self.due = now + self.duration_s
        if not self.armed:
            self.armed = True
            self.start_timer("quiet", self.duration_s)

    def on_timer(self, key: Any) -> None:
        if key == "error":
            assert self.failing is not None
            self.fail(self.failing)
            return
        self.armed = False
        if self.pending is NOTHING:
            return
        now = self.now
        if now + _EARLY_S >= self.due:
            self.settle()
        else:
            self.armed = True
            self.start_timer("quiet", self.due - now)

    def settle(self) -> bool:
        """The pending item's quiet period ended: emit it, or keep it until asked. True if emitted."""
        item, self.pending = self.pending, NOTHING
        self.held = 0
        return self.offer(item)

    def on_complete(self) -> None:
        item = self.kept if self.kept is not NOTHING else self.pending
        self.pending = self.kept = NOTHING
        self.held = 0
        if item is not NOTHING:
            self.emit(item)  # at once (reactivex); waits for demand if there is none
        self.complete()

    def on_error(self, error: BaseException) -> None:
        if self.pending is not NOTHING and self.now + _EARLY_S >= self.due and self.settle():
            error_after_delivery(self, error)  # the quiet period ended at this very instant
            return
        drop_held(self, error, ("pending", "kept"))


class Sample(Stage):
    """One run of ``sample(interval_s)`` or ``sample(sampler)``.

    State: ``latest`` (the newest item not yet sampled), ``missed`` (a tick found no demand while
    ``latest`` waited), ``upstream_ended``, ``next_tick`` (interval mode: when the next tick is
    due; one one-shot timer re-armed per tick, on a fixed schedule ``start + k * interval_s``).
    """

    prefetch = UNBOUNDED
    passes_capabilities = True
    kind = "sample"

    def __init__(self, interval_s: float | None, sampler: Flowable[Any] | None) -> None:
        self.interval_s = interval_s
        self.sampler = sampler
        self.latest: Any = NOTHING
        self.missed = False
        self.upstream_ended = False
        self.next_tick = math.inf
        self.failing: BaseException | None = None
        self.held = 0

    def on_start(self) -> None:
        if self.sampler is not None:
            self.open_input(self.sampler, prefetch=UNBOUNDED)
        else:
            assert self.interval_s is not None
            self.next_tick = self.now + self.interval_s
            self.start_timer("tick", self.interval_s)

    def on_next(self, item: Any) -> None:
        self.tick_due_now()
        if self.latest is not NOTHING:
            self.drop(self.latest, "no_demand" if self.missed else "superseded")
        self.latest = item
        self.missed = False
        self.held = 1

    def tick_due_now(self) -> bool:
        """Run the tick due at this very instant (if its timer has not run yet): a tick comes
        before an upstream signal arriving at the same time. True if it emitted an item."""
        if self.now + _EARLY_S < self.next_tick:
            return False
        emitting = self.latest is not NOTHING and self.demanded > 0
        self.on_timer("tick")
        return emitting

    def on_timer(self, key: Any) -> None:
        if key == "error":
            assert self.failing is not None
            self.fail(self.failing)
            return
        interval_s = self.interval_s
        assert interval_s is not None
        now = self.now
        due = self.next_tick + interval_s
        if due <= now:  # the loop was late by a whole interval or more: skip the missed ticks
            due += math.floor((now - due) / interval_s + 1) * interval_s
        self.next_tick = due
        self.start_timer("tick", due - now)
        self.tick()

    def tick(self) -> None:
        """Sample: emit the newest item if one came since the last sample and there is demand
        (else the tick is skipped); after upstream's end, emit it regardless and complete."""
        item = self.latest
        if item is not NOTHING:
            if not self.demanded and not self.upstream_ended:
                self.missed = True  # the tick is skipped; the item waits for the next one
                return
            self.latest = NOTHING
            self.missed = False
            self.held = 0
            self.emit(item)  # after the end: queued (at most this one) ahead of the completion
        if self.upstream_ended:
            self.complete()

    def on_complete(self) -> None:
        self.tick_due_now()
        self.upstream_ended = True  # the completion goes out at the next tick (reactivex)

    def on_error(self, error: BaseException) -> None:
        if self.tick_due_now():
            error_after_delivery(self, error)
            return
        drop_held(self, error, ("latest",))

    def on_input_next(self, input: Input, item: Any) -> None:
        self.tick()

    def on_input_complete(self, input: Input) -> None:
        # No tick will ever come again: the last sample is taken now and the stream completes
        # (reactivex would stay silent until the source ends, and then never complete).
        self.upstream_ended = True
        self.tick()

    def on_input_error(self, input: Input, error: BaseException) -> None:
        drop_held(self, error, ("latest",))


class ThrottleFirst(KeepsOne):
    """One run of ``throttle_first(window_s)``.

    State: ``window_end`` (the current window is ``[window_end - window_s, window_end)``),
    ``kept`` (a window's first item that found no demand, kept until downstream asks).
    No timer: a window is a comparison with the clock when an item arrives.
    """

    kind = "throttle_first"

    def __init__(self, window_s: float) -> None:
        super().__init__()
        self.window_s = window_s
        self.window_end = -math.inf

    def on_next(self, item: Any) -> None:
        now = self.now
        if now + _EARLY_S < self.window_end:
            self.drop(item, "throttled")
            return
        self.window_end = now + self.window_s
        self.replace_kept()
        self.offer(item)

    def on_complete(self) -> None:
        if self.kept is not NOTHING:
            item, self.kept = self.kept, NOTHING
            self.held = 0
            self.emit(item)  # waits for demand, ahead of the completion
        self.complete()

    def on_error(self, error: BaseException) -> None:
        drop_held(self, error, ("kept",))


class Delay(Stage):
    """One run of ``delay(duration_s)``.

    State: ``waiting`` (``(due, item)`` in arrival order, so in due order: the clock never goes
    back), ``end_due`` (when the completion goes out, once upstream completed), ``armed`` (one
    timer, for the head of ``waiting`` or for the completion). ``held`` = ``len(waiting)``: the
    delayed items count against downstream demand, so each finds demand when it is due.
    """

    prefetch = None  # demand-driven: upstream is asked only for what downstream asked
    passes_capabilities = True
    kind = "delay"

    def __init__(self, duration_s: float) -> None:
        self.duration_s = duration_s
        self.waiting: deque[tuple[float, Any]] = deque()
        self.end_due: float | None = None
        self.armed = False
        self.held = 0

    def on_next(self, item: Any) -> None:
        self.waiting.append((self.now + self.duration_s, item))
        self.held += 1
        if not self.armed:
            self.armed = True
            self.start_timer("due", self.duration_s)

    def on_complete(self) -> None:
        self.end_due = self.now + self.duration_s
        if not self.armed:
            self.armed = True
            self.start_timer("due", self.duration_s)

    def on_timer(self, key: Any) -> None:
        self.armed = False
        now = self.now + _EARLY_S
        waiting = self.waiting
        while waiting and waiting[0][0] <= now:
            self.held -= 1
            self.emit(waiting.popleft()[1])
        due = waiting[0][0] if waiting else self.end_due
        if due is None:
            return
        if due <= now:
            self.complete()
        else:
            self.armed = True
            self.start_timer("due", due - self.now)

    def on_error(self, error: BaseException) -> None:
        # at once, ahead of the delayed items (reactivex): they are dropped and told
        waiting, self.waiting = self.waiting, deque()
        self.held = 0
        for _, item in waiting:
            self.drop(item, "error")
        self.fail(error)

    def on_stop(self) -> None:
        self.waiting.clear()
        self.held = 0


def error_after_delivery(stage: Debounce | Sample, error: BaseException) -> None:
    """Fail with ``error`` once the item just emitted went downstream: ``fail`` cuts ahead of
    emitted items, so the error waits for a zero-delay timer (the same instant of the clock)."""
    stage.failing = error
    stage.start_timer("error", 0.0)


def drop_held(stage: Stage, error: BaseException, slots: tuple[str, ...]) -> None:
    """Fail ``stage`` with ``error``, dropping (reason ``"error"``) the item kept in ``slots``."""
    for slot in slots:
        item = getattr(stage, slot)
        if item is not NOTHING:
            setattr(stage, slot, NOTHING)
            stage.drop(item, "error")
    stage.held = 0
    stage.fail(error)


#: ``debounce_stage(duration_s, name=None)`` (``ops.debounce`` checks the arguments)
debounce_stage = operator(Debounce)
#: ``sample_stage(interval_s, sampler, name=None)``
sample_stage = operator(Sample)
#: ``throttle_first_stage(window_s, name=None)``
throttle_first_stage = operator(ThrottleFirst)
#: ``delay_stage(duration_s, name=None)``
delay_stage = operator(Delay)
