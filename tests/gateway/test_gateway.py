"""The gateway embedded in-process (``async with pipeline.start(port=0)``): refusal policies,
authentication, readiness, draining."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

import rxpipe as rx
from rxpipe import operators as ops
from rxpipe.engines import CompletionRequest, SimulatedEngine
from rxpipe.gateway import Gateway, GatewayConfig, edge_queue
from rxpipe.runtime import Pipeline


def make_pipeline(engine: SimulatedEngine | None = None, queue: int = 10, **settings: Any) -> Pipeline:
    engine = engine or SimulatedEngine(max_num_seqs=4, step_overhead_s=0.001, decode_s_per_seq=0.0,
                                       prefill_s_per_token=0.0)
    return Pipeline(Gateway(GatewayConfig(**settings)), ops.buffer(queue), ops.execute(engine),
                    drain_timeout_s=5.0)


async def post(url: str, body: dict[str, Any], headers: dict[str, str] | None = None,
               path: str = "/v1/completions") -> tuple[int, dict[str, str], Any]:
    async with aiohttp.ClientSession() as http:
        async with http.post(url + path, json=body, headers=headers) as r:
            return r.status, dict(r.headers), await r.json()


async def test_embedding_serves_on_a_free_port_and_stops_cleanly() -> None:
    pipeline = make_pipeline()
    async with pipeline.start(port=0) as running:
        assert running.url is not None and running.url.startswith("http://127.0.0.1:")
        status, _, body = await post(running.url, {"prompt": "hi", "max_tokens": 3})
        assert status == 200 and body["usage"]["completion_tokens"] == 3
    assert running.done
    with pytest.raises(aiohttp.ClientConnectionError):
        await post(running.url, {"prompt": "hi"})


async def test_api_keys_are_required_when_configured() -> None:
    pipeline = make_pipeline(api_keys=("secret-a", "secret-b"))
    async with pipeline.start(port=0) as running:
        assert running.url
        for headers in (None, {"Authorization": "Bearer wrong"}, {"Authorization": "secret-a"}):
            status, _, body = await post(running.url, {"prompt": "x", "max_tokens": 1}, headers)
            assert status == 401
            assert body["error"]["type"] == "authentication_error" and body["error"]["code"] == "invalid_api_key"
        status, _, _ = await post(running.url, {"prompt": "x", "max_tokens": 1}, {"Authorization": "Bearer secret-b"})
        assert status == 200


def test_key_ids_are_bounded_labels() -> None:
    gateway = Gateway(api_keys=("k1", "k2"))
    assert gateway.authenticate("Bearer k2") == "key_1"
    assert gateway.authenticate("Bearer k3") is None
    assert Gateway(api_keys=()).authenticate(None) == "anonymous"


async def test_per_key_token_bucket_answers_rate_limited_with_headers() -> None:
    pipeline = make_pipeline(api_keys=("a", "b"), key_rate=0.5, key_burst=2)
    async with pipeline.start(port=0) as running:
        assert running.url
        auth_a, auth_b = {"Authorization": "Bearer a"}, {"Authorization": "Bearer b"}
        results = [await post(running.url, {"prompt": "x", "max_tokens": 1}, auth_a) for _ in range(3)]
        assert [status for status, _, _ in results] == [200, 200, 429]
        _, headers, body = results[2]
        assert body["error"] == {"message": "rate limit reached for your API key", "type": "rate_limit_error",
                                 "code": "rate_limited", "param": None}
        assert headers["x-ratelimit-limit-requests"] == "2"
        assert headers["x-ratelimit-remaining-requests"] == "0"
        assert headers["x-ratelimit-reset-requests"].endswith("s")
        assert 3.9 <= float(headers["x-ratelimit-reset-requests"][:-1]) <= 4.0
        assert headers["Retry-After"] == "2"  # one token at 0.5/s
        assert 1900 <= int(headers["retry-after-ms"]) <= 2000
        # another key has its own bucket
        assert (await post(running.url, {"prompt": "x", "max_tokens": 1}, auth_b))[0] == 200


async def test_engine_down_answers_503_unavailable_and_readyz_follows() -> None:
    engine = SimulatedEngine(max_num_seqs=2, step_overhead_s=0.001)
    pipeline = make_pipeline(engine)
    async with pipeline.start(port=0) as running:
        assert running.url
        engine.down = True
        status, headers, body = await post(running.url, {"prompt": "x", "max_tokens": 1})
        assert status == 503 and body["error"]["code"] == "unavailable"
        assert body["error"]["type"] == "overloaded_error"
        assert int(headers["Retry-After"]) >= 1 and "retry-after-ms" in headers
        async with aiohttp.ClientSession() as http:
            async with http.get(running.url + "/readyz") as r:
                assert r.status == 503
            async with http.get(running.url + "/healthz") as r:
                assert r.status == 200
        engine.down = False
        assert (await post(running.url, {"prompt": "x", "max_tokens": 1}))[0] == 200


async def test_latency_budget_refuses_with_deadline_when_the_estimated_wait_is_too_long() -> None:
    engine = SimulatedEngine(max_num_seqs=1, step_overhead_s=0.02, decode_s_per_seq=0.0, prefill_s_per_token=0.0)
    pipeline = make_pipeline(engine, queue=50, latency_budget_s=0.3)
    async with pipeline.start(port=0) as running:
        assert running.url
        # measure a drain rate first: a few short requests one after another
        for _ in range(3):
            assert (await post(running.url, {"prompt": "x", "max_tokens": 2}))[0] == 200
        results = await asyncio.gather(*(post(running.url, {"prompt": "x", "max_tokens": 5}) for _ in range(40)))
    statuses = [status for status, _, _ in results]
    deadline = [body for status, _, body in results if status == 429]
    assert statuses.count(200) >= 1 and deadline, statuses
    assert {body["error"]["code"] for body in deadline} == {"deadline"}
    # admitted requests did not wait much longer than the budget: those over it were refused
    assert statuses.count(200) < 40


async def test_draining_refuses_new_work_with_503_and_finishes_in_flight() -> None:
    engine = SimulatedEngine(max_num_seqs=4, step_overhead_s=0.01, decode_s_per_seq=0.0, prefill_s_per_token=0.0)
    pipeline = make_pipeline(engine)
    gateway = pipeline.flowable.upstreams[0].upstreams[0]
    assert isinstance(gateway, Gateway)
    async with pipeline.start(port=0) as running:
        url = running.url
        assert url
        in_flight = [asyncio.ensure_future(post(url, {"prompt": "x", "max_tokens": 20})) for _ in range(3)]
        await asyncio.sleep(0.05)
        drain = asyncio.ensure_future(gateway.drain(5.0))
        await asyncio.sleep(0.01)
        status, headers, body = await post(url, {"prompt": "late", "max_tokens": 1})
        assert status == 503 and body["error"]["code"] == "draining" and headers["Retry-After"] == "1"
        results = await asyncio.gather(*in_flight)
        await drain
    assert [s for s, _, _ in results] == [200, 200, 200]
    assert all(b["usage"]["completion_tokens"] == 20 for _, _, b in results)


async def test_gateway_is_a_hot_source_with_one_subscriber() -> None:
    gateway = Gateway()
    first = rx.testing.TestSubscriber[Any](initial_request=1)
    second = rx.testing.TestSubscriber[Any]()
    gateway.subscribe(first)
    gateway.subscribe(second)
    assert isinstance(second.error, rx.RxPipeError)
    assert gateway.demand == 1
    first.cancel()
    assert gateway.demand == 0


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="key_rate"):
        GatewayConfig(key_rate=0)
    with pytest.raises(ValueError, match="max_body_bytes"):
        GatewayConfig(max_body_bytes=0)
    with pytest.raises(ValueError, match="latency_budget_s"):
        GatewayConfig(latency_budget_s=-1)
    with pytest.raises(TypeError):
        Gateway(GatewayConfig(), model="x")


async def test_request_queued_past_its_deadline_is_refused_with_deadline() -> None:
    engine = SimulatedEngine(max_num_seqs=1, step_overhead_s=0.02, decode_s_per_seq=0.0, prefill_s_per_token=0.0)
    pipeline = make_pipeline(engine, latency_budget_s=0.2)
    async with pipeline.start(port=0) as running:
        assert running.url
        url = running.url
        long = asyncio.ensure_future(post(url, {"prompt": "long", "max_tokens": 30}))  # ~0.6 s on the slot
        await asyncio.sleep(0.05)
        status, headers, body = await post(url, {"prompt": "short", "max_tokens": 1})
        assert status == 429 and body["error"]["code"] == "deadline" and headers["Retry-After"] == "1"
        assert (await long)[0] == 200


async def test_a_request_whose_client_left_while_queued_leaves_the_queue_working() -> None:
    # the edge's steps when a queued request's client disconnects: cancel, then leave; the queue
    # still holds the request and must skip it when it drains, not fail on its reply
    gateway = Gateway()
    sink = rx.testing.TestSubscriber[Any](initial_request=0)
    gateway.pipe(edge_queue(2)).subscribe(sink)
    now = asyncio.get_running_loop().time()
    gone, waiting = CompletionRequest(prompt="gone"), CompletionRequest(prompt="waiting")
    assert gateway.admit(gone, now) is None and gateway.admit(waiting, now) is None
    gone.cancel()
    gateway.leave(gone)
    sink.request(2)
    assert sink.error is None and sink.values == [waiting]
