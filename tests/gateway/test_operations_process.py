"""Operating a gateway, in real processes: SIGHUP with and without a tenants file, the reserved
tenant name, and a request no tenant limit can ever admit (the openai SDK must not retry it)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.engines.openai_stub_server import StubServer

from .server import ROOT, GatewayProcess

ROUTER = ROOT / "pipelines" / "llm_router.py"


def stream(url: str, max_tokens: int, out: list[bytes]) -> None:
    body = {"model": "sim", "prompt": "tell me", "max_tokens": max_tokens, "stream": True}
    request = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        out.append(response.read())


def complete(url: str, key: str | None = None) -> int:
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    body = {"model": "sim", "prompt": "x", "max_tokens": 2}
    request = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(), headers=headers)
    with urllib.request.urlopen(request, timeout=30) as response:
        return int(response.status)


def test_sighup_without_a_tenants_file_is_ignored_with_a_log_line_and_a_stream_completes(tmp_path: Path) -> None:
    # 40 tokens at 50 ms a step: a stream of about 2 s, SIGHUP'd in the middle
    gateway = GatewayProcess(tmp_path, "step_overhead_s=0.05")
    try:
        out: list[bytes] = []
        reader = threading.Thread(target=stream, args=(gateway.url, 40, out))
        reader.start()
        time.sleep(0.5)
        gateway.proc.send_signal(signal.SIGHUP)
        time.sleep(0.2)
        assert gateway.proc.poll() is None  # alive (SIGHUP's default action ends a process: exit 129)
        reader.join(30)
        events = out[0].decode().split("\n\n")
        assert events[-2:] == ["data: [DONE]", ""] and "error" not in out[0].decode()
        assert sum(1 for e in events if e.startswith("data: {")) == 41  # 40 tokens, then the final chunk
        assert complete(gateway.url) == 200
    finally:
        assert gateway.terminate() == 0
    (line,) = [line for line in gateway.output.splitlines() if "SIGHUP" in line]
    assert line.endswith("INFO rxpipe: SIGHUP: nothing to reload (no tenants_file); ignored")


def test_sighup_keeps_a_router_without_a_tenants_file_serving(tmp_path: Path) -> None:
    stub = StubServer(tmp_path)
    router = GatewayProcess(tmp_path, f"backends={stub.url}", "model=sim", file=ROUTER)
    try:
        router.proc.send_signal(signal.SIGHUP)
        time.sleep(0.3)
        assert router.proc.poll() is None and complete(router.url) == 200
    finally:
        assert router.terminate() == 0
        stub.stop()
    assert "SIGHUP: nothing to reload (no tenants_file); ignored" in router.output


def test_sighup_reloads_a_tenants_file_and_says_so(tmp_path: Path) -> None:
    tenants = tmp_path / "tenants.json"
    tenants.write_text(json.dumps({"acme": {"keys": ["sk-acme"]}}))
    gateway = GatewayProcess(tmp_path, f"tenants_file={tenants}")
    try:
        with pytest.raises(urllib.error.HTTPError):  # not a key yet
            complete(gateway.url, "sk-new")
        tenants.write_text(json.dumps({"acme": {"keys": ["sk-acme"]}, "beta": {"keys": ["sk-new"]}}))
        gateway.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while "reloaded" not in gateway.output:
            assert time.monotonic() < deadline, gateway.output
            time.sleep(0.05)
        assert complete(gateway.url, "sk-new") == 200
        tenants.write_text(json.dumps({"other": {}}))  # a bad file: logged, the previous one stays
        gateway.proc.send_signal(signal.SIGHUP)
        while "not reloaded" not in gateway.output:
            assert time.monotonic() < deadline, gateway.output
            time.sleep(0.05)
        assert complete(gateway.url, "sk-new") == 200
    finally:
        assert gateway.terminate() == 0
    assert re.search(rf"INFO rxpipe.gateway: tenants file {re.escape(str(tenants))} reloaded: 3 tenants$",
                     gateway.output, re.M)
    assert re.search(r"ERROR rxpipe.gateway: tenants file not reloaded, the previous one stays in force: .*tenant "
                     r"'other': the name 'other' is reserved", gateway.output)


def test_a_tenant_named_other_is_refused_at_load(tmp_path: Path) -> None:
    tenants = tmp_path / "tenants.json"
    tenants.write_text(json.dumps({"acme": {}, "other": {"weight": 2}}))
    out = tmp_path / "out.txt"
    with out.open("wb") as stdout:
        code = subprocess.run([sys.executable, "-m", "rxpipe", "run", "pipelines/llm_gateway.py", "--port", "0",
                               "--set", f"tenants_file={tenants}"], stdout=stdout, stderr=subprocess.STDOUT,
                              cwd=ROOT, timeout=60).returncode
    assert code == 1
    assert out.read_text().splitlines() == [
        f"rxpipe: error: setting tenants_file: {tenants}: tenant 'other': the name 'other' is reserved (metrics "
        f"label every unconfigured caller 'other'); give this tenant another name"]


def test_a_request_over_its_tenants_whole_tpm_is_a_final_400_the_openai_sdk_does_not_retry(tmp_path: Path) -> None:
    openai = pytest.importorskip("openai")
    tenants = tmp_path / "tenants.json"
    tenants.write_text(json.dumps({"hobby": {"keys": ["sk-hobby"], "tpm": 1000}}))
    gateway = GatewayProcess(tmp_path, f"tenants_file={tenants}", args=("--access-log",))
    try:
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="sk-hobby", max_retries=3)
        started = time.monotonic()
        with pytest.raises(openai.BadRequestError) as info:
            client.completions.create(model="sim", prompt="hello", max_tokens=2000)
        assert time.monotonic() - started < 2.0  # no retry, no Retry-After wait
        error = info.value.body
        assert error["code"] == "request_over_tpm" and error["param"] == "max_tokens"
        assert re.fullmatch(r"this request needs (\d+) tokens \(prompt (\d+) \+ max_tokens 2000\), more than tenant "
                            r"'hobby''s limit of 1000 tokens per minute: it can never be admitted; lower max_tokens "
                            r"\(to at most \d+\)", error["message"]), error["message"]
        assert client.completions.create(model="sim", prompt="hello", max_tokens=20).choices[0].text
        client.close()
    finally:
        gateway.terminate()
    access = [line for line in gateway.output.splitlines() if "rxpipe.access" in line]
    assert [re.search(r" status=(\d+)", line).group(1) for line in access] == ["400", "200"]  # type: ignore[union-attr]
