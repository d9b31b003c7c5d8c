"""``OpenAIEngine`` against a real OpenAI-compatible HTTP server in a subprocess (real time)."""

from __future__ import annotations

import asyncio
import math
import random
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

import rxpipe as rx
from rxpipe import UNBOUNDED, CircuitBreaker
from rxpipe import operators as ops
from rxpipe.engines import (
    BackendError,
    Completion,
    CompletionRequest,
    EngineError,
    EngineUnavailableError,
    OpenAIEngine,
    TokenChunk,
    parse_retry_after,
)
from rxpipe.engines.openai import wire_request_id
from rxpipe.errors import UnsupportedRequestError
from rxpipe.testing import TestSubscriber

from .openai_stub_server import StubServer
from .openai_support import disconnect_of, make, submit, wait_for


# -- construction and parsing ----------------------------------------------------------------------
def test_constructor_validates_its_bounds() -> None:
    with pytest.raises(ValueError, match="max_in_flight"):
        OpenAIEngine("http://127.0.0.1:1", "m", 0)
    with pytest.raises(ValueError, match="base_url"):
        OpenAIEngine("127.0.0.1:8000", "m", 1)
    with pytest.raises(ValueError, match="read_timeout_s"):
        OpenAIEngine("http://127.0.0.1:1", "m", 1, read_timeout_s=0)
    with pytest.raises(ValueError, match="throttle_retries"):
        OpenAIEngine("http://127.0.0.1:1", "m", 1, throttle_retries=-1)
    e = OpenAIEngine("http://127.0.0.1:8000/", "m", 3, total_timeout_s=None)
    assert e.base_url == "http://127.0.0.1:8000/v1" and e.max_num_seqs == 3 and e.free_slots == 3
    assert OpenAIEngine("http://h:1/v1", "m", 1).base_url == "http://h:1/v1"
    assert e.timeout.total is None and e.timeout.sock_connect == 5.0 and e.timeout.sock_read == 60.0
    assert e.available and e.retry_after_s == 0.0 and not e.paused


def test_an_engine_bound_to_one_event_loop_refuses_another() -> None:
    e = OpenAIEngine("http://127.0.0.1:9", "m", 2, breaker=CircuitBreaker(100, 1.0))

    async def first() -> None:
        with pytest.raises(EngineUnavailableError, match="unreachable"):  # nothing listens on port 9
            await e.submit(CompletionRequest(prompt="x")).result
        with pytest.raises(EngineUnavailableError, match="unreachable"):  # the bound fast path
            await e.submit(CompletionRequest(prompt="y")).result

    async def second() -> None:
        with pytest.raises(RuntimeError, match="bound to another event loop"):
            e.submit(CompletionRequest(prompt="z"))

    async def close() -> None:
        await e.aclose()

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(first())
        other = asyncio.new_event_loop()
        try:
            other.run_until_complete(second())  # same thread, another loop
        finally:
            other.close()
        loop.run_until_complete(close())
    finally:
        loop.close()


