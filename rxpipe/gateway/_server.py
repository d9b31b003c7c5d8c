"""The edge's HTTP server layer (aiohttp's low-level server and connection protocol): what happens
before a handler runs.

The edge runs aiohttp's low-level ``web.Server`` with one handler of its own that dispatches on
(method, path) (``_http.make_app``), not a ``web.Application``: the application's router,
match-info and middleware machinery cost ~5–10 µs CPU per request on one core (0.84–0.91× the
CPU per request: ``bench/http_stack.py``, ``aiohttp-lowlevel`` against ``aiohttp-app``;
docs/proxy-path-profile.md) and the edge used none of it. The request is still a ``web.Request`` with the body limit
``client_max_size`` (bytes), so handlers and responses are aiohttp's as before.

aiohttp answers a request its parser rejects (a malformed request line, an oversized header, an
unsupported ``Content-Encoding``) from ``RequestHandler.handle_error``, with a ``text/plain``
body and an ERROR log with a traceback; no middleware sees it (aio-libs/aiohttp#3287, #9882).
Its documented extension point is the request handler class itself, so the edge runs its own:

- every error answer is OpenAI's JSON error body, with ``x-request-id``; a 4xx is the client's
  fault and is logged at DEBUG, never with a traceback at ERROR;
- ``max_connections``: at the limit, a new connection makes room by closing the connection idle
  the longest (an idle keep-alive connection, or one that has not sent a whole request head
  yet: neither owes an answer), as nginx reuses idle keep-alive connections and Envoy and HAProxy
  close idle ones under connection pressure, so idle clients cannot keep real ones out; only
  when every connection is busy does the new one get ``503`` (JSON, ``Retry-After``) and is
  closed at once (the limit is lowered to what ``RLIMIT_NOFILE`` allows, leaving room for the
  process's own files);
- ``header_timeout_s``: a connection that has not completed a request head within it of being
  opened is closed (slow-header clients); idle keep-alive connections, and a slow head on one,
  are closed after ``keepalive_timeout_s`` (aiohttp's keep-alive timer);
- stopping answers what arrived: :meth:`EdgeRunner.stop_listening` closes the listener, then
  waits (bounded) until no connection owes an answer, before ``AppRunner.cleanup`` closes every
  connection without a handler running and drops bytes that arrive on them after.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.http_exceptions import BadHttpMessage, ContentEncodingError, HttpProcessingError, LineTooLong
from aiohttp.http_parser import RawRequestMessage
from aiohttp.streams import StreamReader
from aiohttp.web_protocol import RequestHandler

from ..errors import StartError
from ..serving._ids import new_id_hex, uuid4_hex_suffix
from ._config import GatewayConfig
from ._openai import error_body

__all__ = ["EdgeApp", "EdgeRunner", "HTTP_LOG", "new_request_id", "file_descriptor_room", "listen", "close"]

log = logging.getLogger("rxpipe.gateway")


class _ClientErrorFilter(logging.Filter):
    """aiohttp logs a malformed request (bad Content-Length, a body that does not decode, ...)
    with a traceback at ERROR, sometimes twice. That is the client's fault, and any client can
    trigger it: keep it at DEBUG so it cannot flood the log."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if _client_fault(error):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            record.exc_info = None  # no traceback, even at DEBUG: one line per malformed request
            return HTTP_LOG.isEnabledFor(logging.DEBUG)
        return True


def _client_fault(error: BaseException | None) -> bool:
    if isinstance(error, web.RequestPayloadError):  # wraps the parser's error on the body
        return True
    return isinstance(error, HttpProcessingError) and 400 <= (error.code or 500) < 500


#: The logger aiohttp's server protocol uses for the edge (client errors demoted to DEBUG).
HTTP_LOG = logging.getLogger("rxpipe.gateway.http")
HTTP_LOG.addFilter(_ClientErrorFilter())

_MAX_REQUEST_ID = 128

#: how often :meth:`EdgeRunner.stop_listening` looks whether every connection is answered (s)
SETTLE_POLL_S = 0.005


