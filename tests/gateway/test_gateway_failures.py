"""The edge when things go wrong: every admitted request gets an answer, and shutdown is bounded."""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from rxpipe import operators as ops
from rxpipe.engines import SimulatedEngine
from rxpipe.gateway import Gateway, GatewayConfig
from rxpipe.runtime import Pipeline

from .server import GatewayProcess
from .test_gateway import post
from .test_llm_gateway_process import metric


def fast_engine(**kwargs: Any) -> SimulatedEngine:
    settings = {"max_num_seqs": 2, "step_overhead_s": 0.001, "decode_s_per_seq": 0.0, "prefill_s_per_token": 0.0}
    return SimulatedEngine(**{**settings, **kwargs})


async def test_engine_failure_mid_stream_ends_with_an_error_event() -> None:
    pipeline = Pipeline(Gateway(), ops.buffer(4), ops.execute(fast_engine(error_rate=1.0)))
    async with pipeline.start(port=0) as running:
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{running.url}/v1/completions",
                                 json={"prompt": "x", "max_tokens": 50, "stream": True}) as r:
                assert r.status == 200
                raw = await asyncio.wait_for(r.read(), 5)
            events = raw.split(b"\n\n")[:-1]
            assert events[-1] == b"data: [DONE]"
            error = orjson.loads(events[-2][len(b"data: "):])["error"]
            assert error["type"] == "server_error" and error["code"] == "engine_error"
            # non-streaming: a JSON 500 with the same code
            status, _, body = await post(running.url, {"prompt": "x", "max_tokens": 50})
            assert status == 500 and body["error"]["code"] == "engine_error"


