"""Marble tests with demand: diagrams of items over virtual time, and of when the subscriber asks.

A marble test plays a source diagram and a demand diagram on the virtual clock and records what
the stage under test delivers, so the test reads like the operator's docstring::

    assert_marbles(ops.filter(lambda x: x % 2 == 0), \"\"\"
        source:  -1-2-3-4-|
        demand:  ^2
        output:  ---2---4-|
    \"\"\", upstream_requests=[(0, 2), (1, 1), (5, 1)])

The language. Each character is one frame (``frame_s`` seconds of virtual time, 0.01 by
default), so diagrams written one under the other align by column; the one exception is a group,
which is one frame however wide it is (so a burst and what follows it are always drawn exactly):

==========  ==========================================================================
``-`` `` `` a frame in which nothing happens
``a``       an item: any other single character. ``values`` maps it to a value; without a
            mapping a digit is an ``int`` and any other character is itself (a ``str``)
``(ab|)``   items (and a terminal mark) in one frame, e.g. the burst that answers a
            ``request(n)``; the next character is the next frame
``|``       ``on_complete``
``#``       ``on_error``: the source signals ``error``; in an expected diagram it matches
            ``expected_error`` (an exception class or instance)
``^n``      demand diagrams only: ``request(n)`` in the column of ``^`` (``^*``: ``UNBOUNDED``;
            ``^0`` is the §3.9 invalid request); the count's characters are frames of silence:
            ``"^1--^2"`` requests 1 in frame 0 and 2 in frame 4
``!``       demand diagrams only: ``cancel()``
==========  ==========================================================================

Sources (:class:`MarbleSource`, a :class:`~rxpipe.testing.TestPublisher`):

- *cold* (default): each subscription plays the diagram from the frame it subscribed in; an item
  becomes available in its frame and is emitted when there is demand (so demand shapes the
  output); a terminal mark follows the items before it. It runs on the shared drain loop.
- *hot*: the diagram is played from frame 0 with ``TestPublisher.emit``, whatever the demand;
  an item no one asked for breaks §1.1 on purpose (for shedding operators and for
  ``MissingBackpressureError``).

Within one frame the subscriber's demand marks act first, then the sources' events (hot
emissions, cold arrivals). Timers of the stage under test run on the same clock; an output
item's frame is its arrival time rounded to the nearest frame. Each source records
``request_log`` as ``(frame, n)`` and ``cancelled_at``. A run observes at least the longest
diagram, then goes on while timers are pending (up to ``max_frames``); a stream still open at
the end is cancelled, and that clean-up cancel is not recorded as the source's.

The subscriber under test is a :class:`~rxpipe.testing.TestSubscriber` behind the strict
boundary: a stage that emits beyond the demand diagram shows ``#`` with
``MissingBackpressureError``.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any, Callable, Iterable, Mapping, NamedTuple, Sequence

from .._demand import EMPTY_SUBSCRIPTION, QueueDrainSubscription
from .._protocol import UNBOUNDED, Subscriber
from ..flowable import Flowable, Operator
from ._publisher import TestPublisher
from ._subscriber import TestSubscriber
from ._virtual import VirtualTimeLoop, run_virtual

__all__ = [
    "MarbleError",
    "MarbleEvent",
    "MarbleResult",
    "MarbleSource",
    "Marbles",
    "assert_marbles",
    "marbles",
    "parse_demand",
    "parse_marbles",
]

#: Default duration of one frame (one column of a diagram), in seconds of virtual time.
DEFAULT_FRAME_S = 0.01
#: Default cap on the frames a run observes when the stream never settles (e.g. ``interval``).
DEFAULT_MAX_FRAMES = 1000

_SILENT = "- "
_SPECIAL = frozenset("-|#()^! ")
_UNSET: Any = object()
# Phases of a frame: the subscriber's demand marks act before sources' events.
_DEMAND, _SOURCES = 0, 1
ErrorSpec = BaseException | type[BaseException]


class MarbleError(Exception):
    """The default error a source's ``#`` signals."""


