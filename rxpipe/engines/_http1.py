"""The HTTP/1.1 client of :class:`~rxpipe.engines.OpenAIEngine`'s backend calls (issue 27).

A keep-alive connection pool on :class:`asyncio.Protocol`, its answers parsed by
``httptools.HttpResponseParser`` (llhttp, the C parser uvicorn uses). It does what the engine used
of ``aiohttp.ClientSession`` — and only that — for ~20 µs of CPU per call where aiohttp's
``ClientSession.post`` costs ~106 µs (docs/proxy-path-profile.md, "The HTTP stack: alternatives
measured"): it skips aiohttp's per-request machinery (request/response objects of every feature,
tracing signals, cookie jar, redirects, the per-call timer objects).

What it does: ``POST`` of a body already encoded (Content-Length), answers with Content-Length,
chunked or close-delimited bodies, gzip/deflate bodies decoded if a backend sends them although
no ``Accept-Encoding`` is sent (we ask for none: compressing token streams costs both ends CPU for
nothing on a data-centre link), ``https://`` through :mod:`ssl` (a default context: the system's
trust store, as aiohttp's default), a connect timeout, a per-read timeout (seconds without a byte
while the reader waits: aiohttp's ``sock_read``), a bound on connections, and TCP backpressure:
past ``high_water_bytes`` unread the socket's reading is paused until the reader takes them.

Connections are reused only after their whole answer arrived. Closing a response not wholly
received (a cancel, an answer abandoned part-way) closes its connection. A request sent on a
reused keep-alive connection that the server closes before any byte of an answer (the server
timed out the idle connection just as we sent) is sent again, once, on a new connection, as
aiohttp does.

Errors are aiohttp's exception classes, so the engine handles a session of the user's and this
pool alike: ``OSError`` (refused, unreachable) and :class:`aiohttp.ServerTimeoutError` (connect
timeout) or :class:`aiohttp.ServerDisconnectedError` / :class:`aiohttp.ClientConnectionError`
(no answer, a malformed head) from :meth:`HTTP1Pool.post`; :class:`aiohttp.ClientPayloadError`
(a body cut short or malformed) and :class:`aiohttp.ServerTimeoutError` (``read_timeout_s``)
from the reads.
"""

from __future__ import annotations

import asyncio
import ssl
import zlib
from collections import deque
from collections.abc import Callable
from typing import Any, Mapping, Protocol
from urllib.parse import urlsplit

import aiohttp
import httptools
from multidict import CIMultiDict, CIMultiDictProxy

__all__ = ["HTTP1Pool", "HTTP1Response", "BackendResponse", "ResponseBody", "HIGH_WATER_BYTES", "DRAIN_S"]

#: bytes received and not yet read past which the socket's reading is paused (aiohttp's
#: StreamReader pauses at twice its 64 KiB limit; one SSE read rarely brings more than a few KiB)
HIGH_WATER_BYTES = 2**16
#: seconds a connection released before its answer's end waits for that end (then it is closed)
DRAIN_S = 1.0


class ResponseBody(Protocol):
    """The body reads the engine uses (``aiohttp.StreamReader``'s names and semantics)."""

    async def readany(self) -> bytes: ...
    async def read(self, n: int = -1) -> bytes: ...
    def at_eof(self) -> bool: ...


class BackendResponse(Protocol):
    """What the engine reads of an answer: ``aiohttp.ClientResponse`` and :class:`HTTP1Response` both."""

    @property
    def status(self) -> int: ...
    @property
    def headers(self) -> Mapping[str, str]: ...
    @property
    def content_type(self) -> str: ...
    @property
    def content_length(self) -> int | None: ...
    @property
    def content(self) -> ResponseBody: ...
    async def read(self) -> bytes: ...
    def close(self) -> None: ...
    def release(self) -> object: ...


