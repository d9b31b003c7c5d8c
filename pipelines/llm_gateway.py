"""llm_gateway: an OpenAI-compatible gateway in front of a simulated vLLM-like engine.

    rxpipe run pipelines/llm_gateway.py                       # serves http://127.0.0.1:8000
    rxpipe run pipelines/llm_gateway.py --port 9000 --set queue_capacity=20 --set max_num_seqs=4

The graph, with demand flowing right to left::

    gateway ─> rate_limit(rate, burst) ─> edge_queue(queue_capacity) ─> batch(batch_max_size,
        batch_max_delay_s) ─> execute(SimulatedEngine(max_num_seqs, ...))

With ``tenants_file`` (many tenants, docs/tutorials/tenants.md) the queue is per tenant and comes
first, so the edge can ask it for room *for this tenant*::

    gateway ─> fair_queue(queue_capacity, tenant, weight, cost=VTC estimate, priority)
        ─> rate_limit(rate, burst) ─> batch ─> execute

The engine asks for work only when it has free sequence slots; that demand travels up through
the batcher, the bounded queue and the shaping rate limiter to the gateway, which admits an HTTP
request only while demand is > 0 and otherwise answers 429 with Retry-After at once.

Settings (``--set key=value``; values parse as JSON, else strings; each is type-checked and a
wrong one stops the start with a one-line error naming it). Defaults and meanings are in
``SETTINGS`` below (``rxpipe run pipelines/llm_gateway.py --help-settings`` prints them; the manual's
settings table, docs/guides/settings.md, is generated from it); the graph's bounds: ``queue_capacity`` (requests
admitted and not running, counting what ``batch`` holds), ``max_num_seqs``, ``rate``/``burst``;
the edge's: ``max_model_len``, ``max_body_bytes``, ``max_connections``, ``keepalive_timeout_s``,
``header_timeout_s``, ``latency_budget_s``, ``key_rate``/``key_burst``; tenants: ``tenants_file``
(weights, priorities, rpm/tpm and keys per tenant; SIGHUP reloads it); keys: ``api_keys`` —
prefer the ``RXPIPE_API_KEYS`` environment variable (a command line is readable by every local
user).

With ``broker_url`` (``redis://…``, ``nats://…`` or ``kafka://…``) the gateway forwards to workers on other
hosts (``pipelines/llm_worker.py`` with the same ``broker_url``) instead of a local engine; the
settings ``with broker_url`` (``stream``, ``group``, ``max_backlog``, ``max_queue_wait_s``: the
wait bound of admission, ``refresh_interval_s``, ``credit_window``; on Kafka ``partitions`` and
``fetch_max_wait_ms``), the edge's and
``stall_timeout_s`` apply then, the queue's and the engine's do not::

    gateway ─> broker sink(max_backlog) ══ Redis stream / NATS JetStream / Kafka topic ══> workers
            <── replies (token chunks with sequence numbers, results); cancels and credit ══>

The engine's step costs are in the range of a 7B model on one modern GPU (see
``rxpipe.engines.SimulatedEngine`` for their sources).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from rxpipe import operators as ops
from rxpipe.engines import SIMULATED_PIPELINE, SIMULATED_SETTINGS, CompletionRequest, Engine, SimulatedEngine
from rxpipe.flowable import Operator
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
from rxpipe.kafka import KAFKA_SETTINGS
from rxpipe.runtime import DRAIN_TIMEOUT, Pipeline
from rxpipe.settings import Schema, Setting, SettingError
from rxpipe.transport import BROKER_URL, TRANSPORT_SETTINGS, broker_name, transport_sink

#: Kafka's own settings a gateway takes (it may be the first to create the request topic)
GATEWAY_KAFKA = ("partitions", "fetch_max_wait_ms")

#: the broker's settings: ``broker_url`` turns the gateway into one in front of workers; the
#: others apply with it (those of :class:`~rxpipe.transport.TransportSettings`)
BROKER_SETTINGS = Schema(
    dataclasses.replace(BROKER_URL, doc="redis://…, nats://… or kafka://…: forward to workers "
                                        "(pipelines/llm_worker.py) through this broker instead of a local engine; "
                                        "null: local engine"),
    *(dataclasses.replace(s, doc=f"with broker_url: {s.doc}") for s in TRANSPORT_SETTINGS.pick(
        "stream", "group", "max_backlog", "max_queue_wait_s", "refresh_interval_s", "credit_window").values()),
    *(dataclasses.replace(s, doc=f"with a kafka:// broker_url: {s.doc}") for s in KAFKA_SETTINGS.pick(
        *GATEWAY_KAFKA).values()),
)

#: every setting (``--set key=value``; ``rxpipe run pipelines/llm_gateway.py --help-settings``)
SETTINGS = Schema(
    QUEUE_CAPACITY,
    Setting("rate", 1000.0, "number", "shaping token bucket of the graph: requests/s", minimum=0,
            exclusive_minimum=True),
    Setting("burst", 100, "int", "shaping token bucket of the graph: requests", minimum=1),
    Setting("batch_max_size", None, "int", "requests per upstream batch; null: max(1, max_num_seqs // 8)", minimum=1,
            nullable=True),
    Setting("batch_max_delay_s", 0.002, "number", "a partial batch leaves this long after its first request (s)",
            minimum=0, nullable=True),
    SIMULATED_SETTINGS.pick(*SIMULATED_PIPELINE),
    EDGE_SETTINGS,
    BROKER_SETTINGS,
    DRAIN_TIMEOUT,
)

DEFAULTS: dict[str, Any] = SETTINGS.defaults()


def settings(config: dict[str, Any]) -> dict[str, Any]:
    """Every setting: ``config``'s value, else the default, each type- and range-checked.

    Raises :class:`~rxpipe.settings.SettingError` (a ValueError; the CLI prints it as one line)
    for an unknown key (naming the known ones) or a value of the wrong type, e.g. ``api_keys=true``
    (JSON ``true``, not a string: it must not enable a key named "True") or ``drain_timeout_s="x"``.
    """
    merged = SETTINGS.resolve(config)
    if merged["batch_max_size"] is None:
        merged["batch_max_size"] = max(1, merged["max_num_seqs"] // 8)
    if merged["batch_max_size"] > merged["max_num_seqs"]:
        raise SettingError(f"setting batch_max_size ({merged['batch_max_size']}) must not exceed max_num_seqs "
                           f"({merged['max_num_seqs']}): the executor asks for a batch only when it has "
                           f"room for a whole one", "batch_max_size")
    return merged


def pipeline(config: dict[str, Any]) -> Pipeline:
    s = settings(config)
    if s["broker_url"] is not None:
        return forward(s)
    engine = SimulatedEngine(model=s["model"], **{name: s[name] for name in SIMULATED_PIPELINE})
    return build(s, engine)


def forward(s: dict[str, Any], *, name: str = "llm_gateway") -> Pipeline:
    """The gateway in front of workers on other hosts (``broker_url``; DESIGN §8): the edge, then
    the broker's sink (demand = room under ``max_backlog``); the queue and the engines are the
    workers'. ``stall_timeout_s`` ends a stalled stream here and on its worker."""
    url = s["broker_url"]
    kafka = {name: s[name] for name in GATEWAY_KAFKA} if broker_name(url) == "kafka" else {}
    sink = transport_sink(url, name="broker", stream=s["stream"], group=s["group"],
                          max_backlog=s["max_backlog"], max_queue_wait_s=s["max_queue_wait_s"],
                          refresh_interval_s=s["refresh_interval_s"], credit_window=s["credit_window"],
                          stall_timeout_s=s["stall_timeout_s"], **kafka)
    return Pipeline(_gateway(s), sink, name=name, drain_timeout_s=s["drain_timeout_s"])


def _gateway(s: dict[str, Any]) -> Gateway:
    try:
        return Gateway(gateway_config(s), name="gateway")
    except TenantsFileError as exc:
        raise SettingError(f"setting tenants_file: {exc}", "tenants_file") from exc


def build(s: dict[str, Any], engine: Engine, *, queue: Operator | None = None,
          name: str = "llm_gateway") -> Pipeline:
    """The graph of this pipeline for validated settings ``s`` (see :func:`settings`) in front of
    ``engine``. ``queue`` replaces the bounded queue stage (default ``edge_queue(queue_capacity)``);
    benchmarks use it to compare queue disciplines on the same graph."""
    gateway = _gateway(s)
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
