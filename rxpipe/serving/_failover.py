"""Failover of ``balance(retry_unstarted=True)``: a request whose replica failed it before its
first token reached the client is dispatched again, to a replica it has not tried (DESIGN §8b).

The client's request and its reply slot (the gateway's future) stay untouched; each dispatch
sends the branch an *attempt*: a copy of the request whose ``reply`` is an :class:`AttemptReply`,
which the executor completes as usual. On the
first admission the client receives a *relay* Completion (:class:`_Relay` owns it) that follows
the replica's Completion: tokens (streaming: credit forwarded; non-streaming: collected and
handed over at the end), result, cancel. When the replica's Completion fails with an
:class:`~rxpipe.EngineError` and nothing has reached the client yet — a streamed request with
no token relayed, or any non-streamed request — the request goes back to the balance, ahead of
the items held there (not after a backend's 4xx passed on to the client, ``BackendError.client_fault``:
the request itself is at fault); otherwise the relay fails with the error (the edge ends the stream with
an error event: never a duplicate token). A request that has tried every live replica fails
with the last error.

Mid-stream failover (``balance(retry_started=True)``): when tokens of a streamed request did
reach the client, the request is *continued* instead: the next attempt is a copy of the request
whose prompt is the prompt plus the text already relayed (chat: the messages plus a final
``assistant`` message holding that text, with vLLM's ``continue_final_message`` and
``add_generation_prompt`` fields so the backend continues that message instead of starting a
new one) and whose ``max_tokens`` is what was left. The relay keeps its Completion: the client's
stream simply goes on, and its result is the whole answer's (text, log probabilities and
``completion_tokens`` over every attempt; prompt tokens, queue time and time to first token of
the first). A stream is continued only while all it relayed was text (log probabilities
included): one that already sent the client a chunk of more than text — a tool-call fragment, a
function call, reasoning, a refusal — or that is not a completion (a Responses stream) ends with
the error instead (the edge's error event), so no tool call is ever repeated or split.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any, Protocol

from rxpipe._protocol import UNBOUNDED, Subscription
from rxpipe.errors import EngineError
from rxpipe.stage import InternalSubscriber

from ._answers import merge_logprobs
from .records import Completion, CompletionRequest, CompletionResult, TokenChunk

__all__ = ["Failover", "AttemptReply"]


class BalanceRun(Protocol):
    """What a failover asks of the balance run that owns it (``_balance.BalanceRun``)."""

    counters: Any
    stage: Any

    def can_retry(self, excluded: set[int]) -> bool: ...

    def redispatch(self, item: CompletionRequest, failover: Failover) -> None: ...


class AttemptReply(asyncio.Future[Completion]):
    """The reply slot of one attempt: what the executor completes; the client's stays intact."""

    def __init__(self, failover: Failover, port: int, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop=loop)
        self.failover = failover
        self.port = port

    def set_result(self, result: Completion) -> None:
        if not self.done():
            super().set_result(result)
            self.failover.admitted(result, self.port)

    def set_exception(self, exception: type | BaseException) -> None:
        if not self.done():
            super().set_result(None)  # type: ignore[arg-type]  # settled; nobody awaits this one
            error = exception if isinstance(exception, BaseException) else exception()
            self.failover.failed(error, self.port)

    def cancel(self, msg: Any = None) -> bool:
        self.failover.client.cancel()
        return super().cancel()

    def cancelled(self) -> bool:
        # the executor skips an attempt whose client is gone
        return self.failover.gone or super().cancelled()


