"""The two pipelines as users run them: ``rxpipe run pipelines/llm_gateway_redis.py`` and
``rxpipe run pipelines/llm_worker.py`` in real processes, a real ``redis-server``, real HTTP."""

from __future__ import annotations

import asyncio
import re
import time
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from redis.asyncio import Redis

from tests.engines.openai_stub_server import StubServer

from .conftest import Processes
from .servers import RedisServer, free_port

pytestmark = pytest.mark.loops("asyncio")

STREAM, GROUP = "rxpipe:requests", "workers"


def session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                 timeout=aiohttp.ClientTimeout(total=60))


async def complete(http: aiohttp.ClientSession, url: str, prompt: str, max_tokens: int,
                   stream: bool = False, **fields: Any) -> tuple[int, dict[str, str], Any, float]:
    """POST /v1/completions (``fields``: more of its body, e.g. ``temperature=0``) → (status,
    headers, JSON body or the SSE events' payloads, done time)."""
    body = {"model": "sim", "prompt": prompt, "max_tokens": max_tokens, "stream": stream, **fields}
    async with http.post(f"{url}/v1/completions", json=body) as r:
        raw = await r.read()
        done = time.monotonic()
        if r.status == 200 and stream:
            events = [e[len(b"data: "):] for e in raw.split(b"\n\n") if e]
            return r.status, dict(r.headers), events, done
        return r.status, dict(r.headers), orjson.loads(raw), done


def streamed_text(events: list[bytes]) -> tuple[str, str | None]:
    """The concatenated text of an SSE completion and its finish reason (asserts [DONE] ends it)."""
    assert events[-1] == b"[DONE]", events[-3:]
    chunks = [orjson.loads(e) for e in events[:-1]]
    assert all("error" not in c for c in chunks), chunks
    return "".join(c["choices"][0]["text"] for c in chunks), chunks[-1]["choices"][0]["finish_reason"]


def gateway(processes: Processes, redis_server: RedisServer, *settings: str) -> Any:
    return processes.start("llm_gateway_redis.py", f"redis_url={redis_server.url}", *settings, port=free_port())


def worker(processes: Processes, redis_server: RedisServer, *settings: str, wait: bool = True,
           metrics_port: int | None = None) -> Any:
    return processes.start("llm_worker.py", f"redis_url={redis_server.url}", *settings, wait=wait,
                           metrics_port=metrics_port)


