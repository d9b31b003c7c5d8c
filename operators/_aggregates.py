"""Aggregates and whole-sequence operators of the third round (DESIGN §3): ``all``, ``some``,
``contains``, ``is_empty``, ``sequence_equal``, ``sum``, ``average``, ``min``, ``max``,
``min_by``, ``max_by``, ``to_dict``, ``to_set``, ``single``, ``single_or_default``, ``find``,
``find_index``, ``take_last``, ``take_last_buffer``, ``last_or_default``, ``ignore_elements``.

Written on :class:`rxpipe.stage.Stage` as the reducers of ``_reducers.py`` are: lazy (nothing is
requested before downstream asks for the result), then rounds of a window of ``prefetch`` items
(256, the §2 replenish rule), never ``UNBOUNDED``. The short-circuiting ones (``all``, ``some``,
``contains``, ``is_empty``, ``find``, ``find_index``, ``sequence_equal``, ``single`` at a second
item) emit and ``complete()`` the moment the answer is known, which cancels upstream.

Values and terminal signals are reactivex 6.1's (tests/operators/test_aggregates.py); where
reactivex emits None (``find`` without a match) rxpipe completes empty (§2.13).
"""

from __future__ import annotations

import operator as _operator
from collections import deque
from typing import Any, Callable

from rxpipe.errors import SequenceContainsMoreThanOneElementError
from rxpipe.flowable import Flowable
from rxpipe.stage import Input, Stage, operator

from ._filters import emit_default
from ._reducers import _Reducer

__all__ = ["some_stage", "all_stage", "is_empty_stage", "sequence_equal_stage", "sum_stage", "average_stage",
           "max_by_stage", "min_by_stage", "max_stage", "min_stage", "to_dict_stage", "to_set_stage", "single_stage",
           "single_or_default_stage", "contains_stage",
           "find_stage", "find_index_stage", "take_last_stage", "take_last_buffer_stage", "ignore_elements_stage"]

NOTHING = Stage.NOTHING


class _Decides(_Reducer):
    """A reducer that may know its answer before the end: ``decide(value)`` emits it and
    completes, which cancels upstream."""

    def decide(self, value: Any) -> None:
        self.emit(value)
        self.complete()


class Some(_Decides):
    """True at the first item for which ``predicate`` holds (any item, without one); False at the end."""

    kind = "some"

    def __init__(self, predicate: Callable[[Any], Any] | None, prefetch: int, negate: bool = False) -> None:
        super().__init__(prefetch)
        self.predicate = predicate
        self.negate = negate  # all(): decided False at the first item failing the predicate

    def on_next(self, item: Any) -> None:
        predicate = self.predicate
        if predicate is None or bool(predicate(item)) != self.negate:
            self.decide(not self.negate)

    def result(self) -> Any:
        return self.negate


class All(Some):
    kind = "all"

    def __init__(self, predicate: Callable[[Any], Any], prefetch: int) -> None:
        super().__init__(predicate, prefetch, negate=True)


class Contains(Some):
    """True at the first item equal to ``value`` (``comparer(item, value)``), False at the end."""

    kind = "contains"

    def __init__(self, value: Any, comparer: Callable[[Any, Any], Any] | None, prefetch: int) -> None:
        same = comparer or _operator.eq
        super().__init__(lambda item: same(item, value), prefetch)


class IsEmpty(_Decides):
    """False at the first item, True at the end."""

    kind = "is_empty"

    def on_next(self, item: Any) -> None:
        self.decide(False)

    def result(self) -> Any:
        return True


