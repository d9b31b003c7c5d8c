"""The stub OpenAI-compatible backend (``openai_stub_server.py``) as pytest fixtures, for every test
directory: ``tests/conftest.py`` registers this module as a plugin. A test module asking for either
gets its own stub process (module scope); ``stub`` is the one to ask for in a test."""

from __future__ import annotations

from typing import Iterator

import pytest

from .openai_stub_server import DEFAULTS, StubServer


@pytest.fixture(scope="module")
def stub_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StubServer]:
    """The test module's stub server (a subprocess), killed after the module's last test."""
    server = StubServer(tmp_path_factory.mktemp("stub"))
    yield server
    server.stop()


@pytest.fixture
def stub(stub_process: StubServer) -> StubServer:
    """The module's stub, counters cleared and options back to their defaults."""
    stub_process.control(reset=True, **DEFAULTS)
    return stub_process
