"""The overload benchmark's server: ``pipelines/llm_gateway.py``'s graph on ``SimulatedEngine.per_request``.

    rxpipe run bench/overload_pipeline.py --port 0 --set queue_capacity=64 --set latency_budget_s=0.5

The graph is the one of ``pipelines/llm_gateway.py`` stage for stage, with the same names and the
same defaults (its ``settings()`` fills them in)::

    gateway ─> rate_limit(rate, burst) ─> edge_queue(queue_capacity) ─> batch(batch_max_size,
        batch_max_delay_s) ─> execute(SimulatedEngine.per_request(slots, base_s, per_token_s, tokens))

Only the engine differs: DESIGN §10's overload model, ``slots`` independent slots where a request
of ``n`` output tokens (uniform in ``tokens``) takes ``base_s + per_token_s * n`` seconds, which is
80 requests/s with the defaults. ``max_num_seqs`` is ``slots`` (so ``batch_max_size`` defaults to
``max(1, slots // 8)`` = 1, as in the gateway pipeline).

Settings (``--set key=value``), besides every key of ``pipelines/llm_gateway.py``:

    slots=8, base_s=0.02, per_token_s=0.002, tokens=[16, 64], seed=0   the engine (s, s, tokens)
    server_timing=true      time the completion routes (below)
    queue_low_tide=null     null: the queue is ``edge_queue(queue_capacity)`` as in the gateway
                            pipeline (one more per request that starts: full under overload, and
                            counting what ``batch`` holds);
                            an int: ``limit_rate(queue_capacity, queue_low_tide)`` instead; 1 makes a
                            plain FIFO that is topped up after every departure (always full under
                            overload), the "fixed 64-deep queue" of DESIGN §10 with queue_capacity=64

Server timing (benchmark instrumentation, not product code): with ``server_timing`` the edge's
dispatch is wrapped by one more handler that times each completion request from handler
entry to the returned response (``time.perf_counter``) into an HdrHistogram per outcome (200,
``429 queue_full``, ``429 deadline`` decided at admission, ``429 deadline`` of a request that
waited in the queue past its budget, 503, other), and three routes: ``GET /bench/server_timing``
(JSON: count and percentiles in seconds per outcome), ``POST /bench/reset`` (clears them, e.g.
after a warm-up) and ``GET /bench/memory`` (JSON: after a full ``gc.collect()``,
``sys.getallocatedblocks()`` and the number of gc-tracked objects: a leak detector that the
allocator's noise in the RSS does not blur). It is installed by wrapping
``rxpipe.gateway._routes.make_app`` in this process only; the time before aiohttp calls the handler
(reading and parsing the request head) is not included, the client-side latency bounds that.
"""

from __future__ import annotations

import gc
import importlib.util
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Awaitable, Callable

import orjson
from aiohttp import web

from rxpipe import operators as ops
from rxpipe.engines import SimulatedEngine
from rxpipe.runtime import Pipeline

ENGINE_DEFAULTS: dict[str, Any] = {"slots": 8, "base_s": 0.02, "per_token_s": 0.002, "tokens": [16, 64], "seed": 0}
BENCH_DEFAULTS: dict[str, Any] = {"server_timing": True, "queue_low_tide": None}
_GATEWAY_FILE = Path(__file__).resolve().parents[1] / "pipelines" / "llm_gateway.py"
_ROUTES = ("/v1/completions", "/v1/chat/completions")
#: outcomes the timing keeps apart (label -> meaning)
OUTCOMES = ("200", "429 queue_full", "429 deadline early", "429 deadline late", "503", "other")


