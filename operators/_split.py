"""``split_when``: one stream into consecutive substreams, a new one at each item the predicate
picks (Akka ``splitWhen``), e.g. one substream per conversation turn or per document.

Written on :class:`rxpipe.stage.Stage`: the main stream emits :class:`Substream` Flowables; each
substream's queue delivers on its own subscriber's demand. Every item waiting in a substream's
queue is ``held`` by the stage and the window (16 items) bounds them with the upstream requests
(``held_bounds_credit``: they are released by the substream's subscriber, never by more input),
so a slow substream consumer slows upstream and memory stays bounded.

Cancel strategy (Akka's default ``SubstreamCancelStrategy.drain``): a substream whose subscriber
cancels drops what it holds and the items arriving for it until the next split (counted,
reason ``"cancelled"``); the main stream goes on.
"""

from __future__ import annotations

from typing import Any, Callable

from rxpipe._protocol import Subscriber
from rxpipe.flowable import Flowable, Operator
from rxpipe.stage import Stage, discard_all, operator

from ._args import check_callable
from ._unicast import LateSubscription

__all__ = ["split_when", "SplitWhen", "Substream"]


class SubstreamSubscription(LateSubscription):
    """A substream's queue and, once subscribed, its link to the substream's subscriber."""

    __slots__ = ("owner",)

    def __init__(self, owner: SplitWhen) -> None:
        super().__init__()
        self.owner = owner

    def unicast_name(self) -> str:
        return f"a substream of stage {self.owner.stage_name!r}"

    def _on_delivered(self, count: int) -> None:
        self.owner.invoke(self.owner.freed, count)

    def _release(self) -> None:
        left = list(self.queue)
        self.queue.clear()
        if not self.owner.invoke(self.owner.released, self, left):
            discard_all(left, "cancelled", None)  # the stage has ended: only the items are told


class Substream(Flowable[Any]):
    """One substream emitted by ``split_when``: a unicast Flowable (a second subscriber gets
    ``ProtocolViolationError``); its items wait in its queue, within the stage's window, until
    its subscriber asks."""

    kind = "substream"

    def __init__(self, name: str, index: int, subscription: SubstreamSubscription) -> None:
        super().__init__(name=f"{name}[{index}]")
        self._subscription = subscription

    def _subscribe(self, subscriber: Subscriber[Any]) -> None:
        self._subscription.attach(subscriber)


class SplitWhen(Stage):
    """One run: ``current`` (the open substream, or None), ``dropping`` (the open substream was
    cancelled: drop until the next split), ``count`` (substreams opened); ``held`` = items
    waiting in substream queues."""

    prefetch = 16
    held_bounds_credit = True  # held items leave through their substream's subscriber only
    log_hook_errors = False  # the predicate's error is the stream's
    kind = "split_when"

    def __init__(self, predicate: Callable[[Any], Any]) -> None:
        self.predicate = predicate
        self.current: SubstreamSubscription | None = None
        self.dropping = False
        self.count = 0
        self.held = 0

    def on_next(self, item: Any) -> None:
        try:
            split = self.predicate(item)
        except Exception as error:
            self.end_current(error)
            self.fail(error)
            return
        if split or (self.current is None and not self.dropping):
            if self.current is not None:
                self.current.terminate(None)
            self.dropping = False
            self.current = SubstreamSubscription(self)
            self.count += 1
            self.emit(Substream(self.stage_name, self.count, self.current))
        if self.dropping:
            self.drop(item, "cancelled")
            return
        self.held += 1
        self.current.push(item)  # type: ignore[union-attr]

    def freed(self, count: int) -> None:
        """``count`` items went down a substream: their credit is free."""
        self.held -= count

    def released(self, subscription: SubstreamSubscription, left: list[Any]) -> None:
        """A substream ended (its subscriber cancelled, or it terminated): ``left`` were queued."""
        self.held -= len(left)
        for item in left:
            self.drop(item, "cancelled")
        if subscription is self.current and not subscription.finished:
            self.current = None
            self.dropping = True  # the items of this substream are drained until the next split

    def end_current(self, error: BaseException | None) -> None:
        if self.current is not None:
            current, self.current = self.current, None
            current.terminate(error)

    def on_complete(self) -> None:
        self.end_current(None)
        self.complete()

    def on_error(self, error: BaseException) -> None:
        self.end_current(error)  # after the items it holds, as group_by's groups
        self.fail(error)

    def on_stop(self) -> None:
        self.end_current(None)  # cancelled: upstream is cancelled, the open substream ends after its items


_split_when_stage = operator(SplitWhen)


def split_when(predicate: Callable[[Any], Any], *, name: str | None = None) -> Operator:
    """Split the stream into consecutive substreams, starting a new one at each item for which
    ``predicate`` is true; that item is the first of the new substream.

        source:  -a-b-C-d-E-|              predicate = str.isupper
        main:    -x---y---z-|              x, y, z: Substream Flowables
        x:        a-b-|
        y:            C-d-|
        z:                E-|

    The first item always opens the first substream (no empty substream before it, whatever
    the predicate says). Each substream completes when the next one opens, and the last one
    when upstream completes. Flatten them back with ``concat_map(handle_turn)`` (in order) or
    ``flat_map``.
    Demand: the main stream emits a substream only on its own demand; each substream delivers
    on its subscriber's demand. Items waiting in substream queues plus upstream outstanding stay
    within a window of 16 items, released only as substream subscribers take them: a
    substream nobody subscribes to stalls the stream (subscribe to each, or cancel it).
    Cancelling a substream drops its queued items and the rest of its items as they arrive
    (counted, reason ``"cancelled"``), and the main stream goes on (Akka's drain strategy);
    cancelling the main stream cancels upstream and ends the open substream after its items.
    Args: predicate (item -> bool; asked for every item).
    Signals: TypeError (raised here) for a non-callable; ``predicate`` raising fails the main
        stream and ends the open substream with the same error after its queued items, upstream
        cancelled; an upstream error does the same; a second subscriber to a substream gets
        ``ProtocolViolationError``.
    Anchor: Akka ``splitWhen(p)`` (``SubstreamCancelStrategy.drain``); Reactor ``windowUntil(p,
        cutBefore=true)``.
    """
    check_callable("split_when", predicate, "predicate")
    return _split_when_stage(predicate, name=name)
