"""The edge's book of admitted requests whose answer is not finished yet: what a drain waits for,
and what a stopped graph must still answer (DESIGN §5)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

from ..serving import CompletionRequest

__all__ = ["InFlight"]


class InFlight:
    """Admitted requests whose handler is still answering, with a wait for "none left"."""

    __slots__ = ("pending", "_idle")

    def __init__(self) -> None:
        self.pending: set[CompletionRequest] = set()
        self._idle: asyncio.Event | None = None

    def __len__(self) -> int:
        return len(self.pending)

    def __iter__(self) -> Iterator[CompletionRequest]:
        return iter(list(self.pending))

    def add(self, request: CompletionRequest) -> None:
        self.pending.add(request)

    def discard(self, request: CompletionRequest) -> None:
        """``request``'s answer is over; the last one out wakes :meth:`wait_idle`."""
        self.pending.discard(request)
        if not self.pending and self._idle is not None:
            self._idle.set()

    def fail_unstarted(self, error: BaseException) -> None:
        """Set ``error`` on the reply of every request that has not started (their handlers answer
        at once)."""
        for request in list(self.pending):
            reply = request.reply
            if reply is not None and not reply.done():
                reply.set_exception(error)

    async def wait_idle(self, timeout_s: float, abort: asyncio.Event | None = None) -> bool:
        """Wait until no request is in flight, at most ``timeout_s`` seconds or until ``abort`` is
        set. Returns True when none is left."""
        if not self.pending:
            return True
        if self._idle is None or self._idle.is_set():
            self._idle = asyncio.Event()
        waiters = {asyncio.ensure_future(self._idle.wait())}
        if abort is not None:
            waiters.add(asyncio.ensure_future(abort.wait()))
        await asyncio.wait(waiters, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        for waiter in waiters:
            waiter.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)
        return not self.pending