def items_read(metrics_port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as response:
        text = response.read().decode()
    match = re.search(r'^rxpipe_stage_items_total\{direction="in",stage="redis_source"\} ([0-9.e+]+)$', text, re.M)
    assert match, "the worker's source stage is not in its /metrics"
    return int(float(match.group(1)))


async def group_info(client: Redis) -> tuple[int, int]:
    """(pending, lag) of the workers' group."""
    info = (await client.xinfo_groups(STREAM))[0]
    return int(info["pending"]), int(info["lag"])


@pytest.mark.timeout(90)
async def test_backlog_bound_is_exact_and_two_workers_finish_every_admitted_request(
        redis_server: RedisServer, processes: Processes) -> None:
    gw = gateway(processes, redis_server, "max_backlog=50")
    client = Redis.from_url(redis_server.url)
    try:
        async with session() as http:
            tasks = [asyncio.ensure_future(complete(http, gw.url, f"request {i}", 16)) for i in range(60)]
            deadline = time.monotonic() + 20
            while sum(t.done() for t in tasks) < 10:
                assert time.monotonic() < deadline, "the 10 refusals did not come"
                await asyncio.sleep(0.05)
            await asyncio.sleep(1.0)  # four backlog refreshes later nothing else was answered or admitted
            refused = [t.result() for t in tasks if t.done()]
            assert len(refused) == 10
            for status, headers, body, _ in refused:
                assert status == 429 and body["error"]["code"] == "queue_full"
                assert int(headers["Retry-After"]) >= 1 and int(headers["retry-after-ms"]) >= 1000
            assert await group_info(client) == (0, 50)  # exactly 50 on the stream, none read yet

            ports = free_port(), free_port()
            workers = [worker(processes, redis_server, "max_num_seqs=4", "step_overhead_s=0.02", wait=False,
                              metrics_port=port) for port in ports]
            for w in workers:
                w.wait_ready()
            admitted = await asyncio.wait_for(asyncio.gather(*(t for t in tasks if not t.done())), 60)
            async with http.post(f"{gw.url}/v1/chat/completions", json={  # chat, streamed, across Redis
                    "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "stream": True,
                    "stream_options": {"include_usage": True}}) as r:
                assert r.status == 200
                chat = [orjson.loads(e[len(b"data: "):]) for e in (await r.read()).split(b"\n\n")[:-2]]
        assert [status for status, *_ in admitted] == [200] * 50
        assert {body["usage"]["completion_tokens"] for _, _, body, _ in admitted} == {16}
        assert chat[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        assert len("".join(c["choices"][0]["delta"]["content"] for c in chat[1:4]).split()) == 3
        assert chat[4]["choices"][0]["finish_reason"] == "length"
        assert chat[5]["usage"] == {"prompt_tokens": 1, "completion_tokens": 3, "total_tokens": 4}
        reads = [items_read(port) for port in ports]
        assert sum(reads) == 51 and min(reads) > 0, reads  # both workers got work
        assert await group_info(client) == (0, 0)
    finally:
        await client.aclose()


@pytest.mark.timeout(90)
async def test_seed_cycle_backend_503_pauses_the_worker_the_backlog_fills_429_until_the_pause_ends(
        tmp_path: Path, redis_server: RedisServer, processes: Processes) -> None:
    stub = StubServer(tmp_path)
    try:
        stub.control(throttle=1, throttle_status=503, retry_after="3")
        gw = gateway(processes, redis_server, "max_backlog=5")
        worker(processes, redis_server, f"backend_url={stub.url}", "max_num_seqs=4", "consumer=w1")
        client = Redis.from_url(redis_server.url)
        try:
            async with session() as http:
                first = asyncio.ensure_future(complete(http, gw.url, "first", 4))
                deadline = time.monotonic() + 20
                while stub.state()["statuses"].get("503") != 1:
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.05)
                throttled_at = stub.state()["arrivals"][0]["t"]  # time.monotonic(), system-wide
                while not orjson.loads(await client.hget(f"{STREAM}:workers", "w1") or b"{}").get("pause_until"):
                    assert time.monotonic() < deadline, "the worker did not publish its pause"
                    await asyncio.sleep(0.05)
                await asyncio.sleep(0.5)  # two backlog refreshes: the gateway knows the pause
                rest = [asyncio.ensure_future(complete(http, gw.url, f"next {i}", 4)) for i in range(7)]
                while sum(t.done() for t in rest) < 3:
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.02)
                assert await group_info(client) == (1, 4)  # the paused worker read nothing more
                refused = [t.result() for t in rest if t.done()]
                assert len(refused) == 3
                for status, headers, body, done in refused:
                    assert status == 429 and body["error"]["code"] == "queue_full"
                    remaining = throttled_at + 3.0 - done
                    assert remaining > 0.5  # answered during the pause
                    assert int(headers["Retry-After"]) >= remaining
                    assert int(headers["retry-after-ms"]) >= remaining * 1000
                admitted = await asyncio.wait_for(asyncio.gather(first, *(t for t in rest if not t.done())), 60)
            assert [status for status, *_ in admitted] == [200] * 5
            assert {body["choices"][0]["text"] for _, _, body, _ in admitted} == {" t0 t1 t2 t3"}
            assert admitted[0][3] >= throttled_at + 3.0  # the first one ran again only after the pause
            assert await group_info(client) == (0, 0)
        finally:
            await client.aclose()
    finally:
        stub.stop()


@pytest.mark.timeout(90)
async def test_tool_calls_cross_the_broker_one_for_one_and_a_worker_refuses_what_its_engine_cannot(
        tmp_path: Path, redis_server: RedisServer, processes: Processes) -> None:
    from tests.engines import openai_stub_answers as answers

    tools = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"type": "string"}}}}}]
    messages = [{"role": "user", "content": "call f"}]
    plan = answers.plan({"messages": messages, "tools": tools}, True, [])
    assert plan is not None
    stub = StubServer(tmp_path)
    try:
        gw = gateway(processes, redis_server)
        worker(processes, redis_server, f"backend_url={stub.url}", "max_num_seqs=4", "consumer=w1")
        async with session() as http:
            body = {"model": "sim", "messages": messages, "tools": tools}
            async with http.post(f"{gw.url}/v1/chat/completions", json=body) as r:
                whole = await r.json()
            async with http.post(f"{gw.url}/v1/chat/completions", json={**body, "stream": True}) as r:
                raw = await r.read()
        events = [orjson.loads(e[len(b"data: "):]) for e in raw.split(b"\n\n") if e and e != b"data: [DONE]"]
        assert [e["choices"][0]["delta"] for e in events[1:-1]] == [d for d, _ in plan.chunks]
        assert events[-1]["choices"][0]["finish_reason"] == "tool_calls"
        assert whole["choices"][0]["message"] == {"role": "assistant", **plan.message}
        assert whole["choices"][0]["finish_reason"] == "tool_calls" and whole["system_fingerprint"] == "fp_stub"
    finally:
        stub.stop()
    # a SimulatedEngine worker (no tools) on a stream of its own: the gateway cannot know the workers'
    # engines (every feature passes it), the worker's refuses, and its 400 reaches the client
    simulated_gw = gateway(processes, redis_server, "stream=rxpipe:simulated")
    worker(processes, redis_server, "max_num_seqs=4", "consumer=w2", "stream=rxpipe:simulated")
    async with session() as http:
        async with http.post(f"{simulated_gw.url}/v1/chat/completions", json={
                "model": "sim", "messages": messages, "tools": tools}) as r:
            refused = await r.json()
            status = r.status
    assert status == 400 and (refused["error"]["code"], refused["error"]["param"]) == ("unsupported_request", "tools")
