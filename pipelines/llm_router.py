"""llm_router: one OpenAI-compatible front for several OpenAI-compatible backends (vLLM, llama.cpp).

    rxpipe run pipelines/llm_router.py --set backends=http://127.0.0.1:8001,http://127.0.0.1:8002 \\
        --set model=my-model --set max_in_flight=auto

The graph, with demand flowing right to left::

    gateway ─> edge_queue(queue_capacity) ─> cache(cache_max_entries, cache_ttl_s)
            ─> balance(execute(OpenAIEngine(backend 0)), execute(OpenAIEngine(backend 1)), ...)

Each backend's executor asks for as many requests as its engine has free in-flight slots (its
window: ``max_in_flight``, cut on 429/503, or adaptive with ``auto``); ``balance`` gives each
request to the backend with the most free slots, so the faster backend gets more work by
construction (``routing=least_loaded``, the default). A backend that is itself an rxpipe gateway
says its exact credit in every answer (DESIGN §8b): its engine's demand is at most that room, so a
backend another client filled gets no new request (it is probed with ``GET /v1/credit`` every
``credit_probe_min_s``–``credit_probe_max_s`` until it says room), and a request it refused with
429 anyway goes to another backend at once (with ``retry_unstarted``). ``routing=prefix`` sends a request to the
backend that was sent the longest prefix of its prompt, among those with free slots, so the
backends' prefix caches hit (``ops.prefix_affinity``); ``round_robin`` is for comparison. A
backend whose circuit breaker is open (connection failures) gets nothing; a request it failed
before its first token reached the client is sent to another backend, and a stream it failed
after tokens reached the client goes on on another backend where it stopped
(``retry_started``); the edge answers 503 only when no backend is available. Deterministic requests (``temperature`` 0
or a ``seed``) are answered from the cache when the same request was answered within
``cache_ttl_s`` (``x-rxpipe-cache: hit``), and identical ones in flight share one backend call.

Settings (``--set key=value``, values parsed as JSON, else strings; each type-checked): see
``SETTINGS`` (``rxpipe run pipelines/llm_router.py --help-settings`` prints them) and the manual's
settings page (docs/guides/settings.md, whose table is generated from it).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from rxpipe import operators as ops
from rxpipe.engines import OPENAI_SETTINGS, CompletionRequest, OpenAIEngine
from rxpipe.gateway import (
    EDGE_SETTINGS,
    QUEUE_CAPACITY,
    Gateway,
    TenantsFileError,
    edge_queue,
    gateway_config,
    reply_departure,
    vtc_cost,
)
from rxpipe.runtime import DRAIN_TIMEOUT, Pipeline
from rxpipe.settings import Schema, Setting, SettingError

ROUTINGS = ("least_loaded", "prefix", "round_robin")


def _urls(value: Any) -> list[str]:
    """``backends``: comma-separated http(s) URLs (or a list of them) → the list."""
    parts = value.split(",") if isinstance(value, str) else value if isinstance(value, list) else None
    if parts is None or not all(isinstance(p, str) for p in parts):
        raise TypeError("not URLs")
    urls = [p.strip() for p in parts if p.strip()]
    if not all(u.startswith(("http://", "https://")) and len(u) > len("https://") for u in urls):
        raise ValueError("not http(s) URLs")
    return urls


def _limits(value: Any) -> list[int | str]:
    """``max_in_flight``: an int >= 1, "auto", or a comma-separated list (or a list) of them, one
    per backend → the list."""
    parts = value if isinstance(value, list) else str(value).split(",") if isinstance(value, (str, int)) and \
        not isinstance(value, bool) else None
    if not parts:
        raise TypeError("not limits")
    limits: list[int | str] = []
    for part in parts:
        if isinstance(part, str) and part.strip().isdigit():
            part = int(part)
        elif isinstance(part, str):
            part = part.strip()
        limits.append(OPENAI_SETTINGS.check("max_in_flight", part))
    return limits


#: the OpenAIEngine arguments this pipeline takes, the same for every backend
ENGINE = ("retry_after_cap_s", "throttle_retries", "connect_timeout_s", "read_timeout_s", "total_timeout_s",
          "stall_timeout_s", "credit_probe_min_s", "credit_probe_max_s", "credit_fresh_s",
          "credit_watch")

#: every setting (``--set key=value``; ``rxpipe run pipelines/llm_router.py --help-settings``)
SETTINGS = Schema(
    Setting("backends", "", "URLs", "comma-separated base URLs of the OpenAI-compatible backends (required)",
            parse=_urls, expected="comma-separated http(s) URLs"),
    EDGE_SETTINGS.pick("model").replace("model", default="", doc="the model id served, and sent to every backend "
                                                                 "(required)"),
    Setting("max_in_flight", "auto", "limits", "calls in flight per backend: an int, \"auto\" (adaptive), or a "
                                               "comma-separated list, one per backend",
            parse=_limits, expected="an integer >= 1, \"auto\", or a comma-separated list of them"),
    Setting("backend_api_key", "", "str", "bearer key sent to the backends; empty: RXPIPE_BACKEND_API_KEY, else none",
            secret=True),
    Setting("retry_unstarted", True, "bool", "a request a backend failed before its first token goes to another"),
    Setting("retry_started", True, "bool", "a stream a backend failed after tokens were sent goes on on another, "
                                           "where it stopped"),
    Setting("routing", "least_loaded", "str", "least_loaded (most free slots), prefix (prefix-cache affinity among "
                                              "backends with free slots) or round_robin", choices=ROUTINGS),
    Setting("prefix_max_blocks", 16384, "int", "routing=prefix: prompt blocks of 64 characters remembered per "
                                               "backend (LRU)", minimum=1),
    Setting("prefix_balance_abs", 8, "int", "routing=prefix: a backend more than this many free slots behind the "
                                            "freest (and 1.5x) is passed over", minimum=0),
    Setting("cache_max_entries", 1024, "int", "answers kept by the response cache; 0 turns the cache off", minimum=0),
    Setting("cache_ttl_s", 300.0, "number", "a cached answer is served this long after it was made (s)", minimum=0,
            exclusive_minimum=True),
    QUEUE_CAPACITY,
    OPENAI_SETTINGS.pick(*ENGINE),
    EDGE_SETTINGS.without("model"),
    DRAIN_TIMEOUT,
)

DEFAULTS: dict[str, Any] = SETTINGS.defaults()


def settings(config: dict[str, Any]) -> dict[str, Any]:
    """Every setting, checked; ``backends`` becomes a list of URLs and ``max_in_flight`` a list
    with one limit per backend. Raises :class:`~rxpipe.settings.SettingError` naming the setting."""
    s = SETTINGS.resolve(config)
    backends = SETTINGS.check("backends", s["backends"])
    if not backends:
        raise SettingError("setting backends is required: --set backends=http://host:port,http://host:port",
                           "backends")
    if not s["model"]:
        raise SettingError("setting model is required: the model id the backends serve (--set model=...)", "model")
    limits = SETTINGS.check("max_in_flight", s["max_in_flight"])
    if len(limits) == 1:
        limits = limits * len(backends)
    if len(limits) != len(backends):
        raise SettingError(f"setting max_in_flight has {len(limits)} values for {len(backends)} backends",
                           "max_in_flight")
    s["backends"], s["max_in_flight"] = backends, limits
    return s


def engines(s: dict[str, Any]) -> list[OpenAIEngine]:
    """One OpenAIEngine per backend (named ``backend0``, ``backend1``, ... in metrics)."""
    key = s["backend_api_key"] or os.environ.get("RXPIPE_BACKEND_API_KEY") or None
    made = []
    # a full backend's 429 (it advertises credit) goes back to the balance, to another backend
    reroute = s["retry_unstarted"] and len(s["backends"]) > 1
    for i, (url, limit) in enumerate(zip(s["backends"], s["max_in_flight"], strict=True)):
        engine = OpenAIEngine(url, s["model"], limit, key, reroute_throttled=reroute,
                              **{name: s[name] for name in ENGINE})
        engine.name = f"backend{i}"
        made.append(engine)
    return made


def build(s: dict[str, Any], backends: list[OpenAIEngine]) -> Pipeline:
    """The graph for validated settings ``s`` in front of ``backends``."""
    try:
        gateway = Gateway(gateway_config(s), name="gateway")
    except TenantsFileError as exc:
        raise SettingError(f"setting tenants_file: {exc}", "tenants_file") from exc
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
