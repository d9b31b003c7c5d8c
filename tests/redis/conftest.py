"""Fixtures of the Redis transport tests: a real ``redis-server`` per test, and process cleanup."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Iterator

import pytest

from tests.installed import missing

from .servers import PipelineProcess, RedisServer


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    if shutil.which("redis-server") is None:
        missing("Debian's redis-server is not installed here (.ci/run installs it: apt-get install redis-server)")
    server = RedisServer(tmp_path)
    try:
        yield server
    finally:
        server.kill()


class Processes:
    """Starts ``rxpipe run`` processes for a test and stops every one of them afterwards."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.started: list[PipelineProcess] = []

    def start(self, file: str, *settings: str, **kwargs: object) -> PipelineProcess:
        process = PipelineProcess(self.tmp_path, file, *settings, **kwargs)  # type: ignore[arg-type]
        self.started.append(process)
        return process

    def stop_all(self) -> None:
        for process in reversed(self.started):
            process.kill9()


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    procs = Processes(tmp_path)
    try:
        yield procs
    finally:
        procs.stop_all()
