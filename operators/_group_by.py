"""``group_by``: split one stream into at most ``max_groups`` open keyed groups (DESIGN §3).

Reactor's GroupedFlux model with Akka's bound on open substreams. :class:`GroupByMain` is the
main stream's subscription (its queue holds groups not yet emitted) and the only upstream
subscriber; each :class:`GroupSubscription` queues its group's items until its subscriber asks.
Upstream credit follows the §2 :class:`~rxpipe.stage.Replenisher` rule over items *consumed*
(delivered by any group, or dropped), so the items held over all groups plus those requested
upstream never exceed ``prefetch``: every group's queue is bounded by it.

The price of that bound (as in Reactor): a group nobody consumes eventually holds all the
credit and stalls every group. Subscribe to each group as it arrives, or cancel it.
"""

from __future__ import annotations

from typing import Any, Callable, Hashable

from rxpipe._protocol import Subscriber
from rxpipe.errors import MissingBackpressureError, TooManyGroupsError
from rxpipe.flowable import Flowable
from rxpipe.metrics import StageStatistics
from rxpipe.stage import LINK_SLOTS, QueueDrainSubscription, UpstreamLink, discard_all

from ._unicast import LateSubscription

__all__ = ["GroupByFlowable", "GroupedFlowable", "GroupByMain", "GroupSubscription"]


class GroupByFlowable(Flowable[Any]):
    kind = "group_by"

    def __init__(self, source: Flowable[Any], key: Callable[[Any], Hashable], max_groups: int,
                 prefetch: int, name: str | None, element_mapper: Callable[[Any], Any] | None = None) -> None:
        super().__init__(name=name, upstreams=(source,))
        self.source = source
        self.key = key
        self.element_mapper = element_mapper
        self.max_groups = max_groups
        self.prefetch = prefetch

    def _subscribe(self, subscriber: Subscriber[Any]) -> None:
        self.source._subscribe(GroupByMain(subscriber, self))


class GroupedFlowable(Flowable[Any]):
    """One group emitted by ``group_by``: a Flowable of the items whose key is ``key``.

    Unicast: one subscriber; a second one gets ``on_error(ProtocolViolationError)``. Items that
    arrive before it is subscribed wait in the group's queue (within the stage's prefetch).
    """

    kind = "group"

    def __init__(self, stage: GroupByFlowable, key: Hashable, group: GroupSubscription) -> None:
        super().__init__(name=stage.name, upstreams=(stage,))
        self.key = key
        self._group = group

    def _subscribe(self, subscriber: Subscriber[Any]) -> None:
        self._group.attach(subscriber)

    def __repr__(self) -> str:
        return f"<GroupedFlowable {self.name} key={self.key!r}>"


class GroupSubscription(LateSubscription):
    """A group's queue and, once subscribed, its link to the group's subscriber."""

    __slots__ = ("main", "key", "pushed", "credited")

    def __init__(self, main: GroupByMain, key: Hashable) -> None:
        super().__init__()
        self.main = main
        self.key = key
        #: items ever queued in this group, and how many of them were handed back as credit
        self.pushed = 0
        self.credited = 0

    def unicast_name(self) -> str:
        return f"group {self.key!r} of stage {self.main.counters.stage!r}"

    def push(self, item: Any) -> None:
        self.pushed += 1
        self.queue.append(item)
        if self.subscribed:
            self.drain()

    def _credit_consumed(self) -> None:
        # Items no longer queued were delivered or dropped: each one frees upstream credit.
        consumed = self.pushed - len(self.queue)
        if consumed != self.credited:
            count = consumed - self.credited
            self.credited = consumed
            self.main.credit(count)

    def _on_delivered(self, count: int) -> None:
        self.main.counters.items_out += count
        self._credit_consumed()

    def _release(self) -> None:
        # Cancelled (maybe inside on_next, cutting a pass short) or terminated: report what the
        # cut pass delivered, drop what is still queued, and give all of it back as credit.
        counters = self.main.counters
        counters.items_out += self.pushed - len(self.queue) - self.credited
        dropped = len(self.queue)
        if dropped:
            counters.drop("cancelled", dropped)
            self.queue.clear()
        self._credit_consumed()
        self.main.group_released(self)


