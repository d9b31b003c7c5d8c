"""The serving path against bare aiohttp handlers (DESIGN §10), interleaved, medians and min–max.

    .venv/bin/python bench/serving.py [--rounds 5] [--duration 5] [--rows admit reject sse64 sse256 proxy]

What runs. Every server is a process of its own pinned to core 0 (``taskset``, when the machine
has it and two cores), the load to core 1: ``wrk`` (Debian's package) for the request rows when it
is installed, else an aiohttp client process; the SSE rows always use the aiohttp client, which
counts tokens as they arrive (a count of finished streams would be off by up to a whole wave of
streams at the window's edges). Each round runs every row on rxpipe, then on the bare baseline
(A B A B ...: drift of the machine hits both alike); the table gives the median over rounds and
the min–max. ``cpu µs/req`` is the server process's user + system CPU time
(``/proc/PID/stat``) over the measured window divided by the answers in it (per token for SSE).

Rows (the servers are in ``bench/serving_servers.py``, whose docstring says exactly what each does):
    admit    200s: ``/v1/completions`` with ``max_tokens=16`` at 64 connections; rxpipe is
             ``pipelines/llm_gateway.py``'s graph on a zero-cost SimulatedEngine; bare builds the
             same JSON per request. Target ratio >= 0.75
    reject   429s at 64 connections: rxpipe's queue and engine are full; bare answers 429 with the
             same headers and body. Target >= 0.9
    sse64    ``stream: true`` chat completions, 64 concurrent streams of 256 tokens; tokens/s.
             Target >= 0.8
    sse256   the same with 256 streams. Target >= 0.8
    paced256 256 streams of 256 tokens on an engine whose steps take 20 ms (a sequence makes 50
             tokens/s): tokens/s against the ideal 12,800 (no bare baseline: it is the engine's
             pacing and the delivery beside it that are measured). Target >= 0.95
    proxy    a fast OpenAI-compatible backend (core 1, beside the load) behind rxpipe's gateway +
             OpenAIEngine, and behind a bare aiohttp proxy with one shared ClientSession; 64
             connections. Target >= 0.75

Timed runs of a benchmark say little on a busy machine: run it on an idle one.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
SERVERS = ROOT / "bench" / "serving_servers.py"
RXPIPE = str(Path(sys.executable).with_name("rxpipe"))
TARGETS = {"admit": 0.75, "reject": 0.9, "sse64": 0.8, "sse256": 0.8, "paced256": 0.95, "proxy": 0.75}
#: concurrent connections (streams) per row
CONNECTIONS = {"admit": 64, "reject": 64, "sse64": 64, "sse256": 256, "paced256": 256, "proxy": 64}
#: rows without a bare baseline: the ideal rate their ratio is taken against
IDEAL = {"paced256": 256 * 50.0}
ROWS = tuple(TARGETS)
_BODY = {"model": "sim", "prompt": "Say hello to the benchmark", "max_tokens": 16}
_SSE_BODY = {"model": "sim", "messages": [{"role": "user", "content": "Say hello"}], "max_tokens": 256,
             "stream": True}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pin(core: int) -> list[str]:
    if shutil.which("taskset") and (os.cpu_count() or 1) >= 2:
        return ["taskset", "-c", str(core)]
    return []


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` (fields 14 and 15 of /proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _wait_http(url: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            urllib.request.urlopen(url, timeout=1).read()
            return
        except urllib.error.HTTPError:
            return  # it answers
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no server at {url} after {timeout_s} s") from None
            time.sleep(0.1)


@dataclass
class Server:
    """One server process pinned to core 0; stopped with SIGKILL (a benchmark needs no drain)."""

    name: str
    argv: list[str]
    port: int
    proc: subprocess.Popen[bytes] | None = None
    log: object = None

    def start(self) -> None:
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(_pin(0) + self.argv, stdout=self.log, stderr=subprocess.STDOUT, cwd=ROOT)
        _wait_http(f"http://127.0.0.1:{self.port}/v1/models")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def _rxpipe(mode: str, *settings: str) -> Server:
    port = _free_port()
    argv = [RXPIPE, "run", str(SERVERS), "--port", str(port), "--set", f"mode={mode}",
            # no shaping or queue limit in the way of the admission path (the graph's rate_limit
            # would otherwise refuse past 1,000 req/s)
            "--set", "rate=10000000", "--set", "burst=100000", *settings]
    return Server(f"rxpipe-{mode}", argv, port)


def _bare(kind: str, *extra: str) -> Server:
    port = _free_port()
    return Server(f"bare-{kind}", [sys.executable, str(SERVERS), kind, "--port", str(port), *extra], port)


@dataclass
class Sample:
    rate: float          # answers/s (tokens/s for SSE)
    cpu_us: float        # server CPU µs per answer (per token for SSE)
    statuses: dict[str, int] = field(default_factory=dict)


def _wrk(url: str, body: dict[str, object], connections: int, duration_s: float,
         timeout_s: float = 2.0) -> tuple[int, float, dict[str, int]]:
    """wrk's answers, seconds and statuses (``2xx``, ``non-2xx``, and ``timeout``: requests wrk
    gave up on after ``timeout_s``, wrk's default 2 s, which it does not count as answers)."""
    script = tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False)
    script.write('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
                 f"wrk.body = '{orjson.dumps(body).decode()}'\n")
    script.close()
    try:
        argv = ["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(duration_s))}s",
                f"--timeout={max(1, round(timeout_s))}s", "-s", script.name, url]
        out = subprocess.run(_pin(1) + argv, capture_output=True, text=True, check=True).stdout
    finally:
        os.unlink(script.name)
    total = int(re.search(r"(\d+) requests in ([\d.]+)(\w+)", out).group(1))  # type: ignore[union-attr]
    elapsed = float(re.search(r"requests in ([\d.]+)s", out).group(1))  # type: ignore[union-attr]
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    bad = int(non2xx.group(1)) if non2xx else 0
    statuses = {"2xx": total - bad, "non-2xx": bad}
    timeouts = re.search(r"Socket errors:.* timeout (\d+)", out)
    if timeouts and int(timeouts.group(1)):
        statuses["timeout"] = int(timeouts.group(1))
    return total, elapsed, statuses


