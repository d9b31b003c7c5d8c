"""Time operators of the third round (DESIGN §3): ``timestamp``, ``time_interval``,
``take_with_time`` / ``take_until_with_time``, ``skip_with_time`` / ``skip_until_with_time``,
``take_last_with_time``, ``skip_last_with_time``, ``delay_with_mapper``, ``throttle_with_mapper``,
``timeout_with_mapper`` and ``timeout(duetime, other)``'s switch.

Written on :class:`rxpipe.stage.Stage`, on the loop's clock only (``Stage.now``, the kit's timers),
so virtual time drives them exactly. The tie rule of ``_time.py`` holds: a time boundary that
falls on the very instant an item arrives has passed for it (``_EARLY_S``).

Demand: ``timestamp``, ``time_interval``, the ``take_*`` and the timeouts pass it through (the
continuation of a timeout inherits the outstanding demand); the ``skip_*`` ask one more per
dropped item; ``skip_last_with_time`` holds its recent items (they never close its window);
``take_last_with_time`` is an aggregate (lazy, rounds of 256); ``delay_with_mapper``'s delayed
items count against downstream demand (as ``delay``'s); ``throttle_with_mapper`` is lossy
(upstream requested without bound, one item kept, the others dropped and counted).
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable, NamedTuple

from rxpipe.flowable import DEFAULT_PREFETCH, Flowable
from rxpipe.stage import Input, Stage, operator

from ._flatten import inner_source
from ._time import KeepsOne

__all__ = ["Timestamp", "TimeInterval", "timestamp_stage", "time_interval_stage", "take_with_time_stage",
           "skip_with_time_stage", "take_last_with_time_stage", "skip_last_with_time_stage", "delay_with_mapper_stage",
           "throttle_with_mapper_stage", "timeout_with_mapper_stage", "timeout_error"]

NOTHING = Stage.NOTHING
_EARLY_S = 1e-6  # a boundary this close counts as reached (as in _time.py)


class Timestamp(NamedTuple):
    """An item with the loop's clock when it arrived: ``timestamp`` (seconds, ``loop.time()``;
    reactivex's is a ``datetime`` of its scheduler's clock)."""

    value: Any
    timestamp: float


class TimeInterval(NamedTuple):
    """An item with the seconds since the previous one (the first: since the subscription):
    ``interval`` (seconds; reactivex's is a ``timedelta``)."""

    value: Any
    interval: float


class StampTime(Stage):
    prefetch = None
    kind = "timestamp"

    def on_next(self, item: Any) -> None:
        self.emit(Timestamp(item, self.now))


class MeasureInterval(Stage):
    prefetch = None
    kind = "time_interval"

    def __init__(self) -> None:
        self.last: float | None = None

    def on_start(self) -> None:
        self.last = self.now

    def on_next(self, item: Any) -> None:
        now = self.now
        interval, self.last = now - (self.last if self.last is not None else now), now
        self.emit(TimeInterval(item, interval))


class TakeWithTime(Stage):
    """The items until ``duration_s`` after the subscription; then completion (upstream cancelled)."""

    prefetch = None
    passes_capabilities = True
    kind = "take_with_time"

    def __init__(self, duration_s: float) -> None:
        self.duration_s = duration_s
        self.end = 0.0

    def on_start(self) -> None:
        self.end = self.now + self.duration_s
        self.start_timer("end", self.duration_s)

    def on_next(self, item: Any) -> None:
        if self.now + _EARLY_S >= self.end:  # the end falls on this very instant: it comes first
            self.complete()
        else:
            self.emit(item)

    def on_timer(self, key: Any) -> None:
        self.complete()


class TakeUntilWithTime(TakeWithTime):
    kind = "take_until_with_time"


class SkipWithTime(Stage):
    """Drops the items until ``duration_s`` after the subscription; then passes every item."""

    prefetch = None
    passes_capabilities = True
    kind = "skip_with_time"

    def __init__(self, duration_s: float) -> None:
        self.duration_s = duration_s
        self.start = 0.0

    def on_start(self) -> None:
        self.start = self.now + self.duration_s

    def on_next(self, item: Any) -> None:
        if self.now + _EARLY_S >= self.start:
            self.emit(item)


class SkipUntilWithTime(SkipWithTime):
    kind = "skip_until_with_time"


class TakeLastWithTime(Stage):
    """At completion, the items that arrived within the last ``duration_s`` (reactivex's rule:
    an item ``duration_s`` older than a newer arrival is let go then; at completion one exactly
    ``duration_s`` old still counts)."""

    prefetch = DEFAULT_PREFETCH
    lazy = True  # an aggregate: nothing is read before downstream asks
    passes_capabilities = True
    kind = "take_last_with_time"

    def __init__(self, duration_s: float) -> None:
        self.duration_s = duration_s
        self.recent: deque[tuple[float, Any]] = deque()

    def on_next(self, item: Any) -> None:
        now = self.now
        recent = self.recent
        recent.append((now, item))
        while recent and now - recent[0][0] >= self.duration_s - _EARLY_S:
            recent.popleft()

    def on_complete(self) -> None:
        now = self.now
        for at, item in self.recent:
            if now - at <= self.duration_s + _EARLY_S:
                self.emit(item)
        self.recent.clear()
        self.complete()


class SkipLastWithTime(Stage):
    """Every item but those of the last ``duration_s``: an item goes out when an item (or the
    completion) arrives at least ``duration_s`` after it (reactivex: no timer)."""

    prefetch = None
    passes_capabilities = True
    kind = "skip_last_with_time"

    def __init__(self, duration_s: float) -> None:
        self.duration_s = duration_s
        self.recent: deque[tuple[float, Any]] = deque()
        self.held = 0

    def release(self) -> None:
        now = self.now
        recent = self.recent
        while recent and now - recent[0][0] >= self.duration_s - _EARLY_S:
            self.emit(recent.popleft()[1])
        self.held = len(recent)

    def on_next(self, item: Any) -> None:
        self.recent.append((self.now, item))
        self.release()

    def on_complete(self) -> None:
        self.release()
        self.recent.clear()  # the last duration_s: skipped by definition
        self.held = 0
        self.complete()


class DelayWithMapper(Stage):
    """Each item goes out when its delay stream, ``mapper(item)``, emits or completes (in the
    order the delays end); completes once upstream did and every delay ended.

    The items waiting are the stage's ``held`` items and count against downstream demand (as
    ``delay``'s): upstream outstanding + delayed + waiting <= downstream demand."""

    log_hook_errors = False  # the mapper is the user's
    prefetch = None
    held_bounds_credit = True  # the held items are released by their delay streams
    passes_capabilities = True
    kind = "delay_with_mapper"

    def __init__(self, mapper: Callable[[Any], Any]) -> None:
        self.mapper = mapper
        self.upstream_done = False
        self.held = 0

    def on_next(self, item: Any) -> None:
        delay = inner_source(self.mapper(item), "delay_with_mapper")
        self.held += 1
        self.open_input(delay, prefetch=1, key=item)

    def release(self, input: Input) -> None:
        input.cancel()
        self.held -= 1
        self.emit(input.key)
        if self.upstream_done and not self.held:
            self.complete()

    def on_input_next(self, input: Input, item: Any) -> None:
        self.release(input)

    def on_input_complete(self, input: Input) -> None:
        self.release(input)

    def on_complete(self) -> None:
        self.upstream_done = True
        if not self.held:
            self.complete()


class ThrottleWithMapper(KeepsOne):
    """``debounce`` with a quiet period per item: the latest item goes out when its stream,
    ``mapper(item)``, emits or completes, unless a newer item came first (then it is dropped,
    ``"superseded"``, and its stream cancelled)."""

    log_hook_errors = False
    kind = "throttle_with_mapper"

    def __init__(self, mapper: Callable[[Any], Any]) -> None:
        super().__init__()
        self.mapper = mapper
        self.pending: Any = NOTHING
        self.quiet: Input | None = None

    def on_next(self, item: Any) -> None:
        quiet = inner_source(self.mapper(item), "throttle_with_mapper")
        if self.quiet is not None:
            self.quiet.cancel()
            self.drop(self.pending, "superseded")
        self.replace_kept()
        self.pending, self.held = item, 1
        self.quiet = self.open_input(quiet, prefetch=1)

    def settle(self, input: Input) -> None:
        if input is self.quiet:
            input.cancel()
            item, self.pending, self.quiet = self.pending, NOTHING, None
            self.held = 0
            self.offer(item)

    def on_input_next(self, input: Input, item: Any) -> None:
        self.settle(input)

    def on_input_complete(self, input: Input) -> None:
        self.settle(input)

    def on_complete(self) -> None:
        item = self.kept if self.kept is not NOTHING else self.pending
        self.pending = self.kept = NOTHING
        self.held = 0
        if item is not NOTHING:
            self.emit(item)  # at once (reactivex); waits for demand if there is none
        self.complete()

    def on_error(self, error: BaseException) -> None:
        for held in (self.pending, self.kept):
            if held is not NOTHING:
                self.drop(held, "error")
        self.fail(error)


def timeout_error(stage: Stage, what: str) -> TimeoutError:
    return TimeoutError(f"timeout: {what} at stage {stage.stage_name!r}")


class TimeoutWithMapper(Stage):
    """The items while each arrives before its timeout stream (``first_timeout`` for the first
    item, ``mapper(previous item)`` for the others) emits or completes; then the upstream is
    cancelled and ``other`` continues the stream (None: ``TimeoutError``).

    The timeout streams are inputs asked for one item; an error of one fails the stream."""

    log_hook_errors = False
    prefetch = None
    passes_capabilities = True
    kind = "timeout_with_mapper"

    def __init__(self, first_timeout: Flowable[Any] | None, mapper: Callable[[Any], Any] | None,
                 other: Flowable[Any] | None) -> None:
        self.first_timeout = first_timeout
        self.mapper = mapper
        self.other = other
        self.timer: Input | None = None
        self.switched = False

    def on_start(self) -> None:
        if self.first_timeout is not None:
            self.arm(self.first_timeout)

    def arm(self, timeout: Any) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.timer = self.open_input(inner_source(timeout, "timeout_with_mapper"), prefetch=1, key="timeout")

    def on_next(self, item: Any) -> None:
        self.emit(item)
        if self.mapper is not None:
            self.arm(self.mapper(item))
        elif self.timer is not None:  # no timeout after the first item: reactivex's never()
            self.timer.cancel()
            self.timer = None

    def fire(self, input: Input) -> None:
        if input is not self.timer:
            return
        self.timer = None
        input.cancel()
        self.switched = True
        self.cancel_upstream()
        if self.other is None:
            self.fail(timeout_error(self, "the timeout stream ended before the next item"))
        else:
            self.open_input(self.other, prefetch=None, key="other")

    def on_input_next(self, input: Input, item: Any) -> None:
        if input.key == "other":
            self.emit(item)
        else:
            self.fire(input)

    def on_input_complete(self, input: Input) -> None:
        if input.key == "other":
            self.complete()
        else:
            self.fire(input)


timestamp_stage = operator(StampTime)
time_interval_stage = operator(MeasureInterval)
take_with_time_stage = operator(TakeWithTime)
take_until_with_time_stage = operator(TakeUntilWithTime)
skip_with_time_stage = operator(SkipWithTime)
skip_until_with_time_stage = operator(SkipUntilWithTime)
take_last_with_time_stage = operator(TakeLastWithTime)
skip_last_with_time_stage = operator(SkipLastWithTime)
delay_with_mapper_stage = operator(DelayWithMapper)
throttle_with_mapper_stage = operator(ThrottleWithMapper)
timeout_with_mapper_stage = operator(TimeoutWithMapper)