class HTTP1Response:
    """One answer on one connection of an :class:`HTTP1Pool` (its own ``content``).

    ``status`` (int), ``headers`` (case-insensitive), ``content_type`` (the media type, lower
    case, without parameters; ``application/octet-stream`` when absent, as aiohttp),
    ``content_length`` (bytes or None). Reads: ``readany()`` (what arrived, waiting for some;
    ``b""`` at the end), ``read(n)`` (at most ``n`` bytes, ``-1``: all), ``at_eof()``.
    """

    __slots__ = ("status", "headers", "content_type", "content_length", "_conn")

    def __init__(self, conn: _Connection, status: int, headers: CIMultiDictProxy[str]) -> None:
        self.status = status
        self.headers = headers
        ctype = headers.get("Content-Type")
        self.content_type = ctype.split(";", 1)[0].strip().lower() if ctype else "application/octet-stream"
        length = headers.get("Content-Length")
        self.content_length = int(length) if length is not None and length.isdigit() else None
        self._conn: _Connection | None = conn

    @property
    def content(self) -> HTTP1Response:
        return self

    async def readany(self) -> bytes:
        """Every byte received and not yet read (waiting for one at least); ``b""`` at the end.
        Raises ``aiohttp.ClientPayloadError`` (a body cut short) or ``aiohttp.ServerTimeoutError``."""
        conn = await self._ready()
        return b"" if conn is None else conn.take()

    async def read(self, n: int = -1) -> bytes:
        """At most ``n`` bytes (``-1``: the whole rest of the body), waiting for one at least."""
        if n < 0:
            parts = []
            while data := await self.readany():
                parts.append(data)
            return b"".join(parts)
        if n == 0:
            return b""
        conn = await self._ready()
        return b"" if conn is None else conn.take(n)

    async def _ready(self) -> _Connection | None:
        """The connection once a received byte waits to be read; None at the body's end (the
        connection then goes back to the pool, see :meth:`_done`)."""
        conn = self._conn
        if conn is None:
            return None
        while not conn.chunks:
            if conn.complete:
                self._done()
                return None
            await conn.wait_data()
        return conn

    def feed(self, sink: Callable[[bytes], None]) -> None:
        """Hand the body to ``sink(bytes)`` as it arrives, inside the connection's protocol
        callback (no task wake-up per chunk: a reader of a stream of small events sees each in
        the loop pass that received it); what was buffered goes first. :meth:`readany` then only
        waits for the end (``b""``) or the error; the read timeout counts from the last byte.
        A sink that raises ends the answer with ``aiohttp.ClientPayloadError``."""
        conn = self._conn
        if conn is None:
            return
        while conn.chunks:
            sink(conn.take())
        conn.sink = sink

    def at_eof(self) -> bool:
        conn = self._conn
        return conn is None or (conn.complete and not conn.chunks)

    def _done(self) -> None:
        conn = self._conn
        self._conn = None
        if conn is not None:
            conn.pool._release(conn)

    def close(self) -> None:
        """Give the connection back when its whole answer arrived (what is unread is dropped);
        else close it: the server sees the disconnect (a cancelled call is aborted there)."""
        conn = self._conn
        if conn is None:
            return
        self._conn = None
        if conn.complete:
            conn.chunks.clear()
            conn.buffered = 0
            conn.pool._release(conn)
        else:
            conn.abort()

    def release(self) -> None:
        """The reader is done with an answer that ended at its own level (an SSE ``[DONE]``) while
        the body's last bytes (the chunked terminator) may still be on their way: drop what is
        unread and give the connection back when they arrive — within ``DRAIN_S`` and
        ``high_water_bytes`` more, else it is closed. Not for a cancel: :meth:`close` tells the
        server at once."""
        conn = self._conn
        if conn is None:
            return
        if conn.complete or conn.error is not None or conn.closed or not conn.delimited:
            self.close()
            return
        self._conn = None
        conn.chunks.clear()
        conn.buffered = 0
        conn.draining = True
        if conn.paused and conn.transport is not None:
            conn.paused = False
            conn.transport.resume_reading()
        conn.drain_timer = conn.loop.call_later(DRAIN_S, conn.abort)

    def __repr__(self) -> str:
        return f"<HTTP1Response {self.status} {self.content_type}>"


