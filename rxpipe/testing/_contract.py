"""``check_operator``: the operator contract of DESIGN §9, runnable against any operator.

Five checks, each on a fresh virtual-time loop, with a hand-driven upstream that emits only what
it was asked for (the stage under test is the only thing that can break a rule) and a strict
downstream subscriber (an emission beyond its demand is seen as ``MissingBackpressureError``):

- ``demand``: delivered <= requested, always, under a seeded random ``request(n)`` pattern; and
  the stage never *stalls* (downstream wants more, upstream still has items, nothing is
  requested of it and nothing is pending: filters must ask again for what they dropped);
- ``bounds``: without downstream demand, items taken from upstream and neither delivered nor
  dropped stay within ``max_held``;
- ``cancel``: cancelling downstream cancels upstream, and leaves no timer running;
- ``error``: an upstream error reaches downstream as the same exception object, once, with no
  timer left;
- ``completion``: what the stage holds when upstream completes is delivered on demand, then
  ``on_complete`` (every input item comes out, unless ``emits_every_item=False``).

A broken rule raises AssertionError naming it, with the marbles of the failing run.
"""

from __future__ import annotations

import asyncio
import inspect
import random
from typing import Any, Callable, Sequence

from .._protocol import UNBOUNDED
from ..errors import MissingBackpressureError
from ..flowable import Flowable, Operator
from ..metrics import live_stages
from ._publisher import TestPublisher
from ._subscriber import TestSubscriber
from ._virtual import VirtualTimeLoop

__all__ = ["check_operator", "CHECKS"]

#: The checks, in the order they run.
CHECKS = ("demand", "bounds", "cancel", "error", "completion")

_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
#: a failing run's drawing: columns of a marble row, and requests listed, at most
_MAX_COLUMNS = 100
_MAX_MARKS = 12


