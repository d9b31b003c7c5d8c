"""Records of the engine API: CompletionRequest, TokenChunk, CompletionResult, Completion (DESIGN §4)."""

from __future__ import annotations

import asyncio
import dataclasses
import re
from typing import Any

import pytest

from rxpipe import ProtocolViolationError
from rxpipe.engines import (
    FINISH_REASONS,
    Completion,
    CompletionRequest,
    CompletionResult,
    EngineError,
    TokenChunk,
    estimate_tokens,
)
from rxpipe.errors import EngineUnavailableError, RxPipeError
from rxpipe.stage import InternalSubscriber
from rxpipe.testing import TestSubscriber

from .helpers import engine, req


def test_prompt_tokens_estimate_is_utf8_bytes_over_four_rounded_up() -> None:
    assert CompletionRequest(prompt="abcd").prompt_tokens == 1
    assert CompletionRequest(prompt="abcde").prompt_tokens == 2
    assert CompletionRequest(prompt="").prompt_tokens == 1
    assert CompletionRequest().prompt_tokens == 1
    assert CompletionRequest(prompt="é" * 4).prompt_tokens == 2  # 8 bytes
    assert estimate_tokens("x" * 400) == 100


def test_prompt_tokens_of_chat_messages_count_every_content() -> None:
    messages = [{"role": "system", "content": "abcd" * 3},
                {"role": "user", "content": [{"type": "text", "text": "abcd" * 2}, {"type": "text", "text": "ab"}]},
                {"role": "assistant", "content": None}]
    assert CompletionRequest(messages=messages).prompt_tokens == 6  # 22 bytes


def test_request_defaults_and_validation() -> None:
    r = CompletionRequest(prompt="hi")
    assert re.fullmatch(r"cmpl-[0-9a-f]{24}", r.id)
    assert r.id != CompletionRequest(prompt="hi").id
    assert (r.model, r.stream, r.sampling, r.max_tokens, r.reply, r.completion) == ("sim", False, {}, None, None, None)
    assert not r.cancelled and r.arrival_s is None and r.deadline_s is None
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="max_tokens"):
            CompletionRequest(prompt="hi", max_tokens=bad)  # type: ignore[arg-type]


