"""The docstring marble diagrams of the operators for LLM pipelines beyond RxPY (operators/_shaping.py,
_partitioned.py, _restart.py, _split.py, _prioritized.py, _merge_hub.py, _hubs.py; docs/llm-operators.md), each
played by its runner (the package docstring says how)."""

from __future__ import annotations

import asyncio
from typing import Any, Callable

import pytest

import rxpipe as rx
from rxpipe import UNBOUNDED, testing
from rxpipe import operators as ops
from rxpipe.testing import Marbles, assert_marbles, run_virtual

from .helpers import FOUND, Block, FrameTimeline, diagram_id, expect_events, kit, requests_of, schedule_requests


def map_async_partitioned(block: Block) -> None:
    async def fn(x: str) -> str:
        await asyncio.sleep(3.0 if x.lower() == "a" else 6.0)
        return x

    for label, ordered in (("ordered", True), ("unordered", False)):
        assert_marbles(ops.map_async_partitioned(fn, 3, str.lower, ordered=ordered), source=block["source"],
                       demand=block["demand"], expected=block[label], frame_s=1.0)


def kill_switch(block: Block) -> None:
    async def main() -> None:
        switch = ops.kill_switch()
        m = Marbles()
        source = m.cold(block["source"])
        shutdown_at = len(block["output"]) - 1  # the column of its completion
        asyncio.get_running_loop().call_at(shutdown_at * 0.01, switch.shutdown)
        (await m.run(source.pipe(switch), demand=block["demand"])).expect(block["output"])
        assert source.cancelled_at == shutdown_at and switch.running == 0
    run_virtual(main())


def restart_with_backoff(block: Block) -> None:
    async def main() -> None:
        m = Marbles()
        runs = [m.cold(block[label].strip()) for label in ("source", "second", "third")]
        order = iter(runs)
        result = await m.run(ops.restart_with_backoff(lambda: next(order), 0.04, 0.16, jitter=0.0),
                             demand=block["demand"], frames=len(block["output"]))
        result.expect(block["output"])
        starts = [len(block[label]) - len(block[label].lstrip()) for label in ("second", "third")]
        assert [run.subscribed_at for run in runs] == [[0], [starts[0]], [starts[1]]]
    run_virtual(main())


def split_when(block: Block) -> None:
    async def main() -> None:
        m = Marbles()
        source = m.cold(block["source"])
        subs: list[FrameTimeline] = []

        def attach(substream: Any) -> None:
            subs.append(ts := FrameTimeline())
            substream.subscribe(ts)
            ts.request(UNBOUNDED)

        result = await m.run(source.pipe(ops.split_when(str.isupper), ops.tap(attach)), demand="^*")
        assert [e.frame for e in result.timeline] == [e.frame for e in testing.parse_marbles(block["main"])]
        for ts, label in zip(subs, ("x", "y", "z"), strict=True):
            expect_events(ts, block[label])
    run_virtual(main())


def merge_prioritized(block: Block) -> None:
    import random

    class Scripted(random.Random):
        def __init__(self, draws: list[float]) -> None:
            super().__init__(0)
            self.script = iter(draws)

        def random(self) -> float:
            return next(self.script)

    async def main() -> None:
        m = Marbles()
        source, other = m.cold(block["source"]), m.cold(block["other"])
        op = ops.merge_prioritized(other, priorities=(3, 1), rng=Scripted([0.1, 0.9, 0.5, 0.8]))
        (await m.run(source.pipe(op), demand=block["demand"])).expect(block["output"])
    run_virtual(main())


def merge_hub(block: Block) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        m = Marbles()
        a, b = m.cold(block["a"]), m.cold(block["b"].strip())
        hub = ops.merge_hub(2)
        b_at = len(block["b"]) - len(block["b"].lstrip())
        loop.call_at(0.0, hub.attach, a)  # in frame 0 of the run
        loop.call_at(b_at * 0.01, hub.attach, b)
        loop.call_at(0.05, hub.drain_and_complete)  # after b attached: a producer attaching now is refused
        (await m.run(hub, demand=block["demand"])).expect(block["source"])
        assert a.subscribed_at == [0] and b.subscribed_at == [b_at] and hub.producers == 0
    run_virtual(main())


def hub_consumers(make: Callable[[], Any]) -> Callable[[Block], None]:
    """Play a hub's diagram: the upstream ``source``, consumers ``x`` and ``y`` attached in column
    0 with the demand of their lines, and what each gets (``x gets``, ``y gets``); ``upstream:``
    is the source's exact requests."""
    def run(block: Block) -> None:
        async def main() -> None:
            loop = asyncio.get_running_loop()
            m = Marbles()
            source = m.cold(block["source"])
            hub = source.pipe(make())
            x, y = FrameTimeline(), FrameTimeline()
            loop.call_at(0.0, hub.subscribe, x)  # in frame 0 of the run, before the requests
            loop.call_at(0.0, hub.subscribe, y)
            schedule_requests(loop, x, block["x"])
            schedule_requests(loop, y, block["y"])
            await m.run(rx.never(), demand="", frames=len(block["source"]) + 10)
            expect_events(x, block["x gets"])
            expect_events(y, block["y gets"])
            if "upstream" in block:
                assert source.request_log == requests_of(block["upstream"])
        run_virtual(main())
    return run


RUNNERS: dict[tuple[str, int], Callable[[Block], None]] = {
    ("ops.throttle", 0): kit(lambda: ops.throttle(100, 3, cost=int)),
    ("ops.conflate", 0): kit(lambda: ops.conflate(lambda a, b: a + b)),
    ("ops.keep_alive", 0): kit(lambda: ops.keep_alive(0.03, lambda: "k")),
    ("ops.map_async_partitioned", 0): map_async_partitioned,
    ("ops.kill_switch", 0): kill_switch,
    ("ops.restart_with_backoff", 0): restart_with_backoff,
    ("ops.split_when", 0): split_when,
    ("ops.merge_prioritized", 0): merge_prioritized,
    ("ops.merge_hub", 0): merge_hub,
    ("ops.broadcast_hub", 0): hub_consumers(lambda: ops.broadcast_hub(2)),
    ("ops.partition_hub", 0): hub_consumers(lambda: ops.partition_hub(lambda n, x: x % n, 8)),
}


@pytest.mark.parametrize("key", sorted(RUNNERS), ids=diagram_id)
def test_docstring_diagram(key: tuple[str, int]) -> None:
    RUNNERS[key](FOUND[key])
