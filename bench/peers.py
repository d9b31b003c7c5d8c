"""rxpipe's router beside the field's gateways, in front of one instant mock OpenAI backend (DESIGN §10).

    .venv/bin/python bench/peers.py [--arms rxpipe,smg,vllm-router,litellm] [--rounds 5] [--duration-s 5]
        [--seq-rounds 7] [--seq-requests 25] [--streams 64] [--stream-tokens 256] [--work-dir /tmp/rxpipe-peers]
        [--baseline /work/main]

What runs. One mock backend (``bench/serving_servers.py backend``: every completion answered at
once with exactly ``max_tokens`` tokens of ``"tok "``, as JSON with ``usage`` or as one SSE chunk per
token, a usage chunk when asked, then ``[DONE]``) pinned to core 1 with the load generators; the
gateway under test pinned to core 0 (``taskset``), every arm forwarding ``/v1/chat/completions``
to the mock with its cheapest policy for one backend (``round_robin``) and no per-request log
lines (rxpipe's default; ``--log-level warn`` for the Rust routers, ``LITELLM_LOG=ERROR``):

    rxpipe       ``rxpipe run pipelines/llm_router.py --set backends=MOCK --set model=sim
                 --set max_in_flight=256 --set queue_capacity=256 --set cache_max_entries=0
                 --set routing=round_robin`` (no response cache: the others have none)
    smg          ``smg launch --worker-urls MOCK --policy round_robin`` (SGLang model gateway, Rust)
    vllm-router  ``vllm-router --worker-urls MOCK --policy round_robin`` (Rust)
    litellm      ``litellm --config CONFIG --num_workers 1``, the model ``sim`` as ``openai/sim`` at
                 MOCK/v1, no master key (no other arm checks keys), the bundled cost map
                 (LiteLLM proxy, Python; optional: drop it from ``--arms``)
    direct       no gateway: the same load straight at the mock (the baseline of the latency
                 column, and the proof that the mock and the load are not what limits an arm)
    baseline     with ``--baseline CHECKOUT``: rxpipe's arm from another checkout (its
                 ``pipelines/llm_router.py`` run by its own ``.venv/bin/rxpipe``), e.g. main's, for a
                 paired A/B of a branch in one run: rotated with the others each round

The anchors are installed from PyPI on first use, each in its own venv under ``--work-dir``
(``bench/anchors.py``); an arm that cannot be installed or started is reported with its error and
the others run. Before measuring, every arm is checked to answer one JSON and one streamed request
exactly (``max_tokens`` tokens, ``finish_reason``, ``[DONE]``), and warmed up.

Columns (medians over rounds):
    sequential added latency   the published protocol for gateway overhead (Bifrost, Portkey,
                 LiteLLM): ``--seq-rounds`` 7 rounds × ``--seq-requests`` 25 sequential non-streamed
                 requests (``max_tokens`` 16) on one keep-alive connection (``http.client``, a process
                 on core 1); the median of the 7 round medians through the gateway minus the same
                 measured directly against the mock
    req/s at c=64        non-streamed requests (``max_tokens`` 16) answered per second by 64
                 connections for the run's window (``wrk`` with a 60 s timeout when installed, else an
                 aiohttp client on uvloop in a process on core 1); only 2xx answers count
    CPU per request      the gateway's user + system CPU (``/proc/PID/stat`` utime + stime, the
                 process and its children, every thread) over that run divided by its answers
    tokens/s, 64 streams ``--streams`` concurrent streamed requests of ``--stream-tokens`` 256 tokens,
                 each client sending the next when its stream ends, for the run's window exactly (then
                 every stream is cut, even one still waiting for its first byte); tokens counted as they
                 arrive (an aiohttp client on uvloop, core 1; a finished stream must carry exactly 256
                 tokens and ``[DONE]``, else it counts as failed and its tokens not at all)
    CPU per token        the gateway's CPU over that window (read by the client at its start and
                 end) divided by the tokens received in it
Direct's row gives the mock's absolute latency and its own CPU. The second table gives each arm's
ratio to smg: throughputs and CPU costs as the median of per-round ratios (paired: the two arms ran
in the same round, minutes apart at most), added latency as the ratio of the medians. A throughput
cell is marked with the gateway's share of its core when under 85 %: the gateway was not what
limited that run (the mock or the load on core 1 was, or, on a loaded machine, other processes
on the gateway's core).

A run lasts ``--duration-s``, or longer for a slow arm (up to ``--max-window-s``): long enough for
10 answers per connection, and for 2 streams per client, at 2/3 the rate of the arm's warm-up run;
otherwise the window's edges are measured (the work on the first wave of requests falls in the
window, their answers partly after it). A cell whose run was still short is marked so.

Protocol. Sequential latency runs first: each of its rounds runs every arm once in rotated order
(A B C, B C A, ...). Then ``--rounds`` rounds, each running every arm's request run, then every
arm's stream run, in rotated order: drift of a shared machine hits every arm alike. After each
run the gateway is let go idle (requests the run's clients left behind worked off) before the
next run starts. Timed runs say little on a busy machine: run it on an idle one, under
``flock /tmp/bench.lock`` where others share it.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.anchors import Proc, anchor_binary, install_anchors  # noqa: E402
from bench.serving import _client, _free_port, _pin, _wrk  # noqa: E402

RXPIPE = str(Path(sys.executable).with_name("rxpipe"))
SERVERS = ROOT / "bench" / "serving_servers.py"
ARMS = ("rxpipe", "smg", "vllm-router", "litellm")
PATH = "/v1/chat/completions"
MODEL = "sim"
WORD = b"tok "  # every mock token's text; in a stream, every other one is STREAM_WORD
STREAM_WORD = b"tik "


def _count_tokens(data: bytes) -> int:
    """The mock's token texts in ``data`` (neither word is found elsewhere in an answer)."""
    return data.count(WORD) + data.count(STREAM_WORD)
