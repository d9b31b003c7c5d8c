"""NATS JetStream as a broker adapter of :mod:`rxpipe.transport` (DESIGN §8), with nats-py.

Four streams, named after ``settings.stream`` (``rxpipe:requests`` → ``rxpipe_requests``, which is
also the subject prefix ``P``):

- ``P`` (work-queue retention, file storage): requests on subject ``P.q``. One durable pull
  consumer, ``settings.group``, shared by every worker: ``ack_wait`` = ``visibility_timeout_s``
  (a held request is kept with ``in_progress()``, +WPI, every third of it), ``max_deliver`` =
  ``max_deliveries + 1`` (the last delivery is answered with an error, then acknowledged), and
  ``max_ack_pending`` = ``max_backlog`` (the server-side bound of what all workers hold). A
  worker's read is a pull request ``CONSUMER.MSG.NEXT`` for exactly the requests it wants,
  answered on one inbox subscription, with the pending count kept as NATS ADR-37 says (+batch
  per pull, -1 per message, minus ``Nats-Pending-Messages`` of a 408/409 that ends a pull) and
  re-granted in full after a reconnect (the server forgot the pulls of the old connection). A
  request withdrawn by its gateway is deleted from the stream by sequence.
- ``P_replies`` (limits, ``max_age`` = ``reply_ttl_s``): replies on ``P.r.<gateway>``, published
  with acks (a request is acknowledged only after its last reply is stored); each gateway reads
  its own subject with an ordered consumer (it recreates itself at the next sequence after a gap).
- ``P_control`` (limits, file storage, ``max_age`` = ``cancel_memory_s``, ``max_msgs`` =
  :data:`~rxpipe.transport._interface.CONTROL_MAX_MESSAGES`, oldest dropped first): cancels and credit on
  ``P.c``, read by every worker with an ordered consumer from its present end. File-backed as
  the other three: a memory stream does not survive a server restart, its configuration
  included (nats-server issue #6207), and nothing would re-create it, so every credit and
  cancel after a restart would fail (``NoStreamResponseError``) and a stream running across it
  stall. On file the stream and its sequence numbers outlive a restart and each worker's ordered
  consumer recreates itself after the last message it saw (nats-py resets it when idle
  heartbeats stop): a cancel or credit written while it was away is still delivered. A
  memory-backed one left by an earlier version is replaced at the next open (see
  :meth:`_NatsBroker._ensure_streams`).
- ``P_live`` (one message per subject): liveness on ``P.l.w.<worker>`` (payload: the engine's
  pause and the model it serves) and ``P.l.g.<gateway>``; the stored message's server timestamp is the beat's time, and
  ``STREAM.INFO``'s ``ts`` the server's clock (never a host's).

The server should run with ``jetstream { sync_interval: always }`` (an acknowledged write is on
disk; Jepsen lost acknowledged writes under the default).
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import logging
import re
from typing import Any, Awaitable, Callable, TypeVar

import nats
import nats.errors
import nats.js.errors
import orjson
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import api

from ..transport._interface import (
    CONTROL_MAX_MESSAGES,
    Delivery,
    GatewayBroker,
    Snapshot,
    WorkerBeat,
    WorkerBroker,
    WriteOp,
)
from ._settings import NatsSettings

__all__ = ["NatsGatewayBroker", "NatsWorkerBroker", "TRANSIENT", "names"]

log = logging.getLogger("rxpipe.nats")

T = TypeVar("T")

#: errors that mean "NATS is unreachable now" (retryable)
TRANSIENT: tuple[type[BaseException], ...] = (
    nats.errors.ConnectionClosedError, nats.errors.TimeoutError, nats.errors.NoServersError,
    nats.errors.NoRespondersError, nats.errors.StaleConnectionError, nats.errors.OutboundBufferLimitError,
    nats.js.errors.ServiceUnavailableError, nats.errors.FlushTimeoutError, asyncio.TimeoutError, OSError,
    nats.errors.ConnectionReconnectingError)


def _token(text: str) -> str:
    """``text`` as one NATS subject token / stream name (letters, digits, ``_`` and ``-``)."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", text) or "_"


