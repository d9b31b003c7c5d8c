"""The worker's end of the reply streams: a request's fate becomes messages, then its ack.

For each :class:`~rxpipe.redis.RemoteRequest` the worker's ``execute`` stage resolves ``reply``:

- with a Completion: ``start`` is sent; a streaming request's token stream is consumed with
  unbounded credit (so chunk ``i`` is the engine's i-th push on every attempt, which is what the
  gateway de-duplicates by) and each chunk sent; then ``done`` with the result, then ``XACK``;
- with ``EngineUnavailableError`` or a shed (``DroppedError``): the entry is run again here later
  (requeued; at most ``max_attempts`` runs, then an ``error`` message and ``XACK``);
- with another error (the engine refused the request): an ``error`` message, then ``XACK``.

A completion that ends ``"cancelled"`` was stopped by this worker (it is shutting down): the entry
is released without ``XACK`` and another worker runs it. Callbacks only; no task per request.
"""

from __future__ import annotations

import asyncio
import logging

from .._protocol import UNBOUNDED, Subscription
from ..engines import Completion, CompletionResult, TokenChunk
from ..errors import BackendError, DroppedError, EngineError, EngineUnavailableError
from ..stage import InternalSubscriber
from ._ack import AckHandle, RemoteRequest
from ._codec import chunk_message, done_message, error_message, start_message
from ._writer import Writer

__all__ = ["ReplyPublisher"]

log = logging.getLogger("rxpipe.redis")


class _ChunkForwarder(InternalSubscriber):
    """Unbounded credit on one completion's token stream; each chunk goes to the writer."""

    __slots__ = ("publisher", "request")

    def __init__(self, publisher: ReplyPublisher, request: RemoteRequest) -> None:
        self.publisher = publisher
        self.request = request

    def on_subscribe(self, subscription: Subscription) -> None:
        subscription.request(UNBOUNDED)

    def on_next(self, item: TokenChunk) -> None:
        self.publisher.send(self.request, chunk_message(self.request.id, item))

    def on_error(self, error: BaseException) -> None:
        pass  # the result future carries the error

    def on_complete(self) -> None:
        pass


class ReplyPublisher:
    """Writes replies (``XADD ... NOMKSTREAM`` to each request's ``reply_to``) and acks.

    Counters: ``done`` (results sent), ``errors`` (error messages sent), ``requeued``, ``released``.
    """

    def __init__(self, writer: Writer, *, max_attempts: int = 3) -> None:
        self.writer = writer
        self.max_attempts = max_attempts
        self.done = 0
        self.errors = 0
        self.requeued = 0
        self.released = 0

    def watch(self, request: RemoteRequest) -> None:
        """Serve ``request`` once the executor resolved its ``reply``."""
        reply = request.reply
        assert reply is not None
        reply.add_done_callback(lambda future: self._on_reply(request, future))

    def send(self, request: RemoteRequest, message: dict[bytes, bytes]) -> None:
        # NOMKSTREAM: a gateway whose reply stream expired is gone; its replies are dropped
        self.writer.xadd(request.reply_to, message, nomkstream=True)

    def give_up(self, request_id: str, reply_to: str, deliveries: int) -> None:
        """Tell the gateway a request is not run again (it was delivered ``deliveries`` times)."""
        self.errors += 1
        self.writer.xadd(reply_to, error_message(request_id, f"the request was abandoned after {deliveries} "
                                                              "deliveries to workers", unavailable=False),
                         nomkstream=True)

    # -- outcomes --------------------------------------------------------------------------------
    def _on_reply(self, request: RemoteRequest, future: asyncio.Future[Completion]) -> None:
        handle = request.ack
        assert handle is not None
        if future.cancelled():
            self._release(handle)
            return
        error = future.exception()
        if error is not None:
            self._failed(request, handle, error)
            return
        completion = future.result()
        self.send(request, start_message(request.id))
        if request.stream:
            completion.tokens.subscribe(_ChunkForwarder(self, request))
        completion.result.add_done_callback(lambda result: self._on_result(request, handle, result))

    def _on_result(self, request: RemoteRequest, handle: AckHandle,
                   future: asyncio.Future[CompletionResult]) -> None:
        if future.cancelled():
            self._release(handle)
            return
        error = future.exception()
        if error is not None:
            self._failed(request, handle, error)
            return
        result = future.result()
        if result.finish_reason == "cancelled":
            self._release(handle)
            return
        self.done += 1
        self.send(request, done_message(request.id, result))
        handle.ack()

    def _failed(self, request: RemoteRequest, handle: AckHandle, error: BaseException) -> None:
        retryable = isinstance(error, (EngineUnavailableError, DroppedError))
        if retryable and handle.attempts < self.max_attempts:
            self.requeued += 1
            handle.requeue()
            return
        if not isinstance(error, EngineError):
            log.warning("worker: request %s failed: %r", request.id, error)
        self.errors += 1
        self.send(request, error_message(request.id, str(error) or type(error).__name__,
                                         unavailable=isinstance(error, EngineUnavailableError),
                                         backend=error if isinstance(error, BackendError) else None))
        handle.ack()

    def _release(self, handle: AckHandle) -> None:
        self.released += 1
        handle.release()