def _client(url: str, body: dict[str, object], connections: int, duration_s: float, *, sse: bool) -> dict[str, object]:
    """Run the aiohttp load client in a process of its own on core 1; returns its JSON report."""
    out = subprocess.run(_pin(1) + [sys.executable, __file__, "_client", url, orjson.dumps(body).decode(),
                                    str(connections), str(duration_s)] + (["--sse"] if sse else []),
                         capture_output=True, check=True).stdout
    return orjson.loads(out)  # type: ignore[no-any-return]


def measure(server: Server, row: str, duration_s: float, use_wrk: bool) -> Sample:
    assert server.proc is not None
    sse = row.startswith(("sse", "paced"))
    if sse:
        path, body = "/v1/chat/completions", _SSE_BODY
    else:
        prefix = "/reject" if row == "reject" and server.name.startswith("bare") else ""
        path, body = prefix + "/v1/completions", _BODY
    connections = CONNECTIONS[row]
    url = server.url + path
    cpu0 = _cpu_s(server.proc.pid)
    if use_wrk and not sse:
        answers, elapsed, statuses = _wrk(url, body, connections, duration_s)
    else:
        report = _client(url, body, connections, duration_s, sse=sse)
        answers = int(report["tokens"] if sse else report["answers"])  # type: ignore[call-overload]
        elapsed = float(report["elapsed_s"])  # type: ignore[arg-type]
        statuses = dict(report["statuses"])  # type: ignore[call-overload]
    cpu = _cpu_s(server.proc.pid) - cpu0
    return Sample(answers / elapsed, cpu * 1e6 / max(1, answers), statuses)


def _hold(url: str, count: int) -> list[threading.Thread]:
    """Send ``count`` long requests that never finish in the benchmark's time (reject row)."""
    body = orjson.dumps({"model": "sim", "prompt": "hold", "max_tokens": 4096})

    def send() -> None:
        request = urllib.request.Request(url + "/v1/completions", body, {"Content-Type": "application/json"})
        try:
            urllib.request.urlopen(request, timeout=3600).read()
        except OSError:
            pass  # the server is killed at the end

    threads = [threading.Thread(target=send, daemon=True) for _ in range(count)]
    for t in threads:
        t.start()
        time.sleep(0.2)
    return threads