async def test_engine_going_down_while_running_answers_503() -> None:
    engine = fast_engine(step_overhead_s=0.02)
    pipeline = Pipeline(Gateway(), ops.buffer(4), ops.execute(engine))
    async with pipeline.start(port=0) as running:
        assert running.url
        request = asyncio.ensure_future(post(running.url, {"prompt": "x", "max_tokens": 100}))
        await asyncio.sleep(0.1)
        engine.down = True
        status, headers, body = await request
        assert status == 503 and body["error"]["code"] == "unavailable"
        # no drain rate measured yet: 1 s plus a jitter of up to 1 s (spread, not lock-step)
        ms = int(headers["retry-after-ms"])
        assert 1000 <= ms <= 2000 and headers["Retry-After"] == str(-(-ms // 1000))
        engine.down = False


async def test_a_failing_stage_answers_admitted_and_new_requests_with_503(rx_errors: Any) -> None:
    def boom(item: Any) -> Any:
        raise RuntimeError("stage bug")

    pipeline = Pipeline(Gateway(), ops.buffer(4), ops.map(boom), ops.execute(fast_engine()))
    async with pipeline.start(port=0) as running:
        assert running.url
        status, _, body = await asyncio.wait_for(post(running.url, {"prompt": "x", "max_tokens": 1}), 5)
        assert status == 503 and body["error"]["code"] == "unavailable"
        status, _, body = await post(running.url, {"prompt": "y", "max_tokens": 1})
        assert status == 503 and body["error"]["code"] == "unavailable"
        with pytest.raises(RuntimeError, match="stage bug"):
            await running.wait()


@pytest.mark.parametrize("overflow", ["drop_oldest", "drop_incoming"])
async def test_requests_shed_by_a_buffer_are_answered_with_429(overflow: str) -> None:
    pipeline = Pipeline(Gateway(), ops.buffer(2, overflow=overflow),
                        ops.execute(fast_engine(max_num_seqs=1, step_overhead_s=0.01)))
    async with pipeline.start(port=0) as running:
        assert running.url
        url = running.url
        results = await asyncio.wait_for(
            asyncio.gather(*(post(url, {"prompt": "x", "max_tokens": 5}) for _ in range(10))), 10)
    statuses = [status for status, _, _ in results]
    assert set(statuses) <= {200, 429} and statuses.count(200) >= 3 and statuses.count(429) >= 1
    for status, headers, body in results:
        if status == 429:
            assert body["error"]["code"] == "queue_full" and "shed" in body["error"]["message"]
            assert int(headers["Retry-After"]) >= 1


async def test_the_same_gateway_cannot_serve_twice() -> None:
    pipeline = Pipeline(Gateway(), ops.buffer(2), ops.execute(fast_engine()))
    async with pipeline.start(port=0):
        with pytest.raises(RuntimeError, match="already"):
            async with pipeline.start(port=0):
                pass


async def test_auth_scheme_is_case_insensitive_and_401_names_the_scheme() -> None:
    pipeline = Pipeline(Gateway(api_keys=("k1",)), ops.buffer(2), ops.execute(fast_engine()))
    async with pipeline.start(port=0) as running:
        assert running.url
        assert (await post(running.url, {"prompt": "x", "max_tokens": 1}, {"Authorization": "bearer k1"}))[0] == 200
        status, headers, _ = await post(running.url, {"prompt": "x", "max_tokens": 1})
        assert status == 401 and headers["WWW-Authenticate"] == "Bearer"


async def test_model_retrieval() -> None:
    pipeline = Pipeline(Gateway(model="m1"), ops.buffer(2), ops.execute(fast_engine()))
    async with pipeline.start(port=0) as running:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{running.url}/v1/models/m1") as r:
                assert r.status == 200
                assert await r.json() == {"id": "m1", "object": "model", "created": 0, "owned_by": "rxpipe"}
            async with http.get(f"{running.url}/v1/models/other") as r:
                assert r.status == 404 and (await r.json())["error"]["code"] == "model_not_found"


async def test_a_body_that_never_arrives_gets_408() -> None:
    pipeline = Pipeline(Gateway(GatewayConfig(body_timeout_s=0.2)), ops.buffer(2), ops.execute(fast_engine()))
    async with pipeline.start(port=0) as running:
        assert running.url
        host, port = running.url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"prompt\"")
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert head.startswith(b"HTTP/1.1 408")
        writer.close()
        await writer.wait_closed()


@pytest.mark.parametrize("after_s", [0.0, 0.1])
async def test_a_request_arriving_as_the_server_stops_is_answered(monkeypatch: pytest.MonkeyPatch,
                                                                   after_s: float) -> None:
    # Nothing is in flight when the drain starts, so it ends at once. A client connected before
    # and its request reaches the server only as the listener closes (0 s), or a moment after
    # (a client that stalled): it gets its 503, not a connection closed without an answer.
    pipeline = Pipeline(Gateway(), ops.buffer(2), ops.execute(fast_engine()))
    body = orjson.dumps({"prompt": "x", "max_tokens": 1})
    request = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    async with pipeline.start(port=0) as running:
        assert running.url
        host, port = running.url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        # answered on another connection opened after it: the server has accepted this one
        # (a connection still in the listen backlog when the listener closes is reset)
        assert await asyncio.wait_for(_health_on_another_connection(running.url), 5) == 200
        stop_listening = web.TCPSite.stop

        async def stop_listening_then_send(site: web.TCPSite) -> None:
            await stop_listening(site)
            asyncio.get_running_loop().call_later(after_s, writer.write, request)

        monkeypatch.setattr(web.TCPSite, "stop", stop_listening_then_send)
    answer = await asyncio.wait_for(reader.read(), 5)  # to EOF: the server closed after answering
    writer.close()
    head, _, payload = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503 "), answer
    assert b"Connection: close" in head.split(b"\r\n")  # draining: no connection kept for another request
    assert orjson.loads(payload)["error"]["code"] == "draining"


@pytest.mark.parametrize("shutdown_timeout_s", [0.0, 0.4])
async def test_a_connection_that_sends_nothing_delays_the_stop_by_shutdown_timeout_s_at_most(
        caplog: pytest.LogCaptureFixture, shutdown_timeout_s: float) -> None:
    pipeline = Pipeline(Gateway(GatewayConfig(shutdown_timeout_s=shutdown_timeout_s)), ops.buffer(2),
                        ops.execute(fast_engine()))
    async with pipeline.start(port=0) as running:
        assert running.url
        host, port = running.url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))  # owes a request it never sends
        assert await asyncio.wait_for(_health_on_another_connection(running.url), 5) == 200
        loop = asyncio.get_running_loop()
        started = loop.time()
        caplog.set_level(logging.WARNING, "rxpipe.gateway")
    stopped_s = loop.time() - started
    # uvloop's clock counts whole milliseconds: 0.4 s can read as 0.3999999999996 after the subtraction
    assert shutdown_timeout_s - 1e-6 <= stopped_s < shutdown_timeout_s + 1.0
    assert await asyncio.wait_for(reader.read(), 5) == b""  # closed without an answer: it asked nothing
    writer.close()
    [warning] = [r.getMessage() for r in caplog.records if "still owed an answer" in r.getMessage()]
    assert warning == (f"stop: 1 connections still owed an answer after {shutdown_timeout_s:g} s (no complete "
                       f"request yet, or its handler still running); closing them")


