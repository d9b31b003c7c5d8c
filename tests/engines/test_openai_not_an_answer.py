"""``OpenAIEngine`` against a 200 that is not an OpenAI answer (e.g. a base URL pointing at a web
server or a proxy's HTML page): the request fails, it never passes for an empty completion."""

from __future__ import annotations

import contextlib
from typing import AsyncIterator

import pytest
from aiohttp import web

from rxpipe.engines import CompletionRequest, EngineError, OpenAIEngine

pytestmark = pytest.mark.loops("asyncio")


@contextlib.asynccontextmanager
async def html_server() -> AsyncIterator[str]:
    async def page(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(text="<html><body>Welcome to nginx!</body></html>", content_type="text/html")

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


async def test_a_200_without_a_single_event_fails_the_request() -> None:
    async with html_server() as url:
        engine = OpenAIEngine(url, "m", 2)
        try:
            for request in (CompletionRequest(prompt="x", max_tokens=3),
                            CompletionRequest(messages=[{"role": "user", "content": "x"}], max_tokens=3)):
                with pytest.raises(EngineError, match="not an OpenAI answer: a text/html body without one SSE event"):
                    await engine.submit(request).result
        finally:
            await engine.aclose()