def _fmt(samples: list[float], digits: int = 0) -> str:
    return f"{statistics.median(samples):,.{digits}f} ({min(samples):,.{digits}f}–{max(samples):,.{digits}f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per measured run")
    parser.add_argument("--rows", nargs="+", choices=ROWS, default=list(ROWS))
    parser.add_argument("--client", choices=("auto", "wrk", "aiohttp"), default="auto")
    args = parser.parse_args(argv)
    use_wrk = args.client == "wrk" or (args.client == "auto" and shutil.which("wrk") is not None)

    backend = _bare("backend") if "proxy" in args.rows else None
    servers: dict[str, tuple[Server, Server | None]] = {}
    started: list[Server] = []
    try:
        if backend is not None:
            backend.argv = _pin(1) + backend.argv  # beside the load, off the measured core
            backend.start()
            started.append(backend)
        bare = _bare("bare")
        admit = _rxpipe("admit", "--set", "queue_capacity=256", "--set", "max_num_seqs=256")
        for row in args.rows:
            if row in ("admit", "sse64", "sse256"):
                servers[row] = (admit, bare)
            elif row == "reject":
                servers[row] = (_rxpipe("reject"), bare)
            elif row == "paced256":
                servers[row] = (_rxpipe("paced", "--set", "queue_capacity=256", "--set", "max_num_seqs=256"), None)
            else:
                assert backend is not None
                servers[row] = (_rxpipe("proxy", "--set", f"backend_url={backend.url}/v1",
                                        "--set", "max_num_seqs=256", "--set", "queue_capacity=256"),
                                _bare("proxy", "--backend-url", f"{backend.url}/v1"))
        for pair in servers.values():
            for server in pair:
                if server is not None and server not in started:
                    server.start()
                    started.append(server)
        if "reject" in servers:
            _hold(servers["reject"][0].url, 3)
        print(f"load: {'wrk' if use_wrk else 'aiohttp client'}; pinning: {'taskset' if _pin(0) else 'none'}; "
              f"{args.rounds} rounds × {args.duration} s", file=sys.stderr)
        for row, pair in servers.items():  # warm-up: a short run on each server of each row
            for server in pair:
                if server is not None:
                    measure(server, row, 1.0, use_wrk)
        results: dict[str, dict[str, list[Sample]]] = {row: {"rxpipe": [], "bare": []} for row in servers}
        for round_no in range(args.rounds):
            for row, (ours, theirs) in servers.items():
                for side, server in (("rxpipe", ours), ("bare", theirs)):
                    if server is None:
                        continue
                    sample = measure(server, row, args.duration, use_wrk)
                    results[row][side].append(sample)
                    print(f"round {round_no + 1} {row:7} {side:6} {sample.rate:10,.0f}/s "
                          f"{sample.cpu_us:7.1f} µs {sample.statuses}", file=sys.stderr)
    finally:
        for server in started:
            server.stop()

    print(f"\n{'path':8} {'rxpipe /s':>28} {'µs/ans':>7} {'bare /s':>28} {'µs/ans':>7} {'ratio':>19} {'target':>7}")
    failed = False
    for row, sides in results.items():
        ours = [s.rate for s in sides["rxpipe"]]
        theirs = [s.rate for s in sides["bare"]] or [IDEAL[row]] * len(ours)
        ratios = [a / b for a, b in zip(ours, theirs, strict=True)]  # pair by pair, as the rounds were run
        ok = statistics.median(ratios) >= TARGETS[row]
        failed |= not ok
        print(f"{row:8} {_fmt(ours):>28} {statistics.median(s.cpu_us for s in sides['rxpipe']):7.1f} "
              f"{_fmt(theirs):>28} {statistics.median(s.cpu_us for s in sides['bare'] or [Sample(0, 0)]):7.1f} "
              f"{_fmt(ratios, 2):>19} {'≥' + str(TARGETS[row]):>6} {'PASS' if ok else 'FAIL'}")
    print("\n/s: answers per second (tokens per second for sse*); µs/ans: server CPU per answer (per token);"
          " ratio: rxpipe / bare, paired by round (paced256: over the ideal 12,800)")
    return 1 if failed else 0


async def _load(url: str, body: bytes, connections: int, duration_s: float, sse: bool) -> dict[str, object]:
    import aiohttp

    statuses: dict[str, int] = {}
    answers = tokens = 0
    per_stream = int(orjson.loads(body).get("max_tokens", 0))
    stop_at = 0.0

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal answers, tokens
        while time.monotonic() < stop_at:
            async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as response:
                key = str(response.status)
                if sse and response.status == 200:
                    events = 0
                    async for data in response.content.iter_any():
                        events += data.count(b"data: ")
                        if time.monotonic() >= stop_at:
                            # cut at the window's end: its events so far, less the role chunk
                            tokens += max(0, events - 1)
                            return
                    tokens += per_stream  # a finished stream carried exactly max_tokens tokens
                else:
                    await response.read()
            statuses[key] = statuses.get(key, 0) + 1
            answers += 1

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None)) as session:
        started = time.monotonic()
        stop_at = started + duration_s
        await asyncio.gather(*(worker(session) for _ in range(connections)))
        elapsed = min(time.monotonic(), stop_at) - started
    return {"answers": answers, "tokens": tokens, "elapsed_s": elapsed, "statuses": statuses}


def _client_main(argv: list[str]) -> None:
    import uvloop

    url, body, connections, duration = argv[0], argv[1].encode(), int(argv[2]), float(argv[3])
    report = uvloop.run(_load(url, body, connections, duration, "--sse" in argv))
    sys.stdout.buffer.write(orjson.dumps(report))


if __name__ == "__main__":
    if sys.argv[1:2] == ["_client"]:
        _client_main(sys.argv[2:])
    else:
        sys.exit(main())
