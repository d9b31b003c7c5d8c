"""The kit behind :class:`rxpipe.stage.Stage`: one :class:`StageRun` per subscription.

A run is the Subscription its downstream receives and the Subscriber of its upstream (plus one
:class:`Input` per extra upstream the stage opened). It owns, for every user stage, what a
hand-written operator gets wrong most often:

- *credit*: after every hook, every drain pass and every downstream request, :meth:`StageRun.top_up`
  requests what each upstream's window has free (the main upstream first, or the inputs first
  for an ``inputs_first`` stage; ``prefetch`` rule in :class:`~rxpipe.stage.Stage`);
  emitted items waiting for downstream demand and the stage's ``held`` items count against it;
  a ``lazy`` stage asks nothing while downstream wants nothing it has not emitted.
- *no stall*: when downstream wants, nothing is queued, nothing is outstanding anywhere and no
  timer is pending, held items cannot close the window: the kit requests it again beyond
  ``held`` (unless the stage declares ``held_bounds_credit``); ``held`` is checked after every
  hook (never negative, never over ``max_held``: the stage fails loudly instead of hanging).
- *serial hooks*: a hook is never entered while another runs (a signal arriving meanwhile, e.g.
  from an input subscribed inside a hook, is queued and run after it); emitted items are
  delivered after the hook returns (Reactive Streams §1.3, §3.3).
- *termination order*: ``complete()`` (and ``fail(error, after_queued=True)``) follows the
  queued items; ``fail()`` cuts ahead of them (dropped and told); either stops upstream, inputs
  and timers; nothing follows it (§1.7).
- *timers* on the loop's clock (``loop.call_at``), owned by the run and cancelled with it, so
  virtual time drives them and none outlives the stream.
- *exceptions* from hooks: logged once, then ``on_error`` downstream and cancel upstream.
- *statistics* from the run's own state, exported as ``rxpipe_stage_*`` metrics.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections import deque
from typing import Any, Callable, Hashable

from ._demand import QueueDrainSubscription, discard, log
from ._durations import as_seconds
from ._link import LINK_SLOTS, UpstreamLink, discard_all
from ._pressure import BACKPRESSURED, BUSY, IDLE
from ._protocol import UNBOUNDED, Publisher, Subscriber
from ._stage_logic import Stage
from .errors import BufferOverflowError, MissingBackpressureError
from .flowable import Flowable, Operator
from .metrics import StageStatistics

__all__ = ["StageRun", "Input", "StageFlowable", "operator"]


#: what a hook may raise that fails the stage: any Exception, and asyncio.CancelledError (a
#: BaseException raised by ``future.result()`` of a cancelled future inside a hook or a callback
#: passed to ``invoke``); KeyboardInterrupt and SystemExit go on
_HOOK_ERRORS = (Exception, asyncio.CancelledError)


def _window(owner: str, prefetch: object) -> tuple[int | None, int]:
    """Check a ``prefetch`` (int >= 1, None or UNBOUNDED); return it with its default replenish."""
    if prefetch is None:
        return None, 1
    if type(prefetch) is not int or prefetch < 1:
        raise ValueError(f"{owner}: prefetch must be an int >= 1 item, None (demand-driven) or "
                         f"rxpipe.UNBOUNDED, got {prefetch!r}")
    return prefetch, max(1, prefetch - prefetch // 4)


def _max_held(owner: str, max_held: object) -> int:
    if type(max_held) is not int or max_held < 1:
        raise ValueError(f"{owner}: max_held must be an int >= 1 item, got {max_held!r}")
    return max_held


def _per_output(owner: str, items: object, window: int | None) -> int:
    """Check ``items_per_output`` (an int >= 1; other than 1 only for a demand-driven stage)."""
    if type(items) is not int or items < 1:
        raise ValueError(f"{owner}: items_per_output must be an int >= 1 item, got {items!r}")
    if items != 1 and window is not None:
        raise ValueError(f"{owner}: items_per_output applies to a demand-driven stage (prefetch = None)")
    return items


def _scaled(requested: int, per_output: int) -> int:
    """Downstream's demand in upstream items: ``requested * per_output``, capped at UNBOUNDED."""
    if per_output == 1 or requested == UNBOUNDED:
        return requested
    total = requested * per_output
    return UNBOUNDED if total >= UNBOUNDED else total


