"""What :class:`~rxpipe.engines.SimulatedEngine`'s two service modes share.

The state of one sequence (``_Seq``), the engine's fields and methods the modes use
(``_SimState``, the base of both mode mixins), the credit watchdog, and the records, the
vocabulary and the argument checks.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from ..serving.engine import Engine
from ..serving.records import Completion
from ._sim_prefix import PrefixCache

__all__ = ["StepRecord", "LatencyModel"]

#: ``latency(rng, output_tokens) -> (first_token_s, per_token_s)`` of one sequence (seconds).
LatencyModel = Callable[[random.Random, int], "tuple[float, float]"]

_WAITING, _RUNNING, _DONE = 0, 1, 2

_WORDS = (
    "the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on",
    "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an", "had", "they",
    "you", "were", "their", "one", "all", "we", "can", "her", "has", "there", "been", "if", "more", "when",
    "will", "would", "who", "so", "no", "stream", "token", "demand", "credit", "queue", "batch", "model",
    "engine", "request", "slot", "step", "prefill", "decode", "latency", "throughput", "backpressure",
    "river", "stone", "light", "quiet", "north", "garden", "window", "paper", "signal", "morning",
    "simple", "careful", "bright", "slow", "early", "small", "open", "clear", "warm", "blue",
)


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One engine step, as kept in ``SimulatedEngine.step_log``.

    index: step number (1, 2, ...). start_s / duration_s: loop-clock seconds. num_seqs:
    sequences in the batch; prefill_tokens / decode_tokens: tokens of each kind in it (their sum
    is ``batch_tokens`` <= max_num_batched_tokens); decode_seqs: sequences decoding. running /
    waiting: the engine's counts when the step started. request_ids: the batch, in order.
    cached_tokens: prompt tokens of the sequences started in this step found in the prefix
    cache (not prefilled, not in ``prefill_tokens``).
    """

    index: int
    start_s: float
    duration_s: float
    num_seqs: int
    prefill_tokens: int
    decode_tokens: int
    decode_seqs: int
    running: int
    waiting: int
    request_ids: tuple[str, ...]
    cached_tokens: int = 0

    @property
    def batch_tokens(self) -> int:
        return self.prefill_tokens + self.decode_tokens


class _Seq:
    """The engine's state of one sequence (a request in flight)."""

    __slots__ = ("completion", "request", "no", "state", "prompt_tokens", "max_out", "capped", "offset",
                 "prefilled", "generated", "arrival_s", "started_s", "first_token_s", "parked_at",
                 "stall_s", "stall_until", "fail_at", "in_step", "step_prefill", "step_tokens",
                 "needs_credit", "awaiting_credit", "per_token_s", "blocks", "pinned", "words")

    def __init__(self, completion: Completion, no: int, prompt_tokens: int, max_out: int, capped: bool,
                 offset: int, arrival_s: float) -> None:
        self.completion = completion
        self.request = completion.request
        self.no = no
        self.state = _WAITING
        self.prompt_tokens = prompt_tokens
        self.max_out = max_out
        self.capped = capped
        self.offset = offset
        self.prefilled = 0
        self.generated = 0
        self.arrival_s = arrival_s
        self.started_s: float | None = None
        self.first_token_s: float | None = None
        #: loop time when its consumer's credit ran out (None: it has credit or needs none)
        self.parked_at: float | None = None
        self.stall_s = 0.0
        self.stall_until = 0.0
        self.fail_at: int | None = None
        self.in_step = False
        self.step_prefill = 0
        self.step_tokens = 0
        self.needs_credit = self.request.stream
        self.awaiting_credit = False
        self.per_token_s = 0.0
        #: its prompt's full blocks (prefix caching), and how many of the first ones it pins
        self.blocks: tuple[int, ...] = ()
        self.pinned = 0
        #: a greedy (temperature 0) sequence's tokens, made in advance; None: sampled
        self.words: list[str] | None = None

    def __lt__(self, other: _Seq) -> bool:  # heap ties (never reached: entries carry ``no``)
        return self.no < other.no


class _SimState(Engine):
    """The fields of SimulatedEngine that its modes (``_sim_batching``, ``_sim_requests``) and
    the watchdog use: declared here, set in ``SimulatedEngine.__init__``."""

    max_num_batched_tokens: int
    tokens_per_step: int
    step_overhead_s: float
    prefill_s_per_token: float
    decode_s_per_seq: float
    stall_timeout_s: float | None
    error_rate: float
    latency: LatencyModel | None
    prefix_cache: PrefixCache | None
    block_tokens: int
    _latency_rng: random.Random
    step_log: deque[StepRecord]
    steps: int
    tokens_generated: int
    _waiting: deque[_Seq]
    _running: list[_Seq]
    _running_dirty: bool
    _n_running: int
    _n_waiting: int
    _timer: asyncio.Handle | None
    _timer_when: float
    _start_queued: bool
    _stepping: bool
    _step_end: float
    _step_due: float | None
    _batch: list[_Seq]
    _events: list[tuple[float, int, _Seq]]
    _watchdog: asyncio.TimerHandle | None
    _watchdog_when: float
    _busy: bool

    if TYPE_CHECKING:  # defined by SimulatedEngine
        def _text(self, seq: _Seq, start: int, count: int) -> str: ...
        def _end(self, seq: _Seq, reason: str, now: float) -> None: ...
        def _fail(self, seq: _Seq, error: BaseException) -> None: ...
        def _live(self) -> list[_Seq]: ...
        def _after_callback(self) -> None: ...

    # -- credit and the stall watchdog ------------------------------------------------------------
    def _park(self, seq: _Seq, now: float) -> None:
        seq.parked_at = now
        if self.stall_timeout_s is not None:
            self._arm_watchdog(now + self.stall_timeout_s)

    def _arm_watchdog(self, when: float) -> None:
        handle = self._watchdog
        if handle is not None:
            if self._watchdog_when <= when:
                return
            handle.cancel()
        self._watchdog_when = when
        self._watchdog = self._loop.call_at(when, self._check_stalls)  # type: ignore[union-attr]

    def _check_stalls(self) -> None:
        loop = self._loop
        assert loop is not None and self.stall_timeout_s is not None
        self._watchdog = None
        now = loop.time()
        limit = max(now, self._watchdog_when)  # a real loop may run a timer a hair early
        timeout = self.stall_timeout_s
        following = math.inf
        self._busy = True
        try:
            for seq in self._live():
                parked = seq.parked_at
                if parked is None or seq.state == _DONE or seq.in_step:
                    continue
                if parked + timeout <= limit:
                    self._end(seq, "stalled", now)
                elif parked + timeout < following:
                    following = parked + timeout
        finally:
            self._after_callback()
        if following < math.inf and (self._n_running or self._n_waiting):
            self._arm_watchdog(following)
