"""``OpenAIEngine`` and answers beyond text (against the stub server in a subprocess): each delta
one chunk, the whole message in the result, whichever way the server answered (a stream to a
request not streamed, one JSON body to a streamed one)."""

from __future__ import annotations

from typing import Any

from rxpipe import UNBOUNDED
from rxpipe.engines import CompletionRequest
from rxpipe.serving import DeltaChunk, TokenChunk
from rxpipe.testing import TestSubscriber

from . import openai_stub_answers as answers
from .openai_stub_server import StubServer
from .openai_support import make

TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {
    "type": "object", "properties": {"a": {"type": "string"}}}}}]
MESSAGES = [{"role": "user", "content": "call it"}]
CALLS = [{"id": "call_0", "type": "function", "function": {"name": "f", "arguments": '{"a": "a-1"}'}}]


def tool_request(stream: bool) -> CompletionRequest:
    return CompletionRequest(messages=MESSAGES, stream=stream, sampling={"tools": TOOLS},
                             features={"tools": "tools"})


async def answer(server: StubServer, request: CompletionRequest) -> tuple[Any, list[Any]]:
    e = make(server)
    try:
        completion = e.submit(request)
        tokens = TestSubscriber[Any](initial_request=UNBOUNDED)
        completion.tokens.subscribe(tokens)
        result = await completion.result
        await tokens.await_done(2.0)
        return result, tokens.values
    finally:
        await e.aclose()


async def test_streamed_tool_calls_are_one_chunk_each_and_whole_in_the_result(server: StubServer) -> None:
    result, chunks = await answer(server, tool_request(stream=True))
    plan = answers.plan({"messages": MESSAGES, "tools": TOOLS}, True, [])
    assert plan is not None
    assert [(type(c), c.text, c.delta) for c in chunks] == [(DeltaChunk, "", d) for d, _ in plan.chunks]
    assert (result.text, result.finish_reason, result.system_fingerprint) == ("", "tool_calls", "fp_stub")
    assert result.message == {"content": None, "tool_calls": CALLS}
    assert result.usage == {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7,
                            "completion_tokens_details": {"reasoning_tokens": 0}}
    assert (result.prompt_tokens, result.completion_tokens) == (3, 4)
    body = server.state()["bodies"][0]["body"]
    assert body == {"model": "stub-model", "messages": MESSAGES, "tools": TOOLS, "stream": True,
                    "stream_options": {"include_usage": True}}


async def test_a_stream_answered_with_one_json_body_still_gets_its_deltas(server: StubServer) -> None:
    server.control(plain=1)  # a server that ignores "stream": true
    result, chunks = await answer(server, tool_request(stream=True))
    assert [(c.text, c.delta) for c in chunks] == [("", {"tool_calls": [{"index": 0, **CALLS[0]}]})]
    assert result.message == {"content": None, "tool_calls": CALLS} and result.finish_reason == "tool_calls"


async def test_a_request_not_streamed_answered_with_a_stream_gets_the_whole_message(server: StubServer) -> None:
    server.control(always_sse=1)  # a server that ignores "stream": false
    result, chunks = await answer(server, tool_request(stream=False))
    assert result.message == {"content": None, "tool_calls": CALLS} and result.finish_reason == "tool_calls"
    assert all(type(c) is TokenChunk for c in chunks)  # its client is answered whole: no deltas to stream


async def test_logprobs_reasoning_and_a_refusal_come_as_sent(server: StubServer) -> None:
    think = CompletionRequest(messages=[{"role": "user", "content": "[reason] go"}], max_tokens=2, stream=True,
                              sampling={"logprobs": True, "top_logprobs": 1}, features={"logprobs": "logprobs"})
    result, chunks = await answer(server, think)
    assert [c.delta for c in chunks[:3]] == [{"reasoning_content": p} for p in answers.REASONING]
    assert [(c.text, c.logprobs["content"][0]["token"]) for c in chunks[3:]] == [(" t0", " t0"), (" t1", " t1")]
    assert result.message == {"reasoning_content": "thinking about it"} and result.text == " t0 t1"
    assert [e["token"] for e in result.logprobs["content"]] == [" t0", " t1"]
    refused, chunks = await answer(server, CompletionRequest(messages=[{"role": "user", "content": "[refuse]"}]))
    assert refused.message == {"content": None, "refusal": "".join(answers.REFUSAL)} and refused.text == ""
