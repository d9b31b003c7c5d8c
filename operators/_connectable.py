"""Hot Flowables: :class:`ConnectableFlowable` (what ``publish``, ``publish_value``, ``replay`` and
``multicast`` return) and the :class:`Connection` its ``connect()`` hands back.

A connectable Flowable plays the part of reactivex's subject: it is subscribed any number of
times, and subscribes its upstream once per ``connect()``. The model is one *log* of the items
received, positions ``head .. tail - 1`` (a list from ``base``, compacted in halves), and one
*cursor* per subscriber (the position of its next item): a subscriber takes items from its cursor
on its own demand. Where a new subscriber starts is the kind's history rule:

- publish: at ``tail`` (the items received from now on; reactivex ``Subject``);
- publish_value: at ``tail - 1``, the latest value (the initial value seeds the log; after the
  end only the terminal signal, as ``BehaviorSubject``);
- replay: at the oldest item within ``buffer_size`` items and ``window`` seconds of the loop's
  clock (``ReplaySubject``).

Demand (Reactor ``publish(prefetch)``; the slowest governs): each live subscriber's free credit is
its outstanding request minus the items already waiting for it (``tail - cursor``); upstream
outstanding is raised to ``min(prefetch, smallest free credit)``, exactly while that is below
``prefetch``, else in steps of ``prefetch - prefetch // 4``. No subscriber: nothing is requested.
So every item upstream sends is wanted by every live subscriber, and the log holds only the
in-flight items a subscriber joining late has no credit for, plus replay's history.

Deliveries run in one serial pass (:class:`~rxpipe.stage.SerialLoop`): to subscribers at the
same position item by item in subscription order (as a subject pushes them); upstream is asked
after the pass, never from inside a subscriber's ``on_next``.
"""

from __future__ import annotations

from typing import Any

from rxpipe._pressure import loop_clock
from rxpipe._protocol import UNBOUNDED, Subscriber
from rxpipe.errors import MissingBackpressureError
from rxpipe.flowable import Flowable
from rxpipe.metrics import StageCounters, StageStatistics
from rxpipe.stage import LINK_SLOTS, DrainSubscription, SerialLoop, UpstreamLink, discard_all

from ._args import ABSENT

__all__ = ["ConnectableFlowable", "Connection", "HotSubscription"]

#: compact the log when at least this many items before ``head`` are unused (and half of it)
_COMPACT = 64


class Connection:
    """The handle ``ConnectableFlowable.connect()`` returns: ``dispose()`` (or ``cancel()``)
    cancels the upstream subscription of this connection, once (later calls do nothing).

    ``closed``: the upstream of this connection ended (terminated, or disposed). Subscribers stay
    subscribed to the connectable after a dispose: a later ``connect()`` subscribes upstream
    again and they receive its items (reactivex's ``ConnectableObservable``).
    Anchor: reactivex ``connect()`` (a Disposable), Reactor ``connect()`` (a Disposable).
    """

    __slots__ = ("_hub", "_link")

    def __init__(self, hub: ConnectableFlowable, link: HotLink | None) -> None:
        self._hub = hub
        self._link = link

    @property
    def closed(self) -> bool:
        """True once this connection's upstream terminated or was disposed."""
        return self._link is None or self._link.upstream_done

    def dispose(self) -> None:
        """Cancel this connection's upstream subscription (idempotent)."""
        link, self._link = self._link, None
        if link is not None:
            self._hub.disconnected(link)
            link.cancel_upstream()

    cancel = dispose

    def __repr__(self) -> str:
        return f"<Connection {self._hub.name} {'closed' if self.closed else 'open'}>"


class HotLink(UpstreamLink):
    """One connection's subscriber of the upstream; every signal goes to the hub."""

    __slots__ = (*LINK_SLOTS, "hub", "__weakref__")
    hands_itself_downstream = False

    def __init__(self, hub: ConnectableFlowable) -> None:
        self.hub = hub
        self.link_upstream(hub.name)

    def _upstream_ready(self) -> None:
        self.hub.dispatch()

    def on_next(self, item: Any) -> None:
        if self.accept(item):
            self.counters.items_in += 1
            self.hub.received(item)

    def _upstream_finished(self, error: BaseException | None) -> None:
        self.hub.ended(self, error)

    def _upstream_overrun(self, error: MissingBackpressureError) -> None:
        self.hub.ended(self, error)

    def statistics(self) -> StageStatistics:
        return self.hub.statistics()


class HotSubscription(DrainSubscription):
    """One subscriber of a connectable: ``cursor`` is the log position of its next item."""

    __slots__ = ("hub", "cursor")

    def __init__(self, downstream: Subscriber[Any], hub: ConnectableFlowable, cursor: int) -> None:
        super().__init__(downstream)
        self.hub = hub
        self.cursor = cursor

    def _on_request(self, n: int) -> None:
        self.hub.dispatch()  # the demand may let upstream be asked for more

    def _drain(self) -> None:
        self.hub.serve(self)

    def _release(self) -> None:
        self.hub.leave(self)

    def _holds(self) -> bool:
        return self.cursor < self.hub.tail


