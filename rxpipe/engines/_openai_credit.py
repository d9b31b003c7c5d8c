"""A backend's advertised credit as :class:`~rxpipe.engines.OpenAIEngine`'s demand (DESIGN §8b,
"Credit across the HTTP hop").

An rxpipe gateway (and any backend that speaks the same headers) says in every answer's head how
many requests it would take at once now: ``x-rxpipe-free-slots`` + ``x-rxpipe-queue-room``
(:func:`parse_room`), else llm-d's ``x-llm-d-flow-band-headroom-requests``, and the snapshot's
number (``x-rxpipe-credit-seq``: a word older than the one read last is ignored).
:class:`BackendCredit` keeps the latest such number and the calls admitted since (they spend it):
``left = advertised − admitted since`` (with ``credit_fresh_s``: one call at a time once the word
is older than that), the engine's ``advertised_room``, which caps its ``free_slots`` (the executor's
demand) and which ``ops.balance`` reads as the branch's capacity: ``min(own limit, advertised
credit)``; ``advertised_credit`` (the same without the one-at-a-time) ranks the replicas.

A backend that says no room gets no real request until it says more. Meanwhile the engine probes
``GET /v1/credit`` (one small connection of its own, never one of the calls'): first after
``credit_probe_min_s``, the interval doubling up to ``credit_probe_max_s`` while the answer stays
0; a probe that fails (connection refused, not an rxpipe backend) is retried on the same backoff,
and real requests stay held until a probe or an answer says room (the circuit breaker, fed by the
real calls, decides when a backend is down). A backend that never sent the headers is untouched:
``advertised_room`` None, today's signals (in-flight window, 429 Retry-After, latency).

Anchors: Reactive Streams' ``request(n)`` carried over HTTP (the answer's header is the
subscriber's ``request``); llm-d's draft response-feedback headers (llm-d-router #2485/#2488);
the lesson of an earlier attempt: lifting a zero to one real request after an idle second put the
p99 reaction at ~990 ms, so a zero is lifted only by the backend's own word.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import aiohttp

from ..errors import EngineUnavailableError
from ._http1 import HTTP1Pool
from ._openai_credit_watch import CreditWatcher, room_of
from ._openai_state import _OpenAIState
from ._openai_wire import parse_retry_after

__all__ = ["BackendCredit", "CREDIT_ROOM_HEADERS", "TRANSIT_S", "parse_room", "parse_seq"]

log = logging.getLogger("rxpipe.engine")

#: a call sent this recently (seconds) whose answer has not begun may not be in a backend's
#: advertised room yet: it is subtracted from it (see ``_Credit._unsent``)
TRANSIT_S = 0.01

#: the headers that say a backend's room, in the order they are read
CREDIT_ROOM_HEADERS = ("x-rxpipe-queue-room", "x-llm-d-flow-band-headroom-requests")


def _count(headers: Mapping[str, str], name: str) -> int | None:
    raw = headers.get(name)
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        return None
    return value if value > 0 else 0


SEEN = "x-rxpipe-seen"
ROUTER_ID = "x-rxpipe-router-id"


def parse_seq(headers: Mapping[str, str]) -> int | None:
    """The answer's ``x-rxpipe-credit-seq`` (the backend's snapshot number), or None."""
    return _count(headers, "x-rxpipe-credit-seq")


def parse_room(headers: Mapping[str, str]) -> int | None:
    """The requests a backend's answer says it would take at once now (an int >= 0), or None
    when the answer has no (readable) credit header. An rxpipe gateway's is ``x-rxpipe-free-slots``
    + ``x-rxpipe-queue-room``: its queue asks one more per departure, so while it has free slots
    each admission leaves at once and makes its place again (a burst of free + room is taken);
    the free slots also tell a busier backend from an idler one whose queues are both empty. No
    queue room is 0 whatever the slots (the edge admits nothing then). Else llm-d's
    ``x-llm-d-flow-band-headroom-requests``."""
    queue = _count(headers, "x-rxpipe-queue-room")
    if queue is not None:
        return room_of(queue, _count(headers, "x-rxpipe-free-slots"))
    return _count(headers, "x-llm-d-flow-band-headroom-requests")


class BackendCredit:
    """The latest room a backend advertised and what was admitted since.

    ``seen``: the backend sent the headers at least once (from then on it is a credit backend).
    ``room``: its last advertised room (requests), said at loop time ``at``; ``spent``: calls
    admitted since that answer and not known to it. :meth:`left` is ``max(0, room − spent)``,
    and, with ``fresh_s`` (seconds; None: off), once the word is older than that at most one call
    more than were admitted since (``1 − spent``): another client may have filled the backend
    meanwhile, and one call (or a probe) is enough to learn it — calls crossing on an old word are
    how a second request still reaches a full backend. Off by default: it also holds back the
    replica a prefix affinity or an exact least-loaded split prefers (bench: at most 1 request into
    a full backend per fill with 5 ms, at most 3 without; prefix hit rate 2.85× round-robin's with
    it, against 3× without). None before ``seen``. Counters: ``observed`` (answers that
    carried credit), ``probes`` (``GET /v1/credit`` sent), ``zeros`` (times the room fell to 0).
    """

    __slots__ = ("seen", "room", "spent", "at", "seq", "fresh_s", "observed", "probes", "zeros", "stale")

    def __init__(self, fresh_s: float | None = None) -> None:
        self.fresh_s = fresh_s
        self.seen = False
        self.room = 0
        self.spent = 0
        self.at = 0.0
        self.seq = -1
        self.observed = 0
        #: answers ignored: their snapshot was older than the word already read
        self.stale = 0
        self.probes = 0
        self.zeros = 0

    def left(self, now: float) -> int | None:
        """Calls the backend's word allows now (requests), None before it said any."""
        if not self.seen:
            return None
        left = self.room - self.spent
        fresh = self.fresh_s
        if fresh is not None and now - self.at > fresh and left > 1 - self.spent:
            left = 1 - self.spent
        return left if left > 0 else 0

    def observe(self, room: int, unsent: int, now: float, seq: int | None = None) -> bool:
        """The backend said ``room`` (at loop time ``now``) in its snapshot number ``seq``;
        ``unsent`` calls admitted here have not reached it yet (they will spend it). True when the
        room grew from 0 (demand may resume). A snapshot older than the one read last (answers on
        other connections overtake each other) is ignored, unless the last word is over a second
        old (the backend restarted and counts from 0 again)."""
        if seq is not None:
            if seq <= self.seq and now - self.at < 1.0:
                self.stale += 1
                return False
            self.seq = seq
        was = self.left(now)
        self.seen = True
        self.observed += 1
        self.room = room
        self.spent = unsent
        self.at = now
        left = self.left(now) or 0
        if left == 0 and was != 0:
            self.zeros += 1
        return left > 0 and not was

    def forget(self, now: float) -> None:
        """The backend's word is no longer believed (its watch ended without a last word of no
        room: it went silent, the connection broke): no room until a probe or an answer says
        more. The snapshot number stays (an older word is still ignored)."""
        if self.seen and self.left(now):
            self.zeros += 1
        self.room = 0
        self.spent = 0

    def spend(self, now: float) -> bool:
        """One call admitted at ``now``. True when that spent the last of the room."""
        if not self.seen:
            return False
        self.spent += 1
        if self.left(now) == 0:
            self.zeros += 1
            return True
        return False


