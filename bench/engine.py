"""Continuous batching on SimulatedEngine: throughput and time to first token vs max_num_seqs.

    .venv/bin/python bench/engine.py [--requests 256] [--prompt-tokens 512] [--output-tokens 128]

One scenario, run through ``execute(engine)`` on the virtual clock (deterministic: the same table
every run): ``--requests`` requests arrive together at t=0, each with a ``--prompt-tokens`` prompt
and ``max_tokens=--output-tokens``, on the default 7B-on-one-GPU step costs
(SimulatedEngine's defaults: 6 ms per step + 0.05 ms per prefilled token + 0.1 ms per decoding
sequence; 8192 batched tokens per step). Only ``max_num_seqs`` changes between rows.

Columns: output tokens/s over the whole run (simulated seconds); TTFT from arrival (queueing
included) p50/p99; engine TTFT (from the moment the request got its slot) p50; mean time per
output token after the first; steps run; throughput relative to the first row; the
wall-clock seconds the simulation took.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import rxpipe as rx  # noqa: E402
from rxpipe import operators as ops  # noqa: E402
from rxpipe.engines import CompletionRequest, CompletionResult, SimulatedEngine  # noqa: E402
from rxpipe.testing import run_virtual  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


async def scenario(max_num_seqs: int, requests: int, prompt_tokens: int,
                   output_tokens: int) -> tuple[list[CompletionResult], int]:
    engine = SimulatedEngine(max_num_seqs=max_num_seqs)
    batch = [CompletionRequest(prompt="abcd" * prompt_tokens, max_tokens=output_tokens, arrival_s=0.0)
             for _ in range(requests)]
    completions = await rx.from_iterable(batch).pipe(ops.execute(engine)).to_list()
    results = [await c.result for c in completions]
    await engine.aclose()
    return results, engine.steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--prompt-tokens", type=int, default=512)
    parser.add_argument("--output-tokens", type=int, default=128)
    parser.add_argument("--seqs", type=int, nargs="+", default=[1, 8, 64])
    args = parser.parse_args()
    print(f"scenario: {args.requests} requests at t=0, prompt {args.prompt_tokens} tokens, "
          f"output {args.output_tokens} tokens; SimulatedEngine defaults (7B, one GPU), virtual clock\n")
    header = (f"{'max_num_seqs':>12} | {'tokens/s':>9} | {'TTFT p50 s':>10} | {'TTFT p99 s':>10} | "
              f"{'engine TTFT p50 s':>17} | {'TPOT ms':>7} | {'makespan s':>10} | {'steps':>6} | {'gain':>5} | "
              f"{'wall s':>6}")
    print(header)
    print("-" * len(header))
    base: float | None = None
    for seqs in args.seqs:
        started = time.perf_counter()
        results, steps = run_virtual(scenario(seqs, args.requests, args.prompt_tokens, args.output_tokens))
        wall = time.perf_counter() - started
        makespan = max(r.e2e_s for r in results)
        throughput = sum(r.completion_tokens for r in results) / makespan
        ttft = [r.ttft_s for r in results if r.ttft_s is not None]
        engine_ttft = [r.ttft_s - r.queue_time_s for r in results if r.ttft_s is not None]
        tpot = statistics.fmean((r.e2e_s - r.ttft_s) / (r.completion_tokens - 1) for r in results
                                if r.ttft_s is not None and r.completion_tokens > 1)
        base = base or throughput
        print(f"{seqs:>12} | {throughput:>9.0f} | {percentile(ttft, 0.5):>10.3f} | {percentile(ttft, 0.99):>10.3f} | "
              f"{percentile(engine_ttft, 0.5):>17.4f} | {tpot * 1000:>7.2f} | {makespan:>10.2f} | {steps:>6} | "
              f"{throughput / base:>4.1f}x | {wall:>6.2f}")


if __name__ == "__main__":
    main()
