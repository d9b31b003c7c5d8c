"""The gateway side on Redis Streams: :class:`RedisSink`, the transport's sink over
:class:`~rxpipe.redis._adapter.RedisGatewayBroker` (DESIGN §8).

    Pipeline(Gateway(model="sim"), redis_sink(RedisSettings(url=..., max_backlog=1000)))

Demand is the room under ``max_backlog`` (the group's entries not yet acknowledged: its pending
entries plus the entries after its last-delivered-id, counted by one script,
:data:`~rxpipe.redis._adapter.BACKLOG`; never the group's ``lag``, which Redis 7.0 keeps
counting for deleted entries); see
:class:`~rxpipe.transport.TransportSink` for the rule shared by every broker.
"""

from __future__ import annotations

from typing import Any

from ..flowable import Flowable, Operator
from ..serving import CompletionRequest
from ..transport.sink import TransportSink, pause_floor
from ._adapter import RedisGatewayBroker, _beats, ensure_group, gateways_key, workers_key
from ._connection import RedisSettings

__all__ = ["RedisSink", "redis_sink", "workers_key", "gateways_key", "ensure_group"]


class RedisSink(TransportSink):
    """The gateway side of the Redis Streams transport: a :class:`~rxpipe.transport.TransportSink`
    publishing to the stream ``settings.stream`` (``XADD``), reading its own reply stream
    (``<stream>:replies:<gateway id>``, ``XREAD BLOCK`` on a connection of its own)."""

    kind = "redis_sink"

    def __init__(self, source: Flowable[CompletionRequest], settings: RedisSettings, *,
                 name: str | None = None) -> None:
        if not isinstance(settings, RedisSettings):
            raise TypeError(f"RedisSink needs RedisSettings, got {settings!r}")
        super().__init__(source, settings, RedisGatewayBroker(settings), name=name)


def redis_sink(settings: RedisSettings, *, name: str | None = None) -> Operator:
    """The gateway side of the Redis transport as an operator: ``Pipeline(Gateway(...),
    redis_sink(settings))``. See :class:`RedisSink`."""
    if not isinstance(settings, RedisSettings):
        raise TypeError(f"redis_sink() needs RedisSettings, got {settings!r}")
    return lambda source: RedisSink(source, settings, name=name)


def _pause_floor(workers: Any, now: float) -> float:
    """:func:`~rxpipe.transport.sink.pause_floor` of the raw ``<stream>:workers`` hash."""
    return pause_floor(_beats(workers), now)
