"""The link to upstream, written once: :class:`UpstreamLink` (DESIGN §2, §3 "Writing a stage").

Every operator that subscribes to an upstream keeps the same five rules; they live here and
nowhere else:

- *outstanding counter* ``upstream_outstanding``: items requested upstream and not yet
  received (§3.17: additive, saturating at ``UNBOUNDED``; :meth:`UpstreamLink.request_upstream`).
- *replenish rule* (Reactor's ``limitRate``): with a prefetch ``p``, request ``p`` when linked,
  then ``p - p // 4`` each time that many items left the stage (:meth:`UpstreamLink.replenish`).
- *overrun*: an item with nothing outstanding broke §1.1: the item and what the stage holds are
  dropped and told (``on_discard("error")``), upstream is cancelled, and the stage fails with
  :class:`~rxpipe.MissingBackpressureError` (:meth:`UpstreamLink.accept`).
- *cancel-once*: upstream is cancelled at most once (:meth:`UpstreamLink.cancel_upstream`).
- *terminal flag* ``upstream_done``: set once upstream terminated or was cancelled; later
  upstream signals are ignored (§1.7, §3.12 items in flight after a cancel).

Plus the helpers every shedding or serial stage needs: :func:`offer` / :func:`shed` /
:func:`discard_all` (queue or drop-and-tell) and :class:`SerialLoop` (a re-entrant call folded
into the running one, §1.3).
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable, Iterable, Protocol

from ._demand import InternalSubscriber, Replenisher, discard
from ._protocol import UNBOUNDED, Subscription
from .errors import MissingBackpressureError
from .metrics import StageCounters, track

__all__ = ["LINK_SLOTS", "UpstreamLink", "SerialLoop", "SheddingStage", "discard_all", "offer", "shed"]

#: The attributes :class:`UpstreamLink` keeps. A slotted stage lists them in its ``__slots__``
#: (a slotted mixin cannot hold them); a stage without ``__slots__`` needs nothing.
LINK_SLOTS = ("upstream", "upstream_outstanding", "upstream_done", "replenisher", "counters")


class UpstreamLink(InternalSubscriber):
    """Mixin: the subscriber side of a stage, owning every rule of the link to upstream.

    Use it with a drain subscription (the downstream side)::

        class MyStage(QueueDrainSubscription, UpstreamLink):
            def __init__(self, downstream, name):
                super().__init__(downstream)
                self.link_upstream(name, prefetch=16)   # request(16), then request(12) per 12 out

    State (items): ``upstream`` (the Subscription, None until linked), ``upstream_outstanding``
    (requested, not yet received; ``0 <= . <= UNBOUNDED``), ``upstream_done`` (terminated or
    cancelled: later signals are ignored), ``replenisher`` (the prefetch rule, or None),
    ``counters`` (the stage's metrics, exported while it is alive).

    ``on_subscribe`` keeps §2.5 (a second subscription, or one arriving after this stage was
    cancelled, is cancelled), hands this stage to its downstream (when it is the downstream's
    Subscription too; set :attr:`hands_itself_downstream` False otherwise), then calls
    :meth:`_upstream_ready` (default: request the prefetch).

    Hooks: :meth:`_upstream_ready`, :meth:`_upstream_finished` (upstream's terminal signal, once;
    default: after the queued items), :meth:`_held_items` (what an overrun drops besides the
    item), :meth:`_upstream_overrun` (default: ``self.fail(error)`` of the drain subscription).
    Anchor: Reactive Streams 1.0.4 §1.1, §2.5, §3.5–3.7, §3.12, §3.17; Reactor ``limitRate``.
    """

    __slots__ = ()
    #: True when the stage is also the Subscription its downstream receives.
    hands_itself_downstream = True

    upstream: Subscription | None
    upstream_outstanding: int
    upstream_done: bool
    replenisher: Replenisher | None
    counters: StageCounters

    def link_upstream(self, name: str | None, prefetch: int | None = None, limit: int | None = None) -> None:
        """Initialise the link (call in ``__init__``).

        ``name``: the stage name; its counters are exported as metrics while the stage lives
        (None: no counters, for an inner link such as one input of ``merge``). ``prefetch``
        (items, >= 1) and ``limit`` (items in [1, prefetch], default ``prefetch - prefetch // 4``)
        set the replenish rule; ``ValueError`` for bad values.
        """
        replenisher = Replenisher(prefetch, limit) if prefetch is not None else None
        try:
            self.upstream = None  # type: ignore[misc]
            self.upstream_outstanding = 0  # type: ignore[misc]
            self.upstream_done = False  # type: ignore[misc]
            self.replenisher = replenisher  # type: ignore[misc]
            if name is not None:
                self.counters = StageCounters(name)  # type: ignore[misc]
        except AttributeError as error:
            raise TypeError(f"{type(self).__name__} declares __slots__ without the link's attributes ({error}): "
                            f"add *LINK_SLOTS (rxpipe.stage.LINK_SLOTS) to its __slots__, or drop __slots__") from None
        if name is not None:
            track(self)  # type: ignore[arg-type]  # debug mode: TypeError without statistics()

    # -- upstream → this stage -----------------------------------------------------------------
    def on_subscribe(self, subscription: Subscription) -> None:
        if self.upstream is not None or self.upstream_done:
            subscription.cancel()  # §2.5, or this stage was cancelled before upstream linked
            return
        self.upstream = subscription  # type: ignore[misc]
        if self.hands_itself_downstream:
            self.downstream.on_subscribe(self)  # type: ignore[attr-defined]
            if self.upstream_done:
                return  # downstream cancelled inside on_subscribe
        self._upstream_ready()

    def accept(self, item: Any) -> bool:
        """Count one arriving item against the outstanding demand; call first in ``on_next``.

        True: the item was requested (the counter went down by one, unless ``UNBOUNDED``).
        False: drop it and return — it arrived after upstream was done (ignored, §3.12), or
        beyond demand (§1.1: the overrun rule ran, the stage failed).
        """
        # Hot path: one read, one compare, one write. `upstream_outstanding` is 0 once upstream
        # is done (terminated or cancelled), so the late-item case needs no extra check here.
        outstanding = self.upstream_outstanding
        if outstanding:
            if outstanding != UNBOUNDED:
                self.upstream_outstanding = outstanding - 1  # type: ignore[misc]
            return True
        self.refuse(item)
        return False

    def refuse(self, item: Any) -> None:
        """``item`` arrived with nothing outstanding: ignore it after upstream is done, else
        apply the overrun rule (drop-and-tell the item and what is held, cancel upstream, fail).
        Stages that inline :meth:`accept`'s fast path call this for its slow path."""
        if self.upstream_done:
            return
        self.cancel_upstream()
        held = list(self._held_items())
        stage = self.counters.stage if hasattr(self, "counters") else type(self).__name__
        discard_all((*held, item), "error", getattr(self, "counters", None))
        self._upstream_overrun(MissingBackpressureError(
            f"Reactive Streams §1.1: upstream of stage {stage!r} emitted {item!r} beyond demand"))

    def on_error(self, error: BaseException) -> None:
        if self.upstream_terminated():
            self._upstream_finished(error)

    def on_complete(self) -> None:
        if self.upstream_terminated():
            self._upstream_finished(None)

    def upstream_terminated(self) -> bool:
        """Mark upstream as done by its own terminal signal; True the first time only.

        Call first in ``on_error``/``on_complete``: ``if not self.upstream_terminated(): return``.
        """
        if self.upstream_done:
            return False
        self.upstream_done = True  # type: ignore[misc]
        self.upstream_outstanding = 0  # type: ignore[misc]
        return True

    # -- this stage → upstream -----------------------------------------------------------------
    def request_upstream(self, n: int) -> None:
        """Request ``n`` (> 0) items upstream and count them as outstanding; a no-op once
        upstream is done or before it is linked. The counter grows before ``request`` is called,
        because a synchronous upstream emits from inside it."""
        upstream = self.upstream
        if self.upstream_done or upstream is None:
            return
        total = self.upstream_outstanding + n
        self.upstream_outstanding = UNBOUNDED if total >= UNBOUNDED else total  # type: ignore[misc]
        upstream.request(n)

    def replenish(self, count: int) -> None:
        """``count`` items left the stage: make the requests the prefetch rule says are due
        (one ``request(limit)`` per ``limit`` items; never per item)."""
        replenisher = self.replenisher
        assert replenisher is not None, "replenish() needs link_upstream(prefetch=...)"
        due = replenisher.consumed(count)
        if due:
            limit = replenisher.limit
            for _ in range(due):
                if self.upstream_done:
                    return
                self.request_upstream(limit)

    def cancel_upstream(self) -> None:
        """Cancel upstream, once; mark the link done (later upstream signals are ignored)."""
        if not self.upstream_done:
            self.upstream_done = True  # type: ignore[misc]
            self.upstream_outstanding = 0  # type: ignore[misc]
            if self.upstream is not None:
                self.upstream.cancel()

    # -- hooks ---------------------------------------------------------------------------------
    def _upstream_ready(self) -> None:
        """Upstream is linked (and downstream has this stage): make the first request."""
        replenisher = self.replenisher
        if replenisher is not None:
            self.request_upstream(replenisher.initial)

    def _upstream_finished(self, error: BaseException | None) -> None:
        """Upstream signalled ``on_complete`` (``error`` None) or ``on_error``, once. Default:
        ``QueueDrainSubscription.finish`` — the signal follows the queued items."""
        self.finish(error)  # type: ignore[attr-defined]

    def _held_items(self) -> Iterable[Any]:
        """Items the stage holds that an overrun drops with the arriving one (default: none)."""
        return ()

    def _upstream_overrun(self, error: MissingBackpressureError) -> None:
        """Signal the overrun downstream (upstream is already cancelled). Default: ``fail``."""
        self.fail(error)  # type: ignore[attr-defined]  # DrainSubscription.fail


def discard_all(items: Iterable[Any], reason: str, counters: StageCounters | None) -> None:
    """Drop-and-tell: count ``items`` as dropped for ``reason`` and call each one's
    ``on_discard(reason)`` (see :func:`rxpipe.stage.discard`)."""
    count = 0
    for item in items:
        count += 1
        discard(item, reason)
    if count and counters is not None:
        counters.drop(reason, count)


def shed(queue: deque[Any], item: Any, overflow: str, counters: StageCounters) -> bool:
    """Apply a shedding strategy to ``item`` arriving at a full ``queue`` (drop-and-tell).

    ``"drop_incoming"``: ``item`` is dropped. ``"drop_oldest"``: the oldest queued item is dropped
    and ``item`` queued. ``"error"``: ``item`` is dropped and True is returned: the caller stops
    its upstream and signals its overflow error after the queued items. Every dropped item is
    counted under the strategy name and told through ``on_discard(overflow)``.
    Anchor: Reactor ``onBackpressureBuffer``/``onBackpressureDrop``; Akka ``OverflowStrategy``.
    """
    counters.drop(overflow)
    if overflow == "drop_oldest":
        discard(queue.popleft(), overflow)
        queue.append(item)
        return False
    discard(item, overflow)
    return overflow == "error"


class SheddingStage(Protocol):
    """What :func:`offer` needs of a stage: a queue bounded by ``capacity``, an ``overflow``
    strategy, ``counters``, a ``received`` count, and ``drain()``."""

    queue: deque[Any]
    capacity: int
    overflow: str
    counters: StageCounters
    received: int

    def drain(self) -> None: ...


def offer(stage: SheddingStage, item: Any) -> bool:
    """A shedding stage received ``item``: queue it and drain when there is room, else shed it
    by ``stage.overflow`` without draining (:func:`shed`: drop-and-tell).

    Returns True only for ``overflow="error"`` at a full queue: the caller then stops its
    upstream and signals its overflow error after the queued items (``stage.finish(error)``).
    Anchor: Reactor ``onBackpressureBuffer(maxSize, BufferOverflowStrategy)``.
    """
    stage.received += 1
    queue = stage.queue
    if len(queue) < stage.capacity:
        queue.append(item)
        stage.drain()
        return False
    return shed(queue, item, stage.overflow, stage.counters)  # full: downstream is behind


class SerialLoop:
    """Run ``fn`` serially: a call made while it runs only marks it *missed*, and the running
    call runs ``fn`` again once it returns (Reactive Streams §1.3; the drain loop's guard for a
    pass that is not a drain, e.g. the executor's pump). ``fn`` re-checks its own state each
    pass. No recursion however often ``fn``'s work re-enters it (§3.3).
    """

    __slots__ = ("fn", "running", "missed")

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn
        self.running = False
        self.missed = False

    def __call__(self) -> None:
        if self.running:
            self.missed = True
            return
        self.running = True
        try:
            while True:
                self.missed = False
                self.fn()
                if not self.missed:
                    return
        finally:
            self.running = False
