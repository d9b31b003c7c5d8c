"""balance(retry_started=True): a stream whose replica fails after tokens reached the client goes on
on another replica, from the prompt plus the text sent: one stream, the whole answer, exactly."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from rxpipe import UNBOUNDED
from rxpipe import operators as ops
from rxpipe.engines import Completion, CompletionRequest, EngineUnavailableError, SimulatedEngine
from rxpipe.testing import TestPublisher, TestSubscriber

STEP = 1 / 64


def _engine() -> SimulatedEngine:
    return SimulatedEngine(max_num_seqs=4, max_num_batched_tokens=1024, step_overhead_s=STEP, prefill_s_per_token=0.0,
                           decode_s_per_seq=0.0, seed=7)


async def whole_answer(request: CompletionRequest) -> str:
    """What one healthy replica answers to the same request (greedy decoding: deterministic)."""
    engine = _engine()
    result = await engine.submit(CompletionRequest(prompt=request.prompt, messages=request.messages,
                                                   max_tokens=request.max_tokens,
                                                   sampling=dict(request.sampling))).result
    await engine.aclose()
    return result.text


async def streamed(request: CompletionRequest) -> tuple[TestSubscriber[Any], Completion]:
    completion: Completion = await request.reply  # type: ignore[misc]
    tokens = TestSubscriber[Any](initial_request=UNBOUNDED)
    completion.tokens.subscribe(tokens)
    return tokens, completion


@pytest.mark.virtual
@pytest.mark.parametrize("chat", [False, True])
async def test_a_stream_cut_mid_answer_continues_on_another_replica_with_no_repeated_or_missing_text(
        chat: bool) -> None:
    a, b = _engine(), _engine()
    loop = asyncio.get_running_loop()
    pub = TestPublisher[CompletionRequest]()
    out = TestSubscriber[Completion](initial_request=UNBOUNDED)
    pub.pipe(ops.balance(ops.execute(a), ops.execute(b), retry_started=True)).subscribe(out)
    prompt = {"messages": [{"role": "user", "content": "tell me about rivers"}]} if chat else {"prompt": "a story of"}
    requests = [CompletionRequest(**prompt, max_tokens=30, stream=True, sampling={"temperature": 0},  # type: ignore[arg-type]
                                  reply=loop.create_future(), id=f"r{i}") for i in range(4)]
    pub.emit(*requests)  # two on each replica
    streams = [await streamed(r) for r in requests]
    await asyncio.sleep(10.5 * STEP)  # about 10 tokens each
    sent_before = [c.generated_tokens for _, c in streams]
    assert all(0 < n < 30 for n in sent_before), sent_before
    a.down = True  # its two streams fail with EngineUnavailableError mid-answer: continued on b
    expected = await whole_answer(requests[0])
    for tokens, completion in streams:
        await tokens.await_done(5)
        result = await completion.result
        assert tokens.error is None and tokens.completed
        assert "".join(chunk.text for chunk in tokens.values) == expected == result.text
        assert sum(chunk.tokens for chunk in tokens.values) == 30 == result.completion_tokens
        assert result.finish_reason == "length"
    # the continued ones: the replica b got prompt + the text sent, and max_tokens less it
    assert b.finished == 2 + 2 and a.finished == 2
    out.cancel()
    await a.aclose()
    await b.aclose()


@pytest.mark.virtual
async def test_without_retry_started_or_another_replica_the_stream_ends_with_the_error() -> None:
    for retry_started, replicas in ((False, 2), (True, 1)):
        engines = [_engine() for _ in range(replicas)]
        loop = asyncio.get_running_loop()
        pub = TestPublisher[CompletionRequest]()
        out = TestSubscriber[Completion](initial_request=UNBOUNDED)
        pub.pipe(ops.balance(*(ops.execute(e) for e in engines), retry_started=retry_started)).subscribe(out)
        request = CompletionRequest(prompt="x y", max_tokens=30, stream=True, reply=loop.create_future())
        pub.emit(request)
        tokens, completion = await streamed(request)
        await asyncio.sleep(5.5 * STEP)
        for e in engines:
            e.down = True
        await tokens.await_done(5)
        assert isinstance(tokens.error, EngineUnavailableError) and 0 < len(tokens.values) < 30
        out.cancel()
        for e in engines:
            await e.aclose()
