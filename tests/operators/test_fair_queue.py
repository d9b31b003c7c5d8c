"""``fair_queue``: priority bands, VTC order, per-tenant shares and the admission extension (DESIGN §5)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rxpipe as rx
from rxpipe import UNBOUNDED, MissingBackpressureError
from rxpipe import operators as ops
from rxpipe.testing import TestPublisher, TestSubscriber


class Req:
    """An item: tenant, cost (tokens), priority, name; records ``on_discard`` tells."""

    def __init__(self, name: str, cost: float = 1, priority: int = 0, tenant: str | None = None) -> None:
        self.name = name
        self.tenant = tenant if tenant is not None else name[0]
        self.cost = cost
        self.priority = priority
        self.discarded: list[str] = []

    def on_discard(self, reason: str) -> None:
        self.discarded.append(reason)

    def __repr__(self) -> str:
        return self.name


def fq(capacity: int, weight: dict[str, float] | None = None, **kw: Any) -> Any:
    return ops.fair_queue(capacity, tenant=lambda r: r.tenant, weight=weight, cost=lambda r: r.cost,
                          priority=lambda r: r.priority, **kw)


def setup(capacity: int, weight: dict[str, float] | None = None) -> tuple[TestPublisher[Req], TestSubscriber[Req], Any]:
    pub = TestPublisher[Req]()
    ts = TestSubscriber[Req]()
    pub.pipe(fq(capacity, weight)).subscribe(ts)
    stage = ts.subscription.upstream  # type: ignore[union-attr]  # behind the strict boundary
    return pub, ts, stage


def names(ts: TestSubscriber[Req]) -> list[str]:
    return [r.name for r in ts.values]


# service order -------------------------------------------------------------------------------
def test_vtc_serves_the_lowest_counter_and_breaks_ties_by_activation_order() -> None:
    pub, ts, stage = setup(16, {"a": 1, "b": 1})
    pub.emit(Req("a1", 3), Req("a2", 3), *(Req(f"b{i}", 1) for i in range(1, 7)))
    ts.request(8)
    assert names(ts) == ["a1", "b1", "b2", "b3", "a2", "b4", "b5", "b6"]  # the docstring's marble
    assert stage.virtual_token_counters() == {"a": 6.0, "b": 6.0}


def test_weights_divide_the_charge() -> None:
    pub, ts, stage = setup(16, {"a": 2, "b": 1})
    pub.emit(*(Req(f"a{i}") for i in range(1, 5)), Req("b1"), Req("b2"))
    ts.request(UNBOUNDED)
    # counters: a 0.5 | b 1 | a 1.0 | tie 1/1 → a (activated first) 1.5 | b 2 | a 2.0
    assert names(ts) == ["a1", "b1", "a2", "a3", "b2", "a4"]
    assert stage.virtual_token_counters() == {"a": 2.0, "b": 2.0}


def test_a_returning_tenant_is_lifted_so_idle_time_earns_no_credit() -> None:
    pub, ts, stage = setup(16)
    pub.emit(*(Req(f"b{i}", 10) for i in range(1, 6)))
    ts.request(5)  # b alone: counter 50, then its flow goes idle (the band's floor is 50)
    assert stage.virtual_token_counters() == {"b": 50.0}
    pub.emit(Req("a1", 10), Req("a2", 10), Req("a3", 10))  # a lifted from 0 to 50
    assert stage.virtual_token_counters() == {"a": 50.0, "b": 50.0}
    pub.emit(Req("b6", 10), Req("b7", 10), Req("b8", 10))  # b rejoins: lifted to min(active) = 50
    ts.request(6)
    assert names(ts)[5:] == ["a1", "b6", "a2", "b7", "a3", "b8"]  # without the lift: a1, a2, a3 first


def test_a_newcomer_is_lifted_to_the_minimum_of_the_active_tenants() -> None:
    pub, ts, stage = setup(16)
    pub.emit(Req("a1", 5), Req("a2", 5), Req("b1", 1), Req("b2", 1), Req("b3", 1))
    ts.request(2)  # a1 (a 5), b1 (b 1)
    pub.emit(Req("c1", 1))  # active: a 5, b 1 → c starts at 1, not 0
    assert stage.virtual_token_counters() == {"a": 5.0, "b": 1.0, "c": 1.0}
    ts.request(4)
    assert names(ts) == ["a1", "b1", "b2", "c1", "b3", "a2"]


def test_bands_are_strict_whatever_the_counters() -> None:
    pub, ts, _ = setup(16)
    pub.emit(Req("a1", 100, priority=1), Req("b1", 1), Req("b2", 1), Req("a2", 100, priority=1))
    ts.request(1)
    pub.emit(Req("c1", 1, priority=2))  # a later, higher item jumps ahead of everything queued
    ts.request(UNBOUNDED)
    assert names(ts) == ["a1", "c1", "a2", "b1", "b2"]


def test_reconcile_corrects_the_counter_with_the_real_cost() -> None:
    pub, ts, stage = setup(16, {"a": 2, "b": 1})
    first = Req("a1", 100)
    pub.emit(first, Req("b1", 10))
    ts.request(1)
    assert stage.virtual_token_counters() == {"a": 50.0, "b": 0.0}
    stage.reconcile(first, 20)  # used 20 tokens, not the estimated 100: (20 - 100) / 2
    assert stage.virtual_token_counters() == {"a": 10.0, "b": 0.0}
    stage.reconcile(Req("z1", 5), 50)  # a flow never seen: no-op
    assert stage.virtual_token_counters() == {"a": 10.0, "b": 0.0}


# shares, the bound, the admission extension ---------------------------------------------------
def test_a_tenant_within_its_share_is_never_refused_because_another_filled_the_queue() -> None:
    pub, ts, stage = setup(5, {"a": 1, "b": 1})  # shares 2 + 2, pool 1
    assert stage.shares == {"a": 2, "b": 2}
    admitted = []
    for i in range(5):
        if stage.room_for("a"):
            admitted.append(i)
            pub.emit(Req(f"a{i}"))
    assert admitted == [0, 1, 2]  # its share and the pool; b's share stays free
    assert (stage.room_for("a"), stage.room_for("b"), stage.room_for("c")) == (False, True, False)
    assert (stage.demand_for("a"), stage.demand_for("b"), stage.demand_for("c")) == (0, 2, 0)
    pub.emit(Req("b0"), Req("b1"))
    assert stage.statistics().buffered == 5 and not stage.room_for("b")
    ts.request(1)  # a0 leaves: the pool has a place again, for anyone (demand replaced one for one)
    assert (stage.demand_for("a"), stage.demand_for("c")) == (1, 1)
    assert pub.requests == [5, 1]


def test_the_queue_never_holds_more_than_capacity_and_never_overdraws_demand() -> None:
    pub, ts, stage = setup(4)
    pub.emit(*(Req(f"a{i}") for i in range(4)))
    assert stage.statistics().buffered == 4 and pub.outstanding == 0 and not stage.room_for("a")
    ts.request(3)
    assert names(ts) == ["a0", "a1", "a2"] and pub.requests == [4, 3]  # one more per departure
    ts.request(5)
    assert len(ts.values) == 4 and ts.requested == 8 and stage.statistics().demand == 4


def test_an_item_over_its_tenants_room_from_a_plain_upstream_is_shed_with_a_tell_and_replaced() -> None:
    pub, ts, stage = setup(3, {"a": 1, "b": 1, "c": 1})  # shares 1 + 1 + 1, no pool
    a0, a1 = Req("a0"), Req("a1")
    pub.emit(a0, a1)  # a1 is within request(3) but would take b's or c's place
    assert a1.discarded == ["tenant_full"] and a0.discarded == []
    assert stage.statistics().dropped == {"tenant_full": 1}
    assert pub.requests == [3, 1]  # its unit of demand is asked for again
    assert stage.statistics().buffered == 1 and ts.error is None
    pub.emit(Req("b0"), Req("c0"))
    ts.request(UNBOUNDED)
    assert names(ts) == ["a0", "b0", "c0"]


def test_an_upstream_beyond_demand_gets_missing_backpressure_and_held_items_are_told() -> None:
    pub, ts, stage = setup(2)
    held, over = Req("a0"), Req("a2")
    pub.emit(held, Req("a1"))
    pub.emit(over)
    assert isinstance(ts.error, MissingBackpressureError) and pub.cancelled
    assert held.discarded == ["error"] and over.discarded == ["error"]
    assert stage.statistics().dropped == {"error": 3} and stage.statistics().buffered == 0


# propagation and terminal signals ------------------------------------------------------------
def test_cancel_travels_upstream_and_frees_the_queue() -> None:
    pub, ts, stage = setup(4)
    pub.emit(Req("a0"), Req("b0"))
    ts.cancel()
    assert pub.cancel_count == 1 and stage.statistics().buffered == 0
    pub.emit(Req("a1"))  # in flight after cancel: ignored
    assert ts.values == [] and ts.error is None and not ts.completed


def test_an_upstream_error_is_signalled_after_the_held_items() -> None:
    pub, ts, _ = setup(4)
    pub.emit(Req("a0", 5), Req("b0", 1))
    pub.error(RuntimeError("boom"))
    assert ts.error is None
    ts.request(1)
    assert names(ts) == ["a0"] and ts.error is None
    ts.request(1)
    assert names(ts) == ["a0", "b0"] and isinstance(ts.error, RuntimeError)


def test_completion_waits_for_the_held_items_in_fair_order() -> None:
    pub, ts, _ = setup(8)
    pub.emit(Req("a0", 2), Req("a1", 2), Req("b0", 1), Req("b1", 1))
    pub.complete()
    ts.request(2)
    assert names(ts) == ["a0", "b0"] and not ts.completed
    ts.request(2)
    assert names(ts) == ["a0", "b0", "b1", "a1"] and ts.completed


def test_a_raising_user_function_fails_the_stage_and_tells_every_item() -> None:
    pub = TestPublisher[Req]()
    ts = TestSubscriber[Req]()

    def tenant(r: Req) -> str:
        if r.name == "bad":
            raise KeyError("no tenant")
        return r.tenant

    pub.pipe(ops.fair_queue(4, tenant=tenant)).subscribe(ts)
    held, bad = Req("a0"), Req("bad")
    pub.emit(held, bad)
    assert isinstance(ts.error, KeyError) and pub.cancelled
    assert held.discarded == ["error"] and bad.discarded == ["error"]


@pytest.mark.parametrize(("tenant", "cost", "priority", "error"), [
    ("a", -1, 0, ValueError), ("a", float("nan"), 0, ValueError), ("a", "3", 0, ValueError),
    ("a", 1, 1.5, TypeError), (["a"], 1, 0, TypeError),
])
def test_bad_tenant_cost_or_priority_values_fail_the_stage(tenant: Any, cost: Any, priority: Any,
                                                           error: type) -> None:
    pub = TestPublisher[Req]()
    ts = TestSubscriber[Req]()
    pub.pipe(ops.fair_queue(4, tenant=lambda r: tenant, cost=lambda r: cost,
                            priority=lambda r: priority)).subscribe(ts)
    pub.emit(Req("a0"))
    assert isinstance(ts.error, error) and pub.cancelled


def test_factory_validation() -> None:
    with pytest.raises(ValueError, match=r"fair_queue\(capacity\) must be an integer >= 1"):
        ops.fair_queue(0)
    with pytest.raises(TypeError, match=r"fair_queue\(cost=\) needs a callable"):
        ops.fair_queue(4, cost=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"fair_queue\(weight\['a'\]\) must be a number > 0"):
        ops.fair_queue(4, weight={"a": 0})
    with pytest.raises(TypeError, match=r"fair_queue\(weight=\) needs a mapping"):
        ops.fair_queue(4, weight=[1, 2])  # type: ignore[arg-type]


def test_set_weights_recomputes_shares_without_dropping_what_is_held() -> None:
    pub, ts, stage = setup(4, {"a": 1, "b": 1})
    pub.emit(Req("a0"), Req("a1"))
    stage.set_weights({"a": 1, "b": 3})  # a's share drops to 1, b's grows to 3
    assert stage.shares == {"a": 1, "b": 3}
    assert (stage.room_for("a"), stage.demand_for("b")) == (False, 2)
    ts.request(UNBOUNDED)
    assert names(ts) == ["a0", "a1"]


def test_shares_are_the_exact_floor_even_for_huge_finite_weights() -> None:
    # Any finite weight > 0 is accepted (a tenants file's too), so the shares
    # floor(capacity * weight / sum of weights) must not overflow: 100 * 1e308 is inf in floats.
    pub, ts, stage = setup(100, {"a": 1e308, "b": 1e308, "c": 1})
    assert stage.shares == {"a": 49, "b": 49, "c": 0}
    stage.set_weights({"a": 1.5e308, "b": 1.5e308})  # their sum is inf in floats
    assert stage.shares == {"a": 50, "b": 50}
    pub.emit(Req("a0"))
    ts.request(1)
    assert names(ts) == ["a0"]


@pytest.mark.virtual
async def test_on_virtual_time_behind_a_slow_consumer() -> None:
    loop = asyncio.get_running_loop()
    items = [Req(f"a{i}", 4) for i in range(6)] + [Req(f"b{i}", 1) for i in range(6)]
    seen: list[tuple[float, str]] = []

    async def serve(r: Req) -> Req:
        await asyncio.sleep(r.cost * 0.01)  # service time proportional to tokens
        seen.append((round(loop.time(), 6), r.name))
        return r

    out = await rx.from_iterable(items).pipe(fq(12), ops.map_async(serve)).to_list()
    assert [r.name for r in out] == ["a0", "b0", "b1", "b2", "b3", "a1", "b4", "b5", "a2", "a3", "a4", "a5"]
    assert seen[-1] == (0.3, "a5")  # work-conserving: 30 tokens x 0.01 s, no idle gap


# the paper's bound, as a property --------------------------------------------------------------
@settings(max_examples=150, deadline=None)
@given(costs_a=st.lists(st.integers(1, 1000), min_size=1, max_size=30),
       costs_b=st.lists(st.integers(1, 1000), min_size=1, max_size=30),
       weight_a=st.sampled_from([1, 2, 3]), weight_b=st.sampled_from([1, 2, 3]),
       alone=st.integers(0, 10))
def test_two_backlogged_tenants_never_differ_by_more_than_twice_the_largest_request(
        costs_a: list[int], costs_b: list[int], weight_a: int, weight_b: int, alone: int) -> None:
    """Quantity: over any interval during which both tenants have items queued, the weighted service
    each received — Σ cost / weight of its dispatched items — differs by at most 2 × U, where U is
    the largest cost / weight of one item (Sheng et al., Theorem on backlogged clients). Tenant a
    may first be served alone for ``alone`` items; b arrives later and is lifted."""
    pub, ts, _ = setup(100, {"a": weight_a, "b": weight_b})
    pub.emit(*(Req(f"a{i}", c) for i, c in enumerate(costs_a)))
    alone = min(alone, len(costs_a) - 1)
    if alone:
        ts.request(alone)
    pub.emit(*(Req(f"b{i}", c) for i, c in enumerate(costs_b)))
    queued = {"a": len(costs_a) - alone, "b": len(costs_b)}
    weight = {"a": weight_a, "b": weight_b}
    service = {"a": 0.0, "b": 0.0}
    samples = [dict(service)]  # weighted service at each instant both are backlogged
    while queued["a"] and queued["b"]:
        ts.request(1)
        r = ts.values[-1]
        queued[r.tenant] -= 1
        service[r.tenant] += r.cost / weight[r.tenant]
        samples.append(dict(service))
    largest = max([c / weight_a for c in costs_a] + [c / weight_b for c in costs_b])
    gap = max(abs((s2["a"] - s1["a"]) - (s2["b"] - s1["b"]))
              for i, s1 in enumerate(samples) for s2 in samples[i:])
    assert gap <= 2 * largest + 1e-9


# departure hook: the exact bound behind an HTTP edge --------------------------------------------
class Hooked:
    """A departure hook that records callbacks, so a test can make items depart by hand."""

    def __init__(self) -> None:
        self.callbacks: dict[str, Any] = {}

    def __call__(self, item: Req, callback: Any) -> bool:
        self.callbacks[item.name] = lambda: callback(item)
        return True


def test_with_a_departure_hook_an_item_departs_when_the_hook_calls_back_not_when_dispatched() -> None:
    hook = Hooked()
    pub = TestPublisher[Req]()
    ts = TestSubscriber[Req]()
    pub.pipe(fq(2, {"a": 1, "b": 1}, departure=hook)).subscribe(ts)
    stage = ts.subscription.upstream  # type: ignore[union-attr]
    assert pub.requests == [2]
    pub.emit(Req("a1"), Req("b1"))
    ts.request(2)
    assert names(ts) == ["a1", "b1"]
    assert pub.requests == [2]  # dispatched, not started: no more upstream
    assert not stage.room_for("a") and not stage.room_for("b")
    hook.callbacks["b1"]()  # b1 started
    assert pub.requests == [2, 1]
    assert stage.room_for("b") and not stage.room_for("c")  # b's share is free again, the pool is not
    hook.callbacks["b1"]()  # a second call is ignored by the gateway's hook; here: no double count
    assert stage.occupied == 1


def test_a_departure_of_a_still_queued_item_withdraws_it_uncharged() -> None:
    hook = Hooked()
    pub = TestPublisher[Req]()
    ts = TestSubscriber[Req]()
    pub.pipe(fq(3, departure=hook)).subscribe(ts)
    stage = ts.subscription.upstream  # type: ignore[union-attr]
    pub.emit(Req("a1", 5), Req("a2", 5), Req("b1", 1))
    hook.callbacks["a1"]()  # a1's client left while queued
    assert pub.requests == [3, 1]
    assert stage.statistics().buffered == 2 and stage.statistics().dropped == {"cancelled": 1}
    ts.request(3)
    assert names(ts) == ["a2", "b1"]
    assert stage.virtual_token_counters() == {"a": 5.0, "b": 1.0}


def test_items_dispatched_and_not_departed_still_take_their_tenants_share() -> None:
    hook = Hooked()
    pub = TestPublisher[Req]()
    ts = TestSubscriber[Req]()
    pub.pipe(fq(4, {"a": 1, "b": 1}, departure=hook)).subscribe(ts)
    stage = ts.subscription.upstream  # type: ignore[union-attr]
    pub.emit(Req("a1"), Req("a2"))
    ts.request(10)  # both dispatched: a batch downstream holds them, the engine has not started them
    assert names(ts) == ["a1", "a2"] and stage.statistics().buffered == 0
    assert not stage.room_for("a")  # its share is in use downstream
    assert stage.room_for("b") and stage.demand_for("b") == 2  # b's share was kept for it
    hook.callbacks["a1"]()
    assert stage.room_for("a") and stage.demand_for("b") == 2


@settings(max_examples=200, deadline=None)
@given(steps=st.lists(st.tuples(st.sampled_from(["emit", "request", "start", "leave"]),
                                st.sampled_from(["a", "b", "c"]), st.integers(0, 7)), max_size=80))
def test_with_departures_the_bound_and_the_shares_hold_whatever_happens(steps: list[tuple[str, str, int]]) -> None:
    """An edge that asks ``room_for`` before emitting, a consumer that requests, requests that start
    downstream, clients that leave while queued: at every step, items received and not departed
    plus outstanding demand stay within capacity, a tenant under its share has room, and nothing
    is ever shed."""
    hook = Hooked()
    pub = TestPublisher[Req]()
    ts = TestSubscriber[Req]()
    capacity, shares = 6, {"a": 3, "b": 3}  # weights a 1, b 1; c is unnamed: the pool only
    pub.pipe(fq(capacity, {"a": 1, "b": 1}, departure=hook)).subscribe(ts)
    stage = ts.subscription.upstream  # type: ignore[union-attr]
    emitted: list[Req] = []
    departed: set[str] = set()
    for number, (action, tenant, n) in enumerate(steps):
        if action == "emit" and stage.room_for(tenant):
            item = Req(f"{tenant}{number}", tenant=tenant)
            emitted.append(item)
            pub.emit(item)
        elif action == "request" and n:
            ts.request(n)
        elif action in ("start", "leave"):
            # start: a dispatched item starts downstream; leave: a queued item's client leaves
            dispatched = {r.name for r in ts.values}
            pool = [r for r in emitted if r.name not in departed and (r.name in dispatched) == (action == "start")]
            if pool:
                chosen = pool[n % len(pool)]
                departed.add(chosen.name)
                hook.callbacks[chosen.name]()
        outstanding = pub.total_requested - len(emitted)
        alive = len(emitted) - len(departed)
        assert alive + outstanding <= capacity
        assert stage.occupied == alive
        for t, share in shares.items():
            held = sum(1 for r in emitted if r.tenant == t and r.name not in departed)
            if held < share:
                assert stage.room_for(t), (t, held)
    assert all(not r.discarded for r in emitted)
    assert stage.statistics().dropped.get("tenant_full", 0) == 0
