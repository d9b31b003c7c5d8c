"""Admission at the edge, second round (DESIGN §5): the exact bound, smooth admission, Retry-After as a
reservation (clients that honour it come back spread at the drain rate), the context length,
and the hints of a throttled backend. Real HTTP; real processes where the process matters."""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from rxpipe.engines import OpenAIEngine
from rxpipe.gateway import Gateway
from rxpipe.gateway._policy import RESERVATION_MARGIN
from rxpipe.loader import load_pipeline
from rxpipe.runtime import Pipeline

from ..engines.openai_stub_server import DEFAULTS as STUB_DEFAULTS
from ..engines.openai_stub_server import StubServer
from .sdk_load import run_sdk_clients
from .server import ROOT, GatewayProcess, free_port

pytestmark = pytest.mark.loops("asyncio")


def session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))


async def complete(http: aiohttp.ClientSession, url: str, body: dict[str, Any],
                   headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], Any]:
    async with http.post(url + "/v1/completions", json=body, headers=headers) as r:
        return r.status, dict(r.headers), await r.json()


def gateway_of(pipeline: Pipeline) -> Gateway:
    (gateway,) = [s for s in pipeline.stages if isinstance(s, Gateway)]
    return gateway


@pytest.mark.parametrize(("capacity", "seqs", "clients", "admitted"), [(2, 2, 10, 4), (1, 1, 4, 2)])
async def test_admitted_and_not_running_never_exceeds_queue_capacity(tmp_path: Path, capacity: int, seqs: int,
                                                                     clients: int, admitted: int) -> None:
    # 100 tokens at 10 ms a step: each request holds its slot 1 s, long after all have arrived
    process = GatewayProcess(tmp_path, f"queue_capacity={capacity}", f"max_num_seqs={seqs}", "step_overhead_s=0.01",
                             "decode_s_per_seq=0", "prefill_s_per_token=0")
    try:
        async with session() as http:
            results = await asyncio.gather(*(complete(http, process.url, {"prompt": f"r{i}", "max_tokens": 100})
                                              for i in range(clients)))
    finally:
        process.kill()
    statuses = Counter(status for status, _, _ in results)
    assert statuses == {200: admitted, 429: clients - admitted}  # seqs running + capacity waiting
    assert all(body["usage"]["completion_tokens"] == 100 for status, _, body in results if status == 200)
    assert {body["error"]["code"] for status, _, body in results if status == 429} == {"queue_full"}


async def test_the_edge_admits_one_more_per_departure() -> None:
    """Smooth admission: once full, every request that starts running lets exactly one more in."""
    pipeline = load_pipeline(str(ROOT / "pipelines" / "llm_gateway.py"), {
        "queue_capacity": 3, "max_num_seqs": 1, "step_overhead_s": 0.02, "decode_s_per_seq": 0,
        "prefill_s_per_token": 0})
    gateway = gateway_of(pipeline)

    async def until(predicate: Any) -> None:
        for _ in range(500):
            if predicate():
                return
            await asyncio.sleep(0.002)
        raise AssertionError("timed out")

    async with pipeline.start(port=0) as running:
        assert running.url
        async with session() as http:
            def one() -> asyncio.Future[Any]:  # 20 tokens at 20 ms: 0.4 s on the one slot
                return asyncio.ensure_future(complete(http, running.url or "", {"prompt": "x", "max_tokens": 20}))

            waiting = [one() for _ in range(4)]
            await until(lambda: gateway.in_flight == 4)
            assert gateway.demand == 0  # 1 running + 3 waiting: full
            demand_seen: list[int] = []
            for _ in range(3):
                done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                demand_seen.append(gateway.demand)  # the next one started: room for exactly one
                waiting = [f for f in waiting if f not in done]
                waiting.append(one())
                await until(lambda: gateway.in_flight == 4)
                assert gateway.demand == 0
            await asyncio.gather(*waiting)
    assert demand_seen == [1, 1, 1]


