"""``broadcast(n)``: every item of one upstream to ``n`` branches, at the pace of the slowest.

:class:`BroadcastFlowable` is what ``pipe`` returns: it unpacks into its ``branches``. A *run*
(:class:`BroadcastRun`) starts when the first branch is subscribed and subscribes upstream once
all ``n`` are (Reactor ``publish().autoConnect(n)``, Akka ``Broadcast``). Demand: each branch's
total request is tracked; upstream has been asked, in total, for the minimum of those totals over
the live branches, so every item upstream sends is wanted by every live branch and goes out at
once — no branch queue grows beyond what a drain pass in progress holds. A cancelled branch stops
counting (the others may then get more); when every branch cancelled, upstream is cancelled.
When a run ends (terminal signal, or all branches cancelled), the next subscriptions start a new
run, that is a new upstream subscription.
"""

from __future__ import annotations

from typing import Any, Iterator

from rxpipe._protocol import UNBOUNDED, Subscriber
from rxpipe.errors import MissingBackpressureError, ProtocolViolationError
from rxpipe.flowable import Flowable
from rxpipe.metrics import StageStatistics
from rxpipe.stage import EMPTY_SUBSCRIPTION, LINK_SLOTS, QueueDrainSubscription, UpstreamLink, add_demand

__all__ = ["BroadcastFlowable", "BroadcastBranch", "BroadcastRun", "BranchSubscription"]


class BroadcastFlowable(Flowable[Any]):
    """The result of ``source.pipe(ops.broadcast(n))``: unpack it (``a, b = ...``) or index it.

    ``branches`` is a tuple of ``n`` Flowables. The object itself is not subscribed: doing so
    signals ``TypeError``.
    """

    kind = "broadcast"

    def __init__(self, source: Flowable[Any], n: int, name: str | None) -> None:
        super().__init__(name=name, upstreams=(source,))
        self.source = source
        self.n = n
        self.run: BroadcastRun | None = None
        self.branches: tuple[Flowable[Any], ...] = tuple(BroadcastBranch(self, k) for k in range(n))

    def __iter__(self) -> Iterator[Flowable[Any]]:
        return iter(self.branches)

    def __getitem__(self, k: int) -> Flowable[Any]:
        return self.branches[k]

    def __len__(self) -> int:
        return self.n

    def _subscribe(self, subscriber: Subscriber[Any]) -> None:
        raise TypeError(f"subscribe to the branches of {self.name!r}: "
                        f"a, b = source.pipe(ops.broadcast(2)); a.subscribe(...); b.subscribe(...)")

    def _attach(self, k: int, subscriber: Subscriber[Any]) -> None:
        run = self.run
        if run is None or run.closed:
            run = self.run = BroadcastRun(self)
        run.attach(k, subscriber)


class BroadcastBranch(Flowable[Any]):
    """Branch ``k`` of a broadcast: one subscriber per run."""

    kind = "broadcast_branch"

    def __init__(self, parent: BroadcastFlowable, k: int) -> None:
        super().__init__(name=f"{parent.name}[{k}]", upstreams=(parent,))
        self.parent = parent
        self.k = k

    def _subscribe(self, subscriber: Subscriber[Any]) -> None:
        self.parent._attach(self.k, subscriber)


class BranchSubscription(QueueDrainSubscription):
    """One branch's link to its subscriber; ``total`` is everything it ever requested."""

    __slots__ = ("run", "k", "total")
    #: a fused filter after a branch drops an item by asking for one more (a request, counted in
    #: ``total``): with conditional delivery the drop would keep its demand unseen by the run,
    #: and the minimum over the branches would never move (partition's branches are such filters)
    conditional_delivery = False

    def __init__(self, downstream: Subscriber[Any], run: BroadcastRun, k: int) -> None:
        super().__init__(downstream)
        self.run = run
        self.k = k
        self.total = 0

    def _on_request(self, n: int) -> None:
        self.total = add_demand(self.total, n)
        self.run.update_demand()

    def _on_delivered(self, count: int) -> None:
        self.run.counters.items_out += count

    def _release(self) -> None:
        self.queue.clear()
        self.run.branch_released(self)


