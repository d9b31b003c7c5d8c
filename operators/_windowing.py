"""Groups, windows and buffers: ``group_by``, the ``buffer_*`` and ``window_*`` operators,
``buffer(boundaries)``'s operator, ``group_by_until``, ``group_join``, ``partition`` (DESIGN §3).

A buffer emits lists; a window is a Flowable whose own subscriber's demand governs what flows
into it (``_window_core.py``); ``partition`` is two Flowables of one upstream.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Callable, Hashable, TypeVar

from rxpipe.errors import ArgumentOutOfRangeError
from rxpipe.flowable import DEFAULT_PREFETCH, Flowable, Operator

from ._args import ABSENT, check_callable, check_duration, check_int_arg, either, required
from ._group_by import GroupByFlowable

T = TypeVar("T")

__all__ = ["group_by", "buffer_with_count", "buffer_with_time", "buffer_with_time_or_count", "buffer_when",
           "buffer_toggle", "window", "window_with_count", "window_with_time", "window_with_time_or_count",
           "window_when", "window_toggle", "group_by_until", "group_join", "partition", "partition_indexed"]


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


# -- third round (DESIGN §3): buffers and windows -----------------------------------------------------
def _check_count(op: str, arg: str, value: object) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value < 1:
        raise ArgumentOutOfRangeError(f"{op}({arg}) needs a count >= 1, got {value!r}")  # reactivex's error
    check_int_arg(op, arg, value, 1)
    return value  # type: ignore[return-value]


def buffer_with_count(count: int, skip: int | None = None, *, name: str | None = None) -> Operator:
    """Emit lists of ``count`` items, a new list starting every ``skip`` items (default
    ``count``: back to back; fewer: overlapping; more: items in between are left out).

        source:    -a-b-c-d-e-|
        demand:    ^2
        upstream:  ^4            request(2) lists: up to 2 * 2 items asked at once
        output:    ---x---y----  buffer_with_count(2): x = [a, b], y = [c, d]; [e] and | wait for demand

    The partial lists go out at completion (empty ones left out, as reactivex's).
    Demand: ``request(n)`` lists asks upstream for up to ``n * count`` items (capped at
    ``UNBOUNDED``; Reactor ``FluxBuffer``); the open lists' items are held (never more than
    ``count`` distinct ones).
    Signals: :class:`rxpipe.ArgumentOutOfRangeError` (raised here) for a count or skip < 1 (as
        reactivex); an upstream error drops the open lists and is signalled.
    Anchor: reactivex ``buffer_with_count``; Reactor ``buffer(maxSize, skip)``.
    """
    from ._buffers import buffer_with_count_stage

    count = _check_count("buffer_with_count", "count", count)
    skip = count if skip is None else _check_count("buffer_with_count", "skip", skip)
    return buffer_with_count_stage(count, skip, name=name)


def buffer_with_time(timespan: float | timedelta, timeshift: float | timedelta | None = None, *,
                     prefetch: int = DEFAULT_PREFETCH, name: str | None = None) -> Operator:
    """Emit a list of the items of each ``timespan`` seconds, a new list starting every
    ``timeshift`` seconds (default ``timespan``: back to back), empty lists included.

        source:    -a-b---c-------|
        demand:    ^*
        output:    ----x---y---z--(w|)   buffer_with_time(0.04): x = [a, b], y = [c], z = [], w = []

    Demand: the open lists hold at most ``prefetch`` items (default 256) with the lists waiting
    for demand: a source faster than that per ``timespan`` is paused until a list closes. A tick
    that would close a list while downstream wants none is skipped: the list stays open (lists
    never pile up unasked, Akka ``groupedWithin``'s rule); under unbounded demand the lists are
    reactivex's. Time: the loop's clock, one timer.
    Signals: TypeError / ValueError (raised here) for bad durations; an upstream error drops
        the open lists and is signalled.
    Anchor: reactivex ``buffer_with_time``; Reactor ``buffer(Duration, Duration)``.
    """
    from ._buffers import buffer_with_time_stage

    span = check_duration("buffer_with_time", "timespan", timespan)
    shift = span if not timeshift else check_duration("buffer_with_time", "timeshift", timeshift)
    check_int_arg("buffer_with_time", "prefetch", prefetch, 1)
    return buffer_with_time_stage(span, shift, prefetch, name=name)


def buffer_with_time_or_count(timespan: float | timedelta, count: int, *, name: str | None = None) -> Operator:
    """Emit a list when it holds ``count`` items or ``timespan`` seconds after it opened,
    whichever comes first (empty lists included, as reactivex's).

        source:    -abc------d-|
        demand:    ^*
        output:    ---x----y---(z|)  buffer_with_time_or_count(0.05, 3): x = [a, b, c], y = [], z = [d]

    Demand: ``request(n)`` lists asks upstream for up to ``n * count`` items (capped at
    ``UNBOUNDED``); a list whose time is up while downstream wants none stays open another
    ``timespan`` (filling up to ``count``).
    Signals: ArgumentOutOfRangeError / TypeError / ValueError (raised here) for bad arguments.
    Anchor: reactivex ``buffer_with_time_or_count``; Reactor ``bufferTimeout``, Akka ``groupedWithin``.
    """
    from ._buffers import buffer_with_time_or_count_stage

    span = check_duration("buffer_with_time_or_count", "timespan", timespan)
    return buffer_with_time_or_count_stage(span, _check_count("buffer_with_time_or_count", "count", count),
                                           name=name)


def buffer_boundaries(boundaries: Any, *, prefetch: int = DEFAULT_PREFETCH, name: str | None = None) -> Operator:
    """``buffer(boundaries)``'s operator (``buffer``, by argument type, documents it)."""
    from ._buffers import buffer_boundaries_stage

    check_int_arg("buffer", "prefetch", prefetch, 1)
    return buffer_boundaries_stage(_stream("buffer", "boundaries", boundaries), prefetch, name=name)


def buffer_when(closing_mapper: Callable[[], Any], *, prefetch: int = DEFAULT_PREFETCH,
                name: str | None = None) -> Operator:
    """Emit a list each time the stream ``closing_mapper()`` returns emits or completes; a new
    list (and a new closing stream) follows at once.

        source:    -a-b---c--|
        demand:    ^*
        output:    ----x---y-(z|)    each closing stream: 4 frames; x = [a, b], y = [c], z = []

    Demand: the next closing stream is made only once downstream wants another list (the open
    list goes on gathering meanwhile, within ``prefetch`` items): lists never pile up unasked.
    Signals: TypeError (raised here) for a non-callable; it raising, returning no stream, or an
        error of a stream fails the stream. Anchor: reactivex ``buffer_when``.
    """
    from ._buffers import buffer_when_stage

    check_callable("buffer_when", closing_mapper)
    check_int_arg("buffer_when", "prefetch", prefetch, 1)
    return buffer_when_stage(closing_mapper, prefetch, name=name)


def buffer_toggle(openings: Flowable[Any], closing_mapper: Callable[[Any], Any], *, prefetch: int = DEFAULT_PREFETCH,
                  name: str | None = None) -> Operator:
    """Open a list at each item of ``openings``; close it (emit it) when
    ``closing_mapper(opening)``'s stream emits or completes. Every item goes into every open list.

        source:    -a-b-c-d-e-|
        other:     --o-----o--|
        demand:    ^*
        output:    ------x-----(y|)  each closing: 4 frames; x = [b, c], y = [e]

    Completes when the openings completed and every list closed (the source's completion ends
    nothing, as in reactivex).
    Demand: the openings are asked for what downstream wants less the open lists; the items come
    in a window of ``prefetch`` (the open lists' items).
    Signals: TypeError (raised here) for bad arguments; an error of any stream, or the mapper
        raising, fails the stream. Anchor: reactivex ``buffer_toggle``; Reactor ``bufferWhen``.
    """
    from ._buffers import buffer_toggle_stage

    check_callable("buffer_toggle", closing_mapper)
    check_int_arg("buffer_toggle", "prefetch", prefetch, 1)
    return buffer_toggle_stage(_stream("buffer_toggle", "openings", openings), closing_mapper, prefetch, name=name)


def _windows(factory_name: str, kind: str, args: tuple[Any, ...], name: str | None,
             inputs: tuple[Flowable[Any], ...] = ()) -> Operator:
    from . import _windows as windows
    from ._window_core import WindowsFlowable

    factory = getattr(windows, factory_name)
    return lambda source: WindowsFlowable(source, factory, args, kind, name, inputs)


def window_with_count(count: int, skip: int | None = None, *, prefetch: int = DEFAULT_PREFETCH,
                      name: str | None = None) -> Operator:
    """Split the items into windows of ``count``, a new window starting every ``skip`` items
    (default ``count``); each window is a Flowable with its own demand.

        source:  -a-b-c-d-e-|
        main:    A--B---C---|        window_with_count(2)
        A:       -a-(b|)
        B:          --c-(d|)
        C:              --e-|

    The first window opens at once; at completion the open ones complete (the last may be empty).
    Demand: the main stream emits a window on its demand; each window delivers on its own
    subscriber's demand. The items waiting in windows bound the upstream: at most ``prefetch``
    (default 256) items requested and not yet delivered by the windows (Reactor ``FluxWindow``);
    a window nobody consumes holds that credit and pauses the others: subscribe to each window
    or cancel it (``Window.dispose()`` before subscribing). Cancelling the main stream opens no
    new window; the upstream is cancelled once every open window is disposed or closed.
    Signals: ArgumentOutOfRangeError (raised here) for a count or skip < 1; upstream errors
        reach the main stream and every open window. A window takes one subscriber.
    Anchor: reactivex ``window_with_count``; Reactor ``window(maxSize, skip)``.
    """
    count = _check_count("window_with_count", "count", count)
    skip = count if skip is None else _check_count("window_with_count", "skip", skip)
    check_int_arg("window_with_count", "prefetch", prefetch, 1)
    return _windows("window_with_count_stage", "window_with_count", (count, skip, prefetch), name)


def window_with_time(timespan: float | timedelta, timeshift: float | timedelta | None = None, *,
                     prefetch: int = DEFAULT_PREFETCH, name: str | None = None) -> Operator:
    """Split the items into windows of ``timespan`` seconds, a new window every ``timeshift``
    (default ``timespan``); each window is a Flowable with its own demand.

        source:  -a-b---c--|
        main:    A---B---C-|         window_with_time(0.04)
        A:       -a-b|
        B:           ---c|
        C:               --|

    Demand: as ``window_with_count``'s; a tick that would open a window while the main stream
    wants none is skipped (the open window goes on), so windows never pile up unasked; under
    unbounded demand the windows are reactivex's. Time: the loop's clock, one timer.
    Anchor: reactivex ``window_with_time``; Reactor ``window(Duration, Duration)``.
    """
    span = check_duration("window_with_time", "timespan", timespan)
    shift = span if timeshift is None else check_duration("window_with_time", "timeshift", timeshift)
    check_int_arg("window_with_time", "prefetch", prefetch, 1)
    return _windows("window_with_time_stage", "window_with_time", (span, shift, prefetch), name)


def window_with_time_or_count(timespan: float | timedelta, count: int, *, prefetch: int = DEFAULT_PREFETCH,
                              name: str | None = None) -> Operator:
    """Split the items into windows closed by ``count`` items or ``timespan`` seconds after they
    opened, whichever comes first.

        source:  -abc------d-|
        main:    A--B----C---|       window_with_time_or_count(0.05, 3)
        A:       -ab(c|)
        B:          -----|
        C:               -d--|

    Demand: as ``window_with_count``'s; a window whose time is up while the main stream wants no
    new one stays open another ``timespan``.
    Anchor: reactivex ``window_with_time_or_count``; Reactor ``windowTimeout``.
    """
    span = check_duration("window_with_time_or_count", "timespan", timespan)
    count = _check_count("window_with_time_or_count", "count", count)
    check_int_arg("window_with_time_or_count", "prefetch", prefetch, 1)
    return _windows("window_with_time_or_count_stage", "window_with_time_or_count", (span, count, prefetch), name)


def window(boundaries: Flowable[Any], *, prefetch: int = DEFAULT_PREFETCH, name: str | None = None) -> Operator:
    """Split the items into windows at each item of ``boundaries``; its completion completes
    the last window and the stream.

        source:  -a-b---c-----|
        other:   ----x-----x|
        main:    A---B-----C|
        A:       -a-b|
        B:           ---c--|
        C:                 |

    Demand: as ``window_with_count``'s; the boundaries are asked for what the main stream wants
    (one boundary, one window). Signals: TypeError (raised here) for a ``boundaries`` that is no
    stream; an error of either fails every window and the main stream.
    Anchor: reactivex ``window(boundaries)``; Reactor ``window(Publisher)``.
    """
    source_of_boundaries = _stream("window", "boundaries", boundaries)
    check_int_arg("window", "prefetch", prefetch, 1)
    return _windows("window_boundaries_stage", "window", (source_of_boundaries, prefetch), name,
                    (source_of_boundaries,))


def window_when(closing_mapper: Callable[[], Any], *, prefetch: int = DEFAULT_PREFETCH,
                name: str | None = None) -> Operator:
    """Split the items into windows, each closed when the stream ``closing_mapper()`` returns
    emits or completes; a new window (and a new closing stream) follows.

        source:  -a-b---c--|
        main:    A---B---C-|         each closing stream: 4 frames
        A:       -a-b|
        B:           ---c|
        C:               --|

    Demand: as ``window_with_count``'s; the next closing stream is made once the main stream
    wants another window. Signals: TypeError (raised here) for a non-callable; it raising or
    returning no stream fails the stream. Anchor: reactivex ``window_when``.
    """
    check_callable("window_when", closing_mapper)
    check_int_arg("window_when", "prefetch", prefetch, 1)
    return _windows("window_when_stage", "window_when", (closing_mapper, prefetch), name)


def window_toggle(openings: Flowable[Any], closing_mapper: Callable[[Any], Any], *, prefetch: int = DEFAULT_PREFETCH,
                  name: str | None = None) -> Operator:
    """Open a window at each item of ``openings``; close it when ``closing_mapper(opening)``'s
    stream emits or completes. Every item goes into every open window.

        source:  -a-b-c-d-e-|
        other:   --o-----o--|
        main:    --A-----B---|       each closing: 4 frames
        A:         -b-c|
        B:               -e-|

    The main stream completes when the openings completed and every window closed (reactivex
    completes it with the openings, its windows going on). The source's completion ends nothing.
    Demand: as ``window_with_count``'s; the openings are asked for what the main stream wants.
    Anchor: reactivex ``window_toggle``; Reactor ``windowWhen``.
    """
    check_callable("window_toggle", closing_mapper)
    check_int_arg("window_toggle", "prefetch", prefetch, 1)
    openings_source = _stream("window_toggle", "openings", openings)
    return _windows("window_toggle_stage", "window_toggle", (openings_source, closing_mapper, prefetch), name,
                    (openings_source,))


def group_by_until(key_mapper: Callable[[T], Hashable], element_mapper: Callable[[T], Any] | None,
                   duration_mapper: Callable[[Any], Any], subject_mapper: Any = None, *, max_groups: int = 1024,
                   prefetch: int = DEFAULT_PREFETCH, name: str | None = None) -> Operator:
    """``group_by`` whose groups end: each group (a Flowable, ``.key``) completes when its
    duration stream, ``duration_mapper(group)``, emits or completes; the key's next item opens a
    new group.

        source:  -a-A---a-|          key = str.lower; each duration: 4 frames
        main:    -A-----B-|
        A:        -a-A|
        B:              -a|

    ``duration_mapper`` gets the group itself (unicast: a duration made of the group takes its one
    subscription); ``subject_mapper`` is reactivex's and must be None (rxpipe's groups are
    Flowables with demand, not subjects).
    Demand: as ``window_with_count``'s; at most ``max_groups`` groups open at once (beyond:
    :class:`rxpipe.TooManyGroupsError`, as ``group_by``'s).
    Signals: TypeError (raised here) for bad arguments; a mapper raising, or an error of any
        stream, fails every group and the main stream.
    Anchor: reactivex ``group_by_until``; Reactor ``groupBy`` + ``take(Duration)`` per group.
    """
    check_callable("group_by_until", key_mapper)
    if element_mapper is not None:
        check_callable("group_by_until", element_mapper)
    check_callable("group_by_until", duration_mapper)
    if subject_mapper is not None:
        raise TypeError("group_by_until(subject_mapper=) is reactivex's subjects: rxpipe's groups are Flowables "
                        "with demand; leave it None")
    check_int_arg("group_by_until", "max_groups", max_groups, 1)
    check_int_arg("group_by_until", "prefetch", prefetch, 1)
    return _windows("group_by_until_stage", "group_by_until",
                    (key_mapper, element_mapper, duration_mapper, max_groups, prefetch), name)


def group_join(right: Flowable[Any], left_duration_mapper: Callable[[Any], Any],
               right_duration_mapper: Callable[[Any], Any], *, prefetch: int = DEFAULT_PREFETCH,
               name: str | None = None) -> Operator:
    """For each item of the source, emit ``(item, window)``: the window (a Flowable) holds the
    items of ``right`` whose windows overlap the item's, which lasts until its duration stream
    (``left_duration_mapper(item)``) emits or completes; a right item's lasts until
    ``right_duration_mapper(right_item)``'s does.

        source:  -a-----b---|        a's duration: 5 frames; b's and the rights': 1
        other:   ---1-2-----|
        main:    -A-----B---|        A = (a, window), B = (b, window)
        A:        --1-2(|)
        B:              -|

    The right side's completion ends nothing; the stream completes once the source completed and
    every window closed.
    Demand: as ``window_with_count``'s, and as ``join``'s for the right side (a window of
    ``prefetch`` open items); each duration is asked for one item.
    Anchor: reactivex ``group_join``; Rx.NET ``GroupJoin``.
    """
    source_of_rights = _stream("group_join", "right", right)
    check_callable("group_join", left_duration_mapper)
    check_callable("group_join", right_duration_mapper)
    check_int_arg("group_join", "prefetch", prefetch, 1)
    return _windows("group_join_stage", "group_join",
                    (source_of_rights, left_duration_mapper, right_duration_mapper, prefetch), name,
                    (source_of_rights,))


def partition(predicate: Callable[[T], Any], *, name: str | None = None) -> Any:
    """Split the stream in two: ``holds, fails = source.pipe(ops.partition(p))``, the items for
    which ``predicate`` holds and the others.

        source:  -1-2-3-4-|
        holds:   ---2---4-|          partition(is_even)
        fails:   -1---3---|

    The result unpacks (or indexes) into two Flowables, as reactivex's list of two; the predicate
    runs once per item. Both are subscribed before the source is (``broadcast``'s rule): consume
    them together.
    Demand: ``broadcast``'s: the source is asked, in total, for the minimum of what the two asked
    (the slowest governs); each drops the other's items and asks one more for each.
    Signals: TypeError (raised here) for a non-callable; ``predicate`` raising fails both.
    Anchor: reactivex ``partition``; Akka ``Partition(2)``.
    """
    from ._partition import PartitionFlowable

    check_callable("partition", predicate)
    return lambda source: PartitionFlowable(source, predicate, False, name)


def partition_indexed(predicate_indexed: Callable[[T, int], Any], *, name: str | None = None) -> Any:
    """``partition`` with ``predicate_indexed(item, index)``, the index counting from 0.

        source:  -a-b-c-d-|
        holds:   -a---c---|          partition_indexed(lambda x, i: i % 2 == 0)
        fails:   ---b---d-|

    Demand, signals: as ``partition``'s. Anchor: reactivex ``partition_indexed``.
    """
    from ._partition import PartitionFlowable

    check_callable("partition_indexed", predicate_indexed)
    return lambda source: PartitionFlowable(source, predicate_indexed, True, name)


def _stream(op: str, arg: str, value: Any) -> Flowable[Any]:
    from ._timing import _stream as stream

    return stream(op, arg, value)
