"""llm_worker: a worker that takes requests from the Redis stream and runs them on an engine.

    rxpipe run pipelines/llm_worker.py --set redis_url=redis://127.0.0.1:6379/0
    rxpipe run pipelines/llm_worker.py --set backend_url=http://127.0.0.1:8001/v1 --set model=my-model

The graph, with demand flowing right to left::

    redis_group_source(stream, group, consumer) ─> execute(engine) ─> (replies to each gateway)
        XREADGROUP COUNT n  <── demand n = the engine's free sequence slots

The worker reads from the stream only what its engine has room for (a paused engine reads
nothing), acknowledges an entry only after its result is written to the gateway's reply stream,
and claims entries a dead worker left idle for ``visibility_timeout_s`` (DESIGN §8).

Settings (``--set key=value``; values parse as JSON, else strings; each type-checked): ``SETTINGS``
below (``rxpipe run pipelines/llm_worker.py --help-settings`` prints them, with their defaults):
the broker's (``redis_url``, ``stream``, ``group``, ``consumer``, ``visibility_timeout_s``,
``max_deliveries``), ``backend_url`` (an OpenAI-compatible server: OpenAIEngine replaces the
simulated engine, ``max_num_seqs`` its ``max_in_flight``, ``model`` its model id), the simulated
engine's (those of ``llm_gateway.py``), ``model`` and ``drain_timeout_s``.
"""

from __future__ import annotations

from typing import Any

from rxpipe import operators as ops
from rxpipe.engines import SIMULATED_PIPELINE, SIMULATED_SETTINGS, Engine, OpenAIEngine, SimulatedEngine
from rxpipe.redis import REDIS_SETTINGS, RedisGroupSource, redis_settings
from rxpipe.runtime import DRAIN_TIMEOUT, Pipeline
from rxpipe.settings import Schema, Setting


def _http_url(value: Any) -> str:
    if not isinstance(value, str) or not value.startswith(("http://", "https://")):
        raise ValueError("not an http(s) URL")
    return value


#: every setting (``--set key=value``; ``rxpipe run pipelines/llm_worker.py --help-settings``)
SETTINGS = Schema(
    REDIS_SETTINGS.pick("redis_url", "stream", "group", "consumer", "visibility_timeout_s", "max_deliveries")
    .replace("consumer", default=None, nullable=True, default_text=None,
             doc="this worker's name in the group; null: <hostname>-<pid>"),
    Setting("backend_url", None, "URL", "an OpenAI-compatible server (vLLM, ...): OpenAIEngine replaces the "
                                        "simulated engine (max_in_flight = max_num_seqs); null: simulated",
            parse=_http_url, expected="an http(s) URL", nullable=True),
    SIMULATED_SETTINGS.pick(*SIMULATED_PIPELINE),
    Setting("model", "sim", "str", "the model id (sent to backend_url)", allow_empty=False),
    DRAIN_TIMEOUT,
)

DEFAULTS: dict[str, Any] = SETTINGS.defaults()


def settings(config: dict[str, Any]) -> dict[str, Any]:
    """Every setting, checked (:class:`~rxpipe.settings.SettingError` names a bad or unknown one)."""
    return SETTINGS.resolve(config)


def engine_for(s: dict[str, Any]) -> Engine:
    """OpenAIEngine when ``backend_url`` is set, else the SimulatedEngine."""
    if s["backend_url"]:
        return OpenAIEngine(s["backend_url"], model=s["model"], max_in_flight=s["max_num_seqs"],
                            stall_timeout_s=s["stall_timeout_s"])
    return SimulatedEngine(model=s["model"], **{name: s[name] for name in SIMULATED_PIPELINE})


def pipeline(config: dict[str, Any]) -> Pipeline:
    s = settings(config)
    engine = engine_for(s)
    redis = redis_settings(s)
    source = RedisGroupSource(redis, max_unacked=engine.max_num_seqs, name="redis_source",
                              pause_s=lambda: float(getattr(engine, "retry_after_s", 0.0) or 0.0))
    return Pipeline(source, ops.execute(engine, name="executor"), name="llm_worker",
                    drain_timeout_s=s["drain_timeout_s"])
