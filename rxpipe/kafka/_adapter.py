"""Kafka as a broker adapter of :mod:`rxpipe.transport` (DESIGN §8 "Kafka"), with aiokafka.

Topics, named after ``settings.stream`` (``rxpipe.requests`` → ``P``), created by the first
gateway or worker that opens (Kafka's ``CreateTopics``; an existing one is used as it is):

- ``P`` (``partitions`` partitions): requests, spread round-robin over the partitions by each
  gateway. The workers are the consumer group ``settings.group``: each partition belongs to one
  worker at a time, so at most ``partitions`` workers get work. A worker's read is
  ``getmany(max_records=n)`` for exactly the requests its engine has room for; its partitions
  are paused while it wants none, and polled all the same, so the group never takes them away
  from a worker whose engine is busy with a long generation (see ``_worker``).
- ``P.control`` (1 partition, ``retention.ms`` = ``cancel_memory_s``): cancels and credit, read by
  every worker from its present end (no group: each worker reads all of them).
- ``P.heads`` (as many partitions as ``P``): the delivery count of each request partition's first
  uncommitted request, written by the worker that reads it (see ``_offsets``).
- ``P.live`` (1 partition): liveness; a record keyed ``w:<worker>`` (its engine's pause and model)
  or ``g:<gateway>``, ``{"left": true}`` when it stops.
- ``P.replies.<gateway>`` (1 partition, ``retention.ms`` = ``reply_ttl_s``): one per gateway,
  created when it opens and deleted when it leaves; replies next to each other for one gateway
  travel as one record (joined by newlines, which orjson never writes inside one).

The backlog a gateway bounds (``max_backlog``) is *produced − committed*: the request topic's end
offsets less the group's committed offsets (``committed()`` of a consumer in the workers' group
that joins nothing). Kafka deletes no record: a request whose client left before a worker read
it stays on the topic; the worker that reads it skips it (the cancel reached it first) and
commits past it.

Clocks: Kafka has no clock command; its only broker clock is the record timestamp of a topic
with ``message.timestamp.type=LogAppendTime``, which the test broker (Tansu 0.6) stores and
ignores (its records come back with the producer's CreateTime, measured). So nothing here
compares two hosts' clocks: liveness and pauses are *receipt* times on the reading gateway's own
clock (the time it read a worker's beat, as Kafka's group coordinator times its members'
heartbeats), a request's deadline counts from the worker's read of it (``stored_s`` is None), and
only the cancel-latency histogram uses a control record's timestamp (CreateTime: the gateway's
wall clock; exact on one host, off by the hosts' clock offset across hosts).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from typing import Any, Callable

import aiokafka.errors as errors
import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from ..transport._interface import GatewayBroker, Snapshot, WorkerBeat, WriteOp
from ._settings import KafkaSettings, topics

__all__ = ["KafkaGatewayBroker", "TRANSIENT", "KafkaBroker"]

log = logging.getLogger("rxpipe.kafka")

#: errors that mean "Kafka is unreachable now" (retryable)
TRANSIENT: tuple[type[BaseException], ...] = (
    errors.KafkaConnectionError, errors.KafkaTimeoutError, errors.NodeNotReadyError, errors.RequestTimedOutError,
    errors.NoBrokersAvailable, errors.LeaderNotAvailableError, errors.NotLeaderForPartitionError,
    errors.GroupCoordinatorNotAvailableError, errors.NotCoordinatorForGroupError, errors.KafkaUnavailableError,
    errors.UnknownTopicOrPartitionError, asyncio.TimeoutError, OSError)

#: a member not heard of this long is forgotten (s)
_FORGET_S = 60.0
#: a partition's head delivery count is kept this long (s; a crash loop writes it again each round)
_HEADS_S = 24 * 3600.0


class KafkaBroker:
    """What both sides share: the topics, the producer, the admin client, this process's clock."""

    transient = TRANSIENT
    name = "Kafka"
    # the interface's callbacks (defaults on rxpipe.transport._interface._Broker)
    on_lost: Callable[[BaseException], None] | None
    on_back: Callable[[], None] | None

    def __init__(self, settings: KafkaSettings) -> None:
        self.settings = settings
        self.topics = topics(settings)
        self.producer: AIOKafkaProducer | None = None
        self.admin: AIOKafkaAdminClient | None = None
        #: the request topic's partitions (as the broker has them)
        self.partitions: list[TopicPartition] = []
        self._ready = False
        # this process's clock, in seconds since the epoch, never stepped (see the module docstring)
        self._epoch = time.time() - time.monotonic()

    def now(self) -> float:
        """This process's clock: the wall clock at start, then monotonic (s since the epoch)."""
        return self._epoch + time.monotonic()

    def _client_options(self) -> dict[str, Any]:
        s = self.settings
        return {"bootstrap_servers": s.bootstrap_servers, "request_timeout_ms": int(s.command_timeout_s * 1000),
                "retry_backoff_ms": max(1, int(s.backoff_base_s * 1000)),
                "connections_max_idle_ms": 540000}

    async def _answer(self, waiting: Any, timeout_s: float | None = None) -> Any:
        """``waiting`` within ``command_timeout_s`` (``asyncio.TimeoutError`` otherwise: aiokafka
        retries a request to a broker that is gone until its own, longer, timeout)."""
        return await asyncio.wait_for(waiting, timeout_s or self.settings.command_timeout_s)

    async def _start_common(self, extra_topics: tuple[str, ...] = ()) -> None:
        """Admin client, topics, producer (raises a transient error while Kafka is unreachable;
        what was started is stopped again)."""
        try:
            if self.admin is None:
                admin = AIOKafkaAdminClient(**self._client_options())
                await self._answer(admin.start(), self.settings.connect_timeout_s + self.settings.command_timeout_s)
                self.admin = admin
            await self._ensure_topics(extra_topics)
            if self.producer is None:
                producer = AIOKafkaProducer(**self._client_options(), acks="all", linger_ms=0)
                await self._answer(producer.start(), self.settings.connect_timeout_s + self.settings.command_timeout_s)
                self.producer = producer
        except BaseException:
            await self._stop_common()
            raise

    async def _ensure_topics(self, extra: tuple[str, ...]) -> None:
        """Create the topics that are missing; learn the request topic's partitions (warn once
        when there are fewer than ``partitions``: at most that many workers get work)."""
        s, t, admin = self.settings, self.topics, self.admin
        assert admin is not None
        wanted = [NewTopic(t.requests, s.partitions, 1),
                  NewTopic(t.control, 1, 1, topic_configs={"retention.ms": str(int(s.cancel_memory_s * 1000))}),
                  NewTopic(t.live, 1, 1,
                           topic_configs={"retention.ms": str(int(max(_FORGET_S, s.reply_ttl_s) * 1000))})]
        wanted += [NewTopic(t.heads, s.partitions, 1, topic_configs={"retention.ms": str(int(_HEADS_S * 1000))})]
        wanted += [NewTopic(name, 1, 1, topic_configs={"retention.ms": str(int(s.reply_ttl_s * 1000))})
                   for name in extra]
        existing = set(await self._answer(admin.list_topics()))
        missing = [topic for topic in wanted if topic.name not in existing]
        if missing:
            response = await self._answer(admin.create_topics(missing))
            for name, code, message in ((e[0], e[1], e[2]) for e in response.topic_errors):
                if code not in (0, errors.TopicAlreadyExistsError.errno):  # created meanwhile by another process
                    raise errors.for_code(code)(f"creating topic {name}: {message}")
        described = await self._answer(admin.describe_topics([t.requests]))
        count = len(described[0]["partitions"]) if described and not described[0]["error_code"] else s.partitions
        if count < s.partitions and not self.partitions:
            log.warning("kafka: topic %s has %d partitions (partitions=%d asked for): at most %d workers get work",
                        t.requests, count, s.partitions, count)
        self.partitions = [TopicPartition(t.requests, p) for p in range(count)]

    async def _stop_common(self) -> None:
        producer, self.producer = self.producer, None
        if producer is not None:
            await _quietly(producer.stop())
        admin, self.admin = self.admin, None
        if admin is not None:
            await _quietly(admin.close())
        self._ready = False

    async def _send_live(self, key: str, value: dict[str, Any]) -> None:
        """One liveness record (stored before this returns)."""
        assert self.producer is not None
        future = await self._answer(self.producer.send(self.topics.live, orjson.dumps(value), key=key.encode(),
                                                       partition=0))
        await self._answer(future)


