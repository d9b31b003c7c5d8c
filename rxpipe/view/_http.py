"""The live view over HTTP: ``GET /pipeline.json``, ``GET /pipeline/events``, ``GET /pipeline``.

:class:`ViewRoutes` holds the three handlers (aiohttp ``web.Request`` → response) for any server:
the gateway dispatches to them on its own port; :class:`StatusServer` is the small aiohttp
application ``rxpipe run FILE --status-port P`` serves them on for any pipeline.
"""

from __future__ import annotations

import asyncio
import contextlib
from html import escape
from importlib import resources
from typing import Callable

import orjson
from aiohttp import web

from ._render import BOX_W, svg
from ._snapshot import PipelineView

__all__ = ["ViewRoutes", "StatusServer", "EVENTS_INTERVAL_S", "MAX_STREAMS", "PATHS"]

#: seconds between two snapshots on ``GET /pipeline/events``
EVENTS_INTERVAL_S = 1.0
#: ``GET /pipeline/events`` streams open at once, by default (one more gets 503)
MAX_STREAMS = 16
#: the view's paths
PATHS = ("/pipeline.json", "/pipeline/events", "/pipeline")

_NO_CACHE = {"Cache-Control": "no-store"}


def _json(snapshot: dict[str, object]) -> bytes:
    # "<" escaped: the page inlines a snapshot in a <script> (a stage name is the author's text)
    return orjson.dumps(snapshot).replace(b"<", b"\\u003c")


class ViewRoutes:
    """The view's handlers over one :class:`PipelineView`.

    ``stopping()``: True once the server stops taking work (an event stream then ends, so a
    drain never waits for it). ``max_streams``: event streams open at once (>= 1; one more gets
    503 with ``Retry-After``). ``interval_s``: seconds between two events (> 0).
    ``before_send(request, response)``: called on every answer before its status line goes out
    (the gateway's ``x-request-id``). Raises ValueError for a bad bound.
    """

    def __init__(self, view: PipelineView, *, stopping: Callable[[], bool] = lambda: False,
                 max_streams: int = MAX_STREAMS, interval_s: float = EVENTS_INTERVAL_S,
                 before_send: Callable[[web.Request, web.StreamResponse], None] | None = None) -> None:
        if isinstance(max_streams, bool) or not isinstance(max_streams, int) or max_streams < 1:
            raise ValueError(f"max_streams must be an int >= 1, got {max_streams!r}")
        if isinstance(interval_s, bool) or not isinstance(interval_s, (int, float)) or not interval_s > 0:
            raise ValueError(f"interval_s must be a number of seconds > 0, got {interval_s!r}")
        self.view = view
        self.stopping = stopping
        self.max_streams = max_streams
        self.interval_s = float(interval_s)
        self.before_send = before_send
        self.streams = 0
        self._template = resources.files(__package__).joinpath("page.html").read_text("utf-8")

    def handlers(self) -> dict[str, Callable[[web.Request], object]]:
        """path → handler, for a dispatch table."""
        return {"/pipeline.json": self.snapshot, "/pipeline/events": self.events, "/pipeline": self.page}

    def _answer(self, request: web.Request, response: web.StreamResponse) -> web.StreamResponse:
        if self.before_send is not None:
            self.before_send(request, response)
        return response

    async def snapshot(self, request: web.Request) -> web.StreamResponse:
        """``GET /pipeline.json``: one snapshot (DESIGN §7)."""
        return self._answer(request, web.Response(body=_json(self.view.snapshot()), content_type="application/json",
                                                  headers=_NO_CACHE))

    async def page(self, request: web.Request) -> web.StreamResponse:
        """``GET /pipeline``: the page (HTML, scripts and styles inline: nothing is fetched from
        elsewhere); the graph is drawn with the current snapshot and then follows the events."""
        snapshot = self.view.snapshot()
        neck = snapshot["bottleneck"]
        html = (self._template.replace("{{TITLE}}", escape(self.view.pipeline.name))
                .replace("{{BOTTLENECK}}", escape(neck) if isinstance(neck, str) else "none")
                .replace("{{AT}}", "")
                .replace("{{BOX_W}}", str(BOX_W))
                .replace("{{EVENTS}}", "pipeline/events")
                .replace("{{SVG}}", svg(self.view.nodes, snapshot))
                .replace("{{SNAPSHOT}}", _json(snapshot).decode()))
        return self._answer(request, web.Response(text=html, content_type="text/html", charset="utf-8",
                                                  headers=_NO_CACHE))

    async def events(self, request: web.Request) -> web.StreamResponse:
        """``GET /pipeline/events``: Server-Sent Events, one ``data: <snapshot>`` a second, until
        the client leaves or the server stops."""
        if self.streams >= self.max_streams:
            return self._answer(request, web.json_response(
                {"error": {"message": f"at most {self.max_streams} view streams at once", "type": "overloaded_error",
                           "code": "too_many_streams"}}, status=503, headers={"Retry-After": "5"}))
        self.streams += 1
        try:
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store",
                                                   "X-Accel-Buffering": "no"})
            self._answer(request, response)
            await response.prepare(request)
            while not self.stopping():
                await response.write(b"data: " + _json(self.view.snapshot()) + b"\n\n")
                await asyncio.sleep(self.interval_s)
            with contextlib.suppress(ConnectionError):
                await response.write_eof()
            return response
        except ConnectionError:  # the client left
            return response
        finally:
            self.streams -= 1


class StatusServer:
    """The view on a port of its own (``rxpipe run FILE --status-port P``): an aiohttp
    application with :class:`ViewRoutes`' three routes (``/`` redirects to ``/pipeline``) and a
    ticker taking a reading a second.

    ``start(host, port)`` returns the URL (port 0: a free one); raises OSError when the port
    cannot be bound. ``stop()`` ends the event streams and closes the server.
    """

    def __init__(self, view: PipelineView, *, max_streams: int = MAX_STREAMS) -> None:
        self.view = view
        self._stopping = False
        self.routes = ViewRoutes(view, stopping=lambda: self._stopping, max_streams=max_streams)
        self._runner: web.AppRunner | None = None
        self._ticker: asyncio.Task[None] | None = None
        self.url: str | None = None

    async def start(self, host: str, port: int) -> str:
        app = web.Application()
        for path, handler in self.routes.handlers().items():
            app.router.add_get(path, handler)  # type: ignore[arg-type]
        app.router.add_get("/", self._home)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, host, port)
        try:
            await site.start()
        except OSError:
            await runner.cleanup()
            raise
        self._runner = runner
        bound = runner.addresses[0]
        self.url = f"http://{host}:{bound[1]}"
        self._ticker = asyncio.get_running_loop().create_task(self.view.run_ticker(), name="rxpipe view ticker")
        return self.url

    async def _home(self, request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound("/pipeline")

    async def stop(self) -> None:
        self._stopping = True
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
            self._ticker = None
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()
