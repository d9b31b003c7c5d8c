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
    "Timestamp": "the type of the items timestamp emits",
    "TimeInterval": "the type of the items time_interval emits",
    "Window": "the type of the windows the window operators emit",
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


class _Observer:
    """A reactivex-style observer for ``do(observer)``."""

    def on_next(self, item: Any) -> None:
        pass

    def on_error(self, error: BaseException) -> None:
        pass

    def on_completed(self) -> None:
        pass


def _once() -> Callable[[Any], bool]:
    """A while_do condition true once (one run)."""
    calls = [0]

    def condition(source: Any) -> bool:
        calls[0] += 1
        return calls[0] == 1
    return condition


def _flat(name: str | None = None) -> Operator:
    """Every window (or group) subscribed as it comes, its items merged (at most 4 at once, so the
    windows' items queued in flat_map stay within 4 x its prefetch)."""
    return ops.flat_map(lambda window: window, max_concurrency=4, name=name)


async def _awaited(future: Any) -> Any:
    return await future


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
    # -- third round (issue 34): one-to-one and filters
    "map_indexed": (lambda: ops.map_indexed(lambda x, i: x + i), {"max_held": 0}),
    "starmap": (lambda: rx.pipe(ops.map(lambda x: (x, x)), ops.starmap(lambda a, b: a + b)), {"max_held": 0}),
    "starmap_indexed": (lambda: rx.pipe(ops.map(lambda x: (x, 1)), ops.starmap_indexed(lambda a, i: a + i)),
                        {"max_held": 0}),
    "pluck": (lambda: rx.pipe(ops.map(lambda x: {"k": x}), ops.pluck("k")), {"max_held": 0}),
    "pluck_attr": (lambda: ops.pluck_attr("real"), {"max_held": 0}),
    "do_action": (lambda: ops.do_action(lambda x: None), {"max_held": 0}),
    "do": (lambda: ops.do(_Observer()), {"max_held": 0}),
    "finally_action": (lambda: ops.finally_action(lambda: None), {"max_held": 0}),
    # an error becomes an item (OnError) and the stream completes: the error check is
    # dematerialize's below, which turns it back into the same error object
    "materialize": (lambda: ops.materialize(), {"max_held": 0, "checks": ("demand", "bounds", "cancel", "completion")}),
    "dematerialize": (lambda: rx.pipe(ops.materialize(), ops.dematerialize()), {"max_held": 0}),
    "filter_indexed": (lambda: ops.filter_indexed(lambda x, i: i % 3 == 0), {"emits_every_item": False, "max_held": 0}),
    "take_while_indexed": (lambda: ops.take_while_indexed(lambda x, i: i < 40), {"emits_every_item": False,
                                                                                "max_held": 0}),
    "skip_while_indexed": (lambda: ops.skip_while_indexed(lambda x, i: i < 4), {"emits_every_item": False,
                                                                               "max_held": 0}),
    "skip_until": (lambda: ops.skip_until(rx.just("open")), {"max_held": 0}),
    "element_at": (lambda: ops.element_at(3), {"emits_every_item": False, "max_held": 0}),
    "element_at_or_default": (lambda: ops.element_at_or_default(3, 0), {"emits_every_item": False, "max_held": 0}),
    "first_or_default": (lambda: ops.first_or_default(lambda x: x > 3, 0), {"emits_every_item": False,
                                                                          "max_held": 0}),
    "skip_last": (lambda: ops.skip_last(2), {"emits_every_item": False, "max_held": 2}),
    "default_if_empty": (lambda: ops.default_if_empty(0), {"max_held": 0}),
    "slice": (lambda: ops.slice(1, -1, 2), {"emits_every_item": False, "max_held": 1}),
    # -- third round (issue 34): aggregates (lazy: nothing is taken before downstream asks)
    **{name: (make, {"emits_every_item": False, "max_held": 0}) for name, make in {
        "all": lambda: ops.all(lambda x: x < 1000, prefetch=8), "some": lambda: ops.some(lambda x: x > 1000),
        "contains": lambda: ops.contains(-1),
        # decided at the first item: behind a filter, so that the error check sees an error arrive
        "is_empty": lambda: rx.pipe(ops.filter(lambda x: x > 10**6), ops.is_empty()),
        "sequence_equal": lambda: ops.sequence_equal(rx.range(1, 10_000), prefetch=8), "sum": lambda: ops.sum(),
        "average": lambda: ops.average(), "min": lambda: ops.min(), "max": lambda: ops.max(prefetch=8),
        "min_by": lambda: ops.min_by(lambda x: x % 3), "max_by": lambda: ops.max_by(lambda x: x % 3),
        "to_dict": lambda: ops.to_dict(lambda x: x % 3), "to_set": lambda: ops.to_set(),
        "single": lambda: ops.single(lambda x: x == 2), "single_or_default": lambda: ops.single_or_default(
            lambda x: x == 2, 0), "find": lambda: ops.find(lambda x, i, s: x == 1000),
        "find_index": lambda: ops.find_index(lambda x, i, s: x == 1000), "take_last": lambda: ops.take_last(2),
        "take_last_buffer": lambda: ops.take_last_buffer(2), "last_or_default": lambda: ops.last_or_default(0),
        "ignore_elements": lambda: ops.ignore_elements(), "fork_join": lambda: ops.fork_join(rx.just(0)),
    }.items()},
    # -- third round (issue 34): higher order
    "merge/max_concurrent": (lambda: rx.pipe(ops.map(lambda x: rx.just(x, -x)),
                                             ops.merge(max_concurrent=2, prefetch=2)), {"max_held": 2}),
    "merge_all": (lambda: rx.pipe(ops.map(lambda x: rx.just(x, -x)), ops.merge_all(max_concurrent=2, prefetch=2)),
                  {"max_held": 2}),
    "concat_all": (lambda: rx.pipe(ops.map(lambda x: rx.just(x, -x)), ops.concat_all()), {"max_held": 2}),
    "switch_latest": (lambda: rx.pipe(ops.map(lambda x: rx.just(x)), ops.switch_latest()),
                      {"emits_every_item": False, "max_held": 1}),
    "exclusive": (lambda: rx.pipe(ops.map(lambda x: rx.just(x)), ops.exclusive()),
                  {"emits_every_item": False, "max_held": 1}),
    "flat_map_indexed": (lambda: ops.flat_map_indexed(lambda x, i: [x, i], max_concurrency=2, prefetch=2),
                         {"max_held": 2}),
    "flat_map_latest": (lambda: ops.flat_map_latest(lambda x: [x]), {"emits_every_item": False, "max_held": 1}),
    "switch_map_indexed": (lambda: ops.switch_map_indexed(lambda x, i: [x, i]),
                           {"emits_every_item": False, "max_held": 1}),
    "expand": (lambda: ops.expand(lambda x: rx.just(x + 1000) if x < 1000 else rx.empty()), {"max_held": 0}),
    "amb": (lambda: ops.amb(rx.never()), {"max_held": 0}),
    "zip_latest": (lambda: ops.zip_latest(rx.interval(0.01).pipe(ops.map(lambda k: "x"))),
                   {"emits_every_item": False, "max_held": 32, "time_based": True}),
    "zip_with_iterable": (lambda: ops.zip_with_iterable(range(10**6)), {"max_held": 0}),
    "zip_with_list": (lambda: ops.zip_with_list(list(range(1000))), {"max_held": 0}),
    "join": (lambda: ops.join(rx.just("r"), lambda x: rx.never(), lambda x: rx.never()), {"max_held": 256}),
    # the error is swallowed by definition: the continuation completes the stream
    "on_error_resume_next": (lambda: ops.on_error_resume_next(rx.just(-1)),
                             {"max_held": 0, "checks": ("demand", "bounds", "cancel", "completion")}),
    # one run: the checks' hand-driven publisher does not replay a second subscription
    "repeat": (lambda: ops.repeat(1), {"max_held": 0}),
    "repeat/forever": (lambda: ops.repeat(), {"max_held": 0, "checks": ("demand", "bounds", "cancel", "error")}),
    "do_while": (lambda: ops.do_while(lambda source: False), {"max_held": 0}),
    "while_do": (lambda: ops.while_do(_once()), {"max_held": 0}),
    # -- third round (issue 34): time (the lossy ones request UNBOUNDED, keep one item, count drops)
    "timestamp": (lambda: ops.timestamp(), {"max_held": 0}),
    "time_interval": (lambda: ops.time_interval(), {"max_held": 0}),
    "take_with_time": (lambda: ops.take_with_time(60.0), {"time_based": True, "max_held": 0}),
    "take_until_with_time": (lambda: ops.take_until_with_time(60.0), {"time_based": True, "max_held": 0}),
    "skip_with_time": (lambda: ops.skip_with_time(0.05), {"emits_every_item": False, "time_based": True,
                                                          "max_held": 0}),
    "skip_until_with_time": (lambda: ops.skip_until_with_time(0.05), {"emits_every_item": False, "time_based": True,
                                                                      "max_held": 0}),
    "take_last_with_time": (lambda: ops.take_last_with_time(1.0), {"emits_every_item": False, "time_based": True,
                                                                   "max_held": 0}),
    "skip_last_with_time": (lambda: ops.skip_last_with_time(0.05), {"emits_every_item": False, "time_based": True,
                                                                    "max_held": 60}),
    "delay_subscription": (lambda: ops.delay_subscription(0.05), {"time_based": True, "max_held": 0}),
    "delay_with_mapper": (lambda: ops.delay_with_mapper(lambda x: rx.timer(0.05)), {"time_based": True,
                                                                                   "max_held": 0}),
    "delay_with_mapper/subscription_delay": (lambda: ops.delay_with_mapper(rx.timer(0.03), lambda x: rx.timer(0.05)),
                                             {"time_based": True, "max_held": 0}),
    "throttle_with_timeout": (lambda: ops.throttle_with_timeout(0.05), {"emits_every_item": False,
                                                                        "time_based": True, "max_held": 1}),
    "throttle_with_mapper": (lambda: ops.throttle_with_mapper(lambda x: rx.timer(0.05)),
                             {"emits_every_item": False, "time_based": True, "max_held": 1}),
    "timeout_with_mapper": (lambda: ops.timeout_with_mapper(rx.never(), lambda x: rx.never()), {"max_held": 0}),
    "timeout/other": (lambda: ops.timeout(60.0, rx.empty()), {"max_held": 0}),
    # -- third round (issue 34): buffers (lists) and windows (flattened, so that every window is
    # consumed: a window nobody subscribes holds its credit, as group_by's groups)
    "buffer/boundaries": (lambda: ops.buffer(rx.interval(0.05)), {"emits_every_item": False, "time_based": True,
                                                                  "max_held": 256}),
    "buffer_with_count": (lambda: ops.buffer_with_count(3), {"emits_every_item": False, "max_held": 0}),
    "buffer_with_count/overlapping": (lambda: ops.buffer_with_count(3, 1), {"emits_every_item": False,
                                                                            "max_held": 0}),
    "buffer_with_time": (lambda: ops.buffer_with_time(0.05), {"emits_every_item": False, "time_based": True,
                                                              "max_held": 256}),
    "buffer_with_time_or_count": (lambda: ops.buffer_with_time_or_count(0.05, 3),
                                  {"emits_every_item": False, "time_based": True, "max_held": 3}),
    "buffer_when": (lambda: ops.buffer_when(lambda: rx.timer(0.05)), {"emits_every_item": False,
                                                                      "time_based": True, "max_held": 256}),
    "buffer_toggle": (lambda: ops.buffer_toggle(rx.interval(0.05).pipe(ops.take(30)), lambda x: rx.timer(0.03)),
                      {"emits_every_item": False, "time_based": True, "max_held": 256}),
    "window": (lambda: rx.pipe(ops.window(rx.interval(0.05)), _flat()),
               {"time_based": True, "max_held": 256}),
    "window_with_count": (lambda: rx.pipe(ops.window_with_count(3), _flat()), {"max_held": 256}),
    "window_with_time": (lambda: rx.pipe(ops.window_with_time(0.05), _flat()), {"time_based": True, "max_held": 256}),
    "window_with_time_or_count": (lambda: rx.pipe(ops.window_with_time_or_count(0.05, 3), _flat()),
                                  {"time_based": True, "max_held": 256}),
    "window_when": (lambda: rx.pipe(ops.window_when(lambda: rx.timer(0.05)), _flat()),
                    {"time_based": True, "max_held": 256}),
    # one name for both stages: the check counts the drops of the stages named as the flow
    "window_toggle": (lambda: rx.pipe(ops.window_toggle(rx.interval(0.05).pipe(ops.take(30)), lambda x: rx.timer(0.03),
                                                        name="window_toggle"), _flat("window_toggle")),
                      {"emits_every_item": False, "time_based": True, "max_held": 256}),
    "group_by_until": (lambda: rx.pipe(ops.group_by_until(lambda x: x % 2, None, lambda g: rx.timer(0.05)), _flat()),
                       {"time_based": True, "max_held": 256}),
    "group_join": (lambda: rx.pipe(ops.group_join(rx.just(-1), lambda x: rx.timer(0.05), lambda x: rx.never()),
                                   ops.flat_map(lambda pair: pair[1].pipe(ops.map(lambda r: (pair[0], r))),
                                                max_concurrency=64)), {"time_based": True, "max_held": 256}),
    "partition": (lambda: lambda s: rx.merge(*s.pipe(ops.partition(lambda x: x % 2 == 0))), {"max_held": 64}),
    "partition_indexed": (lambda: lambda s: rx.merge(*s.pipe(ops.partition_indexed(lambda x, i: i % 3 == 0))),
                          {"max_held": 64}),
    # a terminal operator: the future's stream takes the checks (awaited in a task of from_future's,
    # which a cancel cancels, and so the future, and so the stream)
    "to_future": (lambda: lambda s: rx.defer(lambda: rx.from_future(_awaited(s.pipe(ops.to_future())))),
                  {"emits_every_item": False, "max_held": 256, "checks": ("cancel", "error", "completion")}),
}


