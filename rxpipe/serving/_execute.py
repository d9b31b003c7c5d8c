"""``execute(engine)``: the executor stage, where backpressure is born (DESIGN §4).

State machine of one subscription:

- ``outstanding``: items (requests, or batches) requested upstream and not yet arrived;
- ``held``: requests arrived and not yet submitted (the engine had no free slot, or is down);
- ``queue``: Completions admitted and not yet delivered downstream.

Demand rule, re-evaluated on every arrival, every delivery and every capacity signal of the engine:
``room = min(free_slots, max_num_seqs - len(queue)) - len(held) - outstanding * unit`` (``unit`` =
1, or the max batch size the upstream declares, ``Capabilities.max_batch_size``). Unbatched, it
requests ``room`` items; batched, ``room // max_size`` batches (one batch only when there is room
for a whole one). So requested-but-not-arrived + held + running + waiting <= max_num_seqs, and the
stage holds at most ``max_num_seqs`` undelivered Completions. A cancelled request is dropped on
arrival (never submitted), which leaves room for one more.

The pump (submit held requests, then request more) runs as a :class:`~rxpipe.stage.SerialLoop`
(a work-in-progress flag, like the shared drain loop): a synchronous upstream that emits inside
``request(n)`` only marks the pump as missed, so a long run of cancelled requests never recurses.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Any

from .._protocol import Subscriber
from ..errors import EngineUnavailableError, UnsupportedRequestError
from ..flowable import Flowable
from ..metrics import StageStatistics
from ..stage import LINK_SLOTS, QueueDrainSubscription, SerialLoop, UpstreamLink
from .engine import Engine
from .records import Completion, CompletionRequest

__all__ = ["ExecuteFlowable"]


log = logging.getLogger("rxpipe")


class _ExecuteSubscription(QueueDrainSubscription, UpstreamLink):
    __slots__ = (*LINK_SLOTS, "engine", "unit", "held", "received", "skipped", "_pump", "_pass_drain")
    #: downstream gets this subscription before upstream is subscribed (see ExecuteFlowable)
    hands_itself_downstream = False

    def __init__(self, downstream: Subscriber[Completion], engine: Engine, unit: int, name: str) -> None:
        super().__init__(downstream)
        self.engine = engine
        #: slots one upstream item may fill: 1, or the upstream's declared max batch size
        self.unit = unit
        self.held: deque[CompletionRequest] = deque()
        self.received = 0
        #: requests dropped because their client had gone (cancelled before admission)
        self.skipped = 0
        self.link_upstream(name)
        #: the pump, run serially (a re-entrant call is folded into the running one)
        self._pump = SerialLoop(self._pump_pass)
        #: True while the pass delivers (its own drain): the pass asks upstream after it anyway
        self._pass_drain = False
        engine.add_capacity_listener(self._pump)

    # -- upstream signals ----------------------------------------------------------------------
    def _upstream_ready(self) -> None:
        self._pump()

    def on_next(self, item: Any) -> None:
        if self.cancelled or not self.accept(item):
            return
        if isinstance(item, CompletionRequest):
            self.held.append(item)
            self.received += 1
        elif isinstance(item, (list, tuple)) and all(isinstance(r, CompletionRequest) for r in item):
            self.held.extend(item)
            self.received += len(item)
        else:
            self._fail_upstream(TypeError(
                f"execute() takes CompletionRequest items (or lists of them), got {item!r}"))
            return
        self._pump()

    def on_error(self, error: BaseException) -> None:
        if self.cancelled or not self.upstream_terminated():
            return
        self._fail_held(error)
        self.finish(error)

    def on_complete(self) -> None:
        if self.cancelled or not self.upstream_terminated():
            return
        self._pump()

    def _fail_upstream(self, error: BaseException) -> None:
        self.cancel_upstream()
        self.fail(error)

    # -- the pump --------------------------------------------------------------------------------
    def _pump_pass(self) -> None:
        """One pass of the pump (run by ``self._pump``, a SerialLoop): submit held requests
        while the engine has room, then top up upstream demand."""
        if self.cancelled:
            return
        if self.held:
            self._submit_held()
            if self.queue:
                # what this drain delivers makes room that _request_more below counts: no pass
                # again for it (a delivery by any other drain re-enters the pump)
                self._pass_drain = True
                try:
                    self.drain()
                finally:
                    self._pass_drain = False
            if self.cancelled:
                return
        if self.upstream_done:
            if not self.held and not self.finished and self.error is None:
                self.finished = True
                self.drain()
        else:
            self._request_more()

    def _submit_held(self) -> None:
        engine = self.engine
        held = self.held
        queue = self.queue
        available = engine.available
        while held and (not available or engine.free_slots > 0):
            request = held[0]
            reply = request.reply
            if request.cancelled or (reply is not None and reply.cancelled()):
                held.popleft()
                self.skipped += 1
                self.counters.drop("cancelled")
                continue
            if not available:
                if reply is None:
                    return  # held until the engine is back (bounded: it counts against demand)
                held.popleft()  # its client gets 503 now instead of waiting for the engine
                if not reply.done():
                    reply.set_exception(EngineUnavailableError(f"engine {engine.model!r} is unavailable"))
                self.counters.drop("unavailable")
                continue
            try:
                completion = engine.submit(request)
            except EngineUnavailableError:
                available = False
                continue
            except Exception as error:
                held.popleft()
                if reply is None:
                    self._fail_upstream(error)
                    return
                # a request the engine cannot serve is its client's fault (the gateway's 400)
                log.log(logging.DEBUG if isinstance(error, UnsupportedRequestError) else logging.WARNING,
                        "execute: the engine refused request %s: %r", request.id, error)
                if not reply.done():
                    reply.set_exception(error)
                self.counters.drop("refused")
                continue
            held.popleft()
            if reply is not None and not reply.done():
                reply.set_result(completion)
            queue.append(completion)

    def _request_more(self) -> None:
        upstream = self.upstream
        engine = self.engine
        if upstream is None:
            return
        free = engine.free_slots
        if self.held and not engine.available:
            return  # requests without a reply slot wait for the engine: ask for nothing more
        room = (min(free, engine.max_num_seqs - len(self.queue)) - len(self.held)
                - self.upstream_outstanding * self.unit)
        n = room // self.unit
        if n > 0:
            self.request_upstream(n)

    # -- downstream ------------------------------------------------------------------------------
    def _on_delivered(self, count: int) -> None:
        if not self._pass_drain:
            self._pump()

    def _fail_held(self, error: BaseException) -> None:
        held = self.held
        while held:
            request = held.popleft()
            reply = request.reply
            if reply is not None and not reply.done():
                reply.set_exception(error)

    def _release(self) -> None:
        self.engine.remove_capacity_listener(self._pump)
        self.cancel_upstream()
        if self.held:
            error = self._failure or EngineUnavailableError(
                "the execute stage stopped before the engine admitted the request")
            self._fail_held(error)
        self.queue.clear()

    # -- statistics ------------------------------------------------------------------------------
    def statistics(self) -> StageStatistics:
        counters = self.counters
        return StageStatistics(counters.stage, self.requested, len(self.queue) + len(self.held),
                               self.engine.max_num_seqs, self.received, self.emitted, dict(counters.dropped))


class ExecuteFlowable(Flowable[Completion]):
    """The stage ``execute(engine)``; ``engine`` is public (the gateway reads its availability)."""

    kind = "execute"

    def __init__(self, source: Flowable[Any], engine: Engine, name: str | None) -> None:
        super().__init__(name=name, upstreams=(source,))
        self.source = source
        self.engine = engine
        size = source.capabilities.max_batch_size
        #: slots one upstream item may fill: the max batch size the upstream declares (read
        #: through pass-through stages such as tap or map), else 1
        self.unit = size if size is not None and size >= 1 else 1
        if self.unit > engine.max_num_seqs:
            raise ValueError(f"execute(): the upstream batch max_size ({self.unit}) exceeds the engine's "
                             f"max_num_seqs ({engine.max_num_seqs}); the executor requests a batch only when a "
                             f"whole one fits, so it would never request any")

    @property
    def batched(self) -> bool:
        """True when the upstream declares batches (``Capabilities.max_batch_size``)."""
        return self.source.capabilities.max_batch_size is not None

    def _subscribe(self, subscriber: Subscriber[Completion]) -> None:
        subscription = _ExecuteSubscription(subscriber, self.engine, self.unit, self.name)
        subscriber.on_subscribe(subscription)
        self.source._subscribe(subscription)

