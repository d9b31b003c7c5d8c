"""The worker's end of the reply channel: a request's fate becomes messages, then its ack.

For each :class:`~rxpipe.transport.RemoteRequest` the worker's ``execute`` stage resolves ``reply``:

- with a Completion: ``start`` is sent; a streaming request's token stream is consumed with the
  credit its gateway grants (the first window travels with the request; cumulative credit
  messages raise it), so the engine stops stepping a sequence whose reader stopped reading; each
  chunk is sent with its sequence number; then ``done`` with the result, then the ack;
- with ``EngineUnavailableError`` or a shed (``DroppedError``): the request is run again here
  later (requeued; at most ``max_attempts`` runs, then an ``error`` message and the ack);
- with another error (the engine refused the request): an ``error`` message, then the ack (a
  backend's :class:`~rxpipe.BackendError` with its client's status and message, so the gateway
  answers as the backend meant it).

A request whose client left (a cancel from its gateway) is acknowledged without a reply: its
engine aborted it, or it never started. A completion that ends ``"cancelled"`` otherwise was
stopped by this worker (it is shutting down): the request is released without an ack and another
worker runs it. Each request settled here is counted in ``rxpipe_requests_finished_total`` by
outcome; a cancel's latency (from its gateway to the abort here, on the broker's clock) in
``rxpipe_transport_cancel_seconds``. Callbacks only; no task per request.
"""

from __future__ import annotations

import asyncio
import logging

from .._loop_metrics import LoopCounter, LoopHistogram
from .._protocol import UNBOUNDED, Subscription
from ..errors import BackendError, DroppedError, EngineError, EngineUnavailableError
from ..serving import Completion, CompletionResult, TokenChunk, count_finished
from ..stage import InternalSubscriber
from ._ack import AckHandle, RemoteRequest
from ._clock import BrokerClock
from ._codec import chunk_payload, done_payload, error_payload, start_payload
from ._writer import Writer

__all__ = ["ReplyPublisher", "CANCEL_LATENCY", "CANCELS", "CANCEL_WHERE"]

log = logging.getLogger("rxpipe.transport")

CANCEL_LATENCY = LoopHistogram(
    "rxpipe_transport_cancel_seconds",
    "Time from a client's disconnect at its gateway to the abort of its request held by this worker "
    "(queued here or running in the engine; broker clock), seconds.",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5))
#: where a cancelled request was when its cancel reached this worker
CANCEL_WHERE = ("unread", "queued", "running")
CANCELS = LoopCounter("rxpipe_transport_cancels", "Requests cancelled by their gateway (the client left), by where "
                      "they were on this worker: unread (skipped when read), queued, running.", ["where"])
_cancels = {where: CANCELS.labels(where=where) for where in CANCEL_WHERE}


class _ChunkForwarder(InternalSubscriber):
    """Consumes one completion's token stream with the gateway's credit; each chunk goes to the
    writer with its sequence number (the chunk's index)."""

    __slots__ = ("publisher", "request", "granted", "subscription")

    def __init__(self, publisher: ReplyPublisher, request: RemoteRequest) -> None:
        self.publisher = publisher
        self.request = request
        self.granted = 0
        self.subscription: Subscription | None = None

    def on_subscribe(self, subscription: Subscription) -> None:
        self.subscription = subscription
        initial = self.request.credit
        if initial is None:  # a gateway that grants no credit: the engine's pace
            self.granted = UNBOUNDED
            subscription.request(UNBOUNDED)
        else:
            self.grant(initial)

    def grant(self, cumulative: int) -> None:
        """The gateway's cumulative credit (idempotent: only an increase counts)."""
        if cumulative > self.granted and self.subscription is not None:
            n = cumulative - self.granted
            self.granted = cumulative
            self.subscription.request(n)

    def on_next(self, item: TokenChunk) -> None:
        self.publisher.send(self.request, chunk_payload(self.request.id, item))

    def on_error(self, error: BaseException) -> None:
        self.publisher.forwarders.pop(self.request.id, None)  # the result future carries the error

    def on_complete(self) -> None:
        self.publisher.forwarders.pop(self.request.id, None)


