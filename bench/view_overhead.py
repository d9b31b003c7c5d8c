"""What a subscribed live view costs the gateway: requests/s with and without a view following it.

    .venv/bin/python bench/view_overhead.py [--rounds 6] [--seconds 5] [--clients 64] [--viewers 1]

Starts ``rxpipe run pipelines/llm_gateway.py`` (uvloop) with an engine cheap enough that the
gateway's own Python is what limits requests/s (256 slots, 0.2 ms steps, 4 tokens per answer), then
alternates rounds without and with ``--viewers`` clients reading ``GET /pipeline/events`` (one
snapshot a second each, what an open ``/pipeline`` page or ``rxpipe top`` costs; the page adds
nothing on the server beyond its event stream). Each round offers the same closed-loop load (``--clients``
concurrent non-streaming completions) for ``--seconds`` and counts the answers. Rounds run in
pairs, off/on then on/off, so drift of the shared machine falls on both sides; the table shows
each side's median and the ratio of the medians, and every pair's ratio (DESIGN §7 target: a
subscribed view leaves requests/s within 0.98x of none), and the gateway process's CPU time per
answer (from ``/proc``). Then one snapshot's size, and its CPU cost measured in this process on the
same pipeline: the whole of what a subscribed view adds to the server, once a second per stream
(the pressure accounting itself runs whether anyone looks or not). On a machine others load, the
requests/s of single rounds vary far more than that cost: read the median of the pairs' ratios,
over many short rounds (``--rounds 30 --seconds 2``).

Not a test: ``bench/`` is outside pytest's ``testpaths``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = ("max_num_seqs=256", "queue_capacity=1000", "step_overhead_s=0.0002", "decode_s_per_seq=0",
            "prefill_s_per_token=0", "rate=1000000", "burst=100000", "batch_max_size=32")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_gateway(port: int, log: Path) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "rxpipe", "run", str(ROOT / "pipelines" / "llm_gateway.py"), "--port", str(port),
            "--log-level", "warning"]
    for setting in SETTINGS:
        args += ["--set", setting]
    with log.open("wb") as out:
        return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)


async def wait_ready(url: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    async with aiohttp.ClientSession() as http:
        while True:
            try:
                async with http.get(url + "/readyz") as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the gateway at {url} did not become ready")
            await asyncio.sleep(0.1)


async def viewer(http: aiohttp.ClientSession, url: str, seen: list[int]) -> None:
    async with http.get(url + "/pipeline/events") as response:
        async for line in response.content:
            if line.startswith(b"data: "):
                seen.append(len(line) - 6)


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def load_round(url: str, clients: int, seconds: float, viewers: int, pid: int) -> tuple[float, float, int]:
    """Answers per second of ``clients`` closed-loop clients for ``seconds`` (with ``viewers``
    event streams open), the gateway's CPU microseconds per answer, and the events the viewers
    received."""
    body = {"model": "sim", "prompt": "hello", "max_tokens": 4}
    answered = 0
    refused = 0
    seen: list[int] = []
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as http:
        watchers = [asyncio.create_task(viewer(http, url, seen)) for _ in range(viewers)]
        await asyncio.sleep(0.5)  # the streams are open before the load starts
        stop_at = time.monotonic() + seconds

        async def client() -> None:
            nonlocal answered, refused
            while time.monotonic() < stop_at:
                async with http.post(url + "/v1/completions", json=body) as response:
                    await response.read()
                    if response.status == 200:
                        answered += 1
                    else:
                        refused += 1
                        await asyncio.sleep(0.001)

        started, cpu = time.monotonic(), cpu_s(pid)
        await asyncio.gather(*(client() for _ in range(clients)))
        elapsed, cpu = time.monotonic() - started, cpu_s(pid) - cpu
        for task in watchers:
            task.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
    if refused > answered // 100:
        print(f"  note: {refused} refusals against {answered} answers in the round", file=sys.stderr)
    return answered / elapsed, 1e6 * cpu / max(1, answered), len(seen)


async def snapshot_size(url: str) -> int:
    async with aiohttp.ClientSession() as http, http.get(url + "/pipeline.json") as response:
        return len(await response.read())


async def snapshot_cost_us(count: int = 2000) -> float:
    """Microseconds of gateway CPU one snapshot costs (what a subscribed view adds once a second
    per stream): the same pipeline served in this process, ``count`` snapshots timed in a row."""
    sys.path.insert(0, str(ROOT / "pipelines"))
    import llm_gateway

    from rxpipe.view._http import _json

    config = dict(setting.split("=") for setting in SETTINGS)
    pipeline = llm_gateway.pipeline({key: float(value) if "." in value else int(value)
                                     for key, value in config.items()})
    async with pipeline.start(port=0):
        view = next(service for service in pipeline.services).view
        assert view is not None
        view.tick()
        started = time.process_time()
        for _ in range(count):
            _json(view.snapshot())
        return 1e6 * (time.process_time() - started) / count


async def run(args: argparse.Namespace) -> int:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"view-overhead-{port}.log"
    proc = start_gateway(port, log)
    try:
        await wait_ready(url)
        for _ in range(3):  # warm-up: connections, allocator, the GC's frozen start-up heap
            await load_round(url, args.clients, 2.0, 0, proc.pid)
        off: list[float] = []
        on: list[float] = []
        cpu_off: list[float] = []
        cpu_on: list[float] = []
        events = 0
        print(f"llm_gateway on uvloop ({' '.join(SETTINGS)}); {args.clients} clients, {args.seconds:g} s a round, "
              f"{args.viewers} event stream(s) when on; Python {sys.version.split()[0]}", flush=True)
        for r in range(args.rounds):
            for view in ((False, True) if r % 2 == 0 else (True, False)):
                rate, cpu, seen = await load_round(url, args.clients, args.seconds, args.viewers if view else 0,
                                                   proc.pid)
                (on if view else off).append(rate)
                (cpu_on if view else cpu_off).append(cpu)
                events += seen
                print(f"  round {r + 1} view {'on ' if view else 'off'}: {rate:,.0f} requests/s, "
                      f"{cpu:.0f} us CPU per request", flush=True)
        size = await snapshot_size(url)
        cost = await snapshot_cost_us()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    ratio = statistics.median(on) / statistics.median(off)
    pairs = [b / a for a, b in zip(off, on, strict=True)]
    cpu_ratio = statistics.median(cpu_on) / statistics.median(cpu_off)
    print("\n| view | requests/s (median) | min–max | gateway CPU us per request (median) |")
    print("|---|---:|---:|---:|")
    print(f"| none | {statistics.median(off):,.0f} | {min(off):,.0f}–{max(off):,.0f} | "
          f"{statistics.median(cpu_off):.0f} |")
    print(f"| {args.viewers} subscribed | {statistics.median(on):,.0f} | {min(on):,.0f}–{max(on):,.0f} | "
          f"{statistics.median(cpu_on):.0f} |")
    print(f"\nrequests/s subscribed / none: {ratio:.3f}x (pairs: {', '.join(f'{p:.3f}' for p in pairs)}; median pair "
          f"{statistics.median(pairs):.3f}x); CPU per request {cpu_ratio:.3f}x; {events} events received; "
          f"one snapshot: {size} bytes")
    print(f"one snapshot (built and encoded) costs {cost:.0f} us of CPU: {args.viewers} stream(s) at one a second "
          f"take {cost * args.viewers / 1e4:.4f} % of a core")
    print(f"target ≥ 0.98x: {'PASS' if ratio >= 0.98 else 'FAIL'} (median of the pairs' ratios: "
          f"{'PASS' if statistics.median(pairs) >= 0.98 else 'FAIL'})")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6, help="pairs of rounds (default 6)")
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds of load a round (default 5)")
    parser.add_argument("--clients", type=int, default=64, help="concurrent closed-loop clients (default 64)")
    parser.add_argument("--viewers", type=int, default=1, help="event streams open when on (default 1)")
    return asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
