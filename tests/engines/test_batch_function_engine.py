"""``BatchFunctionEngine``: a synchronous batch function in worker threads, dynamic batching."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

import rxpipe as rx
from rxpipe import operators as ops
from rxpipe.engines import (
    BatchFunctionEngine,
    Completion,
    CompletionRequest,
    EngineError,
    EngineUnavailableError,
    TokenChunk,
    request_text,
)
from rxpipe.testing import TestPublisher, TestSubscriber


class Recorder:
    """A deterministic batch function: upper-cases its inputs and records every batch (thread-safe).

    ``fail_on``: a batch containing this input raises ``ValueError``. ``gated``: each batch waits
    for :meth:`release` (one call per batch, in order) before it returns.
    """

    def __init__(self, fail_on: str | None = None, gated: bool = False) -> None:
        self.batches: list[list[str]] = []
        self.fail_on = fail_on
        self.gated = gated
        self._lock = threading.Lock()
        self._gate = threading.Semaphore(0)
        self.threads: set[str] = set()

    def __call__(self, inputs: list[str]) -> list[str]:
        with self._lock:
            self.batches.append(list(inputs))
            self.threads.add(threading.current_thread().name)
        if self.gated and not self._gate.acquire(timeout=10):
            raise TimeoutError("the test never released this batch")
        if self.fail_on is not None and self.fail_on in inputs:
            raise ValueError(f"cannot handle {self.fail_on!r}")
        return [x.upper() for x in inputs]

    def release(self, batches: int = 1) -> None:
        for _ in range(batches):
            self._gate.release()

    @property
    def sizes(self) -> list[int]:
        with self._lock:
            return [len(b) for b in self.batches]


def req(text: str, **kwargs: Any) -> CompletionRequest:
    return CompletionRequest(prompt=text, **kwargs)


async def until(predicate: Any, what: str = "condition", timeout_s: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    for _ in range(int(timeout_s / 0.002)):
        if predicate():
            return
        await asyncio.sleep(0)
        await loop.run_in_executor(None, lambda: None)  # a real thread round trip (also on virtual time)
    raise AssertionError(f"timed out waiting for {what}")


# -- construction -----------------------------------------------------------------------------------
def test_constructor_validates_and_sizes_capacity() -> None:
    with pytest.raises(TypeError, match="callable"):
        BatchFunctionEngine("nope", 4, 0.01)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_batch_size"):
        BatchFunctionEngine(Recorder(), 0, 0.01)
    with pytest.raises(ValueError, match="workers"):
        BatchFunctionEngine(Recorder(), 4, 0.01, workers=0)
    with pytest.raises(ValueError, match="max_delay_s"):
        BatchFunctionEngine(Recorder(), 4, -1)
    e = BatchFunctionEngine(Recorder(), 8, 0.01, workers=3, model="embed")
    assert e.max_num_seqs == 24 and e.free_slots == 24 and e.model == "embed" and e.available
    assert e.running == 0 and e.waiting == 0


def test_request_text_is_the_prompt_or_the_messages_text() -> None:
    assert request_text(req("hi")) == "hi"
    messages = [{"role": "system", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url"},
                                             {"type": "text", "text": "b"}]}]
    assert request_text(CompletionRequest(messages=messages)) == "be brief\na\nb"


# -- batching ----------------------------------------------------------------------------------------
async def test_batch_sizes_never_exceed_the_max_and_results_map_to_their_requests() -> None:
    fn = Recorder()
    e = BatchFunctionEngine(fn, 8, 0.005, workers=2, batch_log=1000)
    try:
        requests = [req(f"item-{i:02d}") for i in range(53)]
        completions = await rx.from_iterable(requests).pipe(ops.execute(e)).to_list()
        results = [await c.result for c in completions]
        assert [c.request for c in completions] == requests
        assert [r.text for r in results] == [f"ITEM-{i:02d}" for i in range(53)]
        assert [BatchFunctionEngine.output_of(c) for c in completions] == [r.text for r in results]
        assert all(1 <= size <= 8 for size in fn.sizes) and sum(fn.sizes) == 53
        assert max(fn.sizes) == 8  # a queue that never runs dry fills whole batches
        assert sorted(x for batch in fn.batches for x in batch) == [r.prompt for r in requests]
        assert e.batches == len(fn.sizes) and e.items == 53
        assert [b.size for b in e.batch_log] == fn.sizes
        assert len(fn.threads) <= 2 and all(name.startswith("rxpipe-batch-") for name in fn.threads)
        assert all(r.finish_reason == "stop" and r.completion_tokens == 2 for r in results)
        assert e.running == 0 and e.waiting == 0 and e.free_slots == 16
    finally:
        await e.aclose()


@pytest.mark.virtual
async def test_a_batch_closes_at_max_delay_after_its_first_item(loop: asyncio.AbstractEventLoop) -> None:
    fn = Recorder()
    e = BatchFunctionEngine(fn, 4, 1 / 16, batch_log=10)  # binary fractions: exact loop-clock sums
    try:
        first = e.submit(req("a"))
        await asyncio.sleep(1 / 32)
        rest = [e.submit(req(x)) for x in "bc"]
        assert e.waiting == 3 and e.running == 0 and e.free_slots == 1 and fn.batches == []
        results = [await c.result for c in [first, *rest]]
        assert fn.batches == [["a", "b", "c"]]
        assert e.batch_log[0].start_s == 1 / 16 and e.batch_log[0].size == 3
        assert [r.queue_time_s for r in results] == [1 / 16, 1 / 32, 1 / 32]
    finally:
        await e.aclose()


@pytest.mark.virtual
async def test_a_full_batch_goes_at_once_and_zero_delay_still_gathers_one_loop_iteration() -> None:
    fn = Recorder()
    e = BatchFunctionEngine(fn, 4, 10.0, batch_log=10)
    zero = BatchFunctionEngine(fn, 4, 0.0, batch_log=10)
    try:
        full = [e.submit(req(x)) for x in "abcd"]
        assert e.running == 4 and e.waiting == 0 and e.free_slots == 0
        await asyncio.gather(*(c.result for c in full))
        assert e.batch_log[0].start_s == 0.0
        burst = [zero.submit(req(x)) for x in "xyz"]
        assert zero.waiting == 3  # not yet: the rest of this iteration may join
        await asyncio.gather(*(c.result for c in burst))
        assert fn.batches == [["a", "b", "c", "d"], ["x", "y", "z"]]
    finally:
        await e.aclose()
        await zero.aclose()


async def test_a_batch_whose_delay_passed_while_workers_were_busy_keeps_filling() -> None:
    fn = Recorder(gated=True)
    e = BatchFunctionEngine(fn, 4, 0.001, workers=1)
    try:
        first = [e.submit(req(f"a{i}")) for i in range(4)]
        await until(lambda: fn.sizes == [4], "the first batch")
        second = [e.submit(req(f"b{i}")) for i in range(2)]
        await asyncio.sleep(0.01)  # their delay passes; the only worker is busy
        second += [e.submit(req(f"b{i}")) for i in range(2, 4)]
        assert e.waiting == 4 and e.running == 4 and e.free_slots == 0
        fn.release(2)
        await asyncio.gather(*(c.result for c in first + second))
        assert fn.sizes == [4, 4]
    finally:
        fn.release(10)
        await e.aclose()


async def test_demand_is_the_free_batch_capacity() -> None:
    fn = Recorder(gated=True)
    e = BatchFunctionEngine(fn, 4, 0.001, workers=2)
    pub = TestPublisher[CompletionRequest]()
    out = TestSubscriber[Completion](initial_request=1000)
    pub.pipe(ops.execute(e)).subscribe(out)
    try:
        assert pub.requests == [8]  # max_batch_size * workers
        pub.emit(*[req(f"x{i}") for i in range(8)])
        await until(lambda: fn.sizes == [4, 4], "two batches")
        assert e.running == 8 and e.free_slots == 0 and pub.requests == [8]
        fn.release()  # one batch returns: room for exactly one more batch
        await until(lambda: len(pub.requests) == 2, "more demand")
        assert pub.requests == [8, 4] and e.running == 4
        fn.release()
        await until(lambda: sum(pub.requests) == 16, "more demand")
        assert pub.requests == [8, 4, 4] and pub.outstanding == 8
        assert all(c.done for c in out.values) and len(out.values) == 8
        out.cancel()
        assert pub.cancelled
    finally:
        fn.release(10)
        await e.aclose()


# -- errors -------------------------------------------------------------------------------------------
async def test_a_failing_batch_fails_only_its_own_requests() -> None:
    fn = Recorder(fail_on="bad")
    e = BatchFunctionEngine(fn, 2, 1.0, workers=1, batch_log=10)
    try:
        completions = [e.submit(req(x)) for x in ("a", "b", "bad", "c", "d", "e")]
        outcomes: list[str] = []
        for c in completions:
            try:
                outcomes.append((await c.result).text)
            except ValueError as error:
                outcomes.append(f"error: {error}")
        assert fn.batches == [["a", "b"], ["bad", "c"], ["d", "e"]]
        assert outcomes == ["A", "B", "error: cannot handle 'bad'", "error: cannot handle 'bad'", "D", "E"]
        assert [b.error for b in e.batch_log] == [None, "ValueError(\"cannot handle 'bad'\")", None]
        assert e.free_slots == 2
    finally:
        await e.aclose()


async def test_the_error_reaches_the_token_stream_of_each_affected_request() -> None:
    e = BatchFunctionEngine(Recorder(fail_on="bad"), 2, 1.0)
    try:
        c = e.submit(req("bad", stream=True))
        e.submit(req("other"))
        ts = TestSubscriber[TokenChunk](initial_request=5)
        c.tokens.subscribe(ts)
        await ts.await_done()
        assert isinstance(ts.error, ValueError) and ts.values == []
        assert isinstance(c.error, ValueError)
    finally:
        await e.aclose()


async def test_a_wrong_number_of_outputs_fails_that_batch_with_engine_error() -> None:
    calls: list[list[str]] = []

    def short(inputs: list[str]) -> list[str]:
        calls.append(inputs)
        return inputs[:-1] if "drop" in inputs else inputs

    e = BatchFunctionEngine(short, 2, 1.0)
    try:
        completions = [e.submit(req(x)) for x in ("drop", "x", "y", "z")]
        for c in completions[:2]:
            with pytest.raises(EngineError, match="returned 1 outputs for 2 inputs"):
                await c.result
        assert [(await c.result).text for c in completions[2:]] == ["y", "z"]
    finally:
        await e.aclose()


async def test_output_maps_the_text_and_the_raw_output_stays_reachable() -> None:
    def embed(inputs: list[str]) -> list[list[float]]:
        return [[float(len(x)), 0.5] for x in inputs]

    def describe(vector: list[float]) -> str:
        if vector[0] == 3.0:
            raise KeyError("three")
        return f"dim={len(vector)}"

    e = BatchFunctionEngine(embed, 4, 0.0, output=describe)
    try:
        ok, bad, empty_text = (e.submit(req(x)) for x in ("ab", "abc", "abcd"))
        result = await ok.result
        assert result.text == "dim=2" and BatchFunctionEngine.output_of(ok) == [2.0, 0.5]
        with pytest.raises(KeyError, match="three"):
            await bad.result  # only this request: its output could not be mapped
        assert (await empty_text.result).text == "dim=2"
    finally:
        await e.aclose()
    nothing = BatchFunctionEngine(lambda xs: [None] * len(xs), 2, 0.0, output=lambda raw: "")
    try:
        r = await nothing.submit(req("q")).result
        assert r.text == "" and r.completion_tokens == 0 and r.ttft_s is None
    finally:
        await nothing.aclose()


async def test_an_input_mapping_error_is_raised_by_submit() -> None:
    e = BatchFunctionEngine(Recorder(), 2, 0.0, input=lambda r: r.sampling["needed"])
    try:
        with pytest.raises(KeyError, match="needed"):
            e.submit(req("x"))
        assert e.waiting == 0
        c = e.submit(req("y", sampling={"needed": "z"}))
        assert (await c.result).text == "Z"
    finally:
        await e.aclose()


# -- cancellation, deadlines, streaming, close -------------------------------------------------------
@pytest.mark.virtual
async def test_a_request_cancelled_while_waiting_is_skipped_and_frees_its_slot_at_once() -> None:
    fn = Recorder()
    e = BatchFunctionEngine(fn, 4, 0.05)
    notified: list[int] = []
    e.add_capacity_listener(lambda: notified.append(e.free_slots))
    try:
        a, b, c = (e.submit(req(x)) for x in "abc")
        b.cancel()
        assert b.finish_reason == "cancelled" and e.waiting == 2 and e.free_slots == 2 and notified == [2]
        assert [(await x.result).text for x in (a, c)] == ["A", "C"]
        assert fn.batches == [["a", "c"]]
    finally:
        await e.aclose()


async def test_a_request_cancelled_while_its_batch_runs_finishes_cancelled_when_it_returns() -> None:
    fn = Recorder(gated=True)
    e = BatchFunctionEngine(fn, 2, 0.0)
    try:
        a, b = e.submit(req("a")), e.submit(req("b"))
        await until(lambda: fn.sizes == [2], "the batch")
        b.cancel()
        assert not b.done and e.running == 2  # a thread cannot be interrupted: the slot stays taken
        fn.release()
        assert (await a.result).text == "A"
        result = await b.result
        assert result.finish_reason == "cancelled" and result.text == ""
        assert BatchFunctionEngine.output_of(b) is None and e.free_slots == 2
    finally:
        fn.release(10)
        await e.aclose()


@pytest.mark.virtual
async def test_requests_past_their_deadline_never_enter_a_batch(loop: asyncio.AbstractEventLoop) -> None:
    fn = Recorder()
    e = BatchFunctionEngine(fn, 4, 0.05)
    try:
        late = e.submit(req("late", deadline_s=0.01))
        ok = e.submit(req("ok", deadline_s=1.0))
        expired = e.submit(req("expired", deadline_s=-1.0))
        assert expired.finish_reason == "deadline" and e.waiting == 2
        assert (await late.result).finish_reason == "deadline"
        assert (await ok.result).text == "OK" and fn.batches == [["ok"]]
    finally:
        await e.aclose()


async def test_a_streamed_request_gets_its_text_as_one_chunk() -> None:
    e = BatchFunctionEngine(Recorder(), 2, 0.0)
    try:
        c = e.submit(req("stream me", stream=True))
        ts = TestSubscriber[TokenChunk](initial_request=0)
        c.tokens.subscribe(ts)
        result = await c.result  # done without credit: the chunk waits for its consumer
        assert ts.values == [] and c.pending_tokens == 3 and e.free_slots == 2
        ts.request(1)
        assert ts.values == [TokenChunk(0, "STREAM ME", 3)] and ts.completed
        assert result.text == "STREAM ME" and result.ttft_s == result.e2e_s
    finally:
        await e.aclose()


async def test_aclose_cancels_waiting_requests_and_awaits_the_running_batch() -> None:
    fn = Recorder(gated=True)
    e = BatchFunctionEngine(fn, 2, 0.0, workers=1)
    running = [e.submit(req(x)) for x in "ab"]
    await until(lambda: fn.sizes == [2], "the batch")
    waiting = e.submit(req("c"))
    closing = asyncio.ensure_future(e.aclose())
    await asyncio.sleep(0)
    assert waiting.finish_reason == "cancelled" and not e.available and not closing.done()
    fn.release()
    await closing
    assert [c.finish_reason for c in running] == ["cancelled", "cancelled"] and fn.sizes == [2]
    with pytest.raises(EngineUnavailableError, match="closed"):
        e.submit(req("late"))
    await e.aclose()  # idempotent
