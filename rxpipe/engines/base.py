"""The engine interface the executor stage drives (DESIGN §4)."""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from typing import Callable

from . import _metrics
from .records import Completion, CompletionRequest

__all__ = ["Engine"]

log = logging.getLogger("rxpipe")


class Engine(ABC):
    """An inference backend with ``max_num_seqs`` sequence slots.

    ``running`` sequences are being stepped (or parked without credit); ``waiting`` ones were
    admitted but have not started (no token budget or no slot yet). ``free_slots`` =
    ``max_num_seqs - running - waiting`` is what the executor asks upstream for (DESIGN §4).

    Subclasses implement :meth:`submit`, ``running``, ``waiting``, and the two hooks a
    :class:`~rxpipe.engines.Completion` calls back (:meth:`cancel_completion`,
    :meth:`credit_granted`); they call :meth:`notify_capacity` whenever ``free_slots`` grew.

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

    @abstractmethod
    def submit(self, request: CompletionRequest) -> Completion:
        """Admit ``request`` and return its :class:`~rxpipe.engines.Completion` at once.

        Sets ``request.completion`` (and ``request.arrival_s`` if None). Raises
        ``EngineUnavailableError`` when :attr:`available` is False.
        """

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
