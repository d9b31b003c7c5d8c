"""``edge_queue``: the bounded queue behind an HTTP edge, with an exact bound and smooth admission.

Why not ``buffer``: ``buffer(capacity)`` follows the replenish rule of DESIGN §2 (ask for
``capacity - capacity // 4`` more once that many items left), which is right between internal
stages but, at an HTTP edge, admits in waves (a burst of admissions, then refusals until three
quarters of the queue left), and it counts an item as gone once it left the queue, although the
``batch`` stage behind it may still hold it. The edge queue asks upstream for one more item per
*departure*, where an item departs when it starts on the engine (its ``reply``
:class:`ReplyFuture` is settled: the executor handed it a Completion, or it failed, was dropped or its client left), so

    requested upstream and not arrived + received and not started  <=  capacity

at every moment: requests admitted by the edge and not yet running never exceed ``capacity``,
wherever they wait (this queue, ``batch``, the executor). An item without a ``reply`` future
(or with a plain future) departs when it is delivered downstream (the queue then behaves as
``limit_rate(capacity, 1)``).

State machine (one subscription): ``upstream_outstanding`` (requested, not arrived; the
:class:`~rxpipe.stage.UpstreamLink`'s counter, with its overrun, cancel-once and terminal rules), ``unstarted``
(arrived, not departed), the FIFO ``queue`` of ``(item, tracked)``; on subscribe → request
``capacity``; on item → enqueue and drain; on departure → request one more; on downstream
request → drain (deliver up to demand, skipping items whose client already left); on upstream
completion or error → delivered after the queued items, as ``buffer`` does.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Any, Callable

from .._protocol import Subscriber
from ..flowable import Flowable, Operator
from ..metrics import StageStatistics
from ..settings import check_int
from ..stage import LINK_SLOTS, DrainSubscription, UpstreamLink

__all__ = ["edge_queue", "EdgeQueueFlowable", "ReplyFuture", "reply_departure"]

log = logging.getLogger("rxpipe.gateway")


class ReplyFuture(asyncio.Future[Any]):
    """The reply slot the gateway gives each admitted request (``CompletionRequest.reply``).

    An ``asyncio.Future`` that also tells one synchronous ``listener`` the moment it is settled
    (``set_result``, ``set_exception`` or ``cancel``), where a plain future's done callbacks run
    one loop iteration later. The edge queue listens: requests arriving in the same iteration as
    a departure must already see the room it made, or the exact bound would refuse them.
    A raising listener is logged, never propagated into whoever settled the future.
    """

    listener: Callable[[ReplyFuture], None] | None = None

    def _settled(self) -> None:
        listener = self.listener
        if listener is not None:
            self.listener = None
            try:
                listener(self)
            except Exception:
                log.exception("the departure listener of a reply raised")

    def set_result(self, result: Any) -> None:
        super().set_result(result)
        self._settled()

    def set_exception(self, exception: Any) -> None:
        super().set_exception(exception)
        self._settled()

    def cancel(self, msg: Any = None) -> bool:
        cancelled = super().cancel(msg)
        if cancelled:
            self._settled()
        return cancelled


def reply_departure(item: Any, callback: Callable[[Any], None]) -> bool:
    """The ``departure`` hook of ``ops.fair_queue`` for the gateway's requests: arranges
    ``callback(item)`` for the moment ``item.reply`` (a :class:`ReplyFuture`) is settled — the
    request started on the engine, failed, was dropped or its client left — and returns True;
    returns False (the item departs when dispatched) for an item without a fresh ReplyFuture.
    The same departure rule as :func:`edge_queue`, so a ``fair_queue`` behind the edge keeps
    its exact bound (admitted and not running <= capacity)."""
    reply = getattr(item, "reply", None)
    if not isinstance(reply, ReplyFuture) or reply.done() or reply.listener is not None:
        return False
    reply.listener = lambda _reply: callback(item)
    return True


class _EdgeQueueSubscription(DrainSubscription, UpstreamLink):
    __slots__ = (*LINK_SLOTS, "capacity", "unstarted", "received", "queue", "finished", "error", "_departed")

    def __init__(self, downstream: Subscriber[Any], capacity: int, name: str) -> None:
        super().__init__(downstream)
        self.capacity = capacity
        #: arrived and not yet departed (started, failed, dropped or abandoned)
        self.unstarted = 0
        self.received = 0
        self.queue: deque[tuple[Any, bool]] = deque()
        self.finished = False
        self.error: BaseException | None = None
        self._departed = self._on_departure  # bound once: one callback object for every item
        self.link_upstream(name)

    # -- upstream signals ----------------------------------------------------------------------
    def _upstream_ready(self) -> None:
        self._top_up()

    def on_next(self, item: Any) -> None:
        # accept(): late items are ignored (§3.12); an overrun (§1.1) drops-and-tells the queued
        # requests and this one (each client gets an answer; upstream is already cancelled, so
        # the departures that settles ask for nothing more) and fails the stage
        if not self.accept(item):
            return
        self.received += 1
        self.unstarted += 1
        reply = getattr(item, "reply", None)
        tracked = isinstance(reply, ReplyFuture) and not reply.done() and reply.listener is None
        if tracked:
            reply.listener = self._departed  # type: ignore[union-attr]
        queue = self.queue
        queue.append((item, tracked))
        if len(queue) > 2 * self.capacity:
            self._purge()
        self.drain()

    def _held_items(self) -> Any:
        return [entry[0] for entry in self.queue]

    def _upstream_finished(self, error: BaseException | None) -> None:
        # upstream's terminal signal follows the queued items, as buffer's does
        self.error = error
        self.finished = True
        self.drain()

    # -- departures ------------------------------------------------------------------------------
    def _on_departure(self, reply: ReplyFuture) -> None:
        # Runs inside whoever settled the reply (the executor admitting it, a client leaving):
        # the request below may reach the gateway's subscription, which never emits from
        # request(), and rate_limit, whose emission into on_next is folded into our drain loop.
        if self.cancelled:
            return
        self.unstarted -= 1
        self._top_up()

    def _top_up(self) -> None:
        if self.upstream_done or self.cancelled:
            return
        n = self.capacity - self.upstream_outstanding - self.unstarted
        if n > 0:
            self.request_upstream(n)

    def _purge(self) -> None:
        """Drop queued items whose client already left (their reply is settled): each of them
        let one more in, so without this a stalled downstream and clients that keep leaving
        could grow the deque past its capacity."""
        kept = deque(entry for entry in self.queue if not (entry[1] and entry[0].reply.done()))
        self.counters.drop("cancelled", len(self.queue) - len(kept))
        self.queue = kept

    # -- drain pass ------------------------------------------------------------------------------
    def _drain(self) -> None:
        queue = self.queue
        r = self.requested
        e = 0
        plain = 0
        if queue and r:
            on_next = self.downstream.on_next
            # Invariant: e items delivered in this pass, e <= r (the demand seen at its start).
            while e != r and queue:
                item, tracked = queue.popleft()
                if tracked:
                    if item.reply.done():  # its client left, or it failed, while queued: departed already
                        self.counters.drop("cancelled")
                        continue
                else:
                    plain += 1
                on_next(item)
                e += 1
                if self.cancelled:
                    break
            self._delivered(e, r)
            counters = self.counters
            counters.items_in = self.received
            counters.items_out = self.emitted
            if self.cancelled:
                return
        if plain:
            self.unstarted -= plain  # items without a reply depart when delivered
            self._top_up()
        if not queue and self.finished:
            if self.error is not None:
                self._error(self.error)
            else:
                self._complete()

    def _release(self) -> None:
        self.cancel_upstream()
        self.queue.clear()
        counters = self.counters
        counters.items_in = self.received
        counters.items_out = self.emitted

    def statistics(self) -> StageStatistics:
        """Demand (items), items queued now, capacity, items in/out, drops by reason."""
        counters = self.counters
        return StageStatistics(counters.stage, self.requested, len(self.queue), self.capacity, self.received,
                               self.emitted, dict(counters.dropped))


class EdgeQueueFlowable(Flowable[Any]):
    """The stage ``edge_queue(capacity)``."""

    kind = "edge_queue"

    def __init__(self, source: Flowable[Any], capacity: int, name: str | None) -> None:
        super().__init__(name=name, upstreams=(source,))
        self.source = source
        self.capacity = capacity

    def _subscribe(self, subscriber: Subscriber[Any]) -> None:
        self.source._subscribe(_EdgeQueueSubscription(subscriber, self.capacity, self.name))


def edge_queue(capacity: int, *, name: str | None = None) -> Operator:
    """The bounded queue behind a :class:`~rxpipe.gateway.Gateway`: at most ``capacity`` admitted
    requests wait, wherever they wait, and the edge admits one more per departure.

        gateway:  -a-b-c----------d----e--      (capacity=2 behind one engine slot)
        upstream: ^2      ^1      ^1            one more each time a request starts
        engine:   --a-----b-------c----d--

    Demand: requests ``capacity`` when subscribed, then one item per departure; an item
    departs when its ``reply`` (a :class:`ReplyFuture`, as the gateway makes them) is settled
    (the executor admitted it to the engine, it failed, was dropped, or its client left) — or,
    for an item without one, when it is delivered. So items requested upstream and not started
    never exceed ``capacity``, counting what ``batch`` and the executor hold behind this stage
    (DESIGN §5, "Exact bounds"), and the edge admits smoothly instead of in replenishment waves.
    Items whose client left while queued are skipped (counted as dropped, reason ``"cancelled"``).
    Args: capacity (requests, int >= 1).
    Signals: ValueError (raised here) for a bad capacity; ``MissingBackpressureError`` when
        upstream emits beyond what was requested (upstream cancelled); upstream errors and
        completion after the queued items. Cancel travels upstream.
    Anchor: a credit-based admission window (one credit per departure), like TCP's receive
        window or Akka's ``buffer`` + ``throttle`` pair at an HTTP edge.
    """
    check_int(capacity, "edge_queue(capacity)", minimum=1)
    return lambda source: EdgeQueueFlowable(source, capacity, name)
