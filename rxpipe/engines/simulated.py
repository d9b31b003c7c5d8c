"""``SimulatedEngine``: the embedded default engine, a continuous-batching model of vLLM.

Scheduling (vLLM V1's scheduler, simplified; one call of :meth:`_start_step` is one iteration):

1. Running sequences first, in admission order: each gets ``tokens_per_step`` decode tokens, or
   the next chunk of its prompt (chunked prefill), out of the step's ``max_num_batched_tokens``.
   A streaming sequence whose consumer has no credit is skipped (it keeps its slot).
2. Then waiting sequences, first come first served, while budget and running slots remain; a
   prompt larger than what is left of the budget is prefilled in chunks over several steps.
3. Step time = ``step_overhead_s + prefill_s_per_token * prefilled tokens + decode_s_per_seq *
   decoding sequences``; the step ends on the loop clock (``loop.call_at``), its tokens are
   delivered, finished sequences free their slots, and the next step starts at once.

A sequence's first token comes out of the step that completes its prefill. The loop is made of
``call_soon``/``call_at`` callbacks, not a task: an idle engine leaves nothing pending.

With ``latency=`` (used by :meth:`SimulatedEngine.fixed_latency` and
:meth:`SimulatedEngine.per_request`) there is no batching: each sequence runs on its own slot with
its own clock (first token after ``first_token_s``, then one token every ``per_token_s``).
"""

from __future__ import annotations

import asyncio
import heapq
import math
import random
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

from ..errors import EngineError, EngineUnavailableError
from . import _metrics
from .base import Engine
from .records import Completion, CompletionRequest, CompletionResult

__all__ = ["SimulatedEngine", "StepRecord", "LatencyModel"]

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

    @property
    def batch_tokens(self) -> int:
        return self.prefill_tokens + self.decode_tokens


class _Seq:
    """The engine's state of one sequence (a request in flight)."""

    __slots__ = ("completion", "request", "no", "state", "prompt_tokens", "max_out", "capped", "offset",
                 "prefilled", "generated", "arrival_s", "started_s", "first_token_s", "parked_at",
                 "stall_s", "stall_until", "fail_at", "in_step", "step_prefill", "step_tokens",
                 "needs_credit", "awaiting_credit", "per_token_s")

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

    def __lt__(self, other: _Seq) -> bool:  # heap ties (never reached: entries carry ``no``)
        return self.no < other.no


def _check_int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"SimulatedEngine({name}=) needs an int >= {minimum}, got {value!r}")
    return value


