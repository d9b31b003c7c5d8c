"""Redis Streams as a broker adapter of :mod:`rxpipe.transport` (DESIGN §8).

- requests: the stream ``settings.stream`` (one field ``r``), consumer group ``settings.group``;
  a worker's read is, at start, its own pending entries (``XREADGROUP ... 0``: a worker restarted
  under its old name takes up what it held at once), then ``XAUTOCLAIM`` (entries idle past
  ``visibility_timeout_s``, with their delivery count from ``XPENDING``) before ``XREADGROUP ...
  COUNT n BLOCK ms``; ack is ``XACK``;
  a request withdrawn by its gateway is ``XDEL``-ed; a held entry is kept fresh with ``XCLAIM ...
  JUSTID`` (idle time back to 0); acknowledged entries are trimmed (``XTRIM MINID``).
- replies: one stream per gateway (field ``m``), written ``XADD ... NOMKSTREAM`` (a gateway whose
  stream expired is gone), read with ``XREAD BLOCK``.
- control: the stream ``<stream>:control`` (field ``c``, capped at about
  :data:`~rxpipe.transport._interface.CONTROL_MAX_MESSAGES` entries), read
  by every worker with ``XREAD BLOCK`` from its end at start.
- liveness: the hashes ``<stream>:workers`` (a worker's beat: its engine's pause and model) and
  ``<stream>:gateways``, written by a Lua script that stamps them with Redis ``TIME`` (never a
  host's clock); the entry ids of the request and
  control streams are Redis times too.

Every blocking reader has its own connection; see ``_connection`` for redis-py's traps.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..transport._interface import (
    CONTROL_MAX_MESSAGES,
    Delivery,
    GatewayBroker,
    Snapshot,
    WorkerBeat,
    WorkerBroker,
    WriteOp,
)
from ._connection import RedisSettings, call, make_client, settle
from ._features import Features, detect_features
from ._trim import trim_acknowledged

__all__ = ["RedisGatewayBroker", "RedisWorkerBroker", "ensure_group", "workers_key", "gateways_key",
           "control_key", "BACKLOG", "backlog_reply", "TRANSIENT"]

log = logging.getLogger("rxpipe.redis")

#: errors that mean "Redis is unreachable now" (retryable), as opposed to a refused command
TRANSIENT: tuple[type[BaseException], ...] = (RedisConnectionError, RedisTimeoutError, OSError)

# HSET KEYS[1] ARGV[1] <Redis TIME>, returns TIME: a registration on the broker's clock
_REGISTER = """
local t = redis.call('TIME')
redis.call('HSET', KEYS[1], ARGV[1], t[1] .. '.' .. string.format('%06d', t[2]))
return t
"""
# HSET KEYS[1] ARGV[1] {"at": TIME, "pause_until": TIME + ARGV[2] (0: no pause), "model": ARGV[3]
# ("": none)}, returns TIME
_BEAT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local pause = tonumber(ARGV[2])
local untl = 0
if pause > 0 then untl = now + pause end
redis.call('HSET', KEYS[1], ARGV[1],
           string.format('{"at":%.6f,"pause_until":%.6f,"model":%s}', now, untl, cjson.encode(ARGV[3])))
return t
"""
#: Requests queued and not yet acknowledged by the group ARGV[1] on the stream KEYS[1]: the
#: group's pending entries plus the entries after its last-delivered-id, counted up to ARGV[2]
#: (more than that is "full" anyway); -1 when the stream or the group is missing. Not the
#: group's ``lag``: Redis 7.0 keeps counting entries deleted (``XDEL``, a withdrawn request)
#: before the group read past them, for good, so every client that left while queued took a
#: slot of ``max_backlog`` forever. The count costs O(what is queued), bounded by ARGV[2].
BACKLOG = """
local ok, groups = pcall(redis.call, 'XINFO', 'GROUPS', KEYS[1])
if not ok then return -1 end
for _, g in ipairs(groups) do
  local info = {}
  for i = 1, #g, 2 do info[g[i]] = g[i + 1] end
  if info['name'] == ARGV[1] then
    local queued = redis.call('XRANGE', KEYS[1], '(' .. info['last-delivered-id'], '+', 'COUNT', ARGV[2])
    return tonumber(info['pending']) + #queued
  end
end
return -1
"""


def gateways_key(settings: RedisSettings) -> str:
    """The hash where gateways register (field: gateway id, value: Redis time of their last refresh)."""
    return f"{settings.stream}:gateways"


def workers_key(settings: RedisSettings) -> str:
    """The hash where workers publish their heartbeat and their engine's pause (Redis time)."""
    return f"{settings.stream}:workers"


def control_key(settings: RedisSettings) -> str:
    """The stream of cancels and credit from the gateways to every worker."""
    return f"{settings.stream}:control"


