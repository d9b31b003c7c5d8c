"""Demand accounting and the drain loop: written once, reused by every source and operator.

Reactive Streams rules kept here (DESIGN §2):

- §3.17 demand is additive and saturates at ``UNBOUNDED`` (:func:`add_demand`).
- §3.9 ``request(n <= 0)`` signals ``on_error(ValueError)`` (it never raises) and stops upstream.
- §3.5–3.7 ``cancel`` is idempotent; ``request``/``cancel`` after it are no-ops.
- §1.3 signals are serial. Every emission happens inside :meth:`DrainSubscription.drain`, guarded
  by a work-in-progress flag: a ``request`` (or an upstream item) arriving while the loop runs — for
  example ``request(1)`` inside ``on_next`` — only marks the loop as *missed*, and the running loop
  picks the new work up after the current pass. No nested ``on_next``, no recursion (§3.3).
- §1.7 nothing after a terminal signal: ``cancelled`` turns true before it is delivered.

Prefetch and replenishment (one rule everywhere, Reactor's limitRate): a boundary with prefetch
``p`` requests ``p`` when subscribed, then ``p - p // 4`` each time that many items went downstream
(:class:`Replenisher`).

Everything runs on the event loop's thread, so a plain flag serves where Reactor needs an atomic
integer (its ``WIP`` counter).
"""

from __future__ import annotations

import logging
from abc import abstractmethod
from collections import deque
from typing import Any

from ._pressure import BACKPRESSURED, IDLE, PressureClock, loop_clock
from ._protocol import UNBOUNDED, Subscriber, Subscription

__all__ = [
    "add_demand",
    "bad_request",
    "discard",
    "valid_demand",
    "DrainSubscription",
    "QueueDrainSubscription",
    "Replenisher",
    "EmptySubscription",
    "EMPTY_SUBSCRIPTION",
    "InternalSubscriber",
    "log",
]

log = logging.getLogger("rxpipe")


def add_demand(current: int, n: int) -> int:
    """Return ``current + n`` capped at ``UNBOUNDED`` (Reactive Streams §3.17)."""
    total = current + n
    return UNBOUNDED if total >= UNBOUNDED else total


def bad_request(n: object) -> ValueError:
    """The error §3.9 prescribes for ``request(n)`` with ``n <= 0`` (or ``n`` not an int)."""
    return ValueError(f"Reactive Streams §3.9: request(n) needs an int n > 0, got {n!r}")


def discard(item: Any, reason: str) -> None:
    """Tell ``item`` that a stage dropped it, if it has an ``on_discard(reason)`` method.

    Shedding strategies (``reason`` = the strategy name) and stages discarding what they hold on
    an error (``"error"``) call this, so accepted work is never dropped silently: a
    :class:`~rxpipe.engines.CompletionRequest` fails its reply and its client gets an answer.
    One ``getattr`` per dropped item; nothing on the delivery path. A raising hook is logged.
    """
    hook = getattr(item, "on_discard", None)
    if hook is not None:
        try:
            hook(reason)
        except Exception:
            log.exception("on_discard(%r) of a dropped item raised", reason)


def valid_demand(n: object) -> bool:
    """True for an ``int`` (not a bool) greater than 0: the only valid ``request(n)`` argument."""
    return type(n) is int and n > 0


class InternalSubscriber(Subscriber[Any]):
    """Marker base for rxpipe's own subscribers.

    They are trusted to follow the rules, so :meth:`rxpipe.Flowable.subscribe` does not wrap them
    in the strict boundary (``StrictSubscriber``) that protects user subscribers.
    """

    __slots__ = ()
    _rx_internal = True


class EmptySubscription(Subscription):
    """A subscription with nothing behind it, handed out before an immediate terminal signal."""

    __slots__ = ()

    def request(self, n: int) -> None:
        pass

    def cancel(self) -> None:
        pass


EMPTY_SUBSCRIPTION = EmptySubscription()


