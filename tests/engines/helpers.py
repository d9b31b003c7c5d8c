"""Shared helpers of the engine tests."""

from __future__ import annotations

from typing import Any

from rxpipe.engines import CompletionRequest, SimulatedEngine

#: Step costs that are exact binary fractions, so loop-clock sums are exact floats.
OVERHEAD = 1 / 64      # 0.015625 s per step
PREFILL = 1 / 1024     # s per prompt token
DECODE = 1 / 256       # s per decoding sequence


def req(prompt_tokens: int = 1, max_tokens: int | None = 4, **kwargs: Any) -> CompletionRequest:
    """A request whose prompt estimates to exactly ``prompt_tokens`` tokens (4 bytes each)."""
    return CompletionRequest(prompt="abcd" * prompt_tokens, max_tokens=max_tokens, **kwargs)


def engine(**kwargs: Any) -> SimulatedEngine:
    """A SimulatedEngine with the exact step costs above and a step log."""
    options: dict[str, Any] = dict(max_num_seqs=4, max_num_batched_tokens=64, step_overhead_s=OVERHEAD,
                                   prefill_s_per_token=PREFILL, decode_s_per_seq=DECODE, step_log=10_000)
    options.update(kwargs)
    return SimulatedEngine(**options)
