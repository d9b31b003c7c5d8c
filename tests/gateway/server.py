"""Run ``rxpipe run pipelines/llm_gateway.py`` in a subprocess for tests (output to a file)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
GATEWAY = ROOT / "pipelines" / "llm_gateway.py"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class GatewayProcess:
    """``rxpipe run pipelines/llm_gateway.py --port <free> [args] --set k=v ...`` (or another
    pipeline ``file``); stdout+stderr to a file."""

    def __init__(self, tmp_path: Path, *settings: str, env: dict[str, str] | None = None,
                 args: tuple[str, ...] = (), file: Path = GATEWAY) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = tmp_path / f"gateway-{self.port}.log"
        args = (sys.executable, "-m", "rxpipe", "run", str(file), "--port", str(self.port), *args)
        for setting in settings:
            args += ("--set", setting)
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT, cwd=ROOT,
                                     env={**os.environ, **(env or {})})
        self._wait_ready()

    def _wait_ready(self, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"gateway exited with {self.proc.returncode}: {self.output}")
            if re.search(rf"serving on {re.escape(self.url)}", self.output):
                return
            time.sleep(0.05)
        raise AssertionError(f"gateway did not start within {timeout_s} s: {self.output}")

    @property
    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def rss_bytes(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS")

    def terminate(self) -> int:
        """SIGTERM, then wait (at most 30 s) for the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.wait()

    def wait(self, timeout_s: float = 30.0) -> int:
        """Wait for the process to exit on its own; return its exit code."""
        try:
            return self.proc.wait(timeout=timeout_s)
        finally:
            self._log.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self._log.close()


async def answered(session: Any, url: str) -> dict[str, int]:
    """``/v1/completions`` answers of the gateway at ``url`` by status code, from its metrics
    (``session``: an ``aiohttp.ClientSession``)."""
    async with session.get(url + "/metrics") as response:
        text = await response.text()
    pattern = r'^rxpipe_http_requests_total\{code="(\d+)",route="/v1/completions"\} (\S+)$'
    return {code: int(float(value)) for code, value in re.findall(pattern, text, re.M)}


async def queue_room(session: Any, url: str) -> int:
    """The gateway's ``queue_room`` by ``GET /v1/credit`` (admissions it would take now)."""
    async with session.get(url + "/v1/credit") as response:
        body: dict[str, Any] = await response.json()
    return int(body["queue_room"])
