"""The dynamic hubs (Akka MergeHub, BroadcastHub, PartitionHub): producers and consumers that
attach and leave at run time, each with credit; the slowest consumer governs a broadcast; no item
lost or duplicated when a producer leaves; memory bounded by the buffers."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

import rxpipe as rx
from rxpipe import UNBOUNDED, BufferOverflowError, ProtocolViolationError
from rxpipe import operators as ops
from rxpipe.testing import TestPublisher, TestSubscriber

from .test_time import Told


# -- merge_hub ----------------------------------------------------------------------------------------
async def test_producers_attach_at_run_time_each_with_its_own_credit() -> None:
    hub = ops.merge_hub(4)
    ts = TestSubscriber[str]()
    hub.subscribe(ts)
    a, b = TestPublisher[str](), TestPublisher[str]()
    handle_a = hub.attach(a)
    assert a.requests == [4] and hub.producers == 1
    a.emit("a1", "a2", "a3", "a4")
    assert a.outstanding == 0 and hub.queued == 4  # a's credit is spent: it waits, alone
    hub.attach(b)
    assert b.requests == [4]  # a late producer is not starved by an early one
    b.emit("b1")
    ts.request(3)
    assert ts.values == ["a1", "a2", "a3"] and a.requests == [4, 2]  # 2 = ceil(4 / 2) per 2 delivered
    ts.request(UNBOUNDED)
    assert ts.values == ["a1", "a2", "a3", "a4", "b1"]
    handle_a.cancel()  # detached: its upstream is cancelled
    assert a.cancelled and handle_a.done and hub.producers == 1


async def test_items_go_out_in_the_order_they_reached_the_hub() -> None:
    hub = ops.merge_hub(8)
    a, b = TestPublisher[str](), TestPublisher[str]()
    hub.attach(a)
    hub.attach(b)
    a.emit("a1")
    b.emit("b1", "b2")
    a.emit("a2")
    ts = TestSubscriber[str](initial_request=UNBOUNDED)
    hub.subscribe(ts)  # the consumer comes after: what was sent waited, within the credit
    assert ts.values == ["a1", "b1", "b2", "a2"]


@pytest.mark.virtual
@pytest.mark.parametrize("seed", range(6))
async def test_no_item_is_lost_or_duplicated_when_producers_leave(seed: int) -> None:
    rng = random.Random(seed)
    hub = ops.merge_hub(3, name=f"hub_{seed}")
    ts = TestSubscriber[tuple[int, int]]()
    hub.subscribe(ts)
    producers = [TestPublisher[tuple[int, int]]() for _ in range(6)]
    handles = []
    sent: list[list[tuple[int, int]]] = [[] for _ in producers]
    for step in range(400):
        if len(handles) < len(producers) and rng.random() < 0.05:  # producers come at run time
            handles.append(hub.attach(producers[len(handles)]))
        for p, (pub, handle) in enumerate(zip(producers, handles, strict=False)):
            if not handle.done and pub.outstanding and rng.random() < 0.5:
                item = (p, len(sent[p]))
                sent[p].append(item)
                pub.emit(item)
            if not handle.done and rng.random() < 0.01:  # ... and leave: completing, failing or detached
                choice = rng.choice(("complete", "error", "detach"))
                if choice == "complete":
                    pub.complete()
                elif choice == "error":
                    pub.error(ConnectionError("producer crashed"))
                else:
                    handle.cancel()
        assert hub.queued <= hub.producers * 3 + sum(h.queued for h in handles if h.done)
        if rng.random() < 0.3:
            ts.request(rng.choice((1, 2, 5)))
        if step % 50 == 0:
            await asyncio.sleep(0)
    for handle in handles:
        handle.cancel()
    hub.drain_and_complete()
    ts.request(UNBOUNDED)
    assert ts.completed
    delivered = ts.values
    assert len(delivered) == len(set(delivered))  # nothing twice
    assert sorted(delivered) == sorted(item for items in sent for item in items)  # nothing lost
    for p in range(len(producers)):
        assert [item for item in delivered if item[0] == p] == sent[p]  # each producer in order


async def test_memory_is_bounded_by_producers_times_the_buffer() -> None:
    hub = ops.merge_hub(5)
    ts = TestSubscriber[int]()
    hub.subscribe(ts)
    producers = [rx.range(0, 10_000) for _ in range(20)]
    for producer in producers:
        hub.attach(producer)
    assert hub.queued == 20 * 5 and hub.statistics().capacity == 100  # a consumer that never asks
    ts.request(10)
    # the 10 were the first two producers' 5 each; each got 3 (= ceil(5 / 2)) back after 3 out
    assert hub.queued == 100 - 10 + 3 + 3 and hub.queued <= 100


async def test_a_cancelled_consumer_closes_the_hub() -> None:
    told: list[tuple[str, str]] = []
    hub = ops.merge_hub(2)
    ts = TestSubscriber[Any]()
    hub.subscribe(ts)
    a = TestPublisher[Any]()
    hub.attach(a)
    a.emit(Told("x", told))
    ts.cancel()
    assert a.cancelled and told == [("x", "cancelled")] and hub.closed
    late = TestPublisher[Any]()
    handle = hub.attach(late)  # Akka: a producer attaching to a closed hub is cancelled at once
    assert late.cancelled and late.requests == [] and handle.done
    again = TestSubscriber[Any]()
    hub.subscribe(again)
    assert isinstance(again.error, ProtocolViolationError)


async def test_drain_and_complete_waits_for_the_attached_producers(caplog: pytest.LogCaptureFixture) -> None:
    hub = ops.merge_hub(4)
    ts = TestSubscriber[str](initial_request=UNBOUNDED)
    hub.subscribe(ts)
    a, b = TestPublisher[str](), TestPublisher[str]()
    hub.attach(a)
    handle_b = hub.attach(b)
    hub.drain_and_complete()
    late = TestPublisher[str]()
    with pytest.raises(ProtocolViolationError, match="after drain_and_complete"):
        hub.attach(late)  # draining: no new producer, and the caller is told (never a silent cancel)
    assert late.subscribe_count == 0 and hub.producers == 2
    a.emit("a").complete()
    assert not ts.completed
    boom = ConnectionError("b crashed")
    with caplog.at_level("WARNING", logger="rxpipe"):
        b.emit("b").error(boom)  # a producer's error removes it, never fails the hub
    assert ts.values == ["a", "b"] and ts.completed and ts.error is None and handle_b.error is boom
    assert "a producer failed and was removed" in caplog.text


@pytest.mark.virtual
async def test_attaching_after_drain_and_complete_is_an_error_not_a_producer_cancelled_unseen() -> None:
    # pipelines/multi_user_chat.py's lost user: a busy loop ran the join that drains the hub
    # before the first user's join (uvloop runs call_later(0) after the timers already due); the
    # hub cancelled that producer at once and completed without its items, exit status 0
    loop = asyncio.get_running_loop()
    hub = ops.merge_hub(2)
    ts = TestSubscriber[str](initial_request=UNBOUNDED)
    hub.subscribe(ts)
    alice, bob = TestPublisher[str](), TestPublisher[str]()
    refused: list[BaseException] = []

    def join(producer: TestPublisher[str], last: bool) -> None:
        try:
            hub.attach(producer)
        except ProtocolViolationError as error:
            refused.append(error)
        if last:
            hub.drain_and_complete()

    loop.call_at(0.01, join, bob, True)  # the join scheduled last runs first
    loop.call_at(0.01, join, alice, False)
    await asyncio.sleep(0.02)
    assert len(refused) == 1 and "merge_hub" in str(refused[0]) and "after drain_and_complete" in str(refused[0])
    assert alice.subscribe_count == 0 and bob.requests == [2] and hub.producers == 1
    with pytest.raises(ProtocolViolationError, match="after drain_and_complete"):
        hub.sink()
    bob.emit("b1", "b2").complete()
    assert ts.values == ["b1", "b2"] and ts.completed


@pytest.mark.virtual
async def test_a_producer_attached_before_the_drain_runs_to_its_end_though_it_subscribes_after() -> None:
    loop = asyncio.get_running_loop()
    hub = ops.merge_hub(2)
    ts = TestSubscriber[int](initial_request=UNBOUNDED)
    hub.subscribe(ts)
    handle = hub.sink()  # attached now: the drain waits for it
    loop.call_at(0.5, rx.range(0, 5).subscribe, handle)  # its publisher subscribes later
    hub.drain_and_complete()
    await asyncio.sleep(0.4)
    assert not ts.completed and hub.producers == 1 and ts.values == []
    await asyncio.sleep(0.2)
    assert ts.values == [0, 1, 2, 3, 4] and ts.completed and ts.error is None
    assert handle.done and handle.error is None and handle.sent == 5 and hub.producers == 0


async def test_merge_hub_bounds_and_arguments() -> None:
    hub = ops.merge_hub(1, max_producers=2)
    first = hub.attach(rx.never())
    hub.attach(rx.never())
    with pytest.raises(BufferOverflowError, match="max_producers=2"):
        hub.attach(rx.never())
    with pytest.raises(BufferOverflowError):
        hub.sink()
    first.cancel()  # one leaves: another may come
    hub.attach(rx.never())
    assert hub.producers == 2
    with pytest.raises(TypeError, match="Publisher"):
        hub.attach([1, 2])  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        ops.merge_hub(0)
    hub2 = ops.merge_hub(2)  # any Publisher can feed a hub through a sink
    rx.just(1, 2, 3).subscribe(hub2.sink())
    hub2.drain_and_complete()
    assert await hub2.to_list() == [1, 2, 3]


# -- broadcast_hub ----------------------------------------------------------------------------------------
async def test_the_slowest_consumer_governs_upstream_demand() -> None:
    pub = TestPublisher[int]()
    hub = pub.pipe(ops.broadcast_hub(4))
    fast, slow = TestSubscriber[int](initial_request=UNBOUNDED), TestSubscriber[int](initial_request=1)
    hub.subscribe(fast)
    hub.subscribe(slow)
    assert pub.requests == [4]
    pub.emit(1, 2, 3, 4)
    assert fast.values == [1, 2, 3, 4] and slow.values == [1] and pub.outstanding == 0
    assert hub.statistics().buffered == 3  # held once, for the slow one
    slow.request(2)
    assert slow.values == [1, 2, 3] and pub.requests == [4, 3]  # 3 freed = 4 - 4 // 4: a round
    pub.emit(5, 6, 7)
    assert fast.values == [1, 2, 3, 4, 5, 6, 7] and hub.statistics().buffered == 4
    slow.cancel()  # the slow one leaves: what only it held is freed
    assert hub.statistics().buffered == 0 and pub.requests == [4, 3, 3]


async def test_consumers_attach_at_run_time_and_start_at_the_oldest_item_held() -> None:
    pub = TestPublisher[str]()
    hub = pub.pipe(ops.broadcast_hub(8))
    first = TestSubscriber[str](initial_request=1)
    hub.subscribe(first)
    pub.emit("a", "b", "c")
    late = TestSubscriber[str](initial_request=UNBOUNDED)
    hub.subscribe(late)
    assert late.values == ["b", "c"]  # a was taken by everyone there: freed; b, c are held
    pub.emit("d")
    assert late.values == ["b", "c", "d"] and first.values == ["a"]
    first.cancel()
    later = TestSubscriber[str](initial_request=UNBOUNDED)
    late.cancel()  # nobody left: the upstream is not cancelled (Akka), items wait for the next one
    assert not pub.cancelled
    pub.emit("e")
    hub.subscribe(later)
    assert later.values == ["e"]
    pub.complete()
    assert later.completed
    after = TestSubscriber[str](initial_request=UNBOUNDED)
    hub.subscribe(after)  # the end is remembered
    assert after.completed and after.values == []


async def test_start_after_waits_for_that_many_consumers_and_connect_reads_ahead() -> None:
    pub = TestPublisher[int]()
    hub = pub.pipe(ops.broadcast_hub(4, start_after=2))
    hub.connect()
    a = TestSubscriber[int](initial_request=UNBOUNDED)
    hub.subscribe(a)
    assert pub.has_subscribers and pub.requests == []  # one consumer of two: nothing read yet (Akka)
    b = TestSubscriber[int](initial_request=UNBOUNDED)
    hub.subscribe(b)
    assert pub.requests == [4]
    pub.emit(1, 2)
    assert a.values == b.values == [1, 2]
    pub = TestPublisher[int]()
    hub = pub.pipe(ops.broadcast_hub(4))
    hub.connect()  # start_after=0: read ahead before any consumer, held for the first ones
    assert pub.requests == [4]
    pub.emit(1, 2)
    c = TestSubscriber[int](initial_request=UNBOUNDED)
    hub.subscribe(c)
    assert c.values == [1, 2]


async def test_broadcast_hub_errors_and_close() -> None:
    pub = TestPublisher[int]()
    hub = pub.pipe(ops.broadcast_hub(4))
    a, b = TestSubscriber[int](initial_request=UNBOUNDED), TestSubscriber[int]()
    hub.subscribe(a)
    hub.subscribe(b)
    pub.emit(1)
    boom = RuntimeError("upstream failed")
    pub.error(boom)
    assert a.error is boom and b.error is boom and b.values == []  # at once, over the held item
    late = TestSubscriber[int]()
    hub.subscribe(late)
    assert late.error is boom
    pub = TestPublisher[int]()
    hub = pub.pipe(ops.broadcast_hub(4))
    c = TestSubscriber[int]()
    hub.subscribe(c)
    pub.emit(1)
    hub.close()
    assert pub.cancelled and not c.completed
    c.request(5)
    assert c.values == [1] and c.completed
    with pytest.raises(ValueError):
        ops.broadcast_hub(0)


@pytest.mark.virtual
@pytest.mark.parametrize("seed", range(4))
async def test_broadcast_every_consumer_gets_every_item_from_its_start_in_order(seed: int) -> None:
    rng = random.Random(seed)
    pub = TestPublisher[int]()
    hub = pub.pipe(ops.broadcast_hub(8))
    consumers: list[tuple[TestSubscriber[int], int]] = []
    left: set[int] = set()
    sent = 0
    for _ in range(600):
        if rng.random() < 0.03:
            ts = TestSubscriber[int]()
            consumers.append((ts, sent))
            hub.subscribe(ts)
        if pub.outstanding and rng.random() < 0.7:
            pub.emit(sent)
            sent += 1
        live = [ts for ts, _ in consumers if id(ts) not in left]
        for ts in live:
            if rng.random() < 0.4:
                ts.request(rng.choice((1, 3)))
        if live and rng.random() < 0.01:  # consumers leave at run time
            leaving = rng.choice(live)
            leaving.cancel()
            left.add(id(leaving))
        assert hub.statistics().buffered + pub.outstanding <= 8  # bounded memory
    pub.complete()
    assert len(consumers) > 5 and left
    for ts, joined in consumers:
        if id(ts) not in left:
            ts.request(UNBOUNDED)
            assert ts.completed
        if ts.values:  # from some held item at or before its start, then every item, in order
            assert ts.values == list(range(ts.values[0], ts.values[0] + len(ts.values)))
            assert ts.values[0] <= joined


# -- partition_hub ----------------------------------------------------------------------------------------
async def test_partition_routes_each_item_to_one_consumer_and_drops_on_minus_one() -> None:
    pub = TestPublisher[int]()
    hub = pub.pipe(ops.partition_hub(lambda n, x: -1 if x < 0 else x % n, 8))
    a, b = TestSubscriber[int](initial_request=UNBOUNDED), TestSubscriber[int](initial_request=UNBOUNDED)
    hub.subscribe(a)
    hub.subscribe(b)
    pub.emit(0, 1, 2, -5, 3)
    assert a.values == [0, 2] and b.values == [1, 3]
    assert hub.statistics().dropped == {"partitioner": 1}


async def test_partition_buffer_is_shared_and_a_slow_consumer_stops_the_upstream() -> None:
    pub = TestPublisher[int]()
    hub = pub.pipe(ops.partition_hub(lambda n, x: x % n, 4))
    fast, slow = TestSubscriber[int](initial_request=UNBOUNDED), TestSubscriber[int]()
    hub.subscribe(fast)
    hub.subscribe(slow)
    pub.emit(0, 1, 2, 3)  # 1 and 3 wait for the slow one; 0 and 2 went out: 2 freed, below a round
    assert hub.queue_sizes() == [0, 2] and pub.outstanding == 0 and pub.requests == [4]
    pub2_items = [5, 7]
    slow.request(1)  # 3 freed: a round of 3
    assert pub.requests == [4, 3]
    pub.emit(*pub2_items, 9)
    assert hub.queue_sizes() == [0, 4] and pub.outstanding == 0  # the slow queue holds the buffer
    slow.cancel()  # leaving drops what was routed to it (Akka), counted; its credit comes back
    assert hub.statistics().dropped == {"cancelled": 4} and pub.requests == [4, 3, 3]


async def test_nothing_is_read_before_start_after_consumers_and_items_wait_for_a_consumer() -> None:
    pub = TestPublisher[int]()
    hub = pub.pipe(ops.partition_hub(lambda n, x: x % n, 8, start_after=2))
    a = TestSubscriber[int](initial_request=UNBOUNDED)
    hub.subscribe(a)
    assert pub.requests == []
    b = TestSubscriber[int](initial_request=UNBOUNDED)
    hub.subscribe(b)
    assert pub.requests == [8]
    pub.emit(0, 1, 2, 3)
    assert a.values == [0, 2] and b.values == [1, 3]
    a.cancel()
    b.cancel()  # nobody left: items read now wait (Akka), within the buffer
    pub.emit(4, 5)
    assert hub.statistics().buffered == 2 and not pub.cancelled
    c = TestSubscriber[int](initial_request=UNBOUNDED)
    hub.subscribe(c)
    assert c.values == [4, 5]


async def test_partitioner_errors_fail_every_consumer() -> None:
    for partitioner in (lambda n, x: 1 // 0, lambda n, x: n, lambda n, x: "0"):
        pub = TestPublisher[int]()
        hub = pub.pipe(ops.partition_hub(partitioner, 4))
        a, b = TestSubscriber[int](initial_request=UNBOUNDED), TestSubscriber[int]()
        hub.subscribe(a)
        hub.subscribe(b)
        pub.emit(1)
        assert a.error is not None and a.error is b.error and pub.cancelled
    with pytest.raises(TypeError):
        ops.partition_hub(3)  # type: ignore[arg-type]


async def test_partition_completion_follows_each_queue() -> None:
    pub = TestPublisher[int]()
    hub = pub.pipe(ops.partition_hub(lambda n, x: 0, 4))
    a = TestSubscriber[int]()
    hub.subscribe(a)
    pub.emit(1, 2)
    pub.complete()
    assert not a.completed
    a.request(2)
    assert a.values == [1, 2] and a.completed
    late = TestSubscriber[int]()
    hub.subscribe(late)
    assert late.completed


@pytest.mark.parametrize("start_after", [0, 1, 2, 3])
@pytest.mark.parametrize("n", [10, 300, 5000])
async def test_a_synchronous_upstream_loses_nothing_whatever_the_start(start_after: int, n: int) -> None:
    # a synchronous upstream answers each credit inside the delivery that freed it, and may
    # complete there: items read before the consumers came are routed first, in order, all of them
    hub = rx.range(0, n).pipe(ops.partition_hub(lambda size, x: x % size, 64, start_after=start_after))
    consumers = [hub] * max(start_after, 2)
    out = await rx.merge(*consumers).to_list()
    assert sorted(out) == list(range(n))
    # a broadcast consumer sees what is held when it attaches: start_after=k lets k see everything
    k = max(start_after, 1)
    hub = rx.range(0, n).pipe(ops.broadcast_hub(64, start_after=start_after))
    out = await rx.merge(*[hub] * k).to_list()
    assert sorted(out) == sorted(list(range(n)) * k)
