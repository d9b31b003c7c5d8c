"""Filters: ``pairwise``, ``distinct``, ``distinct_until_changed``, ``take_while`` (and
``_indexed``), ``skip_while`` (and ``_indexed``), ``first`` (and ``first_or_default``) of the
second round; ``element_at`` (and ``_or_default``), ``skip_last``, ``default_if_empty`` of the
third (DESIGN §3).

Written on :class:`rxpipe.stage.Stage`. All but ``first`` are demand-driven (``prefetch =
None``): upstream is asked for what downstream asked, and an item that emits nothing frees its
credit at once, so the kit asks upstream for one more per dropped item — a filter never stalls
and never reads ahead. ``first`` is lazy with a window of one: one item outstanding, asked for
once downstream wants the answer, one more per item that did not match; ``element_at(i)`` is
lazy and asks for ``i + 1`` items once. ``skip_last(n)`` holds ``n`` items (``held``), which never close
its window: the kit asks beyond them.

Values, order and terminal signals are reactivex 6.1's (checked by the differential tests).
"""

from __future__ import annotations

import operator as _operator
from collections import OrderedDict, deque
from typing import Any, Callable

from rxpipe.errors import ArgumentOutOfRangeError, SequenceContainsNoElementsError
from rxpipe.stage import Stage, operator

__all__ = ["pairwise_stage", "distinct_stage", "distinct_until_changed_stage", "take_while_stage",
           "skip_while_stage", "first_stage", "element_at_stage", "skip_last_stage", "default_if_empty_stage",
           "emit_default", "KeyMemory"]

NOTHING = Stage.NOTHING


class Pairwise(Stage):
    """``(previous, item)`` for every item but the first."""

    prefetch = None
    kind = "pairwise"

    def __init__(self) -> None:
        self.previous: Any = NOTHING

    def on_next(self, item: Any) -> None:
        previous = self.previous
        self.previous = item
        if previous is not NOTHING:
            self.emit((previous, item))


class KeyMemory:
    """The keys ``distinct`` has seen.

    Hashable keys live in a dict (O(1) per item); unhashable keys, and every key when a
    ``comparer`` is given, in a list scanned with ``==`` / the comparer (O(keys) per item, as
    reactivex scans all of its keys). ``max_keys=None``: every key is kept for the life of the
    subscription. ``max_keys=N``: at most N keys, the least recently seen evicted first (a key
    seen again becomes the most recent).
    """

    __slots__ = ("max_keys", "comparer", "hashed", "listed", "clock")

    def __init__(self, max_keys: int | None, comparer: Callable[[Any, Any], Any] | None) -> None:
        self.max_keys = max_keys
        self.comparer = comparer
        #: hashable key -> when it was last seen
        self.hashed: OrderedDict[Any, int] = OrderedDict()
        #: [when last seen, key], least recently seen first
        self.listed: list[list[Any]] = []
        self.clock = 0

    def __len__(self) -> int:
        return len(self.hashed) + len(self.listed)

    def seen(self, key: Any) -> bool:
        """True if ``key`` is remembered; either way it is remembered now, as the most recent."""
        self.clock += 1
        if self.comparer is None:
            hashed = self.hashed
            try:
                found = key in hashed
            except TypeError:  # unhashable: the list below, compared with ==
                same: Callable[[Any, Any], Any] = _operator.eq
            else:
                if found:
                    if self.max_keys is not None:
                        hashed.move_to_end(key)
                        hashed[key] = self.clock
                    return True
                hashed[key] = self.clock
                self._bound()
                return False
        else:
            same = self.comparer
        listed = self.listed
        for index, entry in enumerate(listed):
            if same(entry[1], key):  # reactivex's order: comparer(kept, new)
                if self.max_keys is not None:
                    del listed[index]
                    entry[0] = self.clock
                    listed.append(entry)
                return True
        listed.append([self.clock, key])
        self._bound()
        return False

    def _bound(self) -> None:
        if self.max_keys is None or len(self) <= self.max_keys:
            return
        hashed, listed = self.hashed, self.listed
        if listed and (not hashed or listed[0][0] < next(iter(hashed.values()))):
            del listed[0]
        else:
            hashed.popitem(last=False)


class Distinct(Stage):
    """Items whose key was not seen before (within the last ``max_keys`` keys, if bounded)."""

    log_hook_errors = False  # a user function's error is the stream's (as map's)
    prefetch = None
    passes_capabilities = True
    kind = "distinct"

    def __init__(self, key_mapper: Callable[[Any], Any] | None, max_keys: int | None,
                 comparer: Callable[[Any, Any], Any] | None) -> None:
        self.key_mapper = key_mapper
        self.keys = KeyMemory(max_keys, comparer)

    def on_next(self, item: Any) -> None:
        key = item if self.key_mapper is None else self.key_mapper(item)
        if not self.keys.seen(key):
            self.emit(item)


class DistinctUntilChanged(Stage):
    """Items whose key differs from the key of the last item emitted."""

    log_hook_errors = False  # a user function's error is the stream's (as map's)
    prefetch = None
    passes_capabilities = True
    kind = "distinct_until_changed"

    def __init__(self, key_mapper: Callable[[Any], Any] | None, comparer: Callable[[Any, Any], Any] | None) -> None:
        self.key_mapper = key_mapper
        self.comparer = comparer
        self.current: Any = NOTHING

    def on_next(self, item: Any) -> None:
        key = item if self.key_mapper is None else self.key_mapper(item)
        current = self.current
        if current is not NOTHING:
            if self.comparer is None:
                if current == key:
                    return
            elif self.comparer(current, key):
                return  # the kept key stays (reactivex keeps the key of the last emitted item)
        self.current = key
        self.emit(item)


