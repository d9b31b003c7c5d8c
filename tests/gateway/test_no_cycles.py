"""An answered request is freed by reference counting: the serving path leaves no reference
cycles behind (request <-> reply <-> Completion <-> engine sequence), so the cyclic GC has
nothing to do per request (``rxpipe run`` raises its threshold on that basis)."""

from __future__ import annotations

import asyncio
import gc
from collections import Counter
from typing import Any, Iterator

import aiohttp
import pytest

from rxpipe.loader import load_pipeline

from .server import ROOT

pytestmark = pytest.mark.loops("asyncio")

#: the per-request objects of the serving path
_OURS = {"CompletionRequest", "ReplyFuture", "Completion", "_Seq", "CompletionResult", "TokenChunk"}


@pytest.fixture
def saved_garbage() -> Iterator[list[Any]]:
    """``gc.garbage`` while the test runs with ``DEBUG_SAVEALL``: what the GC had to free."""
    gc.collect()
    gc.garbage.clear()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield gc.garbage
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


async def test_answered_refused_streamed_and_abandoned_requests_leave_no_cycles(saved_garbage: list[Any]) -> None:
    pipeline = load_pipeline(str(ROOT / "pipelines" / "llm_gateway.py"), {
        "queue_capacity": 2, "max_num_seqs": 2, "rate": 100000, "burst": 100000, "batch_max_size": 2,
        "step_overhead_s": 0.001, "prefill_s_per_token": 0, "decode_s_per_seq": 0})
    engine = next(stage.engine for stage in pipeline.stages if getattr(stage, "engine", None) is not None)
    statuses: Counter[int] = Counter()
    async with pipeline.start(port=0) as running:
        url = f"{running.url}/v1/chat/completions"
        async with aiohttp.ClientSession() as http:

            async def post(stream: bool, max_tokens: int = 8) -> None:
                body = {"model": "sim", "messages": [{"role": "user", "content": "hi"}], "max_tokens": max_tokens,
                        "stream": stream}
                async with http.post(url, json=body) as response:
                    await response.read()
                    statuses[response.status] += 1

            # 12 at once on 2 slots and a queue of 2: some answered, some refused with 429
            await asyncio.gather(*(post(stream=i % 2 == 0) for i in range(12)))
            # a client that leaves while its request runs
            leaving = asyncio.ensure_future(post(stream=True, max_tokens=4096))
            while engine.running == 0:
                await asyncio.sleep(0.005)
            leaving.cancel()
            await asyncio.gather(leaving, return_exceptions=True)
            while engine.running:
                await asyncio.sleep(0.005)
            await post(stream=False)
    assert statuses[200] >= 5 and statuses[429] >= 1 and statuses[200] + statuses[429] == 13
    gc.collect()
    ours = Counter(type(o).__name__ for o in saved_garbage if type(o).__name__ in _OURS)
    assert ours == Counter()
