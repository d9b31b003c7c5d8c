"""Gateway sink and worker source together in one process against a real Redis: requests go
through the stream and come back through the reply stream; the request stream stays bounded."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis

from rxpipe import operators as ops
from rxpipe.engines import CompletionRequest, SimulatedEngine
from rxpipe.errors import EngineUnavailableError
from rxpipe.redis import RedisGroupSource, RedisSettings, RedisSink
from rxpipe.redis._adapter import BACKLOG, backlog_reply, ensure_group
from rxpipe.runtime import Pipeline
from rxpipe.testing import TestPublisher, TestSubscriber

from .servers import RedisServer

pytestmark = pytest.mark.loops("asyncio")


# CPU-bound (about 8 s of CPU for the 10,000 round trips): 7 s alone, 80 s beside ten busy loops
# on two cores; the timeout only guards against a hang
@pytest.mark.timeout(300)
async def test_the_request_stream_stays_bounded_over_10000_requests(redis_server: RedisServer) -> None:
    total, backlog = 10_000, 500
    # max_backlog alone bounds admission here: the wait bound (max_queue_wait_s) follows the drain
    # rate measured, and below max_backlog / max_queue_wait_s (50/s: a loaded machine) it refuses
    # an admission granted before the rate dropped (queue_full), as it may
    settings = RedisSettings(url=redis_server.url, consumer="w1", max_backlog=backlog, block_ms=50,
                             refresh_interval_s=0.02, trim_interval_s=0.05, max_queue_wait_s=None)
    client = Redis.from_url(redis_server.url)
    edge: TestPublisher[CompletionRequest] = TestPublisher()
    sink = RedisSink(edge, settings)
    await sink.start("127.0.0.1", None)
    engine = SimulatedEngine(max_num_seqs=256, step_overhead_s=0.001, prefill_s_per_token=0.0,
                             decode_s_per_seq=0.0)
    worker = Pipeline(RedisGroupSource(settings, max_unacked=256), ops.execute(engine))
    loop = asyncio.get_running_loop()
    lengths: list[int] = []
    done = asyncio.Event()

    async def sample() -> None:
        while not done.is_set():
            lengths.append(int(await client.xlen(settings.stream)))
            await asyncio.sleep(0.05)

    sampler = loop.create_task(sample())
    try:
        async with worker.start():
            sink.subscribe(TestSubscriber())
            replies = []
            while len(replies) < total:
                if edge.total_requested <= len(replies):
                    await asyncio.sleep(0.002)  # no room under max_backlog: the edge would answer 429
                    continue
                request = CompletionRequest(prompt="hello", max_tokens=1, id=f"r{len(replies)}")
                request.reply = loop.create_future()
                request.arrival_s = loop.time()
                replies.append(request.reply)
                edge.emit(request)
            completions = await asyncio.wait_for(asyncio.gather(*replies), 60)
            results = await asyncio.gather(*(c.result for c in completions))
            assert [r.completion_tokens for r in results] == [1] * total
            assert {r.finish_reason for r in results} == {"length"}
            # the edge was asked for one admission at a time (demand is never taken back)
            assert set(edge.requests) == {1} and edge.total_requested in (total, total + 1)

            # every request answered: its ack follows, and the worker's next trim empties the
            # stream. Trims wait for its heartbeat and take three round trips: seconds apart on
            # a loaded machine (3.4 s seen), so no deadline here but the test's timeout
            while int(await client.xlen(settings.stream)) != 0:
                await asyncio.sleep(0.05)
    finally:
        done.set()
        await sampler
        await sink.stop()
        await client.aclose()
    # bounded by the backlog plus what was acknowledged within one trim interval, far below 10,000
    assert max(lengths) < 2 * backlog, max(lengths)
    assert sink.router is not None and len(sink.router) == 0


async def test_two_gateways_bursting_at_once_keep_the_backlog_bound(redis_server: RedisServer) -> None:
    settings = RedisSettings(url=redis_server.url, max_backlog=20, refresh_interval_s=0.05)
    client = Redis.from_url(redis_server.url)
    edges: list[TestPublisher[CompletionRequest]] = [TestPublisher(), TestPublisher()]
    sinks = [RedisSink(edge, settings) for edge in edges]
    loop = asyncio.get_running_loop()
    for sink in sinks:
        await sink.start("127.0.0.1", None)
    try:
        deadline = loop.time() + 5
        while not all(sink.gateways == 2 for sink in sinks):  # each saw the other register
            assert loop.time() < deadline
            await asyncio.sleep(0.02)
        for sink in sinks:
            sink.subscribe(TestSubscriber())
        sent = [0, 0]
        replies = []
        for _ in range(100):  # 30 clients at each gateway for half a second, ten backlog refreshes
            for k, edge in enumerate(edges):
                while sent[k] < 30 and edge.total_requested > sent[k]:
                    request = CompletionRequest(prompt="p", max_tokens=1, id=f"g{k}-{sent[k]}")
                    request.reply = loop.create_future()
                    replies.append(request.reply)
                    edge.emit(request)
                    sent[k] += 1
            await asyncio.sleep(0.005)
        assert sent == [10, 10]  # each admitted its share of the room: ceil(20 / 2)
        assert int(await client.xlen(settings.stream)) == 20
    finally:
        for sink in sinks:
            await sink.stop()
        await client.aclose()
    for reply in replies:  # the gateways stopped before any worker answered
        assert isinstance(reply.exception(), EngineUnavailableError)


async def test_requests_waiting_when_redis_loses_its_data_are_answered_503(redis_server: RedisServer) -> None:
    settings = RedisSettings(url=redis_server.url, refresh_interval_s=0.05)
    client = Redis.from_url(redis_server.url)
    edge: TestPublisher[CompletionRequest] = TestPublisher()
    sink = RedisSink(edge, settings)
    await sink.start("127.0.0.1", None)
    loop = asyncio.get_running_loop()
    try:
        sink.subscribe(TestSubscriber())
        request = CompletionRequest(prompt="p", max_tokens=1, id="lost")
        request.reply = loop.create_future()
        edge.emit(request)
        deadline = loop.time() + 5
        while int(await client.xlen(settings.stream)) != 1:
            assert loop.time() < deadline
            await asyncio.sleep(0.02)
        await client.flushall()  # a Redis restarted without persistence
        with pytest.raises(EngineUnavailableError, match="lost the request"):
            await asyncio.wait_for(request.reply, 5)
        assert sink.up and sink.router is not None and len(sink.router) == 0
    finally:
        await sink.stop()
        await client.aclose()


async def test_the_backlog_is_what_is_queued_not_the_lag_redis_7_0_keeps_for_deleted_entries(
        redis_server: RedisServer) -> None:
    settings = RedisSettings(url=redis_server.url, consumer="w1")
    client = Redis.from_url(redis_server.url)
    try:
        async def backlog(limit: int = 1001) -> int | None:
            return backlog_reply(await client.eval(BACKLOG, 1, settings.stream, settings.group, limit))

        assert await backlog() is None  # no stream yet
        await ensure_group(client, settings)
        ids = [await client.xadd(settings.stream, {b"r": b"x"}) for _ in range(5)]
        await client.xreadgroup(settings.group, "w1", {settings.stream: ">"}, count=2)
        await client.xdel(settings.stream, ids[2], ids[3])  # withdrawn while queued
        await client.xreadgroup(settings.group, "w1", {settings.stream: ">"}, count=10)  # reads past them
        assert await backlog() == 3  # 3 pending, nothing queued
        await client.xack(settings.stream, settings.group, *ids)
        await client.xadd(settings.stream, {b"r": b"y"})
        info = (await client.xinfo_groups(settings.stream))[0]
        assert (info["pending"], info["lag"]) == (0, 3)  # Redis 7.0: 2 of them are the deleted entries
        assert await backlog() == 1
        for _ in range(4):
            await client.xadd(settings.stream, {b"r": b"z"})
        assert await backlog() == 5 and await backlog(limit=3) == 3  # counted up to the limit
        await client.delete(settings.stream)
        await client.xadd(settings.stream, {b"r": b"w"})
        assert await backlog() is None  # a stream without the group
    finally:
        await client.aclose()
