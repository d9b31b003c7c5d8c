"""Reducers: ``reduce``, ``count``, ``to_list`` and ``last`` (DESIGN §3, "Operators, second round").

Written on :class:`rxpipe.stage.Stage`, lazy with a window of ``prefetch`` items: nothing is
requested before downstream asks for the result; then upstream is asked for ``prefetch`` and,
each time ``prefetch - prefetch // 4`` items were consumed, for that many more (the §2 replenish
rule, Reactor's ``limitRate``): rounds of the window, never ``UNBOUNDED``, so a reducer over an
endless or huge source stays a well-behaved consumer. Each emits one value, at completion.

Values and terminal signals are reactivex 6.1's (checked by the differential tests).
"""

from __future__ import annotations

from typing import Any, Callable

from rxpipe.errors import SequenceContainsNoElementsError
from rxpipe.flowable import DEFAULT_PREFETCH
from rxpipe.stage import Stage, operator

__all__ = ["reduce_stage", "count_stage", "to_list_stage", "last_stage"]

NOTHING = Stage.NOTHING


class _Reducer(Stage):
    """A lazy window of ``prefetch`` items; ``result()`` is emitted when upstream completes."""

    log_hook_errors = False  # a user function's error is the stream's (as map's)
    prefetch = DEFAULT_PREFETCH
    lazy = True

    def __init__(self, prefetch: int) -> None:
        self.prefetch = prefetch  # type: ignore[misc]  # this run's window

    def result(self) -> Any:
        """The value to emit, or ``Stage.NOTHING`` when the stream had no (matching) item."""
        raise NotImplementedError

    def on_complete(self) -> None:
        value = self.result()
        if value is NOTHING:
            self.fail(SequenceContainsNoElementsError())
        elif value is None:
            self.fail(TypeError(f"{self.kind}: the result is None; items are never None "
                                f"(Reactive Streams §2.13)"))
        else:
            self.emit(value)
            self.complete()


class Reduce(_Reducer):
    """``accumulator(acc, item)`` over every item, from ``seed`` (or from the first item)."""

    kind = "reduce"

    def __init__(self, accumulator: Callable[[Any, Any], Any], seed: Any, prefetch: int) -> None:
        super().__init__(prefetch)
        self.accumulator = accumulator
        self.acc = seed

    def on_next(self, item: Any) -> None:
        acc = self.acc
        self.acc = item if acc is NOTHING else self.accumulator(acc, item)

    def result(self) -> Any:
        return self.acc


class Count(_Reducer):
    """The number of items (for which ``predicate`` holds)."""

    kind = "count"

    def __init__(self, predicate: Callable[[Any], Any] | None, prefetch: int) -> None:
        super().__init__(prefetch)
        self.predicate = predicate
        self.count = 0

    def on_next(self, item: Any) -> None:
        if self.predicate is None or self.predicate(item):
            self.count += 1

    def result(self) -> int:
        return self.count


class ToList(_Reducer):
    """Every item, in order, in one list (empty for an empty stream)."""

    kind = "to_list"

    def __init__(self, prefetch: int) -> None:
        super().__init__(prefetch)
        self.items: list[Any] = []

    def on_next(self, item: Any) -> None:
        self.items.append(item)

    def result(self) -> list[Any]:
        items, self.items = self.items, []
        return items


class Last(_Reducer):
    """The last item (for which ``predicate`` holds); none: the error."""

    kind = "last"
    passes_capabilities = True

    def __init__(self, predicate: Callable[[Any], Any] | None, prefetch: int, default: Any = NOTHING) -> None:
        super().__init__(prefetch)
        self.predicate = predicate
        self.value: Any = NOTHING
        self.default = default  # last_or_default's (NOTHING: last's error; None: complete empty)

    def on_next(self, item: Any) -> None:
        if self.predicate is None or self.predicate(item):
            self.value = item

    def result(self) -> Any:
        return self.value

    def on_complete(self) -> None:
        if self.value is NOTHING and self.default is not NOTHING:
            if self.default is not None:  # None is never an item (§2.13): reactivex emits it
                self.emit(self.default)
            self.complete()
            return
        super().on_complete()


#: The operators (``rxpipe.operators`` checks the arguments and documents them).
reduce_stage = operator(Reduce)
count_stage = operator(Count)
to_list_stage = operator(ToList)
last_stage = operator(Last)
