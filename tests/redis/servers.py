"""Real processes for the Redis transport tests: ``redis-server`` and ``rxpipe run`` pipelines.

Every process writes to a file under the test's tmp_path (never an unread pipe) and is stopped
by the test's fixtures.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[2]
PIPELINES = ROOT / "pipelines"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServerProcess:
    """A broker process on a free loopback port with its data in ``<tmp>/<name>``: ``start()``
    waits until it answers, ``kill()`` is a crash (SIGKILL), ``start()`` again brings it back on
    the same port with the same data. Subclasses give the command line and the readiness probe."""

    name = "server"

    def __init__(self, tmp_path: Path, binary: str) -> None:
        self.binary = binary
        self.port = free_port()
        self.dir = tmp_path / self.name
        self.dir.mkdir()
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def command(self) -> list[str]:
        raise NotImplementedError

    def answers(self, sock: socket.socket) -> bool:
        raise NotImplementedError

    def start(self, timeout_s: float = 15.0) -> None:
        assert self.proc is None, "already running"
        self.starts += 1
        log = (self.dir / f"{self.name}-{self.starts}.log").open("wb")
        self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.name} exited with {self.proc.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                    if self.answers(sock):
                        return
            except OSError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"{self.name} did not answer within {timeout_s} s")

    @contextlib.contextmanager
    def frozen(self) -> Iterator[None]:
        """SIGSTOP for the block, SIGCONT after it: a broker that answers nothing meanwhile and
        loses nothing (no command completes: no client learns anything new from it)."""
        assert self.proc is not None, "not running"
        self.proc.send_signal(signal.SIGSTOP)
        try:
            yield
        finally:
            self.proc.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL (a crash): what was acknowledged is on disk."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


class RedisServer(ServerProcess):
    """``redis-server`` on a free loopback port with ``--appendonly yes --appendfsync always`` in
    ``<tmp>/redis`` (every acknowledged write is on disk: a restart loses nothing)."""

    name = "redis"

    def __init__(self, tmp_path: Path) -> None:
        binary = shutil.which("redis-server")
        assert binary is not None, "redis-server is not installed (.ci/run installs Debian's package)"
        super().__init__(tmp_path, binary)
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.start()

    def command(self) -> list[str]:
        return [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "yes",
                "--appendfsync", "always", "--dir", str(self.dir), "--protected-mode", "no"]

    def answers(self, sock: socket.socket) -> bool:
        sock.sendall(b"PING\r\n")
        return sock.recv(64).startswith(b"+PONG")


class PipelineProcess:
    """``rxpipe run pipelines/<file> [--port P] --set k=v ...``; waits for its "serving on" line."""

    def __init__(self, tmp_path: Path, file: str, *settings: str, port: int | None = None,
                 metrics_port: int | None = None, wait: bool = True, env: dict[str, str] | None = None) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}" if port is not None else None
        self.metrics_port = metrics_port
        self.log_path = tmp_path / f"{file.removesuffix('.py')}-{time.monotonic_ns()}.log"
        args = [sys.executable, "-m", "rxpipe", "run", str(PIPELINES / file)]  # on uvloop, the default
        if port is not None:
            args += ["--port", str(port)]
        if metrics_port is not None:
            args += ["--metrics-port", str(metrics_port)]
        for setting in settings:
            args += ["--set", setting]
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                                         env={**os.environ, **(env or {})})
        if wait:
            self.wait_ready()

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.log_path.name} exited with {self.proc.returncode}: {self.output}")
            if re.search(r"serving on \S+", self.output):
                return
            time.sleep(0.05)
        raise AssertionError(f"{self.log_path.name} did not start within {timeout_s} s: {self.output}")

    @property
    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill9(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> int | None:
        """SIGTERM (drain), then SIGKILL after 15 s."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        return self.proc.returncode
