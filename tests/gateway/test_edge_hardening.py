"""The edge a public endpoint needs (DESIGN §5, "Edge, second round"): every 4xx has OpenAI's JSON
error body, nothing a client sends makes a 500 or a traceback in the log, and idle or slow
connections are bounded. One real ``rxpipe run pipelines/llm_gateway.py`` process, raw sockets."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import orjson
import pytest

from .server import ROOT, GatewayProcess

KEY = "k-test-1"
AUTH = f"Authorization: Bearer {KEY}\r\n".encode()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    process = GatewayProcess(tmp_path_factory.mktemp("hardening"), "max_num_seqs=4", "step_overhead_s=0.001",
                             env={"RXPIPE_API_KEYS": KEY})
    try:
        yield process
    finally:
        process.kill()


def exchange(port: int, data: bytes, timeout_s: float = 10.0) -> tuple[int, dict[str, str], bytes]:
    """Send ``data`` on a new connection; read one response (status, headers, body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        sock.sendall(data)
        raw = b""
        while b"\r\n\r\n" not in raw:
            chunk = sock.recv(65536)
            assert chunk, f"connection closed without an answer: {raw!r}"
            raw += chunk
        head, _, body = raw.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        length = int(headers.get("content-length", "0"))
        while len(body) < length:
            chunk = sock.recv(65536)
            assert chunk, "connection closed inside the body"
            body += chunk
        return status, headers, body[:length]


def post(path: str, body: bytes, *headers: bytes) -> bytes:
    return (b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + b"".join(headers) + b"Content-Length: %d\r\n\r\n" % len(body) + body)


def completion(**fields: object) -> bytes:
    return post("/v1/completions", orjson.dumps({"prompt": "x", "max_tokens": 2, **fields}), AUTH)


CASES = [
    # (id, raw request, status, error type, error code)
    ("gzip body that is not gzip", post("/v1/completions", b'{"prompt": "x"}', AUTH, b"Content-Encoding: gzip\r\n"),
     400, "invalid_request_error", "invalid_content_encoding"),
    ("deflate body that is not deflate",
     post("/v1/completions", b'{"prompt": "x"}', AUTH, b"Content-Encoding: deflate\r\n"),
     400, "invalid_request_error", "invalid_content_encoding"),
    ("br without a decoder", post("/v1/completions", b'{"prompt": "x"}', AUTH, b"Content-Encoding: br\r\n"),
     400, "invalid_request_error", "invalid_content_encoding"),
    ("Authorization not UTF-8", post("/v1/completions", b'{"prompt": "x"}', b"Authorization: Bearer \xff\xfe\r\n"),
     401, "authentication_error", "invalid_api_key"),
    ("no request line", b"GARBAGE\r\n\r\n", 400, "invalid_request_error", "bad_http_request"),
    ("header line over 8 KiB", b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n",
     400, "invalid_request_error", "header_too_large"),
    ("Content-Length not a number", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
     400, "invalid_request_error", "bad_http_request"),
    ("temperature -1", completion(temperature=-1), 400, "invalid_request_error", "invalid_temperature"),
    ("temperature 2.5", completion(temperature=2.5), 400, "invalid_request_error", "invalid_temperature"),
    ("top_p 7", completion(top_p=7), 400, "invalid_request_error", "invalid_top_p"),
    ("top_p 0", completion(top_p=0), 400, "invalid_request_error", "invalid_top_p"),
    ("n 1.0", completion(n=1.0), 400, "invalid_request_error", "invalid_n"),
    ("n 2", completion(n=2), 400, "invalid_request_error", "invalid_n"),
    ("five stop strings", completion(stop=["a", "b", "c", "d", "e"]), 400, "invalid_request_error", "invalid_stop"),
    ("a stop that is not a string", completion(stop=["a", 3]), 400, "invalid_request_error", "invalid_stop"),
    ("models without a key", b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n", 401, "authentication_error",
     "invalid_api_key"),
    ("one model without a key", b"GET /v1/models/sim HTTP/1.1\r\nHost: x\r\n\r\n", 401, "authentication_error",
     "invalid_api_key"),
    ("unknown route", b"GET /v2/x HTTP/1.1\r\nHost: x\r\n\r\n", 404, "not_found_error", "unknown_route"),
    ("wrong method", b"PUT /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", 405,
     "invalid_request_error", "method_not_allowed"),
    ("an Expect other than 100-continue", post("/v1/completions", b'{"prompt": "x"}', AUTH, b"Expect: 200-ok\r\n"),
     417, "invalid_request_error", "expectation_failed"),
    ("a model path of two segments", b"GET /v1/models/sim/x HTTP/1.1\r\nHost: x\r\n" + AUTH + b"\r\n", 404,
     "not_found_error", "unknown_route"),
]


@pytest.mark.parametrize(("request_bytes", "status", "type_", "code"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_every_client_error_is_json_and_logs_no_traceback(gateway: GatewayProcess, request_bytes: bytes,
                                                         status: int, type_: str, code: str) -> None:
    got, headers, body = exchange(gateway.port, request_bytes)
    assert got == status, body
    assert headers["content-type"].startswith("application/json")
    error = orjson.loads(body)["error"]
    assert (error["type"], error["code"]) == (type_, code)
    assert isinstance(error["message"], str) and "Brotli" not in error["message"]
    assert re.fullmatch(r"[0-9a-f]{32}", headers["x-request-id"])
    output = gateway.output
    assert "Traceback" not in output and "ERROR" not in output and "Error handling request" not in output


@pytest.mark.parametrize(("request_line", "allow"), [
    (b"GET /v1/completions", "POST"), (b"DELETE /v1/chat/completions", "POST"), (b"PUT /metrics", "GET,HEAD"),
    (b"POST /readyz", "GET,HEAD"), (b"PATCH /v1/models/sim", "GET,HEAD")])
def test_a_method_the_route_does_not_take_gets_405_with_allow(gateway: GatewayProcess, request_line: bytes,
                                                               allow: str) -> None:
    status, headers, body = exchange(gateway.port, request_line + b" HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
    assert (status, headers["allow"], orjson.loads(body)["error"]["code"]) == (405, allow, "method_not_allowed")


def test_head_on_a_get_route_answers_its_headers_without_a_body(gateway: GatewayProcess) -> None:
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as sock:
        sock.sendall(b"HEAD /healthz HTTP/1.1\r\nHost: x\r\nx-request-id: head-1\r\n\r\n"
                     b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        raw = b""
        while raw.count(b"\r\n\r\n") < 2 or not raw.endswith(b'{"status":"ok"}'):
            chunk = sock.recv(65536)
            assert chunk, raw
            raw += chunk
    head, _, rest = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n") and b"Content-Length: 15\r\n" in head
    assert b"x-request-id: head-1\r\n" in head
    assert rest.startswith(b"HTTP/1.1 200 OK\r\n")  # the next answer follows at once: no body after the HEAD's


def test_expect_100_continue_gets_100_then_the_answer(gateway: GatewayProcess) -> None:
    body = orjson.dumps({"prompt": "x", "max_tokens": 2})
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + AUTH
                     + b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body))
        assert sock.recv(65536) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(body)
        raw = b""
        while b'"usage"' not in raw:
            chunk = sock.recv(65536)
            assert chunk, raw
            raw += chunk
    assert raw.startswith(b"HTTP/1.1 200 OK\r\n")


def test_a_model_name_with_an_encoded_slash_is_one_path_segment(gateway: GatewayProcess) -> None:
    status, _, body = exchange(gateway.port, b"GET /v1/models/org%2Fsim HTTP/1.1\r\nHost: x\r\n" + AUTH + b"\r\n")
    error = orjson.loads(body)["error"]
    assert (status, error["code"], error["message"]) == (
        404, "model_not_found", "model 'org/sim' does not exist; GET /v1/models lists the served models")
    status, _, body = exchange(gateway.port, b"GET /v1/models/sim HTTP/1.1\r\nHost: x\r\n" + AUTH + b"\r\n")
    assert (status, orjson.loads(body)["id"]) == (200, "sim")


def test_good_requests_after_the_bad_ones_still_work(gateway: GatewayProcess) -> None:
    status, headers, body = exchange(gateway.port, completion(seed=3))
    first = orjson.loads(body)["choices"][0]["text"]
    status, headers, body = exchange(gateway.port, completion(seed=3))
    assert status == 200 and orjson.loads(body)["choices"][0]["text"] == first  # deterministic for a seed
    status, headers, body = exchange(gateway.port, b"GET /v1/models HTTP/1.1\r\nHost: x\r\n" + AUTH + b"\r\n")
    assert status == 200 and orjson.loads(body)["data"][0]["id"] == "sim"


@pytest.mark.parametrize("path", ["/health", "/healthz"])
def test_health_answers_and_echoes_the_request_id(gateway: GatewayProcess, path: str) -> None:
    status, headers, body = exchange(gateway.port, f"GET {path} HTTP/1.1\r\nHost: x\r\nx-request-id: abc-123\r\n\r\n"
                                     .encode())
    assert (status, body, headers["x-request-id"]) == (200, b'{"status":"ok"}', "abc-123")


def test_a_completion_echoes_the_request_id(gateway: GatewayProcess) -> None:
    request = post("/v1/completions", b'{"prompt": "x", "max_tokens": 2}', AUTH, b"x-request-id: req-7\r\n")
    status, headers, _ = exchange(gateway.port, request)
    assert status == 200 and headers["x-request-id"] == "req-7"
    # a stream too (its headers go out before the handler returns)
    stream = post("/v1/completions", b'{"prompt": "x", "max_tokens": 2, "stream": true}', AUTH,
                  b"x-request-id: req-8\r\n")
    status, headers, _ = exchange(gateway.port, stream)
    assert status == 200 and headers["content-type"] == "text/event-stream" and headers["x-request-id"] == "req-8"
    # one that is not a sane id (over 128 characters) is replaced by the request's own id: the
    # 32 hex digits (a UUID4) of the answer's "id"
    status, headers, body = exchange(gateway.port, post("/v1/completions", b'{"prompt": "x", "max_tokens": 2}', AUTH,
                                                        b"x-request-id: " + b"r" * 200 + b"\r\n"))
    assert status == 200 and re.fullmatch(r"[0-9a-f]{12}4[0-9a-f]{3}[89ab][0-9a-f]{15}", headers["x-request-id"])
    assert orjson.loads(body)["id"] == "cmpl-" + headers["x-request-id"]


def test_without_a_request_id_the_answer_has_its_own_id(gateway: GatewayProcess) -> None:
    status, headers, body = exchange(gateway.port, post("/v1/completions", b'{"prompt": "x", "max_tokens": 2}', AUTH))
    assert status == 200 and orjson.loads(body)["id"] == "cmpl-" + headers["x-request-id"]
    # a stream too: its chunks' "id" (read up to the end of the stream: chunked, no Content-Length)
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10.0) as sock:
        sock.sendall(post("/v1/completions", b'{"prompt": "x", "max_tokens": 2, "stream": true}', AUTH))
        raw = b""
        while b"[DONE]" not in raw:
            chunk = sock.recv(65536)
            assert chunk, f"connection closed inside the stream: {raw!r}"
            raw += chunk
    own = re.search(rb"\r\nx-request-id: ([0-9a-f]{32})\r\n", raw, re.IGNORECASE)
    assert own is not None and b"200 OK" in raw.split(b"\r\n", 1)[0]
    ids = set(re.findall(rb'"id":"([^"]+)"', raw))
    assert ids == {b"cmpl-" + own.group(1)}


@pytest.fixture
def limited(tmp_path: Path) -> Iterator[GatewayProcess]:
    process = GatewayProcess(tmp_path, "max_connections=3", "header_timeout_s=0.3", "keepalive_timeout_s=3")
    try:
        yield process
    finally:
        process.kill()


def closed_within(sock: socket.socket, seconds: float) -> float | None:
    """Seconds until the server closed ``sock`` (None if it stayed open ``seconds``)."""
    started = time.monotonic()
    sock.settimeout(seconds)
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return None
    except ConnectionResetError:
        pass
    return time.monotonic() - started


def test_connection_limit_header_timeout_and_idle_keep_alive(limited: GatewayProcess) -> None:
    port = limited.port
    health = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    kept = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
    try:
        for sock in kept:  # each answered: the server holds three open connections
            sock.sendall(health)
            assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        # at the limit a new client is served: the connection idle the longest makes room
        # (was: 503 while idle clients held every slot)
        status, headers, body = exchange(port, health)
        assert status == 200 and body == b'{"status":"ok"}'
        assert closed_within(kept[0], 2.0) is not None  # the oldest idle one, at once
        assert closed_within(kept[1], 0.3) is None  # only that one
        # the other idle keep-alive connections are closed after keepalive_timeout_s (3 s)
        waited = [closed_within(sock, 10.0) for sock in kept[1:]]
        assert all(w is not None for w in waited), waited
    finally:
        for sock in kept:
            sock.close()
    # every connection busy (a request whose body is still arriving): nothing to close, 503
    partial = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"
    busy = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
    try:
        for sock in busy:
            sock.sendall(partial)
        time.sleep(0.2)  # the heads are read: a handler waits for each body (a wait, not an assertion)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:  # sends nothing: no reset
            head, body = read_answer(sock)
        assert head.startswith(b"HTTP/1.1 503 ") and b"Connection: close" in head and b"Retry-After: 1" in head
        assert orjson.loads(body)["error"]["code"] == "too_many_connections"
    finally:
        for sock in busy:
            sock.close()
    # a connection that never completes a request head is closed after header_timeout_s (0.3 s),
    # well before the keep-alive timer (3 s) would
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")  # no blank line: the head never ends
        waited_s = closed_within(sock, 10.0)
        assert waited_s is not None and waited_s < 2.5, waited_s
    assert exchange(port, health)[0] == 200  # room again
    assert "Traceback" not in limited.output


@pytest.mark.parametrize(("setting", "message"), [
    ("api_keys=true", "rxpipe: error: setting api_keys must be a string of comma-separated keys, got True (bool)"),
    ('drain_timeout_s="x"', "rxpipe: error: setting drain_timeout_s must be a number >= 0, got 'x' (str)"),
    ("queue_capacity=2.5", "rxpipe: error: setting queue_capacity must be an integer >= 1, got 2.5 (float)"),
    ("max_model_len=0", "rxpipe: error: setting max_model_len must be an integer >= 1, got 0 (int)"),
])
def test_set_values_are_type_checked_with_a_one_line_error(tmp_path: Path, setting: str, message: str) -> None:
    out = tmp_path / "out.txt"
    with out.open("wb") as stdout:
        code = subprocess.run([sys.executable, "-m", "rxpipe", "run", "pipelines/llm_gateway.py", "--port", "0",
                               "--set", setting], stdout=stdout, stderr=subprocess.STDOUT, cwd=ROOT,
                              timeout=60).returncode
    assert code == 1
    assert out.read_text().splitlines() == [message]


def test_an_exception_let_out_of_a_handler_becomes_openais_json_error() -> None:
    from aiohttp import web
    from aiohttp.test_utils import make_mocked_request

    from rxpipe.gateway._responses import unhandled

    request = make_mocked_request("POST", "/v1/completions")
    bad = unhandled(request, web.HTTPBadRequest())
    assert bad.status == 400
    assert orjson.loads(bad.body)["error"] == {"message": "Bad Request", "type": "invalid_request_error",
                                                "code": "bad_request", "param": None}
    failed = unhandled(request, ValueError("a bug"))
    assert failed.status == 500
    assert orjson.loads(failed.body)["error"]["code"] == "internal_error"


def read_answer(sock: socket.socket) -> tuple[bytes, bytes]:
    """(head, what followed it until the server closed the connection)."""
    raw = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            break
        raw += chunk
    head, _, rest = raw.partition(b"\r\n\r\n")
    return head, rest


def test_expect_100_continue_with_a_body_over_the_limit_gets_413_and_no_100(gateway: GatewayProcess) -> None:
    """The Content-Length is decided on before the body is invited (RFC 9110 §10.1.1)."""
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + AUTH
                     + b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % (2 << 20))
        raw = b""
        while b"request_too_large" not in raw:
            chunk = sock.recv(65536)
            assert chunk, raw
            raw += chunk
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413 ") and b"100 Continue" not in raw, raw
    assert b"Connection: close" in head  # a client may send the body anyway: closed after it
    assert orjson.loads(body)["error"]["code"] == "request_too_large"


@pytest.mark.parametrize("coding, status, code", [
    (b"gzip, chunked", 501, "unsupported_transfer_encoding"),
    (b"deflate,chunked", 501, "unsupported_transfer_encoding"),
    (b"gzip", 400, "bad_http_request"),  # not ending in chunked: no framing at all (the parser's 400)
])
def test_a_transfer_coding_other_than_chunked_is_refused(gateway: GatewayProcess, coding: bytes, status: int,
                                                         code: str) -> None:
    body = orjson.dumps({"prompt": "x", "max_tokens": 2})
    framed = b"%x\r\n%b\r\n0\r\n\r\n" % (len(body), body)  # a plain body, chunked
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + AUTH
                     + b"Transfer-Encoding: " + coding + b"\r\n\r\n" + framed)
        head, rest = read_answer(sock)
    assert int(head.split(b" ", 2)[1]) == status, head  # and the server closed (read_answer returned)
    assert status == 400 or b"Connection: close" in head  # the parser's 400 is an HTTP/1.0 answer
    assert b"Content-Type: application/json" in head
    error = orjson.loads(rest)["error"]
    assert (error["type"], error["code"]) == ("invalid_request_error", code)


