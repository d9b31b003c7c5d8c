"""The gateway's reply router: at-least-once messages in, each chunk and result exactly once out."""

from __future__ import annotations

import asyncio

import pytest

from rxpipe.engines import CompletionRequest, CompletionResult, TokenChunk
from rxpipe.errors import EngineError, EngineUnavailableError
from rxpipe.redis._codec import (
    chunk_message,
    decode_reply,
    decode_request,
    done_message,
    encode_request,
    error_message,
    start_message,
)
from rxpipe.testing import TestSubscriber
from rxpipe.transport._replies import ReplyRouter

RESULT = CompletionResult(" a b c", "length", 2, 3, 0.5, 0.6, 0.9)


def messages(rid: str, words: list[str]) -> list[dict]:
    out = [decode_reply(start_message(rid))]
    out += [decode_reply(chunk_message(rid, TokenChunk(i, w, 1))) for i, w in enumerate(words)]
    out.append(decode_reply(done_message(rid, CompletionResult("".join(words), "length", 2, len(words),
                                                              0.5, 0.6, 0.9))))
    return out  # type: ignore[return-value]


def request(loop: asyncio.AbstractEventLoop, rid: str, *, stream: bool) -> CompletionRequest:
    r = CompletionRequest(prompt="p", id=rid, stream=stream, max_tokens=3)
    r.reply = loop.create_future()
    r.arrival_s = loop.time()
    return r


@pytest.mark.virtual
async def test_a_second_attempt_after_a_crash_delivers_only_the_missing_chunks() -> None:
    loop = asyncio.get_running_loop()
    router = ReplyRouter(loop)
    r = request(loop, "r1", stream=True)
    router.register(r)
    first = messages("r1", [" a", " b", " c"])
    router.dispatch(first[0])
    completion = await r.reply
    ts: TestSubscriber[TokenChunk] = TestSubscriber(initial_request=100)
    completion.tokens.subscribe(ts)
    for message in first[1:3]:  # chunks 0 and 1, then the worker died
        router.dispatch(message)
    await asyncio.sleep(1.0)
    for message in messages("r1", [" x", " y", " c"]):  # another worker runs it again from the start
        router.dispatch(message)
    assert [c.text for c in ts.values] == [" a", " b", " c"] and ts.completed
    result = await completion.result
    assert (result.finish_reason, result.completion_tokens) == ("length", 3)
    assert result.queue_time_s == 0.0 and result.e2e_s == 1.0 and result.ttft_s == 0.0
    assert router.duplicates == 3 and router.strays == 0 and len(router) == 0
    router.dispatch(first[3])  # the first attempt's late done: the request is finished
    assert router.strays == 1


@pytest.mark.virtual
async def test_a_non_streaming_result_and_errors_reach_the_waiting_reply() -> None:
    loop = asyncio.get_running_loop()
    router = ReplyRouter(loop)
    ok, failed, down = (request(loop, rid, stream=False) for rid in ("ok", "failed", "down"))
    for r in (ok, failed, down):
        router.register(r)
    router.dispatch(decode_reply(start_message("ok")))  # type: ignore[arg-type]
    router.dispatch(decode_reply(done_message("ok", RESULT)))  # type: ignore[arg-type]
    router.dispatch(decode_reply(error_message("failed", "bad prompt", unavailable=False)))  # type: ignore[arg-type]
    router.dispatch(decode_reply(error_message("down", "backend down", unavailable=True)))  # type: ignore[arg-type]
    assert (await (await ok.reply).result).text == " a b c"
    with pytest.raises(EngineError, match="bad prompt") as failure:
        await failed.reply
    assert not isinstance(failure.value, EngineUnavailableError)
    with pytest.raises(EngineUnavailableError, match="backend down"):
        await down.reply
    assert len(router) == 0


@pytest.mark.virtual
async def test_a_client_that_left_is_forgotten() -> None:
    loop = asyncio.get_running_loop()
    router = ReplyRouter(loop)
    queued, running = request(loop, "q", stream=False), request(loop, "r", stream=True)
    router.register(queued)
    router.register(running)
    router.dispatch(decode_reply(start_message("r")))  # type: ignore[arg-type]
    queued.cancel()
    running.cancel()
    await asyncio.sleep(0)
    assert len(router) == 0
    assert (await running.completion.result).finish_reason == "cancelled"  # type: ignore[union-attr]
    router.dispatch(decode_reply(done_message("r", RESULT)))  # type: ignore[arg-type]
    assert router.strays == 1


def test_a_request_survives_the_wire() -> None:
    r = CompletionRequest(messages=[{"role": "user", "content": "hi"}], max_tokens=7, stream=True,
                          sampling={"temperature": 0.5, "stop": ["\n"]}, api_key_id="key_0", id="chatcmpl-1")
    r.deadline_s = 110.0
    data = decode_request(encode_request(r, "rxpipe:requests:replies:g1", now_loop_s=100.0))
    assert data == {
        "id": "chatcmpl-1", "prompt": None, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 7,
        "max_tokens_defaulted": False, "model": "sim", "stream": True,
        "sampling": {"temperature": 0.5, "stop": ["\n"]}, "api_key_id": "key_0",
        "reply_to": "rxpipe:requests:replies:g1", "budget_s": 10.0, "credit": None}  # the deadline as time left
    with pytest.raises(ValueError):
        decode_request({b"other": b"{}"})
    assert decode_reply({b"hello": b"gateway"}) is None
