"""``execute(engine)``: free slots are the pipeline's demand (DESIGN §4)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import rxpipe as rx
from rxpipe import MissingBackpressureError
from rxpipe import operators as ops
from rxpipe.engines import Completion, CompletionRequest, EngineUnavailableError, ExecuteFlowable, SimulatedEngine
from rxpipe.stage import Capabilities
from rxpipe.testing import TestPublisher, TestSubscriber

from .helpers import OVERHEAD, engine, req


def wire(e: SimulatedEngine, *, demand: int = 1_000_000, name: str | None = None,
         publisher: TestPublisher[Any] | None = None) -> tuple[TestPublisher[Any], TestSubscriber[Completion]]:
    pub = publisher if publisher is not None else TestPublisher[Any]()
    out = TestSubscriber[Completion](initial_request=demand)
    pub.pipe(ops.execute(e, name=name)).subscribe(out)
    return pub, out


def steady(**kwargs: Any) -> SimulatedEngine:
    """Every step lasts 1/64 s (no prefill or decode cost)."""
    return engine(prefill_s_per_token=0.0, decode_s_per_seq=0.0, **kwargs)


def test_execute_needs_an_engine() -> None:
    with pytest.raises(TypeError, match="Engine"):
        ops.execute(object())
    stage = rx.empty().pipe(ops.execute(steady(), name="llm"))
    assert isinstance(stage, ExecuteFlowable) and stage.name == "llm" and stage.kind == "execute"
    assert stage.engine.max_num_seqs == 4


# the demand rule ---------------------------------------------------------------------------------
@pytest.mark.virtual
async def test_recorded_requests_sum_to_completions_plus_max_num_seqs_at_every_observation(
        loop: asyncio.AbstractEventLoop) -> None:
    e = steady(max_num_seqs=4)
    pub, out = wire(e)
    total = 30
    emitted: list[CompletionRequest] = []

    def finished() -> int:
        return sum(1 for r in emitted if r.completion is not None and r.completion.done)

    observations = 0

    def observe() -> None:
        nonlocal observations
        observations += 1
        assert sum(pub.requests) == finished() + 4
        assert pub.outstanding + e.running + e.waiting == 4

    e.add_capacity_listener(observe)  # after the executor's: sees the state once it topped up
    assert pub.requests == [4]
    while finished() < total:
        while pub.outstanding and len(emitted) < total:
            r = req(1, max_tokens=1 + len(emitted) % 7)
            emitted.append(r)
            pub.emit(r)
            observe()
        await asyncio.sleep(0.01)
        observe()
    assert sum(pub.requests) == total + 4 and observations > 2 * total
    assert set(pub.requests[1:]) <= {1, 2, 3, 4}
    assert len(out.values) == total and not pub.cancelled
    out.cancel()
    assert pub.cancelled


@pytest.mark.virtual
async def test_unbatched_upstream_gets_exactly_the_free_slots() -> None:
    e = steady(max_num_seqs=4)
    busy = e.submit(req(1, max_tokens=3))  # another producer holds one slot
    pub, out = wire(e)
    assert pub.requests == [3]
    pub.emit(req(1, max_tokens=1), req(1, max_tokens=2))
    assert pub.requests == [3] and e.free_slots == 1  # one asked for, not yet arrived
    await asyncio.sleep(OVERHEAD)
    assert pub.requests == [3, 1]  # the one-token request left at the end of step 1
    await asyncio.sleep(OVERHEAD)
    assert pub.requests == [3, 1, 1]
    await busy.result  # the other producer's slot frees too: the stage takes it
    assert pub.requests == [3, 1, 1, 1] and pub.outstanding == 4 and e.running + e.waiting == 0
    out.cancel()


class _BatchingPublisher(TestPublisher[Any]):
    """A hand-driven upstream declaring what ``ops.batch(max_size)`` declares."""

    def __init__(self, max_size: int) -> None:
        super().__init__()
        self._declared = Capabilities(max_batch_size=max_size)

    @property
    def capabilities(self) -> Capabilities:
        return self._declared


def batching_publisher(max_size: int) -> TestPublisher[Any]:
    """A hand-driven upstream that looks like ``ops.batch(max_size)`` to the executor."""
    return _BatchingPublisher(max_size)


@pytest.mark.virtual
async def test_batched_upstream_gets_a_batch_only_when_a_whole_one_fits() -> None:
    e = steady(max_num_seqs=8)
    pub, out = wire(e, publisher=batching_publisher(4))
    assert pub.requests == [2]  # room for two whole batches
    pub.emit([req(1, max_tokens=1), req(1, max_tokens=1), req(1, max_tokens=2), req(1, max_tokens=2)])
    pub.emit([req(1, max_tokens=3) for _ in range(4)])
    await asyncio.sleep(OVERHEAD)  # two slots freed: not room for a batch
    assert pub.requests == [2] and e.free_slots == 2
    await asyncio.sleep(OVERHEAD)  # four freed
    assert pub.requests == [2, 1]
    pub.emit([req(1, max_tokens=5)])  # a partial batch (the batch timer fired)
    assert e.running + e.waiting == 5 and pub.requests == [2, 1]
    await asyncio.sleep(OVERHEAD)  # 4 left, 1 still running: room for one batch
    assert pub.requests == [2, 1, 1]
    assert len(out.values) == 9
    out.cancel()


@pytest.mark.virtual
async def test_with_ops_batch_upstream() -> None:
    e = steady(max_num_seqs=8)
    requests = [req(1, max_tokens=1 + i % 5) for i in range(40)]
    completions = await rx.from_iterable(requests).pipe(ops.batch(4, max_delay_s=0.01), ops.execute(e)).to_list()
    results = [await c.result for c in completions]
    assert [r.completion_tokens for r in results] == [1 + i % 5 for i in range(40)]
    assert all(s.running + s.waiting <= 8 for s in e.step_log)
    assert max(s.running for s in e.step_log) == 8


# what the stage hands out ------------------------------------------------------------------------
@pytest.mark.virtual
async def test_admission_fills_the_reply_slot_and_the_arrival_time(loop: asyncio.AbstractEventLoop) -> None:
    e = steady()
    pub, out = wire(e)
    await asyncio.sleep(0.5)
    r = req(1, max_tokens=2, reply=loop.create_future())
    pub.emit(r)
    assert r.reply is not None and r.reply.done() and r.reply.result() is r.completion is out.values[0]
    assert r.arrival_s == 0.5
    result = await r.completion.result  # type: ignore[union-attr]
    assert result.e2e_s == 2 * OVERHEAD
    out.cancel()


@pytest.mark.virtual
async def test_a_request_cancelled_in_the_queue_never_starts_and_is_replaced(loop: asyncio.AbstractEventLoop) -> None:
    e = steady(max_num_seqs=1)
    # arrival_s: when the edge accepted them (all at 0.0; execute fills it only when None)
    a, b, c = (req(1, max_tokens=4, reply=loop.create_future(), arrival_s=0.0) for _ in range(3))
    completions: list[Completion] = []
    handle = rx.from_iterable([a, b, c]).pipe(ops.execute(e, name="exec_q")).subscribe(on_next=completions.append)
    assert [x.request for x in completions] == [a]
    b.cancel()  # its client left while it was queued upstream
    assert b.reply is not None and b.reply.cancelled()
    await asyncio.sleep(1.0)
    assert [x.request for x in completions] == [a, c] and b.completion is None
    assert all(b.id not in s.request_ids for s in e.step_log)
    assert c.completion is not None and c.completion.outcome is not None
    assert c.completion.outcome.queue_time_s == 4 * OVERHEAD  # it took a's slot when a finished
    stats = handle.subscription.statistics()  # type: ignore[union-attr]  # the stage's subscription
    assert (stats.stage, stats.dropped, stats.items_in, stats.items_out) == ("exec_q", {"cancelled": 1}, 3, 2)
    handle.cancel()


@pytest.mark.virtual
async def test_a_request_past_its_deadline_is_answered_without_running(loop: asyncio.AbstractEventLoop) -> None:
    e = steady(max_num_seqs=1)
    a = req(1, max_tokens=10)
    late = req(1, max_tokens=10, deadline_s=0.05, reply=loop.create_future(), arrival_s=0.0)
    completions = await rx.from_iterable([a, late]).pipe(ops.execute(e)).to_list()
    assert [x.request for x in completions] == [a, late]
    assert late.reply is not None and late.reply.result().finish_reason == "deadline"
    result = await late.reply.result().result
    assert (result.finish_reason, result.completion_tokens, result.queue_time_s) == ("deadline", 0, 10 * OVERHEAD)
    assert all(late.id not in s.request_ids for s in e.step_log)


# bounds ------------------------------------------------------------------------------------------
@pytest.mark.virtual
async def test_holds_at_most_max_num_seqs_undelivered_completions() -> None:
    e = steady(max_num_seqs=4)
    pub, out = wire(e, demand=0)
    assert pub.requests == [4]
    pub.emit(*(req(1, max_tokens=1) for _ in range(4)))
    await asyncio.sleep(1.0)  # all four finished, none delivered
    assert e.running == 0 and e.free_slots == 4 and pub.requests == [4] and out.values == []
    out.request(2)
    assert len(out.values) == 2 and pub.requests == [4, 2]
    out.request(10)
    assert len(out.values) == 4 and pub.requests == [4, 2, 2]
    out.cancel()


# protocol: errors, cancel, completion ------------------------------------------------------------
@pytest.mark.virtual
async def test_upstream_emitting_beyond_demand_is_an_error() -> None:
    e = steady(max_num_seqs=2)
    pub, out = wire(e)
    pub.emit(req(), req(), req())
    assert isinstance(out.error, MissingBackpressureError) and pub.cancelled
    assert len(out.values) == 2
    await e.aclose()


@pytest.mark.virtual
async def test_an_item_that_is_not_a_request_is_a_type_error() -> None:
    pub, out = wire(steady())
    pub.emit("not a request")
    assert isinstance(out.error, TypeError) and pub.cancelled


def held_behind_another_producer(e: SimulatedEngine, loop: asyncio.AbstractEventLoop) -> tuple[
        TestPublisher[Any], TestSubscriber[Completion], CompletionRequest]:
    """One slot; the stage asked for 1, then someone else took the slot: the arrival is held."""
    pub, out = wire(e)
    assert pub.requests == [1]
    e.submit(req(1, max_tokens=100))
    r = req(1, max_tokens=1, reply=loop.create_future())
    pub.emit(r)
    assert r.completion is None and not r.reply.done()  # type: ignore[union-attr]
    return pub, out, r


@pytest.mark.virtual
async def test_upstream_error_fails_pending_replies_and_reaches_downstream(loop: asyncio.AbstractEventLoop) -> None:
    e = steady(max_num_seqs=1)
    pub, out, held = held_behind_another_producer(e, loop)
    pub.error(LookupError("queue gone"))
    assert isinstance(out.error, LookupError)
    assert held.reply is not None and isinstance(held.reply.exception(), LookupError)
    await e.aclose()


@pytest.mark.virtual
async def test_downstream_cancel_cancels_upstream_and_fails_pending_replies(loop: asyncio.AbstractEventLoop) -> None:
    e = steady(max_num_seqs=1)
    pub, out, held = held_behind_another_producer(e, loop)
    out.cancel()
    assert pub.cancelled
    assert held.reply is not None and isinstance(held.reply.exception(), EngineUnavailableError)
    assert e.running + e.waiting == 1  # admitted work is not the stage's to stop
    await e.aclose()


@pytest.mark.virtual
async def test_completion_waits_for_held_requests_then_follows_them(loop: asyncio.AbstractEventLoop) -> None:
    e = steady(max_num_seqs=1)
    pub, out, held = held_behind_another_producer(e, loop)
    pub.complete()
    assert not out.completed
    await asyncio.sleep(1.0)  # the other producer's request finished at 100/64 s
    assert not out.completed
    await asyncio.sleep(1.0)
    assert out.completed and [c.request for c in out.values] == [held]
    assert pub.requests == [1]  # nothing asked after completion


@pytest.mark.virtual
async def test_engine_down_answers_queued_replies_at_once_and_holds_the_rest(loop: asyncio.AbstractEventLoop) -> None:
    e = steady(max_num_seqs=2)
    e.down = True
    pub, out = wire(e)
    assert pub.requests == [2]
    with_reply = req(reply=loop.create_future())
    pub.emit(with_reply)
    assert isinstance(with_reply.reply.exception(), EngineUnavailableError)  # type: ignore[union-attr]
    assert pub.requests == [2, 1]  # replaced by one more
    plain = [req(1, max_tokens=1), req(1, max_tokens=1)]
    pub.emit(*plain)  # no reply slot: held until the engine is back; demand pauses
    assert pub.requests == [2, 1] and out.values == []
    pub.complete()
    e.down = False
    assert [c.request for c in out.values] == plain
    await asyncio.sleep(1.0)
    assert out.completed


@pytest.mark.virtual
async def test_statistics_report_demand_and_holdings() -> None:
    e = steady(max_num_seqs=3)
    pub, out = wire(e, demand=1, name="exec_stats")
    pub.emit(req(1, max_tokens=50), req(1, max_tokens=50))
    stage = out.subscription.upstream  # type: ignore[union-attr]  # under the strict boundary
    stats = stage.statistics()
    assert (stats.stage, stats.demand, stats.buffered, stats.capacity, stats.items_in, stats.items_out) == (
        "exec_stats", 0, 1, 3, 2, 1)
    out.cancel()
    await e.aclose()


# real event loops (asyncio and uvloop) -----------------------------------------------------------
def read_tokens(texts: dict[str, list[str]]) -> Any:
    """A tap that subscribes to each streaming Completion's tokens as soon as it is admitted."""
    def subscribe(c: Completion) -> None:
        if c.request.stream:
            chunks = texts.setdefault(c.request.id, [])
            c.tokens.subscribe(on_next=lambda chunk: chunks.append(chunk.text))
    return ops.tap(subscribe)


