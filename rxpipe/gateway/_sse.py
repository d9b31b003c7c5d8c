"""Server-sent events toward one client: the token writer with credit, and the stream's helpers."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import orjson
from aiohttp import web

from .._protocol import Subscription
from ..stage import InternalSubscriber
from ._openai import SSE_DONE, error_body, sse

__all__ = ["EventWriter", "bound_socket_buffers", "stream_error"]


class EventWriter(InternalSubscriber):
    """The token consumer of one SSE stream: writes each chunk as one whole event straight to
    the socket from inside ``on_next`` (no task wake, no future per token) while the connection
    is live and under its write-buffer high-water mark, and only then gives the chunk of credit
    back; otherwise it queues the event in ``pending`` and wakes the handler task, which writes
    the queue in one write and grants as much. Invariant: chunks received but not yet written
    and granted back never exceed ``window`` (the credit asked at subscribe), so what is
    outstanding upstream plus ``pending`` stays within ``stream_window``. The writes made here
    bypass aiohttp's payload writer, so its byte counters (``body_length``, access-log sizes)
    do not include them; the edge runs without an access log."""

    __slots__ = ("loop", "window", "subscription", "pending", "prefix", "suffix", "transport", "protocol", "live",
                 "done", "broken", "error", "waiter")

    def __init__(self, loop: asyncio.AbstractEventLoop, window: int, prefix: bytes, suffix: bytes) -> None:
        self.loop = loop
        self.window = window
        self.subscription: Subscription | None = None
        self.pending: list[bytes] = []
        #: the token event's template (:func:`token_event_template`)
        self.prefix, self.suffix = prefix, suffix
        self.transport: asyncio.Transport | None = None
        self.protocol: Any = None
        #: True while on_next may write to the socket itself (this task is waiting, not writing)
        self.live = False
        self.done = False
        self.broken = False
        self.error: BaseException | None = None
        self.waiter: asyncio.Future[None] | None = None

    def go_live(self, response: web.StreamResponse, request: web.Request) -> None:
        """Let ``on_next`` write itself: only on a plain chunked HTTP/1.1 body (anything else,
        e.g. compression, keeps every write in aiohttp's hands)."""
        if (self.transport is None and response.headers.get("Transfer-Encoding") == "chunked"
                and not response.compression):
            self.transport = request.transport  # type: ignore[assignment]
            self.protocol = request.protocol
        self.live = self.transport is not None

    def on_subscribe(self, subscription: Subscription) -> None:
        self.subscription = subscription
        subscription.request(self.window)

    def on_next(self, chunk: Any) -> None:
        event = self.prefix + orjson.dumps(chunk.text) + self.suffix
        transport = self.transport
        if self.live and transport is not None and not self.protocol.writing_paused:
            if transport.is_closing():
                self.broken = True
                self._wake()
                return
            # one HTTP chunk (aiohttp's chunked framing) per event: never a split event
            transport.write(b"%x\r\n%b\r\n" % (len(event), event))
            self.subscription.request(1)  # type: ignore[union-attr]  # the socket took it
            if self.protocol.writing_paused:
                self.live = False  # over the high-water mark: writes go through the handler's
            return
        else:
            self.pending.append(event)
        self._wake()

    def on_error(self, error: BaseException) -> None:
        self.error = error
        self.done = True
        self._wake()

    def on_complete(self) -> None:
        self.done = True
        self._wake()

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None:
            self.waiter = None
            if not waiter.done():
                waiter.set_result(None)

    async def wait(self) -> None:
        """Until a chunk is pending, the stream ended or the connection broke."""
        self.waiter = waiter = self.loop.create_future()
        try:
            await waiter
        finally:
            self.waiter = None
            self.live = False

    def grant(self, n: int) -> None:
        if not self.done and self.subscription is not None:
            self.subscription.request(n)

    def cancel(self) -> None:
        """End the stream from this side (the handler is done with it): cancel the subscription
        unless it ended, and let go of it (no writer <-> subscription cycle outlives the answer)."""
        self.live = False
        subscription, self.subscription = self.subscription, None
        if subscription is not None and not self.done:
            self.done = True
            subscription.cancel()
        self.transport = self.protocol = None


def bound_socket_buffers(request: web.Request, limit: int) -> None:
    """Keep a slow SSE reader's backlog small: the transport pauses (and our writes wait) once
    ``limit`` bytes are pending, and the kernel send buffer is capped likewise."""
    transport = request.transport
    if transport is None:
        return
    transport.set_write_buffer_limits(high=limit)
    sock = transport.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, limit)
        except OSError:  # not every transport exposes a real socket
            pass


async def stream_error(response: web.StreamResponse, message: str, type: str, code: str) -> None:
    """End an SSE stream with an error event and ``[DONE]`` (as vLLM does), if the client is there."""
    try:
        await response.write(sse(error_body(message, type, code)))
        await response.write(SSE_DONE)
        await response.write_eof()
    except ConnectionError:
        pass
