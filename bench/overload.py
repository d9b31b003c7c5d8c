"""The gateway under overload, against DESIGN §10's targets (one run, all scenarios side by side).

    .venv/bin/python bench/overload.py [--duration 15] [--warmup 10] [--scenario default budget ...]

What runs. For each scenario a fresh server process, ``rxpipe run bench/overload_pipeline.py``
(``pipelines/llm_gateway.py``'s graph gateway → rate_limit → edge_queue → batch → execute, on
``SimulatedEngine.per_request(slots=8, base_s=0.02, per_token_s=0.002, tokens=(16, 64))``: a request
of n tokens holds one of 8 slots for 0.02 + 0.002·n s, so capacity = 8 / 0.1 s = 80 req/s), output
in a log file. This process is the load generator: open-loop Poisson arrivals (aiohttp,
``TCPConnector(limit=0)``, keep-alive, uvloop), non-streaming ``/v1/completions`` without
``max_tokens`` (the engine draws 16–64 tokens), no retries. ``--warmup`` seconds of load fill the
queue first; the next ``--duration`` seconds are measured: every answer that arrives inside that
window counts, whenever its request was sent (a rate of answers, like the server's throughput;
counting by send time instead would be off by up to one queue's worth of requests admitted ahead
of their answers).

Scenarios (``--scenario``, default all):
    default  5× capacity (400 req/s), queue_capacity=100 (the pipeline's default), no latency budget
    budget   5× capacity, latency_budget_s=0.5 (429 deadline when the estimated queue wait is over it)
    queue64  5× capacity, DESIGN's baseline "a fixed 64-deep queue": queue_capacity=64, no budget
    fifo64   5× capacity, the same baseline taken literally: a 64-deep FIFO kept full (the queue
             stage is ``limit_rate(64, 1)``, which asks for one more after every item that leaves
             it, where the default ``edge_queue(64)`` counts a request until it starts running)
    sanity   1× capacity (80 req/s), queue_capacity=100, no budget

Options: ``--set KEY=VALUE`` adds a server setting to every scenario (any key of
``pipelines/llm_gateway.py`` or ``bench/overload_pipeline.py``); ``--server-root DIR`` runs the
server from another checkout (e.g. a prototype copy under /tmp; put first on PYTHONPATH), for A/B
runs; ``--seed`` seeds the arrivals (the engine's seed is fixed, so every 5× scenario serves the
same token draws); ``--loop asyncio`` for the client.

How to read the tables (one row per scenario; then the answers by status and reason, the
server-side handler times, the client's own load, and the targets with PASS/FAIL).
    offered / sent /s     the Poisson rate asked for, and the requests sent in the window per second
                          (one Poisson draw, so within a few √n of offered); the "client" table shows
                          whether the generator kept up: how late sends were against the Poisson
                          schedule (a generator that cannot keep up falls behind it) and its CPU
    good /s, good/cap     200s per second, and that over capacity (80): DESIGN wants >= 0.97 at 5×
    good≤0.5 s/cap        200s whose client-side end-to-end latency <= 0.5 s, per second, over 80
    wait≤0.5 s/cap        200s whose wait (latency minus their service time 0.02 + 0.002 × tokens,
                          exact for this engine) <= 0.5 s, per second, over 80: the other reading of
                          "goodput within 0.5 s" (started within the budget, as the gateway's
                          budget check defines it: it compares the estimated queue wait)
    slot util             Σ service time of those 200s (0.02 + 0.002 × their completion_tokens) over
                          8 slots × duration: the share of engine time spent on answered work. It
                          is free of the token draw's noise (good/cap can exceed 1 when the drawn
                          outputs happen to be short); 1.0 means no slot ever idled
    200 p50/p99           client-side end-to-end latency of the 200s (s)
    429 n, p50/p99        count and client-side latency (ms) of the 429s answered at once
                          (queue_full, and deadline decided at admission): an upper bound of the
                          server-side time, which the "server" table gives (handler entry to
                          response, timed by the pipeline's benchmark middleware); DESIGN's target is
                          <= 5 ms p99 server-side
    late 429              429 deadline for a request that was admitted and then waited in the queue
                          past its budget (it never ran)
    Retry-After           the header values seen on 429s: value×count
    RSS start→mid→end     server VmRSS (MiB) at the end of the warm-up, in the middle and at the end
                          of the measured window; MiB/min: least-squares trend of the samples taken
                          once a second (in a 15 s window the allocator's steps make it noisy)
    blocks/answer         growth of the server's live Python memory blocks (sys.getallocatedblocks()
                          after gc.collect(), at the start and at the end of the window) per answer
                          received: ~0 when memory is flat; a request's object graph left behind
                          shows as several. "Memory flat" passes when RSS grew <= 2 MiB over the
                          window and the blocks by <= 5000 (requests in flight at the two samples
                          differ, ~100 blocks each) + 0.5 per answer
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from hdrh.histogram import HdrHistogram

ROOT = Path(__file__).resolve().parents[1]
PIPELINE = ROOT / "bench" / "overload_pipeline.py"
SLOTS, BASE_S, PER_TOKEN_S, TOKENS = 8, 0.02, 0.002, (16, 64)
#: requests/s the engine completes when always busy: slots / mean service time
CAPACITY = SLOTS / (BASE_S + PER_TOKEN_S * (TOKENS[0] + TOKENS[1]) / 2)
BODY = orjson.dumps({"model": "sim", "prompt": "Hello"})
HEADERS = {"Content-Type": "application/json"}
GOOD_WITHIN_S = 0.5
#: "memory flat": RSS growth over the measured window (MiB), and growth of the server's live
#: Python memory blocks per answer (retaining even one object per request is >= 1) beyond an
#: allowance for a different number of requests in flight at the two samples (~100 blocks each)
RSS_GROWTH_MAX_MIB = 2.0
BLOCKS_PER_ANSWER_MAX = 0.5
BLOCKS_IN_FLIGHT_ALLOWANCE = 5000


@dataclass(frozen=True)
class Scenario:
    name: str
    load: float  # × capacity
    settings: dict[str, Any]
    what: str


SCENARIOS = {
    "default": Scenario("default", 5.0, {}, "queue_capacity=100, no latency budget"),
    "budget": Scenario("budget", 5.0, {"latency_budget_s": 0.5}, "queue_capacity=100, latency_budget_s=0.5"),
    "queue64": Scenario("queue64", 5.0, {"queue_capacity": 64}, "fixed 64-deep queue, no budget (baseline)"),
    "fifo64": Scenario("fifo64", 5.0, {"queue_capacity": 64, "queue_low_tide": 1},
                       "64-deep FIFO topped up after every departure (limit_rate(64, 1)), no budget"),
    "sanity": Scenario("sanity", 1.0, {}, "queue_capacity=100, no budget, 1× capacity"),
}


def _hist() -> HdrHistogram:
    return HdrHistogram(1, 120_000_000, 3)  # microseconds, 1 µs – 120 s, 3 significant digits


def _pct_s(hist: HdrHistogram, q: float) -> float:
    return hist.get_value_at_percentile(q) / 1e6 if hist.get_total_count() else float("nan")


@dataclass
class Result:
    scenario: Scenario
    offered: float
    duration_s: float
    sent: int = 0
    statuses: collections.Counter[str] = field(default_factory=collections.Counter)
    ok: HdrHistogram = field(default_factory=_hist)
    ok_within: int = 0
    ok_started_within: int = 0  # 200s whose latency minus their service time <= 0.5 s
    busy_s: float = 0.0  # slot-seconds the 200s held on the engine (their service times)
    refused: HdrHistogram = field(default_factory=_hist)  # 429 answered at once
    late: HdrHistogram = field(default_factory=_hist)  # 429 deadline after queueing
    retry_after: collections.Counter[str] = field(default_factory=collections.Counter)
    send_lag: HdrHistogram = field(default_factory=_hist)
    errors: collections.Counter[str] = field(default_factory=collections.Counter)
    rss_start: float = 0.0
    rss_end: float = 0.0
    rss_samples: list[tuple[float, float]] = field(default_factory=list)  # (loop s, MiB) once a second
    blocks: tuple[int, int] | None = None  # server's Python allocated blocks at window start and end

    @property
    def rss_mid(self) -> float:
        return self.rss_samples[len(self.rss_samples) // 2][1] if self.rss_samples else float("nan")

    @property
    def rss_slope(self) -> float:
        """Least-squares growth of the server's RSS over the window (MiB per minute)."""
        points = self.rss_samples
        if len(points) < 3:
            return float("nan")
        mt = sum(t for t, _ in points) / len(points)
        mr = sum(r for _, r in points) / len(points)
        var = sum((t - mt) ** 2 for t, _ in points)
        return 60 * sum((t - mt) * (r - mr) for t, r in points) / var if var else float("nan")

    @property
    def answered(self) -> int:
        return sum(self.statuses.values())

    @property
    def blocks_per_answer(self) -> float:
        """Growth of the server's live Python memory blocks over the window, per answer."""
        if self.blocks is None:
            return float("nan")
        return (self.blocks[1] - self.blocks[0]) / max(1, self.answered)

    @property
    def blocks_flat(self) -> bool:
        if self.blocks is None:
            return True
        growth = self.blocks[1] - self.blocks[0]
        return growth <= BLOCKS_IN_FLIGHT_ALLOWANCE + BLOCKS_PER_ANSWER_MAX * self.answered
    client_cpu: float = 0.0  # fraction of one core
    server_cpu: float = 0.0
    server: dict[str, dict[str, float]] = field(default_factory=dict)
    in_flight_at_end: int = 0
    log_path: str = ""

    def per_s(self, count: int) -> float:
        return count / self.duration_s


