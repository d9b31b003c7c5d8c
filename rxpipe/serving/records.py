"""Typed records of the engine API (DESIGN §4): a request goes in, a :class:`Completion` comes out.

- :class:`CompletionRequest`: what the edge admitted (prompt or chat messages, sampling fields
  passed through, a reply slot through which the gateway receives its Completion).
- :class:`Completion`: one admitted request. ``.tokens`` is a unicast Flowable of
  :class:`TokenChunk` whose consumer's ``request(n)`` is the credit window (in chunks);
  ``await completion.result`` gives the :class:`CompletionResult`.

The engine side of a Completion (``push``, ``finish``, ``fail``, ``credit``) is for engines;
consumers use ``tokens``, ``result``, ``done`` and ``cancel()``.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field
from random import getrandbits as _getrandbits
from typing import Any, Protocol

from .._protocol import UNBOUNDED, Subscriber
from ..errors import DroppedError, ProtocolViolationError
from ..flowable import Flowable
from ..stage import EMPTY_SUBSCRIPTION, DrainSubscription

__all__ = ["CompletionRequest", "TokenChunk", "CompletionResult", "Completion", "FINISH_REASONS",
           "UNANSWERED_REASONS",
           "estimate_tokens"]

#: Why a completion ended. ``stop``: the model ended it (end of sequence); ``length``: it reached
#: ``max_tokens``; ``stalled``: its streaming consumer gave no credit for ``stall_timeout_s``;
#: ``cancelled``: cancelled (client gone) or the engine closed; ``deadline``: ``deadline_s`` passed
#: before it could start (it never ran). Engine failures are not a finish reason: ``result`` raises.
FINISH_REASONS = ("stop", "length", "stalled", "cancelled", "deadline")
#: The finish reasons that are not an answer, the same on every path from an engine (local, or a
#: worker's behind a broker) to the client: the edge turns each into a refusal or an error, never
#: into a ``finish_reason`` a client reads (``deadline``: 429 ``deadline``; ``cancelled``: 503, or
#: an error event once the stream started; ``stalled``: the connection is closed). Any other reason
#: is the model's (``stop``, ``length``, or one an engine of its own gives, e.g. ``content_filter``)
#: and reaches the client as it is, never replaced by ``stop``.
UNANSWERED_REASONS = ("stalled", "cancelled", "deadline")


def _new_id() -> str:
    # unique, not secret: the PRNG (seeded from os.urandom, reseeded in forked children), not a
    # getrandom() syscall per request
    return f"cmpl-{_getrandbits(96):024x}"


def estimate_tokens(prompt: str | None, messages: list[dict[str, Any]] | None = None) -> int:
    """The default prompt-token estimate: ``max(1, ceil(utf8 bytes / 4))``.

    Counts ``prompt``, or else the text of every message's ``content`` (a string, or a list of
    ``{"type": "text", "text": ...}`` parts). Four bytes per token is OpenAI's rule of thumb for
    English text with its BPE tokenizers.
    """
    size = 0
    if prompt is not None:
        size = len(prompt.encode("utf-8"))
    elif messages:
        for message in messages:
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, str):
                size += len(content.encode("utf-8"))
            elif isinstance(content, list):
                for part in content:
                    text = part.get("text") if isinstance(part, dict) else None
                    if isinstance(text, str):
                        size += len(text.encode("utf-8"))
    return max(1, math.ceil(size / 4))


@dataclass(eq=False)
class CompletionRequest:
    """One request for a completion, as admitted by the edge (DESIGN §4).

    Attributes:
        prompt: the prompt (``/v1/completions``), or None with ``messages``.
        messages: chat messages ``[{"role": ..., "content": ...}]`` (``/v1/chat/completions``).
        max_tokens: output tokens at most (int >= 1); None: the engine draws a seeded length.
        max_tokens_defaulted: True when the client gave no ``max_tokens`` and the edge filled in
            what remains of the context (``max_model_len``): a limit, not a requested length.
        model: the model id served (``"sim"`` by default).
        stream: True: the token stream is credit-governed (the engine steps the sequence only
            while its consumer has credit); False: it runs freely and ``result`` carries the text.
        sampling: temperature, top_p, stop, seed, ... passed through to the engine untouched.
        api_key_id: a bounded identifier of the caller's key (never the raw key).
        id: ``"cmpl-<24 hex>"`` unless given.
        arrival_s: ``loop.time()`` when the edge accepted it; ``execute`` fills it if None.
        deadline_s: ``loop.time()`` after which it must not start. A request past it is answered
            with a Completion already finished with reason ``"deadline"`` (no tokens, no slot).
        reply: a future the executor completes with the :class:`Completion` on admission (or
            fails with the stage's error; ``EngineUnavailableError`` when the engine is down).
        tenant: the caller's configured tenant name when the edge has tenants (DESIGN §5,
            "Many tenants"), else None; ``fair_queue`` keys its flows by it.
        cancelled: set by :meth:`cancel`. completion: set on admission.

    Behind a :class:`~rxpipe.gateway.Gateway`, ``reply`` and ``completion`` go back to None once
    the request's answer is written (``Gateway.leave``): they and the Completion's own
    ``request`` are reference cycles, cut there so an answered request is freed at once by
    reference counting rather than by the cyclic GC. Keep the Completion itself (e.g. the
    executor's output items) to read it later.
    """

    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None
    max_tokens: int | None = None
    model: str = "sim"
    stream: bool = False
    sampling: dict[str, Any] = field(default_factory=dict)
    api_key_id: str | None = None
    id: str = field(default_factory=_new_id)
    arrival_s: float | None = None
    deadline_s: float | None = None
    reply: asyncio.Future[Completion] | None = field(default=None, repr=False)
    max_tokens_defaulted: bool = False
    tenant: str | None = None
    cancelled: bool = field(default=False, init=False)
    completion: Completion | None = field(default=None, init=False, repr=False)
    _prompt_tokens: int | None = field(default=None, init=False, repr=False)
    #: set by ``ops.cache``: "hit" (answered from the cache) or "miss"; None: not cacheable
    cache: str | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        mt = self.max_tokens
        if mt is not None and (isinstance(mt, bool) or not isinstance(mt, int) or mt < 1):
            raise ValueError(f"CompletionRequest(max_tokens=) needs an int >= 1 tokens or None, got {mt!r}")

    @property
    def prompt_tokens(self) -> int:
        """Prompt tokens, estimated with :func:`estimate_tokens` (computed once)."""
        n = self._prompt_tokens
        if n is None:
            n = self._prompt_tokens = estimate_tokens(self.prompt, self.messages)
        return n

    def on_discard(self, reason: str) -> None:
        """A stage dropped this request before the engine admitted it (an overflow strategy shed
        it, or the stage holding it failed): its ``reply`` fails with
        :class:`~rxpipe.DroppedError` carrying ``reason``, so the edge answers its client."""
        reply = self.reply
        if reply is not None and not reply.done():
            reply.set_exception(DroppedError(f"the pipeline dropped the request ({reason})", reason))

    def cancel(self) -> None:
        """The client is gone. Idempotent.

        Still queued anywhere (a buffer, the executor): it never starts — ``execute`` skips it
        and asks upstream for one more; its ``reply`` is cancelled. Admitted: its Completion is
        cancelled (a waiting one never starts; a running one frees its slot within one step).
        """
        if self.cancelled:
            return
        self.cancelled = True
        completion = self.completion
        if completion is not None:
            completion.cancel()
        elif self.reply is not None and not self.reply.done():
            self.reply.cancel()


@dataclass(frozen=True, slots=True)
class TokenChunk:
    """A piece of generated text: ``index`` (0, 1, 2, ... per completion: the chunk number, for
    de-duplication), ``text``, ``tokens`` (tokens in it; > 1 when coalesced or when the engine
    makes several tokens per step)."""

    index: int
    text: str
    tokens: int


@dataclass(frozen=True, slots=True)
class CompletionResult:
    """The outcome of a completion.

    text: everything generated. finish_reason: one of :data:`FINISH_REASONS`.
    prompt_tokens / completion_tokens: token counts. Times are seconds on the loop clock measured
    from the request's ``arrival_s``: queue_time_s until it first ran (or ended, if it never ran),
    ttft_s until its first token was generated (None: no token), e2e_s until it finished.
    """

    text: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    queue_time_s: float
    ttft_s: float | None
    e2e_s: float


class CompletionOwner(Protocol):
    """What a Completion calls back on its owner: an :class:`~rxpipe.engines.Engine` (whose
    default hooks do nothing), or a stage that makes Completions itself (``cache``, ``balance``'s
    failover, the transport's reply router). Both are called on the event loop's thread.

    ``cancel_completion(completion)``: ``completion.cancel()`` was called (once, before it is
    done): stop it and finish it ``"cancelled"``. ``credit_granted(completion)``: its token
    consumer called ``request(n)`` while it was not done (``completion.credit`` is the new window).
    """

    def cancel_completion(self, completion: Completion) -> None: ...

    def credit_granted(self, completion: Completion) -> None: ...


class Completion:
    """One admitted request: a token stream with credit, and an awaitable result (DESIGN §4).

    Consumer side:
        ``tokens``: a Flowable of :class:`TokenChunk` with one subscriber (a second one gets
        ``on_error(ProtocolViolationError)``). Its ``request(n)`` is the credit window, in chunks: with
        ``request.stream`` the engine steps the sequence only while there is credit. Text made
        while the consumer has no credit is coalesced into one pending chunk (never a queue of
        them). The stream completes when the completion finishes (also when cancelled, stalled
        or past its deadline: the reason is in ``result``), or signals ``on_error`` with the
        engine's error. Cancelling the subscription cancels the completion.
        ``result``: ``await completion.result`` -> :class:`CompletionResult`; raises
        :class:`~rxpipe.EngineError` when the engine failed the request.
        ``done``: True once finished or failed. ``cancel()``: stop it (finish reason
        ``"cancelled"``); a waiting one never starts, a running one frees its slot within one
        engine step.

    Engine side: :meth:`push` generated text, :meth:`finish`, :meth:`fail`, read :attr:`credit`.
    """

    __slots__ = ("request", "done", "cancel_requested", "engine_state", "_owner", "_loop", "_outcome",
                 "_error", "_future", "_subscription", "_parts", "_pending_tokens", "_chunks",
                 "_generated", "__weakref__")

    def __init__(self, request: CompletionRequest, owner: CompletionOwner,
                 loop: asyncio.AbstractEventLoop) -> None:
        self.request = request
        #: True once finished or failed
        self.done = False
        #: ``cancel()`` was called
        self.cancel_requested = False
        #: the engine's own per-sequence state (opaque to everyone else)
        self.engine_state: Any = None
        self._owner = owner
        self._loop = loop
        self._outcome: CompletionResult | None = None
        self._error: BaseException | None = None
        self._future: asyncio.Future[CompletionResult] | None = None
        #: the token consumer's subscription; :data:`_ENDED` once it ended (still "subscribed
        #: once": the stream is unicast), so no Completion <-> subscription cycle outlives it
        self._subscription: _TokenSubscription | _EndedSubscription | None = None
        self._parts: list[str] = []
        self._pending_tokens = 0
        self._chunks = 0
        self._generated = 0

    # -- consumer side -------------------------------------------------------------------------
    @property
    def tokens(self) -> Flowable[TokenChunk]:
        """The token stream (one subscriber; ``request(n)`` = credit in chunks)."""
        # a new (stateless) Flowable per access, not a cached one: a cached stream would be a
        # Completion <-> stream reference cycle; the one-subscriber rule lives in the Completion
        return _TokenStream(self)

    @property
    def result(self) -> asyncio.Future[CompletionResult]:
        """An awaitable of the :class:`CompletionResult` (raises the engine's error)."""
        future = self._future
        if future is None:
            future = self._future = self._loop.create_future()
            if self._outcome is not None:
                future.set_result(self._outcome)
            elif self._error is not None:
                future.set_exception(self._error)
        return future

    @property
    def outcome(self) -> CompletionResult | None:
        """The result once finished (None before, and when the engine failed it)."""
        return self._outcome

    @property
    def error(self) -> BaseException | None:
        """The engine's error, when it failed the request."""
        return self._error

    @property
    def finish_reason(self) -> str | None:
        """The finish reason once finished, else None."""
        outcome = self._outcome
        return outcome.finish_reason if outcome is not None else None

    @property
    def generated_tokens(self) -> int:
        """Tokens generated so far (sent or pending)."""
        return self._generated

    @property
    def pending_tokens(self) -> int:
        """Tokens generated but not yet sent to the token consumer (the one pending chunk)."""
        return self._pending_tokens

    def cancel(self) -> None:
        """Stop this completion (client gone); idempotent; a no-op once done."""
        if self.done or self.cancel_requested:
            return
        self.cancel_requested = True
        self._owner.cancel_completion(self)

    # -- engine side ---------------------------------------------------------------------------
    @property
    def credit(self) -> int:
        """Chunks the token consumer asked for and has not received (0 without a subscriber)."""
        sub = self._subscription
        if sub is None or sub.cancelled:
            return 0
        return sub.requested

    @property
    def subscribed(self) -> bool:
        """True once the token stream has its (live) subscriber."""
        sub = self._subscription
        return sub is not None and not sub.cancelled

    def push(self, text: str, tokens: int) -> None:
        """Add ``tokens`` generated tokens (``text``) to the pending chunk and deliver it if the
        consumer has credit. For engines."""
        if self.done:
            return
        self._generated += tokens
        self._parts.append(text)
        self._pending_tokens += tokens
        sub = self._subscription
        if sub is not None:
            sub.drain()

    def finish(self, result: CompletionResult) -> None:
        """Finish with ``result``; the token stream completes after its pending chunk. For engines."""
        if self.done:
            return
        self.done = True
        self._outcome = result
        future = self._future
        if future is not None and not future.done():
            future.set_result(result)
        self._settle()

    def fail(self, error: BaseException) -> None:
        """Fail with ``error`` (``result`` raises it; the token stream signals it). For engines."""
        if self.done:
            return
        self.done = True
        self._error = error
        future = self._future
        if future is not None and not future.done():
            future.set_exception(error)
        self._settle()

    def _settle(self) -> None:
        sub = self._subscription
        if sub is not None:
            sub.drain()

    def __repr__(self) -> str:
        state = self.finish_reason or ("failed" if self._error is not None else "running")
        return f"<Completion {self.request.id} {state} tokens={self._generated}>"


class _TokenSubscription(DrainSubscription):
    """Delivers a completion's pending chunk on demand, then its terminal signal."""

    __slots__ = ("completion",)

    def __init__(self, downstream: Subscriber[TokenChunk], completion: Completion) -> None:
        super().__init__(downstream)
        self.completion = completion

    def _drain(self) -> None:
        c = self.completion
        pending = c._pending_tokens
        if pending and self.requested:
            parts = c._parts
            text = parts[0] if len(parts) == 1 else "".join(parts)
            parts.clear()
            chunk = TokenChunk(c._chunks, text, pending)
            c._chunks += 1
            c._pending_tokens = 0
            if self.requested != UNBOUNDED:
                self.requested -= 1
            self.emitted += 1
            self.downstream.on_next(chunk)
            if self.cancelled:
                return
            if not c._pending_tokens and not c.done:
                # a consumer that gives its credit back inside on_next (the SSE writer) marked
                # the loop missed: nothing is pending, nothing ended and nothing failed (fail()
                # cancels: returned above), so another pass would do nothing (once per
                # streamed token otherwise)
                self._missed = False
                return
        if c.done and not c._pending_tokens:
            if c._error is not None:
                self._error(c._error)
            else:
                self._complete()

    def _on_request(self, n: int) -> None:
        c = self.completion
        if not c.done:
            c._owner.credit_granted(c)

    def _release(self) -> None:
        c = self.completion
        if not c.done:
            c.cancel()  # the consumer went away: free the slot
        c._parts.clear()
        c._pending_tokens = 0
        c._subscription = _ENDED  # no cycle left: the Completion is freed by reference counting


class _EndedSubscription:
    """What a Completion keeps of its token subscription once that ended: no credit, nothing to
    drain, and still counts as the stream's one subscriber."""

    __slots__ = ()
    cancelled = True
    requested = 0

    def drain(self) -> None:
        pass


_ENDED = _EndedSubscription()


class _TokenStream(Flowable[TokenChunk]):
    kind = "tokens"

    def __init__(self, completion: Completion) -> None:
        super().__init__(name=completion.request.id)
        self.completion = completion

    def _subscribe(self, subscriber: Subscriber[TokenChunk]) -> None:
        c = self.completion
        if c._subscription is not None:
            subscriber.on_subscribe(EMPTY_SUBSCRIPTION)
            subscriber.on_error(ProtocolViolationError(
                f"the token stream of {c.request.id} allows one subscriber (it is unicast)"))
            return
        sub = c._subscription = _TokenSubscription(subscriber, c)
        subscriber.on_subscribe(sub)
        sub.drain()  # a finished completion completes without demand
