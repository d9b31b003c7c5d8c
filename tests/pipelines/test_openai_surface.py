"""The whole OpenAI surface through the front (DESIGN §5, "Edge, third round"): the official
``openai`` SDK (sync, async, streaming) against ``pipelines/llm_router.py`` in front of the stub
backend (a real HTTP server in a subprocess): tool calls split over several deltas, parallel tool
calls, a multi-turn tool conversation, log probabilities with ``top_logprobs``, reasoning before
content, a refusal, the backend's usage and system fingerprint, requests forwarded as sent,
embeddings, the Responses API, the models list; the cache and mid-stream failover with tool
calls; a slow reader still stalls the backend; usage without a backend's usage."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import openai
import orjson
import pytest

from rxpipe.engines.openai import wire_request_id
from tests.engines import openai_stub_answers as answers
from tests.engines.openai_stub_server import StubServer

from .router_helpers import running_router

pytestmark = pytest.mark.loops("uvloop")

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "the weather in a city",
                                             "parameters": {"type": "object", "properties": {
                                                 "city": {"type": "string"}, "days": {"type": "integer"}},
                                                 "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time",
                                         "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}}}}
ASK = [{"role": "user", "content": "What is the weather in Paris, and the time there?"}]
#: the stub's usage of an answer of n chunks (as it sends it: with its details)
PROMPT_TOKENS = 3


def stub_usage(n: int) -> dict[str, Any]:
    return {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": n, "total_tokens": PROMPT_TOKENS + n,
            "completion_tokens_details": {"reasoning_tokens": 0}}


def router(stub: StubServer, **config: Any) -> Any:
    return running_router(backends=stub.url, model="m", max_in_flight=4, **{"cache_max_entries": 0, **config})


def expected_tool_plan(tools: list[dict[str, Any]], **body: Any) -> answers.Plan:
    plan = answers.plan({"messages": ASK, "tools": tools, **body}, True, [])
    assert plan is not None
    return plan


async def sse_events(url: str, path: str, body: dict[str, Any]) -> tuple[int, dict[str, str], list[bytes]]:
    """The raw SSE lines (``event:`` and ``data:``) of a streamed answer."""
    async with aiohttp.ClientSession() as http, http.post(url + path, json=body) as response:
        raw = await response.read()
        return response.status, dict(response.headers), [line for line in raw.split(b"\n") if line]


# -- tool calls ------------------------------------------------------------------------------------
async def test_parallel_tool_calls_reach_the_sync_client_whole_with_usage_and_fingerprint(stub: StubServer) -> None:
    async with router(stub) as (url, _):
        def call() -> Any:
            with openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0) as client:
                return client.chat.completions.create(model="m", messages=ASK, tools=[WEATHER, TIME])  # type: ignore

        answer = await asyncio.to_thread(call)
    plan = expected_tool_plan([WEATHER, TIME])
    [choice] = answer.choices
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    assert [c.model_dump() for c in choice.message.tool_calls] == [
        {"id": "call_0", "type": "function", "function": {"name": "get_weather",
                                                          "arguments": '{"city": "city-1", "days": 1}'}},
        {"id": "call_1", "type": "function", "function": {"name": "get_time", "arguments": '{"zone": "zone-1"}'}}]
    assert [c.model_dump() for c in choice.message.tool_calls] == plan.message["tool_calls"]
    assert answer.usage.model_dump(exclude_none=True) == stub_usage(len(plan.chunks))  # the backend's, unchanged
    assert answer.system_fingerprint == "fp_stub"
    [seen] = stub.state()["bodies"]
    # the front keeps its own id and model; the backend saw the tools as sent
    assert answer.id.startswith("chatcmpl-") and wire_request_id(answer.id) == seen["id"] and answer.model == "m"
    assert seen["body"]["tools"] == [WEATHER, TIME] and seen["body"]["messages"] == ASK


async def test_streamed_tool_calls_are_the_backends_deltas_one_for_one(stub: StubServer) -> None:
    plan = expected_tool_plan([WEATHER, TIME])
    async with router(stub) as (url, _):
        status, headers, lines = await sse_events(url, "/v1/chat/completions", {
            "model": "m", "messages": ASK, "tools": [WEATHER, TIME], "stream": True,
            "stream_options": {"include_usage": True}})
        async with openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0) as client:
            stream = await client.chat.completions.create(model="m", messages=ASK, tools=[WEATHER, TIME],  # type: ignore
                                                          stream=True)
            sdk_chunks = [chunk async for chunk in stream]
    assert status == 200 and lines[-1] == b"data: [DONE]"
    events = [orjson.loads(line[6:]) for line in lines[:-1]]
    assert {e["id"] for e in events} == {events[0]["id"]} and events[0]["id"].startswith("chatcmpl-")
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    deltas = [e["choices"][0]["delta"] for e in events[1:-2]]
    assert deltas == [delta for delta, _ in plan.chunks]  # every fragment as the backend sent it, in order
    assert len(deltas) == 12 and sum(len(d["tool_calls"]) for d in deltas) == 12
    final, usage = events[-2], events[-1]
    assert final["choices"] == [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": "tool_calls"}]
    assert final["system_fingerprint"] == usage["system_fingerprint"] == "fp_stub"
    assert usage["choices"] == [] and usage["usage"] == stub_usage(12)
    # the SDK folds them into the same two calls
    calls: dict[int, dict[str, Any]] = {}
    for chunk in sdk_chunks:
        for fragment in chunk.choices[0].delta.tool_calls or () if chunk.choices else ():
            call = calls.setdefault(fragment.index, {"id": None, "name": "", "arguments": ""})
            call["id"] = fragment.id or call["id"]
            call["name"] += fragment.function.name or ""
            call["arguments"] += fragment.function.arguments or ""
    assert [(c["id"], c["name"], c["arguments"]) for c in calls.values()] == [
        (t["id"], t["function"]["name"], t["function"]["arguments"]) for t in plan.message["tool_calls"]]
    assert sdk_chunks[-1].choices[0].finish_reason == "tool_calls"


async def test_a_legacy_function_call_streamed_and_not(stub: StubServer) -> None:
    functions = [WEATHER["function"]]
    plan = answers.plan({"messages": ASK, "functions": functions}, True, [])
    assert plan is not None and plan.finish == "function_call"
    async with router(stub) as (url, _):
        async with openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0) as client:
            whole = await client.chat.completions.create(model="m", messages=ASK,  # type: ignore
                                                         functions=functions, function_call={"name": "get_weather"})
        status, _, lines = await sse_events(url, "/v1/chat/completions", {
            "model": "m", "messages": ASK, "functions": functions, "stream": True})
    [choice] = whole.choices
    assert choice.finish_reason == "function_call" and choice.message.content is None
    assert choice.message.function_call.model_dump() == {"name": "get_weather",
                                                         "arguments": '{"city": "city-1", "days": 1}'}
    assert stub.state()["bodies"][0]["body"]["function_call"] == {"name": "get_weather"}  # forwarded as sent
    assert status == 200 and lines[-1] == b"data: [DONE]"
    events = [orjson.loads(line[6:]) for line in lines[:-1]]
    deltas = [e["choices"][0]["delta"] for e in events[1:-1]]
    assert deltas == [delta for delta, _ in plan.chunks] and len(deltas) == 7  # the name, six argument fragments
    assert "".join(d["function_call"]["arguments"] for d in deltas) == '{"city": "city-1", "days": 1}'
    assert events[-1]["choices"][0]["finish_reason"] == "function_call"


async def test_a_multi_turn_tool_conversation_round_trips_unchanged(stub: StubServer) -> None:
    async with router(stub) as (url, _):
        async with openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0) as client:
            first = await client.chat.completions.create(model="m", messages=ASK, tools=[WEATHER, TIME])  # type: ignore
            calls = first.choices[0].message.tool_calls
            messages: list[dict[str, Any]] = [*ASK, first.choices[0].message.model_dump(exclude_none=True)]
            messages += [{"role": "tool", "tool_call_id": c.id, "content": f"result of {c.function.name}"}
                         for c in calls]
            second = await client.chat.completions.create(model="m", messages=messages, tools=[WEATHER, TIME])  # type: ignore
            streamed = await client.chat.completions.create(model="m", messages=messages, tools=[WEATHER, TIME],  # type: ignore
                                                            stream=True)
            text = "".join([c.choices[0].delta.content or "" async for c in streamed if c.choices])
    assert messages[1] == {"role": "assistant", "tool_calls": [  # the SDK's dump of the answer (content null: left out)
        {"id": "call_0", "type": "function", "function": {"name": "get_weather",
                                                          "arguments": '{"city": "city-1", "days": 1}'}},
        {"id": "call_1", "type": "function", "function": {"name": "get_time", "arguments": '{"zone": "zone-1"}'}}]}
    assert second.choices[0].message.content == text == " the tool said result of get_time"
    assert second.choices[0].finish_reason == "stop" and second.choices[0].message.tool_calls is None
    bodies = stub.state()["bodies"]
    assert [b["body"]["messages"] for b in bodies] == [ASK, messages, messages]  # the history, as the client sent it


async def test_parallel_tool_calls_false_and_a_forced_tool_choice_are_forwarded(stub: StubServer) -> None:
    async with router(stub) as (url, _):
        async with openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0) as client:
            answer = await client.chat.completions.create(
                model="m", messages=ASK, tools=[WEATHER, TIME], parallel_tool_calls=False,  # type: ignore
                tool_choice={"type": "function", "function": {"name": "get_weather"}})
    assert [c.function.name for c in answer.choices[0].message.tool_calls] == ["get_weather"]
    body = stub.state()["bodies"][0]["body"]
    assert body["parallel_tool_calls"] is False
    assert body["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}


# -- logprobs, reasoning, refusal --------------------------------------------------------------------
async def test_chat_logprobs_with_top_logprobs_streamed_and_not(stub: StubServer) -> None:
    tokens = [" t0", " t1", " t2", " t3", " t4"]
    plan = answers.plan({"messages": ASK, "logprobs": True, "top_logprobs": 3}, True, tokens)
    assert plan is not None
    async with router(stub) as (url, _):
        async with openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0) as client:
            whole = await client.chat.completions.create(model="m", messages=ASK, max_tokens=5, logprobs=True,  # type: ignore
                                                         top_logprobs=3)
            stream = await client.chat.completions.create(model="m", messages=ASK, max_tokens=5, logprobs=True,  # type: ignore
                                                          top_logprobs=3, stream=True)
            chunks = [c async for c in stream]
    content = whole.choices[0].logprobs.content
    assert [e.model_dump() for e in content] == plan.logprobs["content"]
    assert [t.token for t in content[2].top_logprobs] == [" t2", " alt0", " alt1"]
    assert whole.choices[0].message.content == "".join(tokens)
    streamed = [c for c in chunks if c.choices and c.choices[0].logprobs is not None]
    assert [(c.choices[0].delta.content, [e.model_dump() for e in c.choices[0].logprobs.content])
            for c in streamed] == [(t, [e]) for t, e in zip(tokens, plan.logprobs["content"], strict=True)]


async def test_completions_logprobs_streamed_and_not(stub: StubServer) -> None:
    tokens = [" t0", " t1", " t2"]
    plan = answers.plan({"prompt": "p", "logprobs": 2}, False, tokens)
    assert plan is not None
    async with router(stub) as (url, _):
        async with openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0) as client:
            whole = await client.completions.create(model="m", prompt="p", max_tokens=3, logprobs=2)
            stream = await client.completions.create(model="m", prompt="p", max_tokens=3, logprobs=2, stream=True)
            chunks = [c async for c in stream]
    assert whole.choices[0].logprobs.model_dump() == plan.logprobs and whole.choices[0].text == " t0 t1 t2"
    assert [(c.choices[0].text, c.choices[0].logprobs.model_dump()) for c in chunks
            if c.choices and c.choices[0].logprobs is not None] == [
        (t, answers._completion_logprobs([e])) for t, e in zip(
            tokens, [answers._token_logprob(t, i, 2) for i, t in enumerate(tokens)], strict=True)]


async def test_reasoning_deltas_come_before_the_content_and_the_whole_answer_has_them(stub: StubServer) -> None:
    think = [{"role": "user", "content": "[reason] what is 2+2?"}]
    async with router(stub) as (url, _):
        async with openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0) as client:
            stream = await client.chat.completions.create(model="m", messages=think, max_tokens=2, stream=True)  # type: ignore
            pieces = [(getattr(c.choices[0].delta, "reasoning_content", None), c.choices[0].delta.content)
                      async for c in stream if c.choices]
            whole = await client.chat.completions.create(model="m", messages=think, max_tokens=2)  # type: ignore
    assert pieces == [(None, ""), ("thinking", None), (" about", None), (" it", None), (None, " t0"),
                      (None, " t1"), (None, None)]
    message = whole.choices[0].message
    assert (message.content, message.reasoning_content) == (" t0 t1", "thinking about it")


async def test_a_refusal_streamed_and_not(stub: StubServer) -> None:
    refuse = [{"role": "user", "content": "[refuse] something bad"}]
    async with router(stub) as (url, _):
        async with openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0) as client:
            whole = await client.chat.completions.create(model="m", messages=refuse)  # type: ignore
            stream = await client.chat.completions.create(model="m", messages=refuse, stream=True)  # type: ignore
            refusal = [c.choices[0].delta.refusal async for c in stream if c.choices and c.choices[0].delta.refusal]
    assert (whole.choices[0].message.content, whole.choices[0].message.refusal) == (None, "I can't help with that")
    assert refusal == answers.REFUSAL and whole.choices[0].finish_reason == "stop"


# -- requests as sent --------------------------------------------------------------------------------
async def test_content_parts_vendor_fields_and_max_completion_tokens_are_forwarded_as_sent(stub: StubServer) -> None:
    messages = [{"role": "developer", "content": "be brief", "name": "policy"},
                {"role": "user", "content": [
                    {"type": "text", "text": "what is in it?"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=", "detail": "low"}},
                    {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
                    {"type": "file", "file": {"file_data": "JVBERi0=", "filename": "a.pdf"}}]}]
    vendor = {"min_p": 0.05, "chat_template_kwargs": {"enable_thinking": False}, "guided_choice": ["a", "b"]}
    async with router(stub) as (url, _):
        async with openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0) as client:
            answer = await client.chat.completions.create(
                model="m", messages=messages, max_completion_tokens=3, seed=7, top_p=0.9, user="u-1",  # type: ignore
                metadata={"k": "v"}, extra_body=vendor)
    assert answer.choices[0].message.content == " t0 t1 t2"
    [seen] = stub.state()["bodies"]
    body = seen["body"]
    assert body == {"model": "m", "messages": messages, "max_completion_tokens": 3, "seed": 7, "top_p": 0.9,
                    "user": "u-1", "metadata": {"k": "v"}, **vendor, "stream": False}


async def test_the_client_stream_options_are_kept_and_usage_is_asked_for(stub: StubServer) -> None:
    async with router(stub) as (url, _):
        status, _, lines = await sse_events(url, "/v1/completions", {
            "model": "m", "prompt": "p", "max_tokens": 2, "stream": True,
            "stream_options": {"continuous_usage_stats": False}})
    assert status == 200 and b'"usage"' not in b"".join(lines)  # the client asked for none
    assert stub.state()["bodies"][0]["body"]["stream_options"] == {"continuous_usage_stats": False,
                                                                   "include_usage": True}


# -- embeddings, Responses, models -------------------------------------------------------------------
async def test_embeddings_are_admitted_routed_and_a_list_input_is_one_backend_call(stub: StubServer) -> None:
    texts = ["the cat", "sat on", "the mat"]
    async with router(stub) as (url, _):
        async with openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0) as client:
            floats = await client.embeddings.create(model="m", input=texts, encoding_format="float", dimensions=6)
            one = await client.embeddings.create(model="m", input="alone")  # the SDK asks for base64
        async with aiohttp.ClientSession() as http, http.post(url + "/v1/embeddings", json={
                "model": "m", "input": [[1, 2, 3]], "encoding_format": "base64"}) as response:
            raw = await response.json()
    expected = answers.embeddings_answer({"input": texts, "dimensions": 6})
    assert [d.embedding for d in floats.data] == [d["embedding"] for d in expected["data"]]
    assert [d.index for d in floats.data] == [0, 1, 2] and floats.model == "m"
    assert floats.usage.model_dump() == expected["usage"]
    assert one.data[0].embedding == pytest.approx(answers.embedding("alone", 4), abs=1e-6)
    assert raw["data"] == answers.embeddings_answer({"input": [[1, 2, 3]], "encoding_format": "base64"})["data"]
    bodies = [b for b in stub.state()["bodies"] if b["path"] == "/v1/embeddings"]
    assert [b["body"]["input"] for b in bodies] == [texts, "alone", [[1, 2, 3]]]  # one call each, batched as sent
    assert bodies[0]["body"] == {"model": "m", "input": texts, "encoding_format": "float", "dimensions": 6}


async def test_responses_whole_and_streamed_events_in_order(stub: StubServer) -> None:
    body = {"model": "m", "input": "hi", "max_output_tokens": 3, "instructions": "be brief"}
    words = [" w0", " w1", " w2"]
    async with router(stub) as (url, _):
        async with openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0) as client:
            whole = await client.responses.create(model="m", input="hi", max_output_tokens=3,
                                                  instructions="be brief")
            stream = await client.responses.create(model="m", input="hi", max_output_tokens=3, stream=True)
            sdk_events = [e async for e in stream]
        status, headers, lines = await sse_events(url, "/v1/responses", {**body, "stream": True})
    assert whole.output_text == "".join(words) and whole.id == "resp_stub1"
    assert (whole.usage.input_tokens, whole.usage.output_tokens) == (5, 3)
    expected = answers.response_events({**body, "stream": True}, words)
    assert [e.type for e in sdk_events] == [e["type"] for e in expected]
    assert [e.sequence_number for e in sdk_events] == list(range(len(expected)))
    assert status == 200 and headers["Content-Type"] == "text/event-stream"
    pairs = list(zip(lines[::2], lines[1::2], strict=True))
    assert [(name, orjson.loads(data[6:])) for name, data in pairs] == [
        (f"event: {e['type']}".encode(), e) for e in expected]
    assert stub.state()["bodies"][0]["body"] == {**body, "stream": False}


async def test_models_lists_the_served_model(stub: StubServer) -> None:
    async with router(stub) as (url, _):
        async with openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0) as client:
            models = [m.id async for m in client.models.list()]
            assert (await client.models.retrieve("m")).id == "m"
    assert models == ["m"]


# -- the cache, failover, credit ---------------------------------------------------------------------
async def test_a_cached_tool_call_answer_is_replayed_whole_and_as_deltas(stub: StubServer) -> None:
    request = {"model": "m", "messages": ASK, "tools": [WEATHER, TIME], "temperature": 0}
    async with router(stub, cache_max_entries=16) as (url, _):
        async with aiohttp.ClientSession() as http:
            async with http.post(url + "/v1/chat/completions", json=request) as miss:
                first = await miss.json()
            async with http.post(url + "/v1/chat/completions", json=request) as hit:
                again = await hit.json()
        status, headers, lines = await sse_events(url, "/v1/chat/completions", {**request, "stream": True})
        # a different tool list is another request: the key covers every forwarded field
        async with aiohttp.ClientSession() as http, http.post(url + "/v1/chat/completions", json={
                **request, "tools": [WEATHER]}) as other:
            assert other.headers["x-rxpipe-cache"] == "miss"
    assert (miss.headers["x-rxpipe-cache"], hit.headers["x-rxpipe-cache"], headers["x-rxpipe-cache"]) == (
        "miss", "hit", "hit")
    assert again["choices"] == first["choices"] and again["usage"] == first["usage"] == stub_usage(12)
    assert first["choices"][0]["message"]["tool_calls"] == expected_tool_plan([WEATHER, TIME]).message["tool_calls"]
    events = [orjson.loads(line[6:]) for line in lines[:-1]]
    assert [e["choices"][0]["delta"] for e in events[1:-1]] == [
        {"tool_calls": [{"index": i, **call}]} for i, call in enumerate(first["choices"][0]["message"]["tool_calls"])]
    assert events[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert len([b for b in stub.state()["bodies"]]) == 2


async def test_a_stream_that_sent_tool_call_deltas_ends_with_an_error_not_a_repeat(tmp_path: Path) -> None:
    pair = []
    for name in ("a", "b"):  # both cut a stream after 3 chunks: whichever gets it breaks mid-tool-call
        (tmp_path / name).mkdir()
        pair.append(StubServer(tmp_path / name, "--cut-after", "3"))
    try:
        async with running_router(backends=f"{pair[0].url},{pair[1].url}", model="m", max_in_flight=1,
                                  cache_max_entries=0) as (url, _):
            status, _, lines = await sse_events(url, "/v1/chat/completions", {
                "model": "m", "messages": ASK, "tools": [WEATHER], "stream": True})
        calls = [len(server.state()["bodies"]) for server in pair]
    finally:
        for server in pair:
            server.stop()
    assert status == 200 and lines[-1] == b"data: [DONE]"
    events = [orjson.loads(line[6:]) for line in lines[:-1]]
    plan = expected_tool_plan([WEATHER])
    assert [e["choices"][0]["delta"] for e in events[1:4]] == [delta for delta, _ in plan.chunks[:3]]
    assert events[4] == {"error": {"message": "the model backend sent a broken or malformed answer",
                                   "type": "server_error", "code": "backend_error", "param": None}}
    assert len(events) == 5
    # one backend call: no continuation on the other (it would repeat or split the tool call)
    assert sorted(calls) == [0, 1]


async def test_a_slow_reader_of_a_logprobs_stream_still_stalls_the_backend(stub: StubServer) -> None:
    total = 2000
    stub.control(tokens=total, token_bytes=16384)  # 32 MiB of SSE: beyond every buffer on the way
    async with router(stub) as (url, _):
        reader, writer = await asyncio.open_connection("127.0.0.1", int(url.rsplit(":", 1)[1]))
        body = json.dumps({"model": "m", "prompt": "big", "logprobs": 1, "stream": True}).encode()
        writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%b" % (len(body), body))
        await writer.drain()
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
        await reader.read(4096)  # then the client stops reading

        def written() -> int:
            return int(next(iter(stub.state()["written"].values()), 0))

        # the buffers on the way fill, then the backend blocks: wait until it has written nothing
        # for a whole second (a loaded machine may pause a writer that is not blocked for a while,
        # so "stopped" is judged over a second, not one sample)
        last, still_since = -1, asyncio.get_running_loop().time()
        while asyncio.get_running_loop().time() - still_since < 1.0:
            await asyncio.sleep(0.1)
            if (now := written()) != last:
                last, still_since = now, asyncio.get_running_loop().time()
        assert last < total // 4  # blocked by the reader, far from the end
        await asyncio.sleep(0.5)
        assert written() < total // 4  # and it stays blocked
        writer.close()
        await writer.wait_closed()
    [disconnect] = stub.state()["disconnects"]
    assert disconnect["written"] == written() < total // 4


async def test_without_any_usage_from_the_backend_streamed_and_not_count_the_same(stub: StubServer) -> None:
    stub.control(json_usage=0, stream_usage=0)
    async with router(stub) as (url, engines):
        async with openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0) as client:
            for prompt, n in (("a short prompt", 12), ("another, longer prompt of the same kind", 9)):
                stream = await client.completions.create(model="m", prompt=prompt, max_tokens=n, stream=True,
                                                         stream_options={"include_usage": True})
                usage = [c.usage async for c in stream if c.usage is not None]
                whole = await client.completions.create(model="m", prompt=prompt, max_tokens=n)
                assert [u.model_dump() for u in usage] == [whole.usage.model_dump()], (prompt, n)
                text = "".join(f" t{i}" for i in range(n))
                assert whole.usage.completion_tokens == -(-len(text) // 4)  # the estimate, both ways
        assert engines[0].usage_probes == 1  # asked once: the backend says no usage at all, so no more
