"""Seeded random runs of execute + SimulatedEngine: the demand invariant holds and nothing is lost."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

import rxpipe as rx
from rxpipe import UNBOUNDED
from rxpipe import operators as ops
from rxpipe.engines import FINISH_REASONS, Completion, CompletionRequest, EngineError, SimulatedEngine
from rxpipe.testing import TestSubscriber

from .helpers import DECODE, OVERHEAD, PREFILL


@pytest.mark.virtual
@pytest.mark.parametrize("seed", range(12))
async def test_random_runs_keep_the_demand_invariant(seed: int, loop: asyncio.AbstractEventLoop) -> None:
    rng = random.Random(seed)
    max_num_seqs = rng.randint(1, 8)
    per_request = seed % 3 == 2
    common: dict[str, Any] = dict(stall_timeout_s=0.5, error_rate=0.1, seed=seed)
    if per_request:
        e = SimulatedEngine.per_request(slots=max_num_seqs, base_s=OVERHEAD, per_token_s=DECODE, tokens=(1, 12),
                                        **common)
    else:
        e = SimulatedEngine(max_num_seqs=max_num_seqs, max_num_batched_tokens=rng.randint(4, 64),
                            step_overhead_s=OVERHEAD, prefill_s_per_token=PREFILL, decode_s_per_seq=DECODE,
                            tokens_per_step=rng.randint(1, 3), output_tokens=(1, 12), **common)
    requests = [CompletionRequest(prompt="abcd" * rng.randint(1, 50), stream=rng.random() < 0.5,
                                  max_tokens=rng.choice([None, rng.randint(1, 10)]),
                                  deadline_s=rng.choice([None, rng.uniform(0.0, 1.0)]))
                for _ in range(40)]
    cancels = [loop.call_later(rng.uniform(0.0, 0.5), r.cancel) for r in requests if rng.random() < 0.15]
    out = TestSubscriber[Completion](initial_request=UNBOUNDED)

    def check() -> None:
        stage = out.subscription.upstream.upstream  # type: ignore[union-attr]  # strict boundary, tap, execute
        assert stage.upstream_outstanding + len(stage.held) + e.running + e.waiting <= max_num_seqs

    e.add_capacity_listener(check)

    def consume(c: Completion) -> None:
        check()
        if not c.request.stream:
            return
        mode = rng.choice(["all", "slow", "never", "cancel"])
        if mode == "never":
            return  # stalls out
        chunks: list[Any] = []
        handle = c.tokens.subscribe(on_next=chunks.append) if mode == "all" else None
        if mode in ("slow", "cancel"):
            class Slow:
                def on_subscribe(self, s: Any) -> None:
                    self.s = s
                    s.request(1)
                    tick()

                def on_next(self, chunk: Any) -> None:
                    chunks.append(chunk)

                def on_error(self, error: BaseException) -> None:
                    pass

                def on_complete(self) -> None:
                    pass

            slow = Slow()

            def tick() -> None:
                if not c.done:
                    if mode == "cancel" and len(chunks) >= 2:
                        slow.s.cancel()
                        return
                    slow.s.request(1)
                    cancels.append(loop.call_later(0.2, tick))

            c.tokens.subscribe(slow)
        del handle

    rx.from_iterable(requests).pipe(ops.execute(e), ops.tap(consume)).subscribe(out)
    await out.await_done(timeout=60.0)
    completions = out.values
    outcomes: list[str] = []
    for c in completions:
        try:
            outcomes.append((await c.result).finish_reason)
        except EngineError:
            outcomes.append("error")
    assert set(outcomes) <= set(FINISH_REASONS) | {"error"}
    admitted = {c.request.id for c in completions}
    for r in requests:
        assert r.id in admitted or (r.cancelled and r.completion is None)
    assert e.running == e.waiting == 0
    for handle in cancels:
        handle.cancel()  # clients that would have left, or read, after the run ended
    for _ in range(3):
        await asyncio.sleep(0)
    engine_timers = [h for h in loop._scheduled  # type: ignore[attr-defined]
                     if not h.cancelled() and getattr(h._callback, "__self__", None) is e]
    assert not engine_timers  # an idle engine leaves no timer behind