async def test_runs_on_real_loops_with_tiny_step_times() -> None:
    e = SimulatedEngine(max_num_seqs=4, step_overhead_s=0.0005, prefill_s_per_token=0.0, decode_s_per_seq=0.0)
    texts: dict[str, list[str]] = {}
    completions = await rx.range(0, 12).pipe(
        ops.map(lambda i: req(2, max_tokens=1 + i % 3, stream=i % 2 == 0)), ops.execute(e), read_tokens(texts),
    ).to_list()
    results = [await c.result for c in completions]
    assert [r.completion_tokens for r in results] == [1 + i % 3 for i in range(12)]
    assert all("".join(texts[c.request.id]) == r.text for c, r in zip(completions, results, strict=True)
               if c.request.stream)
    assert e.running == e.waiting == 0


async def test_per_request_engine_on_real_loops() -> None:
    e = SimulatedEngine.per_request(slots=3, base_s=0.001, per_token_s=0.0005, tokens=(1, 4))
    texts: dict[str, list[str]] = {}
    completions = await rx.range(0, 9).pipe(
        ops.map(lambda i: req(stream=i % 3 == 0, max_tokens=None)), ops.execute(e), read_tokens(texts)).to_list()
    results = [await c.result for c in completions]
    assert all(1 <= r.completion_tokens <= 4 and r.finish_reason == "stop" for r in results)
    assert all("".join(texts[c.request.id]) == r.text for c, r in zip(completions, results, strict=True)
               if c.request.stream)


