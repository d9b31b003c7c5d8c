"""``fair_queue``: a bounded queue with per-tenant shares, priority bands and VTC order (DESIGN §5).

State of one subscription (a small state machine, handlers: upstream item, downstream request,
upstream terminal, cancel):

- ``bands``: priority → :class:`_Band`; a band holds one :class:`_Flow` per tenant (the flow key
  is (priority, tenant), as the Kubernetes inference gateway keys flows). A flow is *active*
  while it holds items.
- Virtual Token Counter (Sheng et al., OSDI 2024, weighted variant): a flow's ``counter`` grows by
  ``cost / weight`` when one of its items is dispatched (``cost`` estimates input + 2 × output
  tokens; :meth:`FairQueueSubscription.reconcile` corrects it at completion). Within the highest
  band that holds items, the active flow with the lowest counter is served (ties: the flow that
  became active first). A flow becoming active is lifted to the minimum counter of the band's
  active flows, or, if none is active, to the counter of the last flow that left the band, so
  idle time earns no credit.
- Shares: ``share[t] = floor(capacity × w[t] / Σw)`` for the tenants named in ``weight``;
  ``reserved`` = Σ over tenants of their unused share, ``max(0, share[t] − held[t])``.
  An item for ``t`` fits iff ``held[t] < share[t]`` (its own reserved room) or
  ``total + 1 + reserved <= capacity`` (room in the shared pool that leaves every other tenant's
  unused share free). Invariant: ``total + reserved <= capacity``, hence ``total <= capacity``.
- Departure: an item leaves when dispatched downstream, or, if the ``departure`` hook took it
  (e.g. an HTTP request, which departs when it starts on the engine), when the hook calls back.
  ``held[t]`` and ``occupied`` count items of ``t`` / all items received and not departed
  (queued, or dispatched and not departed: ``dispatched``); ``total`` counts the queued ones.
  Shares and the pool are judged on ``held`` and ``occupied``, so items a ``batch`` behind the
  queue holds still take their tenant's place. An item whose hook calls back while it is still
  queued (its client left) is withdrawn from its flow at once.
- Upstream demand: ``capacity`` at subscribe, then one more per item that departed (or was
  refused on arrival). Invariant: ``occupied + upstream_outstanding <= capacity``.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Hashable, Mapping
from fractions import Fraction
from typing import Any

# ---------------------------------------------------------------------------------------------------
from rxpipe._protocol import Subscriber
from rxpipe.flowable import Flowable
from rxpipe.metrics import StageStatistics

# -- the stage-writing kit: the downstream drain subscription, the upstream link, drop-and-tell ------
from rxpipe.stage import LINK_SLOTS, DrainSubscription, UpstreamLink, discard, discard_all

from ._admission import AdmissionQueue

__all__ = ["FairQueueFlowable", "FairQueueSubscription", "TENANT_FULL"]

#: drop reason (metric label, ``on_discard`` argument) of an item refused because its tenant had
#: no room: it arrived within ``request(n)`` from an upstream that did not ask ``room_for``.
TENANT_FULL = "tenant_full"


class _Flow:
    """One tenant's FIFO within one band, and its virtual token counter (tokens / weight)."""

    __slots__ = ("tenant", "weight", "items", "counter")

    def __init__(self, tenant: Hashable, weight: float) -> None:
        self.tenant = tenant
        self.weight = weight
        self.items: deque[tuple[Any, float, bool]] = deque()  # (item, estimated cost, tracked by the hook)
        self.counter = 0.0


class _Band:
    """One priority band: its flows, the active ones (insertion order = activation order) and
    the counter of the last flow that left it (the lift for a flow arriving in an idle band)."""

    __slots__ = ("flows", "active", "floor")

    def __init__(self) -> None:
        self.flows: dict[Hashable, _Flow] = {}
        self.active: dict[Hashable, _Flow] = {}
        self.floor = 0.0


def _one(_: Any) -> float:
    return 1.0


def _none(_: Any) -> None:
    return None


def _zero(_: Any) -> int:
    return 0


#: a ``dispatched`` lookup miss (None is a valid tenant)
_MISSING = object()