class GroupByMain(QueueDrainSubscription, UpstreamLink):
    """The main stream (groups, in order of first key appearance) and the upstream subscriber.

    State: ``groups`` (key → open group), ``queue`` (groups not yet emitted), and the
    :class:`~rxpipe.stage.UpstreamLink` with the prefetch rule.
    Cancelling the main stream stops new groups; upstream stays subscribed while a group emitted
    before is open (Reactor), and items of new keys are then dropped (reason ``"no_group"``).
    """

    __slots__ = (*LINK_SLOTS, "stage", "key_fn", "element_mapper", "max_groups", "groups")

    def __init__(self, downstream: Subscriber[Any], stage: GroupByFlowable) -> None:
        super().__init__(downstream)
        self.stage = stage
        self.key_fn = stage.key
        self.element_mapper = stage.element_mapper
        self.max_groups = stage.max_groups
        self.groups: dict[Hashable, GroupSubscription] = {}
        self.link_upstream(stage.name, stage.prefetch)

    # -- upstream signals ----------------------------------------------------------------------
    def on_next(self, item: Any) -> None:
        if not self.accept(item):
            return
        self.counters.items_in += 1
        try:
            key = self.key_fn(item)
            group = self.groups.get(key)
            if self.element_mapper is not None:  # reactivex's element_mapper: what the group carries
                item = self.element_mapper(item)
                if item is None:
                    raise TypeError(f"stage {self.counters.stage!r}: element_mapper returned None; items "
                                    f"are never None (Reactive Streams §2.13)")
        except Exception as error:  # the key function raised, or the key is unhashable
            self._stop(error)
            return
        if group is None:
            if self.cancelled:
                discard_all((item,), "no_group", self.counters)
                self.credit(1)
                return
            if len(self.groups) >= self.max_groups:
                discard_all((item,), "too_many_groups", self.counters)
                self._stop(TooManyGroupsError(
                    f"stage {self.counters.stage!r}: key {key!r} would open group {self.max_groups + 1} "
                    f"of max_groups={self.max_groups}", key, self.max_groups))
                return
            group = GroupSubscription(self, key)
            self.groups[key] = group
            group.push(item)  # not subscribed yet: only queued
            self.queue.append(GroupedFlowable(self.stage, key, group))
            self.drain()
        else:
            group.push(item)

    def _upstream_finished(self, error: BaseException | None) -> None:
        self._terminate_all(error)

    def _stop(self, error: BaseException) -> None:
        """The stage itself fails: cancel upstream, then end every stream with ``error``."""
        self.cancel_upstream()
        self._terminate_all(error)

    def _upstream_overrun(self, error: MissingBackpressureError) -> None:
        self._terminate_all(error)  # upstream is already cancelled

    def _terminate_all(self, error: BaseException | None) -> None:
        # Each open group and the main stream get the signal after the items they hold.
        for group in list(self.groups.values()):
            group.terminate(error)
        self.finish(error)

    # -- credit --------------------------------------------------------------------------------
    def credit(self, count: int) -> None:
        """``count`` items left the stage (delivered or dropped): replenish upstream by §2."""
        self.replenish(count)

    def group_released(self, group: GroupSubscription) -> None:
        """A group ended (cancelled or terminated): its key may open a new group later."""
        if self.groups.get(group.key) is group:
            del self.groups[group.key]
        if self.cancelled and not self.groups:
            self.cancel_upstream()

    # -- main stream ---------------------------------------------------------------------------
    def _release(self) -> None:
        # The main stream ended. Groups never emitted can never be subscribed: close them.
        pending = list(self.queue)
        self.queue.clear()
        if len(pending) == len(self.groups):
            self.cancel_upstream()  # no group is left to consume anything: no credit to hand back
        for flowable in pending:
            flowable._group.cancel()
        if not self.groups:
            self.cancel_upstream()

    def statistics(self) -> StageStatistics:
        """Demand (groups), items held over all groups, capacity (= prefetch), in/out, drops."""
        counters = self.counters
        held = sum(len(group.queue) for group in self.groups.values())
        return StageStatistics(counters.stage, self.requested, held, self.replenisher.initial,  # type: ignore[union-attr]
                               counters.items_in, counters.items_out, dict(counters.dropped))
