"""PipelineView: snapshots as DESIGN §7 spells them, the bottleneck by Flink's rule, the size bound."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

import rxpipe as rx
from rxpipe import operators as ops
from rxpipe.runtime import Pipeline
from rxpipe.testing import TestPublisher
from rxpipe.view import PipelineView, bottleneck

STAGE_KEYS = ["name", "kind", "upstream", "busy_ms_per_s", "backpressured_ms_per_s", "idle_ms_per_s", "demand",
              "requested", "held", "in_per_s", "out_per_s"]


def by_name(snapshot: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in snapshot["stages"]}


def assert_ratios_sum_to_1000(snapshot: dict[str, Any]) -> None:
    for s in snapshot["stages"]:
        assert s["busy_ms_per_s"] + s["backpressured_ms_per_s"] + s["idle_ms_per_s"] == 1000, s
        assert min(s["busy_ms_per_s"], s["backpressured_ms_per_s"], s["idle_ms_per_s"]) >= 0, s


def slow_pipeline(delay_s: float) -> Pipeline:
    async def slow(x: int) -> int:
        await asyncio.sleep(delay_s)
        return x

    return Pipeline(rx.range(0, 10_000), ops.buffer(8, name="queue"),
                    ops.map_async(slow, concurrency=2, name="slow"), ops.map(lambda x: x + 1, name="after"),
                    name="slow_demo")


@pytest.mark.virtual
async def test_a_deliberately_slow_map_async_stage_is_named_the_bottleneck(loop: asyncio.AbstractEventLoop) -> None:
    pipeline = slow_pipeline(0.05)
    view = PipelineView(pipeline, wall=lambda: 1_700_000_000.0)
    async with pipeline.start() as running:
        await asyncio.sleep(0.5)
        view.tick()
        await asyncio.sleep(1.0)
        snapshot = view.snapshot()  # over [0.5, 1.5]
        assert snapshot["bottleneck"] == "slow"
        stages = by_name(snapshot)
        assert [s["name"] for s in snapshot["stages"]] == ["range_0", "queue", "slow", "after"]
        assert stages["queue"]["backpressured_ms_per_s"] == 1000
        assert stages["slow"]["busy_ms_per_s"] == 1000
        assert stages["queue"]["held"] == 8 and stages["queue"]["demand"] == 0
        # 2 calls of 50 ms at a time: 40 items/s through the slow stage
        assert stages["slow"]["out_per_s"] == 40.0 and stages["after"]["out_per_s"] == 0.0  # fused: not tracked
        assert snapshot["at"] == 1_700_000_000.0 and snapshot["engines"] == [] and snapshot["tenants"] == []
        assert_ratios_sum_to_1000(snapshot)
        for s in snapshot["stages"]:
            assert list(s) == STAGE_KEYS
        assert list(snapshot) == ["at", "stages", "bottleneck", "engines", "tenants"]
        assert not running.done


@pytest.mark.virtual
async def test_the_window_is_from_the_newest_reading_at_least_a_second_old(loop: asyncio.AbstractEventLoop) -> None:
    async def slow(x: int) -> int:
        await asyncio.sleep(0.1)
        return x

    pub = rx.from_async_iterable(_paced())  # one item at 0.0, one at 2.0, then nothing till 10 s
    pipeline = Pipeline(pub, ops.map_async(slow, concurrency=1, name="slow"), name="paced")
    view = PipelineView(pipeline)
    async with pipeline.start():
        await asyncio.sleep(0.0)
        view.tick()  # t=0
        await asyncio.sleep(1.5)
        view.tick()  # t=1.5
        await asyncio.sleep(0.55)
        # t=2.05: base t=0 (the one at 1.5 is younger than a second): 0.1 s + 0.05 s busy in 2.05 s
        assert by_name(view.snapshot())["slow"]["busy_ms_per_s"] == 73
        await asyncio.sleep(0.6)
        # t=2.65: base t=1.5: the 0.1 s call from 2.0 to 2.1 in 1.15 s
        assert by_name(view.snapshot())["slow"]["busy_ms_per_s"] == 87
        await asyncio.sleep(5.0)
        # t=7.65: base t=2.65, the last snapshot (nothing recorded in between): all idle
        snapshot = view.snapshot()
        assert by_name(snapshot)["slow"]["busy_ms_per_s"] == 0
        assert_ratios_sum_to_1000(snapshot)


async def _paced() -> Any:
    yield 1
    await asyncio.sleep(2.0)
    yield 2
    await asyncio.sleep(8.0)


def test_bottleneck_follows_flinks_rule() -> None:
    def stage(name: str, ups: list[str], busy: int, bp: int) -> dict[str, Any]:
        return {"name": name, "upstream": ups, "busy_ms_per_s": busy, "backpressured_ms_per_s": bp,
                "idle_ms_per_s": 1000 - busy - bp}

    # nothing backpressured: no bottleneck, however busy a stage is
    assert bottleneck([stage("a", [], 0, 0), stage("b", ["a"], 1000, 0)]) is None
    # the busy stage downstream of the backpressured ones, through a stage that is neither
    chain = [stage("src", [], 0, 900), stage("q", ["src"], 0, 1000), stage("mid", ["q"], 0, 0),
             stage("exec", ["mid"], 990, 0), stage("sink", ["exec"], 50, 0)]
    assert bottleneck(chain) == "exec"
    # Flink's "OK" level (up to 100 ms/s backpressured) does not count
    assert bottleneck([stage("q", [], 0, 100), stage("exec", ["q"], 1000, 0)]) is None
    assert bottleneck([stage("q", [], 0, 101), stage("exec", ["q"], 1000, 0)]) == "exec"
    # a busy stage upstream of the pressure is not it; nor is one too idle to be
    assert bottleneck([stage("hot", [], 1000, 0), stage("q", ["hot"], 0, 800), stage("x", ["q"], 99, 0)]) is None
    # fan-out: the busiest of the branches behind the pressure
    fan = [stage("q", [], 0, 700), stage("b0", ["q"], 400, 0), stage("b1", ["q"], 950, 0),
           stage("out", ["b0", "b1"], 0, 0)]
    assert bottleneck(fan) == "b1"
    # a backpressured stage is never the bottleneck itself
    assert bottleneck([stage("q", [], 0, 600), stage("e", ["q"], 500, 400)]) is None


@pytest.mark.virtual
async def test_a_snapshot_of_a_20_stage_pipeline_is_at_most_50_kb(loop: asyncio.AbstractEventLoop) -> None:
    operators: list[Any] = []
    for k in range(19):
        operators.append(ops.buffer(16, name=f"buffer_stage_with_a_long_name_{k:02}") if k % 2
                         else ops.map(lambda x: x, name=f"map_stage_with_a_long_name_{k:02}"))
    pipeline = Pipeline(rx.interval(0.001), *operators, name="twenty")
    view = PipelineView(pipeline)
    async with pipeline.start():
        view.tick()
        await asyncio.sleep(1.2)
        body = orjson.dumps(view.snapshot())
    assert len(orjson.loads(body)["stages"]) == 20
    assert len(body) <= 50_000
    assert len(body) < 6_000  # what it is: ~260 bytes a stage


@pytest.mark.virtual
async def test_tenants_show_their_virtual_token_counters_and_queued_items(loop: asyncio.AbstractEventLoop) -> None:
    gate = asyncio.Event()  # never set: the call behind the queue holds its slot, demand stops

    async def hold(item: tuple[str, int]) -> tuple[str, int]:
        await gate.wait()
        return item

    source = TestPublisher[tuple[str, int]]()
    pipeline = Pipeline(source, ops.fair_queue(16, tenant=lambda item: item[0], weight={"a": 1, "b": 1},
                                               cost=lambda item: 3 if item[0] == "a" else 1, name="fair"),
                        ops.buffer(1, name="slot"), ops.map_async(hold, concurrency=1, name="hold"), name="tenants")
    view = PipelineView(pipeline)
    async with pipeline.start():
        await asyncio.sleep(0)
        for item in [("a", 1), ("a", 2), ("b", 1), ("b", 2), ("b", 3), ("b", 4), ("b", 5), ("b", 6)]:
            source.emit(item)
        await asyncio.sleep(1.0)
        snapshot = view.snapshot()
    # a1 went to the call, a2 to the buffer (a: 3 + 3); b arrived into an idle band and was lifted
    # to the counter of the last flow that left it (a's 6), then waited: six b items queued
    assert snapshot["tenants"] == [{"name": "a", "vtc": 6.0, "queued": 0}, {"name": "b", "vtc": 6.0, "queued": 6}]
    stages = by_name(snapshot)
    assert (stages["fair"]["held"], stages["fair"]["demand"], stages["fair"]["backpressured_ms_per_s"]) == (6, 0, 1000)
    assert (stages["slot"]["held"], stages["slot"]["demand"]) == (1, 0)
    assert (stages["hold"]["held"], stages["hold"]["busy_ms_per_s"]) == (1, 1000)
    assert snapshot["bottleneck"] == "hold"


def test_engines_are_listed_once_each_with_a_balance_s_replicas() -> None:
    from rxpipe.loader import build_pipeline, load_module

    path = "pipelines/llm_router.py"
    module, name = load_module(path)
    pipeline = build_pipeline(module, name, {"backends": "http://127.0.0.1:9,http://127.0.0.1:10", "model": "m",
                                             "max_in_flight": 3}, path=path)
    snapshot = PipelineView(pipeline, clock=lambda: 0.0).snapshot()
    assert snapshot["engines"] == [{"name": "backend0", "running": 0, "waiting": 0, "free_slots": 3},
                                   {"name": "backend1", "running": 0, "waiting": 0, "free_slots": 3}]
    assert [s["name"] for s in snapshot["stages"]] == ["gateway", "queue", "cache", "balance", "balance[0]",
                                                       "executor_backend0", "balance[1]", "executor_backend1"]
    assert snapshot["bottleneck"] is None
    assert_ratios_sum_to_1000(snapshot)  # before any run: all idle
