"""llm_gateway_redis: the OpenAI-compatible gateway in front of workers on other hosts, via Redis Streams.

    rxpipe run pipelines/llm_gateway_redis.py --set redis_url=redis://127.0.0.1:6379/0
    rxpipe run pipelines/llm_worker.py --set redis_url=redis://127.0.0.1:6379/0      # one per worker

The graph, with demand flowing right to left::

    gateway ─> redis_sink(stream, max_backlog) ══ Redis stream ══> workers (pipelines/llm_worker.py)
            <── reply stream of this gateway (token chunks, results) <══

The gateway admits a request only while the backlog (requests on the stream not yet acknowledged
by a worker) is under ``max_backlog``, else it answers 429 with Retry-After at once; while Redis
is unreachable it answers 503 ``unavailable`` and recovers on its own (DESIGN §8).

Settings (``--set key=value``; values parse as JSON, else strings; each type-checked): ``SETTINGS``
below (``rxpipe run pipelines/llm_gateway_redis.py --help-settings`` prints them, with their
defaults): the broker's (``redis_url``, ``stream``, ``group``, ``max_backlog``, ``max_queue_wait_s``,
``refresh_interval_s``), the edge's (those of ``llm_gateway.py`` but ``tenants_file``) and
``drain_timeout_s``.
"""

from __future__ import annotations

from typing import Any

from rxpipe.gateway import EDGE_SETTINGS, Gateway, gateway_config
from rxpipe.redis import REDIS_SETTINGS, redis_settings, redis_sink
from rxpipe.runtime import DRAIN_TIMEOUT, Pipeline
from rxpipe.settings import Schema

#: every setting (``--set key=value``; ``rxpipe run pipelines/llm_gateway_redis.py --help-settings``)
SETTINGS = Schema(
    REDIS_SETTINGS.pick("redis_url", "stream", "group", "max_backlog", "max_queue_wait_s", "refresh_interval_s"),
    EDGE_SETTINGS.without("tenants_file"),
    DRAIN_TIMEOUT,
)

DEFAULTS: dict[str, Any] = SETTINGS.defaults()


def settings(config: dict[str, Any]) -> dict[str, Any]:
    """Every setting, checked (:class:`~rxpipe.settings.SettingError` names a bad or unknown one)."""
    return SETTINGS.resolve(config)


def pipeline(config: dict[str, Any]) -> Pipeline:
    s = settings(config)
    gateway = Gateway(gateway_config(s), name="gateway")
    return Pipeline(gateway, redis_sink(redis_settings(s), name="redis_sink"), name="llm_gateway_redis",
                    drain_timeout_s=s["drain_timeout_s"])
