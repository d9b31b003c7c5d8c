"""Goodput through the Redis Streams transport with 1 and 2 workers (same engine settings).

    .venv/bin/python bench/redis_goodput.py [--duration 10] [--warmup 3] [--clients 64]

For each worker count: a fresh ``redis-server`` (``--appendonly yes --appendfsync always``) on a
free loopback port, one ``rxpipe run pipelines/llm_gateway_redis.py`` and N ``rxpipe run
pipelines/llm_worker.py`` (SimulatedEngine ``max_num_seqs=8``, ``step_overhead_s=0.02``: a worker
decodes 8 sequences at ~45 steps/s, so with 16 tokens per request its capacity is about
8 × 45 / 16 ≈ 22 requests/s). This process runs ``--clients`` closed-loop clients (non-streaming
``/v1/completions``, ``max_tokens=16``, no retries; a 429 is counted and retried after 50 ms).
After ``--warmup`` s, every answer arriving within ``--duration`` s is counted.

Table: workers, goodput (200s/s), 429/s, p50 and p99 latency of the 200s (ms), and the
per-worker goodput ratio against one worker. Not part of the test run.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.redis.servers import PipelineProcess, RedisServer, free_port  # noqa: E402

ENGINE = ("max_num_seqs=8", "step_overhead_s=0.02")


async def load(url: str, clients: int, warmup_s: float, duration_s: float) -> tuple[int, int, list[float]]:
    start = time.monotonic()
    window = (start + warmup_s, start + warmup_s + duration_s)
    ok, refused, latencies = 0, 0, []

    async def client(http: aiohttp.ClientSession, k: int) -> None:
        nonlocal ok, refused
        n = 0
        while time.monotonic() < window[1]:
            sent = time.monotonic()
            async with http.post(f"{url}/v1/completions",
                                 json={"model": "sim", "prompt": f"client {k} request {n}", "max_tokens": 16}) as r:
                await r.read()
                status = r.status
            done = time.monotonic()
            n += 1
            if window[0] <= done < window[1]:
                if status == 200:
                    ok += 1
                    latencies.append(done - sent)
                else:
                    refused += 1
            if status != 200:
                await asyncio.sleep(0.05)

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        await asyncio.gather(*(client(http, k) for k in range(clients)))
    return ok, refused, latencies


def run(workers: int, args: argparse.Namespace) -> tuple[float, float, float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        redis = RedisServer(tmp_path)
        procs: list[PipelineProcess] = []
        try:
            gw = PipelineProcess(tmp_path, "llm_gateway_redis.py", f"redis_url={redis.url}", port=free_port())
            procs.append(gw)
            for _ in range(workers):
                procs.append(PipelineProcess(tmp_path, "llm_worker.py", f"redis_url={redis.url}", *ENGINE))
            assert gw.url is not None
            ok, refused, latencies = asyncio.run(load(gw.url, args.clients, args.warmup, args.duration))
        finally:
            for proc in procs:
                proc.kill9()
            redis.kill()
    latencies.sort()
    p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))] if latencies else float("nan")
    p50 = statistics.median(latencies) if latencies else float("nan")
    return ok / args.duration, refused / args.duration, p50 * 1000, p99 * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--clients", type=int, default=64)
    args = parser.parse_args()
    if shutil.which("redis-server") is None:
        sys.exit("redis-server is not installed")
    rows = [(n, *run(n, args)) for n in (1, 2)]
    print(f"{'workers':>7} {'good/s':>8} {'429/s':>7} {'p50 ms':>8} {'p99 ms':>8} {'x 1 worker':>10}")
    for n, good, refused, p50, p99 in rows:
        print(f"{n:>7} {good:>8.1f} {refused:>7.1f} {p50:>8.0f} {p99:>8.0f} {good / rows[0][1]:>10.2f}")


if __name__ == "__main__":
    main()
