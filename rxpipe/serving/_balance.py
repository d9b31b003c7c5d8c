"""``balance(*branches)``: each item to one branch that has demand, outputs merged (DESIGN §8b).

:class:`BalanceFlowable` builds one *port* per branch (the branch's upstream), applies the
branch operator to it, and merges the branch outputs (:class:`~operators._merge.MergeFlowable`).
A *run* (:class:`BalanceRun`) is the single link to upstream; the ports' subscriptions
(:class:`PortSubscription`) are its downstreams.

Demand: a port's demand is what its branch requested and was not yet given. Upstream has been
asked for at most the sum of the eligible ports' demand minus the items the run holds. An item
goes to the eligible port with the most demand; among equal demand, round-robin (the first at or
after the port after the one served last). A port is eligible when it is live, has demand, and
the engine of its branch (an ``execute`` stage inside it, if any) is ``available``: a replica
whose circuit breaker is open has no demand. A port's demand counts at most its engine's
``advertised_room`` (a backend's own credit, DESIGN §8b): a backend that says it is full gets
nothing, whatever its executor asked for before it said so. When no replica is available at all, a request with
a reply slot is answered at once with ``EngineUnavailableError`` (the edge's 503) instead of being
held, and upstream is still asked for the ports' demand, so what is queued behind is answered too
(as ``execute`` does for one engine that is down).

With ``retry_unstarted``, a :class:`~rxpipe.engines.CompletionRequest` with a reply slot gets a
failover reply per attempt (:mod:`operators._failover`): a request whose engine failed it before
its first token reached the client is dispatched again, to a port it has not tried.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable

from rxpipe._protocol import UNBOUNDED, Subscriber
from rxpipe.errors import EngineUnavailableError, MissingBackpressureError, ProtocolViolationError
from rxpipe.flowable import Flowable, Operator
from rxpipe.metrics import StageStatistics
from rxpipe.operators._merge import DEFAULT_MERGE_PREFETCH, MergeFlowable
from rxpipe.stage import EMPTY_SUBSCRIPTION, LINK_SLOTS, QueueDrainSubscription, SerialLoop, UpstreamLink, discard_all

from ._affinity import RoutingPolicy
from ._failover import Failover
from ._features import common_features
from .records import CompletionRequest

__all__ = ["BalanceFlowable", "BalanceRun", "PortSubscription", "Replicas"]


class Replicas:
    """The engines of a balance's branches seen as one, for the edge (``stage.engine``).

    ``available``: True while any replica is (the edge answers 503 only when none is);
    ``retry_after_s``: seconds until the first replica takes work again (0.0 when one does);
    ``features``: what every replica serves (a request may go to any of them). It is no engine
    itself (no ``free_slots``): the edge's credit counts each replica.
    """

    def __init__(self, engines: list[Any]) -> None:
        self.engines = engines
        self.features = common_features(engine.features for engine in engines)

    @property
    def available(self) -> bool:
        for engine in self.engines:  # a loop, not any(<genexpr>): asked for every request
            if engine.available:
                return True
        return False

    @property
    def retry_after_s(self) -> float:
        waits = [float(getattr(engine, "retry_after_s", 0.0) or 0.0) for engine in self.engines]
        return min(waits, default=0.0)


def _capped(demand: int, engine: Any) -> int:
    """A port's demand capped by its engine's advertised credit (``advertised_room``: an
    OpenAIEngine in front of a backend that says its room, DESIGN §8b): a replica's capacity is
    ``min(its own limit, the backend's credit)``. The executor's outstanding request cannot be
    taken back when the backend fills up: the balance reads the credit itself."""
    room = getattr(engine, "advertised_room", None)
    return demand if room is None or room >= demand else room


def _ranked(demand: int, engine: Any) -> int:
    """The demand a port is ranked by (0: not eligible): capped as :func:`_capped` says, but
    ranked by the backend's last word less what was sent since (``advertised_credit``), not by
    the one-at-a-time an old word allows — or every backend with an old word would tie at 1 and
    the least loaded would no longer be first."""
    room = getattr(engine, "advertised_room", None)
    if room is None:
        return demand
    if room <= 0:
        return 0
    credit = engine.advertised_credit
    return demand if credit >= demand else max(1, credit)


class BalanceFlowable(Flowable[Any]):
    """The stage ``balance``; ``engine`` is a :class:`Replicas` view of the branches' engines.

    Its ``upstreams`` are the source only: the branches are inside the stage (so the edge sees one
    set of replicas, available while any one is, instead of every engine separately).
    """

    kind = "balance"

    def __init__(self, source: Flowable[Any], branches: tuple[Operator, ...], retry_unstarted: bool,
                 name: str | None, retry_started: bool = False, affinity: RoutingPolicy | None = None) -> None:
        super().__init__(name=name, upstreams=(source,))
        self.source = source
        self.retry_unstarted = retry_unstarted
        self.retry_started = retry_started
        self.affinity = affinity
        if affinity is not None:
            affinity.bind(len(branches))
        self.ports = tuple(PortFlowable(self, k) for k in range(len(branches)))
        outputs = []
        for branch, port in zip(branches, self.ports, strict=True):
            out = branch(port)
            if not isinstance(out, Flowable):
                raise TypeError(f"balance(): a branch must return a Flowable, got {out!r}")
            outputs.append(out)
        self.outputs = tuple(outputs)
        #: the engine of each branch (an ``execute`` stage between its port and its output), or None
        self.port_engines = [_engine_of(out, port) for out, port in zip(self.outputs, self.ports, strict=True)]
        #: per port, the engine's ``dispatched`` hook (an OpenAIEngine that reads a backend's credit:
        #: told before the item reaches it, so the next choice in the same pass sees the credit spent)
        self.port_hooks = [getattr(engine, "dispatched", None) for engine in self.port_engines]
        self.engine = Replicas([e for e in self.port_engines if e is not None]) if any(self.port_engines) else None
        self.merged = MergeFlowable(self.outputs, DEFAULT_MERGE_PREFETCH, f"{self.name}_merge")
        self.run: BalanceRun | None = None

    def _subscribe(self, subscriber: Subscriber[Any]) -> None:
        self.run = BalanceRun(self)
        self.merged._subscribe(subscriber)

    def _attach(self, k: int, subscriber: Subscriber[Any]) -> None:
        run = self.run
        if run is None or run.attached_ports[k]:
            subscriber.on_subscribe(EMPTY_SUBSCRIPTION)
            subscriber.on_error(ProtocolViolationError(
                f"port {k} of {self.name!r} is subscribed by its branch only, once per subscription of the stage"))
            return
        run.attach(k, subscriber)


def _engine_of(output: Flowable[Any], port: Flowable[Any]) -> Any:
    """The ``engine`` of a stage on the path from ``port`` to ``output``, else None."""
    stack, seen = [output], set()
    while stack:
        node = stack.pop()
        if node is port or id(node) in seen:
            continue
        seen.add(id(node))
        engine = getattr(node, "engine", None)
        if engine is not None and hasattr(engine, "available"):
            return engine
        stack.extend(node.upstreams)
    return None


class PortFlowable(Flowable[Any]):
    """Port ``k``: the upstream of branch ``k`` (one subscriber per run)."""

    kind = "balance_port"

    def __init__(self, parent: BalanceFlowable, k: int) -> None:
        super().__init__(name=f"{parent.name}[{k}]", upstreams=(parent.source,))
        self.parent = parent
        self.k = k

    def _subscribe(self, subscriber: Subscriber[Any]) -> None:
        self.parent._attach(self.k, subscriber)


class PortSubscription(QueueDrainSubscription):
    """One port's link to its branch: the run queues an item here only against demand."""

    __slots__ = ("run", "k")

    def __init__(self, downstream: Subscriber[Any], run: BalanceRun, k: int) -> None:
        super().__init__(downstream)
        self.run = run
        self.k = k

    @property
    def demand(self) -> int:
        """Requested by the branch and not yet given to it (items)."""
        r = self.requested
        return r if r == UNBOUNDED else r - len(self.queue)

    def _on_request(self, n: int) -> None:
        self.run.pump()

    def _on_delivered(self, count: int) -> None:
        self.run.counters.items_out += count

    def _release(self) -> None:
        self.queue.clear()
        self.run.port_released(self)


class BalanceRun(UpstreamLink):
    """One subscription of the stage: the upstream link, the ports and the items held.

    State: ``ports`` (slot ``k`` → its subscription, None until subscribed), ``attached_ports``,
    ``live`` (ports not cancelled), ``pending`` (items from upstream, and requests to dispatch
    again, waiting for an eligible port: ``(item, failover or None)``), ``cursor`` (where the
    round-robin among equal demand resumes), and the link's ``upstream_done``.
    """

    __slots__ = (*LINK_SLOTS, "stage", "ports", "attached_ports", "live", "pending", "cursor", "pump",
                 "terminal", "listening", "saw_unavailable", "__weakref__")
    hands_itself_downstream = False

    def __init__(self, stage: BalanceFlowable) -> None:
        self.stage = stage
        n = len(stage.ports)
        self.ports: list[PortSubscription | None] = [None] * n
        self.attached_ports = [False] * n
        self.live = 0
        self.pending: deque[tuple[Any, Failover | None]] = deque()
        self.cursor = 0
        #: the dispatch loop, serial (a re-entrant call is folded into the running one, §1.3)
        self.pump = SerialLoop(self._pump_pass)
        #: upstream's terminal signal once received: True (completed) or the error
        self.terminal: BaseException | bool | None = None
        self.listening = False
        #: the last pass saw a live port whose engine was unavailable (or did not look at every
        #: port): only then can an engine's capacity signal change what a pass decides
        self.saw_unavailable = True
        self.link_upstream(stage.name)

    # -- ports -----------------------------------------------------------------------------------
    def attach(self, k: int, subscriber: Subscriber[Any]) -> None:
        port = PortSubscription(subscriber, self, k)
        self.ports[k] = port
        self.attached_ports[k] = True
        self.live += 1
        subscriber.on_subscribe(port)
        if all(self.attached_ports):
            if self.live:
                for engine in self.stage.port_engines:
                    if engine is not None:
                        engine.add_capacity_listener(self.on_capacity)
                self.listening = True
                self.stage.source._subscribe_safely(self)
            else:
                self.cancel_upstream()

    def port_released(self, port: PortSubscription) -> None:
        self.live -= 1
        if self.live == 0:
            self._stop_listening()
            if not self.upstream_done:
                self.cancel_upstream()
            self._discard_pending("cancelled")
        else:
            self.pump()  # its items may go to another port

    def on_capacity(self) -> None:
        """A branch's engine has more free slots, or became available (its capacity listener).

        Free slots reach the run as its ports' requests (the branch's ``execute`` asks); what
        only the run sees is an engine turning available, which makes its port eligible. So a
        pass runs when the last one saw an unavailable engine, holds items, or is running now
        (then it is marked missed); otherwise a pass would decide exactly what the last one did
        and is skipped (one per finished request on the router's path)."""
        if self.saw_unavailable or self.pending or self.terminal is not None or self.pump.running:
            self.pump()

    def _stop_listening(self) -> None:
        if self.listening:
            self.listening = False
            for engine in self.stage.port_engines:
                if engine is not None:
                    engine.remove_capacity_listener(self.on_capacity)

    def _discard_pending(self, reason: str) -> None:
        items = [item for item, _ in self.pending]
        self.pending.clear()
        discard_all(items, reason, self.counters)

    # -- dispatch ----------------------------------------------------------------------------------
    def choose(self, excluded: frozenset[int] | set[int] = frozenset(), item: Any = None) -> PortSubscription | None:
        """The eligible port with the most demand; among equal demand the first at or after
        ``cursor`` (round-robin). With the stage's ``affinity`` and an ``item``, the affinity
        picks among the eligible ports. None when no port is eligible."""
        ports = self.ports
        n = len(ports)
        affinity = self.stage.affinity
        engines = self.stage.port_engines
        cursor = self.cursor
        if affinity is not None and item is not None:
            candidates = []
            for step in range(n):
                k = cursor + step
                if k >= n:
                    k -= n
                port = ports[k]
                # eligible: live, not finished, with demand, its engine (if any) available
                if port is None or port.cancelled or port.finished or k in excluded:
                    continue
                demand = port.demand
                if demand > 0:
                    engine = engines[k]
                    if engine is None or engine.available:
                        demand = _ranked(demand, engine)
                        if demand > 0:
                            candidates.append((k, demand))
            if not candidates:
                return None
            chosen = affinity.choose(item, candidates)
            for k, _ in candidates:
                if k == chosen:
                    return ports[k]
            raise ProtocolViolationError(f"{self.stage.name}: routing policy {affinity!r} chose branch "
                                         f"{chosen!r}, not one of those with demand {candidates}")
        best: PortSubscription | None = None
        best_demand = 0
        for step in range(n):
            k = cursor + step
            if k >= n:
                k -= n
            port = ports[k]
            if port is None or port.cancelled or port.finished or k in excluded:
                continue
            demand = port.demand
            if demand > best_demand:
                engine = engines[k]
                if engine is None or engine.available:
                    demand = _ranked(demand, engine)
                    if demand > best_demand:
                        best, best_demand = port, demand
        return best

    def _all_down(self) -> bool:
        """True when every live port has an engine and none is available (circuits open, paused
        by their backends): then nothing is held for them (see :meth:`_answer_unavailable`)."""
        engines = self.stage.port_engines
        live = [k for k, p in enumerate(self.ports) if p is not None and not p.cancelled]
        return bool(live) and all(engines[k] is not None and not engines[k].available for k in live)

    def _answer_unavailable(self, item: Any, failover: Failover | None) -> bool:
        """No replica is available: a request with a reply slot is answered now (the edge's 503,
        Retry-After from the replicas' pauses) instead of waiting — possibly an hour — for one;
        and upstream keeps being asked for the ports' demand, so what is queued behind is answered
        too. False for an item without a reply slot (it waits for a replica)."""
        error = EngineUnavailableError(f"{self.stage.name}: no replica is available")
        if failover is not None:
            failover.fail(error)
        elif isinstance(item, CompletionRequest) and item.reply is not None:
            if not item.reply.done():
                item.reply.set_exception(error)
        else:
            return False
        self.counters.drop("unavailable")
        return True

    def can_retry(self, excluded: set[int]) -> bool:
        """True while a live port outside ``excluded`` may still take a request."""
        if self.terminal is not None:
            return False
        return any(p is not None and not p.cancelled and k not in excluded for k, p in enumerate(self.ports))

    def redispatch(self, item: CompletionRequest, failover: Failover) -> None:
        """Dispatch ``item`` again (its engine failed it before its first token): ahead of the rest."""
        self.pending.appendleft((item, failover))
        self.pump()

    def _pump_pass(self) -> None:
        pending = self.pending
        retry = self.stage.retry_unstarted and len(self.ports) > 1
        down: bool | None = None  # _all_down(), asked only when a pass needs it
        while pending:
            item, failover = pending[0]
            port = self.choose(failover.tried if failover is not None else frozenset(), item)
            if port is None:
                if down is None:
                    down = self._all_down()
                if down and self._answer_unavailable(item, failover):
                    pending.popleft()
                    continue
                break
            pending.popleft()
            self.cursor = (port.k + 1) % len(self.ports)
            if retry and isinstance(item, CompletionRequest) and item.reply is not None:
                if failover is None:
                    failover = Failover(self, item)
                elif failover.gone:  # its client left while it waited to be sent again
                    if failover.relay is not None:
                        failover.relay.finish_cancelled()
                    continue
                item = failover.dispatch(port.k)
            hook = self.stage.port_hooks[port.k]
            if hook is not None:
                # the executor may hold the item until its own pass ends (a re-entrant pump): the
                # credit is spent now, or this pass would route more than the backend's word allows
                hook()
            port.queue.append(item)
            port.drain()
        terminal = self.terminal
        if terminal is not None:
            if terminal is True and not pending:  # completed (an error fails the ports at once)
                for port in self.ports:
                    if port is not None and not port.cancelled and not port.finished:
                        port.finished = True
                        port.drain()
                self._stop_listening()
            return
        if self.upstream is None or self.upstream_done:
            return
        # want: the demand of the eligible ports (and of every live port while all are down);
        # each port's demand and engine read once
        engines = self.stage.port_engines
        want = 0
        saw_unavailable = False
        for port in self.ports:
            if port is None or port.cancelled or port.finished:
                continue
            demand = port.demand
            if demand <= 0:
                continue
            engine = engines[port.k]
            if engine is not None and not engine.available:
                saw_unavailable = True
                if down is None:
                    down = self._all_down()
                if not down:
                    continue
            elif engine is not None:
                capped = _capped(demand, engine)
                if capped < demand:
                    # the backend's advertised credit is the limit: when it grows (a capacity
                    # signal), a pass must look again
                    saw_unavailable = True
                    demand = capped
            want += demand
            if want >= UNBOUNDED:
                want = UNBOUNDED
                saw_unavailable = True  # not every port was looked at
                break
        self.saw_unavailable = saw_unavailable
        if want == UNBOUNDED:
            if self.upstream_outstanding != UNBOUNDED:
                self.request_upstream(UNBOUNDED)
            return
        n = want - len(pending) - self.upstream_outstanding
        if n > 0:
            self.request_upstream(n)

    # -- upstream signals --------------------------------------------------------------------------
    def _upstream_ready(self) -> None:
        self.pump()

    def on_next(self, item: Any) -> None:
        if not self.accept(item):
            return
        self.counters.items_in += 1
        self.pending.append((item, None))
        self.pump()

    def _upstream_finished(self, error: BaseException | None) -> None:
        if error is None:
            self.terminal = True
            self.pump()  # the ports complete once the items held went out
        else:
            self._fail_all(error)

    def _upstream_overrun(self, error: MissingBackpressureError) -> None:
        self._fail_all(error)

    def _fail_all(self, error: BaseException) -> None:
        """An error: signalled to every port at once (ahead of what they hold); held items dropped."""
        self.terminal = error
        self._stop_listening()
        self._discard_pending("error")
        for port in self.ports:
            if port is not None and not port.cancelled:
                port.fail(error)

    def statistics(self) -> StageStatistics:
        """Demand = the sum of the ports' demand (items), items held (pending), in/out."""
        live = [p for p in self.ports if p is not None and not p.cancelled]
        demand = sum(p.demand for p in live)
        counters = self.counters
        return StageStatistics(counters.stage, min(demand, UNBOUNDED), len(self.pending), None,
                               counters.items_in, counters.items_out, dict(counters.dropped))


#: a branch: an operator applied to the balance's port (``ops.execute(engine)``, a chain, ...)
Branch = Callable[[Flowable[Any]], Flowable[Any]]
