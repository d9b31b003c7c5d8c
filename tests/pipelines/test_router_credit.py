"""``pipelines/llm_router.py`` in front of three real rxpipe gateways, one of them filled by another
client: the router reads the backends' advertised credit (DESIGN §8b), so new requests go to the
others, at most one request per trial reaches the full backend, and one it refuses with 429 is
answered by another backend."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from tests.gateway.server import GatewayProcess, answered, queue_room

ROOT = Path(__file__).resolve().parents[2]
ROUTER = ROOT / "pipelines" / "llm_router.py"
#: two slots and two places in the queue; a 60-token request runs ~1.2 s (20 ms steps)
BACKEND = ("max_num_seqs=2", "queue_capacity=2", "batch_max_size=1", "step_overhead_s=0.02")
BACKENDS = 3


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[list[GatewayProcess], GatewayProcess]]:
    tmp = tmp_path_factory.mktemp("router-credit")
    backends = [GatewayProcess(tmp, *BACKEND) for _ in range(BACKENDS)]
    router = GatewayProcess(
        tmp,
        f"backends={','.join(b.url for b in backends)}",
        "model=sim",
        "max_in_flight=4",
        "cache_max_entries=0",
        "queue_capacity=64",
        file=ROUTER,
    )
    yield backends, router
    router.terminate()
    for backend in backends:
        backend.terminate()


async def retried(session: aiohttp.ClientSession, url: str) -> int:
    """Requests the router's balance sent to another backend after a failure."""
    async with session.get(url + "/metrics") as response:
        text = await response.text()
    found = re.findall(r'^rxpipe_stage_dropped_total\{reason="retried",stage="balance"\} (\S+)$', text, re.M)
    return int(float(found[0])) if found else 0


async def stream_through(session: aiohttp.ClientSession, url: str, opened: asyncio.Event, tokens: int) -> int:
    body = {"model": "sim", "prompt": "route me", "max_tokens": tokens, "stream": True}
    async with session.post(url + "/v1/completions", json=body) as response:
        opened.set()
        async for _ in response.content:
            pass
        return response.status


@pytest.mark.timeout(120)
async def test_a_backend_filled_by_another_client_gets_at_most_one_request_per_trial(
    fleet: tuple[list[GatewayProcess], GatewayProcess],
) -> None:
    backends, router = fleet
    async with aiohttp.ClientSession() as session:
        # every backend answered the router once: it knows their credit
        warm = [asyncio.create_task(stream_through(session, router.url, asyncio.Event(), 2)) for _ in range(6)]
        assert await asyncio.gather(*warm) == [200] * 6
        for trial, full in enumerate(backends):
            for backend in backends:
                while await queue_room(session, backend.url) != 2:
                    await asyncio.sleep(0.01)  # polling the state: the last trial's work has left
            fillers = [
                asyncio.create_task(
                    session.post(full.url + "/v1/completions", json={"model": "sim", "prompt": "f", "max_tokens": 60})
                )
                for _ in range(4)
            ]
            while await queue_room(session, full.url) != 0:
                await asyncio.sleep(0.01)
            before = await answered(session, full.url)
            retried_before = await retried(session, router.url)
            # eight requests arriving one after another (each once the previous one's answer began)
            streams = []
            for _ in range(8):
                opened = asyncio.Event()
                streams.append(asyncio.create_task(stream_through(session, router.url, opened, 8)))
                await opened.wait()
            assert await asyncio.gather(*streams) == [200] * 8  # none lost: a 429'd one was answered elsewhere
            after = await answered(session, full.url)
            into_full = sum(after.values()) - sum(before.values())
            assert into_full <= 1, f"trial {trial}: {into_full} requests into the full backend"
            # what reached it was refused (429) and answered by another backend (the balance's retry)
            assert after.get("429", 0) - before.get("429", 0) == into_full
            assert await retried(session, router.url) - retried_before == into_full
            for filler in fillers:
                (await filler).release()
