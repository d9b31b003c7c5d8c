"""The live view on the gateway's port, against a real saturated engine (real time, real sockets):
where the pressure builds, the bottleneck, the event stream, the page's self-containment."""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
from prometheus_client import REGISTRY

from rxpipe import operators as ops
from rxpipe.engines import SimulatedEngine
from rxpipe.gateway import Gateway, GatewayConfig, edge_queue
from rxpipe.runtime import Pipeline
from rxpipe.view import MAX_STREAMS

from .test_view import STAGE_KEYS, assert_ratios_sum_to_1000, by_name


def make_pipeline() -> Pipeline:
    engine = SimulatedEngine(max_num_seqs=4, step_overhead_s=0.005, decode_s_per_seq=0.0, prefill_s_per_token=0.0)
    return Pipeline(Gateway(GatewayConfig(), name="gateway"), edge_queue(8, name="queue"),
                    ops.batch(2, max_delay_s=0.002, name="batch"), ops.execute(engine, name="executor"),
                    name="saturated", drain_timeout_s=5.0)


@contextlib.asynccontextmanager
async def serving(**session: Any) -> AsyncIterator[tuple[Pipeline, str, aiohttp.ClientSession]]:
    """:func:`make_pipeline` served on a free port: the pipeline, its URL and a client session."""
    pipeline = make_pipeline()
    async with pipeline.start(port=0) as running, aiohttp.ClientSession(**session) as http:
        assert running.url is not None
        yield pipeline, running.url, http


class Load:
    """``clients`` closed-loop clients posting completions (``max_tokens`` tokens) until stopped; a
    429 is retried after 5 ms. ``refused``: 429s seen."""

    def __init__(self, url: str, clients: int, max_tokens: int) -> None:
        self.url = url
        self.stopped = False
        self.refused = 0
        self.body = {"prompt": "hi", "max_tokens": max_tokens}
        self.session = aiohttp.ClientSession()
        self.tasks = [asyncio.create_task(self._client()) for _ in range(clients)]

    async def _client(self) -> None:
        while not self.stopped:
            async with self.session.post(self.url + "/v1/completions", json=self.body) as response:
                await response.read()
                if response.status == 429:
                    self.refused += 1
                    await asyncio.sleep(0.005)

    async def stop(self) -> None:
        self.stopped = True
        await asyncio.gather(*self.tasks)

    async def close(self) -> None:
        self.stopped = True
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.session.close()


