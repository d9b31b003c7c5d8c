"""The in-flight window of :class:`~rxpipe.engines.OpenAIEngine`: how many HTTP calls may run.

:class:`ConcurrencyLimit` keeps ``limit`` (a float; ``window = max(1, floor(limit))`` calls may be
in flight) between ``min_limit`` and ``max_limit``. Two kinds of signal move it:

- **Throttling** (429/503): a multiplicative decrease, ``limit = max(min_limit, backoff ×
  in_flight)`` (``backoff`` 0.9: against a backend that refuses above C slots the window then
  saws between about 0.9·C and C + 1; 0.8 served 0.92 of C, 0.9 served 0.94–0.98 in our model)
  where ``in_flight`` counts the refused call (so a backend refusing the (C+1)-th call brings
  the window back to about C). Counted once per window, as TCP counts a loss once per
  round trip: a refusal of a call *started before the last decrease* is not a new signal (that
  call was sent under the old window). A fixed limit (``adaptive=False``) then grows back by one
  call per window of successes (``1 / limit`` per success; TCP's congestion avoidance) up to
  ``max_limit``.
- **Latency** (``adaptive=True`` only): Netflix concurrency-limits' Gradient2 — per successful
  call, ``gradient = clamp(tolerance × long / short, 0.5, 1)``, ``new = limit × gradient +
  sqrt(limit)``, ``limit = (1 − smoothing) × limit + smoothing × new``, where ``short`` is this
  call's normalised latency and ``long`` an exponential average of them over ``long_window``
  samples, after a plain mean of the first 10 (pulled down by 5 % when it is more than twice
  ``short``, Gradient2's recovery rule).
  It grows while latency stays near its long-run level and shrinks when latency grows beyond
  ``tolerance`` × that. It does not grow while fewer than half the window is in use
  (application-limited: no evidence the backend could take more). The queue allowance is
  ``sqrt(limit)`` (the square-root rule of concurrency-limits' Gradient) rather than Gradient2's
  constant 4, so a backend of 2 slots is not overshot by 4. Once the backend has refused a call
  its capacity is known to be near: growth is then at most one call per window (``1 / limit``
  per success, TCP's congestion avoidance), so the limit probes above it rarely instead of at
  every few answers (Gradient2's growth alone had a backend of 16 slots refuse ~45 calls/s and
  serve 0.83 of its capacity in our model; capped, see ``tests/engines/test_concurrency.py``).

Latency normalisation: an LLM call's duration is mostly its output length (a 500-token answer takes
~100× a 5-token one on an idle server), so raw durations say more about the request than about the
backend's load. A sample is the call's duration divided by ``1 + completion tokens`` (seconds per
output token, the prefill share included; the ``+1`` keeps a zero-token answer finite): on a
continuous-batching server it grows with the batch, which is the load signal wanted.

**Slow start**: after a pause (a 503 with Retry-After, or every call refused) the window restarts
at ``min_limit`` and grows by one call per success (doubling per round trip) up to the limit it had
before the decrease (``ssthresh``), then as above — instead of every held call restarting at once and being
refused together again.

Anchors: Netflix concurrency-limits ``Gradient2Limit`` (defaults ``rttTolerance`` 1.5,
``smoothing`` 0.2, ``longWindow`` 600) and ``AIMDLimit``; RFC 5681 (slow start, congestion
avoidance, one decrease per window).
"""

from __future__ import annotations

import math

__all__ = ["ConcurrencyLimit"]

#: samples averaged plainly before the long-run latency becomes an exponential average
_WARMUP_SAMPLES = 10