async def ensure_group(client: Redis, settings: RedisSettings) -> None:
    """``XGROUP CREATE stream group 0 MKSTREAM``; an existing group (``BUSYGROUP``) is fine."""
    try:
        await call(client.xgroup_create, settings.stream, settings.group, id="0", mkstream=True)
    except ResponseError as error:
        if "BUSYGROUP" not in str(error):
            raise


def backlog_reply(reply: Any) -> int | None:
    """The backlog :data:`BACKLOG` answered (None: the stream or the group is missing)."""
    count = int(reply)
    return None if count < 0 else count


def _time(reply: Any) -> float:
    seconds, micros = reply
    return int(seconds) + int(micros) / 1e6


def _id_time(entry_id: bytes | str) -> float:
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    return int(text.partition("-")[0]) / 1000


def _beats(raw: Any) -> dict[str, WorkerBeat]:
    beats = {}
    for name, value in (raw or {}).items():
        try:
            beat = orjson.loads(value)
            model = beat.get("model")
            beats[name.decode() if isinstance(name, bytes) else str(name)] = WorkerBeat(
                float(beat.get("at", 0)), float(beat.get("pause_until", 0)),
                model if isinstance(model, str) and model else None)
        except (orjson.JSONDecodeError, TypeError, ValueError, AttributeError):
            continue
    return beats


class _RedisBroker:
    transient = TRANSIENT
    name = "Redis"

    def __init__(self, settings: RedisSettings) -> None:
        self.settings = settings
        self.commands: Redis | None = None
        self.reader: Redis | None = None

    async def open(self) -> None:
        s = self.settings
        if self.commands is None:
            self.commands = make_client(s, connections=s.pool_size)
            self.reader = make_client(s, connections=1, blocking=True)

    async def _close(self, *clients: Redis | None) -> None:
        await settle()
        for client in clients:
            if client is not None:
                await client.aclose()

    async def _leave(self, key: str, member: str) -> None:
        if self.commands is not None:
            await call(self.commands.hdel, key, member)

    async def _pipeline(self, ops: list[WriteOp]) -> list[Any]:
        assert self.commands is not None
        pipe = self.commands.pipeline(transaction=False)
        sent = [op for op in ops if op.kind != "release"]  # Redis: a released entry just waits to be claimed
        for op in sent:
            self._queue(pipe, op)
        results = iter(await self._run(pipe) if sent else ())
        return [None if op.kind == "release" else next(results) for op in ops]

    async def _run(self, pipe: Any) -> list[Any]:
        """Execute ``pipe`` (see :meth:`_drop_idle` for what an unreachable Redis does)."""
        try:
            return list(await call(pipe.execute, raise_on_error=False))
        except TRANSIENT:
            await self._drop_idle()
            raise

    def _clients(self) -> list[Redis | None]:
        return [self.commands, self.reader]

    async def _drop_idle(self) -> None:
        """Redis did not answer: drop the idle connections of every client of this side (the
        command pool and each blocking reader's own). After a restart each would fail once on
        its first use, long after the restart (one 503 each at the gateway, one more "Redis lost"
        at a worker whose engine was full while Redis was down), instead of reconnecting then."""
        for client in self._clients():
            if client is not None:
                await client.connection_pool.disconnect(inuse_connections=False)

    def _queue(self, pipe: Any, op: WriteOp) -> None:
        raise NotImplementedError


