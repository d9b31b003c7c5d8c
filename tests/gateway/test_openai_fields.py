"""Every field of OpenAI's requests: known ones type-checked, every one kept as sent (a vendor's
too), messages whole; embeddings and Responses bodies; answers written as the backend said them."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from rxpipe.gateway._openai import (
    InvalidRequest,
    chunk_body,
    completion_body,
    embeddings_body,
    parse_embeddings,
    parse_request,
    parse_responses,
    responses_error_event,
    responses_event,
)
from rxpipe.gateway._openai_request import CHAT_FIELDS, COMPLETION_FIELDS
from rxpipe.serving import CompletionRequest, CompletionResult


def chat(body: dict[str, Any]) -> CompletionRequest:
    return parse_request(orjson.dumps({"messages": [{"role": "user", "content": "hi"}], **body}), chat=True,
                         default_model="sim", max_tokens_limit=100)


def refusal(parse: Any, body: dict[str, Any]) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as info:
        parse(orjson.dumps(body))
    assert info.value.status == 400
    return info.value


def test_every_field_is_kept_as_sent_and_a_vendors_too() -> None:
    body = {"temperature": 0.2, "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "auto",
            "response_format": {"type": "json_object"}, "min_p": 0.1, "chat_template_kwargs": {"x": [1]},
            "nonsense": None, "stream_options": {"include_usage": False}}
    request = chat(body)
    assert request.sampling == body  # a vendor's null too: forwarded untouched
    assert request.features == {"tools": "tools", "response_format": "response_format"}
    assert chat({"tools": None}).sampling == {}  # a known field set to null means its default


def test_messages_are_kept_whole_and_their_shapes_checked() -> None:
    messages = [{"role": "system", "content": "s", "name": "policy"},
                {"role": "user", "content": [{"type": "text", "text": "a"},
                                             {"type": "image_url", "image_url": {"url": "https://x/y.png"}}]},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "ok"}]}]
    request = chat({"messages": messages})
    assert request.messages == messages and request.messages[2] is not None
    assert request.features == {"image_url": "messages[1].content[1]", "tools": "messages[2].tool_calls"}

    def bad(message: dict[str, Any]) -> InvalidRequest:
        return refusal(lambda raw: parse_request(raw, chat=True, default_model="sim", max_tokens_limit=100),
                       {"messages": [message]})

    assert bad({"role": "user", "content": [{"text": "no type"}]}).param == "messages[0].content[0]"
    assert bad({"role": "user", "content": [{"type": "text"}]}).code == "invalid_content"
    assert bad({"role": "user", "content": [{"type": "image_url", "image_url": {}}]}).code == "invalid_content"
    assert bad({"role": "user", "content": [{"type": "input_audio", "input_audio": "x"}]}).code == "invalid_content"
    assert bad({"role": "tool", "content": "x"}).param == "messages[0].tool_call_id"
    assert bad({"role": "assistant", "content": None, "tool_calls": [{"type": "function"}]}).param == (
        "messages[0].tool_calls[0]")
    assert bad({"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": 3}}]}).param == (
        "messages[0].tool_calls[0].function")
    assert bad({"role": "user", "content": "x", "name": 7}).param == "messages[0].name"


@pytest.mark.parametrize("field", sorted(CHAT_FIELDS))
def test_a_known_chat_field_of_the_wrong_type_is_a_400_naming_it(field: str) -> None:
    wrong = "text" if str not in CHAT_FIELDS[field] else 12
    error = refusal(lambda raw: parse_request(raw, chat=True, default_model="sim", max_tokens_limit=100),
                    {"messages": [{"role": "user", "content": "hi"}], field: wrong})
    assert (error.code, error.param) == ("invalid_type", field)


@pytest.mark.parametrize("field", sorted(COMPLETION_FIELDS))
def test_a_known_completions_field_of_the_wrong_type_is_a_400_naming_it(field: str) -> None:
    wrong = "text" if str not in COMPLETION_FIELDS[field] else True
    error = refusal(lambda raw: parse_request(raw, chat=False, default_model="sim", max_tokens_limit=100),
                    {"prompt": "p", field: wrong})
    assert (error.code, error.param) == ("invalid_type", field)


def test_max_completion_tokens_keeps_its_name() -> None:
    assert chat({"max_completion_tokens": 5}).max_tokens_field == "max_completion_tokens"
    assert chat({"max_tokens": 5}).max_tokens_field == "max_tokens"
    error = refusal(lambda raw: parse_request(raw, chat=True, default_model="sim", max_tokens_limit=100),
                    {"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 0})
    assert (error.code, error.param) == ("invalid_max_tokens", "max_completion_tokens")


def test_embeddings_bodies() -> None:
    def parse(raw: bytes) -> CompletionRequest:
        return parse_embeddings(raw, default_model="sim")

    request = parse(orjson.dumps({"input": ["a", "b"], "dimensions": 8, "encoding_format": "base64", "x": 1}))
    assert (request.endpoint, request.features, request.prompt, request.messages) == (
        "embeddings", {"embeddings": "input"}, None, None)
    assert request.sampling == {"input": ["a", "b"], "dimensions": 8, "encoding_format": "base64", "x": 1}
    assert request.id.startswith("embd-")
    assert parse(orjson.dumps({"input": [[1, 2], [3]]})).sampling["input"] == [[1, 2], [3]]
    assert refusal(parse, {}).code == "missing_input"
    for bad in ("", [], [1, "a"], [[]], {"a": 1}, 5):
        assert refusal(parse, {"input": bad}).param == "input", bad
    assert refusal(parse, {"input": "a", "encoding_format": "hex"}).param == "encoding_format"
    assert refusal(parse, {"input": "a", "dimensions": 0}).param == "dimensions"
    assert refusal(parse, {"input": "a", "dimensions": "8"}).code == "invalid_type"


def test_responses_bodies() -> None:
    def parse(raw: bytes) -> CompletionRequest:
        return parse_responses(raw, default_model="sim", max_tokens_limit=100)

    body = {"input": [{"role": "user", "content": "hi"}], "instructions": "be brief", "stream": True,
            "max_output_tokens": 9, "tools": [], "text": {"format": {"type": "text"}}, "prompt": {"id": "p"}}
    request = parse(orjson.dumps(body))
    assert (request.endpoint, request.stream, request.features) == ("responses", True, {"responses": "input"})
    assert request.sampling == {k: v for k, v in body.items() if k != "stream"}
    assert parse(orjson.dumps({"previous_response_id": "resp_1"})).sampling == {"previous_response_id": "resp_1"}
    assert refusal(parse, {"model": "sim"}).code == "missing_input"
    assert refusal(parse, {"input": "x", "max_output_tokens": 101}).param == "max_output_tokens"
    assert refusal(parse, {"input": "x", "stream": "yes"}).param == "stream"
    assert refusal(parse, {"input": "x", "temperature": 3}).param == "temperature"


RICH = CompletionResult("", "tool_calls", 3, 5, 0.0, 0.1, 0.2,
                        {"content": None, "tool_calls": [{"id": "c", "type": "function",
                                                          "function": {"name": "f", "arguments": "{}"}}]},
                        None, {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8,
                               "completion_tokens_details": {"reasoning_tokens": 0}}, "fp_9")


def test_answers_say_what_the_backend_said() -> None:
    req = CompletionRequest(messages=[], id="chatcmpl-1", model="m")
    answer = orjson.loads(completion_body(req, RICH, chat=True, created=5))
    assert answer == {"id": "chatcmpl-1", "object": "chat.completion", "created": 5, "model": "m",
                      "choices": [{"index": 0, "message": {"role": "assistant", **RICH.message}, "logprobs": None,
                                   "finish_reason": "tool_calls"}],
                      "usage": RICH.usage, "system_fingerprint": "fp_9"}
    fragment = orjson.loads(chunk_body(req, chat=True, created=5, text="", delta={"tool_calls": [{"index": 0}]}))
    assert fragment["choices"] == [{"index": 0, "delta": {"tool_calls": [{"index": 0}]}, "logprobs": None,
                                    "finish_reason": None}]
    token = orjson.loads(chunk_body(req, chat=True, created=5, text=" a", logprobs={"content": [1]}))
    assert token["choices"][0]["delta"] == {"content": " a"} and token["choices"][0]["logprobs"] == {"content": [1]}
    final = orjson.loads(chunk_body(req, chat=True, created=5, result=RICH))
    assert final["choices"][0]["finish_reason"] == "tool_calls" and final["system_fingerprint"] == "fp_9"
    usage = orjson.loads(chunk_body(req, chat=True, created=5, result=RICH, usage_only=True))
    assert usage["usage"] == RICH.usage


def test_embeddings_and_responses_answers() -> None:
    req = CompletionRequest(endpoint="embeddings", model="front")
    result = CompletionResult("", "stop", 4, 0, 0.0, 0.0, 0.0, answer={
        "object": "list", "data": [{"object": "embedding", "index": 0, "embedding": "AAAA"}], "model": "back",
        "usage": {"prompt_tokens": 4, "total_tokens": 4}})
    assert orjson.loads(embeddings_body(req, result)) == {
        "object": "list", "data": [{"object": "embedding", "index": 0, "embedding": "AAAA"}], "model": "front",
        "usage": {"prompt_tokens": 4, "total_tokens": 4}}
    event = {"type": "response.output_text.delta", "delta": "hi", "sequence_number": 4}
    assert responses_event(event) == b"event: response.output_text.delta\ndata: " + orjson.dumps(event) + b"\n\n"
    assert orjson.loads(responses_error_event("gone", "engine_error", 5).split(b"data: ")[1]) == {
        "type": "error", "code": "engine_error", "message": "gone", "param": None, "sequence_number": 5}
