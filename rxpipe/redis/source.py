"""The worker side on Redis Streams: :class:`RedisGroupSource`, the transport's source over
:class:`~rxpipe.redis._adapter.RedisWorkerBroker` (DESIGN §8).

    Pipeline(RedisGroupSource(settings, max_unacked=engine.max_num_seqs), ops.execute(engine))

``request(n)`` becomes ``XREADGROUP GROUP g c COUNT n BLOCK ms STREAMS s >`` (never more than
the outstanding demand, never more than ``max_unacked`` held); entries another consumer left
idle past ``visibility_timeout_s`` are claimed first (``XAUTOCLAIM``); see
:class:`~rxpipe.transport.WorkerSource` for the rules shared by every broker.
"""

from __future__ import annotations

from typing import Callable

from ..transport.source import WorkerSource
from ._adapter import RedisWorkerBroker
from ._connection import RedisSettings
from ._features import Features

__all__ = ["RedisGroupSource"]


class RedisGroupSource(WorkerSource):
    """Consumer ``settings.consumer`` of group ``settings.group`` on ``settings.stream``: a
    :class:`~rxpipe.transport.WorkerSource` over Redis Streams. ``claimed``: entries taken over
    from other consumers; ``features``: what the server offers (Redis 8 commands are used when
    present, never required)."""

    kind = "redis_group_source"

    def __init__(self, settings: RedisSettings, *, max_unacked: int | None = None,
                 pause_s: Callable[[], float] | None = None, name: str | None = None) -> None:
        if not isinstance(settings, RedisSettings):
            raise TypeError(f"RedisGroupSource needs RedisSettings, got {settings!r}")
        self.redis = RedisWorkerBroker(settings)
        super().__init__(settings, self.redis, max_unacked=max_unacked, pause_s=pause_s, name=name)

    @property
    def claimed(self) -> int:
        return self.redis.claimed

    @property
    def features(self) -> Features | None:
        return self.redis.features
