"""The HTTP stack alone: what a server and a client library cost per request on uvloop (issue 27 item 2).

    .venv/bin/python bench/http_stack.py [--side server client] [--rounds 5] [--duration 4]
        [--servers aiohttp-app,edge,...] [--clients aiohttp-today,...] [--lock /tmp/bench.lock]

No rxpipe graph runs here: each arm is the bare HTTP stack with the cheapest handler that still
does what the proxy path's HTTP does, so the table says how much of a proxied request's CPU the
library itself takes and what the alternatives on the same asyncio/uvloop loop would take.

SERVER side. Each arm is a process pinned to core 0 (``taskset``) on uvloop that answers ``POST
/v1/chat/completions`` (a 110-byte chat request) by reading the body, parsing it with
``orjson.loads`` and answering the same fixed 330-byte chat completion JSON (``Content-Type``,
``Content-Length``, and ``Date``/``Server`` where the library adds them), keep-alive; any other
path or method gets a 404/405. The load is ``wrk -t1 -c64`` pinned to core 1. CPU per request is
the server's user + system CPU (``/proc/PID/stat``, the process, its threads and children) over
the run divided by wrk's answers.

    aiohttp-app   ``web.Application`` + its router (eight routes, as the edge has) run by
                  ``web.AppRunner`` + ``TCPSite``, ``access_log=None`` (the edge's stack before
                  rxpipe's own protocol class)
    edge          rxpipe's edge server layer as it is in the checkout on ``PYTHONPATH`` (``rxpipe.
                  gateway._server``: the connection limit, header timeout, JSON error answers ...)
                  with the same handler, routed as that checkout routes (a ``web.Application``
                  before the move, the low-level server's dispatch after): the arm to A/B it
    aiohttp-lowlevel  ``web.Server(handler)`` (aiohttp's low-level server: its protocol, parser,
                  ``BaseRequest``, ``web.Response``) with a dict dispatch on (method, path)
    httptools     a raw ``asyncio.Protocol`` with ``httptools.HttpRequestParser`` (llhttp, uvicorn's
                  parser): the bound of what a Python server on this loop can do; it has no
                  hardening beyond the parser's (no limits, no timeouts)
    uvicorn       uvicorn (httptools parser) with a bare ASGI app, ``access_log=False``, no lifespan
    uvicorn-h11   the same on h11 (the pure-Python parser)
    granian       granian (Rust: hyper on tokio threads, the Python app on a uvloop loop) with an
                  RSGI app, one worker, one runtime thread; all its threads pinned to core 0

CLIENT side. A mock backend pinned to core 1 (a raw ``httptools`` server: no library cost there)
answers every ``POST /v1/chat/completions`` with the fixed 330-byte JSON. The client arm is one
process on uvloop pinned to core 0: 64 concurrent callers, each POSTing a 200-byte JSON body
(``Content-Type``, ``Accept``, an ``X-Request-Id``), reading the whole answer and
``orjson.loads``-ing it, in a loop, over a keep-alive pool; CPU per request is the client
process's CPU over the window divided by the answers.

    aiohttp-today  ``ClientSession.post`` as ``OpenAIEngine`` calls it (rxpipe/engines/openai.py,
                   _openai_wire.py ``_exchange`` and ``_read_answer``): a ``TCPConnector(limit=256,
                   limit_per_host=256)``, the session's ``ClientTimeout(total, sock_connect,
                   sock_read)``, per call ``allow_redirects=False`` and ``timeout=ClientTimeout(
                   sock_connect=10)``, ``await response.read()``, ``response.release()``
    aiohttp-lean   the same library with the leanest options: ``ClientSession.request`` on a
                   pre-built ``yarl.URL``, no timeouts at all, ``auto_decompress=False``,
                   ``skip_auto_headers`` for User-Agent and Accept-Encoding, ``TCPConnector(limit=0)``
    aiosonic       ``aiosonic.HTTPClient`` (a pool of 64, no reconnect after N requests), ``post`` then
                   ``content()``
    httpx          ``httpx.AsyncClient`` (limits 64), ``post(content=...)``
    httpcore       ``httpcore.AsyncConnectionPool`` (httpx's transport alone), ``request``
    raw-httptools  a keep-alive pool of 64 ``asyncio.Protocol`` connections, each request's head
                   pre-encoded but for its id, answers parsed by ``httptools.HttpResponseParser``:
                   the bound of what a Python client on this loop can do (no redirects, no
                   decompression, no timeouts, no proxy, no TLS)

Protocol: ``--rounds`` rounds; each runs every arm once, in an order rotated by one per round
(A B C, B C A, ...), ``--duration`` seconds each after a 1 s warm-up run on the arm's first round.
A round holds ``--lock`` (``flock``: one benchmark at a time on a shared machine) while it runs.
The table gives medians over rounds and each arm's paired ratio to the first arm (``aiohttp-app``
and ``aiohttp-today`` by default): the median over rounds of (arm / first arm) in the same round.
The load average at the start and the end is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from email.utils import formatdate
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[1]
PATH = "/v1/chat/completions"
#: what every server arm answers (330 bytes: a non-streamed chat completion of 16 tokens)
ANSWER = orjson.dumps({
    "id": "chatcmpl-0123456789abcdef0123456789abcdef", "object": "chat.completion", "created": 1764600000,
    "model": "sim", "choices": [{"index": 0, "message": {
        "role": "assistant", "content": "tok tok tok tok tok tok tok tok tok tok tok tok tok tok tok tok"},
        "logprobs": None, "finish_reason": "length"}],
    "usage": {"prompt_tokens": 7, "completion_tokens": 16, "total_tokens": 23}})
#: what the load sends to a server arm (110 bytes)
REQUEST = orjson.dumps({"model": "sim", "messages": [{"role": "user", "content": "Say hello to the benchmark"}],
                        "max_tokens": 16, "stream": False})
#: what a client arm sends to the mock (200 bytes: the backend call rxpipe makes)
CALL = orjson.dumps({"model": "sim", "messages": [{"role": "user", "content": "Say hello to the benchmark, "
                                                   "and then say it once more in other words please"}],
                     "max_tokens": 16, "temperature": 0.7, "stream": False})
#: the package each arm needs beyond rxpipe's own (``pip install -e '.[bench]'``)
NEEDS = {"httptools": "httptools", "uvicorn": "uvicorn", "uvicorn-h11": "uvicorn", "granian": "granian",
         "aiosonic": "aiosonic", "httpx": "httpx", "httpcore": "httpcore", "raw-httptools": "httptools"}
SERVERS = ("aiohttp-app", "edge", "aiohttp-lowlevel", "httptools", "uvicorn", "uvicorn-h11", "granian")
CLIENTS = ("aiohttp-today", "aiohttp-lean", "aiosonic", "httpx", "httpcore", "raw-httptools")
CONNECTIONS = 64


# -- measuring ---------------------------------------------------------------------------------
def _pin(core: int) -> list[str]:
    if shutil.which("taskset") and (os.cpu_count() or 1) >= 2:
        return ["taskset", "-c", str(core)]
    return []


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (granian's worker is a child process)."""
    pids, todo = [], [pid]
    while todo:
        p = todo.pop()
        pids.append(p)
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
    return pids


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its children (every thread): fields 14 and 15 of
    ``/proc/PID/stat``, in clock ticks."""
    total = 0
    for p in _tree(pid):
        with contextlib.suppress(OSError), open(f"/proc/{p}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, proc: subprocess.Popen[bytes], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"nothing listens on {port} after {timeout_s} s")
        time.sleep(0.05)


@contextlib.contextmanager
def _locked(path: str | None) -> Iterator[None]:
    if not path:
        yield
        return
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _wrk(url: str, duration_s: float) -> tuple[int, float, int]:
    """(answers, seconds, non-2xx) of ``wrk -t1 -c64`` POSTing :data:`REQUEST` to ``url``, on core 1."""
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
                     f"wrk.body = '{REQUEST.decode()}'\n")
    try:
        out = subprocess.run(_pin(1) + ["wrk", "-t1", f"-c{CONNECTIONS}", f"-d{max(1, round(duration_s))}s",
                                        "--timeout=10s", "-s", script.name, url],
                             capture_output=True, text=True, check=True).stdout
    finally:
        os.unlink(script.name)
    match = re.search(r"(\d+) requests in ([\d.]+)s", out)
    assert match, out
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return int(match.group(1)), float(match.group(2)), int(bad.group(1)) if bad else 0


class _Proc:
    """A process pinned to a core in a session of its own, killed at the end with its children
    (granian's worker is one)."""

    def __init__(self, argv: list[str], port: int, core: int) -> None:
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(_pin(core) + argv, stdout=self.log, stderr=subprocess.STDOUT, cwd=ROOT,
                                     start_new_session=True)
        try:
            _wait_port(port, self.proc)
        except RuntimeError:
            self.log.seek(0)
            sys.stderr.write(self.log.read().decode(errors="replace")[-2000:])
            self.stop()
            raise

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


def _server_argv(arm: str, port: int) -> list[str]:
    if arm == "granian":
        return [str(Path(sys.executable).with_name("granian")), "--interface", "rsgi", "--host", "127.0.0.1",
                "--port", str(port), "--workers", "1", "--runtime-threads", "1", "--runtime-mode", "st",
                "--blocking-threads", "1", "--loop", "uvloop", "--no-ws", "--log-level", "warning",
                "--working-dir", str(ROOT / "bench"), "http_stack:rsgi_app"]
    return [sys.executable, __file__, "_server", arm, str(port)]


def measure_server(arm: str, duration_s: float, proc: _Proc, port: int) -> tuple[float, float]:
    """(requests/s, CPU µs per request) of one wrk run against a started server arm."""
    cpu0 = cpu_s(proc.proc.pid)
    answers, elapsed, bad = _wrk(f"http://127.0.0.1:{port}{PATH}", duration_s)
    cpu = cpu_s(proc.proc.pid) - cpu0
    if bad:
        raise RuntimeError(f"{arm}: {bad} non-2xx answers")
    return answers / elapsed, cpu * 1e6 / max(1, answers)


def measure_client(arm: str, duration_s: float, mock_port: int) -> tuple[float, float]:
    """(requests/s, CPU µs per request) of one client arm's run against the mock, on core 0."""
    out = subprocess.run(_pin(0) + [sys.executable, __file__, "_client", arm, str(mock_port), str(duration_s)],
                         capture_output=True, check=True, cwd=ROOT).stdout
    report = orjson.loads(out)
    return report["answers"] / report["elapsed_s"], report["cpu_s"] * 1e6 / max(1, report["answers"])


def _installed(arms: list[str]) -> list[str]:
    """``arms`` less those whose package is not installed (said on stderr)."""
    import importlib.util

    missing = [arm for arm in arms if arm in NEEDS and importlib.util.find_spec(NEEDS[arm]) is None]
    for arm in missing:
        print(f"{arm}: skipped, {NEEDS[arm]} is not installed (pip install -e '.[bench]')", file=sys.stderr)
    return [arm for arm in arms if arm not in missing]


def _rounds(arms: list[str], rounds: int, lock: str | None, one: Any) -> dict[str, list[tuple[float, float]]]:
    arms = _installed(arms)
    results: dict[str, list[tuple[float, float]]] = {arm: [] for arm in arms}
    for r in range(rounds):
        order = arms[r % len(arms):] + arms[:r % len(arms)]
        with _locked(lock):
            for arm in order:
                results[arm].append(one(arm, warm=r == 0))
                rate, cpu = results[arm][-1]
                print(f"round {r + 1} {arm:17} {rate:10,.0f}/s {cpu:8.1f} µs", file=sys.stderr, flush=True)
    return results


def _table(title: str, results: dict[str, list[tuple[float, float]]]) -> str:
    arms = list(results)
    base = results[arms[0]]
    lines = [f"\n{title}", "| arm | req/s | CPU µs/request | paired ratio req/s | paired ratio CPU/request |",
             "|---|---:|---:|---:|---:|"]
    for arm in arms:
        samples = results[arm]
        rates = [s[0] for s in samples]
        cpus = [s[1] for s in samples]
        rate_ratio = statistics.median(s[0] / b[0] for s, b in zip(samples, base, strict=True))
        cpu_ratio = statistics.median(s[1] / b[1] for s, b in zip(samples, base, strict=True))
        lines.append(f"| {arm} | {statistics.median(rates):,.0f} ({min(rates):,.0f}–{max(rates):,.0f}) | "
                     f"{statistics.median(cpus):.1f} ({min(cpus):.1f}–{max(cpus):.1f}) | "
                     f"{rate_ratio:.2f} | {cpu_ratio:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--side", nargs="+", choices=("server", "client"), default=["server", "client"])
    parser.add_argument("--servers", default=",".join(SERVERS),
                        help="server arms, comma-separated; the first is the base")
    parser.add_argument("--clients", default=",".join(CLIENTS),
                        help="client arms, comma-separated; the first is the base")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--duration", type=float, default=4.0, help="seconds per measured run")
    parser.add_argument("--lock", default="/tmp/bench.lock", help="flock held during each round ('' for none)")
    args = parser.parse_args(argv)
    print(f"load average at start: {os.getloadavg()}", file=sys.stderr)
    out = []
    if "server" in args.side:
        arms = [a for a in args.servers.split(",") if a]
        unknown = set(arms) - set(SERVERS)
        if unknown:
            parser.error(f"unknown server arms {sorted(unknown)}")

        def one_server(arm: str, warm: bool) -> tuple[float, float]:
            port = _free_port()
            proc = _Proc(_server_argv(arm, port), port, core=0)
            try:
                _check_server(port)
                if warm:
                    measure_server(arm, 1.0, proc, port)
                return measure_server(arm, args.duration, proc, port)
            finally:
                proc.stop()

        out.append(_table(f"SERVER side: POST {PATH} answered by a fixed JSON, wrk -c{CONNECTIONS} on core 1, "
                          f"server on core 0", _rounds(arms, args.rounds, args.lock, one_server)))
    if "client" in args.side:
        arms = [a for a in args.clients.split(",") if a]
        unknown = set(arms) - set(CLIENTS)
        if unknown:
            parser.error(f"unknown client arms {sorted(unknown)}")
        port = _free_port()
        mock = _Proc([sys.executable, __file__, "_server", "httptools", str(port)], port, core=1)
        try:
            def one_client(arm: str, warm: bool) -> tuple[float, float]:
                if warm:
                    measure_client(arm, 1.0, port)
                return measure_client(arm, args.duration, port)

            out.append(_table(f"CLIENT side: {CONNECTIONS} concurrent callers in one process on core 0, "
                              f"an httptools mock on core 1", _rounds(arms, args.rounds, args.lock, one_client)))
        finally:
            mock.stop()
    print("\n".join(out))
    print(f"\nload average at end: {os.getloadavg()}; {args.rounds} rounds × {args.duration} s; "
          "ratios: arm / first arm, median over rounds of the same-round pairs")
    return 0


def _check_server(port: int) -> None:
    """The arm answers the request with exactly :data:`ANSWER`, and 404 elsewhere."""
    import http.client

    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("POST", PATH, REQUEST, {"Content-Type": "application/json"})
        response = connection.getresponse()
        body = response.read()
        if response.status != 200 or body != ANSWER:
            raise RuntimeError(f"port {port}: {response.status} {body[:200]!r}")
        connection.request("GET", "/nowhere")
        response = connection.getresponse()
        response.read()
        if response.status != 404:
            raise RuntimeError(f"port {port}: GET /nowhere answered {response.status}")
    finally:
        connection.close()


# -- the server arms ---------------------------------------------------------------------------
def _tune_gc() -> None:
    """What ``rxpipe run`` does once serving (``rxpipe/cli.py`` ``_tune_gc``), done in every
    Python arm alike: ``gc.freeze()`` and the youngest generation collected every 10,000 net
    allocations (without it the arm that imports more modules pays more per full collection)."""
    import gc

    gc.freeze()
    youngest, middle, oldest = gc.get_threshold()
    gc.set_threshold(max(youngest, 10_000), middle, oldest)


_OTHER_ROUTES = ("/v1/completions", "/v1/models", "/metrics", "/health", "/healthz", "/readyz")


def _aiohttp_app() -> Any:
    from aiohttp import web

    async def chat(request: web.Request) -> web.Response:
        orjson.loads(await request.read())
        return web.Response(body=ANSWER, content_type="application/json")

    async def other(request: web.Request) -> web.Response:
        return web.Response(body=b"{}", content_type="application/json")

    app = web.Application()
    app.router.add_post(PATH, chat)
    app.router.add_post("/v1/completions", other)
    for route in _OTHER_ROUTES[1:]:
        app.router.add_get(route, other)
    app.router.add_get("/v1/models/{model}", other)
    return app


def _lowlevel_dispatch() -> Any:
    """The handler of the low-level arms: a dict dispatch on (method, path), 404 elsewhere."""
    from aiohttp import web

    async def chat(request: web.BaseRequest) -> web.Response:
        orjson.loads(await request.read())
        return web.Response(body=ANSWER, content_type="application/json")

    routes = {("POST", PATH): chat}

    async def dispatch(request: web.BaseRequest) -> web.StreamResponse:
        handler = routes.get((request.method, request.rel_url.path_safe))
        if handler is None:
            return web.Response(status=404, body=b'{"error":"not found"}', content_type="application/json")
        return await handler(request)

    return dispatch


async def _serve_aiohttp(arm: str, port: int) -> None:
    from aiohttp import web

    if arm == "aiohttp-app":
        runner: web.BaseRunner = web.AppRunner(_aiohttp_app(), access_log=None, handler_cancellation=True)
    elif arm == "edge":
        from rxpipe.gateway import _server

        # the edge's server layer as this checkout has it: on aiohttp's low-level server with a
        # dispatch of its own (EdgeApp), or, before that, on a web.Application and its router
        app = (_server.EdgeApp(_lowlevel_dispatch(), 1 << 20) if hasattr(_server, "EdgeApp")  # type: ignore[attr-defined]
               else _aiohttp_app())
        runner = _server.EdgeRunner(app, max_connections=10000, header_timeout_s=10.0, keepalive_timeout=75.0,
                                    handler_cancellation=True, access_log=None, logger=_server.HTTP_LOG)
    else:
        runner = web.ServerRunner(web.Server(_lowlevel_dispatch(), handler_cancellation=True), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    _tune_gc()
    await asyncio.Event().wait()


class _HttptoolsServer(asyncio.Protocol):
    """A keep-alive HTTP/1.1 server on ``httptools.HttpRequestParser``: the fixed answer to POST
    :data:`PATH` (its body parsed), 404 to anything else."""

    date = b""

    def __init__(self) -> None:
        import httptools

        self.parser = httptools.HttpRequestParser(self)
        self.url = b""
        self.body: list[bytes] = []
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except Exception:
            assert self.transport is not None
            self.transport.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            self.transport.close()

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        assert self.transport is not None
        if self.url == PATH.encode() and self.parser.get_method() == b"POST":
            orjson.loads(b"".join(self.body))
            status, body = b"200 OK", ANSWER
        else:
            status, body = b"404 Not Found", b'{"error":"not found"}'
        self.transport.write(b"HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nDate: %s\r\n"
                             b"Server: raw\r\n\r\n%s" % (status, len(body), _HttptoolsServer.date, body))
        self.url = b""
        self.body = []
        if not self.parser.should_keep_alive():
            self.transport.close()


async def _serve_httptools(port: int) -> None:
    loop = asyncio.get_running_loop()

    def tick() -> None:  # the Date header, formatted once a second (as aiohttp and uvicorn do)
        _HttptoolsServer.date = formatdate(usegmt=True).encode()
        loop.call_later(1.0, tick)

    tick()
    await loop.create_server(_HttptoolsServer, "127.0.0.1", port, backlog=1024)
    _tune_gc()
    await asyncio.Event().wait()


async def asgi_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The bare ASGI app of the uvicorn arms."""
    if scope["type"] != "http":
        return
    if scope["method"] == "POST" and scope["path"] == PATH:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        orjson.loads(body)
        status, answer = 200, ANSWER
    else:
        status, answer = 404, b'{"error":"not found"}'
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(answer))]})
    await send({"type": "http.response.body", "body": answer})


class _RSGIApp:
    """The RSGI app of the granian arm (``__rsgi_init__`` runs in the worker once its loop is up)."""

    def __rsgi_init__(self, loop: asyncio.AbstractEventLoop) -> None:
        _tune_gc()

    async def __rsgi__(self, scope: Any, protocol: Any) -> None:
        if scope.method == "POST" and scope.path == PATH:
            orjson.loads(await protocol())
            protocol.response_bytes(200, [("content-type", "application/json")], ANSWER)
        else:
            protocol.response_bytes(404, [("content-type", "application/json")], b'{"error":"not found"}')


rsgi_app = _RSGIApp()


def _run_server(arm: str, port: int) -> None:
    import uvloop

    if arm in ("uvicorn", "uvicorn-h11"):
        import uvicorn

        config = uvicorn.Config(asgi_app, host="127.0.0.1", port=port, loop="uvloop",
                                http="httptools" if arm == "uvicorn" else "h11", lifespan="off",
                                access_log=False, log_level="warning")
        _tune_gc()  # what uvicorn makes as it starts stays young: a few sockets and protocols
        uvicorn.Server(config).run()
    elif arm == "httptools":
        uvloop.run(_serve_httptools(port))
    else:
        uvloop.run(_serve_aiohttp(arm, port))


# -- the client arms ---------------------------------------------------------------------------
_HEADERS = {"Content-Type": "application/json", "Accept": "application/json"}


def _ids() -> Iterator[str]:
    n = 0
    while True:
        n += 1
        yield f"{n:032x}"


async def _client_run(arm: str, port: int, duration_s: float) -> dict[str, float]:
    url = f"http://127.0.0.1:{port}{PATH}"
    ids = _ids()
    answers = 0
    stop_at = 0.0
    call: Any
    close: Any

    if arm in ("aiohttp-today", "aiohttp-lean"):
        import aiohttp
        import yarl

        if arm == "aiohttp-today":
            session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=256, limit_per_host=256),
                timeout=aiohttp.ClientTimeout(total=600.0, sock_connect=10.0, sock_read=300.0))
            options = {"allow_redirects": False, "timeout": aiohttp.ClientTimeout(sock_connect=10.0)}

            async def call() -> bytes:
                response = await session.post(url, data=CALL, headers={**_HEADERS, "X-Request-Id": next(ids)},
                                              **options)
                try:
                    return await response.read()
                finally:
                    response.release()
        else:
            session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(),
                                            auto_decompress=False, skip_auto_headers=("User-Agent", "Accept-Encoding"))
            target = yarl.URL(url)

            async def call() -> bytes:
                response = await session.request("POST", target, data=CALL, allow_redirects=False,
                                                 headers={**_HEADERS, "X-Request-Id": next(ids)})
                try:
                    return await response.read()
                finally:
                    response.release()
        close = session.close
    elif arm == "aiosonic":
        import aiosonic
        from aiosonic.pools import PoolConfig

        # no reconnect after N requests (its default 1,000): a keep-alive pool like the others
        client = aiosonic.HTTPClient(aiosonic.TCPConnector(
            pool_configs={":default": PoolConfig(size=CONNECTIONS, max_conn_requests=None)}))

        async def call() -> bytes:
            response = await client.post(url, data=CALL, headers={**_HEADERS, "X-Request-Id": next(ids)})
            return await response.content()  # type: ignore[no-any-return]

        async def close() -> None:
            await client.connector.cleanup()
    elif arm == "httpx":
        import httpx

        client = httpx.AsyncClient(limits=httpx.Limits(max_connections=CONNECTIONS,
                                                       max_keepalive_connections=CONNECTIONS))

        async def call() -> bytes:
            response = await client.post(url, content=CALL, headers={**_HEADERS, "X-Request-Id": next(ids)})
            return response.content

        close = client.aclose
    elif arm == "httpcore":
        import httpcore

        pool = httpcore.AsyncConnectionPool(max_connections=CONNECTIONS, max_keepalive_connections=CONNECTIONS)
        base = [(b"Host", f"127.0.0.1:{port}".encode()), (b"Content-Type", b"application/json"),
                (b"Accept", b"application/json"), (b"Content-Length", b"%d" % len(CALL))]

        async def call() -> bytes:
            response = await pool.request("POST", url, headers=[*base, (b"X-Request-Id", next(ids).encode())],
                                          content=CALL)
            return response.content

        close = pool.aclose
    else:
        pool_ = _RawPool("127.0.0.1", port, CONNECTIONS)

        async def call() -> bytes:
            return await pool_.post(CALL, next(ids))

        close = pool_.close

    async def worker() -> None:
        nonlocal answers
        while time.monotonic() < stop_at:
            orjson.loads(await call())
            answers += 1

    _tune_gc()
    started = time.monotonic()
    stop_at = started + 0.3  # connect and warm every caller, outside the window
    await asyncio.gather(*(worker() for _ in range(CONNECTIONS)))
    answers = 0
    cpu0 = time.process_time()
    started = time.monotonic()
    stop_at = started + duration_s
    await asyncio.gather(*(worker() for _ in range(CONNECTIONS)))
    elapsed = time.monotonic() - started
    cpu = time.process_time() - cpu0
    await close()
    return {"answers": answers, "elapsed_s": elapsed, "cpu_s": cpu}


class _RawConnection(asyncio.Protocol):
    """One keep-alive connection: a pre-encoded request head, ``httptools.HttpResponseParser``."""

    def __init__(self) -> None:
        import httptools

        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.body: list[bytes] = []
        self.waiter: asyncio.Future[bytes] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        body, self.body = b"".join(self.body), []
        if self.waiter is not None and not self.waiter.done():
            if self.parser.get_status_code() != 200:
                self.waiter.set_exception(RuntimeError(f"status {self.parser.get_status_code()}"))
            else:
                self.waiter.set_result(body)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(ConnectionError("closed"))


class _RawPool:
    def __init__(self, host: str, port: int, size: int) -> None:
        self.host, self.port = host, port
        self.idle: list[_RawConnection] = []
        self.head = (f"POST {PATH} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
                     f"Accept: application/json\r\nContent-Length: %d\r\nX-Request-Id: ").encode()

    async def post(self, body: bytes, request_id: str) -> bytes:
        loop = asyncio.get_running_loop()
        if self.idle:
            connection = self.idle.pop()
        else:
            _, connection = await loop.create_connection(_RawConnection, self.host, self.port)
        connection.waiter = waiter = loop.create_future()
        assert connection.transport is not None
        connection.transport.write(self.head % len(body) + request_id.encode() + b"\r\n\r\n" + body)
        answer = await waiter
        connection.waiter = None
        self.idle.append(connection)
        return answer

    async def close(self) -> None:
        for connection in self.idle:
            if connection.transport is not None:
                connection.transport.close()


def _run_client(arm: str, port: int, duration_s: float) -> None:
    import uvloop

    print(orjson.dumps(uvloop.run(_client_run(arm, port, duration_s))).decode())


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_server":
        _run_server(sys.argv[2], int(sys.argv[3]))
    elif len(sys.argv) > 1 and sys.argv[1] == "_client":
        _run_client(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
    else:
        sys.exit(main())
