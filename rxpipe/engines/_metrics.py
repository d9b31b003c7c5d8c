"""Engine metrics (DESIGN §7), exported with prometheus_client.

- ``rxpipe_engine_running_seqs`` / ``rxpipe_engine_waiting_seqs``: gauges read lazily at scrape
  time from every live engine (summed), so nothing is updated per sequence.
- ``rxpipe_engine_batch_tokens`` / ``rxpipe_engine_step_duration_seconds``: histograms observed
  once per engine step (never per token).
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Any, Iterator

from prometheus_client import Histogram
from prometheus_client.core import REGISTRY, GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from .base import Engine

__all__ = ["register", "live_engines", "STEP_DURATION", "BATCH_TOKENS"]

_lock = threading.Lock()  # the collector runs on prometheus_client's HTTP thread
_engines: weakref.WeakSet[Any] = weakref.WeakSet()

STEP_DURATION = Histogram(
    "rxpipe_engine_step_duration_seconds", "Duration of one engine step (prefill and decode), seconds.",
    buckets=(0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5))
BATCH_TOKENS = Histogram(
    "rxpipe_engine_batch_tokens", "Tokens processed in one engine step (prefilled + decoded).",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768))


def register(engine: Engine) -> None:
    """Export ``engine``'s running/waiting counts until it is garbage-collected."""
    with _lock:
        _engines.add(engine)


def live_engines() -> list[Engine]:
    with _lock:
        return list(_engines)


class EngineCollector(Collector):
    def collect(self) -> Iterator[Any]:
        running = waiting = 0
        for engine in live_engines():
            try:
                running += engine.running
                waiting += engine.waiting
            except Exception:  # an engine torn down mid-scrape: skip it this time
                continue
        yield GaugeMetricFamily("rxpipe_engine_running_seqs", "Sequences running on the engines.", value=running)
        yield GaugeMetricFamily("rxpipe_engine_waiting_seqs", "Sequences admitted and waiting to start.",
                                value=waiting)


REGISTRY.register(EngineCollector())
