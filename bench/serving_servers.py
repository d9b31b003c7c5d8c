"""The servers ``bench/serving.py`` measures: rxpipe's gateway and the bare aiohttp baselines.

    rxpipe run bench/serving_servers.py --port 8100 --set mode=admit        # rxpipe, zero-cost engine
    python bench/serving_servers.py bare --port 8101                        # the bare aiohttp handlers
    python bench/serving_servers.py backend --port 8102                     # the mock backend (proxy rows, peers.py)

rxpipe modes (``--set mode=...``; every other key is one of ``pipelines/llm_gateway.py``):
    admit    ``pipelines/llm_gateway.py``'s graph on a zero-cost SimulatedEngine (no step, prefill
             or decode time) that always generates exactly ``max_tokens`` tokens: every request is
             admitted and answered as fast as the process can
    reject   the same graph with one engine slot and a queue of one, both held by two requests that
             the benchmark sends first and never finishes (4,096 tokens each on a 1 s step):
             every other request is refused with 429 ``queue_full``
    paced    ``admit``'s graph on an engine whose every step takes 20 ms (256 slots): each
             sequence makes 50 tokens/s, so 256 streams should get 12,800 tokens/s
    proxy    the gateway in front of ``OpenAIEngine(backend_url, max_in_flight=256)`` through
             ``buffer(queue_capacity)``: a proxy to a real OpenAI-compatible server

The bare baselines (``bare``) are what a competent aiohttp user would write for the same answers,
on the same loop (uvloop): parse the JSON body with orjson, build the same OpenAI JSON with orjson
per request (200), answer 429 with ``Retry-After``/``retry-after-ms`` and an OpenAI error body
without reading the body, stream the same SSE chunks with one ``write`` per token, and proxy with
one shared ``aiohttp.ClientSession``. ``backend`` is a minimal OpenAI-compatible completion server
(JSON and SSE, answered at once) that the two proxies share, and ``bench/peers.py``'s mock backend.
"""

from __future__ import annotations

import argparse
import importlib.util
import secrets
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson
from aiohttp import ClientSession, ClientTimeout, TCPConnector, web

_GATEWAY_FILE = Path(__file__).resolve().parents[1] / "pipelines" / "llm_gateway.py"
_WORD = "tok "  # every simulated token is one short word, on both sides
_STREAM_WORD = "tik "  # backend_app's streams alternate the two


def _llm_gateway() -> ModuleType:
    spec = importlib.util.spec_from_file_location("rxpipe_bench_serving_llm_gateway", _GATEWAY_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pipeline(config: dict[str, Any]) -> Any:
    """rxpipe's side, for ``rxpipe run``: mode ``admit``, ``reject`` or ``proxy`` (module docstring)."""
    from rxpipe import operators as ops
    from rxpipe.engines import OpenAIEngine, SimulatedEngine

    config = dict(config)
    mode = config.pop("mode", "admit")
    backend_url = config.pop("backend_url", None)
    gateway_file = _llm_gateway()
    if mode == "reject":
        config.update(queue_capacity=1, max_num_seqs=1, batch_max_size=1)
    s = gateway_file.settings(config)
    if mode == "proxy":
        if not backend_url:
            raise ValueError("mode=proxy needs --set backend_url=http://HOST:PORT/v1")
        engine = OpenAIEngine(backend_url, model=s["model"], max_in_flight=256)
        return gateway_file.build(s, engine, queue=ops.buffer(s["queue_capacity"], name="queue"))
    step = {"reject": 1.0, "paced": 0.02}.get(mode, 0.0)
    engine = SimulatedEngine(max_num_seqs=s["max_num_seqs"], max_num_batched_tokens=s["max_num_batched_tokens"],
                             step_overhead_s=step, prefill_s_per_token=0.0, decode_s_per_seq=0.0,
                             stall_timeout_s=None, model=s["model"])
    return gateway_file.build(s, engine)


def _completion(model: str, prompt_tokens: int, tokens: int, *, chat: bool) -> bytes:
    text = _WORD * tokens
    if chat:
        choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text},
                                  "logprobs": None, "finish_reason": "length"}
    else:
        choice = {"text": text, "index": 0, "logprobs": None, "finish_reason": "length"}
    return orjson.dumps({"id": "cmpl-" + secrets.token_hex(12), "object": "chat.completion" if chat else
                         "text_completion", "created": int(time.time()), "model": model, "choices": [choice],
                         "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": tokens,
                                   "total_tokens": prompt_tokens + tokens}})


