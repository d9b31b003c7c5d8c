"""The main job as users run it: ``rxpipe run pipelines/llm_gateway.py`` in a real process,
driven over real HTTP (aiohttp with an unlimited connector, the official ``openai`` client, curl)."""

from __future__ import annotations

import asyncio
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

import aiohttp
import orjson
import pytest

from .server import GatewayProcess

pytestmark = pytest.mark.loops("asyncio")


@pytest.fixture
def gateway(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[GatewayProcess]:
    marker = request.node.get_closest_marker("settings")
    settings = marker.args if marker else ()
    process = GatewayProcess(tmp_path, *settings)
    try:
        yield process
    finally:
        process.kill()


def session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))


def metric(text: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)} ([0-9.e+-]+)$", text, re.M)
    assert match, f"{name} not in /metrics"
    return float(match.group(1))


def sse_events(raw: bytes) -> list[bytes]:
    assert raw.endswith(b"\n\n"), raw[-80:]
    events = raw.split(b"\n\n")[:-1]
    assert all(e.startswith(b"data: ") for e in events), events
    return [e[len(b"data: "):] for e in events]


@pytest.mark.settings("max_num_seqs=4")
async def test_completion_and_chat_json_shapes(gateway: GatewayProcess) -> None:
    async with session() as http:
        async with http.post(f"{gateway.url}/v1/completions",
                             json={"model": "sim", "prompt": "Say hello", "max_tokens": 5}) as r:
            assert r.status == 200 and r.content_type == "application/json"
            body = await r.json()
        assert set(body) == {"id", "object", "created", "model", "choices", "usage"}
        assert body["object"] == "text_completion" and body["model"] == "sim" and body["id"].startswith("cmpl-")
        (choice,) = body["choices"]
        assert set(choice) == {"text", "index", "logprobs", "finish_reason"}
        assert choice["index"] == 0 and choice["finish_reason"] == "length" and len(choice["text"]) > 0
        assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}

        async with http.post(f"{gateway.url}/v1/chat/completions", json={
                "model": "sim", "messages": [{"role": "user", "content": "Hi there"}], "max_tokens": 3}) as r:
            assert r.status == 200
            chat = await r.json()
        assert chat["object"] == "chat.completion" and chat["id"].startswith("chatcmpl-")
        (choice,) = chat["choices"]
        assert choice["message"]["role"] == "assistant" and isinstance(choice["message"]["content"], str)
        assert choice["finish_reason"] == "length"
        assert chat["usage"] == {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5}

        async with http.get(f"{gateway.url}/v1/models") as r:
            assert await r.json() == {"object": "list", "data": [
                {"id": "sim", "object": "model", "created": 0, "owned_by": "rxpipe"}]}
        for path, status in (("/healthz", 200), ("/readyz", 200)):
            async with http.get(gateway.url + path) as r:
                assert r.status == status


