"""balance: each item to the branch with the most demand (ties round-robin), never beyond a branch's
demand, cancel and error rules, replicas' availability, and failover of unstarted requests."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import rxpipe as rx
from rxpipe import UNBOUNDED, MissingBackpressureError
from rxpipe import operators as ops
from rxpipe.engines import Completion, CompletionRequest, EngineUnavailableError, SimulatedEngine
from rxpipe.flowable import Flowable
from rxpipe.testing import TestPublisher, TestSubscriber


class Probe:
    """A branch that asks for what the test says (``request``), recording what it gets."""

    def __init__(self) -> None:
        self.ts = TestSubscriber[Any]()

    def __call__(self, port: Flowable[Any]) -> Flowable[Any]:
        def attach() -> Flowable[Any]:
            port.subscribe(self.ts)  # when the balance is subscribed: the port joins its run
            return rx.empty()
        return rx.defer(attach)


def test_most_demand_first_and_round_robin_among_equal_demand() -> None:
    pub = TestPublisher[str]()
    x, y, z = Probe(), Probe(), Probe()
    out = TestSubscriber[Any](initial_request=UNBOUNDED)
    pub.pipe(ops.balance(x, y, z)).subscribe(out)
    x.ts.request(2)
    y.ts.request(2)
    z.ts.request(1)
    assert pub.total_requested == 5
    pub.emit("a", "b", "c", "d", "e")
    # a: x (2, first of the tied two), b: y (2), c: z/x/y tie at 1 → z (after y), d: x, e: y
    assert (x.ts.values, y.ts.values, z.ts.values) == (["a", "d"], ["b", "e"], ["c"])


def test_never_more_than_a_branch_asked_and_upstream_asked_only_the_sum() -> None:
    pub = TestPublisher[int]()
    x, y = Probe(), Probe()
    pub.pipe(ops.balance(x, y)).subscribe(TestSubscriber[Any](initial_request=UNBOUNDED))
    x.ts.request(3)
    assert pub.requests == [3]
    pub.emit(1, 2)
    y.ts.request(1)
    assert pub.requests == [3, 1] and pub.outstanding == 2
    pub.emit(3, 4)
    assert x.ts.values == [1, 2, 4] and y.ts.values == [3]
    assert pub.outstanding == 0


def test_an_upstream_emitting_beyond_demand_fails_every_branch() -> None:
    pub = TestPublisher[int]()
    x, y = Probe(), Probe()
    pub.pipe(ops.balance(x, y)).subscribe(TestSubscriber[Any](initial_request=UNBOUNDED))
    x.ts.request(1)
    pub.emit(1, 2)
    assert isinstance(x.ts.error, MissingBackpressureError) and isinstance(y.ts.error, MissingBackpressureError)
    assert pub.cancelled


def test_an_item_without_an_eligible_branch_waits_then_goes_where_demand_appears() -> None:
    pub = TestPublisher[str]()
    x, y = Probe(), Probe()
    pub.pipe(ops.balance(x, y)).subscribe(TestSubscriber[Any](initial_request=UNBOUNDED))
    x.ts.request(1)
    x.ts.cancel()  # its demand was already passed upstream
    pub.emit("a")
    assert x.ts.values == [] and not pub.cancelled
    y.ts.request(1)
    assert y.ts.values == ["a"] and pub.requests == [1]


def test_cancel_of_downstream_cancels_every_branch_and_upstream_once() -> None:
    pub = TestPublisher[int]()
    out = TestSubscriber[Any](initial_request=UNBOUNDED)
    pub.pipe(ops.balance(lambda f: f.pipe(ops.map(lambda v: v)), lambda f: f)).subscribe(out)
    pub.emit(1, 2)
    out.cancel()
    assert pub.cancelled and sorted(out.values) == [1, 2]


def test_one_branch_cancelling_leaves_the_others_running() -> None:
    pub = TestPublisher[int]()
    x, y = Probe(), Probe()
    pub.pipe(ops.balance(x, y)).subscribe(TestSubscriber[Any](initial_request=UNBOUNDED))
    x.ts.request(5)
    y.ts.request(5)
    x.ts.cancel()
    assert not pub.cancelled
    y.ts.cancel()
    assert pub.cancelled


def test_upstream_error_reaches_every_branch_at_once_and_completion_after_held_items() -> None:
    pub = TestPublisher[int]()
    x, y = Probe(), Probe()
    pub.pipe(ops.balance(x, y)).subscribe(TestSubscriber[Any](initial_request=UNBOUNDED))
    boom = ValueError("boom")
    x.ts.request(1)
    pub.error(boom)
    assert x.ts.error is boom and y.ts.error is boom
    pub2 = TestPublisher[int]()
    a, b = Probe(), Probe()
    pub2.pipe(ops.balance(a, b)).subscribe(TestSubscriber[Any](initial_request=UNBOUNDED))
    a.ts.request(1)
    a.ts.cancel()
    pub2.emit(7).complete()  # 7 is held: no branch has demand
    assert not b.ts.completed
    b.ts.request(1)
    assert b.ts.values == [7] and b.ts.completed


def test_constructor_checks() -> None:
    with pytest.raises(TypeError, match="at least one branch"):
        ops.balance()
    with pytest.raises(TypeError, match="callable"):
        ops.balance(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must return a Flowable"):
        TestPublisher[int]().pipe(ops.balance(lambda f: 3))  # type: ignore[arg-type,return-value]


# -- replicas: engines behind execute ------------------------------------------------------------------
def _engine(slots: int) -> SimulatedEngine:
    return SimulatedEngine(max_num_seqs=slots, max_num_batched_tokens=1024, step_overhead_s=0.01,
                           prefill_s_per_token=0.0, decode_s_per_seq=0.0)


async def test_each_replica_gets_work_by_its_free_slots() -> None:
    big, small = _engine(6), _engine(2)
    pub = TestPublisher[CompletionRequest]()
    out = TestSubscriber[Completion](initial_request=UNBOUNDED)
    stage = pub.pipe(ops.balance(ops.execute(big), ops.execute(small)))
    stage.subscribe(out)
    assert pub.total_requested == 8  # 6 + 2 free slots
    pub.emit(*[CompletionRequest(prompt="x", max_tokens=50, id=f"r{i}") for i in range(8)])
    assert (big.running + big.waiting, small.running + small.waiting) == (6, 2)
    assert stage.engine.available  # type: ignore[attr-defined]
    small.down = True
    assert stage.engine.available  # type: ignore[attr-defined]  # one replica is enough
    big.down = True
    assert not stage.engine.available  # type: ignore[attr-defined]
    out.cancel()
    await big.aclose()
    await small.aclose()


async def test_a_replica_that_is_down_has_no_demand() -> None:
    a, b = _engine(2), _engine(2)
    a.down = True
    pub = TestPublisher[CompletionRequest]()
    out = TestSubscriber[Completion](initial_request=UNBOUNDED)
    pub.pipe(ops.balance(ops.execute(a), ops.execute(b))).subscribe(out)
    assert pub.total_requested == 2  # b's slots only
    loop = asyncio.get_running_loop()
    pub.emit(*[CompletionRequest(prompt="x", max_tokens=2, reply=loop.create_future()) for _ in range(2)])
    assert b.running + b.waiting == 2 and a.running + a.waiting == 0
    out.cancel()
    await a.aclose()
    await b.aclose()


async def test_a_request_failed_before_its_first_token_is_retried_on_another_replica() -> None:
    a, b = _engine(4), _engine(4)
    loop = asyncio.get_running_loop()
    pub = TestPublisher[CompletionRequest]()
    out = TestSubscriber[Completion](initial_request=UNBOUNDED)
    pub.pipe(ops.balance(ops.execute(a), ops.execute(b))).subscribe(out)
    requests = [CompletionRequest(prompt="x", max_tokens=5, reply=loop.create_future(), id=f"r{i}")
                for i in range(4)]
    pub.emit(*requests)  # two on each
    assert a.running + a.waiting == 2
    await asyncio.sleep(0.025)  # a few steps: tokens generated, none sent (non-streaming)
    a.down = True  # a's two fail with EngineUnavailableError: sent to b
    results = [await (await r.reply).result for r in requests]  # type: ignore[misc]
    assert [r.finish_reason for r in results] == ["length"] * 4
    assert [r.completion_tokens for r in results] == [5] * 4
    assert [r.id for r in requests] == [f"r{i}" for i in range(4)]
    out.cancel()
    await a.aclose()
    await b.aclose()


async def test_a_stream_that_already_relayed_a_token_ends_with_the_error_never_a_duplicate() -> None:
    a, b = _engine(1), _engine(1)
    loop = asyncio.get_running_loop()
    pub = TestPublisher[CompletionRequest]()
    pub.pipe(ops.balance(ops.execute(a), ops.execute(b))).subscribe(TestSubscriber[Completion](UNBOUNDED))
    streamed = CompletionRequest(prompt="x", max_tokens=50, stream=True, reply=loop.create_future())
    pub.emit(streamed)
    completion = await streamed.reply  # type: ignore[misc]
    tokens = TestSubscriber[Any](initial_request=UNBOUNDED)
    completion.tokens.subscribe(tokens)
    await tokens.await_count(2, timeout=5)
    victim = a if a.running + a.waiting else b
    victim.down = True
    await tokens.await_done(timeout=5)
    assert isinstance(tokens.error, EngineUnavailableError)
    assert [c.index for c in tokens.values] == list(range(len(tokens.values)))  # no chunk twice
    with pytest.raises(EngineUnavailableError):
        await completion.result
    await a.aclose()
    await b.aclose()


async def test_with_retry_unstarted_off_the_client_gets_the_error() -> None:
    a, b = _engine(1), _engine(1)
    loop = asyncio.get_running_loop()
    pub = TestPublisher[CompletionRequest]()
    out = TestSubscriber[Completion](initial_request=UNBOUNDED)
    pub.pipe(ops.balance(ops.execute(a), ops.execute(b), retry_unstarted=False)).subscribe(out)
    request = CompletionRequest(prompt="x", max_tokens=50, reply=loop.create_future())
    pub.emit(request)
    completion = await request.reply  # type: ignore[misc]
    (a if a.running + a.waiting else b).down = True
    with pytest.raises(EngineUnavailableError):
        await completion.result
    out.cancel()
    await a.aclose()
    await b.aclose()


async def test_a_request_every_replica_failed_gets_the_last_error() -> None:
    a, b = _engine(1), _engine(1)
    loop = asyncio.get_running_loop()
    pub = TestPublisher[CompletionRequest]()
    out = TestSubscriber[Completion](initial_request=UNBOUNDED)
    pub.pipe(ops.balance(ops.execute(a), ops.execute(b))).subscribe(out)
    request = CompletionRequest(prompt="x", max_tokens=50, reply=loop.create_future())
    pub.emit(request)
    completion = await request.reply  # type: ignore[misc]
    first, second = (a, b) if a.running + a.waiting else (b, a)
    first.down = True  # retried on the other
    await asyncio.sleep(0.03)
    assert second.running + second.waiting == 1
    second.down = True  # nothing left to try
    with pytest.raises(EngineUnavailableError):
        await completion.result
    out.cancel()
    await a.aclose()
    await b.aclose()


async def test_a_capacity_signal_runs_a_pass_only_when_it_can_change_what_one_decides(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from rxpipe.serving._balance import BalanceRun

    passes: list[int] = []
    original = BalanceRun._pump_pass

    def counted(self: BalanceRun) -> None:
        passes.append(len(self.pending))
        original(self)

    monkeypatch.setattr(BalanceRun, "_pump_pass", counted)
    a, b = _engine(2), _engine(2)
    pub = TestPublisher[CompletionRequest]()
    out = TestSubscriber[Completion](initial_request=UNBOUNDED)
    pub.pipe(ops.balance(ops.execute(a), ops.execute(b))).subscribe(out)
    assert pub.total_requested == 4
    passes.clear()
    a.notify_capacity()  # both replicas available, nothing held: a pass would decide nothing new
    assert passes == []
    pub.emit(CompletionRequest(prompt="x", max_tokens=1, id="r0"))
    assert passes == [1] and a.running + a.waiting + b.running + b.waiting == 1
    b.down = True
    a.notify_capacity()
    assert passes == [1]  # the last pass saw both available: b's going down asks for nothing
    pub.emit(CompletionRequest(prompt="x", max_tokens=1, id="r1"))  # the pass sees b down
    assert passes == [1, 1]
    b.down = False
    b.notify_capacity()  # b is back: its port's demand counts again
    assert passes == [1, 1, 0] and pub.total_requested == 4
    out.cancel()
    await a.aclose()
    await b.aclose()


class Worded(SimulatedEngine):
    """A replica whose backend says its room (an OpenAIEngine's ``advertised_room`` /
    ``advertised_credit``): ``word`` requests, one less per request it takes; ``at_once`` caps
    the room as an old word does (one at a time) without changing the rank."""

    def __init__(self, slots: int, word: int | None) -> None:
        super().__init__(max_num_seqs=slots, max_num_batched_tokens=1024, step_overhead_s=0.01,
                         prefill_s_per_token=0.0, decode_s_per_seq=0.0)
        self.word = word
        self.at_once: int | None = None

    @property
    def advertised_credit(self) -> int | None:
        return None if self.word is None else max(0, self.word)

    @property
    def advertised_room(self) -> int | None:
        credit = self.advertised_credit
        return credit if credit is None or self.at_once is None else min(credit, self.at_once)

    def start(self, completion: Completion, now_s: float) -> None:
        if self.word is not None:
            self.word -= 1
        super().start(completion, now_s)


async def test_a_replica_gets_no_more_than_its_backend_says_whatever_its_executor_asked() -> None:
    full, free = Worded(4, 0), Worded(4, None)
    pub = TestPublisher[CompletionRequest]()
    out = TestSubscriber[Completion](initial_request=UNBOUNDED)
    pub.pipe(ops.balance(ops.execute(full), ops.execute(free))).subscribe(out)
    assert pub.total_requested == 4  # the full one's executor asked for 4, its backend says 0
    pub.emit(*[CompletionRequest(prompt="x", max_tokens=50, id=f"r{i}") for i in range(3)])
    assert (full.running + full.waiting, free.running + free.waiting) == (0, 3)
    full.word = 2  # it says room (a probe): its capacity signal makes a pass
    full.notify_capacity()
    assert pub.total_requested == 6 and pub.outstanding == 3  # the free one's 1 left and the full one's 2
    pub.emit(*[CompletionRequest(prompt="y", max_tokens=50, id=f"s{i}") for i in range(3)])
    assert (full.running + full.waiting, free.running + free.waiting) == (2, 4)  # 2 by the word, then 1
    out.cancel()
    await full.aclose()
    await free.aclose()


async def test_an_old_word_sends_one_at_a_time_but_ranks_by_the_word() -> None:
    busy, idle = Worded(8, 2), Worded(8, 6)
    idle.at_once = 1  # its word is old: one call until it speaks again
    pub = TestPublisher[CompletionRequest]()
    out = TestSubscriber[Completion](initial_request=UNBOUNDED)
    pub.pipe(ops.balance(ops.execute(busy), ops.execute(idle))).subscribe(out)
    assert pub.total_requested == 2 + 1
    pub.emit(CompletionRequest(prompt="x", max_tokens=50, id="first"))
    assert idle.running + idle.waiting == 1  # ranked 6 against 2: the idler one first
    out.cancel()
    await busy.aclose()
    await idle.aclose()