class _Connection(asyncio.Protocol):
    """One keep-alive connection: the parser's callbacks fill the current answer's buffer."""

    def __init__(self, pool: HTTP1Pool) -> None:
        self.pool = pool
        self.loop = pool._loop
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.used = 0  # requests sent on it
        #: released by its reader before the answer's end: the rest is dropped, then it is reused
        self.draining = False
        self.drain_timer: asyncio.TimerHandle | None = None
        self._reset()

    def _reset(self) -> None:
        self.received = False  # a byte of the current answer arrived
        self.head: HTTP1Response | None = None
        self.raw_headers: list[tuple[str, str]] = []
        self.header_name = ""
        self.chunks: deque[bytes] = deque()
        self.buffered = 0
        self.complete = False
        self.error: BaseException | None = None
        self.keep_alive = True
        self.delimited = True  # Content-Length or chunked: the end is in the stream, not the close
        self.inflate: Any = None
        self.waiter: asyncio.Future[None] | None = None
        self.paused = False
        self.wait_since = 0.0
        self.read_timeout_s: float | None = None
        #: set by HTTP1Response.feed: the body goes to it as it arrives, not to the buffer
        self.sink: Callable[[bytes], None] | None = None

    # -- asyncio.Protocol --------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.received = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(aiohttp.ClientPayloadError("a protocol upgrade in an answer"))
        except httptools.HttpParserError as error:
            self._fail(aiohttp.ClientPayloadError(f"a malformed answer: {error}") if self.head is not None
                       else aiohttp.ClientConnectionError(f"a malformed answer head: {error}"))
        if self.buffered > self.pool.high_water_bytes and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.draining = False
        if self.drain_timer is not None:
            self.drain_timer.cancel()
            self.drain_timer = None
        self.pool._forget(self)
        if not self.complete and self.error is None:
            if self.head is not None and not self.delimited:
                self.complete = True  # a close-delimited body ends with the connection
            elif self.head is not None:
                self.error = aiohttp.ClientPayloadError(
                    f"the answer's body was cut short: {exc!r}" if exc else "the answer's body was cut short")
            elif self.received:
                self.error = aiohttp.ClientConnectionError("the connection closed inside an answer's head")
            else:
                self.error = aiohttp.ServerDisconnectedError(f"the server closed the connection: {exc!r}"
                                                             if exc else None)
        self._wake()

    # -- httptools callbacks -------------------------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        self.raw_headers.append((name.decode("latin-1"), value.decode("latin-1")))

    def on_headers_complete(self) -> None:
        headers = CIMultiDictProxy(CIMultiDict(self.raw_headers))
        self.head = HTTP1Response(self, self.parser.get_status_code(), headers)
        self.keep_alive = self.parser.should_keep_alive()
        self.delimited = "Content-Length" in headers or "chunked" in headers.get("Transfer-Encoding", "").lower()
        encoding = headers.get("Content-Encoding", "").strip().lower()
        if encoding in ("gzip", "x-gzip", "deflate"):
            self.inflate = zlib.decompressobj(47)  # 32 + 15: gzip or zlib wrapper, detected
        elif encoding not in ("", "identity"):
            self._fail(aiohttp.ClientPayloadError(f"an unsupported Content-Encoding: {encoding}"))
        self._wake()

    def on_body(self, body: bytes) -> None:
        if self.draining:
            self.buffered += len(body)
            if self.buffered > self.pool.high_water_bytes:
                self.abort()  # more than an answer's tail: not worth waiting for
            return
        if self.inflate is not None:
            try:
                body = self.inflate.decompress(body)
            except zlib.error as error:
                self._fail(aiohttp.ClientPayloadError(f"a {self.head and self.head.headers.get('Content-Encoding')} "
                                                      f"body that does not decode: {error}"))
                return
            if not body:
                return
        sink = self.sink
        if sink is not None:
            self.wait_since = self.loop.time()  # bytes arrived: the read timeout counts from here
            try:
                sink(body)
            except Exception as error:  # the sink's refusal ends the answer, as a bad body does
                self._fail(aiohttp.ClientPayloadError(f"the answer's reader refused its body: {error!r}"))
            return
        self.chunks.append(body)
        self.buffered += len(body)
        self._wake()

    def on_message_complete(self) -> None:
        if self.draining:
            self.complete = True
            self.draining = False
            if self.drain_timer is not None:
                self.drain_timer.cancel()
                self.drain_timer = None
            self.chunks.clear()
            self.buffered = 0
            self.pool._release(self)
            return
        if self.inflate is not None:
            rest = self.inflate.flush()
            if rest:
                self.chunks.append(rest)
                self.buffered += len(rest)
        self.complete = True
        self._wake()

    # -- the reader's side ---------------------------------------------------------------------
    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None:
            self.waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def _fail(self, error: BaseException) -> None:
        if self.error is None and not self.complete:
            self.error = error
        self.abort()

    async def wait_data(self) -> None:
        """Wait for the parser to bring something (head, body, end); raises the connection's error.
        A wait over ``read_timeout_s`` raises ``aiohttp.ServerTimeoutError`` and closes the
        connection (timed by the pool's one timer per connection, armed lazily: see ``_check_read``)."""
        if self.error is not None:
            raise self.error
        if self.paused and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()
        waiter = self.waiter = self.loop.create_future()
        timeout = self.read_timeout_s
        if timeout is not None:
            self.wait_since = now = self.loop.time()
            self.pool._arm_read_timer(self, now + timeout)
        try:
            await waiter
        finally:
            self.waiter = None
        if self.error is not None:
            raise self.error

    def take(self, n: int = -1) -> bytes:
        chunks = self.chunks
        if n < 0 or self.buffered <= n:
            data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
            chunks.clear()
            self.buffered = 0
        else:
            data = b"".join(chunks)
            chunks.clear()
            chunks.append(data[n:])
            data = data[:n]
            self.buffered -= n
        if self.paused and self.buffered <= self.pool.high_water_bytes and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()
        return data

    def abort(self) -> None:
        """Close at once (no reuse); a reader still waiting gets ClientConnectionError."""
        if self.error is None and not self.complete:
            self.error = aiohttp.ClientConnectionError("the connection was closed by the client")
        self.closed = True
        self.keep_alive = False
        self.draining = False
        if self.drain_timer is not None:
            self.drain_timer.cancel()
            self.drain_timer = None
        if self.transport is not None:
            self.transport.abort()
        self.pool._forget(self)
        self._wake()


