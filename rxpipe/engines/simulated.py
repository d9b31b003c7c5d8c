"""``SimulatedEngine``: the embedded default engine, a continuous-batching model of vLLM.

Scheduling (vLLM V1's scheduler, simplified; one call of :meth:`_start_step` is one iteration):

1. Running sequences first, in admission order: each gets ``tokens_per_step`` decode tokens, or
   the next chunk of its prompt (chunked prefill), out of the step's ``max_num_batched_tokens``.
   A streaming sequence whose consumer has no credit is skipped (it keeps its slot).
2. Then waiting sequences, first come first served, while budget and running slots remain; a
   prompt larger than what is left of the budget is prefilled in chunks over several steps.
3. Step time = ``step_overhead_s + prefill_s_per_token * prefilled tokens + decode_s_per_seq *
   decoding sequences``; the step ends on the loop clock (``loop.call_at``), its tokens are
   delivered, finished sequences free their slots, and the next step starts at once, paced on
   the clock: it is due at the previous step's due end + its own step time, so the time the loop
   spends delivering tokens overlaps the next step instead of adding to it (as a GPU overlaps
   output processing).

A sequence's first token comes out of the step that completes its prefill. The loop is made of
``call_soon``/``call_at`` callbacks, not a task: an idle engine leaves nothing pending.

With ``latency=`` (used by :meth:`SimulatedEngine.fixed_latency` and
:meth:`SimulatedEngine.per_request`) there is no batching: each sequence runs on its own slot with
its own clock (first token after ``first_token_s``, then one token every ``per_token_s``).
"""

from __future__ import annotations

import asyncio
import heapq
import random
import zlib
from collections import deque
from typing import Any

from ..errors import EngineUnavailableError
from ..serving.records import Completion, CompletionRequest, CompletionResult
from ..settings import check_int, check_number
from ._settings import SIMULATED_SETTINGS
from ._sim_batching import _ContinuousBatching
from ._sim_prefix import PrefixCache, prompt_bytes
from ._sim_requests import _PerRequestService
from ._sim_state import (
    _DONE,
    _RUNNING,
    _WAITING,
    _WORDS,
    LatencyModel,
    StepRecord,
    _Seq,
)

__all__ = ["SimulatedEngine", "StepRecord", "LatencyModel"]


def _arg(name: str, value: Any) -> Any:
    """A constructor argument checked by its setting (:data:`~rxpipe.engines._settings.SIMULATED_SETTINGS`)."""
    return SIMULATED_SETTINGS.check(name, value, f"SimulatedEngine({name}=)")


