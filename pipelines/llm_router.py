"""llm_router: one OpenAI-compatible front for several OpenAI-compatible backends (vLLM, llama.cpp).

    rxpipe run pipelines/llm_router.py --set backends=http://127.0.0.1:8001,http://127.0.0.1:8002 \\
        --set model=my-model --set max_in_flight=auto

The graph, with demand flowing right to left::

    gateway ─> edge_queue(queue_capacity) ─> cache(cache_max_entries, cache_ttl_s)
            ─> balance(execute(OpenAIEngine(backend 0)), execute(OpenAIEngine(backend 1)), ...)

Each backend's executor asks for as many requests as its engine has free in-flight slots (its
window: ``max_in_flight``, cut on 429/503, or adaptive with ``auto``); ``balance`` gives each
request to the backend with the most free slots, so the faster backend gets more work by
construction (``routing=least_loaded``, the default). ``routing=prefix`` sends a request to the
backend that was sent the longest prefix of its prompt, among those with free slots, so the
backends' prefix caches hit (``ops.prefix_affinity``); ``round_robin`` is for comparison. A
backend whose circuit breaker is open (connection failures) gets nothing; a request it failed
before its first token reached the client is sent to another backend, and a stream it failed
after tokens reached the client goes on on another backend where it stopped
(``retry_started``); the edge answers 503 only when no backend is available. Deterministic requests (``temperature`` 0
or a ``seed``) are answered from the cache when the same request was answered within
``cache_ttl_s`` (``x-rxpipe-cache: hit``), and identical ones in flight share one backend call.

Settings (``--set key=value``, values parsed as JSON, else strings; each type-checked): see
``SCHEMA`` and README.md ("Many backends: `pipelines/llm_router.py`").
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from rxpipe import operators as ops
from rxpipe.engines import CompletionRequest, OpenAIEngine
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

#: key: (default, kind, what it is). Kinds: "str", "int" (>= 0 where noted), "number" (> 0),
#: "number?" (> 0 or null), "int?" (>= 1 or null), "bool", "limits" (see max_in_flight).
SCHEMA: dict[str, tuple[Any, str, str]] = {
    "backends": ("", "str", "comma-separated base URLs of the OpenAI-compatible backends (required)"),
    "model": ("", "str", "the model id served, and sent to every backend (required)"),
    "max_in_flight": ("auto", "limits", "calls in flight per backend: an int, \"auto\" (adaptive), or a "
                                        "comma-separated list, one per backend"),
    "backend_api_key": ("", "str", "bearer key sent to the backends; empty: none (also RXPIPE_BACKEND_API_KEY)"),
    "retry_unstarted": (True, "bool", "a request a backend failed before its first token goes to another"),
    "retry_started": (True, "bool", "a stream a backend failed after tokens were sent goes on on another, where it "
                                    "stopped"),
    "routing": ("least_loaded", "routing", "least_loaded (most free slots), prefix (prefix-cache affinity among "
                                           "backends with free slots) or round_robin"),
    "prefix_max_blocks": (16384, "int", "routing=prefix: prompt blocks of 64 characters remembered per backend (LRU)"),
    "prefix_balance_abs": (8, "int0", "routing=prefix: a backend more than this many free slots behind the freest "
                                      "(and 1.5x) is passed over"),
    "cache_max_entries": (1024, "int0", "answers kept by the response cache; 0 turns the cache off"),
    "cache_ttl_s": (300.0, "number", "a cached answer is served this long after it was made (s)"),
    "queue_capacity": (100, "int", "requests admitted and not yet running, at most"),
    "api_keys": ("", "str", "comma-separated bearer keys of the front; empty: RXPIPE_API_KEYS, else no auth"),
    "key_rate": (None, "number?", "per-API-key policing at the edge: requests/s; null: off"),
    "key_burst": (10, "int", "per-API-key bucket size: requests"),
    "latency_budget_s": (None, "number?", "refuse (429 deadline) when the estimated wait exceeds it (s); null: off"),
    "drain_timeout_s": (30.0, "number", "on SIGINT/SIGTERM, in-flight requests get this long (s)"),
    "stall_timeout_s": (10.0, "number?", "a stream whose reader gives no credit this long is aborted (s)"),
    "max_body_bytes": (1 << 20, "int", "larger request bodies get 413 (bytes)"),
    "max_model_len": (8192, "int", "context length: prompt + max_tokens over it → 400 (tokens)"),
    "default_max_tokens": (None, "int?", "cap of the max_tokens given to a request without one (tokens)"),
    "max_connections": (4096, "int", "open HTTP connections at most (within ulimit -n)"),
    "keepalive_timeout_s": (75.0, "number", "an idle keep-alive connection is closed after it (s)"),
    "header_timeout_s": (10.0, "number", "a new connection without a complete request head by then is closed (s)"),
    "tenants_file": (None, "str?", "tenants (JSON or TOML): per-tenant fair queue, priority, rpm/tpm (README "
                                   "\"Many tenants\"); null: one queue for all"),
}

DEFAULTS: dict[str, Any] = {key: spec[0] for key, spec in SCHEMA.items()}

ROUTINGS = ("least_loaded", "prefix", "round_robin")


class SettingError(PipelineLoadError, ValueError):
    """A ``--set`` value of the wrong type or range; the message names the key (one line)."""


def _limit(value: Any) -> int | str | None:
    if value == "auto":
        return "auto"
    if type(value) is int and value >= 1:
        return value
    if isinstance(value, str) and value.strip().isdigit() and int(value) >= 1:
        return int(value)
    return None


def _check(key: str, value: Any) -> None:
    kind = SCHEMA[key][1]
    if kind == "str?":
        ok, expected = value is None or (isinstance(value, str) and bool(value)), "a path or null"
    elif kind == "str":
        ok, expected = isinstance(value, str) or (key == "api_keys" and type(value) is int), "a string"
    elif kind == "routing":
        ok, expected = value in ROUTINGS, " or ".join(ROUTINGS)
    elif kind == "bool":
        ok, expected = isinstance(value, bool), "true or false"
    elif kind in ("int", "int0", "int?"):
        ok = (value is None and kind == "int?") or (type(value) is int and value >= (0 if kind == "int0" else 1))
        expected = "an integer >= 0" if kind == "int0" else "an integer >= 1"
    elif kind == "limits":
        parts = value if isinstance(value, list) else str(value).split(",") if isinstance(value, (str, int)) else [None]
        ok, expected = all(_limit(p) is not None for p in parts), "an int >= 1, \"auto\", or a list of them"
    else:
        ok = (value is None and kind == "number?") or (
            type(value) in (int, float) and 0 < value < float("inf"))
        expected = "a number > 0"
    if not ok:
        raise SettingError(f"setting {key} must be {expected}, got {value!r} ({type(value).__name__})")


def settings(config: dict[str, Any]) -> dict[str, Any]:
    """``DEFAULTS`` overridden by ``config``, checked; ``backends`` becomes a list of URLs and
    ``max_in_flight`` a list with one limit per backend. Raises :class:`SettingError`."""
    unknown = sorted(set(config) - set(DEFAULTS))
    if unknown:
        raise SettingError(f"unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(DEFAULTS))}")
    s = {**DEFAULTS, **config}
    for key, value in s.items():
        _check(key, value)
    backends = [u.strip() for u in s["backends"].split(",") if u.strip()]
    if not backends:
        raise SettingError("setting backends is required: --set backends=http://host:port,http://host:port")
    if not s["model"]:
        raise SettingError("setting model is required: the model id the backends serve (--set model=...)")
    raw = s["max_in_flight"]
    limits = [_limit(p) for p in (raw if isinstance(raw, list) else str(raw).split(","))]
    if len(limits) == 1:
        limits = limits * len(backends)
    if len(limits) != len(backends):
        raise SettingError(f"setting max_in_flight has {len(limits)} values for {len(backends)} backends")
    s["backends"], s["max_in_flight"] = backends, limits
    return s


def engines(s: dict[str, Any]) -> list[OpenAIEngine]:
    """One OpenAIEngine per backend (named ``backend0``, ``backend1``, ... in metrics)."""
    key = s["backend_api_key"] or os.environ.get("RXPIPE_BACKEND_API_KEY") or None
    made = []
    for i, (url, limit) in enumerate(zip(s["backends"], s["max_in_flight"], strict=True)):
        engine = OpenAIEngine(url, s["model"], limit, key, stall_timeout_s=s["stall_timeout_s"])
        engine.name = f"backend{i}"
        made.append(engine)
    return made


def build(s: dict[str, Any], backends: list[OpenAIEngine]) -> Pipeline:
    """The graph for validated settings ``s`` in front of ``backends``."""
    api_keys = parse_api_keys(s["api_keys"]) or parse_api_keys(os.environ.get("RXPIPE_API_KEYS"))
    try:
        gateway = Gateway(GatewayConfig(
            model=s["model"], api_keys=api_keys, key_rate=s["key_rate"], key_burst=s["key_burst"],
            latency_budget_s=s["latency_budget_s"], max_body_bytes=s["max_body_bytes"],
            max_model_len=s["max_model_len"], default_max_tokens=s["default_max_tokens"],
            max_connections=s["max_connections"], keepalive_timeout_s=s["keepalive_timeout_s"],
            header_timeout_s=s["header_timeout_s"], tenants_file=s["tenants_file"]), name="gateway")
    except TenantsFileError as exc:
        raise SettingError(f"setting tenants_file: {exc}") from exc
    gate = gateway.tenant_gate
    if gate is not None:  # as pipelines/llm_gateway.py: the per-tenant fair queue right behind the edge
        stages = [ops.fair_queue(s["queue_capacity"], tenant=_tenant, weight=gate.tenants.weights, cost=_vtc_cost,
                                 priority=lambda item: gateway.tenant_priority(item.tenant),
                                 departure=reply_departure, name="queue")]
    else:
        stages = [edge_queue(s["queue_capacity"], name="queue")]
    if s["cache_max_entries"] > 0:
        stages.append(ops.cache(s["cache_max_entries"], s["cache_ttl_s"], name="cache"))
    stages.append(ops.balance(*(ops.execute(e, name=f"executor_{e.name}") for e in backends),
                              retry_unstarted=s["retry_unstarted"], retry_started=s["retry_started"],
                              affinity=routing_policy(s), name="balance"))
    return Pipeline(gateway, *stages, name="llm_router", drain_timeout_s=s["drain_timeout_s"])


def routing_policy(s: dict[str, Any]) -> Any:
    """The balance's routing policy for ``s["routing"]``: None (least loaded: the most free
    slots), ``ops.prefix_affinity`` or :class:`RoundRobin`."""
    if s["routing"] == "prefix":
        return ops.prefix_affinity(max_blocks=s["prefix_max_blocks"], balance_abs=s["prefix_balance_abs"])
    if s["routing"] == "round_robin":
        return RoundRobin()
    return None


class RoundRobin:
    """Round-robin among the backends with free slots (for comparison: blind to how many)."""

    def bind(self, branches: int) -> None:
        pass

    def choose(self, item: Any, candidates: Sequence[tuple[int, int]]) -> int:
        return candidates[0][0]  # the first with demand after the last one served


def _tenant(item: CompletionRequest) -> str | None:
    return item.tenant


def _vtc_cost(item: CompletionRequest) -> int:
    """VTC's estimate at dispatch (tokens): prompt + 2 × max_tokens; reconciled at completion."""
    return vtc_cost(item.prompt_tokens, item.max_tokens or 0)


def pipeline(config: dict[str, Any]) -> Pipeline:
    s = settings(config)
    return build(s, engines(s))
