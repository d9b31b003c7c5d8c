"""llm_gateway: an OpenAI-compatible gateway in front of a simulated vLLM-like engine.

    rxpipe run pipelines/llm_gateway.py                       # serves http://127.0.0.1:8000
    rxpipe run pipelines/llm_gateway.py --port 9000 --set queue_capacity=20 --set max_num_seqs=4

The graph, with demand flowing right to left::

    gateway ─> rate_limit(rate, burst) ─> edge_queue(queue_capacity) ─> batch(batch_max_size,
        batch_max_delay_s) ─> execute(SimulatedEngine(max_num_seqs, ...))

With ``tenants_file`` (many tenants, README "Many tenants") the queue is per tenant and comes
first, so the edge can ask it for room *for this tenant*::

    gateway ─> fair_queue(queue_capacity, tenant, weight, cost=VTC estimate, priority)
        ─> rate_limit(rate, burst) ─> batch ─> execute

The engine asks for work only when it has free sequence slots; that demand travels up through
the batcher, the bounded queue and the shaping rate limiter to the gateway, which admits an HTTP
request only while demand is > 0 and otherwise answers 429 with Retry-After at once.

Settings (``--set key=value``; values parse as JSON, else strings; each is type-checked and a
wrong one stops the start with a one-line error naming it). Defaults and meanings are in
``SCHEMA`` below and in README.md's table; the graph's bounds: ``queue_capacity`` (requests
admitted and not running, counting what ``batch`` holds), ``max_num_seqs``, ``rate``/``burst``;
the edge's: ``max_model_len``, ``max_body_bytes``, ``max_connections``, ``keepalive_timeout_s``,
``header_timeout_s``, ``latency_budget_s``, ``key_rate``/``key_burst``; tenants: ``tenants_file``
(weights, priorities, rpm/tpm and keys per tenant; SIGHUP reloads it); keys: ``api_keys`` —
prefer the ``RXPIPE_API_KEYS`` environment variable (a command line is readable by every local
user).

The engine's step costs are in the range of a 7B model on one modern GPU (see
``rxpipe.engines.SimulatedEngine`` for their sources).
"""

from __future__ import annotations

import os
from typing import Any

from rxpipe import operators as ops
from rxpipe.engines import CompletionRequest, Engine, SimulatedEngine
from rxpipe.flowable import Operator
from rxpipe.gateway import (
    Gateway,
    GatewayConfig,
    TenantsFileError,
    edge_queue,
    parse_api_keys,
    reply_departure,
    vtc_cost,
)
from rxpipe.loader import PipelineLoadError
from rxpipe.runtime import Pipeline

#: key: (default, type, minimum (None: no bound), None allowed, what it is)
SCHEMA: dict[str, tuple[Any, str, float | None, bool, str]] = {
    "queue_capacity": (100, "int", 1, False, "requests admitted and not yet running, at most"),
    "rate": (1000.0, "number", 0, False, "shaping token bucket of the graph: requests/s (> 0)"),
    "burst": (100, "int", 1, False, "shaping token bucket of the graph: requests"),
    "key_rate": (None, "number", 0, True, "per-API-key policing at the edge: requests/s (> 0); null: off"),
    "key_burst": (10, "int", 1, False, "per-API-key bucket size: requests"),
    "max_num_seqs": (256, "int", 1, False, "engine sequence slots (vLLM's default)"),
    "max_num_batched_tokens": (8192, "int", 1, False, "engine token budget per step (vLLM's default)"),
    "batch_max_size": (None, "int", 1, True, "requests per upstream batch; null: max(1, max_num_seqs // 8)"),
    "batch_max_delay_s": (0.002, "number", 0, True, "a partial batch leaves this long after its first request (s)"),
    "step_overhead_s": (0.006, "number", 0, False, "engine step cost: fixed part (s)"),
    "prefill_s_per_token": (0.00005, "number", 0, False, "engine step cost per prefilled prompt token (s)"),
    "decode_s_per_seq": (0.0001, "number", 0, False, "engine step cost per decoding sequence (s)"),
    "prefix_cache_blocks": (0, "int", 0, False, "engine prefix cache: unpinned blocks of 16 tokens kept (LRU); "
                                                "0: no prefix caching"),
    "model": ("sim", "str", None, False, "the model id served"),
    "api_keys": ("", "str", None, False, "comma-separated bearer keys; empty: RXPIPE_API_KEYS, else no auth"),
    "latency_budget_s": (None, "number", 0, True, "refuse (429 deadline) when the estimated time to answer "
                                                  "exceeds it (s); null: off"),
    "drain_timeout_s": (30.0, "number", 0, False, "on SIGINT/SIGTERM, in-flight requests get this long (s)"),
    "stall_timeout_s": (10.0, "number", 0, True, "a stream whose reader gives no credit this long is aborted (s)"),
    "max_body_bytes": (1 << 20, "int", 1, False, "larger request bodies get 413 (bytes)"),
    "max_model_len": (8192, "int", 1, False, "context length: prompt + max_tokens over it → 400 (tokens)"),
    "default_max_tokens": (None, "int", 1, True, "cap of the max_tokens given to a request without one "
                                                  "(tokens); null: what remains of max_model_len"),
    "max_connections": (4096, "int", 1, False, "open HTTP connections at most (within ulimit -n)"),
    "keepalive_timeout_s": (75.0, "number", 0, False, "an idle keep-alive connection is closed after it (s)"),
    "header_timeout_s": (10.0, "number", 0, False, "a new connection without a complete request head by then "
                                                    "is closed (s)"),
    "tenants_file": (None, "str", None, True, "tenants (JSON or TOML): per-tenant fair queue, priority, rpm/tpm; "
                                              "null: one tenant"),
}

