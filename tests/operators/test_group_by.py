"""group_by: keyed groups, bounded open groups (TooManyGroupsError), credit, cancel, errors."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import rxpipe as rx
from rxpipe import UNBOUNDED, MissingBackpressureError, ProtocolViolationError, TooManyGroupsError
from rxpipe import operators as ops
from rxpipe.metrics import live_stages
from rxpipe.testing import TestPublisher, TestSubscriber


class Groups:
    """Subscribes a TestSubscriber (requesting ``per_group``) to every group as it arrives."""

    def __init__(self, per_group: int = UNBOUNDED) -> None:
        self.per_group = per_group
        self.by_key: dict[Any, TestSubscriber[Any]] = {}
        self.order: list[Any] = []

    def on_group(self, group: Any) -> None:
        ts = TestSubscriber[Any](self.per_group)
        self.by_key[group.key] = ts
        self.order.append(group.key)
        group.subscribe(ts)

    def values(self) -> dict[Any, list[Any]]:
        return {k: ts.values for k, ts in self.by_key.items()}


def main_subscriber(groups: Groups, request: int = UNBOUNDED) -> TestSubscriber[Any]:
    class Main(TestSubscriber[Any]):
        def on_next(self, item: Any) -> None:
            super().on_next(item)
            groups.on_group(item)

    return Main(request)


def stage(name: str) -> Any:
    return [s for s in live_stages() if s.counters.stage == name][0]


def test_items_are_split_by_key_in_order_of_first_appearance() -> None:
    groups = Groups()
    main = main_subscriber(groups)
    rx.from_iterable(["a1", "b1", "a2", "c1", "b2"]).pipe(ops.group_by(lambda s: s[0], 3)).subscribe(main)
    assert groups.order == ["a", "b", "c"]
    assert [g.key for g in main.values] == ["a", "b", "c"]
    assert all(isinstance(g, ops.GroupedFlowable) for g in main.values)
    assert groups.values() == {"a": ["a1", "a2"], "b": ["b1", "b2"], "c": ["c1"]}
    assert main.completed and all(ts.completed for ts in groups.by_key.values())


def test_max_groups_2_over_3_keys_signals_too_many_groups_after_the_held_items() -> None:
    pub = TestPublisher[str]()
    groups = Groups(per_group=1)
    main = main_subscriber(groups)
    pub.pipe(ops.group_by(lambda s: s[0], max_groups=2, name="gb2")).subscribe(main)
    pub.emit("a1", "b1", "a2", "c1")
    assert pub.cancelled  # c1 would open a third group
    assert isinstance(main.error, TooManyGroupsError)
    assert main.error.key == "c" and main.error.max_groups == 2
    assert [g.key for g in main.values] == ["a", "b"]
    a, b = groups.by_key["a"], groups.by_key["b"]
    assert a.values == ["a1"] and a.error is None  # a2 is held: the error waits behind it
    assert isinstance(b.error, TooManyGroupsError) and b.values == ["b1"]
    a.request(1)
    assert a.values == ["a1", "a2"] and isinstance(a.error, TooManyGroupsError)
    assert stage("gb2").counters.dropped == {"too_many_groups": 1}
    pub.emit("a3")  # after the cancel: ignored
    assert a.values == ["a1", "a2"]


def test_a_cancelled_group_frees_its_slot_and_its_key_opens_a_new_group() -> None:
    pub = TestPublisher[str]()
    groups = Groups(per_group=1)
    main = main_subscriber(groups)
    pub.pipe(ops.group_by(lambda s: s[0], max_groups=2, name="gbc")).subscribe(main)
    pub.emit("a1", "b1", "a2", "a3")
    first_a = groups.by_key["a"]
    first_a.cancel()  # a2, a3 held: dropped
    pub.emit("c1", "a4")
    assert [g.key for g in main.values] == ["a", "b", "c"] and main.error is not None
    assert isinstance(main.error, TooManyGroupsError) and main.error.key == "a"  # b, c open
    assert first_a.values == ["a1"]
    assert stage("gbc").counters.dropped == {"cancelled": 2, "too_many_groups": 1}


def test_upstream_credit_is_the_prefetch_over_all_groups() -> None:
    pub = TestPublisher[str]()
    groups = Groups(per_group=0)
    main = main_subscriber(groups)
    pub.pipe(ops.group_by(lambda s: s[0], 4, prefetch=4, name="gbp")).subscribe(main)
    assert pub.requests == [4]
    pub.emit("a1", "b1", "a2", "b2")
    stats = stage("gbp").statistics()
    assert (stats.buffered, stats.capacity, stats.items_in, stats.items_out) == (4, 4, 4, 0)
    groups.by_key["a"].request(2)
    assert pub.requests == [4]  # 2 consumed; the replenish amount is 4 - 4 // 4 = 3
    groups.by_key["b"].request(1)
    assert pub.requests == [4, 3]
    assert stage("gbp").statistics().buffered == 1


def test_main_emits_groups_only_on_its_demand() -> None:
    pub = TestPublisher[str]()
    groups = Groups()
    main = main_subscriber(groups, request=1)
    pub.pipe(ops.group_by(lambda s: s[0], 5)).subscribe(main)
    pub.emit("a1", "b1", "b2")
    assert groups.order == ["a"]  # b's group waits for the main stream's demand, holding b1, b2
    main.request(1)
    assert groups.order == ["a", "b"] and groups.values() == {"a": ["a1"], "b": ["b1", "b2"]}


def test_cancelling_main_keeps_open_groups_running_and_drops_new_keys() -> None:
    pub = TestPublisher[str]()
    groups = Groups()
    main = main_subscriber(groups)
    pub.pipe(ops.group_by(lambda s: s[0], 5, name="gbm")).subscribe(main)
    pub.emit("a1")
    main.cancel()
    assert not pub.cancelled
    pub.emit("a2", "z1")
    assert groups.values() == {"a": ["a1", "a2"]}
    assert stage("gbm").counters.dropped == {"no_group": 1}
    groups.by_key["a"].cancel()
    assert pub.cancelled


def test_cancelling_main_with_unemitted_groups_releases_their_credit() -> None:
    pub = TestPublisher[str]()
    groups = Groups()
    main = main_subscriber(groups, request=0)
    pub.pipe(ops.group_by(lambda s: s[0], 5, prefetch=4, name="gbu")).subscribe(main)
    pub.emit("a1", "a2", "b1")
    main.cancel()  # no group was ever emitted: nobody can consume them
    assert pub.cancelled and pub.requests == [4]
    assert stage("gbu").counters.dropped == {"cancelled": 3}


def test_key_function_raising_cancels_upstream_and_ends_every_stream() -> None:
    pub = TestPublisher[Any]()
    groups = Groups()
    main = main_subscriber(groups)
    pub.pipe(ops.group_by(lambda s: s[0], 5)).subscribe(main)
    pub.emit("a1", 7)  # 7[0]: TypeError
    assert pub.cancelled
    assert isinstance(main.error, TypeError) and isinstance(groups.by_key["a"].error, TypeError)
    assert groups.values() == {"a": ["a1"]}


def test_upstream_error_and_completion_reach_main_and_groups() -> None:
    pub = TestPublisher[str]()
    groups = Groups()
    main = main_subscriber(groups)
    pub.pipe(ops.group_by(lambda s: s[0], 5)).subscribe(main)
    pub.emit("a1", "b1")
    boom = RuntimeError("upstream")
    pub.error(boom)
    assert main.error is boom and groups.by_key["a"].error is boom and groups.by_key["b"].error is boom


def test_a_group_subscribed_after_completion_gets_its_items_then_completes() -> None:
    held: list[Any] = []
    main = TestSubscriber[Any](UNBOUNDED)
    rx.from_iterable([1, 2, 3, 4]).pipe(ops.group_by(lambda x: x % 2, 2)).subscribe(main)
    held.extend(main.values)
    assert main.completed
    odd = TestSubscriber[int](UNBOUNDED)
    held[0].subscribe(odd)
    assert odd.values == [1, 3] and odd.completed
    second = TestSubscriber[int](UNBOUNDED)
    held[0].subscribe(second)
    assert isinstance(second.error, ProtocolViolationError)


def test_emission_beyond_the_prefetch_is_missing_backpressure() -> None:
    pub = TestPublisher[str]()
    groups = Groups(per_group=0)
    main = main_subscriber(groups)
    pub.pipe(ops.group_by(lambda s: s[0], 5, prefetch=2)).subscribe(main)
    pub.emit("a1", "a2")  # held, not consumed: no credit comes back
    assert pub.requests == [2]
    pub.emit("a3")
    assert isinstance(main.error, MissingBackpressureError) and pub.cancelled
    a = groups.by_key["a"]
    assert a.error is None  # behind its two held items
    a.request(5)
    assert a.values == ["a1", "a2"] and isinstance(a.error, MissingBackpressureError)


async def test_group_by_with_async_consumers() -> None:
    results: dict[int, list[int]] = {}
    tasks: list[asyncio.Task[None]] = []

    async def collect(group: Any) -> None:
        results[group.key] = await group.to_list()

    out = rx.range(0, 300).pipe(ops.group_by(lambda x: x % 3, 3, prefetch=16))
    async for group in out:
        tasks.append(asyncio.ensure_future(collect(group)))
    await asyncio.gather(*tasks)
    assert results == {k: list(range(k, 300, 3)) for k in range(3)}


def test_group_by_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError):
        ops.group_by(len, 0)
    with pytest.raises(ValueError):
        ops.group_by(len, 2, prefetch=0)
    with pytest.raises(TypeError):
        ops.group_by("len", 2)  # type: ignore[arg-type]
