"""Per-tenant metrics (DESIGN §7): ``rxpipe_tenant_*{tenant}``, configured names only.

Series: ``rxpipe_tenant_admitted_total{tenant}``, ``rxpipe_tenant_refused_total{tenant,reason}``,
``rxpipe_tenant_tokens_total{tenant,direction="in"|"out"}`` (prompt / completion tokens) and
``rxpipe_tenant_queue_wait_seconds{tenant}`` (admission to engine start, 5 ms – 60 s buckets).
The ``tenant`` label is a configured tenant name (``default`` included) or ``other``; every
series of a configured tenant and known reason exists at 0 from the start (Prometheus: avoid
missing metrics). Children are resolved once per tenant, so counting costs no labelled lookup.
"""

from __future__ import annotations

from collections.abc import Iterable

from .._loop_metrics import LoopCounter, LoopHistogram
from ._metrics import LATENCY_BUCKETS_S
from ._tenants import OTHER_LABEL

__all__ = ["REFUSAL_REASONS", "TENANT_ADMITTED", "TENANT_QUEUE_WAIT", "TENANT_REFUSED", "TENANT_TOKENS",
           "TenantMetrics"]

#: refusal reasons of the edge (DESIGN §5); each exists at 0 for every configured tenant
REFUSAL_REASONS = ("queue_full", "rate_limited", "deadline", "unavailable", "draining")

TENANT_ADMITTED = LoopCounter("rxpipe_tenant_admitted", "Requests admitted into the graph, by tenant.", ["tenant"])
TENANT_REFUSED = LoopCounter("rxpipe_tenant_refused", "Requests refused at the edge, by tenant and reason.",
                         ["tenant", "reason"])
TENANT_TOKENS = LoopCounter("rxpipe_tenant_tokens", "Tokens processed, by tenant; direction in = prompt, "
                        "out = completion.", ["tenant", "direction"])
TENANT_QUEUE_WAIT = LoopHistogram("rxpipe_tenant_queue_wait_seconds",
                              "Time from admission to the engine starting the request (seconds), by tenant.",
                              ["tenant"], buckets=LATENCY_BUCKETS_S)


class _Children:
    __slots__ = ("admitted", "refused", "tokens_in", "tokens_out", "queue_wait")

    def __init__(self, label: str) -> None:
        self.admitted = TENANT_ADMITTED.labels(tenant=label)
        self.refused = {reason: TENANT_REFUSED.labels(tenant=label, reason=reason) for reason in REFUSAL_REASONS}
        self.tokens_in = TENANT_TOKENS.labels(tenant=label, direction="in")
        self.tokens_out = TENANT_TOKENS.labels(tenant=label, direction="out")
        self.queue_wait = TENANT_QUEUE_WAIT.labels(tenant=label)


class TenantMetrics:
    """Counts per tenant for the edge. ``names``: the configured tenant names (e.g. a
    :class:`~rxpipe.gateway._tenants.Tenants`); any other name is counted as ``other``.
    :meth:`reconfigure` after a reload adds the new names (series of removed names keep their
    totals: a counter never goes back)."""

    __slots__ = ("_children", "_other")

    def __init__(self, names: Iterable[str]) -> None:
        self._other = _Children(OTHER_LABEL)
        self._children: dict[str, _Children] = {}
        self.reconfigure(names)

    def reconfigure(self, names: Iterable[str]) -> None:
        """Use these configured names from now on."""
        self._children = {name: self._children.get(name) or _Children(name) for name in names}

    def _of(self, tenant: str) -> _Children:
        return self._children.get(tenant, self._other)

    def admitted(self, tenant: str) -> None:
        self._of(tenant).admitted.inc()

    def refused(self, tenant: str, reason: str) -> None:
        """Count a refusal; ``reason`` is one of :data:`REFUSAL_REASONS` (ValueError otherwise:
        label values come from a bounded set)."""
        child = self._of(tenant).refused.get(reason)
        if child is None:
            raise ValueError(f"unknown refusal reason {reason!r}; known: {', '.join(REFUSAL_REASONS)}")
        child.inc()

    def tokens(self, tenant: str, prompt_tokens: int, completion_tokens: int) -> None:
        """Tokens of a finished request (counts, >= 0)."""
        children = self._of(tenant)
        children.tokens_in.inc(prompt_tokens)
        children.tokens_out.inc(completion_tokens)

    def queue_wait(self, tenant: str, seconds: float) -> None:
        """Time from admission to the engine starting the request (seconds)."""
        self._of(tenant).queue_wait.observe(seconds)
