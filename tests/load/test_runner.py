"""run_load against small stub servers in this process: timeouts count, retries honour Retry-After."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import defaultdict
from typing import AsyncIterator

import pytest
from aiohttp import web

from rxpipe.load import LoadConfig, arrival_times, run_load

pytestmark = pytest.mark.loops("asyncio")


class Stub:
    """An OpenAI-shaped stub: records every attempt (x-request-id, loop time)."""

    def __init__(self, handler: str) -> None:
        self.handler = handler
        self.attempts: dict[str, list[float]] = defaultdict(list)

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "stub", "object": "model"}]})

    async def completions(self, request: web.Request) -> web.Response:
        self.attempts[request.headers["x-request-id"]].append(asyncio.get_running_loop().time())
        await request.read()
        if self.handler == "slow":
            await asyncio.sleep(30)  # cancelled when the client gives up
        return web.json_response({"error": {"message": "full", "type": "rate_limit_error", "code": "queue_full"}},
                                 status=429, headers={"Retry-After": "1"})


@contextlib.asynccontextmanager
async def serve(handler: str) -> AsyncIterator[tuple[Stub, str]]:
    server = Stub(handler)
    app = web.Application()
    app.router.add_get("/v1/models", server.models)
    app.router.add_post("/v1/completions", server.completions)
    runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield server, f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def test_a_slow_server_makes_timeouts_count_not_crash() -> None:
    expected = len(arrival_times(1.0, (8.0, 8.0), 1.0, random.Random(5)))
    async with serve("slow") as (server, url):
        result = await run_load(LoadConfig(url, rate=(8.0, 8.0), duration_s=1.0, timeout_s=0.3, seed=5))
    figures = result.figures
    assert expected > 0 and figures["sent"] == expected == len(server.attempts)
    assert figures["outcomes"] == {"2xx": 0, "429": 0, "503": 0, "other": 0, "timeout": expected}
    assert figures["completed"] == 0 and figures["failed"] == expected
    assert [p["timeout"] for p in figures["series"]] == [expected]
    assert figures["series"][0]["queue"] is None  # the stub has no /metrics


async def test_retry_3_sends_at_most_4_attempts_and_waits_what_retry_after_said() -> None:
    expected = len(arrival_times(1.0, (3.0, 3.0), 1.0, random.Random(1)))
    async with serve("refuse") as (server, url):
        result = await run_load(LoadConfig(url, rate=(3.0, 3.0), duration_s=1.0, retries=3, seed=1, scrape=False))
    figures = result.figures
    assert expected > 0 and figures["sent"] == expected
    assert sorted(len(times) for times in server.attempts.values()) == [4] * expected
    for times in server.attempts.values():
        gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
        assert all(0.99 <= gap < 3.0 for gap in gaps), gaps  # Retry-After: 1 (seconds)
    assert figures["attempts"] == 4 * expected
    assert figures["outcomes"]["429"] == expected and figures["shed_fraction"] == 1.0
    assert figures["refusals"] == {"429": {"queue_full": 4 * expected}, "503": {}}
    assert figures["retry_after_s"] == {"count": 4 * expected, "min": 1.0, "p50": 1.0, "p99": 1.0, "max": 1.0,
                                        "by_second": {"1": 4 * expected}}


async def test_chat_streams_against_our_gateway_measure_every_token_chunk() -> None:
    from rxpipe import operators as ops
    from rxpipe.engines import SimulatedEngine
    from rxpipe.gateway import Gateway
    from rxpipe.runtime import Pipeline

    engine = SimulatedEngine(max_num_seqs=8, step_overhead_s=0.002, decode_s_per_seq=0.0, prefill_s_per_token=0.0)
    expected = len(arrival_times(1.0, (10.0, 10.0), 1.0, random.Random(4)))
    async with Pipeline(Gateway(model="sim"), ops.buffer(16), ops.execute(engine),
                        drain_timeout_s=5.0).start(port=0) as running:
        assert running.url is not None
        result = await run_load(LoadConfig(running.url, rate=(10.0, 10.0), duration_s=1.0, stream=True, chat=True,
                                           max_tokens=5, seed=4))
    figures = result.figures
    assert figures["config"]["model"] == "sim" and figures["config"]["endpoint"] == "/v1/chat/completions"
    assert figures["completed"] == figures["sent"] == expected > 0
    assert figures["total_output_tokens"] == 5 * expected  # usage.completion_tokens
    # vLLM counts every event with choices: the role chunk, 5 token chunks, the finish chunk -> 6 gaps
    assert [len(itl) for itl in figures["itls"]] == [6] * expected
    assert figures["mean_ttft_ms"] > 0 and figures["mean_tpot_ms"] > 0 and figures["p99_itl_ms"] > 0
    assert [p["queue"] is not None for p in figures["series"]] == [True]  # our /metrics was read


async def test_a_server_that_wants_a_key_says_so_not_pass_model() -> None:
    from rxpipe import operators as ops
    from rxpipe.engines import SimulatedEngine
    from rxpipe.gateway import Gateway
    from rxpipe.runtime import Pipeline

    async with Pipeline(Gateway(model="sim", api_keys=("k1",)), ops.buffer(4),
                        ops.execute(SimulatedEngine(max_num_seqs=2))).start(port=0) as running:
        assert running.url is not None
        with pytest.raises(RuntimeError) as refused:
            await run_load(LoadConfig(running.url, duration_s=1.0, scrape=False))
        result = await run_load(LoadConfig(running.url, rate=(2.0, 2.0), duration_s=1.0, api_key="k1", seed=2,
                                           scrape=False))
    assert str(refused.value) == (f"{running.url}/v1/models answered HTTP 401 (invalid_api_key: missing or invalid "
                                  "API key (Authorization: Bearer <key>)); pass --api-key")
    assert result.figures["config"]["model"] == "sim"