def _free(window: int | None, requested: int, outstanding: int, pending: int) -> int:
    """How many items an upstream may be asked for now (0: none; UNBOUNDED: everything).

    ``pending`` = items held by the stage for this upstream + items waiting downstream.
    """
    if window is None:  # demand-driven: what downstream asked and is not yet covered
        if requested == UNBOUNDED:
            return UNBOUNDED
        return requested - outstanding - pending
    if window == UNBOUNDED:
        return UNBOUNDED
    return window - outstanding - pending


class _Timer:
    __slots__ = ("handle", "due", "interval_s")

    def __init__(self, handle: asyncio.TimerHandle, due: float, interval_s: float | None) -> None:
        self.handle = handle
        self.due = due
        self.interval_s = interval_s


class Input(UpstreamLink):
    """An extra upstream of a stage, opened with :meth:`rxpipe.stage.Stage.open_input`.

    Public state: ``source`` (the Flowable), ``key`` (the stage's own tag), ``held`` (int: items
    of this input the stage keeps; keep it current, it counts against this input's window),
    ``done`` (True once it completed, failed or was cancelled), ``outstanding`` (requested and
    not yet received). :meth:`cancel` stops it; no signal of it reaches the stage afterwards.
    Credit follows its ``prefetch`` exactly as the main upstream's (see ``Stage``).
    """

    __slots__ = (*LINK_SLOTS, "run", "source", "key", "held", "window", "replenish_at", "cancelled")
    hands_itself_downstream = False

    def __init__(self, run: StageRun, source: Flowable[Any], prefetch: int | None, key: Any) -> None:
        self.run = run
        self.source = source
        self.key = key
        self.held = 0
        #: cancelled by the stage: its signals still queued behind a running hook are dropped
        self.cancelled = False
        self.window, self.replenish_at = _window("open_input", prefetch)
        self.link_upstream(None)

    @property
    def done(self) -> bool:
        return self.upstream_done

    @property
    def outstanding(self) -> int:
        return self.upstream_outstanding

    def cancel(self) -> None:
        """Cancel this input (idempotent); the stage hears nothing more from it, not even a
        signal that arrived while the current hook runs."""
        self.cancelled = True
        self.cancel_upstream()
        self.run.input_closed(self)

    def _upstream_ready(self) -> None:
        if not self.run.in_hook:  # else the run tops up once the hook returned
            self.run.top_up()

    def on_next(self, item: Any) -> None:
        if self.accept(item):
            run = self.run
            run.counters.items_in += 1
            run.call(run.logic.on_input_next, self, item)

    def _upstream_finished(self, error: BaseException | None) -> None:
        run = self.run
        run.input_closed(self)
        if error is None:
            run.call(run.logic.on_input_complete, self)
        else:
            run.call(run.logic.on_input_error, self, error)

    def _upstream_overrun(self, error: MissingBackpressureError) -> None:
        self.run.input_closed(self)
        self.run.fail(error)

    def top_up(self, queued: int, requested: int) -> None:
        outstanding = self.upstream_outstanding
        if outstanding == UNBOUNDED:
            return
        run = self.run
        held = self.held
        if not 0 <= held <= run.max_held:
            run.bad_held(held, self)
            return
        free = _free(self.window, requested, outstanding, held + queued)
        # the rounds rule of StageRun.top_up, the early request and the no-stall rule included
        if outstanding == 0 and queued == 0 and requested > 0 and run.nothing_coming(self):
            if free <= 0 and held and run.may_pass_held():
                free = _free(self.window, requested, 0, 0)
            if free > 0:
                self.request_upstream(free)
        elif free >= self.replenish_at:
            self.request_upstream(free)

    def __repr__(self) -> str:
        return f"<Input key={self.key!r} of {self.run.counters.stage!r}>"