def _prompt_tokens(body: dict[str, Any]) -> int:
    prompt = body.get("prompt")
    if prompt is None:
        prompt = "".join(str(m.get("content", "")) for m in body.get("messages", ()))
    return max(1, len(str(prompt).encode()) // 4)


def bare_app() -> web.Application:
    """The bare handlers: 200 JSON at ``/v1/*``, 429 at ``/reject/v1/*``, SSE when ``stream``."""

    async def complete(request: web.Request) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        chat = request.path.endswith("/chat/completions")
        tokens = int(body.get("max_tokens") or 16)
        model = body.get("model", "sim")
        if not body.get("stream"):
            return web.Response(body=_completion(model, _prompt_tokens(body), tokens, chat=chat),
                                content_type="application/json")
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        ident, created = "chatcmpl-" + secrets.token_hex(12), int(time.time())
        kind = "chat.completion.chunk" if chat else "text_completion"
        for i in range(tokens):
            finish = "length" if i == tokens - 1 else None
            choice: dict[str, Any] = ({"index": 0, "delta": {"content": _WORD}, "logprobs": None,
                                       "finish_reason": finish} if chat else
                                      {"text": _WORD, "index": 0, "logprobs": None, "finish_reason": finish})
            await response.write(b"data: " + orjson.dumps({"id": ident, "object": kind, "created": created,
                                                           "model": model, "choices": [choice]}) + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def reject(request: web.Request) -> web.Response:
        return web.Response(status=429, content_type="application/json",
                            headers={"Retry-After": "1", "retry-after-ms": "1000"},
                            body=orjson.dumps({"error": {"message": "the queue is full", "type": "rate_limit_error",
                                                         "code": "queue_full", "param": None}}))

    app = web.Application()
    for path in ("/v1/completions", "/v1/chat/completions"):
        app.router.add_post(path, complete)
        app.router.add_post("/reject" + path, reject)
    return app


def proxy_app(backend_url: str) -> web.Application:
    """The bare proxy: forward the body to ``backend_url`` over one shared ClientSession."""
    app = web.Application()

    async def session_ctx(app: web.Application) -> Any:
        app["session"] = ClientSession(connector=TCPConnector(limit=256), timeout=ClientTimeout(total=600))
        yield
        await app["session"].close()

    async def forward(request: web.Request) -> web.Response:
        body = await request.read()
        orjson.loads(body)  # a proxy validates what it forwards
        async with app["session"].post(backend_url.rstrip("/") + request.path.removeprefix("/v1"), data=body,
                                       headers={"Content-Type": "application/json"}) as upstream:
            return web.Response(status=upstream.status, body=await upstream.read(), content_type="application/json")

    app.cleanup_ctx.append(session_ctx)
    app.router.add_post("/v1/completions", forward)
    app.router.add_post("/v1/chat/completions", forward)
    return app


def backend_app() -> web.Application:
    """A fast OpenAI-compatible backend (the proxy rows' and ``bench/peers.py``'s mock): answers
    every completion at once with exactly ``max_tokens`` tokens of ``"tok "``, as one JSON body
    with ``usage``, or, with ``"stream": true``, as one SSE chunk per token, ``"tok "`` and
    ``"tik "`` in turn (the LiteLLM proxy ends a stream whose last 100 chunks are all the same text
    as a model stuck in a loop), the last one with ``finish_reason``, a usage chunk when
    ``stream_options.include_usage`` (as vLLM and SGLang), then ``data: [DONE]``. A stream's
    chunks are encoded once and written as they are: the mock spends as little as it can, so the
    gateway in front of it is what is measured. ``GET /health``, ``/health_generate`` and
    ``/v1/models`` answer the routers' health checks and discovery."""

    async def complete(request: web.Request) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        chat = request.path.endswith("/chat/completions")
        model, tokens = body.get("model", "sim"), int(body.get("max_tokens") or 16)
        if not body.get("stream"):
            return web.Response(body=_completion(model, _prompt_tokens(body), tokens, chat=chat),
                                content_type="application/json")
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        head = {"id": "chatcmpl-" + secrets.token_hex(12), "object": "chat.completion.chunk" if chat else
                "text_completion", "created": int(time.time()), "model": model}
        chunks = []
        for word, finish in ((_WORD, None), (_STREAM_WORD, None), (_WORD, "length")):
            choice: dict[str, Any] = ({"index": 0, "delta": {"content": word}, "logprobs": None,
                                       "finish_reason": finish} if chat else
                                      {"text": word, "index": 0, "logprobs": None, "finish_reason": finish})
            chunks.append(b"data: " + orjson.dumps({**head, "choices": [choice]}) + b"\n\n")
        for i in range(tokens):
            await response.write(chunks[2] if i == tokens - 1 else chunks[i % 2])
        if (body.get("stream_options") or {}).get("include_usage"):
            prompt = _prompt_tokens(body)
            usage = {"prompt_tokens": prompt, "completion_tokens": tokens, "total_tokens": prompt + tokens}
            await response.write(b"data: " + orjson.dumps({**head, "choices": [], "usage": usage}) + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def models(request: web.Request) -> web.Response:
        return web.Response(body=orjson.dumps({"object": "list", "data": [
            {"id": "sim", "object": "model", "created": 0, "owned_by": "bench"}]}), content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/completions", complete)
    app.router.add_post("/v1/chat/completions", complete)
    app.router.add_get("/health", health)
    app.router.add_get("/health_generate", health)
    app.router.add_get("/v1/models", models)
    return app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=("bare", "proxy", "backend"))
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--backend-url", default=None, help="for kind=proxy: http://HOST:PORT/v1")
    args = parser.parse_args(argv)
    import uvloop

    if args.kind == "bare":
        app = bare_app()
    elif args.kind == "proxy":
        if not args.backend_url:
            parser.error("proxy needs --backend-url")
        app = proxy_app(args.backend_url)
    else:
        app = backend_app()
    web.run_app(app, host="127.0.0.1", port=args.port, access_log=None, print=None, loop=uvloop.new_event_loop())


if __name__ == "__main__":
    sys.exit(main())
