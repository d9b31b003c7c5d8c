"""Hot and multicast: ``broadcast`` (one upstream, ``n`` branches at the pace of the slowest) and
reactivex's connectable family: ``publish``, ``publish_value``, ``replay``, ``multicast``,
``ref_count``, ``share`` (a :class:`ConnectableFlowable` whose slowest subscriber governs the
upstream demand, DESIGN §3 "Operators, third round"), with the types :class:`ConnectableFlowable`
and :class:`Connection`.
"""

from __future__ import annotations

from typing import Any, Callable

from rxpipe.flowable import Flowable, Operator

from ._args import ABSENT, check_callable, check_duration, check_int_arg, check_optional_callable
from ._broadcast import BroadcastFlowable
from ._connectable import ConnectableFlowable, Connection
from ._hot import HubSpec, MappedFlowable, RefCountFlowable, make_hub, spec_of_subject

__all__ = [
    "broadcast",
    "publish",
    "publish_value",
    "replay",
    "multicast",
    "ref_count",
    "share",
    "ConnectableFlowable",
    "Connection",
]

_PUBLISH: HubSpec = ("publish", False, None, None, ABSENT)


def broadcast(n: int, *, name: str | None = None) -> Operator:
    """Send every item to ``n`` branches, at the pace of the slowest: ``a, b = f.pipe(broadcast(2))``.

        source:  -x-y-z-|
        a:       ^1  ^2
        b:       ^5
        upstream: ^1 ^2                  min over the branches' total demand
        a, b:    -x--y-z-|               both get every item

    Returns a Flowable whose ``branches`` (a tuple of ``n`` Flowables) it unpacks into (also
    ``result[k]``); subscribing to the result itself signals ``TypeError``. Each branch takes one
    subscriber; upstream is subscribed once all ``n`` branches are (Reactor
    ``publish().autoConnect(n)``); when the run ends the branches may be subscribed again, which
    subscribes upstream again.
    Demand: upstream has been asked, in total, for the minimum over the live branches of what each
    asked in total, so every item is wanted by every live branch and nothing queues. A cancelled
    branch stops counting (the others may get more at once); all cancelled → upstream cancelled.
    Signals: ValueError (raised here) for ``n < 1``; a second subscriber to a branch in one run
    gets ``ProtocolViolationError``; upstream errors and completion reach every live branch;
    an upstream emitting beyond demand signals ``MissingBackpressureError`` and is cancelled.
    Anchor: Akka ``Broadcast`` (backpressures on the slowest), Reactor ``publish().autoConnect(n)``.
    """
    check_int_arg("broadcast", "n", n, 1)
    return lambda source: BroadcastFlowable(source, n, name)


def _connectable(
    op: str, spec: HubSpec, mapper: Callable[[Any], Any] | None, prefetch: int, name: str | None
) -> Operator:
    check_optional_callable(op, "mapper", mapper)
    check_int_arg(op, "prefetch", prefetch, 1)
    if mapper is None:
        return lambda source: make_hub(source, spec, prefetch, name)
    return lambda source: MappedFlowable(source, lambda: spec, mapper, prefetch, op, name)


def publish(
    mapper: Callable[[Flowable[Any]], Flowable[Any]] | None = None, *, prefetch: int = 32, name: str | None = None
) -> Operator:
    """Share one subscription of the source among many subscribers: a :class:`ConnectableFlowable`
    that subscribes upstream at ``connect()``.

        source:   -a-b-c-d-|
        x:        ^2   ^2                 subscribed before connect(), with its requests
        y:        ^9
        upstream: ^2   ^2                 the smallest free credit over x and y
        x gets:   -a-b-c-d-|
        y gets:   -a-b-c-d-|

    A subscriber gets the items received after it subscribed (reactivex ``Subject``); after the
    upstream ended, only the end. ``connect()`` returns a :class:`Connection` (``dispose()``);
    a later ``connect()`` subscribes upstream again for the subscribers still there. With
    ``mapper``: a cold Flowable; each subscription makes its own connectable ``shared``,
    subscribes to ``mapper(shared)`` (which may use ``shared`` many times) and connects; the
    connection is disposed when that subscription ends or is cancelled.
    Demand: the slowest subscriber governs: upstream outstanding <= ``min(prefetch, smallest
    free credit)`` over the live subscribers (free credit: its outstanding request minus the
    items waiting for it), requested exactly while below ``prefetch``, then in steps of
    ``prefetch - prefetch // 4`` (Reactor ``publish(prefetch)``). A cancelled subscriber stops
    counting; with no subscriber nothing is requested (reactivex's subject drops what the
    source pushes with no observer: rxpipe asks for nothing instead; an item in flight when the
    last one left reaches nobody and is counted dropped, reason ``"no_subscriber"``, told with
    ``on_discard``). Items arrive to every subscriber in subscription order.
    Args: mapper (shared Flowable -> Flowable, or None); prefetch (items, >= 1).
    Signals: TypeError/ValueError (raised here) for a non-callable mapper or a bad prefetch; the
        upstream's error or completion reaches every subscriber after its items; an upstream
        emitting beyond demand signals ``MissingBackpressureError`` to all.
    Anchor: reactivex ``publish(mapper)``; Reactor ``publish(prefetch)`` (the slowest governs).
    """
    return _connectable("publish", _PUBLISH, mapper, prefetch, name)