class StageRun(QueueDrainSubscription, UpstreamLink):
    """One subscription of a :class:`~rxpipe.stage.Stage`: the kit's side (see module doc).

    State: ``logic`` (the user's Stage), ``queue`` (emitted, not yet delivered), the main
    upstream link (:class:`~rxpipe.stage.UpstreamLink`), ``inputs`` (open extra upstreams),
    ``timers`` (key → timer), ``closing`` (complete() or fail() was called).
    """

    __slots__ = (*LINK_SLOTS, "logic", "flowable", "loop", "window", "replenish_at", "inputs", "timers",
                 "started", "closing", "in_hook", "deferred", "topping", "top_missed", "logged",
                 "downstream_cancelled", "wants_requests", "on_next_hook", "try_next", "lazy", "max_held",
                 "strict_held", "reports_busy", "per_output")

    def __init__(self, downstream: Subscriber[Any], logic: Stage, flowable: StageFlowable,
                 loop: asyncio.AbstractEventLoop | None) -> None:
        super().__init__(downstream)
        self.logic = logic
        self.flowable = flowable
        self.loop = loop
        cls = type(logic)
        self.window, self.replenish_at = _window(cls.__name__, logic.prefetch)
        if logic.replenish is not None and self.window not in (None, UNBOUNDED):
            if type(logic.replenish) is not int or not 1 <= logic.replenish <= self.window:  # type: ignore[operator]
                raise ValueError(f"{cls.__name__}: replenish must be an int in [1, prefetch={self.window}], "
                                 f"got {logic.replenish!r}")
            self.replenish_at = logic.replenish
        self.inputs: list[Input] = []
        self.timers: dict[Hashable, _Timer] = {}
        self.started = False
        self.closing = False
        self.in_hook = False
        self.deferred: deque[tuple[Callable[..., Any], tuple[Any, ...]]] = deque()
        self.topping = False
        self.top_missed = False
        self.logged = False
        self.downstream_cancelled = False
        self.wants_requests = cls.on_request is not Stage.on_request
        self.lazy = bool(logic.lazy)
        self.max_held = _max_held(cls.__name__, logic.max_held)
        self.strict_held = bool(logic.held_bounds_credit)
        self.reports_busy = bool(logic.reports_busy)
        self.per_output = _per_output(cls.__name__, logic.items_per_output, self.window)
        logic._kit = self
        self.on_next_hook = logic.on_next
        #: a fused chain downstream takes items through try_on_next (a dropped one uses no demand)
        self.try_next = getattr(downstream, "try_on_next", None)
        if not hasattr(logic, "held"):  # a slot the stage's __init__ did not set
            logic.held = 0
        self.link_upstream(flowable.name)

    # -- hooks: serial, exceptions caught --------------------------------------------------------
    def call(self, hook: Callable[..., Any], *args: Any) -> None:
        """Run a hook of the stage, serially; then deliver what it emitted and top credit up."""
        if self.in_hook:
            self.deferred.append((hook, args))
            return
        if self.cancelled:
            return
        self.in_hook = True
        try:
            self._run_hook(hook, args)
            if self.deferred:
                self._run_deferred()
        finally:
            self.in_hook = False
        self.drain()
        self.top_up()
        if self.reports_busy:
            self._pressure_update()

    def invoke(self, callback: Callable[..., Any], args: tuple[Any, ...]) -> bool:
        """``Stage.invoke``: ``callback(*args)`` as a hook; False once the stage terminated."""
        if self.cancelled or self.closing:
            return False
        self.call(callback, *args)
        return True

    def _run_deferred(self) -> None:
        """Run the signals that arrived while a hook ran, in order (still inside the hook guard)."""
        deferred = self.deferred
        while deferred:
            hook, args = deferred.popleft()
            if self.cancelled or self.closing:  # signals of what complete()/fail() stopped
                deferred.clear()
                return
            if args and isinstance(args[0], Input) and args[0].cancelled:
                continue  # a signal of an input the stage cancelled meanwhile
            self._run_hook(hook, args)

    def _run_hook(self, hook: Callable[..., Any], args: tuple[Any, ...]) -> None:
        try:
            hook(*args)
        except _HOOK_ERRORS as error:
            self.hook_raised(hook, error)

    def hook_raised(self, hook: Callable[..., Any], error: BaseException) -> None:
        if not self.logged and self.logic.log_hook_errors:
            self.logged = True
            log.error("stage %r: %s.%s raised %r; the stream fails with it", self.counters.stage,
                      type(self.logic).__name__, getattr(hook, "__name__", hook), error, exc_info=error)
        self.fail(error)

    # -- main upstream → stage -------------------------------------------------------------------
    def _upstream_ready(self) -> None:
        # Nothing is requested before on_start ran, even if downstream asked in on_subscribe.
        self.started = True
        requested = self.requested
        if self.wants_requests and requested:
            self.call(self._start_with_demand, requested)
        else:
            self.call(self.logic.on_start)

    def _start_with_demand(self, requested: int) -> None:
        """on_start, then on_request for the demand that came before the start (downstream asked
        in on_subscribe: to_list, async for), before any of it is passed upstream."""
        self._run_hook(self.logic.on_start, ())
        if not (self.cancelled or self.closing):
            self._run_hook(self.logic.on_request, (requested,))

    def on_next(self, item: Any) -> None:
        # The per-item path, inlined (accept, call, top_up's test): one hook call, one drain,
        # and a request upstream only when the window has `replenish_at` free (or nothing is
        # outstanding). Invariant kept: outstanding + held + queued <= window.
        outstanding = self.upstream_outstanding
        if not outstanding:
            self.refuse(item)  # after the end: ignored; beyond demand: MissingBackpressureError
            return
        if outstanding != UNBOUNDED:
            outstanding -= 1
            self.upstream_outstanding = outstanding
        self.counters.items_in += 1
        if self.in_hook:
            self.deferred.append((self.on_next_hook, (item,)))
            return
        self.in_hook = True
        try:
            self.on_next_hook(item)
        except _HOOK_ERRORS as error:
            self.hook_raised(self.on_next_hook, error)
        finally:
            if self.deferred:
                self._run_deferred()
            self.in_hook = False
        held = self.logic.held
        if not 0 <= held <= self.max_held:  # checked per item: the cap is exact, even inside a burst
            self.bad_held(held, None)
            return
        self.drain()
        if self.reports_busy:
            self._pressure_update()
        window = self.window
        if window is None or window == UNBOUNDED or self.top_missed or self.inputs:
            self.top_up()
        elif not self.upstream_done:
            outstanding = self.upstream_outstanding
            queued = len(self.queue)
            if (window - outstanding - held - queued >= self.replenish_at
                    or (not outstanding and not queued and self.requested)):
                self.top_up()

    def _upstream_finished(self, error: BaseException | None) -> None:
        if error is None:
            self.call(self.logic.on_complete)
        else:
            self.call(self.logic.on_error, error)

    def _upstream_overrun(self, error: MissingBackpressureError) -> None:
        self.fail(error)

    # -- downstream → stage ----------------------------------------------------------------------
    def request(self, n: int) -> None:
        super().request(n)  # counts n, drains (or signals §3.9)
        if self.started and not self.cancelled and not self.closing:
            if self.wants_requests:
                self.call(self.logic.on_request, n)
            else:
                self.top_up()

    def cancel(self) -> None:
        if not self.cancelled:
            self.downstream_cancelled = True
        super().cancel()

    def _on_delivered(self, count: int) -> None:
        self.counters.items_out += count

    def _drain(self) -> None:
        # One emitted item and demand for it (a 1:1 stage keeping up): deliver it without the
        # general pass's setup. Everything else: QueueDrainSubscription's pass.
        queue = self.queue
        if len(queue) == 1 and self.requested and not self.finished:
            item = queue.popleft()
            try_next = self.try_next
            if try_next is None:
                self.downstream.on_next(item)
                used = True
            else:
                used = try_next(item)  # a fused chain: False when it dropped the item
            self.emitted += 1
            self.counters.items_out += 1
            if used and self.requested != UNBOUNDED:
                self.requested -= 1
            return
        QueueDrainSubscription._drain(self)

    def _pressure_state(self) -> int:
        """Busy while a stage with ``reports_busy`` has ``busy > 0``; else backpressured while it
        holds items (emitted, or its ``held``) without downstream demand; else idle."""
        logic = self.logic
        if self.reports_busy and logic.busy > 0:
            return BUSY
        if not self.requested and (self.queue or logic.held > 0):
            return BACKPRESSURED
        return IDLE

    def _release(self) -> None:
        # Once: on cancel or when the terminal signal went downstream.
        logic = self.logic
        if self.downstream_cancelled and not self.closing:
            self.closing = True
            self._last_hook(logic.on_cancel)
        self._stop_all()
        self.queue.clear()
        self.deferred.clear()
        self._last_hook(logic.on_stop)

    def _last_hook(self, hook: Callable[[], Any]) -> None:
        """on_cancel / on_stop: nothing downstream can hear of an error now; it is logged."""
        try:
            hook()
        except _HOOK_ERRORS as error:
            log.error("stage %r: %s.%s raised %r", self.counters.stage, type(self.logic).__name__,
                      hook.__name__, error, exc_info=error)

    def _stop_all(self) -> None:
        """Cancel timers, the main upstream (unless it ended) and every input."""
        timers = self.timers
        if timers:
            for timer in timers.values():
                timer.handle.cancel()
            timers.clear()
        self.cancel_upstream()
        inputs = self.inputs
        if inputs:
            self.inputs = []
            for inp in inputs:
                inp.cancel_upstream()

    # -- credit ----------------------------------------------------------------------------------
    def top_up(self) -> None:
        """Request from each upstream what its window has free (serial; see module doc)."""
        if self.topping:
            self.top_missed = True
            return
        if self.cancelled or self.closing or not self.started:
            return
        self.topping = True
        try:
            while True:
                self.top_missed = False
                requested = self.requested
                if self.lazy and (requested == 0 or requested != UNBOUNDED and requested <= len(self.queue)):
                    return  # lazy: downstream wants nothing not yet emitted
                inputs_first = bool(self.inputs) and self.logic.inputs_first
                if inputs_first:
                    self._top_up_inputs()
                    if self.cancelled or self.closing:
                        return
                outstanding = self.upstream_outstanding
                held = self.logic.held
                if not 0 <= held <= self.max_held:
                    self.bad_held(held, None)
                    return
                if not self.upstream_done and outstanding != UNBOUNDED:
                    # a stage emitting lists of k (items_per_output) counts demand, and its
                    # queued outputs, in upstream items: request(n) lists -> n * k items
                    per_output = self.per_output
                    queued = len(self.queue) * per_output
                    wanted = _scaled(self.requested, per_output)
                    free = _free(self.window, wanted, outstanding, held + queued)
                    # Request in rounds of at least `replenish_at` (Reactor's limitRate), or
                    # early, whatever is free, when downstream is owed items, none waits in the
                    # queue and nothing is coming from any upstream: then only this request can
                    # make progress. If held items fill the window then (a partial group
                    # waiting for more of this upstream), the window is requested again beyond
                    # them: what a stage holds never closes its own window (held stays bounded
                    # by max_held). A slow consumer draining the queue, or held items waiting
                    # for another input (zip's), cost upstream one request per round.
                    if outstanding == 0 and queued == 0 and self.requested > 0 and self.nothing_coming(None):
                        if free <= 0 and held and self.may_pass_held():
                            free = _free(self.window, wanted, 0, 0)
                        if free > 0:
                            self.request_upstream(free)
                    elif free >= self.replenish_at:
                        self.request_upstream(free)
                if self.inputs and not inputs_first:
                    self._top_up_inputs()
                if not self.top_missed or self.cancelled or self.closing:
                    return
        finally:
            self.topping = False

    def nothing_coming(self, asking: Input | None) -> bool:
        """True when no upstream but ``asking`` (None: the main one) has items outstanding."""
        if asking is not None and self.upstream_outstanding and not self.upstream_done:
            return False
        for inp in self.inputs:
            if inp is not asking and inp.upstream_outstanding and not inp.upstream_done:
                return False
        return True

    def may_pass_held(self) -> bool:
        """Whether held items may be passed (requested beyond) in the stall state: not for a
        ``held_bounds_credit`` stage, nor while a timer of the stage is pending (it may emit)."""
        return not self.strict_held and not self.timers

    def bad_held(self, held: object, inp: Input | None) -> None:
        """``held`` is negative, not an int, or over ``max_held``: fail the stage loudly."""
        owner = f"stage {self.counters.stage!r}" + ("" if inp is None else f" (input {inp.key!r})")
        if type(held) is int and held > self.max_held:
            self.fail(BufferOverflowError(
                f"{owner} holds {held} items, over max_held={self.max_held} items: emit what is ready, "
                f"drop() what is discarded, or raise max_held (class or instance attribute)"))
        else:
            self.fail(ValueError(f"{owner}: held must be an int >= 0 (the items the stage keeps), got {held!r}"))

    def _top_up_inputs(self) -> None:
        for inp in tuple(self.inputs):
            if not inp.upstream_done:
                inp.top_up(len(self.queue), self.requested)

    def demanded(self) -> int:
        requested = self.requested
        if requested == UNBOUNDED:
            return UNBOUNDED
        free = requested - len(self.queue)
        return free if free > 0 else 0

    # -- actions -----------------------------------------------------------------------------------
    def emit(self, item: Any) -> None:
        if self.closing or self.cancelled:
            if self.downstream_cancelled:
                return
            raise RuntimeError(f"stage {self.counters.stage!r}: emit() after complete() or fail()")
        if item is None:
            raise TypeError(f"stage {self.counters.stage!r} emitted None; items are never None "
                            f"(Reactive Streams §2.13)")
        self.queue.append(item)
        if not self.in_hook:
            self.drain()
            self.top_up()

    def complete(self, error: BaseException | None = None) -> None:
        """``Stage.complete()``, or ``Stage.fail(error, after_queued=True)`` with ``error``."""
        if self.closing or self.cancelled:
            return
        self.closing = True
        self._stop_all()
        self.error = error
        self.finished = True
        if not self.in_hook:
            self.drain()

    def fail(self, error: BaseException) -> None:
        if self.cancelled:
            return
        self.closing = True  # after complete(), the error replaces the completion still due
        self._stop_all()
        held = list(self.queue)
        self.queue.clear()
        discard_all(held, "error", self.counters)
        QueueDrainSubscription.fail(self, error)

    def drop(self, item: Any, reason: str) -> None:
        self.counters.drop(reason)
        discard(item, reason)

    def now(self) -> float:
        loop = self.loop
        if loop is None:
            raise RuntimeError(f"stage {self.counters.stage!r}: the clock needs a running event loop "
                               f"(subscribe inside a coroutine)")
        return loop.time()

    def start_timer(self, key: Hashable, delay_s: Any, interval_s: Any) -> None:
        delay_s, interval_s = as_seconds(delay_s), as_seconds(interval_s)
        if isinstance(delay_s, bool) or not isinstance(delay_s, (int, float)) or not 0 <= delay_s < math.inf:
            raise ValueError(f"start_timer({key!r}): delay_s must be a finite number of seconds >= 0, got {delay_s!r}")
        if interval_s is not None and (isinstance(interval_s, bool) or not isinstance(interval_s, (int, float))
                                       or not 0 < interval_s < math.inf):
            raise ValueError(f"start_timer({key!r}): interval_s must be a finite number of seconds > 0, "
                             f"got {interval_s!r}")
        if self.closing or self.cancelled:
            return
        due = self.now() + delay_s
        old = self.timers.get(key)
        if old is not None:
            old.handle.cancel()
        self.timers[key] = _Timer(self.loop.call_at(due, self._fire, key), due, interval_s)  # type: ignore[union-attr]

    def cancel_timer(self, key: Hashable) -> None:
        timer = self.timers.pop(key, None)
        if timer is not None:
            timer.handle.cancel()

    def _fire(self, key: Hashable) -> None:
        timer = self.timers.get(key)
        if timer is None or self.cancelled or self.closing:
            return
        if timer.interval_s is None:
            del self.timers[key]
        else:
            loop = self.loop
            assert loop is not None
            due = timer.due + timer.interval_s
            now = loop.time()
            if due <= now:  # the loop was late by a whole interval or more: skip missed ticks
                due += math.floor((now - due) / timer.interval_s + 1) * timer.interval_s
            timer.due = due
            timer.handle = loop.call_at(due, self._fire, key)
        self.call(self.logic.on_timer, key)

    def open_input(self, source: Flowable[Any], prefetch: int | None, key: Any) -> Input:
        if not isinstance(source, Flowable):
            if isinstance(source, Publisher):
                from .sources import from_publisher

                source = from_publisher(source)
            else:
                raise TypeError(f"open_input() needs a Flowable, got {source!r}")
        if self.closing or self.cancelled:
            raise RuntimeError(f"stage {self.counters.stage!r}: open_input() after the stage terminated")
        inp = Input(self, source, prefetch, key)
        self.inputs.append(inp)
        source._subscribe_safely(inp)
        return inp

    def pull(self, inp: Input | None) -> None:
        """``Stage.pull``: top up one upstream's credit now (inside a hook too)."""
        if self.cancelled or self.closing:
            return
        if inp is None:
            self.top_up()
            return
        # The inputs opened before it first, in order, as top_up does: a new input never takes
        # credit ahead of an older one waiting for it (flat_map's inner streams keep their order).
        for other in tuple(self.inputs):
            if not other.upstream_done:
                other.top_up(len(self.queue), self.requested)
            if other is inp:
                return

    def input_closed(self, inp: Input) -> None:
        try:
            self.inputs.remove(inp)
        except ValueError:
            pass

    # -- introspection -----------------------------------------------------------------------------
    def statistics(self) -> StageStatistics:
        """Demand (items), items held (emitted and waiting + the stage's ``held`` + its inputs'),
        the window as capacity (None when demand-driven or unbounded), items in/out, drops."""
        counters = self.counters
        held = len(self.queue) + self.logic.held + sum(inp.held for inp in self.inputs)
        window = self.window
        capacity = window if window is not None and window != UNBOUNDED else None
        return StageStatistics(counters.stage, self.requested, held, capacity, counters.items_in,
                               counters.items_out, dict(counters.dropped))


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class StageFlowable(Flowable[Any]):
    """The graph node of an operator made with :func:`operator`: one new ``Stage`` per subscribe."""

    def __init__(self, source: Flowable[Any], stage_class: type[Stage], args: tuple[Any, ...],
                 kwargs: dict[str, Any], kind: str, name: str | None) -> None:
        self.kind = kind
        inputs = tuple(stage_class.graph_inputs(*args, **kwargs))
        for inp in inputs:
            if not isinstance(inp, Flowable):
                raise TypeError(f"{stage_class.__name__}.graph_inputs() returned {inp!r}, not a Flowable")
        super().__init__(name=name, upstreams=(source, *inputs))
        self.source = source
        self.stage_class = stage_class
        self.args = args
        self.kwargs = kwargs
        self.passes_capabilities = stage_class.passes_capabilities

    def _subscribe(self, subscriber: Subscriber[Any]) -> None:
        logic = self.stage_class(*self.args, **self.kwargs)
        self.source._subscribe(StageRun(subscriber, logic, self, _running_loop()))


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


