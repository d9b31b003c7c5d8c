"""What :class:`~rxpipe.engines.OpenAIEngine`'s parts share: the state of one admitted request
(``_Call``), the engine's fields and methods the mixins use (``_OpenAIState``, their base), and
argument checks."""

from __future__ import annotations

import asyncio
import random
from typing import TYPE_CHECKING, Any, Mapping

import aiohttp

from ..resilience import CircuitBreaker
from ..serving._answers import AnswerBuilder
from ..serving.engine import Engine
from ..serving.records import Completion
from ._concurrency import ConcurrencyLimit
from ._http1 import BackendResponse, HTTP1Pool

_WAITING, _RUNNING, _DONE = 0, 1, 2


class _Call:
    """The engine's state of one admitted request."""

    __slots__ = ("completion", "request", "chat", "path", "endpoint", "rich", "answer_fields", "answer",
                 "fingerprint", "estimated", "state", "task", "response", "parts", "tokens", "started_s",
                 "first_token_s", "throttles", "trial", "settled", "waiter", "finish_reason", "usage",
                 "not_before", "asked_s", "expires_s", "timed_out", "stall_s")

    def __init__(self, completion: Completion, path: str) -> None:
        self.completion = completion
        request = self.request = completion.request
        #: the backend's route (``/chat/completions``, ``/completions``, ``/embeddings``,
        #: ``/responses``); chat: it is the first; endpoint: the request's (embeddings, responses)
        self.path = path
        self.chat = path == "/chat/completions"
        self.endpoint = request.endpoint
        #: the request asked for log probabilities: every event of its stream may carry them
        self.rich = request.features is not None and "logprobs" in request.features
        #: the answer's message fields and log probabilities, folded from its deltas or taken
        #: whole (None until the first); answer: a whole answer object passed on (embeddings,
        #: Responses); fingerprint: its system_fingerprint
        self.answer_fields: AnswerBuilder | None = None
        self.answer: dict[str, Any] | None = None
        self.fingerprint: str | None = None
        #: its backend sends no usage at all: the completion tokens are the estimate of the
        #: answer, streamed or not (see OpenAIEngine's include_usage)
        self.estimated = False
        self.state = _WAITING
        self.task: asyncio.Task[None] | None = None
        self.response: BackendResponse | None = None
        self.parts: list[str] = []
        self.tokens = 0
        self.started_s: float | None = None
        self.first_token_s: float | None = None
        #: 429/503 answers this request got
        self.throttles = 0
        #: this attempt is the breaker's half-open trial; settled: its verdict was recorded
        self.trial = False
        self.settled = False
        self.waiter: asyncio.Future[None] | None = None
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None
        #: loop time before which a refused (429) call must not be sent again; None: not held
        self.not_before: float | None = None
        #: the wait its latest 429/503 asked for (seconds; None: no usable Retry-After)
        self.asked_s: float | None = None
        #: loop time at which this attempt's total_timeout_s ends (None: no limit); timed_out:
        #: it ended so (its task was cancelled for it)
        self.expires_s: float | None = None
        self.timed_out = False
        #: loop time at which this call, parked without credit, is stalled (None: not parked)
        self.stall_s: float | None = None


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class _OpenAIState(Engine):
    """The fields of OpenAIEngine that its mixins (``_openai_wire``, ``_openai_backoff``) use:
    declared here, set in ``OpenAIEngine.__init__``."""

    base_url: str
    include_usage: bool
    max_answer_bytes: int
    stall_timeout_s: float | None
    breaker: CircuitBreaker
    retry_after_cap_s: float
    retry_after_jitter: float
    throttle_retries: int
    #: a credit backend's 429 fails the call at once, to be routed elsewhere (_openai_credit)
    reroute_throttled: bool
    throttled: int
    pauses: int
    succeeded: int
    _headers: dict[str, str]
    _answer_headers: dict[str, str]
    _stream_options: dict[str, Any]
    _answer_options: dict[str, Any]
    _total_timeout_s: float | None
    _rng: random.Random
    #: the user's aiohttp session, or our own pool (made by bind_loop)
    _session: aiohttp.ClientSession | HTTP1Pool | None
    _closed: bool
    _freed: bool
    _pause: asyncio.TimerHandle | None
    _pause_until: float
    _pause_status: int
    #: the pause is a backend's wait over retry_after_cap_s: unavailable, nominal free slots
    _pause_long: bool
    _streak: int
    _breaker_timer: asyncio.TimerHandle | None
    #: loop time the backend went down (circuit opened) / the engine paused; None: it is not
    _down_since: float | None
    _paused_since: float | None
    _limit: ConcurrencyLimit
    _calls: set[_Call]
    _own_request_id: bool
    #: the backend answered without usage where it had to say it (a non-streamed answer, the
    #: prompt count's probe): it sends none at all, and answers are counted by the estimate
    _usage_never: bool

    if TYPE_CHECKING:  # defined by OpenAIEngine and its mixins
        def _body(self, call: _Call) -> bytes: ...
        async def _count_prompt(self, call: _Call) -> None: ...
        def _breaker_state(self) -> str: ...
        def _start_waiting(self) -> None: ...
        def _release(self, call: _Call, requeue: bool) -> None: ...
        def _end(self, call: _Call, reason: str) -> None: ...
        def _settle(self, call: _Call, ok: bool | None, why: str | None = None) -> None: ...
        @property
        def paused(self) -> bool: ...
        def _throttled(self, call: _Call, status: int, headers: Mapping[str, str]) -> bool: ...
        def _arm_deadline(self, when: float) -> None: ...
        def _observe_credit(self, headers: Mapping[str, str]) -> bool: ...
        def _count_sent(self) -> None: ...
        def _reroute(self, call: _Call, headers: Mapping[str, str]) -> None: ...
        def _fail_held(self, error: BaseException) -> None: ...
        async def _read_json(self, call: _Call, response: BackendResponse) -> Any: ...
        def _take_rich(self, call: _Call, event: dict[str, Any], choice: dict[str, Any], part: Any,
                       text: Any) -> None: ...
        def _take_event(self, call: _Call, event: Any) -> None: ...
        def _whole_answer(self, call: _Call, answer: dict[str, Any], choice: dict[str, Any], text: str) -> None: ...
        async def _read_object(self, call: _Call, response: BackendResponse) -> None: ...
        def _answer_of(self, call: _Call, text: str) -> tuple[int, int, Any, Any, Any, str | None, Any]: ...
