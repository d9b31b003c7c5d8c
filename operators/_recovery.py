"""Subscribing again: ``catch`` and ``retry`` (on an upstream error, DESIGN §3's second round),
``repeat``, ``do_while`` and ``while_do`` (at its completion, the third round).

Written on :class:`rxpipe.stage.Stage`, demand-driven (``prefetch = None``). On an error the
stage opens the continuation (``catch``: the handler's Flowable; ``retry``: the upstream again)
as an input with ``prefetch=None``, so it is asked for exactly the downstream demand still
outstanding: what was requested and not delivered carries over, what was delivered is never
requested again.

``retry`` re-subscribes on the loop's next turn (a 0-second timer of the stage, cancelled with
it), never from inside the failing source's signal: a source that fails as soon as it is
subscribed cannot monopolise the event loop under ``retry()`` (forever), and a cancel arriving
meanwhile stops it. Off an event loop it re-subscribes at once.

Values, order and terminal signals are reactivex 6.1's (checked by the differential tests).
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable

from rxpipe import Publisher
from rxpipe.stage import Input, Stage, operator

from ._publishers import publisher_problem

__all__ = ["catch_stage", "retry_stage", "repeat_stage", "do_while_stage", "while_do_stage"]


class Catch(Stage):
    """The upstream's items; on its error, the items of the continuation the handler gives."""

    log_hook_errors = False  # a user function's error is the stream's (as map's)
    prefetch = None
    kind = "catch"

    def __init__(self, handler: Publisher[Any] | Callable[[BaseException, Any], Any]) -> None:
        self.handler = handler

    def on_next(self, item: Any) -> None:
        self.emit(item)

    def on_error(self, error: BaseException) -> None:
        handler = self.handler
        if isinstance(handler, Publisher):
            continuation: Any = handler
        else:
            try:
                continuation = handler(error, self.upstream_flowable)
            except Exception as handler_error:  # the handler's verdict (often a re-raise): not a bug to log
                self.fail(handler_error)
                return
            problem = publisher_problem(continuation)
            if problem is not None:
                self.fail(TypeError(f"catch: the handler must return a Flowable to continue with: {problem}"))
                return
        self.open_input(continuation, prefetch=None)  # type: ignore[arg-type]  # a Publisher is adapted

    def on_input_complete(self, input: Input) -> None:
        self.complete()

    # on_input_error: the default fail(); a continuation's error is not caught again (reactivex)


class RetryStage(Stage):
    """The upstream's items; on its error, subscribe to it again, up to ``retry_count``
    subscriptions in all (None: forever)."""

    log_hook_errors = False  # a user function's error is the stream's (as map's)
    prefetch = None
    passes_capabilities = True
    kind = "retry"

    def __init__(self, retry_count: int | None) -> None:
        self.retry_count = retry_count
        self.subscriptions = 1

    def on_next(self, item: Any) -> None:
        self.emit(item)

    def on_error(self, error: BaseException) -> None:
        self.again(error)

    def on_input_error(self, input: Input, error: BaseException) -> None:
        self.again(error)

    def on_input_complete(self, input: Input) -> None:
        self.complete()

    def again(self, error: BaseException) -> None:
        if self.retry_count is not None and self.subscriptions >= self.retry_count:
            self.fail(error)
            return
        self.subscriptions += 1
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            self.resubscribe()
        else:
            self.start_timer("resubscribe", 0.0)

    def on_timer(self, key: Any) -> None:
        self.resubscribe()

    def resubscribe(self) -> None:
        self.open_input(self.upstream_flowable, prefetch=None)


class Repeat(Stage):
    """The upstream's items, then, at each completion, the upstream again: ``repeat_count`` runs
    in all (None: forever), or while ``condition(upstream)`` holds (``while_do``: asked before
    every run, the first one included; ``do_while``: after every run).

    The next run is subscribed on the loop's next turn (a 0-second timer, as ``retry``'s), so
    an endless repeat of a synchronous source never monopolises the loop."""

    log_hook_errors = False  # the condition is the user's
    prefetch = None
    passes_capabilities = True
    kind = "repeat"

    def __init__(self, repeat_count: int | None, condition: Callable[[Any], Any] | None = None,
                 check_first: bool = False) -> None:
        self.left = repeat_count  # runs still to make, this one included (None: no count)
        self.condition = condition
        self.check_first = check_first

    def on_start(self) -> None:
        if self.left == 0 or (self.check_first and not self.condition(self.upstream_flowable)):  # type: ignore[misc]
            self.complete()  # no run at all: reactivex subscribes to nothing

    def on_next(self, item: Any) -> None:
        self.emit(item)

    def on_input_next(self, input: Input, item: Any) -> None:
        self.emit(item)

    def on_complete(self) -> None:
        self.again()

    def on_input_complete(self, input: Input) -> None:
        self.again()

    def on_input_error(self, input: Input, error: BaseException) -> None:
        self.fail(error)

    def again(self) -> None:
        if self.left is not None:
            self.left -= 1
            if self.left <= 0:
                self.complete()
                return
        if self.condition is not None and not self.condition(self.upstream_flowable):
            self.complete()
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            self.open_input(self.upstream_flowable, prefetch=None)
        else:
            self.start_timer("resubscribe", 0.0)

    def on_timer(self, key: Any) -> None:
        self.open_input(self.upstream_flowable, prefetch=None)


class DoWhile(Repeat):
    kind = "do_while"


class WhileDo(Repeat):
    kind = "while_do"


#: The operators (``rxpipe.operators`` checks the arguments and documents them).
catch_stage = operator(Catch)
retry_stage = operator(RetryStage)
repeat_stage = operator(Repeat)
do_while_stage = operator(DoWhile)
while_do_stage = operator(WhileDo)
