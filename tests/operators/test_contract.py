"""The executable operator contract (DESIGN §9), run over every name in ``rxpipe.operators.__all__``.

For each operator, one spec builds a stage over a hand-driven :class:`TestPublisher` (which emits
only what was requested of it), and five checks run on the virtual clock:

- *demand never exceeded*: the (strict) subscriber never receives more than it requested;
- *bounds*: with no downstream demand, items taken from upstream and not delivered stay within
  the operator's documented bound (its buffer, prefetch, look-ahead or slots);
- *cancel propagation*: cancelling downstream cancels upstream;
- *error propagation*: an upstream error reaches downstream as the same exception object;
- *completion with partial state*: what the stage holds (a partial batch, a buffer, running
  calls) is delivered on demand after upstream completed, then ``on_complete``.

A new operator added to ``__all__`` without a spec here fails :func:`test_every_public_name_is_covered`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Callable

import pytest

import rxpipe as rx
from rxpipe import UNBOUNDED
from rxpipe import operators as ops
from rxpipe.engines import CompletionRequest, SimulatedEngine
from rxpipe.testing import TestPublisher, TestSubscriber

#: Public names of ``rxpipe.operators`` that are not operators, and why.
NOT_OPERATORS = {
    "Retry": "a policy object for map_async(retry=)",
    "CircuitBreaker": "a policy object for map_async(breaker=)",
    "GroupedFlowable": "the type of the groups group_by emits",
}


async def _identity(x: Any) -> Any:
    await asyncio.sleep(0.001)
    return x


@dataclass
class Spec:
    """How to build one operator's stage and read its output back as input items."""

    build: Callable[[rx.Flowable[Any], Any], rx.Flowable[Any]]
    #: max items taken from upstream and not delivered downstream, with no downstream demand
    bound: int
    #: output value -> the input items it carries, in order
    unpack: Callable[[Any], list[Any]] = field(default=lambda v: [v])
    #: input item number -> item
    item: Callable[[int], Any] = field(default=lambda i: i + 1)
    #: per-run context (engines, side subscriptions) made before build
    context: Callable[[], Any] = field(default=lambda: None)


def _group_context() -> dict[str, Any]:
    return {"items": [], "handles": []}


def _groups(source: rx.Flowable[Any], ctx: dict[str, Any]) -> rx.Flowable[Any]:
    def attach(group: Any) -> None:
        ctx["handles"].append(group.subscribe(on_next=ctx["items"].append, on_error=lambda e: None))
    return source.pipe(ops.group_by(lambda x: x % 2, max_groups=2, prefetch=4), ops.tap(attach))


def _engine_context() -> SimulatedEngine:
    return SimulatedEngine(max_num_seqs=2, max_num_batched_tokens=64, step_overhead_s=0.01,
                           prefill_s_per_token=0.0, decode_s_per_seq=0.0)


SPECS: dict[str, Spec] = {
    "map": Spec(lambda s, _: s.pipe(ops.map(lambda x: x)), bound=0),
    "filter": Spec(lambda s, _: s.pipe(ops.filter(lambda x: True)), bound=0),
    "scan": Spec(lambda s, _: s.pipe(ops.scan(lambda acc, x: x, 0)), bound=0),
    "take": Spec(lambda s, _: s.pipe(ops.take(1_000)), bound=0),
    "skip": Spec(lambda s, _: s.pipe(ops.skip(0)), bound=0),
    "tap": Spec(lambda s, _: s.pipe(ops.tap(lambda x: None)), bound=0),
    "buffer": Spec(lambda s, _: s.pipe(ops.buffer(4)), bound=4),
    "fair_queue": Spec(lambda s, _: s.pipe(ops.fair_queue(4, tenant=lambda x: x % 2, weight={0: 1, 1: 1})), bound=4),
    "limit_rate": Spec(lambda s, _: s.pipe(ops.limit_rate(4, 2)), bound=4),
    "batch": Spec(lambda s, _: s.pipe(ops.batch(3, max_delay_s=0.05)), bound=3, unpack=list),
    "rate_limit": Spec(lambda s, _: s.pipe(ops.rate_limit(1_000.0, burst=4)), bound=0),
    "map_async": Spec(lambda s, _: s.pipe(ops.map_async(_identity, concurrency=2)), bound=2),
    "timeout": Spec(lambda s, _: s.pipe(ops.timeout(60.0)), bound=0),
    "merge": Spec(lambda s, _: s.pipe(ops.merge(rx.empty(), prefetch=4)), bound=4),
    "broadcast": Spec(lambda s, _: s.pipe(ops.broadcast(1))[0], bound=0),
    "cache": Spec(lambda s, _: s.pipe(ops.cache(4, 1.0)), bound=0),
    "balance": Spec(lambda s, _: s.pipe(ops.balance(lambda f: f, lambda f: f.pipe(ops.map(lambda x: x)))),
                    bound=64),
    # the main stream's output is groups; the items travel in the groups (collected in ctx)
    "group_by": Spec(_groups, bound=4, unpack=lambda g: [], context=_group_context),
    "execute": Spec(lambda s, engine: s.pipe(ops.execute(engine)), bound=2,
                    unpack=lambda c: [c.request], item=lambda i: CompletionRequest(prompt="abcd", max_tokens=1),
                    context=_engine_context),
}


