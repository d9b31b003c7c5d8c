"""Ack handles: what a worker does with one delivered stream entry once it is done with it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from ..engines import CompletionRequest

__all__ = ["AckHandle", "RemoteRequest"]

_PENDING, _ACKED, _RELEASED = 0, 1, 2


class _Owner(Protocol):
    def _ack(self, handle: AckHandle) -> None: ...

    def _requeue(self, handle: AckHandle) -> None: ...

    def _release(self, handle: AckHandle) -> None: ...


class AckHandle:
    """One entry delivered to this consumer (it is in the group's pending entries list, PEL).

    Exactly one of:
    - :meth:`ack`: processing finished (its reply is written): ``XACK`` (Redis ``XACK`` docs: the
      entry leaves the PEL; it is trimmed later).
    - :meth:`requeue`: run it again here (the engine was unavailable); it stays pending and ours.
    - :meth:`release`: give it up without ``XACK`` (the worker is stopping); another worker claims
      it (``XAUTOCLAIM``) once it has been idle ``visibility_timeout_s``.

    Later calls are no-ops. ``entry_id`` is the stream entry's id; ``attempts`` counts local runs.
    """

    __slots__ = ("entry_id", "fields", "attempts", "_owner", "_state")

    def __init__(self, entry_id: bytes, fields: dict[bytes, bytes], owner: _Owner) -> None:
        self.entry_id = entry_id
        self.fields = fields
        self.attempts = 1
        self._owner = owner
        self._state = _PENDING

    @property
    def settled(self) -> bool:
        return self._state != _PENDING

    def ack(self) -> None:
        if self._state == _PENDING:
            self._state = _ACKED
            self._owner._ack(self)

    def requeue(self) -> None:
        if self._state == _PENDING:
            self.attempts += 1
            self._owner._requeue(self)

    def release(self) -> None:
        if self._state == _PENDING:
            self._state = _RELEASED
            self._owner._release(self)

    def __repr__(self) -> str:
        return f"<AckHandle {self.entry_id!r} state={self._state} attempts={self.attempts}>"


@dataclass(eq=False)
class RemoteRequest(CompletionRequest):
    """A :class:`~rxpipe.engines.CompletionRequest` read from the stream: ``ack`` is its
    :class:`AckHandle`, ``reply_to`` the stream of the gateway waiting for it."""

    reply_to: str = ""
    ack: AckHandle | None = field(default=None, repr=False)