def new_request_id(given: str | None = None, own: str | None = None) -> str:
    """The ``x-request-id`` of an answer: ``given`` (the client's) if it is a sane request id
    (1–128 printable ASCII characters, no spaces); else the 32 hex digits of ``own``, the
    admitted request's id (``chatcmpl-<hex>``, so the answer's ``id``, this header and the
    backend's ``X-Request-Id`` are one id); else a new id (32 hex digits, a UUID4:
    :func:`~rxpipe.engines._ids.new_id_hex`)."""
    if given and len(given) <= _MAX_REQUEST_ID and given.isascii() and given.isprintable() and " " not in given:
        return given
    if own is not None:
        digits = uuid4_hex_suffix(own)
        if digits is not None:
            return digits
    return new_id_hex()


def file_descriptor_room(reserve: int = 64) -> int | None:
    """Connections the process can hold: the soft ``RLIMIT_NOFILE`` minus ``reserve`` for its
    own files and sockets (None where the limit is unknown or unlimited)."""
    try:
        import resource
    except ImportError:  # not on every platform
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return None
    return max(1, soft - reserve)


def _parser_error(status: int, error: BaseException | None) -> tuple[str, str, str]:
    """(message, type, code) of an error answered before any handler ran."""
    if status >= 500:
        if status == 504:
            return "the request handler timed out", "server_error", "timeout"
        return "internal error", "server_error", "internal_error"
    if isinstance(error, ContentEncodingError):
        # aiohttp's own text names a library to install: an internal detail
        return ("the request body's Content-Encoding is not supported, or the body does not decode with it",
                "invalid_request_error", "invalid_content_encoding")
    if isinstance(error, LineTooLong):
        return "a request line or header field is too long", "invalid_request_error", "header_too_large"
    if isinstance(error, BadHttpMessage) and error.message:
        detail = " ".join(error.message.split())[:200]  # aiohttp's text spans lines, with a caret
        return f"malformed HTTP request: {detail}", "invalid_request_error", "bad_http_request"
    return "malformed HTTP request", "invalid_request_error", "bad_http_request"


