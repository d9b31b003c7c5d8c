"""The tenants of one edge (DESIGN §5): who a caller is, the reservation their request holds, and
the reconciliation at its end; SIGHUP reloads the file.

The caller's tenant is the one listing its bearer key (auth on; a key of ``api_keys`` no tenant
lists: ``default``), else the ``x-rxpipe-tenant`` header (unknown: ``default``). Admission asks
the queue behind the edge whether it has room *for this tenant* (its
:class:`~rxpipe.serving.AdmissionQueue` answer), then reserves ``prompt_tokens + max_tokens`` of
the tenant's rpm/tpm quota, in the same synchronous step as the emission. At completion the quota
and the queue's Virtual Token Counter are reconciled with the real token counts; a request that
never started gives its reservation back.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from typing import Protocol

from ..serving import AdmissionQueue, Completion, CompletionRequest, CompletionResult
from ._keys import KeyRing
from ._tenant_gate import GateDecision, TenantGate
from ._tenants import Tenants, TenantsFileError

__all__ = ["Tenancy", "on_sighup"]

log = logging.getLogger("rxpipe.gateway")


class Tenancy:
    """Per-tenant admission state of one edge around its :class:`TenantGate`.

    Args: tenants_file (a JSON or TOML path, :class:`Tenants`). Raises
    :class:`~rxpipe.gateway.TenantsFileError` for a bad file. The gate's clock is
    ``time.monotonic``: it is built before any loop runs and only compares its own readings.
    """

    __slots__ = ("gate", "file", "_decisions")

    def __init__(self, tenants_file: str) -> None:
        self.file = tenants_file
        self.gate = TenantGate(Tenants.load(tenants_file), time.monotonic, auth=False)
        #: admitted requests whose reservation is not settled yet
        self._decisions: dict[CompletionRequest, GateDecision] = {}

    @property
    def tenants(self) -> Tenants:
        return self.gate.tenants

    def tenant_of(self, keys: KeyRing, key_id: str, header: str | None) -> str:
        """The caller's tenant name. ``key_id``: what :meth:`KeyRing.authenticate` returned;
        ``header``: the ``x-rxpipe-tenant`` value (used only when authentication is off)."""
        gate = self.gate
        if gate.auth:
            return keys.tenant_of(key_id) or gate.tenants.default.name
        return gate.resolve(header=header).name

    def priority(self, tenant: str | None) -> int:
        """The priority band of ``tenant`` (higher first; 0 for no or an unknown tenant)."""
        configured = self.gate.tenants.get(tenant) if tenant is not None else None
        return configured.priority if configured is not None else 0

    def headers(self, tenant: str | None) -> dict[str, str]:
        """``x-ratelimit-*`` of ``tenant`` now (empty: no tenant, or no limits)."""
        return self.gate.quotas.headers(tenant) if tenant is not None else {}

    def admitted_headers(self, request: CompletionRequest) -> dict[str, str]:
        """``x-ratelimit-*`` as of ``request``'s admission."""
        decision = self._decisions.get(request)
        return decision.headers if decision is not None else self.headers(request.tenant)

    def count_refusal(self, tenant: str | None, reason: str) -> None:
        """Count a refusal decided outside the gate in the tenant's metrics."""
        if tenant is not None:
            self.gate.metrics.refused(tenant, reason)

    def reserve(self, request: CompletionRequest, queue: AdmissionQueue) -> GateDecision:
        """Room for the request's tenant in ``queue``, then its quota reservation; an allowed
        decision is kept until :meth:`started` or :meth:`cancel` settles it."""
        assert request.tenant is not None
        decision = self.gate.check(request.tenant, request.prompt_tokens, request.max_tokens or 0, queue)
        if decision.allowed:
            self._decisions[request] = decision  # before emitting: a synchronous drop must find it
        return decision

    def not_emitted(self, request: CompletionRequest) -> None:
        """The reserved request found no demand after all: its reservation goes back and the
        refusal is counted as ``queue_full``."""
        decision = self._decisions.get(request)
        if decision is not None:
            self.cancel(request)
            self.gate.metrics.refused(decision.tenant, "queue_full")

    def started(self, request: CompletionRequest, completion: Completion, wait_s: float,
                queue: AdmissionQueue) -> None:
        """The engine took ``request`` after ``wait_s`` seconds: its queue wait is observed, and
        at completion its quota and VTC counter are reconciled with the real token counts (any
        outcome)."""
        decision = self._decisions.pop(request, None)
        if decision is None:
            return
        gate = self.gate
        gate.started(decision, wait_s)

        def settle(future: asyncio.Future[CompletionResult]) -> None:
            if future.cancelled() or future.exception() is not None:
                prompt, completion_tokens = request.prompt_tokens, 0
            else:
                result = future.result()
                prompt, completion_tokens = result.prompt_tokens, result.completion_tokens
            gate.finish(decision, prompt, completion_tokens, queue, request)

        completion.result.add_done_callback(settle)

    def cancel(self, request: CompletionRequest) -> None:
        """``request`` was admitted and will never start (refused further on, dropped, its
        client left first): its whole reservation goes back. No-op once it started."""
        decision = self._decisions.pop(request, None)
        if decision is not None:
            self.gate.cancel(decision)

    def reload(self, queue: AdmissionQueue) -> TenantsFileError | None:
        """Read the tenants file again (SIGHUP): new tenants, keys, limits (an unchanged limit
        keeps its level) and the queue's weights take effect; on error the previous configuration
        stays in force, the error is logged and returned."""
        error = self.gate.reload(queue)
        if error is None:
            log.info("tenants file %s reloaded: %d tenants", self.file, len(self.gate.tenants))
        return error


class _Reloadable(Protocol):
    def reload_tenants(self) -> TenantsFileError | None: ...


#: edges serving with a tenants file: one SIGHUP reloads each of them
_RELOADING: set[_Reloadable] = set()


def _reload_all() -> None:
    for edge in list(_RELOADING):
        edge.reload_tenants()


def on_sighup(edge: _Reloadable, on: bool) -> bool:
    """Register (``on``) or unregister ``edge`` for SIGHUP; the loop's handler is installed with
    the first and removed with the last. Returns whether ``edge`` is registered."""
    loop = asyncio.get_running_loop()
    if not on:
        _RELOADING.discard(edge)
        if not _RELOADING:
            loop.remove_signal_handler(signal.SIGHUP)
        return False
    if not _RELOADING:
        try:
            loop.add_signal_handler(signal.SIGHUP, _reload_all)
        except (ValueError, RuntimeError, NotImplementedError):  # not the main thread, or no signals
            log.warning("SIGHUP cannot reload the tenants file here (not the main thread); "
                        "call Gateway.reload_tenants() instead")
            return False
    _RELOADING.add(edge)
    return True
