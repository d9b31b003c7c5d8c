"""Never silently ignored (DESIGN §5, "Edge, third round"): the simulated gateway refuses every
field its engine cannot serve with 400 ``unsupported_request`` naming it, before admission; the
fields it can serve (or that only shape sampling) are answered."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import openai
import pytest

from rxpipe import operators as ops
from rxpipe.engines import CompletionRequest, SimulatedEngine
from rxpipe.errors import UnsupportedRequestError
from rxpipe.gateway import Gateway, GatewayConfig
from rxpipe.runtime import Pipeline
from rxpipe.serving import ALL_FEATURES, FEATURES

CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"
USER = {"role": "user", "content": "hi"}
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}
CALL = {"id": "call_0", "type": "function", "function": {"name": "f", "arguments": "{}"}}
PART_TEXT = {"type": "text", "text": "look"}
IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}

#: (route, body, param): every field a SimulatedEngine cannot serve, and the param its 400 names
UNSUPPORTED = [
    (CHAT, {"messages": [USER], "tools": [TOOL]}, "tools"),
    (CHAT, {"messages": [USER], "functions": [TOOL["function"]]}, "functions"),
    (CHAT, {"messages": [USER], "tool_choice": {"type": "function", "function": {"name": "f"}}}, "tool_choice"),
    (CHAT, {"messages": [USER], "tool_choice": "required"}, "tool_choice"),
    (CHAT, {"messages": [USER], "function_call": {"name": "f"}}, "function_call"),
    (CHAT, {"messages": [USER], "logprobs": True}, "logprobs"),
    (CHAT, {"messages": [USER], "logprobs": True, "top_logprobs": 3}, "logprobs"),
    (CHAT, {"messages": [USER], "top_logprobs": 3}, "top_logprobs"),
    (CHAT, {"messages": [USER], "response_format": {"type": "json_object"}}, "response_format"),
    (CHAT, {"messages": [USER], "response_format": {"type": "json_schema", "json_schema": {"name": "s"}}},
     "response_format"),
    (CHAT, {"messages": [USER], "modalities": ["text", "audio"]}, "modalities"),
    (CHAT, {"messages": [USER], "audio": {"voice": "alloy", "format": "wav"}}, "audio"),
    (CHAT, {"messages": [USER], "prediction": {"type": "content", "content": "x"}}, "prediction"),
    (CHAT, {"messages": [USER], "web_search_options": {}}, "web_search_options"),
    (CHAT, {"messages": [USER], "reasoning_effort": "low"}, "reasoning_effort"),
    (CHAT, {"messages": [{"role": "user", "content": [PART_TEXT, IMAGE]}]}, "messages[0].content[1]"),
    (CHAT, {"messages": [{"role": "user", "content": [{"type": "input_audio",
                                                       "input_audio": {"data": "AA==", "format": "wav"}}]}]},
     "messages[0].content[0]"),
    (CHAT, {"messages": [{"role": "user", "content": [{"type": "file", "file": {"file_id": "file-1"}}]}]},
     "messages[0].content[0]"),
    (CHAT, {"messages": [{"role": "user", "content": [{"type": "video_url", "video_url": {"url": "x"}}]}]},
     "messages[0].content[0]"),
    (CHAT, {"messages": [USER, {"role": "assistant", "content": None, "tool_calls": [CALL]}]},
     "messages[1].tool_calls"),
    (CHAT, {"messages": [USER, {"role": "tool", "tool_call_id": "call_0", "content": "sunny"}]}, "messages[1]"),
    (COMPLETIONS, {"prompt": "hi", "logprobs": 2}, "logprobs"),
    (COMPLETIONS, {"prompt": "hi", "logprobs": 0}, "logprobs"),
    (COMPLETIONS, {"prompt": "hi", "echo": True}, "echo"),
    (COMPLETIONS, {"prompt": "hi", "suffix": " end"}, "suffix"),
    (COMPLETIONS, {"prompt": "hi", "best_of": 2}, "best_of"),
    ("/v1/embeddings", {"input": ["a", "b"]}, "input"),
    ("/v1/responses", {"input": "hi"}, "input"),
]

#: fields that only shape sampling, name the default, or are a vendor's: answered 200
ACCEPTED = [
    (CHAT, {"messages": [USER], "response_format": {"type": "text"}}),
    (CHAT, {"messages": [USER], "tool_choice": "none", "parallel_tool_calls": False}),
    (CHAT, {"messages": [USER], "logprobs": False, "logit_bias": {"5": -100}, "presence_penalty": 0.5}),
    (CHAT, {"messages": [USER], "min_p": 0.1, "repetition_penalty": 1.1, "metadata": {"k": "v"}, "store": False}),
    (CHAT, {"messages": [{"role": "developer", "content": [PART_TEXT]}, USER], "user": "u", "service_tier": "auto"}),
    (COMPLETIONS, {"prompt": "hi", "echo": False, "best_of": 1, "top_k": 5}),
]


def gateway_pipeline(engine: SimulatedEngine) -> Pipeline:
    return Pipeline(Gateway(GatewayConfig()), ops.buffer(8), ops.execute(engine), drain_timeout_s=5.0)


def simulated() -> SimulatedEngine:
    return SimulatedEngine(max_num_seqs=4, step_overhead_s=0.001, decode_s_per_seq=0.0, prefill_s_per_token=0.0)


async def test_every_unsupported_field_is_a_400_naming_it_before_admission() -> None:
    engine = simulated()
    async with gateway_pipeline(engine).start(port=0) as running, aiohttp.ClientSession() as http:
        for route, body, param in UNSUPPORTED:
            async with http.post(f"{running.url}{route}", json={"model": "sim", "max_tokens": 2, **body}) as r:
                answer = await r.json()
                assert r.status == 400, (route, body, answer)
            error = answer["error"]
            assert (error["type"], error["code"], error["param"]) == (
                "invalid_request_error", "unsupported_request", param), (route, body, error)
            assert error["message"].startswith("model 'sim' does not support ") and repr(param) in error["message"]
        for route, body in ACCEPTED:
            async with http.post(f"{running.url}{route}", json={"model": "sim", "max_tokens": 2, **body}) as r:
                assert r.status == 200, (route, body, await r.text())
    # nothing refused reached the engine: only the accepted ones ran
    assert engine.finished == len(ACCEPTED)


async def test_the_openai_sdk_sees_the_refusal_with_its_param() -> None:
    async with gateway_pipeline(simulated()).start(port=0) as running:
        client = openai.AsyncOpenAI(base_url=f"{running.url}/v1", api_key="unused", max_retries=0)
        try:
            with pytest.raises(openai.BadRequestError) as refused:
                await client.chat.completions.create(model="sim", messages=[USER], tools=[TOOL])  # type: ignore[list-item]
            assert (refused.value.status_code, refused.value.code, refused.value.param) == (
                400, "unsupported_request", "tools")
            with pytest.raises(openai.BadRequestError) as streamed:
                await client.chat.completions.create(model="sim", messages=[USER], logprobs=True, stream=True)
            assert streamed.value.param == "logprobs"
            with pytest.raises(openai.BadRequestError) as embedded:
                await client.embeddings.create(model="sim", input="x")
            assert embedded.value.param == "input"
        finally:
            await client.close()

        def sync_call() -> None:
            with openai.OpenAI(base_url=f"{running.url}/v1", api_key="unused", max_retries=0) as sync:
                with pytest.raises(openai.BadRequestError) as refused:
                    sync.chat.completions.create(model="sim", messages=[{"role": "user", "content": [
                        {"type": "image_url", "image_url": {"url": "https://example.invalid/cat.png"}}]}])
                assert refused.value.param == "messages[0].content[0]"

        await asyncio.to_thread(sync_call)


async def test_the_engine_refuses_at_submit_too_and_leaves_the_request_untouched() -> None:
    engine = simulated()
    request = CompletionRequest(messages=[USER], features={"tools": "tools"})
    with pytest.raises(UnsupportedRequestError) as refused:
        engine.submit(request)
    assert refused.value.param == "tools" and "tool calling" in refused.value.client_message
    assert request.completion is None and request.arrival_s is None
    assert engine.features == frozenset() and "tools" in FEATURES and "anything" in ALL_FEATURES


def test_features_a_request_asks_for_are_named_with_the_field() -> None:
    import orjson

    from rxpipe.gateway._openai import parse_request

    def features(body: dict[str, Any], chat: bool = True) -> dict[str, str] | None:
        return parse_request(orjson.dumps({"model": "sim", **body}), chat=chat, default_model="sim",
                             max_tokens_limit=100).features

    assert features({"messages": [USER]}) is None
    assert features({"messages": [USER], "temperature": 0, "stop": "x", "seed": 1}) is None
    assert features({"messages": [USER], "tools": [TOOL], "logprobs": True,
                     "response_format": {"type": "json_object"}}) == {
        "tools": "tools", "logprobs": "logprobs", "response_format": "response_format"}
    # the first field to ask for a feature names it
    assert features({"messages": [USER, {"role": "tool", "tool_call_id": "c", "content": "x"}], "tools": [TOOL]}) == {
        "tools": "messages[1]"}
    assert features({"prompt": "p", "logprobs": 1, "echo": True}, chat=False) == {"logprobs": "logprobs",
                                                                                  "echo": "echo"}
