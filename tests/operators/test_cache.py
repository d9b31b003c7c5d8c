"""cache: hits replay, misses pass, single-flight, TTL and size bounds, metrics, demand (virtual time)."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from rxpipe import UNBOUNDED
from rxpipe import operators as ops
from rxpipe.engines import Completion, CompletionRequest, EngineError, SimulatedEngine
from rxpipe.serving._cache import CACHE_HITS, CACHE_MISSES, cache_key
from rxpipe.testing import TestPublisher, TestSubscriber

pytestmark = pytest.mark.loops("virtual")


def _engine() -> SimulatedEngine:
    return SimulatedEngine(max_num_seqs=8, max_num_batched_tokens=1024, step_overhead_s=0.01,
                           prefill_s_per_token=0.0, decode_s_per_seq=0.0, seed=1)


def _req(prompt: str = "p", *, stream: bool = False, **sampling: Any) -> CompletionRequest:
    return CompletionRequest(prompt=prompt, max_tokens=6, stream=stream, sampling=sampling or {"temperature": 0},
                             reply=asyncio.get_running_loop().create_future())


class Graph:
    """publisher → cache → execute(engine), answers through reply slots."""

    def __init__(self, max_entries: int = 4, ttl_s: float = 10.0) -> None:
        self.engine = _engine()
        self.pub = TestPublisher[CompletionRequest]()
        self.out = TestSubscriber[Completion](initial_request=UNBOUNDED)
        self.stage = self.pub.pipe(ops.cache(max_entries, ttl_s))
        self.stage.pipe(ops.execute(self.engine)).subscribe(self.out)

    async def ask(self, request: CompletionRequest) -> Any:
        self.pub.emit(request)
        completion = await request.reply  # type: ignore[misc]
        result = await completion.result
        await asyncio.sleep(0.001)  # the cache stores it in a done-callback of the same future
        return result

    @property
    def engine_calls(self) -> int:
        return len(self.out.values)

    async def close(self) -> None:
        self.out.cancel()
        await self.engine.aclose()


def test_only_deterministic_requests_have_a_key() -> None:
    assert cache_key(CompletionRequest(prompt="p", sampling={"temperature": 0})) is not None
    assert cache_key(CompletionRequest(prompt="p", sampling={"seed": 3, "temperature": 0.7})) is not None
    assert cache_key(CompletionRequest(prompt="p", sampling={"temperature": 0.7})) is None
    assert cache_key(CompletionRequest(prompt="p")) is None  # OpenAI's default temperature is 1
    a = cache_key(CompletionRequest(prompt="p", max_tokens=5, sampling={"temperature": 0, "top_p": 1}))
    b = cache_key(CompletionRequest(prompt="p", max_tokens=5, sampling={"top_p": 1, "temperature": 0}))
    assert a == b and a != cache_key(CompletionRequest(prompt="p", max_tokens=6, sampling={"temperature": 0}))


async def test_a_repeat_is_a_hit_with_the_same_text_and_no_engine_call() -> None:
    g = Graph()
    hits, misses = CACHE_HITS._value.get(), CACHE_MISSES._value.get()
    first = _req()
    r1 = await g.ask(first)
    second = _req()
    r2 = await g.ask(second)
    assert (first.cache, second.cache) == ("miss", "hit")
    assert r2.text == r1.text and r2.completion_tokens == r1.completion_tokens and r2.finish_reason == "length"
    assert g.engine_calls == 1
    assert (CACHE_HITS._value.get() - hits, CACHE_MISSES._value.get() - misses) == (1, 1)
    other = _req(temperature=0.5)
    await g.ask(other)
    assert other.cache is None and g.engine_calls == 2  # not cacheable: passed through
    await g.close()


async def test_ten_concurrent_identical_requests_make_one_engine_call() -> None:
    g = Graph()
    requests = [_req() for _ in range(10)]
    g.pub.emit(*requests)
    results = [await (await r.reply).result for r in requests]  # type: ignore[misc]
    assert g.engine_calls == 1
    assert [r.cache for r in requests] == ["miss"] + ["hit"] * 9
    assert len({r.text for r in results}) == 1
    assert g.pub.total_requested - g.pub.outstanding == 10  # each one answered here was asked for again
    await g.close()


async def test_entries_expire_after_ttl_s() -> None:
    g = Graph(ttl_s=5.0)
    loop = asyncio.get_running_loop()
    await g.ask(_req())
    await asyncio.sleep(4.0)
    assert (await g.ask(r := _req())) and r.cache == "hit"
    stored_at = loop.time()
    await asyncio.sleep(5.0 - (loop.time() - stored_at) + 1.5)
    late = _req()
    await g.ask(late)
    assert late.cache == "miss" and g.engine_calls == 2
    await g.close()


async def test_at_most_max_entries_least_recently_used_evicted() -> None:
    g = Graph(max_entries=2)
    for prompt in ("a", "b"):
        await g.ask(_req(prompt))
    await g.ask(_req("a"))  # a is now the most recent
    await g.ask(_req("c"))  # evicts b
    assert g.engine_calls == 3
    hit_a, miss_b = _req("a"), _req("b")
    await g.ask(hit_a)
    await g.ask(miss_b)
    assert (hit_a.cache, miss_b.cache) == ("hit", "miss") and g.engine_calls == 4
    assert list(g.stage.store.entries) != [] and len(g.stage.store.entries) == 2  # type: ignore[attr-defined]
    await g.close()


async def test_a_streamed_hit_replays_the_text_word_by_word_on_credit() -> None:
    g = Graph()
    r1 = await g.ask(_req())
    hit = _req(stream=True)
    g.pub.emit(hit)
    completion = await hit.reply  # type: ignore[misc]
    tokens = TestSubscriber[Any]()
    completion.tokens.subscribe(tokens)
    tokens.request(2)
    words = re.findall(r"\s*\S+|\s+", r1.text)
    assert len(words) >= 3 and [c.text for c in tokens.values] == words[:2] and not tokens.completed
    tokens.request(UNBOUNDED)
    assert "".join(c.text for c in tokens.values) == r1.text and tokens.completed
    await g.close()


async def test_a_failed_leader_fails_the_requests_waiting_for_it() -> None:
    g = Graph()
    leader, follower = _req(), _req()
    g.pub.emit(leader, follower)
    await leader.reply  # type: ignore[misc]
    g.engine.down = True  # the leader fails (EngineUnavailableError, an EngineError)
    with pytest.raises(EngineError):
        await follower.reply  # type: ignore[misc]
    g.engine.down = False
    again = _req()
    await g.ask(again)
    assert again.cache == "miss"  # nothing was stored
    await g.close()


def test_bounds_are_checked() -> None:
    with pytest.raises(ValueError, match="max_entries"):
        ops.cache(0, 1.0)
    with pytest.raises(ValueError, match="ttl_s"):
        ops.cache(1, 0)
