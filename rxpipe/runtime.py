"""Running pipelines: :class:`Pipeline`, its services, and embedding with ``async with``."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, AsyncIterator, Callable, Iterator

from . import _cleanup
from ._demand import log
from ._link import LINK_SLOTS, UpstreamLink
from .errors import MissingBackpressureError
from .flowable import Flowable, Operator
from .metrics import StageScope, scoped
from .settings import Setting

__all__ = ["Pipeline", "RunningPipeline", "Service", "walk", "DRAIN_TIMEOUT"]

#: ``Pipeline(drain_timeout_s=)`` as the pipelines take it (``--set drain_timeout_s=...``)
DRAIN_TIMEOUT = Setting("drain_timeout_s", 30.0, "number", "on SIGINT/SIGTERM, in-flight requests get this long (s)",
                        minimum=0)


class Service:
    """A stage that owns something outside the graph (an HTTP listener, a Redis connection).

    A :class:`Pipeline` starts every service found in its graph before subscribing, and on stop
    drains them (``drain``: refuse new work, let accepted work finish within a timeout) and then
    stops them. ``start`` returns the service's URL, or None. ``rxpipe run`` calls ``reload`` on
    SIGHUP.
    """

    def attach(self, pipeline: Pipeline) -> None:
        """Called once before :meth:`start` with the pipeline the service belongs to."""

    async def start(self, host: str, port: int | None) -> str | None:
        return None

    async def drain(self, timeout_s: float) -> None:
        """Stop admitting work; return once in-flight work finished or ``timeout_s`` passed."""

    def abort(self) -> None:
        """Stop waiting in :meth:`drain` now (a second SIGINT/SIGTERM)."""

    def reload(self) -> bool:
        """SIGHUP: read again what the service reads from files (a gateway's tenants file); True
        when it had something to reload (whether that succeeded or not: it logs either way)."""
        return False

    async def stop(self) -> None:
        """Release everything; called once after ``drain``."""


def walk(flowable: Flowable[Any]) -> Iterator[Flowable[Any]]:
    """Every stage of the graph ending at ``flowable``, upstream first, each once."""
    seen: set[int] = set()
    order: list[Flowable[Any]] = []

    def visit(node: Flowable[Any]) -> None:
        if id(node) in seen:
            return
        seen.add(id(node))
        for upstream in node.upstreams:
            visit(upstream)
        order.append(node)

    visit(flowable)
    return iter(order)


class Pipeline:
    """A runnable pipeline: a source Flowable followed by operators.

    ``Pipeline(source, *operators, name=..., drain_timeout_s=30.0)``. Run it to completion with
    ``await pipeline.run(on_item)``, or embed it::

        async with pipeline.start(port=0) as running:
            print(running.url)        # the HTTP edge's URL, when the graph has one

    Leaving the block drains the services (in-flight work finishes within ``drain_timeout_s``
    seconds), cancels the subscription and stops everything: the services, then the engines of
    its ``execute`` stages (``Engine.aclose``: an ``OpenAIEngine`` closes its HTTP session).
    """

    def __init__(self, source: Flowable[Any], *operators: Operator, name: str = "pipeline",
                 drain_timeout_s: float = 30.0) -> None:
        if not isinstance(source, Flowable):
            raise TypeError(f"Pipeline needs a Flowable source, got {source!r}")
        DRAIN_TIMEOUT.check(drain_timeout_s, "Pipeline(drain_timeout_s=)")
        self.flowable: Flowable[Any] = source.pipe(*operators)
        self.name = name
        self.drain_timeout_s = drain_timeout_s
        #: the stages of the current (or last) run (:class:`~rxpipe.metrics.StageScope`)
        self.scope = StageScope()

    @classmethod
    def of(cls, obj: Pipeline | Flowable[Any]) -> Pipeline:
        """``obj`` if it is a Pipeline, else a Pipeline over the Flowable ``obj``."""
        return obj if isinstance(obj, Pipeline) else cls(obj)

    @property
    def stages(self) -> list[Flowable[Any]]:
        return list(walk(self.flowable))

    @property
    def services(self) -> list[Service]:
        return [stage for stage in walk(self.flowable) if isinstance(stage, Service)]

    @property
    def engines(self) -> list[Any]:
        """The engines of its ``execute`` stages (each once), in graph order."""
        found: list[Any] = []
        for stage in walk(self.flowable):
            engine = getattr(stage, "engine", None)
            if engine is not None and callable(getattr(engine, "aclose", None)) and engine not in found:
                found.append(engine)
        return found

    @property
    def serves_http(self) -> bool:
        return bool(self.services)

    async def run(self, on_item: Callable[[Any], Any] | None = None) -> int:
        """Consume the pipeline to completion (prefetch 256, replenished by 192); return the item
        count. With ``on_item`` each item is passed to it from an ``async for``; without, the
        items are counted as they arrive, inside upstream's signal, with no task wake per item
        (a serving graph's output — one Completion per request — costs nothing to consume).

        Raises the pipeline's error, or an error ``on_item`` raised. Cancelling the calling task
        (``asyncio.timeout``, ``wait_for``) cancels the subscription at once: nothing upstream
        runs on after the caller got its ``CancelledError``/``TimeoutError``. When the graph is
        done, the tasks of its sources that are still cleaning up after a cancel are awaited
        (up to ``drain_timeout_s``) and the first error their cleanup raised is raised here (it
        is logged too; :mod:`rxpipe._cleanup`); a cancelled run only logs them.
        """
        watch, token = _cleanup.watch()
        try:
            count = await self._consume(on_item)
        except asyncio.CancelledError:
            raise
        except BaseException:
            await watch.settle(self.drain_timeout_s)  # logged by the sources; the graph's error wins
            raise
        finally:
            _cleanup.unwatch(token)
        await watch.settle(self.drain_timeout_s)
        if watch.errors:
            raise watch.errors[0]
        return count

    async def _consume(self, on_item: Callable[[Any], Any] | None) -> int:
        scope = self.scope = StageScope()  # this run's stages, for the live view
        if on_item is None:
            with scoped(scope):
                done = _subscribe_counting(self.flowable)
            return await _counted(*done)
        count = 0
        with scoped(scope):
            items = self.flowable.__aiter__()
        try:
            async for item in items:
                count += 1
                on_item(item)
        finally:
            # leaving for any reason (an error, a cancel) cancels upstream now: an ``async for``
            # left by an exception does not close its iterator, and the frame the caller's
            # traceback holds would keep the subscription running
            await items.aclose()  # type: ignore[attr-defined]
        return count

    @contextlib.asynccontextmanager
    async def start(self, *, host: str = "127.0.0.1", port: int | None = 0,
                    on_item: Callable[[Any], Any] | None = None) -> AsyncIterator[RunningPipeline]:
        """Start services, then consume the pipeline in a task; stop cleanly on exit."""
        running = RunningPipeline(self)
        started: list[Service] = []
        try:
            for service in self.services:
                service.attach(self)
                url = await service.start(host, port)
                started.append(service)
                if url is not None and running.url is None:
                    running.url = url
            running.task = asyncio.get_running_loop().create_task(
                self.run(on_item), name=f"rxpipe pipeline {self.name}")
            yield running
        finally:
            await running._shutdown(started, self.drain_timeout_s)


class RunningPipeline:
    """A started pipeline: ``url`` (of its HTTP edge, or None), ``done`` and ``wait()``."""

    def __init__(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline
        self.url: str | None = None
        self.task: asyncio.Task[int] | None = None
        self._observed = False

    @property
    def done(self) -> bool:
        return self.task is not None and self.task.done()

    async def wait(self) -> int:
        """Wait until the pipeline completes; return its item count (raises its error)."""
        assert self.task is not None
        self._observed = True
        return await asyncio.shield(self.task)

    async def _shutdown(self, services: list[Service], drain_timeout_s: float) -> None:
        for service in services:
            await service.drain(drain_timeout_s)
        task = self.task
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        elif task is not None and not task.cancelled():
            error = task.exception()
            if error is not None and not self._observed:
                log.error("pipeline %r failed", self.pipeline.name,
                          exc_info=(type(error), error, error.__traceback__))
        for service in reversed(services):
            await service.stop()
        for engine in self.pipeline.engines:
            try:
                await engine.aclose()  # an OpenAIEngine's HTTP session, a batch function's thread...
            except Exception:
                log.exception("pipeline %r: closing engine %r failed", self.pipeline.name, engine)


class _CountingSink(UpstreamLink):
    """Counts a flowable's items as they arrive (prefetch and replenish: :class:`UpstreamLink`'s
    rule) and settles ``done`` with the count on completion, or with the error."""

    __slots__ = (*LINK_SLOTS, "done", "count")
    hands_itself_downstream = False

    def __init__(self, done: asyncio.Future[int], prefetch: int) -> None:
        self.done = done
        self.count = 0
        self.link_upstream(None, prefetch)

    def on_next(self, item: Any) -> None:
        if self.accept(item):
            self.count += 1
            self.replenish(1)

    def _upstream_finished(self, error: BaseException | None) -> None:
        self._end(error)

    def _upstream_overrun(self, error: MissingBackpressureError) -> None:
        self._end(error)

    def _end(self, error: BaseException | None) -> None:
        if not self.done.done():
            if error is None:
                self.done.set_result(self.count)
            else:
                self.done.set_exception(error)


def _subscribe_counting(flowable: Flowable[Any], prefetch: int = 256) -> tuple[asyncio.Future[int], _CountingSink]:
    """Subscribe a :class:`_CountingSink` to ``flowable``: its future and the sink."""
    done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    sink = _CountingSink(done, prefetch)
    flowable._subscribe_safely(sink)
    return done, sink


async def _counted(done: asyncio.Future[int], sink: _CountingSink) -> int:
    """The count ``sink`` settles ``done`` with; cancelling the awaiting task cancels it."""
    try:
        return await done
    finally:
        sink.cancel_upstream()  # no-op once upstream terminated