def _check_seconds(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
        raise ValueError(f"SimulatedEngine({name}=) needs seconds >= 0, got {value!r}")
    return float(value)


def _check_rate(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ValueError(f"SimulatedEngine({name}=) needs a probability in [0, 1], got {value!r}")
    return float(value)


class SimulatedEngine(Engine):
    """A deterministic, loop-clock model of a vLLM-like engine with continuous batching.

    Defaults model a 7B model in bf16 on one modern data-centre GPU (A100/H100 class) under vLLM:

    - ``max_num_seqs=256``: vLLM's default ``--max-num-seqs``.
    - ``max_num_batched_tokens=8192``: vLLM V1's default ``--max-num-batched-tokens`` for the
      OpenAI server on 80 GB GPUs (chunked prefill on).
    - ``step_overhead_s=0.006``: a decode step reads all weights once: 14 GB at ~2.5-3.3 TB/s is
      ~4.5-5.5 ms, plus scheduling and sampling (roofline; a single stream then decodes at
      ~165 tokens/s, in line with published vLLM single-request numbers for 7B models).
    - ``prefill_s_per_token=0.00005``: ~14 GFLOP per token (2 x 7e9 parameters) at ~300 TFLOP/s
      achieved: ~20,000 prompt tokens/s.
    - ``decode_s_per_seq=0.0001``: each decoding sequence reads its KV cache (~128 KB/token with
      grouped-query attention, ~1k tokens of context): ~0.1 ms.
    - ``output_tokens=(16, 256)``: output lengths drawn uniformly (integers, inclusive) when a
      request has no ``max_tokens``; chat answers are mostly tens to a few hundred tokens.
    - ``stall_timeout_s=10.0``: a streaming consumer without credit for 10 s is dropped (None:
      never).

    Args:
        max_num_seqs: sequence slots (running + waiting <= this when driven by ``execute``).
        max_num_batched_tokens: token budget of one step (prefill chunks + decode tokens).
        tokens_per_step: tokens a decoding sequence makes per step (1 like vLLM; more models
            multi-step scheduling or speculative decoding and makes coarser chunks).
        step_overhead_s, prefill_s_per_token, decode_s_per_seq: the step-time model (seconds).
        stall_timeout_s: seconds a streaming sequence may wait for credit before it is aborted
            with finish reason ``"stalled"`` (None: never).
        seed: seeds output lengths, text and faults: the same seed and the same order of
            submissions give the same texts, lengths and timings.
        output_tokens: ``(lo, hi)``, output length drawn uniformly when ``max_tokens`` is None.
            With ``max_tokens`` the sequence makes exactly that many (finish reason ``"length"``;
            a drawn length ends with ``"stop"``).
        error_rate: probability that a sequence fails (``EngineError``) at a seeded token index
            (``await result`` raises; its token stream signals the error after the chunks before).
        stall_rate, stall_s: probability that a sequence hangs ``stall_s`` seconds, holding its
            slot, between getting its slot and its prefill (a long time to first token).
        down: the fault switch. ``engine.down = True``: ``available`` turns False, ``submit``
            raises ``EngineUnavailableError`` and every unfinished sequence fails with it (a
            crashed backend). ``engine.down = False`` brings it back (capacity listeners fire).
        model: the model id. step_log: keep the last ``step_log`` :class:`StepRecord` in
            ``step_log`` (0: keep none).
        latency: a per-request service model instead of batching (see the module docstring):
            ``latency(rng, output_tokens) -> (first_token_s, per_token_s)``.

    Token text is words from a seeded vocabulary, one word per token, each with a leading space.
    ``sampling`` fields are accepted and ignored. Driven by ``loop.time()``/``call_at`` only, so
    the test kit's virtual clock runs it exactly and instantly.
    """

    def __init__(self, max_num_seqs: int = 256, max_num_batched_tokens: int = 8192, tokens_per_step: int = 1,
                 step_overhead_s: float = 0.006, prefill_s_per_token: float = 0.00005,
                 decode_s_per_seq: float = 0.0001, stall_timeout_s: float | None = 10.0, seed: int = 0,
                 output_tokens: tuple[int, int] = (16, 256), error_rate: float = 0.0, stall_rate: float = 0.0,
                 stall_s: float = 5.0, down: bool = False, model: str = "sim", step_log: int = 0, *,
                 latency: LatencyModel | None = None) -> None:
        super().__init__(model=model, max_num_seqs=max_num_seqs)
        self.max_num_batched_tokens = _check_int("max_num_batched_tokens", max_num_batched_tokens, 1)
        self.tokens_per_step = _check_int("tokens_per_step", tokens_per_step, 1)
        self.step_overhead_s = _check_seconds("step_overhead_s", step_overhead_s)
        self.prefill_s_per_token = _check_seconds("prefill_s_per_token", prefill_s_per_token)
        self.decode_s_per_seq = _check_seconds("decode_s_per_seq", decode_s_per_seq)
        if stall_timeout_s is not None and not _check_seconds("stall_timeout_s", stall_timeout_s) > 0:
            raise ValueError(f"SimulatedEngine(stall_timeout_s=) needs seconds > 0 or None, got {stall_timeout_s!r}")
        self.stall_timeout_s = None if stall_timeout_s is None else float(stall_timeout_s)
        lo, hi = output_tokens
        _check_int("output_tokens", lo, 1)
        if _check_int("output_tokens", hi, 1) < lo:
            raise ValueError(f"SimulatedEngine(output_tokens=) needs (lo, hi) with 1 <= lo <= hi, "
                             f"got {output_tokens!r}")
        self.output_tokens = (lo, hi)
        self.error_rate = _check_rate("error_rate", error_rate)
        self.stall_rate = _check_rate("stall_rate", stall_rate)
        self.stall_s = _check_seconds("stall_s", stall_s)
        if latency is not None and not callable(latency):
            raise TypeError(f"SimulatedEngine(latency=) needs a callable, got {latency!r}")
        self.latency = latency
        self.seed = seed
        self._rng = random.Random(f"{seed}:content")
        self._fault_rng = random.Random(f"{seed}:faults")
        self._latency_rng = random.Random(f"{seed}:latency")
        words = [" " + w for w in _WORDS]
        random.Random(f"{seed}:vocabulary").shuffle(words)
        self._words = tuple(words)
        #: the last ``step_log`` steps (empty when ``step_log=0``)
        self.step_log: deque[StepRecord] = deque(maxlen=_check_int("step_log", step_log, 0))
        #: steps run, sequences finished (any reason, failures included), tokens generated
        self.steps = 0
        self.finished = 0
        self.tokens_generated = 0
        self._down = bool(down)
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiting: deque[_Seq] = deque()
        self._running: list[_Seq] = []
        self._running_dirty = False
        self._n_running = 0
        self._n_waiting = 0
        self._seq_no = 0
        # the one step/event timer: a queued start (call_soon), a step in flight, or a wake-up
        self._timer: asyncio.Handle | None = None
        self._timer_when = 0.0
        self._start_queued = False
        self._stepping = False
        self._batch: list[_Seq] = []
        self._events: list[tuple[float, int, _Seq]] = []  # per-request mode: (time, no, seq)
        self._watchdog: asyncio.TimerHandle | None = None
        self._watchdog_when = 0.0
        # inside an engine callback: capacity notifications wait until its state is consistent
        self._busy = False
        self._notify_pending = False

    # -- constructors of the seed's models -------------------------------------------------------
    @classmethod
    def fixed_latency(cls, concurrency: int = 5, min_s: float = 0.5, max_s: float = 2.0, seed: int = 0,
                      **kwargs: Any) -> SimulatedEngine:
        """The seed's model: a semaphore of ``concurrency`` with ``min_s``-``max_s`` s per request.

        Each request holds one of ``concurrency`` slots for a duration drawn uniformly from
        ``[min_s, max_s]`` seconds (seeded), independent of the others; its tokens are spread
        evenly over it. Other keyword arguments go to the constructor.
        """
        lo = _check_seconds("min_s", min_s)
        hi = _check_seconds("max_s", max_s)
        if hi < lo:
            raise ValueError(f"fixed_latency needs min_s <= max_s, got {min_s!r} > {max_s!r}")

        def latency(rng: random.Random, output_tokens: int) -> tuple[float, float]:
            step = rng.uniform(lo, hi) / output_tokens
            return step, step

        return cls(max_num_seqs=concurrency, seed=seed, latency=latency, **kwargs)

    @classmethod
    def per_request(cls, slots: int = 8, base_s: float = 0.02, per_token_s: float = 0.002,
                    tokens: tuple[int, int] = (16, 64), seed: int = 0, **kwargs: Any) -> SimulatedEngine:
        """The overload benchmark's model: ``slots`` independent slots, a request of ``n`` output
        tokens (drawn uniformly from ``tokens``, or its ``max_tokens``) takes
        ``base_s + per_token_s * n`` seconds (first token after ``base_s + per_token_s``).

        Capacity with the defaults: 8 / (0.02 + 0.002 * 40 mean tokens) = 80 requests/s.
        """
        base = _check_seconds("base_s", base_s)
        per_token = _check_seconds("per_token_s", per_token_s)

        def latency(rng: random.Random, output_tokens: int) -> tuple[float, float]:
            return base + per_token, per_token

        return cls(max_num_seqs=slots, output_tokens=tokens, seed=seed, latency=latency, **kwargs)

    # -- Engine ----------------------------------------------------------------------------------
    @property
    def running(self) -> int:
        return self._n_running

    @property
    def waiting(self) -> int:
        return self._n_waiting

    @property
    def available(self) -> bool:
        return not (self._down or self._closed)

    @property
    def down(self) -> bool:
        """The fault switch (see the class docstring)."""
        return self._down

    @down.setter
    def down(self, value: bool) -> None:
        value = bool(value)
        if value == self._down:
            return
        self._down = value
        if value:
            self._abort_all(EngineUnavailableError(f"engine {self.model!r} is down"))
        elif not self._closed:
            self._notify_capacity()

    def submit(self, request: CompletionRequest) -> Completion:
        """Admit ``request``; return its Completion (see :meth:`Engine.submit`).

        A request already cancelled, or past its ``deadline_s``, gets a Completion finished at
        once (``"cancelled"`` / ``"deadline"``) that used no slot. Must be called on a running
        event loop. Raises ``EngineUnavailableError`` when down or closed, ValueError if the
        request was submitted before.
        """
        if not self.available:
            reason = "closed" if self._closed else "down"
            raise EngineUnavailableError(f"engine {self.model!r} is {reason}")
        if request.completion is not None:
            raise ValueError(f"request {request.id} was already submitted")
        loop = self._bind()
        now = loop.time()
        if request.arrival_s is None:
            request.arrival_s = now
        completion = Completion(request, self, loop)
        request.completion = completion
        if request.cancelled or (request.deadline_s is not None and now > request.deadline_s):
            reason = "cancelled" if request.cancelled else "deadline"
            completion.finish(CompletionResult("", reason, request.prompt_tokens, 0, now - request.arrival_s,
                                               None, now - request.arrival_s))
            return completion
        seq = self._new_seq(completion, request.arrival_s)
        completion.engine_state = seq
        self._waiting.append(seq)
        self._n_waiting += 1
        if seq.needs_credit:
            self._park(seq, now)  # no subscriber yet: no credit
        if self.latency is None:
            self._kick()
        else:
            self._admit(now)
            self._arm_events()
        return completion

    async def aclose(self) -> None:
        """Close: ``available`` turns False and unfinished completions end as ``"cancelled"``."""
        if self._closed:
            return
        self._closed = True
        self._abort_all(None)

    # -- sequences -------------------------------------------------------------------------------
    def _bind(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            if self._n_running or self._n_waiting:
                raise RuntimeError("this SimulatedEngine has work in flight on another event loop")
            self._cancel_timers()
            self._loop = loop
        return loop

    def _new_seq(self, completion: Completion, arrival_s: float) -> _Seq:
        request = completion.request
        rng = self._rng
        if request.max_tokens is None:
            max_out, capped = rng.randint(*self.output_tokens), False
        else:
            max_out, capped = request.max_tokens, True
        self._seq_no += 1
        seq = _Seq(completion, self._seq_no, request.prompt_tokens, max_out, capped,
                   rng.randrange(len(self._words)), arrival_s)
        faults = self._fault_rng
        if self.error_rate and faults.random() < self.error_rate:
            seq.fail_at = faults.randrange(max_out)
        if self.stall_rate and faults.random() < self.stall_rate:
            seq.stall_s = self.stall_s
        return seq

    def _text(self, seq: _Seq, start: int, count: int) -> str:
        words = self._words
        n = len(words)
        first = seq.offset + start
        if count == 1:
            return words[first % n]
        return "".join([words[(first + i) % n] for i in range(count)])

    def _end(self, seq: _Seq, reason: str, now: float) -> None:
        """Finish ``seq`` with ``reason`` and free its slot."""
        self._release(seq)
        first = seq.first_token_s
        started = seq.started_s
        arrival = seq.arrival_s
        seq.completion.finish(CompletionResult(
            self._text(seq, 0, seq.generated) if seq.generated else "", reason, seq.prompt_tokens, seq.generated,
            (now if started is None else started) - arrival, None if first is None else first - arrival,
            now - arrival))
        self._freed()

    def _fail(self, seq: _Seq, error: BaseException) -> None:
        self._release(seq)
        seq.completion.fail(error)
        self._freed()

    def _release(self, seq: _Seq) -> None:
        if seq.state == _RUNNING:
            self._n_running -= 1
            self._running_dirty = True
        elif seq.state == _WAITING:
            self._n_waiting -= 1  # removed lazily from the deque
        seq.state = _DONE
        seq.parked_at = None
        self.finished += 1

    def _freed(self) -> None:
        """A slot was freed (and its completion settled): tell the capacity listeners."""
        if self._busy:
            self._notify_pending = True
        else:
            self._notify_pending = False
            self._notify_capacity()
        if not (self._n_running or self._n_waiting):
            self._go_idle()

    def _live(self) -> list[_Seq]:
        live = [s for s in self._running if s.state == _RUNNING]
        self._running = live
        self._running_dirty = False
        return live + [s for s in self._waiting if s.state == _WAITING]

    def _abort_all(self, error: BaseException | None) -> None:
        """Fail (``error``) or cancel (None) every unfinished sequence, then stop all timers."""
        live = self._live() if self._loop is not None else []
        self._busy = True
        try:
            for seq in live:
                if seq.state == _DONE:
                    continue
                if error is None:
                    self._end(seq, "cancelled", self._loop.time())  # type: ignore[union-attr]
                else:
                    self._fail(seq, error)
        finally:
            self._busy = False
        self._go_idle()
        if self._notify_pending:
            self._notify_pending = False
            self._notify_capacity()

    def _go_idle(self) -> None:
        """Nothing in flight (or the engine stopped): drop every timer and list."""
        self._cancel_timers()
        self._waiting.clear()
        self._running = []
        self._running_dirty = False
        self._events.clear()
        self._batch = []

    def _cancel_timers(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._start_queued = False
        self._stepping = False
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None

    def _after_callback(self) -> None:
        """End of an engine callback: notify capacity (once), then keep the engine going."""
        self._busy = False
        if self._notify_pending:
            self._notify_pending = False
            self._notify_capacity()
        self._resume()

    def _resume(self) -> None:
        """Let freed slots and new credit take effect (start a step; admit and arm events)."""
        if self.latency is None:
            if self._n_running or self._n_waiting:
                self._kick()
        elif self._loop is not None and self.available:
            self._admit(self._loop.time())
            self._arm_events()

    # -- Completion hooks ------------------------------------------------------------------------
    def _cancel_completion(self, completion: Completion) -> None:
        seq: _Seq | None = completion.engine_state
        if seq is None or seq.state == _DONE or seq.in_step:
            return  # a sequence in the step in flight is freed when the step ends
        self._end(seq, "cancelled", self._loop.time())  # type: ignore[union-attr]
        if not self._busy:
            self._resume()

    def _credit_granted(self, completion: Completion) -> None:
        seq: _Seq | None = completion.engine_state
        if seq is None or seq.parked_at is None or seq.state == _DONE:
            return
        seq.parked_at = None
        if self.latency is None:
            self._kick()
        elif seq.awaiting_credit:
            seq.awaiting_credit = False
            heapq.heappush(self._events, (self._loop.time() + seq.per_token_s, seq.no, seq))  # type: ignore[union-attr]
            if not self._busy:
                self._arm_events()

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

    # -- continuous batching ---------------------------------------------------------------------
    def _kick(self) -> None:
        """Start a step soon, unless one is in flight (it picks new work up when it ends)."""
        if self._stepping or self._start_queued or self._loop is None or not self.available:
            return
        if self._timer is not None:  # a wake-up for a hung sequence: start now instead
            self._timer.cancel()
        self._start_queued = True
        self._timer = self._loop.call_soon(self._start_next)

    def _start_next(self) -> None:
        # One more loop iteration before scheduling: whoever was handed a Completion in the
        # iteration that admitted it (a reply future's waiter) subscribes to its tokens first, so
        # a streaming sequence gets into the first step instead of waiting for credit.
        self._timer = self._loop.call_soon(self._start_step)  # type: ignore[union-attr]

    def _start_step(self) -> None:
        loop = self._loop
        assert loop is not None
        self._timer = None
        self._start_queued = False
        now = loop.time()
        budget = self.max_num_batched_tokens
        tps = self.tokens_per_step
        batch = self._batch
        prefill = decode_tokens = decode_seqs = 0
        wake = math.inf
        running = self._running
        if self._running_dirty:
            running = self._running = [s for s in running if s.state == _RUNNING]
            self._running_dirty = False
        # 1. running sequences: decode, or continue a chunked prefill
        for seq in running:
            if seq.stall_until > now:
                if seq.stall_until < wake:
                    wake = seq.stall_until
                continue
            if seq.needs_credit and not seq.completion.credit:
                continue  # parked: keeps its slot, costs nothing
            left = seq.prompt_tokens - seq.prefilled
            if left > 0:
                if not budget:
                    continue
                n = left if left < budget else budget
                seq.step_prefill = n
                prefill += n
            else:
                n = seq.max_out - seq.generated
                if n > tps:
                    n = tps
                if n > budget:
                    continue
                seq.step_prefill = 0
                seq.step_tokens = n
                decode_tokens += n
                decode_seqs += 1
            budget -= n
            seq.in_step = True
            batch.append(seq)
        # 2. waiting sequences, first come first served
        expired: list[_Seq] | None = None
        waiting = self._waiting
        slots = self.max_num_seqs - self._n_running
        if waiting and budget > 0 and slots > 0:
            skipped: list[_Seq] = []
            while waiting:
                seq = waiting.popleft()
                if seq.state != _WAITING:
                    continue
                if budget <= 0 or slots <= 0:
                    waiting.appendleft(seq)
                    break
                if seq.needs_credit and not seq.completion.credit:
                    skipped.append(seq)
                    continue
                deadline = seq.request.deadline_s
                if deadline is not None and now > deadline:
                    if expired is None:
                        expired = []
                    expired.append(seq)
                    continue
                seq.state = _RUNNING
                self._n_waiting -= 1
                self._n_running += 1
                slots -= 1
                running.append(seq)
                seq.started_s = now
                if seq.stall_s:
                    seq.stall_until = now + seq.stall_s  # hung: holds its slot, not stepped
                    if seq.stall_until < wake:
                        wake = seq.stall_until
                    continue
                n = seq.prompt_tokens if seq.prompt_tokens < budget else budget
                seq.step_prefill = n
                prefill += n
                budget -= n
                seq.in_step = True
                batch.append(seq)
            if skipped:
                waiting.extendleft(reversed(skipped))
        if batch:
            duration = self.step_overhead_s + self.prefill_s_per_token * prefill + self.decode_s_per_seq * decode_seqs
            self.steps += 1
            if self.step_log.maxlen:
                self.step_log.append(StepRecord(self.steps, now, duration, len(batch), prefill, decode_tokens,
                                                decode_seqs, self._n_running, self._n_waiting,
                                                tuple(s.request.id for s in batch)))
            _metrics.STEP_DURATION.observe(duration)
            _metrics.BATCH_TOKENS.observe(prefill + decode_tokens)
            self._stepping = True
            self._timer = loop.call_at(now + duration, self._end_step)
        elif wake < math.inf:
            self._timer = loop.call_at(wake, self._start_step)
        if expired:
            self._busy = True
            try:
                for seq in expired:
                    self._end(seq, "deadline", now)
            finally:
                self._after_callback()

    def _end_step(self) -> None:
        loop = self._loop
        assert loop is not None
        self._timer = None
        self._stepping = False
        now = loop.time()
        batch = self._batch
        self._batch = []
        tps = self.tokens_per_step
        self._busy = True
        try:
            for seq in batch:
                seq.in_step = False
                if seq.state != _RUNNING:
                    continue
                completion = seq.completion
                if completion.cancel_requested:
                    self._end(seq, "cancelled", now)
                    continue
                if seq.step_prefill:
                    seq.prefilled += seq.step_prefill
                    if seq.prefilled < seq.prompt_tokens:
                        continue
                    n = seq.max_out if seq.max_out < tps else tps  # the prefill step samples token 1
                else:
                    n = seq.step_tokens
                g = seq.generated
                if seq.fail_at is not None and g + n > seq.fail_at:
                    self._fail(seq, EngineError(f"simulated engine failure on {seq.request.id} after "
                                                f"{g} tokens (error_rate={self.error_rate})"))
                    continue
                seq.generated = g + n
                if g == 0:
                    seq.first_token_s = now
                self.tokens_generated += n
                completion.push(self._text(seq, g, n), n)
                if seq.state != _RUNNING:
                    continue  # the consumer cancelled it, or brought the engine down, in on_next
                if seq.generated >= seq.max_out:
                    self._end(seq, "length" if seq.capped else "stop", now)
                elif seq.needs_credit and not completion.credit:
                    self._park(seq, now)
        finally:
            self._after_callback()

    # -- per-request service (latency=) --------------------------------------------------------------
    def _admit(self, now: float) -> None:
        """Start waiting sequences on free slots, each on its own clock."""
        waiting = self._waiting
        latency = self.latency
        assert latency is not None
        if self._running_dirty:
            # drop finished sequences (as _start_step does in batching mode): under sustained load
            # the engine never goes idle, and _running would keep every finished request alive
            self._running = [s for s in self._running if s.state == _RUNNING]
            self._running_dirty = False
        while waiting and self._n_running < self.max_num_seqs:
            seq = waiting.popleft()
            if seq.state != _WAITING:
                continue
            deadline = seq.request.deadline_s
            if deadline is not None and now > deadline:
                self._end(seq, "deadline", now)
                continue
            seq.state = _RUNNING
            self._n_waiting -= 1
            self._n_running += 1
            self._running.append(seq)
            seq.started_s = now
            first_s, per_token_s = latency(self._latency_rng, seq.max_out)
            seq.per_token_s = per_token_s
            t0 = now + seq.stall_s + first_s
            if seq.needs_credit:
                when = t0  # one event per token
            elif seq.fail_at is not None:
                when = t0 + seq.fail_at * per_token_s
            else:
                seq.first_token_s = t0
                when = t0 + (seq.max_out - 1) * per_token_s  # one event: all of it
            heapq.heappush(self._events, (when, seq.no, seq))

    def _arm_events(self) -> None:
        events = self._events
        if not events or self._loop is None:
            return
        when = events[0][0]
        timer = self._timer
        if timer is not None:
            if self._timer_when <= when:
                return
            timer.cancel()
        self._timer_when = when
        self._timer = self._loop.call_at(when, self._fire_events)

    def _fire_events(self) -> None:
        loop = self._loop
        assert loop is not None
        self._timer = None
        limit = max(loop.time(), self._timer_when)
        events = self._events
        self._busy = True
        try:
            while events and events[0][0] <= limit:
                t, _, seq = heapq.heappop(events)
                if seq.state != _RUNNING:
                    continue
                completion = seq.completion
                g = seq.generated
                if seq.fail_at is not None and (not seq.needs_credit or g == seq.fail_at):
                    self._fail(seq, EngineError(f"simulated engine failure on {seq.request.id} after "
                                                f"{g} tokens (error_rate={self.error_rate})"))
                    continue
                if not seq.needs_credit:
                    n = seq.max_out
                    seq.generated = n
                    self.tokens_generated += n
                    completion.push(self._text(seq, 0, n), n)
                    if seq.state == _RUNNING:
                        self._end(seq, "length" if seq.capped else "stop", t)
                    continue
                if not completion.credit:
                    seq.awaiting_credit = True  # parked: the next token waits for credit
                    continue
                seq.generated = g + 1
                if g == 0:
                    seq.first_token_s = t
                self.tokens_generated += 1
                completion.push(self._text(seq, g, 1), 1)
                if seq.state != _RUNNING:
                    continue
                if seq.generated >= seq.max_out:
                    self._end(seq, "length" if seq.capped else "stop", t)
                    continue
                if not completion.credit:
                    self._park(seq, t)
                heapq.heappush(events, (t + seq.per_token_s, seq.no, seq))
        finally:
            self._after_callback()