class HTTP1Pool:
    """Keep-alive HTTP/1.1 connections to one backend (``scheme://host:port``), at most ``limit``.

    Args:
        base_url: ``http://`` or ``https://`` with host and optional port; its path is ignored
            (each :meth:`post` names its URL).
        limit: connections open at most (the engine's ``max_num_seqs``); a call beyond it waits
            for one to be given back, in order.
        connect_timeout_s: seconds to open a connection (TLS handshake included); None: none.
        ssl_context: for ``https://`` (default: ``ssl.create_default_context()``, the system's
            trust store).
        high_water_bytes: received and unread bytes past which the socket's reading pauses.

    Bound to ``loop`` (default: the running one). Counters: ``connections_opened``, ``retries``
    (requests sent again after a reused connection closed under them).
    """

    def __init__(self, base_url: str, limit: int, *, connect_timeout_s: float | None = None,
                 ssl_context: ssl.SSLContext | None = None, high_water_bytes: int = HIGH_WATER_BYTES,
                 loop: asyncio.AbstractEventLoop | None = None) -> None:
        if limit < 1:
            raise ValueError(f"HTTP1Pool(limit=) must be at least 1, got {limit}")
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"HTTP1Pool(base_url=) must be an http(s) URL with a host, got {base_url!r}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self._origin = f"{parts.scheme}://{parts.netloc}"
        self._ssl: ssl.SSLContext | None = None
        if parts.scheme == "https":
            self._ssl = ssl_context if ssl_context is not None else ssl.create_default_context()
        default_port = 443 if parts.scheme == "https" else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        self._host_header = host if self.port == default_port else f"{host}:{self.port}"
        self.limit = limit
        self.connect_timeout_s = connect_timeout_s
        self.high_water_bytes = high_water_bytes
        self._loop = loop if loop is not None else asyncio.get_running_loop()
        self._idle: deque[_Connection] = deque()
        self._open: set[_Connection] = set()
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._read_timers: dict[_Connection, asyncio.TimerHandle] = {}
        self._closed = False
        self.connections_opened = 0
        self.retries = 0

    @property
    def closed(self) -> bool:
        """True after :meth:`close` (``aiohttp.ClientSession.closed``'s name)."""
        return self._closed

    @property
    def open_connections(self) -> int:
        """Connections open now (in use or idle)."""
        return len(self._open)

    @property
    def idle_connections(self) -> int:
        return sum(1 for c in self._idle if not c.closed)

    async def post(self, url: str, *, data: bytes, headers: Mapping[str, str],
                   read_timeout_s: float | None = None) -> HTTP1Response:
        """``POST data`` to ``url`` (of this pool's origin) with ``headers`` (Host and
        Content-Length are ours); the answer once its head arrived. ``read_timeout_s``: the
        longest wait for a byte, from sending until the body's end (None: none).

        Raises ``OSError``, ``aiohttp.ServerTimeoutError`` (connect or read timeout),
        ``aiohttp.ServerDisconnectedError`` / ``aiohttp.ClientConnectionError`` (closed or
        malformed before the head's end), ValueError (a URL of another origin, a header with a
        line break). A cancellation closes the connection."""
        return await self._request("POST", url, data, headers, read_timeout_s)

    async def get(self, url: str, *, headers: Mapping[str, str] | None = None,
                  read_timeout_s: float | None = None) -> HTTP1Response:
        """``GET url`` (a credit probe, say): as :meth:`post`, without a body."""
        return await self._request("GET", url, None, headers or {}, read_timeout_s)

    async def _request(self, method: str, url: str, data: bytes | None, headers: Mapping[str, str],
                       read_timeout_s: float | None) -> HTTP1Response:
        if not url.startswith(self._origin):
            raise ValueError(f"{url} is not of this pool's origin {self._origin}")
        path = url[len(self._origin):] or "/"
        block = "".join([f"{k}: {v}\r\n" for k, v in headers.items()])
        if block.count("\n") != len(headers) or "\r" in block.replace("\r\n", ""):
            raise ValueError("an HTTP header name or value with a line break")
        length = f"Content-Length: {len(data)}\r\n" if data is not None else ""
        request = (f"{method} {path} HTTP/1.1\r\nHost: {self._host_header}\r\n{length}"
                   f"{block}\r\n").encode("latin-1") + (data or b"")
        while True:
            conn = await self._acquire()
            reused = conn.used > 0
            try:
                return await self._send(conn, request, read_timeout_s)
            except aiohttp.ServerDisconnectedError:
                if reused:  # the server closed the idle connection as we sent: once more, on a new one
                    self.retries += 1
                    continue
                raise

    async def _send(self, conn: _Connection, request: bytes, read_timeout_s: float | None) -> HTTP1Response:
        conn._reset()
        conn.used += 1
        conn.read_timeout_s = read_timeout_s
        try:
            assert conn.transport is not None
            conn.transport.write(request)
            while (head := conn.head) is None:
                await conn.wait_data()
        except BaseException:
            conn.abort()
            raise
        return head

    async def _acquire(self) -> _Connection:
        if self._closed:
            raise aiohttp.ClientConnectionError("the HTTP pool is closed")
        idle = self._idle
        while idle:
            conn = idle.pop()  # the most recently used: the least likely to have been closed by its server
            if not conn.closed:
                return conn
        while len(self._open) >= self.limit:
            waiter = self._loop.create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled():
                    self._wake_one()  # handed a turn we do not take: pass it on
                raise
            while idle:
                conn = idle.pop()
                if not conn.closed:
                    return conn
        return await self._connect()

    async def _connect(self) -> _Connection:
        conn = _Connection(self)
        self._open.add(conn)
        try:
            connect = self._loop.create_connection(lambda: conn, self.host, self.port, ssl=self._ssl,
                                                   server_hostname=self.host if self._ssl else None)
            if self.connect_timeout_s is None:
                await connect
            else:
                try:  # asyncio.timeout, not wait_for: 3.11's wait_for loses a cancel that races the connect
                    async with asyncio.timeout(self.connect_timeout_s):
                        await connect
                except TimeoutError:
                    raise aiohttp.ServerTimeoutError(
                        f"connection timeout to {self._origin} after {self.connect_timeout_s} s") from None
        except BaseException:
            self._forget(conn)
            raise
        self.connections_opened += 1
        return conn

    def _release(self, conn: _Connection) -> None:
        """The answer on ``conn`` was read whole: keep it for the next call, or close it."""
        timer = self._read_timers.pop(conn, None)
        if timer is not None:
            timer.cancel()
        if conn.closed or not conn.keep_alive or self._closed or conn.error is not None:
            conn.abort()
            return
        conn.head = None
        if conn.paused and conn.transport is not None:
            conn.paused = False
            conn.transport.resume_reading()
        self._idle.append(conn)
        self._wake_one()

    def _forget(self, conn: _Connection) -> None:
        if conn in self._open:
            self._open.discard(conn)
            timer = self._read_timers.pop(conn, None)
            if timer is not None:
                timer.cancel()
            self._wake_one()

    def _wake_one(self) -> None:
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _arm_read_timer(self, conn: _Connection, when: float) -> None:
        """One timer per connection for ``read_timeout_s``, armed when a wait starts and none is
        armed; at its time it re-arms for the current wait's end (waits are short: every byte
        ends one), so a stream costs about one timer per ``read_timeout_s``, not one per read."""
        if conn not in self._read_timers:
            self._read_timers[conn] = self._loop.call_at(when, self._check_read, conn)

    def _check_read(self, conn: _Connection) -> None:
        self._read_timers.pop(conn, None)
        timeout = conn.read_timeout_s
        if conn.waiter is None or timeout is None or conn.closed:
            return  # not waiting: the next wait arms it again
        due = conn.wait_since + timeout
        if self._loop.time() >= due:
            conn._fail(aiohttp.ServerTimeoutError(f"no byte from {self._origin} within read_timeout_s={timeout} s"))
        else:
            self._read_timers[conn] = self._loop.call_at(due, self._check_read, conn)

    async def close(self) -> None:
        """Close every connection (those in use too); further calls raise ClientConnectionError."""
        self._closed = True
        for conn in list(self._open):
            conn.abort()
        self._idle.clear()
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_exception(aiohttp.ClientConnectionError("the HTTP pool is closed"))
        self._waiters.clear()
        await asyncio.sleep(0)  # let the transports' connection_lost run

    def __repr__(self) -> str:
        return f"<HTTP1Pool {self._origin} open={len(self._open)} limit={self.limit}>"
