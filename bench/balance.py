"""``ops.balance`` (by demand) against round-robin over the same two backends, in one run.

    .venv/bin/python bench/balance.py [--requests 300] [--rate 40] [--limits 8,2]

Two stub OpenAI backends as processes (``tests/engines/openai_stub_server.py``): FAST (8
concurrent, 20 ms + 2 ms/token) and SLOW (2 concurrent, 200 ms + 10 ms/token), both answering 429
(Retry-After: 1) above their concurrency. For each router a fresh pair of backends and the graph
of ``pipelines/llm_router.py`` (gateway → edge_queue → balance of one ``execute(OpenAIEngine)`` per
backend, cache off), differing only in how an item picks its branch:

- ``balance``: the branch with the most demand (free slots), as shipped;
- ``round_robin``: branches in turn, each item waiting for the next branch in the cycle to have
  demand (what a proxy's round-robin does, with the same per-backend limits).

The load is open loop (``--requests`` at ``--rate`` per second, 8 output tokens each,
non-streaming, no retries). Reported per router: answers by status, p50/p99 end-to-end latency of
the 200s (ms), goodput (200s per second of the run, first request to last answer), and the share
each backend served. Plus the adaptive limit's convergence: ``max_in_flight=auto`` on both, the
window each ended with and its mean over the run's second half (sampled every 50 ms).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rxpipe._protocol import Subscriber  # noqa: E402
from rxpipe.serving._balance import BalanceFlowable, BalanceRun, PortSubscription  # noqa: E402
from tests.engines.openai_stub_server import StubServer  # noqa: E402
from tests.pipelines.router_helpers import FAST, SLOW, load_router, open_loop, percentile  # noqa: E402


class RoundRobinRun(BalanceRun):
    """Strict round-robin: the next branch in the cycle, once it has demand."""

    def choose(self, excluded: frozenset[int] | set[int] = frozenset()) -> PortSubscription | None:
        n = len(self.ports)
        for step in range(n):
            k = (self.cursor + step) % n
            if k in excluded:
                continue
            port = self.ports[k]
            return port if self._eligible(port) else None
        return None


class RoundRobinFlowable(BalanceFlowable):
    kind = "round_robin"

    def _subscribe(self, subscriber: Subscriber[Any]) -> None:
        self.run = RoundRobinRun(self)
        self.merged._subscribe(subscriber)


async def one_router(kind: str, limits: str, requests: int, rate: float, tmp: Path) -> dict[str, Any]:
    where = Path(tempfile.mkdtemp(prefix=f"{kind}-", dir=tmp))
    fast, slow = StubServer(where, *FAST), StubServer(where, *SLOW)
    router = load_router()
    try:
        s = router.settings({"backends": f"{fast.url},{slow.url}", "model": "m", "max_in_flight": limits,
                             "cache_max_entries": 0, "drain_timeout_s": 5.0})
        engines = router.engines(s)
        pipeline = router.build(s, engines)
        if kind == "round_robin":  # the same graph, the balance stage swapped for round-robin
            balance = pipeline.flowable
            assert isinstance(balance, BalanceFlowable)
            from rxpipe import operators as ops
            pipeline.flowable = RoundRobinFlowable(balance.source, tuple(ops.execute(e) for e in engines),
                                                   True, "round_robin")
        windows: list[tuple[float, list[int]]] = []
        async with pipeline.start(port=0) as running:
            assert running.url is not None
            loop = asyncio.get_running_loop()

            async def sample() -> None:
                while True:
                    windows.append((loop.time(), [e.concurrency_limit for e in engines]))
                    await asyncio.sleep(0.05)

            sampler = asyncio.create_task(sample())
            started = time.monotonic()
            outcomes = await open_loop(running.url, requests, rate,
                                       lambda i: {"model": "m", "prompt": f"r{i}", "max_tokens": 8})
            elapsed = time.monotonic() - started
            sampler.cancel()
        for engine in engines:
            await engine.aclose()
        ok = [o.latency_s * 1000 for o in outcomes if o.status == 200]
        statuses: dict[int, int] = {}
        for o in outcomes:
            statuses[o.status] = statuses.get(o.status, 0) + 1
        half = windows[len(windows) // 2:]
        return {"router": kind, "limits": limits, "statuses": statuses, "p50_ms": percentile(ok, 0.5),
                "p99_ms": percentile(ok, 0.99), "goodput": len(ok) / elapsed,
                "fast": fast.state()["completed"], "slow": slow.state()["completed"],
                "final_windows": windows[-1][1] if windows else None,
                "mean_windows": [round(sum(w[1][k] for w in half) / len(half), 2) for k in range(2)] if half else None}
    finally:
        fast.stop()
        slow.stop()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--rate", type=float, default=40.0)
    parser.add_argument("--limits", default="8,2")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="rxpipe-balance-"))
    rows = [await one_router(kind, limits, args.requests, args.rate, tmp)
            for kind, limits in (("balance", args.limits), ("round_robin", args.limits), ("balance", "auto"),
                                 ("round_robin", "auto"))]
    print(f"{args.requests} requests at {args.rate:g}/s; FAST 8 slots 20 ms + 2 ms/token, SLOW 2 slots "
          f"200 ms + 10 ms/token, 8 tokens")
    print(f"{'router':<12} {'limits':<6} {'200':>5} {'other':>6} {'p50 ms':>8} {'p99 ms':>8} {'goodput/s':>9} "
          f"{'fast':>5} {'slow':>5}  windows (end; mean 2nd half)")
    for r in rows:
        other = sum(n for code, n in r["statuses"].items() if code != 200)
        print(f"{r['router']:<12} {r['limits']:<6} {r['statuses'].get(200, 0):>5} {other:>6} {r['p50_ms']:>8.0f} "
              f"{r['p99_ms']:>8.0f} {r['goodput']:>9.1f} {r['fast']:>5} {r['slow']:>5}  "
              f"{r['final_windows']}; {r['mean_windows']}")


if __name__ == "__main__":
    import uvloop

    uvloop.run(main())
