"""``OpenAIEngine``: a request not streamed to its client is one non-streamed call, one JSON body
(against the stub OpenAI server in a subprocess, real time)."""

from __future__ import annotations

import asyncio
import gc

import pytest

from rxpipe import UNBOUNDED
from rxpipe.engines import CompletionRequest, EngineError, TokenChunk
from rxpipe.engines.openai import wire_request_id
from rxpipe.testing import TestSubscriber

from .openai_stub_server import StubServer
from .openai_support import make, wait_for


async def test_a_request_not_streamed_is_one_json_body_and_its_usage_counts(server: StubServer) -> None:
    e = make(server, api_key="sk-test")  # include_usage=True: no stream_options without a stream
    try:
        request = CompletionRequest(prompt="hello", max_tokens=8, sampling={"temperature": 0.5})
        completion = e.submit(request)
        ts = TestSubscriber[TokenChunk](initial_request=UNBOUNDED)
        completion.tokens.subscribe(ts)
        result = await completion.result
        text = " t0 t1 t2 t3 t4 t5 t6 t7"
        assert (result.text, result.finish_reason) == (text, "length")
        # the server's usage (8 and 3), not the estimate (24 bytes: 6) nor one per chunk
        assert (result.completion_tokens, result.prompt_tokens) == (8, 3)
        assert result.ttft_s == result.e2e_s  # its client gets the first token with the whole answer
        await ts.await_done()
        assert ts.values == [TokenChunk(0, text, 8)] and ts.completed
        [seen] = server.state()["bodies"]
        assert seen["path"] == "/v1/completions" and seen["id"] == wire_request_id(request.id)
        assert seen["authorization"] == "Bearer sk-test"
        assert seen["body"] == {"model": "stub-model", "prompt": "hello", "max_tokens": 8, "temperature": 0.5,
                                "stream": False}
        await wait_for(lambda: e.running == 0, what="the slot")
        assert e.succeeded == 1 and e.free_slots == 4 and e.breaker.consecutive_failures == 0
    finally:
        await e.aclose()


async def test_a_non_streamed_answer_over_max_answer_bytes_fails_the_request(server: StubServer) -> None:
    with pytest.raises(ValueError, match="max_answer_bytes"):
        make(server, max_answer_bytes=0)
    e = make(server, max_answer_bytes=64)  # the stub's answer to 8 tokens is a few hundred bytes
    try:
        with pytest.raises(EngineError, match="over max_answer_bytes=64"):
            await e.submit(CompletionRequest(prompt="hello", max_tokens=8)).result
        assert e.succeeded == 0
    finally:
        await e.aclose()


async def test_a_json_answer_without_usage_counts_the_estimate_and_chat_reads_the_message(
        server: StubServer) -> None:
    server.control(json_usage=0)
    e = make(server)
    try:
        messages = [{"role": "user", "content": "hi"}]
        chat_request = CompletionRequest(messages=messages, max_tokens=8)
        chat = await e.submit(chat_request).result
        assert (chat.text, chat.finish_reason) == (" t0 t1 t2 t3 t4 t5 t6 t7", "length")
        assert chat.completion_tokens == 6  # 24 UTF-8 bytes / 4
        assert chat.prompt_tokens == chat_request.prompt_tokens  # no usage: the request's estimate
        first = server.state()["bodies"][0]
        assert first["path"] == "/v1/chat/completions"
        assert first["body"] == {"model": "stub-model", "messages": messages, "max_tokens": 8, "stream": False}
    finally:
        await e.aclose()


async def test_a_finished_call_is_freed_by_reference_counting(server: StubServer) -> None:
    """No reference cycle through the engine's per-call state: it never waits for the cyclic GC."""
    from rxpipe.engines._openai_state import _Call

    e = make(server)
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        completion = e.submit(CompletionRequest(prompt="x", max_tokens=2))
        assert isinstance(completion.engine_state, _Call)
        assert (await completion.result).text == " t0 t1"
        await wait_for(lambda: e.running == 0, what="the slot")
        await asyncio.sleep(0.01)  # the call's task ends
        assert completion.engine_state is None
        del completion
        gc.collect()
        assert not [o for o in gc.garbage if isinstance(o, _Call)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
        await e.aclose()


async def test_a_server_that_ignores_stream_false_still_answers_in_whole_reads(server: StubServer) -> None:
    server.control(always_sse=1, empty_every=4)
    e = make(server)
    try:
        result = await e.submit(CompletionRequest(prompt="x", max_tokens=8)).result
        assert server.state()["bodies"][0]["body"]["stream"] is False
        assert (result.text, result.completion_tokens) == (" t0 t1 t2 t4 t5 t6", 8)  # one per chunk
        assert result.ttft_s == result.e2e_s
    finally:
        await e.aclose()


async def test_a_json_body_cut_mid_way_fails_the_request_and_counts_against_the_breaker(
        server: StubServer) -> None:
    server.control(cut_after=2)
    e = make(server)
    try:
        c = e.submit(CompletionRequest(prompt="x", max_tokens=5))
        with pytest.raises(EngineError, match="answer to .* broke after 0 tokens"):
            await c.result
        assert e.breaker.consecutive_failures == 1 and c.generated_tokens == 0
    finally:
        await e.aclose()