# -- the server process ------------------------------------------------------------------------
def _rxpipe_command() -> list[str]:
    script = Path(sys.executable).with_name("rxpipe")
    return [str(script)] if script.exists() else [sys.executable, "-m", "rxpipe"]


def _rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


class Server:
    """``rxpipe run bench/overload_pipeline.py --port 0`` in its own process, output to a file.

    ``root``: the checkout whose ``rxpipe`` and ``bench/overload_pipeline.py`` the server runs
    (another one than this file's is put first on PYTHONPATH: A/B runs of a prototype copy).
    """

    def __init__(self, settings: dict[str, Any], log_path: str, root: Path = ROOT) -> None:
        self.settings = settings
        self.log_path = log_path
        self.root = root
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    async def __aenter__(self) -> Server:
        command = [*_rxpipe_command(), "run", str(self.root / PIPELINE.relative_to(ROOT)), "--port", "0"]
        for key, value in self.settings.items():
            command += ["--set", f"{key}={orjson.dumps(value).decode()}"]
        env = dict(os.environ)
        if self.root != ROOT:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(self.root), env.get("PYTHONPATH")]))
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=self.root, env=env)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            match = re.search(r"serving on (http://\S+)", Path(self.log_path).read_text())
            if match:
                self.url = match.group(1)
                return self
            if self.proc.poll() is not None:
                break
            await asyncio.sleep(0.05)
        await self.__aexit__()
        raise RuntimeError(f"server did not start; see {self.log_path}:\n{Path(self.log_path).read_text()}")

    async def __aexit__(self, *exc: object) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)  # drains, then exits 0
        for _ in range(200):
            if proc.poll() is not None:
                return
            await asyncio.sleep(0.05)
        proc.kill()
        proc.wait()