DEFAULTS: dict[str, Any] = {key: spec[0] for key, spec in SCHEMA.items()}


class SettingError(PipelineLoadError, ValueError):
    """A ``--set`` value of the wrong type or range; the message names the key (one line)."""


#: number settings where 0 is meaningful (no delay, no cost, no drain wait); the others need > 0
_ZERO_ALLOWED = {"batch_max_delay_s", "step_overhead_s", "prefill_s_per_token", "decode_s_per_seq", "drain_timeout_s"}


def _check(key: str, value: Any) -> None:
    _, kind, minimum, nullable, _ = SCHEMA[key]
    if value is None:
        if nullable:
            return
        raise SettingError(f"setting {key} must not be null")
    if key == "api_keys":  # a string, a list of strings, or an integer key typed bare (JSON parses it)
        ok = (isinstance(value, str) or type(value) is int
              or (isinstance(value, list) and all(isinstance(k, str) for k in value)))
        expected = "a string of comma-separated keys"
    elif kind == "str":
        ok, expected = isinstance(value, str) and bool(value), "a non-empty string"
    elif kind == "int":
        ok = type(value) is int and value >= (minimum or 0)
        expected = f"an integer >= {minimum:g}"
    elif key in _ZERO_ALLOWED:
        ok, expected = type(value) in (int, float) and 0 <= value < float("inf"), "a number >= 0"
    else:
        ok, expected = type(value) in (int, float) and 0 < value < float("inf"), "a number > 0"
    if not ok:
        raise SettingError(f"setting {key} must be {expected}{' or null' if nullable else ''}, got {value!r} "
                           f"({type(value).__name__})")


def settings(config: dict[str, Any]) -> dict[str, Any]:
    """``DEFAULTS`` overridden by ``config``, each value type- and range-checked.

    Raises :class:`SettingError` (a ValueError; the CLI prints it as one line) for an unknown
    key (naming the known ones) or a value of the wrong type, e.g. ``api_keys=true`` (JSON
    ``true``, not a string: it must not enable a key named "True") or ``drain_timeout_s="x"``.
    """
    unknown = sorted(set(config) - set(DEFAULTS))
    if unknown:
        raise SettingError(f"unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(DEFAULTS))}")
    merged = {**DEFAULTS, **config}
    for key, value in merged.items():
        _check(key, value)
    if merged["batch_max_size"] is None:
        merged["batch_max_size"] = max(1, merged["max_num_seqs"] // 8)
    if merged["batch_max_size"] > merged["max_num_seqs"]:
        raise SettingError(f"setting batch_max_size ({merged['batch_max_size']}) must not exceed max_num_seqs "
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
        prefix_cache_blocks=s["prefix_cache_blocks"],
    )
    return build(s, engine)


def build(s: dict[str, Any], engine: Engine, *, queue: Operator | None = None,
          name: str = "llm_gateway") -> Pipeline:
    """The graph of this pipeline for validated settings ``s`` (see :func:`settings`) in front of
    ``engine``. ``queue`` replaces the bounded queue stage (default ``edge_queue(queue_capacity)``);
    benchmarks use it to compare queue disciplines on the same graph."""
    api_keys = parse_api_keys(s["api_keys"]) or parse_api_keys(os.environ.get("RXPIPE_API_KEYS"))
    config = GatewayConfig(
        model=s["model"],
        api_keys=api_keys,
        key_rate=s["key_rate"],
        key_burst=s["key_burst"],
        latency_budget_s=s["latency_budget_s"],
        max_body_bytes=s["max_body_bytes"],
        max_model_len=s["max_model_len"],
        default_max_tokens=s["default_max_tokens"],
        max_connections=s["max_connections"],
        keepalive_timeout_s=s["keepalive_timeout_s"],
        header_timeout_s=s["header_timeout_s"],
        tenants_file=s["tenants_file"],
    )
    try:
        gateway = Gateway(config, name="gateway")
    except TenantsFileError as exc:
        raise SettingError(f"setting tenants_file: {exc}") from exc
    rate_limit = ops.rate_limit(s["rate"], burst=s["burst"], name="rate_limit")
    gate = gateway.tenant_gate
    if gate is not None and queue is None:
        # fair_queue right behind the edge (anything in between would hide room_for); a request
        # departs when it starts on the engine, so the exact bound holds as with edge_queue
        front = [ops.fair_queue(s["queue_capacity"], tenant=_tenant, weight=gate.tenants.weights, cost=_vtc_cost,
                                priority=lambda item: gateway.tenant_priority(item.tenant),
                                departure=reply_departure, name="queue"), rate_limit]
    else:
        front = [rate_limit, queue or edge_queue(s["queue_capacity"], name="queue")]
    return Pipeline(
        gateway,
        *front,
        ops.batch(s["batch_max_size"], s["batch_max_delay_s"], name="batch"),
        ops.execute(engine, name="executor"),
        name=name,
        drain_timeout_s=s["drain_timeout_s"],
    )


def _tenant(item: CompletionRequest) -> str | None:
    return item.tenant


def _vtc_cost(item: CompletionRequest) -> int:
    """VTC's estimate at dispatch (tokens): prompt + 2 × max_tokens; reconciled at completion."""
    return vtc_cost(item.prompt_tokens, item.max_tokens or 0)