def test_parse_retry_after_reads_ms_seconds_and_http_dates() -> None:
    assert parse_retry_after({"Retry-After": "1"}) == 1.0
    assert parse_retry_after({"Retry-After": " 2 "}) == 2.0
    assert parse_retry_after({"retry-after-ms": "350", "Retry-After": "1"}) == 0.35
    assert parse_retry_after({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"},
                             now_wall_s=1445412470.0) == 10.0
    assert parse_retry_after({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}, now_wall_s=1445412490.0) == 0.0
    assert parse_retry_after({}) is None
    assert parse_retry_after({"Retry-After": "soon"}) is None
    assert parse_retry_after({"Retry-After": "-3"}) is None
    assert parse_retry_after({"retry-after-ms": "x", "Retry-After": "4"}) == 4.0


# -- the happy path ---------------------------------------------------------------------------------
async def test_a_prompt_streams_from_v1_completions_with_the_request_mapped(server: StubServer) -> None:
    e = make(server, api_key="sk-test")
    try:
        request = CompletionRequest(prompt="hello", max_tokens=3, stream=True,
                                    sampling={"temperature": 0.5, "stop": ["\n"], "include_usage": True})
        completion = submit(e, request)
        assert completion is request.completion and e.running == 1 and e.free_slots == 3
        result = await completion.result
        assert result.text == " t0 t1 t2" and result.finish_reason == "length"
        assert result.completion_tokens == 3 and result.prompt_tokens == 3  # the server's usage chunk
        assert 0 <= result.queue_time_s <= result.ttft_s <= result.e2e_s  # type: ignore[operator]
        await wait_for(lambda: e.running == 0, what="the slot")
        assert e.free_slots == 4 and e.succeeded == 1
        [seen] = server.state()["bodies"]
        assert seen["path"] == "/v1/completions" and seen["id"] == wire_request_id(request.id)
        assert seen["authorization"] == "Bearer sk-test"
        assert seen["body"] == {"model": "stub-model", "prompt": "hello", "max_tokens": 3, "temperature": 0.5,
                                "stop": ["\n"], "stream": True, "stream_options": {"include_usage": True}}
    finally:
        await e.aclose()
    assert not e.available and e.free_slots == 0
    with pytest.raises(EngineUnavailableError, match="closed"):
        e.submit(CompletionRequest(prompt="late"))


async def test_chat_messages_stream_from_v1_chat_completions(server: StubServer) -> None:
    e = make(server, include_usage=False)
    forced = make(server, chat=True)
    plain = make(server, chat=False)
    try:
        messages = [{"role": "user", "content": "hi"}]
        result = await submit(e, CompletionRequest(messages=messages, stream=True)).result
        assert result.text == " t0 t1 t2 t3" and result.finish_reason == "stop"
        assert result.completion_tokens == 4  # one per streamed delta without usage
        # no usage in the stream: the backend's count, asked once non-streamed (the estimate would be 1)
        assert (result.prompt_tokens, e.usage_probes) == (3, 1)
        await submit(forced, CompletionRequest(prompt="as chat", max_tokens=1, stream=True)).result
        with pytest.raises(UnsupportedRequestError, match="chat=False") as refused:
            plain.submit(CompletionRequest(messages=messages))
        assert isinstance(refused.value, ValueError)  # what Engine.prepare documents
        assert refused.value.client_message == ("this model is served by a completions-only backend: send a "
                                                "prompt to /v1/completions, not chat messages")
        first, probe, second = server.state()["bodies"]
        assert first["path"] == "/v1/chat/completions"
        assert first["body"] == {"model": "stub-model", "messages": messages, "stream": True}
        assert probe["path"] == "/v1/chat/completions"  # the prompt count, asked as the non-streamed path gets it
        assert probe["body"] == {"model": "stub-model", "messages": messages, "stream": False, "max_tokens": 1}
        assert second["path"] == "/v1/chat/completions"
        assert second["body"]["messages"] == [{"role": "user", "content": "as chat"}]
    finally:
        await e.aclose()
        await forced.aclose()
        await plain.aclose()


async def test_the_request_id_is_a_uuid4_unless_headers_set_one(server: StubServer) -> None:
    e = make(server)
    mine = make(server, headers={"x-request-id": "my-own-id"})
    try:
        request = CompletionRequest(prompt="x", max_tokens=1, id="cmpl-abc")
        await e.submit(request).result
        await mine.submit(CompletionRequest(prompt="y", max_tokens=1)).result
        # the gateway's ids end in a UUID4's digits: sent as that UUID
        gateway_id = "chatcmpl-0123456789ab4def8123456789abcdef"
        await e.submit(CompletionRequest(prompt="z", max_tokens=1, id=gateway_id)).result
        ids = [b["id"] for b in server.state()["bodies"]]
        assert ids[0] == wire_request_id("cmpl-abc") and uuid.UUID(ids[0]).version == 4
        assert ids[1] == "my-own-id"
        assert ids[2] == "01234567-89ab-4def-8123-456789abcdef"
    finally:
        await e.aclose()
        await mine.aclose()


async def test_streamed_tokens_with_empty_text_count_when_the_server_sends_no_usage(server: StubServer) -> None:
    server.control(empty_every=4)  # 8 tokens, 2 of them with empty text, and no usage chunk
    e = make(server, include_usage=False)
    try:
        result = await submit(e, CompletionRequest(prompt="x", max_tokens=8, stream=True)).result
        assert result.completion_tokens == 8
        assert result.text == " t0 t1 t2 t4 t5 t6"
    finally:
        await e.aclose()


def test_the_window_is_exported_as_rxpipe_engine_concurrency_limit() -> None:
    from prometheus_client import REGISTRY, generate_latest

    fixed = OpenAIEngine("http://127.0.0.1:1", "m", 7)
    fixed.name = "window-fixed"
    auto = OpenAIEngine("http://127.0.0.1:1", "m", "auto")
    auto.name = "window-auto"
    text = generate_latest(REGISTRY).decode()
    assert 'rxpipe_engine_concurrency_limit{engine="window-fixed"} 7.0' in text
    assert 'rxpipe_engine_concurrency_limit{engine="window-auto"} 4.0' in text  # AUTO_INITIAL_LIMIT
    assert auto.max_num_seqs == 256 and auto.free_slots == 4


# -- 429 / 503: backpressure from the server ----------------------------------------------------------
def _timer_early_s(loop: asyncio.AbstractEventLoop) -> float:
    """How much earlier than its time on ``loop.time()`` a ``call_at`` timer may fire. asyncio's
    clock is ``time.monotonic()`` and runs a timer due within its resolution (1 ns on Linux);
    uvloop's is libuv's loop time in whole milliseconds, and it rounds a delay to the nearest
    millisecond (``call_later``: ``round(delay * 1000)``): 0.5 ms early at most, allowed as its
    resolution, 1 ms."""
    if type(loop).__module__.startswith("uvloop"):
        return 1e-3
    return time.get_clock_info("monotonic").resolution


def _server_clock_slack_s(loop: asyncio.AbstractEventLoop) -> float:
    """How much shorter than a wait timed on ``loop`` it may look on the stub server's clock
    (``time.monotonic()``, system-wide). asyncio's loop reads that clock: ``_timer_early_s``.
    libuv's loop time truncates to the millisecond a clock that is CLOCK_MONOTONIC or, where
    that has a resolution of 1 ms or better, CLOCK_MONOTONIC_COARSE (``uv__hrtime(UV_CLOCK_FAST)``),
    so it is up to 2 ms behind; with the 0.5 ms of rounding, 2.5 ms."""
    if type(loop).__module__.startswith("uvloop"):
        return 2.5e-3
    return _timer_early_s(loop)


async def test_429_with_retry_after_pauses_all_demand_for_it_then_succeeds(
        server: StubServer, loop: asyncio.AbstractEventLoop) -> None:
    server.control(throttle=2, retry_after="1")
    e = make(server, max_in_flight=2)
    notified: list[tuple[float, int]] = []
    e.add_capacity_listener(lambda: notified.append((loop.time(), e.free_slots)))
    try:
        t0 = loop.time()
        completions = [e.submit(CompletionRequest(prompt=f"p{i}", max_tokens=2)) for i in range(2)]
        await wait_for(lambda: e.throttled == 2, what="two 429 answers")
        # paused: no demand at all, but the server is up (429 is not "down")
        assert e.paused and e.free_slots == 0 and e.available
        assert e.running == 0 and e.waiting == 2
        # the first 429 came after t0: the clock read after retry_after_s bounds what is left from
        # below; exact but for the rounding of (its time + 1 s), an ulp of the clock's value
        left_s = e.retry_after_s
        seen_s = loop.time() - t0
        ulp = math.ulp(loop.time() + 60.0)
        assert 1.0 - seen_s - ulp <= left_s <= 1.0 + ulp, (left_s, seen_s)
        results = [await c.result for c in completions]
        assert [r.text for r in results] == [" t0 t1"] * 2
        early_s = _timer_early_s(loop)
        assert loop.time() - t0 >= 1.0 - early_s
        assert not e.paused and e.pauses == 1 and e.throttled == 2
        state = server.state()
        assert state["statuses"] == {"429": 2, "200": 2} and state["requests"] == 4
        assert {b["body"]["stream"] for b in state["bodies"]} == {False}  # the retries too
        # the server saw each call wait for its own Retry-After after its 429 (not after the other's:
        # the server may start on the second request after the client has read the first 429)
        arrivals: dict[str, list[float]] = {}
        for a in state["arrivals"]:
            arrivals.setdefault(a["id"], []).append(a["t"])
        assert sorted(len(ts) for ts in arrivals.values()) == [2, 2]
        waits_s = [retry - first for first, retry in arrivals.values()]
        assert min(waits_s) >= 1.0 - _server_clock_slack_s(loop), waits_s
        resumed = [t for t, free in notified if free > 0]
        assert resumed and resumed[0] - t0 >= 1.0 - early_s  # capacity came back after the pause, not before
        assert all(free == 0 for t, free in notified if t - t0 < 1.0 - early_s)
    finally:
        await e.aclose()


async def _one_throttled_call(e: OpenAIEngine, loop: asyncio.AbstractEventLoop) -> tuple[float, float, float]:
    """Submit one request the stub answers 429 once. Returns ``retry_after_s`` as read once the
    engine is seen paused, the loop time from the submit to a read of the clock taken *after*
    that one, and the loop time from the submit to the request's completion."""
    t0 = loop.time()
    c = e.submit(CompletionRequest(prompt="x", max_tokens=1))
    await wait_for(lambda: e.paused, what="the pause")
    left_s = e.retry_after_s
    seen_s = loop.time() - t0
    assert (await c.result).text == " t0"
    return left_s, seen_s, loop.time() - t0


# Was flaky: it read the clock before retry_after_s did (a stall between the reads over the 429's round trip failed it)
async def test_the_pause_is_jittered_above_retry_after_and_capped(server: StubServer,
                                                                 loop: asyncio.AbstractEventLoop) -> None:
    pause_s = 0.3 + random.Random(7).uniform(0.0, 1.0 * 0.3)  # Retry-After, jitter over one more window
    server.control(throttle=1, retry_after="0.3")
    once = make(server, retry_after_jitter=1.0, rng=random.Random(7), throttle_retries=0)
    try:  # the wait the engine computes, exactly (what a retry would wait)
        with pytest.raises(EngineUnavailableError, match="429") as info:
            await once.submit(CompletionRequest(prompt="x", max_tokens=1)).result
        assert info.value.retry_after == pause_s  # type: ignore[attr-defined]
    finally:
        await once.aclose()
    # the clock at the 429 (t429) is unknown but lies between the submit (t0) and the read of
    # retry_after_s, itself before t0 + seen_s; retry_after_s = (t429 + pause_s) - that read is
    # exact but for the rounding of t429 + pause_s (half an ulp of the clock's value)
    ulp = math.ulp(loop.time() + 60.0)
    server.control(throttle=1, retry_after="0.3")
    e = make(server, retry_after_jitter=1.0, rng=random.Random(7))
    try:
        left_s, seen_s, done_s = await _one_throttled_call(e, loop)
        assert pause_s - seen_s - ulp <= left_s <= pause_s + ulp, (left_s, seen_s, pause_s)
        assert done_s >= pause_s - _timer_early_s(loop) - ulp, (done_s, pause_s)  # the retry went after the pause
    finally:
        await e.aclose()
    # without a Retry-After the backoff is 1 s (then jittered up to 2 s): capped at 0.3 s, jitter included
    server.control(throttle=1, retry_after=None)
    capped = make(server, retry_after_cap_s=0.3, retry_after_jitter=1.0, rng=random.Random(7))
    try:
        left_s, seen_s, done_s = await _one_throttled_call(capped, loop)
        assert 0.3 - seen_s - ulp <= left_s <= 0.3 + ulp, (left_s, seen_s)
        assert done_s >= 0.3 - _timer_early_s(loop) - ulp, done_s
    finally:
        await capped.aclose()


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_a_request_is_retried_at_most_throttle_retries_times(server: StubServer, stream: bool) -> None:
    server.control(throttle=3, retry_after="0.05")
    e = make(server, throttle_retries=1)
    try:
        c = submit(e, CompletionRequest(prompt="x", max_tokens=1, stream=stream))
        with pytest.raises(EngineUnavailableError, match="429 .* 2 times") as info:
            await c.result
        assert info.value.retry_after == pytest.approx(0.05)  # type: ignore[attr-defined]
        assert server.state()["statuses"] == {"429": 2}
        await asyncio.sleep(0.1)
        # the next one gets the third 429, then goes through
        assert (await submit(e, CompletionRequest(prompt="y", max_tokens=1, stream=stream)).result).text == " t0"
        assert e.breaker.state == "closed"  # throttling is not a failure
        assert [b["body"]["stream"] for b in server.state()["bodies"]] == [stream] * 4
    finally:
        await e.aclose()


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_503_pauses_and_reports_the_engine_unavailable_meanwhile(server: StubServer, stream: bool) -> None:
    server.control(throttle=1, throttle_status=503, retry_after="0.5")
    e = make(server)
    try:
        c = submit(e, CompletionRequest(prompt="x", max_tokens=1, stream=stream))
        await wait_for(lambda: e.paused, what="the pause")
        assert not e.available and e.free_slots == 0 and 0 < e.retry_after_s <= 0.5
        with pytest.raises(EngineUnavailableError, match="503"):
            e.submit(CompletionRequest(prompt="refused"))
        assert (await c.result).text == " t0"
        # slow start: the window restarted at 1 and grew by one with the success
        assert e.available and e.free_slots == e.concurrency_limit == 2 and e.breaker.state == "closed"
        assert e.limiter.ssthresh == 4.0
    finally:
        await e.aclose()


async def test_a_request_past_its_deadline_when_the_pause_ends_finishes_deadline(
        server: StubServer, loop: asyncio.AbstractEventLoop) -> None:
    server.control(throttle=1, retry_after="0.2")
    e = make(server)
    try:
        c = e.submit(CompletionRequest(prompt="x", max_tokens=1, deadline_s=loop.time() + 0.1))
        result = await c.result
        assert result.finish_reason == "deadline" and result.text == "" and result.ttft_s is None
        assert server.state()["requests"] == 1 and e.waiting == 0 and e.running == 0
    finally:
        await e.aclose()


# -- capacity ---------------------------------------------------------------------------------------
async def test_never_more_than_max_in_flight_calls_as_counted_by_the_server(server: StubServer) -> None:
    server.control(tokens=4, token_delay_s=0.02, throttle=3, retry_after="0.1")
    e = make(server, max_in_flight=3)
    try:
        requests = [CompletionRequest(prompt=f"p{i}") for i in range(24)]
        completions = await rx.from_iterable(requests).pipe(ops.execute(e)).to_list()
        results = [await c.result for c in completions]
        assert [r.text for r in results] == [" t0 t1 t2 t3"] * 24
        state = server.state()
        assert state["max_in_flight"] == 3  # reached, never exceeded
        assert state["statuses"] == {"429": 3, "200": 24} and state["completed"] == 24
        assert e.throttled == 3 and e.running == 0 and e.free_slots == 3
    finally:
        await e.aclose()


# -- cancellation and credit ------------------------------------------------------------------------
async def test_cancelling_a_stream_closes_its_connection_within_100_ms(server: StubServer) -> None:
    server.control(tokens=200, token_delay_s=0.02)
    e = make(server)
    try:
        request = CompletionRequest(prompt="long", stream=True)
        completion = e.submit(request)
        ts = TestSubscriber[TokenChunk](initial_request=UNBOUNDED)
        completion.tokens.subscribe(ts)
        await ts.await_count(2)
        t0 = time.monotonic()
        completion.cancel()
        result = await completion.result
        assert result.finish_reason == "cancelled" and result.text.startswith(" t0 t1")
        assert ts.completed
        seen = await disconnect_of(server, request.id)
        assert seen["t"] - t0 < 0.1
        await wait_for(lambda: e.running == 0, what="the slot")
        assert e.free_slots == 4 and e.breaker.consecutive_failures == 0
    finally:
        await e.aclose()


async def test_cancelling_the_token_subscription_of_a_parked_stream_disconnects_too(server: StubServer) -> None:
    # the server is blocked writing to us (no credit): the disconnect still reaches it at once
    total = 2000
    server.control(tokens=total, token_bytes=16384)  # 32 MiB: more than every buffer on the way
    e = make(server)
    try:
        request = CompletionRequest(prompt="parked", stream=True)
        completion = e.submit(request)
        ts = TestSubscriber[TokenChunk](initial_request=1)
        completion.tokens.subscribe(ts)
        await ts.await_count(1)
        await asyncio.sleep(0.2)
        assert completion.generated_tokens == 1 and server.state()["written"][wire_request_id(request.id)] < total
        t0 = time.monotonic()
        ts.cancel()
        assert (await completion.result).finish_reason == "cancelled"
        assert (await disconnect_of(server, request.id))["t"] - t0 < 0.1
    finally:
        await e.aclose()


async def test_without_credit_the_engine_stops_reading_and_tcp_stops_the_server(server: StubServer) -> None:
    total = 2000
    server.control(tokens=total, token_bytes=16384)  # 32 MiB of SSE: far beyond socket buffers
    e = make(server)
    try:
        request = CompletionRequest(prompt="big", stream=True)
        completion = e.submit(request)
        ts = TestSubscriber[TokenChunk](initial_request=1)
        completion.tokens.subscribe(ts)
        await ts.await_count(1)
        await asyncio.sleep(0.5)
        written = server.state()["written"][wire_request_id(request.id)]
        assert len(ts.values) == 1 and completion.generated_tokens == 1 and completion.pending_tokens == 0
        assert written < total // 2  # the server is blocked in write(): backpressure reached it
        await asyncio.sleep(0.2)
        assert server.state()["written"][wire_request_id(request.id)] == written  # and stays blocked
        ts.request(UNBOUNDED)
        result = await completion.result
        assert result.completion_tokens == total and len(ts.values) == total and ts.completed
    finally:
        await e.aclose()


async def test_a_consumer_without_credit_past_stall_timeout_is_stalled_and_disconnected(server: StubServer) -> None:
    server.control(tokens=50, token_delay_s=0.01)
    e = make(server, stall_timeout_s=0.2)
    try:
        request = CompletionRequest(prompt="stall", stream=True)
        completion = e.submit(request)
        ts = TestSubscriber[TokenChunk](initial_request=1)
        completion.tokens.subscribe(ts)
        t0 = time.monotonic()
        result = await completion.result
        assert result.finish_reason == "stalled" and 0.2 <= time.monotonic() - t0 < 0.5
        assert result.text == " t0" and ts.values == [TokenChunk(0, " t0", 1)] and ts.completed
        await disconnect_of(server, request.id)
        await wait_for(lambda: e.running == 0, what="the slot")
    finally:
        await e.aclose()


async def test_parked_streams_stall_each_at_its_own_deadline_on_one_engine_timer(server: StubServer) -> None:
    server.control(tokens=20, token_delay_s=0.01)
    e = make(server, stall_timeout_s=0.2, total_timeout_s=None)
    try:
        def start(name: str) -> tuple[Completion, TestSubscriber[TokenChunk]]:
            completion = e.submit(CompletionRequest(prompt=name, stream=True))
            ts = TestSubscriber[TokenChunk](initial_request=1)
            completion.tokens.subscribe(ts)
            return completion, ts

        first, _ = start("first")
        await asyncio.sleep(0.1)
        second, _ = start("second")  # parks later than the first: a later deadline
        fed, fed_ts = start("fed")
        await fed_ts.await_count(1)
        fed_ts.request(UNBOUNDED)  # credit before its deadline: it never stalls
        assert (await first.result).finish_reason == "stalled"
        assert (await second.result).finish_reason == "stalled"
        assert (await fed.result).text == "".join(f" t{i}" for i in range(20))
        assert [c.generated_tokens for c in (first, second)] == [1, 1]
    finally:
        await e.aclose()


async def test_aclose_cancels_running_and_waiting_calls(server: StubServer) -> None:
    server.control(tokens=100, token_delay_s=0.02)
    e = make(server, max_in_flight=1)
    requests = [CompletionRequest(prompt=f"p{i}") for i in range(3)]
    completions = [e.submit(r) for r in requests]
    await wait_for(lambda: server.state()["in_flight"] == 1, what="the first call")
    assert e.running == 1 and e.waiting == 2
    await e.aclose()
    assert [c.finish_reason for c in completions] == ["cancelled"] * 3
    assert e.running == 0 and e.waiting == 0
    await disconnect_of(server, requests[0].id)
    assert server.state()["requests"] == 1


async def test_a_call_cancelled_before_its_task_first_ran_ends_and_frees_its_slot(server: StubServer) -> None:
    # asyncio cancels a task that has not run yet without running any of its coroutine: the
    # engine must still end the call (a cancel in the loop iteration of its admission). The other
    # call is closed by aclose in the next iteration, while it connects: awaiting more between
    # the two lets it reach the server (how soon depends only on how fast its client connects)
    e = make(server, max_in_flight=2)
    try:
        cancelled = e.submit(CompletionRequest(prompt="gone"))
        closed = e.submit(CompletionRequest(prompt="closed"))
        assert e.running == 2 and e.free_slots == 0
        cancelled.cancel()
        assert e.running == 2  # its slot is freed when its cancelled task ends
        closing = asyncio.ensure_future(e.aclose())
        assert (await asyncio.wait_for(asyncio.shield(cancelled.result), 5.0)).finish_reason == "cancelled"
        assert (await asyncio.wait_for(asyncio.shield(closed.result), 5.0)).finish_reason == "cancelled"
        await closing
        assert e.running == 0
        assert server.state()["requests"] == 0  # neither call reached the server
    finally:
        await e.aclose()


# -- failures and the circuit breaker ----------------------------------------------------------------
@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_5xx_counts_against_the_breaker_and_4xx_does_not(server: StubServer, stream: bool) -> None:
    server.control(fail=2, fail_status=500)
    e = make(server, breaker=CircuitBreaker(3, 10.0))
    try:
        for _ in range(2):
            with pytest.raises(EngineError, match="answered 500 .*stub failure"):
                await submit(e, CompletionRequest(prompt="x", stream=stream)).result
        assert e.breaker.consecutive_failures == 2 and e.available
        server.control(fail=1, fail_status=400)
        with pytest.raises(EngineError, match="answered 400"):
            await submit(e, CompletionRequest(prompt="x", stream=stream)).result
        assert e.breaker.consecutive_failures == 0  # the server answered: it is up
    finally:
        await e.aclose()


async def test_a_stream_cut_mid_way_fails_the_request_and_counts_against_the_breaker(server: StubServer) -> None:
    server.control(cut_after=2)
    e = make(server)
    try:
        c = submit(e, CompletionRequest(prompt="x", max_tokens=5, stream=True))
        with pytest.raises(EngineError, match="broke after 2 tokens"):
            await c.result
        assert e.breaker.consecutive_failures == 1 and c.generated_tokens == 2
    finally:
        await e.aclose()


async def test_a_server_that_ignores_stream_true_still_answers(server: StubServer) -> None:
    server.control(plain=1)
    e = make(server)
    try:
        plain = await submit(e, CompletionRequest(prompt="x", max_tokens=3, stream=True)).result
        chat = await submit(e, CompletionRequest(messages=[{"role": "user", "content": "x"}], max_tokens=2,
                                                stream=True)).result
        assert [b["body"]["stream"] for b in server.state()["bodies"]] == [True, True]
        assert (plain.text, plain.completion_tokens, plain.finish_reason) == (" t0 t1 t2", 3, "length")
        assert (chat.text, chat.completion_tokens) == (" t0 t1", 2)
    finally:
        await e.aclose()


async def test_a_read_timeout_fails_a_streamed_request(server: StubServer) -> None:
    server.control(first_delay_s=30.0)  # far over the 0.1 s read timeout, however loaded the machine
    e = make(server, read_timeout_s=0.1)
    try:
        with pytest.raises(EngineError, match="Timeout"):
            await submit(e, CompletionRequest(prompt="x", stream=True)).result
        assert e.breaker.consecutive_failures == 1
    finally:
        await e.aclose()


async def test_a_non_streamed_call_has_no_read_timeout_but_the_total_timeout(server: StubServer) -> None:
    # the server is silent until its whole answer is ready: that is no read timeout
    server.control(first_delay_s=0.3)
    e = make(server, read_timeout_s=0.1)
    bounded = make(server, read_timeout_s=0.1, total_timeout_s=0.1)
    try:
        assert (await e.submit(CompletionRequest(prompt="x", max_tokens=2)).result).text == " t0 t1"
        request = CompletionRequest(prompt="x", max_tokens=2)
        # no answer within it: unreachable (the gateway's 503), as a connection timeout. The
        # server now waits far longer than the 0.1 s bound: with only 0.3 s, a test process held
        # off its core for 0.2 s (a loaded machine) saw the answer and the deadline in one loop
        # step, and the answer could win.
        server.control(first_delay_s=30.0)
        with pytest.raises(EngineUnavailableError, match=r"timed out after total_timeout_s=0.1 s \(0 tokens\)"):
            await bounded.submit(request).result
        assert e.breaker.consecutive_failures == 0 and bounded.breaker.consecutive_failures == 1
        await disconnect_of(server, request.id)  # the server saw the call closed
        await wait_for(lambda: bounded.running == 0, what="the slot")
        assert bounded.free_slots == 4
    finally:
        await e.aclose()
        await bounded.aclose()


async def test_the_total_timeout_ends_a_streamed_call_with_the_tokens_it_relayed(server: StubServer) -> None:
    server.control(tokens=100, token_delay_s=0.02)
    e = make(server, total_timeout_s=0.3, stall_timeout_s=None)
    try:
        request = CompletionRequest(prompt="x", stream=True)
        completion = e.submit(request)
        ts = TestSubscriber[TokenChunk](initial_request=UNBOUNDED)
        completion.tokens.subscribe(ts)
        with pytest.raises(EngineError, match="timed out after total_timeout_s=0.3 s"):
            await completion.result
        await ts.await_done()
        # it had answered: a failure of the call (504 for a client), not an unreachable server
        assert type(ts.error) is BackendError and len(ts.values) < 100
        assert (ts.error.status, ts.error.code) == (504, "backend_timeout")
        await disconnect_of(server, request.id)
        assert e.breaker.consecutive_failures == 1
        await wait_for(lambda: e.running == 0, what="the slot")
        result = await e.submit(CompletionRequest(prompt="y", max_tokens=1)).result
        assert result.text == " t0"
    finally:
        await e.aclose()


async def test_a_dead_server_trips_the_breaker_and_the_engine_recovers_when_it_returns(
        tmp_path: Path, loop: asyncio.AbstractEventLoop) -> None:
    server = StubServer(tmp_path)
    e = OpenAIEngine(server.url, "stub-model", 4, breaker=CircuitBreaker(2, 0.5), connect_timeout_s=1.0)
    notified: list[float] = []
    e.add_capacity_listener(lambda: notified.append(loop.time()))
    try:
        assert (await e.submit(CompletionRequest(prompt="up", max_tokens=1)).result).text == " t0"
        server.stop()
        failing = [e.submit(CompletionRequest(prompt=f"down{i}")) for i in range(2)]
        for c in failing:
            with pytest.raises(EngineUnavailableError, match="unreachable"):
                await c.result
        # down: the gateway answers 503 (available False) with Retry-After = time to the trial
        assert not e.available and e.breaker.state == "open"
        assert 0 < e.retry_after_s <= 0.5
        with pytest.raises(EngineUnavailableError, match="circuit open"):
            e.submit(CompletionRequest(prompt="refused"))
        before = len(notified)
        server.start()  # blocks this loop; under load for longer than the reset timeout
        await wait_for(lambda: e.available, what="half-open")
        await wait_for(lambda: len(notified) > before, what="the capacity signal at half-open")
        assert e.breaker.state == "half_open" and e.free_slots == 1  # one trial call
        trial = e.submit(CompletionRequest(prompt="trial", max_tokens=2))
        assert e.free_slots == 0
        assert (await trial.result).text == " t0 t1"
        assert e.breaker.state == "closed" and e.available
        await wait_for(lambda: e.free_slots == 4, what="all slots")
    finally:
        await e.aclose()
        server.stop()


async def test_while_down_the_executor_answers_queued_requests_with_a_reply_slot_at_once(tmp_path: Path,
                                                                            loop: asyncio.AbstractEventLoop) -> None:
    server = StubServer(tmp_path)
    server.stop()
    e = OpenAIEngine(server.url, "stub-model", 2, breaker=CircuitBreaker(1, 30.0))
    try:
        with pytest.raises(EngineUnavailableError):
            await e.submit(CompletionRequest(prompt="x")).result
        assert not e.available
        reply: asyncio.Future[Completion] = loop.create_future()
        out = await rx.just(CompletionRequest(prompt="y", reply=reply)).pipe(ops.execute(e)).to_list()
        assert out == [] and reply.done()
        with pytest.raises(EngineUnavailableError):
            reply.result()
    finally:
        await e.aclose()


async def test_a_request_without_credit_parses_whatever_arrived_line_by_line_across_reads() -> None:
    """The non-streamed read takes whole reads and splits them into lines itself: a line cut
    across reads, CRLF endings, comments and a last line without its newline read as before."""
    from rxpipe.engines._openai_state import _Call

    class Reads:
        def __init__(self, *parts: bytes) -> None:
            self.parts = list(parts)

        async def readany(self) -> bytes:
            return self.parts.pop(0) if self.parts else b""

    class Response:
        content_type = "text/event-stream"

        def __init__(self, *parts: bytes) -> None:
            self.content = Reads(*parts)

    def event(text: str) -> bytes:
        return b'data: {"choices": [{"text": "' + text.encode() + b'", "finish_reason": null}]}'

    e = OpenAIEngine("http://127.0.0.1:9", model="m", max_in_flight=1)
    try:
        e._bind()
        request = CompletionRequest(prompt="p")
        call = _Call(Completion(request, e, asyncio.get_running_loop()), "/completions")
        whole = (b": a comment\r\n\r\n" + event("a") + b"\r\n\r\n" + event("b") + b"\n\n" + event("c"))
        cut = whole.index(b"b") + 1
        await e._read_events(call, Response(whole[:7], whole[7:cut], whole[cut:]), credit=False)  # type: ignore[arg-type]
        assert call.parts == ["a", "b", "c"] and call.tokens == 3
        call = _Call(Completion(CompletionRequest(prompt="p"), e, asyncio.get_running_loop()), "/completions")
        await e._read_events(call, Response(event("x") + b"\n\ndata: [DONE]\n\n" + event("y") + b"\n"), credit=False)  # type: ignore[arg-type]
        assert call.parts == ["x"]  # nothing after [DONE]
    finally:
        await e.aclose()


class _Reads:
    """``response.content`` of a fake SSE answer: ``readany`` hands out the given parts in order
    (then b"": the end of the body) and counts the reads made."""

    def __init__(self, *parts: bytes) -> None:
        self.parts = list(parts)
        self.reads = 0

    async def readany(self) -> bytes:
        self.reads += 1
        return self.parts.pop(0) if self.parts else b""


class _SSEResponse:
    content_type = "text/event-stream"

    def __init__(self, *parts: bytes) -> None:
        self.content = _Reads(*parts)


def _text_event(text: str, finish: str = "null") -> bytes:
    return b'data: {"choices": [{"text": "' + text.encode() + b'", "finish_reason": ' + finish.encode() + b"}]}"


async def _streamed_call(e: OpenAIEngine, credit: int) -> tuple[Any, TestSubscriber[TokenChunk]]:
    from rxpipe.engines._openai_state import _Call

    e._bind()
    completion = Completion(CompletionRequest(prompt="p", stream=True), e, asyncio.get_running_loop())
    call = _Call(completion, "/completions")
    completion.engine_state = call  # credit_granted wakes the call's credit wait
    sink = TestSubscriber[TokenChunk](initial_request=credit)
    completion.tokens.subscribe(sink)
    return call, sink


async def test_a_streamed_read_carrying_many_events_is_applied_one_event_per_credit_and_read_no_further() -> None:
    """One read brought five events and a part of a sixth while the consumer has credit 1: one
    event is applied per credit granted, and the socket is not read again until the local ones
    are used up (TCP backpressure holds); the event cut across the reads arrives whole."""
    e = OpenAIEngine("http://127.0.0.1:9", model="m", max_in_flight=1, stall_timeout_s=None)
    try:
        call, sink = await _streamed_call(e, credit=1)
        first = b"".join(_text_event(f"t{i}") + b"\n\n" for i in range(5)) + _text_event("t5")[:20]
        response = _SSEResponse(first, _text_event("t5")[20:] + b"\n\ndata: [DONE]\n\n")
        task = asyncio.ensure_future(e._read_events(call, response))  # type: ignore[arg-type]
        for _ in range(5):
            await asyncio.sleep(0)
        assert [c.text for c in sink.values] == ["t0"] and response.content.reads == 1
        for i in range(1, 5):
            sink.request(1)
            for _ in range(5):
                await asyncio.sleep(0)
            assert [c.text for c in sink.values] == [f"t{j}" for j in range(i + 1)]
            assert response.content.reads == 1 and call.tokens == i + 1
        sink.request(1)
        for _ in range(5):
            await asyncio.sleep(0)
        assert [c.text for c in sink.values] == [f"t{j}" for j in range(6)] and call.tokens == 6
        assert not task.done()  # as with a line per read: [DONE] too is taken only with credit
        sink.request(1)
        await asyncio.wait_for(task, 5)
        assert response.content.reads == 2  # [DONE] ended it: the end of the body was never awaited
    finally:
        await e.aclose()


@pytest.mark.parametrize("credit", [True, False])
async def test_sse_lines_with_crlf_ends_and_a_last_data_line_without_its_newline_are_read(credit: bool) -> None:
    """CRLF line ends, comments and ``event:`` fields, and a last ``data:`` line the body ended
    without a newline after: the same events, streamed (with credit) or not."""
    e = OpenAIEngine("http://127.0.0.1:9", model="m", max_in_flight=1, stall_timeout_s=None)
    try:
        call, sink = await _streamed_call(e, credit=UNBOUNDED)
        body = (b": keep-alive\r\n\r\nevent: token\r\n" + _text_event("a") + b"\r\n\r\n"
                + _text_event("b") + b"\r\n\r\n" + _text_event("", '"length"'))
        await e._read_events(call, _SSEResponse(body[:9], body[9:]), credit=credit)  # type: ignore[arg-type]
        assert call.parts == ["a", "b"] and call.tokens == 2 and call.finish_reason == "length"
    finally:
        await e.aclose()


async def test_an_sse_line_longer_than_max_answer_bytes_fails_the_read() -> None:
    e = OpenAIEngine("http://127.0.0.1:9", model="m", max_in_flight=1, stall_timeout_s=None, max_answer_bytes=64)
    try:
        call, sink = await _streamed_call(e, credit=UNBOUNDED)
        response = _SSEResponse(_text_event("a") + b"\n\n" + b"data: " + b"x" * 58, b"y")
        with pytest.raises(ValueError, match="an SSE line over max_answer_bytes=64 bytes"):
            await e._read_events(call, response)  # type: ignore[arg-type]
        assert call.parts == ["a"] and response.content.reads == 2  # 65 bytes: one over
    finally:
        await e.aclose()


@pytest.mark.parametrize("status", [503, 429])
async def test_a_retry_after_over_the_cap_fails_at_once_and_pauses_that_long(
        server: StubServer, loop: asyncio.AbstractEventLoop, status: int) -> None:
    server.control(throttle=100, throttle_status=status, retry_after="3600")
    e = make(server, max_in_flight=2)
    try:
        t0 = loop.time()
        completions = [e.submit(CompletionRequest(prompt=f"p{i}", max_tokens=1)) for i in range(5)]
        for c in completions:
            with pytest.raises(EngineUnavailableError, match="3600") as info:
                await c.result
            assert info.value.retry_after == 3600  # type: ignore[attr-defined]  # the honest wait
        assert loop.time() - t0 < 1.0
        assert server.state()["requests"] <= 2  # the three waiting were never sent
        # paused (and unavailable) for the hour, with nominal free slots: execute answers at once
        # (loop.time() + 3600) - loop.time() may be an ulp over 3600 (uvloop's clock stands still within a pass)
        assert e.paused and not e.available and 3599 < e.retry_after_s <= 3600 + 1e-9
        assert e.free_slots == e.concurrency_limit and e.running == 0 and e.waiting == 0
        reply: asyncio.Future[Completion] = loop.create_future()
        out = await rx.from_iterable([CompletionRequest(prompt="queued", reply=reply)]).pipe(
            ops.execute(e)).to_list()
        assert out == [] and isinstance(reply.exception(), EngineUnavailableError)
        with pytest.raises(EngineUnavailableError, match="paused for 3.*over retry_after_cap_s"):
            e.submit(CompletionRequest(prompt="refused"))
    finally:
        await e.aclose()


async def test_leaving_a_started_pipeline_closes_the_engines_http_session(server: StubServer) -> None:
    """``async with pipeline.start()``: a clean stop closes the engines of its execute stages (the
    session an OpenAIEngine made was left open, and aiohttp complained at exit)."""
    import aiohttp

    from rxpipe.gateway import Gateway, edge_queue
    from rxpipe.runtime import Pipeline

    e = make(server)
    pipeline = Pipeline(Gateway(), edge_queue(2), ops.execute(e), drain_timeout_s=1.0)
    assert pipeline.engines == [e]
    async with pipeline.start(port=0) as running:
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{running.url}/v1/completions", json={"prompt": "x", "max_tokens": 1}) as r:
                assert r.status == 200
        session = e._session
        assert session is not None and not session.closed
    assert session.closed and e._session is None and not e.available


@pytest.mark.parametrize("chat", [False, True], ids=["completions", "chat"])
async def test_a_stream_without_usage_is_counted_as_its_whole_answer_would_be(server: StubServer, chat: bool) -> None:
    """A backend that sends no usage when streaming (llama-cpp-python's server): the prompt count
    is the backend's, asked once per prompt with a one-token non-streamed call, and the tokens
    are counted from the stream: the same usage streamed or not (the estimate said 1 here)."""
    server.control(stream_usage=0, tokens=4)
    e = make(server, chat=chat)
    try:
        request = {"messages": [{"role": "user", "content": "x"}]} if chat else {"prompt": "x"}
        whole = await e.submit(CompletionRequest(max_tokens=4, **request)).result  # type: ignore[arg-type]
        streamed = await submit(e, CompletionRequest(max_tokens=4, stream=True, **request)).result  # type: ignore[arg-type]
        assert (streamed.prompt_tokens, streamed.completion_tokens) == (whole.prompt_tokens, whole.completion_tokens)
        assert (streamed.prompt_tokens, streamed.completion_tokens) == (3, 4)
        assert streamed.text == whole.text == " t0 t1 t2 t3"
        assert (e.usage_missing, e.usage_probes) == (1, 1)
        probe = server.state()["bodies"][-1]["body"]
        assert probe["stream"] is False and probe["max_tokens"] == 1 and "stream_options" not in probe
        assert (probe.get("messages") if chat else probe.get("prompt")) == (request.get("messages") or "x")
        # the same prompt again: the count is known, no call more
        again = await submit(e, CompletionRequest(max_tokens=2, stream=True, **request)).result  # type: ignore[arg-type]
        assert (again.prompt_tokens, again.completion_tokens, e.usage_probes) == (3, 2, 1)
        # a backend whose whole answer has no usage either: the estimate stays (1 token per 4 bytes)
        server.control(json_usage=0)
        other = {"messages": [{"role": "user", "content": "yy"}]} if chat else {"prompt": "yy"}
        estimated = await submit(e, CompletionRequest(max_tokens=1, stream=True, **other)).result  # type: ignore[arg-type]
        assert (estimated.prompt_tokens, estimated.completion_tokens, e.usage_probes) == (1, 1, 2)
    finally:
        await e.aclose()