class ConnectableFlowable(Flowable[Any]):
    """A hot Flowable: subscribe it any number of times, then ``connect()`` to subscribe the
    upstream (``publish()``, ``publish_value(v)``, ``replay(...)``, ``multicast(subject)``).

    State: the log (``head``, ``tail``: positions of the oldest item held and of the next one),
    the live subscribers, ``terminal`` (None while open, else ``(error or None,)``), the current
    :class:`Connection` (None while disconnected). :meth:`connect`, :meth:`statistics`.
    """

    kind = "publish"

    def __init__(
        self,
        source: Flowable[Any],
        *,
        prefetch: int,
        replaying: bool = False,
        buffer_size: int | None = None,
        window_s: float | None = None,
        initial: Any = ABSENT,
        kind: str = "publish",
        name: str | None = None,
    ) -> None:
        self.kind = kind
        super().__init__(name=name, upstreams=(source,))
        self.source = source
        self.prefetch = prefetch
        self.limit = prefetch - prefetch // 4
        self.replaying = replaying
        self.buffer_size = buffer_size
        self.window_s = window_s
        self.initial = initial
        self.log: list[Any] = [] if initial is ABSENT else [initial]
        self.times: list[float] = []  # arrival times, parallel to log (replay with a window)
        self.base = 0
        self.head = 0
        self.tail = len(self.log)
        self.history = 0  # replay: the oldest position a new subscriber starts at (moves forward)
        self.subscribers: list[HotSubscription] = []
        self.terminal: tuple[BaseException | None] | None = None
        self.link: HotLink | None = None
        self.connection: Connection | None = None
        self.counters = StageCounters(self.name)
        self.stepping = False
        self.serving = SerialLoop(self._pass)

    # -- connecting ------------------------------------------------------------------------------
    def connect(self) -> Connection:
        """Subscribe the upstream, unless connected already (then the same :class:`Connection`).

        Nothing is requested before a subscriber asks (the slowest governs): connecting with no
        subscriber reads nothing, where reactivex's cold source would run into no observer.
        After the upstream terminated, returns a closed Connection and subscribes nothing
        (reactivex subscribes the source again into its stopped subject, which no one sees)."""
        if self.terminal is not None:
            return Connection(self, None)
        if self.connection is not None:
            return self.connection
        link = HotLink(self)
        connection = Connection(self, link)
        self.link, self.connection, self.counters = link, connection, link.counters
        self.source._subscribe_safely(link)
        return connection

    def disconnected(self, link: HotLink) -> None:
        if self.link is link:
            self.link = self.connection = None

    def ended(self, link: HotLink, error: BaseException | None) -> None:
        """The upstream of ``link`` terminated: every subscriber gets the signal after its items."""
        if self.link is not link:
            return
        self.link = self.connection = None
        self.terminal = (error,)
        self.dispatch()

    # -- subscribers -----------------------------------------------------------------------------
    def _subscribe(self, subscriber: Subscriber[Any]) -> None:
        subscription = HotSubscription(subscriber, self, self.start_position())
        self.subscribers.append(subscription)
        subscriber.on_subscribe(subscription)
        self.dispatch()

    def start_position(self) -> int:
        """Where a new subscriber starts: the kind's history rule (module doc)."""
        if self.replaying:
            return self.history_start()
        if self.initial is ABSENT or self.terminal is not None:
            return self.tail
        return self.tail - 1

    def history_start(self) -> int:
        """The oldest position kept for subscribers to come."""
        tail = self.tail
        if not self.replaying:
            return tail if self.initial is ABSENT else tail - 1
        start = self.history
        if self.buffer_size is not None and tail - start > self.buffer_size:
            start = tail - self.buffer_size
        if self.window_s is not None and start < tail:
            now, times, base, window = loop_clock()(), self.times, self.base, self.window_s
            while start < tail and now - times[start - base] > window:
                start += 1
        self.history = start
        return start

    def leave(self, subscription: HotSubscription) -> None:
        try:
            self.subscribers.remove(subscription)
        except ValueError:
            return
        self.dispatch()  # the others may get more

    # -- items -----------------------------------------------------------------------------------
    def received(self, item: Any) -> None:
        if not self.subscribers and not self.replaying and self.initial is ABSENT:
            # in flight when the last subscriber left: a publish gives it to no one (counted, told)
            discard_all((item,), "no_subscriber", self.counters)
            return
        self.log.append(item)
        if self.window_s is not None:
            self.times.append(loop_clock()())
        tail = self.tail = self.tail + 1
        serving = self.serving
        if serving.running:
            serving.missed = True
            return
        # Fast path (the hot loop): every subscriber is at the new item with credit and not in a
        # drain of its own: hand it over here, in subscription order, under the serial flag (a
        # re-entrant signal only marks a pass missed), then run a pass only if one is due.
        behind = False
        serving.running = True
        try:
            for sub in tuple(self.subscribers):
                requested = sub.requested
                if sub.cursor == tail - 1 and requested and not sub._wip and not sub.cancelled:
                    sub.cursor = tail
                    if requested != UNBOUNDED:
                        sub.requested = requested - 1
                    sub.emitted += 1
                    self.counters.items_out += 1
                    sub.downstream.on_next(item)
                else:
                    behind = True
        finally:
            serving.running = False
        if behind or serving.missed:
            serving.missed = False
            serving()
        else:
            self.trim()
        self.request_due()

    def serve(self, sub: HotSubscription) -> None:
        """One drain pass of ``sub``: its items from its cursor on its demand (one item when the
        pass goes round the subscribers), then the terminal signal once it reached the tail."""
        r = sub.requested
        pos = sub.cursor
        if r and pos < self.tail:
            end = min(self.tail, pos + r)
            if self.stepping:
                end = pos + 1
            on_next = sub.downstream.on_next
            start = pos
            # Invariant: cursor and requested move together, before on_next, so the free credit
            # (requested - (tail - cursor)) the demand rule reads is exact at every moment.
            while pos < end:
                item = self.log[pos - self.base]
                pos += 1
                sub.cursor = pos
                if sub.requested != UNBOUNDED:
                    sub.requested -= 1
                on_next(item)
                if sub.cancelled:
                    break
            sub.emitted += pos - start
            self.counters.items_out += pos - start
            if sub.cancelled:
                return
        if self.terminal is not None and sub.cursor == self.tail:
            error = self.terminal[0]
            if error is None:
                sub._complete()
            else:
                sub._error(error)

    def dispatch(self) -> None:
        """Serve the subscribers (serially: a call while serving only marks a pass missed), then
        ask upstream for what is due. The request is made outside the pass: a synchronous
        upstream answering it has each item served as it arrives, before the next one (a
        subscriber leaving on an item, as ``take`` does, disconnects before the rest arrive)."""
        serving = self.serving
        if serving.running:
            serving.missed = True
            return
        serving()
        self.request_due()

    def _pass(self) -> None:
        """Serve every subscriber, free what no one needs."""
        subscribers = self.subscribers
        if len(subscribers) > 1:
            self.stepping = True  # item by item, in subscription order (a subject's order)
            try:
                more = True
                while more:
                    for sub in list(subscribers):
                        sub.drain()
                    tail = self.tail
                    more = any(sub.cursor < tail and sub.requested for sub in subscribers)
            finally:
                self.stepping = False
        else:
            for sub in list(subscribers):
                sub.drain()
        self.trim()

    def trim(self) -> None:
        """Free the items before ``head`` (no subscriber's, not history) once they are at least
        half the log and ``_COMPACT`` items: amortised O(1) per item."""
        if len(self.log) < 2 * _COMPACT:
            return
        head = self.oldest_needed()
        unused = head - self.base
        if unused >= _COMPACT and unused * 2 >= len(self.log):
            del self.log[:unused]
            if self.times:
                del self.times[:unused]
            self.base = head

    def oldest_needed(self) -> int:
        """``head``: the oldest position a subscriber or the history still needs."""
        head = self.history_start()
        for sub in self.subscribers:
            if sub.cursor < head:
                head = sub.cursor
        self.head = head
        return head

    def request_due(self) -> None:
        """Raise upstream outstanding to ``min(prefetch, smallest free credit)`` (module doc)."""
        link = self.link
        if link is None or link.upstream is None or link.upstream_done or not self.subscribers:
            return
        in_flight = link.upstream_outstanding
        if in_flight == UNBOUNDED:
            return
        tail, want = self.tail, UNBOUNDED
        for sub in self.subscribers:
            r = sub.requested
            if r != UNBOUNDED and r - (tail - sub.cursor) < want:
                want = r - (tail - sub.cursor)
        target = want if want < self.prefetch else self.prefetch
        deficit = target - in_flight
        if deficit <= 0 or (target == self.prefetch and deficit < self.limit and in_flight):
            return
        link.request_upstream(UNBOUNDED if target == UNBOUNDED else deficit)

    # -- the live view ---------------------------------------------------------------------------
    @property
    def subscriber_count(self) -> int:
        """Live subscribers."""
        return len(self.subscribers)

    def statistics(self) -> StageStatistics:
        """Demand (the smallest outstanding request over the subscribers, items), items held
        (waiting for a subscriber, or kept as replay history), capacity (``prefetch``), in/out."""
        counters = self.counters
        demand = min((s.requested for s in self.subscribers), default=0)
        return StageStatistics(
            counters.stage,
            demand,
            self.tail - self.oldest_needed(),
            self.prefetch,
            counters.items_in,
            counters.items_out,
            dict(counters.dropped),
        )