async def test_refusals_get_staggered_retry_after_at_the_measured_drain_rate() -> None:
    pipeline = load_pipeline(str(ROOT / "pipelines" / "llm_gateway.py"), {
        "queue_capacity": 4, "max_num_seqs": 2, "step_overhead_s": 0.01, "decode_s_per_seq": 0,
        "prefill_s_per_token": 0})
    gateway = gateway_of(pipeline)
    loop = asyncio.get_running_loop()
    async with pipeline.start(port=0) as running:
        url = running.url
        assert url
        async with session() as http:
            # measure a drain rate: twice 6 requests of 0.1 s on 2 slots (4 wait: 0.2 s of draining each)
            for _ in range(2):
                warm = await asyncio.gather(*(complete(http, url, {"prompt": "w", "max_tokens": 10})
                                              for _ in range(6)))
                assert [s for s, _, _ in warm].count(200) == 6
            assert gateway.meter.rate(loop.time()) is not None
            burst = asyncio.gather(*(complete(http, url, {"prompt": "b", "max_tokens": 10}) for _ in range(60)))
            results = await burst
            rate = gateway.meter.rate(loop.time())
    assert rate is not None
    interval_ms = 1000 / (rate * RESERVATION_MARGIN)
    refused = sorted(int(h["retry-after-ms"]) for status, h, _ in results if status == 429)
    assert len(refused) >= 40
    for status, headers, _ in results:
        if status == 429:
            assert headers["Retry-After"] == str(-(-int(headers["retry-after-ms"]) // 1000))
    assert len(set(refused)) >= 10
    assert refused[0] >= 1000  # never below the 1 s minimum
    # one admission slot per drain interval: the promises span (n - 1) intervals (the rate moves a
    # little while the burst is answered, and each value has up to half an interval of jitter)
    span = refused[-1] - refused[0]
    assert 0.6 * (len(refused) - 1) * interval_ms <= span <= 1.6 * (len(refused) - 1) * interval_ms, (
        span, len(refused), interval_ms)


async def test_200_openai_sdk_clients_honouring_retry_after_nearly_all_succeed(tmp_path: Path) -> None:
    pytest.importorskip("openai", reason="the openai package is part of the test extra")
    process = GatewayProcess(tmp_path, "queue_capacity=8", "max_num_seqs=4")
    try:
        result = await run_sdk_clients(process.url, clients=200, max_tokens=64, max_retries=8)
    finally:
        process.kill()
    assert result.ok >= 196, result.summary()  # >= 98 %
    assert result.refused_at_least(3) <= 20, result.summary()  # <= 10 % refused three times or more
    assert "Traceback" not in process.output


async def test_context_length_is_checked_before_admission() -> None:
    pipeline = load_pipeline(str(ROOT / "pipelines" / "llm_gateway.py"), {
        "max_model_len": 1000, "default_max_tokens": 20, "max_num_seqs": 2, "step_overhead_s": 0.001})
    async with pipeline.start(port=0) as running:
        url = running.url
        assert url
        async with session() as http:
            # 3,600 bytes = 900 tokens (1 per 4 bytes) + 200 = 1,100 > 1,000
            status, _, body = await complete(http, url, {"prompt": "abcd" * 900, "max_tokens": 200})
            assert status == 400
            assert body["error"] == {
                "message": "This model's maximum context length is 1000 tokens. However, you requested 1100 tokens "
                           "(900 in the prompt, 200 in the completion). Please reduce the length of the prompt or "
                           "completion.",
                "type": "invalid_request_error", "code": "context_length_exceeded", "param": "prompt"}
            async with http.post(url + "/v1/chat/completions", json={
                    "messages": [{"role": "user", "content": "abcd" * 1000}]}) as r:
                assert r.status == 400
                error = (await r.json())["error"]
            assert error["code"] == "context_length_exceeded" and error["param"] == "messages"
            assert "you requested 1000 tokens (1000 in the messages, 0 in the completion)" in error["message"]
            # fits exactly: 900 + 100
            status, _, body = await complete(http, url, {"prompt": "abcd" * 900, "max_tokens": 100})
            assert status == 200 and body["usage"] == {"prompt_tokens": 900, "completion_tokens": 100,
                                                       "total_tokens": 1000}
            # no max_tokens: what remains (10), then capped by default_max_tokens (20): at most 10
            status, _, body = await complete(http, url, {"prompt": "abcd" * 990})
            assert status == 200 and 1 <= body["usage"]["completion_tokens"] <= 10
            # a short prompt without max_tokens: the drawn length (16..256), capped at 20
            lengths = [(await complete(http, url, {"prompt": f"p{i}"}))[2]["usage"]["completion_tokens"]
                       for i in range(5)]
            assert all(16 <= n <= 20 for n in lengths) and 20 in lengths, lengths


async def test_a_backend_pause_sets_the_edges_retry_after_floor(stub: StubServer) -> None:
    from rxpipe import operators as ops
    from rxpipe.gateway import edge_queue

    stub.control(reset=True, **{**STUB_DEFAULTS, "throttle": 1, "retry_after": "30"})
    engine = OpenAIEngine(stub.url, "stub-model", 1, retry_after_jitter=0.0)
    pipeline = Pipeline(Gateway(), edge_queue(1), ops.execute(engine), drain_timeout_s=0.5)
    async with pipeline.start(port=0) as running:
        url = running.url
        assert url
        async with session() as http:
            held = [asyncio.ensure_future(complete(http, url, {"prompt": "a", "max_tokens": 1})) for _ in range(2)]
            for _ in range(200):
                if engine.paused and not any(f.done() for f in held):
                    break
                await asyncio.sleep(0.01)
            assert engine.paused and 29.0 < engine.retry_after_s <= 30.0
            status, headers, body = await complete(http, url, {"prompt": "c", "max_tokens": 1})
            assert status == 429 and body["error"]["code"] == "queue_full"
            assert int(headers["retry-after-ms"]) >= engine.retry_after_s * 1000 - 50  # never less than the pause
            assert int(headers["Retry-After"]) >= 30
            for f in held:
                f.cancel()
            await asyncio.gather(*held, return_exceptions=True)
    await engine.aclose()


@pytest.mark.parametrize("retry_after", ["0", "soon"])
async def test_a_backend_retry_after_of_0_or_garbage_backs_off(stub: StubServer, retry_after: str) -> None:
    import random

    stub.control(reset=True, **{**STUB_DEFAULTS, "throttle": 1, "retry_after": retry_after})
    engine = OpenAIEngine(stub.url, "stub-model", 1, retry_after_jitter=1.0, rng=random.Random(5))
    expected = 1.0 + random.Random(5).uniform(0.0, 1.0)  # the 1 s backoff with its jitter
    from rxpipe.engines import CompletionRequest

    loop = asyncio.get_running_loop()
    try:
        t0 = loop.time()
        result = engine.submit(CompletionRequest(prompt="x", max_tokens=1)).result
        for _ in range(200):
            if engine.paused:
                break
            await asyncio.sleep(0.005)
        assert expected - (loop.time() - t0) <= engine.retry_after_s <= expected + 1e-9  # float rounding
        await result
        assert loop.time() - t0 >= expected
        assert stub.state()["statuses"] == {"429": 1, "200": 1}  # one retry, not a tight loop
    finally:
        await engine.aclose()


async def test_chat_messages_to_a_completions_only_engine_get_400_and_the_engine_stays_up(stub: StubServer) -> None:
    from rxpipe import operators as ops
    from rxpipe.gateway import edge_queue

    stub.control(reset=True, **STUB_DEFAULTS)
    engine = OpenAIEngine(stub.url, "stub-model", 2, chat=False)
    pipeline = Pipeline(Gateway(), edge_queue(4), ops.execute(engine), drain_timeout_s=0.5)
    async with pipeline.start(port=0) as running:
        assert running.url
        async with session() as http:
            chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
            async with http.post(running.url + "/v1/chat/completions", json=chat) as r:
                status, body = r.status, await r.json()
            after = await complete(http, running.url, {"prompt": "x", "max_tokens": 1})
    await engine.aclose()
    assert status == 400
    assert body["error"] == {"message": "this model is served by a completions-only backend: send a prompt to "
                                        "/v1/completions, not chat messages",
                             "type": "invalid_request_error", "code": "unsupported_request", "param": None}
    assert stub.url.split("//")[1] not in body["error"]["message"]
    # nothing reached the backend for the refused request; the next prompt is served
    assert after[0] == 200 and after[2]["choices"][0]["text"] == " t0"
    assert [b["path"] for b in stub.state()["bodies"]] == ["/v1/completions"]


async def test_no_backend_address_in_what_the_client_sees() -> None:
    from rxpipe import operators as ops
    from rxpipe.gateway import edge_queue

    port = free_port()  # nothing listens there
    engine = OpenAIEngine(f"http://127.0.0.1:{port}", "m", 2, connect_timeout_s=1.0)
    pipeline = Pipeline(Gateway(), edge_queue(4), ops.execute(engine), drain_timeout_s=0.5)
    async with pipeline.start(port=0) as running:
        assert running.url
        async with session() as http:
            answers = [await complete(http, running.url, {"prompt": "x", "max_tokens": 1}) for _ in range(3)]
    await engine.aclose()
    assert {status for status, _, _ in answers} == {503}
    for _, _, body in answers:
        assert str(port) not in body["error"]["message"] and "127.0.0.1" not in body["error"]["message"]
        assert body["error"]["code"] == "unavailable"


async def test_a_second_sigterm_is_reported_truthfully(tmp_path: Path) -> None:
    process = GatewayProcess(tmp_path, "max_num_seqs=1", "step_overhead_s=0.02", "decode_s_per_seq=0",
                             "drain_timeout_s=30")
    try:
        async with session() as http:
            long = asyncio.ensure_future(complete(http, process.url, {"prompt": "x", "max_tokens": 5000}))
            await asyncio.sleep(0.3)
            process.proc.send_signal(signal.SIGTERM)
            await asyncio.sleep(0.5)
            process.proc.send_signal(signal.SIGTERM)
            status, _, body = await long
        assert process.wait() == 0
    finally:
        process.kill()
    assert status == 503 and body["error"]["code"] == "draining"
    output = process.output
    match = [line for line in output.splitlines() if "still in flight" in line]
    assert len(match) == 1, output
    waited = float(match[0].split(" after ")[1].split(" s ")[0])
    assert 0.3 <= waited < 10.0 and "(a second stop signal)" in match[0], match[0]
    assert "Traceback" not in output
