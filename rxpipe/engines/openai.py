"""``OpenAIEngine``: a real OpenAI-compatible HTTP backend (vLLM, TGI, llama.cpp server, OpenAI).

One admitted request is one HTTP call run by one task. A streamed request (``request.stream``)
is a streamed call (``"stream": true``, Server-Sent Events): its token deltas flow into the
Completion's token stream as they arrive, under its consumer's credit. A request not streamed to
its client is a non-streamed call (``"stream": false``): one JSON body, read whole and parsed
once, its text one chunk.

State of a request (``_Call.state``): waiting (admitted, not started: the engine is paused or
at ``max_in_flight``) → running (its HTTP call in flight) → done. A call answered 429/503 goes
back to the front of the waiting queue and starts again when the pause ends.

Flow control, from the server back to the pipeline:

- capacity: at most ``window`` HTTP calls at once (:mod:`~rxpipe.engines._concurrency`: a fixed
  ``max_in_flight`` cut down on 429/503 and grown back, or ``"auto"``, an adaptive limit);
  ``free_slots = window - running - waiting`` is the executor's demand.
- credit: a streaming request's HTTP body is read only while its token consumer has credit, so
  a slow client stops our reads, the client's buffer fills, it pauses the socket and TCP flow
  control reaches the server (which stops generating, or buffers, as it sees fit).
- 429 (Retry-After): the window shrinks (once per window) and the refused call is sent again
  after its Retry-After; the other calls go on. Only when every call is held that way is the
  engine *paused* (``free_slots`` 0). 503: every call pauses until the Retry-After ends. After a
  pause the window restarts small and grows by one per success (slow start).
- connection errors, timeouts and 5xx other than 503: failures of the circuit breaker; while it
  is open the engine is unavailable (the gateway answers 503).
"""

from __future__ import annotations

import asyncio
import math
import random
import uuid
from collections import OrderedDict, deque
from typing import Any, Literal, Mapping

import aiohttp

from ..errors import CircuitOpenError, EngineUnavailableError, UnsupportedRequestError
from ..resilience import CircuitBreaker
from ..serving._features import ALL_FEATURES
from ..serving.records import Completion, CompletionRequest, CompletionResult
from ..settings import SettingError
from ..stage import SerialLoop
from ._concurrency import ConcurrencyLimit
from ._http1 import HTTP1Pool
from ._openai_answers import _Answers
from ._openai_backoff import _Backoff
from ._openai_credit import ROUTER_ID, BackendCredit, _Credit
from ._openai_state import _DONE, _RUNNING, _WAITING, _Call, _wake
from ._openai_usage import _UsageProbe
from ._openai_wire import _HTTPCall, parse_retry_after, wire_request_id
from ._settings import OPENAI_SETTINGS

__all__ = ["OpenAIEngine", "parse_retry_after", "wire_request_id", "AUTO_INITIAL_LIMIT", "AUTO_MAX_LIMIT"]

#: ``max_in_flight="auto"``: the window starts here (calls) ...
AUTO_INITIAL_LIMIT = 4
#: ... and never exceeds this (calls; also ``max_num_seqs``, the executor's bound)
AUTO_MAX_LIMIT = 256


def _arg(name: str, value: Any) -> Any:
    """A constructor argument checked by its setting (:data:`~rxpipe.engines._settings.OPENAI_SETTINGS`)."""
    return OPENAI_SETTINGS.check(name, value, f"OpenAIEngine({name}=)")