class RedisGatewayBroker(_RedisBroker, GatewayBroker):
    """The gateway side on Redis (see the module docstring)."""

    def __init__(self, settings: RedisSettings) -> None:
        super().__init__(settings)
        self.reply_to = ""
        self._last_reply_id = b"0-0"

    async def close(self) -> None:
        await self._close(self.reader, self.commands)
        self.reader = self.commands = None

    async def leave(self, gateway_id: str) -> None:
        await self._leave(gateways_key(self.settings), gateway_id)

    async def write(self, ops: list[WriteOp]) -> list[Any]:
        return await self._pipeline(ops)

    def _queue(self, pipe: Any, op: WriteOp) -> None:
        s = self.settings
        if op.kind == "publish":
            pipe.xadd(s.stream, {b"r": op.args[0]})
        elif op.kind == "withdraw":
            pipe.xdel(s.stream, op.args[0])
        elif op.kind == "control":
            pipe.xadd(control_key(s), {b"c": op.args[0]}, maxlen=CONTROL_MAX_MESSAGES, approximate=True)
        else:
            raise ValueError(f"unknown write {op.kind!r}")

    async def snapshot(self, gateway_id: str) -> Snapshot:
        s = self.settings
        client = self.commands
        assert client is not None
        pipe = client.pipeline(transaction=False)
        pipe.eval(_REGISTER, 1, gateways_key(s), gateway_id)
        pipe.eval(BACKLOG, 1, s.stream, s.group, s.max_backlog + 1)
        pipe.hgetall(workers_key(s))
        pipe.hgetall(gateways_key(s))
        pipe.expire(self.reply_to, int(s.reply_ttl_s))
        pipe.xtrim(self.reply_to, minid=self._last_reply_id, approximate=True)
        now, backlog, workers, gateways, alive, _ = await self._run(pipe)
        for result in (now, backlog, workers, gateways):
            if isinstance(result, BaseException):
                raise result
        reset = False
        queued = backlog_reply(backlog)
        if queued is None or not alive:
            # a new (or wiped) Redis: make the group and this gateway's reply stream again
            reset = not alive
            await ensure_group(client, s)
            await call(client.xadd, self.reply_to, {b"hello": b"gateway"}, maxlen=1000, approximate=True)
            await call(client.expire, self.reply_to, int(s.reply_ttl_s))
        return Snapshot(queued or 0, _time(now),
                        {(k.decode() if isinstance(k, bytes) else str(k)): float(v) for k, v in gateways.items()},
                        _beats(workers), reset)

    async def read_replies(self, block_s: float) -> list[bytes]:
        reader = self.reader
        assert reader is not None
        try:
            response: Any = await call(reader.xread, {self.reply_to: self._last_reply_id}, count=512,
                                       block=self.settings.block)
        except TRANSIENT:
            await self._drop_idle()
            raise
        out = []
        for _key, entries in response or ():
            for entry_id, fields in entries:
                self._last_reply_id = entry_id
                raw = fields.get(b"m")
                if raw is not None:
                    out.append(raw)
        return out


