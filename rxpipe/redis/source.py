"""The worker side: a consumer-group source whose ``request(n)`` becomes ``XREADGROUP COUNT n``.

    Pipeline(RedisGroupSource(settings, max_unacked=engine.max_num_seqs), ops.execute(engine))

Redis has no cap on the entries a consumer holds; the source is the credit window. It reads
(``XREADGROUP GROUP g c COUNT n BLOCK ms STREAMS s >``) only while downstream demand is
outstanding, never more entries than that demand, and never more than ``max_unacked`` held
(delivered and not yet acknowledged). Before new reads it claims entries another consumer left
idle past ``visibility_timeout_s`` (``XAUTOCLAIM``), so a dead worker's requests run again; it keeps
its own in-flight entries fresh (``XCLAIM ... JUSTID`` every third of the timeout), so a slow but
live worker's are not taken. Acknowledged entries are trimmed (``XTRIM MINID``, below the oldest
pending entry).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Callable

import orjson
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from .._protocol import Subscriber
from ..errors import RxPipeError
from ..flowable import Flowable
from ..metrics import StageCounters, StageStatistics, track
from ..runtime import Service
from ..stage import EMPTY_SUBSCRIPTION, QueueDrainSubscription
from ._ack import AckHandle, RemoteRequest
from ._codec import decode_request
from ._connection import Backoff, RedisSettings, call, make_client, public_url
from ._features import Features, detect_features
from ._serve import ReplyPublisher
from ._trim import trim_acknowledged
from ._writer import TRANSIENT, Writer, leave_and_close
from .sink import ensure_group, workers_key

if TYPE_CHECKING:
    from ..runtime import Pipeline

__all__ = ["RedisGroupSource"]

log = logging.getLogger("rxpipe.redis")


class _GroupSubscription(QueueDrainSubscription):
    """Downstream's subscription: its ``requested`` is what the reader may fetch."""

    __slots__ = ("source", "counters")

    def __init__(self, downstream: Subscriber[RemoteRequest], source: RedisGroupSource) -> None:
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


