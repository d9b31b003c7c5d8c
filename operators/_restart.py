"""Stopping and restarting streams: ``kill_switch`` and ``restart_with_backoff``.

Both on :class:`rxpipe.stage.Stage`, demand-driven (``prefetch = None``): a kill switch passes
demand through exactly; a restarting source opens each new run of its inner source as an input
asked for exactly the downstream demand still outstanding, so what was requested and not
delivered carries over and nothing delivered is requested again.

``restart_with_backoff`` follows Akka's ``RestartSource.withBackoff`` (``RestartWithBackoffLogic``
and ``BackoffSupervisor.calculateDelay``): the ``k``-th consecutive restart (k = 0, 1, ...) waits
``min(max_s, min_s * 2 ** k) * (1 + U[0, 1) * jitter)``; the count resets once a run has lasted
``max_restarts_within_s``; ``max_restarts`` restarts within that window end the stream with the
last run's signal. An error's ``retry_after`` (seconds, e.g. from an HTTP 429) is the minimum
delay, as in ``Retry``.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import weakref
from datetime import timedelta
from typing import Any, Callable

from rxpipe._protocol import Publisher
from rxpipe.flowable import Flowable
from rxpipe.resilience import retry_after_of
from rxpipe.sources import empty
from rxpipe.stage import Input, Stage, operator

from ._args import check_callable, check_duration, check_int_arg
from ._publishers import publisher_problem

__all__ = ["KillSwitch", "kill_switch", "restart_with_backoff", "KillSwitchStage", "RestartWithBackoff"]

log = logging.getLogger("rxpipe")


class KillSwitchStage(Stage):
    """One run behind a :class:`KillSwitch`: items pass on demand until the switch is thrown."""

    prefetch = None  # demand passed through exactly
    passes_capabilities = True
    kind = "kill_switch"

    def __init__(self, switch: KillSwitch) -> None:
        self.switch = switch
        self.loop: asyncio.AbstractEventLoop | None = None

    def on_start(self) -> None:
        try:
            self.loop = asyncio.get_running_loop()
        except RuntimeError:
            self.loop = None
        self.switch._runs.add(self)
        if self.switch.state is not None:  # thrown before this run started: it ends at once
            self.end()

    def on_next(self, item: Any) -> None:
        self.emit(item)

    def end(self) -> None:
        state = self.switch.state
        if state is None:
            return
        kind, error = state
        if kind == "shutdown":
            self.complete()  # after the items already emitted; upstream cancelled
        else:
            self.fail(error)  # type: ignore[arg-type]

    def on_stop(self) -> None:
        self.switch._runs.discard(self)


_kill_switch_stage = operator(KillSwitchStage)


class KillSwitch:
    """A handle that ends, from outside, every stream it is applied to (``source.pipe(switch)``).

    :meth:`shutdown` completes each running stream downstream and cancels its upstream;
    :meth:`abort` fails it with the given error and cancels its upstream. A stream subscribed
    after the switch was thrown ends the same way at once. Both are idempotent and the first
    call wins (Akka's ``SharedKillSwitch``). They may be called from any thread: a run on
    another thread's loop is reached with ``call_soon_threadsafe``. State: ``state`` (None
    while open, else ``("shutdown", None)`` or ``("abort", error)``), ``running`` (runs alive).
    """

    def __init__(self, name: str | None = None) -> None:
        self.name = name
        self.state: tuple[str, BaseException | None] | None = None
        self._runs: weakref.WeakSet[KillSwitchStage] = weakref.WeakSet()
        self._lock = threading.Lock()

    def __call__(self, source: Flowable[Any]) -> Flowable[Any]:
        """The operator: ``source.pipe(switch)``."""
        return _kill_switch_stage(self, name=self.name)(source)

    @property
    def running(self) -> int:
        return len(self._runs)

    def shutdown(self) -> None:
        """Complete every stream behind this switch (after the items already emitted) and cancel
        their upstreams; later streams complete at once."""
        self._throw(("shutdown", None))

    def abort(self, error: BaseException) -> None:
        """Fail every stream behind this switch with ``error`` (ahead of items not yet
        delivered) and cancel their upstreams; later streams fail at once. TypeError unless
        ``error`` is an exception instance."""
        if not isinstance(error, BaseException):
            raise TypeError(f"KillSwitch.abort() needs an exception instance, got {error!r}")
        self._throw(("abort", error))

    def _throw(self, state: tuple[str, BaseException | None]) -> None:
        with self._lock:
            if self.state is not None:
                return
            self.state = state
            runs = list(self._runs)
        try:
            here: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        for run in runs:
            loop = run.loop
            if loop is None or loop is here:
                run.invoke(run.end)
            elif not loop.is_closed():
                loop.call_soon_threadsafe(run.invoke, run.end)

    def __repr__(self) -> str:
        state = "open" if self.state is None else self.state[0]
        return f"<KillSwitch {self.name or ''} {state}, {self.running} running>"


def kill_switch(*, name: str | None = None) -> KillSwitch:
    """A handle to complete or fail running streams from outside; apply it with ``pipe``.

        source:  -a-b-c-d-|
        demand:  ^*
        output:  -a-b-|          switch.shutdown() in column 5: completed, upstream cancelled

    ``switch = ops.kill_switch()``; ``flowable.pipe(..., switch, ...)``; later
    ``switch.shutdown()`` (complete downstream) or ``switch.abort(error)`` (fail downstream
    with ``error``); either cancels upstream. One switch may stop many streams (every run it
    is applied to) and stays thrown: a stream subscribed afterwards ends at once.
    Demand: passed through exactly (no prefetch, no queue); nothing is dropped by
    ``shutdown`` (items already delivered are all there were).
    Signals: ``abort(error)`` raises TypeError for a non-exception; the switch is idempotent
        and thread-safe (see :class:`KillSwitch`); upstream errors and completion pass through.
    Anchor: Akka ``KillSwitches.shared(name)`` (``SharedKillSwitch.shutdown`` / ``abort``),
        ``KillSwitches.single``.
    """
    return KillSwitch(name)


class RestartWithBackoff(Stage):
    """One run of ``restart_with_backoff`` over ``empty()``: its inner runs are inputs.

    State: ``restarts`` (consecutive restarts, the backoff exponent), ``reset_at`` (loop time
    after which the count resets), ``inner`` (the input running, or None during a backoff).
    """

    prefetch = None  # the inner run is asked for exactly what downstream still wants
    log_hook_errors = False  # the factory's error is the stream's
    kind = "restart_with_backoff"

    def __init__(self, factory: Callable[[], Any], min_s: float, max_s: float, jitter: float,
                 max_restarts: int | None, within_s: float, only_on_failures: bool, rng: random.Random) -> None:
        self.factory = factory
        self.min_s = min_s
        self.max_s = max_s
        self.jitter = jitter
        self.max_restarts = max_restarts
        self.within_s = within_s
        self.only_on_failures = only_on_failures
        self.rng = rng
        self.restarts = 0
        self.reset_at = 0.0
        self.inner: Input | None = None

    def on_next(self, item: Any) -> None:  # pragma: no cover - the main upstream is empty()
        raise AssertionError("no main items")

    def on_complete(self) -> None:
        """The empty main upstream ended: the first run starts at on_start."""

    def on_start(self) -> None:
        self.start_inner()

    def start_inner(self) -> None:
        self.reset_at = self.now + self.within_s
        source = self.factory()
        problem = publisher_problem(source)
        if problem is not None:
            raise TypeError(f"restart_with_backoff: the factory must return a Flowable: {problem}")
        self.inner = self.open_input(source, prefetch=None)

    def on_input_next(self, input: Input, item: Any) -> None:
        self.emit(item)

    def on_input_complete(self, input: Input) -> None:
        self.inner = None
        if self.only_on_failures or self.restarts_spent():
            self.complete()
        else:
            self.back_off(None)

    def on_input_error(self, input: Input, error: BaseException) -> None:
        self.inner = None
        if self.restarts_spent():
            self.fail(error)
        else:
            self.back_off(error)

    def restarts_spent(self) -> bool:
        if self.now >= self.reset_at:  # the last run lasted the window: the backoff starts over
            self.restarts = 0
        return self.max_restarts is not None and self.restarts >= self.max_restarts

    def back_off(self, error: BaseException | None) -> None:
        k = self.restarts
        base = self.max_s if k >= 1024 else min(self.max_s, self.min_s * 2.0 ** k)
        delay = base * (1.0 + self.rng.random() * self.jitter)
        retry_after = retry_after_of(error) if error is not None else None
        if retry_after is not None:
            if retry_after > self.max_s:  # longer than the caller allows: give up now (as Retry)
                self.fail(error)  # type: ignore[arg-type]
                return
            delay = max(delay, retry_after)
        self.restarts = k + 1
        # Akka's levels: a failure is worth a warning, a completion (a source that ends by design) is not
        log.log(logging.INFO if error is None else logging.WARNING, "restart_with_backoff %r: restart %d in %.3f s "
                "after %s", self.stage_name, k + 1, delay, "completion" if error is None else repr(error))
        self.start_timer("restart", delay)

    def on_timer(self, key: Any) -> None:
        self.start_inner()


_restart_stage = operator(RestartWithBackoff)


def restart_with_backoff(factory: Callable[[], Flowable[Any] | Publisher[Any]], min_s: float | timedelta,
                         max_s: float | timedelta, jitter: float = 0.2, max_restarts: int | None = None, *,
                         max_restarts_within_s: float | timedelta | None = None, only_on_failures: bool = False,
                         rng: random.Random | None = None, name: str | None = None) -> Flowable[Any]:
    """A source that runs ``factory()`` and, when that run fails or completes, runs it again
    after an exponential backoff with jitter (a flaky upstream: an SSE feed, a broker).

        source:  -a-b#                  the first run of factory(): an error in column 4
        second:          -c|            the second run, min_s = 0.04 s later
        third:                     -e   the third, 0.08 s after the second completed
        demand:  ^*
        output:  -a-b-----c---------e   restart_with_backoff(factory, 0.04, 0.16, jitter=0)

    The second run lasted 0.02 s, less than ``max_restarts_within_s`` (default ``min_s``), so
    its end counts as a consecutive restart and the delay doubles.
    It is a source (Akka's ``RestartSource``), not an operator: the result is a Flowable.
    After a run ends, the ``k``-th consecutive restart (k = 0, 1, ...) waits
    ``min(max_s, min_s * 2 ** k) * (1 + U[0, 1) * jitter)`` seconds (Akka's
    ``BackoffSupervisor.calculateDelay``: the jitter can add up to ``jitter * 100`` % above
    ``max_s``). An error with a ``retry_after`` attribute (seconds, e.g. an HTTP 429's
    Retry-After) makes that the minimum delay; one above ``max_s`` ends the stream with that
    error at once (as ``Retry`` does). A run that lasted ``max_restarts_within_s`` (default
    ``min_s``) resets the count: the next delay is ``min_s`` again. After ``max_restarts``
    restarts within that window (None: no limit) the next end is the stream's end: its
    completion, or its error. ``only_on_failures=True``: a completed run completes the stream
    (Akka ``RestartSource.onFailuresWithBackoff``).
    Demand: each run is asked for exactly what downstream requested and has not received (no
    read-ahead); during a backoff nothing is requested and the demand waits for the next run.
    Items a run delivered are never requested again; restarting is lossless between runs.
    Args: factory (() -> Flowable or Publisher, called for every run); min_s, max_s (seconds or
        ``timedelta``, 0 < min_s <= max_s); jitter (>= 0, Akka's ``randomFactor``);
        max_restarts (int >= 0 or None); rng (a ``random.Random`` for the jitter, seedable).
    Signals: TypeError/ValueError (raised here) for bad arguments; the factory raising or not
        returning a Publisher fails the stream with that error; each restart is logged on the
        ``rxpipe`` logger (WARNING after a failure, INFO after a completion, as Akka does);
        cancel cancels the running run and the backoff timer.
    Anchor: Akka ``RestartSource.withBackoff(RestartSettings(minBackoff, maxBackoff,
        randomFactor).withMaxRestarts(n, within))``; AWS "exponential backoff and jitter".
    """
    check_callable("restart_with_backoff", factory, "factory")
    low = check_duration("restart_with_backoff", "min_s", min_s)
    high = check_duration("restart_with_backoff", "max_s", max_s)
    if high < low:
        raise ValueError(f"restart_with_backoff(max_s) must be >= min_s={low}, got {high!r}")
    if isinstance(jitter, bool) or not isinstance(jitter, (int, float)) or not 0 <= jitter < float("inf"):
        raise ValueError(f"restart_with_backoff(jitter) must be a finite number >= 0, got {jitter!r}")
    if max_restarts is not None:
        check_int_arg("restart_with_backoff", "max_restarts", max_restarts, 0)
    within = low if max_restarts_within_s is None else check_duration(
        "restart_with_backoff", "max_restarts_within_s", max_restarts_within_s)
    if rng is not None and not isinstance(rng, random.Random):
        raise TypeError(f"restart_with_backoff(rng=) needs a random.Random, got {rng!r}")
    return _restart_stage(factory, low, high, float(jitter), max_restarts, within, bool(only_on_failures),
                          rng if rng is not None else random.Random(), name=name)(empty())
