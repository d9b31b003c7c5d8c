"""``pipelines/llm_router.py`` in front of simulated backends run as processes
(``pipelines/llm_gateway.py`` with ``prefix_cache_blocks``): prefix-cache affinity measured by the
backends' own prefix-cache metrics, and mid-stream failover when a backend is killed (real time)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any, Iterator

import aiohttp
import orjson
import pytest

from rxpipe.engines import CompletionRequest, SimulatedEngine
from tests.gateway.server import GatewayProcess

from .router_helpers import open_loop, prefix_cache_tokens, running_router, shared_prefix_workload

pytestmark = pytest.mark.loops("uvloop")

#: per backend: 8 sequences, a prefix cache of 96 blocks of 16 tokens (1,536 tokens: 3 of the 16
#: system prompts below, so the 16 need more than 4 backends' caches unless each stays on one)
BACKEND = ("max_num_seqs=8", "prefix_cache_blocks=96")


@pytest.fixture(scope="module")
def backends(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[GatewayProcess]]:
    tmp = tmp_path_factory.mktemp("backends")
    started: list[GatewayProcess] = []
    try:
        for _ in range(4):
            started.append(GatewayProcess(tmp, *BACKEND))
        yield started
    finally:
        for backend in started:
            backend.kill()


async def test_prefix_routing_hits_the_backends_caches_at_least_3x_as_often_as_round_robin(
        backends: list[GatewayProcess]) -> None:
    urls = [b.url for b in backends]
    rates: dict[str, float] = {}
    for arm, seed in (("round_robin", 1), ("prefix", 2)):  # other prompts per arm: no carried-over cache
        # 16 groups x 12 questions; system prompts of 2,048 bytes (512 tokens = 32 blocks)
        prompts = shared_prefix_workload(16, 12, 2048, 64, seed=seed)
        before = prefix_cache_tokens(urls)
        async with running_router(backends=",".join(urls), model="sim", max_in_flight=8, cache_max_entries=0,
                                  routing=arm) as (url, _):
            outcomes = await open_loop(url, len(prompts), 60.0, lambda i, p=prompts: _body(p[i]))
        assert [o.status for o in outcomes] == [200] * len(prompts), arm
        after = prefix_cache_tokens(urls)
        rates[arm] = (after[1] - before[1]) / (after[0] - before[0])
    assert rates["prefix"] >= 3 * rates["round_robin"], rates
    assert rates["prefix"] >= 0.6, rates  # 11 of 12 requests of a group could hit 512 of 529 tokens: 0.89




def _body(prompt: str) -> dict[str, Any]:
    return {"model": "sim", "prompt": prompt, "max_tokens": 8}


def sse_events(body: bytes) -> list[Any]:
    """The ``data:`` payloads of an SSE body: parsed JSON objects, and ``"[DONE]"``."""
    events: list[Any] = []
    for line in body.split(b"\n"):
        if line.startswith(b"data: "):
            payload = line[6:].strip()
            events.append("[DONE]" if payload == b"[DONE]" else orjson.loads(payload))
    return events


@pytest.mark.parametrize("chat", [False, True])
async def test_a_backend_killed_while_20_streams_are_mid_answer_loses_none_of_them(tmp_path: Path, chat: bool) -> None:
    victim, survivor = GatewayProcess(tmp_path, "max_num_seqs=16"), GatewayProcess(tmp_path, "max_num_seqs=16")
    max_tokens = 200
    path = "/v1/chat/completions" if chat else "/v1/completions"

    def body(i: int) -> dict[str, Any]:
        text = f"the story number {i} of"
        where = {"messages": [{"role": "user", "content": text}]} if chat else {"prompt": text}
        return {"model": "sim", **where, "max_tokens": max_tokens, "temperature": 0, "stream": True,
                "stream_options": {"include_usage": True}}

    try:
        async with running_router(backends=f"{victim.url},{survivor.url}", model="sim", max_in_flight=16,
                                  cache_max_entries=0) as (url, engines):
            resumed_before = _resumed(await _get(url + "/metrics"))
            load = asyncio.create_task(open_loop(url, 20, 1000.0, body, path=path))
            while engines[0].running < 10 or engines[0].succeeded:
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.3)  # tokens flowing on every stream, none near its end (~1.3 s)
            cut = engines[0].running
            victim.kill()  # SIGKILL
            outcomes = await load
            metrics = await _get(url + "/metrics")
        # the whole answers, as one engine alone makes them: greedy decoding is the same text in
        # every process (the backends' engines have the default seed, 0)
        engine = SimulatedEngine(step_overhead_s=0.0, prefill_s_per_token=0.0, decode_s_per_seq=0.0)
        expected = []
        for i in range(20):
            b = body(i)
            request = CompletionRequest(prompt=b.get("prompt"), messages=b.get("messages"), max_tokens=max_tokens,
                                        sampling={"temperature": 0})
            expected.append((await engine.submit(request).result).text)
        await engine.aclose()
    finally:
        victim.kill()
        survivor.kill()
    assert cut == 10
    for i, outcome in enumerate(outcomes):
        assert outcome.status == 200
        events = sse_events(outcome.body)
        assert events.count("[DONE]") == 1 and events[-1] == "[DONE]"
        assert not [e for e in events if isinstance(e, dict) and "error" in e], outcome.body[-500:]
        chunks = [e for e in events[:-1] if e["choices"]]
        texts = [c["choices"][0]["delta"].get("content") or "" if chat else c["choices"][0]["text"] for c in chunks]
        assert "".join(texts) == expected[i]  # no repeated and no missing text
        assert len(expected[i].split()) == max_tokens
        assert [c["choices"][0]["finish_reason"] for c in chunks][-1] == "length"
        usage = [e["usage"] for e in events[:-1] if e.get("usage")]
        assert len(usage) == 1 and usage[0]["completion_tokens"] == max_tokens
    assert _resumed(metrics) - resumed_before == cut  # each stream on the killed backend, continued once


def _resumed(metrics: str) -> float:
    found = re.search(r'rxpipe_stage_dropped_total\{reason="resumed",stage="balance"\} (\S+)', metrics)
    return 0.0 if found is None else float(found.group(1))


async def _get(url: str) -> str:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return await response.text()
