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
def stub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StubServer]:
    server = StubServer(tmp_path_factory.mktemp("stub"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def router(stub: StubServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    """Two replicas, both the stub (by two names), so a retry on "another replica" is visible."""
    process = GatewayProcess(tmp_path_factory.mktemp("router"), f"backends={stub.url},http://localhost:{stub.port}",
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
