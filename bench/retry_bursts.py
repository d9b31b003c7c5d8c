"""Two overload bursts back to back: does the second finish as fast as the first? (DESIGN §10)

    flock /tmp/bench.lock .venv/bin/python bench/retry_bursts.py [--rounds 3] [--clients 200] [--gap 1]
        [--server-root DIR]

Each round: a fresh ``rxpipe run pipelines/llm_gateway.py --set queue_capacity=8 --set max_num_seqs=4``
process (the SimulatedEngine's defaults), then ``--clients`` concurrent ``openai.AsyncOpenAI`` clients
(``max_retries=8``, 64 tokens each; ``tests/gateway/sdk_load.py``: every client honours Retry-After on its
own), then ``--gap`` seconds of quiet, then the same burst again. While the bursts run, ``/metrics`` is
read every 100 ms: the engine's running sequences and the queue (admitted, not running).

Reported per round and burst: wall time (first request to last answer), 200s, clients refused >= 3
times, the retry-after-ms values told (p50 / max) and "idle while refused": the share of the burst's
samples in which the engine ran fewer than ``max_num_seqs`` sequences with an empty queue while some
client was still waiting for its answer (a slot free that a refused client's promise kept empty).
Last, the medians over rounds and the ratio second / first (DESIGN §10: <= 1.2).
``--server-root`` runs the server from another checkout (A/B against a copy of main).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rxpipe.load._scrape import scrape  # noqa: E402
from tests.gateway.sdk_load import SDKLoadResult, run_sdk_clients  # noqa: E402
from tests.gateway.server import free_port  # noqa: E402


@dataclass
class Burst:
    result: SDKLoadResult
    idle_share: float

    def row(self, name: str) -> list[str]:
        told = sorted(self.result.retry_after_ms) or [0]
        return [name, f"{self.result.seconds:.1f}", f"{self.result.ok}/{self.result.clients}",
                str(self.result.refused_at_least(3)), f"{statistics.median(told) / 1000:.1f}",
                f"{told[-1] / 1000:.1f}", f"{self.idle_share:.0%}"]


async def _burst(url: str, clients: int, seqs: int) -> Burst:
    samples: list[tuple[float, float]] = []
    done = asyncio.Event()

    async def sample() -> None:
        async with aiohttp.ClientSession() as http:
            while not done.is_set():
                queue, running = await scrape(http, url + "/metrics")
                if queue is not None and running is not None:
                    samples.append((queue, running))
                try:
                    await asyncio.wait_for(done.wait(), 0.1)
                except TimeoutError:
                    pass

    sampler = asyncio.ensure_future(sample())
    result = await run_sdk_clients(url, clients=clients, max_tokens=64, max_retries=8)
    done.set()
    await sampler
    # samples while clients still waited: all but the last few (the tail, when no one is refused)
    idle = sum(1 for queue, running in samples if running < seqs and queue == 0)
    return Burst(result, idle / max(1, len(samples)))


async def _round(root: Path, clients: int, gap_s: float, log_dir: str) -> tuple[Burst, Burst]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(os.path.join(log_dir, f"gateway-{port}.log"), "wb")
    env = {**os.environ, "PYTHONPATH": str(root)}
    proc = subprocess.Popen([sys.executable, "-m", "rxpipe", "run", str(root / "pipelines" / "llm_gateway.py"),
                             "--port", str(port), "--set", "queue_capacity=8", "--set", "max_num_seqs=4"],
                            stdout=log, stderr=subprocess.STDOUT, cwd=root, env=env)
    try:
        async with aiohttp.ClientSession() as http:
            for _ in range(400):
                try:
                    async with http.get(url + "/healthz") as r:
                        if r.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.05)
        first = await _burst(url, clients, 4)
        await asyncio.sleep(gap_s)
        second = await _burst(url, clients, 4)
        return first, second
    finally:
        proc.kill()
        proc.wait()
        log.close()


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in [header, *rows]]
    return "\n".join(lines)


async def amain(args: argparse.Namespace) -> None:
    rows: list[list[str]] = []
    ratios: list[float] = []
    firsts: list[float] = []
    seconds: list[float] = []
    with tempfile.TemporaryDirectory() as log_dir:
        for k in range(args.rounds):
            first, second = await _round(Path(args.server_root), args.clients, args.gap, log_dir)
            rows += [first.row(f"round {k + 1} first"), second.row(f"round {k + 1} second")]
            firsts.append(first.result.seconds)
            seconds.append(second.result.seconds)
            ratios.append(second.result.seconds / first.result.seconds)
            print(f"round {k + 1}: {first.result.summary()} | {second.result.summary()}", flush=True)
    print()
    print(_table(["burst", "wall s", "200s", "refused>=3", "told p50 s", "told max s", "idle while refused"],
                 rows))
    print(f"\nmedian first {statistics.median(firsts):.1f} s, second {statistics.median(seconds):.1f} s, "
          f"second/first {statistics.median(ratios):.2f} (DESIGN §10: <= 1.2)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--gap", type=float, default=1.0, help="seconds between the bursts")
    parser.add_argument("--server-root", default=str(ROOT), help="checkout the server runs from")
    args = parser.parse_args()
    t0 = time.monotonic()
    asyncio.run(amain(args))
    print(f"({time.monotonic() - t0:.0f} s)")


if __name__ == "__main__":
    main()
