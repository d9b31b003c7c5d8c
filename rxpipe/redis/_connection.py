"""Connection settings, explicitly sized pools, backoff and the never-cancel-mid-command rule.

Known traps of redis-py's asyncio client that this module closes (DESIGN §8):

- an async ``ConnectionPool`` raises ``ConnectionError`` when exhausted: we use
  ``BlockingConnectionPool`` (waits up to ``pool_timeout_s`` for a free connection);
- a blocking read (``XREAD``/``XREADGROUP ... BLOCK``) holding a shared pool connection stalls every
  other command: each blocking reader gets a client of its own with exactly one connection;
- a socket timeout shorter than ``BLOCK`` turns every idle read into a ``TimeoutError``: the
  reader's socket timeout is ``BLOCK`` plus ``command_timeout_s``;
- cancelling a coroutine in the middle of a command can leave a reply unread on the connection
  and hand it to the next caller (CVE-2023-28858/28859): :func:`call` runs every command in a task
  of its own and awaits it through ``asyncio.shield``, so a cancelled caller never interrupts it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Mapping, TypeVar

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError

from ..settings import Schema, schema_of, setting
from ..transport._backoff import Backoff
from ..transport._interface import BrokerBusyError
from ..transport._settings import SCHEMES, TransportSettings, default_consumer, public_url

__all__ = ["RedisSettings", "REDIS_SETTINGS", "redis_settings", "Backoff", "call", "make_client", "PoolTimeoutError",
           "default_consumer", "public_url"]

T = TypeVar("T")


def _redis_url(value: object) -> str:
    if not isinstance(value, str) or not value.startswith(SCHEMES["redis"]):
        raise ValueError("not a Redis URL")
    return value


@dataclass(frozen=True)
class RedisSettings(TransportSettings):
    """Settings of the Redis Streams transport (DESIGN §8), each a typed setting
    (``schema_of(RedisSettings)``; a wrong value raises :class:`~rxpipe.settings.SettingError`
    naming the field): every field of :class:`~rxpipe.transport.TransportSettings` (url:
    ``redis://host:port/db``, redis-py's URL syntax; ``rediss://`` for TLS) plus:

    pool_size: connections of the command pool per process (each blocking reader has its own).
    pool_timeout_s: how long a command waits for a free pooled connection (then ``PoolTimeoutError``, a
        redis-py ``ConnectionError`` that says so: Redis itself may be up).
    trim_interval_s: a worker trims acknowledged entries off the stream this often (s).
    """

    url: str = setting("redis://127.0.0.1:6379/0", "URL", "the Redis server (redis://, rediss:// or unix://)",
                       parse=_redis_url, expected="a redis:// (or rediss://, unix://) URL")
    pool_size: int = setting(8, "int", "connections of the command pool per process", minimum=1)
    pool_timeout_s: float = setting(5.0, "number", "how long a command waits for a pooled connection (s)",
                                    minimum=0, exclusive_minimum=True)
    trim_interval_s: float = setting(1.0, "number", "how often a worker trims acknowledged entries (s)", minimum=0,
                                     exclusive_minimum=True)


#: :class:`RedisSettings` as the pipelines take them: ``url`` is ``redis_url`` there
REDIS_SETTINGS: Schema = schema_of(RedisSettings).rename("url", "redis_url")


def redis_settings(s: Mapping[str, Any]) -> RedisSettings:
    """The :class:`RedisSettings` of resolved pipeline settings ``s`` (those of its keys that are
    fields, ``redis_url`` for ``url``; a None ``consumer`` means the default, ``<host>-<pid>``)."""
    values = {("url" if name == "redis_url" else name): s[name] for name in REDIS_SETTINGS if name in s}
    if values.get("consumer", "") is None:
        del values["consumer"]
    return RedisSettings(**values)


def make_client(settings: RedisSettings, *, connections: int, blocking: bool = False) -> Redis:
    """A client over its own ``BlockingConnectionPool`` of exactly ``connections`` connections.

    ``blocking=True``: for one blocking reader (``connections`` should be 1); its socket timeout
    is ``BLOCK + command_timeout_s`` so an idle ``BLOCK`` never times out on the socket.
    redis-py's own retries are off: callers retry with :class:`Backoff` and decide what a failure
    means (an ``XADD`` is not blindly repeated).
    """
    timeout = settings.command_timeout_s + (settings.block / 1000 if blocking else 0.0)
    pool = BlockingConnectionPool.from_url(
        settings.url, max_connections=connections, timeout=settings.pool_timeout_s,
        socket_timeout=timeout, socket_connect_timeout=settings.connect_timeout_s,
        retry=Retry(NoBackoff(), 0), decode_responses=False)
    return Redis.from_pool(pool)


#: commands in flight: kept referenced until they finish, even when their caller was cancelled
_IN_FLIGHT: set[asyncio.Task[Any]] = set()


class PoolTimeoutError(RedisConnectionError, BrokerBusyError):
    """No connection of a client's pool came free within ``pool_timeout_s``: every one was busy
    with other commands. Redis itself may be up; retried like an unreachable Redis (it is a
    redis-py ``ConnectionError``), logged as what it is."""


async def _command(command: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
    try:
        return await command(*args, **kwargs)
    except RedisConnectionError as error:
        # redis-py's BlockingConnectionPool says a wait for a free connection that timed out as
        # ConnectionError("No connection available.") from a TimeoutError: name it
        if isinstance(error.__cause__, TimeoutError) and not isinstance(error, PoolTimeoutError):
            pool = getattr(getattr(command, "__self__", None), "connection_pool", None)
            size = getattr(pool, "max_connections", None)
            wait = getattr(pool, "timeout", None)
            raise PoolTimeoutError(
                f"no pooled Redis connection came free within pool_timeout_s={wait:g} s: all {size} were busy "
                f"(Redis answers; raise pool_size or lower the load)" if size is not None and wait is not None
                else "no pooled Redis connection came free within pool_timeout_s") from error
        raise


async def call(command: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
    """Await ``command(*args, **kwargs)`` in a task of its own, through ``asyncio.shield``.

    If the caller is cancelled the command still runs to its reply, so its connection goes back
    to the pool clean (never a reply left unread for the next caller: CVE-2023-28858/28859).
    A wait for a pooled connection that timed out raises :class:`PoolTimeoutError`.
    """
    task: asyncio.Task[T] = asyncio.ensure_future(_command(command, *args, **kwargs))
    _IN_FLIGHT.add(task)
    task.add_done_callback(_finished)
    return await asyncio.shield(task)


def _finished(task: asyncio.Task[Any]) -> None:
    _IN_FLIGHT.discard(task)
    if not task.cancelled():
        task.exception()  # retrieved: a caller that left does not cause "never retrieved" warnings


async def settle() -> None:
    """Wait until the commands :func:`call` started so far have finished (before closing a client;
    the caller stopped its own loops first, so no new command of its own starts meanwhile)."""
    if _IN_FLIGHT:
        await asyncio.gather(*list(_IN_FLIGHT), return_exceptions=True)
