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
import os
import random
import socket
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Mapping, TypeVar

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from ..logs import public_url
from ..settings import Schema, check_fields, schema_of, setting

__all__ = ["RedisSettings", "REDIS_SETTINGS", "redis_settings", "Backoff", "call", "make_client", "default_consumer",
           "public_url"]

T = TypeVar("T")


def default_consumer() -> str:
    """``<hostname>-<pid>``: unique per worker process, stable for its lifetime."""
    return f"{socket.gethostname()}-{os.getpid()}"


def _redis_url(value: object) -> str:
    if not isinstance(value, str) or not value.startswith(("redis://", "rediss://", "unix://")):
        raise ValueError("not a Redis URL")
    return value


@dataclass(frozen=True)
class RedisSettings:
    """Settings shared by the gateway side (:class:`~rxpipe.redis.RedisSink`) and the worker side
    (:class:`~rxpipe.redis.RedisGroupSource`) of the Redis Streams transport (DESIGN §8).

    url: ``redis://host:port/db`` (redis-py's URL syntax; ``rediss://`` for TLS).
    stream: the request stream's key. group: the consumer group of the workers.
    consumer: this worker's consumer name in the group (default ``<host>-<pid>``).
    max_backlog: entries (requests) admitted and not yet acknowledged, at most; the gateway
        refuses (429) beyond it.
    visibility_timeout_s: an entry delivered to a consumer and idle (not acknowledged, not
        refreshed) this long is claimed by another worker (``XAUTOCLAIM`` min-idle-time). A worker
        refreshes its own in-flight entries every third of it, so only a dead worker's are taken.
    block_ms: ``BLOCK`` of every blocking read (ms); default ``min(1000, visibility_timeout_s / 4)``.
    pool_size: connections of the command pool per process (the blocking reader has its own).
    pool_timeout_s: how long a command waits for a free pooled connection (then ``ConnectionError``).
    connect_timeout_s / command_timeout_s: socket connect and read timeouts (s) of commands.
    refresh_interval_s: the gateway re-reads the backlog (``XINFO GROUPS``) this often (s); in
        between it counts its own admissions, so several gateways keep the bound within one
        interval.
    backoff_base_s / backoff_cap_s: retries after a Redis error wait ``uniform(0, min(cap,
        base * 2**attempt))`` (full jitter).
    reply_ttl_s: a gateway's reply stream expires this long (s) after the gateway was last seen.
    trim_interval_s: a worker trims acknowledged entries off the stream this often (s).
    max_deliveries: an entry claimed after this many deliveries (it took down or outlived that
        many workers: a poison request) is answered with an error and acknowledged, not run again.
    """

    url: str = setting("redis://127.0.0.1:6379/0", "URL", "the Redis server (redis://, rediss:// or unix://)",
                       parse=_redis_url, expected="a redis:// (or rediss://, unix://) URL")
    stream: str = setting("rxpipe:requests", "str", "the request stream's key", allow_empty=False)
    group: str = setting("workers", "str", "the workers' consumer group", allow_empty=False)
    consumer: str = setting(type="str", doc="this worker's name in the group", default_factory=default_consumer,
                            allow_empty=False, default_text="<host>-<pid>")
    max_backlog: int = setting(1000, "int", "requests on the stream not yet acknowledged, at most (more get 429)",
                               minimum=1)
    visibility_timeout_s: float = setting(30.0, "number", "a request idle this long on a worker that stopped is run "
                                                          "elsewhere (s)", minimum=0, exclusive_minimum=True)
    block_ms: int | None = setting(None, "int", "BLOCK of every blocking read (ms); null: min(1000, "
                                                "visibility_timeout_s / 4)", minimum=1, nullable=True)
    pool_size: int = setting(8, "int", "connections of the command pool per process", minimum=1)
    pool_timeout_s: float = setting(5.0, "number", "how long a command waits for a pooled connection (s)",
                                    minimum=0, exclusive_minimum=True)
    connect_timeout_s: float = setting(2.0, "number", "socket connect timeout of commands (s)", minimum=0,
                                       exclusive_minimum=True)
    command_timeout_s: float = setting(5.0, "number", "socket read timeout of commands (s)", minimum=0,
                                       exclusive_minimum=True)
    refresh_interval_s: float = setting(0.25, "number", "how often a gateway re-reads the backlog from Redis (s)",
                                        minimum=0, exclusive_minimum=True)
    backoff_base_s: float = setting(0.05, "number", "first retry delay after a Redis error (s; doubles, full jitter)",
                                    minimum=0, exclusive_minimum=True)
    backoff_cap_s: float = setting(2.0, "number", "longest retry delay after Redis errors (s)", minimum=0,
                                   exclusive_minimum=True)
    reply_ttl_s: float = setting(60.0, "number", "a gateway's reply stream expires this long after it was last seen "
                                                 "(s)", minimum=0, exclusive_minimum=True)
    trim_interval_s: float = setting(1.0, "number", "how often a worker trims acknowledged entries (s)", minimum=0,
                                     exclusive_minimum=True)
    max_deliveries: int = setting(5, "int", "a request delivered more often than this fails (a poison request)",
                                  minimum=1)

    def __post_init__(self) -> None:
        check_fields(self)

    @property
    def block(self) -> int:
        """``BLOCK`` of the blocking reads, in ms."""
        if self.block_ms is not None:
            return self.block_ms
        return max(1, min(1000, int(self.visibility_timeout_s * 1000 / 4)))

    @property
    def visibility_ms(self) -> int:
        return max(1, int(self.visibility_timeout_s * 1000))


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


class Backoff:
    """Exponential backoff with full jitter (AWS Architecture Blog, "Exponential Backoff And
    Jitter"): the n-th consecutive failure waits ``uniform(0, min(cap_s, base_s * 2**n))`` s."""

    __slots__ = ("base_s", "cap_s", "failures", "_rng")

    def __init__(self, base_s: float, cap_s: float, rng: random.Random | None = None) -> None:
        self.base_s = base_s
        self.cap_s = cap_s
        self.failures = 0
        self._rng = rng or random.Random()

    def next_delay(self) -> float:
        """Record a failure; return the seconds to wait before the next attempt."""
        bound = min(self.cap_s, self.base_s * 2.0 ** min(self.failures, 30))
        self.failures += 1
        return self._rng.uniform(0.0, bound)

    def reset(self) -> None:
        self.failures = 0


#: commands in flight: kept referenced until they finish, even when their caller was cancelled
_IN_FLIGHT: set[asyncio.Task[Any]] = set()


async def call(command: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
    """Await ``command(*args, **kwargs)`` in a task of its own, through ``asyncio.shield``.

    If the caller is cancelled the command still runs to its reply, so its connection goes back
    to the pool clean (never a reply left unread for the next caller: CVE-2023-28858/28859).
    """
    task: asyncio.Task[T] = asyncio.ensure_future(command(*args, **kwargs))
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
