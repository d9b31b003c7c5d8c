"""``OpenAIEngine`` against a 200 that is not an OpenAI answer (e.g. a base URL pointing at a web
server or a proxy's HTML page, a truncated or malformed body, an error object): the request fails,
it never passes for an empty completion; streamed (SSE) or not (one JSON body) alike."""

from __future__ import annotations

import contextlib
from typing import AsyncIterator

import pytest
from aiohttp import web

from rxpipe import UNBOUNDED
from rxpipe.engines import CompletionRequest, EngineError, OpenAIEngine, TokenChunk
from rxpipe.testing import TestSubscriber

pytestmark = pytest.mark.loops("asyncio")

#: what each path of the server answers with a 200
ANSWERS = {
    "html": ("text/html", "<html><body>Welcome to nginx!</body></html>"),
    "malformed": ("application/json", '{"choices": [{"text": "cut'),
    "no-choices": ("application/json", '{"id": "x", "object": "text_completion"}'),
    "error": ("application/json", '{"error": {"message": "model overloaded", "type": "server_error"}}'),
    "sse-malformed": ("text/event-stream", 'data: {"choices": [{"text": "cut\n\n'),
    "sse-error": ("text/event-stream", 'data: {"error": {"message": "model overloaded"}}\n\n'),
}


@contextlib.asynccontextmanager
async def answering_server(kind: str) -> AsyncIterator[str]:
    content_type, text = ANSWERS[kind]

    async def page(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(text=text, content_type=content_type)

    app = web.Application()
    app.router.add_post("/v1/completions", page)
    app.router.add_post("/v1/chat/completions", page)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        await runner.cleanup()


@pytest.mark.parametrize(("stream", "kind", "match"), [
    (False, "html", "not an OpenAI answer: a text/html body that is not JSON"),
    (True, "html", "not an OpenAI answer: a text/html body without one SSE event"),
    (False, "malformed", "not an OpenAI answer: a application/json body that is not JSON"),
    (True, "malformed", "not an OpenAI answer: a application/json body that is not JSON"),  # JSON despite stream
    (False, "no-choices", "not an OpenAI answer: a application/json body without choices"),
    (False, "error", "the server reported an error: model overloaded"),
    (True, "error", "the server reported an error: model overloaded"),
    (False, "sse-malformed", "JSONDecodeError"),  # SSE despite "stream": false
    (True, "sse-malformed", "JSONDecodeError"),
    (False, "sse-error", "the server reported an error: model overloaded"),
    (True, "sse-error", "the server reported an error: model overloaded"),
])
async def test_a_200_that_is_not_an_answer_fails_the_request(stream: bool, kind: str, match: str) -> None:
    async with answering_server(kind) as url:
        engine = OpenAIEngine(url, "m", 2)
        try:
            for request in (CompletionRequest(prompt="x", max_tokens=3, stream=stream),
                            CompletionRequest(messages=[{"role": "user", "content": "x"}], max_tokens=3,
                                              stream=stream)):
                completion = engine.submit(request)
                completion.tokens.subscribe(TestSubscriber[TokenChunk](initial_request=UNBOUNDED))
                with pytest.raises(EngineError, match=match):
                    await completion.result
            assert engine.breaker.consecutive_failures == 2  # a malformed answer counts, as a broken stream
        finally:
            await engine.aclose()