SHORT_TOKENS = 16
REQUEST_WAVES = 10  # answers per connection a req/s run needs at least
STREAM_WAVES = 2    # streams per client a tokens/s run needs at least


def _body(max_tokens: int, *, stream: bool) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "Say hello to the benchmark"}],
            "max_tokens": max_tokens, "stream": stream}


def _tree_cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its live descendants (utime + stime, fields 14
    and 15 of /proc/PID/stat, which count every thread; children already reaped are in their
    parent's cutime, which a gateway's workers never are while it runs)."""
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        parents[int(entry)] = int(fields[1])
        times[int(entry)] = (int(fields[11]) + int(fields[12])) / tick
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        total += times.get(current, 0.0)
        todo.extend(child for child, parent in parents.items() if parent == current)
    return total


# ---------------------------------------------------------------- the arms

@dataclass
class Arm:
    name: str
    proc: Proc | None  # None: direct (the mock itself is measured)
    url: str
    pid: int


def start_arm(name: str, mock: Proc, work: Path, logs: Path, baseline: Path | None = None) -> Arm:
    """Start ``name``'s gateway on core 0 in front of ``mock``; RuntimeError when it does not come up.
    ``baseline``: the checkout of the ``baseline`` arm (rxpipe's router from there)."""
    if name == "direct":
        check_answers(mock.url, timeout_s=10.0)
        return Arm(name, None, mock.url, mock.proc.pid)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = None
    timeout_s = 60.0
    if name in ("rxpipe", "baseline"):
        checkout = ROOT if name == "rxpipe" else baseline
        assert checkout is not None, "the baseline arm needs --baseline CHECKOUT"
        binary = RXPIPE if name == "rxpipe" else str(checkout / ".venv" / "bin" / "rxpipe")
        args = [binary, "run", str(checkout / "pipelines" / "llm_router.py"), "--port", str(port),
                "--set", f"backends={mock.url}", "--set", f"model={MODEL}", "--set", "max_in_flight=256",
                "--set", "queue_capacity=256", "--set", "cache_max_entries=0", "--set", "routing=round_robin"]
        ready = "/health"
    elif name == "smg":
        args = [str(anchor_binary(name, work)), "launch", "--host", "127.0.0.1", "--port", str(port),
                "--worker-urls", mock.url, "--policy", "round_robin", "--log-level", "warn",
                "--prometheus-port", str(_free_port())]  # metrics on, as ours: not on the shared 29000
        ready = "/v1/models"
    elif name == "vllm-router":
        args = [str(anchor_binary(name, work)), "--host", "127.0.0.1", "--port", str(port),
                "--worker-urls", mock.url, "--policy", "round_robin", "--log-level", "warning",
                "--prometheus-port", str(_free_port())]
        ready = "/v1/models"
    elif name == "litellm":
        config = work / "litellm-config.yaml"
        config.write_text(f"model_list:\n  - model_name: {MODEL}\n    litellm_params:\n      model: openai/{MODEL}\n"
                          f"      api_base: {mock.url}/v1\n      api_key: bench\n")
        args = [str(anchor_binary(name, work)), "--config", str(config), "--host", "127.0.0.1", "--port", str(port),
                "--num_workers", "1"]
        # no network here: the model cost map from the package, no telemetry, no per-request logs;
        # no master key, as no other arm checks one (recent releases refuse to start without one
        # unless told this)
        env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY": "False",
               "LITELLM_LOG": "ERROR", "LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY": "true"}
        ready, timeout_s = "/health/liveliness", 240.0
    else:
        raise ValueError(f"unknown arm {name!r}: one of {', '.join(ARMS)}")
    proc = Proc(args, 0, logs / f"{name}-{port}.log", url, ready, env=env, timeout_s=timeout_s)
    try:
        check_answers(url, timeout_s=60.0)
    except BaseException:
        proc.stop()
        raise
    return Arm(name, proc, url, proc.proc.pid)


