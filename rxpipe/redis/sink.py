"""The gateway side: admitted requests go onto a Redis stream; replies come back on the gateway's own.

    Pipeline(Gateway(model="sim"), redis_sink(RedisSettings(url=..., max_backlog=1000)))

Demand (what the edge may admit) is the room under ``max_backlog``: the backlog is the group's
entries not yet acknowledged (``XINFO GROUPS``: ``lag`` + ``pending``; ``XLEN`` when the group or
its lag is unknown), re-read every ``refresh_interval_s``; in between the sink counts its own
admissions, so several gateways on one stream exceed the bound by at most what they admitted
within one interval. To keep the bound when a burst reaches several gateways at once, each one
admits, between two refreshes, at most its share of the room it saw: ``ceil(room / gateways)``,
where ``gateways`` counts the live gateways on the stream (each registers in the hash
``<stream>:gateways`` at every refresh). So the backlog exceeds ``max_backlog`` by at most
``gateways - 1``. No room: no demand, and the edge answers 429 ``queue_full``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import secrets
import socket
import time
from typing import TYPE_CHECKING, Any

import orjson
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from .._protocol import Subscriber, Subscription
from ..engines import CompletionRequest
from ..errors import EngineUnavailableError
from ..flowable import Flowable, Operator
from ..metrics import StageCounters, StageStatistics, track
from ..runtime import Service
from ..stage import DrainSubscription, InternalSubscriber
from ._codec import decode_reply, encode_request
from ._connection import Backoff, RedisSettings, call, make_client
from ._replies import ReplyRouter
from ._writer import TRANSIENT, Writer, leave_and_close

if TYPE_CHECKING:
    from ..runtime import Pipeline

__all__ = ["RedisSink", "redis_sink", "workers_key", "gateways_key", "ensure_group"]

log = logging.getLogger("rxpipe.redis")

#: a worker (gateway) whose heartbeat (refresh) is older than this (s) is not counted as alive
_WORKER_STALE_S = 5.0


def gateways_key(settings: RedisSettings) -> str:
    """The hash where gateways register (field: gateway id, value: Unix time of their last refresh)."""
    return f"{settings.stream}:gateways"


def workers_key(settings: RedisSettings) -> str:
    """The hash where workers publish their heartbeat and their engine's pause."""
    return f"{settings.stream}:workers"


async def ensure_group(client: Redis, settings: RedisSettings) -> None:
    """``XGROUP CREATE stream group 0 MKSTREAM``; an existing group (``BUSYGROUP``) is fine."""
    try:
        await call(client.xgroup_create, settings.stream, settings.group, id="0", mkstream=True)
    except ResponseError as error:
        if "BUSYGROUP" not in str(error):
            raise


def _group_backlog(groups: Any, group: str, length: int) -> int:
    for info in groups if isinstance(groups, list) else ():
        name = info.get("name")
        if (name.decode() if isinstance(name, bytes) else name) == group:
            lag = info.get("lag")
            if lag is None:  # not determinable (entries deleted in the range): count the stream
                return length
            return int(lag) + int(info.get("pending", 0))
    return length


class _Link(DrainSubscription, InternalSubscriber):
    """Subscriber of the edge (demand: 1 while there is room) and an empty subscription
    downstream (the sink emits nothing; it completes when the edge does)."""

    __slots__ = ("sink", "counters", "upstream", "outstanding", "upstream_done")

    def __init__(self, downstream: Subscriber[Any], sink: RedisSink) -> None:
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
    """What the edge reads of the workers behind Redis, as it reads an engine's: ``available``
    (False while Redis is unreachable: 503 ``unavailable``) and ``retry_after_s``."""

    def __init__(self, sink: RedisSink) -> None:
        self.sink = sink
        self.model = "redis"

    @property
    def available(self) -> bool:
        return self.sink.up

    @property
    def retry_after_s(self) -> float:
        """While Redis is down: the reconnect backoff's cap; while every live worker's engine is
        paused by its backend: the shortest remaining pause (the backlog cannot drain before)."""
        sink = self.sink
        if not sink.up:
            return sink.settings.backoff_cap_s
        return max(0.0, sink.paused_until - time.time())


