"""A user's own engine (``echo_engine.EchoEngine``), written with public names only, behind
``ops.execute`` on virtual time and behind the gateway over HTTP (DESIGN §4)."""

from __future__ import annotations

import asyncio
import io
import tokenize
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from rxpipe import operators as ops
from rxpipe.engines import Completion, CompletionRequest, CompletionResult, Engine, EngineUnavailableError, TokenChunk
from rxpipe.gateway import Gateway
from rxpipe.runtime import Pipeline
from rxpipe.testing import TestPublisher, TestSubscriber

from . import echo_engine
from .echo_engine import EchoEngine


def wire(engine: Engine) -> tuple[TestPublisher[Any], TestSubscriber[Completion]]:
    pub = TestPublisher[Any]()
    out = TestSubscriber[Completion](initial_request=100)
    pub.pipe(ops.execute(engine)).subscribe(out)
    return pub, out


def test_the_engine_is_written_with_public_names_only() -> None:
    source = Path(echo_engine.__file__).read_text()
    names = {token.string for token in tokenize.generate_tokens(io.StringIO(source).readline)
             if token.type == tokenize.NAME}
    private = sorted(name for name in names if name.startswith("_")
                     and not (name.startswith("__") and name.endswith("__")))
    assert private == []
    assert EchoEngine.submit is Engine.submit  # admission is the base class's template


@pytest.mark.virtual
async def test_behind_execute_the_free_slots_are_the_demand_and_every_time_is_exact(
        loop: asyncio.AbstractEventLoop) -> None:
    engine = EchoEngine(max_num_seqs=2, token_s=0.25)
    pub, out = wire(engine)
    assert pub.requests == [2]
    first = CompletionRequest(prompt="a b c")
    second = CompletionRequest(prompt="d e f g", max_tokens=2)
    pub.emit(first, second)
    assert (engine.running, engine.free_slots, pub.requests) == (2, 0, [2])
    assert [c.request for c in out.values] == [first, second] and first.arrival_s == 0.0
    assert engine.loop is loop

    assert await second.completion.result == CompletionResult(" d e", "length", 2, 2, 0.0, 0.25, 0.5)  # type: ignore[union-attr]
    assert loop.time() == 0.5 and pub.requests == [2, 1]  # its slot went back upstream at once
    third = CompletionRequest(prompt="h")
    pub.emit(third)
    assert await first.completion.result == CompletionResult(" a b c", "stop", 2, 3, 0.0, 0.25, 0.75)  # type: ignore[union-attr]
    assert await third.completion.result == CompletionResult(" h", "stop", 1, 1, 0.0, 0.25, 0.25)  # type: ignore[union-attr]
    assert loop.time() == 0.75 and pub.requests == [2, 1, 1, 1] and engine.running == 0
    pub.complete()
    assert out.completed and len(out.values) == 3
    await engine.aclose()


@pytest.mark.virtual
async def test_a_streamed_request_waits_for_credit_and_cancel_frees_the_slot_at_once(
        loop: asyncio.AbstractEventLoop) -> None:
    engine = EchoEngine(max_num_seqs=1, token_s=0.25)
    pub, out = wire(engine)
    streamed = CompletionRequest(prompt="a b c", stream=True)
    pub.emit(streamed)
    completion = out.values[0]
    tokens = TestSubscriber[TokenChunk](initial_request=1)
    completion.tokens.subscribe(tokens)
    await asyncio.sleep(1.0)  # one token, then no credit: parked, still holding its slot
    assert tokens.values == [TokenChunk(0, " a", 1)] and engine.running == 1 and pub.requests == [1]
    tokens.request(2)  # credit_granted: the next token a token_s later
    result = await completion.result
    assert result == CompletionResult(" a b c", "stop", 2, 3, 0.0, 0.25, 1.5)
    assert tokens.values[1:] == [TokenChunk(1, " b", 1), TokenChunk(2, " c", 1)] and tokens.completed
    assert pub.requests == [1, 1]

    plain = CompletionRequest(prompt="w x y z")
    pub.emit(plain)
    await asyncio.sleep(0.375)
    out.values[1].cancel()  # cancel_completion: finished now, the slot goes back upstream now
    assert pub.requests == [1, 1, 1] and engine.running == 0
    assert out.values[1].outcome == CompletionResult(" w", "cancelled", 2, 1, 0.0, 0.25, 0.375)
    await engine.aclose()


@pytest.mark.virtual
async def test_the_template_admits_for_it_refuses_for_it_and_answers_cancelled_and_expired_requests() -> None:
    engine = EchoEngine(max_num_seqs=2)
    chat = CompletionRequest(messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(ValueError, match="answers prompts"):
        engine.submit(chat)  # prepare refused it: untouched, it may go elsewhere
    assert chat.completion is None and chat.arrival_s is None and engine.loop is None
    gone = CompletionRequest(prompt="a b")
    gone.cancel()
    expired = CompletionRequest(prompt="a b", arrival_s=-1.0, deadline_s=-0.5)
    assert engine.submit(gone).outcome == CompletionResult("", "cancelled", 1, 0, 0.0, None, 0.0)
    assert engine.submit(expired).outcome == CompletionResult("", "deadline", 1, 0, 1.0, None, 1.0)
    assert engine.running == 0 and engine.free_slots == 2  # neither reached start()
    await engine.aclose()
    with pytest.raises(EngineUnavailableError, match="^engine 'echo' is closed$"):
        engine.submit(CompletionRequest(prompt="late"))


async def post(url: str, body: dict[str, Any]) -> tuple[int, bytes]:
    async with aiohttp.ClientSession() as http:
        async with http.post(url + "/v1/completions", json=body) as r:
            return r.status, await r.read()


async def test_behind_the_gateway_it_answers_json_streams_and_503_once_closed() -> None:
    engine = EchoEngine(max_num_seqs=2, token_s=0.001)
    pipeline = Pipeline(Gateway(model="echo"), ops.buffer(4), ops.execute(engine), drain_timeout_s=5.0)
    async with pipeline.start(port=0) as running:
        assert running.url is not None
        status, raw = await post(running.url, {"model": "echo", "prompt": "hello brave new world", "max_tokens": 3})
        body = orjson.loads(raw)
        assert status == 200 and body["model"] == "echo"
        assert [(c["text"], c["finish_reason"]) for c in body["choices"]] == [(" hello brave new", "length")]
        assert body["usage"] == {"prompt_tokens": 6, "completion_tokens": 3, "total_tokens": 9}

        status, raw = await post(running.url, {"model": "echo", "prompt": "one two", "stream": True})
        events = raw.split(b"\n\n")[:-1]
        assert status == 200 and events[-1] == b"data: [DONE]"
        chunks = [orjson.loads(event.removeprefix(b"data: "))["choices"][0] for event in events[:-1]]
        assert [(c["text"], c["finish_reason"]) for c in chunks] == [(" one", None), (" two", None), ("", "stop")]

        await engine.aclose()
        status, raw = await post(running.url, {"model": "echo", "prompt": "late"})
        assert status == 503 and orjson.loads(raw)["error"]["code"] == "unavailable"
