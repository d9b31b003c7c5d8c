"""llm_worker: a worker that takes requests from a broker (Redis Streams, NATS JetStream or Kafka)
and runs them on an engine.

    rxpipe run pipelines/llm_worker.py --set broker_url=nats://127.0.0.1:4222
    rxpipe run pipelines/llm_worker.py --set broker_url=kafka://127.0.0.1:9092
    rxpipe run pipelines/llm_worker.py --set broker_url=redis://127.0.0.1:6379/0
    rxpipe run pipelines/llm_worker.py --set backend_url=http://127.0.0.1:8001/v1 --set model=my-model

The graph, with demand flowing right to left::

    broker source(stream, group, consumer) ─> execute(engine) ─> (replies to each gateway)
        one read of n (XREADGROUP COUNT n / a pull of n / getmany(max_records=n))
                                                          <── demand n = the engine's free slots

The worker reads only what its engine has room for (a paused engine reads nothing),
acknowledges a request only after its result is written to the gateway's reply channel, and
takes over requests a dead worker left for ``visibility_timeout_s`` (DESIGN §8). A client that
leaves is cancelled here (skipped if not started, aborted within one engine step if running);
a streamed answer is stepped only while its reader, at the gateway, gives credit.

Settings (``--set key=value``; values parse as JSON, else strings; each type-checked): ``SETTINGS``
below (``rxpipe run pipelines/llm_worker.py --help-settings`` prints them, with their defaults):
the broker's (``broker_url``, or ``redis_url``, its older name for Redis; ``stream``, ``group``,
``consumer``, ``visibility_timeout_s``, ``max_deliveries``; on Kafka ``partitions``,
``session_timeout_ms``, ``heartbeat_interval_ms``, ``max_poll_interval_ms``, ``fetch_max_wait_ms``), ``backend_url`` (an
OpenAI-compatible server: OpenAIEngine replaces the simulated engine, ``max_num_seqs`` its
``max_in_flight``, ``model`` its model id), the simulated engine's (those of ``llm_gateway.py``),
``model`` and ``drain_timeout_s``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from rxpipe import operators as ops
from rxpipe.engines import SIMULATED_PIPELINE, SIMULATED_SETTINGS, Engine, OpenAIEngine, SimulatedEngine
from rxpipe.kafka import KAFKA_SETTINGS
from rxpipe.redis import REDIS_SETTINGS
from rxpipe.runtime import DRAIN_TIMEOUT, Pipeline
from rxpipe.settings import Schema, Setting, SettingError
from rxpipe.transport import BROKER_URL, broker_name, default_consumer, transport_source

#: Kafka's own settings a worker takes
WORKER_KAFKA = ("partitions", "session_timeout_ms", "heartbeat_interval_ms", "max_poll_interval_ms",
                "fetch_max_wait_ms")


def _http_url(value: Any) -> str:
    if not isinstance(value, str) or not value.startswith(("http://", "https://")):
        raise ValueError("not an http(s) URL")
    return value


#: every setting (``--set key=value``; ``rxpipe run pipelines/llm_worker.py --help-settings``)
SETTINGS = Schema(
    dataclasses.replace(BROKER_URL, doc="redis://…, nats://… or kafka://…: the broker the gateways "
                                        "(pipelines/llm_gateway.py --set broker_url=…) queue requests on; null: "
                                        "redis_url"),
    REDIS_SETTINGS.pick("redis_url", "stream", "group", "consumer", "visibility_timeout_s", "max_deliveries")
    .replace("redis_url", doc="the Redis server when broker_url is null (its older name)")
    .replace("consumer", default=None, nullable=True, default_text=None,
             doc="this worker's name in the group; null: <hostname>-<pid>"),
    *(dataclasses.replace(s, doc=f"with a kafka:// broker_url: {s.doc}") for s in KAFKA_SETTINGS.pick(
        *WORKER_KAFKA).values()),
    Setting("backend_url", None, "URL", "an OpenAI-compatible server (vLLM, ...): OpenAIEngine replaces the "
                                        "simulated engine (max_in_flight = max_num_seqs); null: simulated",
            parse=_http_url, expected="an http(s) URL", nullable=True),
    SIMULATED_SETTINGS.pick(*SIMULATED_PIPELINE),
    Setting("model", "sim", "str", "the model id (sent to backend_url)", allow_empty=False),
    DRAIN_TIMEOUT,
)

DEFAULTS: dict[str, Any] = SETTINGS.defaults()


def settings(config: dict[str, Any]) -> dict[str, Any]:
    """Every setting, checked (:class:`~rxpipe.settings.SettingError` names a bad or unknown one;
    ``broker_url`` and a different ``redis_url`` together are refused)."""
    s = SETTINGS.resolve(config)
    if s["broker_url"] is not None and "redis_url" in config and config["redis_url"] != s["broker_url"]:
        raise SettingError("set broker_url or redis_url, not both (redis_url is the older name of broker_url)",
                           "redis_url")
    return s


def engine_for(s: dict[str, Any]) -> Engine:
    """OpenAIEngine when ``backend_url`` is set, else the SimulatedEngine."""
    if s["backend_url"]:
        return OpenAIEngine(s["backend_url"], model=s["model"], max_in_flight=s["max_num_seqs"],
                            stall_timeout_s=s["stall_timeout_s"])
    return SimulatedEngine(model=s["model"], **{name: s[name] for name in SIMULATED_PIPELINE})


def pipeline(config: dict[str, Any]) -> Pipeline:
    s = settings(config)
    url = s["broker_url"] or s["redis_url"]
    engine = engine_for(s)
    kind = broker_name(url)
    kafka = {name: s[name] for name in WORKER_KAFKA} if kind == "kafka" else {}
    source = transport_source(url, max_unacked=engine.max_num_seqs, name=f"{kind}_source",
                              pause_s=lambda: float(getattr(engine, "retry_after_s", 0.0) or 0.0),
                              stream=s["stream"], group=s["group"], consumer=s["consumer"] or default_consumer(),
                              visibility_timeout_s=s["visibility_timeout_s"], max_deliveries=s["max_deliveries"],
                              **kafka)
    return Pipeline(source, ops.execute(engine, name="executor"), name="llm_worker",
                    drain_timeout_s=s["drain_timeout_s"])