class TakeWhile(Stage):
    """Items while ``predicate`` holds; completes (cancelling upstream) at the first that fails."""

    log_hook_errors = False  # a user function's error is the stream's (as map's)
    prefetch = None
    passes_capabilities = True
    kind = "take_while"

    def __init__(self, predicate: Callable[..., Any], inclusive: bool, indexed: bool = False) -> None:
        self.predicate = predicate
        self.inclusive = inclusive
        self.index: int | None = 0 if indexed else None  # take_while_indexed: predicate(item, index)

    def on_next(self, item: Any) -> None:
        index = self.index
        if index is None:
            holds = self.predicate(item)
        else:
            holds = self.predicate(item, index)
            self.index = index + 1
        if holds:
            self.emit(item)
            return
        if self.inclusive:
            self.emit(item)
        self.complete()


class SkipWhile(Stage):
    """Drops items while ``predicate`` holds, then passes every item."""

    log_hook_errors = False  # a user function's error is the stream's (as map's)
    prefetch = None
    passes_capabilities = True
    kind = "skip_while"

    def __init__(self, predicate: Callable[..., Any], indexed: bool = False) -> None:
        self.predicate = predicate
        self.skipping = True
        self.index: int | None = 0 if indexed else None  # skip_while_indexed: predicate(item, index)

    def on_next(self, item: Any) -> None:
        if self.skipping:
            index = self.index
            if index is None:
                holds = self.predicate(item)
            else:
                holds = self.predicate(item, index)
                self.index = index + 1
            if holds:
                return
            self.skipping = False
        self.emit(item)


class First(Stage):
    """The first item (that satisfies ``predicate``), then completion; none: the error."""

    log_hook_errors = False  # a user function's error is the stream's (as map's)
    prefetch = 1  # one outstanding: a dropped item asks for the next one
    lazy = True  # nothing is read before downstream asks
    passes_capabilities = True
    kind = "first"

    def __init__(self, predicate: Callable[[Any], Any] | None, default: Any = NOTHING) -> None:
        self.predicate = predicate
        self.default = default  # first_or_default's (NOTHING: first's error; None: complete empty)

    def on_next(self, item: Any) -> None:
        if self.predicate is None or self.predicate(item):
            self.emit(item)
            self.complete()

    def on_complete(self) -> None:
        emit_default(self, self.default)


def emit_default(stage: Stage, default: Any, error: type[Exception] = SequenceContainsNoElementsError) -> None:
    """End a stage that found no item: ``default`` then completion; NOTHING (no default): fail with
    ``error()``; None: complete without an item (items are never None, Reactive Streams §2.13;
    reactivex emits None)."""
    if default is NOTHING:
        stage.fail(error())
        return
    if default is not None:
        stage.emit(default)
    stage.complete()


class ElementAt(Stage):
    """The item at ``index`` (from 0), then completion; fewer items: the default, or the error."""

    lazy = True  # nothing is read before downstream asks
    passes_capabilities = True
    kind = "element_at"

    def __init__(self, index: int, default: Any = NOTHING) -> None:
        # index + 1 items asked once, never again: the last of them is the answer
        self.prefetch = self.replenish = index + 1  # type: ignore[misc]
        self.left = index
        self.default = default

    def on_next(self, item: Any) -> None:
        if self.left:
            self.left -= 1
            return
        self.emit(item)
        self.complete()

    def on_complete(self) -> None:
        emit_default(self, self.default, ArgumentOutOfRangeError)


class SkipLast(Stage):
    """Every item but the last ``count``: an item goes out once ``count`` newer ones arrived."""

    prefetch = None
    passes_capabilities = True
    kind = "skip_last"

    def __init__(self, count: int) -> None:
        self.count = count
        self.kept: deque[Any] = deque()
        self.held = 0

    def on_next(self, item: Any) -> None:
        kept = self.kept
        kept.append(item)
        if len(kept) > self.count:
            self.emit(kept.popleft())
        self.held = len(kept)  # the kit reads beyond them: what a stage holds never closes its window

    def on_complete(self) -> None:
        self.kept.clear()  # the last ``count`` items: skipped by definition
        self.held = 0
        self.complete()


class DefaultIfEmpty(Stage):
    """The items; an empty stream: ``default`` (None: nothing, §2.13), then completion."""

    prefetch = None
    passes_capabilities = True
    kind = "default_if_empty"

    def __init__(self, default: Any) -> None:
        self.default = default
        self.empty = True

    def on_next(self, item: Any) -> None:
        self.empty = False
        self.emit(item)

    def on_complete(self) -> None:
        if self.empty and self.default is not None:
            self.emit(self.default)
        self.complete()


#: The operators (``rxpipe.operators`` checks the arguments and documents them).
pairwise_stage = operator(Pairwise)
distinct_stage = operator(Distinct)
distinct_until_changed_stage = operator(DistinctUntilChanged)
take_while_stage = operator(TakeWhile)
skip_while_stage = operator(SkipWhile)
first_stage = operator(First)
element_at_stage = operator(ElementAt)
skip_last_stage = operator(SkipLast)
default_if_empty_stage = operator(DefaultIfEmpty)