class Failover:
    """One request's attempts across the replicas of a balance."""

    def __init__(self, run: BalanceRun, request: CompletionRequest) -> None:
        assert request.reply is not None
        self.run = run
        self.request = request
        self.client: asyncio.Future[Completion] = request.reply
        self.loop = self.client.get_loop()
        #: what each attempt copies: the request, or its continuation after a mid-stream failure
        self.attempt_request = request
        #: ports this request was dispatched to
        self.tried: set[int] = set()
        self.relay: _Relay | None = None
        self.attempts = 0
        #: the relay was cancelled (client gone): no further attempt
        self.cancelled = False

    @property
    def gone(self) -> bool:
        """The client is gone (its request or reply cancelled, or its Completion)."""
        return self.cancelled or self.request.cancelled or self.client.cancelled()

    def dispatch(self, port: int) -> CompletionRequest:
        """The attempt to send to ``port``: a copy of the request with its own reply slot."""
        self.tried.add(port)
        self.attempts += 1
        return dataclasses.replace(self.attempt_request, reply=AttemptReply(self, port, self.loop))

    def admitted(self, completion: Completion, port: int) -> None:
        relay = self.relay
        if relay is None:
            if self.client.done():  # the client left while it was queued
                completion.cancel()
                return
            relay = self.relay = _Relay(self)
            self.request.completion = relay.completion  # request.cancel() reaches the relay
            self.client.set_result(relay.completion)
        relay.follow(completion, port)

    def failed(self, error: BaseException, port: int) -> None:
        """The attempt on ``port`` failed before or after admission."""
        if self.gone:
            if self.relay is not None:
                self.relay.finish_cancelled()
            return
        # a backend's 4xx passed on (client_fault) is the request's own: every replica says the same
        if isinstance(error, EngineError) and not getattr(error, "client_fault", False) \
                and self.run.can_retry(self.tried):
            self.run.counters.drop("retried")
            self.run.redispatch(self.attempt_request, self)
            return
        self.fail(error)

    def fail(self, error: BaseException) -> None:
        """No further attempt: the client's Completion (or its reply) fails with ``error``."""
        relay = self.relay
        if relay is not None:
            relay.completion.fail(error)
        elif not self.client.done():
            self.client.set_exception(error)


    def resume(self, error: BaseException, text: str, tokens: int) -> bool:
        """A streamed attempt failed after ``tokens`` tokens (``text``) reached the client:
        continue the request on another replica (True), or say it cannot be (False)."""
        if not (self.run.stage.retry_started and isinstance(error, EngineError) and self.run.can_retry(self.tried)):
            return False
        request = self.request
        left = None if request.max_tokens is None else request.max_tokens - tokens
        relay = self.relay
        assert relay is not None
        if left is not None and left <= 0:  # it had every token; only the end was lost
            relay.finish_resumed(None)
            return True
        if request.messages is not None:
            messages = [*request.messages, {"role": "assistant", "content": text}]
            sampling = {**request.sampling, "continue_final_message": True, "add_generation_prompt": False}
            follow_up = dataclasses.replace(request, messages=messages, max_tokens=left, sampling=sampling)
        else:
            follow_up = dataclasses.replace(request, prompt=(request.prompt or "") + text, max_tokens=left)
        self.attempt_request = follow_up
        self.run.counters.drop("resumed")
        self.run.redispatch(follow_up, self)
        return True


