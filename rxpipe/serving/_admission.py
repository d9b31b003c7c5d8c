"""The admission-queue protocol: what the queue right behind an HTTP edge answers per tenant (DESIGN §5).

An edge admits a request only while the graph has demand for it. With one tenant, the edge's own
demand counter says so. With many, the queue behind the edge (``ops.fair_queue``) holds a share
per tenant, so "is there demand?" becomes "is there room *for this tenant*?". The queue's
subscription declares that by being an :class:`AdmissionQueue`; the edge asks it synchronously,
then emits in the same step, so the answer still holds (Reactive Streams §1.1 is unchanged: an
upstream never emits more than was requested in total).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable, Mapping
from typing import Any

__all__ = ["AdmissionQueue"]


class AdmissionQueue(ABC):
    """A queue stage's subscription that answers per-tenant admission for its upstream.

    The edge (:class:`~rxpipe.gateway.Gateway`) reads the subscriber it emits to: when that is an
    ``AdmissionQueue`` it asks :meth:`room_for` before each emission and reports completions
    through :meth:`reconcile`; otherwise it uses plain ``request(n)`` demand. Both questions are
    synchronous calls on the loop thread whose answers hold until the next signal.
    """

    __slots__ = ()

    @abstractmethod
    def room_for(self, tenant: Hashable) -> bool:
        """True iff an item for ``tenant`` emitted now is kept (outstanding demand, and room in
        the tenant's share or the shared pool)."""

    @abstractmethod
    def demand_for(self, tenant: Hashable) -> int:
        """How many items for ``tenant`` in a row would be kept now (items, <= the outstanding
        demand)."""

    def reconcile(self, item: Any, actual_cost: float) -> None:
        """Completion hook: ``item`` really cost ``actual_cost`` (tokens). Default: nothing to
        correct."""
        return None

    def set_weights(self, weight: Mapping[Any, float]) -> None:
        """The tenants' weights changed (a tenants-file reload). Default: no shares to update."""
        return None