def test_records_are_frozen_and_errors_are_rxpipe_errors() -> None:
    chunk = TokenChunk(0, " a", 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        chunk.text = "b"  # type: ignore[misc]
    result = CompletionResult("", "stop", 1, 0, 0.0, None, 0.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.text = "b"  # type: ignore[misc]
    assert issubclass(EngineUnavailableError, EngineError) and issubclass(EngineError, RxPipeError)
    # rxpipe's own, then the backend's (OpenAI's finish reasons beyond stop and length, passed on)
    assert FINISH_REASONS == ("stop", "length", "stalled", "cancelled", "deadline", "tool_calls", "function_call",
                              "content_filter")


@pytest.mark.virtual
async def test_cancel_before_admission_cancels_the_reply_and_is_idempotent(loop: asyncio.AbstractEventLoop) -> None:
    r = req(reply=loop.create_future())
    r.cancel()
    r.cancel()
    assert r.cancelled and r.reply is not None and r.reply.cancelled()


@pytest.mark.virtual
async def test_result_is_awaitable_and_the_token_stream_is_unicast() -> None:
    e = engine()
    c = e.submit(req(2, max_tokens=3))
    assert isinstance(c, Completion) and c.request.completion is c and not c.done
    first = TestSubscriber[TokenChunk](initial_request=10)
    c.tokens.subscribe(first)
    second = TestSubscriber[TokenChunk](initial_request=10)
    c.tokens.subscribe(second)
    assert isinstance(second.error, ProtocolViolationError)
    result = await c.result
    assert c.done and c.outcome is result and c.finish_reason == "length" and c.error is None
    assert [chunk.index for chunk in first.values] == [0, 1, 2] and first.completed
    assert "".join(chunk.text for chunk in first.values) == result.text
    assert (await c.result) is result  # awaiting again gives the same result
    await e.aclose()


@pytest.mark.virtual
async def test_subscribing_after_the_end_completes_at_once() -> None:
    e = engine()
    c = e.submit(req(1, max_tokens=2))
    result = await c.result
    ts = TestSubscriber[TokenChunk]()
    c.tokens.subscribe(ts)
    assert ts.values == [] and not ts.completed  # the text waits, coalesced into one chunk
    ts.request(5)
    assert ts.values == [TokenChunk(0, result.text, 2)] and ts.completed


@pytest.mark.virtual
async def test_a_finished_completion_with_nothing_pending_completes_without_demand() -> None:
    e = engine()
    c = e.submit(req(1, max_tokens=2, deadline_s=-1.0))  # past its deadline: finished at once, no tokens
    assert c.done and c.finish_reason == "deadline"
    ts = TestSubscriber[TokenChunk]()
    c.tokens.subscribe(ts)
    assert ts.values == [] and ts.completed


class _Owner:
    """A Completion's owner that records what the Completion calls back."""

    def __init__(self) -> None:
        self.cancelled = 0
        self.credit_grants = 0

    def cancel_completion(self, completion: Completion) -> None:
        self.cancelled += 1

    def credit_granted(self, completion: Completion) -> None:
        self.credit_grants += 1


class _GivesCreditBack(InternalSubscriber):
    """A token consumer that gives each chunk's credit back inside ``on_next`` (as the gateway's
    SSE writer does), with ``request(bad)`` after the chunk numbered ``bad_after``."""

    def __init__(self, bad_after: int = -1) -> None:
        self.values: list[TokenChunk] = []
        self.errors: list[BaseException] = []
        self.completed = 0
        self.bad_after = bad_after
        self.subscription: Any = None

    def on_subscribe(self, subscription: Any) -> None:
        self.subscription = subscription
        subscription.request(1)

    def on_next(self, chunk: TokenChunk) -> None:
        self.values.append(chunk)
        self.subscription.request(0 if chunk.index == self.bad_after else 1)

    def on_error(self, error: BaseException) -> None:
        self.errors.append(error)

    def on_complete(self) -> None:
        self.completed += 1


async def test_credit_given_back_inside_on_next_delivers_each_push_once_then_the_end_once() -> None:
    owner = _Owner()
    c = Completion(CompletionRequest(prompt="p", stream=True), owner, asyncio.get_running_loop())
    consumer = _GivesCreditBack()
    c.tokens.subscribe(consumer)
    for text in ("a", "b", "c"):
        c.push(text, 1)
    assert consumer.values == [TokenChunk(0, "a", 1), TokenChunk(1, "b", 1), TokenChunk(2, "c", 1)]
    assert c.credit == 1 and owner.credit_grants == 4 and not consumer.completed
    c.finish(CompletionResult("abc", "stop", 1, 3, 0.0, 0.0, 0.0))
    assert consumer.completed == 1 and consumer.errors == [] and len(consumer.values) == 3


async def test_a_bad_request_inside_on_next_is_signalled_after_it_returns() -> None:
    """Reactive Streams §3.9 through the token stream: ``request(0)`` from inside ``on_next``
    cancels the stream and signals ``on_error`` once ``on_next`` returned (§1.3), even though
    nothing is pending then."""
    owner = _Owner()
    c = Completion(CompletionRequest(prompt="p", stream=True), owner, asyncio.get_running_loop())
    consumer = _GivesCreditBack(bad_after=1)
    c.tokens.subscribe(consumer)
    for text in ("a", "b", "c"):
        c.push(text, 1)
    assert [chunk.text for chunk in consumer.values] == ["a", "b"]
    assert len(consumer.errors) == 1 and isinstance(consumer.errors[0], ValueError)
    assert "§3.9" in str(consumer.errors[0]) and owner.cancelled == 1 and c.cancel_requested
