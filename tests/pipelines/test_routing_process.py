"""``pipelines/llm_router.py`` in front of simulated backends run as processes
(``pipelines/llm_gateway.py`` with ``prefix_cache_blocks``): prefix-cache affinity measured by the
backends' own prefix-cache metrics, and mid-stream failover when a backend is killed (real time)."""

from __future__ import annotations

from typing import Any, Iterator

import pytest

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
