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
async def test_a_write_carries_whole_events_and_never_more_than_the_window(
        chat: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    writes: list[bytes] = []
    real_write, real_eof = web.StreamResponse.write, web.StreamResponse.write_eof

    async def write(self: web.StreamResponse, data: Any) -> None:
        writes.append(bytes(data))
        if len(writes) == 2:
            await asyncio.sleep(0.05)  # a slow socket: the engine fills the window meanwhile
        await real_write(self, data)

    async def write_eof(self: web.StreamResponse, data: bytes = b"") -> None:
        if data:
            writes.append(bytes(data))
        await real_eof(self, data)

    monkeypatch.setattr(web.StreamResponse, "write", write)
    monkeypatch.setattr(web.StreamResponse, "write_eof", write_eof)
    engine = SimulatedEngine(max_num_seqs=2, step_overhead_s=0.001, decode_s_per_seq=0.0, prefill_s_per_token=0.0)
    pipeline = Pipeline(Gateway(GatewayConfig(stream_window=WINDOW)), ops.buffer(4), ops.execute(engine))
    path = "/v1/chat/completions" if chat else "/v1/completions"
    body: dict[str, Any] = {"max_tokens": 40, "stream": True, "stream_options": {"include_usage": True}}
    body.update({"messages": [{"role": "user", "content": "hi"}]} if chat else {"prompt": "hi"})
    async with pipeline.start(port=0) as running:
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{running.url}{path}", json=body) as r:
                assert r.status == 200
                received = await r.read()
    payloads = [payload for data in writes for payload in events(data)]
    assert b"".join(b"data: " + p + b"\n\n" for p in payloads) == received  # nothing else, nothing lost
    assert payloads[-1] == b"[DONE]"
    chunks = [orjson.loads(p) for p in payloads[:-1]]
    texts = [c["choices"][0]["delta"].get("content") if chat else c["choices"][0]["text"]
             for c in chunks if c["choices"] and c["choices"][0]["finish_reason"] is None]
    tokens = [t for t in texts if t]
    assert len(tokens) == 40 and chunks[-1]["usage"]["completion_tokens"] == 40
    token_writes = [len(events(data)) for data in writes if b"finish_reason\":null" in data and b"[DONE]" not in data]
    assert max(token_writes) > 1  # the chunks that piled up behind the slow write went out together
    assert max(token_writes) <= WINDOW  # never more than the consumer asked for
