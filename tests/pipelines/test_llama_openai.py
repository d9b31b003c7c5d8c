"""The OpenAI surface through the front against a real server nobody here wrote: llama-cpp-python's
OpenAI server (the ``llama`` extra) on a generated tiny GGUF, behind ``pipelines/llm_router.py``,
with the official ``openai`` SDK: a real tool call (``--chat_format chatml-function-calling``, the
arguments constrained by the tool's JSON schema), a multi-turn tool conversation, log
probabilities (``--logits_all``), embeddings (``--embedding``, a mean-pooled model). Each answer
through the router is compared with the server's own answer to the same request (temperature 0:
the same answer), streamed and not.

Skipped without the extra, failed under CI (as ``test_llama_server``); nothing is downloaded.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Iterator

import aiohttp
import openai
import orjson
import pytest

from .router_helpers import running_router
from .test_llama_server import NO_EOS, LlamaServer
from .tiny_gguf import write_tiny_llama

pytestmark = pytest.mark.loops("uvloop")

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "the weather",
    "parameters": {"type": "object", "properties": {"unit": {"type": "string", "enum": ["c", "f"]}},
                   "required": ["unit"]}}}
FORCED = {"type": "function", "function": {"name": "get_weather"}}
ASK = [{"role": "user", "content": "the weather?"}]


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, LlamaServer]]:
    from tests.gateway.server import free_port

    tmp = tmp_path_factory.mktemp("llama-openai")
    chat = LlamaServer(write_tiny_llama(tmp / "tiny.gguf"), tmp, free_port(), "--chat_format",
                       "chatml-function-calling", "--logits_all", "True")
    embed = LlamaServer(write_tiny_llama(tmp / "tiny-mean.gguf", pooling="mean"), tmp, free_port(),
                        "--embedding", "True")
    yield {"chat": chat, "embed": embed}
    chat.stop()
    embed.stop()


async def direct(url: str, path: str, body: dict[str, Any]) -> Any:
    """The server's own answer: its JSON, or the ``data:`` payloads of its stream."""
    async with aiohttp.ClientSession() as http, http.post(url + path, json=body) as response:
        raw = await response.read()
        assert response.status == 200, raw
    if not body.get("stream"):
        return orjson.loads(raw)
    lines = [line[6:] for line in raw.split(b"\n") if line.startswith(b"data: ")]
    assert lines[-1] == b"[DONE]"
    return [orjson.loads(line) for line in lines[:-1]]


def _without_ids(delta: dict[str, Any]) -> dict[str, Any]:
    """A delta with its tool calls' ids (the backend's, per request) blanked."""
    calls = delta.get("tool_calls")
    if not calls:
        return delta
    return {**delta, "tool_calls": [{**c, "id": "ID"} for c in calls]}


async def test_a_real_tool_call_through_the_router_streamed_and_not(llama: dict[str, LlamaServer]) -> None:
    server = llama["chat"]
    body = {"model": "tiny", "messages": ASK, "tools": [WEATHER], "tool_choice": FORCED, "max_tokens": 64,
            "temperature": 0}
    own = await direct(server.url, "/v1/chat/completions", body)
    own_stream = await direct(server.url, "/v1/chat/completions", {**body, "stream": True})
    async with running_router(backends=server.url, model="tiny", max_in_flight=1, cache_max_entries=0) as (url, _):
        def sync_call() -> Any:
            with openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0) as client:
                return client.chat.completions.create(model="tiny", messages=ASK, tools=[WEATHER],  # type: ignore
                                                      tool_choice=FORCED, max_tokens=64, temperature=0)

        answer = await asyncio.to_thread(sync_call)
        async with openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0) as client:
            stream = await client.chat.completions.create(model="tiny", messages=ASK, tools=[WEATHER],  # type: ignore
                                                          tool_choice=FORCED, max_tokens=64, temperature=0,
                                                          stream=True)
            chunks = [c async for c in stream]
    [expected] = own["choices"][0]["message"]["tool_calls"]
    [call] = answer.choices[0].message.tool_calls
    assert answer.choices[0].finish_reason == own["choices"][0]["finish_reason"] == "tool_calls"
    assert (call.type, call.function.name, call.function.arguments) == (
        "function", "get_weather", expected["function"]["arguments"])
    assert call.id.startswith("call__0_get_weather_")  # the server's id of its call (it names its answer), as sent
    assert json.loads(call.function.arguments)["unit"] in ("c", "f")  # the schema held: a real tool call
    assert answer.usage.model_dump(exclude_none=True) == own["usage"]  # the server's usage, unchanged
    assert answer.id != own["id"] and answer.id.startswith("chatcmpl-")  # the front's own id
    # streamed: the server's deltas one for one (the role chunk and the closing one are the front's)
    ours = [c.choices[0].delta.model_dump(exclude_none=True) for c in chunks if c.choices][1:-1]
    theirs = [{k: v for k, v in e["choices"][0]["delta"].items() if v is not None} for e in own_stream][1:-1]
    assert [_without_ids(d) for d in ours] == [_without_ids(d) for d in theirs] and len(ours) >= 3
    assert "".join(d["tool_calls"][0]["function"]["arguments"] for d in ours) == expected["function"]["arguments"]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


