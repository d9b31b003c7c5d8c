"""``rxpipe run pipelines/llm_router.py`` as a real process in front of the stub backend (a real
process too): a backend's errors as its clients see them, and its huge Retry-After."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.engines.openai_stub_server import DEFAULTS, StubServer
from tests.gateway.server import GatewayProcess

ROOT = Path(__file__).resolve().parents[2]
ROUTER = ROOT / "pipelines" / "llm_router.py"

#: a backend's own message with an address in it (vLLM's context-length wording)
MESSAGE = ("This model's maximum context length is 4096 tokens. However, you requested 5000 tokens "
           "(4000 in the messages, 1000 in the completion). See http://10.1.2.3:8001/docs or 10.1.2.3:8001.")
CLEAN = ("This model's maximum context length is 4096 tokens. However, you requested 5000 tokens "
         "(4000 in the messages, 1000 in the completion). See (address removed) or (address removed).")


@pytest.fixture(scope="module")
def router(stub_process: StubServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    """Two replicas, both the stub (by two names), so a retry on "another replica" is visible."""
    process = GatewayProcess(tmp_path_factory.mktemp("router"),
                             f"backends={stub_process.url},http://localhost:{stub_process.port}",
                             "model=m", "max_in_flight=4", file=ROUTER)
    yield process
    process.terminate()


def call(url: str, body: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize(("status", "kind"), [(400, "invalid_request_error"), (404, "not_found_error"),
                                              (422, "invalid_request_error")])
def test_a_backend_4xx_reaches_the_client_with_its_status_and_message_without_addresses(
        stub: StubServer, router: GatewayProcess, status: int, kind: str, stream: bool) -> None:
    stub.control(reset=True, **{**DEFAULTS, "fail": 1, "fail_status": status, "fail_message": MESSAGE,
                                "fail_code": "context_length_exceeded"})
    code, headers, raw = call(router.url, {"model": "m", "prompt": "x" * 40, "max_tokens": 8, "stream": stream})
    assert code == status and headers["Content-Type"].startswith("application/json")
    assert json.loads(raw) == {"error": {"message": CLEAN, "type": kind, "code": "context_length_exceeded",
                                         "param": None}}
    assert str(stub.port) not in raw.decode() and "10.1.2.3" not in raw.decode()
    assert stub.state()["requests"] == 1  # the request's own fault: not tried on the other replica


@pytest.mark.parametrize(("status", "code", "message"), [
    (401, "backend_auth_error", "the model backend refused the gateway's own credentials (HTTP 401); "
                                "not a fault of this request"),
    (403, "backend_auth_error", "the model backend refused the gateway's own credentials (HTTP 403); "
                                "not a fault of this request"),
    (500, "backend_error", "the model backend failed the request (HTTP 500)"),
])
def test_a_backend_401_403_or_5xx_is_a_502_after_trying_the_other_replica(
        stub: StubServer, router: GatewayProcess, status: int, code: str, message: str) -> None:
    stub.control(reset=True, **{**DEFAULTS, "fail": 2, "fail_status": status, "fail_message": f"see {stub.url}"})
    answer, _, raw = call(router.url, {"model": "m", "prompt": "x", "max_tokens": 8})
    assert answer == 502
    assert json.loads(raw) == {"error": {"message": message, "type": "server_error", "code": code, "param": None}}
    assert stub.state()["requests"] == 2  # each replica once
    stub.control(reset=True, **{**DEFAULTS, "fail": 1, "fail_status": status})
    assert call(router.url, {"model": "m", "prompt": "x", "max_tokens": 2})[0] == 200  # the other replica answers


async def burst(url: str, n: int, stream_every: int = 3) -> list[tuple[int, dict[str, str], bytes, float]]:
    """``n`` concurrent requests (every ``stream_every``-th streamed): (status, headers, body, seconds)."""
    import asyncio
    import time

    import aiohttp

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                     timeout=aiohttp.ClientTimeout(total=60)) as http:
        async def one(i: int) -> tuple[int, dict[str, str], bytes, float]:
            t0 = time.monotonic()
            body = {"model": "m", "prompt": f"p{i}", "max_tokens": 4, "stream": i % stream_every == 0}
            async with http.post(url + "/v1/completions", json=body) as response:
                raw = await response.read()
                return response.status, dict(response.headers), raw, time.monotonic() - t0

        return list(await asyncio.gather(*(one(i) for i in range(n))))


@pytest.mark.loops("uvloop")
@pytest.mark.parametrize("status", [503, 429])
async def test_a_retry_after_of_an_hour_fails_every_queued_request_fast_with_the_edges_maximum(
        stub: StubServer, tmp_path: Path, status: int) -> None:
    stub.control(reset=True, **{**DEFAULTS, "throttle": 1000, "throttle_status": status, "retry_after": "3600"})
    router = GatewayProcess(tmp_path, f"backends={stub.url}", "model=m", "max_in_flight=2", "queue_capacity=50",
                            file=ROUTER)
    try:
        answers = await burst(router.url, 12)
        assert [a[0] for a in answers] == [503] * 12
        for _, headers, raw, seconds in answers:
            assert seconds < 3.0
            assert int(headers["Retry-After"]) >= 60 and int(headers["retry-after-ms"]) >= 60_000
            assert json.loads(raw)["error"]["code"] == "unavailable"
        assert stub.state()["requests"] <= 2  # what was queued behind never reached the backend
        # the engine stays paused for the hour: the next request is answered at once, same wait
        (late,) = await burst(router.url, 1)
        assert late[0] == 503 and int(late[1]["Retry-After"]) >= 60 and late[3] < 1.0
        assert stub.state()["requests"] <= 2
    finally:
        router.terminate()
    log = router.output
    assert (f"paused by {status} (Retry-After 3600 s) for 3600.0 s, over retry_after_cap_s=30: requests fail at once "
            f"with 503 meanwhile") in log
    assert log.count("paused by") == 1


@pytest.mark.loops("uvloop")
async def test_with_a_replica_paused_for_an_hour_the_other_answers_everything(
        stub: StubServer, tmp_path: Path) -> None:
    healthy = StubServer(tmp_path, "--base-delay-s", "0.05")
    stub.control(reset=True, **{**DEFAULTS, "throttle": 1000, "throttle_status": 503, "retry_after": "3600"})
    router = GatewayProcess(tmp_path, f"backends={stub.url},{healthy.url}", "model=m", "max_in_flight=2",
                            "queue_capacity=50", file=ROUTER)
    try:
        answers = await burst(router.url, 12)
        assert [a[0] for a in answers] == [200] * 12
        assert max(a[3] for a in answers) < 3.0
        assert stub.state()["requests"] <= 2 and healthy.state()["requests"] == 12
    finally:
        router.terminate()
        healthy.stop()


def test_the_log_says_start_backend_down_up_paused_resumed_and_drain_once_each(tmp_path: Path) -> None:
    import re
    import time

    stub = StubServer(tmp_path)
    router = GatewayProcess(tmp_path, f"backends={stub.url}", "model=m", "max_in_flight=4", file=ROUTER)
    body = {"model": "m", "prompt": "x", "max_tokens": 2}
    try:
        assert call(router.url, body)[0] == 200
        stub.stop()  # the backend dies: 5 failed calls open its circuit (CircuitBreaker(5, 5.0))
        assert [call(router.url, body)[0] for _ in range(7)] == [503] * 7
        stub.start()
        deadline = time.monotonic() + 20
        while call(router.url, body)[0] != 200:  # the half-open trial, 5 s after the circuit opened
            assert time.monotonic() < deadline, router.output
            time.sleep(0.2)
        stub.control(throttle=1, throttle_status=503, retry_after="1")
        assert call(router.url, body)[0] == 200  # paused for the backend's 1 s, then served
    finally:
        assert router.terminate() == 0
        stub.stop()
    lines = router.output.splitlines()

    def one(pattern: str) -> int:
        found = [i for i, line in enumerate(lines) if re.search(pattern, line)]
        assert len(found) == 1, (pattern, router.output)
        return found[0]

    where = re.escape(f"engine backend0 ({stub.url}/v1)")
    order = [
        one(rf"INFO rxpipe: llm_router serving on http://127\.0\.0\.1:\d+; engines: backend0 \(OpenAIEngine at "
            rf"{re.escape(stub.url)}/v1\); settings: backends={re.escape(stub.url)} model=m max_in_flight=4$"),
        one(rf"WARNING rxpipe\.engine: {where}: backend down \(unreachable: .*\); circuit open, requests get 503, "
            r"next trial in \d\.\d s$"),
        one(rf"INFO rxpipe\.engine: {where}: backend up again after \d+\.\d s; circuit closed$"),
        one(rf"WARNING rxpipe\.engine: {where}: paused by 503 \(Retry-After 1 s\) for [12]\.\d s: no call goes out "
            r"meanwhile$"),
        one(rf"INFO rxpipe\.engine: {where}: resumed after a [12]\.\d s pause$"),
        one(r"INFO rxpipe: SIGTERM: draining in-flight work \(drain_timeout_s=30; a second signal stops at once\)$"),
        one(r"INFO rxpipe\.gateway: gateway: draining, 0 requests in flight \(new ones get 503 draining\)$"),
        one(r"INFO rxpipe: llm_router stopped \(\d+\.\d s to drain\)$"),
    ]
    assert order == sorted(order)
    print("\n".join(line for i, line in enumerate(lines) if i in order))
