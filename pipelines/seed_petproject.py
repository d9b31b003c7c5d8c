"""seed_petproject: the seed's pet project as a pipeline, to *see* end-to-end backpressure.

    rxpipe run pipelines/seed_petproject.py                           # serves http://127.0.0.1:8000
    rxpipe load --ramp 1:50 --duration 60 --plot load.png             # in another terminal

The graph, with demand flowing right to left::

    gateway (token bucket: key_rate, key_burst) ─> buffer(queue_capacity) ─> execute(engine)

The engine is the seed's model, ``SimulatedEngine.fixed_latency(concurrency, min_s, max_s)``: a
semaphore of 5 slots where each request takes 0.5–2.0 s (uniform, seeded), so it serves about
5 / 1.25 = 4 requests/s. The executor asks for work only when a slot is free; the bounded queue
(``ops.buffer``: it asks the edge for 100, then for 75 more each time 75 have left; the
gateway's main job uses ``edge_queue``, one more per departure) makes the edge answer 429
``queue_full`` at once when that demand is used up, and above ``key_rate`` requests/s the
edge's token bucket answers 429 ``rate_limited`` before the request costs anything. The
latency budget (4 s) refuses with 429 ``deadline`` whatever would wait longer than that, so
admitted requests see a stable latency instead of the 25 s a full queue of 100 means at 4
requests/s.

Settings (``--set key=value``; ``rxpipe run pipelines/seed_petproject.py --help-settings`` prints
them): ``queue_capacity`` (100, the bounded queue), ``key_rate`` / ``key_burst`` (20 requests/s and
20: the edge's token bucket per API key; all anonymous clients share one; ``key_rate=null``: off),
``concurrency`` (5 engine slots), ``min_s`` / ``max_s`` (0.5 and 2.0 s per request),
``latency_budget_s`` (4.0 s; null: off, then the queue fills to 100 and latency grows to ~25 s),
``seed`` (0) and ``model`` ("sim"), and the other edge settings of ``llm_gateway.py``.
"""

from __future__ import annotations

from typing import Any

from rxpipe import operators as ops
from rxpipe.engines import SimulatedEngine
from rxpipe.gateway import EDGE_SETTINGS, QUEUE_CAPACITY, Gateway, gateway_config
from rxpipe.runtime import Pipeline
from rxpipe.settings import Schema, Setting, SettingError

#: every setting (``--set key=value``): the seed's model and the edge's, with the seed's defaults
SETTINGS = Schema(
    Schema(QUEUE_CAPACITY).replace("queue_capacity", doc="requests the bounded queue holds"),
    Setting("concurrency", 5, "int", "engine slots (the seed's semaphore)", minimum=1),
    Setting("min_s", 0.5, "number", "per-request service time, lower bound (s)", minimum=0),
    Setting("max_s", 2.0, "number", "per-request service time, upper bound (s)", minimum=0),
    Setting("seed", 0, "int", "seeds the service times and the generated text", minimum=0),
    EDGE_SETTINGS.without("tenants_file").replace("key_rate", default=20.0).replace("key_burst", default=20)
    .replace("latency_budget_s", default=4.0),
)

DEFAULTS: dict[str, Any] = SETTINGS.defaults()


def pipeline(config: dict[str, Any]) -> Pipeline:
    s = SETTINGS.resolve(config)
    if s["max_s"] < s["min_s"]:
        raise SettingError(f"setting max_s ({s['max_s']:g}) must not be below min_s ({s['min_s']:g})", "max_s")
    engine = SimulatedEngine.fixed_latency(s["concurrency"], s["min_s"], s["max_s"], seed=s["seed"], model=s["model"])
    return Pipeline(
        Gateway(gateway_config(s), name="gateway"),
        ops.buffer(s["queue_capacity"], name="queue"),
        ops.execute(engine, name="executor"),
        name="seed_petproject",
    )
