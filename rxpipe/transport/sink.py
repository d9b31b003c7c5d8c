"""The gateway side of a broker transport: admitted requests go onto the broker's queue; replies
come back on the gateway's own channel; cancels and credit go back to the workers.

    Pipeline(Gateway(model="sim"), transport_sink("nats://127.0.0.1:4222", max_backlog=1000))

Demand (what the edge may admit) is the room under ``max_backlog``: the backlog is the requests
queued and not yet acknowledged (the adapter's :class:`~rxpipe.transport.Snapshot`), re-read
every ``refresh_interval_s``; in between the sink counts its own admissions, so several gateways
on one queue exceed the bound by at most what they admitted within one interval. To keep the
bound when a burst reaches several gateways at once, each one admits, between two refreshes, at
most its share of the room it saw: ``ceil(room / gateways)``, where ``gateways`` counts the live
gateways on the queue (each registers at every refresh, on the broker's clock). So the backlog
exceeds ``max_backlog`` by at most ``gateways - 1``. No room: no demand, and the edge answers 429
``queue_full``. The sink is written once for every broker: an adapter only moves bytes.

The count is not the wait: at a drain of 8 requests/s a full ``max_backlog`` of 1,000 is 125 s
deep, past every client's timeout, and workers would run sequences nobody waits for any more.
So admission also bounds the wait (``max_queue_wait_s``), as the edge's latency budget does
locally: the sink admits no more than the workers drain in that time, from the drain rate it
measures on its own requests (their starts on a worker's engine and their ends, while some
waited: :class:`~rxpipe.gateway._policy.DrainMeter`), re-checked at each start. Beyond it the
edge answers 429 ``queue_full`` with a Retry-After from the same drain.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import secrets
import socket
from typing import TYPE_CHECKING, Any

from .._protocol import Subscriber, Subscription
from ..errors import EngineUnavailableError
from ..flowable import Flowable
from ..metrics import StageCounters, StageStatistics, track
from ..runtime import Service
from ..serving import ALL_FEATURES, CompletionRequest
from ..serving._drain import DrainMeter
from ..stage import DrainSubscription, InternalSubscriber
from ._backoff import Backoff
from ._clock import BrokerClock
from ._codec import cancel_payload, credit_payload, decode_reply, encode_request
from ._interface import BrokerBusyError, GatewayBroker, Snapshot, WorkerBeat
from ._replies import ReplyRouter
from ._settings import TransportSettings
from ._writer import Writer

if TYPE_CHECKING:
    from ..runtime import Pipeline

__all__ = ["TransportSink", "pause_floor", "LIVENESS_S"]

log = logging.getLogger("rxpipe.transport")

#: a worker (gateway) whose heartbeat (registration) is older than this (s, broker clock) is not alive
LIVENESS_S = 5.0


def pause_floor(workers: dict[str, WorkerBeat], now_s: float) -> float:
    """The earliest end of a pause (broker time) if every live worker is paused, else 0."""
    pauses = []
    for beat in workers.values():
        if now_s - beat.at_s > LIVENESS_S:
            continue
        if beat.pause_until_s <= now_s:
            return 0.0  # a live worker takes work now
        pauses.append(beat.pause_until_s)
    return min(pauses, default=0.0)


class _Link(DrainSubscription, InternalSubscriber):
    """Subscriber of the edge (demand: 1 while there is room) and an empty subscription
    downstream (the sink emits nothing; it completes when the edge does)."""

    __slots__ = ("sink", "counters", "upstream", "outstanding", "upstream_done")

    def __init__(self, downstream: Subscriber[Any], sink: TransportSink) -> None:
        super().__init__(downstream)
        self.sink = sink
        self.counters = sink.counters
        self.upstream: Subscription | None = None
        self.outstanding = 0
        self.upstream_done = False

    def on_subscribe(self, subscription: Subscription) -> None:
        if self.upstream is not None:
            subscription.cancel()  # Reactive Streams §2.5
            return
        self.upstream = subscription
        self.downstream.on_subscribe(self)
        self.top_up()

    def top_up(self) -> None:
        """Ask the edge for one more admission while there is room. One at a time: demand cannot
        be taken back (§3), and the room can shrink under us when other gateways admit."""
        if (self.upstream is None or self.upstream_done or self.cancelled or self.outstanding
                or self.sink.room() <= 0):
            return
        self.outstanding = 1
        self.upstream.request(1)

    def on_next(self, item: CompletionRequest) -> None:
        self.outstanding = max(0, self.outstanding - 1)
        self.sink.accept(item)
        self.top_up()

    def on_error(self, error: BaseException) -> None:
        self.upstream_done = True
        self._error(error)

    def on_complete(self) -> None:
        self.upstream_done = True
        self._complete()

    def _drain(self) -> None:
        pass  # nothing is emitted downstream

    def _release(self) -> None:
        if not self.upstream_done and self.upstream is not None:
            self.upstream_done = True
            self.upstream.cancel()

    def statistics(self) -> StageStatistics:
        sink = self.sink
        return StageStatistics(sink.counters.stage, self.outstanding, sink.backlog_estimate(),
                               sink.settings.max_backlog, sink.counters.items_in, 0, dict(sink.counters.dropped))


class _Availability:
    """What the edge reads of the workers behind the broker, as it reads an engine's:
    ``available`` (False while the broker is unreachable: 503 ``unavailable``) and
    ``retry_after_s``; ``features``: every one (the gateway cannot know the workers' engines: each
    refuses what it does not serve at ``submit``, and that 400 reaches the client)."""

    features = ALL_FEATURES

    def __init__(self, sink: TransportSink) -> None:
        self.sink = sink
        self.model = sink.kind

    @property
    def available(self) -> bool:
        return self.sink.up

    @property
    def retry_after_s(self) -> float:
        """While the broker is down: the reconnect backoff's cap; while every live worker's
        engine is paused by its backend: the shortest remaining pause (the backlog cannot drain
        before), on the broker's clock."""
        sink = self.sink
        if not sink.up:
            return sink.settings.backoff_cap_s
        until = sink.paused_until_s
        now = sink.clock.now()
        if not until or now is None:
            return 0.0
        return max(0.0, until - now)


