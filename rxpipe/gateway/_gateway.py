"""The HTTP edge as a source: admits a request iff the graph's demand is > 0 (DESIGN §5)."""

from __future__ import annotations

import asyncio
import errno
import hmac
import logging
import random
import signal
import socket
import time
from typing import TYPE_CHECKING, Any

from aiohttp import web

from .._protocol import UNBOUNDED, Subscriber
from ..engines import Completion, CompletionRequest, CompletionResult
from ..errors import EngineUnavailableError, RxPipeError, StartError
from ..flowable import Flowable
from ..logs import event
from ..metrics import StageCounters, StageStatistics, track
from ..runtime import Service
from ..stage import EMPTY_SUBSCRIPTION, DrainSubscription
from ._config import GatewayConfig
from ._metrics import count_finished, count_rejection, outcome_of
from ._policy import DrainMeter, KeyBuckets, Refusal, clamp_retry_after
from ._queue import ReplyFuture
from ._tenant_gate import GateDecision, TenantGate
from ._tenants import Tenants, TenantsFileError

if TYPE_CHECKING:
    from ..runtime import Pipeline
    from ._server import EdgeRunner

__all__ = ["Gateway"]

log = logging.getLogger("rxpipe.gateway")

#: the estimated queue wait is scaled by this before the latency-budget check
_WAIT_MARGIN = 1.1


class _Admission(DrainSubscription):
    """The gateway's subscription: only a demand counter. The edge holds no queue: an HTTP
    request is either emitted downstream at once (consuming one unit of demand) or refused."""

    __slots__ = ("gateway", "counters", "finishing")

    def __init__(self, downstream: Subscriber[Any], gateway: Gateway) -> None:
        super().__init__(downstream)
        self.gateway = gateway
        self.counters = StageCounters(gateway.name)
        self.finishing = False
        track(self)

    def _drain(self) -> None:
        pass  # nothing is ever queued here

    def admit(self, item: CompletionRequest) -> bool:
        """Emit ``item`` if there is demand (True), else refuse it (False). Runs in a handler
        task, never inside another signal, so the emission is serial (§1.3)."""
        if self.cancelled or self.requested == 0:
            return False
        if self.requested != UNBOUNDED:
            self.requested -= 1
        self.emitted += 1
        self.counters.items_out += 1
        self.downstream.on_next(item)
        return True

    def finish(self) -> None:
        """Complete downstream: the edge admits nothing more (drain finished)."""
        self.finishing = True
        self._complete()

    def _release(self) -> None:
        if not self.finishing:
            # Cancelled from downstream: a stage failed or the pipeline was stopped. Nothing
            # admitted and not yet started will ever get a reply from the graph.
            self.gateway.pipeline_stopped()

    def statistics(self) -> StageStatistics:
        return StageStatistics(self.counters.stage, self.requested, 0, None, 0, self.counters.items_out,
                               dict(self.counters.dropped))


