"""The gateway's end of the reply streams: messages become Completions, each delivered once.

The wire is at-least-once: a worker that dies mid-request leaves its entry pending, another worker
runs it again and sends its ``start``, chunks and ``done`` a second time. The router keeps, per
request id, the next chunk index it expects: a chunk below it is a duplicate and dropped, so the
client sees every chunk exactly once; the first ``done`` (or ``error``) finishes the request and
forgets it, so later messages for it are dropped too.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any

from ..engines import Completion, CompletionRequest, CompletionResult
from ._codec import error_from_fields, result_from_fields

__all__ = ["ReplyRouter"]

log = logging.getLogger("rxpipe.redis")


class _Remote:
    """A request this gateway put on the stream and has not finished answering."""

    __slots__ = ("request", "completion", "next_chunk", "started_s", "first_chunk_s")

    def __init__(self, request: CompletionRequest) -> None:
        self.request = request
        self.completion: Completion | None = None
        self.next_chunk = 0
        self.started_s: float | None = None
        self.first_chunk_s: float | None = None


class ReplyRouter:
    """Routes reply messages to waiting requests (the owner of their remote Completions).

    ``register`` before the request's ``XADD``; ``dispatch`` every reply message; ``fail`` when
    the ``XADD`` failed. Counters: ``duplicates`` (messages dropped as already delivered) and
    ``strays`` (messages for requests this gateway does not wait for: finished, cancelled, or
    sent before a restart).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.waiting: dict[str, _Remote] = {}
        self.duplicates = 0
        self.strays = 0

    def __len__(self) -> int:
        return len(self.waiting)

    def register(self, request: CompletionRequest) -> None:
        self.waiting[request.id] = _Remote(request)
        reply = request.reply
        if reply is not None:
            reply.add_done_callback(functools.partial(self._reply_done, request.id))

    def _reply_done(self, request_id: str, future: asyncio.Future[Completion]) -> None:
        if future.cancelled() or future.exception() is not None:
            self.waiting.pop(request_id, None)  # the client left (or it failed) before it started

    def fail(self, request_id: str, error: BaseException) -> None:
        """The request never reached Redis (or its fate is unknown): its client gets ``error``."""
        remote = self.waiting.pop(request_id, None)
        if remote is None:
            return
        self._fail(remote, error)

    def fail_all(self, error: BaseException) -> None:
        for remote in list(self.waiting.values()):
            self._fail(remote, error)
        self.waiting.clear()

    def _fail(self, remote: _Remote, error: BaseException) -> None:
        if remote.completion is not None:
            remote.completion.fail(error)
            return
        reply = remote.request.reply
        if reply is not None and not reply.done():
            reply.set_exception(error)

    # -- messages --------------------------------------------------------------------------------
    def dispatch(self, message: dict[str, Any]) -> None:
        """Apply one reply message (see ``rxpipe.redis._codec``)."""
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
            elif isinstance(index, int) and index < remote.next_chunk:
                self.duplicates += 1
            else:  # one attempt writes its chunks in order on one stream: a gap is a bug
                log.warning("reply for %s: chunk %r arrived while %d was expected", remote.request.id, index,
                            remote.next_chunk)
        elif kind == "done":
            completion = remote.completion or self._start(remote)
            del self.waiting[remote.request.id]
            completion.finish(self._result(remote, result_from_fields(message["r"])))
        elif kind == "error":
            del self.waiting[remote.request.id]
            self._fail(remote, error_from_fields(message))

    def _start(self, remote: _Remote) -> Completion:
        request = remote.request
        completion = Completion(request, self, self.loop)
        request.completion = completion
        remote.completion = completion
        remote.started_s = self.loop.time()
        reply = request.reply
        if reply is not None and not reply.done():
            reply.set_result(completion)
        return completion

    def _result(self, remote: _Remote, worker: CompletionResult) -> CompletionResult:
        """The worker's result with the times measured here, from the gateway's own arrival time
        (the worker's clock does not see the time spent in the stream)."""
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

    # -- CompletionOwner ---------------------------------------------------------------------------
    def cancel_completion(self, completion: Completion) -> None:
        """The client left: answer it ``cancelled`` now; later messages for it are strays."""
        remote = self.waiting.pop(completion.request.id, None)
        if remote is not None:
            completion.finish(self._result(remote, CompletionResult("", "cancelled", completion.request.prompt_tokens,
                                                                    completion.generated_tokens, 0.0, None, 0.0)))

    def credit_granted(self, completion: Completion) -> None:
        """Credit is not carried across Redis: the worker streams at its engine's pace."""
