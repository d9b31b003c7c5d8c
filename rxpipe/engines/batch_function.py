"""``BatchFunctionEngine``: a user's synchronous batch function (a local model) behind the executor.

Dynamic batching in the manner of Triton's dynamic batcher: admitted requests wait in one FIFO;
whenever a worker is free, the oldest waiting requests go to it as one batch if there are
``max_batch_size`` of them, or once the oldest has waited ``max_delay_s`` (then as many as there
are, up to ``max_batch_size``). A batch whose delay passed while every worker was busy keeps
filling until a worker frees, so a loaded engine runs full batches.

Capacity: ``max_num_seqs = max_batch_size * workers``; ``free_slots = max_num_seqs - waiting -
running`` is the executor's demand, so the queue of work lives upstream (in the graph), never here.

The function runs in a dedicated ``ThreadPoolExecutor`` of ``workers`` threads through
``loop.run_in_executor`` (one future per batch, no task); the delay timer is one
``loop.call_at`` handle. Nothing is pending while idle.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Sequence

from ..errors import EngineError, EngineUnavailableError
from ..serving import _engine_metrics as _metrics
from ..serving.engine import Engine
from ..serving.records import Completion, CompletionRequest, CompletionResult, estimate_tokens
from ..settings import check_int, check_number

__all__ = ["BatchFunctionEngine", "BatchRecord", "request_text"]

_WAITING, _RUNNING, _DONE = 0, 1, 2
# Timers may fire up to the loop's clock resolution early: a due time this close counts as reached.
_CLOCK_TOLERANCE_S = 1e-9


def request_text(request: CompletionRequest) -> str:
    """The default input of a request: its prompt, else the text of its messages joined by newlines
    (a message's ``content`` string, or the ``text`` of its ``{"type": "text"}`` parts)."""
    if request.prompt is not None:
        return request.prompt
    texts: list[str] = []
    for message in request.messages or ():
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts.extend(part["text"] for part in content
                         if isinstance(part, dict) and isinstance(part.get("text"), str))
    return "\n".join(texts)


@dataclass(frozen=True, slots=True)
class BatchRecord:
    """One batch, as kept in ``BatchFunctionEngine.batch_log``.

    index: batch number (1, 2, ...). start_s: loop-clock seconds when it was handed to a worker.
    duration_s: wall-clock seconds the function took (``time.perf_counter``; on a virtual-time loop
    the loop clock does not follow threads). size: requests in it. request_ids: in input order.
    error: ``repr`` of the function's exception, or None.
    """

    index: int
    start_s: float
    duration_s: float
    size: int
    request_ids: tuple[str, ...]
    error: str | None = None


class _Item:
    """The engine's state of one request."""

    __slots__ = ("completion", "request", "input", "state", "submitted_s", "started_s", "output")

    def __init__(self, completion: Completion, value: Any, submitted_s: float) -> None:
        self.completion = completion
        self.request = completion.request
        self.input = value
        self.state = _WAITING
        self.submitted_s = submitted_s
        self.started_s: float | None = None
        #: the function's raw output for this request (see ``BatchFunctionEngine.output_of``)
        self.output: Any = None


def _timed_call(fn: Callable[[list[Any]], Sequence[Any]], inputs: list[Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    outputs = fn(inputs)
    return outputs, time.perf_counter() - start


class BatchFunctionEngine(Engine):
    """Run ``fn(inputs) -> outputs`` (synchronous, batched) in worker threads, one batch per worker.

    Args:
        fn: ``fn(list_of_inputs) -> list_of_outputs``, same length and order (any sized iterable
            of outputs, e.g. a numpy array of rows). Called from a worker thread: it must not
            touch the event loop.
        max_batch_size: requests per batch at most (>= 1).
        max_delay_s: seconds a batch waits for more requests after its first one arrived (>= 0;
            0 still gathers the requests admitted in the same loop iteration).
        workers: threads, hence batches in flight at once (>= 1).
        model: the model id. input: ``request -> input`` (default :func:`request_text`: the
            prompt or the messages' text); it runs in :meth:`submit`, whose caller sees its errors.
        output: ``raw output -> str``, the result's text (default ``str``). The raw output stays
            reachable with :meth:`output_of` (``BatchFunctionEngine.output_of(completion)``, e.g.
            an embedding vector). Pass ``output=`` for large outputs: ``str`` of a 384-float
            numpy vector costs about 2 ms on the event loop.
        batch_log: keep the last ``batch_log`` :class:`BatchRecord` in ``batch_log`` (0: none).

    Batching: when a worker is free, the oldest waiting requests form a batch if there are
    ``max_batch_size`` of them or once the oldest has waited ``max_delay_s`` since its
    :meth:`submit`; while every worker is busy, waiting requests keep accumulating. When a batch
    returns, capacity listeners run first (a buffered upstream refills the slots at once), then
    the next batch forms.

    Capacity: ``max_num_seqs = max_batch_size * workers``; ``waiting`` = requests not yet in a
    batch, ``running`` = requests in batches being computed.

    Outcome of each request: its output's text as one chunk (``tokens`` estimated from the text:
    :func:`~rxpipe.engines.estimate_tokens`; 0 for an empty text), finish reason ``"stop"``.
    Errors affect their own requests only: ``fn`` raising fails every request of that batch with
    that exception (as ``map`` does with a user function's error, DESIGN §2); a wrong number of
    outputs fails that batch with ``EngineError``; ``output`` raising fails that request with
    its exception. A request cancelled while waiting never enters a batch; one cancelled while its
    batch runs finishes ``"cancelled"`` when the batch returns (a thread cannot be interrupted).
    A request past its ``deadline_s`` when its batch forms finishes ``"deadline"``.

    Anchors: Triton's dynamic batcher (``max_batch_size``, ``max_queue_delay_microseconds``),
    TorchServe's ``batch_size`` / ``max_batch_delay``.
    """

    def __init__(self, fn: Callable[[list[Any]], Sequence[Any]], max_batch_size: int, max_delay_s: float, *,
                 workers: int = 1, model: str = "batch", input: Callable[[CompletionRequest], Any] | None = None,
                 output: Callable[[Any], str] | None = None, batch_log: int = 0) -> None:
        if not callable(fn):
            raise TypeError(f"BatchFunctionEngine(fn=) needs a callable, got {fn!r}")
        check_int(max_batch_size, "BatchFunctionEngine(max_batch_size=)", minimum=1)
        check_int(workers, "BatchFunctionEngine(workers=)", minimum=1)
        check_number(max_delay_s, "BatchFunctionEngine(max_delay_s=)", minimum=0)
        check_int(batch_log, "BatchFunctionEngine(batch_log=)", minimum=0)
        super().__init__(model=model, max_num_seqs=max_batch_size * workers)
        self.fn = fn
        self.max_batch_size = max_batch_size
        self.max_delay_s = float(max_delay_s)
        self.workers = workers
        self._input = input if input is not None else request_text
        self._output = output if output is not None else str
        #: the last ``batch_log`` batches (empty when ``batch_log=0``)
        self.batch_log: deque[BatchRecord] = deque(maxlen=batch_log)
        #: batches run; requests that went through the function
        self.batches = 0
        self.items = 0
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"rxpipe-batch-{model}")
        self._closed = False
        self._pending: deque[_Item] = deque()
        self._n_waiting = 0
        self._n_running = 0
        self._busy = 0
        self._inflight: set[asyncio.Future[Any]] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_when = 0.0

    # -- Engine ----------------------------------------------------------------------------------
    @property
    def running(self) -> int:
        return self._n_running

    @property
    def waiting(self) -> int:
        return self._n_waiting

    @property
    def available(self) -> bool:
        return not self._closed

    @staticmethod
    def output_of(completion: Completion) -> Any:
        """The raw output ``fn`` returned for ``completion``'s request (None before its batch
        returned, or when it failed or was cancelled)."""
        item = completion.engine_state
        return item.output if isinstance(item, _Item) else None

    @property
    def unavailable_reason(self) -> str:
        return "closed"

    def prepare(self, request: CompletionRequest) -> Any:
        """The request's input, ``input(request)``, mapped once before admission: what the
        mapping raises reaches the caller of :meth:`submit` (the request stays unsubmitted)."""
        return self._input(request)

    def start(self, completion: Completion, now_s: float) -> None:
        """Queue the admitted ``completion`` for a batch (see :class:`BatchFunctionEngine`): a
        full batch goes to a free worker at once, else the delay timer is armed."""
        item = _Item(completion, completion.engine_state, now_s)  # engine_state: prepare's input
        completion.engine_state = item
        self._pending.append(item)
        self._n_waiting += 1
        if self._n_waiting >= self.max_batch_size:
            self._dispatch()  # a full batch goes at once
        else:
            self._arm()  # even with max_delay_s=0: the rest of this loop iteration joins the batch

    async def aclose(self) -> None:
        """Close: waiting requests finish ``"cancelled"``, running batches are awaited (their
        requests finish ``"cancelled"``), the worker threads are released."""
        if self._closed:
            return
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        now = self._loop.time() if self._loop is not None else 0.0
        while self._pending:
            item = self._pending.popleft()
            if item.state == _WAITING:
                item.state = _DONE
                self._n_waiting -= 1
                self._finish(item, "cancelled", now)
        if self._inflight:
            await asyncio.gather(*self._inflight, return_exceptions=True)
        self._pool.shutdown(wait=False)

    # -- Completion hooks ------------------------------------------------------------------------
    def cancel_completion(self, completion: Completion) -> None:
        item = completion.engine_state
        if not isinstance(item, _Item) or item.state != _WAITING:
            return  # running: finished "cancelled" when its batch returns
        item.state = _DONE  # removed lazily from the queue
        self._n_waiting -= 1
        self._finish(item, "cancelled", self._loop.time())  # type: ignore[union-attr]
        self.notify_capacity()

    # -- batching --------------------------------------------------------------------------------
    def bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Refuse to move with work in flight (:meth:`Engine.bind_loop`); drop the old loop's timer."""
        super().bind_loop(loop)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _head(self) -> _Item | None:
        pending = self._pending
        while pending and pending[0].state != _WAITING:
            pending.popleft()
        return pending[0] if pending else None

    def _arm(self) -> None:
        """Wake up when the oldest waiting request's delay ends (if a worker could take it)."""
        head = self._head()
        if head is None or self._busy >= self.workers:
            return  # nothing to wait for, or a returning batch re-evaluates
        due = head.submitted_s + self.max_delay_s
        timer = self._timer
        if timer is not None:
            if self._timer_when <= due:
                return
            timer.cancel()
        self._timer_when = due
        self._timer = self._loop.call_at(due, self._on_timer)  # type: ignore[union-attr]

    def _on_timer(self) -> None:
        self._timer = None
        self._dispatch(self._timer_when)

    def _dispatch(self, reached: float = 0.0) -> None:
        """Hand batches to free workers: full ones, or ones whose oldest request waited enough."""
        loop = self._loop
        assert loop is not None
        limit = max(loop.time(), reached) + _CLOCK_TOLERANCE_S
        while self._busy < self.workers and not self._closed:
            head = self._head()
            if head is None:
                return
            if self._n_waiting < self.max_batch_size and head.submitted_s + self.max_delay_s > limit:
                self._arm()
                return
            self._start_batch(loop)

    def _start_batch(self, loop: asyncio.AbstractEventLoop) -> None:
        pending = self._pending
        now = loop.time()
        batch: list[_Item] = []
        expired: list[_Item] = []
        while pending and len(batch) < self.max_batch_size:
            item = pending.popleft()
            if item.state != _WAITING:
                continue  # cancelled while waiting: skipped
            self._n_waiting -= 1
            deadline = item.request.deadline_s
            if deadline is not None and now > deadline:
                item.state = _DONE
                expired.append(item)
                continue
            item.state = _RUNNING
            item.started_s = now
            batch.append(item)
        if batch:
            self._n_running += len(batch)
            self._busy += 1
            self.batches += 1
            future = loop.run_in_executor(self._pool, _timed_call, self.fn, [item.input for item in batch])
            self._inflight.add(future)
            future.add_done_callback(partial(self._batch_done, batch, self.batches, now))
        for item in expired:
            self._finish(item, "deadline", now)
        if expired:
            self.notify_capacity()

    def _batch_done(self, batch: list[_Item], index: int, started_s: float, future: asyncio.Future[Any]) -> None:
        loop = self._loop
        assert loop is not None
        self._inflight.discard(future)
        self._busy -= 1
        self._n_running -= len(batch)
        now = loop.time()
        duration = 0.0
        error: BaseException | None = None
        outputs: list[Any] | None = None
        if future.cancelled():
            error = EngineUnavailableError(f"engine {self.model!r}: the batch was cancelled")
        else:
            error = future.exception()
            if error is None:
                raw, duration = future.result()
                try:
                    outputs = list(raw)
                except TypeError:
                    outputs = None
                if outputs is None or len(outputs) != len(batch):
                    got = f"{len(outputs)} outputs" if outputs is not None else f"{type(raw).__name__}"
                    error = EngineError(f"engine {self.model!r}: the batch function returned {got} for "
                                        f"{len(batch)} inputs")
                    outputs = None
        self.items += len(batch)
        _metrics.observe_step(self, duration, sum(item.request.prompt_tokens for item in batch))
        if self.batch_log.maxlen:
            self.batch_log.append(BatchRecord(index, started_s, duration, len(batch),
                                              tuple(item.request.id for item in batch),
                                              None if error is None else repr(error)))
        for i, item in enumerate(batch):
            item.state = _DONE
            completion = item.completion
            if completion.cancel_requested or self._closed:
                self._finish(item, "cancelled", now)
            elif outputs is None:
                completion.fail(error)  # type: ignore[arg-type]
            else:
                item.output = outputs[i]
                self._finish(item, "stop", now)
        if not self._closed:
            # Demand first: a buffered upstream refills the freed slots synchronously, so the next
            # batch forms from everything available now, not only from what waited meanwhile.
            self.notify_capacity()
            self._dispatch()

    def _finish(self, item: _Item, reason: str, now: float) -> None:
        completion = item.completion
        request = item.request
        arrival = request.arrival_s if request.arrival_s is not None else now
        started = item.started_s
        text = ""
        tokens = 0
        if reason == "stop":
            try:
                text = self._output(item.output)
            except Exception as error:
                completion.fail(error)
                return
            if not isinstance(text, str):
                completion.fail(TypeError(f"BatchFunctionEngine(output=) must return str, got {type(text).__name__}"))
                return
            if text:
                tokens = estimate_tokens(text)
                completion.push(text, tokens)
        completion.finish(CompletionResult(text, reason, request.prompt_tokens, tokens,
                                           (now if started is None else started) - arrival,
                                           now - arrival if tokens else None, now - arrival))

    def __repr__(self) -> str:
        return (f"<BatchFunctionEngine {self.model} running={self._n_running} waiting={self._n_waiting} "
                f"max_batch_size={self.max_batch_size} workers={self.workers}>")
