"""User stages shared by the Stage API tests and the check_operator tests: written as a user would,
with public names only."""

from __future__ import annotations

from typing import Any

from rxpipe import UNBOUNDED
from rxpipe.stage import Stage


class Debounce(Stage):
    """Emit an item once ``duration_s`` passed without another."""

    prefetch = UNBOUNDED

    def __init__(self, duration_s: float) -> None:
        if duration_s <= 0:
            raise ValueError("duration_s must be > 0")
        self.duration_s, self.latest = duration_s, Stage.NOTHING

    def on_next(self, item: Any) -> None:
        if self.latest is not Stage.NOTHING:
            self.drop(self.latest, "debounced")
        self.latest = item
        self.start_timer("quiet", self.duration_s)

    def on_timer(self, key: Any) -> None:
        if self.demanded:
            self.emit(self.latest)
        else:
            self.drop(self.latest, "no_demand")
        self.latest = Stage.NOTHING

    def on_complete(self) -> None:
        if self.latest is not Stage.NOTHING:
            self.emit(self.latest)
        self.complete()
