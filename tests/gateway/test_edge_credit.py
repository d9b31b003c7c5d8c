"""Credit across the HTTP hop (DESIGN §8b): every answer of a real ``rxpipe run`` gateway, every
SSE stream's head, every 429 and ``GET /v1/credit`` carry the edge's exact credit."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from tests.gateway.server import GatewayProcess

#: two engine slots, two places in the queue; a request of 40 tokens runs ~2 s (50 ms steps)
SETTINGS = ("max_num_seqs=2", "queue_capacity=2", "batch_max_size=1", "step_overhead_s=0.05")
CREDIT_HEADERS = (
    "x-rxpipe-free-slots",
    "x-rxpipe-queue-room",
    "x-rxpipe-drain-per-s",
    "x-llm-d-flow-band-headroom-requests",
    "x-llm-d-flow-queue-duration-ms",
)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    process = GatewayProcess(tmp_path_factory.mktemp("credit"), *SETTINGS)
    yield process
    process.terminate()


def credit_of(headers: Any) -> dict[str, str]:
    return {name: headers[name] for name in (*CREDIT_HEADERS, "x-rxpipe-credit-seq")}


async def probe(session: aiohttp.ClientSession, url: str) -> tuple[dict[str, Any], dict[str, str]]:
    async with session.get(url + "/v1/credit") as response:
        assert response.status == 200
        return await response.json(), credit_of(response.headers)


async def until(session: aiohttp.ClientSession, url: str, **want: int) -> dict[str, Any]:
    """Probe until the credit has the wanted values (the state moved there)."""
    while True:
        body, _ = await probe(session, url)
        if all(body[k] == v for k, v in want.items()):
            return body
        await asyncio.sleep(0.01)  # polling a condition, not waiting "a bit"


def long_body(stream: bool = False) -> dict[str, Any]:
    return {"model": "sim", "prompt": "hold a slot", "max_tokens": 40, "stream": stream}


async def test_idle_credit_probe_json_and_headers_agree(gateway: GatewayProcess) -> None:
    async with aiohttp.ClientSession() as session:
        body, headers = await probe(session, gateway.url)
    seq = body.pop("seq")
    assert body == {"free_slots": 2, "queue_room": 2, "drain_per_s": 0.0, "queue_duration_ms": 0}
    assert isinstance(seq, int) and seq >= 1 and headers.pop("x-rxpipe-credit-seq") == str(seq)  # one snapshot
    assert headers == {
        "x-rxpipe-free-slots": "2",
        "x-rxpipe-queue-room": "2",
        "x-rxpipe-drain-per-s": "0",
        "x-llm-d-flow-band-headroom-requests": "2",
        "x-llm-d-flow-queue-duration-ms": "0",
    }


async def test_json_answers_and_operational_routes_carry_the_credit(gateway: GatewayProcess) -> None:
    async with aiohttp.ClientSession() as session:
        await until(session, gateway.url, free_slots=2, queue_room=2)
        async with session.post(
            gateway.url + "/v1/completions", json={"model": "sim", "prompt": "hi", "max_tokens": 2}
        ) as response:
            assert response.status == 200
            # answered once the request left the engine: both slots and both places are free again
            assert credit_of(response.headers)["x-rxpipe-free-slots"] == "2"
            assert credit_of(response.headers)["x-rxpipe-queue-room"] == "2"
        for path in ("/health", "/v1/models", "/readyz"):
            async with session.get(gateway.url + path) as response:
                assert response.status == 200
                assert credit_of(response.headers)["x-rxpipe-queue-room"] == "2"
                assert "x-llm-d-request-dropped-reason" not in response.headers


async def test_stream_head_full_queue_and_refusal_say_the_state_of_the_moment(gateway: GatewayProcess) -> None:
    url = gateway.url
    async with aiohttp.ClientSession() as session:
        await until(session, url, free_slots=2, queue_room=2)
        # one stream running: its head says one slot free, and the queue asked one more when it left
        async with session.post(url + "/v1/completions", json=long_body(stream=True)) as stream:
            assert stream.status == 200
            assert credit_of(stream.headers)["x-rxpipe-free-slots"] == "1"
            assert credit_of(stream.headers)["x-rxpipe-queue-room"] == "2"
            assert stream.headers["x-llm-d-flow-band-headroom-requests"] == "2"
            # fill the other slot, then both places of the queue
            held = [asyncio.create_task(session.post(url + "/v1/completions", json=long_body()))]
            await until(session, url, free_slots=0, queue_room=2)
            held += [asyncio.create_task(session.post(url + "/v1/completions", json=long_body())) for _ in range(2)]
            full = await until(session, url, free_slots=0, queue_room=0)
            assert full["queue_duration_ms"] > 0  # two waiting: the estimate is no longer zero
            async with session.post(url + "/v1/completions", json=long_body()) as refused:
                assert refused.status == 429
                assert refused.headers["x-llm-d-request-dropped-reason"] == "queue_full"
                assert credit_of(refused.headers)["x-rxpipe-free-slots"] == "0"
                assert credit_of(refused.headers)["x-rxpipe-queue-room"] == "0"
                assert refused.headers["x-llm-d-flow-band-headroom-requests"] == "0"
            async for _ in stream.content:
                pass
        for answer in await asyncio.gather(*held):
            assert answer.status == 200
            answer.release()
        await until(session, url, free_slots=2, queue_room=2)


async def test_an_unknown_route_carries_the_credit_and_no_dropped_reason(gateway: GatewayProcess) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.get(gateway.url + "/nope") as response:
            assert response.status == 404 and response.headers["x-rxpipe-queue-room"] == "2"
            assert "x-llm-d-request-dropped-reason" not in response.headers
