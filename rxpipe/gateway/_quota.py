"""Per-tenant request and token limits (``rpm``, ``tpm``) with OpenAI's rate-limit headers (DESIGN §5).

Window semantics: a token bucket per limit, the way OpenAI describes its own limits (a limit per
minute enforced continuously, not in fixed minute windows). A limit of ``L`` per minute is a
bucket of capacity ``L`` that refills at ``L / 60`` per second, full at start. So a tenant with
``tpm=2000`` may spend 2000 tokens at once, then about 33.3 tokens per second; it never gets a
second burst by waiting for a minute boundary. ``x-ratelimit-reset-*`` is "the time until the
rate limit resets to its initial state" (OpenAI's words): the time until the bucket is full.

Admission is one synchronous call (:meth:`Quotas.reserve`) that checks and takes both buckets
or neither: on the event loop nothing can run between the check and the take, so parallel
requests never overshoot. It reserves ``prompt_tokens + max_tokens``; :meth:`Quotas.reconcile`
settles with the real count at completion (refund, or a debt if the prompt estimate was low),
:meth:`Quotas.release` gives everything back for a request that never ran (refused further on).

Time is read only through the injected ``clock`` (``loop.time``, seconds), so tests on the
virtual clock get exact values.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from ._tenants import Tenant

__all__ = ["QuotaDecision", "Quotas", "Reservation", "go_duration"]

_MINUTE_S = 60.0


def _frac(value: int, digits: int) -> str:
    """``value / 10**digits`` as Go prints it: trailing zeros and a bare point omitted."""
    whole, frac = divmod(value, 10**digits)
    text = f"{frac:0{digits}d}".rstrip("0")
    return f"{whole}.{text}" if text else str(whole)


def go_duration(seconds: float) -> str:
    """Format ``seconds`` as Go's ``time.Duration.String()``: ``0s``, ``12ms``, ``1.5ms``, ``1s``,
    ``1m30.5s``, ``6m0s``, ``1h0m0s`` (leading zero units omitted; under one second a smaller unit
    so the leading digit is non-zero). Nanosecond resolution, rounded to nearest. OpenAI sends its
    ``x-ratelimit-reset-*`` headers in this format."""
    ns = round(seconds * 1e9)
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    if ns == 0:
        return "0s"
    if ns < 1_000:
        return f"{sign}{ns}ns"
    if ns < 1_000_000:
        return f"{sign}{_frac(ns, 3)}µs"
    if ns < 1_000_000_000:
        return f"{sign}{_frac(ns, 6)}ms"
    total_s, sub_ns = divmod(ns, 1_000_000_000)
    hours, rest = divmod(total_s, 3600)
    minutes, secs = divmod(rest, 60)
    text = _frac(secs * 1_000_000_000 + sub_ns, 9) + "s"
    if hours or minutes:
        text = f"{minutes}m{text}"
    if hours:
        text = f"{hours}h{text}"
    return sign + text


def _header_duration(seconds: float) -> str:
    """A reset time for a header: rounded up to whole milliseconds (a client that waits that long
    finds the limit reset), in Go's format."""
    ms = math.ceil(round(max(0.0, seconds) * 1000, 6))
    return go_duration(ms / 1000)


class _Window:
    """``limit`` per minute as a bucket of capacity ``limit`` refilling at ``limit / 60`` per second.

    ``level`` may go below zero (a debt, when a completion used more tokens than reserved); the
    debt is repaid by the refill. Times are seconds on the caller's clock; a clock going backwards
    adds nothing.
    """

    __slots__ = ("limit", "level", "last")

    def __init__(self, limit: int, now: float) -> None:
        self.limit = limit
        self.level = float(limit)
        self.last = now

    def refill(self, now: float) -> float:
        if now > self.last:
            self.level = min(float(self.limit), self.level + (now - self.last) * self.limit / _MINUTE_S)
            self.last = now
        return self.level

    def time_until(self, now: float, amount: float) -> float | None:
        """Seconds until ``amount`` fits (0.0 now); None if it never fits (over the limit)."""
        if amount > self.limit:
            return None
        missing = amount - self.refill(now)
        return 0.0 if missing <= 0 else missing * _MINUTE_S / self.limit

    def give_back(self, now: float, amount: float) -> None:
        self.refill(now)
        self.level = min(float(self.limit), self.level + amount)

    def headers(self, now: float, unit: str) -> dict[str, str]:
        level = self.refill(now)
        return {
            f"x-ratelimit-limit-{unit}": str(self.limit),
            f"x-ratelimit-remaining-{unit}": str(max(0, math.floor(level + 1e-9))),
            f"x-ratelimit-reset-{unit}": _header_duration((self.limit - level) * _MINUTE_S / self.limit),
        }


class Reservation:
    """What :meth:`Quotas.reserve` took for one request: ``requests`` (0 or 1) and ``tokens``.
    Settled once, by :meth:`Quotas.reconcile` or :meth:`Quotas.release` (a second call is a no-op)."""

    __slots__ = ("tenant", "requests", "tokens", "settled")

    def __init__(self, tenant: str, requests: int, tokens: int) -> None:
        self.tenant = tenant
        self.requests = requests
        self.tokens = tokens
        self.settled = False

    def __repr__(self) -> str:
        return f"<Reservation {self.tenant!r} requests={self.requests} tokens={self.tokens} settled={self.settled}>"


