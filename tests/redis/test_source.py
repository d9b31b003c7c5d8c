"""The worker-side group source against a real Redis: demand → XREADGROUP COUNT, claims, ack."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from redis.asyncio import Redis

from rxpipe.engines import CompletionRequest
from rxpipe.redis import RedisGroupSource, RedisSettings
from rxpipe.redis._codec import encode_request
from rxpipe.redis.sink import ensure_group
from rxpipe.testing import TestSubscriber

from .servers import RedisServer

# every test runs on asyncio and on uvloop (the plugin's default)


async def put(client: Redis, settings: RedisSettings, *ids: str) -> None:
    await ensure_group(client, settings)
    for rid in ids:
        await client.xadd(settings.stream, encode_request(CompletionRequest(prompt=rid, id=rid), "replies", 0.0))


async def pending_by_consumer(client: Redis, settings: RedisSettings) -> dict[str, int]:
    summary: Any = await client.xpending(settings.stream, settings.group)
    return {c["name"].decode(): int(c["pending"]) for c in summary["consumers"]}


async def eventually(check: Any, timeout_s: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


async def test_downstream_demand_of_3_never_has_more_than_3_pending(redis_server: RedisServer) -> None:
    settings = RedisSettings(url=redis_server.url, consumer="w1", block_ms=50)
    client = Redis.from_url(redis_server.url)
    await put(client, settings, *(f"r{i}" for i in range(10)))
    source = RedisGroupSource(settings)
    await source.start("127.0.0.1", None)
    try:
        ts: TestSubscriber[Any] = TestSubscriber()
        source.subscribe(ts)
        ts.request(3)
        await ts.await_count(3, timeout=5)
        await asyncio.sleep(0.3)  # six BLOCK rounds: nothing beyond the demand is read
        assert [r.id for r in ts.values] == ["r0", "r1", "r2"]
        assert await pending_by_consumer(client, settings) == {"w1": 3}
        info = (await client.xinfo_groups(settings.stream))[0]
        assert (info["pending"], info["lag"]) == (3, 7)

        ts.values[0].ack.ack()  # processed: XACK, and room for one more held entry
        ts.values[1].ack.ack()

        async def two_pending() -> bool:
            return await pending_by_consumer(client, settings) == {"w1": 1}

        await eventually(two_pending)
        ts.request(1)
        await ts.await_count(4, timeout=5)
        await asyncio.sleep(0.3)
        assert [r.id for r in ts.values] == ["r0", "r1", "r2", "r3"]
        assert await pending_by_consumer(client, settings) == {"w1": 2}
        ts.cancel()
    finally:
        await source.stop()
        await client.aclose()


async def test_max_unacked_caps_held_entries_below_demand(redis_server: RedisServer) -> None:
    settings = RedisSettings(url=redis_server.url, consumer="w1", block_ms=50)
    client = Redis.from_url(redis_server.url)
    await put(client, settings, *(f"r{i}" for i in range(6)))
    source = RedisGroupSource(settings, max_unacked=2)
    await source.start("127.0.0.1", None)
    try:
        ts: TestSubscriber[Any] = TestSubscriber()
        source.subscribe(ts)
        ts.request(5)
        await ts.await_count(2, timeout=5)
        await asyncio.sleep(0.3)
        assert len(ts.values) == 2 and await pending_by_consumer(client, settings) == {"w1": 2}
        ts.values[0].ack.ack()
        await ts.await_count(3, timeout=5)
        await asyncio.sleep(0.3)
        assert [r.id for r in ts.values] == ["r0", "r1", "r2"]
        ts.cancel()
    finally:
        await source.stop()
        await client.aclose()


async def test_a_dead_consumers_entries_are_claimed_after_the_visibility_timeout_a_live_ones_are_not(
        redis_server: RedisServer) -> None:
    def settings(consumer: str) -> RedisSettings:
        return RedisSettings(url=redis_server.url, consumer=consumer, visibility_timeout_s=0.6, block_ms=50)

    client = Redis.from_url(redis_server.url)
    await put(client, settings("x"), "r0", "r1")
    live, dead, taker = (RedisGroupSource(settings(name)) for name in ("live", "dead", "taker"))
    for source in (live, dead, taker):
        await source.start("127.0.0.1", None)
    try:
        ts_live: TestSubscriber[Any] = TestSubscriber(initial_request=1)
        live.subscribe(ts_live)
        await ts_live.await_count(1, timeout=5)
        ts_dead: TestSubscriber[Any] = TestSubscriber(initial_request=1)
        dead.subscribe(ts_dead)
        await ts_dead.await_count(1, timeout=5)
        await dead.stop()  # dies holding r1: no ack, no heartbeat
        started = asyncio.get_running_loop().time()
        # how long r1 has been idle (since its delivery or the dead one's last beat, whenever that
        # was: beats come late on a loaded machine): it is claimed once that reaches 0.6 s
        (entry,) = await client.xpending_range(settings("x").stream, settings("x").group, "-", "+", 10,
                                               consumername="dead")
        idle_s = (int(entry["time_since_delivered"]) + 1) / 1000  # XPENDING says whole milliseconds, floored
        ts_taker: TestSubscriber[Any] = TestSubscriber(initial_request=5)
        taker.subscribe(ts_taker)
        await ts_taker.await_count(1, timeout=5)
        took = asyncio.get_running_loop().time() - started
        await asyncio.sleep(1.2)  # two visibility timeouts: the live consumer keeps r0 fresh
        assert [r.id for r in ts_live.values] == ["r0"]
        assert [r.id for r in ts_taker.values] == ["r1"]
        assert took >= 0.6 - idle_s, (took, idle_s)  # never before the visibility timeout
        assert took <= 3.0
        assert await pending_by_consumer(client, settings("x")) == {"live": 1, "taker": 1}
        assert taker.claimed == 1
        ts_live.cancel()
        ts_taker.cancel()
    finally:
        for source in (live, taker):
            await source.stop()
        await client.aclose()


async def test_a_worker_restarted_under_its_name_reads_its_own_pending_entries_first(
        redis_server: RedisServer) -> None:
    """What a worker read and never acknowledged is its own pending entries list; under the same
    name again it reads that first (XREADGROUP ... 0), at once, not after visibility_timeout_s
    (30 s here) and not after new entries."""
    def settings(consumer: str) -> RedisSettings:
        return RedisSettings(url=redis_server.url, consumer=consumer, visibility_timeout_s=30, block_ms=50)

    client = Redis.from_url(redis_server.url)
    await put(client, settings("w1"), "r0", "r1")
    first = RedisGroupSource(settings("w1"))
    await first.start("127.0.0.1", None)
    try:
        ts_first: TestSubscriber[Any] = TestSubscriber(initial_request=2)
        first.subscribe(ts_first)
        await ts_first.await_count(2, timeout=5)
    finally:
        await first.stop()  # stops holding r0 and r1: no ack
    await put(client, settings("w1"), "r2")
    again = RedisGroupSource(settings("w1"))
    await again.start("127.0.0.1", None)
    try:
        ts: TestSubscriber[Any] = TestSubscriber(initial_request=1)
        again.subscribe(ts)
        await ts.await_count(1, timeout=5)
        ts.request(2)
        await ts.await_count(3, timeout=5)
        assert [r.id for r in ts.values] == ["r0", "r1", "r2"]
        assert again.redis.recovered == 2 and again.claimed == 0
        assert await pending_by_consumer(client, settings("w1")) == {"w1": 3}
        details = await client.xpending_range(settings("w1").stream, settings("w1").group, "-", "+", 10)
        assert [int(d["times_delivered"]) for d in details] == [2, 2, 1]
        ts.cancel()
    finally:
        await again.stop()
        await client.aclose()


async def test_an_entry_delivered_more_than_max_deliveries_times_is_answered_with_an_error_not_run(
        redis_server: RedisServer) -> None:
    def settings(consumer: str) -> RedisSettings:
        return RedisSettings(url=redis_server.url, consumer=consumer, visibility_timeout_s=0.3, block_ms=50,
                             max_deliveries=1)

    client = Redis.from_url(redis_server.url)
    await client.xadd("replies", {b"hello": b"gateway"})  # the gateway's reply stream exists
    await put(client, settings("x"), "poison")
    dead, taker = RedisGroupSource(settings("dead")), RedisGroupSource(settings("taker"))
    for source in (dead, taker):
        await source.start("127.0.0.1", None)
    try:
        ts_dead: TestSubscriber[Any] = TestSubscriber(initial_request=1)
        dead.subscribe(ts_dead)
        await ts_dead.await_count(1, timeout=5)
        await dead.stop()  # delivery 1 took its worker down
        ts_taker: TestSubscriber[Any] = TestSubscriber(initial_request=5)
        taker.subscribe(ts_taker)

        async def answered() -> bool:
            return int(await client.xlen("replies")) == 2

        await eventually(answered)
        (_, fields), = (await client.xrange("replies"))[1:]
        assert orjson.loads(fields[b"m"]) == {"id": "poison", "k": "error", "u": False,
                                              "e": "the request was abandoned after 2 deliveries to workers"}

        async def acknowledged() -> bool:
            return await pending_by_consumer(client, settings("x")) == {}

        await eventually(acknowledged)
        assert ts_taker.values == [] and taker.counters.dropped == {"max_deliveries": 1}
        ts_taker.cancel()
    finally:
        await taker.stop()
        await client.aclose()