class RedisSink(Flowable[Any], Service):
    """The gateway side of the Redis Streams transport (DESIGN §8); see the module docstring.

    As a Flowable it subscribes to the edge (a :class:`~rxpipe.gateway.Gateway`) and emits
    nothing. Each admitted :class:`~rxpipe.engines.CompletionRequest` is ``XADD``-ed (orjson, see
    ``rxpipe.redis._codec``) with this gateway's reply stream; its ``reply`` resolves with a
    Completion when a worker's engine admitted it; chunks and the result follow, de-duplicated by
    request id and chunk index (exactly once at the client).

    As a :class:`~rxpipe.runtime.Service` it owns two clients: a command pool of
    ``settings.pool_size`` connections and one connection for the blocking ``XREAD`` of replies.
    While Redis is unreachable ``engine.available`` is False (the edge answers 503
    ``unavailable``), an ``XADD`` that fails answers its client 503, and every loop retries with
    backoff; it recovers on its own when Redis is back.
    """

    kind = "redis_sink"

    def __init__(self, source: Flowable[CompletionRequest], settings: RedisSettings, *,
                 name: str | None = None) -> None:
        super().__init__(name=name, upstreams=(source,))
        self.settings = settings
        self.engine = _Availability(self)
        self.gateway_id = f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
        self.reply_key = f"{settings.stream}:replies:{self.gateway_id}"
        self.counters = StageCounters(self.name)
        #: Redis answered the last command (False until the first success)
        self.up = False
        #: the model of the edge in front (set in :meth:`attach`), and the workers' other models named
        self.served_model: str | None = None
        self._warned_models: set[str] = set()
        #: Redis was lost (or unreachable from the start) and is not back yet: logged once
        self._lost = False
        #: backlog read at the last refresh, and the admissions it may not have seen
        self.backlog = 0
        self.unseen_at_refresh = 0
        self.admitted = 0
        #: admissions allowed between the last refresh and the next (this gateway's share)
        self.allowance = 0
        #: live gateways on the stream at the last refresh (this one included)
        self.gateways = 1
        self._admitted_at_refresh = 0
        #: XADDs sent and not yet answered
        self.unconfirmed = 0
        #: Unix time until which every live worker's engine is paused (0: none is)
        self.paused_until = 0.0
        self.router: ReplyRouter | None = None
        self._link: _Link | None = None
        self._commands: Redis | None = None
        self._reader: Redis | None = None
        self._writer: Writer | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        self._last_reply_id = b"0-0"

    # -- demand ----------------------------------------------------------------------------------
    def backlog_estimate(self) -> int:
        """Entries not yet acknowledged, as far as this gateway knows: the last refresh plus what
        it admitted since (and what was unconfirmed when the refresh was sent)."""
        return self.backlog + self.unseen_at_refresh + (self.admitted - self._admitted_at_refresh)

    def room(self) -> int:
        """Admissions allowed now: this gateway's share of the room seen at the last refresh, less
        what it admitted since (0 while Redis is unreachable)."""
        if not self.up:
            return 0
        return self.allowance - (self.admitted - self._admitted_at_refresh)

    # -- Flowable --------------------------------------------------------------------------------
    def _subscribe(self, subscriber: Subscriber[Any]) -> None:
        link = self._link = _Link(subscriber, self)
        track(link)
        self.upstreams[0]._subscribe(link)

    def accept(self, request: CompletionRequest) -> None:
        """An admitted request: put it on the stream (or refuse it at once)."""
        self.counters.items_in += 1
        if not self.up:
            _fail_reply(request, EngineUnavailableError("the request queue (Redis) is unreachable"))
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
        now = asyncio.get_running_loop().time()
        writer.xadd(self.settings.stream, encode_request(request, self.reply_key, now),
                    functools.partial(self._added, request.id))

    def _added(self, request_id: str, result: Any) -> None:
        self.unconfirmed -= 1
        if isinstance(result, BaseException):
            assert self.router is not None
            self.router.fail(request_id, EngineUnavailableError("the request could not be queued (Redis)"))

    # -- reachability ----------------------------------------------------------------------------
    def _down(self, error: BaseException) -> None:
        if self.up or not self._lost:
            log.warning("redis sink %s: Redis %s (%r); answering 503 until it is back", self.name,
                        "lost" if self.up else "unreachable", error)
        self.up = False
        self._lost = True

    def _up(self) -> None:
        if not self.up:
            log.info("redis sink %s: Redis is %s", self.name, "back" if self._lost else "reachable")
            self.up = True
            self._lost = False
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
        self._stopping = False
        self._commands = make_client(s, connections=s.pool_size)
        self._reader = make_client(s, connections=1, blocking=True)
        backoff = Backoff(s.backoff_base_s, s.backoff_cap_s)
        self._writer = Writer(self._commands, backoff, retry=False, on_down=self._down)
        self._writer.start()
        self.router = ReplyRouter(asyncio.get_running_loop())
        try:
            await self._refresh()
        except TRANSIENT as error:
            self._down(error)
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._refresh_loop(), name=f"rxpipe-redis-refresh-{self.name}"),
                       loop.create_task(self._read_replies(), name=f"rxpipe-redis-replies-{self.name}")]
        return None

    async def stop(self) -> None:
        self._stopping = True
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)  # each ends within one BLOCK
            self._tasks = []
        if self._writer is not None:
            await self._writer.close(self.settings.command_timeout_s)
        if self.router is not None:
            self.router.fail_all(EngineUnavailableError("the gateway stopped"))
        await leave_and_close(self._commands, self._reader, gateways_key(self.settings), self.gateway_id)
        self._reader = self._commands = None

    # -- loops -----------------------------------------------------------------------------------
    async def _refresh(self) -> None:
        """One backlog refresh (also keeps the reply stream alive, trimmed, and the group there)."""
        s = self.settings
        client = self._commands
        assert client is not None
        unseen = self.unconfirmed
        mark = self.admitted
        pipe = client.pipeline(transaction=False)
        pipe.xinfo_groups(s.stream)
        pipe.xlen(s.stream)
        pipe.hgetall(workers_key(s))
        pipe.hset(gateways_key(s), self.gateway_id, repr(time.time()))
        pipe.hgetall(gateways_key(s))
        pipe.expire(self.reply_key, int(s.reply_ttl_s))
        pipe.xtrim(self.reply_key, minid=self._last_reply_id, approximate=True)
        groups, length, workers, _, gateways, alive, _ = await call(pipe.execute, raise_on_error=False)
        for result in (length, workers, gateways):
            if isinstance(result, BaseException):
                raise result
        if isinstance(groups, ResponseError) or not alive:
            # a new (or wiped) Redis: make the group and this gateway's reply stream again. Without
            # the reply stream no answer can reach the requests still waiting: they get 503 now.
            if not alive and self.router is not None and len(self.router):
                log.warning("redis sink %s: the reply stream is gone (Redis lost its data?); %d waiting "
                            "requests are answered 503", self.name, len(self.router))
                self.router.fail_all(EngineUnavailableError("the request queue (Redis) lost the request"))
            await ensure_group(client, s)
            await call(client.xadd, self.reply_key, {b"hello": self.gateway_id.encode()},
                       maxlen=1000, approximate=True)
            await call(client.expire, self.reply_key, int(s.reply_ttl_s))
            groups = []
        now = time.time()
        self.backlog = _group_backlog(groups, s.group, int(length))
        self.unseen_at_refresh = unseen
        self._admitted_at_refresh = mark
        self.gateways = max(1, sum(1 for at in gateways.values() if now - float(at) <= _WORKER_STALE_S))
        room = max(0, s.max_backlog - self.backlog - unseen)
        self.allowance = -(-room // self.gateways)
        self.paused_until = _pause_floor(workers, now)
        self._check_models(workers, now)
        self._up()

    def _check_models(self, workers: Any, now: float) -> None:
        """Warn once per model when a live worker's engine serves a model other than the one the
        gateway admits (its clients, asking for the worker's model, get 404 at the edge)."""
        served = self.served_model
        if served is None:
            return
        for consumer, model in _worker_models(workers, now).items():
            if model != served and model not in self._warned_models:
                self._warned_models.add(model)
                log.warning("redis sink %s: worker %s serves model %r but this gateway serves %r: requests for "
                            "%r get 404 here; start the gateway with --set model=%s", self.name, consumer, model,
                            served, model, model)

    async def _refresh_loop(self) -> None:
        s = self.settings
        backoff = Backoff(s.backoff_base_s, s.backoff_cap_s)
        while not self._stopping:
            delay = s.refresh_interval_s
            try:
                await self._refresh()
                backoff.reset()
            except TRANSIENT as error:
                self._down(error)
                delay = max(delay, backoff.next_delay())
            except Exception:
                log.exception("redis sink %s: backlog refresh failed", self.name)
                delay = max(delay, backoff.next_delay())
            await asyncio.sleep(delay)

    async def _read_replies(self) -> None:
        """``XREAD BLOCK`` on this gateway's reply stream, on its own connection, until stopped."""
        s = self.settings
        reader = self._reader
        router = self.router
        assert reader is not None and router is not None
        backoff = Backoff(s.backoff_base_s, s.backoff_cap_s)
        while not self._stopping:
            try:
                response: Any = await call(reader.xread, {self.reply_key: self._last_reply_id}, count=512,
                                           block=s.block)
            except TRANSIENT as error:
                self._down(error)
                await asyncio.sleep(backoff.next_delay())
                continue
            except Exception:
                log.exception("redis sink %s: reading replies failed", self.name)
                await asyncio.sleep(backoff.next_delay())
                continue
            backoff.reset()
            for _key, entries in response or ():
                for entry_id, fields in entries:
                    self._last_reply_id = entry_id
                    try:
                        message = decode_reply(fields)
                        if message is not None:
                            router.dispatch(message)
                    except Exception:
                        log.exception("redis sink %s: bad reply message %r", self.name, entry_id)


def _fail_reply(request: CompletionRequest, error: BaseException) -> None:
    reply = request.reply
    if reply is not None and not reply.done():
        reply.set_exception(error)


def _worker_models(workers: Any, now: float) -> dict[str, str]:
    """consumer → model its engine serves, for the live workers that publish one."""
    models = {}
    for consumer, raw in (workers or {}).items():
        try:
            beat = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        model = beat.get("model") if isinstance(beat, dict) else None
        if isinstance(model, str) and now - float(beat.get("at", 0)) <= _WORKER_STALE_S:
            models[consumer.decode() if isinstance(consumer, bytes) else str(consumer)] = model
    return models


def _pause_floor(workers: Any, now: float) -> float:
    """The earliest end of a pause among live workers if all of them are paused, else 0."""
    pauses = []
    for raw in (workers or {}).values():
        try:
            beat = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        if now - float(beat.get("at", 0)) > _WORKER_STALE_S:
            continue
        until = float(beat.get("pause_until", 0))
        if until <= now:
            return 0.0  # a live worker takes work now
        pauses.append(until)
    return min(pauses, default=0.0)


def redis_sink(settings: RedisSettings, *, name: str | None = None) -> Operator:
    """The gateway side of the Redis transport as an operator: ``Pipeline(Gateway(...),
    redis_sink(settings))``. See :class:`RedisSink`."""
    if not isinstance(settings, RedisSettings):
        raise TypeError(f"redis_sink() needs RedisSettings, got {settings!r}")
    return lambda source: RedisSink(source, settings, name=name)