async def snapshot(http: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    async with http.get(url + "/pipeline.json") as response:
        assert response.status == 200 and response.headers["Content-Type"] == "application/json"
        body: dict[str, Any] = orjson.loads(await response.read())
        return body


async def until(http: aiohttp.ClientSession, url: str, condition: Any, within_s: float) -> tuple[dict[str, Any], float]:
    """Poll the view every 0.1 s until ``condition(snapshot)``; the snapshot and the seconds it took.
    Every snapshot seen keeps the 1000 ms/s sum."""
    started = time.monotonic()
    while True:
        seen = await snapshot(http, url)
        assert_ratios_sum_to_1000(seen)
        if condition(seen):
            return seen, time.monotonic() - started
        assert time.monotonic() - started < within_s, seen
        await asyncio.sleep(0.1)


def saturated(s: dict[str, Any]) -> bool:
    stages = by_name(s)
    return (s["bottleneck"] == "executor" and stages["queue"]["backpressured_ms_per_s"] >= 500
            and s["engines"][0]["free_slots"] == 0 and stages["executor"]["busy_ms_per_s"] >= 900)


async def test_a_saturated_engine_is_the_bottleneck_within_2_s_and_nothing_is_once_the_load_stops() -> None:
    async with serving() as (_, url, http):
        idle = await snapshot(http, url)
        assert idle["bottleneck"] is None and [s["name"] for s in idle["stages"]] == ["gateway", "queue", "batch",
                                                                                      "executor"]
        assert idle["engines"] == [{"name": "sim", "running": 0, "waiting": 0, "free_slots": 4}]
        # demand on every edge: the queue asks the edge for its capacity, the batcher for two
        # batches of look-ahead, the executor for its 4 free slots (2 batches), the sink for 256
        assert [(s["name"], s["demand"], s["requested"], s["held"]) for s in idle["stages"]] == [
            ("gateway", 8, 0, 0), ("queue", 4, 8, 0), ("batch", 2, 4, 0), ("executor", 256, 2, 0)]
        load = Load(url, clients=24, max_tokens=40)
        try:
            started = time.monotonic()
            while not load.refused:  # saturated: the queue is full and the edge refuses
                assert time.monotonic() - started < 20
                await asyncio.sleep(0.01)
            seen, _ = await until(http, url, saturated, within_s=2.0)
            stages = by_name(seen)
            assert stages["gateway"]["backpressured_ms_per_s"] >= 500  # requests refused for lack of demand
            assert stages["queue"]["demand"] == 0 and stages["queue"]["held"] >= 6
            assert seen["engines"][0]["running"] == 4 and stages["executor"]["out_per_s"] > 0
            await load.stop()
            await until(http, url, lambda s: s["bottleneck"] is None, within_s=3.0)
        finally:
            await load.close()
        assert REGISTRY.get_sample_value("rxpipe_http_requests_total", {"route": "/pipeline.json", "code": "200"})


async def test_events_stream_one_snapshot_a_second_until_the_edge_drains() -> None:
    async with serving() as (pipeline, url, http):
        async with http.get(url + "/pipeline/events") as response:
            assert response.status == 200 and response.headers["Content-Type"] == "text/event-stream"
            assert response.headers["x-request-id"]
            times, events = [], []
            async for line in response.content:
                if line.startswith(b"data: "):
                    events.append(orjson.loads(line[6:]))
                    times.append(time.monotonic())
                    if len(events) == 3:
                        break
        assert all(list(e) == ["at", "stages", "bottleneck", "engines", "tenants"] for e in events)
        assert all(list(s) == STAGE_KEYS for e in events for s in e["stages"])
        gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
        assert all(0.9 <= gap <= 3.0 for gap in gaps), gaps
        assert 0.9 <= events[2]["at"] - events[1]["at"] <= 3.0
        async with http.get(url + "/pipeline/events") as response:
            stream = asyncio.create_task(response.read())
            await asyncio.sleep(0.2)
            gateway = pipeline.services[0]
            gateway.draining = True  # what drain() sets first: the stream ends within one interval
            body = await asyncio.wait_for(stream, 3.0)
            assert body.startswith(b"data: {") and body.endswith(b"\n\n")
            gateway.draining = False


async def test_at_most_max_streams_event_streams_then_503() -> None:
    async with serving(connector=aiohttp.TCPConnector(limit=0)) as (_, url, http):
        streams = [await http.get(url + "/pipeline/events") for _ in range(MAX_STREAMS)]
        try:
            assert [r.status for r in streams] == [200] * MAX_STREAMS
            async with http.get(url + "/pipeline/events") as refused:
                assert refused.status == 503 and refused.headers["Retry-After"] == "5"
                assert (await refused.json())["error"]["code"] == "too_many_streams"
        finally:
            for r in streams:
                r.close()
        await asyncio.sleep(0.2)
        async with http.get(url + "/pipeline/events") as again:  # the closed ones freed their places
            assert again.status == 200


async def test_the_page_is_self_contained_and_names_every_stage() -> None:
    async with serving() as (_, url, http):
        async with http.get(url + "/pipeline") as response:
            assert response.status == 200 and response.headers["Content-Type"] == "text/html; charset=utf-8"
            page = await response.text()
        for name in ("gateway", "queue", "batch", "executor"):
            assert f'data-stage="{name}"' in page
        # nothing fetched from elsewhere: no src/href attribute, no URL but the SVG namespace
        assert not re.search(r"\b(src|href)\s*=", page)
        assert set(re.findall(r"https?://[^\s\"'<>]+", page)) == {"http://www.w3.org/2000/svg"}
        assert 'new EventSource("pipeline/events")' in page
        async with http.head(url + "/pipeline.json") as response:
            assert response.status == 200
        async with http.post(url + "/pipeline.json") as response:
            assert response.status == 405 and response.headers["Allow"] == "GET,HEAD"
        async with http.post(url + "/pipeline/events") as response:
            assert response.status == 405 and response.headers["Allow"] == "GET"
