"""The Kafka adapter against a real Tansu broker: an unreachable broker is a 503 at the edge, and
the head of a partition counts its deliveries across workers that die holding it."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from rxpipe.kafka import KafkaSettings
from rxpipe.kafka._adapter import TRANSIENT, KafkaGatewayBroker
from rxpipe.kafka._worker import KafkaWorkerBroker
from rxpipe.transport._interface import WriteOp
from tests.redis.servers import free_port
from tests.redis.test_pipelines_process import complete, session
from tests.transport.helpers import gateway, worker

from .conftest import Processes
from .servers import TansuServer

pytestmark = pytest.mark.loops("asyncio")


async def post(url: str) -> tuple[int, dict[str, str], dict[str, object]]:
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{url}/v1/completions", json={"model": "sim", "prompt": "x", "max_tokens": 2}) as r:
            return r.status, dict(r.headers), await r.json()


@pytest.mark.timeout(60)
async def test_no_broker_at_the_url_the_gateway_answers_503_unavailable(processes: Processes) -> None:
    gw = gateway(processes, f"kafka://127.0.0.1:{free_port()}")
    status, headers, body = await post(gw.url)
    assert status == 503 and body["error"]["code"] == "unavailable", body  # type: ignore[index]
    assert int(headers["Retry-After"]) >= 1
    assert "kafka_sink broker: Kafka unreachable" in gw.output


@pytest.mark.timeout(60)
async def test_the_broker_killed_under_load_the_gateway_answers_503_within_a_few_seconds(
        tansu: TansuServer, processes: Processes) -> None:
    gw = gateway(processes, tansu, "refresh_interval_s=0.1")
    worker(processes, tansu, "max_num_seqs=4", "step_overhead_s=0.005")
    async with session() as http:
        assert (await complete(http, gw.url, "before", 3))[0] == 200
    tansu.kill()
    killed = time.monotonic()
    while True:  # the backlog refresh (bounded by command_timeout_s, 5 s) finds it gone
        status, _, body = await post(gw.url)
        if status == 503:
            break
        assert time.monotonic() - killed < 10, (status, body)
        await asyncio.sleep(0.2)
    assert body["error"]["code"] == "unavailable"  # type: ignore[index]
    assert [await post(gw.url) for _ in range(3)][-1][0] == 503
    assert "kafka_sink broker: Kafka lost" in gw.output


@pytest.mark.timeout(60)
async def test_a_request_held_by_workers_that_die_counts_its_deliveries(tansu: TansuServer) -> None:
    settings = KafkaSettings(url=tansu.url, consumer="w", partitions=1, session_timeout_ms=3000,
                             heartbeat_interval_ms=300, max_poll_interval_ms=3000)
    gw = KafkaGatewayBroker(settings)
    gw.reply_to = "rxpipe.requests.replies.g1"
    await gw.open()
    try:
        assert (await gw.write([WriteOp("publish", (b'{"id":"r1"}',))]))[0] == (0, 0)
        seen = []
        for _ in range(3):  # a worker reads it and goes away without finishing it
            wk = KafkaWorkerBroker(settings)
            await wk.open()
            deadline = time.monotonic() + 20
            got = []
            while not got:
                assert time.monotonic() < deadline, "the request never came"
                got = await wk.fetch(4, 0.5)
            seen += [(d.key, d.payload, d.deliveries) for d in got]
            await wk.close()  # leaves the group: the next one gets the partition at once
        assert seen == [((0, 0), b'{"id":"r1"}', 1), ((0, 0), b'{"id":"r1"}', 2), ((0, 0), b'{"id":"r1"}', 3)]
        snapshot = await gw.snapshot("g1")
        assert snapshot.backlog == 1  # produced 1, committed 0
    finally:
        await gw.close()


def test_transient_errors_cover_an_unreachable_broker() -> None:
    import aiokafka.errors as errors

    assert all(issubclass(e, TRANSIENT) for e in (errors.KafkaConnectionError, errors.KafkaTimeoutError,
                                                   errors.NodeNotReadyError, asyncio.TimeoutError))