class ConcurrencyLimit:
    """The window of calls in flight; see the module docstring for the rules.

    Args: initial (calls, >= 1); max_limit (calls, >= initial); adaptive (latency gradient on);
    min_limit (calls, >= 1); backoff (the multiplicative decrease, in (0, 1)); tolerance
    (latency ratio tolerated before shrinking, >= 1); smoothing (in (0, 1]); long_window (samples).
    ValueError for values out of range.
    """

    def __init__(self, initial: int, max_limit: int, *, adaptive: bool = False, min_limit: int = 1,
                 backoff: float = 0.9, tolerance: float = 1.5, smoothing: float = 0.2,
                 long_window: int = 600) -> None:
        if not 1 <= min_limit <= initial <= max_limit:
            raise ValueError(f"ConcurrencyLimit needs 1 <= min_limit <= initial <= max_limit, got "
                             f"{min_limit}, {initial}, {max_limit}")
        if not 0 < backoff < 1 or tolerance < 1 or not 0 < smoothing <= 1 or long_window < 1:
            raise ValueError("ConcurrencyLimit: backoff in (0, 1), tolerance >= 1, smoothing in (0, 1], "
                             "long_window >= 1")
        self.limit = float(initial)
        self.max_limit = max_limit
        self.min_limit = min_limit
        self.adaptive = adaptive
        self.backoff = backoff
        self.tolerance = tolerance
        self.smoothing = smoothing
        self.long_window = long_window
        #: loop time of the last decrease (a refusal of a call started before it is no new signal)
        self.last_decrease_s = -math.inf
        #: slow start runs while ``limit < ssthresh`` (0.0: not in slow start)
        self.ssthresh = 0.0
        self.long_latency: float | None = None
        self.samples = 0
        self.decreases = 0
        #: the limit before the last decrease: where slow start after a pause heads for
        self.before_decrease = self.limit

    @property
    def window(self) -> int:
        """Calls that may be in flight now (>= 1)."""
        return max(1, int(self.limit))

    def on_success(self, latency_s: float, tokens: int, in_flight: int) -> None:
        """A call finished well after ``latency_s`` seconds with ``tokens`` output tokens, with
        ``in_flight`` calls running (itself included)."""
        limit = self.limit
        if limit < self.ssthresh:  # slow start: one more per success
            self.limit = min(float(self.max_limit), limit + 1.0, self.ssthresh)
            if self.limit >= self.ssthresh:
                self.ssthresh = 0.0
            return
        if not self.adaptive:
            self.limit = min(float(self.max_limit), limit + 1.0 / limit)
            return
        short = latency_s / (1 + max(0, tokens))
        long = self.long_latency
        self.samples += 1
        if long is None:
            long = short
        elif self.samples <= _WARMUP_SAMPLES:  # a plain mean at first (Gradient2's warm-up)
            long += (short - long) / self.samples
        else:  # then an exponential average over long_window samples
            long += (short - long) * 2.0 / (self.long_window + 1)
        if short > 0 and long / short > 2:
            long *= 0.95
        self.long_latency = long
        if in_flight < limit / 2:
            return  # application-limited: no evidence either way
        gradient = 1.0 if short <= 0 else max(0.5, min(1.0, self.tolerance * long / short))
        new = limit * gradient + math.sqrt(limit)
        new = limit * (1 - self.smoothing) + new * self.smoothing
        if self.decreases:  # the backend refused before: probe by one call per window only
            new = min(new, limit + 1.0 / limit)
        self.limit = max(float(self.min_limit), min(float(self.max_limit), new))

    def on_throttle(self, started_s: float, in_flight: int, now: float) -> bool:
        """A call started at ``started_s`` was refused (429/503) with ``in_flight`` calls running
        (itself included). True when it was a new signal and the limit went down."""
        if started_s < self.last_decrease_s:
            return False
        self.last_decrease_s = now
        self.decreases += 1
        self.before_decrease = self.limit
        self.limit = max(float(self.min_limit), min(self.limit, self.backoff * in_flight))
        self.ssthresh = 0.0
        return True

    def on_pause(self) -> None:
        """Every call is held by the backend's Retry-After: restart in slow start afterwards, up
        to the limit before the last decrease (a pause says "later", not "fewer")."""
        target = max(self.limit, self.before_decrease)
        if target > self.min_limit:
            self.ssthresh = target
            self.limit = float(self.min_limit)
