"""The engine interface the executor stage drives (DESIGN §4), and what an engine author writes.

``Engine.submit`` is a template method: it admits a request the same way for every engine
(availability, one submission per request, the event loop, ``arrival_s``, the Completion, a
request already cancelled or past its deadline) and hands the admitted Completion to the
engine's :meth:`Engine.start`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from abc import ABC, abstractmethod
from typing import Any, Callable

from ..errors import EngineUnavailableError
from . import _engine_metrics as _metrics
from .records import Completion, CompletionRequest, CompletionResult

__all__ = ["Engine"]

log = logging.getLogger("rxpipe")


class Engine(ABC):
    """An inference backend with ``max_num_seqs`` sequence slots.

    ``running`` sequences are being stepped (or parked without credit); ``waiting`` ones were
    admitted but have not started (no token budget or no slot yet). ``free_slots`` =
    ``max_num_seqs - running - waiting`` is what the executor asks upstream for (DESIGN §4).

    Writing an engine: implement :meth:`start` (serve one admitted Completion: ``push`` its
    text, ``finish`` or ``fail`` it) and the ``running`` / ``waiting`` counts; override
    :meth:`cancel_completion` (and, for streamed requests, :meth:`credit_granted`), the two
    hooks a :class:`~rxpipe.engines.Completion` calls back; call :meth:`notify_capacity`
    whenever ``free_slots`` grew. Optional: :meth:`prepare` (check or map a request before it is
    admitted), :meth:`bind_loop` (the engine moves to an event loop), ``available`` with
    :attr:`unavailable_reason`, :meth:`aclose`. :meth:`submit` itself is written once, here
    (a template method): every engine admits requests, refuses them and answers a cancelled or
    expired one the same way. The manual's "Write your own engine" (docs/tutorials/engine.md) has a complete one.

    Anchors: vLLM's engine core (``add_request`` ↔ :meth:`start`, ``abort_request`` ↔
    :meth:`cancel_completion`, ``max_num_seqs``); the template method of Gamma et al.

    ``name`` is the value of the ``engine`` label on the engine's metric series (DESIGN §7);
    it defaults to the model id: set it to tell replicas of one model apart.
    """

    model: str
    max_num_seqs: int
    name: str

    def __init__(self, *, model: str, max_num_seqs: int) -> None:
        if isinstance(max_num_seqs, bool) or not isinstance(max_num_seqs, int) or max_num_seqs < 1:
            raise ValueError(f"max_num_seqs must be an int >= 1 sequences, got {max_num_seqs!r}")
        self.model = model
        self.name = model
        self.max_num_seqs = max_num_seqs
        self._capacity_listeners: list[Callable[[], None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: int | None = None  # the thread running self._loop
        _metrics.register(self)

    @property
    @abstractmethod
    def running(self) -> int:
        """Sequences holding a slot and started (stepped, or parked without credit)."""

    @property
    @abstractmethod
    def waiting(self) -> int:
        """Sequences admitted but not started yet."""

    @property
    def free_slots(self) -> int:
        """``max_num_seqs - running - waiting`` (never below 0)."""
        free = self.max_num_seqs - self.running - self.waiting
        return free if free > 0 else 0

    @property
    def available(self) -> bool:
        """False while the engine cannot take work (down, closed, circuit open): the gateway
        answers 503 and :meth:`submit` raises ``EngineUnavailableError``."""
        return True

    @property
    def unavailable_reason(self) -> str:
        """Why :attr:`available` is False, the end of ``EngineUnavailableError``'s message
        ("engine 'm' is <reason>"): e.g. ``"closed"``, ``"down"``. Default ``"unavailable"``."""
        return "unavailable"

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop the engine serves on: bound by :meth:`submit` (the running loop), None
        before the first submission. Engines schedule their work on it (``loop.time()``,
        ``loop.call_at``), so the test kit's virtual clock drives them exactly."""
        return self._loop

    def submit(self, request: CompletionRequest) -> Completion:
        """Admit ``request`` and return its :class:`~rxpipe.engines.Completion` at once.

        The same for every engine (a template method; engines implement :meth:`start`), in order:

        1. not :attr:`available` → ``EngineUnavailableError`` ("engine 'm' is
           <:attr:`unavailable_reason`>");
        2. ``request.completion`` already set → ValueError (a request is submitted once);
        3. :meth:`prepare` (the engine's checks: what it raises reaches the caller);
        4. the engine binds to the running event loop (:attr:`loop`; :meth:`bind_loop` when it
           is a new one; RuntimeError without a running loop);
        5. ``request.arrival_s`` = ``loop.time()`` if None; a new Completion is set as
           ``request.completion``;
        6. a request already cancelled (``request.cancelled``), or past its ``deadline_s``
           (seconds, loop clock), gets its Completion finished at once with reason
           ``"cancelled"`` / ``"deadline"``: no text, 0 completion tokens, ``ttft_s`` None,
           ``queue_time_s`` = ``e2e_s`` = now − ``arrival_s``; it never reaches :meth:`start`
           and uses no slot;
        7. else :meth:`start` ``(completion, now_s)``.

        A refusal in steps 1-4 leaves the request untouched (it can be submitted again).
        Must be called on the event loop's thread.
        """
        if not self.available:
            raise EngineUnavailableError(f"engine {self.model!r} is {self.unavailable_reason}")
        if request.completion is not None:
            raise ValueError(f"request {request.id} was already submitted")
        prepared = self.prepare(request)
        loop = self._loop
        # Fast path, once bound: our loop runs in this thread, so it is the running loop (one per
        # thread). Not asyncio.get_running_loop(): on CPython 3.11 it makes a getpid() system
        # call each time (its fork check), a few µs per request in a VM. (A loop running in
        # another thread is not ours to use: _bind checks.)
        if loop is None or self._thread != threading.get_ident() or not loop.is_running():
            loop = self._bind()
        now = loop.time()
        arrival = request.arrival_s
        if arrival is None:
            arrival = request.arrival_s = now
        completion = Completion(request, self, loop)
        request.completion = completion
        if request.cancelled or (request.deadline_s is not None and now > request.deadline_s):
            completion.finish(CompletionResult("", "cancelled" if request.cancelled else "deadline",
                                               request.prompt_tokens, 0, now - arrival, None, now - arrival))
            return completion
        if prepared is not None:
            completion.engine_state = prepared
        self.start(completion, now)
        return completion

    def _bind(self) -> asyncio.AbstractEventLoop:
        """The slow path of :meth:`submit`'s binding: the running loop, accepted by :meth:`bind_loop`."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self.bind_loop(loop)
            self._loop = loop
        self._thread = threading.get_ident()
        return loop

    @abstractmethod
    def start(self, completion: Completion, now_s: float) -> None:
        """Hook: serve ``completion``, just admitted by :meth:`submit` (the one method to write).

        ``now_s`` is the admission time (``loop.time()``, seconds); ``completion.request`` is
        the request (``arrival_s`` set); ``completion.engine_state`` is what :meth:`prepare`
        returned (None by default): replace it with the engine's own per-request state.
        The request holds a slot from here: count it in ``waiting`` or ``running`` until it
        ends. Deliver text with ``completion.push(text, tokens)`` (with ``request.stream``, only
        while ``completion.credit`` > 0; :meth:`credit_granted` says when credit came), end with
        ``completion.finish(CompletionResult(...))`` or ``completion.fail(error)`` (an
        ``EngineError``: ``await result`` raises it), then free the slot and call
        :meth:`notify_capacity`. Called on the loop's thread; it must not raise (refuse requests
        in :meth:`prepare`) and must not block (run blocking work in a thread).
        """

    def prepare(self, request: CompletionRequest) -> Any:
        """Hook: check or map ``request`` before it is admitted; the default returns None.

        Raise (ValueError for a request this engine cannot serve) to refuse it: the caller of
        :meth:`submit` gets the exception and the request stays unsubmitted (no Completion, no
        ``arrival_s``). A value other than None becomes ``completion.engine_state`` when
        :meth:`start` is called (e.g. the request's input, mapped once). Runs before the engine
        binds to the loop, also for a request that then finishes at once (cancelled, past its
        deadline).
        """
        return None

    def bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Hook: the engine is about to serve on ``loop``, the running loop of a :meth:`submit`:
        its first, or the first on another loop than :attr:`loop` (still the old one here).

        The default refuses to move while work is in flight (``running`` or ``waiting``):
        RuntimeError, nothing admitted. Override it to drop timers set on the old loop (after
        ``super().bind_loop(loop)``), to open loop-bound resources (an HTTP session), or to refuse
        any move; what it raises reaches the caller of :meth:`submit`.
        """
        if self._loop is not None and (self.running or self.waiting):
            raise RuntimeError(f"this {type(self).__name__} has work in flight on another event loop")

    def add_capacity_listener(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` whenever ``free_slots`` grew (or the engine became available).

        Called from the engine's own callbacks on the event loop, once per step at most (not
        per sequence); the executor requests more from upstream in it.
        """
        self._capacity_listeners.append(callback)

    def remove_capacity_listener(self, callback: Callable[[], None]) -> None:
        """Stop calling ``callback`` (no-op if it is not registered)."""
        try:
            self._capacity_listeners.remove(callback)
        except ValueError:
            pass

    def notify_capacity(self) -> None:
        """Tell the capacity listeners that ``free_slots`` grew (or the engine became available).

        For engines: call it after sequences ended and freed their slots (once per step or
        callback, not per sequence: each call makes the executor re-read ``free_slots`` and ask
        upstream for that many). A listener that raises is logged and the others still run.
        """
        for callback in tuple(self._capacity_listeners):
            try:
                callback()
            except Exception:
                log.exception("engine %s: capacity listener %r raised", self.model, callback)

    def cancel_completion(self, completion: Completion) -> None:
        """Hook: ``completion.cancel()`` was called (the client is gone); the default does nothing.

        Called once per completion, on the loop's thread, only while it is not done. An engine
        stops the sequence, finishes it ``"cancelled"`` (``completion.finish``) and frees its slot
        (then :meth:`notify_capacity`), at once or within one engine step (DESIGN §4).
        """
        return None

    def credit_granted(self, completion: Completion) -> None:
        """Hook: the token consumer of ``completion`` called ``request(n)``; the default does nothing.

        ``completion.credit`` is the new window (chunks). An engine that stops stepping a
        streamed sequence (``request.stream``) while it has no credit resumes it here. Called on
        the loop's thread, only while the completion is not done.
        """
        return None

    async def aclose(self) -> None:
        """Release the engine; unfinished completions end (how is up to the engine)."""
        return None

    def __repr__(self) -> str:
        return (f"<{type(self).__name__} {self.model} running={self.running} waiting={self.waiting} "
                f"max_num_seqs={self.max_num_seqs}>")
