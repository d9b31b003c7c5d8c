"""What the server's answers do to :class:`~rxpipe.engines.OpenAIEngine`: the circuit breaker's
verdicts, the pause after a 429/503 (Retry-After, or exponential backoff, with jitter), and the
wake-up when the breaker may close again."""

from __future__ import annotations

import logging
from typing import Mapping

from ..errors import EngineUnavailableError
from ..logs import event, public_url
from ._openai_state import _Call, _OpenAIState
from ._openai_wire import parse_retry_after

#: backoff base (seconds) after a 429/503 without a usable Retry-After; doubles per consecutive answer
_BACKOFF_BASE_S = 1.0
#: a Retry-After below this (``0``, say) is no hint: the engine backs off as if there were none
_MIN_RETRY_AFTER_S = 0.05

#: state transitions of engines (backend down/up, paused/resumed), each logged once
log = logging.getLogger("rxpipe.engine")


class _Backoff(_OpenAIState):
    """OpenAIEngine's reactions to answers (a mixin of OpenAIEngine)."""

    # -- outcomes --------------------------------------------------------------------------------
    def _settle(self, call: _Call, ok: bool | None, why: str | None = None) -> None:
        """Give the breaker this attempt's verdict once: True success, False failure (``why``: what
        failed, for the log), None abandoned."""
        if call.settled:
            return
        call.settled = True
        breaker = self.breaker
        if ok is None:
            if call.trial:
                breaker.release()
        elif ok:
            breaker.record_success()
            if self._down_since is not None and self._breaker_state() == "closed":
                self._log_up()
        else:
            breaker.record_failure()
            if self._breaker_state() == "open":
                retry_after = breaker.retry_after or 0.0
                self._arm_breaker_timer(retry_after)
                self._freed = True  # listeners look again: unavailable now (execute, balance answer 503)
                self._log_down(why or "a failed call", retry_after)

    # -- state transitions, each logged once ------------------------------------------------------
    def _where(self) -> str:
        return f"engine {self.name} ({public_url(self.base_url)})"

    def _log_down(self, why: str, retry_after: float) -> None:
        if self._down_since is not None:  # the half-open trial failed: still down
            event(log, logging.DEBUG, f"{self._where()}: still down ({why}); next trial in {retry_after:.1f} s",
                  engine=self.name, state="down")
            return
        self._down_since = self._loop.time() if self._loop is not None else 0.0
        event(log, logging.WARNING, f"{self._where()}: backend down ({why}); circuit open, requests get 503, "
              f"next trial in {retry_after:.1f} s", engine=self.name, state="down", retry_in_s=round(retry_after, 3))

    def _log_up(self) -> None:
        down = (self._loop.time() if self._loop is not None else 0.0) - (self._down_since or 0.0)
        self._down_since = None
        event(log, logging.INFO, f"{self._where()}: backend up again after {down:.1f} s; circuit closed",
              engine=self.name, state="up", down_s=round(down, 3))

    def _log_paused(self, status: int, wait_s: float, asked_s: float | None, *, long: bool = False) -> None:
        if self._paused_since is not None and not long:
            return
        if self._paused_since is None:
            self._paused_since = self._loop.time() if self._loop is not None else 0.0
        asked = "no usable Retry-After" if asked_s is None else f"Retry-After {asked_s:g} s"
        scope = ": no call goes out meanwhile" if status == 503 else ": every admitted call waits for its Retry-After"
        if long:
            scope = f", over retry_after_cap_s={self.retry_after_cap_s:g}: requests fail at once with 503 meanwhile"
        event(log, logging.WARNING, f"{self._where()}: paused by {status} ({asked}) for {wait_s:.1f} s{scope}",
              engine=self.name, state="paused", status=status, wait_s=round(wait_s, 3), retry_after_s=asked_s)

    def _log_resumed(self) -> None:
        since = self._paused_since
        if since is None:
            return
        self._paused_since = None
        paused = (self._loop.time() if self._loop is not None else since) - since
        event(log, logging.INFO, f"{self._where()}: resumed after a {paused:.1f} s pause", engine=self.name,
              state="resumed", paused_s=round(paused, 3))

    def _throttled(self, call: _Call, status: int, headers: Mapping[str, str]) -> bool:
        self.throttled += 1
        self._streak += 1
        call.throttles += 1
        retry_after = asked = call.asked_s = parse_retry_after(headers)
        cap = self.retry_after_cap_s
        if retry_after is None or retry_after < _MIN_RETRY_AFTER_S:
            # absent, unreadable, or "retry at once" (Retry-After: 0): never a tight retry loop
            retry_after = min(cap, _BACKOFF_BASE_S * 2.0 ** min(self._streak - 1, 62))
        delay = min(cap, retry_after + self._rng.uniform(0.0, self.retry_after_jitter * retry_after))
        loop = self._loop
        assert loop is not None
        now = loop.time()
        # the window shrinks (once per window), and only this call waits: the others in flight
        # are being served. A 503 (the server is down or draining) still pauses every call.
        self._limit.on_throttle(call.started_s if call.started_s is not None else now, len(self._calls), now)
        if asked is not None and asked > cap:
            self._wait_too_long(call, status, asked)
            return False
        if status == 503:
            self._pause_for(delay, status)
            self._log_paused(status, delay, asked)
        else:
            call.not_before = now + delay
        if call.throttles > self.throttle_retries:
            error = EngineUnavailableError(f"{self.base_url} answered {status} to {call.request.id} "
                                           f"{call.throttles} times (throttle_retries={self.throttle_retries})")
            error.retry_after = delay  # type: ignore[attr-defined]
            call.completion.fail(error)
            return False
        return True

    def _wait_too_long(self, call: _Call, status: int, asked: float) -> None:
        """The backend asked for a wait over ``retry_after_cap_s``: holding the request that long
        helps nobody (its client's SDK gives up sooner, or retries elsewhere). Fail it at once
        with ``EngineUnavailableError`` whose ``retry_after`` is the honest wait (the edge's 503
        says it, capped only by its own ``retry_after_max_s``), stay paused — and unavailable —
        that long, and fail what waits in the engine the same way; ``free_slots`` stays nominal
        meanwhile, so ``execute`` answers the requests queued upstream at once (503), as for an
        open breaker, and ``balance`` sends new ones to another replica."""
        was_long = self._pause_long
        self._pause_for(asked, status, long=True)
        error = EngineUnavailableError(f"{self.base_url} answered {status} to {call.request.id} with Retry-After "
                                       f"{asked:g} s, over retry_after_cap_s={self.retry_after_cap_s:g}")
        error.retry_after = asked  # type: ignore[attr-defined]
        call.completion.fail(error)
        if not was_long:
            self._log_paused(status, asked, asked, long=True)
        waiting = EngineUnavailableError(f"engine {self.name!r}: its backend ({self.base_url}) asked for a "
                                         f"{asked:g} s pause (over retry_after_cap_s={self.retry_after_cap_s:g})")
        waiting.retry_after = asked  # type: ignore[attr-defined]
        self._fail_held(waiting)
        self.notify_capacity()  # nominal free slots: execute answers what is queued behind, at once

    def _pause_for(self, delay: float, status: int, *, long: bool = False) -> None:
        loop = self._loop
        assert loop is not None
        until = loop.time() + delay
        self._pause_long = self._pause_long or long
        if self._pause is not None:
            if status == 503:
                self._pause_status = 503
            if until <= self._pause_until:
                return
            self._pause.cancel()
        else:
            self._pause_status = status
            self.pauses += 1
            self._limit.on_pause()
        self._pause_until = until
        self._pause = loop.call_at(until, self._end_pause)

    def _end_pause(self) -> None:
        self._pause = None
        self._pause_long = False
        if not self.paused:
            self._log_resumed()
        self._freed = True
        self._start_waiting()

    def _arm_breaker_timer(self, delay: float) -> None:
        if self._closed or self._loop is None:
            return
        if self._breaker_timer is not None:
            self._breaker_timer.cancel()
        self._breaker_timer = self._loop.call_later(delay, self._breaker_wake)

    def _breaker_wake(self) -> None:
        self._breaker_timer = None
        state = self._breaker_state()
        if state == "open":  # reopened meanwhile (shared breaker): wait again
            self._arm_breaker_timer(self.breaker.retry_after or 0.0)
            return
        self._freed = True  # available again: the half-open trial slot
        self._start_waiting()

