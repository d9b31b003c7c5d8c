"""``rxpipe load`` as users run it, against ``rxpipe run pipelines/llm_gateway.py`` in a process."""

from __future__ import annotations

import os
import random
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import orjson
import pytest

from rxpipe.load import FIGURE_PX, arrival_times

from ..gateway.server import ROOT, GatewayProcess, free_port

# An overloaded gateway: 2 engine slots, a queue of 2, ~0.3 s per request.
SETTINGS = ("max_num_seqs=2", "queue_capacity=2", "decode_s_per_seq=0.01", "rate=1000.0")
VLLM_KEYS = ("duration", "completed", "failed", "total_input_tokens", "total_output_tokens", "request_throughput",
             "request_goodput", "output_throughput", "total_token_throughput",
             *(f"{stat}_{name}_ms" for name in ("ttft", "tpot", "itl", "e2el")
               for stat in ("mean", "median", "std", "p99")))


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    process = GatewayProcess(tmp_path_factory.mktemp("load-gateway"), *SETTINGS)
    try:
        yield process
    finally:
        process.kill()


def load(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rxpipe", "load", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env=env)


def png_size(path: Path) -> tuple[int, int]:
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n" and header[12:16] == b"IHDR"
    width, height = struct.unpack(">II", header[16:24])
    return int(width), int(height)


def test_load_at_a_fixed_seed_accounts_for_every_request(gateway: GatewayProcess, tmp_path: Path) -> None:
    out, png = tmp_path / "out.json", tmp_path / "out.png"
    run = load(gateway.url, "--rate", "40", "--duration", "3", "--stream", "--max-tokens", "16", "--seed", "3",
               "--goodput", "ttft:2000", "e2el:5000", "--json", str(out), "--plot", str(png))
    assert run.returncode == 0, run.stderr
    figures: dict[str, Any] = orjson.loads(out.read_bytes())
    sent = len(arrival_times(3.0, (40.0, 40.0), 1.0, random.Random(3)))
    assert figures["sent"] == sent
    outcomes = figures["outcomes"]
    assert outcomes["2xx"] + outcomes["429"] + outcomes["503"] + outcomes["other"] + outcomes["timeout"] == sent
    assert outcomes["2xx"] == figures["completed"] > 0 and outcomes["429"] > 0  # it was overloaded
    assert sum(figures["refusals"]["429"].values()) == outcomes["429"]  # no retries: one attempt each
    assert set(figures["refusals"]["429"]) <= {"queue_full", "rate_limited", "deadline"}
    for key in VLLM_KEYS:
        assert isinstance(figures[key], (int, float)), key
    for key in ("input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times", "errors"):
        assert len(figures[key]) == sent, key  # vLLM's per-request arrays
    assert figures["request_goodput"] <= figures["request_throughput"]
    assert [p["t"] for p in figures["series"]] == [0, 1, 2]  # one point per second
    assert sum(p["offered"] for p in figures["series"]) == sent
    scraped = [p for p in figures["series"] if p["queue"] is not None]  # read from /metrics (a slow scrape: null)
    # queue (2) + the batcher's two batches of 1 + engine waiting (<= max_num_seqs 2); running <= 2 slots
    assert scraped and all(0 <= p["queue"] <= 2 + 2 + 2 and 0 <= p["running"] <= 2 for p in scraped)
    assert set(figures["definitions"]) >= {"ttft", "tpot", "itl", "e2el", "series", "shed_fraction"}
    assert png_size(png) == FIGURE_PX
    assert "Successful requests:" in run.stdout and "Mean TTFT (ms):" in run.stdout


def test_without_matplotlib_plot_says_how_to_install_and_the_rest_works(gateway: GatewayProcess,
                                                                         tmp_path: Path) -> None:
    blocker = tmp_path / "site" / "matplotlib"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('matplotlib is blocked for this test')\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    png, out = tmp_path / "no.png", tmp_path / "out.json"
    run = load(gateway.url, "--rate", "5", "--duration", "1", "--plot", str(png), "--json", str(out), env=env)
    assert run.returncode == 0, run.stderr
    # rxpipe is installed from the checkout (README): "rxpipe" on PyPI is an unrelated project
    assert "pip install matplotlib (or, in the rxpipe checkout: pip install -e '.[plot]')" in run.stderr
    assert "rxpipe[plot]" not in run.stderr
    assert not png.exists() and orjson.loads(out.read_bytes())["sent"] == len(
        arrival_times(1.0, (5.0, 5.0), 1.0, random.Random(0)))


def test_usage_errors() -> None:
    for args, message in ((("--rate", "2", "--ramp", "1:5"), "exclude each other"),
                          (("ttft:5",), "put it after --goodput"),
                          (("--goodput", "ttft:5"), "need --stream"),
                          (("--ramp", "5"), "START:END"),
                          (("--goodput", "speed:5", "--stream"), "NAME:MS")):
        run = load(*args)
        assert run.returncode == 2 and message in run.stderr, (args, run.stderr)


def test_a_stopped_server_is_said_to_be_unreachable_not_a_missing_model() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    run = load(url, "--duration", "1", "--quiet")
    assert run.returncode == 1 and run.stderr.splitlines() == [
        f"rxpipe load: error: cannot reach {url} (connection refused): is the server running? (e.g. rxpipe run "
        f"pipelines/llm_gateway.py, then rxpipe load {url})"]
