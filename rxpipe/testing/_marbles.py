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
from typing import Any, Callable, Mapping, Sequence

from ..flowable import Flowable, Operator
from ._marble_parse import (
    ErrorSpec,
    MarbleError,
    MarbleEvent,
    _describe,
    _error_value,
    _length,
    _parse_block,
    _same,
    parse_demand,
    parse_marbles,
    render_marbles,
)
from ._marble_sources import _DEMAND, _SOURCES, MarbleSource, _bind
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

_UNSET: Any = object()


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
