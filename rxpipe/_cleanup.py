"""A source's cleanup after its subscription ended: never a lost error.

A source that runs a task of its own (``from_async_iterable``'s pump) finishes that task after a
``cancel`` — the iterator's ``finally`` blocks, its ``aclose()`` — when its subscriber is already
gone: Reactive Streams §3.15 leaves nowhere to signal what fails then (RxJava hands such errors to
``RxJavaPlugins.onError``). rxpipe logs it (logger ``rxpipe``, ERROR, with its traceback), and the
run that started the source — :meth:`rxpipe.Pipeline.run` — waits for those tasks when the graph
is done and raises the first such error to its caller.

:func:`watch` marks a run (a context variable, inherited by the tasks the run's subscriptions
start); :func:`track` registers a source's task with the run it belongs to; :func:`failed`
reports a cleanup error.
"""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any

from ._demand import log

__all__ = ["CleanupWatch", "watch", "unwatch", "track", "failed"]


class CleanupWatch:
    """The source tasks of one run still finishing (``tasks``) and their cleanup errors (``errors``)."""

    __slots__ = ("tasks", "errors")

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[Any]] = set()
        self.errors: list[BaseException] = []

    async def settle(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` seconds for the tracked tasks (a cleanup that hangs longer is
        logged and left running)."""
        tasks = [task for task in self.tasks if not task.done()]
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=timeout_s)
        if pending:
            log.error("%d source tasks still cleaning up %.1f s after the pipeline finished; not waiting for them",
                      len(pending), timeout_s)


_WATCH: contextvars.ContextVar[CleanupWatch | None] = contextvars.ContextVar("rxpipe_cleanup_watch", default=None)


def watch() -> tuple[CleanupWatch, contextvars.Token[CleanupWatch | None]]:
    """Start watching the source tasks started from here on in this context; give the token to
    :func:`unwatch` when the run ends."""
    current = CleanupWatch()
    return current, _WATCH.set(current)


def unwatch(token: contextvars.Token[CleanupWatch | None]) -> None:
    _WATCH.reset(token)


def track(task: asyncio.Task[Any]) -> None:
    """Register ``task`` (a source's own task) with the run being watched, if any."""
    current = _WATCH.get()
    if current is not None:
        current.tasks.add(task)
        task.add_done_callback(current.tasks.discard)


def failed(error: BaseException, what: str) -> None:
    """A source's cleanup raised ``error`` after its subscriber left: log it (``what`` says
    which cleanup) and hand it to the watching run, if any (from inside the source's task)."""
    log.error("%s: %r", what, error, exc_info=(type(error), error, error.__traceback__))
    current = _WATCH.get()
    if current is not None:
        current.errors.append(error)
