"""A reader that stops reading an SSE stream: what waits for it in the gateway stays within
``stream_buffer_bytes`` plus one write (DESIGN §5, §8 "the gateway holds at most stream_buffer_bytes
plus one credit window per stream"), measured on the connection's transport, on both loops."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import orjson
import pytest

from rxpipe.gateway import Gateway
from rxpipe.loader import load_pipeline

from .server import ROOT

# every test runs on asyncio and on uvloop (the plugin's default)


async def _stalled_reader(port: int, max_tokens: int) -> socket.socket:
    """A client that sends one streamed request and never reads (its receive buffer: 4 KiB)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(sock, ("127.0.0.1", port))
    body = orjson.dumps({"prompt": "stream a lot", "max_tokens": max_tokens, "stream": True})
    await loop.sock_sendall(sock, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                  b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    return sock


def _buffers(gateway: Gateway) -> list[int]:
    runner: Any = gateway._runner
    return [handler.transport.get_write_buffer_size() for handler in runner.server.connections
            if handler.transport is not None]


@pytest.mark.parametrize("limit", [16384, 65536])
async def test_a_stalled_readers_write_buffer_stays_within_stream_buffer_bytes_plus_one_write(limit: int) -> None:
    pipeline = load_pipeline(str(ROOT / "pipelines" / "llm_gateway.py"), {
        "stream_buffer_bytes": limit, "max_num_seqs": 2, "step_overhead_s": 0.0005, "decode_s_per_seq": 0,
        "prefill_s_per_token": 0, "max_model_len": 32_768, "stall_timeout_s": 30})
    (gateway,) = [s for s in pipeline.stages if isinstance(s, Gateway)]
    window = gateway.config.stream_window
    async with pipeline.start(port=0) as running:
        assert running.url
        sock = await _stalled_reader(int(running.url.rsplit(":", 1)[1]), 30_000)
        try:
            highest = 0
            loop = asyncio.get_running_loop()
            end = loop.time() + 1.5  # ~2,000 tokens a second: far more than the socket takes in
            while loop.time() < end:  # once per loop iteration: writes only grow it within one
                highest = max(highest, *_buffers(gateway), 0)
                await asyncio.sleep(0)
            # the socket's share is stream_buffer_bytes plus at most one event (an SSE event of
            # this stream is at most 200 bytes with its chunk framing); the rest of the credit
            # window waits in the gateway, not in the transport (DESIGN §5/§8: the gateway holds
            # at most stream_buffer_bytes plus one credit window per stream)
            assert limit // 2 < highest <= limit + 200, (highest, limit, window)
        finally:
            sock.close()