async def test_a_multi_turn_tool_conversation_with_llama_cpp(llama: dict[str, LlamaServer]) -> None:
    server = llama["chat"]
    async with running_router(backends=server.url, model="tiny", max_in_flight=1, cache_max_entries=0) as (url, _):
        async with openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0) as client:
            first = await client.chat.completions.create(model="tiny", messages=ASK, tools=[WEATHER],  # type: ignore
                                                         tool_choice=FORCED, max_tokens=64, temperature=0)
            [call] = first.choices[0].message.tool_calls
            # llama-cpp-python's server wants a string content beside tool calls
            messages = [*ASK, {"role": "assistant", "content": "", "tool_calls": [call.model_dump()]},
                        {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 degrees"}]
            second = await client.chat.completions.create(model="tiny", messages=messages, tools=[WEATHER],  # type: ignore
                                                          max_tokens=8, extra_body=NO_EOS)
    own = await direct(server.url, "/v1/chat/completions", {"model": "tiny", "messages": messages,
                                                            "tools": [WEATHER], "max_tokens": 8, **NO_EOS})
    # the same prompt reached the server: the tool call and its result, as the client sent them
    assert second.usage.prompt_tokens == own["usage"]["prompt_tokens"] > first.usage.prompt_tokens
    assert second.choices[0].message.content == own["choices"][0]["message"]["content"]
    assert second.choices[0].finish_reason == "length"


async def test_logprobs_from_llama_cpp_streamed_and_not(llama: dict[str, LlamaServer]) -> None:
    server = llama["chat"]
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "logprobs": True, "top_logprobs": 2,
            "max_tokens": 4, **NO_EOS}
    own = await direct(server.url, "/v1/chat/completions", body)
    own_stream = await direct(server.url, "/v1/chat/completions", {**body, "stream": True})
    own_text = await direct(server.url, "/v1/completions", {"model": "tiny", "prompt": "the cat", "logprobs": 2,
                                                             "max_tokens": 4, **NO_EOS})
    async with running_router(backends=server.url, model="tiny", max_in_flight=1, cache_max_entries=0) as (url, _):
        async with openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0) as client:
            whole = await client.chat.completions.create(model="tiny", messages=body["messages"], logprobs=True,  # type: ignore
                                                         top_logprobs=2, max_tokens=4, extra_body=NO_EOS)
            stream = await client.chat.completions.create(model="tiny", messages=body["messages"], logprobs=True,  # type: ignore
                                                          top_logprobs=2, max_tokens=4, extra_body=NO_EOS, stream=True)
            chunks = [c async for c in stream]
            text = await client.completions.create(model="tiny", prompt="the cat", logprobs=2, max_tokens=4,
                                                   extra_body=NO_EOS)
    assert whole.choices[0].logprobs.model_dump() == own["choices"][0]["logprobs"]
    assert len(own["choices"][0]["logprobs"]["content"]) >= 4
    ours = [c.choices[0].logprobs.model_dump() for c in chunks if c.choices and c.choices[0].logprobs]
    theirs = [e["choices"][0]["logprobs"] for e in own_stream if e["choices"][0].get("logprobs")]
    assert ours == theirs and len(ours) >= 4
    assert text.choices[0].logprobs.model_dump() == own_text["choices"][0]["logprobs"]


async def test_embeddings_from_llama_cpp_through_the_router(llama: dict[str, LlamaServer]) -> None:
    server = llama["embed"]
    texts = ["the cat", "a dog runs", "fast"]
    own = await direct(server.url, "/v1/embeddings", {"model": "tiny", "input": texts})
    own_one = await direct(server.url, "/v1/embeddings", {"model": "tiny", "input": "the cat"})
    async with running_router(backends=server.url, model="tiny", max_in_flight=2, cache_max_entries=0) as (url, _):
        async with openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0) as client:
            answer = await client.embeddings.create(model="tiny", input=texts, encoding_format="float")
            one = await client.embeddings.create(model="tiny", input="the cat")
    assert [d.embedding for d in answer.data] == [d["embedding"] for d in own["data"]]
    assert len(answer.data) == 3 and len(answer.data[0].embedding) == 64  # one pooled vector per input
    assert answer.usage.model_dump() == own["usage"] and answer.model == "tiny"
    # alone, its vector is the server's for it alone (a batch computes it a few ulps apart)
    assert one.data[0].embedding == own_one["data"][0]["embedding"]


def test_the_tiny_model_can_be_pooled(tmp_path: Path) -> None:
    import gguf

    reader = gguf.GGUFReader(str(write_tiny_llama(tmp_path / "m.gguf", pooling="mean")))
    field = reader.fields["llama.pooling_type"]
    assert int(field.parts[field.data[0]][0]) == int(gguf.PoolingType.MEAN)
