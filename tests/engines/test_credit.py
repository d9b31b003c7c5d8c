"""Credit on streamed output: a sequence steps only while its consumer has credit (DESIGN §4)."""

from __future__ import annotations

import asyncio

import pytest

import rxpipe as rx
from rxpipe import operators as ops
from rxpipe.engines import Completion, SimulatedEngine, TokenChunk
from rxpipe.testing import TestPublisher, TestSubscriber

from .helpers import OVERHEAD, PREFILL, engine, req


def fifty_tokens_per_second(**kwargs: object) -> SimulatedEngine:
    """Every step lasts 0.02 s whatever its batch: generation runs at 50 tokens/s per sequence."""
    return SimulatedEngine(max_num_seqs=4, step_overhead_s=0.02, prefill_s_per_token=0.0, decode_s_per_seq=0.0,
                           step_log=10_000, **kwargs)  # type: ignore[arg-type]


async def others_e2e(with_slow_consumer: bool) -> tuple[list[float], Completion | None, list[int], list[int]]:
    e = fifty_tokens_per_second()
    slow = None
    ts = TestSubscriber[TokenChunk]()
    if with_slow_consumer:
        slow = e.submit(req(1, max_tokens=5, stream=True))
        slow.tokens.subscribe(ts)
        ts.request(1)
    others = [e.submit(req(1, max_tokens=40)) for _ in range(3)]
    held: list[int] = []
    received: list[int] = []
    for second in range(1, 5):
        if slow is not None:
            await asyncio.sleep(1.0)
            # the consumer never holds more than its window; the engine holds nothing unsent
            held.append(slow.generated_tokens - ts.requested)
            received.append(len(ts.values))
            assert slow.pending_tokens == 0 and len(ts.values) == ts.requested == second
            ts.request(1)  # one token per second
    results = [await c.result for c in others]
    if slow is not None:
        await slow.result
    return [r.e2e_s for r in results], slow, held, received


@pytest.mark.virtual
async def test_a_consumer_reading_one_token_per_second_holds_its_window_and_slows_nobody() -> None:
    alone, _, _, _ = await others_e2e(False)
    shared, slow, held, received = await others_e2e(True)
    # the same end-to-end times as without it: 40 steps of 0.02 s (the runs differ only in float
    # rounding, as the second starts later on the loop clock)
    assert shared == pytest.approx(alone, abs=1e-12) and shared == pytest.approx([0.8] * 3, abs=1e-12)
    assert held == [0, 0, 0, 0] and received == [1, 2, 3, 4]
    assert slow is not None
    result = await slow.result
    # one token per credit: at 0.02, then 0.02 s after each request at 1, 2, 3, 4 s
    assert result.completion_tokens == 5 and result.e2e_s == pytest.approx(4.02, abs=1e-12)
    assert result.finish_reason == "length" and result.ttft_s == pytest.approx(0.02, abs=1e-12)


@pytest.mark.virtual
async def test_a_sequence_without_credit_is_not_stepped_but_keeps_its_slot() -> None:
    e = fifty_tokens_per_second()
    slow = e.submit(req(1, max_tokens=5, stream=True))
    ts = TestSubscriber[TokenChunk](initial_request=1)
    slow.tokens.subscribe(ts)
    busy = e.submit(req(1, max_tokens=40))
    await busy.result
    assert e.running == 1 and e.free_slots == 3 and not slow.done
    stepped = [s.index for s in e.step_log if slow.request.id in s.request_ids]
    assert stepped == [1] and len(e.step_log) == 40
    assert [(c.index, c.tokens) for c in ts.values] == [(0, 1)] and slow.generated_tokens == 1
    ts.request(100)
    result = await slow.result
    assert [c.index for c in ts.values] == [0, 1, 2, 3, 4] and ts.completed
    assert "".join(c.text for c in ts.values) == result.text


@pytest.mark.virtual
async def test_the_stall_timeout_aborts_the_sequence_and_frees_its_slot(loop: asyncio.AbstractEventLoop) -> None:
    e = engine(max_num_seqs=2, stall_timeout_s=1.0, prefill_s_per_token=0.0, decode_s_per_seq=0.0)
    pub = TestPublisher[object]()
    out = TestSubscriber[Completion](initial_request=100)
    pub.pipe(ops.execute(e)).subscribe(out)
    r = req(1, max_tokens=10, stream=True)
    pub.emit(r)
    assert r.completion is not None
    ts = TestSubscriber[TokenChunk](initial_request=2)  # takes two chunks, then stops reading
    r.completion.tokens.subscribe(ts)
    await asyncio.sleep(1.0)
    assert e.running == 1 and pub.requests == [2]
    result = await r.completion.result
    assert (result.finish_reason, result.completion_tokens, result.e2e_s) == ("stalled", 2, 2 * OVERHEAD + 1.0)
    assert loop.time() == 2 * OVERHEAD + 1.0 and e.running == 0
    assert pub.requests == [2, 1]  # the freed slot is asked for at once
    assert len(ts.values) == 2 and ts.completed  # the stream ends; the reason is in the result
    out.cancel()


