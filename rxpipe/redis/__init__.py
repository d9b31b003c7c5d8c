"""Beyond one machine: the Redis Streams adapter of :mod:`rxpipe.transport` (DESIGN §8).

Gateway side, :func:`redis_sink` / :class:`RedisSink`: admitted requests are ``XADD``-ed to a
stream; demand is the room under ``max_backlog``. Worker side, :class:`RedisGroupSource`: a
consumer group where ``request(n)`` becomes ``XREADGROUP COUNT n``, each item a
:class:`RemoteRequest` with an :class:`AckHandle`, ``XACK`` after its reply is written, dead
workers' entries claimed after ``visibility_timeout_s``. Replies travel on one stream per gateway
and are de-duplicated there (exactly once at the client); cancels and token credit travel back
on ``<stream>:control``.

    from rxpipe.redis import RedisSettings, redis_sink, RedisGroupSource
    settings = RedisSettings(url="redis://127.0.0.1:6379/0", max_backlog=1000)
    gateway = Pipeline(Gateway(model="sim"), redis_sink(settings))
    worker = Pipeline(RedisGroupSource(settings, max_unacked=64), ops.execute(engine))

Needs the ``redis`` extra (``pip install -e '.[redis]'``: redis-py >= 5, its asyncio client).
"""

from ..transport import AckHandle, Backoff, BrokerAdapter, RemoteRequest, default_consumer, register_broker
from ..transport._settings import SCHEMES
from ._connection import REDIS_SETTINGS, RedisSettings, redis_settings
from ._features import Features
from .sink import RedisSink, redis_sink
from .source import RedisGroupSource

__all__ = ["RedisSettings", "REDIS_SETTINGS", "redis_settings", "RedisSink", "redis_sink", "RedisGroupSource",
           "RemoteRequest", "AckHandle", "Backoff", "Features", "default_consumer"]

register_broker(BrokerAdapter(
    "redis", SCHEMES["redis"], RedisSettings,
    sink=lambda source, settings, name: RedisSink(source, settings, name=name),
    source=lambda settings, max_unacked, pause_s, name: RedisGroupSource(settings, max_unacked=max_unacked,
                                                                         pause_s=pause_s, name=name)))
