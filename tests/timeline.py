"""``Timeline``: a TestSubscriber that also records when each signal came, for the timed source
tests (tests/test_loop_sources.py, tests/test_generate_with_relative_time.py)."""

from __future__ import annotations

import asyncio
from typing import Any

from rxpipe.testing import TestSubscriber


class Timeline(TestSubscriber[Any]):
    """A TestSubscriber that also records when each signal came (loop time): ``at`` is a list of
    ``(seconds, item)``, the completion as ``"|"``."""

    __test__ = False

    def __init__(self, initial_request: int = 0) -> None:
        super().__init__(initial_request)
        self.at: list[tuple[float, Any]] = []

    def on_next(self, item: Any) -> None:
        self.at.append((asyncio.get_running_loop().time(), item))
        super().on_next(item)

    def on_complete(self) -> None:
        self.at.append((asyncio.get_running_loop().time(), "|"))
        super().on_complete()
