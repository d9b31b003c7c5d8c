"""Per-request service, :class:`~rxpipe.engines.SimulatedEngine`'s mode with ``latency=``.

No batching: each sequence runs on its own slot with its own clock (first token after
``first_token_s``, then one token every ``per_token_s``), driven by one timer over a heap of
``(time, no, seq)`` events.
"""

from __future__ import annotations

import heapq

from ..errors import EngineError
from ._sim_state import _RUNNING, _WAITING, _SimState


class _PerRequestService(_SimState):
    """SimulatedEngine's ``latency=`` mode (a mixin of SimulatedEngine)."""

    # -- per-request service (latency=) --------------------------------------------------------------
    def _admit(self, now: float) -> None:
        """Start waiting sequences on free slots, each on its own clock."""
        waiting = self._waiting
        latency = self.latency
        assert latency is not None
        if self._running_dirty:
            # drop finished sequences (as _start_step does in batching mode): under sustained load
            # the engine never goes idle, and _running would keep every finished request alive
            self._running = [s for s in self._running if s.state == _RUNNING]
            self._running_dirty = False
        while waiting and self._n_running < self.max_num_seqs:
            seq = waiting.popleft()
            if seq.state != _WAITING:
                continue
            deadline = seq.request.deadline_s
            if deadline is not None and now > deadline:
                self._end(seq, "deadline", now)
                continue
            seq.state = _RUNNING
            self._n_waiting -= 1
            self._n_running += 1
            self._running.append(seq)
            seq.started_s = now
            first_s, per_token_s = latency(self._latency_rng, seq.max_out)
            seq.per_token_s = per_token_s
            t0 = now + seq.stall_s + first_s
            if seq.needs_credit:
                when = t0  # one event per token
            elif seq.fail_at is not None:
                when = t0 + seq.fail_at * per_token_s
            else:
                seq.first_token_s = t0
                when = t0 + (seq.max_out - 1) * per_token_s  # one event: all of it
            heapq.heappush(self._events, (when, seq.no, seq))

    def _arm_events(self) -> None:
        events = self._events
        if not events or self._loop is None:
            return
        when = events[0][0]
        timer = self._timer
        if timer is not None:
            if self._timer_when <= when:
                return
            timer.cancel()
        self._timer_when = when
        self._timer = self._loop.call_at(when, self._fire_events)

    def _fire_events(self) -> None:
        loop = self._loop
        assert loop is not None
        self._timer = None
        limit = max(loop.time(), self._timer_when)
        events = self._events
        self._busy = True
        try:
            while events and events[0][0] <= limit:
                t, _, seq = heapq.heappop(events)
                if seq.state != _RUNNING:
                    continue
                completion = seq.completion
                g = seq.generated
                if seq.fail_at is not None and (not seq.needs_credit or g == seq.fail_at):
                    self._fail(seq, EngineError(f"simulated engine failure on {seq.request.id} after "
                                                f"{g} tokens (error_rate={self.error_rate})"))
                    continue
                if not seq.needs_credit:
                    n = seq.max_out
                    seq.generated = n
                    self.tokens_generated += n
                    completion.push(self._text(seq, 0, n), n)
                    if seq.state == _RUNNING:
                        self._end(seq, "length" if seq.capped else "stop", t)
                    continue
                if g >= seq.max_out:  # nothing to make (a stop string at the very start)
                    self._end(seq, "length" if seq.capped else "stop", t)
                    continue
                if not completion.credit:
                    seq.awaiting_credit = True  # parked: the next token waits for credit
                    continue
                seq.generated = g + 1
                if g == 0:
                    seq.first_token_s = t
                self.tokens_generated += 1
                completion.push(self._text(seq, g, 1), 1)
                if seq.state != _RUNNING:
                    continue
                if seq.generated >= seq.max_out:
                    self._end(seq, "length" if seq.capped else "stop", t)
                    continue
                if not completion.credit:
                    self._park(seq, t)
                heapq.heappush(events, (t + seq.per_token_s, seq.no, seq))
        finally:
            self._after_callback()