@pytest.mark.settings("max_num_seqs=4")
async def test_sse_framing(gateway: GatewayProcess) -> None:
    async with session() as http:
        async with http.post(f"{gateway.url}/v1/completions",
                             json={"prompt": "count", "max_tokens": 4, "stream": True}) as r:
            assert r.status == 200 and r.headers["Content-Type"] == "text/event-stream"
            events = sse_events(await r.read())
        assert events[-1] == b"[DONE]"
        chunks = [orjson.loads(e) for e in events[:-1]]
        assert len(chunks) == 5  # 4 tokens, then the finish chunk
        assert {c["object"] for c in chunks} == {"text_completion"}
        assert len({c["id"] for c in chunks}) == 1
        assert [c["choices"][0]["finish_reason"] for c in chunks] == [None, None, None, None, "length"]
        assert all(c["choices"][0]["text"] for c in chunks[:4])

        async with http.post(f"{gateway.url}/v1/chat/completions", json={
                "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "stream": True,
                "stream_options": {"include_usage": True}}) as r:
            events = sse_events(await r.read())
        chunks = [orjson.loads(e) for e in events[:-1]]
        assert events[-1] == b"[DONE]"
        assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        assert [set(c["choices"][0]["delta"]) for c in chunks[1:3]] == [{"content"}, {"content"}]
        assert chunks[3]["choices"][0] == {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "length"}
        assert chunks[4]["choices"] == [] and chunks[4]["usage"] == {
            "prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
        assert {c["object"] for c in chunks} == {"chat.completion.chunk"}


@pytest.mark.settings("queue_capacity=20", "max_num_seqs=4", "step_overhead_s=0.01")
async def test_burst_of_300_gets_only_200_and_429(gateway: GatewayProcess) -> None:
    peak_running = 0
    stop = asyncio.Event()

    async def watch(http: aiohttp.ClientSession) -> None:
        nonlocal peak_running
        while not stop.is_set():
            async with http.get(f"{gateway.url}/metrics") as r:
                running = metric(await r.text(), 'rxpipe_engine_running_seqs{engine="sim"}')
                peak_running = max(peak_running, int(running))
            await asyncio.sleep(0.005)

    async def one(http: aiohttp.ClientSession, i: int) -> tuple[int, str | None, Any]:
        async with http.post(f"{gateway.url}/v1/completions",
                             json={"model": "sim", "prompt": f"request {i}", "max_tokens": 8}) as r:
            return r.status, r.headers.get("Retry-After"), await r.json()

    async with session() as http:
        watcher = asyncio.ensure_future(watch(http))
        results = await asyncio.gather(*(one(http, i) for i in range(300)))
        stop.set()
        await watcher
        async with http.get(f"{gateway.url}/metrics") as r:
            text = await r.text()
    statuses = Counter(status for status, _, _ in results)
    assert set(statuses) == {200, 429}
    assert statuses[200] >= 20  # at least the queue's worth was admitted
    for status, retry_after, body in results:
        if status == 429:
            assert retry_after is not None and 1 <= int(retry_after) <= 60
            assert body["error"]["type"] == "rate_limit_error" and body["error"]["code"] == "queue_full"
            assert isinstance(body["error"]["message"], str)
        else:
            assert body["usage"]["completion_tokens"] == 8
    assert 1 <= peak_running <= 4
    assert metric(text, 'rxpipe_rejections_total{reason="queue_full"}') == statuses[429]
    assert metric(text, 'rxpipe_http_requests_total{code="200",route="/v1/completions"}') == statuses[200]
    assert metric(text, "rxpipe_request_duration_seconds_count") == 300
    assert metric(text, "rxpipe_time_to_first_token_seconds_count") == statuses[200]
    assert metric(text, 'rxpipe_time_to_first_token_seconds_bucket{le="60.0"}') == statuses[200]
    assert metric(text, 'rxpipe_stage_capacity_items{stage="queue"}') == 20


@pytest.mark.settings("max_body_bytes=2048")
async def test_malformed_oversized_and_unknown_model(gateway: GatewayProcess) -> None:
    cases = [
        (b"{not json", 400, "invalid_json"),
        (b"[1, 2]", 400, "invalid_json"),
        (b'{"model": "sim"}', 400, "missing_prompt"),
        (b'{"prompt": "x", "max_tokens": 0}', 400, "invalid_max_tokens"),
        (b'{"prompt": "x", "max_tokens": "9"}', 400, "invalid_max_tokens"),
        (b'{"prompt": "x", "stream": "yes"}', 400, "invalid_stream"),
        (orjson.dumps({"prompt": "x" * 4000}), 413, "request_too_large"),
        (b'{"model": "gpt-5", "prompt": "x"}', 404, "model_not_found"),
    ]
    async with session() as http:
        for body, status, code in cases:
            async with http.post(f"{gateway.url}/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"}) as r:
                assert r.status == status, body
                error = (await r.json())["error"]
                assert error["code"] == code and isinstance(error["message"], str) and error["type"]
        async with http.post(f"{gateway.url}/v1/chat/completions", json={"messages": []}) as r:
            assert r.status == 400 and (await r.json())["error"]["code"] == "invalid_messages"
        async with http.get(f"{gateway.url}/v2/nothing") as r:
            assert r.status == 404 and (await r.json())["error"]["type"] == "not_found_error"


@pytest.mark.settings("max_num_seqs=1", "step_overhead_s=0.02", "decode_s_per_seq=0")
async def test_disconnect_mid_stream_frees_the_slot(gateway: GatewayProcess) -> None:
    async with session() as http:
        long_stream = await http.post(f"{gateway.url}/v1/completions",
                                      json={"prompt": "long", "max_tokens": 5000, "stream": True})
        assert long_stream.status == 200
        await long_stream.content.readuntil(b"\n\n")  # it runs: the only slot is taken
        waiting = asyncio.ensure_future(http.post(f"{gateway.url}/v1/completions",
                                                  json={"prompt": "next", "max_tokens": 1}))
        await asyncio.sleep(0.3)
        assert not waiting.done()  # queued behind the stream (5000 tokens ≈ 100 s)
        closed_at = time.monotonic()
        long_stream.close()  # the client goes away mid-stream
        response = await waiting
        elapsed = time.monotonic() - closed_at
        assert response.status == 200
        assert (await response.json())["usage"]["completion_tokens"] == 1
        response.release()
    # cancelled within one step (20 ms), then the next request's prefill+decode steps:
    assert elapsed < 0.5, elapsed
    assert "Traceback" not in gateway.output and "ERROR" not in gateway.output


@pytest.mark.settings("max_num_seqs=2", "stall_timeout_s=1.0", "step_overhead_s=0.0005", "decode_s_per_seq=0",
                      "max_model_len=32768")
