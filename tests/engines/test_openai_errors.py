"""A backend's error answer as a client sees it (``rxpipe.engines._openai_errors``)."""

from __future__ import annotations

import orjson
import pytest

from rxpipe.engines._openai_errors import MAX_MESSAGE_CHARS, backend_error, client_message, client_status

URL = "http://gpu-7.internal:8001/v1/completions"


@pytest.mark.parametrize(("backend", "client"), [
    (400, (400, None)), (404, (404, None)), (409, (409, None)), (413, (413, None)), (422, (422, None)),
    (401, (502, "backend_auth_error")), (403, (502, "backend_auth_error")), (407, (502, "backend_auth_error")),
    (408, (502, "backend_error")), (500, (502, "backend_error")), (501, (502, "backend_error")),
    (502, (502, "backend_error")), (504, (502, "backend_error")), (599, (502, "backend_error")),
])
def test_the_status_mapping(backend: int, client: tuple[int, str | None]) -> None:
    assert client_status(backend) == client


def test_addresses_paths_and_tracebacks_never_reach_a_client() -> None:
    raw = ("bad prompt at https://gpu-7.internal:8001/v1?x=1, [fe80::1]:8001, 192.168.0.4:9000, 10.0.0.1, "
           "localhost:8000, gpu-7.internal:8001 and gpu-7.internal; see /opt/vllm/entrypoints/openai/api.py "
           "(2 requests/s)\nTraceback (most recent call last):\n  File \"/x.py\", line 1")
    assert client_message(raw, ("gpu-7.internal",)) == (
        "bad prompt at (address removed) (address removed), (address removed), (address removed), "
        "(address removed), (address removed) and (address removed); see (address removed) (2 requests/s)")
    assert client_message("x" * 5000) == "x" * (MAX_MESSAGE_CHARS - 1) + "…"


def test_openai_fastapi_plain_and_html_bodies() -> None:
    openai = orjson.dumps({"error": {"message": "max_tokens is too large", "type": "BadRequestError",
                                     "code": "context_length_exceeded", "param": "max_tokens"}})
    error = backend_error(400, openai, "application/json", URL, "r1")
    assert (error.status, error.backend_status, error.client_message, error.type, error.code, error.param) == (
        400, 400, "max_tokens is too large", "invalid_request_error", "context_length_exceeded", "max_tokens")
    assert error.client_fault and str(error) == f"{URL} answered 400 to r1: max_tokens is too large"
    fastapi = orjson.dumps({"detail": [{"loc": ["body", "max_tokens"], "msg": "must be positive"},
                                       {"loc": ["body"], "msg": "bad"}]})
    error = backend_error(422, fastapi, "application/json", URL, "r2")
    assert (error.status, error.client_message, error.code, error.param) == (
        422, "max_tokens: must be positive; bad", "backend_422", None)
    error = backend_error(404, b"<html><body>Not Found</body></html>", "text/html", URL, "r3")
    assert (error.status, error.type, error.client_message) == (
        404, "not_found_error", "the model backend refused the request (HTTP 404)")
    error = backend_error(400, b"no such model", "text/plain", URL, "r4")
    assert error.client_message == "no such model"
    error = backend_error(500, orjson.dumps({"error": {"message": "CUDA OOM on 10.0.0.3"}}), "application/json",
                          URL, "r5")
    assert (error.status, error.type, error.code, error.client_message, error.client_fault) == (
        502, "server_error", "backend_error", "the model backend failed the request (HTTP 500)", False)
    assert "CUDA OOM on 10.0.0.3" in str(error)  # the log has it
