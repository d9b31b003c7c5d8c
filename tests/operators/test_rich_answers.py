"""Answers that carry more than text through the serving stages (DESIGN §5, "Edge, third round"):
``balance``'s mid-stream failover never repeats or splits a tool call, continues a stream of text
with log probabilities; ``cache`` replays tool calls and log probabilities; a Completion delivers
each delta as one chunk of credit, in order with its text."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from rxpipe import UNBOUNDED
from rxpipe import operators as ops
from rxpipe.engines import Completion, CompletionRequest, CompletionResult, EngineUnavailableError
from rxpipe.serving import ALL_FEATURES, DeltaChunk, Engine, TokenChunk
from rxpipe.serving._answers import AnswerBuilder
from rxpipe.testing import TestPublisher, TestSubscriber

Piece = tuple[str, Any, Any]  # (text, delta, logprobs)


def lp(token: str, value: float) -> dict[str, Any]:
    return {"content": [{"token": token, "logprob": value, "bytes": None, "top_logprobs": []}]}


CALL = {"index": 0, "id": "call_0", "type": "function", "function": {"name": "f", "arguments": ""}}
TEXT_WITH_LOGPROBS: list[Piece] = [(" a", None, lp(" a", -0.1)), (" b", None, lp(" b", -0.2)),
                                   (" c", None, lp(" c", -0.3)), (" d", None, lp(" d", -0.4))]
TOOL_CALL: list[Piece] = [("", {"tool_calls": [CALL]}, None),
                          ("", {"tool_calls": [{"index": 0, "function": {"arguments": '{"x":'}}]}, None),
                          ("", {"tool_calls": [{"index": 0, "function": {"arguments": " 1}"}}]}, None)]


class Scripted(Engine):
    """Answers a prompt with its script of pieces, one per chunk of credit (all at once when not
    streamed); ``fail_after``: fails a stream (unavailable) after that many pieces."""

    features = ALL_FEATURES

    def __init__(self, scripts: dict[str, list[Piece]], fail_after: int | None = None) -> None:
        super().__init__(model="m", max_num_seqs=4)
        self.scripts = scripts
        self.fail_after = fail_after
        self.live: set[Completion] = set()
        self.requests: list[CompletionRequest] = []
        self.busy = False

    @property
    def running(self) -> int:
        return len(self.live)

    @property
    def waiting(self) -> int:
        return 0

    def start(self, completion: Completion, now_s: float) -> None:
        self.live.add(completion)
        self.requests.append(completion.request)
        completion.engine_state = {"next": 0, "whole": AnswerBuilder(), "text": []}
        self.pump(completion)

    def credit_granted(self, completion: Completion) -> None:
        self.pump(completion)

    def cancel_completion(self, completion: Completion) -> None:
        self.end(completion, "cancelled")

    def pump(self, completion: Completion) -> None:
        if self.busy:
            return
        self.busy = True
        try:
            state = completion.engine_state
            pieces = self.scripts[completion.request.prompt or ""]
            while not completion.done and (completion.credit or not completion.request.stream):
                if self.fail_after is not None and state["next"] == self.fail_after:
                    self.live.discard(completion)
                    completion.fail(EngineUnavailableError("the replica died"))
                    return
                if state["next"] == len(pieces):
                    break
                text, delta, logprobs = pieces[state["next"]]
                state["next"] += 1
                state["text"].append(text)
                if delta is not None:
                    state["whole"].add(delta)
                state["whole"].add_logprobs(logprobs)
                if completion.request.stream and (delta is not None or logprobs is not None):
                    completion.push_delta(text, 1, delta, logprobs)
                else:
                    completion.push(text, 1)
            if state["next"] == len(pieces) and not completion.done:
                self.end(completion, "stop")
        finally:
            self.busy = False

    def end(self, completion: Completion, reason: str) -> None:
        self.live.discard(completion)
        state = completion.engine_state
        text = "".join(state["text"])
        message = state["whole"].message(text)
        if reason == "stop" and message and "tool_calls" in message:
            reason = "tool_calls"
        completion.finish(CompletionResult(text, reason, 1, state["next"], 0.0, 0.0, 0.0, message,
                                           state["whole"].logprobs))
        self.notify_capacity()


def continued(prompt: str, pieces: list[Piece], sent: int) -> dict[str, list[Piece]]:
    """The scripts of a replica that continues ``prompt`` after ``sent`` pieces went out."""
    return {prompt + "".join(p[0] for p in pieces[:sent]): pieces[sent:]}


async def run(stage: Any, request: CompletionRequest) -> tuple[TestSubscriber[Any], Completion]:
    pub = TestPublisher[CompletionRequest]()
    pub.pipe(stage).subscribe(TestSubscriber[Completion](initial_request=UNBOUNDED))
    pub.emit(request)
    completion: Completion = await request.reply  # type: ignore[misc]
    tokens = TestSubscriber[Any](initial_request=UNBOUNDED)
    completion.tokens.subscribe(tokens)
    return tokens, completion


@pytest.mark.virtual
async def test_a_stream_of_text_with_logprobs_is_continued_and_its_logprobs_are_whole() -> None:
    a = Scripted({"p": TEXT_WITH_LOGPROBS}, fail_after=2)
    b = Scripted(continued("p", TEXT_WITH_LOGPROBS, 2))
    request = CompletionRequest(prompt="p", max_tokens=4, stream=True, reply=asyncio.get_running_loop().create_future())
    tokens, completion = await run(ops.balance(ops.execute(a), ops.execute(b), retry_started=True), request)
    result = await completion.result
    await tokens.await_done(1.0)
    assert [(c.text, c.logprobs) for c in tokens.values] == [(t, p) for t, _, p in TEXT_WITH_LOGPROBS]
    assert all(type(c) is DeltaChunk for c in tokens.values)
    assert result.text == " a b c d" and result.completion_tokens == 4
    assert result.logprobs == {"content": [e for _, _, p in TEXT_WITH_LOGPROBS for e in p["content"]]}
    assert [r.prompt for r in b.requests] == ["p a b"] and b.requests[0].max_tokens == 2


@pytest.mark.virtual
async def test_a_stream_that_sent_a_tool_call_fragment_fails_instead_of_continuing() -> None:
    a = Scripted({"p": TOOL_CALL}, fail_after=2)
    b = Scripted(continued("p", TOOL_CALL, 2))
    request = CompletionRequest(prompt="p", max_tokens=8, stream=True, reply=asyncio.get_running_loop().create_future())
    tokens, completion = await run(ops.balance(ops.execute(a), ops.execute(b), retry_started=True), request)
    with pytest.raises(EngineUnavailableError):
        await completion.result
    await tokens.await_done(1.0)
    assert [c.delta for c in tokens.values] == [d for _, d, _ in TOOL_CALL[:2]]
    assert isinstance(tokens.error, EngineUnavailableError) and b.requests == []  # never sent again


@pytest.mark.virtual
async def test_the_cache_replays_a_tool_call_answer_whole_and_as_deltas() -> None:
    engine = Scripted({"p": [(" ok", None, None), *TOOL_CALL]})
    loop = asyncio.get_running_loop()
    pub = TestPublisher[CompletionRequest]()
    pub.pipe(ops.cache(8, 60.0), ops.execute(engine)).subscribe(TestSubscriber[Completion](initial_request=UNBOUNDED))
    first = CompletionRequest(prompt="p", max_tokens=8, sampling={"temperature": 0, "tools": ["t"]},
                              reply=loop.create_future())
    pub.emit(first)
    whole = await (await first.reply).result  # type: ignore[misc]
    assert whole.finish_reason == "tool_calls" and whole.message == {
        "tool_calls": [{"id": "call_0", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}]}
    hits = [CompletionRequest(prompt="p", max_tokens=8, sampling={"temperature": 0, "tools": ["t"]}, stream=stream,
                              reply=loop.create_future()) for stream in (False, True)]
    other = CompletionRequest(prompt="p", max_tokens=8, sampling={"temperature": 0, "tools": ["u"]},
                              reply=loop.create_future())
    pub.emit(*hits, other)
    plain = await (await hits[0].reply).result  # type: ignore[misc]
    assert (plain.text, plain.message, plain.finish_reason) == (whole.text, whole.message, "tool_calls")
    streamed = await hits[1].reply  # type: ignore[misc]
    tokens = TestSubscriber[Any](initial_request=UNBOUNDED)
    streamed.tokens.subscribe(tokens)
    await tokens.await_done(1.0)
    assert [(c.text, c.delta) for c in tokens.values] == [
        (" ok", None), ("", {"tool_calls": [{"index": 0, **whole.message["tool_calls"][0]}]})]
    await (await other.reply).result  # type: ignore[misc]
    assert [r.cache for r in (first, *hits, other)] == ["miss", "hit", "hit", "miss"]
    assert len(engine.requests) == 2  # another tool list is another key


@pytest.mark.virtual
async def test_a_delta_is_one_chunk_of_credit_in_order_with_the_text_around_it() -> None:
    engine = Scripted({"p": []})
    loop = asyncio.get_running_loop()
    completion = Completion(CompletionRequest(prompt="p", stream=True), engine, loop)
    tokens = TestSubscriber[Any](initial_request=0)
    completion.tokens.subscribe(tokens)
    completion.push(" a", 1)
    completion.push(" b", 1)  # coalesced with " a": no credit yet
    completion.push_delta("", 1, {"refusal": "no"})
    completion.push_delta(" c", 1, None, lp(" c", -1.0))
    completion.push(" d", 1)
    completion.finish(CompletionResult(" a b c d", "stop", 1, 5, 0.0, 0.0, 0.0))
    tokens.request(1)
    assert tokens.values == [TokenChunk(0, " a b", 2)]
    tokens.request(2)
    assert tokens.values[1:] == [DeltaChunk(1, "", 1, {"refusal": "no"}), DeltaChunk(2, " c", 1, None, lp(" c", -1.0))]
    assert not tokens.completed
    tokens.request(1)
    assert tokens.values[3] == TokenChunk(3, " d", 1) and tokens.completed
    assert completion.generated_tokens == 5
    assert tokens.values[0].delta is None and tokens.values[0].logprobs is None
