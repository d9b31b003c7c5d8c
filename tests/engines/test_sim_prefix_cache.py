"""SimulatedEngine's automatic prefix caching (DESIGN §8b): hits, pins, LRU evictions and step
times on a scripted prompt sequence, on virtual time (exact)."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import REGISTRY

from rxpipe.engines import CompletionRequest, SimulatedEngine

from .helpers import DECODE, OVERHEAD, PREFILL, engine

# blocks of 4 tokens = 16 bytes
X, Y, Z, W = "x" * 16, "y" * 16, "z" * 16, "w" * 16


def ask(e: SimulatedEngine, prompt: str, max_tokens: int = 1) -> asyncio.Future:
    return e.submit(CompletionRequest(prompt=prompt, max_tokens=max_tokens)).result


def sample(name: str, **labels: str) -> float:
    value = REGISTRY.get_sample_value(name, labels)
    return 0.0 if value is None else value


@pytest.mark.virtual
async def test_hits_pins_and_evictions_on_a_scripted_sequence_with_exact_step_times() -> None:
    e = engine(prefix_cache_blocks=2, block_tokens=4)
    e.name = "prefix_script"
    cache = e.prefix_cache
    assert cache is not None
    steps: list[tuple[int, int, float]] = []

    async def run(prompt: str) -> tuple[int, int]:
        before = (cache.queries, cache.hits)
        await ask(e, prompt)
        record = e.step_log[-1]
        steps.append((record.prefill_tokens, record.cached_tokens, record.duration_s))
        return cache.queries - before[0], cache.hits - before[1]

    # 33 bytes = 9 tokens: two full blocks (X, XY) and a token that is always computed
    assert await run(X + Y + "1") == (9, 0)          # cold
    assert (cache.cached_blocks, cache.pinned_blocks, cache.evictions) == (2, 0, 0)
    assert await run(X + Y + "2") == (9, 8)          # both blocks: 1 token prefilled
    assert await run(X + "y" * 15 + "z" + "3") == (9, 4)  # same first block, second differs
    # unpinned last block first: XY, XY', X -- 3 > 2: XY, the least recently used, was evicted
    assert (cache.cached_blocks, cache.evictions) == (2, 1)
    assert await run(X + Y + "4") == (9, 4)          # X still cached, XY evicted (and XY' now)
    assert cache.evictions == 2
    assert await run(Z + W + "5") == (9, 0)          # two new blocks push out the two oldest
    assert cache.evictions == 4
    assert await run(X + Y + "6") == (9, 0)          # X went with them
    assert await run(Z + W + "7") == (9, 0)          # and ZW by X, XY
    # a prompt of exactly two blocks: the last block is recomputed for its last token's logits
    assert await run(X + Y) == (8, 0)
    assert await run(X + Y) == (8, 4)
    assert steps == [
        (9, 0, OVERHEAD + 9 * PREFILL), (1, 8, OVERHEAD + 1 * PREFILL), (5, 4, OVERHEAD + 5 * PREFILL),
        (5, 4, OVERHEAD + 5 * PREFILL), (9, 0, OVERHEAD + 9 * PREFILL), (9, 0, OVERHEAD + 9 * PREFILL),
        (9, 0, OVERHEAD + 9 * PREFILL), (8, 0, OVERHEAD + 8 * PREFILL), (4, 4, OVERHEAD + 4 * PREFILL)]
    assert (cache.queries, cache.hits, cache.evictions) == (79, 20, 10)
    assert sample("rxpipe_engine_prefix_cache_queries_total", engine="prefix_script") == 79
    assert sample("rxpipe_engine_prefix_cache_hits_total", engine="prefix_script") == 20


@pytest.mark.virtual
async def test_blocks_of_running_sequences_are_pinned_and_shared_and_never_evicted() -> None:
    e = engine(prefix_cache_blocks=1, block_tokens=4)
    cache = e.prefix_cache
    assert cache is not None
    long = e.submit(CompletionRequest(prompt=X + Y + "a", max_tokens=6))
    twin = e.submit(CompletionRequest(prompt=X + Y + "b", max_tokens=1))  # same step: computed, not found
    await asyncio.sleep(OVERHEAD + 18 * PREFILL)  # the first step (both prefills) ended
    assert e.step_log[0].cached_tokens == 0 and e.step_log[0].prefill_tokens == 18
    assert cache.pinned_blocks == 2
    later = e.submit(CompletionRequest(prompt=X + Y + "c", max_tokens=1))  # found pinned, running
    await twin.result
    await later.result
    step = next(s for s in e.step_log if later.request.id in s.request_ids)
    assert (step.cached_tokens, step.prefill_tokens, step.decode_seqs) == (8, 1, 1)
    assert step.duration_s == OVERHEAD + 1 * PREFILL + 1 * DECODE  # later's last token, long's decode
    # twin and later ended: still pinned by long, so nothing is in the LRU or evicted
    assert (cache.pinned_blocks, cache.cached_blocks, cache.evictions) == (2, 0, 0)
    await long.result
    assert (cache.pinned_blocks, cache.cached_blocks, cache.evictions) == (0, 1, 1)
    assert (cache.queries, cache.hits) == (27, 8)


@pytest.mark.virtual
async def test_chat_messages_are_cached_by_their_content_and_cancelled_sequences_unpin() -> None:
    e = engine(prefix_cache_blocks=8, block_tokens=4)
    cache = e.prefix_cache
    assert cache is not None
    chat = [{"role": "system", "content": X + Y}, {"role": "user", "content": "hi"}]
    first = e.submit(CompletionRequest(messages=chat, max_tokens=50))
    await asyncio.sleep(0.1)
    first.cancel()
    await first.result
    assert cache.pinned_blocks == 0 and cache.cached_blocks == 2
    again = await e.submit(CompletionRequest(messages=[*chat[:1], {"role": "user", "content": "yo"}],
                                             max_tokens=1)).result
    assert again.prompt_tokens == 9 and e.step_log[-1].cached_tokens == 8


def test_prefix_cache_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="prefix_cache_blocks"):
        SimulatedEngine(prefix_cache_blocks=-1)
    with pytest.raises(ValueError, match="block_tokens"):
        SimulatedEngine(prefix_cache_blocks=4, block_tokens=0)
    with pytest.raises(ValueError, match="not available with latency="):
        SimulatedEngine.per_request(prefix_cache_blocks=4)
    assert SimulatedEngine().prefix_cache is None
