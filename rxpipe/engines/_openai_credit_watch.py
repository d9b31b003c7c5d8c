"""The router's end of a backend's credit watch (DESIGN §8b "Credit across the HTTP hop").

An rxpipe gateway pushes its credit to whoever opens ``GET /v1/credit`` with ``Accept:
text/event-stream`` (:mod:`rxpipe.gateway._credit_watch`): one ``data: <credit JSON>`` at once,
one each time its room changes, one every heartbeat (1 s by default) when nothing changed.
:class:`CreditWatcher` keeps that stream open on a connection of its own (never one of the
calls') and hands every word to its engine, so the engine's book of the backend's room is never
older than one loop pass and one network hop — a backend that another client filled says 0
before the router sends it the next request, and says room again the moment it has some, with no
polling.

The stream is ``live`` from its head until it ends; while it is live the engine sends no probe.
It ends when the backend closes it (its drain), on a connection error, or after
:data:`WATCH_SILENCE_S` without a byte (a backend that stopped speaking is not believed); the
watcher then opens it again after ``reconnect_min_s``, the interval doubling up to
``reconnect_max_s`` while it fails, and the engine falls back to its probes meanwhile (a 408,
429 or 5xx is such a failure: too many watchers, a drain, a proxy whose backend restarts). A
backend that answers the watch with anything else but an event stream (an older rxpipe, another
server with the same headers) is ``unsupported``: not asked again, the probes stay its only path.

Anchor: Reactive Streams §3.9 (``request(n)`` signalled by the subscriber to its publisher) with
the roles crossing the hop: the backend is the subscriber of the router's requests and says its
demand as it changes; NATS JetStream's pull consumers push a heartbeat on an idle stream the same
way (ADR-13), so a silent stream is known dead.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

import aiohttp
import orjson

from ._http1 import HTTP1Pool

__all__ = ["CreditWatcher", "WATCH_SILENCE_S", "room_of"]

log = logging.getLogger("rxpipe.engine")

#: a watch that has said nothing for this long (seconds; three default heartbeats) is closed and
#: opened again
WATCH_SILENCE_S = 3.0
#: the longest event line read (bytes): a credit event is under 200
_MAX_EVENT_BYTES = 4096


def room_of(queue_room: int | None, free_slots: int | None) -> int | None:
    """The requests an rxpipe backend would take at once now: ``queue_room + free_slots`` (its
    queue asks one more per departure, so while it has free slots each admission leaves at once
    and makes its place again), 0 when its queue has no room (the edge admits nothing then,
    whatever the slots), None when it said no ``queue_room``."""
    if queue_room is None:
        return None
    if queue_room <= 0:
        return 0
    return queue_room + max(0, free_slots or 0)


def _word(data: bytes) -> tuple[int, int | None, int | None] | None:
    """(room, seq, seen) of one event's data (the credit JSON), or None if it is not one."""
    try:
        body = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(body, dict):
        return None
    queue, free, seq, seen = body.get("queue_room"), body.get("free_slots"), body.get("seq"), body.get("seen")
    if type(queue) is not int or (free is not None and type(free) is not int):
        return None
    room = room_of(queue, free)
    assert room is not None
    return (room, seq if type(seq) is int and seq >= 0 else None,
            seen if type(seen) is int and seen >= 0 else None)


