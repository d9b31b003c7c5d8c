"""llm_gateway_redis: the OpenAI-compatible gateway in front of workers on other hosts, via Redis Streams.

    rxpipe run pipelines/llm_gateway_redis.py --set redis_url=redis://127.0.0.1:6379/0
    rxpipe run pipelines/llm_worker.py --set redis_url=redis://127.0.0.1:6379/0      # one per worker

The graph, with demand flowing right to left::

    gateway ─> redis_sink(stream, max_backlog) ══ Redis stream ══> workers (pipelines/llm_worker.py)
            <── reply stream of this gateway (token chunks, results) <══

The gateway admits a request only while the backlog (requests on the stream not yet acknowledged
by a worker) is under ``max_backlog``, else it answers 429 with Retry-After at once; while Redis
is unreachable it answers 503 ``unavailable`` and recovers on its own (DESIGN §8).

Settings (``--set key=value``; values parse as JSON, else strings) and their defaults:

    redis_url="redis://127.0.0.1:6379/0"  the Redis server
    stream="rxpipe:requests"     the request stream (shared with the workers)
    group="workers"              the workers' consumer group
    max_backlog=1000             requests on the stream not yet acknowledged, at most
    refresh_interval_s=0.25      how often the backlog is re-read from Redis (s)
    model="sim"                  the model id served
    api_keys=""                  comma-separated bearer keys (also RXPIPE_API_KEYS); empty: no auth
    key_rate=null, key_burst=10  per-API-key policing at the edge (requests/s, requests); null: off
    latency_budget_s=null        refuse (429 deadline) when the estimated time to answer exceeds it (s)
    drain_timeout_s=30.0         on SIGINT/SIGTERM, in-flight requests get this long to finish (s)
    max_body_bytes=1048576       larger request bodies get 413
"""

from __future__ import annotations

import os
from typing import Any

from rxpipe.gateway import Gateway, GatewayConfig, parse_api_keys
from rxpipe.redis import RedisSettings, redis_sink
from rxpipe.runtime import Pipeline

DEFAULTS: dict[str, Any] = {
    "redis_url": "redis://127.0.0.1:6379/0",
    "stream": "rxpipe:requests",
    "group": "workers",
    "max_backlog": 1000,
    "refresh_interval_s": 0.25,
    "model": "sim",
    "api_keys": "",
    "key_rate": None,
    "key_burst": 10,
    "latency_budget_s": None,
    "drain_timeout_s": 30.0,
    "max_body_bytes": 1 << 20,
}


def settings(config: dict[str, Any]) -> dict[str, Any]:
    """``DEFAULTS`` overridden by ``config``; unknown keys raise ValueError naming the known ones."""
    unknown = sorted(set(config) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(DEFAULTS))}")
    return {**DEFAULTS, **config}


def pipeline(config: dict[str, Any]) -> Pipeline:
    s = settings(config)
    redis = RedisSettings(url=s["redis_url"], stream=s["stream"], group=s["group"], max_backlog=s["max_backlog"],
                          refresh_interval_s=s["refresh_interval_s"])
    api_keys = parse_api_keys(s["api_keys"]) or parse_api_keys(os.environ.get("RXPIPE_API_KEYS"))
    gateway = Gateway(GatewayConfig(model=s["model"], api_keys=api_keys, key_rate=s["key_rate"],
                                    key_burst=s["key_burst"], latency_budget_s=s["latency_budget_s"],
                                    max_body_bytes=s["max_body_bytes"]), name="gateway")
    return Pipeline(gateway, redis_sink(redis, name="redis_sink"), name="llm_gateway_redis",
                    drain_timeout_s=s["drain_timeout_s"])
