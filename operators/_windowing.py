"""Groups and windows: ``group_by`` (keyed groups, each a Flowable with its own demand).
"""

from __future__ import annotations

from typing import Any, Callable, Hashable, TypeVar

from rxpipe.flowable import DEFAULT_PREFETCH, Operator

from ._args import ABSENT, check_int_arg, either, required
from ._group_by import GroupByFlowable

T = TypeVar("T")

__all__ = ["group_by"]


def group_by(key_mapper: Callable[[T], Hashable] = ABSENT, element_mapper: Callable[[T], Any] | int | None = None,
             *, max_groups: int = 1024, prefetch: int = DEFAULT_PREFETCH, name: str | None = None,
             key: Callable[[T], Hashable] = ABSENT) -> Operator:
    """Split items into groups by ``key_mapper(item)`` (also ``key=``); emits one
    ``GroupedFlowable`` (``.key``) per key, carrying ``element_mapper(item)`` if given (reactivex's
    argument) or the item. An int second argument is ``max_groups`` (rxpipe's order:
    ``group_by(key, 8)``).

        source:  -a1-b1-a2-c1-b2-|              key = first letter, max_groups=3
        main:    -A--B--------C-----|           A, B, C: GroupedFlowable, key "a", "b", "c"
        A:        a1----a2-----------|
        B:           b1----------b2--|
        C:                 c1--------|

        source:  -a1-b1-c1                      max_groups=2: c1 would open a third group
        main:    -A--B--#                       # = TooManyGroupsError, upstream cancelled
        A:        a1----#         B: b1-#       open groups get their items, then the error

    Beyond ``max_groups``: an item whose key would open group ``max_groups + 1`` is dropped
    (counted, reason ``"too_many_groups"``), upstream is cancelled, and ``TooManyGroupsError``
    (``.key``, ``.max_groups``) is signalled on the main stream and every open group after the
    items they hold. A group is open until it completes or its subscriber cancels it; a
    cancelled group's key opens a new group when it appears again (Reactor).
    Demand: the main stream emits a group only on its demand; each group delivers on its own
    subscriber's demand. Upstream gets ``prefetch`` (default 256) at subscribe and the §2
    replenishment as items leave the groups (delivered, or dropped by a cancelled group), so the
    items held over all groups never exceed ``prefetch``. A group nobody consumes holds that
    credit and stalls the others (as in Reactor): subscribe to every group or cancel it.
    Cancelling the main stream stops new groups (their items are dropped, reason ``"no_group"``)
    and cancels upstream once no open group remains.
    Signals: ValueError (raised here) for ``max_groups < 1`` or ``prefetch < 1``; ``key`` raising
    (or an unhashable key) cancels upstream and ends every stream with that exception after the
    items held; upstream errors and completion reach the main stream and every group the same way.
    A group takes one subscriber (a second gets ``ProtocolViolationError``).
    Anchor: Reactor ``groupBy`` / ``GroupedFlux``; Akka ``groupBy(maxSubstreams, f)``
    (``TooManySubstreamsOpenException``).
    """
    key = required("group_by", "key_mapper", either("group_by", "key_mapper", key_mapper, "key", key))
    if not callable(key):
        raise TypeError(f"group_by() needs a key callable, got {key!r}")
    if isinstance(element_mapper, int) and not isinstance(element_mapper, bool):
        max_groups, element_mapper = element_mapper, None
    if element_mapper is not None and not callable(element_mapper):
        raise TypeError(f"group_by(element_mapper=) needs a callable, got {element_mapper!r}")
    check_int_arg("group_by", "max_groups", max_groups, 1)
    check_int_arg("group_by", "prefetch", prefetch, 1)
    return lambda source: GroupByFlowable(source, key, max_groups, prefetch, name, element_mapper)
