"""``buffer``'s run handover: a fused source appends whole runs to a backpressured buffer, and each
pass hands a fused chain downstream every item demand allows in one call (DESIGN §2, §3).

The demand rules are the per-item ones: never more delivered than requested, the upstream pulled
at most the prefetch ahead, an error or a cancel in the middle of a run stops it at once.
"""

from __future__ import annotations

from typing import Any, Iterator

import pytest

import rxpipe as rx
from rxpipe import UNBOUNDED
from rxpipe import operators as ops
from rxpipe.testing import TestPublisher, TestSubscriber


class Pulls:
    """A generator source that counts what was pulled from it and whether it was closed."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.pulled = 0
        self.closed = False

    def __iter__(self) -> Iterator[int]:
        try:
            for i in range(self.n):
                self.pulled += 1
                yield i
        finally:
            self.closed = True


class Counted:
    """A map function that counts its calls (items that went through the upstream chain)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, x: int) -> int:
        self.calls += 1
        return x * 2


class Checked(TestSubscriber[Any]):
    """Checks at every item that delivery stays within what it requested, and that the source
    was pulled at most ``window`` items ahead of what arrived."""

    def __init__(self, initial_request: int, upstream: Counted, window: int) -> None:
        super().__init__(initial_request=initial_request)
        self.upstream = upstream
        self.window = window
        self.worst_ahead = 0

    def on_next(self, item: Any) -> None:
        super().on_next(item)
        assert len(self.values) <= self.requested
        self.worst_ahead = max(self.worst_ahead, self.upstream.calls - len(self.values))


def buffer_of(ts: TestSubscriber[Any]) -> Any:
    """The buffer stage upstream of a TestSubscriber (through its strict boundary and any
    fused chain in between)."""
    stage = ts.subscription.upstream  # type: ignore[union-attr]
    while not hasattr(stage, "statistics"):
        stage = stage.upstream
    return stage


# demand ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("upstream", ["map", "map+filter"])
def test_a_run_delivers_exactly_what_was_requested(upstream: str) -> None:
    m = Counted()
    before = [ops.map(m)] if upstream == "map" else [ops.map(m), ops.filter(lambda x: True)]
    ts = TestSubscriber[int]()
    rx.range(0, 1_000).pipe(*before, ops.buffer(256), ops.filter(lambda x: x % 4 == 0),
                            ops.map(lambda x: x + 1)).subscribe(ts)
    assert m.calls == 256 and ts.values == []  # the prefetch, whatever the downstream demand
    ts.request(5)
    assert ts.values == [1, 5, 9, 13, 17]
    assert m.calls == 256  # 10 taken off the queue, no replenish due yet (192 = 256 - 64)
    ts.request(100)
    assert ts.values == [4 * i + 1 for i in range(105)]
    # 209 taken off the queue (delivered or dropped): one request(192) went upstream
    assert m.calls == 256 + 192
    assert buffer_of(ts).statistics().buffered == 256 + 192 - 209
    ts.request(UNBOUNDED)
    assert ts.values == [4 * i + 1 for i in range(500)] and ts.completed
    assert ts.error is None  # the strict boundary saw nothing beyond demand


