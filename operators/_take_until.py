"""``take_until(other)``: the upstream's items until ``other`` emits (DESIGN §3, "Operators,
second round").

Written on :class:`rxpipe.stage.Stage`: demand passed through (``prefetch = None``); ``other`` is
an input opened when the stage starts and asked for one item before anything is requested of the
upstream (the kit tops inputs up first; Reactor's ``takeUntilOther`` also subscribes it first).
Its first item completes the stage, which cancels both: the kit's ``complete()`` cancels the
upstream and every input, as do an error from either side and a downstream cancel. ``other``
completing without an item changes nothing (reactivex ignores it too).
"""

from __future__ import annotations

from typing import Any

from rxpipe import Publisher
from rxpipe.stage import Input, Stage, operator

__all__ = ["take_until_stage", "skip_until_stage"]


class TakeUntil(Stage):
    prefetch = None
    passes_capabilities = True
    kind = "take_until"
    inputs_first = True  # ``other`` is asked before the upstream: an item it has ready wins

    def __init__(self, other: Publisher[Any]) -> None:
        self.other = other

    def on_start(self) -> None:
        self.open_input(self.other, prefetch=1)  # type: ignore[arg-type]  # a Publisher is adapted

    def on_next(self, item: Any) -> None:
        self.emit(item)

    def on_input_next(self, input: Input, item: Any) -> None:
        self.complete()

    def on_input_complete(self, input: Input) -> None:
        """``other`` ended without an item: the upstream goes on alone."""

    # on_input_error: the default fail() (the upstream is cancelled)


#: ``take_until_stage(other, name=None)`` (``rxpipe.operators.take_until`` checks and documents it)
take_until_stage = operator(TakeUntil)


class SkipUntil(Stage):
    """Drops the upstream's items until ``other`` emits an item; then passes every item.

    ``other`` is an input asked for one item before the upstream is asked anything (as
    ``take_until``'s), cancelled at its first item. Dropped items free their credit at once (one
    more asked per drop). The upstream's completion completes the stream whether or not the gate
    opened (Reactor ``skipUntilOther``; reactivex stays silent then, never terminating)."""

    prefetch = None
    passes_capabilities = True
    kind = "skip_until"
    inputs_first = True

    def __init__(self, other: Publisher[Any]) -> None:
        self.other = other
        self.open = False
        self.gate: Input | None = None

    def on_start(self) -> None:
        self.gate = self.open_input(self.other, prefetch=1)  # type: ignore[arg-type]  # a Publisher is adapted

    def on_next(self, item: Any) -> None:
        if self.open:
            self.emit(item)

    def on_input_next(self, input: Input, item: Any) -> None:
        self.open = True
        input.cancel()

    def on_input_complete(self, input: Input) -> None:
        """``other`` ended without an item: the gate stays shut (reactivex)."""


skip_until_stage = operator(SkipUntil)
