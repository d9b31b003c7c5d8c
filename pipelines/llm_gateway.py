"""llm_gateway: an OpenAI-compatible gateway in front of a simulated vLLM-like engine.

    rxpipe run pipelines/llm_gateway.py                       # serves http://127.0.0.1:8000
    rxpipe run pipelines/llm_gateway.py --port 9000 --set queue_capacity=20 --set max_num_seqs=4

The graph, with demand flowing right to left::

    gateway ─> rate_limit(rate, burst) ─> buffer(queue_capacity) ─> batch(batch_max_size,
        batch_max_delay_s) ─> execute(SimulatedEngine(max_num_seqs, ...))

The engine asks for work only when it has free sequence slots; that demand travels up through
the batcher, the bounded queue and the shaping rate limiter to the gateway, which admits an HTTP
request only while demand is > 0 and otherwise answers 429 with Retry-After at once.

Settings (``--set key=value``; values parse as JSON, else strings) and their defaults:

    queue_capacity=100          requests the bounded queue (buffer) holds
    rate=1000.0, burst=100      shaping token bucket of the graph (requests/s, requests)
    key_rate=null, key_burst=10 per-API-key policing at the edge (requests/s, requests); null: off
    max_num_seqs=256            engine sequence slots (vLLM's default)
    max_num_batched_tokens=8192 engine token budget per step (vLLM's default with chunked prefill)
    batch_max_size=null         requests per upstream batch; null: max(1, max_num_seqs // 8)
    batch_max_delay_s=0.002     a partial batch leaves this long after its first request
    step_overhead_s=0.006       engine step cost: fixed part (s)
    prefill_s_per_token=0.00005 engine step cost per prefilled prompt token (s)
    decode_s_per_seq=0.0001     engine step cost per decoding sequence (s)
    model="sim"                 the model id served
    api_keys=""                 comma-separated bearer keys (also RXPIPE_API_KEYS); empty: no auth
    latency_budget_s=null       refuse (429 deadline) when the estimated time to answer exceeds it (s)
    drain_timeout_s=30.0        on SIGINT/SIGTERM, in-flight requests get this long to finish (s)
    stall_timeout_s=10.0        a stream whose reader gives no credit this long is aborted (s)
    max_body_bytes=1048576      larger request bodies get 413

The engine's step costs are in the range of a 7B model on one modern GPU (see
``rxpipe.engines.SimulatedEngine`` for their sources).
"""

from __future__ import annotations

import os
from typing import Any

from rxpipe import operators as ops
from rxpipe.engines import Engine, SimulatedEngine
from rxpipe.flowable import Operator
from rxpipe.gateway import Gateway, GatewayConfig, edge_queue, parse_api_keys
from rxpipe.runtime import Pipeline

DEFAULTS: dict[str, Any] = {
    "queue_capacity": 100,
    "rate": 1000.0,
    "burst": 100,
    "key_rate": None,
    "key_burst": 10,
    "max_num_seqs": 256,
    "max_num_batched_tokens": 8192,
    "batch_max_size": None,
    "batch_max_delay_s": 0.002,
    "step_overhead_s": 0.006,
    "prefill_s_per_token": 0.00005,
    "decode_s_per_seq": 0.0001,
    "model": "sim",
    "api_keys": "",
    "latency_budget_s": None,
    "drain_timeout_s": 30.0,
    "stall_timeout_s": 10.0,
    "max_body_bytes": 1 << 20,
}


def settings(config: dict[str, Any]) -> dict[str, Any]:
    """``DEFAULTS`` overridden by ``config``; unknown keys raise ValueError naming the known ones."""
    unknown = sorted(set(config) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(DEFAULTS))}")
    merged = {**DEFAULTS, **config}
    for key in ("queue_capacity", "max_num_seqs", "max_num_batched_tokens", "burst", "key_burst"):
        value = merged[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{key} must be an int >= 1, got {value!r}")
    if merged["batch_max_size"] is None:
        merged["batch_max_size"] = max(1, merged["max_num_seqs"] // 8)
    if merged["batch_max_size"] > merged["max_num_seqs"]:
        raise ValueError(f"batch_max_size ({merged['batch_max_size']}) must not exceed max_num_seqs "
                         f"({merged['max_num_seqs']}): the executor asks for a batch only when it has "
                         f"room for a whole one")
    return merged


def pipeline(config: dict[str, Any]) -> Pipeline:
    s = settings(config)
    engine = SimulatedEngine(
        max_num_seqs=s["max_num_seqs"],
        max_num_batched_tokens=s["max_num_batched_tokens"],
        step_overhead_s=s["step_overhead_s"],
        prefill_s_per_token=s["prefill_s_per_token"],
        decode_s_per_seq=s["decode_s_per_seq"],
        stall_timeout_s=s["stall_timeout_s"],
        model=s["model"],
    )
    return build(s, engine)


def build(s: dict[str, Any], engine: Engine, *, queue: Operator | None = None,
          name: str = "llm_gateway") -> Pipeline:
    """The graph of this pipeline for validated settings ``s`` (see :func:`settings`) in front of
    ``engine``. ``queue`` replaces the bounded queue stage (default ``buffer(queue_capacity)``);
    benchmarks use it to compare queue disciplines on the same graph."""
    api_keys = parse_api_keys(s["api_keys"]) or parse_api_keys(os.environ.get("RXPIPE_API_KEYS"))
    gateway = Gateway(GatewayConfig(
        model=s["model"],
        api_keys=api_keys,
        key_rate=s["key_rate"],
        key_burst=s["key_burst"],
        latency_budget_s=s["latency_budget_s"],
        max_body_bytes=s["max_body_bytes"],
    ), name="gateway")
    return Pipeline(
        gateway,
        ops.rate_limit(s["rate"], burst=s["burst"], name="rate_limit"),
        queue or edge_queue(s["queue_capacity"], name="queue"),
        ops.batch(s["batch_max_size"], s["batch_max_delay_s"], name="batch"),
        ops.execute(engine, name="executor"),
        name=name,
        drain_timeout_s=s["drain_timeout_s"],
    )
