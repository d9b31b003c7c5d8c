"""Helpers of the OpenAIEngine tests (the stub server's fixtures are in ``openai_stub_fixtures.py``)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from rxpipe import UNBOUNDED
from rxpipe.engines import Completion, CompletionRequest, OpenAIEngine, TokenChunk
from rxpipe.engines.openai import wire_request_id
from rxpipe.testing import TestSubscriber

from .openai_stub_server import StubServer


def make(server: StubServer, max_in_flight: int = 4, **kwargs: Any) -> OpenAIEngine:
    kwargs.setdefault("retry_after_jitter", 0.0)
    return OpenAIEngine(server.url, "stub-model", max_in_flight, **kwargs)


async def wait_for(predicate: Any, timeout_s: float = 3.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


def submit(e: OpenAIEngine, request: CompletionRequest) -> Completion:
    """Submit; a streamed request's tokens get a consumer with unbounded credit (as a fast client)."""
    completion = e.submit(request)
    if request.stream:
        completion.tokens.subscribe(TestSubscriber[TokenChunk](initial_request=UNBOUNDED))
    return completion


async def disconnect_of(server: StubServer, request_id: str, timeout_s: float = 2.0) -> dict[str, Any]:
    """The server's record of ``request_id``'s disconnect (its ``t`` is the server's time.monotonic())."""
    deadline = time.monotonic() + timeout_s
    while True:
        for record in server.state()["disconnects"]:
            if record["id"] == wire_request_id(request_id):
                return record
        if time.monotonic() > deadline:
            raise AssertionError(f"the server never saw {request_id} disconnect")
        await asyncio.sleep(0.01)