def test_a_batch_larger_than_the_engine_is_refused_at_once() -> None:
    import pytest as _pytest

    import rxpipe as _rx
    from rxpipe import operators as _ops
    from rxpipe.engines import SimulatedEngine as _Sim

    with _pytest.raises(ValueError, match=r"batch max_size \(8\) exceeds the engine's max_num_seqs \(4\)"):
        _rx.just(1).pipe(_ops.batch(8), _ops.execute(_Sim(max_num_seqs=4)))


# issue 16: batching is recognised by declared capability, through pass-through stages -------------
@pytest.mark.virtual
async def test_batch_then_tap_then_execute_asks_one_batch_per_whole_free_batch() -> None:
    e = steady(max_num_seqs=4)
    pub = TestPublisher[Any]()
    flow = pub.pipe(ops.batch(4, name="b16"), ops.tap(lambda b: None), ops.map(lambda b: b),
                    ops.execute(e))
    assert isinstance(flow, ExecuteFlowable) and flow.batched and flow.unit == 4
    out = TestSubscriber[Completion](initial_request=1_000)
    flow.subscribe(out)
    # One batch demanded (4 free slots = one whole batch): the batcher asks 2 batches' worth.
    # Recognised by name, the executor asked 4 batches and the batcher pulled 16 requests.
    assert pub.requests == [8]
    pub.emit(*(req(1, max_tokens=1) for _ in range(8)))
    assert e.running + e.waiting == 4 and pub.outstanding == 0
    out.cancel()


