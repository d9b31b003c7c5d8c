"""``start_with(*items)``: the items, then the upstream's (DESIGN §3, "Operators, second round").

Written on :class:`rxpipe.stage.Stage`, demand-driven (``prefetch = None``). The items are
emitted when the stage starts and wait in the kit's output queue for downstream demand; queued
items count against the upstream credit, so the upstream is asked only for the demand left
once they are delivered (the outstanding demand carries over), and its items can only follow
them. The upstream is subscribed at once (nothing is requested of it meanwhile); an error it
signals early waits behind the items (``fail(error, after_queued=True)``), as reactivex's
concatenation signals it after them.
"""

from __future__ import annotations

from typing import Any

from rxpipe.stage import Stage, operator

__all__ = ["start_with_stage"]


class StartWith(Stage):
    prefetch = None
    kind = "start_with"

    def __init__(self, items: tuple[Any, ...]) -> None:
        self.items = items

    def on_start(self) -> None:
        for item in self.items:
            self.emit(item)

    def on_next(self, item: Any) -> None:
        self.emit(item)

    def on_error(self, error: BaseException) -> None:
        self.fail(error, after_queued=True)


#: ``start_with_stage(items, name=None)`` (``rxpipe.operators.start_with`` checks and documents it)
start_with_stage = operator(StartWith)
