"""The worker side of a broker transport: a source whose ``request(n)`` becomes one bounded read.

    Pipeline(transport_source(url, max_unacked=engine.max_num_seqs), ops.execute(engine))

A broker has no notion of this worker's capacity beyond a count; the source is the credit window.
It reads (the adapter's ``fetch(n)``: Redis ``XREADGROUP COUNT n``, NATS pull ``fetch(n)``) only
while downstream demand is outstanding, never more requests than that demand, and never more
than ``max_unacked`` held (delivered and not yet acknowledged). After a reconnect nothing is
assumed about reads in flight: the next read asks for exactly what is outstanding (NATS ADR-37's
rule for pull consumers), and what arrives beyond it waits here, held, for the next demand. A
live worker keeps what it holds from redelivery (refreshed every third of
``visibility_timeout_s``) and publishes its liveness and its engine's pause on the broker's clock.

The control channel carries cancels and token credit from the gateways: a cancelled request this
worker holds is aborted where it is (never started if still queued; its engine frees the slot
within one step if running); one not read yet is remembered (``cancel_memory_s``) and skipped
when it arrives. Credit raises a streamed request's token credit (see ``_serve``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict, deque
from typing import TYPE_CHECKING, Any, Callable

import orjson

from .._protocol import Subscriber
from ..errors import RxPipeError
from ..flowable import Flowable
from ..metrics import StageCounters, StageStatistics, track
from ..runtime import Service
from ..stage import EMPTY_SUBSCRIPTION, QueueDrainSubscription
from ._ack import AckHandle, RemoteRequest
from ._backoff import Backoff
from ._clock import BrokerClock
from ._codec import decode_control, decode_request
from ._interface import BrokerBusyError, Delivery, WorkerBroker
from ._serve import ReplyPublisher
from ._settings import TransportSettings, public_url
from ._writer import Writer

if TYPE_CHECKING:
    from ..runtime import Pipeline

__all__ = ["WorkerSource"]

log = logging.getLogger("rxpipe.transport")


class _SourceSubscription(QueueDrainSubscription):
    """Downstream's subscription: its ``requested`` is what the reader may fetch."""

    __slots__ = ("source", "counters")

    def __init__(self, downstream: Subscriber[RemoteRequest], source: WorkerSource) -> None:
        super().__init__(downstream)
        self.source = source
        self.counters = source.counters

    def _on_request(self, n: int) -> None:
        self.source._wake_reader()

    def _release(self) -> None:
        self.source._subscription_ended(self)

    def statistics(self) -> StageStatistics:
        source = self.source
        return StageStatistics(source.counters.stage, self.requested, len(source.held), source.max_unacked,
                               source.counters.items_in, self.emitted, dict(source.counters.dropped))


