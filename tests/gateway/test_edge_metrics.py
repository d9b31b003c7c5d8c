"""DESIGN §7 additions: refusal/outcome series exist at 0 from the start, admitted requests are
counted by outcome, engine series carry the engine's name. Counters are process-global, so the
scripted scenario compares before/after deltas with exact values."""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable

import aiohttp
import pytest
from prometheus_client import REGISTRY

from rxpipe import operators as ops
from rxpipe.engines import SimulatedEngine
from rxpipe.gateway import Gateway
from rxpipe.gateway._metrics import REFUSAL_REASONS
from rxpipe.runtime import Pipeline
from rxpipe.serving import OUTCOMES

pytestmark = pytest.mark.loops("asyncio")

ROUTE = "/v1/completions"


def value(name: str, **labels: str) -> float:
    sample = REGISTRY.get_sample_value(name, labels)
    return 0.0 if sample is None else sample


def snapshot() -> dict[str, float]:
    numbers = {f"rejected_{r}": value("rxpipe_rejections_total", reason=r) for r in REFUSAL_REASONS}
    numbers |= {f"finished_{o}": value("rxpipe_requests_finished_total", outcome=o) for o in OUTCOMES}
    numbers |= {f"http_{c}": value("rxpipe_http_requests_total", route=ROUTE, code=str(c))
                for c in (200, 429, 499, 500, 503)}
    numbers["admitted"] = value("rxpipe_stage_items_total", stage="metrics_edge", direction="out")
    return numbers


async def until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.005)


def test_known_label_sets_exist_at_zero_from_the_start() -> None:
    for reason in REFUSAL_REASONS:
        assert REGISTRY.get_sample_value("rxpipe_rejections_total", {"reason": reason}) is not None
    for outcome in OUTCOMES:
        assert REGISTRY.get_sample_value("rxpipe_requests_finished_total", {"outcome": outcome}) is not None
    for route in ("/v1/completions", "/v1/chat/completions"):
        for code in ("200", "429", "503"):
            assert REGISTRY.get_sample_value("rxpipe_http_requests_total", {"route": route, "code": code}) is not None


async def test_a_scripted_scenario_counts_exactly() -> None:
    engine = SimulatedEngine.fixed_latency(1, 0.3, 0.3, stall_timeout_s=None)
    engine.name = "metrics_edge_engine"
    gateway = Gateway(model="sim", name="metrics_edge")
    before = snapshot()
    async with Pipeline(gateway, ops.buffer(1, name="metrics_edge_queue"), ops.execute(engine),
                        drain_timeout_s=5.0).start(port=0) as running:
        url = f"{running.url}{ROUTE}"
        async with aiohttp.ClientSession() as http:

            async def post(body: dict[str, Any]) -> int:
                async with http.post(url, json=body, timeout=aiohttp.ClientTimeout(total=30)) as r:
                    await r.read()
                    return r.status

            def spawn(coro: Awaitable[int]) -> asyncio.Task[int]:
                return asyncio.ensure_future(coro)

            body = {"model": "sim", "prompt": "hi", "max_tokens": 4}
            a = spawn(post(body))  # runs on the one slot
            await until(lambda: engine.running == 1)
            assert value("rxpipe_engine_running_seqs", engine="metrics_edge_engine") == 1
            b = spawn(post(body))  # waits in the queue of one
            await until(lambda: gateway.demand == 0)
            assert await post(body) == 429  # no demand: queue_full
            assert (await a, await b) == (200, 200)
            abandoned = spawn(post(body))
            await until(lambda: engine.running == 1)
            abandoned.cancel()  # the client gives up (closes its connection) while its request runs
            with pytest.raises(asyncio.CancelledError):
                await abandoned
            await until(lambda: value("rxpipe_http_requests_total", route=ROUTE, code="499") > before["http_499"])
            await until(lambda: engine.running == 0)
            engine.error_rate = 1.0
            assert await post(body) == 500  # the engine failed it
            engine.error_rate = 0.0
            engine.down = True
            assert await post(body) == 503  # refused before admission: unavailable
            engine.down = False
    delta = {key: after - before[key] for key, after in snapshot().items()}
    assert delta == {
        "rejected_queue_full": 1, "rejected_rate_limited": 0, "rejected_deadline": 0, "rejected_unavailable": 1,
        "rejected_draining": 0,
        "finished_ok": 2, "finished_error": 1, "finished_stalled": 0, "finished_cancelled": 1,
        "http_200": 2, "http_429": 1, "http_499": 1, "http_500": 1, "http_503": 1,
        "admitted": 4,  # A, B, the abandoned one, the failed one: each counted once by outcome
    }


async def test_engines_with_different_names_keep_their_own_series() -> None:
    first = SimulatedEngine.fixed_latency(2, 0.2, 0.2, stall_timeout_s=None)
    second = SimulatedEngine.fixed_latency(2, 0.2, 0.2, stall_timeout_s=None)
    first.name, second.name = "metrics_replica_a", "metrics_replica_b"
    assert SimulatedEngine().name == "sim"  # default: the model id
    async with Pipeline(Gateway(model="sim"), ops.buffer(4), ops.execute(first),
                        drain_timeout_s=5.0).start(port=0) as running:
        async with aiohttp.ClientSession() as http:
            request = asyncio.ensure_future(http.post(f"{running.url}{ROUTE}", json={"prompt": "x", "max_tokens": 2}))
            await until(lambda: first.running == 1)
            assert value("rxpipe_engine_running_seqs", engine="metrics_replica_a") == 1
            assert REGISTRY.get_sample_value("rxpipe_engine_running_seqs", {"engine": "metrics_replica_b"}) == 0
            async with await request as r:
                assert r.status == 200
        await until(lambda: first.running == 0)
        assert value("rxpipe_engine_running_seqs", engine="metrics_replica_a") == 0
    await first.aclose()
    await second.aclose()


async def test_a_method_a_known_route_does_not_take_is_counted_under_that_route() -> None:
    requests = (("GET", "/v1/completions", 405), ("PUT", "/metrics", 405), ("POST", "/healthz", 405),
                ("GET", "/no/such/route", 404))
    before = {(path, code): value("rxpipe_http_requests_total", route=path, code=str(code))
              for _, path, code in requests}
    other_404 = value("rxpipe_http_requests_total", route="other", code="404")
    pipeline = Pipeline(Gateway(model="sim"), ops.buffer(2), ops.execute(SimulatedEngine(max_num_seqs=2)))
    async with pipeline.start(port=0) as running, aiohttp.ClientSession() as http:
        for method, path, code in requests:
            async with http.request(method, f"{running.url}{path}") as response:
                assert response.status == code
    for _, path, code in requests[:3]:
        assert value("rxpipe_http_requests_total", route=path, code=str(code)) == before[(path, code)] + 1
    assert value("rxpipe_http_requests_total", route="other", code="404") == other_404 + 1
