"""The gateway's end of the reply channel: messages become Completions, each delivered once; and
what the gateway tells the workers back: cancels and token credit.

The wire is at-least-once: a worker that dies mid-request leaves it unacknowledged, another
worker runs it again and sends its ``start``, chunks and ``done`` a second time. The router keeps,
per request id, the sequence number of the next chunk it expects: a chunk below it is a duplicate
and dropped, so the client sees every chunk exactly once; a chunk above it is a gap, which fails
the stream (an error, never a silent hole: Akka StreamRefs' rule); the first ``done`` (or
``error``) finishes the request and forgets it, so later messages for it are dropped too.

Toward the workers (through the ``control`` the sink provides):

- a client that left (its reply cancelled while queued, or its Completion cancelled) is
  cancelled wherever it is (:meth:`_Control.cancel`);
- a streamed request's token credit crosses the hop as a cumulative count of chunks (Akka
  StreamRefs' CumulativeDemand): ``chunks the reader took + its outstanding request(n) +
  credit_window``. The worker sends no chunk beyond it, so this gateway holds at most
  ``credit_window`` chunks per stream besides its socket buffer, and the worker's engine stops
  stepping a sequence whose reader stopped reading. Credit is sent when it grew by half a window,
  and sent again every ``credit_resend_s`` while a stream makes no progress (idempotent: a
  worker keeps the largest count it saw);
- with ``stall_timeout_s``, a stream whose reader gave no credit that long is finished
  ``"stalled"`` here and cancelled on its worker.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any, Callable, Protocol

from ..errors import EngineError
from ..serving import Completion, CompletionRequest, CompletionResult
from ..serving._drain import DrainMeter
from ._codec import error_from_fields, result_from_fields

__all__ = ["ReplyRouter"]

log = logging.getLogger("rxpipe.transport")


class _Control(Protocol):
    def cancel(self, request: CompletionRequest, since_loop_s: float) -> None: ...

    def credit(self, credits: dict[str, int]) -> None: ...


class _Remote:
    """A request this gateway put on the queue and has not finished answering."""

    __slots__ = ("request", "completion", "next_chunk", "started_s", "first_chunk_s", "pending_wire",
                 "sent_credit", "progress_at_resend", "starved_since")

    def __init__(self, request: CompletionRequest, credit: int) -> None:
        self.request = request
        self.completion: Completion | None = None
        self.next_chunk = 0
        self.started_s: float | None = None
        self.first_chunk_s: float | None = None
        #: chunks received and not yet taken by the reader (coalesced in the Completion)
        self.pending_wire = 0
        #: the cumulative credit the worker was last told (the request carries the first window)
        self.sent_credit = credit
        self.progress_at_resend = -1
        #: loop time since when the reader has had no credit while chunks wait (None: it has)
        self.starved_since: float | None = None


class ReplyRouter:
    """Routes reply messages to waiting requests (the owner of their remote Completions).

    ``register`` before the request is published; ``dispatch`` every reply message; ``fail`` when
    publishing failed. Counters: ``duplicates`` (messages dropped as already delivered),
    ``strays`` (messages for requests this gateway does not wait for: finished, cancelled, or
    sent before a restart), ``gaps`` (streams failed for a missing chunk), ``cancels`` (cancels
    sent to the workers), ``credits_sent`` (credit messages).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, control: _Control | None = None, *,
                 credit_window: int = 8, credit_resend_s: float = 0.5,
                 stall_timeout_s: float | None = None, meter: DrainMeter | None = None) -> None:
        self.loop = loop
        #: the workers' drain as this gateway sees it: each request's admission (``register``),
        #: start on a worker's engine (``start``), end, or leaving before it started; its
        #: ``backlog`` is this gateway's requests still queued
        self.meter = meter if meter is not None else DrainMeter()
        #: called after each start (the sink's wait bound may have room again)
        self.on_start: Callable[[], None] | None = None
        self.control = control
        self.credit_window = credit_window
        self.credit_resend_s = credit_resend_s
        self.stall_timeout_s = stall_timeout_s
        self.waiting: dict[str, _Remote] = {}
        self.duplicates = 0
        self.strays = 0
        self.gaps = 0
        self.cancels = 0
        self.credits_sent = 0
        self._dirty: dict[str, _Remote] = {}
        self._flush_queued = False

    def __len__(self) -> int:
        return len(self.waiting)

    def register(self, request: CompletionRequest) -> None:
        self.waiting[request.id] = _Remote(request, self.credit_window)
        self.meter.record_admit(self.loop.time())
        reply = request.reply
        if reply is not None:
            reply.add_done_callback(functools.partial(self._reply_done, request.id))

    def _reply_done(self, request_id: str, future: asyncio.Future[Completion]) -> None:
        if future.cancelled():
            remote = self.waiting.pop(request_id, None)  # the client left before it started
            if remote is not None:
                self._left(remote)
                self._send_cancel(remote)
        elif future.exception() is not None:
            remote = self.waiting.pop(request_id, None)
            if remote is not None:
                self._left(remote)

    def fail(self, request_id: str, error: BaseException) -> None:
        """The request never reached the broker (or its fate is unknown): its client gets ``error``."""
        remote = self.waiting.pop(request_id, None)
        if remote is None:
            return
        self._left(remote)
        self._fail(remote, error)

    def fail_all(self, error: BaseException) -> None:
        remotes = list(self.waiting.values())
        self.waiting.clear()
        for remote in remotes:
            self._left(remote)
            self._fail(remote, error)

    def _left(self, remote: _Remote) -> None:
        """``remote`` is no longer waited for (removed from ``waiting``): the drain meter counts
        the end of a started request, or a queued one that leaves without starting."""
        now = self.loop.time()
        if remote.started_s is None:
            self.meter.record_abandon(now)
        else:
            self.meter.record_finish(now)
            self.meter.record_service(now - remote.started_s)

    def _fail(self, remote: _Remote, error: BaseException) -> None:
        if remote.completion is not None:
            remote.completion.fail(error)
            return
        reply = remote.request.reply
        if reply is not None and not reply.done():
            reply.set_exception(error)

    def _send_cancel(self, remote: _Remote) -> None:
        if self.control is not None:
            self.cancels += 1
            self.control.cancel(remote.request, self.loop.time())

    # -- messages --------------------------------------------------------------------------------
    def dispatch(self, message: dict[str, Any]) -> None:
        """Apply one reply message (see ``rxpipe.transport._codec``)."""
        remote = self.waiting.get(message["id"])
        if remote is None:
            self.strays += 1
            return
        kind = message.get("k")
        if kind == "start":
            if remote.completion is not None:
                self.duplicates += 1
                return
            self._start(remote)
        elif kind == "chunk":
            completion = remote.completion or self._start(remote)
            index = message.get("i")
            if index == remote.next_chunk:
                remote.next_chunk += 1
                if remote.first_chunk_s is None:
                    remote.first_chunk_s = self.loop.time()
                completion.push(str(message.get("t", "")), int(message.get("n", 1)))
                if remote.request.stream:
                    remote.pending_wire = remote.pending_wire + 1 if completion.pending_tokens else 0
                    self._credit_changed(remote)
            elif isinstance(index, int) and index < remote.next_chunk:
                self.duplicates += 1
            else:  # one attempt writes its chunks in order on one channel: a gap is a loss
                self.gaps += 1
                log.warning("reply for %s: chunk %r arrived while %d was expected; the stream fails",
                            remote.request.id, index, remote.next_chunk)
                del self.waiting[remote.request.id]
                self._left(remote)
                self._send_cancel(remote)
                completion.fail(EngineError(f"chunk {index!r} arrived while {remote.next_chunk} was expected: "
                                            "the reply stream lost a chunk"))
        elif kind == "done":
            try:
                result: CompletionResult | None = result_from_fields(message["r"])
            except (KeyError, TypeError, ValueError) as error:  # never a guessed "stop"
                log.warning("reply for %s: a result that is not one (%s): %r", remote.request.id, error,
                            message.get("r"))
                result = None
            # past its deadline when a worker read it: it never ran (no start, no slot drained)
            never_ran = remote.completion is None and result is not None and result.finish_reason == "deadline"
            completion = remote.completion or self._start(remote, counted=not never_ran)
            del self.waiting[remote.request.id]
            self._left(remote)
            if result is None:
                completion.fail(EngineError("the worker's result is malformed"))
                return
            completion.finish(self._result(remote, result))
        elif kind == "error":
            del self.waiting[remote.request.id]
            self._left(remote)
            self._fail(remote, error_from_fields(message))

    def _start(self, remote: _Remote, *, counted: bool = True) -> Completion:
        request = remote.request
        completion = Completion(request, self, self.loop)
        request.completion = completion
        remote.completion = completion
        if counted:
            remote.started_s = self.loop.time()
            self.meter.record_start(remote.started_s)
        reply = request.reply
        if reply is not None and not reply.done():
            reply.set_result(completion)
        if counted and self.on_start is not None:
            self.on_start()
        return completion

    def _result(self, remote: _Remote, worker: CompletionResult) -> CompletionResult:
        """The worker's result with the times measured here, from the gateway's own arrival time
        (the worker's clock does not see the time spent in the queue)."""
        now = self.loop.time()
        arrival = remote.request.arrival_s if remote.request.arrival_s is not None else now
        started = remote.started_s if remote.started_s is not None else now
        queue_time = started - arrival
        if remote.first_chunk_s is not None:
            ttft: float | None = remote.first_chunk_s - arrival
        elif worker.ttft_s is not None:
            ttft = queue_time + max(0.0, worker.ttft_s - worker.queue_time_s)
        else:
            ttft = None
        return CompletionResult(worker.text, worker.finish_reason, worker.prompt_tokens, worker.completion_tokens,
                                queue_time, ttft, now - arrival)

    # -- credit ----------------------------------------------------------------------------------
    def credit_target(self, remote: _Remote) -> int:
        """Chunks the worker may have sent in all: taken by the reader + its outstanding
        request(n) + one window."""
        completion = remote.completion
        if completion is None:
            return remote.sent_credit
        if not completion.pending_tokens:
            remote.pending_wire = 0
        outstanding = min(completion.credit, self.credit_window)
        return remote.next_chunk - remote.pending_wire + outstanding + self.credit_window

    def _credit_changed(self, remote: _Remote) -> None:
        target = self.credit_target(remote)
        completion = remote.completion
        if completion is not None and completion.credit == 0 and remote.pending_wire:
            if remote.starved_since is None:
                remote.starved_since = self.loop.time()
        else:
            remote.starved_since = None
        if target - remote.sent_credit >= max(1, self.credit_window // 2):
            self._dirty[remote.request.id] = remote
            if not self._flush_queued:
                self._flush_queued = True
                self.loop.call_soon(self._flush_credit)

    def _flush_credit(self) -> None:
        self._flush_queued = False
        dirty, self._dirty = self._dirty, {}
        credits = {}
        for request_id, remote in dirty.items():
            if self.waiting.get(request_id) is remote:
                remote.sent_credit = self.credit_target(remote)
                credits[request_id] = remote.sent_credit
        if credits and self.control is not None:
            self.credits_sent += 1
            self.control.credit(credits)

    def tick(self) -> None:
        """Every ``credit_resend_s``: send again the credit of streams that made no progress
        since the last tick (a lost credit message never stalls a stream for good), and end
        streams starved past ``stall_timeout_s``."""
        now = self.loop.time()
        credits = {}
        stalled = []
        for request_id, remote in self.waiting.items():
            completion = remote.completion
            if completion is None or not remote.request.stream:
                continue
            if remote.next_chunk == remote.progress_at_resend:
                remote.sent_credit = max(remote.sent_credit, self.credit_target(remote))
                credits[request_id] = remote.sent_credit
            remote.progress_at_resend = remote.next_chunk
            if completion.credit == 0 and completion.pending_tokens:
                if remote.starved_since is None:
                    remote.starved_since = now
                elif self.stall_timeout_s is not None and now - remote.starved_since >= self.stall_timeout_s:
                    stalled.append(remote)
            else:
                remote.starved_since = None
        if credits and self.control is not None:
            self.credits_sent += 1
            self.control.credit(credits)
        for remote in stalled:
            del self.waiting[remote.request.id]
            self._left(remote)
            self._send_cancel(remote)
            self._finish(remote, "stalled")

    def _finish(self, remote: _Remote, reason: str) -> None:
        completion = remote.completion
        if completion is not None:
            request = completion.request
            completion.finish(self._result(remote, CompletionResult("", reason, request.prompt_tokens,
                                                                     completion.generated_tokens, 0.0, None, 0.0)))

    # -- CompletionOwner ---------------------------------------------------------------------------
    def cancel_completion(self, completion: Completion) -> None:
        """The client left: answer it ``cancelled`` now and cancel it on its worker; later
        messages for it are strays."""
        remote = self.waiting.pop(completion.request.id, None)
        if remote is not None:
            self._left(remote)
            self._send_cancel(remote)
            self._finish(remote, "cancelled")

    def credit_granted(self, completion: Completion) -> None:
        """The reader asked for more: the worker may send more."""
        remote = self.waiting.get(completion.request.id)
        if remote is not None and remote.completion is completion and remote.request.stream:
            self._credit_changed(remote)
