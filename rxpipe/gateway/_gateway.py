"""The HTTP edge as a source: admits a request iff the graph's demand is > 0 (DESIGN §5).

:class:`Gateway` is the composition root of the edge. Each role is its own module:

- ``_keys.KeyRing``: who is calling (bearer keys, constant-time compare);
- ``_tenancy.Tenancy``: tenants, their quota reservations and reconciliation, SIGHUP reload;
- ``_admission.AdmissionPolicy``: when to refuse and which Retry-After to tell;
- ``_inflight.InFlight``: the admitted requests still answering (what a drain waits for);
- ``_routes`` / ``_completions`` / ``_sse``: the HTTP handlers, which see the gateway only
  through the declared ``_edge.Edge`` interface; ``_server``: the HTTP server itself.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

from .._protocol import UNBOUNDED, Subscriber
from ..errors import EngineUnavailableError, RxPipeError, UnsupportedRequestError
from ..flowable import Flowable
from ..logs import event
from ..metrics import StageCounters, StageStatistics, track
from ..runtime import Service
from ..serving import AdmissionQueue, Completion, CompletionRequest, ReplyFuture, count_finished, outcome_of
from ..serving._features import common_features, describe_feature, unsupported_feature
from ..stage import EMPTY_SUBSCRIPTION, DrainSubscription
from ..view import PipelineView
from ._admission import AdmissionPolicy
from ._config import GatewayConfig
from ._credit import Credit, credit_of, slot_engines
from ._credit_watch import CreditWatch
from ._inflight import InFlight
from ._keys import KeyRing
from ._metrics import count_rejection
from ._policy import DrainMeter, Refusal
from ._tenancy import Tenancy, on_sighup
from ._tenant_gate import TenantGate
from ._tenants import TenantsFileError

if TYPE_CHECKING:
    from ..runtime import Pipeline
    from ._server import EdgeRunner

__all__ = ["Gateway"]

log = logging.getLogger("rxpipe.gateway")


class _Admission(DrainSubscription, AdmissionQueue):
    """The gateway's subscription: only a demand counter. The edge holds no queue: an HTTP
    request is either emitted downstream at once (consuming one unit of demand) or refused.
    As an :class:`~rxpipe.serving.AdmissionQueue` it answers for every tenant alike: room while
    there is demand (the answer when no per-tenant queue follows the edge).

    Pressure (the live view): a source holds no item, but a request refused for lack of demand
    is one it had and could not emit, so the edge counts as backpressured from such a refusal
    until demand comes back (``waiting``)."""

    __slots__ = ("gateway", "counters", "finishing", "waiting")

    def __init__(self, downstream: Subscriber[Any], gateway: Gateway) -> None:
        super().__init__(downstream)
        self.gateway = gateway
        self.counters = StageCounters(gateway.name)
        self.finishing = False
        self.waiting = False
        track(self)

    def _drain(self) -> None:
        pass  # nothing is ever queued here

    def _on_request(self, n: int) -> None:
        self.waiting = False  # the drain call this request makes re-reads the pressure state
        self.gateway.credit_watch.changed()

    def _holds(self) -> bool:
        return self.waiting

    def refused_for_demand(self) -> None:
        """A request was refused because there is no demand: backpressured until there is."""
        if not self.requested and not self.waiting:
            self.waiting = True
            self._pressure_update()

    def room_for(self, tenant: Hashable) -> bool:
        return not self.cancelled and self.requested > 0

    def demand_for(self, tenant: Hashable) -> int:
        return 0 if self.cancelled else self.requested

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
        self.gateway.credit_watch.changed()
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


class _NoRoom(AdmissionQueue):
    """The answer before the edge has a subscriber: no room for anyone."""

    def room_for(self, tenant: Hashable) -> bool:
        return False

    def demand_for(self, tenant: Hashable) -> int:
        return 0


_NO_ROOM = _NoRoom()


class Gateway(Flowable[CompletionRequest], Service):
    """OpenAI-compatible HTTP edge whose admission is the graph's demand.

    As a Flowable it emits :class:`~rxpipe.serving.CompletionRequest` items, one per admitted
    HTTP request, only while downstream demand is > 0; it holds no queue. Each admitted request
    carries a :class:`~rxpipe.serving.ReplyFuture`, so an :func:`~rxpipe.serving.edge_queue`
    behind it can count departures exactly. It is a hot source with one subscriber at a time.

    As a :class:`~rxpipe.runtime.Service` it serves HTTP (aiohttp) while its Pipeline runs:
    ``POST /v1/completions``, ``POST /v1/chat/completions``, ``GET /v1/models`` (a key is
    needed when keys are set), ``GET /metrics``, ``GET /health`` and ``/healthz`` (alive),
    ``GET /readyz`` (taking work), ``GET /v1/credit`` (:meth:`credit` as JSON). Settings:
    :class:`GatewayConfig` (pass one, or its fields as keyword arguments).

    Credit (DESIGN §8b, :mod:`~rxpipe.gateway._credit`): every answer's head (JSON, an SSE
    stream's, a refusal's) carries ``x-rxpipe-free-slots``, ``x-rxpipe-queue-room``,
    ``x-rxpipe-drain-per-s`` and llm-d's ``x-llm-d-flow-band-headroom-requests`` /
    ``x-llm-d-flow-queue-duration-ms`` as of that moment; a 429/503 adds
    ``x-llm-d-request-dropped-reason`` (its reason label).

    Refusals (DESIGN §5; ``_admission`` says how each Retry-After is computed): 429
    ``queue_full`` (no demand), ``rate_limited`` (the key's bucket, the tenant's quota),
    ``deadline`` (estimated time to answer over ``latency_budget_s``); 503 ``unavailable``
    (engine down or paused by a 503, circuit open, graph stopped) and ``draining``. Each carries
    ``retry-after-ms`` (exact milliseconds) and ``Retry-After`` (its ceiling in whole seconds,
    RFC 9110), clamped to [``retry_after_min_s``, ``retry_after_max_s``].

    Before admission a request is validated (400, OpenAI's error JSON): sampling fields in range
    and ``prompt tokens + max_tokens <= max_model_len`` (``context_length_exceeded``, vLLM's
    message); a missing ``max_tokens`` becomes what remains of ``max_model_len`` (capped by
    ``default_max_tokens``). Client-visible messages never carry an engine's address or other
    internal detail (the log does). Every answer has ``x-request-id`` (echoed or new).

    Many tenants (``tenants_file``; ``_tenancy`` has the rules): admission asks the queue right
    behind the edge whether it has room *for this tenant* (an
    :class:`~rxpipe.serving.AdmissionQueue` such as ``ops.fair_queue``; behind any other stage,
    plain demand), reserves the tenant's rpm/tpm quota and emits, in one synchronous step; a
    request that alone needs more than the tenant's ``tpm`` gets a final 400
    ``request_over_tpm``. Every answer to a tenant with limits carries
    ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}`` as of its admission. SIGHUP reloads
    the file (:meth:`reload_tenants`). Raises :class:`~rxpipe.gateway.TenantsFileError` for a bad
    file at construction.

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
        self.policy = AdmissionPolicy(self.config)
        self.tenancy = Tenancy(self.config.tenants_file) if self.config.tenants_file is not None else None
        self.keys = self._key_ring()
        self.draining = False
        #: True once the graph behind the edge stopped (a stage failed): 503 from then on
        self.stopped = False
        self.in_flight_book = InFlight()
        self.url: str | None = None
        self._admission: _Admission | None = None
        self._force: asyncio.Event | None = None
        self._runner: EdgeRunner | None = None
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
        #: the live pipeline view (``GET /pipeline``...), made by :meth:`attach`; its ticker runs
        #: while the edge serves
        self.view: PipelineView | None = None
        self._ticker: asyncio.Task[None] | None = None
        #: credit snapshots made (``x-rxpipe-credit-seq``)
        self._credit_seq = 0
        #: the routers watching the credit (``GET /v1/credit`` as an event stream)
        self.credit_watch = CreditWatch(lambda: self.credit(self.loop_time()), self.config.credit_watchers_max,
                                        self.config.credit_heartbeat_s)

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
        return len(self.in_flight_book)

    @property
    def meter(self) -> DrainMeter:
        """The drain rate and the book of promised admission slots (:class:`AdmissionPolicy`)."""
        return self.policy.meter

    @property
    def engines(self) -> list[Any]:
        """The engines of the pipeline (set by :meth:`attach`)."""
        return self.policy.engines

    @property
    def auth_keys(self) -> int:
        """Bearer keys the edge accepts (``api_keys`` and the tenants' ``keys``); 0: authentication
        is off and every request is served (the start line of ``rxpipe run`` says which)."""
        return len(self.keys)

    @property
    def available(self) -> bool:
        """False when the graph behind the edge stopped or an engine is down (503)."""
        if self.stopped:
            return False
        for engine in self.policy.engines:  # a loop, not all(<genexpr>): asked twice per request
            if not engine.available:
                return False
        return True

    def loop_time(self) -> float:
        """The serving loop's clock (seconds)."""
        return self._running_loop().time()

    def credit(self, now: float) -> Credit:
        """The edge's credit at loop time ``now`` (DESIGN §8b; :mod:`~rxpipe.gateway._credit`):
        the engines' free slots, the admissions it would take now (its demand; 0 while draining
        or unavailable), the measured drain rate and the estimated queue wait. Every answer's
        head carries it, and ``GET /v1/credit``."""
        self._credit_seq += 1
        return credit_of(self.policy.engines, self.policy.meter, self.demand,
                         not self.draining and self.available, now, self._credit_seq)

    @property
    def tenant_gate(self) -> TenantGate | None:
        """The tenants, quotas and metrics in force (None without a tenants file)."""
        return self.tenancy.gate if self.tenancy is not None else None

    def pipeline_stopped(self) -> None:
        """The graph cancelled the edge's subscription: fail every admitted request that has not
        started (their handlers answer 503 ``unavailable``) and refuse new ones."""
        self.stopped = True
        self.credit_watch.changed()
        self.in_flight_book.fail_unstarted(EngineUnavailableError("the pipeline behind the gateway stopped"))

    # -- who is calling ------------------------------------------------------------------------
    def _key_ring(self) -> KeyRing:
        keys = KeyRing(self.config.api_keys, self.tenancy.tenants if self.tenancy is not None else None)
        if self.tenancy is not None:
            self.tenancy.gate.auth = keys.enabled
        return keys

    def authenticate(self, header: str | None) -> str | None:
        """The key id for an ``Authorization`` header (:meth:`KeyRing.authenticate`)."""
        return self.keys.authenticate(header)

    def tenant_of(self, key_id: str, header: str | None) -> str | None:
        """The caller's tenant name (:meth:`Tenancy.tenant_of`), or None without a tenants file."""
        return self.tenancy.tenant_of(self.keys, key_id, header) if self.tenancy is not None else None

    def tenant_priority(self, tenant: str | None) -> int:
        """The priority band of ``tenant`` (higher first; 0 for no or an unknown tenant), e.g. for
        ``ops.fair_queue(priority=...)``; reads the tenants in force (a reload changes it)."""
        return self.tenancy.priority(tenant) if self.tenancy is not None else 0

    def reload_tenants(self) -> TenantsFileError | None:
        """Read the tenants file again (SIGHUP, :meth:`Tenancy.reload`); new keys take effect.
        Returns the error (the previous configuration stays in force), None on success or
        without a file."""
        if self.tenancy is None:
            return None
        error = self.tenancy.reload(self._queue_stage())
        if error is None:
            self.keys = self._key_ring()
        return error

    def reload(self) -> bool:
        """SIGHUP (:class:`~rxpipe.runtime.Service`): reload the tenants file; False without one."""
        if self.tenancy is None:
            return False
        self.reload_tenants()
        return True

    # -- admission -----------------------------------------------------------------------------
    def _queue_stage(self) -> AdmissionQueue:
        """What the tenant gate asks for room: the stage right behind the edge if it declares the
        admission-queue protocol (``ops.fair_queue``), else the edge's own demand counter (no
        room before the edge is subscribed)."""
        admission = self._admission
        if admission is None:
            return _NO_ROOM
        downstream = admission.downstream
        return downstream if isinstance(downstream, AdmissionQueue) else admission

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        loop = self._loop
        return loop if loop is not None else asyncio.get_running_loop()

    def engine_pause_s(self) -> float:
        """Seconds until every engine takes work again (:meth:`AdmissionPolicy.engine_pause_s`)."""
        return self.policy.engine_pause_s()

    def retry_after_queue(self) -> float:
        """Retry-After (seconds) for one more request refused for lack of room or an unavailable
        engine (:meth:`AdmissionPolicy.retry_after_queue`)."""
        return self.policy.retry_after_queue(self._running_loop().time())

    def early_refusal(self, now: float) -> Refusal | None:
        """Refusals that need no request body: draining, engine down, no demand."""
        return self.policy.early(now, draining=self.draining, available=self.available, demand=self.demand)

    def policy_refusal(self, key_id: str, now: float) -> Refusal | None:
        """Per-key token bucket (``rate_limited``) and latency budget (``deadline``)."""
        return self.policy.policy(key_id, now)

    @property
    def features(self) -> frozenset[str] | None:
        """What every engine of the pipeline serves (``Engine.features``; a balance's replicas:
        what each of them does), or None when the gateway knows no engine (not attached)."""
        engines = self.policy.engines
        return common_features(engine.features for engine in engines) if engines else None

    def unsupported(self, request: CompletionRequest) -> UnsupportedRequestError | None:
        """The refusal (400 ``unsupported_request``, ``param`` the field) of a request asking for
        a feature (``request.features``) the pipeline's engines do not declare, decided before
        admission; None when they serve it, or when the gateway knows no engine (an engine then
        refuses it itself at ``submit``)."""
        if request.features is None:
            return None
        supported = self.features
        missing = None if supported is None else unsupported_feature(request.features, supported)
        if missing is None:
            return None
        feature, param = missing
        message = (f"model {self.config.model!r} does not support {describe_feature(feature)}: "
                   f"{param!r} cannot be served")
        return UnsupportedRequestError(f"request {request.id}: {message}", client_message=message, param=param)

    def admit(self, request: CompletionRequest, now: float) -> Refusal | None:
        """Emit ``request`` into the graph, or return the refusal (429 ``queue_full``; with
        tenants also ``rate_limited``, see the class docstring). With a tenants file the room
        check, the quota reservation and the emission are one synchronous step."""
        tenancy = self.tenancy if request.tenant is not None else None
        headers = None
        if tenancy is not None:
            decision = tenancy.reserve(request, self._queue_stage())
            if not decision.allowed:
                return self.policy.tenant(decision, request, now, tenancy.tenants)
            headers = decision.headers
        request.arrival_s = now
        if request.reply is None:
            request.reply = ReplyFuture(loop=self._running_loop())
        if self.config.latency_budget_s is not None:
            request.deadline_s = now + self.config.latency_budget_s
        self.in_flight_book.add(request)  # before emitting: a synchronous failure downstream must find it
        admission = self._admission
        if admission is None or not admission.admit(request):
            self.in_flight_book.discard(request)
            if tenancy is not None:
                tenancy.not_emitted(request)
            return self.policy.queue_full(now, headers)
        self.policy.meter.record_admit(now)
        return None

    def reject(self, refusal: Refusal) -> None:
        """Count ``refusal`` (``rxpipe_rejections_total`` and the edge stage's drops)."""
        count_rejection(refusal.reason)
        admission = self._admission
        if admission is not None:
            admission.counters.drop(refusal.reason)
            if refusal.reason == "queue_full":
                admission.refused_for_demand()

    def started(self, request: CompletionRequest, completion: Completion, now: float) -> None:
        """The engine took ``request`` at loop time ``now``: the drain meter counts the start and,
        when the completion ends, the slot it frees; the tenant's reservation is settled then."""
        self.policy.meter.record_start(now)
        self.credit_watch.changed()  # a slot taken
        completion.result.add_done_callback(self._finished)
        if self.tenancy is not None:
            arrival = request.arrival_s
            self.tenancy.started(request, completion, max(0.0, now - arrival) if arrival is not None else 0.0,
                                 self._queue_stage())

    def _finished(self, _: asyncio.Future[Any]) -> None:
        self.policy.meter.record_finish(self._running_loop().time())

    def leave(self, request: CompletionRequest) -> None:
        """The answer to ``request`` is finished (or abandoned): count its outcome, give back
        an unused reservation and, once it started, set its ``reply`` and ``completion`` to None
        (see :class:`~rxpipe.serving.CompletionRequest`)."""
        count_finished(outcome_of(request))
        if self.tenancy is not None:
            self.tenancy.cancel(request)  # never started: its reservation goes back
        # request -> reply -> Completion -> request (and request -> Completion -> request) are
        # reference cycles: cut them here, so an answered request is freed at once instead of by
        # the cyclic GC (whose collections cost ~5 us per request at full load). Only once the
        # reply holds its Completion: the request passed the executor and no stage holds it. One
        # whose client left while queued is still in a queue, which reads its (cancelled) reply.
        reply = request.reply
        if reply is not None and reply.done() and not reply.cancelled() and reply.exception() is None:
            request.reply = None
            request.completion = None
        self.in_flight_book.discard(request)

    # -- Service -------------------------------------------------------------------------------
    def attach(self, pipeline: Pipeline) -> None:
        engines = (getattr(stage, "engine", None) for stage in pipeline.stages)
        for engine in slot_engines(self.policy.engines):
            engine.remove_capacity_listener(self.credit_watch.changed)
        self.policy.engines = [engine for engine in engines if engine is not None]
        for engine in slot_engines(self.policy.engines):
            engine.add_capacity_listener(self.credit_watch.changed)  # a slot freed: the watchers hear it
        self.view = PipelineView(pipeline)

    async def start(self, host: str, port: int | None) -> str | None:
        from ._routes import make_app
        from ._server import listen

        if self._runner is not None:
            raise RuntimeError(f"gateway {self.name!r} is already serving on {self.url}")
        self.draining = False
        self.stopped = False
        self.credit_watch.reopen()
        self._loop = asyncio.get_running_loop()
        self._runner, self.url = await listen(make_app(self, self._loop), self.config, host,
                                              port if port is not None else 8000)
        if self.view is not None:
            self._ticker = self._loop.create_task(self.view.run_ticker(), name=f"rxpipe view ticker {self.name}")
        if self.tenancy is not None and self.handle_sighup and not self._sighup:
            self._sighup = on_sighup(self, True)
        return self.url

    async def drain(self, timeout_s: float) -> None:
        """Refuse new requests (503 ``draining``) and let in-flight ones finish within
        ``timeout_s`` seconds (or until :meth:`abort`); then cancel what is left (those clients
        get 503 ``draining``) and complete the stream so the graph finishes."""
        self.draining = True
        self.credit_watch.close()  # the watchers' last word: no room
        book = self.in_flight_book
        loop = asyncio.get_running_loop()
        started = loop.time()
        event(log, logging.INFO, f"{self.name}: draining, {len(book)} requests in flight "
              f"(new ones get 503 draining)", in_flight=len(book))
        if book:
            if self._force is None:
                self._force = asyncio.Event()
            if not await book.wait_idle(timeout_s, self._force):
                why = "a second stop signal" if self._force.is_set() else f"drain_timeout_s={timeout_s:g}"
                log.warning("drain: %d requests still in flight after %.1f s (%s) are cancelled",
                            len(book), loop.time() - started, why)
                for request in book:
                    request.cancel()
                await book.wait_idle(2.0)  # their handlers answer 503 at once; a moment to write it
            else:
                drained_s = loop.time() - started
                event(log, logging.INFO, f"{self.name}: drained in {drained_s:.2f} s", drain_s=round(drained_s, 3))
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
        :meth:`abort`; then close every connection."""
        from ._server import close

        if self._sighup:
            self._sighup = on_sighup(self, False)
        if self._ticker is not None:
            self._ticker.cancel()
            self._ticker = None
        self.credit_watch.close()
        if self._runner is not None:
            self.draining = True  # what still arrives is refused as such
            runner, self._runner = self._runner, None
            await close(runner, self.config.shutdown_timeout_s, self._force)
        self._loop = None