class DrainSubscription(Subscription):
    """Base of every subscription that emits items to one downstream subscriber.

    Holds the outstanding demand (``requested``), the cancelled flag and the serial drain loop.
    Subclasses implement :meth:`_drain` (one pass: emit up to ``requested`` items, subtract what
    was emitted, deliver a terminal signal with :meth:`_complete` / :meth:`_error` when due) and
    may override :meth:`_release` (free upstream and timers; called exactly once) and
    :meth:`_on_request` (react to new demand before the loop runs).

    Invariants: ``0 <= requested <= UNBOUNDED``; ``UNBOUNDED`` is never decremented; once
    ``cancelled`` is true no signal reaches ``downstream`` except the one error :meth:`fail`
    queued (and a later ``cancel`` withdraws even that).

    Pressure (the live view, :mod:`rxpipe._pressure`): ``pressure_state`` is the stage's state as
    last accounted and ``pressure_clock`` its time per state (None until it first left idle). A
    drain call ends by re-reading the state when there is no downstream demand or the stage was
    not idle (two attribute reads otherwise); a stage re-reads it where its busy state changes
    (:meth:`_pressure_update`). Subclasses say what they hold (:meth:`_holds`) and, if they can
    be busy, override :meth:`_pressure_state`.
    """

    __slots__ = ("downstream", "requested", "cancelled", "emitted", "_wip", "_missed",
                 "_failure", "_released", "pressure_state", "pressure_clock", "__weakref__")

    def __init__(self, downstream: Subscriber[Any]) -> None:
        self.downstream = downstream
        self.requested = 0
        self.cancelled = False
        #: items delivered downstream so far (statistics; updated once per pass, not per item)
        self.emitted = 0
        self._wip = False
        self._missed = False
        self._failure: BaseException | None = None
        self._released = False
        self.pressure_state = IDLE
        self.pressure_clock: PressureClock | None = None

    # -- Subscription --------------------------------------------------------------------------
    def request(self, n: int) -> None:
        if self.cancelled:
            return
        if type(n) is not int or n <= 0:
            self.fail(bad_request(n))
            return
        total = self.requested + n
        self.requested = UNBOUNDED if total >= UNBOUNDED else total
        self._on_request(n)
        self.drain()

    def cancel(self) -> None:
        self._failure = None
        if self.cancelled:
            return
        self.cancelled = True
        self._release_once()

    # -- drain loop ----------------------------------------------------------------------------
    def drain(self) -> None:
        """Run the emission loop unless it is already running (then mark it missed)."""
        if self._wip:
            self._missed = True
            return
        self._wip = True
        try:
            while True:
                self._missed = False
                failure = self._failure
                if failure is not None:
                    self._failure = None
                    self.downstream.on_error(failure)
                    return
                if self.cancelled:
                    return
                self._drain()
                if not self._missed:
                    return
        finally:
            self._wip = False
            # a change of pressure state can only happen here without demand, or out of a
            # non-idle state: otherwise two attribute reads, no call
            if not self.requested or self.pressure_state:
                self._pressure_update()

    def fail(self, error: BaseException) -> None:
        """Stop upstream now and signal ``error`` downstream ahead of anything still queued.

        Used for §3.9 and for errors raised by user functions. Delivery goes through the drain
        loop, so a failure raised inside ``on_next`` is signalled after it returns (§1.3).
        """
        if self.cancelled:
            return
        self._failure = error
        self.cancelled = True  # stops the running pass at its next per-item check
        self._release_once()
        self.drain()

    # -- for subclasses ------------------------------------------------------------------------
    def _delivered(self, e: int, r: int) -> None:
        """Account for ``e`` items delivered by a pass that started with demand ``r`` (``e <= r``):
        ``emitted`` grows; ``requested`` shrinks unless it is ``UNBOUNDED`` (never decremented)."""
        self.emitted += e
        if r != UNBOUNDED:
            self.requested -= e

    @abstractmethod
    def _drain(self) -> None:
        """One pass: emit up to ``requested`` items, subtract them, terminate when due."""

    def _on_request(self, n: int) -> None:
        """Called with each valid ``request(n)`` after ``requested`` grew, before draining."""

    def _release(self) -> None:
        """Cancel upstream, timers and tasks. Called once, on cancel or termination."""

    def _release_once(self) -> None:
        if not self._released:
            self._released = True
            self._release()
            if self.pressure_state:
                self._pressure_update()  # terminated: idle from now on

    # -- pressure (rxpipe._pressure) -------------------------------------------------------------
    def _pressure_update(self) -> None:
        """Re-read the stage's pressure state; on a change, account the time spent in the old one
        (on the loop's clock). Call where a stage's busy state may change (a call started or
        done, an engine step); drain calls end with it already."""
        state = IDLE if self.cancelled else self._pressure_state()
        if state != self.pressure_state:
            self.pressure_state = state
            clock = self.pressure_clock
            if clock is None:
                clock = self.pressure_clock = PressureClock(loop_clock())
            clock.enter(state)

    def _pressure_state(self) -> int:
        """``BACKPRESSURED`` when the stage holds an item and downstream demand is 0, else
        ``IDLE``; a stage that can be busy (working on an item) overrides this."""
        return BACKPRESSURED if not self.requested and self._holds() else IDLE

    def _holds(self) -> bool:
        """True when the stage holds an item it would emit on demand (default: none)."""
        return False

    def _complete(self) -> None:
        """Deliver ``on_complete`` (call from inside :meth:`_drain` or a serial context)."""
        if self.cancelled:
            return
        self.cancelled = True
        self._release_once()
        self.downstream.on_complete()

    def _error(self, error: BaseException) -> None:
        """Deliver ``on_error`` (call from inside :meth:`_drain` or a serial context)."""
        if self.cancelled:
            return
        self.cancelled = True
        self._release_once()
        self.downstream.on_error(error)