def test_a_scan_between_batch_and_execute_hides_the_batches() -> None:
    flow = rx.empty().pipe(ops.batch(4), ops.scan(lambda acc, b: b, []), ops.execute(steady()))
    assert isinstance(flow, ExecuteFlowable) and not flow.batched and flow.unit == 1


async def test_one_pump_pass_per_arrival_its_own_deliveries_need_no_other(monkeypatch: pytest.MonkeyPatch) -> None:
    from rxpipe.serving import _execute as executor

    passes: list[int] = []
    original = executor._ExecuteSubscription._pump_pass

    def counted(self: Any) -> None:
        passes.append(len(self.held))
        original(self)

    monkeypatch.setattr(executor._ExecuteSubscription, "_pump_pass", counted)
    e = steady(max_num_seqs=4)
    pub, out = wire(e)
    assert pub.requests == [4] and passes == [0]
    pub.emit(req(1, max_tokens=2))
    # one pass submits it, delivers its Completion and asks for nothing more (3 outstanding
    # for 3 free slots): the delivery made in the pass is counted by the same pass
    assert passes == [0, 1] and len(out.values) == 1 and pub.requests == [4]
    await out.values[0].result
    assert pub.requests == [4, 1] and passes == [0, 1, 0]  # the slot freed: one pass asks for it
    out.cancel()