# -- the load generator ------------------------------------------------------------------------
async def _one(session: aiohttp.ClientSession, url: str, result: Result, window: tuple[float, float]) -> None:
    """One request; its answer counts when it arrives inside the measured ``window`` (loop time)."""
    loop = asyncio.get_running_loop()
    started = time.perf_counter()
    try:
        async with session.post(url, data=BODY, headers=HEADERS) as response:
            payload = await response.read()
            status = response.status
            retry_after = response.headers.get("Retry-After")
    except (TimeoutError, aiohttp.ClientError, OSError) as error:
        if window[0] <= loop.time() <= window[1]:
            result.errors[type(error).__name__] += 1
        return
    if not window[0] <= loop.time() <= window[1]:
        return
    micros = max(1, round((time.perf_counter() - started) * 1e6))
    if status == 200:
        result.statuses["200"] += 1
        service_s = BASE_S + PER_TOKEN_S * orjson.loads(payload)["usage"]["completion_tokens"]
        result.busy_s += service_s
        result.ok.record_value(micros)
        if micros <= GOOD_WITHIN_S * 1e6:
            result.ok_within += 1
        if micros / 1e6 - service_s <= GOOD_WITHIN_S:
            result.ok_started_within += 1
        return
    code = "?"
    if status in (429, 503):
        error = orjson.loads(payload)["error"]
        code = error["code"]
        if code == "deadline" and error["message"].startswith("the request waited"):
            code = "deadline late"
        result.retry_after[retry_after or "none"] += 1
    result.statuses[f"{status} {code}"] += 1
    if status == 429:
        (result.late if code == "deadline late" else result.refused).record_value(micros)


