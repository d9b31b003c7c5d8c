"""SSE delivery in windows: every chunk that arrived since the handler's last wake goes out in one
write of whole events, and the credit given back never lets more than ``stream_window`` chunks be
outstanding."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from aiohttp.base_protocol import BaseProtocol

from rxpipe import operators as ops
from rxpipe.engines import Completion, CompletionRequest, SimulatedEngine
from rxpipe.gateway import Gateway, GatewayConfig
from rxpipe.gateway._sse import EventWriter
from rxpipe.runtime import Pipeline

WINDOW = 4


def events(data: bytes) -> list[bytes]:
    """The payloads of ``data``, which must be whole SSE events (``data: ...`` + blank line)."""
    assert data.startswith(b"data: ") and data.endswith(b"\n\n"), data
    parts = data[:-2].split(b"\n\ndata: ")
    return [part.removeprefix(b"data: ") for part in parts]


@pytest.mark.parametrize("chat", [False, True])
async def test_an_http_chunk_carries_whole_events_and_never_more_than_the_window(
        chat: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    real_prepare = web.StreamResponse.prepare

    async def prepare(self: web.StreamResponse, request: web.BaseRequest) -> Any:
        writer = await real_prepare(self, request)
        await asyncio.sleep(0.05)  # a busy handler: the engine fills the window meanwhile
        return writer

    monkeypatch.setattr(web.StreamResponse, "prepare", prepare)
    engine = SimulatedEngine(max_num_seqs=2, step_overhead_s=0.001, decode_s_per_seq=0.0, prefill_s_per_token=0.0)
    pipeline = Pipeline(Gateway(GatewayConfig(stream_window=WINDOW)), ops.buffer(4), ops.execute(engine))
    path = "/v1/chat/completions" if chat else "/v1/completions"
    body: dict[str, Any] = {"max_tokens": 40, "stream": True, "stream_options": {"include_usage": True}}
    body.update({"messages": [{"role": "user", "content": "hi"}]} if chat else {"prompt": "hi"})
    http_chunks: list[bytes] = []
    async with pipeline.start(port=0) as running:
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{running.url}{path}", json=body) as r:
                assert r.status == 200 and r.headers["Transfer-Encoding"] == "chunked"
                part = b""
                async for data, end_of_chunk in r.content.iter_chunks():
                    part += data
                    if end_of_chunk:
                        http_chunks.append(part)
                        part = b""
                assert part == b""
    payloads = [payload for data in http_chunks for payload in events(data)]  # whole events only
    assert payloads[-1] == b"[DONE]"
    chunks = [orjson.loads(p) for p in payloads[:-1]]
    texts = [c["choices"][0]["delta"].get("content") if chat else c["choices"][0]["text"]
             for c in chunks if c["choices"] and c["choices"][0]["finish_reason"] is None]
    assert len([t for t in texts if t]) == 40 and chunks[-1]["usage"]["completion_tokens"] == 40
    per_chunk = [len(events(data)) for data in http_chunks if b'"finish_reason":null' in data]
    assert max(per_chunk) > 1  # the chunks that piled up behind the busy handler went out together
    assert max(per_chunk) <= WINDOW  # never more than the consumer asked for


class _CountedWrites:
    """The real transport of a socket pair, its writes recorded (what reached ``write``, in order)."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))
        self.transport.write(data)

    def is_closing(self) -> bool:
        return self.transport.is_closing()

    def get_write_buffer_size(self) -> int:
        return self.transport.get_write_buffer_size()


def _framed(*texts: str) -> bytes:
    """The HTTP chunks of the events of ``texts`` (template ``data: `` + JSON text + blank line)."""
    events = [b"data: " + orjson.dumps(text) + b"\n\n" for text in texts]
    return b"".join(b"%x\r\n%b\r\n" % (len(event), event) for event in events)


@contextlib.asynccontextmanager
async def _live_writer(
        flush_bytes: int) -> AsyncIterator[tuple[Completion, EventWriter, _CountedWrites, socket.socket]]:
    """A Completion whose tokens go to a live EventWriter (window 2) on one end of a socket pair;
    on exit the writer is cancelled and both ends closed."""
    loop = asyncio.get_running_loop()
    ours, theirs = socket.socketpair()
    transport, protocol = await loop.connect_accepted_socket(lambda: BaseProtocol(loop), ours)
    completion = Completion(CompletionRequest(prompt="p", stream=True), SimulatedEngine(), loop)
    writer = EventWriter(loop, 2, b"data: ", b"\n\n", flush_bytes=flush_bytes)
    completion.tokens.subscribe(writer)
    counted = _CountedWrites(transport)  # type: ignore[arg-type]
    writer.transport, writer.protocol, writer.live = counted, protocol, True  # type: ignore[assignment]
    theirs.setblocking(False)
    try:
        yield completion, writer, counted, theirs
    finally:
        writer.cancel()
        counted.transport.close()
        theirs.close()
        await asyncio.sleep(0)  # the transport's close runs


async def _received(sock: socket.socket, size: int) -> bytes:
    loop = asyncio.get_running_loop()
    data = b""
    while len(data) < size:
        data += await asyncio.wait_for(loop.sock_recv(sock, size - len(data)), 5)
    return data


async def test_chunks_taken_in_one_loop_step_go_out_in_one_write_of_whole_events_in_order() -> None:
    async with _live_writer(flush_bytes=16384) as (completion, writer, counted, theirs):
        texts = [f"t{i}" for i in range(10)]
        for text in texts:  # one backend read's worth of chunks, in one step
            completion.push(text, 1)
        assert counted.writes == []  # the batch goes at the end of this loop step
        assert completion.credit == 2  # each chunk's credit came back as it was taken
        await asyncio.sleep(0)
        assert counted.writes == [_framed(*texts)]  # one send, not ten
        assert await _received(theirs, len(_framed(*texts))) == _framed(*texts)
        completion.push("after", 1)  # a later step: its own write
        await asyncio.sleep(0)
        assert counted.writes[1:] == [_framed("after")]


async def test_a_batch_reaching_flush_bytes_is_written_at_once_and_a_cancelled_one_never() -> None:
    async with _live_writer(flush_bytes=50) as (completion, writer, counted, theirs):  # an event here: 17 bytes
        texts = [f"t{i}" for i in range(10)]
        for text in texts:
            completion.push(text, 1)
        # 3 events (51 bytes) reach 50 with the transport's buffer (empty: the socket took all)
        assert counted.writes == [_framed(*texts[0:3]), _framed(*texts[3:6]), _framed(*texts[6:9])]
        await asyncio.sleep(0)
        assert counted.writes[3:] == [_framed("t9")]
        completion.push("dropped", 1)
        writer.cancel()  # the handler let go of the stream before the step ended: nothing more is written
        await asyncio.sleep(0)
        assert len(counted.writes) == 4
        assert await _received(theirs, len(_framed(*texts))) == _framed(*texts)


async def test_flush_bytes_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="flush_bytes must be >= 1, not 0"):
        EventWriter(asyncio.get_running_loop(), 2, b"", b"", flush_bytes=0)