class QueueDrainSubscription(DrainSubscription):
    """A drain loop over a FIFO of items, followed by the upstream's terminal signal.

    Producers append to ``queue``, set ``finished`` (and ``error``) when the upstream terminates,
    and call :meth:`drain`. Items are delivered in order on demand; the terminal signal follows
    the last item (errors wait behind queued items; use :meth:`fail` to cut ahead).
    :meth:`_on_delivered` runs once per pass with the number of items that left the queue in it
    (for replenishment), never per item. A downstream with ``try_on_next(item) -> bool`` (a fused
    chain) is driven through it: an item it drops does not consume demand.
    """

    __slots__ = ("queue", "finished", "error")

    #: Drive a fused chain downstream through ``try_on_next`` (its dropped items use no demand).
    #: A test source that must show the literal demand protocol (filter's one-more request per
    #: dropped item) sets it to False, as a foreign publisher would behave.
    conditional_delivery = True

    def __init__(self, downstream: Subscriber[Any]) -> None:
        super().__init__(downstream)
        self.queue: deque[Any] = deque()
        self.finished = False
        self.error: BaseException | None = None

    def _drain(self) -> None:
        q = self.queue
        r = self.requested
        if q and r:
            e = 0
            try_on_next = getattr(self.downstream, "try_on_next", None) if self.conditional_delivery else None
            if try_on_next is None:
                on_next = self.downstream.on_next
                # Invariant: e items delivered in this pass, e <= r (the demand seen at its
                # start); demand added meanwhile is picked up by the next pass (marked missed).
                while e != r and q:
                    on_next(q.popleft())
                    e += 1
                    if self.cancelled:
                        break
                taken = e
            else:
                # A conditional subscriber (a fused chain, Reactor's ConditionalSubscriber)
                # returns False for an item it dropped: that item used no demand.
                taken = 0
                while e != r and q:
                    taken += 1
                    if try_on_next(q.popleft()):
                        e += 1
                    if self.cancelled:
                        break
            self.emitted += taken
            if r != UNBOUNDED:
                self.requested -= e
            # Report even when cancelled mid-pass: a stage sharing its upstream (group_by's
            # groups) must still replenish what this pass took.
            self._on_delivered(taken)
            if self.cancelled:
                return
        if not q and self.finished:
            if self.error is not None:
                self._error(self.error)
            else:
                self._complete()

    def _holds(self) -> bool:
        return bool(self.queue)

    def finish(self, error: BaseException | None = None) -> None:
        """Upstream ended: signal ``on_complete`` (or ``on_error(error)``) after the queued items."""
        self.error = error
        self.finished = True
        self.drain()

    def _on_delivered(self, count: int) -> None:
        """Called after a pass took ``count`` (>= 1) items off the queue."""


class Replenisher:
    """The prefetch/replenish rule of DESIGN §2 (Reactor's ``limitRate``).

    ``initial`` is requested at subscribe; then :meth:`consumed` returns how many requests of
    ``limit`` items are due: one each time ``limit`` more items went downstream.
    ``limit = prefetch - prefetch // 4`` unless given. An ``UNBOUNDED`` prefetch never replenishes.
    """

    __slots__ = ("initial", "limit", "pending")

    def __init__(self, prefetch: int, limit: int | None = None) -> None:
        if prefetch < 1:
            raise ValueError(f"prefetch must be >= 1 item, got {prefetch!r}")
        self.initial = prefetch
        if limit is None:
            limit = prefetch - prefetch // 4
        if not 1 <= limit <= prefetch:
            raise ValueError(f"replenish amount must be in [1, {prefetch}], got {limit!r}")
        self.limit = limit
        #: items gone downstream since the last replenishing request
        self.pending = 0

    def consumed(self, count: int) -> int:
        """Record ``count`` items gone downstream; return how many ``request(limit)`` calls are due."""
        if self.initial == UNBOUNDED:
            return 0
        p = self.pending + count
        due, self.pending = divmod(p, self.limit)
        return due
