"""Stage statistics exported to Prometheus (DESIGN §7), read lazily at scrape time."""

from __future__ import annotations

import gc

from prometheus_client import REGISTRY

import rxpipe as rx
from rxpipe import operators as ops
from rxpipe.metrics import StageCounters, _retire, live_stages
from rxpipe.testing import TestSubscriber


def sample(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


def test_stage_counters_are_exported_by_stage_name_and_survive_the_stage() -> None:
    ts = TestSubscriber[int]()
    rx.range(0, 10).pipe(ops.buffer(4, name="metrics_q")).subscribe(ts)
    ts.request(3)
    assert sample("rxpipe_stage_items_total", stage="metrics_q", direction="in") == 7  # 4 prefetched + 3 replenished
    assert sample("rxpipe_stage_items_total", stage="metrics_q", direction="out") == 3
    assert sample("rxpipe_stage_buffered_items", stage="metrics_q") == 4
    assert sample("rxpipe_stage_capacity_items", stage="metrics_q") == 4
    assert sample("rxpipe_stage_demand", stage="metrics_q") == 0
    ts.request(100)
    assert ts.completed
    del ts
    gc.collect()
    assert not [s for s in live_stages() if s.counters.stage == "metrics_q"]
    # the dead stage's totals stay (counters never go backwards)
    assert sample("rxpipe_stage_items_total", stage="metrics_q", direction="in") == 10
    assert sample("rxpipe_stage_items_total", stage="metrics_q", direction="out") == 10
    assert sample("rxpipe_stage_buffered_items", stage="metrics_q") is None


def test_drops_are_counted_by_reason() -> None:
    ts = TestSubscriber[int]()
    rx.range(0, 10).pipe(ops.buffer(3, overflow="drop_oldest", name="metrics_shed")).subscribe(ts)
    assert sample("rxpipe_stage_dropped_total", stage="metrics_shed", reason="drop_oldest") == 7


def test_a_finalizer_during_a_scrape_does_not_deadlock() -> None:
    counters = StageCounters("metrics_fin")
    counters.items_in = 5
    counters.drop("overflow", 2)

    class Stage:
        def __init__(self) -> None:
            self.counters = counters

        def statistics(self):  # type: ignore[no-untyped-def]
            _retire(counters)  # as if a GC finalizer ran in the middle of the scrape
            from rxpipe.metrics import StageStatistics

            return StageStatistics("metrics_fin", 0, 0, None, 0, 0, {})

    from rxpipe.metrics import track

    stage = Stage()
    track(stage)  # type: ignore[arg-type]
    REGISTRY.get_sample_value("rxpipe_stage_demand", {"stage": "metrics_fin"})  # must return
    del stage
    gc.collect()
    assert sample("rxpipe_stage_items_total", stage="metrics_fin", direction="in") == 10  # retired twice: 5 + 5
    assert sample("rxpipe_stage_dropped_total", stage="metrics_fin", reason="overflow") == 4
