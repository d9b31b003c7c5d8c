"""Engine metrics (DESIGN §7), exported with prometheus_client.

Every engine series carries ``engine``, the engine's :attr:`~rxpipe.engines.Engine.name` (default:
its model id), so several engines in one process never overwrite each other; engines sharing a
name are summed.

- ``rxpipe_engine_running_seqs{engine}`` / ``rxpipe_engine_waiting_seqs{engine}``: gauges read
  lazily at scrape time from every live engine, so nothing is updated per sequence.
- ``rxpipe_engine_concurrency_limit{engine}``: the in-flight window of engines that have one
  (``OpenAIEngine``: fixed and cut on 429/503, or adaptive with ``max_in_flight="auto"``).
- ``rxpipe_engine_advertised_credit{engine}`` / ``rxpipe_engine_credit_watch_up{engine}``: of
  engines in front of a backend that says its credit (``OpenAIEngine``, DESIGN §8b), the
  requests its last word allows less what was sent since (``advertised_credit``), and 1 while its
  credit watch is open (``watching``); read at scrape time.
- ``rxpipe_engine_batch_tokens{engine}`` / ``rxpipe_engine_step_duration_seconds{engine}``:
  histograms observed once per engine step (never per token), through :func:`observe_step`.
- ``rxpipe_engine_prefix_cache_queries_total{engine}`` / ``..._hits_total{engine}``: prompt
  tokens looked up in an engine's prefix cache and found there (vLLM's counters), counted once
  per step through :func:`count_prefix_cache`.
"""

from __future__ import annotations

import threading
import weakref
from collections import defaultdict
from typing import Any, Iterator, Protocol

from prometheus_client.core import REGISTRY
from prometheus_client.registry import Collector

from .._loop_metrics import LoopCounter, LoopHistogram
from ..metrics import gauge_by


class MeteredEngine(Protocol):
    """What the collector reads of an engine (:class:`~rxpipe.serving.Engine` has it)."""

    name: str

    @property
    def running(self) -> int: ...

    @property
    def waiting(self) -> int: ...

__all__ = ["register", "live_engines", "observe_step", "count_prefix_cache", "STEP_DURATION", "BATCH_TOKENS",
           "PREFIX_CACHE_QUERIES", "PREFIX_CACHE_HITS"]

_lock = threading.Lock()  # the collector runs on prometheus_client's HTTP thread
_engines: weakref.WeakSet[Any] = weakref.WeakSet()

STEP_DURATION = LoopHistogram(
    "rxpipe_engine_step_duration_seconds", "Duration of one engine step (prefill and decode), seconds.",
    ["engine"], buckets=(0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5))
BATCH_TOKENS = LoopHistogram(
    "rxpipe_engine_batch_tokens", "Tokens processed in one engine step (prefilled + decoded).",
    ["engine"], buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768))

# (step duration child, batch tokens child) per engine name: one dict lookup per step
_step_children: dict[str, tuple[Any, Any]] = {}

PREFIX_CACHE_QUERIES = LoopCounter(
    "rxpipe_engine_prefix_cache_queries", "Prompt tokens looked up in the engine's prefix cache (vLLM's "
    "vllm:prefix_cache_queries).", ["engine"])
PREFIX_CACHE_HITS = LoopCounter(
    "rxpipe_engine_prefix_cache_hits", "Prompt tokens found in the engine's prefix cache, not prefilled "
    "(vLLM's vllm:prefix_cache_hits).", ["engine"])
_prefix_children: dict[str, tuple[Any, Any]] = {}


def register(engine: MeteredEngine) -> None:
    """Export ``engine``'s running/waiting counts until it is garbage-collected."""
    with _lock:
        _engines.add(engine)


def live_engines() -> list[MeteredEngine]:
    """The engines currently exported (for tests and tooling)."""
    with _lock:
        return list(_engines)


def observe_step(engine: MeteredEngine, duration_s: float, tokens: int) -> None:
    """Record one engine step of ``duration_s`` seconds that processed ``tokens`` tokens."""
    children = _step_children.get(engine.name)
    if children is None:
        children = _step_children[engine.name] = (STEP_DURATION.labels(engine=engine.name),
                                                  BATCH_TOKENS.labels(engine=engine.name))
    children[0].observe(duration_s)
    children[1].observe(tokens)


def count_prefix_cache(engine: MeteredEngine, queried_tokens: int, hit_tokens: int) -> None:
    """Count prompt tokens looked up in ``engine``'s prefix cache and, of them, found (once per step)."""
    children = _prefix_children.get(engine.name)
    if children is None:
        children = _prefix_children[engine.name] = (PREFIX_CACHE_QUERIES.labels(engine=engine.name),
                                                    PREFIX_CACHE_HITS.labels(engine=engine.name))
    children[0].inc(queried_tokens)
    children[1].inc(hit_tokens)


class EngineCollector(Collector):
    """Running and waiting sequences of every live engine, by engine name, at scrape time."""

    def collect(self) -> Iterator[Any]:
        running: dict[str, int] = defaultdict(int)
        waiting: dict[str, int] = defaultdict(int)
        limits: dict[str, int] = defaultdict(int)
        credit: dict[str, int] = defaultdict(int)
        watching: dict[str, int] = defaultdict(int)
        for engine in live_engines():
            try:
                name = engine.name
                r, w = engine.running, engine.waiting
                limit = getattr(engine, "concurrency_limit", None)
                advertised = getattr(engine, "advertised_credit", None)
                watch = bool(getattr(engine, "watching", False))
            except Exception:  # an engine torn down mid-scrape: skip it this time
                continue
            running[name] += r
            waiting[name] += w
            if limit is not None:
                limits[name] += limit
            if advertised is not None:
                credit[name] += advertised
                watching[name] += watch
        yield gauge_by("rxpipe_engine_running_seqs", "Sequences running on the engine.", "engine", running)
        yield gauge_by("rxpipe_engine_waiting_seqs", "Sequences admitted and waiting to start.", "engine", waiting)
        yield gauge_by("rxpipe_engine_concurrency_limit",
                       "Calls the engine may have in flight now (OpenAIEngine's window).", "engine", limits)
        yield gauge_by("rxpipe_engine_advertised_credit",
                       "Requests the backend's last word of credit allows, less those sent since.", "engine", credit)
        yield gauge_by("rxpipe_engine_credit_watch_up",
                       "1 while the engine's credit watch on its backend is open.", "engine", watching)


REGISTRY.register(EngineCollector())
