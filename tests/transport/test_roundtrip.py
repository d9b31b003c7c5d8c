"""Gateway sink and worker source in one process, over each broker: requests cross, replies come
back exactly once, the queue stays bounded by ``max_backlog``."""

from __future__ import annotations

import asyncio

import pytest

from rxpipe import operators as ops
from rxpipe.engines import CompletionRequest, SimulatedEngine, TokenChunk
from rxpipe.runtime import Pipeline
from rxpipe.testing import TestPublisher, TestSubscriber
from rxpipe.transport import settings_for, transport_sink, transport_source

from .conftest import Broker

pytestmark = pytest.mark.loops("asyncio")


def fast(url: str, **extra: object) -> dict[str, object]:
    return {"consumer": "w1", "block_ms": 50, "refresh_interval_s": 0.02, **extra}


@pytest.mark.timeout(90)
async def test_two_thousand_requests_streamed_and_unary_each_answered_once(broker: Broker) -> None:
    total, backlog = 2000, 200
    settings = fast(broker.url, max_backlog=backlog, **broker.worker_options)
    edge: TestPublisher[CompletionRequest] = TestPublisher()
    sink = transport_sink(broker.url, **settings)(edge)
    await sink.start("127.0.0.1", None)  # type: ignore[attr-defined]
    engine = SimulatedEngine(max_num_seqs=64, step_overhead_s=0.001, prefill_s_per_token=0.0, decode_s_per_seq=0.0)
    worker = Pipeline(transport_source(broker.url, max_unacked=64, **settings), ops.execute(engine))
    loop = asyncio.get_running_loop()
    try:
        async with worker.start():
            sink.subscribe(TestSubscriber())
            requests = []
            while len(requests) < total:
                if edge.total_requested <= len(requests):
                    await asyncio.sleep(0.002)  # no room under max_backlog: the edge would answer 429
                    continue
                request = CompletionRequest(prompt="hello", max_tokens=5, id=f"r{len(requests)}",
                                            stream=len(requests) % 2 == 0)
                request.reply = loop.create_future()
                request.arrival_s = loop.time()
                requests.append(request)
                edge.emit(request)
            completions = await asyncio.wait_for(asyncio.gather(*(r.reply for r in requests)), 60)
            readers = []
            for request, completion in zip(requests, completions, strict=True):
                if request.stream:
                    reader: TestSubscriber[TokenChunk] = TestSubscriber(initial_request=1000)
                    completion.tokens.subscribe(reader)
                    readers.append(reader)
            results = await asyncio.wait_for(asyncio.gather(*(c.result for c in completions)), 60)
            assert [r.completion_tokens for r in results] == [5] * total
            assert {r.finish_reason for r in results} == {"length"}
            for reader, result in zip(readers, results[::2], strict=True):
                await reader.await_done(5)
                assert "".join(c.text for c in reader.values) == result.text and reader.completed
            assert set(edge.requests) == {1}
            assert sink.router is not None and len(sink.router) == 0  # type: ignore[attr-defined]
            assert sink.router.duplicates == 0 and sink.router.gaps == 0  # type: ignore[attr-defined]
    finally:
        await sink.stop()  # type: ignore[attr-defined]
    assert settings_for(broker.url).max_backlog == 1000