class TransportSink(Flowable[Any], Service):
    """The gateway side of a broker transport (DESIGN §8); see the module docstring.

    As a Flowable it subscribes to the edge (a :class:`~rxpipe.gateway.Gateway`) and emits
    nothing. Each admitted :class:`~rxpipe.engines.CompletionRequest` is published (orjson, see
    ``rxpipe.transport._codec``) with this gateway's reply channel; its ``reply`` resolves with a
    Completion when a worker's engine admitted it; chunks and the result follow, de-duplicated by
    request id and chunk sequence number (exactly once at the client). A client that leaves is
    cancelled on the workers; a streamed answer's credit is forwarded to its worker
    (:class:`~rxpipe.transport._replies.ReplyRouter`).

    As a :class:`~rxpipe.runtime.Service` it owns the adapter's connections. While the broker is
    unreachable ``engine.available`` is False (the edge answers 503 ``unavailable``), a publish
    that fails answers its client 503, and every loop retries with backoff but the backlog
    refresh, which goes on every ``refresh_interval_s``: it recovers on its own at most
    ``refresh_interval_s`` plus one round trip after the broker answers again.
    """

    kind = "transport_sink"

    def __init__(self, source: Flowable[CompletionRequest], settings: TransportSettings, broker: GatewayBroker, *,
                 name: str | None = None) -> None:
        super().__init__(name=name, upstreams=(source,))
        self.settings = settings
        self.broker = broker
        self.engine = _Availability(self)
        self.gateway_id = f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
        self.reply_key = broker.reply_to = self._reply_channel()
        broker.on_lost = self._down
        self.counters = StageCounters(self.name)
        #: the broker answered the last command (False until the first success)
        self.up = False
        #: the broker was lost (or unreachable from the start) and is not back yet: said once
        self._lost = False
        #: ... because a command found every pooled connection busy (the broker itself may be up)
        self._busy = False
        #: the model of the edge in front (set in :meth:`attach`), and the workers' other models named
        self.served_model: str | None = None
        self._warned_models: set[str] = set()
        #: backlog read at the last refresh, and the admissions it may not have seen
        self.backlog = 0
        self.unseen_at_refresh = 0
        self.admitted = 0
        #: admissions allowed between the last refresh and the next (this gateway's share)
        self.allowance = 0
        #: live gateways on the queue at the last refresh (this one included)
        self.gateways = 1
        self._admitted_at_refresh = 0
        #: publishes sent and not yet answered
        self.unconfirmed = 0
        #: the workers' drain as this gateway sees it (its requests' admissions, starts on a
        #: worker's engine and ends: fed by the ReplyRouter), for the wait bound
        self.meter = DrainMeter()
        self._last_rate: float | None = None
        #: broker time until which every live worker's engine is paused (0: none is)
        self.paused_until_s = 0.0
        self.router: ReplyRouter | None = None
        #: the broker's clock as read at each refresh
        self.clock = BrokerClock(None)
        #: publish tokens (to withdraw a request no worker has read) by request id
        self.tokens: dict[str, Any] = {}
        self._link: _Link | None = None
        self._writer: Writer | None = None
        #: cancels and credit: never queued behind publishes and withdrawals
        self._control: Writer | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False

    def _reply_channel(self) -> str:
        return f"{self.settings.stream}:replies:{self.gateway_id}"

    # -- demand ----------------------------------------------------------------------------------
    def backlog_estimate(self) -> int:
        """Requests not yet acknowledged, as far as this gateway knows: the last refresh plus what
        it admitted since (and what was unconfirmed when the refresh was sent)."""
        return self.backlog + self.unseen_at_refresh + (self.admitted - self._admitted_at_refresh)

    def room(self) -> int:
        """Admissions allowed now: this gateway's share of the room seen at the last refresh, less
        what it admitted since (0 while the broker is unreachable), and no more than
        :meth:`wait_room`."""
        if not self.up:
            return 0
        room = self.allowance - (self.admitted - self._admitted_at_refresh)
        by_wait = self.wait_room()
        return room if by_wait is None or by_wait > room else by_wait

    def wait_room(self) -> int | None:
        """Admissions the wait bound allows now: what the workers drain in ``max_queue_wait_s``
        (at least one: an empty queue admits), less this gateway's requests still queued
        (``meter.backlog``). The drain rate is the meter's (finishes while this gateway's
        requests waited, per second; with several gateways each sees its share of the drain and
        of the queue, so the bound is the same wait); while none is measured, the last one
        measured; None before any (or without the bound): ``max_backlog`` alone bounds."""
        wait = self.settings.max_queue_wait_s
        if wait is None or self.router is None:
            return None
        rate = self.meter.rate(self.router.loop.time())
        if rate is None:
            rate = self._last_rate
            if rate is None:
                return None
        else:
            self._last_rate = rate
        return max(1, int(rate * wait)) - self.meter.backlog

    # -- Flowable --------------------------------------------------------------------------------
    def _subscribe(self, subscriber: Subscriber[Any]) -> None:
        link = self._link = _Link(subscriber, self)
        track(link)
        self.upstreams[0]._subscribe(link)

    def accept(self, request: CompletionRequest) -> None:
        """An admitted request: publish it (or refuse it at once)."""
        self.counters.items_in += 1
        if not self.up:
            _fail_reply(request, EngineUnavailableError(f"the request queue ({self.kind}) is unreachable"))
            self.counters.drop("unavailable")
            return
        if self.room() <= 0:
            request.on_discard("queue_full")  # admitted on demand granted before the room shrank
            self.counters.drop("queue_full")
            return
        router, writer = self.router, self._writer
        assert router is not None and writer is not None
        self.admitted += 1
        self.unconfirmed += 1
        router.register(request)
        now = router.loop.time()
        payload = encode_request(request, self.reply_key, now,
                                 credit=self.settings.credit_window if request.stream else None)
        writer.put("publish", payload, done=functools.partial(self._published, request.id))

    def _started(self) -> None:
        """A request of this gateway started on a worker: the wait bound may have room again."""
        if self._link is not None and self.settings.max_queue_wait_s is not None:
            self._link.top_up()

    def _published(self, request_id: str, result: Any) -> None:
        self.unconfirmed -= 1
        assert self.router is not None
        if isinstance(result, BaseException):
            self.router.fail(request_id, EngineUnavailableError(f"the request could not be queued ({self.kind})"))
        elif request_id in self.router.waiting:
            self.tokens[request_id] = result

    # -- control (ReplyRouter's) -----------------------------------------------------------------
    def cancel(self, request: CompletionRequest, since_loop_s: float) -> None:
        """The client of ``request`` left: take it off the queue if no worker read it yet, and
        tell every worker (one holding it aborts it; one reading it later skips it)."""
        writer = self._control
        if writer is None or not self.up:
            return
        assert self.router is not None
        loop = self.router.loop
        # encoded when sent: the time the cancel waited here is part of its measured latency
        writer.put("control", lambda: cancel_payload(request.id, max(0.0, loop.time() - since_loop_s)),
                   done=self._controlled)
        token = self.tokens.pop(request.id, None)
        if token is not None and self._writer is not None:
            self._writer.put("withdraw", token)

    def credit(self, credits: dict[str, int]) -> None:
        writer = self._control
        if writer is not None and self.up:
            writer.put("control", credit_payload(credits), done=self._controlled)

    def _controlled(self, result: Any) -> None:
        if isinstance(result, BaseException):
            self.counters.drop("control_lost")
            log.warning("%s %s: a cancel or credit message was not written: %r", self.kind, self.name, result)

    def _forget_tokens(self) -> None:
        router = self.router
        if router is not None and len(self.tokens) > len(router.waiting):
            waiting = router.waiting
            self.tokens = {rid: token for rid, token in self.tokens.items() if rid in waiting}

    # -- reachability ----------------------------------------------------------------------------
    def _down(self, error: BaseException) -> None:
        """The broker did not answer (a command, a read, or the adapter saw the connection drop):
        said once per outage ("lost"; "unreachable" when it never answered yet). A command that
        found every pooled connection busy (:class:`BrokerBusyError`) is said as that."""
        if self.up or not self._lost:
            if isinstance(error, BrokerBusyError):
                log.warning("%s %s: %s; answering 503 until a command goes through", self.kind, self.name, error)
            else:
                log.warning("%s %s: %s %s (%r); answering 503 until it is back", self.kind, self.name,
                            self.broker.name, "lost" if self.up else "unreachable", error)
        self.up = False
        self._lost = True
        self._busy = isinstance(error, BrokerBusyError)

    def _up(self) -> None:
        """A refresh went through: admit again. Not while the adapter knows its connection is
        down: a refresh answered just before the connection dropped, and taken after the drop
        was reported, does not mean the broker is back (it would say "back", admit for one
        refresh interval and say "lost" again)."""
        if not self.broker.reachable:
            return
        if not self.up:
            if self._busy:
                log.info("%s %s: commands to %s go through again", self.kind, self.name, self.broker.name)
            else:
                log.info("%s %s: %s is %s", self.kind, self.name, self.broker.name,
                         "back" if self._lost else "reachable")
            self.up = True
            self._lost = self._busy = False
        if self._link is not None:
            self._link.top_up()

    # -- Service ---------------------------------------------------------------------------------
    def attach(self, pipeline: Pipeline) -> None:
        # the model the edge in front serves: workers whose engine serves another are named in the log
        config = next((getattr(stage, "config", None) for stage in pipeline.stages
                       if getattr(getattr(stage, "config", None), "model", None)), None)
        self.served_model = getattr(config, "model", None)

    async def start(self, host: str, port: int | None) -> str | None:
        s = self.settings
        loop = asyncio.get_running_loop()
        self._stopping = False
        self.clock.loop = loop
        self.router = ReplyRouter(loop, self, credit_window=s.credit_window, credit_resend_s=s.credit_resend_s,
                                  stall_timeout_s=s.stall_timeout_s, meter=self.meter)
        self.router.on_start = self._started
        try:
            await self.broker.open()
        except self.broker.transient as error:
            self._down(error)
        self._writer = Writer(self.broker, Backoff(s.backoff_base_s, s.backoff_cap_s), retry=False,
                              on_down=self._down)
        self._control = Writer(self.broker, Backoff(s.backoff_base_s, s.backoff_cap_s), retry=False)
        self._writer.start()
        self._control.start()
        try:
            await self._refresh()
        except self.broker.transient as error:
            self._down(error)
        self._tasks = [loop.create_task(self._refresh_loop(), name=f"rxpipe-transport-refresh-{self.name}"),
                       loop.create_task(self._read_replies(), name=f"rxpipe-transport-replies-{self.name}"),
                       loop.create_task(self._credit_loop(), name=f"rxpipe-transport-credit-{self.name}")]
        return None

    async def stop(self) -> None:
        self._stopping = True
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)  # each ends within one block
            self._tasks = []
        for writer in (self._writer, self._control):
            if writer is not None:
                await writer.close(self.settings.command_timeout_s)
        if self.router is not None:
            self.router.fail_all(EngineUnavailableError("the gateway stopped"))
        try:
            await self.broker.leave(self.gateway_id)
        except self.broker.transient:
            pass
        await self.broker.close()

    # -- loops -----------------------------------------------------------------------------------
    async def _refresh(self) -> None:
        """One backlog refresh (also registers this gateway and reads the workers' beats)."""
        s = self.settings
        loop = asyncio.get_running_loop()
        unseen = self.unconfirmed
        mark = self.admitted
        sent = loop.time()
        snapshot: Snapshot = await self.broker.snapshot(self.gateway_id)
        self.clock.observe(snapshot.now_s, sent, loop.time())
        if snapshot.reset and self.router is not None and len(self.router):
            # a new (or wiped) broker: without the reply channel no answer can reach the requests
            # still waiting: they get 503 now
            log.warning("%s %s: the reply channel is gone (the broker lost its data?); %d waiting requests "
                        "are answered 503", self.kind, self.name, len(self.router))
            self.router.fail_all(EngineUnavailableError(f"the request queue ({self.kind}) lost the request"))
        now = snapshot.now_s
        self.backlog = snapshot.backlog
        self.unseen_at_refresh = unseen
        self._admitted_at_refresh = mark
        gateways = max(1, sum(1 for at in snapshot.gateways.values() if now - at <= LIVENESS_S))
        if gateways != self.gateways:
            # what the share depends on, said when it changes (a peer seen, or one gone silent)
            log.info("%s %s: %d live gateways on the queue: this one admits ceil(room / %d) between refreshes",
                     self.kind, self.name, gateways, gateways)
        self.gateways = gateways
        room = max(0, s.max_backlog - self.backlog - unseen)
        self.allowance = -(-room // self.gateways)
        self.paused_until_s = pause_floor(snapshot.workers, now)
        self._check_models(snapshot.workers, now)
        self._forget_tokens()
        self._up()

    def _check_models(self, workers: dict[str, WorkerBeat], now_s: float) -> None:
        """Warn once per model when a live worker's engine serves a model other than the one the
        gateway admits (its clients, asking for the worker's model, get 404 at the edge)."""
        served = self.served_model
        if served is None:
            return
        for consumer, beat in workers.items():
            model = beat.model
            if (model is not None and model != served and model not in self._warned_models
                    and now_s - beat.at_s <= LIVENESS_S):
                self._warned_models.add(model)
                log.warning("%s %s: worker %s serves model %r but this gateway serves %r: requests for %r get 404 "
                            "here; start the gateway with --set model=%s", self.kind, self.name, consumer, model,
                            served, model, model)

    async def _refresh_loop(self) -> None:
        """Refresh every ``refresh_interval_s``, and as often while the broker is unreachable:
        a refresh that goes through is what lets the edge admit again (``up``), so it answers
        503 at most ``refresh_interval_s`` plus one round trip after the broker answers again.
        A backoff would add up to ``backoff_cap_s`` to that, and spare the broker nothing: the
        probe is the command a gateway sends that often while the broker is up. Backoff only
        after an unexpected error, or when every pooled connection was busy
        (:class:`BrokerBusyError`: the broker answers, this process is overloaded)."""
        s = self.settings
        backoff = Backoff(s.backoff_base_s, s.backoff_cap_s)
        while not self._stopping:
            delay = s.refresh_interval_s
            try:
                await self._refresh()
                backoff.reset()
            except self.broker.transient as error:
                self._down(error)
                if isinstance(error, BrokerBusyError):
                    delay = max(delay, backoff.next_delay())
            except Exception:
                log.exception("%s %s: backlog refresh failed", self.kind, self.name)
                delay = max(delay, backoff.next_delay())
            await asyncio.sleep(delay)

    async def _credit_loop(self) -> None:
        while not self._stopping:
            await asyncio.sleep(min(self.settings.credit_resend_s, self.settings.block_s))
            if self.router is not None and self.up:
                self.router.tick()

    async def _read_replies(self) -> None:
        """Blocking reads of this gateway's reply channel until stopped."""
        s = self.settings
        router = self.router
        assert router is not None
        backoff = Backoff(s.backoff_base_s, s.backoff_cap_s)
        while not self._stopping:
            try:
                messages = await self.broker.read_replies(s.block_s)
            except self.broker.transient as error:
                self._down(error)
                await asyncio.sleep(backoff.next_delay())
                continue
            except Exception:
                log.exception("%s %s: reading replies failed", self.kind, self.name)
                await asyncio.sleep(backoff.next_delay())
                continue
            backoff.reset()
            for raw in messages:
                try:
                    message = decode_reply(raw)
                    if message is not None:
                        router.dispatch(message)
                except Exception:
                    log.exception("%s %s: bad reply message %r", self.kind, self.name, raw[:200])


def _fail_reply(request: CompletionRequest, error: BaseException) -> None:
    reply = request.reply
    if reply is not None and not reply.done():
        reply.set_exception(error)
