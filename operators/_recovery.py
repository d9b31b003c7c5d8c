"""Recovering from an upstream error: ``catch`` and ``retry`` (DESIGN §3, "Operators, second round").

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

__all__ = ["catch_stage", "retry_stage"]


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


#: The operators (``rxpipe.operators`` checks the arguments and documents them).
catch_stage = operator(Catch)
retry_stage = operator(RetryStage)
