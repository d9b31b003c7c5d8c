"""Ack handles: what a worker does with one delivered request once it is done with it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from ..serving import CompletionRequest
from ._interface import Delivery

__all__ = ["AckHandle", "RemoteRequest"]

_PENDING, _ACKED, _RELEASED = 0, 1, 2


class _Owner(Protocol):
    def _ack(self, handle: AckHandle) -> None: ...

    def _requeue(self, handle: AckHandle) -> None: ...

    def _release(self, handle: AckHandle) -> None: ...


class AckHandle:
    """One request delivered to this worker and not yet settled (a Redis pending entry, a NATS
    message awaiting its ack).

    Exactly one of:
    - :meth:`ack`: processing finished (its reply is written): the broker forgets it (Redis
      ``XACK``, NATS ``+ACK``).
    - :meth:`requeue`: run it again here (the engine was unavailable); it stays ours.
    - :meth:`release`: give it up without an ack (the worker is stopping); the broker delivers it
      to another worker once it has been idle ``visibility_timeout_s``.

    Later calls are no-ops. ``delivery`` is the adapter's :class:`~rxpipe.transport.Delivery`;
    ``attempts`` counts local runs.
    """

    __slots__ = ("delivery", "attempts", "request_id", "_owner", "_state")

    def __init__(self, delivery: Delivery, owner: _Owner) -> None:
        self.delivery = delivery
        #: the id of the request it carries (None until decoded)
        self.request_id: str | None = None
        self.attempts = 1
        self._owner = owner
        self._state = _PENDING

    @property
    def key(self) -> object:
        return self.delivery.key

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
        return f"<AckHandle {self.delivery.key!r} state={self._state} attempts={self.attempts}>"


@dataclass(eq=False)
class RemoteRequest(CompletionRequest):
    """A :class:`~rxpipe.engines.CompletionRequest` read from the broker: ``ack`` is its
    :class:`AckHandle`, ``reply_to`` the reply channel of the gateway waiting for it;
    ``client_gone``: its gateway said the client left (the answer is not wanted: it is
    acknowledged, not run elsewhere); ``cancelled_at_s``: the broker time of that cancel;
    ``cancelled_where``: where it was then (``"unread"``, ``"queued"`` on the worker, ``"running"``
    in its engine);
    ``credit``: the first credit window of a streamed request (chunks; None: no credit, the
    engine's pace)."""

    reply_to: str = ""
    ack: AckHandle | None = field(default=None, repr=False)
    credit: int | None = None
    client_gone: bool = field(default=False, repr=False)
    cancelled_at_s: float | None = field(default=None, repr=False)
    cancelled_where: str | None = field(default=None, repr=False)
