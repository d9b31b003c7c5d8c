"""The live pipeline view's data: one snapshot of where the pressure is (DESIGN §7).

:class:`PipelineView` reads a running pipeline's stages (its :class:`~rxpipe.metrics.StageScope`)
and turns two readings of their pressure clocks and counters into per-second figures: busy /
backpressured / idle milliseconds per second over the last 1–2 s, items in and out per second.
A reading is taken on every snapshot and once a second by :meth:`PipelineView.run_ticker`, so
the interval a snapshot covers is the one from the newest reading at least a second old.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

from .._pressure import BACKPRESSURED, BUSY, loop_clock
from ..metrics import statistics_of
from ..runtime import Pipeline
from ._shape import Node, engines_of, shape

__all__ = ["PipelineView", "bottleneck", "WINDOW_S", "BACKPRESSURED_MS", "BUSY_MS"]

#: a snapshot's figures cover at least this long (seconds), at most twice it
WINDOW_S = 1.0
#: Flink's backpressure levels: up to 10 % is "OK"; above it a stage counts as backpressured for
#: the bottleneck rule (ms per s)
BACKPRESSURED_MS = 100
#: a stage must be busy at least this much to be named the bottleneck (ms per s)
BUSY_MS = 100
#: readings older than this are dropped (seconds); one at least WINDOW_S old is always kept
_KEEP_S = 3 * WINDOW_S
#: a snapshot closer than this to the last reading adds none (bounds the readings under polling)
_MIN_GAP_S = 0.2


@dataclass(slots=True)
class _Totals:
    """The monotonic figures of one stage name at one reading (summed over its live stages)."""

    busy_s: float = 0.0
    backpressured_s: float = 0.0
    items_in: int = 0
    items_out: int = 0
    instances: int = 0


@dataclass(slots=True)
class _Now:
    """The instantaneous figures of one stage name (summed over its live stages), and how many of
    its live stages are busy and backpressured right now."""

    demand: int = 0
    requested: int = 0
    held: int = 0
    busy: int = 0
    backpressured: int = 0


_UNBOUNDED = 2**63 - 1


def _add(a: int, b: int) -> int:
    total = a + b
    return _UNBOUNDED if total >= _UNBOUNDED else total


class PipelineView:
    """Snapshots of one pipeline's pressure (``GET /pipeline.json``'s body, DESIGN §7).

    ``pipeline``: the :class:`~rxpipe.runtime.Pipeline` (its ``scope`` holds the running stages).
    ``clock``: seconds on the loop's clock (default: the running loop's ``time``, read on first
    use). ``wall``: Unix seconds for ``at`` (default ``time.time``).
    """

    def __init__(self, pipeline: Pipeline, *, clock: Callable[[], float] | None = None,
                 wall: Callable[[], float] = time.time) -> None:
        self.pipeline = pipeline
        self.nodes: list[Node] = shape(pipeline)
        self.names = {node.name for node in self.nodes}
        self._clock = clock
        self._wall = wall
        self._engines = engines_of(pipeline)
        self._readings: deque[tuple[float, dict[str, _Totals]]] = deque()

    # -- readings ------------------------------------------------------------------------------
    def _now(self) -> float:
        if self._clock is None:
            self._clock = loop_clock()
        return self._clock()

    def _read(self) -> tuple[dict[str, _Totals], dict[str, _Now]]:
        totals = {name: _Totals() for name in self.names}
        now = {name: _Now() for name in self.names}
        for stage in self.pipeline.scope.stages():
            counters = getattr(stage, "counters", None)
            name = getattr(counters, "stage", None)
            if name not in self.names:
                continue
            stats = statistics_of(stage)
            if stats is None:
                continue
            t, n = totals[name], now[name]
            t.instances += 1
            t.items_in += stats.items_in
            t.items_out += stats.items_out
            clock = getattr(stage, "pressure_clock", None)
            if clock is not None:
                _, busy, backpressured = clock.reading()
                t.busy_s += busy
                t.backpressured_s += backpressured
                n.busy += clock.state == BUSY
                n.backpressured += clock.state == BACKPRESSURED
            n.demand = _add(n.demand, stats.demand)
            n.held += stats.buffered
            n.requested = _add(n.requested, int(getattr(stage, "upstream_outstanding", 0) or 0))
        return totals, now

    def tick(self) -> None:
        """Take a reading now (the ticker calls it once a second)."""
        self._record(self._now(), self._read()[0])

    def _record(self, at: float, totals: dict[str, _Totals]) -> None:
        readings = self._readings
        if readings and at - readings[-1][0] < _MIN_GAP_S:
            return
        readings.append((at, totals))
        while len(readings) > 2 and at - readings[1][0] >= _KEEP_S:
            readings.popleft()

    def _base(self, at: float) -> tuple[float, dict[str, _Totals]] | None:
        """The newest reading at least :data:`WINDOW_S` before ``at``, else the oldest one."""
        chosen = None
        for reading in self._readings:
            if at - reading[0] >= WINDOW_S:
                chosen = reading
            else:
                break
        if chosen is None and self._readings:
            chosen = self._readings[0]
        return chosen

    async def run_ticker(self, interval_s: float = WINDOW_S) -> None:
        """Take a reading every ``interval_s`` seconds until cancelled (a task of the server)."""
        while True:
            self.tick()
            await asyncio.sleep(interval_s)

    # -- the snapshot --------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """``{"at", "stages", "bottleneck", "engines", "tenants"}`` as DESIGN §7 spells it.

        Per stage: ``name``, ``kind``, ``upstream`` (names), ``busy_ms_per_s``,
        ``backpressured_ms_per_s``, ``idle_ms_per_s`` (ints summing to 1000 over the interval
        since the base reading; the first snapshot of a view with no reading yet shows the state
        each stage is in at that instant; all idle before a stage ever ran), ``demand`` (outstanding
        downstream request, items), ``requested`` (outstanding upstream request), ``held``
        (items), ``in_per_s``, ``out_per_s`` (items/s, one decimal). ``bottleneck``: see
        :func:`bottleneck`. ``engines``: ``name``, ``running``, ``waiting``, ``free_slots``.
        ``tenants``: ``name``, ``vtc`` (virtual token counter), ``queued`` (items)."""
        at = self._now()
        totals, now = self._read()
        base = self._base(at)
        self._record(at, totals)
        window = at - base[0] if base is not None else 0.0
        before = base[1] if base is not None else {}
        stages = []
        for node in self.nodes:
            t, n = totals[node.name], now[node.name]
            b = before.get(node.name, _Totals())
            busy = bp = 0
            rate_in = rate_out = 0.0
            if window > 0:
                share = 1000.0 / (window * max(1, t.instances))
                busy = min(1000, max(0, round((t.busy_s - b.busy_s) * share)))
                bp = min(1000 - busy, max(0, round((t.backpressured_s - b.backpressured_s) * share)))
                rate_in = round(max(0, t.items_in - b.items_in) / window, 1)
                rate_out = round(max(0, t.items_out - b.items_out) / window, 1)
            elif t.instances:  # no earlier reading at all: the state each stage is in now
                busy = round(1000 * n.busy / t.instances)
                bp = min(1000 - busy, round(1000 * n.backpressured / t.instances))
            stages.append({
                "name": node.name, "kind": node.kind, "upstream": list(node.upstream),
                "busy_ms_per_s": busy, "backpressured_ms_per_s": bp, "idle_ms_per_s": 1000 - busy - bp,
                "demand": n.demand, "requested": n.requested, "held": n.held,
                "in_per_s": rate_in, "out_per_s": rate_out,
            })
        return {"at": round(self._wall(), 3), "stages": stages, "bottleneck": bottleneck(stages),
                "engines": self._engine_figures(), "tenants": self._tenant_figures()}

    def _engine_figures(self) -> list[dict[str, Any]]:
        return [{"name": str(e.name), "running": int(e.running), "waiting": int(e.waiting),
                 "free_slots": int(e.free_slots)} for e in self._engines]

    def _tenant_figures(self) -> list[dict[str, Any]]:
        found: dict[str, tuple[float, int]] = {}
        for stage in self.pipeline.scope.stages():
            figures = getattr(stage, "tenant_figures", None)
            if figures is None or getattr(stage, "cancelled", False):
                continue
            for name, vtc, queued in figures():
                old_vtc, old_queued = found.get(name, (0.0, 0))
                found[name] = (max(old_vtc, vtc), old_queued + queued)
        return [{"name": name, "vtc": round(vtc, 3), "queued": queued} for name, (vtc, queued) in sorted(found.items())]


def bottleneck(stages: list[dict[str, Any]]) -> str | None:
    """Flink's rule over a snapshot's ``stages``: the busy stage that is not backpressured,
    downstream of the backpressured ones; None when nothing is backpressured.

    Backpressured: over :data:`BACKPRESSURED_MS` (Flink's "OK" level is up to 10 %). Among the
    stages downstream of a backpressured one (through any number of others) that are not
    backpressured themselves and are busy at least :data:`BUSY_MS`, the busiest (ties: the one
    nearest the source, in graph order); None when no such stage is busy (the pressure comes from
    outside the graph, e.g. a slow subscriber)."""
    pressed = [s["name"] for s in stages if s["backpressured_ms_per_s"] > BACKPRESSURED_MS]
    if not pressed:
        return None
    downstream: dict[str, list[str]] = {s["name"]: [] for s in stages}
    for s in stages:
        for up in s["upstream"]:
            if up in downstream:
                downstream[up].append(s["name"])
    reached: set[str] = set()
    todo = list(pressed)
    while todo:
        for name in downstream.get(todo.pop(), ()):
            if name not in reached:
                reached.add(name)
                todo.append(name)
    best: dict[str, Any] | None = None
    for s in stages:
        if (s["name"] in reached and s["backpressured_ms_per_s"] <= BACKPRESSURED_MS
                and s["busy_ms_per_s"] >= BUSY_MS and (best is None or s["busy_ms_per_s"] > best["busy_ms_per_s"])):
            best = s
    return best["name"] if best is not None else None
