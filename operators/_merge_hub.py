"""``merge_hub``: one consumer, producers that attach and leave at run time (Akka ``MergeHub``).

:class:`MergeHub` is a Flowable (the consumer side; one subscriber) with :meth:`MergeHub.attach`
(subscribe a producer) and :meth:`MergeHub.sink` (a Subscriber to hand to any Publisher). Every
producer is a :class:`HubProducer`: an :class:`~rxpipe.stage.UpstreamLink` with
``per_producer_buffer`` items of credit (requested when it attaches), given back by
``ceil(buffer / 2)`` each time that many of its items went downstream (Akka's
``DemandThreshold``). Items wait in one queue in arrival order, so

    a producer's outstanding requests + its queued items <= per_producer_buffer

and the hub holds at most ``producers * per_producer_buffer`` items. A producer that ends
(completes, fails, or is detached) is removed; the items it already delivered stay queued and
go out in order: nothing is lost or sent twice. A producer counts from the moment it is
attached (its handle made), so one whose publisher subscribes only after
:meth:`MergeHub.drain_and_complete` still runs to its end. Attaching after
``drain_and_complete()`` is the caller's mistake and raises (``ProtocolViolationError``), never a
producer silently cancelled. Cancelling the consumer closes the hub: every producer is cancelled,
and so is any producer attaching later (Akka).
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Any

from rxpipe._protocol import Publisher, Subscriber
from rxpipe.errors import BufferOverflowError, MissingBackpressureError, ProtocolViolationError
from rxpipe.flowable import Flowable
from rxpipe.metrics import StageCounters, StageStatistics, track
from rxpipe.sources import from_publisher
from rxpipe.stage import EMPTY_SUBSCRIPTION, LINK_SLOTS, DrainSubscription, UpstreamLink, discard_all

from ._args import check_int_arg
from ._publishers import publisher_problem

__all__ = ["merge_hub", "MergeHub", "HubProducer"]

log = logging.getLogger("rxpipe")


class HubProducer(UpstreamLink):
    """One producer of a :class:`MergeHub` (what :meth:`MergeHub.attach` returns, and what
    :meth:`MergeHub.sink` gives to a Publisher's ``subscribe``).

    State: ``done`` (it ended: completed, failed, was detached, or the hub closed), ``error``
    (its error, if it failed), ``queued`` (its items waiting in the hub), ``sent`` (its items
    the hub received). :meth:`cancel` detaches it: its upstream is cancelled; what it already
    delivered still goes out.
    """

    __slots__ = (*LINK_SLOTS, "hub", "queued", "sent", "error", "ended")
    hands_itself_downstream = False

    def __init__(self, hub: MergeHub) -> None:
        self.hub = hub
        self.queued = 0
        self.sent = 0
        self.error: BaseException | None = None
        self.ended = False
        buffer = hub.per_producer_buffer
        self.link_upstream(None, buffer, limit=(buffer + 1) // 2)
        self.counters = hub.counters

    @property
    def done(self) -> bool:
        return self.ended

    def _upstream_ready(self) -> None:
        # Only a closed hub refuses a producer here. One attached before drain_and_complete() is
        # counted among the producers the drain waits for, however late its publisher calls
        # on_subscribe; cancelling it then would complete the hub without its items.
        if self.hub.closed:
            self.cancel()  # the consumer is gone: Akka cancels late producers
            return
        super()._upstream_ready()

    def on_next(self, item: Any) -> None:
        if self.accept(item):
            self.sent += 1
            self.hub.arrived(self, item)

    def _upstream_finished(self, error: BaseException | None) -> None:
        self.hub.producer_ended(self, error)

    def _upstream_overrun(self, error: MissingBackpressureError) -> None:
        self.hub.producer_ended(self, error)  # upstream is cancelled already; the hub goes on

    def cancel(self) -> None:
        """Detach this producer (idempotent): cancel its upstream; its queued items still go out."""
        self.cancel_upstream()
        self.hub.producer_ended(self, None)

    def __repr__(self) -> str:
        return f"<HubProducer of {self.hub.name!r} sent={self.sent} queued={self.queued} done={self.ended}>"


class _Consumer(DrainSubscription):
    """The hub's one consumer: delivers the queue in arrival order, on demand."""

    __slots__ = ("hub",)

    def __init__(self, downstream: Subscriber[Any], hub: MergeHub) -> None:
        super().__init__(downstream)
        self.hub = hub

    def _drain(self) -> None:
        hub = self.hub
        queue = hub.queue
        r = self.requested
        if queue and r:
            on_next = self.downstream.on_next
            e = 0
            # Invariant: e <= r; each item's credit goes back to its producer as it leaves.
            while e != r and queue:
                producer, item = queue.popleft()
                producer.queued -= 1
                on_next(item)
                e += 1
                producer.replenish(1)
                if self.cancelled:
                    break
            self._delivered(e, r)
            hub.counters.items_out += e
            if self.cancelled:
                return
        if not queue and hub.finished():
            self._complete()

    def _release(self) -> None:
        self.hub.close()


class MergeHub(Flowable[Any]):
    """The result of ``ops.merge_hub(...)``: a source whose items come from producers attached
    at run time. Subscribe it once (its consumer); :meth:`attach` producers (Flowables or
    Publishers) before or after; :meth:`drain_and_complete` to end it once they are done.

    State: ``producers`` (attached and running), ``queued`` (items waiting), ``draining``,
    ``closed`` (the consumer ended: no producer is accepted any more).
    """

    kind = "merge_hub"

    def __init__(self, per_producer_buffer: int, max_producers: int, name: str | None) -> None:
        super().__init__(name=name)
        self.per_producer_buffer = per_producer_buffer
        self.max_producers = max_producers
        self.queue: deque[tuple[HubProducer, Any]] = deque()
        self.live: set[HubProducer] = set()
        self.consumer: _Consumer | None = None
        self.draining = False
        self.closed = False
        self.counters = StageCounters(self.name)
        track(self)

    @property
    def producers(self) -> int:
        return len(self.live)

    @property
    def queued(self) -> int:
        return len(self.queue)

    @property
    def refuses_producers(self) -> bool:
        return self.closed or self.draining

    # -- producers -------------------------------------------------------------------------------
    def sink(self) -> HubProducer:
        """A new producer: a Subscriber to pass to ``publisher.subscribe``. It counts from now:
        :meth:`drain_and_complete` waits for it even if its publisher subscribes later.

        Raises ProtocolViolationError after :meth:`drain_and_complete` (no producer may join a
        draining hub: its items would never go out), BufferOverflowError when ``max_producers``
        are attached; on a closed hub (the consumer cancelled) the producer cancels its
        publisher at once (Akka)."""
        if self.draining:
            raise ProtocolViolationError(
                f"merge_hub {self.name!r}: a producer attached after drain_and_complete() (the hub is draining and "
                f"takes no new producer); call drain_and_complete() once every producer is attached")
        if len(self.live) >= self.max_producers:
            raise BufferOverflowError(f"merge_hub {self.name!r}: {len(self.live)} producers attached, "
                                      f"max_producers={self.max_producers}")
        producer = HubProducer(self)
        if not self.refuses_producers:
            self.live.add(producer)
        return producer

    def attach(self, producer: Flowable[Any] | Publisher[Any]) -> HubProducer:
        """Subscribe ``producer`` to the hub; return its handle (``cancel()`` detaches it).

        It gets ``per_producer_buffer`` items of credit at once, consumer or not. TypeError for
        something that is not a Publisher; ProtocolViolationError after
        :meth:`drain_and_complete` (``producer`` is not subscribed); BufferOverflowError at
        ``max_producers``."""
        problem = publisher_problem(producer)
        if problem is not None:
            raise TypeError(f"merge_hub.attach() {problem}")
        handle = self.sink()
        source = producer if isinstance(producer, Flowable) else from_publisher(producer)
        source._subscribe_safely(handle)
        return handle

    def drain_and_complete(self) -> None:
        """Accept no more producers and complete the consumer once every attached producer ended
        and its items went out (Akka ``DrainingControl``). Idempotent.

        Call it once the last producer is attached: :meth:`attach` and :meth:`sink` raise
        ProtocolViolationError from now on (Akka cancels such a producer; here the caller
        learns its items would be lost). When producers attach from loop callbacks, drain after
        the one that makes the count, not in the callback scheduled last: a loop need not run
        callbacks in the order of their delays (uvloop runs a ``call_later(0)`` after the
        timers already due)."""
        self.draining = True
        if self.consumer is not None:
            self.consumer.drain()

    # -- the hub ---------------------------------------------------------------------------------
    def arrived(self, producer: HubProducer, item: Any) -> None:
        self.queue.append((producer, item))
        producer.queued += 1
        self.counters.items_in += 1
        if self.consumer is not None:
            self.consumer.drain()

    def producer_ended(self, producer: HubProducer, error: BaseException | None) -> None:
        if producer.ended:
            return
        producer.ended = True
        self.live.discard(producer)
        if error is not None:
            producer.error = error
            log.warning("merge_hub %r: a producer failed and was removed: %r", self.name, error)
        if self.consumer is not None:
            self.consumer.drain()

    def finished(self) -> bool:
        return self.draining and not self.live and not self.queue

    def close(self) -> None:
        """The consumer is gone: cancel every producer, drop what is queued (told, reason
        ``"cancelled"``), refuse producers from now on."""
        if self.closed:
            return
        self.closed = True
        for producer in list(self.live):
            producer.cancel()
        left = [item for _, item in self.queue]
        self.queue.clear()
        discard_all(left, "cancelled", self.counters)

    # -- the consumer ------------------------------------------------------------------------------
    def _subscribe(self, subscriber: Subscriber[Any]) -> None:
        if self.consumer is not None or self.closed:
            subscriber.on_subscribe(EMPTY_SUBSCRIPTION)
            subscriber.on_error(ProtocolViolationError(
                f"merge_hub {self.name!r} has one consumer, and it " + ("ended" if self.closed else "is subscribed")))
            return
        consumer = _Consumer(subscriber, self)
        self.consumer = consumer
        subscriber.on_subscribe(consumer)
        consumer.drain()  # a drained, empty hub completes without demand

    def statistics(self) -> StageStatistics:
        """Demand (the consumer's, items), items queued, capacity (producers x per-producer
        buffer), items in/out, drops."""
        counters = self.counters
        demand = self.consumer.requested if self.consumer is not None else 0
        return StageStatistics(counters.stage, demand, len(self.queue), len(self.live) * self.per_producer_buffer,
                               counters.items_in, counters.items_out, dict(counters.dropped))

    def __repr__(self) -> str:
        return f"<MergeHub {self.name!r} producers={len(self.live)} queued={len(self.queue)}>"


def merge_hub(per_producer_buffer: int = 16, *, max_producers: int = 1024, name: str | None = None) -> MergeHub:
    """A source fed by producers that attach and leave while it runs (many request sources
    feeding one executor); each producer gets its own credit.

        a:       -1-2-3-4|            producer a, attached at column 0
        b:          -x--y|            producer b, attached at column 3
        demand:  ^1        ^9
        source:  -1--------(2x3y4|)   merge_hub(2); drain_and_complete() at column 5

    Each producer has 2 items of credit: ``1`` goes out at once, ``2`` and ``3`` (asked for when
    ``1`` left) wait; ``b`` attaches in column 3 and ``x``, ``y`` wait behind them; the request
    of 9 takes all five in the order they reached the hub, and the hub completes (draining, and
    both producers done).
    ``hub = ops.merge_hub(16)``; ``hub.pipe(...)`` is the consumer side (one subscriber);
    ``hub.attach(flowable)`` (or ``publisher.subscribe(hub.sink())``) adds a producer at any
    time and returns its handle; ``handle.cancel()`` detaches it. Items go out in the order
    they reached the hub. ``hub.drain_and_complete()`` refuses new producers and completes once
    the attached ones ended and their items went out; without it the hub runs until its
    consumer cancels (then every producer is cancelled, and any attaching later). Attaching
    after ``drain_and_complete()`` raises ProtocolViolationError; a producer attached before it
    runs to its end even if its publisher subscribes after.
    Demand: each producer is asked for ``per_producer_buffer`` items when it attaches
    (consumer or not), then for ``ceil(per_producer_buffer / 2)`` each time that many of its
    items went downstream: its outstanding requests + its queued items <=
    ``per_producer_buffer``, so a fast producer cannot crowd out the others and the hub holds at
    most ``producers * per_producer_buffer`` items. The consumer gets items only on its demand.
    A producer that completes, fails or is detached is removed; what it already delivered
    still goes out in order (nothing lost, nothing twice).
    Args: per_producer_buffer (items, >= 1); max_producers (producers attached at once, >= 1).
    Signals: ValueError (raised here) for bad bounds; ``attach`` raises TypeError for a
        non-Publisher, ProtocolViolationError after ``drain_and_complete()`` and
        BufferOverflowError beyond ``max_producers``; a producer's error
        removes that producer (logged at WARNING, kept as ``handle.error``), never the hub's
        stream; a second consumer gets ``ProtocolViolationError``.
    Anchor: Akka ``MergeHub.source(perProducerBufferSize)`` / ``sourceWithDraining``
        (``DrainingControl.drainAndComplete``).
    """
    check_int_arg("merge_hub", "per_producer_buffer", per_producer_buffer, 1)
    check_int_arg("merge_hub", "max_producers", max_producers, 1)
    return MergeHub(per_producer_buffer, max_producers, name)