def _as_factory(op_factory: Any) -> Callable[[], Operator]:
    """A zero-argument factory of operators, from either a factory (``lambda: ops.map(f)``, an
    ``operator(MyStage)`` factory) or an operator itself (``ops.map(f)``)."""
    if not callable(op_factory):
        raise TypeError(f"check_operator() needs an operator or a factory of operators, got {op_factory!r}")
    try:
        params = [p for p in inspect.signature(op_factory).parameters.values()
                  if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    if len(params) == 1:  # an operator: Callable[[Flowable], Flowable]
        return lambda: op_factory  # type: ignore[no-any-return]
    return op_factory  # type: ignore[no-any-return]


class _Log:
    """What one run recorded, by virtual time: source items and terminal signals, upstream
    requests and cancels, downstream requests and cancels, outputs."""

    def __init__(self, loop: asyncio.AbstractEventLoop, frame_s: float) -> None:
        self.loop = loop
        self.frame_s = frame_s
        self.rows: dict[str, list[tuple[int, str, Any]]] = {
            "source": [], "upstream": [], "demand": [], "output": []}

    def frame(self) -> int:
        return round(self.loop.time() / self.frame_s)

    def add(self, row: str, kind: str, value: Any = None) -> None:
        self.rows[row].append((self.frame(), kind, value))

    def render(self) -> str:
        legend: dict[Any, str] = {}

        def char(value: Any) -> str:
            key = (type(value).__name__, repr(value))
            if key not in legend:
                legend[key] = _CHARS[len(legend) % len(_CHARS)]
            return legend[key]

        lines = []
        for row in ("source", "output"):
            drawn = self._draw(self.rows[row], char)
            if len(drawn) > _MAX_COLUMNS:
                drawn = f"{drawn[:_MAX_COLUMNS]}… ({len(drawn)} columns)"
            lines.append(f"  {row + ':':10}{drawn}")
        for row in ("upstream", "demand"):
            entries = self.rows[row]
            marks = ", ".join(f"{'cancel' if kind == 'cancel' else f'request({_n(value)})'}@{frame}"
                              for frame, kind, value in entries[:_MAX_MARKS])
            if len(entries) > _MAX_MARKS:
                last_frame, last_kind, last_value = entries[-1]
                last = "cancel" if last_kind == "cancel" else f"request({_n(last_value)})"
                marks += f", … {len(entries) - _MAX_MARKS - 1} more …, {last}@{last_frame}"
            lines.append(f"  {row + ':':10}{marks or '(nothing)'}")
        shown = ", ".join(f"{c}={r}" for (_, r), c in list(legend.items())[:24])
        lines.append(f"  legend:   {shown}{', ...' if len(legend) > 24 else ''}  (one column = {self.frame_s} s)")
        return "\n".join(lines)

    @staticmethod
    def _draw(events: list[tuple[int, str, Any]], char: Callable[[Any], str]) -> str:
        by_frame: dict[int, list[str]] = {}
        for frame, kind, value in events:
            mark = {"complete": "|", "error": "#", "cancel": "!"}.get(kind) or char(value)
            by_frame.setdefault(frame, []).append(mark)
        out, at = [], 0
        for frame in sorted(by_frame):
            marks = by_frame[frame]
            out.append("-" * (frame - at))
            out.append(marks[0] if len(marks) == 1 else f"({''.join(marks)})")
            at = frame + 1
        return "".join(out)


def _n(n: Any) -> str:
    return "UNBOUNDED" if n == UNBOUNDED else str(n)


class _Source(TestPublisher[Any]):
    __test__ = False

    def __init__(self, log: _Log) -> None:
        super().__init__(name="check_source")
        self.log = log

    def _record_request(self, n: int) -> None:
        super()._record_request(n)
        self.log.add("upstream", "request", n)

    def _record_cancel(self, effective: bool) -> None:
        super()._record_cancel(effective)
        if effective:
            self.log.add("upstream", "cancel")

    def emit(self, *items: Any) -> _Source:
        for item in items:
            self.log.add("source", "next", item)
            super().emit(item)
        return self

    def complete(self) -> _Source:
        self.log.add("source", "complete")
        super().complete()
        return self

    def error(self, error: BaseException) -> _Source:
        self.log.add("source", "error", error)
        super().error(error)
        return self


class _Sink(TestSubscriber[Any]):
    """The downstream of the stage under test: it sees the stage's signals as they are (no strict
    boundary in between, which would drop what breaks a rule) and notes the first one that breaks
    §1.1 (beyond demand) or §1.7 (after a terminal signal)."""

    __test__ = False
    _rx_internal = True  # Flowable.subscribe: not wrapped, so a broken rule reaches us

    def __init__(self, log: _Log) -> None:
        super().__init__()
        self.log = log
        self.violation: tuple[str, str] | None = None

    def _break(self, rule: str, detail: str) -> None:
        if self.violation is None:
            self.violation = (rule, detail)

    def _after_terminal(self, signal: str) -> None:
        ended = "on_complete" if self.completed else f"on_error({self.error!r})"
        self._break("terminal", f"{signal} after {ended} (Reactive Streams §1.7)")

    def on_next(self, item: Any) -> None:
        self.log.add("output", "next", item)
        if self.done:
            self._after_terminal(f"on_next({item!r})")
            return
        if len(self.values) >= self.requested:
            self._break("demand", f"it emitted item {len(self.values) + 1} ({item!r}) with {self.requested} "
                        f"requested (Reactive Streams §1.1)")
        super().on_next(item)

    def on_error(self, error: BaseException) -> None:
        self.log.add("output", "error", error)
        if self.done:
            self._after_terminal(f"on_error({error!r})")
            return
        super().on_error(error)

    def on_complete(self) -> None:
        self.log.add("output", "complete")
        if self.done:
            self._after_terminal("on_complete")
            return
        super().on_complete()

    def request(self, n: int) -> None:
        self.log.add("demand", "request", n)
        super().request(n)

    def cancel(self) -> None:
        self.log.add("demand", "cancel")
        super().cancel()


class _Run:
    """One stage built over a recording source, with a strict recording sink downstream."""

    def __init__(self, label: str, factory: Callable[[], Operator], check: str, item: Callable[[int], Any],
                 frame_s: float, time_based: bool, rng: random.Random) -> None:
        self.label = label
        self.check = check
        self.loop = asyncio.get_running_loop()
        self.log = _Log(self.loop, frame_s)
        self.frame_s = frame_s
        self.time_based = time_based
        self.rng = rng
        self.item = item
        self.pub = _Source(self.log)
        operator = factory()
        flow = operator(self.pub)
        if not isinstance(flow, Flowable):
            raise TypeError(f"check_operator({label}): the operator returned {flow!r}, not a Flowable")
        self.flow = flow
        if label == "<lambda>":
            self.label = flow.kind
        self.sink = _Sink(self.log)
        flow.subscribe(self.sink)  # a user subscriber: the strict boundary guards §1.1 and the rest
        self.sent: list[Any] = []

    def fail(self, rule: str, detail: str) -> None:
        raise AssertionError(f"check_operator({self.label}): rule {rule!r} broke in the {self.check!r} run: "
                             f"{detail}\n{self.log.render()}")

    def check_signals(self) -> None:
        if self.sink.violation is not None:
            rule, detail = self.sink.violation
            self.fail(rule, detail)
        error = self.sink.error
        if isinstance(error, MissingBackpressureError):  # a stage before it noticed an overrun
            self.fail("demand", f"{error}")

    async def frames(self, n: int = 1) -> None:
        await asyncio.sleep(n * self.frame_s)

    async def feed(self, limit: int, *, per_frame: int | None = None) -> None:
        """Emit what upstream asked for, up to ``limit`` items in all, over virtual time (random
        gaps for a time-based stage); return once nothing moved for a while."""
        quiet = 0
        while quiet < 25 and not self.pub.cancelled and not self.sink.done:
            moved = False
            burst = per_frame or self.rng.choice((1, 1, 2, 3))
            while self.pub.outstanding and len(self.sent) < limit and burst and not self.pub.cancelled:
                item = self.item(len(self.sent))
                self.sent.append(item)
                self.pub.emit(item)
                burst -= 1
                moved = True
            self.check_signals()
            quiet = 0 if moved else quiet + 1
            gap = self.rng.choice((1, 1, 2, 5, 20)) if self.time_based else 1
            await self.frames(gap)

    async def settle(self, frames: int = 400) -> None:
        """Let timers run (a time-based stage's held items come out), up to ``frames``."""
        for _ in range(frames):
            if not _live_timers(self.loop) and not self.loop._ready:  # type: ignore[attr-defined]
                await asyncio.sleep(0)
                if not _live_timers(self.loop):
                    return
            await self.frames()
        self.check_signals()

    def no_timers(self, after: str) -> None:
        timers = _live_timers(self.loop)
        if timers:
            self.fail("timers", f"{len(timers)} timer(s) still scheduled after {after}: {timers[:3]!r}")

    async def nothing_left(self, after: str) -> None:
        """No timer and no task of the stage's left once the run ended (a few loop turns for
        cancelled tasks to finish)."""
        current = asyncio.current_task()
        for _ in range(5):
            await asyncio.sleep(0)
        self.no_timers(after)
        tasks = [t for t in asyncio.all_tasks() if t is not current and not t.done()]
        if tasks:
            self.fail("tasks", f"{len(tasks)} task(s) still running after {after}: {tasks[:3]!r} "
                      f"(cancel what the stage started in on_stop)")

    def dropped(self) -> int:
        names = {self.flow.name}
        return sum(sum(stats.dropped.values()) for stage in live_stages()
                   if getattr(getattr(stage, "counters", None), "stage", None) in names
                   for stats in [_stats(stage)] if stats is not None)


def _missing_cause(run: _Run) -> str:
    """Why fewer items came out than went in, from what the run shows (for a check's message)."""
    dropped = run.dropped()
    if dropped:
        return (f"{dropped} of them were dropped (counted with drop()): a stage that discards items "
                f"passes emits_every_item=False")
    if any(isinstance(v, (list, tuple)) for v in run.sink.values):
        return ("the stage emits fewer items than it takes (lists, groups): a many-to-one stage passes "
                "emits_every_item=False")
    return ("items were consumed without output and not counted: call `self.drop(item, reason)` for what "
            "you discard, or count what you keep in `self.held` (and emit it at completion); a many-to-one "
            "or filtering stage passes emits_every_item=False")


def _stats(stage: Any) -> Any:
    try:
        return stage.statistics()
    except Exception:
        return None


def _live_timers(loop: asyncio.AbstractEventLoop) -> list[asyncio.TimerHandle]:
    return [h for h in getattr(loop, "_scheduled", ()) if not h.cancelled()]


async def _check_demand(run: _Run, emits_every_item: bool, lossy: bool) -> None:
    total = 0
    for _ in range(8):
        n = run.rng.choice((1, 1, 2, 3, 5))
        total += n
        run.sink.request(n)
        await run.feed(limit=60)
        await run.settle(40)
        run.check_signals()
        if run.sink.done:
            break
        if len(run.sink.values) > total:
            run.fail("demand", f"{len(run.sink.values)} items delivered against {total} requested")
        wanted = total - len(run.sink.values)
        if (wanted and len(run.sent) < 60 and run.pub.outstanding == 0 and not run.pub.cancelled
                and not _live_timers(run.loop) and not lossy):
            run.fail("demand", f"stalled: downstream is owed {wanted} item(s), upstream has more, yet nothing "
                     f"is requested of it and no timer is pending (a low-level stage must request again "
                     f"for what it consumed without output; a Stage with held_bounds_credit=True must "
                     f"release its held items, or not declare it)")
        if emits_every_item and not run.time_based and len(run.sink.values) < total and len(run.sent) < 60 \
                and not run.pub.cancelled:
            run.fail("demand", f"downstream asked for {total} and got {len(run.sink.values)} while upstream "
                     f"had items to give ({len(run.sent)} sent; emits_every_item=True): {_missing_cause(run)}")
    run.sink.cancel()


async def _check_bounds(run: _Run, max_held: int) -> None:
    await run.feed(limit=1000, per_frame=50)
    await run.settle(40)
    run.check_signals()
    if run.sink.values:
        run.fail("demand", f"{len(run.sink.values)} items delivered without any downstream demand")
    held = len(run.sent) - run.dropped()
    if held > max_held:
        run.fail("bounds", f"{len(run.sent)} items taken from upstream without downstream demand, "
                 f"{held} of them neither delivered nor dropped (max_held={max_held})")
    run.sink.cancel()


async def _check_cancel(run: _Run) -> None:
    run.sink.request(1)
    await run.feed(limit=4)
    run.sink.cancel()
    await run.frames(3)
    if not run.pub.cancelled:
        run.fail("cancel", "cancelling downstream did not cancel upstream (Reactive Streams §3.5–3.7)")
    run.no_timers("cancel")


async def _check_error(run: _Run) -> None:
    run.sink.request(UNBOUNDED)
    await run.feed(limit=3)
    failure = RuntimeError(f"upstream of {run.label} failed (check_operator)")
    if not run.sink.done:
        run.pub.error(failure)
    await run.settle(40)
    run.check_signals()
    if run.sink.error is not failure:
        got = f"error {run.sink.error!r}" if run.sink.error is not None else (
            "completion" if run.sink.completed else "nothing")
        run.fail("error", f"the upstream error did not reach downstream as is: got {got}")
    run.no_timers("the error")


async def _check_completion(run: _Run, emits_every_item: bool) -> None:
    run.sink.request(1)
    await run.feed(limit=5)
    if not run.sink.done:
        run.pub.complete()
    await run.settle(40)
    run.check_signals()
    run.sink.request(UNBOUNDED)
    await run.settle(400)
    run.check_signals()
    if not run.sink.completed:
        got = f"error {run.sink.error!r}" if run.sink.error is not None else "nothing"
        run.fail("completion", f"after upstream completed and downstream asked for everything: {got}")
    if emits_every_item and len(run.sink.values) < len(run.sent):
        run.fail("completion", f"{len(run.sent)} items in, {len(run.sink.values)} out at completion "
                 f"(emits_every_item=True): {_missing_cause(run)}")
    run.no_timers("completion")


def check_operator(op_factory: Callable[..., Any], *, emits_every_item: bool = True, time_based: bool = False,
                   items: Callable[[int], Any] | Sequence[Any] | None = None, max_held: int = 256,
                   frame_s: float = 0.01, seed: int = 0, checks: Sequence[str] = CHECKS) -> None:
    """Run the five contract checks of DESIGN §9 on an operator; raise AssertionError on a break.

    ``op_factory``: an operator (``ops.distinct()``, ``Callable[[Flowable], Flowable]``) or a
    zero-argument factory of one (``lambda: ops.take_while(p)``, or a factory made by
    :func:`rxpipe.stage.operator` when its stage needs no argument).
    ``emits_every_item``: every input item leads to at least one output (map, tap, delay, an
    expanding stage); False for filters, reducers and lossy stages (then the checks only ask
    that the stream never stalls and completes). ``time_based``: the stage holds items on timers
    (debounce, sample, delay): items arrive with random gaps of 1 to 20 frames and timers are
    given time to fire; with unbounded upstream demand its drops must be counted
    (``Stage.drop``) for the bound to hold. ``items``: input item number -> item, or a
    sequence (default ``1, 2, 3, ...``). ``max_held``: items a stage may take from upstream
    ahead of downstream demand and keep (items; default 256, the largest default prefetch).
    ``frame_s``: seconds of virtual time per marble column. ``seed``: the request pattern and
    gaps. ``checks``: a subset of :data:`CHECKS`.

    Each check runs on its own :class:`~rxpipe.testing.VirtualTimeLoop`, so call this from a
    plain (not async) test. The AssertionError names the rule (``demand``, ``bounds``,
    ``cancel``, ``error``, ``completion``, ``terminal`` — a signal after ``on_complete`` or
    ``on_error`` —, ``timers``, ``tasks`` — left running once the run ended) and draws the failing run
    (source, output, upstream requests, downstream demand).
    Anchor: DESIGN §9; aiostream's shipped ``test_utils``; Reactive Streams' TCK.
    """
    factory = _as_factory(op_factory)
    unknown = set(checks) - set(CHECKS)
    if unknown:
        raise ValueError(f"check_operator(checks=) takes names from {CHECKS}, got {sorted(unknown)}")
    if items is None:
        item: Callable[[int], Any] = lambda i: i + 1  # noqa: E731
    elif callable(items):
        item = items
    else:
        seq = list(items)
        if not seq:
            raise ValueError("check_operator(items=) needs at least one item")
        item = lambda i: seq[i % len(seq)]  # noqa: E731
    label = getattr(op_factory, "__name__", None) or repr(op_factory)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise RuntimeError("check_operator() runs its own virtual-time loops: call it from a plain (sync) test")
    lossy = time_based and not emits_every_item

    for check in CHECKS:
        if check not in checks:
            continue

        async def one(check: str = check) -> None:
            run = _Run(label, factory, check, item, frame_s, time_based, random.Random(f"{seed}:{check}"))
            if check == "demand":
                await _check_demand(run, emits_every_item, lossy)
            elif check == "bounds":
                await _check_bounds(run, max_held)
            elif check == "cancel":
                await _check_cancel(run)
            elif check == "error":
                await _check_error(run)
            else:
                await _check_completion(run, emits_every_item)
            if not run.sink.done:
                run.sink.cancel()
            await run.nothing_left(f"the {check!r} run ended")

        with asyncio.Runner(loop_factory=VirtualTimeLoop) as runner:
            runner.run(one())

