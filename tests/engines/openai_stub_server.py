"""A real OpenAI-compatible HTTP server (aiohttp) for OpenAIEngine tests, run in a subprocess.

    python tests/engines/openai_stub_server.py --port 0 --port-file /tmp/port [--throttle 2 ...]

``POST /v1/completions`` and ``POST /v1/chat/completions`` answer ``"stream": true`` with SSE
(``data: {...}`` chunks, a final chunk with ``finish_reason``, a usage chunk when
``stream_options.include_usage`` unless ``stream_usage`` is 0, then ``data: [DONE]``) and any other
request with one JSON body (with ``usage`` unless ``json_usage`` is 0); ``plain`` answers JSON and ``always_sse`` SSE
whatever was asked. The delays, ``token_bytes``, ``empty_every`` and ``cut_after`` apply to both
(a cut JSON body is half its bytes, then the connection closed). It counts concurrent requests,
answers ``throttle_status`` (429) with ``Retry-After`` to the first ``throttle`` requests and to
any above ``capacity`` in flight, fails the next ``fail`` requests with ``fail_status``, and
records every client disconnect (handler cancellation: the time the server saw the connection go,
on ``time.monotonic()``, which is system-wide on Linux so tests in another process can compare it
with their own).

Beyond plain text (``openai_stub_answers``): a request with ``tools`` is answered with tool calls
(streamed as index-keyed fragments), one whose last message is a tool result with text about it,
``[reason]`` and ``[refuse]`` in a user message give reasoning deltas and a refusal, ``logprobs``
give log probabilities with ``top_logprobs``; those answers carry ``system_fingerprint``.
``POST /v1/embeddings`` answers a vector per input (``dimensions``, ``encoding_format``);
``POST /v1/responses`` a Response object, or its events (``event:`` and ``data:``) when streamed;
``GET /v1/models`` the model ``stub``.

Control: ``GET /control`` returns the counters; ``POST /control`` with a JSON object sets options
(``reset: true`` clears the counters first). :class:`StubServer` runs it for tests, its output
going to a file (never an unread pipe).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

try:  # run as a script (the stub's process) or imported (StubServer, in tests)
    from . import openai_stub_answers as answers
except ImportError:
    import openai_stub_answers as answers  # type: ignore[no-redef]

DEFAULTS: dict[str, Any] = {
    "throttle": 0,            # the next N requests get throttle_status
    "throttle_status": 429,
    "retry_after": "1",       # Retry-After header value of throttled answers (None: omitted)
    "fail": 0,                # the next N requests (after throttling) get fail_status
    "fail_status": 500,
    "fail_message": "stub failure",  # error.message of a failed answer
    "fail_code": None,        # error.code of a failed answer
    "tokens": 4,              # output tokens when the request has no max_tokens
    "token_delay_s": 0.0,     # seconds before each token
    "token_bytes": 0,         # pad each token's text to this many bytes (backpressure tests)
    "first_delay_s": 0.0,     # seconds before the response headers
    "plain": 0,               # 1: answer one JSON body (a server that ignores "stream": true)
    "always_sse": 0,          # 1: answer SSE (a server that ignores "stream": false)
    "json_usage": 1,          # 0: a JSON answer without "usage"
    "stream_usage": 1,        # 0: a stream without usage even when asked (llama-cpp-python's server)
    "cut_after": -1,          # >= 0: abort the connection after this many tokens (a crash mid-stream)
    "capacity": 0,            # > 0: answer throttle_status (with retry_after) above this many in flight
    "base_delay_s": 0.0,      # seconds after the response headers, before the first token
    "empty_every": 0,         # > 0: every N-th streamed token has empty text (llama.cpp's split characters)
}


class State:
    def __init__(self, options: dict[str, Any]) -> None:
        self.options = dict(DEFAULTS)
        self.options.update(options)
        self.reset()

    def reset(self) -> None:
        self.in_flight = 0
        self.max_in_flight = 0
        self.requests = 0
        self.completed = 0
        self.statuses: dict[str, int] = {}
        self.arrivals: list[dict[str, Any]] = []
        self.disconnects: list[dict[str, Any]] = []
        self.bodies: list[dict[str, Any]] = []
        self.written: dict[str, int] = {}

    def snapshot(self) -> dict[str, Any]:
        return {"in_flight": self.in_flight, "max_in_flight": self.max_in_flight, "requests": self.requests,
                "completed": self.completed, "statuses": self.statuses, "arrivals": self.arrivals,
                "disconnects": self.disconnects, "bodies": self.bodies, "written": self.written,
                "options": self.options, "now": time.monotonic()}


def make_app(state: State) -> Any:
    from aiohttp import web

    def count(status: int) -> None:
        state.statuses[str(status)] = state.statuses.get(str(status), 0) + 1

    async def control_get(request: web.Request) -> web.Response:
        return web.json_response(state.snapshot())

    async def control_post(request: web.Request) -> web.Response:
        data = await request.json()
        if data.pop("reset", False):
            state.reset()
        unknown = set(data) - set(DEFAULTS)
        if unknown:
            return web.json_response({"error": f"unknown options {sorted(unknown)}"}, status=400)
        state.options.update(data)
        return web.json_response(state.snapshot())

    async def complete(request: web.Request, chat: bool) -> web.StreamResponse:
        opts = state.options
        rid = request.headers.get("X-Request-Id", f"anon-{state.requests}")
        state.requests += 1
        state.in_flight += 1
        state.max_in_flight = max(state.max_in_flight, state.in_flight)
        state.arrivals.append({"id": rid, "t": time.monotonic()})
        written = 0
        try:
            body = await request.json()
            state.bodies.append({"path": request.path, "id": rid, "body": body,
                                 "authorization": request.headers.get("Authorization")})
            over = 0 < int(opts["capacity"]) < state.in_flight
            if opts["throttle"] > 0 or over:
                if not over:
                    opts["throttle"] -= 1
                status = int(opts["throttle_status"])
                count(status)
                headers = {} if opts["retry_after"] is None else {"Retry-After": str(opts["retry_after"])}
                return web.json_response({"error": {"message": "slow down", "type": "rate_limit_error"}},
                                         status=status, headers=headers)
            if opts["fail"] > 0:
                opts["fail"] -= 1
                status = int(opts["fail_status"])
                count(status)
                error = {"message": opts["fail_message"], "type": "server_error", "code": opts["fail_code"]}
                return web.json_response({"error": error}, status=status)
            if opts["first_delay_s"]:
                await asyncio.sleep(opts["first_delay_s"])
            limit = body.get("max_tokens") or body.get("max_completion_tokens")
            n = limit or opts["tokens"]
            count(200)
            pad = int(opts["token_bytes"])
            finish = "length" if limit else "stop"

            def token(i: int) -> str:
                text = f" t{i}"
                if opts["empty_every"] and (i + 1) % int(opts["empty_every"]) == 0:
                    text = ""
                return text + "." * (pad - len(text)) if pad > len(text) else text

            rich = answers.plan(body, chat, [token(i) for i in range(n)])
            if rich is not None:
                state.completed += 1
                return await rich_answer(request, body, chat, rich, rid)

            if opts["plain"] or not (body.get("stream") or opts["always_sse"]):
                if opts["base_delay_s"]:
                    await asyncio.sleep(opts["base_delay_s"])
                parts = []
                for i in range(n):
                    if opts["token_delay_s"]:
                        await asyncio.sleep(opts["token_delay_s"])
                    parts.append(token(i))
                text = "".join(parts)
                choice = ({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}
                          if chat else {"index": 0, "text": text, "finish_reason": finish})
                answer: dict[str, Any] = {"id": rid, "object": "chat.completion" if chat else "text_completion",
                                          "model": body.get("model", "stub"), "choices": [choice]}
                if opts["json_usage"]:
                    answer["usage"] = {"prompt_tokens": 3, "completion_tokens": n, "total_tokens": 3 + n}
                payload = json.dumps(answer).encode()
                if opts["cut_after"] >= 0 and request.transport is not None:
                    cut = web.StreamResponse(status=200, headers={"Content-Type": "application/json",
                                                                  "Content-Length": str(len(payload))})
                    await cut.prepare(request)
                    await cut.write(payload[:len(payload) // 2])
                    request.transport.close()  # after the half written (abort would drop it)
                    return cut
                state.completed += 1
                return web.Response(body=payload, content_type="application/json")
            response = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream",
                                                                "Cache-Control": "no-cache"})
            await response.prepare(request)
            model = body.get("model", "stub")

            def chunk(text: str | None, finish: str | None = None) -> bytes:
                if chat:
                    delta = {} if text is None else {"content": text}
                    choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
                    kind = "chat.completion.chunk"
                else:
                    choice = {"index": 0, "text": text or "", "finish_reason": finish}
                    kind = "text_completion"
                payload = {"id": rid, "object": kind, "model": model, "choices": [choice]}
                return b"data: " + json.dumps(payload).encode() + b"\n\n"

            if opts["base_delay_s"]:
                await asyncio.sleep(opts["base_delay_s"])
            if chat:
                await response.write(b"data: " + json.dumps({"id": rid, "object": "chat.completion.chunk",
                                                             "choices": [{"index": 0, "delta": {"role": "assistant"},
                                                                          "finish_reason": None}]}).encode() + b"\n\n")
            for i in range(n):
                if i == opts["cut_after"] and request.transport is not None:
                    request.transport.abort()
                    return response
                if opts["token_delay_s"]:
                    await asyncio.sleep(opts["token_delay_s"])
                await response.write(chunk(token(i)))
                written += 1
                state.written[rid] = written
            await response.write(chunk(None if chat else "", finish))
            if (body.get("stream_options") or {}).get("include_usage") and opts["stream_usage"]:
                usage = {"prompt_tokens": 3, "completion_tokens": n, "total_tokens": 3 + n}
                await response.write(b"data: " + json.dumps({"id": rid, "choices": [], "usage": usage}).encode()
                                     + b"\n\n")
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
            state.completed += 1
            return response
        except (asyncio.CancelledError, ConnectionResetError, ConnectionError):
            state.disconnects.append({"id": rid, "t": time.monotonic(), "written": state.written.get(rid, written)})
            raise
        finally:
            state.in_flight -= 1

    async def rich_answer(request: web.Request, body: dict[str, Any], chat: bool, rich: Any,
                          rid: str) -> web.StreamResponse:
        opts = state.options
        model = body.get("model", "stub")
        kind = "chat.completion.chunk" if chat else "text_completion"
        tokens = len(rich.chunks)
        usage = {"prompt_tokens": 3, "completion_tokens": tokens, "total_tokens": 3 + tokens,
                 "completion_tokens_details": {"reasoning_tokens": 0}}
        if opts["plain"] or not (body.get("stream") or opts["always_sse"]):
            if chat:
                choice: dict[str, Any] = {"index": 0, "message": rich.message, "logprobs": rich.logprobs,
                                          "finish_reason": rich.finish}
            else:
                choice = {"index": 0, "text": rich.message["content"], "logprobs": rich.logprobs,
                          "finish_reason": rich.finish}
            answer = {"id": rid, "object": "chat.completion" if chat else "text_completion", "created": 1,
                      "model": model, "system_fingerprint": answers.FINGERPRINT, "choices": [choice]}
            if opts["json_usage"]:
                answer["usage"] = usage
            return web.json_response(answer)
        response = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)

        async def send(choice: dict[str, Any], **extra: Any) -> None:
            event = {"id": rid, "object": kind, "created": 1, "model": model,
                     "system_fingerprint": answers.FINGERPRINT, "choices": [choice] if choice else [], **extra}
            await response.write(b"data: " + json.dumps(event).encode() + b"\n\n")

        if chat:
            await send({"index": 0, "delta": {"role": "assistant", "content": None}, "logprobs": None,
                        "finish_reason": None})
        for i, (piece, logprobs) in enumerate(rich.chunks):
            if i == opts["cut_after"] and request.transport is not None:
                request.transport.abort()
                return response
            if opts["token_delay_s"]:
                await asyncio.sleep(opts["token_delay_s"])
            if chat:
                await send({"index": 0, "delta": piece, "logprobs": logprobs, "finish_reason": None})
            else:
                await send({"index": 0, "text": piece, "logprobs": logprobs, "finish_reason": None})
            state.written[rid] = i + 1
        await send({"index": 0, "delta": {}, "logprobs": None, "finish_reason": rich.finish} if chat else
                   {"index": 0, "text": "", "logprobs": None, "finish_reason": rich.finish})
        if (body.get("stream_options") or {}).get("include_usage") and opts["stream_usage"]:
            await send({}, usage=usage)
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def embeddings(request: web.Request) -> web.Response:
        state.requests += 1
        body = await request.json()
        state.bodies.append({"path": request.path, "id": request.headers.get("X-Request-Id"), "body": body,
                             "authorization": request.headers.get("Authorization")})
        if state.options["fail"] > 0:
            state.options["fail"] -= 1
            return web.json_response({"error": {"message": state.options["fail_message"], "type": "server_error"}},
                                     status=int(state.options["fail_status"]))
        state.completed += 1
        return web.json_response(answers.embeddings_answer(body))

    async def responses(request: web.Request) -> web.StreamResponse:
        state.requests += 1
        body = await request.json()
        state.bodies.append({"path": request.path, "id": request.headers.get("X-Request-Id"), "body": body,
                             "authorization": request.headers.get("Authorization")})
        n = body.get("max_output_tokens") or state.options["tokens"]
        words = [f" w{i}" for i in range(n)]
        if not body.get("stream"):
            state.completed += 1
            return web.json_response(answers.response_object(body, words))
        response = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for i, event in enumerate(answers.response_events(body, words)):
            if i == state.options["cut_after"] and request.transport is not None:
                request.transport.abort()
                return response
            if state.options["token_delay_s"]:
                await asyncio.sleep(state.options["token_delay_s"])
            await response.write(f"event: {event['type']}\n".encode() + b"data: " + json.dumps(event).encode()
                                 + b"\n\n")
        await response.write_eof()
        state.completed += 1
        return response

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "stub", "object": "model", "created": 0,
                                                              "owned_by": "stub"}]})

    async def completions(request: web.Request) -> web.StreamResponse:
        return await complete(request, chat=False)

    async def chat_completions(request: web.Request) -> web.StreamResponse:
        return await complete(request, chat=True)

    app = web.Application()
    app.router.add_get("/control", control_get)
    app.router.add_post("/control", control_post)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_post("/v1/embeddings", embeddings)
    app.router.add_post("/v1/responses", responses)
    app.router.add_get("/v1/models", models)
    return app


async def serve(host: str, port: int, port_file: str | None, state: State) -> None:
    from aiohttp import web

    runner = web.AppRunner(make_app(state), handler_cancellation=True, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True)
    await site.start()
    bound = runner.addresses[0][1]
    if port_file:
        tmp = port_file + ".tmp"
        Path(tmp).write_text(str(bound))
        os.replace(tmp, port_file)  # atomic: the reader never sees a half-written port
    print(f"stub serving on http://{host}:{bound}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await runner.cleanup()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--port-file")
    for key, value in DEFAULTS.items():
        kind = str if value is None or isinstance(value, str) else type(value)
        parser.add_argument("--" + key.replace("_", "-"), dest=key, type=kind, default=value)
    args = vars(parser.parse_args(argv))
    host, port, port_file = args.pop("host"), args.pop("port"), args.pop("port_file")
    asyncio.run(serve(host, port, port_file, State(args)))


class StubServer:
    """The stub in a subprocess; output to ``<tmp_path>/stub-<n>.log``. Sync helpers (urllib)."""

    def __init__(self, tmp_path: Path, *args: str) -> None:
        self.tmp_path = tmp_path
        self.args = args
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self._starts = 0
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 15.0) -> None:
        """Start (again, on the same port once it has one)."""
        assert self.proc is None, "already running"
        self._starts += 1
        port_file = self.tmp_path / f"stub-{self._starts}.port"
        self.log_path = self.tmp_path / f"stub-{self._starts}.log"
        port_file.unlink(missing_ok=True)
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, __file__, "--port", str(self.port), "--port-file", str(port_file), *self.args],
                stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while not port_file.exists():
            if self.proc.poll() is not None:
                raise AssertionError(f"stub exited with {self.proc.returncode}: {self.log_path.read_text()}")
            if time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"stub did not start within {timeout_s} s")
            time.sleep(0.02)
        self.port = int(port_file.read_text())

    def stop(self) -> None:
        """SIGKILL: the server dies at once (connections refused afterwards)."""
        proc = self.proc
        if proc is None:
            return
        self.proc = None
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)

    def state(self) -> dict[str, Any]:
        with urllib.request.urlopen(self.url + "/control", timeout=5) as response:
            return json.loads(response.read())

    def control(self, **options: Any) -> dict[str, Any]:
        request = urllib.request.Request(self.url + "/control", data=json.dumps(options).encode(),
                                         headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(request, timeout=5) as response:
            return json.loads(response.read())


if __name__ == "__main__":
    main()