class MarbleEvent(NamedTuple):
    """One signal at one frame: ``kind`` is ``"next"`` (``value`` the item), ``"error"``
    (``value`` the exception, or in an expected diagram the class/instance to match, or None
    for any) or ``"complete"``."""

    frame: int
    kind: str
    value: Any = None


# -- parsing and rendering --------------------------------------------------------------------
def _value(char: str, values: Mapping[str, Any] | None) -> Any:
    if values is not None and char in values:
        return values[char]
    if char.isdigit():
        return int(char)
    return char


def parse_marbles(diagram: str, values: Mapping[str, Any] | None = None,
                  error: Any = None) -> list[MarbleEvent]:
    """Parse an item diagram into events, in order: ``"-a-(bc)-|"`` →
    ``[(1, next, 'a'), (3, next, 'b'), (3, next, 'c'), (5, complete)]``.

    ``error`` is the value of a ``#`` event. Raises ValueError for a malformed diagram
    (nested or unclosed groups, events after a terminal mark, demand marks).
    """
    events: list[MarbleEvent] = []
    group: int | None = None  # the frame of the open group
    group_size = 0
    terminated = False
    frame = 0
    for column, char in enumerate(diagram):
        if char == "(":
            if group is not None:
                raise ValueError(f"nested group at column {column} of {diagram!r}")
            group, group_size = frame, 0
            continue
        if char == ")":
            if group is None:
                raise ValueError(f"')' without '(' at column {column} of {diagram!r}")
            if group_size == 0:
                raise ValueError(f"empty group at column {column} of {diagram!r}")
            group = None
            frame += 1  # the whole group is one frame
            continue
        if char in _SILENT:
            if group is not None:
                raise ValueError(f"time mark inside a group at column {column} of {diagram!r}")
            frame += 1
            continue
        if char in "^!":
            raise ValueError(f"{char!r} at column {column} of {diagram!r}: demand marks belong "
                             f"in the demand diagram")
        if terminated:
            raise ValueError(f"{char!r} at column {column} of {diagram!r} follows a terminal mark")
        if char == "|":
            event = MarbleEvent(frame, "complete")
            terminated = True
        elif char == "#":
            event = MarbleEvent(frame, "error", error)
            terminated = True
        else:
            event = MarbleEvent(frame, "next", _value(char, values))
        events.append(event)
        if group is None:
            frame += 1
        else:
            group_size += 1
    if group is not None:
        raise ValueError(f"unclosed group in {diagram!r}")
    return events


def parse_demand(diagram: str) -> list[tuple[int, int | None]]:
    """Parse a demand diagram into ``(frame, n)`` marks; ``n`` is None for a cancel (``!``).

    ``"^1---^12-!"`` → ``[(0, 1), (5, 12), (9, None)]``; ``"^*"`` → ``[(0, UNBOUNDED)]``.
    Raises ValueError for anything else (an item, a ``^`` without a count).
    """
    marks: list[tuple[int, int | None]] = []
    i = 0
    while i < len(diagram):
        char = diagram[i]
        if char in _SILENT:
            i += 1
        elif char == "!":
            marks.append((i, None))
            i += 1
        elif char == "^":
            j = i + 1
            if diagram[j:j + 1] == "*":
                n, j = UNBOUNDED, j + 1
            else:
                while j < len(diagram) and diagram[j].isdigit():
                    j += 1
                if j == i + 1:
                    raise ValueError(f"'^' at column {i} of demand {diagram!r} needs a count "
                                     f"(^3) or '*' (UNBOUNDED)")
                n = int(diagram[i + 1:j])
            marks.append((i, n))  # in the column of '^'; the count's columns are silent frames
            i = j
        else:
            raise ValueError(f"{char!r} at column {i} of demand {diagram!r}: a demand diagram "
                             f"holds only '-', ' ', '^n', '^*' and '!'")
    return marks


def _length(diagram: str) -> int:
    """Frames an item or demand diagram spans (a group counts one frame)."""
    frames = 0
    in_group = False
    for char in diagram:
        if char == "(":
            in_group = True
        elif char == ")":
            in_group = False
            frames += 1
        elif not in_group:
            frames += 1
    return frames


