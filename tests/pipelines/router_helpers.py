"""Helpers for the router's tests and bench: stub backends as processes, the router in-process,
and an open-loop HTTP load (real time)."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import random
import string
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Callable

import aiohttp

from rxpipe.engines import OpenAIEngine

ROOT = Path(__file__).resolve().parents[2]

#: FAST: 8 concurrent, 20 ms + 2 ms/token; SLOW: 2 concurrent, 200 ms + 10 ms/token; both 429
#: (Retry-After: 1) above their concurrency (the issue's two backends)
FAST = ("--capacity", "8", "--base-delay-s", "0.02", "--token-delay-s", "0.002", "--retry-after", "1")
SLOW = ("--capacity", "2", "--base-delay-s", "0.2", "--token-delay-s", "0.01", "--retry-after", "1")


def load_router() -> Any:
    spec = importlib.util.spec_from_file_location("llm_router_under_test", ROOT / "pipelines" / "llm_router.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextlib.asynccontextmanager
async def running_router(**config: Any) -> AsyncIterator[tuple[str, list[OpenAIEngine]]]:
    """The router of ``pipelines/llm_router.py`` on a free port; yields (url, engines)."""
    router = load_router()
    s = router.settings(config)
    engines = router.engines(s)
    try:
        async with router.build(s, engines).start(port=0) as running:
            assert running.url is not None
            yield running.url, engines
    finally:
        for engine in engines:
            await engine.aclose()


@dataclass
class Outcome:
    """One request: sent ``sent_s`` after the first, answered ``latency_s`` later."""

    sent_s: float
    status: int
    latency_s: float
    headers: dict[str, str]
    body: bytes


async def open_loop(url: str, n: int, rate: float, body: Callable[[int], dict[str, Any]],
                    path: str = "/v1/completions", timeout_s: float = 60.0) -> list[Outcome]:
    """``n`` requests at ``rate``/s (evenly spaced, open loop: never waiting for answers)."""
    loop = asyncio.get_running_loop()
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=timeout_s)) as session:
        async def one(i: int, sent: float) -> Outcome:
            t0 = loop.time()
            try:
                async with session.post(url + path, json=body(i)) as response:
                    data = await response.read()
                    return Outcome(sent, response.status, loop.time() - t0, dict(response.headers), data)
            except (aiohttp.ClientError, TimeoutError) as error:
                return Outcome(sent, -1, loop.time() - t0, {}, repr(error).encode())

        start = loop.time()
        tasks = []
        for i in range(n):
            delay = start + i / rate - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(i, loop.time() - start)))
        return list(await asyncio.gather(*tasks))


def served_by(outcomes: list[Outcome], t_s: float) -> int:
    """200 answers received within ``t_s`` of the first request."""
    return sum(o.status == 200 and o.sent_s + o.latency_s <= t_s for o in outcomes)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def shared_prefix_workload(groups: int, per_group: int, system_bytes: int, question_bytes: int,
                           seed: int = 0) -> list[str]:
    """SGLang's generated-shared-prefix shape (``bench_serving --dataset-name
    generated-shared-prefix``): ``groups`` system prompts of ``system_bytes`` random ASCII
    bytes, each followed by ``per_group`` distinct questions of ``question_bytes`` bytes
    (``system + "\\n\\n" + question``), shuffled (seeded)."""
    rng = random.Random(seed)
    letters = string.ascii_lowercase + " "
    prompts = []
    for _ in range(groups):
        system = "".join(rng.choices(letters, k=system_bytes))
        prompts += [system + "\n\n" + "".join(rng.choices(letters, k=question_bytes)) for _ in range(per_group)]
    rng.shuffle(prompts)
    return prompts


def prefix_cache_tokens(urls: list[str]) -> tuple[float, float]:
    """``(queries, hits)``: prompt tokens looked up in the backends' prefix caches and found,
    summed over the backends' ``/metrics`` (``rxpipe_engine_prefix_cache_*_total``)."""
    queries = hits = 0.0
    for url in urls:
        with urllib.request.urlopen(url + "/metrics", timeout=10) as response:
            text = response.read().decode()
        for line in text.splitlines():
            if line.startswith("rxpipe_engine_prefix_cache_queries_total{"):
                queries += float(line.rsplit(" ", 1)[1])
            elif line.startswith("rxpipe_engine_prefix_cache_hits_total{"):
                hits += float(line.rsplit(" ", 1)[1])
    return queries, hits
