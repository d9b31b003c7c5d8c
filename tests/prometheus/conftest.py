"""A real Prometheus (Debian's ``prometheus``) scraping a real ``rxpipe run pipelines/llm_gateway.py``
under ``rxpipe load``, shared by this package's tests. Skipped only when the binary is missing
(``.ci/run`` installs it)."""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import orjson
import pytest

from tests.installed import missing

from ..gateway.server import ROOT, GatewayProcess, free_port

# Overloaded on purpose (4 slots, a queue of 4, ~0.1 s per request, 30 req/s offered): every
# family then has samples, 429s included.
SETTINGS = ("max_num_seqs=4", "queue_capacity=4", "decode_s_per_seq=0.005")
LOAD = ("--rate", "30", "--duration", "40", "--stream", "--max-tokens", "16", "--quiet", "--no-scrape")
#: the histogram query the issue names; it has a value once two scrapes saw requests finish
P99 = "histogram_quantile(0.99, sum by (le) (rate(rxpipe_request_duration_seconds_bucket[30s])))"


class Prometheus:
    """A prometheus process on loopback with a temporary config and storage."""

    def __init__(self, tmp: Path, target: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = tmp / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
            f"scrape_configs:\n  - job_name: rxpipe\n    static_configs:\n      - targets: ['{target}']\n")
        self.log_path = tmp / "prometheus.log"
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"], stdout=self._log, stderr=subprocess.STDOUT)

    def get(self, path: str, **params: str) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url}{path}{query}", timeout=10) as response:
            return orjson.loads(response.read())

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector of ``expr`` (Prometheus HTTP API ``/api/v1/query``)."""
        answer = self.get("/api/v1/query", query=expr)
        assert answer["status"] == "success", answer
        return list(answer["data"]["result"])

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log_path.read_text(errors="replace")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"prometheus not ready in {timeout_s} s: {self.log_path.read_text(errors='replace')}")

    def wait_for(self, expr: str, timeout_s: float = 40.0) -> list[dict[str, Any]]:
        """Poll until ``expr`` returns a sample with a finite value."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            result = self.query(expr)
            if any(math.isfinite(float(sample["value"][1])) for sample in result):
                return result
            time.sleep(0.25)
        raise AssertionError(f"{expr} had no finite sample within {timeout_s} s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._log.close()


class Stack:
    """The gateway, the load on it, and the Prometheus scraping it."""

    def __init__(self, gateway: GatewayProcess, prometheus: Prometheus) -> None:
        self.gateway = gateway
        self.prometheus = prometheus


@pytest.fixture(scope="package")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    if shutil.which("prometheus") is None:
        missing("Debian's prometheus is not installed here (.ci/run installs it: apt-get install prometheus)")
    tmp = tmp_path_factory.mktemp("prometheus")
    gateway = GatewayProcess(tmp, *SETTINGS)
    load = subprocess.Popen([sys.executable, "-m", "rxpipe", "load", gateway.url, *LOAD], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    prometheus = Prometheus(tmp, f"127.0.0.1:{gateway.port}")
    try:
        prometheus.wait_ready()
        # two scrapes of the target, and requests finishing between them
        prometheus.wait_for('count_over_time(up{job="rxpipe"}[1m]) >= 2')
        prometheus.wait_for(P99)
        yield Stack(gateway, prometheus)
    finally:
        prometheus.stop()
        if load.poll() is None:
            load.kill()
        load.wait(timeout=10)
        gateway.kill()