def _char(value: Any, values: Mapping[str, Any] | None) -> str:
    if values:
        for char, candidate in values.items():
            try:
                if candidate is value or (type(candidate) is type(value) and candidate == value):
                    return char
            except Exception:  # an == that raises (arrays): not this one
                continue
    if type(value) is int and 0 <= value <= 9:
        return str(value)
    if isinstance(value, str) and len(value) == 1 and value not in _SPECIAL:
        return value
    return "?"


def render_marbles(events: Sequence[MarbleEvent], values: Mapping[str, Any] | None = None,
                   frames: int = 0) -> str:
    """Draw events as a diagram (the inverse of :func:`parse_marbles`), padded with ``-`` up to
    frame ``frames`` when nothing terminated. A value without a character (not in ``values``, not
    a digit or one-character string) is drawn ``?``; :attr:`MarbleResult.timeline` has it."""
    by_frame: dict[int, list[MarbleEvent]] = defaultdict(list)
    for event in events:
        by_frame[event.frame].append(event)
    out: list[str] = []
    frame = 0
    for at in sorted(by_frame):
        group = by_frame[at]
        out.append("-" * (at - frame))
        chars = "".join("|" if e.kind == "complete" else "#" if e.kind == "error" else _char(e.value, values)
                        for e in group)
        out.append(chars if len(group) == 1 else f"({chars})")
        frame = at + 1
    if not any(e.kind != "next" for e in events) and frames + 1 > frame:
        out.append("-" * (frames + 1 - frame))
    return "".join(out)


