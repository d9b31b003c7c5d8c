"""Settings, backoff, trimming ids, backlog and pause arithmetic, and feature detection."""

from __future__ import annotations

import random
import time

import orjson
import pytest
from redis.asyncio import Redis

from rxpipe.redis import Backoff, RedisSettings
from rxpipe.redis._connection import public_url
from rxpipe.redis._features import detect_features, parse_version
from rxpipe.redis._trim import next_id
from rxpipe.redis.sink import _pause_floor

from .servers import RedisServer


def test_settings_defaults_and_validation() -> None:
    s = RedisSettings()
    assert (s.stream, s.group, s.max_backlog, s.visibility_timeout_s) == ("rxpipe:requests", "workers", 1000, 30.0)
    assert s.block == 1000 and RedisSettings(visibility_timeout_s=2.0).block == 500
    for bad in ({"url": "http://x"}, {"max_backlog": 0}, {"visibility_timeout_s": 0}, {"stream": ""},
                {"block_ms": 0}, {"pool_size": True}):
        with pytest.raises(ValueError):
            RedisSettings(**bad)  # type: ignore[arg-type]
    assert public_url("redis://user:secret@host:6380/1") == "redis://user@host:6380/1"
    assert public_url("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"


def test_backoff_is_full_jitter_below_a_doubling_cap() -> None:
    backoff = Backoff(0.05, 1.0, random.Random(1))
    delays = [backoff.next_delay() for _ in range(8)]
    bounds = [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0]
    assert all(0 <= d <= b for d, b in zip(delays, bounds, strict=True))
    backoff.reset()
    assert backoff.failures == 0 and backoff.next_delay() <= 0.05


def test_ids_backlog_and_pause_floor() -> None:
    assert next_id(b"5-3") == b"5-4" and next_id("17") == b"17-1"
    now = time.time()
    beat = lambda at, until: orjson.dumps({"at": at, "pause_until": until})  # noqa: E731
    assert _pause_floor({b"a": beat(now, now + 3), b"b": beat(now, now + 5)}, now) == now + 3
    assert _pause_floor({b"a": beat(now, now + 3), b"b": beat(now, 0.0)}, now) == 0.0  # b takes work
    assert _pause_floor({b"a": beat(now, now + 3), b"dead": beat(now - 60, 0.0)}, now) == now + 3
    assert _pause_floor({}, now) == 0.0


async def test_redis_7_0_has_no_redis_8_stream_commands(redis_server: RedisServer) -> None:
    assert parse_version("7.0.15") == (7, 0, 15) and parse_version("8.4.0-rc1") == (8, 4)
    client = Redis.from_url(redis_server.url)
    features = await detect_features(client, "rxpipe:probe")
    await client.aclose()
    assert features.version[:2] == (7, 0)
    assert (features.xackdel, features.xreadgroup_claim) == (False, False)


def test_the_pipelines_settings() -> None:
    from rxpipe.engines import OpenAIEngine, SimulatedEngine
    from rxpipe.loader import load_pipeline

    worker = load_pipeline("pipelines/llm_worker.py", {"redis_url": "redis://127.0.0.1:1/0", "max_num_seqs": 4,
                                                       "consumer": "w7", "visibility_timeout_s": 2})
    source, executor = worker.stages
    assert (source.kind, executor.kind) == ("redis_group_source", "execute")
    assert source.settings.consumer == "w7" and source.settings.visibility_timeout_s == 2  # type: ignore[attr-defined]
    assert source.max_unacked == 4 and isinstance(executor.engine, SimulatedEngine)  # type: ignore[attr-defined]
    remote = load_pipeline("pipelines/llm_worker.py", {"backend_url": "http://127.0.0.1:1/v1", "max_num_seqs": 3})
    assert isinstance(remote.stages[1].engine, OpenAIEngine)  # type: ignore[attr-defined]
    gateway = load_pipeline("pipelines/llm_gateway_redis.py", {"max_backlog": 50})
    assert [s.kind for s in gateway.stages] == ["gateway", "redis_sink"]
    assert gateway.stages[1].settings.max_backlog == 50  # type: ignore[attr-defined]
    for file in ("pipelines/llm_worker.py", "pipelines/llm_gateway_redis.py"):
        with pytest.raises(ValueError, match="unknown setting"):
            load_pipeline(file, {"queue_capacity": 5})
