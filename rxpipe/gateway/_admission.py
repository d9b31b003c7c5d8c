"""When the edge refuses, and which Retry-After it tells (DESIGN §5).

The refusals (status, reason label):

- 503 ``draining`` (SIGTERM: the server stops; Retry-After the minimum, retry elsewhere);
- 503 ``unavailable`` (an engine is down, paused by its backend's 503, circuit open, or the
  graph stopped);
- 429 ``queue_full`` (no demand: the graph's queue is full; with tenants: no room *for this
  tenant*);
- 429 ``rate_limited`` (the key's token bucket, or the tenant's rpm/tpm quota);
- 429 ``deadline`` (the estimated time to answer is over ``latency_budget_s``).

Retry-After is a reservation for ``queue_full`` and ``unavailable``: with the drain rate ``r``
measured over the last 10 s (starts per second while requests waited), the k-th refusal within
one drain interval gets about ``(backlog + k) / r`` — each refusal takes the next free admission
slot after the last one promised, and a promise leaves the book when its time passes
(:class:`~rxpipe.gateway._policy.DrainMeter`) — plus a jitter of up to half an interval, so
clients that honour it (the ``openai`` SDK does) come back spread at the drain rate instead of
in lock-step, and a second burst is told times from the backlog it meets, never an earlier
burst's. Before any rate is measured the value is 1–2 s, jittered. No refusal advertises less
than the remaining pause of a throttled engine (``engine.retry_after_s``: an OpenAIEngine paused
by its backend's 429/503). ``rate_limited`` tells the time to the key's next token,
``deadline`` the excess over the budget spread one drain interval apart among refusals made
together (:meth:`DrainMeter.stagger`), ``draining`` the minimum. Every value is clamped to
[``retry_after_min_s``, ``retry_after_max_s``].
"""

from __future__ import annotations

import random
from typing import Any

from ..serving import CompletionRequest
from ._config import GatewayConfig
from ._policy import DrainMeter, KeyBuckets, Refusal, clamp_retry_after
from ._tenant_gate import GateDecision
from ._tenants import Tenants

__all__ = ["AdmissionPolicy", "QUEUE_FULL_MESSAGE"]

#: the estimated queue wait is scaled by this before the latency-budget check
_WAIT_MARGIN = 1.1

QUEUE_FULL_MESSAGE = "the server is at capacity (queue full); retry after the indicated delay"


class AdmissionPolicy:
    """The refusal decisions of one edge, and the drain meter they read.

    Args: config (the gateway's settings). Attributes: ``meter`` (the drain rate and the book of
    promised slots); ``key_buckets`` (per-key token buckets, None without ``key_rate``);
    ``engines`` (the engines of the pipeline, for their pauses: set when the gateway is attached);
    ``rng`` (the jitter's source).
    """

    __slots__ = ("config", "meter", "key_buckets", "engines", "rng")

    def __init__(self, config: GatewayConfig) -> None:
        self.config = config
        self.meter = DrainMeter()
        self.key_buckets = KeyBuckets(config.key_rate, config.key_burst) if config.key_rate is not None else None
        self.engines: list[Any] = []
        self.rng = random.Random()

    def engine_pause_s(self) -> float:
        """Seconds until every engine takes work again (an OpenAIEngine paused by its backend's
        429/503, or its circuit open); 0.0 when none is paused."""
        pause = 0.0
        for engine in self.engines:  # a loop, not max(<genexpr>): asked for every refusal
            wait = getattr(engine, "retry_after_s", None)
            if wait and wait > pause:
                pause = float(wait)
        return pause

    def retry_after_queue(self, now: float) -> float:
        """Retry-After (seconds) for one more request refused for lack of room or an unavailable
        engine: a reservation (:meth:`DrainMeter.reserve`), never below an engine's pause."""
        cfg = self.config
        return self.meter.reserve(now, self.engine_pause_s(), cfg.retry_after_min_s, cfg.retry_after_max_s, self.rng)

    def queue_full(self, now: float, headers: dict[str, str] | None = None) -> Refusal:
        """429 ``queue_full``: no demand."""
        return Refusal(429, "queue_full", self.retry_after_queue(now), QUEUE_FULL_MESSAGE, headers)

    def early(self, now: float, *, draining: bool, available: bool, demand: int) -> Refusal | None:
        """Refusals that need no request body: draining, engine down, no demand."""
        cfg = self.config
        if draining:
            return Refusal(503, "draining", cfg.retry_after_min_s, "the server is shutting down; retry elsewhere")
        if not available:
            return Refusal(503, "unavailable", self.retry_after_queue(now), "the model backend is unavailable")
        if demand == 0:
            return self.queue_full(now)
        return None

    def policy(self, key_id: str, now: float) -> Refusal | None:
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
            meter = self.meter
            wait = meter.estimated_wait(now)
            # The budget is end to end: the queue wait (with a margin for the estimate's error,
            # about ±8 % at 30 queued requests) plus a p90 service time must fit in it.
            if wait is not None:
                wait = wait * _WAIT_MARGIN + meter.service_time()
            if wait is not None and wait > cfg.latency_budget_s:
                return Refusal(429, "deadline",
                               meter.stagger(now, max(wait - cfg.latency_budget_s, self.engine_pause_s()),
                                             cfg.retry_after_min_s, cfg.retry_after_max_s, self.rng),
                               f"estimated time to answer {wait:.2f} s exceeds the latency budget "
                               f"{cfg.latency_budget_s:g} s")
        return None

    def tenant(self, decision: GateDecision, request: CompletionRequest, now: float, tenants: Tenants) -> Refusal:
        """The refusal of a tenant's request its gate did not allow: 429 ``queue_full`` (no room
        for the tenant), 429 ``rate_limited`` (until the reservation fits), or a final 400
        ``request_over_tpm`` when the request alone needs more than the tenant's ``tpm``."""
        cfg = self.config
        if decision.reason == "queue_full":
            return Refusal(429, "queue_full", self.retry_after_queue(now),
                           f"the server has no room for tenant {decision.tenant!r} now (its share of the queue "
                           f"is in use); retry after the indicated delay", decision.headers)
        if decision.retry_after_s is None:  # the request alone is over the per-minute token limit
            tpm = tenants[decision.tenant].tpm
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
