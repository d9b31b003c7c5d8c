"""The stub OpenAI-compatible server of the OpenAIEngine tests, as fixtures."""

from __future__ import annotations

from typing import Iterator

import pytest

from .openai_stub_server import DEFAULTS, StubServer


@pytest.fixture(scope="module")
def stub_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StubServer]:
    server = StubServer(tmp_path_factory.mktemp("stub"))
    yield server
    server.stop()


@pytest.fixture
def server(stub_process: StubServer) -> StubServer:
    """The shared stub, counters cleared and options back to their defaults."""
    stub_process.control(reset=True, **DEFAULTS)
    return stub_process