class _Credit(_OpenAIState):
    """OpenAIEngine's credit handling (a mixin of OpenAIEngine)."""

    credit: BackendCredit
    rerouted: int
    credit_probe_min_s: float
    credit_probe_max_s: float
    _probe_task: asyncio.Task[None] | None
    _probe_pool: HTTP1Pool | None
    _n_waiting: int
    _dispatched: deque[float]
    credit_watch: bool
    _watcher: CreditWatcher | None
    #: this engine's name toward its backend (``x-rxpipe-router-id``), its HTTP calls sent so far,
    #: and the base of the backend's count of them (None until a watch's first word)
    router_id: str
    _sent: int
    _seen_base: int | None
    _last_sent_s: float

    if TYPE_CHECKING:

        def notify_capacity(self) -> None: ...

    def _now(self) -> float:
        loop = self._loop
        return loop.time() if loop is not None else 0.0

    @property
    def advertised_credit(self) -> int | None:
        """The backend's last word less the calls admitted since (requests), however old the word
        (``ops.balance`` ranks replicas by it); None before the backend said any."""
        credit = self.credit
        if not credit.seen:
            return None
        left = credit.room - credit.spent
        return left if left > 0 else 0

    @property
    def advertised_room(self) -> int | None:
        """Calls the backend would take now by its own word, less the calls admitted since it
        said so (requests; :meth:`BackendCredit.left`); None for a backend that never sent
        credit headers (DESIGN §8b). Read as 0, it starts the probe: the word may have aged to
        0 with nothing sent since."""
        credit = self.credit
        if not credit.seen:
            return None
        left = credit.left(self._now())
        if left == 0 and self._probe_task is None:
            self._start_probe()
        return left

    def _observe_credit(self, headers: Mapping[str, str]) -> bool:
        """Read an answer's credit headers (any status). True when the answer carried credit."""
        room = parse_room(headers)
        if room is None:
            return False
        if self.credit.observe(room, self._unsent(_count(headers, SEEN)), self._now(), parse_seq(headers)):
            self._freed = True  # capacity listeners look again (execute asks, balance routes)
            self._start_waiting()
        elif self.credit.left(self._now()) == 0:
            self._start_probe()
        if self._watcher is None and self.credit_watch:
            self._start_watch()
        return True

    def _start_watch(self) -> None:
        """Open the backend's credit watch (:class:`CreditWatcher`): from now on its words arrive
        as its room changes."""
        loop = self._loop
        if self._closed or loop is None:
            return
        # the calls' own headers (ROUTER_ID names this engine to the backend's count of its calls)
        self._watcher = CreditWatcher(self.base_url, self._on_word, self._on_watch_lost, self._probe_headers(),
                                      self.credit_probe_max_s, 1.0, loop, on_open=self._on_watch_open)
        self._watcher.start()

    def _on_watch_open(self) -> None:
        """A watch stream opened: the backend counts this engine's calls from 0 again (its first
        word fixes the base of the count, :meth:`_unsent`)."""
        self._seen_base = None

    @property
    def watching(self) -> bool:
        """True while the backend's credit watch is open (its words arrive as they change; no
        probe is sent)."""
        watcher = self._watcher
        return watcher is not None and watcher.live

    def _on_word(self, room: int, seq: int | None, seen: int | None) -> None:
        """A word of the watch: the backend's room (requests) in snapshot ``seq``, having decided
        ``seen`` of this engine's calls. When it raises the engine's ``free_slots`` (the room was
        what bound them), the capacity listeners look again (the balance routes there, the
        executor asks)."""
        before = self.free_slots
        self.credit.observe(room, self._unsent(seen), self._now(), seq)
        if self.free_slots > before:  # not when the engine's own window is what binds: no one asks more
            self._freed = True
            self._start_waiting()

    def _on_watch_lost(self) -> None:
        """The watch ended: its last word is not believed any more (a backend stopped by SIGSTOP
        took the calls it allowed and answered none of them until total_timeout_s); the backend
        is probed until the watch is open again or it says room (a live one within
        ``credit_probe_min_s``)."""
        now = self._now()
        self.credit.forget(now)
        if self.credit.left(now) == 0:
            self._start_probe()

    def _reroute(self, call: Any, headers: Mapping[str, str]) -> None:
        """A credit backend refused ``call`` with 429 (full: it said so, and its credit is 0
        now): fail it at once with ``EngineUnavailableError`` so the balance sends it to another
        replica, instead of holding it for the Retry-After here; counted in ``rerouted``. The
        window is not cut: the refusal is explained by the credit, not by an unknown limit."""
        self.rerouted += 1
        error = EngineUnavailableError(
            f"{self.base_url} answered 429 to {call.request.id} (no room by its credit): routed elsewhere"
        )
        error.retry_after = parse_retry_after(headers)  # type: ignore[attr-defined]
        call.completion.fail(error)

    def _unsent(self, seen: int | None = None) -> int:
        """Calls admitted here that the word just read may not have counted: those waiting in the
        engine, those the balance routed here that have not arrived, and those on their way.

        With ``seen`` (the word says how many of this engine's calls the backend had decided, the
        watch's count, DESIGN §8b) the last are counted, not guessed: calls sent less calls seen,
        from the base the stream's first word fixed, and never more than the calls whose answer
        has not begun. A count gone wrong heals: below 0 (a call was on its way when the watch
        opened) it starts again from the word, and so it does when nothing was sent for
        :data:`TRANSIT_S` and every answer has begun (a call that failed before it reached the
        backend was counted sent). Without ``seen``: the calls sent within the last
        :data:`TRANSIT_S` whose own answer has not begun (possibly still on the wire when the
        backend wrote that word) — without that term two answers crossing a new call each reset
        the book and the call after them went into a full backend — which misses a call slower
        than that on the wire."""
        unsent = self._n_waiting
        loop = self._loop
        if loop is None:
            return unsent
        now = loop.time()
        since = now - TRANSIT_S
        dispatched = self._dispatched
        if dispatched:
            while dispatched and dispatched[0] < since:
                dispatched.popleft()
            unsent += len(dispatched)
        no_head = recent = 0
        for call in self._calls:  # at most max_in_flight
            started = call.started_s
            if call.response is None and started is not None:
                no_head += 1
                if started >= since:
                    recent += 1
        if seen is None:
            return unsent + recent
        base = self._seen_base
        if base is None:
            base = self._sent - seen
        on_way = self._sent - base - seen
        if on_way < 0 or (no_head == 0 and self._last_sent_s < since):
            base = self._sent - seen
            on_way = 0
        self._seen_base = base
        return unsent + (on_way if on_way < no_head else no_head)

    def _count_sent(self) -> None:
        """One HTTP call goes to the backend now (the backend's count of them is ``seen``)."""
        self._sent += 1
        loop = self._loop
        if loop is not None:
            self._last_sent_s = loop.time()

    def dispatched(self) -> None:
        """``ops.balance`` routed one request here; it reaches :meth:`start` once the executor
        submits it (perhaps after the balance's pass): the credit is spent now. A request that
        never arrives (its client left while the executor held it) is forgotten after
        :data:`TRANSIT_S` (the next word counts without it)."""
        if not self.credit.seen:
            return
        self._dispatched.append(self._now())
        self._spend_credit()

    def _spend_credit(self) -> None:
        if self.credit.spend(self._now()):
            self._start_probe()

    def _start_probe(self) -> None:
        if self._probe_task is not None or self._closed or self._loop is None or self.watching:
            return  # a live watch says the room as it changes
        self._probe_task = self._loop.create_task(self._probe_loop(), name=f"rxpipe-credit-probe-{self.name}")

    async def _probe_loop(self) -> None:
        """Probe ``GET /v1/credit`` on a doubling backoff until the backend says room."""
        delay = self.credit_probe_min_s
        try:
            while not self._closed and self.credit.left(self._now()) == 0:
                await asyncio.sleep(delay)
                if self._closed or self.credit.left(self._now()) != 0 or self.watching:
                    break  # an answer or the watch said room meanwhile, or the watch is open
                headers = await self._probe_once()
                if headers is not None and self._observe_probe(headers):
                    break
                delay = min(self.credit_probe_max_s, delay * 2)
        finally:
            self._probe_task = None

    def _observe_probe(self, headers: Mapping[str, str]) -> bool:
        room = parse_room(headers)
        if room is None:
            return False
        grew = self.credit.observe(room, self._unsent(), self._now(), parse_seq(headers))
        if grew:
            self._freed = True
            self._start_waiting()
        return grew

    async def _probe_once(self) -> Mapping[str, str] | None:
        """One ``GET /v1/credit``: its headers, or None when it failed (logged at DEBUG)."""
        self.credit.probes += 1
        url = self.base_url + "/credit"
        try:
            session = self._session
            if isinstance(session, aiohttp.ClientSession):
                async with session.get(url, headers=self._probe_headers()) as answer:
                    await answer.read()
                    return answer.headers
            pool = self._probe_pool
            if pool is None:
                assert self._loop is not None
                pool = self._probe_pool = HTTP1Pool(
                    self.base_url, 1, connect_timeout_s=self.credit_probe_max_s * 20, loop=self._loop
                )
            response = await pool.get(url, headers=self._probe_headers(), read_timeout_s=1.0)
            await response.read()
            response.release()
            return response.headers
        except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as error:
            log.debug("engine %s: credit probe failed: %r", self.name, error)
            return None

    def _probe_headers(self) -> dict[str, str]:
        """The headers of a probe (and, with its own ``Accept``, of the watch): those of every
        call (its ``Authorization``, the user's ``headers=``: a proxy in front may want them
        too) but the body's ``Content-Type``; ``Accept: application/json``."""
        return {name: value for name, value in self._answer_headers.items() if name.lower() != "content-type"}

    async def _close_probe(self) -> None:
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            await watcher.close()
        task, self._probe_task = self._probe_task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        pool, self._probe_pool = self._probe_pool, None
        if pool is not None:
            await pool.close()
