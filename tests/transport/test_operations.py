"""What a user and an operator see across hosts, for each broker, in real processes
(``pipelines/llm_gateway.py --set broker_url=…`` and ``pipelines/llm_worker.py`` in front of a
stub OpenAI server): a backend's 4xx reaches the client as the backend meant it (the error
crosses the broker with its status and body), and a gateway names a worker serving another model."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tests.engines.openai_stub_server import StubServer
from tests.redis.test_pipelines_process import complete, session

from .conftest import Broker, Processes
from .helpers import gateway, worker

pytestmark = pytest.mark.loops("asyncio")


@pytest.mark.timeout(60)
async def test_a_backend_4xx_behind_a_worker_reaches_the_client_with_its_status_and_message(
        tmp_path: Path, broker: Broker, processes: Processes) -> None:
    stub = StubServer(tmp_path)
    try:
        stub.control(fail=2, fail_status=422, fail_message=f"prompt too long for {stub.url}/v1",
                     fail_code="context_length_exceeded")
        gw = gateway(processes, broker)
        worker(processes, broker, f"backend_url={stub.url}", "max_num_seqs=4", "model=sim", "consumer=w1")
        expected = {"error": {"message": "prompt too long for (address removed)", "type": "invalid_request_error",
                              "code": "context_length_exceeded", "param": None}}
        async with session() as http:
            status, _, body, _ = await complete(http, gw.url, "x", 4)
            assert (status, body) == (422, expected)
            # streamed: the status line waits for the first token, so the client gets the 422 too
            status, _, body, _ = await complete(http, gw.url, "x", 4, stream=True)
            assert (status, body) == (422, expected)
            assert (await complete(http, gw.url, "y", 2))[0] == 200
        assert stub.state()["requests"] == 3  # each 422 was answered, not run again
    finally:
        stub.stop()


@pytest.mark.timeout(60)
async def test_a_gateway_names_a_worker_serving_another_model(tmp_path: Path, broker: Broker,
                                                            processes: Processes) -> None:
    stub = StubServer(tmp_path)
    try:
        gw = gateway(processes, broker)  # serves "sim": clients asking for my-model get 404
        worker(processes, broker, f"backend_url={stub.url}", "model=my-model", "consumer=w9")
        deadline = time.monotonic() + 20
        needle = ("worker w9 serves model 'my-model' but this gateway serves 'sim': requests for 'my-model' get 404 "
                  "here; start the gateway with --set model=my-model")
        while needle not in gw.output:
            assert time.monotonic() < deadline, gw.output
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)  # more refreshes: said once
        assert gw.output.count("serves model 'my-model'") == 1
        assert gw.stop() == 0 and " lost (" not in gw.output  # its own disconnect at the end is no outage
    finally:
        stub.stop()