def _parse_block(text: str) -> dict[str, str]:
    """Split a docstring-like block (``label: diagram`` lines) into diagrams sharing one time
    origin: the leftmost column where a diagram starts."""
    rows: list[tuple[str, str, int]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        label, colon, rest = line.partition(":")
        if not colon:
            raise ValueError(f"marble block line {line!r} needs 'label: diagram'")
        start = len(line) - len(rest.lstrip()) if rest.strip() else len(line)
        rows.append((label.strip(), line, start))
    origin = min(start for _, _, start in rows)
    diagrams: dict[str, str] = {}
    for label, line, _ in rows:
        key = {"expected": "output", "cold": "source"}.get(label, label)
        if key not in ("source", "hot", "demand", "output"):
            raise ValueError(f"unknown marble label {label!r} (source, hot, demand, output)")
        if key in diagrams or (key in ("source", "hot") and ("source" in diagrams or "hot" in diagrams)):
            raise ValueError(f"marble block names {label!r} twice")
        diagrams[key] = line[origin:].rstrip()
    return diagrams


def _error_value(error: Any) -> BaseException:
    if error is None:
        return MarbleError("#")
    if isinstance(error, type) and issubclass(error, BaseException):
        return error()
    if isinstance(error, BaseException):
        return error
    raise TypeError(f"error= needs an exception or an exception class, got {error!r}")


def _error_matches(expected: Any, actual: Any) -> bool:
    if expected is None or expected is actual:
        return True
    if isinstance(expected, type):
        return isinstance(actual, expected)
    return type(actual) is type(expected) and getattr(actual, "args", None) == expected.args


def _same(expected: MarbleEvent, actual: MarbleEvent) -> bool:
    if expected.frame != actual.frame or expected.kind != actual.kind:
        return False
    if expected.kind == "error":
        return _error_matches(expected.value, actual.value)
    return bool(expected.value == actual.value)


# -- sources ----------------------------------------------------------------------------------
class _ColdSubscription(QueueDrainSubscription):
    """One playing of a cold diagram: items arrive by timer and go out on demand (drain loop)."""

    __slots__ = ("source",)
    # A marble source stands for any upstream: it shows the literal protocol (a filter after
    # it asks for one more per dropped item), not rxpipe's internal conditional delivery.
    conditional_delivery = False

    def __init__(self, source: MarbleSource, downstream: Subscriber[Any]) -> None:
        super().__init__(downstream)
        self.source = source

    # TestPublisher's view of a subscription
    @property
    def subscriber(self) -> Subscriber[Any]:
        return self.downstream

    @property
    def outstanding(self) -> int:
        return self.requested

    terminated = False  # termination sets ``cancelled`` (DrainSubscription)

    def start(self, marbles: Marbles) -> None:
        """Play the diagram from the current frame: frame-0 events now, the rest by the clock."""
        by_frame: dict[int, list[MarbleEvent]] = defaultdict(list)
        for event in self.source.events:
            by_frame[event.frame].append(event)
        origin = marbles.frame()
        for frame in sorted(by_frame):
            if frame == 0:
                self.arrive(by_frame[0])
            else:
                marbles._at(origin + frame, _SOURCES, _bind(self.arrive, by_frame[frame]))

    def arrive(self, events: Iterable[MarbleEvent]) -> None:
        if self.cancelled:
            return
        for event in events:
            if event.kind == "next":
                self.queue.append(event.value)
            else:
                self.finished = True
                if event.kind == "error":
                    self.error = event.value
        self.drain()

    def request(self, n: int) -> None:
        self.source._record_request(n)
        super().request(n)

    def cancel(self) -> None:
        self.source._record_cancel(effective=not self.cancelled)
        super().cancel()

    def _release(self) -> None:
        self.queue.clear()  # arrivals still scheduled find it cancelled


class MarbleSource(TestPublisher[Any]):
    """A :class:`~rxpipe.testing.TestPublisher` that plays a diagram on its :class:`Marbles`
    clock (make it with :meth:`Marbles.cold` or :meth:`Marbles.hot`).

    Besides TestPublisher's records: ``request_log`` (every ``request(n)`` as ``(frame, n)``),
    ``cancelled_at`` (frame of the first cancel of a live subscription, None if none; the
    clean-up cancel at the end of a run is not counted), ``subscribed_at`` (frames).
    """

    __test__ = False

    def __init__(self, marbles: Marbles, diagram: str, events: list[MarbleEvent], *, hot: bool,
                 name: str | None = None) -> None:
        self.kind = "hot" if hot else "cold"
        super().__init__(name=name)
        self.marbles = marbles
        self.diagram = diagram
        self.events = events
        self.hot = hot
        self.request_log: list[tuple[int, int]] = []
        self.cancelled_at: int | None = None
        self.subscribed_at: list[int] = []
        self._terminal: MarbleEvent | None = None

    def _record_request(self, n: int) -> None:
        super()._record_request(n)
        self.request_log.append((self.marbles.frame(), n))

    def _record_cancel(self, effective: bool) -> None:
        super()._record_cancel(effective)
        if effective and self.cancelled_at is None and not self.marbles.closing:
            self.cancelled_at = self.marbles.frame()

    def _subscribe(self, subscriber: Subscriber[Any]) -> None:
        marbles = self.marbles
        if marbles.loop is None:
            raise RuntimeError("a marble source plays only inside Marbles.run()")
        self.subscribed_at.append(marbles.frame())
        if self.hot:
            terminal = self._terminal
            if terminal is None:
                super()._subscribe(subscriber)
                return
            self.subscribe_count += 1
            subscriber.on_subscribe(EMPTY_SUBSCRIPTION)  # a finished hot source replays its end
            if terminal.kind == "error":
                subscriber.on_error(terminal.value)
            else:
                subscriber.on_complete()
            return
        self.subscribe_count += 1
        subscription = _ColdSubscription(self, subscriber)
        self._subscriptions.append(subscription)  # type: ignore[arg-type]  # same protocol
        subscriber.on_subscribe(subscription)
        subscription.start(marbles)

    # A cold source honours demand even when driven by hand.
    def emit(self, *items: Any) -> MarbleSource:
        if self.hot:
            super().emit(*items)
        else:
            for subscription in self._live():
                subscription.arrive([MarbleEvent(0, "next", x) for x in items])  # type: ignore[attr-defined]
        return self

    def complete(self) -> MarbleSource:
        return self._terminate(MarbleEvent(0, "complete"))

    def error(self, error: BaseException) -> MarbleSource:
        return self._terminate(MarbleEvent(0, "error", error))

    def _terminate(self, event: MarbleEvent) -> MarbleSource:
        if self.hot:
            self._terminal = event
            if event.kind == "error":
                super().error(event.value)
            else:
                super().complete()
        else:
            for subscription in self._live():
                subscription.arrive([event])  # type: ignore[attr-defined]
        return self


# -- the subscriber under test ----------------------------------------------------------------
class _TimelineSubscriber(TestSubscriber[Any]):
    __test__ = False

    def __init__(self, marbles: Marbles) -> None:
        super().__init__()
        self.marbles = marbles
        self.timeline: list[MarbleEvent] = []

    def on_next(self, item: Any) -> None:
        self.timeline.append(MarbleEvent(self.marbles.frame(), "next", item))
        super().on_next(item)

    def on_error(self, error: BaseException) -> None:
        self.timeline.append(MarbleEvent(self.marbles.frame(), "error", error))
        super().on_error(error)

    def on_complete(self) -> None:
        self.timeline.append(MarbleEvent(self.marbles.frame(), "complete"))
        super().on_complete()


# -- results ----------------------------------------------------------------------------------
class MarbleResult:
    """What a marble run recorded.

    ``timeline`` (the output as :class:`MarbleEvent` s, exact frames), ``output`` (drawn as a
    diagram), ``values``, ``error``, ``completed``, ``frames`` (the last frame observed),
    ``upstream_requests`` (``(frame, n)`` of the run's first source, None without one) and
    ``upstream_cancelled`` (frame of its cancel, or None). Check with :meth:`expect`.
    """

    __test__ = False

    def __init__(self, timeline: list[MarbleEvent], frames: int, values: Mapping[str, Any] | None,
                 source: MarbleSource | None) -> None:
        self.timeline = timeline
        self.frames = frames
        self.marble_values = values
        self.source = source
        self.upstream_requests: list[tuple[int, int]] | None = (
            list(source.request_log) if source is not None else None)
        self.upstream_cancelled: int | None = source.cancelled_at if source is not None else None

    @property
    def output(self) -> str:
        return render_marbles(self.timeline, self.marble_values, self.frames)

    @property
    def values(self) -> list[Any]:
        return [e.value for e in self.timeline if e.kind == "next"]

    @property
    def error(self) -> BaseException | None:
        return next((e.value for e in self.timeline if e.kind == "error"), None)

    @property
    def completed(self) -> bool:
        return any(e.kind == "complete" for e in self.timeline)

    def expect(self, output: str | Sequence[MarbleEvent] | None = None, *,
               upstream_requests: Sequence[tuple[int, int]] | None = None,
               upstream_cancelled: int | bool | None = _UNSET,
               error: ErrorSpec | None = None, values: Mapping[str, Any] | None = None) -> MarbleResult:
        """Assert the recorded output and upstream records; return self.

        ``output``: a diagram (or events) the timeline must equal exactly, frame by frame; its
        ``#`` matches ``error`` (class: isinstance; instance: the same one or equal type and args;
        None: any). ``upstream_requests``: the first source's ``(frame, n)`` list, exactly.
        ``upstream_cancelled``: a frame, True (at some frame) or False/None (never).
        Raises AssertionError drawing expected and actual diagrams.
        """
        problems: list[str] = []
        mapping = values if values is not None else self.marble_values
        if output is not None:
            expected = (parse_marbles(output, mapping, error) if isinstance(output, str)
                        else list(output))
            if len(expected) != len(self.timeline) or not all(
                    _same(e, a) for e, a in zip(expected, self.timeline, strict=True)):
                drawn = output if isinstance(output, str) else render_marbles(expected, mapping)
                problems.append(
                    f"output differs\n  expected: {drawn}\n  actual:   {self.output}\n"
                    f"  expected events: {_describe(expected)}\n  actual events:   {_describe(self.timeline)}")
        if upstream_requests is not None:
            want = [tuple(x) for x in upstream_requests]
            if self.upstream_requests != want:
                problems.append(f"upstream requests (frame, n) differ\n  expected: {want}\n"
                                f"  actual:   {self.upstream_requests}")
        if upstream_cancelled is not _UNSET:
            got = self.upstream_cancelled
            if upstream_cancelled is True:
                ok = got is not None
            elif upstream_cancelled is False or upstream_cancelled is None:
                ok = got is None
            else:
                ok = got == upstream_cancelled
            if not ok:
                problems.append(f"upstream cancel frame: expected {upstream_cancelled!r}, got {got!r}")
        if problems:
            raise AssertionError("marble test failed: " + "\n".join(problems))
        return self

    def __repr__(self) -> str:
        return (f"<MarbleResult output={self.output!r} upstream_requests={self.upstream_requests!r} "
                f"upstream_cancelled={self.upstream_cancelled!r}>")


def _describe(events: Sequence[MarbleEvent]) -> str:
    parts = []
    for e in events:
        if e.kind == "next":
            parts.append(f"{e.frame}:{e.value!r}")
        elif e.kind == "complete":
            parts.append(f"{e.frame}:|")
        else:
            parts.append(f"{e.frame}:#{e.value!r}")
    return "[" + ", ".join(parts) + "]"


# -- the runner -------------------------------------------------------------------------------
class Marbles:
    """One marble run: makes sources on a shared virtual clock, then :meth:`run` plays them.

    Args:
        frame_s: seconds of virtual time per frame (one diagram column), > 0.
        values: letters → values, for every diagram of this run (sources and expected).
        error: what a source's ``#`` signals (an exception or class; default ``MarbleError``).
        max_frames: a run stops observing here even if the stream never settles.

    For operators over several sources (merge)::

        m = Marbles()
        a, b = m.cold("-a---b|"), m.hot("--c|")
        result = await m.run(a.pipe(ops.merge(b)), demand="^*")   # on a VirtualTimeLoop

    One run per instance; :meth:`run` needs a running :class:`~rxpipe.testing.VirtualTimeLoop`.
    """

    def __init__(self, *, frame_s: float = DEFAULT_FRAME_S, values: Mapping[str, Any] | None = None,
                 error: ErrorSpec | None = None, max_frames: int = DEFAULT_MAX_FRAMES) -> None:
        if not frame_s > 0:
            raise ValueError(f"frame_s must be > 0 seconds, got {frame_s!r}")
        self.frame_s = float(frame_s)
        self.values = values
        self.error = _error_value(error)
        self.max_frames = max_frames
        self.sources: list[MarbleSource] = []
        self.loop: asyncio.AbstractEventLoop | None = None
        self.origin = 0.0
        #: true while the run tears down (its clean-up cancel is not a recorded cancel)
        self.closing = False
        self._slots: dict[int, tuple[list[Callable[[], Any]], list[Callable[[], Any]]]] = {}
        self._handles: list[asyncio.TimerHandle] = []

    def frame(self) -> int:
        """The current frame: loop time since the run started, in frames, rounded."""
        assert self.loop is not None
        return round((self.loop.time() - self.origin) / self.frame_s)

    def time(self, frame: int) -> float:
        """Loop time of ``frame`` (seconds)."""
        return self.origin + frame * self.frame_s

    def _at(self, frame: int, phase: int, action: Callable[[], Any]) -> None:
        """Run ``action`` in ``frame``; one timer per frame runs its phases in order."""
        slot = self._slots.get(frame)
        if slot is None:
            slot = self._slots[frame] = ([], [])
            assert self.loop is not None
            self._handles.append(self.loop.call_at(self.time(frame), self._fire, frame))
        slot[phase].append(action)

    def _fire(self, frame: int) -> None:
        slot = self._slots.pop(frame, None)
        if slot is not None:
            for phase in slot:
                for action in phase:
                    action()

    def cold(self, diagram: str, *, values: Mapping[str, Any] | None = None,
             error: ErrorSpec | None = None, name: str | None = None) -> MarbleSource:
        """A cold source: each subscription plays ``diagram`` from its own frame, on demand."""
        return self._source(diagram, values, error, hot=False, name=name)

    def hot(self, diagram: str, *, values: Mapping[str, Any] | None = None,
            error: ErrorSpec | None = None, name: str | None = None) -> MarbleSource:
        """A hot source: plays ``diagram`` from frame 0 whatever the demand (may break §1.1)."""
        return self._source(diagram, values, error, hot=True, name=name)

    def _source(self, diagram: str, values: Mapping[str, Any] | None, error: ErrorSpec | None,
                hot: bool, name: str | None) -> MarbleSource:
        if self.loop is not None:
            raise RuntimeError("make the sources before Marbles.run()")
        events = parse_marbles(diagram, values if values is not None else self.values,
                               _error_value(error) if error is not None else self.error)
        source = MarbleSource(self, diagram, events, hot=hot, name=name)
        self.sources.append(source)
        return source

    async def run(self, flowable: Flowable[Any], demand: str = "^*", *,
                  frames: int | None = None) -> MarbleResult:
        """Subscribe a recording TestSubscriber to ``flowable`` in frame 0 and play the diagrams.

        ``demand``: the subscriber's demand diagram (default ``^*``: UNBOUNDED at once).
        Observes at least ``frames`` frames (default: the longest diagram), then keeps going
        while the stream has not terminated and timers are pending, up to ``max_frames``.
        A stream still open at the end is cancelled (not counted as the source's cancel).
        """
        loop = asyncio.get_running_loop()
        if not isinstance(loop, VirtualTimeLoop):
            raise RuntimeError("marble tests run on virtual time: use run_virtual(), "
                               "@pytest.mark.virtual or assert_marbles()")
        if self.loop is not None:
            raise RuntimeError("a Marbles instance runs once; make a new one")
        self.loop = loop
        self.origin = loop.time()
        marks = parse_demand(demand)
        subscriber = _TimelineSubscriber(self)

        for frame, n in marks:
            self._at(frame, _DEMAND, subscriber.cancel if n is None else _bind(subscriber.request, n))
        for source in self.sources:
            if source.hot:
                for event in source.events:
                    if event.kind == "next":
                        action = _bind(source.emit, event.value)
                    elif event.kind == "complete":
                        action = source.complete
                    else:
                        action = _bind(source.error, event.value)
                    self._at(event.frame, _SOURCES, action)
        flowable.subscribe(subscriber)
        try:
            self._fire(0)  # frame 0 now, right after subscribing (its timer then finds nothing)
            end = max([frames or 0, _length(demand), *(_length(s.diagram) for s in self.sources)])
            frame = 0
            while not subscriber.done:
                if frame >= end and (frame >= self.max_frames or loop.is_idle()):
                    break
                frame += 1
                tick = loop.create_future()
                handle = loop.call_at(self.time(frame), _resolve, tick)
                try:
                    await tick
                finally:
                    handle.cancel()
            observed = self.frame()
            primary = self.sources[0] if self.sources else None
            result = MarbleResult(list(subscriber.timeline), observed, self.values, primary)
        finally:
            self.closing = True
            for handle in self._handles:
                handle.cancel()
            self._slots.clear()
            if not subscriber.done and subscriber.subscription is not None:
                subscriber.cancel()
        for _ in range(3):  # let cancellations of the stage's tasks settle (leak check)
            await asyncio.sleep(0)
        return result


def _bind(fn: Callable[[Any], Any], arg: Any) -> Callable[[], Any]:
    return lambda: fn(arg)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


# -- one-call helpers -------------------------------------------------------------------------
def _diagrams(source: str, demand: str | None, expected: str | Sequence[MarbleEvent] | None,
              hot: bool) -> tuple[str, str, Any, bool]:
    if "\n" not in source:
        return source, "^*" if demand is None else demand, expected, hot
    block = _parse_block(source)
    if "hot" in block:
        hot, diagram = True, block["hot"]
    elif "source" in block:
        diagram = block["source"]
    else:
        raise ValueError("a marble block needs a 'source:' or 'hot:' line")
    if demand is not None and "demand" in block:
        raise ValueError("demand given twice (block and argument)")
    if expected is not None and "output" in block:
        raise ValueError("expected output given twice (block and argument)")
    if demand is None:
        demand = block.get("demand", "^*")
    return diagram, demand, expected if expected is not None else block.get("output"), hot


async def marbles(operator: Operator | None, source: str, demand: str | None = None, *, hot: bool = False,
                  values: Mapping[str, Any] | None = None, error: ErrorSpec | None = None,
                  frame_s: float = DEFAULT_FRAME_S, frames: int | None = None,
                  max_frames: int = DEFAULT_MAX_FRAMES) -> MarbleResult:
    """Play ``source`` (cold, or ``hot=True``) through ``operator`` with the ``demand`` diagram,
    on the running :class:`~rxpipe.testing.VirtualTimeLoop`; return the :class:`MarbleResult`.

    ``source`` may be a block of ``source:``/``hot:``, ``demand:`` and ``output:`` lines (the
    output line then only sets how long to observe; check it with :meth:`MarbleResult.expect`).
    ``operator`` None tests the source itself. Inside ``@pytest.mark.virtual`` tests::

        result = await marbles(ops.take(2), "-a-b-c-|", "^5")
        result.expect("-a-(b|)", upstream_requests=[(0, 2)], upstream_cancelled=3)
    """
    diagram, demand_diagram, expected, hot = _diagrams(source, demand, None, hot)
    if isinstance(expected, str):
        frames = max(frames or 0, _length(expected))
    m = Marbles(frame_s=frame_s, values=values, error=error, max_frames=max_frames)
    upstream = m.hot(diagram) if hot else m.cold(diagram)
    flowable = upstream if operator is None else upstream.pipe(operator)
    return await m.run(flowable, demand_diagram, frames=frames)


def assert_marbles(operator: Operator | None, source: str, demand: str | None = None,
                   expected: str | Sequence[MarbleEvent] | None = None, *,
                   upstream_requests: Sequence[tuple[int, int]] | None = None,
                   upstream_cancelled: int | bool | None = _UNSET, hot: bool = False,
                   values: Mapping[str, Any] | None = None, error: ErrorSpec | None = None,
                   expected_error: ErrorSpec | None = None, frame_s: float = DEFAULT_FRAME_S,
                   frames: int | None = None, max_frames: int = DEFAULT_MAX_FRAMES) -> MarbleResult:
    """Run a marble test on a fresh virtual-time loop and assert it (from a plain ``def`` test).

        assert_marbles(ops.take(2), source="-a-b-c-|", demand="^5", expected="-a-(b|)",
                       upstream_requests=[(0, 2)], upstream_cancelled=3)

    or with a block that reads like the docstring (``source:``/``hot:``, ``demand:``,
    ``output:`` lines, aligned by column)::

        assert_marbles(ops.map(lambda x: x * 2), \"\"\"
            source:  -1-2-3-|
            output:  -2-4-6-|
        \"\"\")

    ``expected_error`` is what an expected ``#`` matches (default: the source's own ``error``
    when the source diagram has ``#``, else any exception). Raises AssertionError on a mismatch
    (see :meth:`MarbleResult.expect`); returns the result. Inside an async test use
    ``(await marbles(...)).expect(...)`` instead.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise RuntimeError("assert_marbles() runs its own loop; inside an async test use "
                           "`(await marbles(...)).expect(...)`")
    diagram, demand_diagram, expected, hot = _diagrams(source, demand, expected, hot)
    if isinstance(expected, str):
        frames = max(frames or 0, _length(expected))
    source_error = _error_value(error)
    if expected_error is None and "#" in diagram:
        expected_error = source_error
    result = run_virtual(marbles(operator, diagram, demand_diagram, hot=hot, values=values,
                                 error=source_error, frame_s=frame_s, frames=frames,
                                 max_frames=max_frames))
    return result.expect(expected, upstream_requests=upstream_requests,
                         upstream_cancelled=upstream_cancelled, error=expected_error)