def _llm_gateway() -> ModuleType:
    """``pipelines/llm_gateway.py`` loaded by path (``pipelines`` is not an installed package)."""
    spec = importlib.util.spec_from_file_location("rxpipe_bench_llm_gateway", _GATEWAY_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _ServerTiming:
    """Handler time per outcome, in microseconds, one HdrHistogram each (1 µs – 120 s, 2 digits:
    small enough, 21 KiB each, that filling them does not show in the server's RSS)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        from hdrh.histogram import HdrHistogram

        self.hist = {outcome: HdrHistogram(1, 120_000_000, 2) for outcome in OUTCOMES}

    @staticmethod
    def outcome(response: web.StreamResponse) -> str:
        status = response.status
        if status == 200:
            return "200"
        if status == 503:
            return "503"
        if status == 429 and isinstance(response, web.Response) and response.body is not None:
            error = orjson.loads(response.body)["error"]  # type: ignore[arg-type]
            if error["code"] == "queue_full":
                return "429 queue_full"
            if error["code"] == "deadline":
                # the edge's two deadline refusals differ only in their message
                late = error["message"].startswith("the request waited")
                return "429 deadline late" if late else "429 deadline early"
        return "other"

    def record(self, response: web.StreamResponse, seconds: float) -> None:
        self.hist[self.outcome(response)].record_value(max(1, round(seconds * 1e6)))

    def summary(self) -> dict[str, dict[str, float]]:
        out = {}
        for outcome, hist in self.hist.items():
            count = hist.get_total_count()
            out[outcome] = {"count": count, **({
                "p50_s": hist.get_value_at_percentile(50) / 1e6,
                "p99_s": hist.get_value_at_percentile(99) / 1e6,
                "p999_s": hist.get_value_at_percentile(99.9) / 1e6,
                "max_s": hist.get_max_value() / 1e6,
            } if count else {})}
        return out


def _install_server_timing() -> None:
    """Wrap the edge's app factory so every app it builds times its completion requests."""
    from rxpipe.gateway import _routes
    from rxpipe.gateway._server import EdgeApp

    if getattr(_routes.make_app, "bench_timing", False):
        return
    original = _routes.make_app
    timing = _ServerTiming()

    async def report(request: web.Request) -> web.Response:
        return web.Response(body=orjson.dumps(timing.summary()), content_type="application/json")

    async def reset(request: web.Request) -> web.Response:
        timing.reset()
        return web.Response(body=b"{}", content_type="application/json")

    async def memory(request: web.Request) -> web.Response:
        gc.collect()
        body = {"allocated_blocks": sys.getallocatedblocks(), "gc_objects": len(gc.get_objects())}
        return web.Response(body=orjson.dumps(body), content_type="application/json")

    bench_routes: dict[tuple[str, str], Callable[[web.Request], Awaitable[web.StreamResponse]]] = {
        ("GET", "/bench/server_timing"): report, ("POST", "/bench/reset"): reset, ("GET", "/bench/memory"): memory}

    def make_app(edge: Any, loop: Any) -> EdgeApp:
        app = original(edge, loop)
        handler = app.handler

        async def timed(request: web.Request) -> web.StreamResponse:
            extra = bench_routes.get((request.method, request.path))
            if extra is not None:
                return await extra(request)
            if request.path not in _ROUTES:
                return await handler(request)
            started = time.perf_counter()
            response = await handler(request)
            timing.record(response, time.perf_counter() - started)
            return response

        return EdgeApp(timed, app.client_max_size)

    make_app.bench_timing = True  # type: ignore[attr-defined]
    _routes.make_app = make_app  # type: ignore[assignment]


def pipeline(config: dict[str, Any]) -> Pipeline:
    config = dict(config)
    engine_settings = {key: config.pop(key, default) for key, default in ENGINE_DEFAULTS.items()}
    bench = {key: config.pop(key, default) for key, default in BENCH_DEFAULTS.items()}
    if bench["server_timing"]:
        _install_server_timing()
    slots = engine_settings["slots"]
    if config.setdefault("max_num_seqs", slots) != slots:
        raise ValueError(f"max_num_seqs ({config['max_num_seqs']}) must equal slots ({slots}) here")
    gateway_file = _llm_gateway()
    s = gateway_file.settings(config)
    lo, hi = engine_settings["tokens"]
    engine = SimulatedEngine.per_request(
        slots=slots, base_s=engine_settings["base_s"], per_token_s=engine_settings["per_token_s"],
        tokens=(lo, hi), seed=engine_settings["seed"], stall_timeout_s=s["stall_timeout_s"], model=s["model"])
    queue = (None if bench["queue_low_tide"] is None
             else ops.limit_rate(s["queue_capacity"], bench["queue_low_tide"], name="queue"))
    return gateway_file.build(s, engine, queue=queue, name="llm_gateway_overload")