def test_every_public_name_is_covered() -> None:
    assert set(ops.__all__) == set(SPECS) | set(NOT_OPERATORS)
    assert not set(SPECS) & set(NOT_OPERATORS)


class Run:
    """One stage over a TestPublisher, with a strict TestSubscriber downstream."""

    def __init__(self, name: str) -> None:
        self.spec = SPECS[name]
        self.ctx = self.spec.context()
        self.pub = TestPublisher[Any]()
        self.ts = TestSubscriber[Any]()
        self.sent: list[Any] = []
        self.spec.build(self.pub, self.ctx).subscribe(self.ts)
        self.granted = 0

    def request(self, n: int) -> None:
        self.granted = UNBOUNDED if n == UNBOUNDED else self.granted + n
        self.ts.request(n)

    async def feed(self, limit: int = 12) -> None:
        """Emit what upstream asked for (up to ``limit`` items in all) until nothing moves."""
        for _ in range(40):
            while self.pub.outstanding and len(self.sent) < limit and not self.pub.cancelled:
                item = self.spec.item(len(self.sent))
                self.sent.append(item)
                self.pub.emit(item)
            await asyncio.sleep(0.01)

    @property
    def delivered(self) -> list[Any]:
        if isinstance(self.ctx, dict):
            return list(self.ctx["items"])
        return [x for v in self.ts.values for x in self.spec.unpack(v)]

    def check_demand(self) -> None:
        assert self.ts.error is None, self.ts.error  # the strict boundary signals §1.1 breaches
        assert self.granted == UNBOUNDED or len(self.ts.values) <= self.granted

    async def close(self) -> None:
        if isinstance(self.ctx, dict):
            for handle in self.ctx["handles"]:
                handle.cancel()
        if isinstance(self.ctx, SimulatedEngine):
            await asyncio.sleep(1.0)  # admitted one-token requests finish
            await self.ctx.aclose()


NAMES = sorted(SPECS)


@pytest.mark.virtual
@pytest.mark.parametrize("name", NAMES)
async def test_demand_is_never_exceeded_and_bounds_hold(name: str) -> None:
    run = Run(name)
    await run.feed()
    held = len(run.sent) - len(run.delivered)
    run.check_demand()
    if name != "group_by":  # its groups consume on their own, the main stream holds groups
        assert len(run.ts.values) == 0
        assert held <= run.spec.bound, f"{name} took {held} items ahead of demand (bound {run.spec.bound})"
    for n in (1, 2):
        run.request(n)
        await run.feed()
        run.check_demand()
    assert len(run.ts.values) == (2 if name == "group_by" else 3)  # group_by: keys 1 and 0 only
    run.ts.cancel()
    await run.close()


@pytest.mark.virtual
@pytest.mark.parametrize("name", NAMES)
async def test_cancel_travels_upstream(name: str) -> None:
    run = Run(name)
    run.request(1)
    await run.feed(limit=3)
    run.ts.cancel()
    await run.close()  # group_by: upstream stays while an emitted group is open (Reactor)
    await asyncio.sleep(0.01)
    assert run.pub.cancelled
    assert run.ts.error is None and not run.ts.completed


@pytest.mark.virtual
@pytest.mark.parametrize("name", NAMES)
async def test_an_upstream_error_reaches_downstream_as_is(name: str) -> None:
    run = Run(name)
    run.request(UNBOUNDED)
    await run.feed(limit=3)
    failure = RuntimeError(f"upstream of {name} failed")
    run.pub.error(failure)
    await asyncio.sleep(0.1)
    assert run.ts.error is failure and not run.ts.completed
    await run.close()


@pytest.mark.virtual
@pytest.mark.parametrize("name", NAMES)
async def test_completion_delivers_partial_state_on_demand_then_completes(name: str) -> None:
    run = Run(name)
    run.request(1)
    await run.feed(limit=5)  # e.g. batch(3) holds a partial batch, buffer holds the rest
    held = len(run.sent) - len(run.delivered)
    run.pub.complete()
    await asyncio.sleep(0.1)
    run.check_demand()
    if held and name != "group_by":
        assert not run.ts.completed  # what the stage still holds waits for demand
    run.request(UNBOUNDED)
    await asyncio.sleep(0.1)
    assert run.ts.completed and run.ts.error is None
    if name == "group_by":
        assert sorted(run.delivered) == run.sent  # in key order, group by group
    else:
        assert run.delivered == run.sent
    await run.close()