def test_a_408_says_connection_close_and_closes(tmp_path: Path) -> None:
    process = GatewayProcess(tmp_path, "body_timeout_s=1", env={"RXPIPE_API_KEYS": KEY})
    try:
        with socket.create_connection(("127.0.0.1", process.port), timeout=10) as sock:
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + AUTH
                         + b"Content-Length: 100\r\n\r\n{\"prompt\": ")
            sent = time.monotonic()
            head, rest = read_answer(sock)
            closed_s = time.monotonic() - sent
    finally:
        process.kill()
    assert head.startswith(b"HTTP/1.1 408 ") and b"Connection: close" in head, head
    assert orjson.loads(rest)["error"]["code"] == "request_timeout"
    assert closed_s < 5.0  # at the 408 (1 s), not after the keep-alive timeout


def test_idle_connections_at_max_connections_do_not_keep_a_new_client_out(tmp_path: Path) -> None:
    """At ``max_connections`` of connections that never sent a request, a new client is served at
    once (the one idle the longest is closed for it), not refused with 503 until the idle ones hit
    ``header_timeout_s``."""
    limit = 1024
    process = GatewayProcess(tmp_path, f"max_connections={limit}", "header_timeout_s=20")
    idle: list[socket.socket] = []
    fds = Path(f"/proc/{process.proc.pid}/fd")
    before = len(list(fds.iterdir()))
    try:
        for _ in range(limit):
            idle.append(socket.create_connection(("127.0.0.1", process.port)))
        deadline = time.monotonic() + 15
        while len(list(fds.iterdir())) < before + limit:  # until the server accepted every one
            assert time.monotonic() < deadline, f"the server did not accept the {limit} connections"
            time.sleep(0.1)
        started, refused = time.monotonic(), 0
        while True:
            with socket.create_connection(("127.0.0.1", process.port), timeout=10) as sock:
                sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
                try:
                    answer = sock.recv(65536)
                except ConnectionResetError:
                    answer = b""
            if answer.startswith(b"HTTP/1.1 200"):
                break
            refused += 1
            assert time.monotonic() - started < 30, answer
            time.sleep(0.05)
        served_s = time.monotonic() - started
        print(f"\nunder {limit} idle connections: a new client served after {served_s:.2f} s ({refused} refused first)")
        assert refused == 0 and served_s < 2.0
        assert closed_within(idle[0], 2.0) is not None  # the oldest made room
    finally:
        for sock in idle:
            sock.close()
        process.kill()