class SequenceEqual(_Decides):
    """Whether the upstream and ``second`` have equal items, pairwise, and the same length.

    Items of one side wait (``held``: the stage's for the upstream, the input's for ``second``)
    until the other side's item of the same position arrives; each side's window bounds its own
    waiting items. A mismatch, or one side ending while the other has more, decides False."""

    kind = "sequence_equal"
    inputs_first = True  # ``second`` is asked first: over synchronous sources, as reactivex's trampoline runs

    def __init__(self, second: Flowable[Any], comparer: Callable[[Any, Any], Any] | None, prefetch: int) -> None:
        super().__init__(prefetch)
        self.second = second
        self.comparer = comparer or _operator.eq
        self.left: deque[Any] = deque()
        self.right: deque[Any] = deque()
        self.left_done = self.right_done = False
        self.input: Input | None = None
        self.held = 0

    @classmethod
    def graph_inputs(cls, second: Flowable[Any], *args: Any) -> tuple[Flowable[Any], ...]:
        return (second,)

    def on_start(self) -> None:
        self.input = self.open_input(self.second, prefetch=self.prefetch)  # type: ignore[arg-type]

    def on_next(self, item: Any) -> None:
        if self.right:
            self.match(item, self.right.popleft())
        elif self.right_done:
            self.decide(False)
        else:
            self.left.append(item)
        self.count()

    def on_input_next(self, input: Input, item: Any) -> None:
        if self.left:
            self.match(self.left.popleft(), item)
        elif self.left_done:
            self.decide(False)
        else:
            self.right.append(item)
        self.count()

    def match(self, left: Any, right: Any) -> None:
        if not self.comparer(left, right):
            self.decide(False)

    def count(self) -> None:
        self.held = len(self.left)
        if self.input is not None:
            self.input.held = len(self.right)

    def on_complete(self) -> None:
        self.left_done = True
        if not self.left:
            if self.right:
                self.decide(False)
            elif self.right_done:
                self.decide(True)

    def on_input_complete(self, input: Input) -> None:
        self.right_done = True
        if not self.right:
            if self.left:
                self.decide(False)
            elif self.left_done:
                self.decide(True)


class Sum(_Reducer):
    """``0 + key(x1) + key(x2) + …`` (reactivex: ``map(key_mapper)``, then ``reduce(add, 0)``)."""

    kind = "sum"

    def __init__(self, key_mapper: Callable[[Any], Any] | None, prefetch: int) -> None:
        super().__init__(prefetch)
        self.key_mapper = key_mapper
        self.total: Any = 0

    def on_next(self, item: Any) -> None:
        self.total = self.total + (item if self.key_mapper is None else self.key_mapper(item))

    def result(self) -> Any:
        return self.total


class Average(_Reducer):
    """The mean of ``key_mapper(x)`` (default ``float(x)``); empty: SequenceContainsNoElementsError."""

    kind = "average"

    def __init__(self, key_mapper: Callable[[Any], Any] | None, prefetch: int) -> None:
        super().__init__(prefetch)
        self.key_mapper = key_mapper or float
        self.total: Any = 0
        self.n = 0

    def on_next(self, item: Any) -> None:
        self.total = self.total + self.key_mapper(item)
        self.n += 1

    def result(self) -> Any:
        return NOTHING if not self.n else self.total / float(self.n)


def _sub(x: Any, y: Any) -> Any:
    return x - y  # reactivex's default_sub_comparer


class Extrema(_Reducer):
    """The items with the largest key (``maximum``) or the smallest: every item tied for it, in
    order (``min_by`` / ``max_by``: the list; ``min`` / ``max``: its first item, NOTHING if empty).
    ``comparer(a, b)`` returns a number: > 0 when a is larger (reactivex's sub-comparer)."""

    maximum = True
    first_only = False

    def __init__(self, key_mapper: Callable[[Any], Any] | None, comparer: Callable[[Any, Any], Any] | None,
                 prefetch: int) -> None:
        super().__init__(prefetch)
        self.key_mapper = key_mapper
        self.comparer = comparer or _sub
        self.sign = 1 if self.maximum else -1
        self.key: Any = NOTHING
        self.items: list[Any] = []

    def on_next(self, item: Any) -> None:
        key = item if self.key_mapper is None else self.key_mapper(item)
        if self.key is NOTHING:
            comparison = 0
            self.key = key
        else:
            comparison = self.comparer(key, self.key) * self.sign
        if comparison > 0:
            self.key = key
            self.items = []
        if comparison >= 0:
            self.items.append(item)

    def result(self) -> Any:
        if self.first_only:
            return self.items[0] if self.items else NOTHING
        return self.items


class MaxBy(Extrema):
    kind = "max_by"


class MinBy(Extrema):
    kind = "min_by"
    maximum = False


class Max(Extrema):
    kind = "max"
    first_only = True
    passes_capabilities = True


class Min(Max):
    kind = "min"
    maximum = False


class ToDict(_Reducer):
    """``{key_mapper(x): element_mapper(x) or x}`` over every item (a later key replaces)."""

    kind = "to_dict"

    def __init__(self, key_mapper: Callable[[Any], Any], element_mapper: Callable[[Any], Any] | None,
                 prefetch: int) -> None:
        super().__init__(prefetch)
        self.key_mapper = key_mapper
        self.element_mapper = element_mapper
        self.mapping: dict[Any, Any] = {}

    def on_next(self, item: Any) -> None:
        key = self.key_mapper(item)
        self.mapping[key] = item if self.element_mapper is None else self.element_mapper(item)

    def result(self) -> Any:
        return self.mapping