class _Relay(InternalSubscriber):
    """Owner of the client's Completion: follows the current attempt's Completion."""

    def __init__(self, failover: Failover) -> None:
        self.failover = failover
        self.completion = Completion(failover.request, self, failover.loop)
        self.source: Completion | None = None
        self.subscription: Subscription | None = None
        self.asked = 0
        self.port = -1
        self.parts: list[str] = []
        self.tokens = 0
        #: streamed: the text relayed to the client over every attempt, and its tokens, and those
        #: of the attempts before the current one
        self.sent: list[str] = []
        self.before_tokens = 0
        self.before_text = ""
        self.first_token_s: float | None = None
        self.started_s: float | None = None
        #: streamed: a chunk of more than text was relayed (no continuation then); the log
        #: probabilities relayed over every attempt
        self.structured = False
        self.logprobs: Any = None

    def follow(self, source: Completion, port: int) -> None:
        if self.started_s is None:
            self.started_s = self.failover.loop.time()  # the first attempt's admission
        self.source, self.port = source, port
        self.subscription, self.asked, self.parts, self.tokens = None, 0, [], 0
        if self.completion.cancel_requested:
            source.cancel()
        source.tokens.subscribe(self)

    # -- the attempt's token stream ------------------------------------------------------------------
    def on_subscribe(self, subscription: Subscription) -> None:
        self.subscription = subscription
        if self.failover.request.stream:
            self._forward_credit()
        else:
            subscription.request(UNBOUNDED)

    def on_next(self, chunk: TokenChunk) -> None:
        if self.failover.request.stream:
            self.asked -= 1
            if self.first_token_s is None:
                self.first_token_s = self.failover.loop.time()
            self.sent.append(chunk.text)
            if chunk.delta is None and chunk.logprobs is None:
                self.completion.push(chunk.text, chunk.tokens)
                return
            if chunk.delta is not None:
                self.structured = True
            if chunk.logprobs is not None:
                self.logprobs = merge_logprobs(self.logprobs, chunk.logprobs)
            self.completion.push_delta(chunk.text, chunk.tokens, chunk.delta, chunk.logprobs)
        else:
            self.parts.append(chunk.text)
            self.tokens += chunk.tokens

    def on_error(self, error: BaseException) -> None:
        completion = self.completion
        request = self.failover.request
        relayed = request.stream and bool(self.sent)  # a chunk reached the client (a Responses event: 0 tokens)
        if completion.cancel_requested:
            completion.fail(error)
        elif relayed and (self.structured or request.endpoint is not None):
            completion.fail(error)  # never a tool call (or an event) twice or in pieces: the error ends it
        elif relayed:
            text = "".join(self.sent)
            self.sent = [text]
            self.before_text, self.before_tokens = text, completion.generated_tokens
            if not self.failover.resume(error, text, completion.generated_tokens):
                completion.fail(error)
        else:
            self.failover.failed(error, self.port)

    def on_complete(self) -> None:
        source = self.source
        assert source is not None
        outcome = source.outcome
        if self.parts:
            self.completion.push("".join(self.parts), self.tokens)
        if outcome is None:
            return
        if self.before_tokens:
            self.finish_resumed(outcome)
        else:
            self.completion.finish(outcome)

    def finish_resumed(self, outcome: CompletionResult | None) -> None:
        """Finish a continued stream: the whole answer's text and tokens over every attempt; the
        request's prompt tokens, its queue time until its first attempt was admitted, and the
        time its first token reached the relay."""
        request = self.failover.request
        now = self.failover.loop.time()
        arrival = request.arrival_s if request.arrival_s is not None else now
        started = self.started_s if self.started_s is not None else now
        first = self.first_token_s
        self.completion.finish(CompletionResult(
            self.before_text + (outcome.text if outcome is not None else ""),
            outcome.finish_reason if outcome is not None else "length", request.prompt_tokens,
            self.before_tokens + (outcome.completion_tokens if outcome is not None else 0),
            max(0.0, started - arrival), None if first is None else first - arrival, now - arrival,
            outcome.message if outcome is not None else None, self.logprobs, None,
            outcome.system_fingerprint if outcome is not None else None))

    def _forward_credit(self) -> None:
        sub = self.subscription
        if sub is None:
            return
        want = self.completion.credit - self.asked
        if want > 0:
            self.asked += want
            sub.request(want)

    # -- CompletionOwner -------------------------------------------------------------------------
    def credit_granted(self, completion: Completion) -> None:
        if self.failover.request.stream:
            self._forward_credit()

    def cancel_completion(self, completion: Completion) -> None:
        self.failover.cancelled = True
        source = self.source
        if source is not None and not source.done:
            source.cancel()
        else:
            self.finish_cancelled()  # between attempts: nothing runs

    def finish_cancelled(self) -> None:
        completion = self.completion
        if completion.done:
            return
        now = self.failover.loop.time()
        arrival = self.failover.request.arrival_s or now
        completion.finish(CompletionResult("", "cancelled", self.failover.request.prompt_tokens, 0,
                                           now - arrival, None, now - arrival))
