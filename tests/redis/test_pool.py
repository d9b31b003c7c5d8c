"""A command that waits too long for a pooled connection: named as that, never "Redis unreachable"."""

from __future__ import annotations

import asyncio
import logging

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from rxpipe.redis import RedisSettings, RedisSink
from rxpipe.redis._adapter import TRANSIENT
from rxpipe.redis._connection import PoolTimeoutError, call, make_client
from rxpipe.testing import TestPublisher

from .servers import RedisServer

pytestmark = pytest.mark.loops("asyncio")


async def test_a_pool_timeout_is_a_retryable_error_that_says_what_happened(redis_server: RedisServer) -> None:
    settings = RedisSettings(url=redis_server.url, pool_size=1, pool_timeout_s=0.2)
    client = make_client(settings, connections=1)
    try:
        assert await call(client.ping)  # Redis is up
        busy = asyncio.ensure_future(call(client.blpop, ["nothing-comes"], 1))  # holds the one connection 1 s
        await asyncio.sleep(0.05)
        with pytest.raises(PoolTimeoutError) as info:
            await call(client.ping)
        assert str(info.value) == ("no pooled Redis connection came free within pool_timeout_s=0.2 s: all 1 were "
                                   "busy (Redis answers; raise pool_size or lower the load)")
        assert isinstance(info.value, RedisConnectionError) and isinstance(info.value, TRANSIENT)  # retried
        assert await busy is None
        assert await call(client.ping)
    finally:
        await client.aclose()


async def test_the_gateway_logs_a_pool_timeout_as_such(redis_server: RedisServer,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    settings = RedisSettings(url=redis_server.url, pool_size=1, pool_timeout_s=0.2)
    sink = RedisSink(TestPublisher(), settings)
    with caplog.at_level(logging.INFO, logger="rxpipe"):
        await sink.start("127.0.0.1", None)
        try:
            sink._down(PoolTimeoutError("no pooled Redis connection came free within pool_timeout_s=0.2 s: all 1 "
                                        "were busy (Redis answers; raise pool_size or lower the load)"))
            sink._up()
        finally:
            await sink.stop()
    lines = [m for m in (r.getMessage() for r in caplog.records) if "pool_timeout_s" in m or "go through" in m]
    assert lines == [f"{sink.kind} {sink.name}: no pooled Redis connection came free within pool_timeout_s=0.2 s: "
                     f"all 1 were busy (Redis answers; raise pool_size or lower the load); answering 503 until a "
                     f"command goes through",
                     f"{sink.kind} {sink.name}: commands to Redis go through again"]
    assert not any("unreachable" in r.getMessage() for r in caplog.records)
