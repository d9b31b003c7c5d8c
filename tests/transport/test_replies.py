"""The gateway's reply router: at-least-once messages in, each chunk and result exactly once out."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from rxpipe.engines import CompletionRequest, CompletionResult, TokenChunk
from rxpipe.errors import BackendError, EngineError, EngineUnavailableError
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
from rxpipe.transport._codec import error_from_fields, error_payload
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


@pytest.mark.virtual
async def test_a_backends_error_crosses_the_wire_with_its_status_and_client_message() -> None:
    # one codec for every broker (a Redis entry's field and a NATS message carry the same payload)
    refused = BackendError("http://10.0.0.7:8001/v1 answered 422: prompt too long for http://10.0.0.7:8001/v1",
                           status=422, backend_status=422, client_message="prompt too long for (address removed)",
                           type="invalid_request_error", code="context_length_exceeded")
    auth = BackendError("http://b/v1 answered 401", status=502, backend_status=401,
                        client_message="the backend refused the gateway's credentials", type="backend_auth_error")
    loop = asyncio.get_running_loop()
    router = ReplyRouter(loop)
    r4, r5 = request(loop, "r4", stream=True), request(loop, "r5", stream=False)
    router.register(r4)
    router.register(r5)
    router.dispatch(decode_reply(error_message("r4", str(refused), unavailable=False, backend=refused)))  # type: ignore[arg-type]
    router.dispatch(decode_reply(error_message("r5", str(auth), unavailable=False, backend=auth)))  # type: ignore[arg-type]
    for reply, sent in ((r4.reply, refused), (r5.reply, auth)):
        with pytest.raises(BackendError) as info:
            await reply  # type: ignore[misc]
        got = info.value
        assert (str(got), got.status, got.backend_status, got.client_message, got.type, got.code, got.param) == (
            str(sent), sent.status, sent.backend_status, sent.client_message, sent.type, sent.code, sent.param)
    assert got.client_fault is False and refused.client_fault is True
    # a malformed backend part: the plain error it stands for, never a crash
    plain = orjson.loads(error_payload("x", "boom", unavailable=True, backend=None))
    plain["b"] = {"status": "not a number"}
    assert type(error_from_fields(plain)) is EngineUnavailableError and str(error_from_fields(plain)) == "boom"


class Control:
    """What the router tells the workers, recorded."""

    def __init__(self) -> None:
        self.cancels: list[str] = []
        self.credits: list[dict[str, int]] = []

    def cancel(self, request: CompletionRequest, since_loop_s: float) -> None:
        self.cancels.append(request.id)

    def credit(self, credits: dict[str, int]) -> None:
        self.credits.append(dict(credits))


@pytest.mark.virtual
async def test_a_missing_chunk_fails_the_stream_and_cancels_it_on_the_worker() -> None:
    loop = asyncio.get_running_loop()
    control = Control()
    router = ReplyRouter(loop, control)
    r = request(loop, "g", stream=True)
    router.register(r)
    router.dispatch(decode_reply(start_message("g")))  # type: ignore[arg-type]
    ts: TestSubscriber[TokenChunk] = TestSubscriber(initial_request=10)
    (await r.reply).tokens.subscribe(ts)
    router.dispatch(decode_reply(chunk_message("g", TokenChunk(0, " a", 1))))  # type: ignore[arg-type]
    router.dispatch(decode_reply(chunk_message("g", TokenChunk(2, " c", 1))))  # type: ignore[arg-type]
    assert [c.text for c in ts.values] == [" a"]
    assert isinstance(ts.error, EngineError) and "lost a chunk" in str(ts.error)
    assert (router.gaps, control.cancels, len(router)) == (1, ["g"], 0)


@pytest.mark.virtual
async def test_credit_is_cumulative_a_window_ahead_of_the_reader_resent_while_stalled_then_stalled() -> None:
    loop = asyncio.get_running_loop()
    control = Control()
    router = ReplyRouter(loop, control, credit_window=4, credit_resend_s=0.5, stall_timeout_s=2.0)
    r = request(loop, "c", stream=True)
    router.register(r)
    router.dispatch(decode_reply(start_message("c")))  # type: ignore[arg-type]
    ts: TestSubscriber[TokenChunk] = TestSubscriber(initial_request=0)
    (await r.reply).tokens.subscribe(ts)
    for i in range(4):  # the first window (4 chunks, sent with the request), the reader takes none
        router.dispatch(decode_reply(chunk_message("c", TokenChunk(i, f" w{i}", 1))))  # type: ignore[arg-type]
    await asyncio.sleep(0)
    assert control.credits == []  # nothing taken: the worker may not send more
    ts.request(2)  # the reader takes the 4 (coalesced into one chunk) and asks for one more
    await asyncio.sleep(0)
    assert [c.text for c in ts.values] == [" w0 w1 w2 w3"]
    assert control.credits == [{"c": 4 + 1 + 4}]  # taken + outstanding + window
    router.tick()
    router.tick()  # no progress since the last tick: the same cumulative credit again
    assert control.credits[-1] == {"c": 9} and len(control.credits) == 2
    for i in range(4, 9):  # the worker uses its credit: one chunk to the reader, four wait
        router.dispatch(decode_reply(chunk_message("c", TokenChunk(i, f" w{i}", 1))))  # type: ignore[arg-type]
    assert len(ts.values) == 2 and router.waiting["c"].pending_wire == 4
    for _ in range(6):  # the reader is gone quiet: 3 s past the stall timeout, with ticks
        await asyncio.sleep(0.5)
        router.tick()
    result = await (await r.reply).result
    assert result.finish_reason == "stalled" and control.cancels == ["c"] and len(router) == 0


@pytest.mark.virtual
async def test_a_finish_reason_crosses_the_wire_as_the_worker_gave_it_and_a_malformed_one_fails() -> None:
    loop = asyncio.get_running_loop()
    router = ReplyRouter(loop)
    reasons = {"deadline": "deadline", "filtered": "content_filter", "none": None, "number": 3}
    waiting = {rid: request(loop, rid, stream=False) for rid in reasons}
    for rid, r in waiting.items():
        router.register(r)
        fields = decode_reply(done_message(rid, RESULT))
        assert fields is not None
        fields["r"]["finish_reason"] = reasons[rid]
        router.dispatch(fields)
    assert (await (await waiting["deadline"].reply).result).finish_reason == "deadline"
    assert (await (await waiting["filtered"].reply).result).finish_reason == "content_filter"
    for rid in ("none", "number"):  # never a guessed "stop"
        with pytest.raises(EngineError, match="malformed"):
            await (await waiting[rid].reply).result
    assert len(router) == 0