def publish_value(
    initial_value: Any,
    mapper: Callable[[Flowable[Any]], Flowable[Any]] | None = None,
    *,
    prefetch: int = 32,
    name: str | None = None,
) -> Operator:
    """As :func:`publish`, but a subscriber first gets the latest value: ``initial_value`` until
    the first item, then the last item received (reactivex's ``BehaviorSubject``).

        source:   --a---b-|               publish_value("i")
        x:        ^9                      subscribed before connect()
        y:        ^2    ^1
        upstream: ^1    ^1                the value i used one of y's 2
        x gets:   i-a---b-|
        y gets:   i-a---b-|

    A subscriber holds at most one value beyond the items it requested: the latest one, given at
    its first request. After the upstream ended a new subscriber gets only the end, no value
    (as ``BehaviorSubject``). ``mapper``: as :func:`publish`'s.
    Demand: :func:`publish`'s rule, the held value counting as an item waiting for its subscriber.
    Args: initial_value (any item but None, Reactive Streams §2.13); mapper; prefetch (items, >= 1).
    Signals: ValueError for ``initial_value=None``; otherwise :func:`publish`'s.
    Anchor: reactivex ``publish_value(initial_value, mapper)``.
    """
    if initial_value is None:
        raise ValueError(
            "publish_value(initial_value) cannot be None: a Flowable never emits None (Reactive Streams §2.13)"
        )
    return _connectable("publish_value", ("publish_value", False, None, None, initial_value), mapper, prefetch, name)


def replay(
    buffer_size: int | None = None,
    window: Any = None,
    *,
    mapper: Callable[[Flowable[Any]], Flowable[Any]] | None = None,
    scheduler: Any = None,
    prefetch: int = 32,
    name: str | None = None,
) -> Operator:
    """As :func:`publish`, but a new subscriber first gets the history: the last ``buffer_size``
    items received within ``window`` (reactivex's ``ReplaySubject``).

        source:   -a-b-c|                 replay(buffer_size=2)
        x:        ^9                      subscribed before connect()
        z:                ^9              subscribes at column 8, after the end
        x gets:   -a-b-c|
        z gets:           (bc|)           the last 2 items, then the end

    Each subscriber is served its history on its own demand, then the live items; the end comes
    after them. ``window`` is measured on the loop's clock (virtual time works) from an item's
    arrival to the subscription. ``mapper``: as :func:`publish`'s (reactivex 6.1 takes it by
    keyword only here).
    Demand: :func:`publish`'s rule; a subscriber behind in its history counts its history as
    waiting items, so upstream waits for it. The history is the one documented exception to
    "nothing buffers without bound": with ``buffer_size=None`` and ``window=None`` every item is
    kept (bound it for a long stream).
    Args: buffer_size (items, >= 0, or None: no count bound); window (seconds or a
        ``timedelta``, >= 0, or None); scheduler (must be None: asyncio has one loop, whose clock
        is the time); mapper; prefetch (items, >= 1).
    Signals: TypeError/ValueError (raised here) for bad bounds or a scheduler; otherwise
        :func:`publish`'s; a late subscriber after an error gets the history, then the error.
    Anchor: reactivex ``replay(buffer_size, window, mapper=, scheduler=)``; Reactor ``replay(history)``.
    """
    if callable(buffer_size):
        raise TypeError(
            "replay(buffer_size) got a callable: reactivex 6.1 takes the mapper by keyword, "
            "replay(buffer_size, window, mapper=fn)"
        )
    if buffer_size is not None:
        check_int_arg("replay", "buffer_size", buffer_size, 0)
    window_s = None if window is None else check_duration("replay", "window", window, zero=True)
    if scheduler is not None:
        raise ValueError(
            "replay(scheduler=) must be None: rxpipe runs on one asyncio loop, whose clock measures the window"
        )
    return _connectable("replay", ("replay", True, buffer_size, window_s, ABSENT), mapper, prefetch, name)


