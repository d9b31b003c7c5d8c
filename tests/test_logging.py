"""``rxpipe run``'s logging, in real processes: the start line, levels, JSON lines, the access log."""

from __future__ import annotations

import json
import logging
import re
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from rxpipe.logs import JSONFormatter, TextFormatter, configure_logging, event, public_url

from .gateway.server import GatewayProcess, free_port

TIME = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}"
SECRET = "sk-secret-4b1d"


def post(url: str, body: dict[str, object], key: str | None = None) -> tuple[int, dict[str, object]]:
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    request = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(), headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def lines_of(gateway: GatewayProcess, needle: str) -> list[str]:
    return [line for line in gateway.output.splitlines() if needle in line]


def test_the_start_line_names_url_pipeline_engine_metrics_port_and_changed_settings_never_a_key(
        tmp_path: Path) -> None:
    metrics_port = free_port()
    gateway = GatewayProcess(tmp_path, "queue_capacity=20", "max_num_seqs=4", "model=\"sim\"", f"api_keys={SECRET}",
                             args=("--metrics-port", str(metrics_port)))
    try:
        (start,) = lines_of(gateway, "serving on")
        assert re.fullmatch(
            rf"{TIME} INFO rxpipe: llm_gateway serving on {re.escape(gateway.url)}; engines: sim \(SimulatedEngine\); "
            rf"auth on \(1 key\); metrics port {metrics_port}; settings: queue_capacity=20 max_num_seqs=4 "
            r"api_keys=\(hidden\)",
            start), start
        assert not lines_of(gateway, "DEBUG")
    finally:
        assert gateway.terminate() == 0
    output = gateway.output
    assert SECRET not in output
    # drain and stop are logged too, one line each
    assert len(lines_of(gateway, "SIGTERM: draining in-flight work")) == 1
    assert len(re.findall(rf"^{TIME} INFO rxpipe: llm_gateway stopped \(\d+\.\d s to drain\)$", output, re.M)) == 1


def test_log_level_debug_adds_the_settings_in_force_and_json_lines_carry_fields(tmp_path: Path) -> None:
    gateway = GatewayProcess(tmp_path, "queue_capacity=7", f"api_keys={SECRET}",
                             args=("--log-level", "debug", "--log-format", "json"))
    try:
        records = [json.loads(line) for line in gateway.output.splitlines() if line.startswith("{")]
    finally:
        gateway.terminate()
    assert SECRET not in gateway.output
    (start,) = [r for r in records if "serving on" in r["message"]]
    assert (start["level"], start["logger"], start["pipeline"], start["url"]) == (
        "info", "rxpipe", "llm_gateway", gateway.url)
    assert start["engines"] == ["sim (SimulatedEngine)"] and start["auth_keys"] == 1
    assert start["settings"] == {"queue_capacity": 7, "api_keys": "(hidden)"}
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}[+-]\d\d:\d\d", start["time"])
    (every,) = [r for r in records if r["message"].startswith("settings in force:")]
    assert every["level"] == "debug"
    assert every["settings"]["queue_capacity"] == 7 and every["settings"]["max_num_seqs"] == 256
    assert every["settings"]["api_keys"] == "(hidden)"


def test_the_access_log_has_one_line_per_request_and_never_a_key_or_a_prompt(tmp_path: Path) -> None:
    prompt = "the-prompt-text-e9f2"
    gateway = GatewayProcess(tmp_path, "max_num_seqs=4", f"api_keys={SECRET}", args=("--access-log",))
    try:
        assert post(gateway.url, {"model": "sim", "prompt": prompt, "max_tokens": 16}, SECRET)[0] == 200
        assert post(gateway.url, {"model": "sim", "prompt": prompt, "max_tokens": 16}, "wrong-key")[0] == 401
        assert post(gateway.url, {"model": "nope", "prompt": prompt, "max_tokens": 4}, SECRET)[0] == 404
    finally:
        gateway.terminate()
    access = lines_of(gateway, "rxpipe.access")
    assert len(access) == 3, gateway.output
    ok, unauthorized, not_found = access
    assert re.fullmatch(
        rf"{TIME} INFO rxpipe.access: POST /v1/completions 200 method=POST route=/v1/completions status=200 "
        r"stream=False prompt_tokens=\d+ completion_tokens=16 finish_reason=length queue_s=[0-9.e-]+ "
        r"total_s=[0-9.e-]+ request_id=[0-9a-f]{32}", ok), ok
    assert " status=401 code=invalid_api_key " in unauthorized and "prompt_tokens" not in unauthorized
    assert " status=404 code=model_not_found " in not_found
    assert SECRET not in gateway.output and "wrong-key" not in gateway.output and prompt not in gateway.output


def test_without_access_log_no_request_is_logged(tmp_path: Path) -> None:
    gateway = GatewayProcess(tmp_path)
    try:
        assert post(gateway.url, {"model": "sim", "prompt": "x", "max_tokens": 2})[0] == 200
    finally:
        gateway.terminate()
    assert not lines_of(gateway, "rxpipe.access")


def test_the_access_log_names_the_tenant(tmp_path: Path) -> None:
    tenants = tmp_path / "tenants.json"
    tenants.write_text(json.dumps({"acme": {"keys": [SECRET]}, "beta": {"keys": ["sk-beta"]}}))
    gateway = GatewayProcess(tmp_path, f"tenants_file={tenants}", args=("--access-log",))
    try:
        assert post(gateway.url, {"model": "sim", "prompt": "x", "max_tokens": 2}, SECRET)[0] == 200
        bad = {"model": "sim", "prompt": "x", "max_tokens": 2, "temperature": 9}
        assert post(gateway.url, bad, "sk-beta")[0] == 400
    finally:
        gateway.terminate()
    ok, bad = lines_of(gateway, "rxpipe.access")
    assert " status=200 tenant=acme " in ok
    assert " status=400 code=" in bad and " tenant=beta " in bad
    assert SECRET not in gateway.output


