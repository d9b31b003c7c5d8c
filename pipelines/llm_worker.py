"""llm_worker: a worker that takes requests from the Redis stream and runs them on an engine.

    rxpipe run pipelines/llm_worker.py --set redis_url=redis://127.0.0.1:6379/0
    rxpipe run pipelines/llm_worker.py --set backend_url=http://127.0.0.1:8001/v1 --set model=my-model

The graph, with demand flowing right to left::

    redis_group_source(stream, group, consumer) ─> execute(engine) ─> (replies to each gateway)
        XREADGROUP COUNT n  <── demand n = the engine's free sequence slots

The worker reads from the stream only what its engine has room for (a paused engine reads
nothing), acknowledges an entry only after its result is written to the gateway's reply stream,
and claims entries a dead worker left idle for ``visibility_timeout_s`` (DESIGN §8).

Settings (``--set key=value``; values parse as JSON, else strings) and their defaults:

    redis_url="redis://127.0.0.1:6379/0"  the Redis server
    stream="rxpipe:requests"     the request stream (shared with the gateways)
    group="workers"              the consumer group
    consumer=null                this worker's name in the group; null: <hostname>-<pid>
    visibility_timeout_s=30.0    a request idle this long on a worker that stopped is run elsewhere (s)
    max_deliveries=5             a request claimed after this many deliveries fails (a poison request)
    backend_url=null             an OpenAI-compatible server (vLLM, ...): OpenAIEngine replaces the
                                 simulated engine (max_num_seqs = its max_in_flight; model = its model id)
    max_num_seqs=256             engine sequence slots (vLLM's default)
    max_num_batched_tokens=8192  engine token budget per step
    step_overhead_s=0.006        engine step cost: fixed part (s)
    prefill_s_per_token=0.00005  engine step cost per prefilled prompt token (s)
    decode_s_per_seq=0.0001      engine step cost per decoding sequence (s)
    prefix_cache_blocks=0        engine prefix cache: unpinned blocks of 16 tokens kept (LRU); 0: none
    model="sim"                  the model id
    stall_timeout_s=10.0         a stream whose reader gives no credit this long is aborted (s)
    drain_timeout_s=30.0         on SIGINT/SIGTERM, held requests get this long to finish (s)
"""

from __future__ import annotations

from typing import Any

from rxpipe import operators as ops
from rxpipe.engines import Engine, OpenAIEngine, SimulatedEngine
from rxpipe.redis import RedisGroupSource, RedisSettings, default_consumer
from rxpipe.runtime import Pipeline

DEFAULTS: dict[str, Any] = {
    "redis_url": "redis://127.0.0.1:6379/0",
    "stream": "rxpipe:requests",
    "group": "workers",
    "consumer": None,
    "visibility_timeout_s": 30.0,
    "max_deliveries": 5,
    "backend_url": None,
    "max_num_seqs": 256,
    "max_num_batched_tokens": 8192,
    "step_overhead_s": 0.006,
    "prefill_s_per_token": 0.00005,
    "decode_s_per_seq": 0.0001,
    "prefix_cache_blocks": 0,
    "model": "sim",
    "stall_timeout_s": 10.0,
    "drain_timeout_s": 30.0,
}


def settings(config: dict[str, Any]) -> dict[str, Any]:
    """``DEFAULTS`` overridden by ``config``; unknown keys raise ValueError naming the known ones."""
    unknown = sorted(set(config) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(DEFAULTS))}")
    merged = {**DEFAULTS, **config}
    for key, minimum in (("max_num_seqs", 1), ("max_num_batched_tokens", 1), ("prefix_cache_blocks", 0)):
        value = merged[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"{key} must be an int >= {minimum}, got {value!r}")
    return merged


def engine_for(s: dict[str, Any]) -> Engine:
    """OpenAIEngine when ``backend_url`` is set, else the SimulatedEngine."""
    if s["backend_url"]:
        return OpenAIEngine(str(s["backend_url"]), model=s["model"], max_in_flight=s["max_num_seqs"],
                            stall_timeout_s=s["stall_timeout_s"])
    return SimulatedEngine(max_num_seqs=s["max_num_seqs"], max_num_batched_tokens=s["max_num_batched_tokens"],
                           step_overhead_s=s["step_overhead_s"], prefill_s_per_token=s["prefill_s_per_token"],
                           decode_s_per_seq=s["decode_s_per_seq"], stall_timeout_s=s["stall_timeout_s"],
                           model=s["model"], prefix_cache_blocks=s["prefix_cache_blocks"])


def pipeline(config: dict[str, Any]) -> Pipeline:
    s = settings(config)
    engine = engine_for(s)
    redis = RedisSettings(url=s["redis_url"], stream=s["stream"], group=s["group"],
                          consumer=s["consumer"] or default_consumer(),
                          visibility_timeout_s=s["visibility_timeout_s"], max_deliveries=s["max_deliveries"])
    source = RedisGroupSource(redis, max_unacked=engine.max_num_seqs, name="redis_source",
                              pause_s=lambda: float(getattr(engine, "retry_after_s", 0.0) or 0.0))
    return Pipeline(source, ops.execute(engine, name="executor"), name="llm_worker",
                    drain_timeout_s=s["drain_timeout_s"])