class FairQueueSubscription(DrainSubscription, UpstreamLink, AdmissionQueue):
    """Subscriber to upstream, subscription to downstream, and the per-tenant admission
    extension for upstream (:meth:`room_for`, :meth:`demand_for`) plus the completion hook
    (:meth:`reconcile`). See ``ops.fair_queue`` for the contract."""

    __slots__ = (*LINK_SLOTS, "capacity", "tenant_of", "cost_of", "priority_of", "weights", "shares", "held",
                 "total", "reserved", "bands", "active_bands", "received", "due", "prefetch_due", "finished", "error",
                 "departure", "occupied", "dispatched", "_departed")

    def __init__(self, downstream: Subscriber[Any], capacity: int, tenant: Callable[[Any], Hashable] | None,
                 weight: Mapping[Hashable, float] | None, cost: Callable[[Any], float] | None,
                 priority: Callable[[Any], int] | None, name: str,
                 departure: Callable[[Any, Callable[[Any], None]], bool] | None = None) -> None:
        super().__init__(downstream)
        self.departure = departure
        #: received and not departed (queued, or dispatched and not departed)
        self.occupied = 0
        #: id(item) → tenant of dispatched items whose departure hook has not called back yet
        self.dispatched: dict[int, Hashable] = {}
        self._departed = self._on_departure  # bound once
        self.capacity = capacity
        self.tenant_of = tenant or _none
        self.cost_of = cost or _one
        self.priority_of = priority or _zero
        self.weights: dict[Hashable, float] = {}
        self.shares: dict[Hashable, int] = {}
        self.held: dict[Hashable, int] = {}
        self.total = 0
        self.reserved = 0
        self.bands: dict[int, _Band] = {}
        self.active_bands: set[int] = set()
        self.received = 0
        #: items that left (dispatched or refused) and are not yet asked for again upstream
        self.due = 0
        self.prefetch_due = False
        self.finished = False
        self.error: BaseException | None = None
        self.set_weights(weight or {})
        self.link_upstream(name)

    # -- the admission extension (asked by an upstream that knows it, e.g. the HTTP edge) -------
    def fits(self, tenant: Hashable) -> bool:
        """An item for ``tenant`` would be kept (its share or the shared pool has room)."""
        occupied = self.occupied
        if occupied >= self.capacity:
            return False
        if self.held.get(tenant, 0) < self.shares.get(tenant, 0):
            return True
        return occupied + 1 + self.reserved <= self.capacity

    def room_for(self, tenant: Hashable) -> bool:
        """True iff an item for ``tenant`` emitted now is kept: there is outstanding demand and
        the tenant's share or the shared pool has room. A synchronous question on the loop: the
        answer holds until the next signal."""
        if self.cancelled or self.upstream_outstanding <= 0:  # 0 once upstream is done
            return False
        return self.fits(tenant)

    def demand_for(self, tenant: Hashable) -> int:
        """How many items for ``tenant`` in a row would be kept now (items; <= the outstanding
        demand): its unused share plus the free shared pool."""
        if self.cancelled or self.upstream_done:
            return 0
        outstanding = self.upstream_outstanding
        own = max(0, self.shares.get(tenant, 0) - self.held.get(tenant, 0))
        pool = max(0, self.capacity - self.occupied - self.reserved)
        return max(0, min(outstanding, own + pool, self.capacity - self.occupied))

    def reconcile(self, item: Any, actual_cost: float) -> None:
        """Completion hook: correct the counter of ``item``'s flow by ``(actual_cost −
        cost(item)) / weight`` (tokens; VTC's input + 2 × output with the real output count).
        ``tenant``, ``priority`` and ``cost`` are called again, so they must be pure functions of
        the item; an exception they raise propagates to the caller. Unknown flow: no-op."""
        band = self.bands.get(self.priority_of(item))
        flow = band.flows.get(self.tenant_of(item)) if band is not None else None
        if flow is not None:
            flow.counter += (float(actual_cost) - float(self.cost_of(item))) / flow.weight

    def set_weights(self, weight: Mapping[Any, float]) -> None:
        """Replace the weights (a tenants-file reload): shares are recomputed; a tenant now over
        its share keeps what it holds and gets no new room until it is under it again."""
        for tenant, w in weight.items():
            if isinstance(w, bool) or not isinstance(w, (int, float)) or not 0 < w < float("inf"):
                raise ValueError(f"fair_queue(weight=) needs finite weights > 0, got {w!r} for tenant {tenant!r}")
        self.weights = {t: float(w) for t, w in weight.items()}
        # floor(capacity × weight / Σ weights), exactly: in floats, capacity × weight and the sum
        # overflow to inf for weights near the largest finite float (inf // inf is nan).
        total_weight = sum(Fraction(w) for w in self.weights.values())
        self.shares = {t: math.floor(self.capacity * Fraction(w) / total_weight) for t, w in self.weights.items()}
        self.reserved = sum(max(0, s - self.held.get(t, 0)) for t, s in self.shares.items())
        for band in self.bands.values():
            for tenant, flow in band.flows.items():
                flow.weight = self.weights.get(tenant, 1.0)

    # -- upstream signals ----------------------------------------------------------------------
    def _upstream_ready(self) -> None:
        self.prefetch_due = True
        self.drain()  # the first request is made from inside the drain loop

    def on_next(self, item: Any) -> None:
        # accept(): late items are ignored (§3.12); an overrun (§1.1) drops-and-tells what is
        # held and this item, cancels upstream and fails the stage (UpstreamLink's rule)
        if not self.accept(item):
            return
        self.received += 1
        try:
            tenant = self.tenant_of(item)
            priority = self.priority_of(item)
            cost = self.cost_of(item)
            if isinstance(cost, bool) or not isinstance(cost, (int, float)) or not 0 <= cost < float("inf"):
                raise ValueError(f"fair_queue cost must be a finite number >= 0 (tokens), got {cost!r}")
            if type(priority) is not int:
                raise TypeError(f"fair_queue priority must be an int, got {priority!r}")
            keep = self.fits(tenant)  # raises TypeError for an unhashable tenant
        except Exception as exc:
            self._fail_holding(item, exc)
            return
        if keep:
            self._enqueue(tenant, priority, item, float(cost))
        else:
            # Within request(n) (§1.1 holds), but kept it would take another tenant's reserved
            # room: shed it with a tell, as drop_incoming does, and ask for one more in its place.
            self.counters.drop(TENANT_FULL)
            discard(item, TENANT_FULL)
            self.due += 1
        self.drain()

    def _upstream_finished(self, error: BaseException | None) -> None:
        self.error = error  # delivered after the held items, as buffer does
        self.finished = True
        self.drain()

    def _held_items(self) -> list[Any]:
        return [entry[0] for band in self.bands.values() for flow in band.active.values() for entry in flow.items]

    def _upstream_overrun(self, error: BaseException) -> None:
        self._clear()
        self.fail(error)

    # -- queue ---------------------------------------------------------------------------------
    def _enqueue(self, tenant: Hashable, priority: int, item: Any, cost: float) -> None:
        band = self.bands.get(priority)
        if band is None:
            band = self.bands[priority] = _Band()
        flow = band.flows.get(tenant)
        if flow is None:
            flow = band.flows[tenant] = _Flow(tenant, self.weights.get(tenant, 1.0))
        if not flow.items:  # becoming active: lift (VTC), so idle time earns no credit
            active = band.active
            lift = min(f.counter for f in active.values()) if active else band.floor
            if flow.counter < lift:
                flow.counter = lift
            active[tenant] = flow
            self.active_bands.add(priority)
        departure = self.departure
        tracked = departure is not None and departure(item, self._departed)
        flow.items.append((item, cost, tracked))
        held = self.held.get(tenant, 0)
        if held < self.shares.get(tenant, 0):
            self.reserved -= 1
        self.held[tenant] = held + 1
        self.total += 1
        self.occupied += 1

    def _pop(self) -> tuple[Any, bool]:
        """The next item by band and VTC, charged to its flow; (item, tracked by the hook)."""
        priority = max(self.active_bands)  # strict bands: the highest holding items
        band = self.bands[priority]
        flow = min(band.active.values(), key=_counter)  # first minimum: earliest activated
        item, cost, tracked = flow.items.popleft()
        flow.counter += cost / flow.weight
        if not flow.items:
            self._deactivate(band, flow, priority)
        self.total -= 1
        if tracked:
            self.dispatched[id(item)] = flow.tenant  # departs when the hook calls back
        else:
            self._vacate(flow.tenant)
        return item, tracked

    def _deactivate(self, band: _Band, flow: _Flow, priority: int) -> None:
        del band.active[flow.tenant]
        if not band.active:
            band.floor = flow.counter
            self.active_bands.discard(priority)

    def _vacate(self, tenant: Hashable) -> None:
        """One item of ``tenant`` departed: its place is free again."""
        held = self.held[tenant] - 1
        if held:
            self.held[tenant] = held
        else:
            del self.held[tenant]
        if held < self.shares.get(tenant, 0):
            self.reserved += 1
        self.occupied -= 1

    def _on_departure(self, item: Any) -> None:
        # Called by the departure hook, possibly from inside our own on_next call downstream
        # (the executor started the item): the drain below is then folded into the running pass.
        # Ignored once this stage was cancelled or cut off from upstream (failing: what it held
        # is being told); after upstream merely completed, departures still free places.
        if self.cancelled or (self.upstream_done and not self.finished):
            return
        tenant = self.dispatched.pop(id(item), _MISSING)
        if tenant is _MISSING:
            if not self._withdraw(item):
                return  # not held any more
            self.counters.drop("cancelled")
        else:
            self._vacate(tenant)
        self.due += 1
        self.drain()

    def _withdraw(self, item: Any) -> bool:
        """Remove a still-queued ``item`` (its client left): no VTC charge, its place freed."""
        priority = self.priority_of(item)
        band = self.bands.get(priority)
        flow = band.active.get(self.tenant_of(item)) if band is not None else None
        if band is None or flow is None:
            return False
        for index, entry in enumerate(flow.items):
            if entry[0] is item:
                del flow.items[index]
                break
        else:
            return False
        if not flow.items:
            self._deactivate(band, flow, priority)
        self.total -= 1
        self._vacate(flow.tenant)
        return True

    def _drain(self) -> None:
        if self.prefetch_due:
            self.prefetch_due = False
            self.request_upstream(self.capacity)
        r = self.requested
        e = 0
        if r and self.total:
            on_next = self.downstream.on_next
            # Invariant: e items delivered in this pass, e <= r; demand added meanwhile is
            # picked up by the next pass (the loop was marked missed).
            plain = 0
            while e != r and self.total:
                item, tracked = self._pop()
                if not tracked:
                    plain += 1
                on_next(item)
                e += 1
                if self.cancelled:
                    break
            self._delivered(e, r)
            self.due += plain  # tracked items ask for one more when the hook calls back
            self.counters.items_in = self.received
            self.counters.items_out = self.emitted
            if self.cancelled:
                return
        due = self.due
        if due and not self.upstream_done:
            self.due = 0
            self.request_upstream(due)  # one more per item gone
        if not self.total and self.finished:
            if self.error is not None:
                self._error(self.error)
            else:
                self._complete()

    # -- failure and release -------------------------------------------------------------------
    def _fail_holding(self, item: Any, error: BaseException) -> None:
        """Fail the stage: tell ``item`` and every held item (``"error"``), cancel upstream."""
        if self.upstream_done or self.cancelled:
            return
        self.cancel_upstream()
        discard_all((*self._held_items(), item), "error", self.counters)
        self._clear()
        self.fail(error)

    def _clear(self) -> None:
        for band in self.bands.values():
            for flow in band.active.values():
                flow.items.clear()
            band.active.clear()
        self.active_bands.clear()
        self.held.clear()
        self.dispatched.clear()
        self.total = 0
        self.occupied = 0
        self.reserved = sum(self.shares.values())

    def _release(self) -> None:
        self.cancel_upstream()
        self._clear()
        self.counters.items_in = self.received
        self.counters.items_out = self.emitted

    # -- introspection -------------------------------------------------------------------------
    def statistics(self) -> StageStatistics:
        """Demand (items), items held, capacity, items in/out, drops by reason."""
        counters = self.counters
        return StageStatistics(counters.stage, self.requested, self.total, self.capacity, self.received,
                               self.emitted, dict(counters.dropped))

    def virtual_token_counters(self, priority: int = 0) -> dict[Hashable, float]:
        """tenant → virtual token counter (tokens / weight) of the flows in band ``priority``."""
        band = self.bands.get(priority)
        return {} if band is None else {t: f.counter for t, f in band.flows.items()}


def _counter(flow: _Flow) -> float:
    return flow.counter


class FairQueueFlowable(Flowable[Any]):
    """The stage ``fair_queue(capacity, tenant=, weight=, cost=, priority=)``."""

    kind = "fair_queue"

    def __init__(self, source: Flowable[Any], capacity: int, tenant: Callable[[Any], Hashable] | None,
                 weight: Mapping[Hashable, float] | None, cost: Callable[[Any], float] | None,
                 priority: Callable[[Any], int] | None, name: str | None,
                 departure: Callable[[Any, Callable[[Any], None]], bool] | None = None) -> None:
        super().__init__(name=name, upstreams=(source,))
        self.departure = departure
        self.source = source
        self.capacity = capacity
        self.tenant = tenant
        self.weight = dict(weight) if weight is not None else None
        self.cost = cost
        self.priority = priority

    def _subscribe(self, subscriber: Subscriber[Any]) -> None:
        self.source._subscribe(FairQueueSubscription(subscriber, self.capacity, self.tenant, self.weight,
                                                     self.cost, self.priority, self.name, self.departure))
