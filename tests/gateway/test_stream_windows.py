"""SSE delivery in windows: every chunk that arrived since the handler's last wake goes out in one
write of whole events, and the credit given back never lets more than ``stream_window`` chunks be
outstanding."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from rxpipe import operators as ops
from rxpipe.engines import SimulatedEngine
from rxpipe.gateway import Gateway, GatewayConfig
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
