"""llm_worker: a worker that takes requests from a broker (Redis Streams or NATS JetStream) and
runs them on an engine.

    rxpipe run pipelines/llm_worker.py --set broker_url=nats://127.0.0.1:4222
    rxpipe run pipelines/llm_worker.py --set broker_url=redis://127.0.0.1:6379/0
    rxpipe run pipelines/llm_worker.py --set backend_url=http://127.0.0.1:8001/v1 --set model=my-model

The graph, with demand flowing right to left::

    broker source(stream, group, consumer) ─> execute(engine) ─> (replies to each gateway)
        one read of n (XREADGROUP COUNT n / a pull of n)  <── demand n = the engine's free slots

The worker reads only what its engine has room for (a paused engine reads nothing),
acknowledges a request only after its result is written to the gateway's reply channel, and
takes over requests a dead worker left for ``visibility_timeout_s`` (DESIGN §8). A client that
leaves is cancelled here (skipped if not started, aborted within one engine step if running);
a streamed answer is stepped only while its reader, at the gateway, gives credit.

Settings (``--set key=value``; values parse as JSON, else strings) and their defaults:

    broker_url=null              redis://… or nats://…; null: redis_url
    redis_url="redis://127.0.0.1:6379/0"  the Redis server (the older name of broker_url)
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
    model="sim"                  the model id
    stall_timeout_s=10.0         a stream whose reader gives no credit this long is aborted (s)
    drain_timeout_s=30.0         on SIGINT/SIGTERM, held requests get this long to finish (s)
"""

from __future__ import annotations

from typing import Any

from rxpipe import operators as ops
from rxpipe.engines import Engine, OpenAIEngine, SimulatedEngine
from rxpipe.runtime import Pipeline
from rxpipe.transport import SCHEMES, default_consumer, transport_source

DEFAULTS: dict[str, Any] = {
    "broker_url": None,
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
    for key in ("max_num_seqs", "max_num_batched_tokens"):
        value = merged[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{key} must be an int >= 1, got {value!r}")
    return merged


def engine_for(s: dict[str, Any]) -> Engine:
    """OpenAIEngine when ``backend_url`` is set, else the SimulatedEngine."""
    if s["backend_url"]:
        return OpenAIEngine(str(s["backend_url"]), model=s["model"], max_in_flight=s["max_num_seqs"],
                            stall_timeout_s=s["stall_timeout_s"])
    return SimulatedEngine(max_num_seqs=s["max_num_seqs"], max_num_batched_tokens=s["max_num_batched_tokens"],
                           step_overhead_s=s["step_overhead_s"], prefill_s_per_token=s["prefill_s_per_token"],
                           decode_s_per_seq=s["decode_s_per_seq"], stall_timeout_s=s["stall_timeout_s"],
                           model=s["model"])


def pipeline(config: dict[str, Any]) -> Pipeline:
    s = settings(config)
    url = s["broker_url"] or s["redis_url"]
    if s["broker_url"] and "redis_url" in config and config["redis_url"] != s["broker_url"]:
        raise ValueError("set broker_url or redis_url, not both (redis_url is the older name of broker_url)")
    engine = engine_for(s)
    kind = "nats" if str(url).startswith(SCHEMES["nats"]) else "redis"
    source = transport_source(url, max_unacked=engine.max_num_seqs, name=f"{kind}_source",
                              pause_s=lambda: float(getattr(engine, "retry_after_s", 0.0) or 0.0),
                              stream=s["stream"], group=s["group"], consumer=s["consumer"] or default_consumer(),
                              visibility_timeout_s=s["visibility_timeout_s"], max_deliveries=s["max_deliveries"])
    return Pipeline(source, ops.execute(engine, name="executor"), name="llm_worker",
                    drain_timeout_s=s["drain_timeout_s"])