class ToSet(_Reducer):
    kind = "to_set"

    def __init__(self, prefetch: int) -> None:
        super().__init__(prefetch)
        self.items: set[Any] = set()

    def on_next(self, item: Any) -> None:
        self.items.add(item)

    def result(self) -> Any:
        return self.items


class Single(_Reducer):
    """The only item (for which ``predicate`` holds); a second one fails at once (upstream
    cancelled); none: ``default`` (NOTHING: SequenceContainsNoElementsError; None: empty)."""

    kind = "single"
    passes_capabilities = True

    def __init__(self, predicate: Callable[[Any], Any] | None, default: Any, prefetch: int) -> None:
        super().__init__(prefetch)
        self.predicate = predicate
        self.default = default
        self.value: Any = NOTHING

    def on_next(self, item: Any) -> None:
        if self.predicate is not None and not self.predicate(item):
            return
        if self.value is not NOTHING:
            self.fail(SequenceContainsMoreThanOneElementError())
            return
        self.value = item

    def on_complete(self) -> None:
        if self.value is NOTHING:
            emit_default(self, self.default)
        else:
            self.emit(self.value)
            self.complete()


class SingleOrDefault(Single):
    kind = "single_or_default"


class Find(_Decides):
    """The first item (``index=True``: its index) for which ``predicate(item, index, source)``
    holds; none: completes empty (find; reactivex emits None) or emits -1 (find_index)."""

    kind = "find"
    want_index = False

    def __init__(self, predicate: Callable[[Any, int, Any], Any], prefetch: int) -> None:
        super().__init__(prefetch)
        self.predicate = predicate
        self.index = 0

    def on_next(self, item: Any) -> None:
        if self.predicate(item, self.index, self.upstream_flowable):
            self.decide(self.index if self.want_index else item)
        else:
            self.index += 1

    def on_complete(self) -> None:
        if self.want_index:
            self.emit(-1)
        self.complete()


class FindIndex(Find):
    kind = "find_index"
    want_index = True


class TakeLast(_Reducer):
    """The last ``count`` items, at completion: each one (take_last) or one list (take_last_buffer).
    They are the stage's ``held`` items (its memory is ``count`` items; ``max_held`` follows it)."""

    kind = "take_last"
    as_list = False

    def __init__(self, count: int, prefetch: int) -> None:
        super().__init__(prefetch)
        self.kept: deque[Any] = deque(maxlen=count)
        self.max_held = max(Stage.max_held, count)  # type: ignore[misc]
        self.held = 0

    def on_next(self, item: Any) -> None:
        self.kept.append(item)  # the oldest falls off the deque's other end
        self.held = len(self.kept)

    def on_complete(self) -> None:
        kept, self.held = self.kept, 0
        if self.as_list:
            self.emit(list(kept))
        else:
            for item in kept:
                self.emit(item)
        kept.clear()
        self.complete()


class TakeLastBuffer(TakeLast):
    kind = "take_last_buffer"
    as_list = True


class IgnoreElements(_Reducer):
    """Nothing but the terminal signal: every item is consumed and let go."""

    kind = "ignore_elements"

    def on_next(self, item: Any) -> None:
        pass

    def on_complete(self) -> None:
        self.complete()


#: The operators (``rxpipe.operators`` checks the arguments and documents them).
some_stage = operator(Some)
all_stage = operator(All)
is_empty_stage = operator(IsEmpty)
sequence_equal_stage = operator(SequenceEqual)
sum_stage = operator(Sum)
average_stage = operator(Average)
max_by_stage = operator(MaxBy)
min_by_stage = operator(MinBy)
max_stage = operator(Max)
min_stage = operator(Min)
to_dict_stage = operator(ToDict)
to_set_stage = operator(ToSet)
single_stage = operator(Single)
single_or_default_stage = operator(SingleOrDefault)
contains_stage = operator(Contains)
find_stage = operator(Find)
find_index_stage = operator(FindIndex)
take_last_stage = operator(TakeLast)
take_last_buffer_stage = operator(TakeLastBuffer)
ignore_elements_stage = operator(IgnoreElements)