@pytest.mark.virtual
async def test_a_streaming_request_nobody_subscribes_to_stalls_out() -> None:
    e = engine(stall_timeout_s=0.5)
    c = e.submit(req(1, max_tokens=3, stream=True))
    result = await c.result
    assert (result.finish_reason, result.completion_tokens, result.e2e_s, result.ttft_s) == ("stalled", 0, 0.5, None)
    assert e.steps == 0 and e.running == e.waiting == 0


@pytest.mark.virtual
async def test_credit_arriving_before_the_timeout_resets_the_stall_clock() -> None:
    e = engine(stall_timeout_s=1.0)
    c = e.submit(req(1, max_tokens=3, stream=True))
    ts = TestSubscriber[TokenChunk]()
    c.tokens.subscribe(ts)
    await asyncio.sleep(0.9)
    ts.request(1)
    await asyncio.sleep(0.9)  # 0.9 s without credit again, 1.8 s since submit
    assert not c.done
    ts.request(10)
    result = await c.result
    assert result.finish_reason == "length" and result.ttft_s == 0.9 + OVERHEAD + PREFILL


@pytest.mark.virtual
async def test_text_is_coalesced_into_one_pending_chunk_for_a_slow_reader() -> None:
    # A non-streaming request runs freely; a reader of its tokens without credit gets what was made
    # meanwhile as one chunk: one pending chunk, never a queue of them.
    e = engine()
    c = e.submit(req(1, max_tokens=6))
    ts = TestSubscriber[TokenChunk](initial_request=1)
    c.tokens.subscribe(ts)
    await asyncio.sleep(OVERHEAD + PREFILL + 2 * (OVERHEAD + 1 / 256))  # three steps: three tokens
    assert [chunk.tokens for chunk in ts.values] == [1] and c.pending_tokens == 2
    ts.request(1)
    assert [chunk.tokens for chunk in ts.values] == [1, 2] and c.pending_tokens == 0
    result = await c.result
    ts.request(1)
    assert [chunk.tokens for chunk in ts.values] == [1, 2, 3] and ts.completed
    assert "".join(chunk.text for chunk in ts.values) == result.text


@pytest.mark.virtual
async def test_unbounded_credit_streams_at_full_speed() -> None:
    e = engine()
    streamed = e.submit(req(1, max_tokens=8, stream=True))
    plain = e.submit(req(1, max_tokens=8))
    completions = await streamed.tokens.to_list()
    rs, rp = await streamed.result, await plain.result
    assert len(completions) == 8 and rs.e2e_s == rp.e2e_s and rs.ttft_s == rp.ttft_s


@pytest.mark.virtual
async def test_async_for_over_tokens_with_credit_window() -> None:
    e = engine()
    c = e.submit(req(1, max_tokens=20, stream=True))
    texts = [chunk.text async for chunk in c.tokens]
    assert "".join(texts) == (await c.result).text and len(texts) == 20


@pytest.mark.virtual
async def test_cancelling_the_token_stream_mid_run_through_execute() -> None:
    e = engine(max_num_seqs=1)
    source = rx.from_iterable([req(1, max_tokens=50, stream=True), req(1, max_tokens=1)])
    completions: list[Completion] = []
    handle = source.pipe(ops.execute(e)).subscribe(on_next=completions.append)
    first = completions[0]
    ts = TestSubscriber[TokenChunk](initial_request=3)
    first.tokens.subscribe(ts)
    await asyncio.sleep(0.2)  # stalled after 3 chunks, holding the only slot
    assert e.running == 1 and len(completions) == 1
    ts.cancel()
    assert first.finish_reason == "cancelled" and len(completions) == 2  # freed at once: not in a step
    assert (await completions[1].result).finish_reason == "length"
    handle.cancel()


@pytest.mark.virtual
async def test_a_gateway_subscribing_when_its_reply_arrives_makes_the_first_step(
        loop: asyncio.AbstractEventLoop) -> None:
    e = engine()
    pub = TestPublisher[object]()
    handle = pub.pipe(ops.execute(e)).subscribe(on_next=lambda c: None)
    r = req(3, max_tokens=2, stream=True, reply=loop.create_future())

    async def gateway() -> list[TokenChunk]:
        completion = await r.reply  # type: ignore[misc]
        return await completion.tokens.to_list()

    answer = asyncio.ensure_future(gateway())
    await asyncio.sleep(0)  # the handler waits for its reply
    pub.emit(req(1, max_tokens=5), r)  # admitted together with a non-streaming neighbour
    chunks = await answer
    result = await r.completion.result  # type: ignore[union-attr]
    assert len(chunks) == 2 and result.ttft_s == OVERHEAD + 4 * PREFILL  # in the first step with its neighbour
    assert e.step_log[0].request_ids[1] == r.id
    handle.cancel()
    await asyncio.sleep(1.0)  # the neighbour's five tokens finish: the engine goes idle