class CreditWatcher:
    """One backend's credit watch, kept open while its engine runs.

    Args:
        base_url: the backend's ``.../v1`` root (the watch is ``base_url + "/credit"``).
        on_word: called with ``(room, seq, seen)`` (requests; the snapshot's number or None; the
            engine's calls the backend had decided, or None) for every event, on the loop.
        on_lost: called when a live stream ended (the engine's word may age from now on).
        on_open: called when a stream opened (the backend counts ``seen`` from 0 again).
        headers: sent with the watch (its ``Authorization``, if any).
        reconnect_min_s, reconnect_max_s: the reopening backoff (seconds, doubling).
        loop: the engine's loop.

    Attributes: ``live`` (a stream is open), ``unsupported`` (the backend has no watch),
    ``events`` (words received), ``opened`` (streams opened). :meth:`start` starts it (once),
    :meth:`close` stops it and closes its connection.
    """

    def __init__(self, base_url: str, on_word: Callable[[int, int | None, int | None], None],
                 on_lost: Callable[[], None], headers: Mapping[str, str], reconnect_min_s: float,
                 reconnect_max_s: float, loop: asyncio.AbstractEventLoop,
                 on_open: Callable[[], None] = lambda: None) -> None:
        self.url = base_url + "/credit"
        self.base_url = base_url
        self.on_word = on_word
        self.on_lost = on_lost
        self.on_open = on_open
        self.headers = {**headers, "Accept": "text/event-stream"}
        self.reconnect_min_s = reconnect_min_s
        self.reconnect_max_s = reconnect_max_s
        self.loop = loop
        self.live = False
        self.unsupported = False
        self.events = 0
        self.opened = 0
        self._task: asyncio.Task[None] | None = None
        self._pool: HTTP1Pool | None = None
        #: the bytes of an event not yet whole
        self._pending = b""

    def start(self) -> None:
        if self._task is None and not self.unsupported:
            self._task = self.loop.create_task(self._run(), name=f"rxpipe-credit-watch-{self.base_url}")

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()
        self.live = False

    async def _run(self) -> None:
        delay = self.reconnect_min_s
        while True:
            opened = self.opened
            try:
                await self._watch_once()
            except aiohttp.ClientPayloadError as error:  # a malformed stream, or its reader failed
                log.warning("credit watch %s ended: %r", self.url, error)
            except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as error:
                log.debug("credit watch %s: %r", self.url, error)
            if self.live:
                self.live = False
                self.on_lost()
            if self.unsupported:
                return
            if self.opened != opened:
                delay = self.reconnect_min_s  # it was live: a failure from now starts the backoff anew
            await asyncio.sleep(delay)
            delay = min(self.reconnect_max_s, delay * 2)

    async def _watch_once(self) -> None:
        """One stream, read to its end. A 408, 429 or 5xx (too many watchers, a drain, a proxy
        in front of a backend that restarts: a passing refusal) is tried again later; any other
        answer that is not an event stream makes the backend ``unsupported``."""
        pool = self._pool
        if pool is None:
            pool = self._pool = HTTP1Pool(self.base_url, 1, connect_timeout_s=WATCH_SILENCE_S, loop=self.loop)
        response = await pool.get(self.url, headers=self.headers, read_timeout_s=WATCH_SILENCE_S)
        try:
            if response.status in (408, 429) or response.status >= 500:
                return
            if response.status != 200 or response.content_type != "text/event-stream":
                self.unsupported = True
                log.debug("credit watch %s: answered %d %s, not an event stream: probes only",
                          self.url, response.status, response.content_type)
                return
            self.opened += 1
            self.live = True
            self.on_open()
            self._pending = b""
            # each word is read in the protocol callback that received it, before the tasks that
            # pass woke (a request handler among them must not route on the word before it)
            response.feed(self._feed)
            while await response.readany():
                pass  # nothing is buffered: this waits for the end, or raises the error
        finally:
            response.close()

    def _feed(self, data: bytes) -> None:
        pending = self._pending + data
        *events, self._pending = pending.split(b"\n\n")
        for event in events:
            self._read(event)
        if len(self._pending) > _MAX_EVENT_BYTES:
            raise ValueError(f"a credit event over {_MAX_EVENT_BYTES} bytes")

    def _read(self, event: bytes) -> None:
        for line in event.split(b"\n"):
            if line.startswith(b"data:"):
                word = _word(line[5:].strip())
                if word is not None:
                    self.events += 1
                    self.on_word(*word)