class RedisGroupSource(Flowable[RemoteRequest], Service):
    """Consumer ``settings.consumer`` of group ``settings.group`` on ``settings.stream`` (DESIGN §8).

    Emits :class:`~rxpipe.redis.RemoteRequest` items (each with ``reply`` and an
    :class:`~rxpipe.redis.AckHandle`); the :class:`~rxpipe.redis._serve.ReplyPublisher` it owns
    sends each request's replies and acknowledges it once its result is written. Hot, one
    subscriber at a time.

    Args:
        settings: :class:`~rxpipe.redis.RedisSettings`.
        max_unacked: entries held (delivered, not yet acknowledged) at most; None: only demand
            bounds them. The worker pipeline sets it to the engine's ``max_num_seqs``.
        pause_s: seconds the engine will take no work (its backend's Retry-After; 0: none). While
            it is > 0 nothing is read; each heartbeat publishes it so the gateways never advertise
            a shorter Retry-After.

    Reads, claims and trims retry Redis errors with backoff; while Redis is unreachable replies
    and acks wait (in order) and are sent when it is back.
    """

    kind = "redis_group_source"

    def __init__(self, settings: RedisSettings, *, max_unacked: int | None = None,
                 pause_s: Callable[[], float] | None = None, name: str | None = None) -> None:
        super().__init__(name=name)
        if max_unacked is not None and (isinstance(max_unacked, bool) or not isinstance(max_unacked, int)
                                        or max_unacked < 1):
            raise ValueError(f"max_unacked must be an int >= 1 entries (or None), got {max_unacked!r}")
        self.settings = settings
        self.max_unacked = max_unacked
        self.pause_s = pause_s
        #: the model its engine serves (from :meth:`attach`), published in its heartbeat
        self.model: str | None = None
        self.counters = StageCounters(self.name)
        #: entries delivered to this consumer and not yet acknowledged (by id)
        self.held: dict[bytes, AckHandle] = {}
        #: requeued entries, delivered again before new reads
        self.redeliver: deque[AckHandle] = deque()
        self.features: Features | None = None
        #: entries taken over from other consumers (XAUTOCLAIM)
        self.claimed = 0
        self.publisher: ReplyPublisher | None = None
        self._subscription: _GroupSubscription | None = None
        self._commands: Redis | None = None
        self._reader: Redis | None = None
        self._writer: Writer | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._wake: asyncio.Event | None = None
        self._reading = False
        self._stopping = False
        self._idle: asyncio.Event | None = None
        self._claim_cursor = b"0-0"
        self._next_claim = 0.0

    # -- Flowable --------------------------------------------------------------------------------
    def _subscribe(self, subscriber: Subscriber[RemoteRequest]) -> None:
        if self._subscription is not None and not self._subscription.cancelled:
            subscriber.on_subscribe(EMPTY_SUBSCRIPTION)
            subscriber.on_error(RxPipeError(f"{self.name!r} is a hot source and already has a subscriber"))
            return
        sub = self._subscription = _GroupSubscription(subscriber, self)
        track(sub)
        subscriber.on_subscribe(sub)

    def _subscription_ended(self, sub: _GroupSubscription) -> None:
        if self._subscription is sub:
            self._subscription = None
            # queued, undelivered entries go back to the group (claimed after the visibility timeout)
            for item in sub.queue:
                if isinstance(item, RemoteRequest) and item.ack is not None:
                    item.ack.release()
            sub.queue.clear()

    def wanted(self) -> int:
        """Entries the reader may fetch now: outstanding demand not yet met, capped by ``max_unacked``."""
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
        for handle in handles:
            try:
                data = decode_request(handle.fields)
                deadline = data.get("deadline_unix")
                request = RemoteRequest(
                    prompt=data.get("prompt"), messages=data.get("messages"), max_tokens=data.get("max_tokens"),
                    model=data.get("model") or "sim", stream=bool(data.get("stream")),
                    sampling=data.get("sampling") or {}, api_key_id=data.get("api_key_id"), id=data["id"],
                    deadline_s=None if deadline is None else loop.time() + (float(deadline) - time.time()),
                    reply=loop.create_future(), reply_to=data["reply_to"], ack=handle)
            except (ValueError, TypeError, KeyError, orjson.JSONDecodeError) as error:
                log.warning("worker: stream entry %r is not a request (%s); acknowledged and skipped",
                            handle.entry_id, error)
                self.counters.drop("malformed")
                handle.ack()
                continue
            publisher.watch(request)
            self.counters.items_in += 1
            if sub is None or sub.cancelled:
                handle.release()
                continue
            sub.queue.append(request)
        if sub is not None:
            sub.drain()

    # -- AckHandle owner -------------------------------------------------------------------------
    def _ack(self, handle: AckHandle) -> None:
        writer = self._writer
        assert writer is not None
        writer.xack(self.settings.stream, self.settings.group, handle.entry_id,
                    lambda result: self._acked(handle, result))

    def _acked(self, handle: AckHandle, result: Any) -> None:
        if isinstance(result, BaseException):
            log.warning("worker: XACK of %r failed: %r", handle.entry_id, result)
        self._forget(handle)

    def _requeue(self, handle: AckHandle) -> None:
        self.redeliver.append(handle)
        self._wake_reader()

    def _release(self, handle: AckHandle) -> None:
        self._forget(handle)

    def _forget(self, handle: AckHandle) -> None:
        self.held.pop(handle.entry_id, None)
        if not self.held and self._idle is not None:
            self._idle.set()
        self._wake_reader()

    # -- Service ---------------------------------------------------------------------------------
    def attach(self, pipeline: Pipeline) -> None:
        # the model its engine serves goes into the heartbeat: a gateway serving another one says so
        models = [getattr(getattr(stage, "engine", None), "model", None) for stage in pipeline.stages]
        self.model = next((m for m in models if isinstance(m, str)), None)

    async def start(self, host: str, port: int | None) -> str | None:
        s = self.settings
        self._stopping = False
        self._reading = True
        self._wake = asyncio.Event()
        self._commands = make_client(s, connections=s.pool_size)
        self._reader = make_client(s, connections=1, blocking=True)
        self._writer = Writer(self._commands, Backoff(s.backoff_base_s, s.backoff_cap_s), retry=True)
        self._writer.start()
        self.publisher = ReplyPublisher(self._writer)
        try:
            await ensure_group(self._commands, s)
            self.features = await detect_features(self._commands, f"{s.stream}:probe")
            log.info("worker %s: Redis features %s", s.consumer, self.features)
        except TRANSIENT as error:
            log.warning("worker %s: Redis unreachable at start (%r); retrying in the background", s.consumer, error)
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._read_loop(), name=f"rxpipe-redis-read-{s.consumer}"),
                       loop.create_task(self._heartbeat_loop(), name=f"rxpipe-redis-heartbeat-{s.consumer}")]
        return public_url(s.url)

    async def drain(self, timeout_s: float) -> None:
        """Read nothing more; wait (up to ``timeout_s``) until every held entry is acknowledged.
        What is still held then is released: another worker claims it after the visibility timeout."""
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
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)  # the reader ends within one BLOCK
            self._tasks = []
        if self._writer is not None:
            await self._writer.close(self.settings.command_timeout_s)
        await leave_and_close(self._commands, self._reader, workers_key(self.settings), self.settings.consumer)
        self._reader = self._commands = None

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
                entries = await self._fetch(want)
            except TRANSIENT as error:
                delay = backoff.next_delay()
                # once per outage at WARNING (the transition), each retry at DEBUG
                level = logging.WARNING if backoff.failures == 1 else logging.DEBUG
                log.log(level, "worker %s: Redis lost (%r); reading again in %.2f s", s.consumer, error, delay)
                await asyncio.sleep(delay)
                continue
            except ResponseError as error:
                if "NOGROUP" in str(error):  # a new (or wiped) Redis
                    await self._recreate_group(backoff)
                    continue
                raise
            if backoff.failures:
                log.info("worker %s: Redis is back after %d failed reads", s.consumer, backoff.failures)
            backoff.reset()
            handles = []
            for entry_id, fields in entries:
                if entry_id in self.held:
                    continue  # our own entry coming back through a claim
                if fields is None:  # deleted while pending
                    continue
                handle = AckHandle(entry_id, fields, self)
                self.held[entry_id] = handle
                handles.append(handle)
            if handles:
                self._deliver(handles)

    async def _recreate_group(self, backoff: Backoff) -> None:
        try:
            assert self._commands is not None
            await ensure_group(self._commands, self.settings)
        except TRANSIENT:
            await asyncio.sleep(backoff.next_delay())

    async def _fetch(self, want: int) -> list[tuple[bytes, Any]]:
        """Claimed entries first (at most once per ``BLOCK`` interval), else new ones."""
        s = self.settings
        loop = asyncio.get_running_loop()
        if loop.time() >= self._next_claim:
            assert self._commands is not None
            cursor, entries, *_ = await call(self._commands.xautoclaim, s.stream, s.group, s.consumer,
                                             s.visibility_ms, start_id=self._claim_cursor, count=want)
            self._claim_cursor = cursor
            if cursor == b"0-0" or not entries:
                self._next_claim = loop.time() + s.block / 1000
            if entries:
                self.claimed += len(entries)
                log.info("worker %s: claimed %d entries idle over %.1f s", s.consumer, len(entries),
                         s.visibility_timeout_s)
                return await self._without_poison(list(entries))
        assert self._reader is not None
        response: Any = await call(self._reader.xreadgroup, s.group, s.consumer, {s.stream: ">"}, count=want,
                              block=s.block)
        found: list[tuple[bytes, Any]] = []
        for _key, entries in response or ():
            found.extend(entries)
        return found

    async def _without_poison(self, entries: list[tuple[bytes, Any]]) -> list[tuple[bytes, Any]]:
        """Claimed entries delivered more than ``max_deliveries`` times are answered with an error
        and acknowledged (``XPENDING``'s delivery counter, which ``XAUTOCLAIM`` increments)."""
        s = self.settings
        assert self._commands is not None
        ids = [entry_id for entry_id, _ in entries]
        detail: Any = await call(self._commands.xpending_range, s.stream, s.group, min(ids), max(ids), len(ids) + 64,
                                 consumername=s.consumer)
        counts = {d["message_id"]: int(d["times_delivered"]) for d in detail}
        keep = []
        for entry_id, fields in entries:
            deliveries = counts.get(entry_id, 0)
            if deliveries <= s.max_deliveries or fields is None:
                keep.append((entry_id, fields))
                continue
            self.counters.drop("max_deliveries")
            log.warning("worker %s: entry %r was delivered %d times (max_deliveries=%d); failing it",
                        s.consumer, entry_id, deliveries, s.max_deliveries)
            handle = AckHandle(entry_id, fields, self)
            self.held[entry_id] = handle
            try:
                data = decode_request(fields)
                assert self.publisher is not None
                self.publisher.give_up(data["id"], data["reply_to"], deliveries)
            except (ValueError, TypeError, KeyError, orjson.JSONDecodeError):
                pass
            handle.ack()
        return keep

    # -- heartbeat: keep held entries fresh, publish the engine's pause, trim ---------------------
    async def _heartbeat_loop(self) -> None:
        s = self.settings
        beat_interval = min(1.0, s.visibility_timeout_s / 3)
        next_beat = next_trim = 0.0
        loop = asyncio.get_running_loop()
        while not self._stopping:
            try:
                if loop.time() >= next_beat:
                    next_beat = loop.time() + beat_interval
                    await self._heartbeat()
                if loop.time() >= next_trim:
                    next_trim = loop.time() + s.trim_interval_s
                    assert self._commands is not None
                    await trim_acknowledged(self._commands, s)
            except TRANSIENT:
                pass  # the reader logs unreachability; the next beat tries again
            except ResponseError as error:
                log.debug("worker %s: heartbeat: %r", s.consumer, error)
            except Exception:
                log.exception("worker %s: heartbeat failed", s.consumer)
            await asyncio.sleep(max(0.0, min(next_beat, next_trim) - loop.time()))

    async def _heartbeat(self) -> None:
        s = self.settings
        commands = self._commands
        assert commands is not None
        now = time.time()
        pause = float(self.pause_s()) if self.pause_s is not None else 0.0
        beat = orjson.dumps({"at": now, "pause_until": now + pause if pause > 0 else 0.0, "model": self.model})
        pipe = commands.pipeline(transaction=False)
        pipe.hset(workers_key(s), s.consumer, beat)
        ids: list[Any] = list(self.held)
        if ids:
            # idle time back to 0: a live worker's slow requests are not claimed by others
            pipe.xclaim(s.stream, s.group, s.consumer, 0, ids, justid=True)
        await call(pipe.execute)