class _EdgeProtocol(RequestHandler):
    """aiohttp's connection protocol with the edge's error bodies, connection limit and header
    timeout (see the module docstring)."""

    __slots__ = ("_header_timer", "_edge")

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._header_timer: asyncio.TimerHandle | None = None
        super().connection_made(transport)
        server = self._manager
        assert isinstance(server, _EdgeServer)
        self._edge = server
        if server.open_connections > server.max_connections and not server.evict_idle():
            self._refuse_connection(transport)
            return
        server.activity[self] = None
        self._header_timer = self._loop.call_later(server.header_timeout_s, self._header_timeout)

    @property
    def evictable(self) -> bool:
        """Closing it loses nothing: it is open, has no request being answered, and none parsed
        and waiting (idle after an answer, or no whole request head received yet)."""
        if self.transport is None or self._force_close or self._messages:
            return False
        if self._request_count == 0:
            return True
        waiter = self._waiter
        return waiter is not None and not waiter.done()

    def _refuse_connection(self, transport: asyncio.BaseTransport) -> None:
        body = error_body("the server has too many open connections; retry after the indicated delay",
                          "overloaded_error", "too_many_connections")
        head = (f"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nRetry-After: 1\r\nretry-after-ms: 1000\r\n"
                f"x-request-id: {new_request_id()}\r\nConnection: close\r\n\r\n")
        try:
            transport.write(head.encode() + body)  # type: ignore[attr-defined]
        except (ConnectionError, RuntimeError):
            pass
        self.force_close()

    def _header_timeout(self) -> None:
        self._header_timer = None
        if self._request_count == 0 and not self._force_close:
            log.debug("closing a connection that sent no complete request head in time")
            self.force_close()

    def data_received(self, data: bytes) -> None:
        if self._edge.activity.get(self, 0) is None:  # most recently active last: the front is idle the longest
            self._edge.activity.move_to_end(self)
        super().data_received(data)
        if self._header_timer is not None and self._request_count:
            self._header_timer.cancel()
            self._header_timer = None

    def connection_lost(self, exc: BaseException | None) -> None:
        self._edge.activity.pop(self, None)
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None
        super().connection_lost(exc)

    @property
    def owes_answer(self) -> bool:
        """A request reached this connection and is not answered yet, or none has yet (a new
        connection: its client is sending one). False once it is closed, or idle after an answer
        (aiohttp's own idle test, ``RequestHandler._process_keepalive``: the connection's task
        waits for the next request and none is queued)."""
        if self.transport is None:
            return False
        waiter = self._waiter
        idle = waiter is not None and not waiter.done() and not self._messages
        return not idle or self._request_count == 0

    def handle_error(self, request: Any, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        """The answer to a request that failed before (or outside) the application: JSON, with
        ``x-request-id``; logged at DEBUG for a 4xx, with the traceback for a 5xx."""
        if 400 <= status < 500:
            self.logger.debug("client error %d from %s: %r", status, request.remote, exc)
        else:
            self.log_exception("Error handling request from %s", request.remote, exc_info=exc)
        if request.writer.output_size > 0:
            raise ConnectionError("Response is sent already, cannot send another response with the error message")
        text, type_, code = _parser_error(status, exc)
        response = web.Response(status=status, body=error_body(text, type_, code), content_type="application/json",
                                headers={"x-request-id": new_request_id()})
        response.force_close()
        return response


@dataclass(frozen=True, slots=True)
class EdgeApp:
    """What :class:`EdgeRunner` serves.

    handler: called with every request that parsed (a ``web.Request``, its ``match_info`` None);
        returns the answer (``web.StreamResponse``); it does its own routing. An exception it
        lets out is answered by :meth:`_EdgeProtocol.handle_error` (500, JSON).
    client_max_size: the request body limit (bytes): ``request.read()`` of a longer body raises
        ``web.HTTPRequestEntityTooLarge`` (aiohttp's ``client_max_size``).
    """

    handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    client_max_size: int


class _EdgeServer(web.Server):
    """aiohttp's low-level server making :class:`_EdgeProtocol` connections, counting them, and
    making each request a ``web.Request`` with the edge's body limit."""

    def __init__(self, app: EdgeApp, *, max_connections: int, header_timeout_s: float, **kwargs: Any) -> None:
        # the handler takes a web.Request: _edge_request makes every request one
        super().__init__(app.handler, request_factory=self._edge_request, **kwargs)  # type: ignore[arg-type]
        self.client_max_size = app.client_max_size
        self.max_connections = max_connections
        self.header_timeout_s = header_timeout_s
        self.open_connections = 0
        #: open connections, least recently active first (moved to the end on every read)
        self.activity: OrderedDict[_EdgeProtocol, None] = OrderedDict()
        #: connections closed to make room for new ones (idle keep-alive or no request yet)
        self.evicted = 0

    def evict_idle(self) -> bool:
        """Close the connection idle the longest that owes no answer (see
        :attr:`_EdgeProtocol.evictable`) to make room for a new one; False if every connection
        is busy. Scans from the least recently active: a connection that received nothing for
        long and is busy (a long stream) is passed over, at most once per connection."""
        for connection in self.activity:
            if connection.evictable:
                self.evicted += 1
                log.debug("max_connections (%d) reached: closing the connection idle the longest",
                          self.max_connections)
                self.activity.pop(connection, None)
                connection.force_close()
                return True
        return False

    def _edge_request(self, message: RawRequestMessage, payload: StreamReader, protocol: RequestHandler,
                      writer: AbstractStreamWriter, task: asyncio.Task[None]) -> web.Request:
        return web.Request(message, payload, protocol, writer, task, self._loop, client_max_size=self.client_max_size)

    def __call__(self) -> RequestHandler:
        return _EdgeProtocol(self, loop=self._loop, **self._kwargs)

    def connection_made(self, handler: RequestHandler, transport: asyncio.Transport) -> None:
        self.open_connections += 1
        super().connection_made(handler, transport)

    def connection_lost(self, handler: RequestHandler, exc: BaseException | None = None) -> None:
        self.open_connections -= 1
        super().connection_lost(handler, exc)


class EdgeRunner(web.BaseRunner):
    """aiohttp's runner of the edge's low-level server (see the module docstring).

    Args: app (:class:`EdgeApp`); max_connections (connections, lowered to
    :func:`file_descriptor_room`); header_timeout_s (seconds); ``shutdown_timeout`` (seconds)
    and ``handle_signals`` go to ``web.BaseRunner``; other keyword arguments to aiohttp's
    ``RequestHandler`` (``keepalive_timeout`` in seconds, ``access_log``, ``logger``, the
    parser's ``max_line_size``/``max_field_size``/``max_headers``) and ``web.Server``
    (``handler_cancellation``).
    """

    def __init__(self, app: EdgeApp, *, max_connections: int, header_timeout_s: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.app = app
        room = file_descriptor_room()
        self.max_connections = max_connections if room is None else min(max_connections, room)
        if self.max_connections < max_connections:
            log.info("max_connections lowered from %d to %d: the open-file limit (ulimit -n) allows no more",
                     max_connections, self.max_connections)
        self.header_timeout_s = header_timeout_s

    async def stop_listening(self, timeout_s: float, abort: asyncio.Event | None = None) -> int:
        """Close the listening sockets (no new connection), then wait until no open connection
        :attr:`~_EdgeProtocol.owes_answer`, at most ``timeout_s`` seconds or until ``abort`` is
        set. Returns how many connections still owe one (``cleanup`` closes them unanswered).

        Run it before ``cleanup``: aiohttp's graceful shutdown waits only for handlers already
        running; a connection whose request is still on the wire, or not yet read, is closed
        without an answer, and its client sees the connection close (not a 503 it could retry
        elsewhere). A new connection's head is due within ``header_timeout_s`` of its opening
        anyway (its timer closes it), so this waits at most the smaller of the two. Polled every
        :data:`SETTLE_POLL_S`: aiohttp signals no "answered and idle" event, and this runs once
        per shutdown."""
        for site in list(self.sites):
            await site.stop()
        server = self.server
        if server is None:
            return 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            owing = sum(1 for connection in server.connections
                        if isinstance(connection, _EdgeProtocol) and connection.owes_answer)
            if not owing or loop.time() >= deadline or (abort is not None and abort.is_set()):
                return owing
            await asyncio.sleep(SETTLE_POLL_S)

    async def shutdown(self) -> None:
        """Nothing to run before the connections close (a ``web.Application``'s on_shutdown
        signals, in ``AppRunner``; the edge has none)."""

    async def _make_server(self) -> web.Server:
        return _EdgeServer(self.app, max_connections=self.max_connections, header_timeout_s=self.header_timeout_s,
                           loop=asyncio.get_running_loop(), **self._kwargs)

    async def _cleanup_server(self) -> None:
        pass


async def listen(app: EdgeApp, config: GatewayConfig, host: str, port: int) -> tuple[EdgeRunner, str]:
    """Serve ``app`` on ``host:port`` (0: a free port) with the edge's connection limits and
    timeouts from ``config``. Returns the runner and the URL it listens on. Raises
    :class:`~rxpipe.errors.StartError` naming why it cannot listen (the runner is cleaned up)."""
    # handler_cancellation: a client that disconnects cancels its handler, so queued work is
    # withdrawn and running work cancelled (DESIGN §5); access logs off (per-request cost); the
    # edge's own drain and stop_listening come first, so aiohttp's shutdown waits only briefly
    # for stragglers.
    runner = EdgeRunner(app, max_connections=config.max_connections, header_timeout_s=config.header_timeout_s,
                        keepalive_timeout=config.keepalive_timeout_s, handler_cancellation=True, access_log=None,
                        shutdown_timeout=config.shutdown_timeout_s, logger=HTTP_LOG)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except OSError as error:
        await runner.cleanup()
        raise StartError(f"cannot listen on {host}:{port}: {_why_not_listening(error)}") from error
    sockets = site._server.sockets if site._server is not None else []  # type: ignore[attr-defined]
    bound_host, bound_port = sockets[0].getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    return runner, f"http://{shown}:{bound_port}"


async def close(runner: EdgeRunner, timeout_s: float, abort: asyncio.Event | None) -> None:
    """Stop serving: close the listener; answer what reached the connections already open, within
    ``timeout_s`` seconds or until ``abort`` is set (:meth:`EdgeRunner.stop_listening`); then close
    every connection (aiohttp's ``BaseRunner.cleanup``)."""
    unanswered = await runner.stop_listening(timeout_s, abort)
    if unanswered:
        log.warning("stop: %d connections still owed an answer after %g s (no complete request yet, or "
                    "its handler still running); closing them", unanswered, timeout_s)
    await runner.cleanup()


def _why_not_listening(error: OSError) -> str:
    """What a failed bind means to the person who ran the command (not the event loop's source
    location uvloop puts in its message)."""
    if error.errno == errno.EADDRINUSE:
        return "the address is in use (another server?); pick another with --port"
    if error.errno == errno.EACCES:
        return "permission denied (ports below 1024 need privileges); pick another with --port"
    if error.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT) or isinstance(error, socket.gaierror):
        return "no such local address; check --host"
    return error.strerror or str(error)
