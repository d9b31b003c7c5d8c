"""Stage statistics and their Prometheus export (DESIGN §7).

A running stage (one subscription of an operator) keeps its numbers in a :class:`StageCounters`
and registers itself with :func:`track`. Nothing is looked up per item: stages bump plain ints
(per pass or per batch where they can), and the Prometheus collector reads every live stage
lazily at scrape time, summing by stage name. Counters of finished stages are folded into
per-name totals when the stage is garbage-collected, so ``*_total`` series never go backwards.

Exported families (labels from bounded sets only: stage names are chosen by the pipeline
author, never by user input):

- ``rxpipe_stage_items_total{stage, direction="in"|"out"}``
- ``rxpipe_stage_demand{stage}`` outstanding downstream demand (capped at 2**53 for float export)
- ``rxpipe_stage_buffered_items{stage}``, ``rxpipe_stage_capacity_items{stage}``
- ``rxpipe_stage_dropped_total{stage, reason}``
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import weakref
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterator, Protocol

from prometheus_client.core import REGISTRY, CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = ["StageCounters", "StageStatistics", "StageLike", "StageScope", "track", "live_stages", "scoped",
           "statistics_of",
           "StageCollector", "set_debug"]

_GAUGE_CAP = 2**53
log = logging.getLogger("rxpipe")

#: Debug mode: a low-level stage without ``statistics()`` is an error at subscribe instead of a
#: warning logged once. On with ``RXPIPE_DEBUG=1`` and in tests (rxpipe's pytest plugin).
_debug = os.environ.get("RXPIPE_DEBUG", "") not in ("", "0")
_warned: set[tuple[type, str]] = set()


def set_debug(enabled: bool = True) -> None:
    """Turn rxpipe's debug checks on or off (process-wide; default off, or on with
    ``RXPIPE_DEBUG=1``). On: a low-level stage (``UpstreamLink``) that has no ``statistics()``
    raises TypeError when subscribed (its subscriber gets ``on_error``). Off: that is logged
    once per stage class, and the stage's counters are exported without its gauges.
    ``rxpipe.testing.pytest_plugin`` turns it on for the test run."""
    global _debug
    _debug = bool(enabled)


def _warn_once(cls: type, what: str, message: str, error: BaseException | None = None) -> None:
    if (cls, what) not in _warned:
        _warned.add((cls, what))
        log.warning("%s", message, exc_info=error)


class StageCounters:
    """Monotonic per-subscription counts of one stage: items in and out, drops by reason."""

    __slots__ = ("stage", "items_in", "items_out", "dropped")

    def __init__(self, stage: str) -> None:
        self.stage = stage
        self.items_in = 0
        self.items_out = 0
        self.dropped: dict[str, int] = {}

    def drop(self, reason: str, count: int = 1) -> None:
        """Count ``count`` items dropped for ``reason`` (a fixed word such as ``"overflow"``)."""
        self.dropped[reason] = self.dropped.get(reason, 0) + count


@dataclass(frozen=True, slots=True)
class StageStatistics:
    """A snapshot of one running stage.

    demand: outstanding downstream demand (items; ``UNBOUNDED`` means no limit).
    buffered: items the stage holds right now. capacity: its bound (None: it holds none).
    items_in / items_out: items received from upstream / delivered downstream so far.
    dropped: items shed so far, by reason.
    """

    stage: str
    demand: int
    buffered: int
    capacity: int | None
    items_in: int
    items_out: int
    dropped: dict[str, int] = field(default_factory=dict)


class StageLike(Protocol):
    counters: StageCounters

    def statistics(self) -> StageStatistics: ...


# The collector may run on prometheus_client's HTTP thread. Finalizers of dead stages may run
# at any allocation (inside a scrape too), so they never take the lock: they only append to
# `_pending` (atomic), and the next scrape folds the pending counters in under the lock.
_lock = threading.Lock()
_live: weakref.WeakSet[Any] = weakref.WeakSet()
_pending: list[StageCounters] = []
_retired_in: dict[str, int] = defaultdict(int)
_retired_out: dict[str, int] = defaultdict(int)
_retired_dropped: dict[tuple[str, str], int] = defaultdict(int)


def _retire(counters: StageCounters) -> None:
    _pending.append(counters)


def _fold_pending() -> None:
    """Add the counters of stages that died since the last call to the totals (lock held)."""
    while _pending:
        counters = _pending.pop()
        _retired_in[counters.stage] += counters.items_in
        _retired_out[counters.stage] += counters.items_out
        for reason, count in counters.dropped.items():
            _retired_dropped[(counters.stage, reason)] += count


def _missing_statistics(stage: Any) -> str:
    return (f"stage {stage.counters.stage!r} ({type(stage).__name__}) has no statistics(): a low-level "
            f"stage must return a StageStatistics from statistics() (rxpipe.stage.Stage provides "
            f"it); only its counters are exported")


class StageScope:
    """The stages tracked while this scope was current (:func:`scoped`): one pipeline run's
    stages, as weak references (a stage leaves when it is garbage-collected). The live view reads
    a pipeline's running stages here, so two pipelines with stages of the same name in one
    process never mix."""

    __slots__ = ("_stages",)

    def __init__(self) -> None:
        self._stages: weakref.WeakSet[Any] = weakref.WeakSet()

    def add(self, stage: Any) -> None:
        self._stages.add(stage)

    def stages(self) -> list[Any]:
        """The live stages of the scope (any order)."""
        return list(self._stages)


#: the scope stages subscribed now join (set by :func:`scoped` on the loop's thread)
_scope: StageScope | None = None


@contextlib.contextmanager
def scoped(scope: StageScope) -> Iterator[StageScope]:
    """While the block runs, every stage :func:`track` sees joins ``scope`` too (the stages a
    pipeline's subscribe creates; nested scopes restore the outer one)."""
    global _scope
    outer, _scope = _scope, scope
    try:
        yield scope
    finally:
        _scope = outer


def track(stage: StageLike) -> None:
    """Export ``stage``'s statistics until it is garbage-collected (then keep its totals); add it
    to the current :class:`StageScope` if there is one.

    Raises TypeError in debug mode (:func:`set_debug`) for a stage without ``statistics()``;
    otherwise that is logged once per class and only the stage's counters are exported."""
    if not callable(getattr(stage, "statistics", None)):
        if _debug:
            raise TypeError(_missing_statistics(stage))
        _warn_once(type(stage), "statistics", _missing_statistics(stage))
    with _lock:
        _live.add(stage)
    if _scope is not None:
        _scope.add(stage)
    weakref.finalize(stage, _retire, stage.counters)


def live_stages() -> list[StageLike]:
    """The stages currently tracked (for tests and ``rxpipe`` tooling)."""
    with _lock:
        return list(_live)


def gauge_by(name: str, documentation: str, label: str, values: dict[str, int]) -> GaugeMetricFamily:
    """A gauge family with one sample per ``label`` value, in sorted order (for collectors that
    read live objects at scrape time)."""
    family = GaugeMetricFamily(name, documentation, labels=[label])
    for key, value in sorted(values.items()):
        family.add_metric([key], value)
    return family


def statistics_of(stage: Any) -> StageStatistics | None:
    """``stage.statistics()``; a stage without it (logged once at track) shows its counters;
    one whose ``statistics()`` raises is logged once per class and skipped (None)."""
    statistics = getattr(stage, "statistics", None)
    if not callable(statistics):
        counters = stage.counters
        return StageStatistics(counters.stage, 0, 0, None, counters.items_in, counters.items_out,
                               dict(counters.dropped))
    try:
        return statistics()  # type: ignore[no-any-return]
    except Exception as error:
        _warn_once(type(stage), "raised", f"statistics() of stage {stage.counters.stage!r} "
                   f"({type(stage).__name__}) raised {error!r}; it is left out of this scrape", error)
        return None


class StageCollector(Collector):
    """Collects every tracked stage at scrape time (registered once on the default registry)."""

    def collect(self) -> Iterator[Any]:
        with _lock:
            _fold_pending()
            stages = list(_live)
            items_in = dict(_retired_in)
            items_out = dict(_retired_out)
            dropped = dict(_retired_dropped)
        demand: dict[str, int] = defaultdict(int)
        buffered: dict[str, int] = defaultdict(int)
        capacity: dict[str, int] = defaultdict(int)
        for stage in stages:
            stats = statistics_of(stage)
            if stats is None:
                continue
            name = stats.stage
            items_in[name] = items_in.get(name, 0) + stats.items_in
            items_out[name] = items_out.get(name, 0) + stats.items_out
            for reason, count in stats.dropped.items():
                dropped[(name, reason)] = dropped.get((name, reason), 0) + count
            demand[name] = min(_GAUGE_CAP, demand[name] + stats.demand)
            buffered[name] += stats.buffered
            if stats.capacity is not None:
                capacity[name] += stats.capacity
        items = CounterMetricFamily("rxpipe_stage_items", "Items through a stage.",
                                    labels=["stage", "direction"])
        for name, count in sorted(items_in.items()):
            items.add_metric([name, "in"], count)
        for name, count in sorted(items_out.items()):
            items.add_metric([name, "out"], count)
        yield items
        yield gauge_by("rxpipe_stage_demand", "Outstanding downstream demand (items).", "stage", demand)
        yield gauge_by("rxpipe_stage_buffered_items", "Items held by a stage.", "stage", buffered)
        yield gauge_by("rxpipe_stage_capacity_items", "Bound on items held by a stage.", "stage", capacity)
        counter = CounterMetricFamily("rxpipe_stage_dropped", "Items shed by a stage.",
                                      labels=["stage", "reason"])
        for (name, reason), count in sorted(dropped.items()):
            counter.add_metric([name, reason], count)
        yield counter


REGISTRY.register(StageCollector())