class Gateway(Flowable[CompletionRequest], Service):
    """OpenAI-compatible HTTP edge whose admission is the graph's demand.

    As a Flowable it emits :class:`~rxpipe.engines.CompletionRequest` items, one per admitted
    HTTP request, only while downstream demand is > 0; it holds no queue. Each admitted request
    carries a :class:`~rxpipe.gateway.ReplyFuture`, so an :func:`~rxpipe.gateway.edge_queue`
    behind it can count departures exactly. It is a hot source with one subscriber at a time.

    As a :class:`~rxpipe.runtime.Service` it serves HTTP (aiohttp) while its Pipeline runs:
    ``POST /v1/completions``, ``POST /v1/chat/completions``, ``GET /v1/models`` (a key is
    needed when keys are set), ``GET /metrics``, ``GET /health`` and ``/healthz`` (alive),
    ``GET /readyz`` (taking work). Settings: :class:`GatewayConfig` (pass one, or its fields as
    keyword arguments).

    Refusals (DESIGN §5): 429 ``queue_full`` (no demand), ``rate_limited`` (the key's bucket),
    ``deadline`` (estimated time to answer over ``latency_budget_s``); 503 ``unavailable``
    (engine down or paused by a 503, circuit open, graph stopped) and ``draining``. Each carries
    ``retry-after-ms`` (exact milliseconds) and ``Retry-After`` (its ceiling in whole seconds,
    RFC 9110), clamped to [``retry_after_min_s``, ``retry_after_max_s``].

    Retry-After is a reservation: for ``queue_full`` and ``unavailable``, with the drain rate
    ``r`` measured over the last 10 s (starts per second while requests waited), the k-th
    refusal within one drain interval gets about ``(backlog + k) / r`` — each refusal takes the
    next free admission slot after the last one promised, and a promise leaves the book when its
    time passes (:class:`~rxpipe.gateway._policy.DrainMeter`) — plus a jitter of up to half an
    interval, so clients that honour it (the ``openai`` SDK does) come back spread at the drain
    rate instead of in lock-step, and a second burst is told times from the backlog it meets,
    never an earlier burst's. Before any rate is measured the value is 1–2 s, jittered. No refusal
    advertises less than the remaining pause of a throttled engine (``engine.retry_after_s``:
    an OpenAIEngine paused by its backend's 429/503). ``rate_limited`` tells the time to the
    key's next token, ``deadline`` the excess over the budget spread one drain interval apart
    among refusals made together (:meth:`DrainMeter.stagger`), ``draining`` the minimum.

    Before admission a request is validated (400, OpenAI's error JSON): sampling fields in range
    and ``prompt tokens + max_tokens <= max_model_len`` (``context_length_exceeded``, vLLM's
    message); a missing ``max_tokens`` becomes what remains of ``max_model_len`` (capped by
    ``default_max_tokens``). Client-visible messages never carry an engine's address or other
    internal detail (the log does). Every answer has ``x-request-id`` (echoed or new).

    Many tenants (``tenants_file``, DESIGN §5): the caller's tenant is the one listing its bearer
    key (auth on; a key of ``api_keys`` no tenant lists: ``default``), else the
    ``x-rxpipe-tenant`` header (unknown: ``default``). Admission asks the queue behind the edge
    whether it has room *for this tenant* (``room_for`` of ``ops.fair_queue``, which must come
    right after the gateway; behind any other stage, plain demand), then reserves
    ``prompt_tokens + max_tokens`` of the tenant's rpm/tpm quota, and emits, in one synchronous
    step: 429 ``queue_full`` (Retry-After: the reservation above) or ``rate_limited``
    (Retry-After: the time until the reservation fits, clamped); a request that alone needs more
    than the tenant's ``tpm`` can never be admitted: a final 400 ``request_over_tpm`` naming the
    limit and its tokens, without Retry-After (SDKs do not retry it). Every answer to a tenant with limits
    carries ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}`` as of its admission. At
    completion the quota and the queue's Virtual Token Counter are reconciled with the real token
    counts; a request that never started gives its reservation back. SIGHUP reloads the file
    (:meth:`reload_tenants`); a bad file is logged and the previous one stays in force.
    Raises :class:`~rxpipe.gateway.TenantsFileError` for a bad file at construction.

    Access log: with ``access_log = True`` (``rxpipe run --access-log``) every answer of a
    completion route is one INFO record on the logger ``rxpipe.access`` (:mod:`rxpipe.logs`):
    method, route, status, error code, tenant, stream, token counts, finish reason, queue and
    total time (seconds), request id — never a key or a prompt.
    """

    kind = "gateway"

    def __init__(self, config: GatewayConfig | None = None, *, name: str | None = None, **settings: Any) -> None:
        if config is not None and settings:
            raise TypeError("pass a GatewayConfig or settings, not both")
        super().__init__(name=name)
        self.config = config or GatewayConfig(**settings)
        self.meter = DrainMeter()
        self.key_buckets = (KeyBuckets(self.config.key_rate, self.config.key_burst)
                            if self.config.key_rate is not None else None)
        self.engines: list[Any] = []
        self._rng = random.Random()
        self.draining = False
        #: True once the graph behind the edge stopped (a stage failed): 503 from then on
        self.stopped = False
        #: admitted requests whose handler is still answering
        self.pending: set[CompletionRequest] = set()
        self.url: str | None = None
        self._admission: _Admission | None = None
        self._idle: asyncio.Event | None = None
        self._force: asyncio.Event | None = None
        self._runner: EdgeRunner | None = None
        #: per-tenant admission (None: one tenant). Its clock is time.monotonic: it is built
        #: before any loop runs, and it only ever compares its own readings.
        self.tenant_gate: TenantGate | None = None
        if self.config.tenants_file is not None:
            tenants = Tenants.load(self.config.tenants_file)
            self.tenant_gate = TenantGate(tenants, time.monotonic, auth=False)
        #: admitted requests of a tenant whose reservation is not settled yet
        self._decisions: dict[CompletionRequest, GateDecision] = {}
        self._keys: tuple[tuple[bytes, str], ...] = ()
        self._key_tenants: dict[str, str] = {}
        self._sighup = False
        #: install a SIGHUP handler of its own when it serves with a tenants file (for a process that
        #: embeds it); ``rxpipe run`` handles SIGHUP itself (:meth:`reload`) and sets this False
        self.handle_sighup = True
        #: the loop serving (set by :meth:`start`): read instead of ``asyncio.get_running_loop()``,
        #: which costs a getpid() syscall per call on Python < 3.12
        self._loop: asyncio.AbstractEventLoop | None = None
        #: write one access-log line per completion request (logger ``rxpipe.access``, INFO; ``rxpipe
        #: run --access-log`` sets it): status, code, tenant, tokens, queue and total time, request id
        self.access_log = False
        self._set_keys()

    # -- Flowable ------------------------------------------------------------------------------
    def _subscribe(self, subscriber: Subscriber[CompletionRequest]) -> None:
        if self._admission is not None and not self._admission.cancelled:
            subscriber.on_subscribe(EMPTY_SUBSCRIPTION)
            subscriber.on_error(RxPipeError(f"gateway {self.name!r} is a hot source and already has a subscriber"))
            return
        self._admission = _Admission(subscriber, self)
        subscriber.on_subscribe(self._admission)

    @property
    def demand(self) -> int:
        """Outstanding downstream demand (requests the graph can take now)."""
        admission = self._admission
        return 0 if admission is None or admission.cancelled else admission.requested

    @property
    def in_flight(self) -> int:
        """Admitted requests whose answer is not finished yet."""
        return len(self.pending)

    @property
    def auth_keys(self) -> int:
        """Bearer keys the edge accepts (``api_keys`` and the tenants' ``keys``); 0: authentication
        is off and every request is served (the start line of ``rxpipe run`` says which)."""
        return len(self._keys)

    @property
    def available(self) -> bool:
        """False when the graph behind the edge stopped or an engine is down (503)."""
        if self.stopped:
            return False
        for engine in self.engines:  # a loop, not all(<genexpr>): asked twice per request
            if not engine.available:
                return False
        return True

    def pipeline_stopped(self) -> None:
        """The graph cancelled the edge's subscription: fail every admitted request that has not
        started (their handlers answer 503 ``unavailable``) and refuse new ones."""
        self.stopped = True
        error = EngineUnavailableError("the pipeline behind the gateway stopped")
        for request in list(self.pending):
            reply = request.reply
            if reply is not None and not reply.done():
                reply.set_exception(error)

    # -- admission -----------------------------------------------------------------------------
    def _set_keys(self) -> None:
        """Auth keys = ``api_keys`` (ids ``key_0``...) then the tenants' other keys, sorted."""
        api_keys = self.config.api_keys
        gate = self.tenant_gate
        tenants = gate.tenants if gate is not None else None
        extra = sorted(tenants.keys_configured - set(api_keys)) if tenants is not None else []
        self._keys = tuple((key.encode(), f"key_{i}") for i, key in enumerate((*api_keys, *extra)))
        self._key_tenants = {}
        if tenants is not None:
            for i, key in enumerate((*api_keys, *extra)):
                tenant = tenants.for_key(key)
                if tenant is not None:
                    self._key_tenants[f"key_{i}"] = tenant.name
        if gate is not None:
            gate.auth = bool(self._keys)

    def authenticate(self, header: str | None) -> str | None:
        """Return the key id (``key_<i>``) for ``Authorization: Bearer <key>``, ``"anonymous"``
        when no keys are configured, or None when the key is missing, wrong or not UTF-8. The
        keys are ``api_keys`` and, with a tenants file, every tenant's keys (ids numbered after
        ``api_keys``; :meth:`tenant_of` names the key's tenant). The scheme is
        case-insensitive (RFC 9110 §11.1); every configured key is compared in constant time
        (``hmac.compare_digest``)."""
        keys = self._keys
        if not keys:
            return "anonymous"
        scheme, _, token = (header or "").strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        try:
            given = token.strip().encode("utf-8")
        except UnicodeEncodeError:  # bytes that are not UTF-8 (aiohttp keeps them as surrogates)
            return None
        found = None
        for key, key_id in keys:
            if hmac.compare_digest(given, key):
                found = key_id
        return found

    # -- tenants -------------------------------------------------------------------------------
    def tenant_of(self, key_id: str, header: str | None) -> str | None:
        """The caller's tenant name (DESIGN §5), or None without a tenants file. ``key_id``: what
        :meth:`authenticate` returned; ``header``: the ``x-rxpipe-tenant`` value (used only
        when authentication is off)."""
        gate = self.tenant_gate
        if gate is None:
            return None
        if gate.auth:
            return self._key_tenants.get(key_id, gate.tenants.default.name)
        return gate.resolve(header=header).name

    def tenant_priority(self, tenant: str | None) -> int:
        """The priority band of ``tenant`` (higher first; 0 for no or an unknown tenant), e.g. for
        ``ops.fair_queue(priority=...)``; reads the tenants in force (a reload changes it)."""
        gate = self.tenant_gate
        configured = gate.tenants.get(tenant) if gate is not None and tenant is not None else None
        return configured.priority if configured is not None else 0

    def ratelimit_headers(self, tenant: str | None) -> dict[str, str]:
        """``x-ratelimit-*`` of ``tenant`` now (empty: no tenant, or no limits)."""
        gate = self.tenant_gate
        return gate.quotas.headers(tenant) if gate is not None and tenant is not None else {}

    def admitted_headers(self, request: CompletionRequest) -> dict[str, str]:
        """``x-ratelimit-*`` as of ``request``'s admission (empty: no tenant or no limits)."""
        decision = self._decisions.get(request)
        return decision.headers if decision is not None else self.ratelimit_headers(request.tenant)

    def count_refusal(self, tenant: str | None, reason: str) -> None:
        """Count a refusal decided outside :meth:`admit` in the tenant's metrics."""
        gate = self.tenant_gate
        if gate is not None and tenant is not None:
            gate.metrics.refused(tenant, reason)

    def _queue_stage(self) -> Any:
        """What the tenant gate asks for room: the stage right behind the edge if it answers
        ``room_for`` (``ops.fair_queue``), else the edge's own demand counter."""
        admission = self._admission
        downstream = getattr(admission, "downstream", None)
        return downstream if hasattr(downstream, "room_for") else admission

    def _tenant_refusal(self, decision: GateDecision, request: CompletionRequest, now: float) -> Refusal:
        cfg = self.config
        if decision.reason == "queue_full":
            return Refusal(429, "queue_full", self._retry_after_queue(now),
                           f"the server has no room for tenant {decision.tenant!r} now (its share of the queue "
                           f"is in use); retry after the indicated delay", decision.headers)
        if decision.retry_after_s is None:  # the request alone is over the per-minute token limit
            gate = self.tenant_gate
            tpm = gate.tenants[decision.tenant].tpm if gate is not None else None
            max_tokens = request.max_tokens or 0
            # never admissible as it is: a final 400 (no Retry-After; SDKs do not retry a 400),
            # not a 429 its client would retry for minutes for nothing
            need = request.prompt_tokens + max_tokens
            room = (tpm or 0) - request.prompt_tokens
            fits = f" (to at most {room})" if room > 0 else ""
            return Refusal(400, "rate_limited", 0.0,
                           f"this request needs {need} tokens (prompt {request.prompt_tokens} + max_tokens "
                           f"{max_tokens}), more than tenant {decision.tenant!r}'s limit of {tpm} tokens per minute: "
                           f"it can never be admitted; lower max_tokens{fits}",
                           decision.headers, code="request_over_tpm", param="max_tokens")
        return Refusal(429, "rate_limited",
                       clamp_retry_after(max(decision.retry_after_s, self.engine_pause_s()), cfg.retry_after_min_s,
                                         cfg.retry_after_max_s),
                       f"rate limit reached for tenant {decision.tenant!r} (requests or tokens per minute); "
                       f"retry after the indicated delay", decision.headers)

    def started(self, request: CompletionRequest, completion: Completion, now: float) -> None:
        """The engine took ``request`` at loop time ``now``: the drain meter counts the start and,
        when the completion ends, the slot it frees; the tenant's reservation is settled then."""
        self.meter.record_start(now)
        completion.result.add_done_callback(self._finished)
        self.tenant_started(request, completion)

    def _finished(self, _: asyncio.Future[CompletionResult]) -> None:
        self.meter.record_finish(self._running_loop().time())

    def tenant_started(self, request: CompletionRequest, completion: Completion) -> None:
        """The engine took ``request``: its queue wait is observed, and at completion its
        quota and VTC counter are reconciled with the real token counts (any outcome)."""
        decision = self._decisions.pop(request, None)
        gate = self.tenant_gate
        if decision is None or gate is None:
            return
        arrival = request.arrival_s
        gate.started(decision, max(0.0, self._running_loop().time() - arrival) if arrival is not None else 0.0)
        queue = self._queue_stage()

        def settle(future: asyncio.Future[CompletionResult]) -> None:
            if future.cancelled() or future.exception() is not None:
                prompt, completion_tokens = request.prompt_tokens, 0
            else:
                result = future.result()
                prompt, completion_tokens = result.prompt_tokens, result.completion_tokens
            gate.finish(decision, prompt, completion_tokens, queue, request)

        completion.result.add_done_callback(settle)

    def tenant_cancel(self, request: CompletionRequest) -> None:
        """``request`` was admitted and will never start (refused further on, dropped, its
        client left first): its whole reservation goes back. No-op once it started."""
        decision = self._decisions.pop(request, None)
        if decision is not None and self.tenant_gate is not None:
            self.tenant_gate.cancel(decision)

    def reload_tenants(self) -> TenantsFileError | None:
        """Read the tenants file again (SIGHUP): new tenants, keys, limits (an unchanged limit
        keeps its level) and the fair queue's weights take effect; on error the previous
        configuration stays in force, the error is logged and returned. None without a file."""
        gate = self.tenant_gate
        if gate is None:
            return None
        error = gate.reload(self._queue_stage())
        if error is None:
            self._set_keys()
            log.info("tenants file %s reloaded: %d tenants", self.config.tenants_file, len(gate.tenants))
        return error

    def reload(self) -> bool:
        """SIGHUP (:class:`~rxpipe.runtime.Service`): reload the tenants file; False without one."""
        if self.tenant_gate is None:
            return False
        self.reload_tenants()
        return True

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        loop = self._loop
        return loop if loop is not None else asyncio.get_running_loop()

    def engine_pause_s(self) -> float:
        """Seconds until every engine takes work again (an OpenAIEngine paused by its backend's
        429/503, or its circuit open); 0.0 when none is paused."""
        pause = 0.0
        for engine in self.engines:  # a loop, not max(<genexpr>): asked for every refusal
            wait = getattr(engine, "retry_after_s", None)
            if wait and wait > pause:
                pause = float(wait)
        return pause

    def _retry_after_queue(self, now: float) -> float:
        return self.meter.reserve(now, self.engine_pause_s(), self.config.retry_after_min_s,
                                  self.config.retry_after_max_s, self._rng)

    def retry_after_queue(self) -> float:
        """Retry-After (seconds) for one more request refused for lack of room or an unavailable
        engine: a reservation (:meth:`DrainMeter.reserve`), never below an engine's pause."""
        return self._retry_after_queue(self._running_loop().time())

    def early_refusal(self, now: float) -> Refusal | None:
        """Refusals that need no request body: draining, engine down, no demand."""
        cfg = self.config
        if self.draining:
            return Refusal(503, "draining", cfg.retry_after_min_s, "the server is shutting down; retry elsewhere")
        if not self.available:
            return Refusal(503, "unavailable", self._retry_after_queue(now), "the model backend is unavailable")
        if self.demand == 0:
            return Refusal(429, "queue_full", self._retry_after_queue(now),
                           "the server is at capacity (queue full); retry after the indicated delay")
        return None

    def policy_refusal(self, key_id: str, now: float) -> Refusal | None:
        """Per-key token bucket (``rate_limited``) and latency budget (``deadline``)."""
        cfg = self.config
        if self.key_buckets is not None:
            allowed, headers, token_wait = self.key_buckets.check(key_id, now)
            if not allowed:
                return Refusal(429, "rate_limited",
                               clamp_retry_after(max(token_wait, self.engine_pause_s()), cfg.retry_after_min_s,
                                                 cfg.retry_after_max_s),
                               "rate limit reached for your API key", headers)
        if cfg.latency_budget_s is not None:
            wait = self.meter.estimated_wait(now)
            # The budget is end to end: the queue wait (with a margin for the estimate's error,
            # about ±8 % at 30 queued requests) plus a p90 service time must fit in it.
            if wait is not None:
                wait = wait * _WAIT_MARGIN + self.meter.service_time()
            if wait is not None and wait > cfg.latency_budget_s:
                return Refusal(429, "deadline",
                               self.meter.stagger(now, max(wait - cfg.latency_budget_s, self.engine_pause_s()),
                                                  cfg.retry_after_min_s, cfg.retry_after_max_s, self._rng),
                               f"estimated time to answer {wait:.2f} s exceeds the latency budget "
                               f"{cfg.latency_budget_s:g} s")
        return None

    def admit(self, request: CompletionRequest, now: float) -> Refusal | None:
        """Emit ``request`` into the graph, or return the refusal (429 ``queue_full``; with
        tenants also ``rate_limited``, see the class docstring). With a tenants file the room
        check, the quota reservation and the emission are one synchronous step."""
        admission = self._admission
        gate = self.tenant_gate
        decision: GateDecision | None = None
        if gate is not None and request.tenant is not None:
            decision = gate.check(request.tenant, request.prompt_tokens, request.max_tokens or 0,
                                  self._queue_stage())
            if not decision.allowed:
                return self._tenant_refusal(decision, request, now)
        request.arrival_s = now
        if request.reply is None:
            request.reply = ReplyFuture(loop=self._running_loop())
        if self.config.latency_budget_s is not None:
            request.deadline_s = now + self.config.latency_budget_s
        self.pending.add(request)  # before emitting: a synchronous failure downstream must find it
        if decision is not None:
            self._decisions[request] = decision  # before emitting: a synchronous drop must find it
        if admission is None or not admission.admit(request):
            self.pending.discard(request)
            if decision is not None and gate is not None:
                self.tenant_cancel(request)
                gate.metrics.refused(decision.tenant, "queue_full")
            return Refusal(429, "queue_full", self._retry_after_queue(now),
                           "the server is at capacity (queue full); retry after the indicated delay",
                           decision.headers if decision is not None else None)
        self.meter.record_admit(now)
        return None

    def reject(self, refusal: Refusal) -> None:
        count_rejection(refusal.reason)
        if self._admission is not None:
            self._admission.counters.drop(refusal.reason)

    # -- in-flight accounting (for draining) ---------------------------------------------------
    def leave(self, request: CompletionRequest) -> None:
        """The answer to ``request`` is finished (or abandoned): count its outcome, give back
        an unused reservation and, once it started, set its ``reply`` and ``completion`` to None
        (see :class:`~rxpipe.engines.CompletionRequest`)."""
        count_finished(outcome_of(request))
        self.tenant_cancel(request)  # never started: its reservation goes back
        self.pending.discard(request)
        # request -> reply -> Completion -> request (and request -> Completion -> request) are
        # reference cycles: cut them here, so an answered request is freed at once instead of by
        # the cyclic GC (whose collections cost ~5 us per request at full load). Only once the
        # reply holds its Completion: the request passed the executor and no stage holds it. One
        # whose client left while queued is still in a queue, which reads its (cancelled) reply.
        reply = request.reply
        if reply is not None and reply.done() and not reply.cancelled() and reply.exception() is None:
            request.reply = None
            request.completion = None
        if not self.pending and self._idle is not None:
            self._idle.set()

    # -- Service -------------------------------------------------------------------------------
    def attach(self, pipeline: Pipeline) -> None:
        engines = (getattr(stage, "engine", None) for stage in pipeline.stages)
        self.engines = [engine for engine in engines if engine is not None]

    async def start(self, host: str, port: int | None) -> str | None:
        from ._http import make_app
        from ._server import HTTP_LOG, EdgeRunner

        if self._runner is not None:
            raise RuntimeError(f"gateway {self.name!r} is already serving on {self.url}")
        self.draining = False
        self.stopped = False
        self._loop = asyncio.get_running_loop()
        app = make_app(self, self._loop)
        # handler_cancellation: a client that disconnects cancels its handler, so queued work is
        # withdrawn and running work cancelled (DESIGN §5); access logs off (per-request cost);
        # our own drain and stop_listening come first, so aiohttp's shutdown waits only briefly
        # for stragglers.
        cfg = self.config
        self._runner = EdgeRunner(app, max_connections=cfg.max_connections, header_timeout_s=cfg.header_timeout_s,
                                  keepalive_timeout=cfg.keepalive_timeout_s, handler_cancellation=True,
                                  access_log=None, shutdown_timeout=cfg.shutdown_timeout_s, logger=HTTP_LOG)
        await self._runner.setup()
        port = port if port is not None else 8000
        site = web.TCPSite(self._runner, host, port)
        try:
            await site.start()
        except OSError as error:
            runner, self._runner = self._runner, None
            await runner.cleanup()
            raise StartError(f"cannot listen on {host}:{port}: {_why_not_listening(error)}") from error
        sockets = site._server.sockets if site._server is not None else []  # type: ignore[attr-defined]
        bound_host, bound_port = sockets[0].getsockname()[:2]
        shown = f"[{bound_host}]" if ":" in bound_host else bound_host
        self.url = f"http://{shown}:{bound_port}"
        if self.tenant_gate is not None and self.handle_sighup and not self._sighup:
            self._sighup = _on_sighup(self, True)
        return self.url

    async def drain(self, timeout_s: float) -> None:
        """Refuse new requests (503 ``draining``) and let in-flight ones finish within
        ``timeout_s`` seconds (or until :meth:`abort`); then cancel what is left (those clients
        get 503 ``draining``) and complete the stream so the graph finishes."""
        self.draining = True
        started = asyncio.get_running_loop().time()
        event(log, logging.INFO, f"{self.name}: draining, {len(self.pending)} requests in flight "
              f"(new ones get 503 draining)", in_flight=len(self.pending))
        if self.pending:
            self._idle = asyncio.Event()
            if self._force is None:
                self._force = asyncio.Event()
            waiters = {asyncio.ensure_future(self._idle.wait()), asyncio.ensure_future(self._force.wait())}
            await asyncio.wait(waiters, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
            for waiter in waiters:
                waiter.cancel()
            await asyncio.gather(*waiters, return_exceptions=True)
            if self.pending:
                waited = asyncio.get_running_loop().time() - started
                why = ("a second stop signal" if self._force is not None and self._force.is_set()
                       else f"drain_timeout_s={timeout_s:g}")
                log.warning("drain: %d requests still in flight after %.1f s (%s) are cancelled",
                            len(self.pending), waited, why)
                for request in list(self.pending):
                    request.cancel()
                # their handlers answer 503 at once; give them a moment to write it
                try:
                    await asyncio.wait_for(self._idle.wait(), 2.0)
                except TimeoutError:
                    pass
            else:
                event(log, logging.INFO, f"{self.name}: drained in "
                      f"{asyncio.get_running_loop().time() - started:.2f} s", drain_s=round(
                          asyncio.get_running_loop().time() - started, 3))
        if self._admission is not None:
            self._admission.finish()

    def abort(self) -> None:
        """Stop waiting for in-flight work (a second SIGINT/SIGTERM): :meth:`drain` cancels it now."""
        if self._force is None:
            self._force = asyncio.Event()
        self._force.set()

    async def stop(self) -> None:
        """Stop serving (after :meth:`drain`): close the listener; answer what reached the
        connections already open (503 ``draining``: a request on the wire as the drain ended, a
        client that connected and had not sent yet), within ``config.shutdown_timeout_s`` or until
        :meth:`abort`; then close every connection (aiohttp's ``AppRunner.cleanup``)."""
        if self._sighup:
            self._sighup = _on_sighup(self, False)
        if self._runner is not None:
            self.draining = True  # what still arrives is refused as such
            runner, self._runner = self._runner, None
            timeout_s = self.config.shutdown_timeout_s
            unanswered = await runner.stop_listening(timeout_s, self._force)
            if unanswered:
                log.warning("stop: %d connections still owed an answer after %g s (no complete request yet, or "
                            "its handler still running); closing them", unanswered, timeout_s)
            await runner.cleanup()
        self._loop = None


def _why_not_listening(error: OSError) -> str:
    """What a failed bind means to the person who ran the command (not the event loop's source
    location uvloop puts in its message)."""
    if error.errno == errno.EADDRINUSE:
        return "the address is in use (another server?); pick another with --port"
    if error.errno == errno.EACCES:
        return "permission denied (ports below 1024 need privileges); pick another with --port"
    if error.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT) or isinstance(error, socket.gaierror):
        return "no such local address; check --host"
    return error.strerror or str(error)


#: gateways serving with a tenants file: one SIGHUP reloads each of them
_RELOADING: set[Gateway] = set()


def _reload_all() -> None:
    for gateway in list(_RELOADING):
        gateway.reload_tenants()


def _on_sighup(gateway: Gateway, on: bool) -> bool:
    """Register (``on``) or unregister ``gateway`` for SIGHUP; the loop's handler is installed
    with the first and removed with the last. Returns whether ``gateway`` is registered."""
    loop = asyncio.get_running_loop()
    if not on:
        _RELOADING.discard(gateway)
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
    _RELOADING.add(gateway)
    return True