class WorkerSource(Flowable[RemoteRequest], Service):
    """Worker ``settings.consumer`` of group ``settings.group`` on the queue ``settings.stream``
    (DESIGN §8), over the adapter ``broker``.

    Emits :class:`~rxpipe.transport.RemoteRequest` items (each with ``reply`` and an
    :class:`~rxpipe.transport.AckHandle`); the :class:`~rxpipe.transport._serve.ReplyPublisher`
    it owns sends each request's replies and acknowledges it once its result is written. Hot,
    one subscriber at a time.

    Args:
        settings: the broker's settings (:class:`~rxpipe.transport.TransportSettings`).
        broker: the adapter (:class:`~rxpipe.transport.WorkerBroker`).
        max_unacked: requests held (delivered, not yet acknowledged) at most; None: only demand
            bounds them. The worker pipeline sets it to the engine's ``max_num_seqs``.
        pause_s: seconds the engine will take no work (its backend's Retry-After; 0: none). While
            it is > 0 nothing is read; each heartbeat publishes it so the gateways never advertise
            a shorter Retry-After.

    Reads, heartbeats and control reads retry broker errors with backoff; while the broker is
    unreachable replies and acks wait (in order) and are sent when it is back. The log says
    "lost" once per outage and "is back" once when it ends (each retry is DEBUG).
    """

    kind = "transport_source"

    def __init__(self, settings: TransportSettings, broker: WorkerBroker, *, max_unacked: int | None = None,
                 pause_s: Callable[[], float] | None = None, name: str | None = None) -> None:
        super().__init__(name=name)
        if max_unacked is not None and (isinstance(max_unacked, bool) or not isinstance(max_unacked, int)
                                        or max_unacked < 1):
            raise ValueError(f"max_unacked must be an int >= 1 requests (or None), got {max_unacked!r}")
        self.settings = settings
        self.broker = broker
        self.max_unacked = max_unacked
        self.pause_s = pause_s
        self.counters = StageCounters(self.name)
        #: requests delivered to this worker and not yet acknowledged (by the adapter's key)
        self.held: dict[Any, AckHandle] = {}
        #: the requests of held entries, by request id (cancel and credit find them here)
        self.requests: dict[str, RemoteRequest] = {}
        #: requeued (or read beyond demand) requests, delivered again before new reads
        self.redeliver: deque[AckHandle] = deque()
        #: cancels of requests not read yet: request id -> (broker time of the cancel, loop expiry)
        self.cancelled: OrderedDict[str, tuple[float | None, float]] = OrderedDict()
        self.clock = BrokerClock(None)
        self.publisher: ReplyPublisher | None = None
        #: the model its engine serves (from :meth:`attach`), published in its heartbeat
        self.model: str | None = None
        #: loop time since when the broker has not answered (None: it answers); said once per outage
        self._down_since: float | None = None
        #: ... because a command found every pooled connection busy (the broker itself may be up)
        self._busy = False
        self._ever_up = False
        self._subscription: _SourceSubscription | None = None
        self._writer: Writer | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._wake: asyncio.Event | None = None
        self._reading = False
        self._stopping = False
        self._idle: asyncio.Event | None = None
        self._stopped: asyncio.Event | None = None

    # -- Flowable --------------------------------------------------------------------------------
    def _subscribe(self, subscriber: Subscriber[RemoteRequest]) -> None:
        if self._subscription is not None and not self._subscription.cancelled:
            subscriber.on_subscribe(EMPTY_SUBSCRIPTION)
            subscriber.on_error(RxPipeError(f"{self.name!r} is a hot source and already has a subscriber"))
            return
        sub = self._subscription = _SourceSubscription(subscriber, self)
        track(sub)
        subscriber.on_subscribe(sub)

    def _subscription_ended(self, sub: _SourceSubscription) -> None:
        if self._subscription is sub:
            self._subscription = None
            # queued, undelivered requests go back to the broker (redelivered after the visibility timeout)
            for item in sub.queue:
                if isinstance(item, RemoteRequest) and item.ack is not None:
                    item.ack.release()
            sub.queue.clear()

    def wanted(self) -> int:
        """Requests the reader may fetch now: outstanding demand not yet met, capped by ``max_unacked``."""
        sub = self._subscription
        if sub is None or sub.cancelled or not self._reading or self.paused():
            return 0
        want = sub.requested - len(sub.queue)
        if self.max_unacked is not None:
            want = min(want, self.max_unacked - len(self.held) + len(self.redeliver))
        return max(0, want)

    def paused(self) -> bool:
        """True while the engine's backend asked for a pause (``pause_s() > 0``): nothing is read,
        whatever demand is outstanding (demand granted before the pause cannot be taken back)."""
        return self.pause_s is not None and self.pause_s() > 0

    def _wake_reader(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def _deliver(self, handles: list[AckHandle]) -> None:
        sub = self._subscription
        publisher = self.publisher
        assert publisher is not None
        loop = asyncio.get_running_loop()
        broker_now = self.clock.now()
        for handle in handles:
            delivery = handle.delivery
            try:
                data = decode_request(delivery.payload)
                budget = data.get("budget_s")
                deadline = None
                if budget is not None:
                    queued_s = (broker_now - delivery.stored_s if broker_now is not None
                                and delivery.stored_s is not None else 0.0)
                    deadline = loop.time() + float(budget) - max(0.0, queued_s)
                credit = data.get("credit")
                request = RemoteRequest(
                    prompt=data.get("prompt"), messages=data.get("messages"), max_tokens=data.get("max_tokens"),
                    model=data.get("model") or "sim", stream=bool(data.get("stream")),
                    sampling=data.get("sampling") or {}, api_key_id=data.get("api_key_id"), id=data["id"],
                    deadline_s=deadline, reply=loop.create_future(), reply_to=data["reply_to"], ack=handle,
                    credit=None if credit is None else int(credit),
                    max_tokens_defaulted=bool(data.get("max_tokens_defaulted")), endpoint=data.get("endpoint"),
                    features=data.get("features"), max_tokens_field=data.get("max_tokens_field") or "max_tokens")
            except (ValueError, TypeError, KeyError, orjson.JSONDecodeError) as error:
                log.warning("worker: %r is not a request (%s); acknowledged and skipped", delivery.key, error)
                self.counters.drop("malformed")
                handle.ack()
                continue
            self.counters.items_in += 1
            self.requests[request.id] = request
            publisher.watch(request)
            gone = self.cancelled.pop(request.id, None)
            if gone is not None:  # its client left before this worker read it
                request.client_gone = True
                request.cancelled_where = "unread"
                request.cancel()
                continue
            if sub is None or sub.cancelled:
                handle.release()
                continue
            sub.queue.append(request)
        if sub is not None:
            sub.drain()

    # -- control ---------------------------------------------------------------------------------
    def _control(self, payload: bytes, written_s: float) -> None:
        message = decode_control(payload)
        if message is None:
            return
        if message["k"] == "credit":
            publisher = self.publisher
            credits = message.get("c")
            if publisher is not None and isinstance(credits, dict):
                for request_id, cumulative in credits.items():
                    if type(cumulative) is int:
                        publisher.credit(request_id, cumulative)
            return
        request_id = message.get("id")
        if not isinstance(request_id, str):
            return
        at = written_s - float(message.get("g") or 0.0)
        request = self.requests.get(request_id)
        if request is not None:
            if not request.client_gone:
                request.client_gone = True
                request.cancelled_at_s = at
                request.cancelled_where = "running" if request.completion is not None else "queued"
                request.cancel()
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        memory = self.cancelled
        memory[request_id] = (at, now + self.settings.cancel_memory_s)
        while memory:
            oldest = next(iter(memory.values()))
            if oldest[1] > now:
                break
            memory.popitem(last=False)

    # -- AckHandle owner -------------------------------------------------------------------------
    def _ack(self, handle: AckHandle) -> None:
        writer = self._writer
        assert writer is not None
        writer.put("ack", handle.delivery, done=lambda result: self._acked(handle, result))

    def _acked(self, handle: AckHandle, result: Any) -> None:
        if isinstance(result, BaseException):
            log.warning("worker: the ack of %r failed: %r", handle.key, result)
        self._forget(handle)

    def _requeue(self, handle: AckHandle) -> None:
        if handle.request_id is not None:
            self.requests.pop(handle.request_id, None)
        self.redeliver.append(handle)
        self._wake_reader()

    def _release(self, handle: AckHandle) -> None:
        writer = self._writer
        if writer is None:
            self._forget(handle)
            return
        writer.put("release", handle.delivery, done=lambda _: self._forget(handle))

    def _forget(self, handle: AckHandle) -> None:
        if self.held.pop(handle.key, None) is not None and handle.request_id is not None:
            self.requests.pop(handle.request_id, None)
        if not self.held and self._idle is not None:
            self._idle.set()
        self._wake_reader()

    # -- reachability ----------------------------------------------------------------------------
    def _lost(self, error: BaseException) -> None:
        """A read, write or beat found the broker unreachable: said once per outage."""
        loop = asyncio.get_running_loop()
        if self._down_since is None:
            self._down_since = loop.time()
            self._busy = isinstance(error, BrokerBusyError)
            if self._busy:
                log.warning("worker %s: %s; reading, replies and acks wait and are retried with backoff",
                            self.settings.consumer, error)
            else:
                log.warning("worker %s: %s %s (%r); reading, replies and acks wait and are retried with backoff",
                            self.settings.consumer, self.broker.name, "lost" if self._ever_up else "unreachable",
                            error)
        else:
            log.debug("worker %s: %s still unreachable (%r)", self.settings.consumer, self.broker.name, error)

    def _back(self) -> None:
        if not self.broker.reachable:
            return  # an operation that only waited, while the adapter knows its connection is down
        self._ever_up = True
        since = self._down_since
        if since is not None:
            self._down_since = None
            back = f"commands to {self.broker.name} go through again" if self._busy else f"{self.broker.name} is back"
            log.info("worker %s: %s after %.1f s", self.settings.consumer, back,
                     asyncio.get_running_loop().time() - since)

    # -- Service ---------------------------------------------------------------------------------
    def attach(self, pipeline: Pipeline) -> None:
        # the model its engine serves goes into the heartbeat: a gateway serving another one says so
        models = [getattr(getattr(stage, "engine", None), "model", None) for stage in pipeline.stages]
        self.model = next((m for m in models if isinstance(m, str)), None)

    async def start(self, host: str, port: int | None) -> str | None:
        s = self.settings
        loop = asyncio.get_running_loop()
        self._stopping = False
        self._reading = True
        self._wake = asyncio.Event()
        self._stopped = asyncio.Event()
        self.clock.loop = loop
        self.broker.on_lost, self.broker.on_back = self._lost, self._back
        try:
            await self.broker.open()
            self._back()
        except self.broker.transient as error:
            self._lost(error)
        self._writer = Writer(self.broker, Backoff(s.backoff_base_s, s.backoff_cap_s), retry=True,
                              on_down=self._lost, on_up=self._back)
        self._writer.start()
        self.publisher = ReplyPublisher(self._writer, self.clock, worker=s.consumer)
        self._tasks = [loop.create_task(self._read_loop(), name=f"rxpipe-transport-read-{s.consumer}"),
                       loop.create_task(self._control_loop(), name=f"rxpipe-transport-control-{s.consumer}"),
                       loop.create_task(self._heartbeat_loop(), name=f"rxpipe-transport-heartbeat-{s.consumer}")]
        return public_url(s.url)

    async def drain(self, timeout_s: float) -> None:
        """Read nothing more; wait (up to ``timeout_s``) until every held request is acknowledged.
        What is still held then is released: another worker gets it after the visibility timeout."""
        self._reading = False
        if self.held:
            self._idle = asyncio.Event()
            try:
                await asyncio.wait_for(self._idle.wait(), timeout_s)
            except TimeoutError:
                log.warning("worker: %d requests unfinished after %.1f s are left to other workers",
                            len(self.held), timeout_s)

    async def stop(self) -> None:
        self._stopping = True
        self._reading = False
        self._wake_reader()
        if self._stopped is not None:
            self._stopped.set()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)  # each ends within one block
            self._tasks = []
        if self._writer is not None:
            await self._writer.close(self.settings.command_timeout_s)
        try:
            await self.broker.leave(self.settings.consumer)
        except self.broker.transient:
            pass
        await self.broker.close()

    # -- the reader ------------------------------------------------------------------------------
    async def _read_loop(self) -> None:
        s = self.settings
        backoff = Backoff(s.backoff_base_s, s.backoff_cap_s)
        wake = self._wake
        assert wake is not None
        while not self._stopping:
            want = self.wanted()
            if want <= 0:
                wake.clear()
                if self.wanted() <= 0 and not self._stopping:
                    if self.paused():  # no signal marks the end of a pause: look again shortly
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(wake.wait(), 0.1)
                    else:
                        await wake.wait()
                continue
            if self.redeliver:
                batch = [self.redeliver.popleft() for _ in range(min(want, len(self.redeliver)))]
                self._deliver(batch)
                continue
            try:
                deliveries = await self.broker.fetch(want, s.block_s)
            except self.broker.transient as error:
                self._lost(error)
                await asyncio.sleep(backoff.next_delay())
                continue
            except Exception:
                log.exception("worker %s: a read failed", s.consumer)
                await asyncio.sleep(backoff.next_delay())
                continue
            self._back()
            backoff.reset()
            try:
                self._accept(deliveries, want)
            except Exception:
                log.exception("worker %s: taking what was read failed", s.consumer)

    def _accept(self, deliveries: list[Delivery], want: int) -> None:
        """Hold what was read; answer poison requests; deliver at most ``want`` now (what came
        beyond it waits for demand)."""
        s = self.settings
        publisher = self.publisher
        assert publisher is not None
        handles = []
        for delivery in deliveries:
            if delivery.key in self.held:
                continue  # our own request coming back (a redelivery of what we hold)
            if delivery.payload is None:  # withdrawn (deleted) while pending
                AckHandle(delivery, self).ack()
                continue
            handle = AckHandle(delivery, self)
            self.held[delivery.key] = handle
            if delivery.deliveries > s.max_deliveries:
                self.counters.drop("max_deliveries")
                log.warning("worker %s: %r was delivered %d times (max_deliveries=%d); failing it", s.consumer,
                            delivery.key, delivery.deliveries, s.max_deliveries)
                try:
                    data = decode_request(delivery.payload)
                    publisher.give_up(data["id"], data["reply_to"], delivery.deliveries)
                except (ValueError, TypeError, KeyError, orjson.JSONDecodeError):
                    pass
                handle.ack()
                continue
            try:
                handle.request_id = decode_request(delivery.payload)["id"]
            except (ValueError, TypeError, KeyError, orjson.JSONDecodeError):
                pass
            handles.append(handle)
        now, later = handles[:want], handles[want:]
        self.redeliver.extend(later)
        if now:
            self._deliver(now)

    async def _control_loop(self) -> None:
        s = self.settings
        backoff = Backoff(s.backoff_base_s, s.backoff_cap_s)
        while not self._stopping:
            try:
                messages = await self.broker.read_control(s.block_s)
            except self.broker.transient as error:
                self._lost(error)
                await asyncio.sleep(backoff.next_delay())
                continue
            except Exception:
                log.exception("worker %s: reading the control channel failed", s.consumer)
                await asyncio.sleep(backoff.next_delay())
                continue
            self._back()
            backoff.reset()
            for payload, written_s in messages:
                try:
                    self._control(payload, written_s)
                except Exception:
                    log.exception("worker %s: bad control message %r", s.consumer, payload[:200])

    # -- heartbeat: keep held requests fresh, publish the engine's pause, housekeeping -------------
    async def _heartbeat_loop(self) -> None:
        s = self.settings
        beat_interval = min(1.0, s.visibility_timeout_s / 3)
        loop = asyncio.get_running_loop()
        next_beat = next_upkeep = 0.0
        while not self._stopping:
            try:
                if loop.time() >= next_beat:
                    next_beat = loop.time() + beat_interval
                    pause = float(self.pause_s()) if self.pause_s is not None else 0.0
                    sent = loop.time()
                    broker_now = await self.broker.heartbeat(s.consumer, pause,
                                                             [h.delivery for h in self.held.values()], self.model)
                    self.clock.observe(broker_now, sent, loop.time())
                    self._back()
                if loop.time() >= next_upkeep:
                    next_upkeep = loop.time() + self.broker.housekeeping_s
                    await self.broker.housekeeping()
            except self.broker.transient as error:
                self._lost(error)  # the next beat tries again
            except Exception:
                log.exception("worker %s: heartbeat failed", s.consumer)
            stopped = self._stopped
            assert stopped is not None
            with contextlib.suppress(TimeoutError):  # stop() ends the wait at once
                await asyncio.wait_for(stopped.wait(), max(0.0, min(next_beat, next_upkeep) - loop.time()))