class OpenAIEngine(_HTTPCall, _Answers, _Backoff, _UsageProbe, _Credit):
    """An OpenAI-compatible server behind the executor (``execute(OpenAIEngine(...))``).

    Args:
        base_url: the server, e.g. ``"http://127.0.0.1:8000"`` or ``"http://127.0.0.1:8000/v1"``
            (``/v1`` is appended when missing).
        model: the model id sent in every call (the server's name for it); also ``engine.model``.
        max_in_flight: HTTP calls in flight at most (``max_num_seqs``; vLLM's ``--max-num-seqs``
            is the natural value), or ``"auto"``: an adaptive limit (Gradient2 on latency per
            output token, plus the 429/503 decrease) starting at ``AUTO_INITIAL_LIMIT`` and
            bounded by ``AUTO_MAX_LIMIT``. Either way a 429 cuts the window (see
            :class:`~rxpipe.engines._concurrency.ConcurrencyLimit`); ``concurrency_limit`` is the
            current window (metric ``rxpipe_engine_concurrency_limit{engine}``).
        api_key: sent as ``Authorization: Bearer <api_key>`` (None: no header).
        chat: True: always ``/v1/chat/completions`` (a prompt becomes one user message); False:
            always ``/v1/completions`` (a request with messages is refused with ValueError);
            None: by request (``messages`` → chat, ``prompt`` → completions).
        connect_timeout_s: seconds to open a connection. read_timeout_s: seconds without a byte
            from the server in a streamed call (as aiohttp's ``sock_read``: restarts with every byte
            received, stops while our receive buffer is full because the consumer has no credit);
            a non-streamed call has none (its server is silent until the whole answer is ready).
            total_timeout_s: seconds for the whole call (time parked without credit included).
            None disables one, explicitly. With a ``session`` of the user's, its own timeouts
            apply instead.
        retry_after_cap_s: the longest wait (seconds) a 429/503 can cause. A backend asking for
            more (``Retry-After: 3600``) fails the call at once with ``EngineUnavailableError``
            whose ``retry_after`` is that honest wait (the gateway's 503 says it, capped by its
            ``retry_after_max_s``), and the engine is paused and unavailable that long: what
            waits in it fails the same way, and ``free_slots`` stays nominal so ``execute``
            answers what is queued behind it at once (``balance`` sends new work elsewhere).
        retry_after_jitter: the wait (of the refused call after a 429; of every call after a
            503) is ``min(cap, r + uniform(0, jitter * r))`` where ``r`` is the server's
            Retry-After (full jitter over ``jitter`` more windows: never earlier than the server
            asked, below the cap). Without a usable Retry-After — absent, unreadable,
            or below 50 ms (``Retry-After: 0`` is no licence to retry at once) — ``r`` is the
            backoff, doubling from 1 s per consecutive 429/503, with the same jitter.
        throttle_retries: how often one request is retried after a 429/503 (default 5); the next
            such answer fails it with ``EngineUnavailableError`` (``retry_after`` attribute set).
            A request past its ``deadline_s`` when the pause ends finishes ``"deadline"`` instead.
        breaker: the :class:`~rxpipe.CircuitBreaker` (default ``CircuitBreaker(5, 5.0)``: five
            consecutive failures open it for 5 s). May be shared with other engines or stages.
        stall_timeout_s: a streaming request whose consumer gives no credit for this long
            finishes ``"stalled"`` and its HTTP call is closed (None: never).
        include_usage: for streamed calls, ask for ``stream_options.include_usage`` (exact token
            counts in the last chunk; vLLM, SGLang and OpenAI send them). A stream that ends
            without usage (llama-cpp-python's server sends none) is counted as its non-streamed
            answer would be: each streamed chunk of a choice counts one token, an empty-text one
            too (llama.cpp sends those for the bytes of a character split across tokens), except
            the closing chunk that carries ``finish_reason`` with no text and a chat stream's
            opening role; its prompt tokens are the backend's, asked once per distinct prompt
            with a non-streamed one-token call of the same prompt (``usage_probes`` counts them;
            ``usage_cache_entries`` counts are kept; :mod:`rxpipe.engines._openai_usage`). So
            the same request has the same usage streamed or not. A non-streamed answer carries
            ``usage`` anyway; without it its text counts 1 token per 4 UTF-8 bytes and so does
            its prompt (the estimate, :func:`~rxpipe.engines.estimate_tokens`).
        max_answer_bytes: the largest non-streamed answer body read, and the longest line of
            an SSE answer (bytes, default 16 MiB); a bigger one fails the request with
            ``EngineError`` (a backend gone wrong must not fill the gateway's memory).
        headers: extra HTTP headers for every call (they win over the engine's own, including
            ``X-Request-Id``). session: an ``aiohttp.ClientSession`` to use (proxies, custom
            TLS, tracing; not closed by :meth:`aclose`); default: our own keep-alive HTTP/1.1
            pool (:class:`~rxpipe.engines._http1.HTTP1Pool`, httptools' C parser: ~85 µs less
            CPU per call than aiohttp's), bounded to ``max_in_flight`` connections, sending no
            ``Accept-Encoding``. rng: the jitter's ``random.Random``.
        credit_probe_min_s, credit_probe_max_s: a backend that advertises credit (DESIGN §8b) and
            says no room is probed with ``GET /v1/credit`` first after ``credit_probe_min_s``
            (default 0.002), the interval doubling up to ``credit_probe_max_s`` (default 0.05)
            while it says 0 (seconds, ``0 < min <= max``).
        credit_fresh_s: None (default): a backend's word holds until its next one; seconds: a
            word older than that allows one call at a time until the backend speaks again (that
            call, or a probe, brings the next word): stricter against a backend filled by others,
            at the cost of the replica a prefix affinity prefers (see
            :class:`~rxpipe.engines._openai_credit.BackendCredit`).
        credit_watch: True (default): once a backend's answer carried credit, keep its
            ``GET /v1/credit`` event stream open (one connection of its own): its room arrives as
            it changes, no probe is sent while it is open (:mod:`~rxpipe.engines._openai_credit_watch`);
            False: answers and probes only.
        reroute_throttled: a 429 from a backend that advertises credit fails the call at once
            with ``EngineUnavailableError`` (``retry_after`` set) instead of holding it for its
            Retry-After, so ``balance(retry_unstarted=True)`` sends it to another replica
            (``rerouted`` counts them); default False (one engine: the call waits, as before).

    Credit (DESIGN §8b, :mod:`~rxpipe.engines._openai_credit`): when a backend's answers carry
    ``x-rxpipe-queue-room`` (+ ``x-rxpipe-free-slots``; or llm-d's
    ``x-llm-d-flow-band-headroom-requests``), that room, less the calls admitted since (words
    ordered by ``x-rxpipe-credit-seq``; with ``credit_fresh_s``, one at a time on an old one), is its
    demand: ``advertised_room`` caps ``free_slots`` and ``ops.balance``'s share, and a backend
    that says 0 gets no real request until an answer or a ``GET /v1/credit`` probe says more. A
    backend without the headers keeps the signals below (``advertised_room`` None).

    Capacity: ``free_slots = min(window − running − ready, max_in_flight − running − ready −
    held for a Retry-After)``; 0 while paused (all demand stops) and while the breaker's
    half-open trial runs (half-open offers exactly one slot). A 429 holds only the refused call
    for its Retry-After (the window shrinks once per window of calls; the others go on); the
    engine is *paused* only when every admitted call is so held, or after a 503. ``available`` is False when closed,
    while the breaker is open, and during a pause caused by a 503 (a 429 pause keeps it True: the
    server is up, only busy); ``retry_after_s`` tells how long that lasts. While the breaker is
    open ``free_slots`` stays nominal, as for any engine that is down: ``execute`` then answers
    queued requests that have a reply slot with ``EngineUnavailableError`` (the gateway's 503)
    instead of leaving them queued, and holds the others until the engine is back.

    Results: token counts from the server's ``usage`` when it sends them. ``ttft_s`` of a
    request not streamed to its client is its ``e2e_s`` (its client gets every token at once,
    with the answer); of a streamed one, the time its first token arrived.

    The whole OpenAI surface passes through (``features = ALL_FEATURES``: the backend decides,
    and its 4xx reaches the client): the request's fields as the client sent them (messages
    whole, tools, content parts, a vendor's fields; ``max_completion_tokens`` under that name);
    the answer's tool calls, function call, refusal, reasoning, log probabilities, finish reason,
    usage object and system fingerprint as the backend sent them (``CompletionResult``'s
    ``message``, ``logprobs``, ``usage``, ``system_fingerprint``). Streamed, every event beyond a
    plain token of text (a ``tool_calls`` fragment, a reasoning delta, a token with log
    probabilities) is one chunk of its own, in order (``TokenChunk.delta``, ``.logprobs``), and
    the result has the whole message folded from them (:mod:`~rxpipe.engines._openai_answers`).
    ``POST /v1/embeddings`` and ``/v1/responses`` requests (``request.endpoint``) are sent to the
    backend's same route with every field as sent; their answer object is the result's
    ``answer`` (a streamed Response: each event one chunk, as it came).

    Errors (``await completion.result`` raises, the token stream signals): connection failures,
    no answer within ``total_timeout_s`` and a 429/503 past ``throttle_retries`` →
    ``EngineUnavailableError`` (the gateway's 503 with Retry-After); other non-2xx answers, a
    broken or malformed stream or body, a 200 that is not an OpenAI answer (an HTML page, a JSON
    body without ``choices``), an answer not finished within ``total_timeout_s`` →
    :class:`~rxpipe.engines.BackendError` (an ``EngineError``) carrying what the client gets: a
    backend's 4xx keeps its status and OpenAI error message (addresses removed), 401/403 and
    5xx become 502, a timeout 504 (the table: :mod:`rxpipe.engines._openai_errors`). A 4xx other
    than 429 is the request's fault: it does not count against the breaker.

    Cancelling a Completion (or its token stream) closes its HTTP connection at once, so the
    server sees the disconnect and frees its slot (vLLM aborts the sequence); the engine's slot
    is free one loop iteration later. Every request carries ``X-Request-Id:
    wire_request_id(request.id)`` (a UUID4: the gateway's id digits themselves, else a digest of
    the id) unless ``headers`` sets one.

    Tasks: one per running call, none while idle. Timers: the pause, the breaker's half-open
    wake-up, and one deadline timer for ``total_timeout_s`` (armed for the earliest deadline of
    the running calls, never one per call; a call past it fails with ``EngineError`` and its
    connection is closed). Call :meth:`aclose` when done (it closes the session it made).
    """

    #: every feature: the backend decides what it serves (its 400 reaches the client)
    features = ALL_FEATURES

    def __init__(self, base_url: str, model: str, max_in_flight: int | Literal["auto"], api_key: str | None = None, *,
                 chat: bool | None = None, connect_timeout_s: float | None = 5.0,
                 read_timeout_s: float | None = 60.0, total_timeout_s: float | None = 600.0,
                 retry_after_cap_s: float = 30.0, retry_after_jitter: float = 1.0, throttle_retries: int = 5,
                 breaker: CircuitBreaker | None = None, stall_timeout_s: float | None = 10.0,
                 include_usage: bool = True, max_answer_bytes: int = 16 * 2**20,
                 headers: Mapping[str, str] | None = None,
                 session: aiohttp.ClientSession | None = None, rng: random.Random | None = None,
                 credit_probe_min_s: float = 0.002, credit_probe_max_s: float = 0.05,
                 credit_fresh_s: float | None = None, reroute_throttled: bool = False,
                 credit_watch: bool = True) -> None:
        max_in_flight = _arg("max_in_flight", max_in_flight)
        if max_in_flight == "auto":
            limit = ConcurrencyLimit(AUTO_INITIAL_LIMIT, AUTO_MAX_LIMIT, adaptive=True)
            max_in_flight = AUTO_MAX_LIMIT
        else:
            limit = ConcurrencyLimit(max_in_flight, max_in_flight)
        super().__init__(model=model, max_num_seqs=max_in_flight)
        self._limit = limit
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise SettingError(f"OpenAIEngine(base_url=) must be an http(s) URL, got {base_url!r} "
                               f"({type(base_url).__name__})")
        root = base_url.rstrip("/")
        if not root.endswith("/v1"):
            root += "/v1"
        self.base_url = root
        self.chat = chat
        self.timeout = aiohttp.ClientTimeout(
            total=_arg("total_timeout_s", total_timeout_s),
            sock_connect=_arg("connect_timeout_s", connect_timeout_s),
            sock_read=_arg("read_timeout_s", read_timeout_s))

        self.retry_after_cap_s = float(_arg("retry_after_cap_s", retry_after_cap_s))
        self.retry_after_jitter = float(_arg("retry_after_jitter", retry_after_jitter))
        self.throttle_retries = _arg("throttle_retries", throttle_retries)
        self.breaker = breaker if breaker is not None else CircuitBreaker(5, 5.0)
        stall_timeout_s = _arg("stall_timeout_s", stall_timeout_s)
        self.stall_timeout_s = None if stall_timeout_s is None else float(stall_timeout_s)
        self.include_usage = _arg("include_usage", include_usage)
        self.max_answer_bytes = _arg("max_answer_bytes", max_answer_bytes)
        self.credit_probe_min_s = float(_arg("credit_probe_min_s", credit_probe_min_s))
        self.credit_probe_max_s = float(_arg("credit_probe_max_s", credit_probe_max_s))
        if self.credit_probe_max_s < self.credit_probe_min_s:
            raise SettingError(f"OpenAIEngine(credit_probe_max_s={credit_probe_max_s!r}) must be >= "
                               f"credit_probe_min_s={credit_probe_min_s!r} (seconds)")
        self.reroute_throttled = _arg("reroute_throttled", reroute_throttled)
        #: the backend's advertised room (DESIGN §8b); its probe task and connection
        credit_fresh_s = _arg("credit_fresh_s", credit_fresh_s)
        self.credit = BackendCredit(None if credit_fresh_s is None else float(credit_fresh_s))
        self._probe_task = None
        self._probe_pool = None
        self.credit_watch = _arg("credit_watch", credit_watch)
        self._watcher = None
        self.router_id = uuid.uuid4().hex
        self._sent = 0
        self._seen_base = None
        self._last_sent_s = 0.0
        #: loop times the balance routed a request here that has not reached start() yet
        self._dispatched: deque[float] = deque()
        #: 429'd calls of a credit backend failed at once to be routed elsewhere (reroute_throttled)
        self.rerouted = 0
        own = {"Content-Type": "application/json", ROUTER_ID: self.router_id}
        if api_key is not None:
            own["Authorization"] = f"Bearer {api_key}"
        extra = dict(headers) if headers else {}
        # built once: per call only X-Request-Id is added (the user's headers win over ours)
        self._headers = {"Accept": "text/event-stream", **own, **extra}
        self._answer_headers = {"Accept": "application/json", **own, **extra}
        #: the user's headers name the request id themselves: we add none
        self._own_request_id = not any(k.lower() == "x-request-id" for k in (headers or {}))
        self._rng = rng if rng is not None else random.Random()
        self._session = session
        self._owns_session = session is None
        # session.post's options. Our own session's calls get our timeouts (a user's session keeps
        # its own); a non-streamed call's server says nothing until its answer is whole, so its
        # silence is no read timeout: total_timeout_s bounds it.
        # total_timeout_s is the engine's own deadline (one timer for all calls, not aiohttp's
        # timer per call): see _expire.
        self._stream_options: dict[str, Any] = {"allow_redirects": False}
        self._answer_options: dict[str, Any] = {"allow_redirects": False}
        self._total_timeout_s: float | None = None
        if session is None:
            # our own pool (rxpipe.engines._http1, made by bind_loop): connect_timeout_s is the
            # pool's, read_timeout_s each streamed call's, and no redirects are followed
            self._total_timeout_s = self.timeout.total
            self._stream_options = {"read_timeout_s": self.timeout.sock_read}
            self._answer_options = {}
        self._expiry: asyncio.TimerHandle | None = None
        self._expiry_at = 0.0
        self._closed = False
        self._waiting: deque[_Call] = deque()
        self._calls: set[_Call] = set()  # running
        self._n_waiting = 0
        #: calls refused with 429, each held until its Retry-After (not in ``_waiting``)
        self._delayed: dict[_Call, asyncio.TimerHandle] = {}
        self._start_loop = SerialLoop(self._start_some)
        self._freed = False  # a slot was freed while starting: notify capacity listeners after
        self._trial: _Call | None = None
        self._pause: asyncio.TimerHandle | None = None
        self._pause_until = 0.0
        self._pause_status = 429
        self._pause_long = False
        self._streak = 0  # consecutive 429/503 answers (backoff without Retry-After)
        self._breaker_timer: asyncio.TimerHandle | None = None
        self._down_since: float | None = None
        self._paused_since: float | None = None
        self._prompt_counts = OrderedDict()
        self.usage_missing = self.usage_probes = 0
        self._usage_never = False
        #: 429/503 answers received; pauses started; calls that completed with a 2xx stream
        self.throttled = 0
        self.pauses = 0
        self.succeeded = 0

    # -- Engine ----------------------------------------------------------------------------------
    @property
    def running(self) -> int:
        return len(self._calls)

    @property
    def waiting(self) -> int:
        return self._n_waiting + len(self._delayed)

    @property
    def concurrency_limit(self) -> int:
        """HTTP calls that may be in flight now (the window; see ``max_in_flight``)."""
        return self._limit.window

    @property
    def limiter(self) -> ConcurrencyLimit:
        """The window's state (limit, decreases, samples), for tests and tooling."""
        return self._limit

    def _breaker_state(self) -> str:
        try:
            return self.breaker.state
        except RuntimeError:  # no running loop: nothing can have been called on it yet
            return "closed"

    @property
    def available(self) -> bool:
        if self._closed or (self._pause is not None and (self._pause_status == 503 or self._pause_long)):
            return False
        # polled several times per request: a closed circuit is read without a clock
        return self.breaker.closed or self._breaker_state() != "open"

    @property
    def paused(self) -> bool:
        """True while a 503 pause holds all demand, or every admitted call waits for a 429's
        Retry-After (none running, none ready)."""
        return self._pause is not None or (bool(self._delayed) and not self._calls and not self._n_waiting)

    @property
    def free_slots(self) -> int:
        free = self._own_free_slots()
        room = self.advertised_room
        if room is None:
            return free  # no advertised credit
        # what the balance routed here and the executor holds is spent already, and is what
        # these slots are for (the executor subtracts what it holds)
        room += len(self._dispatched)
        if room >= free or not self.available:
            return free  # or down: nominal, as below
        return room

    def _own_free_slots(self) -> int:
        """The free slots by the engine's own signals (window, pause, breaker)."""
        if self._pause is None and not self._delayed and not self._closed and self.breaker.closed:
            # the usual state (no pause, no 429 held, circuit closed), polled several times per
            # request: the general rule below with its terms known
            limit = self._limit.limit  # the window is max(1, int(limit)), without the calls
            window = int(limit) if limit >= 1.0 else 1
            if window > self.max_num_seqs:
                window = self.max_num_seqs
            free = window - len(self._calls) - self._n_waiting
            return free if free > 0 else 0
        if self._closed or (self.paused and not self._pause_long):
            return 0
        held = len(self._calls) + self._n_waiting
        # the window bounds the calls running and ready; max_in_flight also bounds those waiting
        # for a 429's Retry-After, so what the engine holds stays bounded
        free = min(self._limit.window - held, self.max_num_seqs - held - len(self._delayed))
        if self._breaker_state() == "half_open":
            # one trial call: nothing more until it has closed the circuit
            return 1 if free > 0 and self._trial is None and not self._n_waiting else 0
        return free if free > 0 else 0

    @property
    def retry_after_s(self) -> float:
        """Seconds until the engine takes work again (pause or open breaker); 0.0 when it does."""
        wait = 0.0
        if self._pause is not None and self._loop is not None:
            wait = max(0.0, self._pause_until - self._loop.time())
        elif self.paused and self._loop is not None:
            wait = max(0.0, min(c.not_before or 0.0 for c in self._delayed) - self._loop.time())
        if self._breaker_state() == "open":
            wait = max(wait, self.breaker.retry_after or 0.0)
        return wait

    def prepare(self, request: CompletionRequest) -> str:
        """The backend route of ``request``: ``/embeddings`` and ``/responses`` for those
        requests; ``/chat/completions`` or ``/completions`` for a completion (see ``chat``).
        Raises :class:`~rxpipe.errors.UnsupportedRequestError` (a ValueError; the gateway's 400)
        for a completion this engine cannot map: neither prompt nor messages, or messages with
        ``chat=False``."""
        if request.endpoint is not None:
            return "/" + request.endpoint
        if request.messages is None and request.prompt is None:
            raise UnsupportedRequestError(f"request {request.id} has neither prompt nor messages",
                                          client_message="the request has neither a prompt nor messages")
        chat = self.chat if self.chat is not None else request.messages is not None
        if not chat and request.prompt is None:
            raise UnsupportedRequestError(
                f"request {request.id} has chat messages but OpenAIEngine({self.base_url!r}, chat=False) "
                "serves /v1/completions",
                client_message="this model is served by a completions-only backend: send a prompt to "
                               "/v1/completions, not chat messages")
        return "/chat/completions" if chat else "/completions"

    def start(self, completion: Completion, now_s: float) -> None:
        """Queue the admitted ``completion``'s HTTP call; it starts at once when a slot is free
        (see :class:`OpenAIEngine`)."""
        call = _Call(completion, completion.engine_state)  # engine_state: prepare's route
        completion.engine_state = call
        if self._dispatched:
            self._dispatched.popleft()  # spent when the balance routed it here
        else:
            self._spend_credit()
        self._waiting.append(call)
        self._n_waiting += 1
        self._start_waiting()

    async def aclose(self) -> None:
        """Close: ``available`` turns False, unfinished completions end ``"cancelled"`` (their HTTP
        calls closed), timers stop, and the session is closed if the engine made it."""
        if self._closed:
            return
        self._closed = True
        await self._close_probe()
        for handle in (self._pause, self._breaker_timer, self._expiry):
            if handle is not None:
                handle.cancel()
        self._pause = self._breaker_timer = self._expiry = None
        for call, handle in list(self._delayed.items()):
            handle.cancel()
            call.state = _DONE
            self._end(call, "cancelled")
        self._delayed.clear()
        while self._waiting:
            call = self._waiting.popleft()
            if call.state == _WAITING:
                call.state = _DONE
                self._n_waiting -= 1
                self._end(call, "cancelled")
        tasks = []
        for call in list(self._calls):
            self._close_response(call)
            if call.task is not None:
                tasks.append(call.task)
                self._cancel_task(call)
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        session = self._session
        if session is not None and self._owns_session:
            self._session = None
            await session.close()

    # -- Completion hooks ------------------------------------------------------------------------
    def cancel_completion(self, completion: Completion) -> None:
        call: _Call | None = completion.engine_state
        if call is None or call.state == _DONE:
            return
        if call.state == _WAITING:
            call.state = _DONE  # removed lazily from the deque
            handle = self._delayed.pop(call, None)
            if handle is not None:
                handle.cancel()
            else:
                self._n_waiting -= 1
            self._end(call, "cancelled")
            self._freed = True
            self._start_waiting()
            return
        # Close the connection now: the server sees the disconnect without waiting for the task.
        self._close_response(call)
        # From inside the task (it is pushing a chunk to the consumer who cancelled) nothing is
        # cancelled: it stops after.
        self._cancel_task(call)

    def credit_granted(self, completion: Completion) -> None:
        call: _Call | None = completion.engine_state
        if call is not None and call.waiter is not None:
            _wake(call.waiter)

    # -- starting calls --------------------------------------------------------------------------
    def bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Bind to the first loop for good (the HTTP session belongs to it): another one is
        refused with RuntimeError. Opens our own pool (``HTTP1Pool``), bounded to ``max_in_flight``
        connections, unless the user gave one."""
        if self._loop is not None:
            raise RuntimeError("this OpenAIEngine is bound to another event loop")
        if self._session is None:
            self._session = HTTP1Pool(self.base_url, self.max_num_seqs, connect_timeout_s=self.timeout.sock_connect,
                                      loop=loop)

    def _start_waiting(self) -> None:
        """Start waiting calls while slots are free (re-entrant calls are folded into the running one)."""
        outermost = not self._start_loop.running
        self._start_loop()
        if outermost and self._freed:
            self._freed = False
            self.notify_capacity()

    def _start_some(self) -> None:
        waiting = self._waiting
        loop = self._loop
        assert loop is not None
        window = self._limit.window  # starting calls does not move it
        while waiting and len(self._calls) < window and self._pause is None and not self._closed:
            call = waiting[0]
            if call.state != _WAITING:
                waiting.popleft()
                continue
            deadline = call.request.deadline_s
            if deadline is not None and loop.time() > deadline:
                waiting.popleft()
                call.state = _DONE
                self._n_waiting -= 1
                self._end(call, "deadline")
                self._freed = True
                continue
            try:
                trial = self.breaker.acquire()
            except CircuitOpenError as error:
                if error.retry_after is None:
                    return  # the half-open trial is in flight: its outcome decides for the rest
                self._fail_waiting(EngineUnavailableError(
                    f"engine {self.model!r}: circuit open after connection failures to {self.base_url}"))
                self._arm_breaker_timer(error.retry_after)
                return
            waiting.popleft()
            self._n_waiting -= 1
            call.state = _RUNNING
            call.trial = trial
            call.settled = False
            if trial:
                self._trial = call
            call.started_s = now = loop.time()
            total = self._total_timeout_s
            if total is not None:
                call.expires_s = now + total
                self._arm_deadline(call.expires_s)  # mostly armed already, for an earlier one
            self._calls.add(call)
            call.task = loop.create_task(self._run(call), name=f"rxpipe-openai-{call.request.id}")

    def _arm_deadline(self, when: float) -> None:
        """Have the deadline timer wake no later than ``when`` (loop time)."""
        if self._closed or self._loop is None:
            return
        if self._expiry is not None:
            if self._expiry_at <= when:
                return
            self._expiry.cancel()
        self._expiry_at = when
        self._expiry = self._loop.call_at(when, self._expire)

    def _expire(self) -> None:
        """The deadline timer: end the calls past their total_timeout_s, wake those parked past
        stall_timeout_s, then sleep until the earliest deadline left. One timer for the engine,
        never one per call or per credit wait: it is armed for a deadline earlier than the one it
        waits for, and left alone when calls finish or get credit (a stale wake-up scans the at
        most ``max_in_flight`` running calls and sleeps again); with no call overrunning, it wakes
        about once per ``total_timeout_s`` (once per ``stall_timeout_s`` while calls park)."""
        self._expiry = None
        loop = self._loop
        if loop is None or self._closed:
            return
        now = loop.time()
        earliest = math.inf
        for call in list(self._calls):
            expires = call.expires_s
            if expires is not None and not call.timed_out:
                if expires <= now:
                    call.timed_out = True
                    self._cancel_task(call)  # _run fails it with EngineError; the connection is closed
                    continue
                earliest = min(earliest, expires)
            stall = call.stall_s
            if stall is not None:
                if stall <= now:
                    if call.waiter is not None:
                        _wake(call.waiter)  # _await_credit sees the deadline passed: "stalled"
                else:
                    earliest = min(earliest, stall)
        if earliest < math.inf:
            self._expiry_at = earliest
            self._expiry = loop.call_at(earliest, self._expire)

    def _fail_waiting(self, error: BaseException) -> None:
        waiting = self._waiting
        while waiting:
            call = waiting.popleft()
            if call.state == _WAITING:
                call.state = _DONE
                self._n_waiting -= 1
                call.completion.fail(error)
                self._freed = True

    def _fail_held(self, error: BaseException) -> None:
        """Fail every admitted call not running: those waiting for a slot and those held for a
        429's Retry-After."""
        self._fail_waiting(error)
        for call, handle in list(self._delayed.items()):
            handle.cancel()
            call.state = _DONE
            call.completion.fail(error)
        if self._delayed:
            self._delayed.clear()
            self._freed = True

    def _release(self, call: _Call, requeue: bool) -> None:
        """The call's task ends: free its slot, or put it back at the head of the queue."""
        self._calls.discard(call)
        call.task = None
        was_trial = self._trial is call
        if was_trial:
            self._trial = None
        completion = call.completion
        if requeue and not completion.done:
            if completion.cancel_requested or self._closed:
                call.state = _DONE
                self._end(call, "cancelled")
            else:
                call.state = _WAITING
                call.parts.clear()
                call.tokens = 0
                loop = self._loop
                if call.not_before is not None and loop is not None:
                    # a 429: this call alone waits for its Retry-After
                    self._delayed[call] = loop.call_at(call.not_before, self._undelay, call)
                    if self.paused:  # every call is held: restart in slow start
                        self.pauses += 1
                        self._limit.on_pause()
                        self._log_paused(429, self.retry_after_s, call.asked_s)
                    self._freed = was_trial
                    self._start_waiting()
                    return
                self._waiting.appendleft(call)
                self._n_waiting += 1
                self._freed = was_trial  # the breaker closed: more than one slot now
                self._start_waiting()
                return
        call.state = _DONE
        # no cycle Completion <-> _Call: the call's state (parts, usage, response) is freed by
        # reference counting when its task ends, not left for the cyclic GC
        completion.engine_state = None
        if self._closed:
            return
        self._freed = True
        self._start_waiting()

    def _undelay(self, call: _Call) -> None:
        """A 429-refused call's Retry-After passed: it goes first in line again."""
        if self._delayed.pop(call, None) is None or call.state != _WAITING:
            return
        call.not_before = None
        self._waiting.appendleft(call)
        self._n_waiting += 1
        if not self.paused:
            self._log_resumed()
        self._freed = True
        self._start_waiting()

    def _end(self, call: _Call, reason: str) -> None:
        """Finish the completion with ``reason`` (the slot is accounted for by the caller)."""
        completion = call.completion
        if completion.done:
            return
        loop = self._loop
        assert loop is not None
        request = call.request
        now = loop.time()
        arrival = request.arrival_s if request.arrival_s is not None else now
        text = "".join(call.parts)
        prompt_tokens, completion_tokens, message, logprobs, usage, fingerprint, answer = self._answer_of(call, text)
        started = call.started_s
        first = call.first_token_s
        if first is not None and not request.stream:
            first = now  # not streamed: its client gets the first token with the whole answer
        completion.finish(CompletionResult(
            text, reason, prompt_tokens, completion_tokens,
            (now if started is None else started) - arrival, None if first is None else first - arrival,
            now - arrival, message, logprobs, usage, fingerprint, answer))

    @property
    def unavailable_reason(self) -> str:
        if self._closed:
            return "closed"
        if self._pause is not None and self._pause_long:
            return f"paused for {self.retry_after_s:.3f} s (its backend asked for a wait over retry_after_cap_s)"
        if self._pause is not None and self._pause_status == 503:
            return f"answering 503 (paused for {self.retry_after_s:.3f} s)"
        return f"down: circuit open after connection failures to {self.base_url}"

    def __repr__(self) -> str:
        return (f"<OpenAIEngine {self.model} at {self.base_url} running={len(self._calls)} "
                f"waiting={self._n_waiting} max_in_flight={self.max_num_seqs}>")
