"""The docstring marble diagrams of broadcast and the hot operators (operators/_multicasting.py), each played by its
runner (the package docstring says how)."""

from __future__ import annotations

import asyncio
from typing import Any, Callable

import pytest

import rxpipe as rx
from rxpipe import operators as ops
from rxpipe.testing import Marbles, TestPublisher, TestSubscriber, parse_demand, run_virtual

from .helpers import FOUND, Block, FrameTimeline, diagram_id, expect_events, requests_of, tokens_of


def broadcast(block: Block) -> None:
    pub = TestPublisher[str]()
    a_branch, b_branch = pub.pipe(ops.broadcast(2))
    a, b = TestSubscriber[str](), TestSubscriber[str]()
    a_branch.subscribe(a)
    b_branch.subscribe(b)
    a_requests, (b_request,), upstream = (requests_of(block[k]) for k in ("a", "b", "upstream"))
    items = [t for t in tokens_of(block["a, b"]) if t != "|"]
    a.request(a_requests[0][1])
    b.request(b_request[1])
    assert pub.requests == [upstream[0][1]]  # the minimum over the branches
    pub.emit(items[0])
    a.request(a_requests[1][1])
    assert pub.requests == [n for _, n in upstream]
    pub.emit(*items[1:]).complete()
    assert a.values == b.values == items and a.completed and b.completed
    assert tokens_of(block["source"]) == [*items, "|"]


def connectable(make: Callable[[], Any], *, connect: bool = True,
                subscribed_at: list[int] | None = None) -> Callable[[Block], None]:
    """Play a hot operator's diagram: the cold upstream ``source``; consumers ``x``, ``y``, ``z``,
    each subscribed in the column of its first mark, requesting (``^n``) and cancelling (``!``)
    as its line says; ``connect()`` in column 0 (after the subscriptions there) when ``connect``;
    what each gets (``x gets`` ...); ``upstream:`` the source's exact requests."""
    def run(block: Block) -> None:
        async def main() -> None:
            loop = asyncio.get_running_loop()
            m = Marbles()
            source = m.cold(block["source"].strip())
            hot = source.pipe(make())
            consumers = {label: FrameTimeline() for label in ("x", "y", "z") if label in block}
            actions: dict[int, list[Callable[[], Any]]] = {}
            for label, ts in consumers.items():
                marks = parse_demand(block[label])
                actions.setdefault(marks[0][0], []).append(lambda hot=hot, ts=ts: hot.subscribe(ts))
                for frame, n in marks:
                    actions.setdefault(frame, []).append(ts.cancel if n is None else lambda ts=ts, n=n: ts.request(n))
            if connect:
                actions.setdefault(0, []).append(hot.connect)
            for frame, calls in actions.items():  # one timer per frame: its calls in order
                loop.call_at(frame * 0.01, lambda calls=calls: [call() for call in calls])
            await m.run(rx.never(), demand="", frames=max(len(v) for v in block.values()) + 10)
            for label, ts in consumers.items():
                expect_events(ts, block[f"{label} gets"])
            if "upstream" in block:
                assert source.request_log == requests_of(block["upstream"])
            if subscribed_at is not None:
                assert source.subscribed_at == subscribed_at
        run_virtual(main())
    return run


def _behavior(value: str) -> Any:
    from reactivex.subject import BehaviorSubject

    return BehaviorSubject(value)


RUNNERS: dict[tuple[str, int], Callable[[Block], None]] = {
    ("ops.broadcast", 0): broadcast,
    ("ops.publish", 0): connectable(lambda: ops.publish()),
    ("ops.publish_value", 0): connectable(lambda: ops.publish_value("i")),
    ("ops.replay", 0): connectable(lambda: ops.replay(buffer_size=2)),
    ("ops.multicast", 0): connectable(lambda: ops.multicast(_behavior("i"))),
    ("ops.ref_count", 0): connectable(lambda: rx.pipe(ops.publish(), ops.ref_count()), connect=False,
                                      subscribed_at=[0, 6]),
    ("ops.share", 0): connectable(lambda: ops.share(), connect=False, subscribed_at=[0]),
}


@pytest.mark.parametrize("key", sorted(RUNNERS), ids=diagram_id)
def test_docstring_diagram(key: tuple[str, int]) -> None:
    RUNNERS[key](FOUND[key])