class names:  # noqa: N801 - a namespace of the names derived from the settings
    """Stream names and subjects for ``settings``."""

    def __init__(self, settings: NatsSettings) -> None:
        p = self.prefix = _token(settings.stream)
        self.requests, self.replies, self.control, self.live = p, f"{p}_replies", f"{p}_control", f"{p}_live"
        self.queue = f"{p}.q"
        self.control_subject = f"{p}.c"
        self.consumer = _token(settings.group)

    def reply_subject(self, gateway_id: str) -> str:
        return f"{self.prefix}.r.{_token(gateway_id)}"

    def live_subject(self, kind: str, member: str) -> str:
        return f"{self.prefix}.l.{kind}.{_token(member)}"


def _retrieved(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


def _ts(text: str) -> float:
    """An RFC 3339 timestamp of the server (nanoseconds allowed) as seconds since the epoch."""
    head, _, frac = text.rstrip("Z").partition(".")
    base = datetime.datetime.fromisoformat(head).replace(tzinfo=datetime.UTC).timestamp()
    return base + (float("0." + frac) if frac else 0.0)


class _NatsBroker:
    transient = TRANSIENT
    name = "NATS"
    # the interface's callbacks (defaults on rxpipe.transport._interface._Broker)
    on_lost: Callable[[BaseException], None] | None
    on_back: Callable[[], None] | None

    def __init__(self, settings: NatsSettings) -> None:
        self.settings = settings
        self.names = names(settings)
        self.nc: NATS | None = None
        self.js: Any = None
        self._ready = False
        #: resolved when the connection in use drops (None: no answer is awaited on it yet)
        self._dropped: asyncio.Future[None] | None = None

    async def _connect(self) -> None:
        if self.nc is None:
            s = self.settings
            self.nc = await nats.connect(
                s.url, connect_timeout=max(1, int(s.connect_timeout_s)), reconnect_time_wait=s.backoff_base_s * 4,
                max_reconnect_attempts=-1, error_cb=self._error, disconnected_cb=self._disconnected,
                reconnected_cb=self._reconnected, ping_interval=5, max_outstanding_pings=2)
            self.js = self.nc.jetstream(timeout=s.command_timeout_s)

    async def _error(self, error: Exception) -> None:
        log.debug("nats: %r", error)

    async def _disconnected(self) -> None:
        log.debug("nats: disconnected")
        dropped, self._dropped = self._dropped, None
        if dropped is not None and not dropped.done():
            dropped.set_result(None)  # what waits for an answer on that connection fails now (see _answer)
        if self.on_lost is not None and self.nc is not None:  # None: our own close()
            self.on_lost(nats.errors.ConnectionReconnectingError())

    async def _reconnected(self) -> None:
        log.debug("nats: reconnected")
        if self.on_back is not None:
            self.on_back()

    @property
    def reachable(self) -> bool:
        return self.nc is not None and self.nc.is_connected

    def _connection(self) -> asyncio.Future[None]:
        """The connection a message sent now goes out on, as a future resolved when it drops
        (taken before sending a message whose answer :meth:`_answer` awaits). While nats-py
        reconnects it buffers what is sent and sends it on the next connection: that one."""
        if self._dropped is None:
            self._dropped = asyncio.get_running_loop().create_future()
        return self._dropped

    async def _answer(self, waiting: Awaitable[T], connection: asyncio.Future[None] | None = None) -> T:
        """The answer ``waiting`` for (a request's reply, JetStream's acks of publishes) sent on
        ``connection`` (default: the one in use now, see :meth:`_connection`), within
        ``command_timeout_s`` (else ``TimeoutError``).

        Raises ``ConnectionReconnectingError`` as soon as that connection drops: the server
        answers on the connection a message came on, so what was sent on a dropped one is never
        answered (nats-py would wait the whole timeout: 5 s after a crash, when the server may
        be back already, and a writer or the gateway's refresh waits with it). The fate of such
        a message is unknown, as after a timeout: the gateway answers its client 503, a worker
        sends its replies again (the gateway removes duplicates)."""
        if connection is None:
            connection = self._connection()
        task = asyncio.ensure_future(waiting)
        try:
            done, _ = await asyncio.wait((task, connection), timeout=self.settings.command_timeout_s,
                                         return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            task.cancel()
            raise
        if task in done:
            return task.result()
        task.cancel()
        task.add_done_callback(_retrieved)  # an answer that came meanwhile is not "never retrieved"
        if connection.done():
            raise nats.errors.ConnectionReconnectingError
        raise TimeoutError

    async def _ensure_streams(self, consumer: bool = False) -> bool:
        """Create the four streams if missing (and with ``consumer``, the workers' consumer); True
        if a stream was missing (a new or wiped server). A memory-backed control stream (made by
        an earlier version of this adapter) is replaced by a file-backed one (see
        :meth:`_control_to_file`)."""
        s, n, js = self.settings, self.names, self.js
        created = False
        specs = [
            api.StreamConfig(name=n.requests, subjects=[n.queue], retention=api.RetentionPolicy.WORK_QUEUE,
                             storage=api.StorageType.FILE),
            api.StreamConfig(name=n.replies, subjects=[f"{n.prefix}.r.*"], storage=api.StorageType.FILE,
                             max_age=s.reply_ttl_s),
            api.StreamConfig(name=n.control, subjects=[n.control_subject], storage=api.StorageType.FILE,
                             max_age=s.cancel_memory_s, max_msgs=CONTROL_MAX_MESSAGES,
                             discard=api.DiscardPolicy.OLD),
            api.StreamConfig(name=n.live, subjects=[f"{n.prefix}.l.>"], storage=api.StorageType.FILE,
                             max_msgs_per_subject=1, max_age=max(60.0, s.reply_ttl_s)),
        ]
        for config in specs:
            try:
                info = await js.stream_info(config.name)
                if config.name == n.control and info.config.storage == api.StorageType.MEMORY:
                    await self._control_to_file(config, info)
            except nats.js.errors.NotFoundError:
                try:
                    await js.add_stream(config)
                    created = True
                except nats.js.errors.BadRequestError as error:  # created meanwhile by another process
                    log.debug("nats: add_stream %s: %r", config.name, error)
        if consumer:
            # the workers own the consumer: created, or updated to these settings (NATS creates or
            # updates a consumer of the same name; ack_wait, max_deliver, max_ack_pending are editable)
            await js.add_consumer(n.requests, api.ConsumerConfig(
                name=n.consumer, durable_name=n.consumer, ack_policy=api.AckPolicy.EXPLICIT,
                ack_wait=s.visibility_timeout_s, max_deliver=s.max_deliveries + 1, max_ack_pending=s.max_backlog,
                filter_subject=n.queue))
        return created

    async def _control_to_file(self, config: api.StreamConfig, info: api.StreamInfo) -> None:
        """Replace the memory-backed control stream ``info`` by ``config`` (file-backed), its
        sequence numbers continued (``first_seq``: the old last one + 1), so that the ordered
        consumers of running workers, which recreate themselves after the last sequence they
        saw, miss nothing written to the new one. Its messages are not copied (every worker read
        them within a second). Two processes opening at once may both replace it: a control
        message written between the two replacements is lost (a credit is sent again after
        ``credit_resend_s``; a lost cancel lets its request run to its end)."""
        js = self.js
        first_seq = int(info.state.last_seq or 0) + 1
        log.warning("nats: the control stream %s is in memory (an earlier rxpipe made it): a server restart would "
                    "lose it; replacing it by a file-backed one from sequence %d", config.name, first_seq)
        try:
            await js.delete_stream(config.name)
        except nats.js.errors.NotFoundError:  # replaced meanwhile by another process
            pass
        try:
            await js.add_stream(config.evolve(first_seq=first_seq))
        except nats.js.errors.BadRequestError as error:  # created meanwhile by another process
            log.debug("nats: add_stream %s: %r", config.name, error)

    async def _info(self, stream: str, subjects_filter: str | None = None) -> dict[str, Any]:
        """``STREAM.INFO`` as the server sent it (its ``ts`` is the server's clock)."""
        assert self.nc is not None
        body = orjson.dumps({"subjects_filter": subjects_filter}) if subjects_filter else b""
        reply = await self._answer(self.nc.request(f"$JS.API.STREAM.INFO.{stream}", body,
                                                   timeout=self.settings.command_timeout_s))
        data = orjson.loads(reply.data)
        error = data.get("error")
        if error:
            if error.get("code") == 404:
                raise nats.js.errors.NotFoundError(code=404, description=error.get("description"))
            raise nats.js.errors.APIError(code=error.get("code"), description=error.get("description"))
        return data

    async def _beats(self, subjects: list[str]) -> dict[str, tuple[float, bytes]]:
        """The last message of each liveness subject: (server time, payload)."""
        assert self.nc is not None
        nc, stream, timeout = self.nc, self.names.live, self.settings.command_timeout_s

        async def last(subject: str) -> tuple[str, tuple[float, bytes] | None]:
            reply = await self._answer(nc.request(f"$JS.API.STREAM.MSG.GET.{stream}",
                                                  orjson.dumps({"last_by_subj": subject}), timeout=timeout))
            message = orjson.loads(reply.data).get("message")
            if not message:
                return subject, None
            return subject, (_ts(message["time"]), base64.b64decode(message.get("data") or b""))

        found = await asyncio.gather(*(last(subject) for subject in subjects))
        return {subject: beat for subject, beat in found if beat is not None}

    async def close(self) -> None:
        """Disconnect. With the server unreachable nothing waits for it: what nats-py buffered
        while reconnecting can never be sent (the requests it stood for were retried, or are
        answered 503 by the gateway, or redelivered by the server), so it is dropped, not
        flushed. nats-py (2.16) would write that buffer at close to the dropped connection's
        closed transport (a RuntimeError under uvloop: the process exited 1)."""
        nc, self.nc = self.nc, None
        if nc is None:
            return
        if nc.is_connected:
            try:
                await nc.flush(timeout=1)
            except Exception:  # closing anyway
                pass
        elif getattr(nc, "_pending_data_size", 0):
            nc._pending = []
            nc._pending_data_size = 0
        await nc.close()


class NatsGatewayBroker(_NatsBroker, GatewayBroker):
    """The gateway side on NATS JetStream (see the module docstring). A lost connection is
    reported at once (``on_lost``) and every command fails fast until it is back."""

    def __init__(self, settings: NatsSettings) -> None:
        super().__init__(settings)
        self.reply_to = ""
        self._replies: list[bytes] = []
        self._arrived: asyncio.Event | None = None
        self._sub: Any = None

    async def open(self) -> None:
        await self._connect()
        if not self._ready:
            await self._ensure_streams()
            self._arrived = asyncio.Event()
            self._sub = await self.js.subscribe(self.reply_to, stream=self.names.replies, cb=self._on_reply,
                                                ordered_consumer=True, idle_heartbeat=0.5,
                                                deliver_policy=api.DeliverPolicy.NEW)
            self._ready = True

    def _check(self) -> None:
        nc = self.nc
        if nc is None or not nc.is_connected:
            raise nats.errors.ConnectionReconnectingError

    async def _on_reply(self, msg: Msg) -> None:
        self._replies.extend(msg.data.split(b"\n"))  # a worker's replies, joined (see NatsWorkerBroker.write)
        if self._arrived is not None:
            self._arrived.set()

    async def leave(self, gateway_id: str) -> None:
        if self.nc is not None and self._ready and self.nc.is_connected:  # else its beat just ages out
            subject = self.names.live_subject("g", gateway_id)
            await self.nc.request(f"$JS.API.STREAM.PURGE.{self.names.live}", orjson.dumps({"filter": subject}),
                                  timeout=self.settings.command_timeout_s)

    async def write(self, ops: list[WriteOp]) -> list[Any]:
        if not self._ready:
            await self.open()
        self._check()
        js, n = self.js, self.names
        connection = self._connection()
        results: list[Any] = []
        pending: list[tuple[int, Any]] = []
        for op in ops:
            if op.kind in ("publish", "control"):
                subject = n.queue if op.kind == "publish" else n.control_subject
                pending.append((len(results), await js.publish_async(subject, op.args[0])))
                results.append(None)
            elif op.kind == "withdraw":
                results.append(op.args[0])
            else:
                raise ValueError(f"unknown write {op.kind!r}")
        acks = await self._answer(asyncio.gather(*(f for _, f in pending), return_exceptions=True), connection)
        if acks and all(isinstance(a, TRANSIENT) for a in acks):
            raise acks[0]
        for (i, _), ack in zip(pending, acks, strict=True):
            results[i] = ack if isinstance(ack, BaseException) else ack.seq
        withdrawn = [i for i, op in enumerate(ops) if op.kind == "withdraw"]
        if withdrawn:
            deleted = await self._answer(asyncio.gather(*(js.delete_msg(n.requests, ops[i].args[0])
                                                          for i in withdrawn), return_exceptions=True))
            for i, result in zip(withdrawn, deleted, strict=True):
                if isinstance(result, TRANSIENT):
                    raise result
                results[i] = result  # an error: gone already (a worker acknowledged it meanwhile)
        return results

    async def snapshot(self, gateway_id: str) -> Snapshot:
        if not self._ready:
            await self.open()
        self._check()
        n = self.names
        reset = False
        try:
            await self._answer(self.js.publish(n.live_subject("g", gateway_id), b""))
            info = await self._info(n.requests)
        except nats.js.errors.NoStreamResponseError:
            reset = await self._ensure_streams()
            await self._answer(self.js.publish(n.live_subject("g", gateway_id), b""))
            info = await self._info(n.requests)
        except nats.js.errors.NotFoundError:
            reset = await self._ensure_streams()
            info = await self._info(n.requests)
        live = await self._info(n.live, f"{n.prefix}.l.>")
        subjects = list((live.get("state") or {}).get("subjects") or {})
        beats = await self._beats(subjects)
        gateways, workers = {}, {}
        head_g, head_w = f"{n.prefix}.l.g.", f"{n.prefix}.l.w."
        for subject, (at, data) in beats.items():
            if subject.startswith(head_g):
                gateways[subject[len(head_g):]] = at
            elif subject.startswith(head_w):
                try:
                    beat = orjson.loads(data) if data else {}
                    pause = float(beat.get("pause_s", 0.0))
                    model = beat.get("model")
                except (orjson.JSONDecodeError, AttributeError, TypeError, ValueError):
                    pause, model = 0.0, None
                workers[subject[len(head_w):]] = WorkerBeat(at, at + pause if pause > 0 else 0.0,
                                                            model if isinstance(model, str) and model else None)
        return Snapshot(int(info["state"]["messages"]), _ts(info["ts"]), gateways, workers, reset)

    async def read_replies(self, block_s: float) -> list[bytes]:
        if not self._ready:
            await self.open()
        arrived = self._arrived
        assert arrived is not None
        if not self._replies:
            arrived.clear()
            try:
                await asyncio.wait_for(arrived.wait(), block_s)
            except TimeoutError:
                return []
        out, self._replies = self._replies, []
        return out

    async def close(self) -> None:
        sub, self._sub = self._sub, None
        if sub is not None and self.nc is not None and not self.nc.is_closed:
            try:
                await sub.unsubscribe()
            except Exception:  # the connection may be gone
                pass
        self._ready = False
        await super().close()


class NatsWorkerBroker(_NatsBroker, WorkerBroker):
    """The worker side on NATS JetStream (see the module docstring). ``pulled``: requests asked
    for by pull requests and not yet delivered (ADR-37's pending count)."""

    def __init__(self, settings: NatsSettings) -> None:
        super().__init__(settings)
        self.pulled = 0
        #: the ack subjects of what this worker holds (delivered, not acknowledged nor released),
        #: by stream sequence: published with its liveness, so that a worker restarted under its
        #: name gives them back at once (:meth:`_recover_own`)
        self.holding: dict[int, str] = {}
        #: held requests of an earlier process of this name given back at start
        self.recovered = 0
        self._recovery_done = False
        self._beat: dict[str, Any] = {"pause_s": 0.0, "model": None}
        self._announcing: set[asyncio.Task[None]] = set()
        self._inbox = ""
        self._buffer: list[Msg] = []
        self._arrived: asyncio.Event | None = None
        self._control: list[tuple[bytes, float]] = []
        self._control_arrived: asyncio.Event | None = None
        self._subs: list[Any] = []

    async def open(self) -> None:
        await self._connect()
        if self._ready:
            return
        await self._ensure_streams(consumer=True)
        assert self.nc is not None
        self._arrived = asyncio.Event()
        self._control_arrived = asyncio.Event()
        self._inbox = self.nc.new_inbox()
        self._subs = [await self.nc.subscribe(self._inbox, cb=self._on_pulled),
                      await self.js.subscribe(self.names.control_subject, stream=self.names.control,
                                              cb=self._on_control, ordered_consumer=True, idle_heartbeat=0.5,
                                              deliver_policy=api.DeliverPolicy.NEW)]
        self._ready = True
        if not self._recovery_done:
            await self._recover_own()
            self._recovery_done = True

    async def _recover_own(self) -> None:
        """The same rule as Redis's ``XREADGROUP ... 0``: what an earlier process of this name
        held when it stopped without giving it back (kill -9) is taken up at once. JetStream
        owns no message per worker name, so this worker's liveness message lists the ack
        subjects of what it holds; at start each one still within ``ack_wait`` of that message
        (not redelivered to another worker yet) is answered ``-NAK``: redelivered now, before
        new requests, instead of after ``visibility_timeout_s``."""
        assert self.nc is not None
        s = self.settings
        subject = self.names.live_subject("w", s.consumer)
        beats = await self._beats([subject])
        if subject not in beats:
            return
        at_s, payload = beats[subject]
        try:
            held = orjson.loads(payload).get("held") or []
        except (orjson.JSONDecodeError, AttributeError):
            return
        now_s = _ts((await self._info(self.names.live, "-"))["ts"])
        if not held or now_s - at_s >= s.visibility_timeout_s:
            return  # nothing held, or redelivered to others already
        for ack_subject in held:
            if isinstance(ack_subject, str) and ack_subject.startswith("$JS.ACK."):
                await self.nc.publish(ack_subject, b"-NAK")
        # nats-py types flush's timeout as whole seconds; our bound is a float, so it wraps the call
        await asyncio.wait_for(self.nc.flush(), s.command_timeout_s)
        self.recovered += len(held)
        log.info("worker %s: %d requests it held before its start given back for redelivery at once", s.consumer,
                 len(held))

    def _announce(self) -> None:
        """Publish this worker's liveness with what it holds now (no wait for the store's ack:
        the next heartbeat publishes it again)."""
        if self.nc is not None and self.nc.is_connected:
            beat = orjson.dumps({**self._beat, "held": list(self.holding.values())})
            task = asyncio.ensure_future(self._quietly(self.nc.publish(
                self.names.live_subject("w", self.settings.consumer), beat)))
            self._announcing.add(task)
            task.add_done_callback(self._announcing.discard)

    @staticmethod
    async def _quietly(publish: Any) -> None:
        try:
            await publish
        except Exception as error:  # the next heartbeat says it again
            log.debug("nats: liveness not published: %r", error)

    async def _reconnected(self) -> None:
        # The server forgot the pull requests of the old connection: the next read re-grants
        # exactly what is outstanding (NATS ADR-37, "Server reconnects").
        self.pulled = 0
        if self._arrived is not None:
            self._arrived.set()
        await super()._reconnected()

    async def _on_pulled(self, msg: Msg) -> None:
        headers = msg.headers or {}
        status = headers.get(api.Header.STATUS)
        if status:
            if status in ("408", "409"):  # a pull ended: what it did not deliver is no longer asked for
                self.pulled = max(0, self.pulled - int(headers.get("Nats-Pending-Messages") or 0))
            elif status == "404":
                self.pulled = 0
            if self._arrived is not None:
                self._arrived.set()
            return
        self.pulled = max(0, self.pulled - 1)
        self._buffer.append(msg)
        if self._arrived is not None:
            self._arrived.set()

    async def _on_control(self, msg: Msg) -> None:
        self._control.append((msg.data, msg.metadata.timestamp.timestamp()))
        if self._control_arrived is not None:
            self._control_arrived.set()

    async def fetch(self, n: int, block_s: float) -> list[Delivery]:
        if not self._ready:
            await self.open()
        assert self.nc is not None and self._arrived is not None
        missing = n - self.pulled - len(self._buffer)
        if missing > 0:
            request = {"batch": missing, "expires": int(block_s * 1e9)}
            await self.nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{self.names.requests}.{self.names.consumer}",
                                  orjson.dumps(request), reply=self._inbox)
            self.pulled += missing
        if not self._buffer:
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), block_s + 0.5)
            except TimeoutError:
                self.pulled = 0  # the pull's end status was lost: ask again for all of it
            if self.nc.is_reconnecting or not self.nc.is_connected:
                raise nats.errors.ConnectionReconnectingError
        taken, self._buffer = self._buffer, []
        out = []
        for msg in taken:
            meta = msg.metadata
            out.append(Delivery(meta.sequence.stream, msg.data, int(meta.num_delivered), meta.timestamp.timestamp(),
                                msg))
            if msg.reply:
                self.holding[meta.sequence.stream] = msg.reply
        if out:
            self._announce()
        return out

    async def read_control(self, block_s: float) -> list[tuple[bytes, float]]:
        if not self._ready:
            await self.open()
        arrived = self._control_arrived
        assert arrived is not None
        if not self._control:
            arrived.clear()
            try:
                await asyncio.wait_for(arrived.wait(), block_s)
            except TimeoutError:
                return []
        out, self._control = self._control, []
        return out

    async def write(self, ops: list[WriteOp]) -> list[Any]:
        """Replies to one gateway that are next to each other in ``ops`` travel as one message (their
        payloads joined by newlines, which orjson never writes inside one): with ``sync_interval:
        always`` every stored message costs an fsync, so a busy worker sends fewer, larger ones
        (group commit). Every reply before an ack or release is stored before it is sent."""
        if not self._ready:
            await self.open()
        results: list[Any] = [None] * len(ops)
        batch: dict[str, list[int]] = {}
        for i, op in enumerate(ops):
            if op.kind == "reply":
                batch.setdefault(op.args[0], []).append(i)
                continue
            if batch:
                await self._publish(ops, batch, results)
                batch = {}
            msg = op.args[0].ref
            if op.kind == "ack":
                await msg.ack()
            elif op.kind == "release":
                await msg.nak()
            else:
                raise ValueError(f"unknown write {op.kind!r}")
            self.holding.pop(op.args[0].key, None)
        if batch:
            await self._publish(ops, batch, results)
        return results

    async def _publish(self, ops: list[WriteOp], batch: dict[str, list[int]], results: list[Any]) -> None:
        js = self.js
        connection = self._connection()
        futures = [await js.publish_async(subject, b"\n".join(ops[i].args[1] for i in indices))
                   for subject, indices in batch.items()]
        acks = await self._answer(asyncio.gather(*futures, return_exceptions=True), connection)
        for indices, ack in zip(batch.values(), acks, strict=True):
            if isinstance(ack, TRANSIENT):
                raise ack
            for i in indices:
                results[i] = ack

    async def heartbeat(self, consumer: str, pause_s: float, held: list[Delivery], model: str | None = None) -> float:
        if not self._ready:
            await self.open()
        self._beat = {"pause_s": pause_s, "model": model}
        beat = orjson.dumps({**self._beat, "held": list(self.holding.values())})
        await self._answer(self.js.publish(self.names.live_subject("w", consumer), beat))
        for delivery in held:
            await delivery.ref.in_progress()
        info = await self._info(self.names.live, "-")
        return _ts(info["ts"])

    async def leave(self, consumer: str) -> None:
        if self.nc is not None and self._ready and self.nc.is_connected:  # else its beat just ages out
            subject = self.names.live_subject("w", consumer)
            await self.nc.request(f"$JS.API.STREAM.PURGE.{self.names.live}", orjson.dumps({"filter": subject}),
                                  timeout=self.settings.command_timeout_s)

    async def close(self) -> None:
        taken, self._buffer = self._buffer, []
        for msg in taken:  # read after the last demand: another worker takes them at once
            try:
                await msg.nak()
            except Exception:
                pass
            self.holding.pop(msg.metadata.sequence.stream, None)
        for sub in self._subs:
            try:
                await sub.unsubscribe()
            except Exception:
                pass
        self._subs = []
        self._ready = False
        await super().close()
