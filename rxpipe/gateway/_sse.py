"""Server-sent events toward one client: the streamed answer, its token writer with credit, and the
stream's helpers."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

from .._protocol import Subscription
from ..errors import BackendError, EngineError, EngineUnavailableError
from ..serving import UNANSWERED_REASONS, Completion, CompletionRequest, CompletionResult, TokenChunk
from ..stage import InternalSubscriber
from ._openai import (
    SSE_DONE,
    chunk_body,
    error_body,
    now_created,
    responses_error_event,
    responses_event,
    sse,
    token_event_template,
)
from ._responses import RESULT, answer_headers, observe_ttft, result_of

if TYPE_CHECKING:
    from ._edge import Edge

__all__ = ["EventWriter", "bound_socket_buffers", "stream_error", "stream_answer"]

log = logging.getLogger("rxpipe.gateway")


class EventWriter(InternalSubscriber):
    """The token consumer of one SSE stream: while the connection is live and under its
    write-buffer high-water mark, ``on_next`` frames each chunk as one whole event (one HTTP
    chunk) into ``batch`` and gives the chunk of credit back at once (no task wake, no future per
    token); the batch goes to the socket in one ``transport.write`` at the end of the loop step
    that filled it (``loop.call_soon``), or at once when it and the transport's buffer reach
    ``flush_bytes`` (the connection's write high-water mark, ``stream_buffer_bytes``): the chunks
    one read from the backend carried cost one send, not one per token (as a router forwarding
    the bytes it read). Otherwise it queues the event in ``pending`` and wakes the handler task,
    which writes the queue in one write and grants as much; a batch is always written before
    the handler writes (``wait`` flushes it), so events keep their order. Invariant: chunks
    received but neither in the transport, nor in the batch (at most ``flush_bytes``, written
    within this loop step), nor granted back never exceed ``window`` (the credit asked at
    subscribe), so what is outstanding upstream plus ``pending`` stays within
    ``stream_window``. The writes made here bypass aiohttp's payload writer, so its byte
    counters (``body_length``, access-log sizes) do not include them; the edge runs without an
    access log.

    A chunk with more than text (a ``delta`` or ``logprobs``: a tool-call fragment, a Responses
    event) is one event too, made by ``frame(chunk)`` (the whole SSE event's bytes), under the
    same credit; ``structured`` counts them."""

    __slots__ = ("loop", "window", "subscription", "pending", "prefix", "suffix", "fixed_bytes", "transport",
                 "protocol", "live", "done", "broken", "error", "waiter", "batch", "batch_bytes", "flush_bytes",
                 "flush_handle", "frame", "structured")

    def __init__(self, loop: asyncio.AbstractEventLoop, window: int, prefix: bytes, suffix: bytes,
                 flush_bytes: int = 16384, frame: Callable[[TokenChunk], bytes] | None = None) -> None:
        if flush_bytes < 1:
            raise ValueError(f"flush_bytes must be >= 1, not {flush_bytes!r}")
        self.loop = loop
        self.frame = frame
        self.structured = 0
        self.window = window
        #: framed events written to the socket by :meth:`flush` (one write), ``batch_bytes`` long
        self.batch: list[bytes] = []
        self.batch_bytes = 0
        #: a batch that brings the transport's buffer to this many bytes is written at once
        self.flush_bytes = flush_bytes
        self.flush_handle: asyncio.Handle | None = None
        self.subscription: Subscription | None = None
        self.pending: list[bytes] = []
        #: the token event's template (:func:`token_event_template`)
        self.prefix, self.suffix = prefix, suffix
        #: bytes of an event besides its text's JSON string
        self.fixed_bytes = len(prefix) + len(suffix)
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
        if chunk.delta is not None or chunk.logprobs is not None:
            self._on_structured(chunk)
            return
        text = orjson.dumps(chunk.text)
        transport = self.transport
        if self.live and transport is not None and not self.protocol.writing_paused:
            if transport.is_closing():
                self.broken = True
                self._wake()
                return
            # one HTTP chunk (aiohttp's chunked framing) per event: never a split event
            framed = b"%x\r\n%b%b%b\r\n" % (self.fixed_bytes + len(text), self.prefix, text, self.suffix)
            self.batch.append(framed)
            self.batch_bytes += len(framed)
            if self.batch_bytes + transport.get_write_buffer_size() >= self.flush_bytes:
                self.flush()  # what waits in the transport stays within flush_bytes plus one event
            elif self.flush_handle is None:
                self.flush_handle = self.loop.call_soon(self.flush)
            self.subscription.request(1)  # type: ignore[union-attr]  # the transport (or this step's batch) took it
            return
        else:
            self.pending.append(self.prefix + text + self.suffix)
        self._wake()

    def _on_structured(self, chunk: TokenChunk) -> None:
        """A chunk with more than text: its event from ``frame``, written or queued as a token's."""
        # The write below repeats on_next's rather than sharing a helper: on_next is the per-token
        # path of every plain stream and takes no extra call for it.
        self.structured += 1
        if self.frame is None:
            raise TypeError("EventWriter got a chunk with a delta or logprobs and has no frame for it")
        event = self.frame(chunk)
        transport = self.transport
        if self.live and transport is not None and not self.protocol.writing_paused:
            if transport.is_closing():
                self.broken = True
                self._wake()
                return
            framed = b"%x\r\n%b\r\n" % (len(event), event)
            self.batch.append(framed)
            self.batch_bytes += len(framed)
            if self.batch_bytes + transport.get_write_buffer_size() >= self.flush_bytes:
                self.flush()
            elif self.flush_handle is None:
                self.flush_handle = self.loop.call_soon(self.flush)
            self.subscription.request(1)  # type: ignore[union-attr]
            return
        self.pending.append(event)
        self._wake()

    def flush(self) -> None:
        """Write the batch to the socket in one write (from ``call_soon``, ``wait`` or a full
        batch); a closing connection drops it and wakes the handler (``broken``)."""
        handle, self.flush_handle = self.flush_handle, None
        if handle is not None:
            handle.cancel()  # a no-op when this is that call
        if not self.batch:
            return
        data = self.batch[0] if len(self.batch) == 1 else b"".join(self.batch)
        self.batch.clear()
        self.batch_bytes = 0
        transport = self.transport
        if transport is None:
            return  # the handler let go of the stream (cancel): nobody reads it any more
        if transport.is_closing():
            self.broken = True
            self._wake()
            return
        transport.write(data)
        if self.protocol.writing_paused:
            self.live = False  # over the high-water mark: writes go through the handler's

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
            self.flush()  # before any write of the handler's: events keep their order
            self.live = False

    def grant(self, n: int) -> None:
        if not self.done and self.subscription is not None:
            self.subscription.request(n)

    def cancel(self) -> None:
        """End the stream from this side (the handler is done with it): cancel the subscription
        unless it ended, and let go of it (no writer <-> subscription cycle outlives the answer)."""
        self.live = False
        if self.flush_handle is not None:
            self.flush_handle.cancel()
            self.flush_handle = None
        self.batch.clear()
        self.batch_bytes = 0
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


async def stream_error(response: web.StreamResponse, message: str, type: str, code: str,
                       responses: int | None = None) -> None:
    """End an SSE stream with an error event and ``[DONE]`` (as vLLM does), if the client is there;
    a Responses stream (``responses``: the events sent) with its ``error`` event instead."""
    try:
        if responses is not None:
            await response.write(responses_error_event(message, code, responses))
        else:
            await response.write(sse(error_body(message, type, code)))
            await response.write(SSE_DONE)
        await response.write_eof()
    except ConnectionError:
        pass


async def stream_answer(edge: Edge, loop: asyncio.AbstractEventLoop, request: web.Request, item: CompletionRequest,
                        completion: Completion, *, chat: bool,
                        failed: Callable[[CompletionRequest, EngineError], web.Response],
                        unanswered: Callable[[CompletionRequest, str], web.Response],
                        responses: bool = False) -> web.StreamResponse:
    """The SSE answer to a streamed request the engine took (OpenAI's ``chat.completion.chunk``
    events, then ``data: [DONE]``; with ``responses``, the backend's Responses events as it sent
    them, in order, each ``event:`` and ``data:``), with credit toward the reader: the token
    stream is requested only as events leave for the socket (at most ``stream_window`` chunks
    ahead, and ``stream_buffer_bytes`` in the socket's buffers), so a slow reader stalls its own
    sequence, never the engine. Each chunk is one event: a tool-call fragment or a delta of
    reasoning is one, as the backend sent it. The status line waits for the first chunk (or the
    end): an engine error before it is answered by ``failed`` with its own status, an end
    without an answer before it (one of ``UNANSWERED_REASONS``: past its deadline in a worker's
    queue, say) by ``unanswered`` (429 ``deadline``, 503), never as a 200 with an empty "stop";
    after it, as an error event. A reader that goes away cancels the completion (its slot is
    freed)."""
    response = web.StreamResponse(status=200, headers={
        "Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    # Subscribe before the first await, so the sequence has its credit for the first step.
    created = now_created()
    limit = edge.config.stream_buffer_bytes

    def frame(chunk: TokenChunk) -> bytes:
        if responses:
            return responses_event(chunk.delta or {})
        return sse(chunk_body(item, chat=chat, created=created, text=chunk.text, delta=chunk.delta,
                              logprobs=chunk.logprobs))

    writer = EventWriter(loop, edge.config.stream_window,
                          *token_event_template(item, chat=chat, created=created),
                          flush_bytes=limit, frame=frame)
    completion.tokens.subscribe(writer)
    result_future = completion.result
    transport = request.transport

    def abort_if_stalled(future: asyncio.Future[CompletionResult]) -> None:
        # A reader that stopped reading leaves our write blocked: once the engine gave up on
        # the sequence, close the connection instead of waiting for the socket forever.
        if not future.cancelled() and future.exception() is None and future.result().finish_reason == "stalled":
            if transport is not None:
                transport.abort()

    result_future.add_done_callback(abort_if_stalled)
    try:
        # The status line waits for the first token (or the end): a backend that refuses the
        # request (its 4xx, a 503) gets its own status to the client, not a 200 then an error event.
        while not writer.pending and not writer.done:
            await writer.wait()
        if not writer.pending:
            if isinstance(writer.error, EngineError):
                return failed(item, writer.error)
            if completion.finish_reason in UNANSWERED_REASONS:
                return unanswered(item, completion.finish_reason)
        bound_socket_buffers(request, limit)
        answer_headers(request, response, edge)
        await response.prepare(request)
        try:
            if chat and not responses:
                await response.write(sse(chunk_body(item, chat=True, created=created, text="", role=True)))
            pending = writer.pending
            while True:
                if pending:
                    # What arrived while the writer could not write itself (before this point,
                    # during this task's own write, or while the socket is over its high-water
                    # mark): the socket first — a paused transport is waited for before anything
                    # more is written to it (aiohttp drains only past 64 KiB of its own) — then
                    # one write of the whole events that fit under stream_buffer_bytes (at least
                    # one), and as much credit back. The rest stays here, within the credit
                    # window: a slow reader's socket holds at most stream_buffer_bytes plus one
                    # event, and the gateway at most one credit window more.
                    protocol = request.protocol
                    if protocol is not None and protocol.writing_paused:
                        await protocol._drain_helper()
                    transport = request.transport
                    room = limit - (transport.get_write_buffer_size() if transport is not None else 0)
                    n, size = 1, len(pending[0])
                    while n < len(pending) and size + len(pending[n]) <= room:
                        size += len(pending[n])
                        n += 1
                    data = pending[0] if n == 1 else b"".join(pending[:n])
                    del pending[:n]
                    await response.write(data)
                    writer.grant(n)
                    continue
                if writer.broken:
                    raise ConnectionResetError("the client connection closed mid-stream")
                if writer.done:
                    break
                writer.go_live(response, request)
                await writer.wait()
            if writer.error is not None:
                raise writer.error
            result = await result_of(completion)
        except EngineError as error:
            # The status line is sent: the failure goes in the stream, as an error event
            # (its detail only in the log: it may name the backend).
            log.warning("request %s failed in the engine mid-stream: %r", item.id, error)
            sent = writer.structured if responses else None
            if isinstance(error, BackendError):
                await stream_error(response, error.client_message, error.type, error.code or "backend_error", sent)
            else:
                unavailable = isinstance(error, EngineUnavailableError)
                await stream_error(response, "the model backend is unavailable" if unavailable
                                   else "the model backend failed the request", "server_error",
                                   "unavailable" if unavailable else "engine_error", sent)
            return response
        request[RESULT] = result
        if result.finish_reason in UNANSWERED_REASONS:  # after the status line: an error event
            reason = "draining" if edge.draining else "unavailable"
            await stream_error(response, "the request was cancelled by the server" if result.finish_reason
                               == "cancelled" else f"the request ended {result.finish_reason} on the server",
                               "overloaded_error", reason, writer.structured if responses else None)
            return response
        observe_ttft(result)
        edge.policy.meter.record_service(result.e2e_s - result.queue_time_s)
        if responses:  # the backend's own events said it all, its last one included
            await response.write_eof()
            return response
        # the final chunk, the usage chunk and [DONE] end the stream in one write
        tail = sse(chunk_body(item, chat=chat, created=created, result=result))
        if item.sampling.get("include_usage"):
            tail += sse(chunk_body(item, chat=chat, created=created, result=result, usage_only=True))
        await response.write_eof(tail + SSE_DONE)
    except (ConnectionResetError, ConnectionError):
        completion.cancel()  # the client went away mid-stream: free the slot
    finally:
        writer.cancel()
        result_future.remove_done_callback(abort_if_stalled)
    return response