async def _admitted(http: aiohttp.ClientSession, url: str, *, admitted: int, running: int) -> None:
    """Until the gateway has admitted ``admitted`` requests and its engine runs ``running``
    (a stalled client or server would otherwise be signalled before its requests arrived)."""
    while True:
        async with http.get(f"{url}/metrics") as r:
            text = await r.text()
        if (metric(text, 'rxpipe_stage_items_total{direction="out",stage="gateway"}') == admitted
                and metric(text, 'rxpipe_engine_running_seqs{engine="sim"}') == running):
            return
        await asyncio.sleep(0.02)


async def _health_on_another_connection(url: str) -> int:
    """A request on a new connection, answered: the server's loop has run its accept callbacks
    for the connections opened before it."""
    async with aiohttp.ClientSession() as http, http.get(f"{url}/healthz") as r:
        return r.status


# Its rare CI failure: requests reaching the gateway as it stopped were closed unanswered (see the test above).
@pytest.mark.loops("asyncio")
async def test_drain_timeout_bounds_shutdown(tmp_path: Path) -> None:
    gateway = GatewayProcess(tmp_path, "max_num_seqs=4", "step_overhead_s=0.02", "decode_s_per_seq=0",
                             "drain_timeout_s=1")
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
            async def one() -> tuple[int, Any]:
                async with http.post(f"{gateway.url}/v1/completions", json={"prompt": "x", "max_tokens": 400}) as r:
                    return r.status, await r.json()

            work = [asyncio.ensure_future(one()) for _ in range(6)]  # ~8 s each, 4 run, 2 wait
            await asyncio.wait_for(_admitted(http, gateway.url, admitted=6, running=4), 10)
            signalled = time.monotonic()
            gateway.proc.send_signal(signal.SIGTERM)
            try:
                results = await asyncio.wait_for(asyncio.gather(*work), 10)
            except aiohttp.ClientError as error:  # the rare disconnect: keep what the server said
                raise AssertionError(f"{error!r} {time.monotonic() - signalled:.2f} s after SIGTERM; "
                                     f"server exit {gateway.proc.poll()}; its log:\n{gateway.output}") from error
            answered = time.monotonic() - signalled
        assert [status for status, _ in results] == [503] * 6
        assert {body["error"]["code"] for _, body in results} == {"draining"}
        assert 0.9 <= answered < 3.5
        assert gateway.wait(10) == 0
        assert time.monotonic() - signalled < 6
    finally:
        gateway.kill()


@pytest.mark.loops("asyncio")
async def test_a_second_signal_stops_waiting(tmp_path: Path) -> None:
    gateway = GatewayProcess(tmp_path, "max_num_seqs=2", "step_overhead_s=0.02", "decode_s_per_seq=0",
                             "drain_timeout_s=60")
    try:
        sock = socket.create_connection(("127.0.0.1", gateway.port))
        body = orjson.dumps({"prompt": "x", "max_tokens": 5000})
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        await asyncio.sleep(0.3)
        gateway.proc.send_signal(signal.SIGTERM)
        await asyncio.sleep(0.3)
        assert gateway.proc.poll() is None  # draining: waiting for the 100 s request
        gateway.proc.send_signal(signal.SIGINT)
        assert gateway.wait(10) == 0
        sock.settimeout(5)
        assert sock.recv(65536).startswith(b"HTTP/1.1 503")
        sock.close()
    finally:
        gateway.kill()