class BroadcastRun(UpstreamLink):
    """One connection: the branches' subscriptions and the single upstream link.

    State: ``branches`` (slot ``k`` → its subscription, None until subscribed), ``attached``,
    ``live``, ``sent`` (total requested upstream), and the link's ``upstream_done`` (the run
    ended: terminated, or cancelled when every branch cancelled).
    """

    __slots__ = (*LINK_SLOTS, "stage", "branches", "attached", "live", "sent", "__weakref__")
    hands_itself_downstream = False

    def __init__(self, stage: BroadcastFlowable) -> None:
        self.stage = stage
        self.branches: list[BranchSubscription | None] = [None] * stage.n
        self.attached = 0
        self.live = 0
        self.sent = 0
        self.link_upstream(stage.name)

    @property
    def closed(self) -> bool:
        """Ended: terminated, or every branch subscribed and none left live."""
        return self.upstream_done or (self.attached == len(self.branches) and self.live == 0)

    def attach(self, k: int, subscriber: Subscriber[Any]) -> None:
        if self.branches[k] is not None:
            subscriber.on_subscribe(EMPTY_SUBSCRIPTION)
            subscriber.on_error(ProtocolViolationError(
                f"branch {k} of {self.stage.name!r} already has a subscriber in this run "
                f"(each branch is unicast)"))
            return
        branch = BranchSubscription(subscriber, self, k)
        self.branches[k] = branch
        self.attached += 1
        self.live += 1
        subscriber.on_subscribe(branch)
        if self.attached == len(self.branches):
            if self.live:
                self.stage.source._subscribe_safely(self)
            else:
                self.cancel_upstream()  # every branch cancelled before the run could start

    # -- demand --------------------------------------------------------------------------------
    def update_demand(self) -> None:
        """Bring upstream's total request up to the minimum total over the live branches."""
        if self.upstream is None or self.upstream_done or self.sent == UNBOUNDED:
            return
        target = UNBOUNDED
        for branch in self.branches:
            if branch is not None and not branch.cancelled and branch.total < target:
                target = branch.total
        if target > self.sent:
            n = UNBOUNDED if target == UNBOUNDED else target - self.sent
            self.sent = target
            self.request_upstream(n)

    def branch_released(self, branch: BranchSubscription) -> None:
        if self.upstream_done:
            return  # released by the run's own terminal signal
        self.live -= 1
        if self.live == 0:
            if self.attached == len(self.branches):
                self.cancel_upstream()
        else:
            self.update_demand()  # the others may now get more

    # -- upstream signals ----------------------------------------------------------------------
    def _upstream_ready(self) -> None:
        self.update_demand()

    def on_next(self, item: Any) -> None:
        if not self.accept(item):
            return
        self.counters.items_in += 1
        for branch in self.branches:
            if branch is not None and not branch.cancelled:
                branch.queue.append(item)
                branch.drain()

    def _upstream_finished(self, error: BaseException | None) -> None:
        self._terminate(error)

    def _upstream_overrun(self, error: MissingBackpressureError) -> None:
        self._terminate(error)

    def _terminate(self, error: BaseException | None) -> None:
        for branch in self.branches:
            if branch is not None and not branch.cancelled:
                branch.error = error
                branch.finished = True
                branch.drain()

    def statistics(self) -> StageStatistics:
        """Demand = the minimum outstanding over live branches (items), items queued, in/out."""
        live = [b for b in self.branches if b is not None and not b.cancelled]
        demand = min((b.requested for b in live), default=0)
        counters = self.counters
        return StageStatistics(counters.stage, demand, sum(len(b.queue) for b in live), None,
                               counters.items_in, counters.items_out, dict(counters.dropped))
