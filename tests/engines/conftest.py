"""The OpenAIEngine tests' name for the shared stub backend (``openai_stub_fixtures.py``)."""

from __future__ import annotations

import pytest

from .openai_stub_server import StubServer


@pytest.fixture
def server(stub: StubServer) -> StubServer:
    """The module's stub, counters cleared and options back to their defaults (``stub``)."""
    return stub
