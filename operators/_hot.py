"""What is built on :class:`ConnectableFlowable`: ``ref_count`` (:class:`RefCountFlowable`), the
``mapper=`` forms (:class:`MappedFlowable`, cold: each subscription makes its own connectable and
connection) and what ``multicast`` reads of a reactivex subject (:func:`spec_of_subject`).
"""

from __future__ import annotations

import sys
from datetime import timedelta
from typing import Any, Callable

from rxpipe._protocol import Subscriber, Subscription
from rxpipe.flowable import Flowable

from ._args import ABSENT
from ._connectable import ConnectableFlowable, Connection

__all__ = ["HubSpec", "RefCountFlowable", "MappedFlowable", "spec_of_subject"]

#: how to make a connectable: (kind, replaying, buffer_size, window_s, initial value or ABSENT)
HubSpec = tuple[str, bool, "int | None", "float | None", Any]


def make_hub(source: Flowable[Any], spec: HubSpec, prefetch: int, name: str | None) -> ConnectableFlowable:
    kind, replaying, buffer_size, window_s, initial = spec
    return ConnectableFlowable(
        source,
        prefetch=prefetch,
        replaying=replaying,
        buffer_size=buffer_size,
        window_s=window_s,
        initial=initial,
        kind=kind,
        name=name,
    )


class _Leaving(Subscription):
    """A subscriber's subscription, telling ``on_leave`` once when it is cancelled."""

    __slots__ = ("inner", "guard")

    def __init__(self, inner: Subscription, guard: _Guard) -> None:
        self.inner = inner
        self.guard = guard

    def request(self, n: int) -> None:
        self.inner.request(n)

    def cancel(self) -> None:
        self.inner.cancel()
        self.guard.leave()


class _Guard:
    """Forwards every signal to ``actual`` and calls ``on_leave`` once, at its cancel or its
    terminal signal (reactivex disposes a subscription in both cases). ``on_next`` is the
    downstream's own bound method: no extra call per item."""

    __slots__ = ("actual", "on_leave", "left", "on_next")
    _rx_internal = True

    def __init__(self, actual: Subscriber[Any], on_leave: Callable[[], None]) -> None:
        self.actual = actual
        self.on_leave = on_leave
        self.left = False
        self.on_next = actual.on_next

    def leave(self) -> None:
        if not self.left:
            self.left = True
            self.on_leave()

    def on_subscribe(self, subscription: Subscription) -> None:
        self.actual.on_subscribe(_Leaving(subscription, self))

    def on_error(self, error: BaseException) -> None:
        try:
            self.actual.on_error(error)
        finally:
            self.leave()

    def on_complete(self) -> None:
        try:
            self.actual.on_complete()
        finally:
            self.leave()


class RefCountFlowable(Flowable[Any]):
    """``connectable.pipe(ops.ref_count())``: connects at the first subscriber, disposes the
    connection when the last one leaves (cancel or terminal signal), connects again at the next.

    ``count`` (live subscribers) and ``connection`` (the current one, or None) are its state.
    """

    kind = "ref_count"

    def __init__(self, source: Flowable[Any], name: str | None) -> None:
        if not isinstance(source, ConnectableFlowable):
            raise TypeError(
                f"ref_count() needs a ConnectableFlowable (from publish(), publish_value(), replay() or "
                f"multicast(subject)), got {source!r}"
            )
        super().__init__(name=name, upstreams=(source,))
        self.source: ConnectableFlowable = source
        self.count = 0
        self.connection: Connection | None = None
        self.connecting = False

    def _subscribe(self, subscriber: Subscriber[Any]) -> None:
        self.count += 1
        first = self.count == 1
        self.source._subscribe(_Guard(subscriber, self._left))  # type: ignore[arg-type]  # duck-typed
        if first:
            self.connecting = True  # a synchronous upstream may run (and the subscriber leave) inside
            try:
                connection = self.source.connect()
            finally:
                self.connecting = False
            if self.count == 0:  # the subscriber left inside its subscribe: nobody to connect for
                connection.dispose()
            else:
                self.connection = connection

    def _left(self) -> None:
        self.count -= 1
        if self.count:
            return
        connection, self.connection = self.connection, None
        if connection is None and self.connecting:
            connection = self.source.connection  # ours, still being made
        if connection is not None:
            connection.dispose()


class MappedFlowable(Flowable[Any]):
    """The ``mapper=`` form: each subscription makes a connectable of the source (by ``spec``),
    subscribes to ``mapper(connectable)``, then connects; the connection is disposed when that
    subscription is cancelled or terminates (reactivex ``multicast(subject_factory, mapper)``)."""

    def __init__(
        self,
        source: Flowable[Any],
        spec: Callable[[], HubSpec],
        mapper: Callable[[Any], Any],
        prefetch: int,
        kind: str,
        name: str | None,
    ) -> None:
        self.kind = kind
        super().__init__(name=name, upstreams=(source,))
        self.source = source
        self.spec = spec
        self.mapper = mapper
        self.prefetch = prefetch

    def _subscribe(self, subscriber: Subscriber[Any]) -> None:
        hub = make_hub(self.source, self.spec(), self.prefetch, f"{self.name}.shared")
        mapped = self.mapper(hub)
        if not isinstance(mapped, Flowable):
            raise TypeError(f"{self.kind}(mapper=) must return a Flowable, got {mapped!r}")
        holder: list[Connection | None] = [None]
        left = [False]

        def on_leave() -> None:
            left[0] = True
            connection = holder[0] or hub.connection  # hub.connection: still being made
            if connection is not None:
                connection.dispose()

        mapped._subscribe_safely(_Guard(subscriber, on_leave))  # type: ignore[arg-type]  # duck-typed
        if left[0]:
            return  # ended inside its subscribe (mapper gave rx.empty()): nothing to connect for
        connection = holder[0] = hub.connect()
        if left[0]:
            connection.dispose()


def spec_of_subject(subject: Any) -> HubSpec:
    """What ``multicast`` reads of a reactivex subject: its kind, ``BehaviorSubject.value``,
    ``ReplaySubject.buffer_size`` and its window (its scheduler is not read: the loop's clock is
    the time). The subject itself is never subscribed nor fed."""
    from reactivex.subject import AsyncSubject, BehaviorSubject, ReplaySubject, Subject

    if not isinstance(subject, Subject) or isinstance(subject, AsyncSubject):
        raise TypeError(
            f"multicast() takes a reactivex Subject, BehaviorSubject or ReplaySubject "
            f"(read for its kind and bounds), got {subject!r}"
        )
    if subject.is_disposed or subject.is_stopped or subject.observers:
        raise ValueError(
            "multicast() needs a fresh subject (not disposed, not terminated, no observers): rxpipe "
            "reads its kind and bounds, and never feeds it"
        )
    if isinstance(subject, ReplaySubject):
        if subject.queue:
            raise ValueError("multicast(ReplaySubject) needs one without history: rxpipe does not carry it over")
        size = None if subject.buffer_size == sys.maxsize else subject.buffer_size
        window = subject._window
        window_s = None if window == timedelta.max else window.total_seconds()
        return ("replay", True, size, window_s, ABSENT)
    if isinstance(subject, BehaviorSubject):
        return ("publish_value", False, None, None, subject.value)
    return ("publish", False, None, None, ABSENT)
