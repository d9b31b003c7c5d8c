"""Per-tenant admission at the edge, edge-agnostic: tenant → room in the queue → quota (DESIGN §5).

One object holds the tenants, their quotas and their metrics, and answers the edge's per-request
questions as single synchronous calls, so the HTTP handler only has to call:

- :meth:`TenantGate.resolve` — who is calling (bearer key with auth, header without);
- :meth:`TenantGate.check` — room for this tenant in the queue (its
  :class:`~rxpipe.serving.AdmissionQueue` answer), then check-and-reserve of its quota. Call it
  and emit the request in the same synchronous step, so nothing runs in between;
- :meth:`TenantGate.cancel` — the request was refused further on or never started;
- :meth:`TenantGate.finish` — the request finished: quota and VTC reconciled, tokens counted;
- :meth:`TenantGate.reload` — SIGHUP: a new tenants file, or the old one stays in force.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ..serving import AdmissionQueue
from ._quota import Quotas, Reservation
from ._tenant_metrics import TenantMetrics
from ._tenants import Tenant, Tenants, TenantsFileError

__all__ = ["GateDecision", "TenantGate", "vtc_cost"]

log = logging.getLogger("rxpipe.gateway")


def vtc_cost(prompt_tokens: int, output_tokens: int) -> int:
    """The Virtual Token Counter's cost of a request (tokens): input + 2 × output (Sheng et al.,
    OSDI 2024, their default weights ``w_p = 1``, ``w_q = 2``). At dispatch ``output_tokens`` is
    ``max_tokens`` (an upper bound); at completion the real count reconciles it."""
    return prompt_tokens + 2 * output_tokens


class GateDecision:
    """The answer of :meth:`TenantGate.check`.

    tenant: the tenant's configured name. allowed: emit the request now.
    reason: ``"queue_full"`` (no room for this tenant) or ``"rate_limited"`` (its rpm/tpm), None
        if allowed. retry_after_s: for ``rate_limited``, seconds until the reservation fits (None:
        it never fits, the request alone exceeds the per-minute limit); for ``queue_full`` None
        (the edge estimates it from the drain rate). headers: ``x-ratelimit-*`` for every answer.
    reservation: what the quota reserved (hand it back to :meth:`cancel` / :meth:`finish`).
    """

    __slots__ = ("tenant", "allowed", "reason", "retry_after_s", "headers", "reservation")

    def __init__(self, tenant: str, allowed: bool, reason: str | None, retry_after_s: float | None,
                 headers: dict[str, str], reservation: Reservation | None) -> None:
        self.tenant = tenant
        self.allowed = allowed
        self.reason = reason
        self.retry_after_s = retry_after_s
        self.headers = headers
        self.reservation = reservation


class TenantGate:
    """Tenants, quotas and metrics of one edge.

    Args: tenants (a :class:`Tenants`); clock (seconds, ``loop.time``); auth (True when bearer
        keys are configured: the key names the tenant, the header is ignored).
    """

    __slots__ = ("tenants", "quotas", "metrics", "auth", "clock")

    def __init__(self, tenants: Tenants, clock: Callable[[], float], *, auth: bool) -> None:
        self.tenants = tenants
        self.clock = clock
        self.auth = auth
        self.quotas = Quotas(tenants, clock)
        self.metrics = TenantMetrics(tenants)

    def resolve(self, *, key: str | None = None, header: str | None = None) -> Tenant:
        """The caller's tenant (see :meth:`Tenants.resolve`)."""
        return self.tenants.resolve(key=key, header=header, auth=self.auth)

    def check(self, tenant: str, prompt_tokens: int, max_tokens: int, queue: AdmissionQueue) -> GateDecision:
        """Room for ``tenant`` in ``queue`` (what the edge emits to), then check-and-reserve of
        ``prompt_tokens + max_tokens`` in its quota; counts the refusal or the admission. A queue
        refusal reserves nothing."""
        if not queue.room_for(tenant):
            self.metrics.refused(tenant, "queue_full")
            return GateDecision(tenant, False, "queue_full", None, self.quotas.headers(tenant), None)
        decision = self.quotas.reserve(tenant, prompt_tokens, max_tokens)
        if not decision.allowed:
            self.metrics.refused(tenant, "rate_limited")
            return GateDecision(tenant, False, "rate_limited", decision.retry_after_s, decision.headers, None)
        self.metrics.admitted(tenant)
        return GateDecision(tenant, True, None, 0.0, decision.headers, decision.reservation)

    def cancel(self, decision: GateDecision) -> None:
        """The admitted request never ran (refused further on, client gone before the engine
        took it): its whole reservation goes back."""
        if decision.reservation is not None:
            self.quotas.release(decision.reservation)

    def started(self, decision: GateDecision, queue_wait_s: float) -> None:
        """The engine took the request ``queue_wait_s`` seconds after admission."""
        self.metrics.queue_wait(decision.tenant, queue_wait_s)

    def finish(self, decision: GateDecision, prompt_tokens: int, completion_tokens: int,
               queue: AdmissionQueue | None = None, item: Any = None) -> None:
        """The request finished with these real counts (tokens): the quota is reconciled, tokens
        counted, and, given the ``fair_queue`` stage and the item it queued, its VTC counter is
        reconciled with :func:`vtc_cost` of the real counts."""
        if decision.reservation is not None:
            self.quotas.reconcile(decision.reservation, prompt_tokens + completion_tokens)
        self.metrics.tokens(decision.tenant, prompt_tokens, completion_tokens)
        if queue is not None and item is not None:
            queue.reconcile(item, vtc_cost(prompt_tokens, completion_tokens))

    def reload(self, queue: AdmissionQueue | None = None) -> TenantsFileError | None:
        """SIGHUP: read the tenants file again. On success the new tenants, quotas (unchanged
        limits keep their level), metric names and the queue's weights (``set_weights``) take
        effect and None is returned; on error the old configuration stays in force, the error is
        logged and returned."""
        try:
            tenants = self.tenants.reload()
        except TenantsFileError as exc:
            log.error("tenants file not reloaded, the previous one stays in force: %s", exc)
            return exc
        self.tenants = tenants
        self.quotas = self.quotas.updated(tenants)
        self.metrics.reconfigure(tenants)
        if queue is not None:
            queue.set_weights(tenants.weights)
        return None
