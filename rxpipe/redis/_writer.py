"""One writer task per process side: queued ``XADD``/``XACK`` commands sent in pipelines, in order.

Callers enqueue synchronously (from Reactive Streams signals, which are plain ``def``); the task
sends up to ``batch`` commands per round trip (``pipeline(transaction=False)``) through
:func:`~rxpipe.redis._connection.call`, so no command is ever cancelled half-way. Order is kept:
a reply's ``done`` message is written before the ``XACK`` of its request, which therefore happens
only after processing.

On a connection error the whole batch either waits and is sent again with backoff (``retry=True``,
the worker: every reply and ack must land, duplicates are removed by the gateway) or fails at once
(``retry=False``, the gateway: its clients get 503 instead of waiting for Redis).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Any, Callable

from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ._connection import Backoff, call, settle

__all__ = ["Writer", "TRANSIENT"]

log = logging.getLogger("rxpipe.redis")

#: errors that mean "Redis is unreachable now" (retryable), as opposed to a refused command
TRANSIENT: tuple[type[BaseException], ...] = (RedisConnectionError, RedisTimeoutError, OSError)

Done = Callable[[Any], None]


class _Op:
    __slots__ = ("kind", "args", "kwargs", "done")

    def __init__(self, kind: str, args: tuple[Any, ...], kwargs: dict[str, Any], done: Done | None) -> None:
        self.kind = kind
        self.args = args
        self.kwargs = kwargs
        self.done = done


class Writer:
    """Ordered, pipelined writes of one process side.

    ``done(result)`` callbacks get the command's reply, or the exception that failed it (a
    ``ResponseError``, or with ``retry=False`` the connection error). ``on_down(error)`` /
    ``on_up()`` report reachability changes seen by the writer.
    """

    def __init__(self, client: Redis, backoff: Backoff, *, retry: bool, batch: int = 128,
                 on_down: Callable[[BaseException], None] | None = None,
                 on_up: Callable[[], None] | None = None) -> None:
        self.client = client
        self.backoff = backoff
        self.retry = retry
        self.batch = batch
        self.on_down = on_down
        self.on_up = on_up
        self.queue: deque[_Op] = deque()
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._abandon = False

    def __len__(self) -> int:
        return len(self.queue)

    def start(self) -> None:
        self._wake = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="rxpipe-redis-writer")

    def xadd(self, key: str, fields: dict[bytes, bytes], done: Done | None = None, **kwargs: Any) -> None:
        self._put(_Op("xadd", (key, fields), kwargs, done))

    def xack(self, key: str, group: str, entry_id: bytes, done: Done | None = None) -> None:
        self._put(_Op("xack", (key, group, entry_id), {}, done))

    def _put(self, op: _Op) -> None:
        self.queue.append(op)
        if self._wake is not None:
            self._wake.set()

    async def close(self, timeout_s: float) -> None:
        """Send what is queued (within ``timeout_s``; then fail the rest), then stop the task."""
        self._closing = True
        task = self._task
        if task is None:
            return
        assert self._wake is not None
        self._wake.set()
        done, _ = await asyncio.wait({task}, timeout=timeout_s)
        if not done:
            self._abandon = True
            self._wake.set()
            await task

    async def _run(self) -> None:
        wake = self._wake
        assert wake is not None
        while True:
            if not self.queue:
                if self._closing:
                    return
                wake.clear()
                await wake.wait()
                continue
            batch = [self.queue.popleft() for _ in range(min(self.batch, len(self.queue)))]
            results = await self._send(batch)
            for op, result in zip(batch, results, strict=True):
                if op.done is not None:
                    try:
                        op.done(result)
                    except Exception:
                        log.exception("redis writer: a completion callback raised")

    async def _send(self, batch: list[_Op]) -> list[Any]:
        while True:
            pipe = self.client.pipeline(transaction=False)
            for op in batch:
                getattr(pipe, op.kind)(*op.args, **op.kwargs)
            try:
                results: list[Any] = await call(pipe.execute, raise_on_error=False)
            except TRANSIENT as error:
                if self.on_down is not None:
                    self.on_down(error)
                if not self.retry or self._abandon:
                    return [error] * len(batch)
                delay = self.backoff.next_delay()
                level = logging.WARNING if self.backoff.failures == 1 else logging.DEBUG  # once per outage
                log.log(level, "redis writer: Redis lost (%r); retrying %d commands in %.2f s", error, len(batch),
                        delay)
                await asyncio.sleep(delay)
                continue
            except RedisError as error:
                return [error] * len(batch)
            if self.backoff.failures:
                log.info("redis writer: Redis is back after %d failed attempts", self.backoff.failures)
            self.backoff.reset()
            if self.on_up is not None:
                self.on_up()
            return results


async def leave_and_close(commands: Redis | None, reader: Redis | None, registry_key: str, member: str) -> None:
    """The end of a gateway's or worker's life in Redis: remove ``member`` from the liveness hash
    ``registry_key`` (best effort: Redis may be down), let every command in flight finish
    (:func:`~rxpipe.redis._connection.settle`), then close both clients."""
    if commands is not None:
        try:
            await call(commands.hdel, registry_key, member)
        except TRANSIENT:
            pass
    await settle()
    for client in (reader, commands):
        if client is not None:
            await client.aclose()