# -- operators for LLM pipelines beyond RxPY (DESIGN §3; issue 41) -------------------------------
NOT_OPERATORS.update({
    "KillSwitch": "the handle kill_switch returns (the handle is the operator, checked below)",
    "Substream": "the type of the substreams split_when emits",
    "MergeHub": "the source merge_hub returns (checked below)",
    "HubProducer": "a producer's handle on a merge hub",
    "BroadcastHub": "the hot Flowable broadcast_hub returns (checked below)",
    "PartitionHub": "the hot Flowable partition_hub returns (checked below)",
    "ConnectableFlowable": "the hot Flowable publish/publish_value/replay/multicast return (checked below)",
    "Connection": "the handle ConnectableFlowable.connect() returns",
})


def _subject() -> Any:
    from reactivex.subject import Subject

    return Subject()


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
    # -- third round (issue 34): hot. A connectable subscribed by the checks' sink alone is
    # connected through ref_count (or is the mapper form, cold): the last subscriber leaving
    # cancels the upstream; replay's history holds items already delivered (not held ahead)
    # zip holds what it prefetched of each input (4), as zip's own entry
    "publish": (lambda: ops.publish(lambda s: s.pipe(ops.zip(s.pipe(ops.map(lambda x: -x)), prefetch=4))),
                {"max_held": 4}),
    "publish/ref_count": (lambda: rx.pipe(ops.publish(prefetch=8), ops.ref_count()), {"max_held": 0}),
    "publish_value": (lambda: rx.pipe(ops.publish_value(-1), ops.ref_count()), {"max_held": 0}),
    "publish_value/mapper": (lambda: ops.publish_value(-1, lambda s: s.pipe(ops.skip(1))), {"max_held": 0}),
    "replay": (lambda: rx.pipe(ops.replay(4), ops.ref_count()), {"max_held": 0}),
    "replay/mapper": (lambda: ops.replay(2, mapper=lambda s: s.pipe(ops.zip(s, prefetch=4))), {"max_held": 4}),
    "multicast": (lambda: rx.pipe(ops.multicast(_subject()), ops.ref_count()), {"max_held": 0}),
    "multicast/factory": (lambda: ops.multicast(subject_factory=lambda scheduler: _subject(), mapper=lambda s: s),
                          {"max_held": 0}),
    "ref_count": (lambda: rx.pipe(ops.publish(), ops.ref_count()), {"max_held": 0}),
    "share": (lambda: ops.share(prefetch=4), {"max_held": 0}),
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
