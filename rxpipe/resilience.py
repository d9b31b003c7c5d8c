"""Resilience policies for calls to slow or flaky backends: :class:`Retry` and :class:`CircuitBreaker`.

Both are plain state (no task, no timer of their own): :func:`resilient_call` combines them around
one coroutine call, and ``ops.map_async`` and the engines use them that way. Time is read from the
running loop (``loop.time()``) and waits use ``asyncio.sleep``, so a virtual clock drives them.

Composition (Resilience4j's order, Retry outside CircuitBreaker): every attempt asks the breaker
first; an open breaker refuses with :class:`~rxpipe.CircuitOpenError`, which is retried like any
other error, its ``retry_after`` (seconds until half-open) being the minimum delay. So a retry
waits for the trial call when the breaker reopens soon enough, and fails at once when
``retry_after`` exceeds ``cap_s``.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any, Awaitable, Callable, TypeVar

from ._durations import as_seconds
from .errors import CircuitOpenError
from .settings import check_int, check_number

__all__ = ["Retry", "CircuitBreaker", "resilient_call", "retry_after_of"]

T = TypeVar("T")
R = TypeVar("R")

# Timers may fire up to the loop's clock resolution early, and ``now + (due - now)`` may round a
# few ulps short of ``due``: a deadline this close (seconds) counts as reached.
_CLOCK_TOLERANCE_S = 1e-6


def retry_after_of(error: BaseException) -> float | None:
    """The ``retry_after`` attribute of ``error`` in seconds, or None when absent or not a number >= 0."""
    value = getattr(error, "retry_after", None)
    if value is None or isinstance(value, bool):
        return None
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return None
    return seconds if seconds >= 0.0 else None


class Retry:
    """Per-call retry policy: exponential backoff with full jitter (AWS architecture blog).

    Args:
        attempts: total calls including the first (``>= 1``; 1 means never retry).
        base_s: backoff base in seconds (``>= 0``). cap_s: backoff cap in seconds (``>= base_s``).
        retry_on: exception types worth retrying (default: every ``Exception``).
        rng: the ``random.Random`` drawing the jitter (inject a seeded one for determinism).

    After the ``k``-th failed call (k = 1, 2, ...) the next call waits
    ``uniform(0, min(cap_s, base_s * 2 ** (k - 1)))`` seconds. An error with a ``retry_after``
    attribute (seconds, e.g. from an HTTP ``Retry-After`` or :class:`~rxpipe.CircuitOpenError`)
    makes that the minimum delay; a ``retry_after`` above ``cap_s`` gives up at once rather than
    hold a slot for an hour. The policy is stateless between calls, so one instance may serve
    many concurrent calls.
    """

    __slots__ = ("attempts", "base_s", "cap_s", "retry_on", "rng")

    def __init__(self, attempts: int, base_s: float, cap_s: float, *,
                 retry_on: type[BaseException] | tuple[type[BaseException], ...] = Exception,
                 rng: random.Random | None = None) -> None:
        check_int(attempts, "Retry(attempts)", minimum=1)
        base_s, cap_s = as_seconds(base_s), as_seconds(cap_s)  # type: ignore[assignment]  # timedelta too
        check_number(base_s, "Retry(base_s)", minimum=0)
        check_number(cap_s, "Retry(cap_s)", minimum=base_s)
        self.attempts = attempts
        self.base_s = float(base_s)
        self.cap_s = float(cap_s)
        self.retry_on = retry_on
        self.rng = rng if rng is not None else random.Random()

    def backoff_bound(self, failures: int) -> float:
        """Upper bound (seconds) of the jittered delay after ``failures`` failed calls."""
        exponent = failures - 1
        if exponent >= 1024:  # 2.0 ** 1024 overflows a float; the cap has long been reached
            return self.cap_s if self.base_s > 0 else 0.0
        return min(self.cap_s, self.base_s * 2.0 ** exponent)

    def delay(self, failures: int, error: BaseException) -> float | None:
        """Seconds to wait before the next call after ``failures`` failed calls, or None to give up.

        Gives up when the attempts are spent, when ``error`` is not one of ``retry_on``, or when
        its ``retry_after`` exceeds ``cap_s``. Draws one jitter value from ``rng`` otherwise.
        """
        if failures >= self.attempts or not isinstance(error, self.retry_on):
            return None
        retry_after = retry_after_of(error)
        if retry_after is not None and retry_after > self.cap_s:
            return None
        delay = self.rng.uniform(0.0, self.backoff_bound(failures))
        if retry_after is not None and retry_after > delay:
            return retry_after
        return delay

    def __repr__(self) -> str:
        return f"Retry(attempts={self.attempts}, base_s={self.base_s}, cap_s={self.cap_s})"


class CircuitBreaker:
    """Closed → open → half-open circuit breaker (Nygard's *Release It!*, Resilience4j).

    Args:
        failure_threshold: consecutive failed calls that open the circuit (``>= 1``).
        reset_timeout_s: seconds the circuit stays open before letting one trial call through.
        clock: a zero-argument function returning seconds; default ``loop.time()`` of the running
            loop (so the virtual clock drives it).

    States (``state``): ``"closed"`` — calls pass, a success resets the failure count;
    ``"open"`` — :meth:`acquire` raises :class:`~rxpipe.CircuitOpenError` whose ``retry_after`` is
    the seconds left until half-open, without the call being made; ``"half_open"`` — exactly one
    trial call passes (others are refused with ``retry_after=None`` while it runs); its success
    closes the circuit, its failure opens it again for another ``reset_timeout_s``.

    Protocol for a call: ``trial = breaker.acquire()`` (raises when refused), then exactly one of
    :meth:`record_success`, :meth:`record_failure`, or — for an abandoned (cancelled) trial —
    :meth:`release`. :meth:`call` does this around a coroutine function. One breaker may be
    shared by many stages and engines (they all see the same backend).
    """

    __slots__ = ("failure_threshold", "reset_timeout_s", "_clock", "_state", "_failures",
                 "_opened_at", "_trial")

    def __init__(self, failure_threshold: int, reset_timeout_s: float, *,
                 clock: Callable[[], float] | None = None) -> None:
        check_int(failure_threshold, "CircuitBreaker(failure_threshold)", minimum=1)
        reset_timeout_s = as_seconds(reset_timeout_s)  # type: ignore[assignment]  # timedelta too
        check_number(reset_timeout_s, "CircuitBreaker(reset_timeout_s)", minimum=0)
        self.failure_threshold = failure_threshold
        self.reset_timeout_s = float(reset_timeout_s)
        self._clock = clock
        self._state = "closed"
        self._failures = 0
        self._opened_at = 0.0
        self._trial = False

    # -- state ---------------------------------------------------------------------------------
    def _now(self) -> float:
        clock = self._clock
        return clock() if clock is not None else asyncio.get_running_loop().time()

    def _advance(self) -> str:
        # open → half_open happens lazily, when someone looks after the reset timeout passed
        if self._state == "open" and self._now() + _CLOCK_TOLERANCE_S >= self._opened_at + self.reset_timeout_s:
            self._state = "half_open"
            self._trial = False
        return self._state

    @property
    def state(self) -> str:
        """``"closed"``, ``"open"`` or ``"half_open"`` (open turns half-open once the timeout passed)."""
        return self._advance()

    @property
    def closed(self) -> bool:
        """True while the circuit is closed (calls pass): :attr:`state` ``== "closed"`` without a
        clock reading (closed never changes with time alone), for callers polling per request."""
        return self._state == "closed"

    @property
    def consecutive_failures(self) -> int:
        """Failed calls since the last success (what ``failure_threshold`` is compared with)."""
        return self._failures

    @property
    def retry_after(self) -> float | None:
        """Seconds until a trial call may pass: 0.0 when calls pass now, None while a trial runs."""
        state = self._advance()
        if state == "closed":
            return 0.0
        if state == "open":
            return max(0.0, self._opened_at + self.reset_timeout_s - self._now())
        return None if self._trial else 0.0

    # -- one call ------------------------------------------------------------------------------
    def acquire(self) -> bool:
        """Ask to make a call. Returns True when it is the half-open trial, False otherwise.

        Raises :class:`~rxpipe.CircuitOpenError` (``retry_after`` in seconds, or None while a
        trial is in flight) when the call must not be made.
        """
        state = self._advance()
        if state == "closed":
            return False
        if state == "open":
            retry_after = max(0.0, self._opened_at + self.reset_timeout_s - self._now())
            raise CircuitOpenError(f"circuit open; half-open in {retry_after:.3f} s", retry_after)
        if self._trial:
            raise CircuitOpenError("circuit half-open; its trial call is in flight", None)
        self._trial = True
        return True

    def record_success(self) -> None:
        """A call succeeded: closes a half-open circuit; resets the failure count."""
        state = self._advance()
        if state == "open":
            return  # a call admitted before the circuit opened: it does not close it
        self._state = "closed"
        self._failures = 0
        self._trial = False

    def record_failure(self) -> None:
        """A call failed: opens the circuit at the threshold, or again after a failed trial."""
        state = self._advance()
        if state == "open":
            return
        self._failures += 1
        if state == "half_open" or self._failures >= self.failure_threshold:
            self._state = "open"
            self._opened_at = self._now()
            self._trial = False

    def release(self) -> None:
        """Give back the half-open trial permit of a call abandoned before its outcome (cancelled)."""
        if self._state == "half_open":
            self._trial = False

    async def call(self, fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        """Await ``fn(*args, **kwargs)`` under the breaker (raises CircuitOpenError when refused)."""
        trial = self.acquire()
        try:
            result = await fn(*args, **kwargs)
        except asyncio.CancelledError:
            if trial:
                self.release()
            raise
        except Exception:
            self.record_failure()
            raise
        self.record_success()
        return result

    def __repr__(self) -> str:
        return (f"CircuitBreaker(failure_threshold={self.failure_threshold}, "
                f"reset_timeout_s={self.reset_timeout_s}, state={self._state!r})")


async def resilient_call(fn: Callable[[T], Awaitable[R]], arg: T, *, retry: Retry | None = None,
                         breaker: CircuitBreaker | None = None, timeout_s: float | None = None) -> R:
    """Await ``fn(arg)`` with a per-call deadline, a circuit breaker and retries (all optional).

    Each attempt: ``breaker.acquire()`` (an open breaker raises CircuitOpenError without calling
    ``fn``), then ``fn(arg)`` bounded by ``timeout_s`` seconds (``TimeoutError`` when exceeded).
    A failure other than CircuitOpenError is recorded on the breaker; then ``retry.delay`` decides
    the wait (``asyncio.sleep``, so the virtual clock applies) or re-raises the last error.
    Cancellation releases a half-open trial permit and propagates.
    """
    failures = 0
    while True:
        trial = False
        try:
            if breaker is not None:
                trial = breaker.acquire()
            if timeout_s is None:
                result = await fn(arg)
            else:
                async with asyncio.timeout(timeout_s):
                    result = await fn(arg)
        except asyncio.CancelledError:
            if trial and breaker is not None:
                breaker.release()
            raise
        except Exception as error:
            if breaker is not None and not isinstance(error, CircuitOpenError):
                breaker.record_failure()
            failures += 1
            delay = retry.delay(failures, error) if retry is not None else None
            if delay is None:
                raise
            await asyncio.sleep(delay)
            continue
        if breaker is not None:
            breaker.record_success()
        return result
