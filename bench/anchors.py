"""The field's gateways the benchmarks compare against, installed from PyPI, and the pinned server
processes they (and rxpipe) run as. Shared by ``bench/routing.py`` and ``bench/peers.py``.

Each anchor gets a venv of its own under the benchmark's work dir (``venv-ARM``), made on first
use and never in the repository: ``smg`` (SGLang's model gateway, Rust), ``vllm-router`` (Rust)
and ``litellm`` (``litellm[proxy]``, the LiteLLM proxy, Python).
"""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.serving import _pin  # noqa: E402

#: arm -> (pip requirement, console script)
ANCHORS = {"smg": ("smg", "smg"), "vllm-router": ("vllm-router", "vllm-router"),
           "litellm": ("litellm[proxy]", "litellm")}


def anchor_binary(arm: str, work: Path) -> Path:
    """The console script of ``arm`` (a key of :data:`ANCHORS`) in its own venv under ``work``,
    installed from PyPI on first use. Raises ``subprocess.CalledProcessError`` when pip fails
    (pip's output goes to ``work/ARM-install.log``)."""
    requirement, script = ANCHORS[arm]
    venv = work / f"venv-{arm}"
    binary = venv / "bin" / script
    if not binary.exists():
        work.mkdir(parents=True, exist_ok=True)
        with (work / f"{arm}-install.log").open("wb") as log:
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, stdout=log, stderr=log)
            subprocess.run([str(venv / "bin" / "pip"), "install", "-q", requirement], check=True, stdout=log,
                           stderr=log)
    return binary


def install_anchors(arms: list[str], work: Path) -> dict[str, str]:
    """Install every anchor among ``arms`` (see :func:`anchor_binary`); returns arm -> why it
    could not be installed, for those that failed (the bench runs without them and says so)."""
    failed: dict[str, str] = {}
    for arm in arms:
        if arm in ANCHORS:
            try:
                anchor_binary(arm, work)
            except (subprocess.CalledProcessError, OSError) as error:
                failed[arm] = f"install failed ({error}); see {work / (arm + '-install.log')}"
    return failed


def wait_http(url: str, proc: subprocess.Popen[bytes], log: Path, timeout_s: float = 60.0) -> None:
    """Wait until ``url`` answers below 500; RuntimeError with the log's tail when ``proc`` exits
    or ``timeout_s`` passes first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"exited with {proc.returncode}: {log.read_text(errors='replace')[-2000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status < 500:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"no answer from {url} within {timeout_s} s: {log.read_text(errors='replace')[-2000:]}")


class Proc:
    """A server process pinned to ``core`` (``taskset``, when there are two cores), its output to
    ``log``; ready once ``url + ready_path`` answers (within ``timeout_s``)."""

    def __init__(self, args: list[str], core: int, log: Path, url: str, ready_path: str, *,
                 env: dict[str, str] | None = None, timeout_s: float = 60.0) -> None:
        self.log = log
        self.url = url
        self._out = log.open("wb")
        self.proc = subprocess.Popen(_pin(core) + args, stdout=self._out, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
        try:
            wait_http(url + ready_path, self.proc, log, timeout_s)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """SIGTERM, SIGKILL after 10 s."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._out.close()