async def _quietly(stopping: Any) -> None:
    try:
        await asyncio.wait_for(stopping, 5.0)
    except Exception as error:  # closing anyway
        log.debug("kafka: stopping a client: %r", error)


class KafkaGatewayBroker(KafkaBroker, GatewayBroker):
    """The gateway side on Kafka (see the module docstring)."""

    def __init__(self, settings: KafkaSettings) -> None:
        super().__init__(settings)
        self.reply_to = ""
        self._replies: AIOKafkaConsumer | None = None
        #: a consumer in the workers' group that joins nothing: committed offsets, the live topic
        self._meta: AIOKafkaConsumer | None = None
        self._round_robin = itertools.count()
        self._registered_at = -1.0
        #: receipt time of each gateway's and worker's last liveness record (this process's clock)
        self._gateways: dict[str, float] = {}
        self._workers: dict[str, WorkerBeat] = {}

    async def open(self) -> None:
        if self._ready:
            return
        s, t = self.settings, self.topics
        await self._start_common((self.reply_to,))
        try:
            if self._replies is None:
                replies = AIOKafkaConsumer(**self._client_options(), enable_auto_commit=False,
                                           auto_offset_reset="earliest", fetch_max_wait_ms=s.fetch_max_wait_ms)
                await self._answer(replies.start())
                replies.assign([TopicPartition(self.reply_to, 0)])
                self._replies = replies
            if self._meta is None:
                meta = AIOKafkaConsumer(**self._client_options(), group_id=s.group, enable_auto_commit=False,
                                        auto_offset_reset="latest", fetch_max_wait_ms=max(s.fetch_max_wait_ms, 100))
                await self._answer(meta.start())
                live = TopicPartition(t.live, 0)
                meta.assign([live])
                await self._answer(meta.seek_to_end(live))  # members alive now beat again within a second
                self._meta = meta
        except BaseException:
            await self.close()
            raise
        self._ready = True

    async def write(self, ops: list[WriteOp]) -> list[Any]:
        if not self._ready:
            await self.open()
        producer, t = self.producer, self.topics
        assert producer is not None
        results: list[Any] = [None] * len(ops)
        pending: list[tuple[int, Any]] = []
        count = len(self.partitions)
        for i, op in enumerate(ops):
            if op.kind == "publish":
                partition = next(self._round_robin) % count
                pending.append((i, await self._answer(producer.send(t.requests, op.args[0], partition=partition))))
            elif op.kind == "control":
                pending.append((i, await self._answer(producer.send(t.control, op.args[0], partition=0))))
            elif op.kind == "withdraw":
                # Kafka deletes no record: the worker reading it skips it (the cancel reached it first)
                results[i] = op.args[0]
            else:
                raise ValueError(f"unknown write {op.kind!r}")
        stored = await self._answer(asyncio.gather(*(f for _, f in pending), return_exceptions=True))
        if stored and all(isinstance(r, TRANSIENT) for r in stored):
            raise stored[0]
        for (i, _), metadata in zip(pending, stored, strict=True):
            results[i] = metadata if isinstance(metadata, BaseException) else (metadata.partition, metadata.offset)
        return results

    async def snapshot(self, gateway_id: str) -> Snapshot:
        if not self._ready:
            await self.open()
        try:
            return await self._answer(self._snapshot(gateway_id))
        except errors.UnknownTopicOrPartitionError:
            # the topics are gone (a wiped or new broker): made again at the next refresh, and the
            # requests waiting for replies on the old reply topic never get one
            await self.close()
            await self.open()
            snapshot = await self._answer(self._snapshot(gateway_id))
            snapshot.reset = True
            return snapshot

    async def _snapshot(self, gateway_id: str) -> Snapshot:
        meta = self._meta
        assert meta is not None
        now = self.now()
        if now - self._registered_at >= min(1.0, self.settings.refresh_interval_s * 4):
            await self._send_live(f"g:{gateway_id}", {})
            self._registered_at = now
        self._read_live(await meta.getmany(TopicPartition(self.topics.live, 0), timeout_ms=0))
        tps = self.partitions
        ends = await meta.end_offsets(tps)
        committed = await asyncio.gather(*(meta.committed(tp) for tp in tps))
        starts: dict[TopicPartition, int] = {}
        if any(c is None for c in committed):
            starts = await meta.beginning_offsets([tp for tp, c in zip(tps, committed, strict=True) if c is None])
        backlog = sum(max(0, ends[tp] - (c if c is not None else starts[tp])) for tp, c in zip(tps, committed,
                                                                                                 strict=True))
        return Snapshot(backlog, self.now(), dict(self._gateways), dict(self._workers))

    def _read_live(self, records: dict[TopicPartition, list[Any]]) -> None:
        """Liveness records read now: each member's receipt time (this process's clock)."""
        now = self.now()
        for batch in records.values():
            for record in batch:
                key = (record.key or b"").decode(errors="replace")
                kind, _, member = key.partition(":")
                try:
                    beat = orjson.loads(record.value) if record.value else {}
                    if not isinstance(beat, dict):
                        beat = {}
                except orjson.JSONDecodeError:
                    beat = {}
                if kind == "g":
                    if beat.get("left"):
                        self._gateways.pop(member, None)
                    else:
                        self._gateways[member] = now
                elif kind == "w":
                    if beat.get("left"):
                        self._workers.pop(member, None)
                        continue
                    try:
                        pause = float(beat.get("pause_s") or 0.0)
                    except (TypeError, ValueError):
                        pause = 0.0
                    model = beat.get("model")
                    self._workers[member] = WorkerBeat(now, now + pause if pause > 0 else 0.0,
                                                       model if isinstance(model, str) and model else None)
        for member in [m for m, at in self._gateways.items() if now - at > _FORGET_S]:
            del self._gateways[member]
        for member in [m for m, beat in self._workers.items() if now - beat.at_s > _FORGET_S]:
            del self._workers[member]

    async def read_replies(self, block_s: float) -> list[bytes]:
        if not self._ready:
            await self.open()
        replies = self._replies
        assert replies is not None
        records = await replies.getmany(timeout_ms=int(block_s * 1000))
        out: list[bytes] = []
        for batch in records.values():
            for record in batch:
                if record.value:
                    out.extend(record.value.split(b"\n"))  # a worker's replies, joined (see the module docstring)
        return out

    async def leave(self, gateway_id: str) -> None:
        if not self._ready or self.admin is None:
            return
        await self._send_live(f"g:{gateway_id}", {"left": True})
        try:
            await self._answer(self.admin.delete_topics([self.reply_to]))
        except errors.KafkaError as error:
            log.debug("kafka: deleting %s: %r", self.reply_to, error)

    async def close(self) -> None:
        for attr in ("_replies", "_meta"):
            consumer = getattr(self, attr)
            setattr(self, attr, None)
            if consumer is not None:
                await _quietly(consumer.stop())
        await self._stop_common()
