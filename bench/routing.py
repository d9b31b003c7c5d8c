"""Prefix-aware routing (DESIGN §8b): rxpipe's three routings and the field's own routers, in front
of the same simulated backends, on SGLang's generated-shared-prefix workload.

    .venv/bin/python bench/routing.py [--rounds 3] [--duration-s 10] [--loads 0.5,0.8,1.0,1.2,1.5]
        [--arms round_robin,least_loaded,prefix,smg,vllm-router] [--work-dir /tmp/rxpipe-routing]
    .venv/bin/python bench/routing.py credit [--backends 8] [--trials 20] [--router-root /work/main]
    .venv/bin/python bench/routing.py aimd [--duration-s 20]

``credit`` and ``aimd`` (credit across the HTTP hop: the reaction to a backend another client
filled, and an AIMD client on the credit headers) are described in ``bench/routing_credit.py``;
the rest of this docstring is the default scenario, ``prefix``.

What runs. ``--backends`` (4) processes of ``pipelines/llm_gateway.py`` (``max_num_seqs`` 8,
``prefix_cache_blocks`` 256: 4,096 tokens each, vLLM's block of 16), pinned to core 1 with the
load; the router under test pinned to core 0: ``pipelines/llm_router.py`` with ``routing`` =
``round_robin`` / ``least_loaded`` / ``prefix`` (``max_in_flight`` 8, no response cache), and
the anchors from PyPI, each in its own venv under ``--work-dir`` (made on first use, never in
the repository): ``smg launch --policy cache_aware`` (SGLang model gateway) and ``vllm-router
--policy cache_aware``, with their default thresholds.

Workload (SGLang's ``bench_serving --dataset-name generated-shared-prefix``, scaled to the
simulator): ``--groups`` 32 system prompts of ``--system-bytes`` 2,048 (512 tokens, 32 blocks) ×
``--per-group`` 16 questions of ``--question-bytes`` 128, shuffled, ``max_tokens`` 32, streamed; new random text in
every run (no cache carried over). The prefixes (1,024 blocks) are 4× one backend's cache, so
evictions happen unless each group keeps to one backend. Open-loop Poisson arrivals at
``load`` × capacity for ``--duration-s``; capacity is measured once first: requests/s completed
by ``least_loaded`` with every slot busy (closed loop, 4 × 8 clients).

Reported per arm and load, medians over ``--rounds`` rounds (each round runs every arm at a
load, in rotated order, before the next load): output tokens/s received, TTFT p50/p99 (ms, of
the streams answered), true prefix-cache hit rate (hits / queries in tokens, from the backends'
``rxpipe_engine_prefix_cache_*_total``), balance skew (the busiest backend's requests over the
mean), shed (answers other than 200, and failed streams, over requests sent), and the router's
CPU (share of one core over the run; a run at >= 90 % is marked invalid: the router, not the
routing, was measured). An anchor that cannot run here is reported with the error it printed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import statistics
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench import routing_credit  # noqa: E402
from bench.anchors import Proc, anchor_binary, install_anchors  # noqa: E402
from bench.serving import _cpu_s  # noqa: E402
from tests.gateway.server import free_port  # noqa: E402
from tests.pipelines.router_helpers import prefix_cache_tokens, shared_prefix_workload  # noqa: E402

RXPIPE = str(Path(sys.executable).with_name("rxpipe"))
OURS = ("round_robin", "least_loaded", "prefix")
MAX_IN_FLIGHT = [16, 8]  # --max-in-flight, --prefix-balance-abs


def start_router(arm: str, backends: list[str], work: Path, logs: Path) -> Proc:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    if arm in OURS:
        args = [RXPIPE, "run", str(ROOT / "pipelines" / "llm_router.py"), "--port", str(port),
                "--set", f"backends={','.join(backends)}", "--set", "model=sim",
                "--set", f"max_in_flight={MAX_IN_FLIGHT[0]}",
                "--set", "cache_max_entries=0", "--set", f"routing={arm}", "--set", "queue_capacity=256",
                "--set", f"prefix_balance_abs={MAX_IN_FLIGHT[1]}"]
        ready = "/health"
    else:
        binary = anchor_binary(arm, work)
        args = [str(binary)] + (["launch"] if arm == "smg" else []) + [
            "--host", "127.0.0.1", "--port", str(port), "--worker-urls", *backends, "--policy", "cache_aware"]
        ready = "/v1/models"
    return Proc(args, 0, logs / f"router-{arm}-{port}.log", url, ready)


@dataclass
class Run:
    sent: int = 0
    ok: int = 0
    shed: int = 0
    tokens: int = 0
    ttft_ms: list[float] | None = None


async def one(session: aiohttp.ClientSession, url: str, prompt: str, run: Run, loop: asyncio.AbstractEventLoop,
              max_tokens: int) -> None:
    t0 = loop.time()
    body = {"model": "sim", "prompt": prompt, "max_tokens": max_tokens, "stream": True}
    first: float | None = None
    tokens = 0
    done = False
    try:
        async with session.post(url + "/v1/completions", json=body) as response:
            if response.status != 200:
                await response.read()
                run.shed += 1
                return
            async for line in response.content:
                if not line.startswith(b"data: "):
                    continue
                payload = line[6:].strip()
                if payload == b"[DONE]":
                    done = True
                    break
                event = orjson.loads(payload)
                if "error" in event:
                    break
                choices = event.get("choices") or []
                if choices and choices[0].get("text"):
                    tokens += 1
                    if first is None:
                        first = loop.time()
    except (aiohttp.ClientError, TimeoutError):
        pass
    if not done or first is None:
        run.shed += 1
        return
    run.ok += 1
    run.tokens += tokens
    assert run.ttft_ms is not None
    run.ttft_ms.append((first - t0) * 1000)


async def open_loop(url: str, prompts: list[str], rate: float, duration_s: float, max_tokens: int,
                    seed: int) -> tuple[Run, float]:
    """Poisson arrivals at ``rate``/s for ``duration_s``; returns the run and its wall time."""
    loop = asyncio.get_running_loop()
    rng = random.Random(seed)
    run = Run(ttft_ms=[])
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                     timeout=aiohttp.ClientTimeout(total=120)) as session:
        start = loop.time()
        tasks = []
        at = 0.0
        i = 0
        while at < duration_s:
            delay = start + at - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(session, url, prompts[i % len(prompts)], run, loop, max_tokens)))
            run.sent += 1
            i += 1
            at += rng.expovariate(rate)
        await asyncio.gather(*tasks)
        return run, loop.time() - start


async def closed_loop(url: str, prompts: list[str], clients: int, duration_s: float, max_tokens: int) -> float:
    """Requests/s completed with ``clients`` clients each sending the next request when answered."""
    loop = asyncio.get_running_loop()
    run = Run(ttft_ms=[])
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        end = loop.time() + duration_s
        counter = iter(range(10**9))

        async def client() -> None:
            while loop.time() < end:
                await one(session, url, prompts[next(counter) % len(prompts)], run, loop, max_tokens)

        start = loop.time()
        await asyncio.gather(*(client() for _ in range(clients)))
        return run.ok / (loop.time() - start)


def backend_requests(urls: list[str]) -> list[float]:
    """Requests each backend answered (``rxpipe_requests_finished_total``, every outcome)."""
    counts = []
    for url in urls:
        with urllib.request.urlopen(url + "/metrics", timeout=10) as response:
            text = response.read().decode()
        counts.append(sum(float(m) for m in re.findall(r"^rxpipe_requests_finished_total\{[^}]*\} (\S+)$", text,
                                                      re.M)))
    return counts


def measure(arm: str, load: float, capacity: float, backends: list[str], args: argparse.Namespace, work: Path,
            logs: Path, seed: int) -> dict[str, Any]:
    prompts = shared_prefix_workload(args.groups, args.per_group, args.system_bytes, args.question_bytes, seed=seed)
    router = start_router(arm, backends, work, logs)
    try:
        before_cache, before_counts = prefix_cache_tokens(backends), backend_requests(backends)
        cpu0, t0 = _cpu_s(router.proc.pid), time.monotonic()
        run, wall = asyncio.run(open_loop(router.url, prompts,
                                          load * capacity, args.duration_s, args.max_tokens, seed))
        cpu = (_cpu_s(router.proc.pid) - cpu0) / (time.monotonic() - t0)
        after_cache, after_counts = prefix_cache_tokens(backends), backend_requests(backends)
    finally:
        router.stop()
    queries = after_cache[0] - before_cache[0]
    served = [a - b for a, b in zip(after_counts, before_counts, strict=True)]
    ttft = sorted(run.ttft_ms or [0.0])
    return {"tok_s": run.tokens / wall, "ttft_p50": ttft[len(ttft) // 2],
            "ttft_p99": ttft[min(len(ttft) - 1, int(0.99 * len(ttft)))],
            "hit": (after_cache[1] - before_cache[1]) / queries if queries else 0.0,
            "skew": max(served) / statistics.mean(served) if sum(served) else 0.0,
            "shed": run.shed / run.sent if run.sent else 0.0, "cpu": cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenario", nargs="?", default="prefix", choices=("prefix", "credit", "aimd"))
    parser.add_argument("--backends", type=int, default=None, help="backend processes (prefix: 4, credit: 8)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration-s", type=float, default=10.0)
    parser.add_argument("--loads", default="0.5,0.8,1.0,1.2,1.5")
    parser.add_argument("--arms", default="round_robin,least_loaded,prefix,smg,vllm-router")
    parser.add_argument("--groups", type=int, default=32)
    parser.add_argument("--per-group", type=int, default=16)
    parser.add_argument("--system-bytes", type=int, default=2048, help="a group's system prompt (4 bytes a token)")
    parser.add_argument("--question-bytes", type=int, default=128)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--prefix-cache-blocks", type=int, default=256)
    parser.add_argument("--max-in-flight", type=int, default=16,
                        help="our router's calls in flight per backend (the backends have 8 slots and queue the rest, "
                             "as the anchors' backends do)")
    parser.add_argument("--prefix-balance-abs", type=int, default=8, help="llm_router's prefix_balance_abs")
    parser.add_argument("--work-dir", default=os.path.join(tempfile.gettempdir(), "rxpipe-routing"))
    routing_credit.add_arguments(parser)
    args = parser.parse_args()
    work = Path(args.work_dir)
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    if args.scenario == "credit":
        args.backends = args.backends or 8
        routing_credit.credit(args, logs)
        return
    if args.scenario == "aimd":
        routing_credit.aimd(args, logs)
        return
    args.backends = args.backends or 4
    MAX_IN_FLIGHT[:] = [args.max_in_flight, args.prefix_balance_abs]
    arms = args.arms.split(",")
    loads = [float(x) for x in args.loads.split(",")]
    unavailable = install_anchors(arms, work)
    backends: list[Proc] = []
    try:
        for _ in range(args.backends):
            port = free_port()
            backends.append(Proc([RXPIPE, "run", str(ROOT / "pipelines" / "llm_gateway.py"), "--port", str(port),
                                  "--set", "max_num_seqs=8", "--set", f"prefix_cache_blocks={args.prefix_cache_blocks}",
                                  "--set", "queue_capacity=64"], 1, logs / f"backend-{port}.log",
                                 f"http://127.0.0.1:{port}", "/health"))
        urls = [b.url for b in backends]
        router = start_router("least_loaded", urls, work, logs)
        try:
            capacity = asyncio.run(closed_loop(router.url,
                                               shared_prefix_workload(args.groups, args.per_group, args.system_bytes,
                                                                      args.question_bytes, seed=99),
                                               8 * args.backends, args.duration_s, args.max_tokens))
        finally:
            router.stop()
        print(f"capacity (least_loaded, every slot busy): {capacity:.1f} requests/s", flush=True)
        results: dict[tuple[str, float], list[dict[str, Any]]] = {}
        seed = 0
        for round_no in range(args.rounds):
            for load in loads:
                order = arms[round_no % len(arms):] + arms[:round_no % len(arms)]
                for arm in order:
                    if arm in unavailable:
                        continue
                    seed += 1
                    try:
                        row = measure(arm, load, capacity, urls, args, work, logs, seed)
                    except RuntimeError as error:
                        unavailable[arm] = str(error).strip().splitlines()[-1][:300]
                        continue
                    results.setdefault((arm, load), []).append(row)
                    print(f"round {round_no + 1} load {load:.1f} {arm}: {row}", flush=True)
    finally:
        for backend in backends:
            backend.stop()
    print()
    print("| arm | load | out tok/s | TTFT p50 ms | TTFT p99 ms | hit rate | skew | shed | router CPU |")
    print("|---|---|---|---|---|---|---|---|---|")
    for load in loads:
        for arm in arms:
            rows = results.get((arm, load))
            if not rows:
                continue
            m = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
            invalid = " (invalid: router saturated)" if m["cpu"] >= 0.9 else ""
            print(f"| {arm} | {load:.1f}x | {m['tok_s']:.0f} | {m['ttft_p50']:.0f} | {m['ttft_p99']:.0f} | "
                  f"{m['hit']:.2f} | {m['skew']:.2f} | {m['shed']:.3f} | {m['cpu'] * 100:.0f} %{invalid} |")
    for arm, why in unavailable.items():
        print(f"{arm}: could not run: {why}")


if __name__ == "__main__":
    main()
