"""Continuous batching, :class:`~rxpipe.engines.SimulatedEngine`'s default mode.

One call of ``_start_step`` is one scheduler iteration; the algorithm is described in
:mod:`rxpipe.engines.simulated`.
"""

from __future__ import annotations

import math

from ..errors import EngineError
from ..serving import _engine_metrics as _metrics
from ._sim_state import _RUNNING, _WAITING, StepRecord, _Seq, _SimState


class _ContinuousBatching(_SimState):
    """SimulatedEngine's steps (a mixin of SimulatedEngine)."""

    # -- continuous batching ---------------------------------------------------------------------
    def _kick(self) -> None:
        """Start a step soon, unless one is in flight (it picks new work up when it ends)."""
        if self._stepping or self._start_queued or self._loop is None or not self.available:
            return
        if self._timer is not None:  # a wake-up for a hung sequence: start now instead
            self._timer.cancel()
        self._start_queued = True
        self._timer = self._loop.call_soon(self._start_next)

    def _start_next(self) -> None:
        # One more loop iteration before scheduling: whoever was handed a Completion in the
        # iteration that admitted it (a reply future's waiter) subscribes to its tokens first, so
        # a streaming sequence gets into the first step instead of waiting for credit.
        self._timer = self._loop.call_soon(self._start_step)  # type: ignore[union-attr]

    def _start_step(self) -> None:
        loop = self._loop
        assert loop is not None
        self._timer = None
        self._start_queued = False
        now = loop.time()
        # Steps are paced on the clock, as a GPU's are: a step that follows another starts when
        # that one was due to end, not when the loop got round to delivering its tokens, so the
        # time spent delivering overlaps the next step instead of adding to it.
        start = self._step_due if self._step_due is not None and self._step_due < now else now
        self._step_due = None
        budget = self.max_num_batched_tokens
        tps = self.tokens_per_step
        batch = self._batch
        prefill = decode_tokens = decode_seqs = 0
        wake = math.inf
        running = self._running
        if self._running_dirty:
            running = self._running = [s for s in running if s.state == _RUNNING]
            self._running_dirty = False
        # 1. running sequences: decode, or continue a chunked prefill
        for seq in running:
            if seq.stall_until > now:
                if seq.stall_until < wake:
                    wake = seq.stall_until
                continue
            if seq.needs_credit and not seq.completion.credit:
                continue  # parked: keeps its slot, costs nothing
            left = seq.prompt_tokens - seq.prefilled
            if left > 0:
                if not budget:
                    continue
                n = left if left < budget else budget
                seq.step_prefill = n
                prefill += n
            else:
                n = seq.max_out - seq.generated
                if n > tps:
                    n = tps
                if n > budget:
                    continue
                seq.step_prefill = 0
                seq.step_tokens = n
                decode_tokens += n
                decode_seqs += 1
            budget -= n
            seq.in_step = True
            batch.append(seq)
        # 2. waiting sequences, first come first served
        expired: list[_Seq] | None = None
        prefix = self.prefix_cache
        cached = queried = 0
        waiting = self._waiting
        slots = self.max_num_seqs - self._n_running
        if waiting and budget > 0 and slots > 0:
            skipped: list[_Seq] = []
            while waiting:
                seq = waiting.popleft()
                if seq.state != _WAITING:
                    continue
                if budget <= 0 or slots <= 0:
                    waiting.appendleft(seq)
                    break
                if seq.needs_credit and not seq.completion.credit:
                    skipped.append(seq)
                    continue
                deadline = seq.request.deadline_s
                if deadline is not None and now > deadline:
                    if expired is None:
                        expired = []
                    expired.append(seq)
                    continue
                seq.state = _RUNNING
                self._n_waiting -= 1
                self._n_running += 1
                slots -= 1
                running.append(seq)
                seq.started_s = now
                if prefix is not None:
                    # cached leading blocks are pinned and not prefilled (vLLM's get_computed_blocks)
                    hit = prefix.admit(seq.blocks, seq.prompt_tokens)
                    seq.pinned = hit
                    seq.prefilled = hit * prefix.block_tokens
                    cached += seq.prefilled
                    queried += seq.prompt_tokens
                if seq.stall_s:
                    seq.stall_until = now + seq.stall_s  # hung: holds its slot, not stepped
                    if seq.stall_until < wake:
                        wake = seq.stall_until
                    continue
                left = seq.prompt_tokens - seq.prefilled
                n = left if left < budget else budget
                seq.step_prefill = n
                prefill += n
                budget -= n
                seq.in_step = True
                batch.append(seq)
            if skipped:
                waiting.extendleft(reversed(skipped))
        if batch:
            duration = self.step_overhead_s + self.prefill_s_per_token * prefill + self.decode_s_per_seq * decode_seqs
            self.steps += 1
            if self.step_log.maxlen:
                self.step_log.append(StepRecord(self.steps, start, duration, len(batch), prefill, decode_tokens,
                                                decode_seqs, self._n_running, self._n_waiting,
                                                tuple(s.request.id for s in batch), cached))
            _metrics.observe_step(self, duration, prefill + decode_tokens)
            self._stepping = True
            self._step_end = start + duration
            self._timer = loop.call_at(self._step_end, self._end_step)
        elif wake < math.inf:
            self._timer = loop.call_at(wake, self._start_step)
        if queried:
            _metrics.count_prefix_cache(self, queried, cached)
        if expired:
            self._busy = True
            try:
                for seq in expired:
                    self._end(seq, "deadline", now)
            finally:
                self._after_callback()

    def _end_step(self) -> None:
        loop = self._loop
        assert loop is not None
        self._timer = None
        self._stepping = False
        self._step_due = self._step_end  # the next step, if it follows at once, starts from here
        now = loop.time()
        batch = self._batch
        self._batch = []
        tps = self.tokens_per_step
        self._busy = True
        try:
            for seq in batch:
                seq.in_step = False
                if seq.state != _RUNNING:
                    continue
                completion = seq.completion
                if completion.cancel_requested:
                    self._end(seq, "cancelled", now)
                    continue
                if seq.step_prefill:
                    seq.prefilled += seq.step_prefill
                    if seq.blocks:  # blocks this chunk completed are cached (and pinned) from now on
                        done = min(len(seq.blocks), seq.prefilled // self.block_tokens)
                        if done > seq.pinned:
                            self.prefix_cache.pin(seq.blocks, seq.pinned, done)  # type: ignore[union-attr]
                            seq.pinned = done
                    if seq.prefilled < seq.prompt_tokens:
                        continue
                    n = seq.max_out if seq.max_out < tps else tps  # the prefill step samples token 1
                else:
                    n = seq.step_tokens
                g = seq.generated
                if seq.fail_at is not None and g + n > seq.fail_at:
                    self._fail(seq, EngineError(f"simulated engine failure on {seq.request.id} after "
                                                f"{g} tokens (error_rate={self.error_rate})"))
                    continue
                seq.generated = g + n
                if g == 0:
                    seq.first_token_s = now
                self.tokens_generated += n
                completion.push(self._text(seq, g, n), n)
                if seq.state != _RUNNING:
                    continue  # the consumer cancelled it, or brought the engine down, in on_next
                if seq.generated >= seq.max_out:
                    self._end(seq, "length" if seq.capped else "stop", now)
                elif seq.needs_credit and not completion.credit:
                    self._park(seq, now)
        finally:
            self._after_callback()
            if not self._start_queued:
                self._step_due = None  # idle now: the next step starts when work arrives
