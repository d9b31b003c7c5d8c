"""Credit across the HTTP hop (DESIGN §8b): the ``credit`` and ``aimd`` scenarios of
``bench/routing.py`` (``bench/routing.py credit|aimd``).

``credit``: ``--backends`` (8) processes of ``pipelines/llm_gateway.py`` (``max_num_seqs`` 8,
``queue_capacity`` 8, access log on), pinned to core 1; ``pipelines/llm_router.py`` in front
(``least_loaded``, ``max_in_flight`` 16, no cache), pinned to core 0, from ``--router-root`` (a
checkout with its own ``.venv``: ``/work/main`` measures the code before credit travelled, the
default this one). Open-loop Poisson load through the router at ``--load`` (0.9) × capacity
(measured first: closed loop, 8 clients per backend). Every ``--period-s`` (2 s) another client
fills one backend (``--trials``, round-robin over them): 16 long requests sent to it directly at
once. A request the router sends into that backend while it is full is refused 429 there: read
from the backend's access log (its own request ids are the router's, the filler's are
``sat-…``). Per trial: requests into the full backend (its 429s to the router within
``--window-s`` after the fill); the reaction: from the moment it was full (its first 429 to
anyone in the window) to the router's last request into it (0 when none; with one request, when
the router first routed there: it learns from that request's 429); and how long it kept sending
into it: from its first request into the full backend to its last (0 with one or none; the
issue's "keeps sending work into a saturated backend for 250-500 ms"). Reported: those p50/p99
(ms), requests into the full backend per trial (mean, max), and the balance skew without fills at
the same load (busiest backend's answers over the mean).

``aimd``: one backend (``max_num_seqs`` 16, ``queue_capacity`` 16); capacity measured (closed
loop, 32 clients); then ``rxpipe load --aimd`` (in process, :func:`rxpipe.load.run_load`) for
``--duration-s`` (20 s); at half time another client takes a quarter of the capacity (8
closed-loop clients of the same requests: 8 of the 32 places) — the capacity step. Reported: the
fraction of capacity used in steady state (completed requests/s of the AIMD client, plus the
other client's after the step, over capacity; before the step from the end of slow start, its
first cut, after it from the gate's first cut after the step), the 429 rate over the whole run,
and the convergence: from the step to the answer that makes the gate cut (a 429 or no room).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import random
import statistics
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from bench.anchors import Proc
from tests.gateway.server import free_port

ROOT = Path(__file__).resolve().parents[1]
BACKEND_SETTINGS = ("max_num_seqs=8", "queue_capacity=8")
FILL = 16  # requests that fill one backend: its 8 slots and its 8 places


def _rxpipe(root: Path) -> str:
    return str(root / ".venv" / "bin" / "rxpipe")


def start_backends(n: int, settings: tuple[str, ...], logs: Path) -> list[Proc]:
    procs = []
    for _ in range(n):
        port = free_port()
        args = [
            _rxpipe(ROOT),
            "run",
            str(ROOT / "pipelines" / "llm_gateway.py"),
            "--port",
            str(port),
            "--access-log",
            "--log-format",
            "json",
        ]
        for setting in settings:
            args += ["--set", setting]
        procs.append(Proc(args, 1, logs / f"backend-{port}.log", f"http://127.0.0.1:{port}", "/health"))
    return procs


def start_router(root: Path, urls: list[str], logs: Path, extra: tuple[str, ...] = ()) -> Proc:
    port = free_port()
    args = [
        _rxpipe(root),
        "run",
        str(root / "pipelines" / "llm_router.py"),
        "--port",
        str(port),
        "--set",
        f"backends={','.join(urls)}",
        "--set",
        "model=sim",
        "--set",
        "max_in_flight=16",
        "--set",
        "cache_max_entries=0",
        "--set",
        "routing=least_loaded",
        "--set",
        "queue_capacity=256",
    ]
    for setting in extra:
        args += ["--set", setting]
    return Proc(args, 0, logs / f"router-{port}.log", f"http://127.0.0.1:{port}", "/health")


async def _one(
    session: aiohttp.ClientSession, url: str, max_tokens: int, counts: dict[str, int], request_id: str | None = None
) -> int:
    body = {"model": "sim", "prompt": f"question {random.random():.6f}", "max_tokens": max_tokens}
    headers = {"x-request-id": request_id} if request_id else None
    try:
        async with session.post(url + "/v1/completions", json=body, headers=headers) as response:
            await response.read()
            key = "ok" if response.status == 200 else str(response.status)
            counts[key] = counts.get(key, 0) + 1
            return response.status
    except (aiohttp.ClientError, TimeoutError):
        counts["error"] = counts.get("error", 0) + 1
        return 0


async def closed_loop(url: str, clients: int, duration_s: float, max_tokens: int) -> float:
    """Requests/s answered 200 with ``clients`` clients each sending the next when answered."""
    counts: dict[str, int] = {}
    loop = asyncio.get_running_loop()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        end = loop.time() + duration_s

        async def client() -> None:
            while loop.time() < end:
                await _one(session, url, max_tokens, counts)

        start = loop.time()
        await asyncio.gather(*(client() for _ in range(clients)))
        return counts.get("ok", 0) / (loop.time() - start)


async def open_loop(
    session: aiohttp.ClientSession,
    url: str,
    rate: float,
    duration_s: float,
    max_tokens: int,
    counts: dict[str, int],
    seed: int,
) -> None:
    loop = asyncio.get_running_loop()
    rng = random.Random(seed)
    start = loop.time()
    tasks = []
    at = 0.0
    while at < duration_s:
        delay = start + at - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(_one(session, url, max_tokens, counts)))
        at += rng.expovariate(rate)
    await asyncio.gather(*tasks)


def _access(log: Path) -> list[dict[str, Any]]:
    lines = []
    for raw in log.read_bytes().splitlines():
        if not raw.startswith(b"{"):
            continue
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        if doc.get("logger") == "rxpipe.access" and doc.get("route") == "/v1/completions":
            doc["t"] = datetime.datetime.fromisoformat(doc["time"]).timestamp() - float(doc.get("total_s") or 0.0)
            lines.append(doc)
    return lines


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values) or [0.0]
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _credit_run(
    router: str, backends: list[Proc], capacity: float, args: argparse.Namespace
) -> tuple[list[float], dict[str, int]]:
    """Background load plus the fills; returns each fill's wall time and the background's counts."""
    counts: dict[str, int] = {}
    fills: list[float] = []
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=120)
    ) as session:
        duration = args.period_s * (args.trials + 1)
        background = asyncio.ensure_future(
            open_loop(session, router, args.load * capacity, duration, args.max_tokens, counts, seed=1)
        )
        filler_counts: dict[str, int] = {}
        fillers = []
        for trial in range(args.trials):
            await asyncio.sleep(args.period_s)
            target = backends[trial % len(backends)].url
            fills.append(time.time())
            fillers += [
                asyncio.ensure_future(_one(session, target, args.fill_tokens, filler_counts, f"sat-{trial}-{i}"))
                for i in range(FILL)
            ]
        await background
        await asyncio.gather(*fillers)
    return fills, counts


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def credit(args: argparse.Namespace, logs: Path) -> None:
    root = Path(args.router_root).resolve()
    backends = start_backends(args.backends, BACKEND_SETTINGS, logs)
    try:
        urls = [b.url for b in backends]
        extra = () if args.credit_fresh_s is None else (f"credit_fresh_s={args.credit_fresh_s}",)
        extra += tuple(args.router_set)
        router = start_router(root, urls, logs, extra)
        try:
            capacity = asyncio.run(closed_loop(router.url, 8 * args.backends, args.duration_s, args.max_tokens))
            print(f"capacity (every slot busy): {capacity:.1f} requests/s; router from {root}", flush=True)
            before = [len(_access(b.log)) for b in backends]
            counts: dict[str, int] = {}

            async def plain() -> None:
                async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
                    await open_loop(
                        session, router.url, args.load * capacity, args.duration_s, args.max_tokens, counts, seed=2
                    )

            cpu_before = _cpu_s(router.proc.pid)
            asyncio.run(plain())
            router_cpu = _cpu_s(router.proc.pid) - cpu_before
            served = [len(_access(b.log)) - n for b, n in zip(backends, before, strict=True)]
            skew = max(served) / statistics.mean(served) if sum(served) else 0.0
            print(
                f"skew at {args.load:g}x capacity (no fills): {skew:.3f} (answers per backend {served}; "
                f"client outcomes {counts}); router CPU {router_cpu:.2f} s, "
                f"{router_cpu / max(1, sum(served)) * 1e6:.0f} us per request",
                flush=True,
            )
            fills, counts = asyncio.run(_credit_run(router.url, backends, capacity, args))
        finally:
            router.stop()
        into: list[int] = []
        reactions: list[float] = []
        from_fill: list[float] = []
        spreads: list[float] = []
        for trial, at in enumerate(fills):
            lines = _access(backends[trial % len(backends)].log)
            window = [d for d in lines if d.get("status") == 429 and at - 0.005 <= d["t"] <= at + args.window_s]
            refused = [d["t"] for d in window if not str(d.get("request_id", "")).startswith("sat-")]
            # full from its first refusal (any client's), else from the fill
            full_at = min((d["t"] for d in window), default=at)
            into.append(len(refused))
            reactions.append(max(0.0, max(refused) - full_at) if refused else 0.0)
            from_fill.append(max(refused) - at if refused else 0.0)
            spreads.append(max(refused) - min(refused) if refused else 0.0)
        ms = [r * 1000 for r in reactions]
        print(
            f"per trial: into {into}; last router request into it after the fill (ms) "
            f"{[round(v * 1000, 1) for v in from_fill]}"
        )
        print(f"background outcomes during the fills: {counts}")
        print()
        kept = [v * 1000 for v in spreads]
        print(
            "| router | reaction p50 ms | reaction p99 ms | kept sending p50 / p99 ms "
            "| into full backend / trial (mean, max) | skew |"
        )
        print("|---|---|---|---|---|---|")
        print(
            f"| {root} | {_pct(ms, 0.5):.1f} | {_pct(ms, 0.99):.1f} | {_pct(kept, 0.5):.1f} / {_pct(kept, 0.99):.1f} "
            f"| {statistics.mean(into):.2f}, {max(into)} | "
            f"{skew:.3f} |"
        )
    finally:
        for backend in backends:
            backend.stop()


async def _aimd_run(url: str, args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, int]]:
    from rxpipe.load import LoadConfig, run_load
    from rxpipe.load._aimd import AimdConfig

    config = LoadConfig(
        base_url=url,
        duration_s=args.duration_s,
        max_tokens=args.max_tokens,
        model="sim",
        scrape=False,
        aimd=AimdConfig(max_window=256.0),
        timeout_s=60.0,
    )
    other: dict[str, int] = {}
    loop = asyncio.get_running_loop()
    clock = time.perf_counter()  # about run_load's own clock (it starts within a millisecond)
    other_done: list[float] = []

    async def occupant() -> None:
        await asyncio.sleep(args.duration_s / 2)
        end = loop.time() + args.duration_s / 2
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

            async def client() -> None:
                while loop.time() < end:
                    if await _one(session, url, args.max_tokens, other) == 200:
                        other_done.append(time.perf_counter() - clock)

            await asyncio.gather(*(client() for _ in range(8)))

    result, _ = await asyncio.gather(run_load(config), occupant())
    return result.figures | {"records": result.records, "other_done": other_done}, other


def aimd(args: argparse.Namespace, logs: Path) -> None:
    backends = start_backends(1, ("max_num_seqs=16", "queue_capacity=16"), logs)
    try:
        url = backends[0].url
        capacity = asyncio.run(closed_loop(url, 32, args.duration_s / 2, args.max_tokens))
        print(f"capacity (32 clients, every slot busy): {capacity:.1f} requests/s", flush=True)
        figures, other = asyncio.run(_aimd_run(url, args))
    finally:
        for backend in backends:
            backend.stop()
    records = figures.pop("records")
    other_done = figures.pop("other_done")
    half = args.duration_s / 2
    ends = [(a.sent_s + a.latency_s, a) for r in records for a in r.attempts]

    def cut(after: float) -> float | None:
        # the first answer after ``after`` that makes the gate decrease (a 429/503 or no room)
        times = [t for t, a in ends if a.sent_s >= after and (a.status in (429, 503) or a.room == 0)]
        return min(times) if times else None

    ramp = cut(0.0)
    step = cut(half)
    converge = (step - half) if step is not None else float("nan")
    # steady state: from the end of slow start to the step, and from the step's cut to the end
    start = ramp if ramp is not None and ramp < half else half / 2
    after = step if step is not None else half

    def completed(lo: float, hi: float) -> int:
        return sum(1 for t, a in ends if a.kind == "2xx" and lo <= t < hi)

    end = args.duration_s
    used_before = completed(start, half) / (half - start) / capacity
    used_after = (completed(after, end) + sum(1 for t in other_done if after <= t < end)) / (end - after) / capacity
    sent = figures["sent"]
    refusals = figures["outcomes"]["429"] + figures["outcomes"]["503"]
    print(f"AIMD window per second: {figures['aimd']['window_per_s']}")
    print(f"other client after the step: {other}; slow start ended at {ramp} s")
    print()
    print("| capacity used before step | after step (both clients) | 429/503 rate | convergence after step s |")
    print("|---|---|---|---|")
    print(
        f"| {used_before:.3f} | {used_after:.3f} | {refusals / sent if sent else 0:.4f} ({refusals} of {sent}) "
        f"| {converge:.2f} |"
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trials", type=int, default=20, help="credit: fills (one backend each)")
    parser.add_argument("--period-s", type=float, default=2.0, help="credit: seconds between fills")
    parser.add_argument("--window-s", type=float, default=0.5, help="credit: a fill's window (s)")
    parser.add_argument("--fill-tokens", type=int, default=128, help="credit: max_tokens of a filler request")
    parser.add_argument("--load", type=float, default=0.9, help="credit: background load (x capacity)")
    parser.add_argument(
        "--credit-fresh-s",
        type=float,
        default=None,
        help="credit: the router's credit_fresh_s (one call at a time on an older word)",
    )
    parser.add_argument(
        "--router-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="credit: a setting of the router (repeatable), e.g. credit_watch=false: answers and probes only",
    )
    parser.add_argument(
        "--router-root",
        default=str(ROOT),
        help="credit: the checkout whose router runs (its .venv/bin/rxpipe, pipelines/llm_router.py)",
    )
