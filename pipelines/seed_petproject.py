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

Settings (``--set key=value``) and their defaults:

    queue_capacity=100     requests the bounded queue holds
    key_rate=20.0          the edge's token bucket: requests/s (per API key; all anonymous
    key_burst=20           clients share one bucket) and its burst (requests); key_rate=null: off
    concurrency=5          engine slots (the seed's semaphore)
    min_s=0.5, max_s=2.0   per-request service time bounds (s)
    latency_budget_s=4.0   refuse (429 deadline) when the estimated time to answer exceeds it (s);
                           null: off (then the queue fills to 100 and latency grows to ~25 s)
    seed=0                 seeds the service times and the generated text
    model="sim"            the model id served
"""

from __future__ import annotations

import math
from typing import Any

from rxpipe import operators as ops
from rxpipe.engines import SimulatedEngine
from rxpipe.gateway import Gateway, GatewayConfig
from rxpipe.loader import PipelineLoadError
from rxpipe.runtime import Pipeline

DEFAULTS: dict[str, Any] = {
    "queue_capacity": 100,
    "key_rate": 20.0,
    "key_burst": 20,
    "concurrency": 5,
    "min_s": 0.5,
    "max_s": 2.0,
    "latency_budget_s": 4.0,
    "seed": 0,
    "model": "sim",
}


class SettingError(PipelineLoadError, ValueError):
    """A ``--set`` value of the wrong type or range; the message names the key (one line)."""


#: each setting's kind: (int or number, smallest value, whether >= or >, null allowed)
_KINDS: dict[str, tuple[str, float, bool, bool]] = {
    "queue_capacity": ("int", 1, True, False), "key_rate": ("number", 0, False, True),
    "key_burst": ("int", 1, True, False), "concurrency": ("int", 1, True, False),
    "min_s": ("number", 0, True, False), "max_s": ("number", 0, True, False),
    "latency_budget_s": ("number", 0, False, True), "seed": ("int", 0, True, False),
}


def _check(key: str, value: Any) -> None:
    """One line naming the key for a value of the wrong type or range (--set values are JSON:
    ``key_rate=true`` must not become a bucket of 1 request/s)."""
    if key == "model":
        ok, expected, nullable = isinstance(value, str) and bool(value), "a non-empty string", False
    else:
        kind, low, inclusive, nullable = _KINDS[key]
        if value is None and nullable:
            return
        number = type(value) is int if kind == "int" else type(value) in (int, float) and math.isfinite(value)
        ok = number and (value >= low if inclusive else value > low)
        expected = f"{'an integer' if kind == 'int' else 'a number'} {'>=' if inclusive else '>'} {low:g}"
    if not ok:
        raise SettingError(f"setting {key} must be {expected}{' or null' if nullable else ''}, got {value!r} "
                         f"({type(value).__name__})")


def pipeline(config: dict[str, Any]) -> Pipeline:
    unknown = sorted(set(config) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(DEFAULTS))}")
    s = {**DEFAULTS, **config}
    for key, value in s.items():
        _check(key, value)
    engine = SimulatedEngine.fixed_latency(s["concurrency"], s["min_s"], s["max_s"], seed=s["seed"], model=s["model"])
    gateway = Gateway(GatewayConfig(model=s["model"], key_rate=s["key_rate"], key_burst=s["key_burst"],
                                    latency_budget_s=s["latency_budget_s"]), name="gateway")
    return Pipeline(
        gateway,
        ops.buffer(s["queue_capacity"], name="queue"),
        ops.execute(engine, name="executor"),
        name="seed_petproject",
    )
