"""The edge's credit pushed to the routers that watch it (DESIGN §8b "Credit across the HTTP hop").

``GET /v1/credit`` with ``Accept: text/event-stream`` opens a watch: Server-Sent Events, one
``data: <credit JSON>`` (the body of the plain ``GET /v1/credit``: ``free_slots``, ``queue_room``,
``drain_per_s``, ``queue_duration_ms``, ``seq``) at once, then one each time the edge's room
changes, and the snapshot again every ``credit_heartbeat_s`` when nothing changed (the watcher
learns its stream is alive). The stream head carries the credit headers of any answer.

It is Reactive Streams' ``request(n)`` carried across the HTTP hop as a push, the way a subscriber
signals demand to its publisher (§3.9), instead of a router polling or reading the heads of its
own answers only: a backend that another client filled says 0 within one loop pass and one
network hop, before the router sends it the next request.

What changes the room: downstream demand reaching the edge (its queue asks one more per
departure), an admission (it spends one), an engine's slot freed or taken, the drain. Each of
those calls :meth:`CreditWatch.changed`; the snapshot is taken once per loop pass (``call_soon``),
however many changes it saw, and sent to a watcher only when ``free_slots``, ``queue_room`` or
its router's count of decided calls (``seen``, :class:`CreditWatch`) differ from what it was last
sent. Bounds: at most ``credit_watchers_max`` watches at once (one more gets 429
``too_many_watchers``); a slow watcher holds at most one unsent snapshot (a newer one replaces it:
only the latest word matters), the rest waits in its socket's write buffer (aiohttp's write
waits for it to drain); a router's count lives while a watch naming it is open. A watcher whose
socket buffer is still full at the next heartbeat (its client reads nothing: stopped, gone
silent) is cut and gives its place back; at the drain, one whose buffer is full is cut at once
(it could not take the last word, and the stop would wait for it).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import orjson
from aiohttp import web

from ._credit import ROUTER_ID, Credit, router_id
from ._responses import error_response

__all__ = ["CreditWatch", "wants_watch"]


def wants_watch(request: web.Request) -> bool:
    """True for a ``GET /v1/credit`` asking for the event stream: its ``Accept`` names
    ``text/event-stream`` (in any case, with any parameters: RFC 9110 §8.3.1) with a weight
    other than ``q=0`` ("not acceptable", §12.4.2). ``*/*`` is the plain JSON answer."""
    if request.method != "GET":
        return False
    accept = request.headers.get("Accept", "")
    if "event-stream" not in accept.lower():  # the common cases, without parsing
        return False
    for media_range in accept.split(","):
        kind, *params = media_range.split(";")
        if kind.strip().lower() != "text/event-stream":
            continue
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    weight = float(value.strip())
                except ValueError:
                    weight = 1.0
                return weight > 0
        return True
    return False


class _Watcher:
    """One open watch: its router id (or None), the latest snapshot not yet written (None: none),
    its wake-up and its connection's transport (None once gone); ``last``: the (free slots, queue
    room, seen) it was last offered."""

    __slots__ = ("router", "pending", "wake", "last", "transport", "was_behind")

    def __init__(self, router: str | None, transport: asyncio.Transport | None) -> None:
        self.router = router
        self.pending: bytes | None = None
        self.wake = asyncio.Event()
        self.last: tuple[int, int, int] | None = None
        self.transport = transport
        #: :meth:`behind` at the last heartbeat
        self.was_behind = False

    def behind(self) -> bool:
        """Its socket's buffer is full and bytes wait in ours: the client has not read for a
        while, and a word written now would reach it after every older one still queued."""
        transport = self.transport
        return transport is not None and not transport.is_closing() and transport.get_write_buffer_size() > 0

    def offer(self, data: bytes) -> None:
        self.pending = data  # replaces an unsent older one: only the latest word matters
        self.wake.set()


def _event(credit: Credit, seen: int | None) -> bytes:
    body = credit.as_json()
    if seen is not None:
        body["seen"] = seen
    return b"data: " + orjson.dumps(body) + b"\n\n"


class CreditWatch:
    """The watches of one edge and what feeds them.

    Args:
        snapshot: the edge's credit now (``Gateway.credit`` at the loop's time; each call is a
            new snapshot with a new ``seq``).
        max_watchers: watches open at most (``credit_watchers_max``); one more gets 429.
        heartbeat_s: seconds between two snapshots sent when nothing changed (``credit_heartbeat_s``).

    A watch that names its router (``x-rxpipe-router-id``) registers it: from then on the edge
    counts that router's calls (those naming it) as it decides each — admitted, refused or answered
    otherwise, :meth:`seen` — and the watch's words carry ``"seen"``: the count when the snapshot
    was taken, so the router knows exactly which of its calls the word's room already counts (the
    acknowledgement of TCP, or Reactive Streams' requested-minus-delivered, across the hop). Its
    answers carry the count as ``x-rxpipe-seen``. A router's count lives while one of its watches
    is open (at most ``max_watchers`` of them).

    :meth:`changed` is cheap when nobody watches (one truth test): the edge calls it on every
    admission. Counters: ``sent`` (events written, all watchers), ``watchers`` (open now).
    """

    def __init__(self, snapshot: Callable[[], Credit], max_watchers: int, heartbeat_s: float) -> None:
        self._snapshot = snapshot
        self.max_watchers = max_watchers
        self.heartbeat_s = heartbeat_s
        self._watchers: set[_Watcher] = set()
        #: calls seen per registered router id
        self._seen: dict[str, int] = {}
        self._scheduled = False
        self._beat: asyncio.TimerHandle | None = None
        self._closing = False
        self.sent = 0

    @property
    def watchers(self) -> int:
        """Watches open now."""
        return len(self._watchers)

    def changed(self) -> None:
        """The edge's room may have changed: a snapshot goes to the watchers at the end of this
        loop pass (one per pass, however many calls)."""
        if self._watchers and not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def seen(self, router: str | None) -> None:
        """The edge decided a call naming ``router`` (``x-rxpipe-router-id``): admitted it,
        refused it or answered it otherwise. Counted for a registered router (its watchers hear
        it at the end of this loop pass); nothing for any other."""
        if router is not None:
            count = self._seen.get(router)
            if count is not None:
                self._seen[router] = count + 1
                self.changed()

    def seen_of(self, router: str | None) -> int | None:
        """The count of ``router``'s calls decided so far, None for a router not registered."""
        return self._seen.get(router) if router is not None else None

    def _flush(self, force: bool = False) -> None:
        self._scheduled = False
        if not self._watchers:
            return
        credit = self._snapshot()
        shared = None
        for watcher in self._watchers:
            seen = self._seen.get(watcher.router) if watcher.router is not None else None
            key = (credit.free_slots, credit.queue_room, -1 if seen is None else seen)
            if key == watcher.last and not force:
                continue
            watcher.last = key
            if seen is None:
                if shared is None:
                    shared = _event(credit, None)
                watcher.offer(shared)
            else:
                watcher.offer(_event(credit, seen))

    def _heartbeat(self) -> None:
        self._beat = None
        if self._watchers:
            self._cut_stuck()
            self._flush(force=True)
            self._arm()

    def _cut_stuck(self) -> None:
        """Cut the watchers :meth:`~_Watcher.behind` at this heartbeat and the one before: their
        client has read nothing for a heartbeat with its socket buffer full (megabytes of old
        words), so it holds a place a router could have; its stream ends as a broken connection."""
        for watcher in self._watchers:
            behind = watcher.behind()
            if behind and watcher.was_behind:
                assert watcher.transport is not None
                watcher.transport.abort()  # its handler leaves the set (ConnectionError, cancel)
            watcher.was_behind = behind

    def _arm(self) -> None:
        if self._beat is None and self._watchers:
            self._beat = asyncio.get_running_loop().call_later(self.heartbeat_s, self._heartbeat)

    def close(self) -> None:
        """End every watch (the edge drains or stops) after one last snapshot, which then says no
        room; a watch opened from now on gets 503. A watcher that is :meth:`~_Watcher.behind`
        cannot take that word (its write would wait for a client that reads nothing, and the stop
        with it): its connection is cut, which says the same to a router (the watch ended)."""
        self._closing = True
        if self._watchers:
            self._flush(force=True)
        for watcher in self._watchers:
            if watcher.behind():
                assert watcher.transport is not None
                watcher.transport.abort()
            watcher.wake.set()
        if self._beat is not None:
            self._beat.cancel()
            self._beat = None

    def reopen(self) -> None:
        """The edge serves again (a Service started after a stop)."""
        self._closing = False

    async def serve(self, request: web.Request, first: Credit,
                    before_send: Callable[[web.StreamResponse], None]) -> web.StreamResponse:
        """Answer a watch: the event stream, its first event ``first`` (the snapshot whose headers
        ``before_send`` puts on the head), until the client leaves or :meth:`close`. 429
        ``too_many_watchers`` (``Retry-After: 1``) past ``max_watchers``; 503 ``draining`` once
        closed (these refusals get their headers from the caller). Raises nothing for a client
        that left (its stream just ends)."""
        if self._closing:
            return error_response(503, "the gateway is draining: no credit to watch", "service_unavailable",
                                  "draining", headers={"Retry-After": "1"})
        if len(self._watchers) >= self.max_watchers:
            return error_response(429, f"at most {self.max_watchers} credit watches at once", "overloaded_error",
                                  "too_many_watchers", headers={"Retry-After": "1"})
        router = router_id(request.headers.get(ROUTER_ID))
        if router is not None:
            self._seen.setdefault(router, 0)
        watcher = _Watcher(router, request.transport)  # type: ignore[arg-type]
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store",
                                               "X-Accel-Buffering": "no"})
        before_send(response)
        self._watchers.add(watcher)
        seen = self.seen_of(router)
        watcher.last = (first.free_slots, first.queue_room, -1 if seen is None else seen)
        watcher.offer(_event(first, seen))
        self._arm()
        try:
            await response.prepare(request)
            while True:
                await watcher.wake.wait()
                watcher.wake.clear()
                data, watcher.pending = watcher.pending, None
                if data is not None:
                    await response.write(data)
                    self.sent += 1
                if self._closing and watcher.pending is None:
                    break
            with contextlib.suppress(ConnectionError):
                await response.write_eof()
        except ConnectionError:  # the client left
            pass
        finally:
            self._watchers.discard(watcher)
            if router is not None and not any(other.router == router for other in self._watchers):
                del self._seen[router]
        return response
