"""OpenAIEngine's own HTTP/1.1 client (rxpipe.engines._http1.HTTP1Pool) against real servers:
aiohttp's web server, and a raw asyncio server where a test needs bytes no library sends (a body
cut mid-chunk, a keep-alive connection closed as a request arrives)."""

from __future__ import annotations

import asyncio
import gzip
import socket
import ssl
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Awaitable, Callable

import aiohttp
import pytest
import trustme
from aiohttp import web

from rxpipe.engines._http1 import HIGH_WATER_BYTES, HTTP1Pool

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Peers:
    """What the server saw: the client ports of its requests, and requests running at once."""

    def __init__(self) -> None:
        self.ports: list[int] = []
        self.running = 0
        self.most_running = 0
        self.disconnected = asyncio.Event()


@asynccontextmanager
async def serve(handler: Handler, ssl_context: ssl.SSLContext | None = None,
                **kwargs: Any) -> AsyncIterator[tuple[str, Peers]]:
    peers = Peers()

    async def counted(request: web.Request) -> web.StreamResponse:
        peers.ports.append(request.transport.get_extra_info("peername")[1])  # type: ignore[union-attr]
        peers.running += 1
        peers.most_running = max(peers.most_running, peers.running)
        try:
            return await handler(request)
        except (ConnectionResetError, asyncio.CancelledError):
            peers.disconnected.set()
            raise
        finally:
            peers.running -= 1

    app = web.Application()
    app.router.add_post("/{tail:.*}", counted)
    runner = web.AppRunner(app, **kwargs)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_context)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"{'https' if ssl_context else 'http'}://127.0.0.1:{port}", peers
    finally:
        await runner.cleanup()


async def echo(request: web.Request) -> web.Response:
    body = await request.read()
    return web.Response(body=b"echo:" + body, content_type="application/json")


async def post(pool: HTTP1Pool, url: str, body: bytes = b"{}", **kwargs: Any) -> tuple[int, bytes]:
    response = await pool.post(url, data=body, headers={"Content-Type": "application/json"}, **kwargs)
    try:
        return response.status, await response.read()
    finally:
        response.close()


async def test_sequential_calls_reuse_one_keep_alive_connection() -> None:
    async with serve(echo) as (url, peers):
        pool = HTTP1Pool(url, 4)
        try:
            answers = [await post(pool, url + "/v1/x", b"%d" % i) for i in range(5)]
            assert answers == [(200, b"echo:%d" % i) for i in range(5)]
            assert len(set(peers.ports)) == 1 and len(peers.ports) == 5
            assert pool.connections_opened == 1 and pool.idle_connections == 1 and pool.retries == 0
        finally:
            await pool.close()
        assert pool.closed and pool.open_connections == 0


async def test_the_pool_opens_at_most_limit_connections() -> None:
    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(0.05)
        return web.Response(body=b"ok")

    async with serve(slow) as (url, peers):
        pool = HTTP1Pool(url, 2)
        try:
            answers = await asyncio.gather(*(post(pool, url) for _ in range(6)))
            assert answers == [(200, b"ok")] * 6
            assert peers.most_running == 2 and len(set(peers.ports)) == 2
            assert pool.connections_opened == 2 and pool.open_connections == 2
        finally:
            await pool.close()


async def test_an_idle_connection_the_server_closed_is_not_used_again() -> None:
    # aiohttp's server closes a keep-alive connection idle for keepalive_timeout seconds
    async with serve(echo, keepalive_timeout=0.05) as (url, peers):
        pool = HTTP1Pool(url, 4)
        try:
            assert await post(pool, url, b"1") == (200, b"echo:1")
            await asyncio.sleep(0.3)
            assert pool.open_connections == 0  # its connection_lost removed it
            assert await post(pool, url, b"2") == (200, b"echo:2")
            assert pool.connections_opened == 2 and pool.retries == 0 and len(set(peers.ports)) == 2
        finally:
            await pool.close()


