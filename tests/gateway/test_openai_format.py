"""Request validation and response shapes of the OpenAI wire format."""

from __future__ import annotations

import re
from typing import Any

import orjson
import pytest

from rxpipe.engines import UNANSWERED_REASONS, CompletionRequest, CompletionResult
from rxpipe.gateway._openai import (
    InvalidRequest,
    chunk_body,
    completion_body,
    error_body,
    parse_request,
    sse,
    token_event_template,
)


def parse(body: Any, chat: bool = False) -> CompletionRequest:
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    return parse_request(raw, chat=chat, default_model="sim", max_tokens_limit=100)


def test_completion_request_fields() -> None:
    req = parse({"model": "sim", "prompt": "hello", "max_tokens": 7, "temperature": 0.5, "stop": ["\n"],
                 "stream": True, "stream_options": {"include_usage": True}, "user": "u1"})
    assert (req.prompt, req.messages, req.max_tokens, req.model, req.stream) == ("hello", None, 7, "sim", True)
    assert req.sampling == {"temperature": 0.5, "stop": ["\n"], "user": "u1", "include_usage": True}
    # one id per request: "cmpl-" and a UUID4's 32 hex digits (rxpipe.serving._ids)
    assert re.fullmatch(r"cmpl-[0-9a-f]{12}4[0-9a-f]{3}[89ab][0-9a-f]{15}", req.id)
    assert parse({"prompt": ["one"]}).prompt == "one"
    assert parse({"prompt": "x"}).model == "sim"  # model defaults to the served one


def test_chat_request_fields() -> None:
    parts = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    req = parse({"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": parts}],
                 "max_completion_tokens": 3}, chat=True)
    assert req.messages == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "ab"}]
    assert req.max_tokens == 3 and req.prompt is None and req.id.startswith("chatcmpl-")


@pytest.mark.parametrize("body, chat, code", [
    (b"{", False, "invalid_json"),
    (b'"text"', False, "invalid_json"),
    ({"prompt": None}, False, "missing_prompt"),
    ({"prompt": 5}, False, "invalid_prompt"),
    ({"prompt": ["a", "b"]}, False, "invalid_prompt"),
    ({"prompt": "x", "max_tokens": 101}, False, "invalid_max_tokens"),
    ({"prompt": "x", "max_tokens": True}, False, "invalid_max_tokens"),
    ({"prompt": "x", "max_tokens": -1}, False, "invalid_max_tokens"),
    ({"prompt": "x", "n": 2}, False, "invalid_n"),
    ({"prompt": "x", "temperature": "hot"}, False, "invalid_type"),
    ({"prompt": "x", "seed": True}, False, "invalid_type"),
    ({"prompt": "x", "model": ""}, False, "invalid_model"),
    ({}, True, "missing_messages"),
    ({"messages": "hi"}, True, "invalid_messages"),
    ({"messages": [{"role": "wizard", "content": "x"}]}, True, "invalid_role"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, True, "invalid_content"),
    ({"messages": [{"role": "user", "content": 3}]}, True, "invalid_content"),
])
def test_invalid_requests(body: Any, chat: bool, code: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        parse(body, chat)
    assert info.value.status == 400 and info.value.code == code and info.value.type == "invalid_request_error"


RESULT = CompletionResult(text="hi there", finish_reason="stop", prompt_tokens=3, completion_tokens=2,
                          queue_time_s=0.0, ttft_s=0.01, e2e_s=0.02)


def test_completion_bodies() -> None:
    req = CompletionRequest(prompt="p", id="cmpl-1")
    assert orjson.loads(completion_body(req, RESULT, chat=False, created=7)) == {
        "id": "cmpl-1", "object": "text_completion", "created": 7, "model": "sim",
        "choices": [{"text": "hi there", "index": 0, "logprobs": None, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}
    chat = orjson.loads(completion_body(req, RESULT, chat=True, created=7))
    assert chat["object"] == "chat.completion"
    assert chat["choices"] == [{"index": 0, "message": {"role": "assistant", "content": "hi there"},
                                "logprobs": None, "finish_reason": "stop"}]


def test_chunk_bodies() -> None:
    req = CompletionRequest(prompt="p", id="x")
    assert orjson.loads(chunk_body(req, chat=True, created=1, text="", role=True))["choices"] == [
        {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}]
    assert orjson.loads(chunk_body(req, chat=False, created=1, text="a"))["choices"] == [
        {"text": "a", "index": 0, "logprobs": None, "finish_reason": None}]
    final = orjson.loads(chunk_body(req, chat=True, created=1, result=RESULT))
    assert final["choices"][0]["finish_reason"] == "stop" and final["choices"][0]["delta"] == {}
    usage = orjson.loads(chunk_body(req, chat=True, created=1, result=RESULT, usage_only=True))
    assert usage["choices"] == [] and usage["usage"]["total_tokens"] == 5


def test_error_body_shape() -> None:
    assert orjson.loads(error_body("m", "t", "c")) == {
        "error": {"message": "m", "type": "t", "code": "c", "param": None}}


@pytest.mark.parametrize("chat", [False, True])
@pytest.mark.parametrize("text", ["hi", "", 'quote " and \\ and \n', "\x00", "é 漢 🙂"])
def test_token_event_template_is_byte_for_byte_the_chunk_event(chat: bool, text: str) -> None:
    req = CompletionRequest(prompt="p", id="cmpl-abc", model="m-1")
    prefix, suffix = token_event_template(req, chat=chat, created=12)
    assert prefix + orjson.dumps(text) + suffix == sse(chunk_body(req, chat=chat, created=12, text=text))


def test_a_finish_reason_reaches_the_client_as_the_engine_gave_it_never_replaced_by_stop() -> None:
    """One vocabulary from the engine to the client: the model's reasons pass as they are (one an
    engine of its own gives too); those that are no answer are refused by the edge before any
    body is built, so building one from them is a bug, said loudly (not a silent "stop")."""
    req = CompletionRequest(prompt="p", id="cmpl-1")
    for reason in ("stop", "length", "content_filter"):
        result = CompletionResult("t", reason, 1, 1, 0.0, None, 0.0)
        assert orjson.loads(completion_body(req, result, chat=True, created=1))["choices"][0]["finish_reason"] == reason
        final = orjson.loads(chunk_body(req, chat=False, created=1, result=result))
        assert final["choices"][0]["finish_reason"] == reason
    for reason in UNANSWERED_REASONS:
        with pytest.raises(ValueError, match="not an answer"):
            completion_body(req, CompletionResult("", reason, 1, 0, 0.0, None, 0.0), chat=False, created=1)
    assert UNANSWERED_REASONS == ("stalled", "cancelled", "deadline")