def operator(stage_class: type[Stage]) -> Callable[..., Operator]:
    """Make the operator factory of a :class:`~rxpipe.stage.Stage` subclass.

    ``factory = operator(MyStage)``; ``factory(*args, name=None, **kwargs)`` returns an operator
    (``Callable[[Flowable], Flowable]``) for ``pipe``; each subscription runs a new
    ``MyStage(*args, **kwargs)``. The arguments are checked at once: ``MyStage(*args, **kwargs)``
    is also called when the factory is, so a ValueError/TypeError from ``__init__`` is raised
    there. ``name`` names the stage (metrics, graphs; default ``<kind>_<index>``, ``kind`` being
    ``MyStage.kind`` or the class name in snake_case). Usable as a class decorator too.
    Raises TypeError if ``stage_class`` is not a Stage subclass.
    """
    if not (isinstance(stage_class, type) and issubclass(stage_class, Stage)):
        raise TypeError(f"operator() needs a subclass of rxpipe.stage.Stage, got {stage_class!r}")
    kind = stage_class.kind or _snake(stage_class.__name__)
    _window(stage_class.__name__, stage_class.prefetch)  # a bad class attribute fails here, not at run time
    _max_held(stage_class.__name__, stage_class.max_held)

    def factory(*args: Any, name: str | None = None, **kwargs: Any) -> Operator:
        stage_class(*args, **kwargs)  # check the arguments now (the instance is discarded)

        def apply(source: Flowable[Any]) -> Flowable[Any]:
            return StageFlowable(source, stage_class, args, kwargs, kind, name)

        return apply

    factory.__name__ = factory.__qualname__ = kind
    factory.__doc__ = stage_class.__doc__
    factory.__module__ = stage_class.__module__
    factory.stage_class = stage_class  # type: ignore[attr-defined]
    return factory
