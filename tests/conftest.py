import logging

import pytest

# tests.engines.openai_stub_fixtures: the stub OpenAI backend (fixtures stub, stub_process) for every directory
pytest_plugins = ["rxpipe.testing.pytest_plugin", "tests.engines.openai_stub_fixtures"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "settings(*pairs): --set key=value pairs for the gateway process fixture")


class ErrorLog:
    """Records logged at ERROR or above on the ``rxpipe`` logger during the test."""

    def __init__(self, caplog: pytest.LogCaptureFixture) -> None:
        self._caplog = caplog

    @property
    def records(self) -> list[logging.LogRecord]:
        return [r for r in self._caplog.records if r.levelno >= logging.ERROR and r.name.startswith("rxpipe")]

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int) -> logging.LogRecord:
        return self.records[index]


@pytest.fixture
def rx_errors(caplog: pytest.LogCaptureFixture) -> ErrorLog:
    caplog.set_level(logging.ERROR, logger="rxpipe")
    return ErrorLog(caplog)
