"""pipelines/seed_petproject.py: the seed's pet project (fixed-latency engine, queue 100, token
bucket at the edge, latency budget)."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from rxpipe.loader import load_pipeline

PET = Path(__file__).resolve().parents[2] / "pipelines" / "seed_petproject.py"

pytestmark = pytest.mark.loops("asyncio")


def test_the_graph_and_its_defaults() -> None:
    pipeline = load_pipeline(str(PET), {})
    assert [stage.name for stage in pipeline.stages] == ["gateway", "queue", "executor"]
    gateway, queue, executor = pipeline.stages
    config = gateway.config  # type: ignore[attr-defined]
    assert (config.key_rate, config.key_burst, config.latency_budget_s) == (20.0, 20, 4.0)
    assert queue.capacity == 100  # type: ignore[attr-defined]
    assert executor.engine.max_num_seqs == 5  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="unknown setting"):
        load_pipeline(str(PET), {"queue_size": 3})


@pytest.mark.parametrize(("setting", "message"), [
    ({"key_rate": True}, "setting key_rate must be a number > 0 or null, got True (bool)"),
    ({"concurrency": "abc"}, "setting concurrency must be an integer >= 1, got 'abc' (str)"),
    ({"seed": "x"}, "setting seed must be an integer >= 0, got 'x' (str)"),
    ({"min_s": float("nan")}, "setting min_s must be a number >= 0, got nan (float)"),
    ({"model": ""}, "setting model must be a non-empty string, got '' (str)"),
])
def test_a_setting_of_the_wrong_type_is_refused_naming_its_key(setting: dict[str, object], message: str) -> None:
    # --set values are JSON: key_rate=true must not become a bucket of 1 request/s
    with pytest.raises(ValueError) as refused:
        load_pipeline(str(PET), setting)
    assert str(refused.value) == message


async def test_the_token_bucket_at_the_edge_refuses_past_its_burst() -> None:
    # a bucket of 3 that refills once per 1000 s: the 4th and 5th request are policed
    pipeline = load_pipeline(str(PET), {"key_rate": 0.001, "key_burst": 3, "concurrency": 1, "min_s": 0.02,
                                        "max_s": 0.02})
    answers = []
    async with pipeline.start(port=0) as running:
        async with aiohttp.ClientSession() as http:
            for _ in range(5):
                async with http.post(f"{running.url}/v1/completions", json={"prompt": "hi", "max_tokens": 2}) as r:
                    body = await r.json()
                    answers.append((r.status, body["error"]["code"] if r.status != 200 else None))
    assert answers == [(200, None)] * 3 + [(429, "rate_limited")] * 2