class QuotaDecision:
    """The answer of :meth:`Quotas.reserve`.

    allowed: admit (the reservation is taken). reservation: what was taken (None if refused).
    limit: ``"requests"`` or ``"tokens"``, the limit that refused (None if allowed).
    retry_after_s: seconds until the same reservation fits (for Retry-After; 0.0 if allowed;
        None if it never fits: the request alone exceeds the per-minute limit).
    headers: OpenAI's ``x-ratelimit-*`` headers after the decision (empty: no limits configured).
    """

    __slots__ = ("allowed", "reservation", "limit", "retry_after_s", "headers")

    def __init__(self, allowed: bool, reservation: Reservation | None, limit: str | None,
                 retry_after_s: float | None, headers: dict[str, str]) -> None:
        self.allowed = allowed
        self.reservation = reservation
        self.limit = limit
        self.retry_after_s = retry_after_s
        self.headers = headers


class Quotas:
    """The ``rpm`` / ``tpm`` buckets of every configured tenant that has limits.

    Args: tenants (name → :class:`Tenant`, e.g. a :class:`~rxpipe.gateway._tenants.Tenants`);
        clock (seconds, e.g. ``loop.time``). A tenant without limits, or a name not in
        ``tenants``, is always allowed and gets no headers.
    """

    __slots__ = ("clock", "_requests", "_tokens")

    def __init__(self, tenants: Mapping[str, Tenant], clock: Callable[[], float]) -> None:
        self.clock = clock
        self._requests: dict[str, _Window] = {}
        self._tokens: dict[str, _Window] = {}
        self._configure(tenants, {}, {})

    def _configure(self, tenants: Mapping[str, Tenant], old_requests: Mapping[str, _Window],
                   old_tokens: Mapping[str, _Window]) -> None:
        now = self.clock()
        for name, tenant in tenants.items():
            for limit, old, new in ((tenant.rpm, old_requests, self._requests),
                                    (tenant.tpm, old_tokens, self._tokens)):
                if limit is None:
                    continue
                kept = old.get(name)
                new[name] = kept if kept is not None and kept.limit == limit else _Window(limit, now)

    def updated(self, tenants: Mapping[str, Tenant]) -> Quotas:
        """A :class:`Quotas` for reloaded ``tenants``: a bucket whose tenant and limit are unchanged
        carries over with its level (a reload is no way to reset a limit); others start full."""
        new = Quotas({}, self.clock)
        new._configure(tenants, self._requests, self._tokens)
        return new

    def reserve(self, tenant: str, prompt_tokens: int, max_tokens: int) -> QuotaDecision:
        """Check and take, atomically, 1 request and ``prompt_tokens + max_tokens`` tokens (both or
        neither). Call it in the same synchronous step as the admission decision; if the request
        is refused afterwards for another reason, :meth:`release` the reservation."""
        now = self.clock()
        requests, tokens = self._requests.get(tenant), self._tokens.get(tenant)
        amount = prompt_tokens + max_tokens
        wait_requests = requests.time_until(now, 1) if requests is not None else 0.0
        wait_tokens = tokens.time_until(now, amount) if tokens is not None else 0.0
        if wait_requests == 0.0 and wait_tokens == 0.0:
            if requests is not None:
                requests.level -= 1
            if tokens is not None:
                tokens.level -= amount
            reservation = Reservation(tenant, 1 if requests is not None else 0, amount if tokens is not None else 0)
            return QuotaDecision(True, reservation, None, 0.0, self.headers(tenant))
        limit = "tokens" if wait_tokens != 0.0 else "requests"
        retry = None if wait_requests is None or wait_tokens is None else max(wait_requests, wait_tokens)
        return QuotaDecision(False, None, limit, retry, self.headers(tenant))

    def reconcile(self, reservation: Reservation, used_tokens: int) -> None:
        """Settle with the real count (prompt + completion tokens): refund what was reserved and not
        used (capped at the limit), or take the excess (a debt the refill repays; the remaining
        header never goes below 0). The request itself stays counted."""
        if reservation.settled:
            return
        reservation.settled = True
        tokens = self._tokens.get(reservation.tenant)
        if tokens is None or not reservation.tokens:
            return
        now = self.clock()
        extra = used_tokens - reservation.tokens
        if extra <= 0:
            tokens.give_back(now, -extra)
        else:
            tokens.refill(now)
            tokens.level -= extra

    def release(self, reservation: Reservation) -> None:
        """Give the whole reservation back: the request never ran (refused further on, or the
        client left before the engine took it)."""
        if reservation.settled:
            return
        reservation.settled = True
        now = self.clock()
        requests, tokens = self._requests.get(reservation.tenant), self._tokens.get(reservation.tenant)
        if requests is not None and reservation.requests:
            requests.give_back(now, reservation.requests)
        if tokens is not None and reservation.tokens:
            tokens.give_back(now, reservation.tokens)

    def headers(self, tenant: str) -> dict[str, str]:
        """``x-ratelimit-{limit,remaining,reset}-{requests,tokens}`` for ``tenant`` now (only the
        limits it has). Remaining is floored and never negative; reset is a Go duration in whole
        milliseconds, rounded up."""
        now = self.clock()
        out: dict[str, str] = {}
        requests, tokens = self._requests.get(tenant), self._tokens.get(tenant)
        if requests is not None:
            out.update(requests.headers(now, "requests"))
        if tokens is not None:
            out.update(tokens.headers(now, "tokens"))
        return out
