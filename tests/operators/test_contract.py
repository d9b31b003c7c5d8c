"""The operator contract (DESIGN §9) over every name in ``rxpipe.operators.__all__``, through the
shipped checker :func:`rxpipe.testing.check_operator` — the same one users point at their own
operators. One entry per built-in: how to make it, and what it declares (filters, reducers and
lossy time operators do not emit every item; stages that hold items ahead of demand give their
bound). A new operator added to ``__all__`` without an entry here fails
:func:`test_every_public_name_is_covered`.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable

import pytest

import rxpipe as rx
from rxpipe import operators as ops
from rxpipe.engines import CompletionRequest, SimulatedEngine
from rxpipe.flowable import Operator
from rxpipe.testing import check_operator

#: Public names of ``rxpipe.operators`` that are not operators, and why.
NOT_OPERATORS = {
    "Retry": "a policy object for map_async(retry=)",
    "CircuitBreaker": "a policy object for map_async(breaker=)",
    "GroupedFlowable": "the type of the groups group_by emits",
    "prefix_affinity": "a routing policy object for balance(affinity=)",
}


async def _identity(x: Any) -> Any:
    await asyncio.sleep(0.001)
    return x


def _groups() -> Operator:
    """group_by with every group subscribed as it arrives (the main stream's items are groups)."""
    def attach(group: Any) -> None:
        group.subscribe(on_next=lambda x: None, on_error=lambda e: None)
    return rx.pipe(ops.group_by(lambda x: x % 2, max_groups=2, prefetch=4), ops.tap(attach))


def _execute() -> Operator:
    engine = SimulatedEngine(max_num_seqs=2, max_num_batched_tokens=64, step_overhead_s=0.01,
                             prefill_s_per_token=0.0, decode_s_per_seq=0.0)
    return ops.execute(engine)


def _request(i: int) -> CompletionRequest:
    return CompletionRequest(prompt="abcd", max_tokens=1)


#: name -> (factory, keyword arguments of check_operator)
BUILT_INS: dict[str, tuple[Callable[[], Operator], dict[str, Any]]] = {
    "map": (lambda: ops.map(lambda x: x * 2), {"max_held": 0}),
    "filter": (lambda: ops.filter(lambda x: x % 3 == 0), {"emits_every_item": False, "max_held": 0}),
    "scan": (lambda: ops.scan(lambda acc, x: acc + x, 0), {"max_held": 0}),
    "scan/no_seed": (lambda: ops.scan(accumulator=lambda acc, x: acc + x), {"max_held": 0}),
    "take": (lambda: ops.take(1_000), {"max_held": 0}),
    "skip": (lambda: ops.skip(2), {"emits_every_item": False, "max_held": 0}),
    "tap": (lambda: ops.tap(lambda x: None), {"max_held": 0}),
    "buffer": (lambda: ops.buffer(4), {"max_held": 4}),
    "fair_queue": (lambda: ops.fair_queue(4, tenant=lambda x: x % 2, weight={0: 1, 1: 1}), {"max_held": 4}),
    "limit_rate": (lambda: ops.limit_rate(4, 2), {"max_held": 4}),
    "batch": (lambda: ops.batch(3, max_delay_s=0.05), {"emits_every_item": False, "max_held": 3}),
    "rate_limit": (lambda: ops.rate_limit(1_000.0, burst=4), {"max_held": 0}),
    "map_async": (lambda: ops.map_async(_identity, concurrency=2), {"max_held": 2}),
    "timeout": (lambda: ops.timeout(60.0), {"max_held": 0}),
    "merge": (lambda: ops.merge(rx.empty(), prefetch=4), {"max_held": 4}),
    "broadcast": (lambda: lambda s: s.pipe(ops.broadcast(1))[0], {"max_held": 0}),
    "cache": (lambda: ops.cache(4, 1.0), {"max_held": 0}),
    "balance": (lambda: ops.balance(lambda f: f, lambda f: f.pipe(ops.map(lambda x: x))), {"max_held": 64}),
    # upstream stays subscribed while a group emitted before is open (Reactor), and these groups
    # never end: the cancel check is left out here (tests/operators/test_group_by.py has it)
    "group_by": (_groups, {"emits_every_item": False, "max_held": 4,
                           "checks": ("demand", "bounds", "error", "completion")}),
    "execute": (_execute, {"emits_every_item": False, "items": _request, "max_held": 2}),
    # -- second round: filters, reducers, take_until, start_with, catch, retry
    "pairwise": (lambda: ops.pairwise(), {"emits_every_item": False, "max_held": 0}),
    "distinct": (lambda: ops.distinct(lambda x: x % 7), {"emits_every_item": False, "max_held": 0}),
    "distinct_until_changed": (lambda: ops.distinct_until_changed(lambda x: x // 3),
                               {"emits_every_item": False, "max_held": 0}),
    "take_while": (lambda: ops.take_while(lambda x: x < 40), {"emits_every_item": False, "max_held": 0}),
    "skip_while": (lambda: ops.skip_while(lambda x: x < 4), {"emits_every_item": False, "max_held": 0}),
    "take_until": (lambda: ops.take_until(rx.from_iterable(iter(()))), {"max_held": 0}),
    "first": (lambda: ops.first(lambda x: x > 3), {"emits_every_item": False, "max_held": 0}),
    "last": (lambda: ops.last(lambda x: x % 2 == 0, prefetch=8), {"emits_every_item": False, "max_held": 0}),
    "reduce": (lambda: ops.reduce(lambda acc, x: acc + x, 0, prefetch=8), {"emits_every_item": False, "max_held": 0}),
    "count": (lambda: ops.count(prefetch=8), {"emits_every_item": False, "max_held": 0}),
    "to_list": (lambda: ops.to_list(prefetch=8), {"emits_every_item": False, "max_held": 0}),
    "start_with": (lambda: ops.start_with(0, -1), {"max_held": 0}),
    # a handler re-raising the error: the error check sees it arrive as is
    "catch": (lambda: ops.catch(lambda error, source: rx.error(error)), {"max_held": 0}),
    # the checks' source is a hand-driven publisher: a re-subscription after its error waits for
    # ever, so the error check runs on retry(1) below (test_retry_keeps_the_contract_on_errors)
    "retry": (lambda: ops.retry(3), {"max_held": 0, "checks": ("demand", "bounds", "cancel", "completion")}),
    # -- second round: flat_map & co, zip & co --
    "flat_map": (lambda: ops.flat_map(lambda x: [x, -x], max_concurrency=2, prefetch=2), {"max_held": 2}),
    "concat_map": (lambda: ops.concat_map(lambda x: rx.just(x, -x)), {"max_held": 2}),
    # an item arriving while the stream of the one before runs switches it away (counted as dropped)
    "switch_map": (lambda: ops.switch_map(lambda x: [x]), {"emits_every_item": False, "max_held": 1}),
    "zip": (lambda: ops.zip(rx.range(0, 100_000), prefetch=8), {"max_held": 8}),
    "combine_latest": (lambda: ops.combine_latest(rx.just("x"), prefetch=8), {"max_held": 8}),
    "with_latest_from": (lambda: ops.with_latest_from(rx.just("x")), {"max_held": 0}),
    "concat": (lambda: ops.concat(rx.just(-1, -2)), {"max_held": 0}),
    # group_by's groups end with its upstream: flattened, it takes all five checks (held: group_by's
    # prefetch, plus flat_map's prefetch per group)
    "group_by/flat_map": (lambda: rx.pipe(ops.group_by(lambda x: x % 2, max_groups=2, prefetch=4),
                                          ops.flat_map(lambda group: group, prefetch=2)), {"max_held": 4 + 2 * 2}),
    # -- second round (issue 22): time operators. The lossy ones request UNBOUNDED and keep at
    # most one item (the rest dropped and counted); delay takes nothing without demand.
    "debounce": (lambda: ops.debounce(0.05), {"emits_every_item": False, "time_based": True, "max_held": 1}),
    "sample": (lambda: ops.sample(0.05), {"emits_every_item": False, "time_based": True, "max_held": 1}),
    "throttle_first": (lambda: ops.throttle_first(0.05),
                       {"emits_every_item": False, "time_based": True, "max_held": 1}),
    "delay": (lambda: ops.delay(0.05), {"time_based": True, "max_held": 0}),
}


# -- operators for LLM pipelines beyond RxPY (DESIGN §3; issue 41) -------------------------------
NOT_OPERATORS.update({
    "KillSwitch": "the handle kill_switch returns (the handle is the operator, checked below)",
    "Substream": "the type of the substreams split_when emits",
    "MergeHub": "the source merge_hub returns (checked below)",
    "HubProducer": "a producer's handle on a merge hub",
    "BroadcastHub": "the hot Flowable broadcast_hub returns (checked below)",
    "PartitionHub": "the hot Flowable partition_hub returns (checked below)",
})


def _merge_hub_fed_by(source: Any) -> Any:
    """A merge hub whose one producer is the checks' source, draining: it completes with it."""
    hub = ops.merge_hub(4)
    hub.attach(source)
    hub.drain_and_complete()
    return hub


#: a consumer that leaves a hub does not cancel its upstream (Akka: other consumers may attach);
#: tests/operators/test_hubs.py checks close() and what leaving does
_HUB_CHECKS = ("demand", "bounds", "error", "completion")

BUILT_INS.update({
    "throttle": (lambda: ops.throttle(1_000.0, 4, cost=lambda x: x % 3), {"max_held": 0}),
    "throttle/shaping": (lambda: ops.throttle(50.0, 2), {"time_based": True, "max_held": 0}),
    # conflate never backpressures (Akka): without demand it reads on and folds, holding one
    # summary; the bounds check counts folded items as held, so it is left out here
    # (tests/operators/test_shaping.py bounds what it requests and holds)
    "conflate": (lambda: ops.conflate(lambda a, b: a + b), {"emits_every_item": False,
                                                             "checks": ("demand", "cancel", "error", "completion")}),
    "keep_alive": (lambda: ops.keep_alive(0.05, lambda: -1), {"time_based": True, "max_held": 1}),
    "map_async_partitioned": (lambda: ops.map_async_partitioned(_identity, 3, lambda x: x % 2), {"max_held": 3}),
    "map_async_partitioned/unordered": (lambda: ops.map_async_partitioned(_identity, 3, lambda x: x % 2,
                                                                          ordered=False), {"max_held": 3}),
    "kill_switch": (lambda: ops.kill_switch(), {"max_held": 0}),
    # no restart: the checks' hand-driven source cannot be subscribed again (test_restart.py restarts)
    "restart_with_backoff": (lambda: lambda s: ops.restart_with_backoff(lambda: s, 0.01, 0.05, max_restarts=0),
                             {"max_held": 0}),
    "restart_with_backoff/on_failures": (
        lambda: lambda s: ops.restart_with_backoff(lambda: s, 0.01, 0.05, only_on_failures=True),
        {"max_held": 0, "checks": ("demand", "bounds", "cancel", "completion")}),
    "split_when": (lambda: rx.pipe(ops.split_when(lambda x: x % 3 == 0), ops.concat_map(lambda s: s)),
                   {"max_held": 16}),
    "merge_prioritized": (lambda: ops.merge_prioritized(rx.range(100, 103), priorities=(2, 1), prefetch=4),
                          {"max_held": 4}),
    # a producer's error removes that producer, never the hub (Akka): test_merge_hub.py has it
    "merge_hub": (lambda: _merge_hub_fed_by, {"max_held": 4, "checks": ("demand", "bounds", "cancel", "completion")}),
    "broadcast_hub": (lambda: ops.broadcast_hub(8), {"max_held": 8, "checks": _HUB_CHECKS}),
    "partition_hub": (lambda: ops.partition_hub(lambda n, x: x % n, 8), {"max_held": 8, "checks": _HUB_CHECKS}),
})


def test_every_public_name_is_covered() -> None:  # "name/variant": another entry for name
    assert set(ops.__all__) == {name.split("/")[0] for name in BUILT_INS} | set(NOT_OPERATORS)
    assert not set(BUILT_INS) & set(NOT_OPERATORS)


@pytest.mark.parametrize("name", sorted(BUILT_INS))
def test_the_built_in_keeps_the_contract(name: str) -> None:
    factory, declared = BUILT_INS[name]
    check_operator(factory, **declared)


def test_retry_keeps_the_contract_on_errors() -> None:
    check_operator(lambda: ops.retry(1), max_held=0, checks=("error",))