def test_the_start_line_says_when_auth_is_on_and_with_how_many_keys(tmp_path: Path) -> None:
    open_gateway = GatewayProcess(tmp_path)
    from_env = GatewayProcess(tmp_path, env={"RXPIPE_API_KEYS": f"{SECRET},sk-other"})
    tenants = tmp_path / "tenants.json"
    tenants.write_text(json.dumps({"acme": {"keys": ["sk-a1", "sk-a2"]}, "beta": {"keys": ["sk-b"]}}))
    with_tenants = GatewayProcess(tmp_path, f"tenants_file={tenants}", "api_keys=sk-a1")
    for gateway in (open_gateway, from_env, with_tenants):
        gateway.terminate()
    (line,) = lines_of(open_gateway, "serving on")
    assert "auth" not in line
    (line,) = lines_of(from_env, "serving on")
    assert "; engines: sim (SimulatedEngine); auth on (2 keys)" in line and SECRET not in from_env.output
    (line,) = lines_of(with_tenants, "serving on")  # api_keys and the tenants' keys, each once
    assert "; engines: sim (SimulatedEngine); auth on (3 keys); settings: " in line


def test_the_access_log_has_a_line_for_a_request_its_client_closed(tmp_path: Path) -> None:
    # a long answer (200 tokens of 50 ms steps); the client leaves once it runs on the engine
    gateway = GatewayProcess(tmp_path, "step_overhead_s=0.05", args=("--access-log",))
    try:
        body = json.dumps({"model": "sim", "prompt": "x", "max_tokens": 200}).encode()
        client = socket.create_connection(("127.0.0.1", gateway.port), timeout=10)
        client.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       b"x-request-id: leaving-client-1\r\n"
                       b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        running = 'rxpipe_engine_running_seqs{engine="sim"} 1.0'
        deadline = time.monotonic() + 30
        while running not in urllib.request.urlopen(gateway.url + "/metrics", timeout=10).read().decode():
            assert time.monotonic() < deadline, "the request never ran"
            time.sleep(0.02)
        client.close()
        deadline = time.monotonic() + 30
        while not lines_of(gateway, "rxpipe.access"):
            assert time.monotonic() < deadline, gateway.output
            time.sleep(0.02)
    finally:
        gateway.terminate()
    (line,) = lines_of(gateway, "rxpipe.access")
    assert re.fullmatch(rf"{TIME} INFO rxpipe.access: POST /v1/completions 499 method=POST route=/v1/completions "
                        r"status=499 stream=False total_s=[0-9.e-]+ request_id=leaving-client-1", line), line


def test_embedding_keeps_the_users_logging_configuration() -> None:
    import rxpipe.cli  # noqa: F401  (importing the CLI configures nothing)
    from rxpipe import gateway, runtime  # noqa: F401

    assert not [h for h in logging.getLogger().handlers if getattr(h, "_rxpipe", False)]
    assert logging.getLogger("rxpipe").handlers == [] and logging.getLogger("rxpipe.access").level == logging.NOTSET


def test_formatters_and_configure(capsys: pytest.CaptureFixture[str]) -> None:
    record = logging.LogRecord("rxpipe.engine", logging.WARNING, __file__, 1, "backend %s down", ("b0",), None)
    record.fields = {"engine": "b0", "wait_s": 1.5, "note": "two words"}
    text = TextFormatter().format(record)
    assert re.fullmatch(rf"{TIME} WARNING rxpipe.engine: backend b0 down engine=b0 wait_s=1.5 note=\"two words\"", text)
    doc = json.loads(JSONFormatter().format(record))
    assert (doc["level"], doc["logger"], doc["message"], doc["engine"], doc["wait_s"]) == (
        "warning", "rxpipe.engine", "backend b0 down", "b0", 1.5)
    root = logging.getLogger()
    saved = root.level, list(root.handlers)
    try:
        first = configure_logging("warning", "text")
        second = configure_logging("debug", "json")
        assert first not in root.handlers and second in root.handlers and root.level == logging.DEBUG
        event(logging.getLogger("rxpipe.test"), logging.INFO, "hello", answer=42)
        assert json.loads(capsys.readouterr().err)["answer"] == 42
        with pytest.raises(ValueError, match="log level must be one of"):
            configure_logging("loud")
        with pytest.raises(ValueError, match="log format must be one of"):
            configure_logging("info", "xml")
    finally:
        root.handlers[:] = saved[1]
        root.setLevel(saved[0])
    assert public_url("redis://user:pw@host:6380/1") == "redis://user@host:6380/1"
    assert public_url("http://127.0.0.1:8001/v1") == "http://127.0.0.1:8001/v1"


def test_a_busy_port_is_one_line_naming_the_port(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        import subprocess
        import sys

        out = tmp_path / "out.txt"
        with out.open("wb") as stdout:
            code = subprocess.run([sys.executable, "-m", "rxpipe", "run", "pipelines/llm_gateway.py", "--port",
                                   str(port)], stdout=stdout, stderr=subprocess.STDOUT,
                                  cwd=Path(__file__).resolve().parents[1], timeout=60).returncode
    assert code == 1
    assert out.read_text().splitlines() == [
        f"rxpipe: error: cannot listen on 127.0.0.1:{port}: the address is in use (another server?); "
        f"pick another with --port"]