def check_answers(url: str, timeout_s: float) -> None:
    """One JSON and one streamed request must come back exactly (retried until ``timeout_s``: a
    router may take a moment to admit its worker); RuntimeError otherwise."""
    deadline = time.monotonic() + timeout_s
    error = ""
    while time.monotonic() < deadline:
        try:
            status, data = _post(url, _body(SHORT_TOKENS, stream=False))
            answer = orjson.loads(data) if status == 200 else None
            if answer is None or answer["choices"][0]["message"]["content"] != WORD.decode() * SHORT_TOKENS:
                error = f"JSON answer {status}: {data[:300]!r}"
            else:
                status, data = _post(url, _body(SHORT_TOKENS, stream=True))
                if status == 200 and _count_tokens(data) == SHORT_TOKENS and b'"finish_reason":"length"' in \
                        data.replace(b" ", b"") and data.rstrip().endswith(b"data: [DONE]"):
                    return
                error = f"stream answer {status}: {data[:300]!r}"
        except (OSError, http.client.HTTPException, ValueError, KeyError, IndexError, TypeError) as exc:
            error = repr(exc)
        time.sleep(0.5)
    raise RuntimeError(f"no exact answer from {url}: {error}")


def _post(url: str, body: dict[str, Any]) -> tuple[int, bytes]:
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request("POST", PATH, orjson.dumps(body), {"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


# ---------------------------------------------------------------- the load (processes on core 1)

def sequential_ms(url: str, requests: int) -> list[float]:
    """``requests`` sequential request latencies (ms) through ``url``, from a process on core 1."""
    out = subprocess.run(_pin(1) + [sys.executable, __file__, "_seq", url, str(requests)],
                         capture_output=True, check=True).stdout
    return list(orjson.loads(out))


def _seq_main(url: str, requests: int) -> None:
    host, port = url.removeprefix("http://").split(":")
    body = orjson.dumps(_body(SHORT_TOKENS, stream=False))
    headers = {"Content-Type": "application/json"}
    expected = WORD * SHORT_TOKENS
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    latencies: list[float] = []
    for i in range(requests + 3):  # 3 warm-up requests: the connection opened, the gateway's pool too
        start = time.perf_counter()
        connection.request("POST", PATH, body, headers)
        response = connection.getresponse()
        data = response.read()
        elapsed = time.perf_counter() - start
        if response.status != 200 or expected not in data:
            raise SystemExit(f"answer {response.status}: {data[:300]!r}")
        if i >= 3:
            latencies.append(elapsed * 1000)
    connection.close()
    sys.stdout.buffer.write(orjson.dumps(latencies))


def stream_run(url: str, streams: int, tokens: int, duration_s: float, pid: int) -> dict[str, Any]:
    """Tokens/s of ``streams`` concurrent streams of ``tokens`` tokens, from a process on core 1,
    and process ``pid``'s CPU seconds over the same window (read by that process)."""
    out = subprocess.run(_pin(1) + [sys.executable, __file__, "_streams", url, str(streams), str(tokens),
                                    str(duration_s), str(pid)], capture_output=True, check=True).stdout
    return dict(orjson.loads(out))


async def _streams(url: str, streams: int, tokens: int, duration_s: float, pid: int) -> dict[str, Any]:
    import aiohttp

    body = orjson.dumps(_body(tokens, stream=True))
    received = finished = failed = 0
    statuses: dict[str, int] = {}

    async def client(session: aiohttp.ClientSession) -> None:
        nonlocal received, finished, failed
        while True:
            async with session.post(url + PATH, data=body, headers={"Content-Type": "application/json"}) as response:
                statuses[str(response.status)] = statuses.get(str(response.status), 0) + 1
                if response.status != 200:
                    await response.read()
                    failed += 1
                    continue
                count, tail = 0, b""
                async for data in response.content.iter_any():
                    # a token's text may straddle two reads: count over the last 32 bytes + this
                    # read, less what those bytes held already
                    joined = tail + data
                    new = _count_tokens(joined) - _count_tokens(tail)
                    count += new
                    received += new  # counted as it arrives: the window may end mid-stream
                    tail = joined[-32:]
                if count == tokens and tail.rstrip().endswith(b"data: [DONE]"):
                    finished += 1
                else:
                    received -= count  # a wrong or cut answer counts for nothing
                    failed += 1

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                     timeout=aiohttp.ClientTimeout(total=None, sock_read=60)) as session:
        cpu0, started = _tree_cpu_s(pid), time.monotonic()
        tasks = [asyncio.create_task(client(session)) for _ in range(streams)]
        done, _ = await asyncio.wait(tasks, timeout=duration_s)
        # the window's end, hard: streams still waiting for their first byte are cut too
        elapsed, cpu_s, tokens_in_window = time.monotonic() - started, _tree_cpu_s(pid) - cpu0, received
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        errors = [repr(t.exception()) for t in done if not t.cancelled() and t.exception()]
    return {"tokens": tokens_in_window, "finished": finished, "failed": failed + len(errors), "elapsed_s": elapsed,
            "cpu_s": cpu_s, "statuses": statuses, "errors": errors[:3]}


# ---------------------------------------------------------------- measuring

@dataclass
class Sample:
    rate: float        # answers/s or tokens/s
    cpu_us: float      # gateway CPU µs per answer or per token
    core_share: float  # gateway CPU s per wall s
    bad: int           # non-2xx answers, failed streams
    short: bool = False  # the run was shorter than its steady state needs (--max-window-s)


@dataclass
class Results:
    seq_ms: dict[str, list[float]] = field(default_factory=dict)  # arm -> round medians
    requests: dict[str, list[Sample]] = field(default_factory=dict)
    streams: dict[str, list[Sample]] = field(default_factory=dict)


def measure_requests(arm: Arm, connections: int, duration_s: float, use_wrk: bool) -> Sample:
    body = _body(SHORT_TOKENS, stream=False)
    cpu0, t0 = _tree_cpu_s(arm.pid), time.monotonic()
    if use_wrk:
        answers, elapsed, statuses = _wrk(arm.url + PATH, body, connections, duration_s, timeout_s=60.0)
        good, bad = statuses["2xx"], statuses["non-2xx"] + statuses.get("timeout", 0)
    else:
        report = _client(arm.url + PATH, body, connections, duration_s, sse=False)
        elapsed = float(report["elapsed_s"])  # type: ignore[arg-type]
        codes: dict[str, int] = report["statuses"]  # type: ignore[assignment]
        good = sum(n for code, n in codes.items() if code.startswith("2"))
        bad = sum(codes.values()) - good
    cpu, wall = _tree_cpu_s(arm.pid) - cpu0, time.monotonic() - t0
    return Sample(good / elapsed, cpu * 1e6 / max(1, good), cpu / wall, bad)


def measure_streams(arm: Arm, streams: int, tokens: int, duration_s: float) -> Sample:
    report = stream_run(arm.url, streams, tokens, duration_s, arm.pid)
    received, cpu, wall = int(report["tokens"]), float(report["cpu_s"]), float(report["elapsed_s"])
    if report["errors"]:
        print(f"{arm.name}: streams failed: {report['errors']}", file=sys.stderr)
    return Sample(received / wall, cpu * 1e6 / max(1, received), cpu / wall, int(report["failed"]))


def settle(arm: Arm, idle_share: float = 0.05, limit_s: float = 60.0) -> None:
    """Wait until ``arm``'s process is idle (under ``idle_share`` of a core over 0.25 s), at most
    ``limit_s``: a gateway still working off requests a run left behind (answers nobody reads any
    more) would otherwise take CPU from the next run on its core."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        cpu0 = _tree_cpu_s(arm.pid)
        time.sleep(0.25)
        if _tree_cpu_s(arm.pid) - cpu0 < idle_share * 0.25:
            return
    print(f"{arm.name} still busy {limit_s:.0f} s after its run", file=sys.stderr)


def _rotated(arms: list[Arm], round_no: int) -> list[Arm]:
    k = round_no % len(arms)
    return arms[k:] + arms[:k]


def run(arms: list[Arm], args: argparse.Namespace, use_wrk: bool) -> Results:
    results = Results()
    for round_no in range(args.seq_rounds):
        for arm in _rotated(arms, round_no):
            median = statistics.median(sequential_ms(arm.url, args.seq_requests))
            results.seq_ms.setdefault(arm.name, []).append(median)
            print(f"sequential round {round_no + 1} {arm.name:12} median {median:7.3f} ms", file=sys.stderr)
    # A run must be long enough for its steady state: at least ``REQUEST_WAVES`` answers per
    # connection and ``STREAM_WAVES`` streams per client at the warm-up's rate (a slow gateway's
    # first answers come after a whole wave of work), else the window's edges are measured.
    windows: dict[tuple[str, str], float] = {}
    for arm in arms:  # warm-up
        warm = measure_requests(arm, args.connections, args.warmup_s, use_wrk)
        settle(arm)
        windows[arm.name, "requests"] = REQUEST_WAVES * args.connections / max(warm.rate, 1e-3)
        warm = measure_streams(arm, args.streams, args.stream_tokens, args.warmup_s)
        settle(arm)
        windows[arm.name, "streams"] = STREAM_WAVES * args.streams * args.stream_tokens / max(warm.rate, 1e-3)
    for key, needed_s in windows.items():
        needed_s *= 1.5  # margin: a second-long warm-up overestimates a slow arm's steady rate
        windows[key] = min(args.max_window_s, max(args.duration_s, needed_s))
        if needed_s > args.duration_s:
            print(f"{key[0]} {key[1]}: runs of {windows[key]:.1f} s (steady state needs {needed_s:.1f} s)",
                  file=sys.stderr)
    for round_no in range(args.rounds):
        for kind, table in (("requests", results.requests), ("streams", results.streams)):
            for arm in _rotated(arms, round_no):
                if kind == "requests":
                    sample = measure_requests(arm, args.connections, windows[arm.name, kind], use_wrk)
                    sample.short = sample.rate * windows[arm.name, kind] < REQUEST_WAVES * args.connections
                else:
                    sample = measure_streams(arm, args.streams, args.stream_tokens, windows[arm.name, kind])
                    sample.short = sample.rate * windows[arm.name, kind] < \
                        STREAM_WAVES * args.streams * args.stream_tokens
                settle(arm)
                table.setdefault(arm.name, []).append(sample)
                print(f"round {round_no + 1} {kind:8} {arm.name:12} {sample.rate:10,.0f}/s {sample.cpu_us:8.1f} µs "
                      f"core {sample.core_share * 100:3.0f} % bad {sample.bad}", file=sys.stderr)
    return results


# ---------------------------------------------------------------- the tables

def _rate(samples: list[Sample], unit: str = "", who: str = "gateway") -> str:
    rate = statistics.median(s.rate for s in samples)
    share = statistics.median(s.core_share for s in samples)
    text = f"{rate / 1000:,.1f} k" if unit == "k" else f"{rate:,.0f}"
    bad = sum(s.bad for s in samples)
    if share < 0.85:
        text += f" ({who} at {share * 100:.0f} % of its core)"
    if bad:
        text += f" ({bad} failed)"
    if any(s.short for s in samples):
        text += " (window short of steady state)"
    return text


def _paired(ours: list[Sample], theirs: list[Sample], key: str) -> str:
    ratios = [getattr(a, key) / getattr(b, key) for a, b in zip(ours, theirs, strict=True) if getattr(b, key)]
    return f"{statistics.median(ratios):.2f}×" if ratios else "—"


def table(results: Results, names: list[str], connections: int, streams: int) -> str:
    direct_ms = statistics.median(results.seq_ms["direct"])
    labels = {"rxpipe": "rxpipe `llm_router.py`", "smg": "`smg` (SGLang model gateway, Rust)",
              "vllm-router": "`vllm-router` (Rust)", "litellm": "LiteLLM proxy", "direct": "direct to the mock",
              "baseline": "rxpipe `llm_router.py` (baseline checkout)"}
    lines = [f"| through | sequential added latency | req/s at c={connections} | CPU per request | "
             f"tokens/s, {streams} streams | CPU per token |", "|---|---:|---:|---:|---:|---:|"]
    added: dict[str, float] = {}
    for name in names:
        req_samples, stream_samples = results.requests[name], results.streams[name]
        if name == "direct":
            latency = f"({direct_ms:.2f} ms itself)"
        else:
            added[name] = statistics.median(results.seq_ms[name]) - direct_ms
            latency = f"{added[name]:.2f} ms"
        who = "mock" if name == "direct" else "gateway"
        lines.append(f"| {labels[name]} | {latency} | {_rate(req_samples, '', who)} | "
                     f"{statistics.median(s.cpu_us for s in req_samples):,.0f} µs | "
                     f"{_rate(stream_samples, 'k', who)} | "
                     f"{statistics.median(s.cpu_us for s in stream_samples):,.1f} µs |")
    if "smg" in results.requests:
        lines += ["", "| through | added latency × smg | req/s × smg | CPU per request × smg | tokens/s × smg | "
                      "CPU per token × smg |", "|---|---:|---:|---:|---:|---:|"]
        smg_requests, smg_streams = results.requests["smg"], results.streams["smg"]
        for name in names:
            if name == "direct":
                continue
            latency = f"{added[name] / added['smg']:.2f}×" if added["smg"] > 0 else "—"
            lines.append(f"| {labels[name]} | {latency} | {_paired(results.requests[name], smg_requests, 'rate')} | "
                         f"{_paired(results.requests[name], smg_requests, 'cpu_us')} | "
                         f"{_paired(results.streams[name], smg_streams, 'rate')} | "
                         f"{_paired(results.streams[name], smg_streams, 'cpu_us')} |")
    if "baseline" in results.requests and "rxpipe" in results.requests:
        base_requests, base_streams = results.requests["baseline"], results.streams["baseline"]
        lines += ["", "| rxpipe / baseline, paired per round | req/s | CPU per request | tokens/s | CPU per token |",
                  "|---|---:|---:|---:|---:|",
                  f"| this checkout / baseline | {_paired(results.requests['rxpipe'], base_requests, 'rate')} | "
                  f"{_paired(results.requests['rxpipe'], base_requests, 'cpu_us')} | "
                  f"{_paired(results.streams['rxpipe'], base_streams, 'rate')} | "
                  f"{_paired(results.streams['rxpipe'], base_streams, 'cpu_us')} |"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arms", default=",".join(ARMS), help="comma-separated, of " + ", ".join(ARMS))
    parser.add_argument("--rounds", type=int, default=5, help="paired rounds of the throughput runs")
    parser.add_argument("--duration-s", type=float, default=5.0, help="seconds per throughput run")
    parser.add_argument("--warmup-s", type=float, default=1.0, help="seconds of each warm-up run")
    parser.add_argument("--max-window-s", type=float, default=60.0,
                        help="longest run of a slow arm (whose steady state needs more than --duration-s)")
    parser.add_argument("--seq-rounds", type=int, default=7)
    parser.add_argument("--seq-requests", type=int, default=25)
    parser.add_argument("--connections", type=int, default=64, help="connections of the req/s run")
    parser.add_argument("--streams", type=int, default=64)
    parser.add_argument("--stream-tokens", type=int, default=256)
    parser.add_argument("--client", choices=("auto", "wrk", "aiohttp"), default="auto",
                        help="the req/s run's load generator (auto: wrk when installed)")
    parser.add_argument("--work-dir", default=os.path.join(tempfile.gettempdir(), "rxpipe-peers"))
    parser.add_argument("--baseline", type=Path, default=None,
                        help="another checkout (with its .venv) whose rxpipe router runs as the arm 'baseline'")
    args = parser.parse_args(argv)
    names = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = [n for n in names if n not in ARMS]
    if unknown or not names:
        parser.error(f"--arms: unknown {', '.join(unknown)}; choose among {', '.join(ARMS)}")
    use_wrk = args.client == "wrk" or (args.client == "auto" and shutil.which("wrk") is not None)
    work = Path(args.work_dir)
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)

    failed = install_anchors(names, work)
    port = _free_port()
    mock = Proc([sys.executable, str(SERVERS), "backend", "--port", str(port)], 1, logs / f"mock-{port}.log",
                f"http://127.0.0.1:{port}", "/health")
    arms: list[Arm] = []
    try:
        for name in ["direct"] + names + (["baseline"] if args.baseline is not None else []):
            if name in failed:
                continue
            try:
                arms.append(start_arm(name, mock, work, logs, args.baseline))
            except RuntimeError as error:
                if name == "direct":
                    raise  # without the mock nothing can be measured
                failed[name] = "did not start: " + str(error).strip()[-600:]
        print(f"load: {'wrk' if use_wrk else 'aiohttp client'} (req/s), aiohttp client on uvloop (streams), "
              f"http.client (sequential); pinning: {'taskset' if _pin(0) else 'none'}; arms: "
              f"{', '.join(a.name for a in arms)}", file=sys.stderr)
        results = run(arms, args, use_wrk)
    finally:
        for arm in arms:
            if arm.proc is not None:
                arm.proc.stop()
        mock.stop()
    print()
    print(table(results, [a.name for a in arms if a.name != "direct"] + ["direct"], args.connections, args.streams))
    mock_rate = statistics.median(s.rate for s in results.requests["direct"])
    mock_tokens = statistics.median(s.rate for s in results.streams["direct"])
    for name in (a.name for a in arms if a.name != "direct"):
        rate = statistics.median(s.rate for s in results.requests[name])
        tokens = statistics.median(s.rate for s in results.streams[name])
        if rate > 0.8 * mock_rate or tokens > 0.8 * mock_tokens:
            print(f"\nwarning: {name} reached over 0.8 of the mock's own rate: that cell may be mock-bound")
    for name, why in failed.items():
        print(f"\n{name}: could not run: {why}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["_seq"]:
        _seq_main(sys.argv[2], int(sys.argv[3]))
    elif sys.argv[1:2] == ["_streams"]:
        import uvloop

        report = uvloop.run(_streams(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]),
                                     int(sys.argv[6])))
        sys.stdout.buffer.write(orjson.dumps(report))
    else:
        sys.exit(main())