class ReplyPublisher:
    """Writes replies (``("reply", reply_to, payload, terminal)`` writes) and acks.

    Counters: ``done`` (results sent), ``errors`` (error messages sent), ``requeued``,
    ``released``, ``cancelled`` (client gone: acknowledged without a reply).
    """

    def __init__(self, writer: Writer, clock: BrokerClock, *, worker: str = "", max_attempts: int = 3) -> None:
        self.writer = writer
        self.clock = clock
        self.worker = worker
        self.max_attempts = max_attempts
        self.forwarders: dict[str, _ChunkForwarder] = {}
        self.done = 0
        self.errors = 0
        self.requeued = 0
        self.released = 0
        self.cancelled = 0

    def watch(self, request: RemoteRequest) -> None:
        """Serve ``request`` once the executor resolved its ``reply``."""
        reply = request.reply
        assert reply is not None
        reply.add_done_callback(lambda future: self._on_reply(request, future))

    def send(self, request: RemoteRequest, payload: bytes, *, terminal: bool = False) -> None:
        self.writer.put("reply", request.reply_to, payload, terminal)

    def give_up(self, request_id: str, reply_to: str, deliveries: int) -> None:
        """Tell the gateway a request is not run again (it was delivered ``deliveries`` times)."""
        self.errors += 1
        count_finished("error")
        self.writer.put("reply", reply_to, error_payload(request_id, f"the request was abandoned after {deliveries} "
                                                                     "deliveries to workers", unavailable=False), True)

    def credit(self, request_id: str, cumulative: int) -> None:
        forwarder = self.forwarders.get(request_id)
        if forwarder is not None:
            forwarder.grant(cumulative)

    # -- outcomes --------------------------------------------------------------------------------
    def _on_reply(self, request: RemoteRequest, future: asyncio.Future[Completion]) -> None:
        handle = request.ack
        assert handle is not None
        if future.cancelled():
            self._stopped(request, handle)
            return
        error = future.exception()
        if error is not None:
            self._failed(request, handle, error)
            return
        completion = future.result()
        if completion.finish_reason != "deadline":  # one past its deadline never started here
            self.send(request, start_payload(request.id, self.worker))
        if request.stream:
            forwarder = self.forwarders[request.id] = _ChunkForwarder(self, request)
            completion.tokens.subscribe(forwarder)
        completion.result.add_done_callback(lambda result: self._on_result(request, handle, result))

    def _on_result(self, request: RemoteRequest, handle: AckHandle,
                   future: asyncio.Future[CompletionResult]) -> None:
        self.forwarders.pop(request.id, None)
        if future.cancelled():
            self._release(handle)
            return
        error = future.exception()
        if error is not None:
            self._failed(request, handle, error)
            return
        result = future.result()
        if result.finish_reason == "cancelled":
            self._stopped(request, handle)
            return
        self.done += 1
        count_finished("stalled" if result.finish_reason == "stalled" else
                       "cancelled" if result.finish_reason == "deadline" else "ok")
        self.send(request, done_payload(request.id, result), terminal=True)
        handle.ack()

    def _failed(self, request: RemoteRequest, handle: AckHandle, error: BaseException) -> None:
        retryable = isinstance(error, (EngineUnavailableError, DroppedError))
        if retryable and handle.attempts < self.max_attempts and not request.client_gone:
            self.requeued += 1
            handle.requeue()
            return
        if not isinstance(error, EngineError):
            log.warning("worker: request %s failed: %r", request.id, error)
        self.errors += 1
        count_finished("error")
        self.send(request, error_payload(request.id, str(error) or type(error).__name__,
                                         unavailable=isinstance(error, EngineUnavailableError),
                                         backend=error if isinstance(error, BackendError) else None), terminal=True)
        handle.ack()

    def _stopped(self, request: RemoteRequest, handle: AckHandle) -> None:
        """It never ran to its end here: its client left (acknowledged), or this worker is
        stopping (released, for another worker)."""
        if request.client_gone:
            self._cancelled(request, handle)
        else:
            self._release(handle)

    def _cancelled(self, request: RemoteRequest, handle: AckHandle) -> None:
        self.cancelled += 1
        count_finished("cancelled")
        where = request.cancelled_where or "unread"
        _cancels[where].inc()
        now, at = self.clock.now(), request.cancelled_at_s
        if where != "unread" and at is not None and now is not None:
            CANCEL_LATENCY.observe(max(0.0, now - at))
        handle.ack()

    def _release(self, handle: AckHandle) -> None:
        self.released += 1
        handle.release()

