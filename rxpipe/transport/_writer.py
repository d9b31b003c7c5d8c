"""One writer task per process side: queued broker writes sent in batches, in order.

Callers enqueue synchronously (from Reactive Streams signals, which are plain ``def``); the task
hands up to ``batch`` operations at a time to the adapter's ``write`` (one Redis pipeline, one
burst of NATS publishes), so order is kept: a reply's last message is written before the ack of
its request, which therefore happens only after processing.

On a connection error the whole batch either waits and is sent again with backoff (``retry=True``,
the worker: every reply and ack must land, duplicates are removed by the gateway) or fails at once
(``retry=False``, the gateway: its clients get 503 instead of waiting for the broker). The writer
reports reachability to its owner (``on_down`` / ``on_up``), which says "lost" and "is back" once
per outage; each retry is logged at DEBUG only.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Any, Callable

from ._backoff import Backoff
from ._interface import WriteOp, _Broker

__all__ = ["Writer"]

log = logging.getLogger("rxpipe.transport")

Done = Callable[[Any], None]


class Writer:
    """Ordered, batched writes of one process side through ``broker.write``.

    ``done(result)`` callbacks get the operation's result, or the exception that failed it (a
    refused operation, or with ``retry=False`` the connection error). ``on_down(error)`` /
    ``on_up()`` report reachability changes seen by the writer.
    """

    def __init__(self, broker: _Broker, backoff: Backoff, *, retry: bool, batch: int = 128,
                 on_down: Callable[[BaseException], None] | None = None,
                 on_up: Callable[[], None] | None = None) -> None:
        self.broker = broker
        self.backoff = backoff
        self.retry = retry
        self.batch = batch
        self.on_down = on_down
        self.on_up = on_up
        self.queue: deque[WriteOp] = deque()
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._abandon = False

    def __len__(self) -> int:
        return len(self.queue)

    def start(self) -> None:
        self._wake = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="rxpipe-transport-writer")

    def put(self, kind: str, *args: Any, done: Done | None = None) -> None:
        """Queue one write; an argument given as a function is called when the write is sent."""
        self.queue.append(WriteOp(kind, args, done))
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
                        log.exception("transport writer: a completion callback raised")

    async def _send(self, batch: list[WriteOp]) -> list[Any]:
        for op in batch:
            if any(callable(arg) for arg in op.args):
                op.args = tuple(arg() if callable(arg) else arg for arg in op.args)
        while True:
            try:
                results = await self.broker.write(batch)
            except self.broker.transient as error:
                if self.on_down is not None:
                    self.on_down(error)
                if not self.retry or self._abandon:
                    return [error] * len(batch)
                delay = self.backoff.next_delay()
                log.debug("transport writer: %s unreachable (%r); retrying %d writes in %.2f s", self.broker.name,
                          error, len(batch), delay)
                await asyncio.sleep(delay)
                continue
            except Exception as error:
                return [error] * len(batch)
            self.backoff.reset()
            if self.on_up is not None:
                self.on_up()
            return results