async def _allocated_blocks(session: aiohttp.ClientSession, url: str) -> int | None:
    """The server's ``sys.getallocatedblocks()`` after a full collection (None without timing)."""
    async with session.get(f"{url}/bench/memory") as response:
        if response.status != 200:
            return None
        return int(orjson.loads(await response.read())["allocated_blocks"])


async def _sample_rss(pid: int, result: Result, stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        result.rss_samples.append((loop.time(), _rss_mib(pid)))
        try:
            await asyncio.wait_for(stop.wait(), 1.0)
        except TimeoutError:
            pass


async def run_scenario(scenario: Scenario, args: argparse.Namespace, log_dir: str) -> Result:
    rate = scenario.load * CAPACITY
    result = Result(scenario, rate, args.duration, log_path=f"{log_dir}/{scenario.name}.log")
    settings = {**scenario.settings, **args.server_settings}
    rng = random.Random(args.seed)
    loop = asyncio.get_running_loop()
    async with Server(settings, result.log_path, args.server_root) as server:
        pid = server.proc.pid  # type: ignore[union-attr]
        url = f"{server.url}/v1/completions"
        connector = aiohttp.TCPConnector(limit=0)
        timeout = aiohttp.ClientTimeout(total=120)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            tasks: set[asyncio.Task[None]] = set()
            start = loop.time()
            window = (start + args.warmup, start + args.warmup + args.duration)
            planned = start
            in_window = False
            blocks_start: int | None = None
            stop_sampling = asyncio.Event()
            sampler: asyncio.Task[None] | None = None
            cpu = (0.0, 0.0)
            while True:
                planned += rng.expovariate(rate)
                if planned >= window[1]:
                    break
                if not in_window and planned >= window[0]:
                    in_window = True
                    async with session.post(f"{server.url}/bench/reset") as response:
                        await response.read()
                    blocks_start = await _allocated_blocks(session, server.url)
                    result.rss_start = _rss_mib(pid)
                    cpu = (time.process_time(), _cpu_s(pid))
                    sampler = loop.create_task(_sample_rss(pid, result, stop_sampling))
                delay = planned - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                task = loop.create_task(_one(session, url, result, window))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                if in_window:
                    result.sent += 1
                    result.send_lag.record_value(max(1, round((loop.time() - planned) * 1e6)))
            await asyncio.sleep(max(0.0, window[1] - loop.time()))
            wall = loop.time() - window[0]
            result.client_cpu = (time.process_time() - cpu[0]) / wall
            result.server_cpu = (_cpu_s(pid) - cpu[1]) / wall
            result.rss_end = _rss_mib(pid)
            result.rss_samples.append((loop.time(), result.rss_end))
            blocks_end = await _allocated_blocks(session, server.url)
            if blocks_start is not None and blocks_end is not None:
                result.blocks = (blocks_start, blocks_end)
            stop_sampling.set()
            if sampler is not None:
                await sampler
            result.in_flight_at_end = len(tasks)
            if tasks:  # let the last answers arrive (not counted) so the server stops cleanly
                _, still = await asyncio.wait(set(tasks), timeout=30)
                for task in still:
                    task.cancel()
                await asyncio.gather(*still, return_exceptions=True)
            async with session.get(f"{server.url}/bench/server_timing") as response:
                if response.status == 200:  # 404 with --set server_timing=false
                    result.server = orjson.loads(await response.read())
    return result


# -- the report --------------------------------------------------------------------------------
def _ms(seconds: float) -> str:
    return "-" if seconds != seconds else f"{seconds * 1e3:.1f}"


def _s(seconds: float) -> str:
    return "-" if seconds != seconds else f"{seconds:.3f}"


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(header)]
    lines = [" | ".join(h.rjust(w) for h, w in zip(header, widths, strict=True)),
             "-+-".join("-" * w for w in widths)]
    lines += [" | ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(lines)


def _retry_after(result: Result) -> str:
    if not result.retry_after:
        return "-"
    return " ".join(f"{value}×{count}" for value, count in sorted(result.retry_after.items()))


def _immediate_429s(result: Result) -> list[tuple[str, dict[str, float]]]:
    return [(outcome, stats) for outcome, stats in result.server.items()
            if outcome in ("429 queue_full", "429 deadline early") and stats["count"]]


def report(results: list[Result]) -> None:
    goodput, refusals = [], []
    for r in results:
        goodput.append([
            r.scenario.name, f"{r.offered:.0f}", f"{r.per_s(r.sent):.1f}",
            f"{r.per_s(r.statuses['200']):.1f}", f"{r.per_s(r.statuses['200']) / CAPACITY:.3f}",
            f"{r.per_s(r.ok_within) / CAPACITY:.3f}", f"{r.per_s(r.ok_started_within) / CAPACITY:.3f}",
            f"{r.busy_s / (SLOTS * r.duration_s):.3f}", _s(_pct_s(r.ok, 50)), _s(_pct_s(r.ok, 99)),
        ])
        refusals.append([
            r.scenario.name, str(r.refused.get_total_count()), _ms(_pct_s(r.refused, 50)),
            _ms(_pct_s(r.refused, 99)), str(r.late.get_total_count()),
            str(sum(c for k, c in r.statuses.items() if k.startswith("503"))), _retry_after(r),
            f"{r.rss_start:.1f} → {r.rss_mid:.1f} → {r.rss_end:.1f}", f"{r.rss_slope:+.2f}",
            "-" if r.blocks_per_answer != r.blocks_per_answer else f"{r.blocks_per_answer:+.2f}",
        ])
    print(_table(["scenario", "offered/s", "sent/s", "good/s", "good/cap", "good≤0.5s/cap", "wait≤0.5s/cap",
                  "slot util", "200 p50 s", "200 p99 s"], goodput))
    print()
    print(_table(["scenario", "429 n", "429 p50 ms", "429 p99 ms", "late 429", "503", "Retry-After",
                  "server RSS MiB start → mid → end", "MiB/min", "blocks/answer"], refusals))
    print("\nanswers received in the measured window, by status and reason:")
    for r in results:
        statuses = ", ".join(f"{k}: {v}" for k, v in sorted(r.statuses.items()))
        errors = f"; client errors {dict(r.errors)}" if r.errors else ""
        print(f"  {r.scenario.name:8} {statuses}{errors}; in flight at the end {r.in_flight_at_end}")

    print("\nserver-side handler time (benchmark middleware: handler entry → response), ms:")
    rows = []
    for r in results:
        for outcome, stats in r.server.items():
            if stats["count"]:
                rows.append([r.scenario.name, outcome, str(stats["count"]), _ms(stats["p50_s"]), _ms(stats["p99_s"]),
                             _ms(stats["p999_s"]), _ms(stats["max_s"])])
    print(_table(["scenario", "outcome", "n", "p50", "p99", "p99.9", "max"], rows) if rows
          else "  (off: --set server_timing=false)")

    print("\nclient (the load generator must not be the bottleneck):")
    rows = [[r.scenario.name, f"{r.offered:.0f}", f"{r.per_s(r.sent):.1f}", f"{r.per_s(r.sent) / r.offered:.3f}",
             _ms(_pct_s(r.send_lag, 50)), _ms(_pct_s(r.send_lag, 99)), f"{100 * r.client_cpu:.0f}%",
             f"{100 * r.server_cpu:.0f}%"] for r in results]
    print(_table(["scenario", "offered/s", "sent/s", "sent/offered", "send lag p50 ms", "send lag p99 ms",
                  "client CPU", "server CPU"], rows))

    print("\nDESIGN §10 targets:")
    by_name = {r.scenario.name: r for r in results}

    def verdict(ok: bool) -> str:
        return "PASS" if ok else "FAIL"

    if "default" in by_name:
        r = by_name["default"]
        value = r.per_s(r.statuses["200"]) / CAPACITY
        print(f"  [{verdict(value >= 0.97)}] goodput >= 0.97 × capacity at 5× overload (default): {value:.3f}")
    if "budget" in by_name:
        r = by_name["budget"]
        value = r.per_s(r.ok_within) / CAPACITY
        print(f"  [{verdict(value >= 0.9)}] latency_budget_s=0.5: goodput within 0.5 s >= 0.9 × capacity: {value:.3f}"
              f" (goodput {r.per_s(r.statuses['200']) / CAPACITY:.3f})")
    for name in ("queue64", "fifo64"):
        if name in by_name:
            r = by_name[name]
            value = r.per_s(r.ok_within) / CAPACITY
            print(f"  [{verdict(value <= 0.09)}] fixed 64-deep queue ({name}): goodput within 0.5 s ≈ 0.04 × "
                  f"capacity (DESIGN; pass if <= 0.09): {value:.3f}")
    for r in results:
        if r.scenario.load < 2:
            continue
        immediate = _immediate_429s(r)
        worst = max((stats["p99_s"] for _, stats in immediate), default=float("nan"))
        detail = ", ".join(f"{o} {_ms(s['p99_s'])}" for o, s in immediate) or "no 429s"
        if not r.server:
            continue
        print(f"  [{verdict(worst <= 0.005)}] 429 answered server-side <= 5 ms p99 ({r.scenario.name}): {detail} ms"
              f" (client-side p99 {_ms(_pct_s(r.refused, 99))} ms)")
    for r in results:
        growth = r.rss_end - r.rss_start
        blocks = "-" if r.blocks is None else f"{r.blocks[1] - r.blocks[0]:+d} ({r.blocks_per_answer:+.2f} per answer)"
        ok = growth <= RSS_GROWTH_MAX_MIB and r.blocks_flat
        print(f"  [{verdict(ok)}] memory flat ({r.scenario.name}): server RSS {r.rss_start:.1f} → {r.rss_mid:.1f} → "
              f"{r.rss_end:.1f} MiB ({growth:+.1f}, trend {r.rss_slope:+.1f} MiB/min), live Python blocks {blocks}"
              f" (pass if RSS growth <= {RSS_GROWTH_MAX_MIB:g} MiB and blocks <= {BLOCKS_IN_FLIGHT_ALLOWANCE} + "
              f"{BLOCKS_PER_ANSWER_MAX:g} per answer)")
    for r in results:
        lag = _pct_s(r.send_lag, 99)
        if lag > 0.01:
            print(f"  [WARN] {r.scenario.name}: the client sent late (p99 {lag * 1e3:.1f} ms behind the Poisson "
                  f"schedule): it may be a bottleneck")


def _checkout(root: Path) -> str:
    """``<short HEAD>`` of ``root``, ``+ uncommitted changes`` when tracked files differ (read-only git)."""
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return f"{root} (not a git checkout)"
    return f"{root} at {head}{' + uncommitted changes' if dirty else ''}"


def _parse_set(pairs: list[str]) -> dict[str, Any]:
    settings = {}
    for pair in pairs:
        key, _, raw = pair.partition("=")
        try:
            settings[key] = orjson.loads(raw)
        except orjson.JSONDecodeError:
            settings[key] = raw
    return settings


async def amain(args: argparse.Namespace) -> list[Result]:
    log_dir = args.log_dir or tempfile.mkdtemp(prefix="rxpipe_overload_")
    results = []
    for name in args.scenario:
        scenario = SCENARIOS[name]
        print(f"running {name}: {scenario.load:g}× capacity = {scenario.load * CAPACITY:.0f} req/s, {scenario.what}"
              f" ({args.warmup:g} s warm-up + {args.duration:g} s; server log {log_dir}/{name}.log)",
              file=sys.stderr, flush=True)
        results.append(await run_scenario(scenario, args, log_dir))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=15.0, help="measured seconds per scenario")
    parser.add_argument("--warmup", type=float, default=10.0,
                        help="seconds of load before measuring (fills the queue; lets the allocator settle)")
    parser.add_argument("--scenario", nargs="+", choices=list(SCENARIOS), default=list(SCENARIOS))
    parser.add_argument("--seed", type=int, default=1, help="seed of the Poisson arrivals")
    parser.add_argument("--loop", choices=["uvloop", "asyncio"], default="uvloop", help="the client's event loop")
    parser.add_argument("--set", dest="server_set", action="append", default=[], metavar="KEY=VALUE",
                        help="extra server setting for every scenario (as rxpipe run --set)")
    parser.add_argument("--server-root", type=lambda p: Path(p).resolve(), default=ROOT,
                        help="run the server from this checkout (e.g. a prototype copy); default: this one")
    parser.add_argument("--log-dir", default=None, help="where server logs go (default: a new temp dir)")
    args = parser.parse_args()
    args.server_settings = _parse_set(args.server_set)
    print(f"engine: SimulatedEngine.per_request(slots={SLOTS}, base_s={BASE_S}, per_token_s={PER_TOKEN_S}, "
          f"tokens={TOKENS}) → capacity {CAPACITY:.0f} req/s; graph of pipelines/llm_gateway.py; "
          f"open-loop Poisson, non-streaming, no max_tokens; client loop {args.loop}; "
          f"{os.cpu_count()} CPUs\nserver: {_checkout(args.server_root)}"
          f"{''.join(f' --set {pair}' for pair in args.server_set)}\n")
    if args.loop == "uvloop":
        import uvloop

        runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    else:
        runner = asyncio.Runner()
    with runner:
        results = runner.run(amain(args))
    report(results)


if __name__ == "__main__":
    main()
