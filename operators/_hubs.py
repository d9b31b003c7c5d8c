"""``broadcast_hub`` and ``partition_hub``: one upstream, consumers that attach and leave at run
time (Akka ``BroadcastHub`` / ``PartitionHub``).

Both are a Flowable subscribed any number of times: each subscription is a consumer. The
upstream is subscribed once, by the first consumer or :meth:`_ConsumerHub.connect`, through one
:class:`_HubLink` whose credit follows the §2 rule over the items that *left* the hub, so

    upstream outstanding + items held by the hub <= buffer

- broadcast: every consumer sees every item from the moment it attached (it starts at the
  oldest item still held); the items are held once, in a ring of ``buffer`` slots, until the
  slowest consumer took them: the slowest governs.
- partition: ``partitioner(consumers, item)`` routes each item to one consumer's queue (or drops
  it with -1); the queues share the ``buffer``.

Terminal signals are remembered: a consumer attaching after the upstream ended gets that end at
once. Consumers leaving never cancel the upstream (Akka): :meth:`_ConsumerHub.close` does.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable

from rxpipe._protocol import Subscriber
from rxpipe.errors import MissingBackpressureError
from rxpipe.flowable import Flowable, Operator
from rxpipe.metrics import StageStatistics
from rxpipe.stage import (
    EMPTY_SUBSCRIPTION,
    LINK_SLOTS,
    DrainSubscription,
    QueueDrainSubscription,
    UpstreamLink,
    discard_all,
)

from ._args import check_callable, check_int_arg

__all__ = ["broadcast_hub", "partition_hub", "BroadcastHub", "PartitionHub"]


class _HubLink(UpstreamLink):
    """The hub's one upstream subscriber: ``buffer`` requested at subscribe, then 75 % of it
    each time that many items left the hub."""

    __slots__ = (*LINK_SLOTS, "hub", "__weakref__")
    hands_itself_downstream = False

    def __init__(self, hub: _ConsumerHub) -> None:
        self.hub = hub
        self.link_upstream(hub.name, hub.buffer)

    def _upstream_ready(self) -> None:
        if self.hub.started:  # else the first request waits for start_after consumers (Akka)
            self.request_first()

    def request_first(self) -> None:
        """The first request: ``buffer`` items."""
        UpstreamLink._upstream_ready(self)

    def on_next(self, item: Any) -> None:
        if self.accept(item):
            self.counters.items_in += 1
            self.hub.publish(item)

    def _upstream_finished(self, error: BaseException | None) -> None:
        self.hub.ended(error)

    def _upstream_overrun(self, error: MissingBackpressureError) -> None:
        self.hub.ended(error)

    def statistics(self) -> StageStatistics:
        return self.hub.statistics()


class _ConsumerHub(Flowable[Any]):
    """What both hubs share: consumers attaching at any time, one upstream link, ``start_after``,
    the remembered terminal signal (``terminal``: None while open, else ``(error or None,)``)."""

    def __init__(self, source: Flowable[Any], buffer: int, start_after: int, name: str | None) -> None:
        super().__init__(name=name, upstreams=(source,))
        self.source = source
        self.buffer = buffer
        self.start_after = start_after
        self.consumers: list[Any] = []
        self.started = start_after == 0
        self.connected = False
        self.terminal: tuple[BaseException | None] | None = None
        self.link = _HubLink(self)

    def connect(self) -> None:
        """Subscribe the upstream now (idempotent), before any consumer: with ``start_after=0``
        up to ``buffer`` items are then read ahead and held for the consumers to come (Akka reads
        when the hub starts); else reading waits for ``start_after`` consumers."""
        if not self.connected:
            self.connected = True
            self.source._subscribe_safely(self.link)

    def close(self) -> None:
        """Cancel the upstream and end every consumer as a completion would (after what it is
        owed from the items held); consumers attaching later complete at once."""
        self.link.cancel_upstream()
        if self.terminal is None:
            self.ended(None)

    def _subscribe(self, subscriber: Subscriber[Any]) -> None:
        if self.terminal is not None:
            (error,) = self.terminal
            subscriber.on_subscribe(EMPTY_SUBSCRIPTION)
            if error is None:
                subscriber.on_complete()
            else:
                subscriber.on_error(error)
            return
        consumer = self.new_consumer(subscriber)
        self.consumers.append(consumer)
        subscriber.on_subscribe(consumer)
        if consumer.cancelled:
            return  # cancelled inside on_subscribe (removed already)
        if not self.started and len(self.consumers) >= self.start_after:
            self.started = True
            if self.link.upstream is not None:  # connected before: read now
                self.link.request_first()
        self.attached(consumer)
        self.connect()

    def ended(self, error: BaseException | None) -> None:
        self.terminal = (error,)
        self.finish_consumers(error)

    def remove(self, consumer: Any) -> bool:
        """Take ``consumer`` out of the hub; False if it was out already."""
        try:
            self.consumers.remove(consumer)
        except ValueError:
            return False
        return True

    # -- the hub's kind ------------------------------------------------------------------------
    def new_consumer(self, subscriber: Subscriber[Any]) -> Any:
        raise NotImplementedError

    def attached(self, consumer: Any) -> None:
        raise NotImplementedError

    def publish(self, item: Any) -> None:
        raise NotImplementedError

    def finish_consumers(self, error: BaseException | None) -> None:
        raise NotImplementedError

    def held(self) -> int:
        raise NotImplementedError

    def statistics(self) -> StageStatistics:
        """Demand (the smallest consumer demand, items), items held, capacity (= buffer),
        items in/out, drops."""
        counters = self.link.counters
        demand = min((c.requested for c in self.consumers), default=0)
        return StageStatistics(counters.stage, demand, self.held(), self.buffer, counters.items_in,
                               counters.items_out, dict(counters.dropped))


# -- broadcast ------------------------------------------------------------------------------------
class _BroadcastConsumer(DrainSubscription):
    """One consumer of a broadcast hub: ``offset`` is the position of its next item."""

    __slots__ = ("hub", "offset")

    def __init__(self, downstream: Subscriber[Any], hub: BroadcastHub) -> None:
        super().__init__(downstream)
        self.hub = hub
        self.offset = hub.head

    def _drain(self) -> None:
        self.hub.serve(self)

    def _release(self) -> None:
        self.hub.leave(self)


class BroadcastHub(_ConsumerHub):
    """The result of ``source.pipe(ops.broadcast_hub(buffer))``: subscribe it any number of
    times, at any time. State: ``head``/``tail`` (positions of the oldest item held and of the
    next one), ``consumers``; :meth:`connect`, :meth:`close`."""

    kind = "broadcast_hub"

    def __init__(self, source: Flowable[Any], buffer: int, start_after: int, name: str | None) -> None:
        super().__init__(source, buffer, start_after, name)
        self.ring: list[Any] = [None] * buffer
        self.head = 0
        self.tail = 0
        #: consumers whose offset is ``head`` (the slowest): the head moves when none is left
        self.at_head = 0

    def new_consumer(self, subscriber: Subscriber[Any]) -> _BroadcastConsumer:
        self.at_head += 1
        return _BroadcastConsumer(subscriber, self)

    def attached(self, consumer: Any) -> None:
        if self.started:
            for each in list(self.consumers):  # start_after reached now: everyone may take items
                each.drain()

    def publish(self, item: Any) -> None:
        self.ring[self.tail % self.buffer] = item
        self.tail += 1
        for consumer in list(self.consumers):
            consumer.drain()

    def serve(self, consumer: _BroadcastConsumer) -> None:
        """One drain pass of ``consumer``: its items from ``offset``, on its demand."""
        if not self.started:
            return
        r = consumer.requested
        start = consumer.offset
        end = min(self.tail, start + r) if r else start
        if end > start:
            ring, size, on_next = self.ring, self.buffer, consumer.downstream.on_next
            offset = start
            while offset < end:
                consumer.offset = offset + 1  # before on_next: a re-entrant pass starts after it
                on_next(ring[offset % size])
                offset += 1
                if consumer.cancelled:
                    break
            consumer._delivered(consumer.offset - start, r)
            self.link.counters.items_out += consumer.offset - start
            if start == self.head:
                self.left_head()
            if consumer.cancelled:
                return
        if self.terminal is not None and consumer.offset == self.tail:
            consumer._complete()

    def left_head(self) -> None:
        """A consumer left the head: when none is left there, the head moves to the slowest
        consumer and the items before it are freed (credit upstream)."""
        self.at_head -= 1
        if self.at_head > 0 or not self.consumers:
            return
        head = min(c.offset for c in self.consumers)
        self.at_head = sum(1 for c in self.consumers if c.offset == head)
        freed = head - self.head
        for position in range(self.head, head):
            self.ring[position % self.buffer] = None
        self.head = head
        if freed:
            self.link.replenish(freed)

    def leave(self, consumer: _BroadcastConsumer) -> None:
        if self.remove(consumer) and consumer.offset == self.head:
            self.left_head()  # the last one leaving keeps the items after it for newcomers

    def finish_consumers(self, error: BaseException | None) -> None:
        self.started = True  # the end: the consumers there get what was read, then the completion
        for consumer in list(self.consumers):
            if error is None:
                consumer.drain()  # completes once it reached the tail
            else:
                consumer.fail(error)  # at once, over the items held (Akka)

    def held(self) -> int:
        return self.tail - self.head


# -- partition --------------------------------------------------------------------------------------
class _PartitionConsumer(QueueDrainSubscription):
    """One consumer of a partition hub: its queue of the items routed to it."""

    __slots__ = ("hub",)

    def __init__(self, downstream: Subscriber[Any], hub: PartitionHub) -> None:
        super().__init__(downstream)
        self.hub = hub

    def _on_delivered(self, count: int) -> None:
        self.hub.link.counters.items_out += count
        self.hub.freed(count)

    def _release(self) -> None:
        self.hub.leave(self)


class PartitionHub(_ConsumerHub):
    """The result of ``source.pipe(ops.partition_hub(partitioner, buffer))``: subscribe it any
    number of times, at any time. State: ``consumers`` (in attach order: the partitioner's
    indexes), ``pending`` (items read before ``start_after`` consumers attached);
    :meth:`queue_sizes`, :meth:`connect`, :meth:`close`."""

    kind = "partition_hub"

    def __init__(self, source: Flowable[Any], partitioner: Callable[[int, Any], int], buffer: int, start_after: int,
                 name: str | None) -> None:
        super().__init__(source, buffer, start_after, name)
        self.partitioner = partitioner
        self.pending: deque[Any] = deque()
        self.routing = False
        self.finished = False

    def queue_sizes(self) -> list[int]:
        """Items waiting for each consumer, by index (a partitioner may route to the shortest)."""
        return [len(c.queue) for c in self.consumers]

    def new_consumer(self, subscriber: Subscriber[Any]) -> _PartitionConsumer:
        return _PartitionConsumer(subscriber, self)

    def attached(self, consumer: Any) -> None:
        self.route()

    def publish(self, item: Any) -> None:
        self.pending.append(item)  # behind the items not yet routed: arrival order is kept
        self.route()

    def route(self) -> None:
        """Route what is pending while consumers may take it (Akka: items wait for consumers).
        Serial: an item arriving while one is routed (a synchronous upstream answering the
        credit a delivery freed) queues behind; the completion waits for the loop to end."""
        if self.routing:
            return
        self.routing = True
        try:
            pending = self.pending
            while pending and self.started and self.consumers and not self.finished:
                self.send(pending.popleft())
        finally:
            self.routing = False
        if self.terminal is not None and not self.finished:
            self.finished = True
            left = list(self.pending)  # never routed: no consumer will come for them
            self.pending.clear()
            discard_all(left, "no_consumer", self.link.counters)
            for consumer in list(self.consumers):
                consumer.finish()

    def send(self, item: Any) -> None:
        consumers = self.consumers
        try:
            index = self.partitioner(len(consumers), item)
            if isinstance(index, bool) or not isinstance(index, int) or not -1 <= index < len(consumers):
                raise ValueError(f"partition_hub {self.name!r}: the partitioner returned {index!r} for "
                                 f"{len(consumers)} consumers (an index in [0, {len(consumers)}) or -1 to drop)")
        except Exception as error:
            self.link.cancel_upstream()
            self.ended(error)
            return
        if index < 0:
            self.link.counters.drop("partitioner")
            self.freed(1)
            return
        consumer = consumers[index]
        consumer.queue.append(item)
        consumer.drain()

    def freed(self, count: int) -> None:
        """``count`` items left the hub (delivered or dropped): credit upstream by the §2 rule."""
        self.link.replenish(count)

    def leave(self, consumer: _PartitionConsumer) -> None:
        if not self.remove(consumer):
            return
        dropped = len(consumer.queue)
        if dropped:
            left = list(consumer.queue)
            consumer.queue.clear()
            discard_all(left, "cancelled", self.link.counters)  # routed to it: Akka drops them too
            self.freed(dropped)

    def finish_consumers(self, error: BaseException | None) -> None:
        if error is not None:  # at once, over what is queued and pending
            self.finished = True
            left = list(self.pending)
            self.pending.clear()
            discard_all(left, "error", self.link.counters)
            for consumer in list(self.consumers):
                consumer.fail(error)
            return
        if self.consumers:
            self.started = True  # the end: the consumers there get what was read
        self.route()  # routes what is pending, then finishes every consumer after its queue

    def held(self) -> int:
        return len(self.pending) + sum(len(c.queue) for c in self.consumers)


def broadcast_hub(buffer: int = 256, *, start_after: int = 0, name: str | None = None) -> Operator:
    """Broadcast every item to consumers that attach and leave at run time (many listeners on
    one token stream), at the pace of the slowest: ``hub = source.pipe(ops.broadcast_hub(256))``,
    then ``hub.subscribe(...)`` any number of times.

        source:    -a-b-c-d-e|            the upstream; broadcast_hub(2)
        upstream:  ^2    ^2 ^2
        x:         ^*                     consumer x, attached at column 0
        y:         ^1    ^1 ^9            consumer y, attached at column 0
        x gets:    -a-b--cd-e|            c waits until y took b, e until y took d
        y gets:    -a----b--(cde)|

    The hub holds at most 2 items: after ``b`` it holds ``b`` for ``y`` and asks nothing
    more; ``y`` taking ``b`` frees 2 (``a``, ``b``), so 2 more are requested.
    Demand: the upstream is asked for ``buffer`` items when the first consumer subscribes (or
    at :meth:`BroadcastHub.connect`), then for 75 % of it each time that many items were taken
    by every consumer: upstream outstanding + items held <= ``buffer``. An item is held once
    until the slowest consumer took it, so a consumer more than ``buffer`` items behind the
    fastest stops the upstream; each consumer gets items only on its own demand. A consumer
    starts at the oldest item still held (none older than ``buffer``); with ``start_after=N``
    nothing is requested upstream before N consumers attached, so those N see every item. A
    consumer attaching after the end gets only the end. A leaving consumer frees what only
    it was holding; when none is left the upstream is not cancelled (Akka): items are read up
    to ``buffer`` for the next consumer; ``hub.close()`` cancels it.
    Args: buffer (items, >= 1: how far apart two consumers may be); start_after (consumers, >= 0).
    Signals: ValueError (raised here) for bad bounds; an upstream error reaches every consumer
        at once, ahead of the items held (Akka); the completion after each consumer's items; a
        consumer attaching after the end gets it at once (remembered); an upstream emitting
        beyond demand signals ``MissingBackpressureError`` to every consumer.
    Anchor: Akka ``BroadcastHub.sink(startAfterNrOfConsumers, bufferSize)``; Reactor
        ``publish(prefetch)`` (the slowest governs).
    """
    check_int_arg("broadcast_hub", "buffer", buffer, 1)
    check_int_arg("broadcast_hub", "start_after", start_after, 0)
    return lambda source: BroadcastHub(source, buffer, start_after, name)


def partition_hub(partitioner: Callable[[int, Any], int], buffer: int = 256, *, start_after: int = 0,
                  name: str | None = None) -> Operator:
    """Route each item to one of the consumers attached at run time: ``partitioner(n, item)``
    returns the index (``0 <= index < n``, consumers in the order they attached) or -1 to drop
    it: ``hub = source.pipe(ops.partition_hub(lambda n, r: hash(r.user) % n))``.

        source:  -1-2-3-4-|               partitioner = lambda n, x: x % n
        x:       ^9                       consumer x (index 0), attached at column 0
        y:       ^9                       consumer y (index 1), attached at column 0
        x gets:  ---2---4-|
        y gets:  -1---3---|

    Demand: the upstream is asked for ``buffer`` items when the first consumer subscribes (or
    at ``connect()``), then for 75 % of it each time that many items left the hub (delivered,
    or dropped): upstream outstanding + items queued over all consumers <= ``buffer``. Each
    consumer gets its queue's items on its own demand; a consumer that does not consume keeps
    its share of the buffer and, once it is full, stops the upstream for all (Akka). Nothing is
    requested before ``start_after`` consumers attached; items read while no consumer is there
    wait and are routed when one comes; :meth:`PartitionHub.queue_sizes` tells a partitioner who
    is behind. A
    leaving consumer's queued items are dropped (counted, reason ``"cancelled"``, as Akka
    drops them); the upstream is never cancelled by consumers leaving (``close()`` does).
    Args: partitioner ((consumers, item) -> index or -1); buffer (items, >= 1, shared by all
        queues); start_after (consumers, >= 0).
    Signals: TypeError/ValueError (raised here) for bad arguments; the partitioner raising or
        returning anything but an index or -1 cancels the upstream and fails every consumer with
        that error (ValueError); an upstream error reaches every consumer at once; the
        completion after each consumer's items (items never routed are dropped, reason
        ``"no_consumer"``); consumers attaching after the end get it at once.
    Anchor: Akka ``PartitionHub.sink(partitioner, startAfterNrOfConsumers, bufferSize)``.
    """
    check_callable("partition_hub", partitioner, "partitioner")
    check_int_arg("partition_hub", "buffer", buffer, 1)
    check_int_arg("partition_hub", "start_after", start_after, 0)
    return lambda source: PartitionHub(source, partitioner, buffer, start_after, name)