async def test_reader_that_stops_reading_is_aborted_and_memory_stays_flat(gateway: GatewayProcess) -> None:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", gateway.port))
    body = orjson.dumps({"prompt": "stream a lot", "max_tokens": 30000, "stream": True})
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    await asyncio.sleep(0.5)  # the server fills what the socket takes, then the stream parks
    rss_parked = gateway.rss_bytes()
    await asyncio.sleep(0.4)
    assert gateway.rss_bytes() - rss_parked < 2 * 1024 * 1024
    # after stall_timeout_s without credit the engine aborts it and the server closes the socket
    await asyncio.sleep(1.0)
    received = b""
    sock.settimeout(5.0)
    try:
        while chunk := sock.recv(65536):  # read what was sent until the server closes it
            received += chunk
    except ConnectionResetError:  # an abort may arrive as a reset: closed by the server too
        pass
    sock.close()
    assert received.startswith(b"HTTP/1.1 200")
    assert b"data: [DONE]" not in received  # aborted, not completed
    assert received.count(b"data: ") < 30000  # the engine stopped stepping it
    async with session() as http:
        async with http.get(f"{gateway.url}/metrics") as r:
            text = await r.text()
        assert metric(text, 'rxpipe_engine_running_seqs{engine="sim"}') == 0
        async with http.post(f"{gateway.url}/v1/completions", json={"prompt": "after", "max_tokens": 2}) as r:
            assert r.status == 200
    assert gateway.rss_bytes() - rss_parked < 4 * 1024 * 1024


@pytest.mark.settings("max_num_seqs=8", "step_overhead_s=0.02", "decode_s_per_seq=0", "drain_timeout_s=10")
async def test_sigterm_during_load_drains(gateway: GatewayProcess) -> None:
    async with session() as http:
        async def one(max_tokens: int) -> tuple[int, Any]:
            async with http.post(f"{gateway.url}/v1/completions",
                                 json={"prompt": "work", "max_tokens": max_tokens}) as r:
                return r.status, await r.json()

        in_flight = [asyncio.ensure_future(one(20)) for _ in range(6)]  # ~0.4 s each
        await asyncio.sleep(0.15)
        gateway.proc.send_signal(signal.SIGTERM)
        await asyncio.sleep(0.1)
        late_status, late_body = await one(1)
        async with http.get(f"{gateway.url}/readyz") as r:
            ready_status = r.status
        results = await asyncio.gather(*in_flight)
    assert [status for status, _ in results] == [200] * 6
    assert all(body["usage"]["completion_tokens"] == 20 for _, body in results)
    assert late_status == 503 and late_body["error"]["code"] == "draining"
    assert ready_status == 503
    assert gateway.wait() == 0  # the one SIGTERM was enough: drained, then exited cleanly
    assert "Traceback" not in gateway.output


@pytest.mark.settings("max_num_seqs=4")
async def test_openai_sdk_non_streaming_and_streaming(gateway: GatewayProcess) -> None:
    openai = pytest.importorskip("openai", reason="the openai package is part of the test extra")
    client = openai.AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0)
    try:
        completion = await client.completions.create(model="sim", prompt="Hello", max_tokens=4)
        assert completion.choices[0].finish_reason == "length"
        assert completion.usage.completion_tokens == 4
        chat = await client.chat.completions.create(
            model="sim", messages=[{"role": "user", "content": "Hello"}], max_tokens=3)
        assert chat.choices[0].message.role == "assistant" and chat.usage.completion_tokens == 3
        stream = await client.chat.completions.create(
            model="sim", messages=[{"role": "user", "content": "Hello"}], max_tokens=5, stream=True)
        pieces = [chunk.choices[0].delta.content async for chunk in stream if chunk.choices]
        assert len(pieces) == 7 and pieces[0] == "" and pieces[-1] is None
        assert "".join(p for p in pieces if p) == chat.choices[0].message.content or len("".join(pieces[1:6])) > 0
        with pytest.raises(openai.NotFoundError):
            await client.completions.create(model="other", prompt="x", max_tokens=1)
    finally:
        await client.close()


@pytest.mark.settings("max_num_seqs=4")
async def test_curl_streaming(gateway: GatewayProcess, tmp_path: Path) -> None:
    curl = shutil.which("curl")
    if curl is None:
        pytest.fail("curl is needed for this test (.ci/run installs it)")
    out = tmp_path / "curl.out"
    with out.open("wb") as stdout:
        proc = await asyncio.create_subprocess_exec(
            curl, "-sN", f"{gateway.url}/v1/completions", "-H", "Content-Type: application/json",
            "-d", '{"model": "sim", "prompt": "Hello", "max_tokens": 3, "stream": true}', stdout=stdout)
        assert await proc.wait() == 0
    events = sse_events(out.read_bytes())
    assert len(events) == 5 and events[-1] == b"[DONE]"
    assert orjson.loads(events[3])["choices"][0]["finish_reason"] == "length"


def test_unknown_setting_fails_with_a_clear_message(tmp_path: Path) -> None:
    log = tmp_path / "out.txt"
    with log.open("wb") as out:
        code = subprocess.run([sys.executable, "-m", "rxpipe", "run", "pipelines/llm_gateway.py",
                               "--set", "queue_size=3"],
                              stdout=out, stderr=subprocess.STDOUT, cwd=Path(__file__).resolve().parents[2],
                              timeout=60).returncode
    assert code == 1
    text = log.read_text()
    assert "unknown setting(s) queue_size" in text and "queue_capacity" in text