def multicast(
    subject: Any = None,
    *,
    subject_factory: Callable[[Any], Any] | None = None,
    mapper: Callable[[Flowable[Any]], Flowable[Any]] | None = None,
    prefetch: int = 32,
    name: str | None = None,
) -> Operator:
    """Share the source as a reactivex subject kind would: ``Subject()`` → :func:`publish`,
    ``BehaviorSubject(v)`` → :func:`publish_value` (v), ``ReplaySubject(n, w)`` → :func:`replay`
    (n, w).

        source:   --a-b-|                 multicast(BehaviorSubject("i"))
        x:        ^9                      subscribed before connect()
        x gets:   i-a-b-|

    rxpipe has no subjects: it reads the subject's kind and parameters when ``multicast`` is
    called (``BehaviorSubject.value``; ``ReplaySubject``'s buffer size and window, not its
    scheduler) and never subscribes or feeds it; each application makes its own connectable.
    ``subject_factory`` (called with ``None`` for the scheduler at each subscription) and
    ``mapper`` give the cold form (reactivex's): each subscription reads a new subject, runs
    ``mapper`` over the shared Flowable and connects.
    Demand: :func:`publish`'s rule.
    Args: subject (a fresh reactivex ``Subject``, ``BehaviorSubject`` or ``ReplaySubject``);
        subject_factory (scheduler -> such a subject); mapper (needed with subject_factory);
        prefetch (items, >= 1).
    Signals: ValueError (raised here) without a subject or factory ("multicast: Subject cannot be
        None", reactivex's), for both at once, a mapper without a factory (reactivex ignores it) or a
        factory without a mapper, a used subject (observers, history, terminated); TypeError for
        another subject kind (``AsyncSubject``); a factory returning one signals it downstream.
    Anchor: reactivex ``multicast(subject, subject_factory=, mapper=)``.
    """
    check_int_arg("multicast", "prefetch", prefetch, 1)
    if subject_factory is not None:
        check_callable("multicast", subject_factory, "subject_factory")
        if subject is not None:
            raise ValueError("multicast() takes a subject or subject_factory=, not both")
        if mapper is None:
            raise ValueError("multicast(subject_factory=) needs mapper= (reactivex's cold form)")
        check_callable("multicast", mapper, "mapper")
        factory, fn = subject_factory, mapper
        return lambda source: MappedFlowable(
            source, lambda: spec_of_subject(factory(None)), fn, prefetch, "multicast", name
        )
    if subject is None:
        raise ValueError("multicast: Subject cannot be None")
    if mapper is not None:
        raise ValueError("multicast(subject, mapper=): a mapper needs subject_factory= (reactivex ignores it here)")
    spec = spec_of_subject(subject)
    return lambda source: make_hub(source, spec, prefetch, name)


def ref_count(*, name: str | None = None) -> Operator:
    """Connect a :class:`ConnectableFlowable` at its first subscriber and dispose the connection
    when the last one leaves: ``source.pipe(ops.publish(), ops.ref_count())``.

        x:        ^9!                     the first subscriber connects; it cancels at column 2
        y:              ^9                the next one connects again: a new upstream run
        source:   -a-b-|                  the upstream, played from each connection
        x gets:   -a
        y gets:         -a-b-|

    A subscriber leaves by cancelling or by its terminal signal. The count belongs to each
    application (reactivex keeps one per ``ref_count()`` call, shared by every connectable that
    one operator is applied to). After the upstream completed, a new
    subscriber gets what the connectable gives late subscribers (publish: the end) and no new
    upstream subscription is made.
    Demand: the connectable's (the slowest subscriber governs); the last one leaving cancels
    the upstream.
    Signals: TypeError (when applied) for a source that is not a :class:`ConnectableFlowable`;
        otherwise the connectable's.
    Anchor: reactivex ``ref_count()``; Reactor ``refCount()``.
    """
    return lambda source: RefCountFlowable(source, name)


def share(*, prefetch: int = 32, name: str | None = None) -> Operator:
    """One upstream subscription shared while anyone is subscribed: ``publish()`` then
    ``ref_count()``.

        source:   -a-b-c-d-|
        x:        ^9                      the first subscriber: share connects
        y:          ^9                    joins at column 2: the items from then on
        upstream: ^9
        x gets:   -a-b-c-d-|
        y gets:   ---b-c-d-|

    Demand: :func:`publish`'s rule (the slowest governs, ``prefetch`` caps what is outstanding);
    the last subscriber leaving cancels the upstream, the next one subscribes it again.
    Args: prefetch (items, >= 1).
    Signals: ValueError (raised here) for a bad prefetch; otherwise :func:`publish`'s.
    Anchor: reactivex ``share()``; Reactor ``share()``.
    """
    check_int_arg("share", "prefetch", prefetch, 1)
    return lambda source: RefCountFlowable(make_hub(source, _PUBLISH, prefetch, None), name)
