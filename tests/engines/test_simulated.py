"""SimulatedEngine: continuous batching on the loop clock, seeded output, faults (DESIGN §4)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from prometheus_client import REGISTRY

import rxpipe as rx
from rxpipe import operators as ops
from rxpipe.engines import EngineError, EngineUnavailableError, SimulatedEngine, TokenChunk
from rxpipe.testing import TestSubscriber

from .helpers import DECODE, OVERHEAD, PREFILL, engine, req


def ids(e: SimulatedEngine, step: int) -> tuple[str, ...]:
    return e.step_log[step - 1].request_ids


# exact timings -----------------------------------------------------------------------------------
@pytest.mark.virtual
async def test_known_step_costs_give_exact_ttft_and_end_to_end_times() -> None:
    # Budget 16 tokens/step; A and B have 10-token prompts: A prefills whole in step 1, B gets the
    # 6 tokens left (chunked prefill) and its last 4 in step 2, next to A's first decode.
    e = engine(max_num_batched_tokens=16)
    a, b = e.submit(req(10, max_tokens=3)), e.submit(req(10, max_tokens=2))
    ra, rb = await a.result, await b.result
    step1 = OVERHEAD + 16 * PREFILL                   # 0.03125
    step2 = OVERHEAD + 4 * PREFILL + 1 * DECODE       # 0.0234375
    step3 = OVERHEAD + 2 * DECODE                     # 0.0234375
    assert (ra.ttft_s, ra.e2e_s, ra.queue_time_s) == (step1, step1 + step2 + step3, 0.0)
    assert (rb.ttft_s, rb.e2e_s, rb.queue_time_s) == (step1 + step2, step1 + step2 + step3, 0.0)
    assert (ra.ttft_s, ra.e2e_s, rb.ttft_s) == (0.03125, 0.078125, 0.0546875)
    assert (ra.finish_reason, ra.completion_tokens, ra.prompt_tokens) == ("length", 3, 10)
    assert (rb.finish_reason, rb.completion_tokens) == ("length", 2)
    log = [(s.start_s, s.duration_s, s.num_seqs, s.prefill_tokens, s.decode_tokens, s.decode_seqs)
           for s in e.step_log]
    assert log == [(0.0, step1, 2, 16, 0, 0), (step1, step2, 2, 4, 1, 1), (step1 + step2, step3, 2, 0, 2, 2)]
    assert e.steps == 3 and e.finished == 2 and e.tokens_generated == 5 and e.running == e.waiting == 0


@pytest.mark.virtual
async def test_a_request_arriving_mid_run_joins_the_next_step(loop: asyncio.AbstractEventLoop) -> None:
    e = engine()
    first = e.submit(req(1, max_tokens=10))
    await asyncio.sleep(0.02)  # step 1 ends at 1/64 + 1/1024, step 2 is in flight
    late = e.submit(req(1, max_tokens=1))
    step1 = OVERHEAD + PREFILL
    step2 = OVERHEAD + DECODE
    result = await late.result
    assert late.request.arrival_s == 0.02
    assert result.queue_time_s == step1 + step2 - 0.02  # it starts when the step in flight ends
    assert e.step_log[2].request_ids == (first.request.id, late.request.id)
    await first.result


@pytest.mark.virtual
async def test_max_num_batched_tokens_is_respected_on_every_step() -> None:
    e = engine(max_num_seqs=8, max_num_batched_tokens=32)
    sizes = [5, 40, 3, 31, 1, 17, 64, 2, 9, 33, 12, 8]  # 40, 64 and 33 need chunked prefill
    completions = await rx.from_iterable([req(n, max_tokens=1 + n % 5) for n in sizes]).pipe(
        ops.execute(e)).to_list()
    results = [await c.result for c in completions]
    assert [r.completion_tokens for r in results] == [1 + n % 5 for n in sizes]
    assert all(s.batch_tokens <= 32 and s.num_seqs <= 8 and s.running + s.waiting <= 8 for s in e.step_log)
    assert max(s.batch_tokens for s in e.step_log) == 32
    assert sum(s.prefill_tokens for s in e.step_log) == sum(sizes)
    assert sum(s.decode_tokens for s in e.step_log) == sum(1 + n % 5 for n in sizes) - len(sizes)


@pytest.mark.virtual
async def test_a_prompt_over_the_budget_is_prefilled_in_chunks_and_waits_meanwhile() -> None:
    e = engine(max_num_batched_tokens=8)
    big = e.submit(req(20, max_tokens=1))
    small = e.submit(req(1, max_tokens=1))
    rb = await big.result
    await small.result
    assert [(s.prefill_tokens, s.request_ids) for s in e.step_log] == [
        (8, (big.request.id,)), (8, (big.request.id,)), (5, (big.request.id, small.request.id))]
    assert rb.ttft_s == 3 * OVERHEAD + 21 * PREFILL


@pytest.mark.virtual
async def test_tokens_per_step_makes_multi_token_chunks() -> None:
    e = engine(tokens_per_step=4)
    c = e.submit(req(1, max_tokens=10))
    ts = TestSubscriber[TokenChunk](initial_request=100)
    c.tokens.subscribe(ts)
    await c.result
    assert [chunk.tokens for chunk in ts.values] == [4, 4, 2]
    assert [s.decode_tokens for s in e.step_log] == [0, 4, 2]


# seeded output ------------------------------------------------------------------------------------
async def run_texts(seed: int) -> list[tuple[str, str, int]]:
    e = SimulatedEngine(seed=seed, output_tokens=(3, 9), step_overhead_s=0.0, prefill_s_per_token=0.0,
                        decode_s_per_seq=0.0)
    completions = [e.submit(req(2, max_tokens=None)) for _ in range(8)]
    results = [await c.result for c in completions]
    return [(r.text, r.finish_reason, r.completion_tokens) for r in results]


@pytest.mark.virtual
async def test_output_lengths_and_text_are_deterministic_per_seed() -> None:
    first, again, other = await run_texts(7), await run_texts(7), await run_texts(8)
    assert first == again and first != other
    assert all(reason == "stop" and 3 <= n <= 9 and len(text.split()) == n for text, reason, n in first)
    assert len({n for _, _, n in first}) > 1


# cancellation ------------------------------------------------------------------------------------
@pytest.mark.virtual
async def test_cancelling_a_waiting_sequence_keeps_it_from_starting(loop: asyncio.AbstractEventLoop) -> None:
    e = engine(max_num_seqs=1)
    running = e.submit(req(1, max_tokens=5))
    queued = e.submit(req(1, max_tokens=5))  # beyond max_num_seqs: it waits for the slot
    assert (e.running, e.waiting) == (0, 2)
    await asyncio.sleep(0.05)
    assert (e.running, e.waiting) == (1, 1)
    queued.cancel()
    assert queued.done and e.waiting == 0
    result = await queued.result
    assert (result.finish_reason, result.completion_tokens, result.queue_time_s, result.ttft_s) == (
        "cancelled", 0, 0.05, None)
    await running.result
    assert all(queued.request.id not in s.request_ids for s in e.step_log)


@pytest.mark.virtual
async def test_cancelling_a_running_sequence_frees_its_slot_at_the_end_of_the_step(
        loop: asyncio.AbstractEventLoop) -> None:
    e = engine(prefill_s_per_token=0.0, decode_s_per_seq=0.0)  # every step lasts 1/64 s
    c = e.submit(req(1, max_tokens=100))
    seen: list[tuple[float, int]] = []
    e.add_capacity_listener(lambda: seen.append((loop.time(), e.running)))
    await asyncio.sleep(0.1)  # in the 7th step (6/64 = 0.09375 .. 7/64 = 0.109375)
    ts = TestSubscriber[TokenChunk](initial_request=1)
    c.tokens.subscribe(ts)
    ts.cancel()  # the consumer went away
    assert e.running == 1 and not c.done  # the step in flight still holds it
    result = await c.result
    assert seen == [(7 / 64, 0)]
    assert (result.finish_reason, result.completion_tokens, result.e2e_s) == ("cancelled", 6, 7 / 64)


# fault injection ---------------------------------------------------------------------------------
@pytest.mark.virtual
async def test_error_rate_fails_sequences_at_a_seeded_token() -> None:
    e = engine(error_rate=1.0, seed=3)
    c = e.submit(req(1, max_tokens=8))
    ts = TestSubscriber[TokenChunk](initial_request=100)
    c.tokens.subscribe(ts)
    with pytest.raises(EngineError, match="simulated engine failure"):
        await c.result
    assert isinstance(ts.error, EngineError) and isinstance(c.error, EngineError)
    assert c.done and c.outcome is None and e.running == 0 and len(ts.values) == c.generated_tokens < 8
    assert e.submit(req(1, max_tokens=8)).generated_tokens == 0  # the engine goes on
    await e.aclose()


@pytest.mark.virtual
async def test_stall_rate_hangs_a_sequence_holding_its_slot() -> None:
    e = engine(stall_rate=1.0, stall_s=2.0)
    c = e.submit(req(1, max_tokens=1))
    await asyncio.sleep(1.0)
    assert e.running == 1 and e.steps == 0
    result = await c.result
    assert (result.queue_time_s, result.ttft_s) == (0.0, 2.0 + OVERHEAD + PREFILL)


@pytest.mark.virtual
async def test_down_fails_work_in_flight_and_refuses_new_work_until_up_again() -> None:
    e = engine()
    c = e.submit(req(1, max_tokens=100))
    calls: list[bool] = []
    e.add_capacity_listener(lambda: calls.append(e.available))
    await asyncio.sleep(0.1)
    e.down = True
    assert not e.available and e.down and e.running == 0
    with pytest.raises(EngineUnavailableError):
        await c.result
    with pytest.raises(EngineUnavailableError):
        e.submit(req())
    e.down = False
    assert e.available and calls[-1] is True
    assert (await e.submit(req(1, max_tokens=1)).result).finish_reason == "length"


@pytest.mark.virtual
async def test_aclose_cancels_unfinished_completions_and_refuses_new_ones(loop: asyncio.AbstractEventLoop) -> None:
    e = engine()
    c = e.submit(req(1, max_tokens=100))
    await asyncio.sleep(0.1)
    await e.aclose()
    await e.aclose()
    assert (await c.result).finish_reason == "cancelled" and not e.available
    with pytest.raises(EngineUnavailableError, match="closed"):
        e.submit(req())
    assert loop.is_idle()  # type: ignore[attr-defined]


@pytest.mark.virtual
async def test_deadline_passed_before_start_never_runs(loop: asyncio.AbstractEventLoop) -> None:
    e = engine(max_num_seqs=1)
    expired = e.submit(req(1, max_tokens=2, arrival_s=0.0, deadline_s=-0.5))
    assert expired.done and expired.finish_reason == "deadline" and e.waiting == 0
    first = e.submit(req(1, max_tokens=10))
    later = e.submit(req(1, max_tokens=10, deadline_s=0.05))  # waits for the slot past its deadline
    result = await later.result
    await first.result
    assert (result.finish_reason, result.completion_tokens, result.ttft_s) == ("deadline", 0, None)
    assert all(later.request.id not in s.request_ids for s in e.step_log)


@pytest.mark.virtual
async def test_idle_engine_leaves_no_timer_behind(loop: asyncio.AbstractEventLoop) -> None:
    e = engine(stall_timeout_s=5.0)
    c = e.submit(req(1, max_tokens=3, stream=True))
    c.tokens.subscribe(TestSubscriber[TokenChunk](initial_request=10))
    await c.result
    await asyncio.sleep(0)
    assert loop.is_idle()  # type: ignore[attr-defined]
    assert loop.time() == 3 * OVERHEAD + PREFILL + 2 * DECODE  # the watchdog did not run the clock on


# the seed's models -------------------------------------------------------------------------------
@pytest.mark.virtual
async def test_fixed_latency_never_runs_more_than_five_at_once(loop: asyncio.AbstractEventLoop) -> None:
    e = SimulatedEngine.fixed_latency(concurrency=5, min_s=0.5, max_s=2.0, seed=0)
    peaks: list[int] = []  # running, observed at every admission
    source = rx.from_iterable([req(1, max_tokens=None) for _ in range(30)])
    completions = await source.pipe(ops.execute(e), ops.tap(lambda c: peaks.append(e.running))).to_list()
    results = [await c.result for c in completions]
    spans = [(c.request.arrival_s + r.queue_time_s, c.request.arrival_s + r.e2e_s)  # type: ignore[operator]
             for c, r in zip(completions, results, strict=True)]
    assert all(0.5 <= end - start <= 2.0 for start, end in spans)
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    running = peak = 0
    for _, delta in edges:
        running += delta
        peak = max(peak, running)
    assert peak == 5 and max(peaks) == 5


@pytest.mark.virtual
async def test_per_request_completes_80_requests_per_second_under_saturation(
        loop: asyncio.AbstractEventLoop) -> None:
    e = SimulatedEngine.per_request(slots=8, base_s=0.02, per_token_s=0.002, tokens=(16, 64), seed=0)
    requests = (req(1, max_tokens=None) for _ in range(10_000))
    handle = rx.from_iterable(requests).pipe(ops.execute(e)).subscribe(on_next=lambda c: None)
    await asyncio.sleep(1.0)
    before = e.finished
    assert e.running == 8
    await asyncio.sleep(10.0)
    rate = (e.finished - before) / 10.0
    assert 78 <= rate <= 82
    handle.cancel()
    await e.aclose()


@pytest.mark.virtual
async def test_per_request_timing_is_base_plus_per_token() -> None:
    e = SimulatedEngine.per_request(slots=2, base_s=0.25, per_token_s=0.125)
    plain = e.submit(req(1, max_tokens=4))
    streamed = e.submit(req(1, max_tokens=4, stream=True))
    ts = TestSubscriber[TokenChunk](initial_request=10)
    streamed.tokens.subscribe(ts)
    rp, rs = await plain.result, await streamed.result
    assert (rp.ttft_s, rp.e2e_s, rp.finish_reason) == (0.375, 0.75, "length")
    assert (rs.ttft_s, rs.e2e_s) == (0.375, 0.75) and [c.tokens for c in ts.values] == [1, 1, 1, 1]


# metrics -----------------------------------------------------------------------------------------
def sample(name: str, **labels: str) -> float:
    value = REGISTRY.get_sample_value(name, labels)
    return 0.0 if value is None else value


@pytest.mark.virtual
async def test_engine_metrics_are_exported() -> None:
    e = engine()
    e.name = "metrics_sim"  # the engine label: this test's engine alone, whatever else runs
    steps_before = sample("rxpipe_engine_step_duration_seconds_count", engine="metrics_sim")
    tokens_before = sample("rxpipe_engine_batch_tokens_sum", engine="metrics_sim")
    c = e.submit(req(3, max_tokens=3))
    e.submit(req(1, max_tokens=1, stream=True))  # parked: no consumer yet
    await asyncio.sleep(0.03)
    assert sample("rxpipe_engine_running_seqs", engine="metrics_sim") == 1
    assert sample("rxpipe_engine_waiting_seqs", engine="metrics_sim") == 1
    await c.result
    assert sample("rxpipe_engine_step_duration_seconds_count", engine="metrics_sim") - steps_before == 3
    assert sample("rxpipe_engine_batch_tokens_sum", engine="metrics_sim") - tokens_before == 3 + 2
    await e.aclose()


def test_constructor_validates_its_arguments() -> None:
    for kwargs in ({"max_num_seqs": 0}, {"max_num_batched_tokens": 0}, {"tokens_per_step": 0},
                   {"step_overhead_s": -1.0}, {"stall_timeout_s": 0.0}, {"output_tokens": (5, 2)},
                   {"error_rate": 1.5}, {"step_log": -1}):
        with pytest.raises(ValueError):
            SimulatedEngine(**kwargs)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        SimulatedEngine.fixed_latency(min_s=2.0, max_s=1.0)


def test_defaults_model_a_7b_model_on_one_gpu() -> None:
    e: Any = SimulatedEngine()
    assert (e.max_num_seqs, e.max_num_batched_tokens, e.tokens_per_step, e.model) == (256, 8192, 1, "sim")
    assert e.available and e.free_slots == 256 and e.stall_timeout_s == 10.0
    assert (e.step_overhead_s, e.prefill_s_per_token, e.decode_s_per_seq) == (0.006, 0.00005, 0.0001)


@pytest.mark.virtual
async def test_per_request_mode_keeps_no_finished_sequence_under_sustained_load() -> None:
    import gc
    import weakref

    from rxpipe.engines import CompletionRequest, SimulatedEngine

    engine = SimulatedEngine.per_request(slots=2, base_s=0.01, per_token_s=0.001, tokens=(4, 8))
    finished: list[weakref.ref[Any]] = []
    # keep the engine busy: two running and one waiting at all times, so it never goes idle
    pending = [engine.submit(CompletionRequest(prompt="x")) for _ in range(3)]
    for _ in range(60):
        done = pending.pop(0)
        await done.result
        finished.append(weakref.ref(done))
        del done
        pending.append(engine.submit(CompletionRequest(prompt="x")))
    gc.collect()
    assert sum(ref() is not None for ref in finished) == 0
    for completion in pending:
        completion.cancel()
    await engine.aclose()


@pytest.mark.virtual
async def test_steps_are_paced_on_the_clock_while_token_delivery_takes_time(loop: asyncio.AbstractEventLoop) -> None:
    # Delivering a token costs 1/128 s of CPU here (the consumer moves the clock in on_next). A step
    # that follows another is due at that one's due end, so delivery overlaps the next step (as a
    # GPU overlaps output processing) instead of adding to it: step k starts at k × step time.
    e = engine(max_num_seqs=1, prefill_s_per_token=0.0, decode_s_per_seq=0.0)
    c = e.submit(req(1, max_tokens=4))
    ts = TestSubscriber(initial_request=rx.UNBOUNDED)
    c.tokens.pipe(ops.tap(on_next=lambda _: loop.advance(1 / 128))).subscribe(ts)
    result = await c.result
    assert [s.start_s for s in e.step_log] == [0.0, OVERHEAD, 2 * OVERHEAD, 3 * OVERHEAD]
    assert (result.ttft_s, result.e2e_s, len(ts.values)) == (OVERHEAD, 4 * OVERHEAD, 4)
    # an engine that went idle starts its next step from the current time, not from a past due end
    await asyncio.sleep(1.0)
    started = loop.time()
    await e.submit(req(1, max_tokens=1)).result
    assert e.step_log[-1].start_s == started


def test_an_engine_with_work_in_flight_on_a_loop_in_another_thread_refuses_this_threads_loop() -> None:
    e = SimulatedEngine(max_num_seqs=2, step_overhead_s=3600.0, decode_s_per_seq=0.0, prefill_s_per_token=0.0)
    other = asyncio.new_event_loop()
    thread = threading.Thread(target=other.run_forever)
    thread.start()
    try:
        async def submit_there() -> None:
            e.submit(req(4, max_tokens=5))  # in flight: its step ends in an hour

        asyncio.run_coroutine_threadsafe(submit_there(), other).result()
        assert e.running + e.waiting == 1 and other.is_running()

        async def submit_here() -> None:
            with pytest.raises(RuntimeError, match="in flight on another event loop"):
                e.submit(req(4, max_tokens=5))

        asyncio.run(submit_here())
    finally:
        other.call_soon_threadsafe(other.stop)
        thread.join()
        other.close()