class RedisWorkerBroker(_RedisBroker, WorkerBroker):
    """The worker side on Redis (see the module docstring). ``recovered`` counts the entries of its
    own pending entries list read first at start (a worker restarted under its old name gets
    them at once, not after ``visibility_timeout_s``); ``claimed`` counts entries taken over from
    other consumers (``XAUTOCLAIM``); ``features`` what the server offers."""

    def __init__(self, settings: RedisSettings) -> None:
        super().__init__(settings)
        self.housekeeping_s = settings.trim_interval_s
        self.control_reader: Redis | None = None
        self.features: Features | None = None
        self.claimed = 0
        #: entries of its own pending list read at start (a restart under the same name)
        self.recovered = 0
        #: where the reading of its own pending entries list is (None: read through)
        self._own_cursor: bytes | None = b"0-0"
        self._claim_cursor = b"0-0"
        self._next_claim = 0.0
        self._control_id: bytes | None = None

    async def open(self) -> None:
        await super().open()
        s = self.settings
        if self.control_reader is None:
            self.control_reader = make_client(s, connections=1, blocking=True)
        assert self.commands is not None
        await ensure_group(self.commands, s)
        await self._control_start()
        if self.features is None:
            self.features = await detect_features(self.commands, f"{s.stream}:probe")
            log.info("worker %s: Redis features %s", s.consumer, self.features)

    async def _control_start(self) -> None:
        if self._control_id is None:
            assert self.commands is not None
            last: Any = await call(self.commands.xrevrange, control_key(self.settings), count=1)
            self._control_id = bytes(last[0][0]) if last else b"0-0"

    async def close(self) -> None:
        await self._close(self.reader, self.control_reader, self.commands)
        self.reader = self.control_reader = self.commands = None

    def _clients(self) -> list[Redis | None]:
        return [self.commands, self.reader, self.control_reader]

    async def leave(self, consumer: str) -> None:
        await self._leave(workers_key(self.settings), consumer)

    async def write(self, ops: list[WriteOp]) -> list[Any]:
        return await self._pipeline(ops)

    def _queue(self, pipe: Any, op: WriteOp) -> None:
        s = self.settings
        if op.kind == "reply":
            # NOMKSTREAM: a gateway whose reply stream expired is gone; its replies are dropped
            pipe.xadd(op.args[0], {b"m": op.args[1]}, nomkstream=True)
        elif op.kind == "ack":
            pipe.xack(s.stream, s.group, op.args[0].key)
        else:
            raise ValueError(f"unknown write {op.kind!r}")

    async def fetch(self, n: int, block_s: float) -> list[Delivery]:
        """This consumer's own pending entries first (a worker restarted under its old name, or
        whose last read failed: ``XREADGROUP ... <id>`` reads its pending entries list from the
        start, until it is read through; what it holds already is skipped by the source), then
        claimed entries (at most once per ``BLOCK`` interval), else new ones."""
        s = self.settings
        if self.commands is None:
            await self.open()
        commands = self.commands
        assert commands is not None
        loop = asyncio.get_running_loop()
        try:
            if self._own_cursor is not None:
                own = await self._own_pending(n)
                if own:
                    return own
            if loop.time() >= self._next_claim:
                cursor, entries, *_ = await call(commands.xautoclaim, s.stream, s.group, s.consumer,
                                                 s.visibility_ms, start_id=self._claim_cursor, count=n)
                self._claim_cursor = cursor
                if cursor == b"0-0" or not entries:
                    self._next_claim = loop.time() + s.block / 1000
                if entries:
                    self.claimed += len(entries)
                    log.info("worker %s: claimed %d entries idle over %.1f s", s.consumer, len(entries),
                             s.visibility_timeout_s)
                    return await self._claimed(list(entries))
            assert self.reader is not None
            response: Any = await call(self.reader.xreadgroup, s.group, s.consumer, {s.stream: ">"}, count=n,
                                       block=s.block)
        except ResponseError as error:
            if "NOGROUP" in str(error):  # a new (or wiped) Redis
                await ensure_group(commands, s)
                return []
            raise
        except TRANSIENT:
            # A read that failed may have been served all the same: Redis put what it delivered in
            # this consumer's pending entries list, and the reply was lost with the connection (a
            # process paused past the socket timeout, SIGSTOP, say). Its own deliveries come first
            # at the next read, not after a claim once visibility_timeout_s passed.
            self._own_cursor = b"0-0"
            await self._drop_idle()
            raise
        found = []
        for _key, entries in response or ():
            for entry_id, fields in entries:
                found.append(Delivery(entry_id, None if fields is None else fields.get(b"r", b""), 1,
                                      _id_time(entry_id)))
        return found

    async def _own_pending(self, n: int) -> list[Delivery]:
        """Up to ``n`` entries of this consumer's pending entries list after ``_own_cursor``
        (what an earlier process of the same name read and never acknowledged), with their
        delivery counts; [] once it is read through (then the cursor is done for good)."""
        s = self.settings
        assert self.commands is not None
        response: Any = await call(self.commands.xreadgroup, s.group, s.consumer, {s.stream: self._own_cursor},
                                   count=n)
        entries = [entry for _key, found in (response or ()) for entry in found]
        if not entries:
            self._own_cursor = None
            return []
        self._own_cursor = entries[-1][0]
        self.recovered += len(entries)
        log.info("worker %s: %d entries of its own pending entries list (from before its start, or delivered to a "
                 "read that failed) read first", s.consumer, len(entries))
        return await self._claimed(entries)

    async def _claimed(self, entries: list[tuple[bytes, Any]]) -> list[Delivery]:
        """Claimed entries with their delivery count (``XPENDING``, which ``XAUTOCLAIM`` increments)."""
        s = self.settings
        assert self.commands is not None
        ids = [entry_id for entry_id, _ in entries]
        detail: Any = await call(self.commands.xpending_range, s.stream, s.group, min(ids), max(ids), len(ids) + 64,
                                 consumername=s.consumer)
        counts = {d["message_id"]: int(d["times_delivered"]) for d in detail}
        return [Delivery(entry_id, None if fields is None else fields.get(b"r", b""), counts.get(entry_id, 1),
                         _id_time(entry_id)) for entry_id, fields in entries]

    async def read_control(self, block_s: float) -> list[tuple[bytes, float]]:
        reader = self.control_reader
        if reader is None or self._control_id is None:
            await self.open()
            reader = self.control_reader
        assert reader is not None and self._control_id is not None
        key = control_key(self.settings)
        try:
            response: Any = await call(reader.xread, {key: self._control_id}, count=1024, block=self.settings.block)
        except TRANSIENT:
            await self._drop_idle()
            raise
        out = []
        for _key, entries in response or ():
            for entry_id, fields in entries:
                self._control_id = entry_id
                raw = fields.get(b"c")
                if raw is not None:
                    out.append((raw, _id_time(entry_id)))
        return out

    async def heartbeat(self, consumer: str, pause_s: float, held: list[Delivery], model: str | None = None) -> float:
        s = self.settings
        if self.commands is None:
            await self.open()
        assert self.commands is not None
        pipe = self.commands.pipeline(transaction=False)
        pipe.eval(_BEAT, 1, workers_key(s), consumer, repr(float(pause_s)), model or "")
        if held:
            # idle time back to 0: a live worker's slow requests are not claimed by others
            pipe.xclaim(s.stream, s.group, consumer, 0, [d.key for d in held], justid=True)
        results = await self._run(pipe)
        if isinstance(results[0], BaseException):
            raise results[0]
        if len(results) > 1 and isinstance(results[1], ResponseError) and "NOGROUP" in str(results[1]):
            await ensure_group(self.commands, s)
        return _time(results[0])

    async def housekeeping(self) -> None:
        if self.commands is not None:
            await trim_acknowledged(self.commands, self.settings)
