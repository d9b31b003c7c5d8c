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
    :class:`~rxpipe.engines.Completion` calls back (:meth:`_cancel_completion`,
    :meth:`_credit_granted`); they call :meth:`_notify_capacity` whenever ``free_slots`` grew.

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

    def _notify_capacity(self) -> None:
        for callback in tuple(self._capacity_listeners):
            try:
                callback()
            except Exception:
                log.exception("engine %s: capacity listener %r raised", self.model, callback)

    def _cancel_completion(self, completion: Completion) -> None:
        """``completion.cancel()`` was called: stop it (hook for subclasses)."""
        return None

    def _credit_granted(self, completion: Completion) -> None:
        """The token consumer of ``completion`` requested more (hook for subclasses)."""
        return None

    async def aclose(self) -> None:
        """Release the engine; unfinished completions end (how is up to the engine)."""
        return None

    def __repr__(self) -> str:
        return (f"<{type(self).__name__} {self.model} running={self.running} waiting={self.waiting} "
                f"max_num_seqs={self.max_num_seqs}>")