class SimulatedEngine(_ContinuousBatching, _PerRequestService):
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
        prefix_cache_blocks: vLLM's automatic prefix caching (DESIGN §8b): a prompt is a chain
            of blocks of ``block_tokens`` tokens (4 UTF-8 bytes a token); the blocks of running
            sequences are pinned and at most this many others are kept, least recently used
            evicted first; a sequence that starts skips the prefill of its cached leading
            blocks (never its last prompt token), so its step is ``prefill_s_per_token`` ×
            those tokens shorter. 0 (default): no caching. Not with ``latency=`` (ValueError).
            State in ``prefix_cache`` (:class:`~rxpipe.engines._sim_prefix.PrefixCache`);
            metrics ``rxpipe_engine_prefix_cache_queries_total{engine}`` and
            ``rxpipe_engine_prefix_cache_hits_total{engine}``, in tokens, as vLLM's
            ``vllm:prefix_cache_queries`` / ``vllm:prefix_cache_hits``.
        block_tokens: tokens a cache block (vLLM's ``--block-size``, default 16).

    Token text is words from a seeded vocabulary, one word per token, each with a leading space.
    Sampling fields: ``seed`` makes a request's length and text depend only on the engine's seed,
    the request's seed and its prompt (the same request gives the same answer); ``temperature``
    0 is greedy decoding: each token follows from the two words before it (the prompt's last
    two, then the answer's own), so the same prompt gives the same text, and a prompt extended
    by the start of an answer continues that answer exactly; ``stop`` (a
    string or a list of them) ends the output, finish reason ``"stop"``, before the first token
    in which a stop string begins; the fields that only shape sampling (``top_p``,
    the penalties, ``logit_bias`` ...) are accepted and ignored. It serves none of the
    features of :data:`~rxpipe.serving.FEATURES` (``features`` is empty): a request for tool
    calling, log probabilities, structured output, images, embeddings ... is refused with
    :class:`~rxpipe.errors.UnsupportedRequestError` naming the field (the gateway's 400
    ``unsupported_request``), never answered as if it had not asked. A ``max_tokens`` the
    edge filled in (``max_tokens_defaulted``) caps the drawn length instead of fixing it.
    Driven by ``loop.time()``/``call_at`` only, so the test kit's virtual clock runs it exactly
    and instantly.
    """

    #: no feature beyond text (see the class docstring)
    features: frozenset[str] = frozenset()

    def __init__(self, max_num_seqs: int = 256, max_num_batched_tokens: int = 8192, tokens_per_step: int = 1,
                 step_overhead_s: float = 0.006, prefill_s_per_token: float = 0.00005,
                 decode_s_per_seq: float = 0.0001, stall_timeout_s: float | None = 10.0, seed: int = 0,
                 output_tokens: tuple[int, int] = (16, 256), error_rate: float = 0.0, stall_rate: float = 0.0,
                 stall_s: float = 5.0, down: bool = False, model: str = "sim", step_log: int = 0, *,
                 latency: LatencyModel | None = None, prefix_cache_blocks: int = 0, block_tokens: int = 16) -> None:
        super().__init__(model=model, max_num_seqs=_arg("max_num_seqs", max_num_seqs))
        self.max_num_batched_tokens = _arg("max_num_batched_tokens", max_num_batched_tokens)
        self.tokens_per_step = _arg("tokens_per_step", tokens_per_step)
        self.step_overhead_s = float(_arg("step_overhead_s", step_overhead_s))
        self.prefill_s_per_token = float(_arg("prefill_s_per_token", prefill_s_per_token))
        self.decode_s_per_seq = float(_arg("decode_s_per_seq", decode_s_per_seq))
        stall_timeout_s = _arg("stall_timeout_s", stall_timeout_s)
        self.stall_timeout_s = None if stall_timeout_s is None else float(stall_timeout_s)
        lo, hi = output_tokens
        check_int(lo, "SimulatedEngine(output_tokens=)", minimum=1)
        check_int(hi, "SimulatedEngine(output_tokens=)", minimum=lo)
        self.output_tokens = (lo, hi)
        self.error_rate = float(_arg("error_rate", error_rate))
        self.stall_rate = float(_arg("stall_rate", stall_rate))
        self.stall_s = float(_arg("stall_s", stall_s))
        if latency is not None and not callable(latency):
            raise TypeError(f"SimulatedEngine(latency=) needs a callable, got {latency!r}")
        self.latency = latency
        cache_blocks = _arg("prefix_cache_blocks", prefix_cache_blocks)
        self.block_tokens = _arg("block_tokens", block_tokens)
        if cache_blocks and latency is not None:
            raise ValueError("SimulatedEngine(prefix_cache_blocks=) models continuous batching's prefill: "
                             "not available with latency=")
        #: the automatic prefix cache (None with ``prefix_cache_blocks=0``)
        self.prefix_cache = PrefixCache(cache_blocks, self.block_tokens) if cache_blocks else None
        self.seed = _arg("seed", seed)
        self._rng = random.Random(f"{seed}:content")
        self._fault_rng = random.Random(f"{seed}:faults")
        self._latency_rng = random.Random(f"{seed}:latency")
        words = [" " + w for w in _WORDS]
        random.Random(f"{seed}:vocabulary").shuffle(words)
        self._words = tuple(words)
        #: the last ``step_log`` steps (empty when ``step_log=0``)
        self.step_log: deque[StepRecord] = deque(maxlen=_arg("step_log", step_log))
        #: steps run, sequences finished (any reason, failures included), tokens generated
        self.steps = 0
        self.finished = 0
        self.tokens_generated = 0
        self._down = bool(down)
        self._closed = False
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
        self._step_end = 0.0  # loop time the step in flight is due to end
        self._step_due: float | None = None  # when the step that just ended was due to end
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
        lo = float(check_number(min_s, "SimulatedEngine.fixed_latency(min_s=)", minimum=0))
        hi = float(check_number(max_s, "SimulatedEngine.fixed_latency(max_s=)", minimum=0))
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
        base = float(check_number(base_s, "SimulatedEngine.per_request(base_s=)", minimum=0))
        per_token = float(check_number(per_token_s, "SimulatedEngine.per_request(per_token_s=)", minimum=0))

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
            self.notify_capacity()

    @property
    def unavailable_reason(self) -> str:
        return "closed" if self._closed else "down"

    def start(self, completion: Completion, now_s: float) -> None:
        """Queue the admitted ``completion`` as a waiting sequence (see :meth:`Engine.submit`):
        it starts in the next step (continuous batching) or as soon as a slot frees (``latency=``)."""
        arrival = completion.request.arrival_s  # set by submit
        seq = self._new_seq(completion, now_s if arrival is None else arrival)
        completion.engine_state = seq
        self._waiting.append(seq)
        self._n_waiting += 1
        if seq.needs_credit:
            self._park(seq, now_s)  # no subscriber yet: no credit
        if self.latency is None:
            self._kick()
        else:
            self._admit(now_s)
            self._arm_events()

    async def aclose(self) -> None:
        """Close: ``available`` turns False and unfinished completions end as ``"cancelled"``."""
        if self._closed:
            return
        self._closed = True
        self._abort_all(None)

    # -- sequences -------------------------------------------------------------------------------
    def bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Refuse to move with work in flight (:meth:`Engine.bind_loop`); drop the old loop's timers."""
        super().bind_loop(loop)
        self._cancel_timers()

    def _new_seq(self, completion: Completion, arrival_s: float) -> _Seq:
        request = completion.request
        sampling = request.sampling
        seed = sampling.get("seed")
        # A request's own seed: its length and text depend on nothing else (OpenAI's ``seed``).
        rng = self._rng if seed is None else random.Random(
            f"{self.seed}:seed:{seed}:{request.prompt}:{request.messages}")
        if request.max_tokens is None or request.max_tokens_defaulted:
            max_out, capped = rng.randint(*self.output_tokens), False
            if request.max_tokens is not None and max_out >= request.max_tokens:
                max_out, capped = request.max_tokens, True
        else:
            max_out, capped = request.max_tokens, True
        offset = rng.randrange(len(self._words))
        greedy = self._greedy(request, max_out) if sampling.get("temperature") == 0 else None
        stop = sampling.get("stop")
        if stop:
            max_out, capped = self._stop_before(greedy or self._run_of(offset, max_out), max_out, capped,
                                                [stop] if isinstance(stop, str) else stop)
        self._seq_no += 1
        seq = _Seq(completion, self._seq_no, request.prompt_tokens, max_out, capped, offset, arrival_s)
        seq.words = greedy
        if self.prefix_cache is not None:
            seq.blocks = self.prefix_cache.chain(prompt_bytes(request))
        faults = self._fault_rng
        if self.error_rate and faults.random() < self.error_rate and max_out:
            seq.fail_at = faults.randrange(max_out)
        if self.stall_rate and faults.random() < self.stall_rate:
            seq.stall_s = self.stall_s
        return seq

    def _run_of(self, offset: int, count: int) -> list[str]:
        """The ``count`` tokens of a sampled (not greedy) sequence starting at ``offset``."""
        words = self._words
        n = len(words)
        return [words[(offset + i) % n] for i in range(count)]

    def _greedy(self, request: CompletionRequest, count: int) -> list[str]:
        """Greedy decoding (``temperature`` 0): each token is a function of the engine's seed and
        of the two words before it — the prompt's last two, then the answer's own — so a request
        whose prompt is another's plus the start of its answer goes on exactly as that answer
        did, as a real model's greedy decoding does (what mid-stream failover relies on). Stable
        across processes (CRC-32, not Python's salted ``hash``)."""
        words = self._words
        n = len(words)
        context = prompt_bytes(request).split()
        a = context[-2] if len(context) > 1 else b""
        b = context[-1] if context else b""
        seed = str(self.seed).encode()
        out: list[str] = []
        for _ in range(count):
            word = words[zlib.crc32(b"|".join((seed, a, b))) % n]
            out.append(word)
            a, b = b, word[1:].encode()
        return out

    def _stop_before(self, run: list[str], max_out: int, capped: bool, stops: list[str]) -> tuple[int, bool]:
        """Output length with ``stop`` strings honoured: the sequence ends (finish reason
        ``"stop"``) before the first token in which one of them begins; the stop text itself is
        never sent (as OpenAI's API does). ``run``: the sequence's first ``max_out`` tokens."""
        position = 0
        text: list[str] = []
        ends: list[int] = []
        for i in range(max_out):
            word = run[i]
            text.append(word)
            position += len(word)
            ends.append(position)
        full = "".join(text)
        found = [i for i in (full.find(s) for s in stops if s) if i >= 0]
        if not found:
            return max_out, capped
        first = min(found)
        whole = sum(1 for end in ends if end <= first)  # tokens entirely before the stop string
        return max(whole, 0), False

    def _text(self, seq: _Seq, start: int, count: int) -> str:
        if seq.words is not None:
            return "".join(seq.words[start:start + count])
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
            if seq.pinned:
                self.prefix_cache.release(seq.blocks, seq.pinned)  # type: ignore[union-attr]
                seq.pinned = 0
        elif seq.state == _WAITING:
            self._n_waiting -= 1  # removed lazily from the deque
        seq.state = _DONE
        seq.parked_at = None
        seq.completion.engine_state = None  # no completion <-> sequence cycle left for the GC
        self.finished += 1

    def _freed(self) -> None:
        """A slot was freed (and its completion settled): tell the capacity listeners."""
        if self._busy:
            self._notify_pending = True
        else:
            self._notify_pending = False
            self.notify_capacity()
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
            self.notify_capacity()

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
            self.notify_capacity()
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
    def cancel_completion(self, completion: Completion) -> None:
        seq: _Seq | None = completion.engine_state
        if seq is None or seq.state == _DONE or seq.in_step:
            return  # a sequence in the step in flight is freed when the step ends
        self._end(seq, "cancelled", self._loop.time())  # type: ignore[union-attr]
        if not self._busy:
            self._resume()

    def credit_granted(self, completion: Completion) -> None:
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
