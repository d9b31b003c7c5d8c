"""The worker side of the Kafka adapter: a member of the consumer group ``settings.group``.

Demand: a read is ``getmany(max_records=n)`` for the ``n`` requests the engine has room for.
While the worker wants none its partitions are paused (nothing is fetched for it) and it polls
all the same, every quarter of ``max_poll_interval_ms`` (at most every second): a consumer that
does not poll for ``max_poll_interval_ms`` leaves its group, its partitions rebalance, its
requests run again elsewhere and the same happens there (DESIGN's C16); this worker polls
whatever its engine is busy with.

Commits: a request's offset is committed only after its reply is stored, in partition order
(:class:`~rxpipe.kafka._offsets.PartitionOffsets`): one commit per write batch, cumulative, so a
commit lost to a broker error is covered by the next one (or by :meth:`housekeeping`). A
rebalance gives each partition to one member; a survivor reads its own partitions again from
their committed offsets and skips what it holds or finished; a dead worker's partitions move
after ``session_timeout_ms`` and their uncommitted requests run again on their new owner (the
gateway drops the replies it already has). A request given back undone (the worker is stopping)
is read again: the consumer seeks back to it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import aiokafka.errors as errors
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.structs import OffsetAndMetadata

from ..transport._interface import Delivery, WorkerBroker, WriteOp
from ._adapter import TRANSIENT, KafkaBroker, _quietly
from ._offsets import PartitionOffsets, head_metadata, parse_head
from ._settings import KafkaSettings

__all__ = ["KafkaWorkerBroker"]

log = logging.getLogger("rxpipe.kafka")


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, broker: KafkaWorkerBroker) -> None:
        self.broker = broker

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self.broker._revoked(revoked)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        await self.broker._assigned(assigned)


class KafkaWorkerBroker(KafkaBroker, WorkerBroker):
    """The worker side on Kafka (see the module docstring). ``assignments``: how many times the
    group gave this worker its partitions (1 without rebalances); ``offsets``: its partitions'
    :class:`~rxpipe.kafka._offsets.PartitionOffsets`."""

    def __init__(self, settings: KafkaSettings) -> None:
        super().__init__(settings)
        self.consumer: AIOKafkaConsumer | None = None
        self._control: AIOKafkaConsumer | None = None
        #: reads the ``heads`` topic at each assignment (no group)
        self._heads: AIOKafkaConsumer | None = None
        self.offsets: dict[TopicPartition, PartitionOffsets] = {}
        self.assignments = 0
        #: commit points computed and not yet committed
        self._due: dict[TopicPartition, int] = {}
        self._commit_lock = asyncio.Lock()
        #: one getmany at a time (the reads and the keep-alive polls)
        self._poll_lock = asyncio.Lock()
        self._last_poll = time.monotonic()
        self._keepalive: asyncio.Task[None] | None = None
        self._buffer: list[Delivery] = []
        #: set once the listener has read the commit points and head counts of the assignment in
        #: force (getmany may return a new assignment's records before it has)
        self._settled = asyncio.Event()

    @property
    def poll_interval_s(self) -> float:
        """How often an idle worker polls with its partitions paused (s)."""
        return min(1.0, self.settings.max_poll_interval_ms / 4000)

    async def open(self) -> None:
        if self._ready:
            return
        s, t = self.settings, self.topics
        await self._start_common()
        try:
            if self._control is None:
                control = AIOKafkaConsumer(**self._client_options(), enable_auto_commit=False,
                                           auto_offset_reset="latest", fetch_max_wait_ms=s.fetch_max_wait_ms)
                await self._answer(control.start())
                tp = TopicPartition(t.control, 0)
                control.assign([tp])
                await self._answer(control.seek_to_end(tp))
                self._control = control
            if self._heads is None:
                heads = AIOKafkaConsumer(**self._client_options(), enable_auto_commit=False,
                                         auto_offset_reset="latest", fetch_max_wait_ms=s.fetch_max_wait_ms)
                await self._answer(heads.start())
                self._heads = heads
            if self.consumer is None:
                consumer = AIOKafkaConsumer(
                    **self._client_options(), group_id=s.group, client_id=s.consumer, enable_auto_commit=False,
                    auto_offset_reset="earliest", session_timeout_ms=s.session_timeout_ms,
                    heartbeat_interval_ms=s.heartbeat_interval_ms, max_poll_interval_ms=s.max_poll_interval_ms,
                    rebalance_timeout_ms=s.max_poll_interval_ms, fetch_max_wait_ms=s.fetch_max_wait_ms)
                await self._answer(consumer.start())
                consumer.subscribe([t.requests], listener=_Rebalance(self))
                self.consumer = consumer
        except BaseException:
            await self.close()
            raise
        self._last_poll = time.monotonic()
        self._keepalive = asyncio.get_running_loop().create_task(self._keep_polling(),
                                                                 name=f"rxpipe-kafka-poll-{s.consumer}")
        self._ready = True

    # -- the group -------------------------------------------------------------------------------
    async def _revoked(self, revoked: set[TopicPartition]) -> None:
        self._settled.clear()  # a rebalance begins
        if revoked:
            await self._commit()  # what this worker finished, before another member reads from there

    async def _assigned(self, assigned: set[TopicPartition]) -> None:
        """The group's new assignment: each partition's commit point and head count, read now; what
        this worker held of a partition it keeps is not delivered again."""
        consumer = self.consumer
        assert consumer is not None
        self.assignments += 1
        tps = list(assigned)
        committed: dict[TopicPartition, int | None] = dict.fromkeys(tps)
        heads: dict[int, tuple[int, int]] = {}
        try:
            committed.update(zip(tps, await self._answer(asyncio.gather(*(consumer.committed(tp) for tp in tps))),
                                 strict=True))
            heads = await self._read_heads(assigned)
        except (TimeoutError, errors.KafkaError) as error:
            # without them: the first record read is the commit point, the head counts one short
            log.warning("worker %s: the commit points of the new assignment were not read: %r",
                        self.settings.consumer, error)
        for tp in list(self.offsets):
            if tp not in assigned:
                del self.offsets[tp]
                self._due.pop(tp, None)
        for tp in tps:
            if tp in self.offsets:
                self.offsets[tp].adopt(committed[tp], heads.get(tp.partition))
            else:
                self.offsets[tp] = PartitionOffsets(committed[tp], heads.get(tp.partition))
        if assigned and not self._poll_lock.locked():
            consumer.pause(*assigned)  # no demand now: fetch nothing until the next read
        self._settled.set()
        log.info("worker %s: partitions %s of %s assigned (assignment %d)", self.settings.consumer,
                 sorted(tp.partition for tp in assigned), self.topics.requests, self.assignments)

    async def _keep_polling(self) -> None:
        """Poll with every partition paused while no read is under way (see the module docstring)."""
        interval = self.poll_interval_s
        while True:
            await asyncio.sleep(interval / 2)
            consumer = self.consumer
            if consumer is None or self._poll_lock.locked() or time.monotonic() - self._last_poll < interval:
                continue
            try:
                async with self._poll_lock:
                    assigned = consumer.assignment()
                    if assigned:
                        consumer.pause(*assigned)
                    records = await consumer.getmany(timeout_ms=0)
                    self._last_poll = time.monotonic()
                self._buffer += await self._take(records)  # none while paused; kept for the next read if any
            except asyncio.CancelledError:
                raise
            except Exception as error:  # the next read reports it
                log.debug("kafka: keep-alive poll: %r", error)

    # -- reads -----------------------------------------------------------------------------------
    async def fetch(self, n: int, block_s: float) -> list[Delivery]:
        if not self._ready:
            await self.open()
        if self._buffer:
            out, self._buffer = self._buffer[:n], self._buffer[n:]
            return out
        consumer = self.consumer
        assert consumer is not None
        async with self._poll_lock:
            paused = consumer.paused()
            if paused:
                consumer.resume(*paused)
            try:
                # getmany waits through a rebalance whatever its timeout: bounded here
                records = await asyncio.wait_for(consumer.getmany(timeout_ms=int(block_s * 1000), max_records=n),
                                                 block_s + self.settings.command_timeout_s)
            except TimeoutError:
                records = {}
            finally:
                self._last_poll = time.monotonic()
        return await self._take(records)

    async def _take(self, records: dict[TopicPartition, list[Any]]) -> list[Delivery]:
        if records and not self._settled.is_set():
            await self._settled.wait()  # the listener's reads are bounded by command_timeout_s
        out = []
        heads: dict[int, bytes] = {}
        for tp, batch in records.items():
            offsets = self.offsets.get(tp)
            if offsets is None:
                offsets = self.offsets[tp] = PartitionOffsets()
            for record in batch:
                head = offsets.is_head(record.offset)
                deliveries = offsets.deliver(record.offset)
                if not deliveries:
                    continue  # held or finished here already: read again after a rebalance
                if head and tp.partition not in heads:
                    heads[tp.partition] = head_metadata(record.offset, deliveries)
                out.append(Delivery((tp.partition, record.offset), record.value, deliveries, None, tp))
        if heads:
            await self._write_heads(heads)
        return out

    async def _read_heads(self, assigned: set[TopicPartition]) -> dict[int, tuple[int, int]]:
        """The last ``heads`` record of each assigned partition: (offset, deliveries) of its head."""
        heads_consumer = self._heads
        assert heads_consumer is not None
        tps = [TopicPartition(self.topics.heads, tp.partition) for tp in assigned]
        if not tps:
            return {}
        heads_consumer.assign(tps)
        ends = await self._answer(heads_consumer.end_offsets(tps))
        wanted = {tp for tp in tps if ends[tp] > 0}
        for tp in wanted:
            heads_consumer.seek(tp, ends[tp] - 1)
        found: dict[int, tuple[int, int]] = {}
        deadline = time.monotonic() + self.settings.command_timeout_s
        while wanted and time.monotonic() < deadline:
            records = await heads_consumer.getmany(*wanted, timeout_ms=100)
            for tp, batch in records.items():
                head = parse_head(batch[-1].value) if batch else None
                if head is not None:
                    found[tp.partition] = head
                wanted.discard(tp)
        if wanted:
            log.warning("kafka: the delivery counts of partitions %s were not read",
                        sorted(t.partition for t in wanted))
        return found

    async def _write_heads(self, heads: dict[int, bytes]) -> None:
        """Store each partition's head count (partition -> record) before it runs; a broker error
        leaves the count one short (it is logged at DEBUG)."""
        producer = self.producer
        assert producer is not None
        try:
            sent = [await self._answer(producer.send(self.topics.heads, record, partition=partition))
                    for partition, record in heads.items()]
            await self._answer(asyncio.gather(*sent))
        except (TimeoutError, errors.KafkaError) as error:
            log.debug("kafka: delivery counts of partitions %s not stored: %r", sorted(heads), error)

    async def read_control(self, block_s: float) -> list[tuple[bytes, float]]:
        if not self._ready:
            await self.open()
        control = self._control
        assert control is not None
        records = await control.getmany(timeout_ms=int(block_s * 1000))
        # the record's timestamp: the cancel-latency histogram's start (see _adapter's docstring)
        return [(record.value, record.timestamp / 1000) for batch in records.values() for record in batch
                if record.value]

    # -- writes ----------------------------------------------------------------------------------
    async def write(self, ops: list[WriteOp]) -> list[Any]:
        """Replies first (those next to each other for one gateway as one record), every one
        stored before an offset is committed; then the acks' commit points, in one commit."""
        if not self._ready:
            await self.open()
        producer, consumer = self.producer, self.consumer
        assert producer is not None and consumer is not None
        results: list[Any] = [None] * len(ops)
        sends: list[Any] = []
        run: list[bytes] = []
        topic = None
        for op in ops:
            if op.kind != "reply":
                continue
            if op.args[0] != topic and run:
                sends.append(await self._answer(producer.send(topic, b"\n".join(run), partition=0)))
                run = []
            topic = op.args[0]
            run.append(op.args[1])
        if run:
            sends.append(await self._answer(producer.send(topic, b"\n".join(run), partition=0)))
        stored = await self._answer(asyncio.gather(*sends, return_exceptions=True))
        for result in stored:
            if isinstance(result, BaseException):
                raise result  # resent whole: the gateway drops what it already has
        assigned = consumer.assignment()
        for op in ops:
            if op.kind == "ack" or op.kind == "release":
                tp = op.args[0].ref
                partition, offset = op.args[0].key
                offsets = self.offsets.get(tp)
                if offsets is None:
                    continue  # the partition moved to another worker, which runs it again
                if op.kind == "ack":
                    point = offsets.finish(offset)
                    if point is not None:
                        self._due[tp] = point
                elif offsets.release(offset) and tp in assigned:
                    consumer.seek(tp, offset)  # read again (what follows and is held or done is skipped)
            elif op.kind != "reply":
                raise ValueError(f"unknown write {op.kind!r}")
        if self._due:
            await self._commit()
        return results

    async def _commit(self) -> None:
        """Commit the due commit points (and the counts of the new heads). A broker error keeps
        them due; a refusal (the partition moved in a rebalance) drops them: the new owner reads
        from the last commit."""
        consumer = self.consumer
        if consumer is None or not self._due:
            return
        async with self._commit_lock:
            due, self._due = self._due, {}
            assigned = consumer.assignment()
            offsets = {tp: OffsetAndMetadata(point, "") for tp, point in due.items()
                       if tp in assigned and tp in self.offsets}
            # the new heads this worker holds: their counts, for the next owner if this one dies
            heads = {tp.partition: head_metadata(o.offset, self.offsets[tp].deliveries_at(o.offset))
                     for tp, o in offsets.items() if self.offsets[tp].deliveries_at(o.offset)}
            if heads:
                await self._write_heads(heads)
            if not offsets:
                return
            try:
                await self._answer(consumer.commit(offsets))
            except TRANSIENT as error:
                for tp, point in due.items():
                    self._due[tp] = max(point, self._due.get(tp, point))
                log.debug("kafka: commit failed, retried: %r", error)
            except errors.KafkaError as error:
                log.info("worker %s: commit of %s refused (%r): their new owner runs them again",
                         self.settings.consumer, sorted(f"{tp.partition}@{o.offset}" for tp, o in offsets.items()),
                         error)

    # -- liveness --------------------------------------------------------------------------------
    async def heartbeat(self, consumer: str, pause_s: float, held: list[Delivery], model: str | None = None) -> float:
        """The group's session keeps what this worker holds: ``held`` needs no refresh."""
        if not self._ready:
            await self.open()
        await self._send_live(f"w:{consumer}", {"pause_s": pause_s, "model": model})
        return self.now()

    async def housekeeping(self) -> None:
        await self._commit()  # commit points a broker error left due

    async def leave(self, consumer: str) -> None:
        if self._ready:
            await self._send_live(f"w:{consumer}", {"left": True})

    async def close(self) -> None:
        task, self._keepalive = self._keepalive, None
        if task is not None:
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        if self.consumer is not None and self._due:
            try:
                await self._commit()
            except Exception as error:
                log.debug("kafka: last commit: %r", error)
        for attr in ("consumer", "_control", "_heads"):
            consumer = getattr(self, attr)
            setattr(self, attr, None)
            if consumer is not None:
                await _quietly(consumer.stop())  # the group's member leaves: its partitions move at once
        self._buffer = []
        await self._stop_common()