@pytest.mark.parametrize("chunk", [1, 7, 192, 300])
def test_demand_windows_never_exceed_what_the_consumer_asked(chunk: int) -> None:
    m = Counted()

    class Chunked(Checked):
        def on_next(self, item: Any) -> None:
            super().on_next(item)
            if len(self.values) % chunk == 0:
                self.request(chunk)

    ts = Chunked(chunk, m, 64)
    rx.range(0, 5_000).pipe(ops.map(m), ops.buffer(64), ops.map(lambda x: x // 2)).subscribe(ts)
    assert ts.values == list(range(5_000)) and ts.completed and ts.error is None
    # the source never ran more than the prefetch ahead: 64 pulled when the first arrived
    assert ts.worst_ahead == 63


def test_a_run_into_a_limit_rate_keeps_its_tides() -> None:
    m = Counted()
    ts = TestSubscriber[int]()
    rx.range(0, 100).pipe(ops.map(m), ops.limit_rate(10, 4)).subscribe(ts)
    assert m.calls == 10
    ts.request(3)
    assert ts.values == [0, 2, 4] and m.calls == 10
    ts.request(1)  # 4 delivered: one request(4)
    assert m.calls == 14
    ts.request(9)
    assert ts.values == [2 * i for i in range(13)] and m.calls == 22


# errors ------------------------------------------------------------------------------------------
def test_an_error_in_the_downstream_chain_mid_run_stops_delivery_and_cancels_upstream() -> None:
    source = Pulls(10_000)
    m = Counted()
    boom = RuntimeError("boom")

    def fail_at_50(x: int) -> int:
        if x == 100:
            raise boom
        return x

    ts = TestSubscriber[int](initial_request=UNBOUNDED)
    rx.from_iterable(source).pipe(ops.map(m), ops.buffer(256), ops.map(fail_at_50)).subscribe(ts)
    assert ts.values == [2 * i for i in range(50)]
    assert ts.error is boom and not ts.completed
    assert source.closed and m.calls == 256  # cancelled: no replenish after the failing item
    assert buffer_of(ts).statistics().buffered == 0


@pytest.mark.parametrize("bad", ["raise", "none"])
def test_an_error_in_the_upstream_chain_mid_run_follows_the_items_before_it(bad: str) -> None:
    boom = ValueError("bad item")

    def fail_at_100(x: int) -> Any:
        if x == 100:
            if bad == "raise":
                raise boom
            return None
        return x

    ts = TestSubscriber[int](initial_request=30)
    rx.range(0, 10_000).pipe(ops.map(fail_at_100), ops.buffer(256), ops.map(lambda x: x + 1)).subscribe(ts)
    assert ts.values == list(range(1, 31)) and ts.error is None  # the error waits behind the items
    ts.request(UNBOUNDED)
    assert ts.values == list(range(1, 101))
    if bad == "raise":
        assert ts.error is boom
    else:
        assert isinstance(ts.error, TypeError) and "None" in str(ts.error)


# cancellation ------------------------------------------------------------------------------------
@pytest.mark.parametrize("downstream", ["fused", "plain"])
def test_cancel_mid_run_stops_at_once(downstream: str) -> None:
    source = Pulls(10_000)
    m = Counted()

    class CancelAt10(TestSubscriber[int]):
        def on_next(self, item: int) -> None:
            super().on_next(item)
            if len(self.values) == 10:
                self.cancel()

    ts = CancelAt10(initial_request=UNBOUNDED)
    after = [ops.map(lambda x: x + 1)] if downstream == "fused" else []
    rx.from_iterable(source).pipe(ops.map(m), ops.buffer(256), *after).subscribe(ts)
    offset = 1 if downstream == "fused" else 0
    assert ts.values == [2 * i + offset for i in range(10)]
    assert not ts.completed and ts.error is None
    assert source.closed and m.calls == 256
    stage = buffer_of(ts)
    stats = stage.statistics()
    assert (stats.buffered, stats.items_in, stats.items_out) == (0, 256, 10)
    assert (stage.counters.items_in, stage.counters.items_out) == (256, 10)


def test_take_after_the_boundary_ends_the_run_and_cancels_upstream() -> None:
    source = Pulls(10_000)
    ts = TestSubscriber[int](initial_request=UNBOUNDED)
    rx.from_iterable(source).pipe(ops.map(lambda x: x * 3), ops.buffer(256), ops.filter(lambda x: x % 2 == 1),
                                  ops.take(5)).subscribe(ts)
    assert ts.values == [3, 9, 15, 21, 27] and ts.completed
    assert source.closed and source.pulled == 257  # the prefetch, and the one-ahead peek


def test_take_before_the_boundary_ends_its_run_with_completion() -> None:
    ts = TestSubscriber[int](initial_request=3)
    rx.range(0, 10_000).pipe(ops.map(lambda x: x + 1), ops.take(7), ops.buffer(256)).subscribe(ts)
    assert ts.values == [1, 2, 3] and not ts.completed
    ts.request(UNBOUNDED)
    assert ts.values == [1, 2, 3, 4, 5, 6, 7] and ts.completed


# items arriving during a pass ----------------------------------------------------------------------
def test_items_emitted_from_inside_on_next_join_the_run_in_order() -> None:
    pub = TestPublisher[int]()

    class EmitsMore(TestSubscriber[int]):
        def on_next(self, item: int) -> None:
            super().on_next(item)
            if item == 1:
                pub.emit(10, 11)  # within the prefetch of 8, during the pass delivering 0..3

    ts = EmitsMore()
    pub.pipe(ops.buffer(8), ops.map(lambda x: x)).subscribe(ts)
    pub.emit(0, 1, 2, 3)
    ts.request(5)  # one pass over [0, 1, 2, 3], which grows to [0, 1, 2, 3, 10, 11] during it
    assert ts.values == [0, 1, 2, 3, 10]
    ts.request(UNBOUNDED)
    assert ts.values == [0, 1, 2, 3, 10, 11] and ts.error is None


# one item per pass ---------------------------------------------------------------------------------
def test_a_consumer_taking_one_item_per_pass_gets_every_item_in_order() -> None:
    m = Counted()
    ts = TestSubscriber[int]()
    rx.range(0, 3_000).pipe(ops.map(m), ops.buffer(1_000), ops.filter(lambda x: x % 4 != 2)).subscribe(ts)
    for _ in range(300):
        ts.request(1)
    assert ts.values == [4 * i for i in range(300)]  # 2x kept when x is even
    stage = buffer_of(ts)
    assert stage.statistics().buffered == 1_000 - 599  # 599 taken: 300 delivered, 299 dropped
    assert m.calls == 1_000
    ts.request(150)  # 899 taken: one request(750)
    assert ts.values == [4 * i for i in range(450)]
    assert m.calls == 1_750 and stage.statistics().buffered == 1_750 - 899
    ts.request(UNBOUNDED)
    assert ts.values == [4 * i for i in range(1_500)] and ts.completed
    assert (stage.counters.items_in, stage.counters.items_out) == (3_000, 3_000)


def test_a_source_iterator_raising_mid_run_ends_the_stream_after_the_items_before_it() -> None:
    boom = OSError("disk gone")

    def source() -> Iterator[int]:
        yield from range(100)
        raise boom

    ts = TestSubscriber[int](initial_request=UNBOUNDED)
    rx.from_iterable(source()).pipe(ops.map(lambda x: x + 1), ops.buffer(256), ops.map(lambda x: -x)).subscribe(ts)
    assert ts.values == [-(i + 1) for i in range(100)]
    assert ts.error is boom and not ts.completed