@asynccontextmanager
async def raw_server(on_request: Callable[[int, asyncio.StreamWriter], Awaitable[None]]) -> AsyncIterator[str]:
    """A server reading one request head at a time (``Content-Length`` bodies) and calling
    ``on_request(n, writer)`` for the n-th request on its connection (0-based)."""
    connections: list[asyncio.StreamWriter] = []

    async def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(writer)
        n = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:"))
                await reader.readexactly(length)
                await on_request(n, writer)
                n += 1
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(connected, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        for writer in connections:
            writer.close()
        server.close()
        await server.wait_closed()


async def test_a_request_on_a_reused_connection_closed_before_any_answer_byte_is_sent_again_once() -> None:
    # the race aiohttp handles: the server closes the idle connection just as our request goes out
    seen: list[int] = []

    async def on_request(n: int, writer: asyncio.StreamWriter) -> None:
        seen.append(n)
        if n == 1:
            writer.close()  # the second request on this connection: closed without an answer
            raise ConnectionResetError
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    async with raw_server(on_request) as url:
        pool = HTTP1Pool(url, 4)
        try:
            assert await post(pool, url) == (200, b"ok")
            assert await post(pool, url) == (200, b"ok")
            assert seen == [0, 1, 0] and pool.retries == 1 and pool.connections_opened == 2
        finally:
            await pool.close()


async def test_a_fresh_connection_closed_before_any_answer_byte_is_not_retried() -> None:
    async def on_request(n: int, writer: asyncio.StreamWriter) -> None:
        writer.close()
        raise ConnectionResetError

    async with raw_server(on_request) as url:
        pool = HTTP1Pool(url, 4)
        try:
            with pytest.raises(aiohttp.ServerDisconnectedError):
                await post(pool, url)
            assert pool.retries == 0 and pool.connections_opened == 1 and pool.open_connections == 0
        finally:
            await pool.close()


async def test_chunked_and_content_length_bodies_and_the_answer_head() -> None:
    async def answer(request: web.Request) -> web.StreamResponse:
        if request.path == "/chunked":
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
            response.enable_chunked_encoding()
            await response.prepare(request)
            for i in range(3):
                await response.write(b"data: %d\n\n" % i)
            await response.write_eof()
            return response
        return web.Response(status=429, body=b'{"error": "busy"}', content_type="application/json",
                            headers={"Retry-After": "7", "X-Extra": "a"})

    async with serve(answer) as (url, _):
        pool = HTTP1Pool(url, 1)
        try:
            response = await pool.post(url + "/chunked", data=b"{}", headers={})
            assert (response.status, response.content_type, response.content_length) == (200, "text/event-stream", None)
            assert response.headers["transfer-encoding"] == "chunked"
            body = b""
            while data := await response.content.readany():
                body += data
            assert body == b"data: 0\n\ndata: 1\n\ndata: 2\n\n" and response.content.at_eof()
            response.close()
            response = await pool.post(url + "/length", data=b"{}", headers={})
            assert (response.status, response.content_type, response.content_length) == (429, "application/json", 17)
            assert (response.headers.get("retry-after"), response.headers.get("x-extra")) == ("7", "a")
            assert await response.content.read(5) == b'{"err'
            assert await response.read() == b'or": "busy"}'
            response.close()
            assert pool.connections_opened == 1 and pool.idle_connections == 1
        finally:
            await pool.close()


async def test_a_gzip_body_is_decoded_though_none_was_asked_for() -> None:
    async def answer(request: web.Request) -> web.Response:
        assert "Accept-Encoding" not in request.headers
        return web.Response(body=gzip.compress(b"x" * 1000), headers={"Content-Encoding": "gzip"})

    async with serve(answer) as (url, _):
        pool = HTTP1Pool(url, 1)
        try:
            assert await post(pool, url) == (200, b"x" * 1000)
        finally:
            await pool.close()


async def test_a_body_cut_mid_chunk_is_a_payload_error_and_the_connection_is_not_kept() -> None:
    async def on_request(n: int, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n10\r\nonly-six")
        await writer.drain()
        writer.close()
        raise ConnectionResetError

    async with raw_server(on_request) as url:
        pool = HTTP1Pool(url, 1)
        try:
            response = await pool.post(url, data=b"{}", headers={})
            received = b""
            with pytest.raises(aiohttp.ClientPayloadError, match="cut short"):
                while True:
                    received += await response.content.readany()
            assert received == b"helloonly-six"
            response.close()
            assert pool.open_connections == 0 and pool.idle_connections == 0
        finally:
            await pool.close()


async def test_a_slow_reader_pauses_the_socket_and_the_server_is_held_back() -> None:
    total = 8 * 2**20
    sent = [0]

    async def flood(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        response.enable_chunked_encoding()
        await response.prepare(request)
        for _ in range(total // 2**14):
            await response.write(b"x" * 2**14)  # waits while the socket's send buffer is full
            sent[0] += 2**14
        await response.write_eof()
        return response

    async with serve(flood) as (url, _):
        pool = HTTP1Pool(url, 1)
        try:
            response = await pool.post(url, data=b"{}", headers={})
            await asyncio.sleep(0.5)  # we read nothing
            conn = response._conn
            assert conn is not None and conn.paused and not conn.transport.is_reading()  # type: ignore[union-attr]
            # held: what one socket read brings past the bound, at most (uvloop reads 256 KiB at once)
            assert HIGH_WATER_BYTES < conn.buffered <= HIGH_WATER_BYTES + 2**18
            assert sent[0] < total  # TCP backpressure reached the server
            received = len(await response.content.readany())
            while data := await response.content.readany():
                received += len(data)
            assert received == total and sent[0] == total
            response.close()
        finally:
            await pool.close()


async def test_connect_timeout() -> None:
    # a listening socket that never accepts, its backlog full: further connects are not answered
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    try:
        for _ in range(4):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            fillers.append(s)
        pool = HTTP1Pool(f"http://127.0.0.1:{port}", 1, connect_timeout_s=0.2)
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(aiohttp.ServerTimeoutError, match="connection timeout"):
            await pool.post(f"http://127.0.0.1:{port}/v1", data=b"{}", headers={})
        # uvloop's clock counts whole milliseconds: 0.2 s may read as 0.19999999999982 after a subtraction
        assert 0.2 - 1e-6 <= loop.time() - started < 1.0
        assert pool.open_connections == 0
        await pool.close()
    finally:
        for s in fillers:
            s.close()
        listener.close()


async def test_read_timeout_while_waiting_for_a_byte() -> None:
    async def silent(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        await response.write(b"data: 1\n\n")
        await asyncio.sleep(5)
        return response

    async with serve(silent) as (url, _):
        pool = HTTP1Pool(url, 1)
        try:
            response = await pool.post(url, data=b"{}", headers={}, read_timeout_s=0.2)
            assert await response.content.readany() == b"data: 1\n\n"
            with pytest.raises(aiohttp.ServerTimeoutError, match="read_timeout_s=0.2"):
                await response.content.readany()
            response.close()
            assert pool.open_connections == 0
        finally:
            await pool.close()


async def test_a_fed_body_reaches_its_sink_in_the_protocol_callback_and_keeps_the_read_timeout_alive() -> None:
    """``feed``: every chunk goes to the sink as it arrives (what was buffered first), in order;
    bytes arriving keep a stream alive past ``read_timeout_s``; silence still times it out."""
    async def ticking(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        for n in range(6):  # 0.6 s of ticks, three times the read timeout
            await response.write(f"tick {n}\n".encode())
            await asyncio.sleep(0.1)
        await asyncio.sleep(1)  # > the read timeout: silence
        return response

    async with serve(ticking) as (url, _):
        pool = HTTP1Pool(url, 1)
        try:
            response = await pool.post(url, data=b"{}", headers={}, read_timeout_s=0.2)
            got: list[bytes] = []
            response.feed(got.append)
            with pytest.raises(aiohttp.ServerTimeoutError, match="read_timeout_s=0.2"):
                await response.content.readany()  # returns only at the end: here the silence after the ticks
            assert b"".join(got) == b"".join(f"tick {n}\n".encode() for n in range(6))
        finally:
            await pool.close()


async def test_a_sink_that_raises_ends_the_answer_with_a_payload_error() -> None:
    async def two(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        await response.write(b"one")
        await asyncio.sleep(0.05)
        await response.write(b"two")
        await asyncio.sleep(1)  # > the read timeout: silence
        return response

    def refuse(data: bytes) -> None:
        if data == b"two":
            raise ValueError("not two")

    async with serve(two) as (url, _):
        pool = HTTP1Pool(url, 1)
        try:
            response = await pool.post(url, data=b"{}", headers={}, read_timeout_s=2.0)
            response.feed(refuse)
            with pytest.raises(aiohttp.ClientPayloadError, match="refused its body: ValueError\\('not two'\\)"):
                await response.content.readany()
            assert pool.open_connections == 0
        finally:
            await pool.close()


async def test_cancelling_a_read_and_closing_closes_the_connection() -> None:
    async def endless(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        while True:
            await response.write(b"data: x\n\n")
            await asyncio.sleep(0.01)

    async with serve(endless) as (url, peers):
        pool = HTTP1Pool(url, 1)
        try:
            response = await pool.post(url, data=b"{}", headers={})

            async def read() -> None:
                while True:
                    await response.content.readany()

            task = asyncio.ensure_future(read())
            await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            response.close()  # the engine's _close_response
            await asyncio.wait_for(peers.disconnected.wait(), 2.0)
            assert pool.open_connections == 0 and pool.idle_connections == 0 and pool.connections_opened == 1
        finally:
            await pool.close()


async def test_https_with_a_trusted_self_signed_certificate() -> None:
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_context)
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)
    async with serve(echo, ssl_context=server_context) as (url, peers):
        pool = HTTP1Pool(url, 1, ssl_context=client_context)
        try:
            assert [await post(pool, url, b"s%d" % i) for i in range(2)] == [(200, b"echo:s0"), (200, b"echo:s1")]
            assert pool.connections_opened == 1
        finally:
            await pool.close()
        untrusting = HTTP1Pool(url, 1)  # the system's trust store: not our CA
        with pytest.raises(ssl.SSLCertVerificationError):
            await post(untrusting, url)
        await untrusting.close()


async def test_the_engine_uses_the_pool_unless_given_a_session_and_reuses_its_connection(server: Any) -> None:
    from rxpipe.engines.records import CompletionRequest

    from .openai_support import make, submit

    e = make(server)
    try:
        for stream in (True, False, True):
            result = await submit(e, CompletionRequest(prompt="hi", max_tokens=3, stream=stream)).result
            assert (result.finish_reason, result.completion_tokens) == ("length", 3)
            pool = e._session
            assert isinstance(pool, HTTP1Pool)
            # A stream's result is set at its [DONE]; its connection goes back to the pool when the
            # chunked terminator behind it arrives, which may be a loop step later (or more on a
            # loaded machine): the next call reuses it once it is back, and opens another before.
            for _ in range(2000):
                if pool.idle_connections == 1:
                    break
                await asyncio.sleep(0.005)
        assert (pool.connections_opened, pool.open_connections, pool.idle_connections, pool.retries) == (1, 1, 1, 0)
    finally:
        await e.aclose()
    assert pool.closed and pool.open_connections == 0
    async with aiohttp.ClientSession() as session:
        e = make(server, session=session)
        try:
            result = await e.submit(CompletionRequest(prompt="hi", max_tokens=2)).result
            assert (result.finish_reason, result.completion_tokens, e._session) == ("length", 2, session)
        finally:
            await e.aclose()
        assert not session.closed  # the user's: not closed by the engine


@pytest.mark.parametrize("tail_after_s, reused", [(0.05, True), (None, False)])
async def test_a_released_answer_gives_its_connection_back_when_its_last_bytes_arrive(
        monkeypatch: pytest.MonkeyPatch, tail_after_s: float | None, reused: bool) -> None:
    # an SSE answer whose [DONE] comes before its body's end (the chunked terminator)
    monkeypatch.setattr("rxpipe.engines._http1.DRAIN_S", 0.2)

    answered = [0]

    async def on_request(n: int, writer: asyncio.StreamWriter) -> None:
        answered[0] += 1
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\ne\r\ndata: [DONE]\n\n\r\n")
        if answered[0] > 1:  # the next call's answer: whole
            writer.write(b"0\r\n\r\n")
        elif tail_after_s is not None:
            await asyncio.sleep(tail_after_s)
            writer.write(b"0\r\n\r\n")

    async with raw_server(on_request) as url:
        pool = HTTP1Pool(url, 1)
        try:
            response = await pool.post(url, data=b"{}", headers={})
            assert await response.content.readany() == b"data: [DONE]\n\n"
            response.release()
            assert (pool.open_connections, pool.idle_connections) == (1, 0)  # waiting for the tail
            await asyncio.sleep(0.4)
            assert (pool.open_connections, pool.idle_connections) == ((1, 1) if reused else (0, 0))
            assert await post(pool, url) == (200, b"data: [DONE]\n\n")
            assert pool.connections_opened == (1 if reused else 2)
        finally:
            await pool.close()


async def test_a_released_answer_whose_tail_is_over_high_water_bytes_closes_its_connection() -> None:
    # after [DONE], 40 more body bytes arrive (a chunk of 40, unterminated): over the pool's
    # high_water_bytes=32, not an answer's tail — the connection is closed at once, not kept
    tail_sent = asyncio.Event()

    async def on_request(n: int, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\ne\r\ndata: [DONE]\n\n\r\n")
        await asyncio.sleep(0.05)
        writer.write(b"28\r\n" + b"x" * 40 + b"\r\n")
        tail_sent.set()

    async with raw_server(on_request) as url:
        pool = HTTP1Pool(url, 1, high_water_bytes=32)
        try:
            response = await pool.post(url, data=b"{}", headers={})
            assert await response.content.readany() == b"data: [DONE]\n\n"
            response.release()
            assert (pool.open_connections, pool.idle_connections) == (1, 0)  # waiting for the tail
            await tail_sent.wait()
            for _ in range(100):
                if pool.open_connections == 0:
                    break
                await asyncio.sleep(0.005)
            assert (pool.open_connections, pool.idle_connections) == (0, 0)  # closed well before DRAIN_S
        finally:
            await pool.close()


async def test_bad_arguments_and_headers_are_refused_before_anything_is_sent() -> None:
    with pytest.raises(ValueError, match=r"HTTP1Pool\(limit=\) must be at least 1, got 0"):
        HTTP1Pool("http://127.0.0.1:9", 0)
    with pytest.raises(ValueError, match=r"must be an http\(s\) URL with a host, got 'ftp://h/'"):
        HTTP1Pool("ftp://h/", 1)
    pool = HTTP1Pool("http://127.0.0.1:9", 1)  # nothing listens on port 9: nothing may be sent
    try:
        with pytest.raises(ValueError, match=r"http://other:9/v1 is not of this pool's origin http://127.0.0.1:9"):
            await pool.post("http://other:9/v1", data=b"{}", headers={})
        with pytest.raises(ValueError, match="an HTTP header name or value with a line break"):
            await pool.post("http://127.0.0.1:9/v1", data=b"{}", headers={"X-A": "1\r\nX-Injected: 2"})
        assert (pool.connections_opened, pool.open_connections) == (0, 0)
    finally:
        await pool.close()
