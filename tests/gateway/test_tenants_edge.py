"""Many tenants on one gateway, over real HTTP (DESIGN §5 "Many tenants"): a noisy tenant cannot
starve a quiet one, priority bands, tpm with OpenAI's headers, weighted shares, reload on SIGHUP,
resolution of the tenant, the exact bound with ``fair_queue``, and the single-tenant graph as it was."""

from __future__ import annotations

import asyncio
import json
import math
import re
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from rxpipe.engines import CompletionRequest
from rxpipe.gateway import Gateway
from rxpipe.loader import load_pipeline
from rxpipe.runtime import Pipeline

from .server import ROOT, GatewayProcess

pytestmark = pytest.mark.loops("asyncio")

GATEWAY = str(ROOT / "pipelines" / "llm_gateway.py")
#: engine: 10 ms a step, nothing else, so a request of n tokens holds its slot n × 10 ms
FAST = {"step_overhead_s": 0.01, "decode_s_per_seq": 0, "prefill_s_per_token": 0}


def session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=60))


def gateway_of(pipeline: Pipeline) -> Gateway:
    (gateway,) = [s for s in pipeline.stages if isinstance(s, Gateway)]
    return gateway


def tenants_file(tmp_path: Path, tenants: dict[str, Any], name: str = "tenants.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(tenants))
    return str(path)


async def post(http: aiohttp.ClientSession, url: str, body: dict[str, Any],
               headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], Any]:
    async with http.post(url + "/v1/completions", json=body, headers=headers) as r:
        return r.status, dict(r.headers), await r.json()


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


def shown_p99(values: list[float]) -> str:
    return f"{p99(values):.3f} s" if values else "none completed"


# noisy and quiet ---------------------------------------------------------------------------------
async def flood(url: str, duration_s: float) -> dict[str, Any]:
    """40 closed-loop clients of ``noisy`` (back off 0.2 s after a 429), and ``quiet`` and ``vip``
    at 2 requests/s each (open loop). Returns per-tenant statuses, latencies of 200s, tokens."""
    loop = asyncio.get_running_loop()
    stop_at = loop.time() + duration_s
    statuses: dict[str, Counter[int]] = {t: Counter() for t in ("noisy", "quiet", "vip")}
    latencies: dict[str, list[float]] = {t: [] for t in statuses}
    body = {"prompt": "hello", "max_tokens": 20}

    async def one(http: aiohttp.ClientSession, tenant: str) -> int:
        started = loop.time()
        status, _, _ = await post(http, url, body, {"x-rxpipe-tenant": tenant})
        statuses[tenant][status] += 1
        if status == 200:
            latencies[tenant].append(loop.time() - started)
        return status

    async def noisy(http: aiohttp.ClientSession) -> None:
        while loop.time() < stop_at:
            if await one(http, "noisy") != 200:
                await asyncio.sleep(0.2)

    async def steady(http: aiohttp.ClientSession, tenant: str) -> None:
        tasks = []
        await asyncio.sleep(0.5)  # the flood is on
        while loop.time() < stop_at - 0.5:
            tasks.append(asyncio.ensure_future(one(http, tenant)))
            await asyncio.sleep(0.5)
        await asyncio.gather(*tasks)

    async with session() as http:
        await asyncio.gather(*(noisy(http) for _ in range(40)), steady(http, "quiet"), steady(http, "vip"))
    return {"statuses": statuses, "latencies": latencies}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fair", [True, False], ids=["fair_queue", "edge_queue"])
async def test_a_noisy_tenant_cannot_starve_a_quiet_one(tmp_path: Path, fair: bool,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    settings: dict[str, Any] = {"queue_capacity": 12, "max_num_seqs": 4, **FAST}
    if fair:
        settings["tenants_file"] = tenants_file(tmp_path, {"noisy": {}, "quiet": {}, "vip": {"priority": 1}})
    pipeline = load_pipeline(GATEWAY, settings)
    async with pipeline.start(port=0) as running:
        assert running.url
        result = await flood(running.url, 5.0)
    statuses, latencies = result["statuses"], result["latencies"]
    completed = {t: statuses[t][200] for t in statuses}
    share = completed["noisy"] / sum(completed.values())
    figures = (f"{'fair_queue' if fair else 'edge_queue'}: quiet 429 = {statuses['quiet'][429]} of "
               f"{sum(statuses['quiet'].values())}, quiet p99 = {shown_p99(latencies['quiet'])}, "
               f"vip 429 = {statuses['vip'][429]}, vip p99 = {shown_p99(latencies['vip'])}, "
               f"noisy completed = {completed['noisy']} ({share:.0%} of completions), "
               f"noisy 429 = {statuses['noisy'][429]}")
    with capsys.disabled():
        print("\n" + figures)
    if fair:
        assert set(statuses["quiet"]) == {200} and set(statuses["vip"]) == {200}, figures
        assert statuses["quiet"][200] >= 6 and statuses["vip"][200] >= 6, figures
        assert p99(latencies["quiet"]) <= 1.5 and p99(latencies["vip"]) <= 1.5, figures
        assert share >= 0.5, figures  # work-conserving: the noisy tenant keeps the spare capacity
    else:
        assert statuses["quiet"][429] > 0, figures  # the plain queue: whoever fills it wins


# token limits and OpenAI's headers ---------------------------------------------------------------
def go_seconds(text: str) -> float:
    """Parse the Go durations our headers use (``45.09s``, ``1m0s``, ``120ms``)."""
    match = re.fullmatch(r"(?:(\d+)m)?([\d.]+)(ms|s)", text)
    assert match, text
    minutes, value, unit = match.groups()
    return int(minutes or 0) * 60 + float(value) / (1000 if unit == "ms" else 1)


async def test_tpm_refuses_at_the_request_the_arithmetic_says_with_exact_headers(tmp_path: Path) -> None:
    prompt_tokens = CompletionRequest(prompt="hi").prompt_tokens
    need = prompt_tokens + 500  # reserved per request
    pipeline = load_pipeline(GATEWAY, {
        "tenants_file": tenants_file(tmp_path, {"metered": {"tpm": 2000, "rpm": 60}}),
        "step_overhead_s": 0.001, "decode_s_per_seq": 0, "prefill_s_per_token": 0})
    (gateway,) = [s for s in pipeline.stages if isinstance(s, Gateway)]
    gate = gateway.tenant_gate
    assert gate is not None
    # The buckets' clock stands still: what they regain while the test runs is 0, not "33 tokens a
    # second of however long a loaded machine takes" (the 4th request was admitted whenever the
    # first three took over 0.12 s: 4 tokens regained). The arithmetic below is exact.
    frozen = gate.clock()
    gate.clock = gate.quotas.clock = lambda: frozen
    headers = {"x-rxpipe-tenant": "metered"}
    body = {"prompt": "hi", "max_tokens": 500, "stream": True}
    async with pipeline.start(port=0) as running, session() as http:
        url = running.url or ""
        opened: list[aiohttp.ClientResponse] = []
        for _ in range(3):  # streams answer with their headers at admission; read them later
            opened.append(await http.post(url + "/v1/completions", json=body, headers=headers))
        status, refused, error = await post(http, url, body, headers)
        for k, response in enumerate(opened, start=1):
            assert response.status == 200
            assert response.headers["x-ratelimit-limit-tokens"] == "2000"
            assert int(response.headers["x-ratelimit-remaining-tokens"]) == 2000 - k * need
            assert response.headers["x-ratelimit-limit-requests"] == "60"
            assert int(response.headers["x-ratelimit-remaining-requests"]) == 60 - k
            assert go_seconds(response.headers["x-ratelimit-reset-tokens"]) == pytest.approx(k * need * 60 / 2000,
                                                                                                abs=0.001)
        # the 4th: 2000 − 3 × 501 = 497 tokens left < 501 → refused, 0.12 s to fit → clamped to 1 s
        assert status == 429 and error["error"]["code"] == "rate_limited", error
        assert (refused["Retry-After"], refused["retry-after-ms"]) == ("1", "1000")
        assert int(refused["x-ratelimit-remaining-tokens"]) == 2000 - 3 * need
        assert int(refused["x-ratelimit-remaining-requests"]) == 57
        for response in opened:  # the streams finish with all 500 tokens
            text = (await response.read()).decode()
            assert text.endswith("data: [DONE]\n\n")
            response.release()
        # a request larger than the whole per-minute limit can never fit: a final 400 saying so
        status, too_big, error = await post(http, url, {"prompt": "hi", "max_tokens": 2500}, headers)
        assert status == 400 and error["error"]["code"] == "request_over_tpm"
        assert error["error"]["message"] == (
            f"this request needs {prompt_tokens + 2500} tokens (prompt {prompt_tokens} + max_tokens 2500), more than "
            f"tenant 'metered''s limit of 2000 tokens per minute: it can never be admitted; lower max_tokens (to at "
            f"most {2000 - prompt_tokens})")
        assert (error["error"]["type"], error["error"]["param"]) == ("invalid_request_error", "max_tokens")
        assert "Retry-After" not in too_big and "retry-after-ms" not in too_big
        # every answer carries them, a 400 too
        status, invalid, error = await post(http, url, {"prompt": "hi", "max_tokens": 9000}, headers)
        assert status == 400 and error["error"]["code"] == "context_length_exceeded"
        assert invalid["x-ratelimit-limit-tokens"] == "2000" and "x-ratelimit-remaining-tokens" in invalid
        # an unlimited tenant (the default) gets no x-ratelimit headers
        status, free, _ = await post(http, url, {"prompt": "hi", "max_tokens": 5})
        assert status == 200 and not any(h.lower().startswith("x-ratelimit") for h in free)


# weighted shares -----------------------------------------------------------------------------
@pytest.mark.timeout(120)
async def test_weights_2_to_1_with_both_backlogged_give_2_to_1_completed_tokens(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # shares of 12 places: heavy 6, light 3, default 3; 10 tokens at 10 ms: 0.1 s a request, 40/s
    pipeline = load_pipeline(GATEWAY, {"queue_capacity": 12, "max_num_seqs": 4, **FAST,
                                       "tenants_file": tenants_file(tmp_path, {"heavy": {"weight": 2},
                                                                               "light": {"weight": 1}})})
    loop = asyncio.get_running_loop()
    tokens: Counter[str] = Counter()
    warmup_s, duration_s = 1.0, 5.0
    async with pipeline.start(port=0) as running, session() as http:
        url = running.url or ""
        start = loop.time()

        async def client(tenant: str) -> None:
            while loop.time() < start + duration_s:
                status, _, body = await post(http, url, {"prompt": "hello", "max_tokens": 10},
                                             {"x-rxpipe-tenant": tenant})
                if status != 200:
                    await asyncio.sleep(0.05)
                elif start + warmup_s <= loop.time() <= start + duration_s:
                    tokens[tenant] += body["usage"]["completion_tokens"]

        await asyncio.gather(*(client(t) for t in ("heavy", "light") for _ in range(10)))
    ratio = tokens["heavy"] / tokens["light"]
    with capsys.disabled():
        print(f"\nweights 2:1: completed tokens {dict(tokens)}, ratio {ratio:.2f}")
    assert 1.8 <= ratio <= 2.2, tokens


# resolution, auth keys, reload ---------------------------------------------------------------
async def test_tenant_keys_authenticate_and_name_the_tenant_and_the_header_is_ignored(tmp_path: Path) -> None:
    pipeline = load_pipeline(GATEWAY, {
        "api_keys": "plain-key", **FAST,
        "tenants_file": tenants_file(tmp_path, {"acme": {"keys": ["acme-key"], "rpm": 5},
                                                "default": {"rpm": 9}})})
    body = {"prompt": "hi", "max_tokens": 2}
    async with pipeline.start(port=0) as running, session() as http:
        url = running.url or ""
        status, acme, _ = await post(http, url, body, {"Authorization": "Bearer acme-key",
                                                       "x-rxpipe-tenant": "default"})
        assert status == 200 and acme["x-ratelimit-limit-requests"] == "5"
        status, plain, _ = await post(http, url, body, {"Authorization": "Bearer plain-key",
                                                        "x-rxpipe-tenant": "acme"})
        assert status == 200 and plain["x-ratelimit-limit-requests"] == "9"  # api_keys' key: default
        status, _, _ = await post(http, url, body, {"Authorization": "Bearer nobody"})
        assert status == 401


async def test_sighup_reloads_the_tenants_file_and_a_bad_file_keeps_the_old_one(tmp_path: Path) -> None:
    path = Path(tenants_file(tmp_path, {"default": {"rpm": 7}, "t": {}}))
    process = GatewayProcess(tmp_path, f"tenants_file={path}", "step_overhead_s=0.001")
    body = {"prompt": "hi", "max_tokens": 2}

    async def limit(http: aiohttp.ClientSession, tenant: str) -> str | None:
        status, headers, _ = await post(http, process.url, body, {"x-rxpipe-tenant": tenant})
        assert status == 200
        return headers.get("x-ratelimit-limit-requests")

    async def until_limit(http: aiohttp.ClientSession, tenant: str, expected: str | None) -> None:
        for _ in range(100):
            if await limit(http, tenant) == expected:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"limit of {tenant} never became {expected}: {process.output}")

    try:
        async with session() as http:
            assert await limit(http, "t") is None
            assert await limit(http, "nobody") == "7"  # an unknown tenant is the default
            path.write_text(json.dumps({"default": {"rpm": 7}, "t": {"rpm": 5}}))
            process.proc.send_signal(signal.SIGHUP)
            await until_limit(http, "t", "5")
            path.write_text("{not json")
            process.proc.send_signal(signal.SIGHUP)
            for _ in range(100):
                if "tenants file not reloaded" in process.output:
                    break
                await asyncio.sleep(0.05)
            assert "tenants file not reloaded" in process.output
            assert await limit(http, "t") == "5"
            async with http.get(process.url + "/metrics") as r:
                metrics = await r.text()
        assert re.search(r'rxpipe_tenant_admitted_total\{tenant="default"\} [1-9]', metrics)
        assert re.search(r'rxpipe_tenant_admitted_total\{tenant="t"\} [1-9]', metrics)
        assert 'tenant="nobody"' not in metrics
        assert re.search(r'rxpipe_tenant_tokens_total\{direction="out",tenant="t"\} [1-9]', metrics)
        assert re.search(r'rxpipe_tenant_queue_wait_seconds_count\{tenant="t"\} [1-9]', metrics)
        assert 'rxpipe_tenant_refused_total{reason="rate_limited",tenant="t"} 0.0' in metrics
    finally:
        assert process.terminate() == 0


# the graph and its bound -------------------------------------------------------------------------
def test_without_a_tenants_file_the_graph_is_unchanged(tmp_path: Path) -> None:
    plain = load_pipeline(GATEWAY, {})
    assert [s.kind for s in plain.stages] == ["gateway", "rate_limit", "edge_queue", "batch", "execute"]
    assert gateway_of(plain).tenant_gate is None
    fair = load_pipeline(GATEWAY, {"tenants_file": tenants_file(tmp_path, {"a": {}})})
    assert [s.kind for s in fair.stages] == ["gateway", "fair_queue", "rate_limit", "batch", "execute"]


def test_a_bad_tenants_file_stops_the_start_with_one_line(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"setting tenants_file: .*tenant 'a': field 'weight'"):
        load_pipeline(GATEWAY, {"tenants_file": tenants_file(tmp_path, {"a": {"weight": 0}})})


async def test_admitted_and_not_running_never_exceeds_queue_capacity_with_fair_queue(tmp_path: Path) -> None:
    # shares of 2 places: a 1, b 1; 2 slots; 100 tokens at 10 ms a step hold a slot 1 s
    pipeline = load_pipeline(GATEWAY, {"queue_capacity": 2, "max_num_seqs": 2, **FAST,
                                       "tenants_file": tenants_file(tmp_path, {"a": {}, "default": {}})})
    gateway = gateway_of(pipeline)
    body = {"prompt": "r", "max_tokens": 100}
    async with pipeline.start(port=0) as running, session() as http:
        url = running.url or ""
        floods = [asyncio.ensure_future(post(http, url, body, {"x-rxpipe-tenant": "a"})) for _ in range(10)]
        for _ in range(200):
            if gateway.in_flight == 3 and sum(f.done() for f in floods) == 7:
                break
            await asyncio.sleep(0.01)
        # a: 2 running + 1 waiting (its share; the pool is b's reserved place); 7 refused at once
        assert gateway.in_flight == 3 and sum(f.done() for f in floods) == 7
        other = await post(http, url, body)  # the default tenant's place was kept for it
        results = await asyncio.gather(*floods)
    statuses = Counter(status for status, _, _ in results)
    assert statuses == {200: 3, 429: 7}
    assert other[0] == 200
    assert {body["error"]["code"] for status, _, body in results if status == 429} == {"queue_full"}


async def test_a_request_whose_client_leaves_before_it_starts_gives_its_tokens_back(tmp_path: Path) -> None:
    pipeline = load_pipeline(GATEWAY, {"max_num_seqs": 1, **FAST,
                                       "tenants_file": tenants_file(tmp_path, {"m": {"tpm": 2000}})})
    gateway = gateway_of(pipeline)
    headers = {"x-rxpipe-tenant": "m"}
    need = CompletionRequest(prompt="hi").prompt_tokens
    async with pipeline.start(port=0) as running, session() as http:
        url = running.url or ""
        first = asyncio.ensure_future(post(http, url, {"prompt": "hi", "max_tokens": 60}, headers))  # 0.6 s
        for _ in range(200):
            if gateway.in_flight == 1:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)  # the engine takes it within a step (10 ms)
        queued = asyncio.ensure_future(post(http, url, {"prompt": "hi", "max_tokens": 900}, headers))
        for _ in range(200):
            if gateway.in_flight == 2:
                break
            await asyncio.sleep(0.01)
        queued.cancel()  # the client leaves while its request waits for the one slot
        await asyncio.gather(queued, return_exceptions=True)
        status, _, body = await first
        assert status == 200 and body["usage"]["completion_tokens"] == 60
        status, answer, _ = await post(http, url, {"prompt": "hi", "max_tokens": 1}, headers)
    assert status == 200
    # 2000 − (need + 60) − (need + 1), plus a little refill; the 900 tokens came back
    assert 0 <= int(answer["x-ratelimit-remaining-tokens"]) - (2000 - 2 * need - 61) <= 40


async def test_one_sighup_reloads_every_gateway_of_the_process(tmp_path: Path) -> None:
    paths = [Path(tenants_file(tmp_path, {"t": {}}, f"t{i}.json")) for i in range(2)]
    pipelines = [load_pipeline(GATEWAY, {"tenants_file": str(path), **FAST}) for path in paths]
    async with pipelines[0].start(port=0) as first, pipelines[1].start(port=0) as second, session() as http:
        for path in paths:
            path.write_text(json.dumps({"t": {"rpm": 3}}))
        assert signal.getsignal(signal.SIGHUP) not in (signal.SIG_DFL, None)  # the loop handles it
        signal.raise_signal(signal.SIGHUP)
        await asyncio.sleep(0.05)  # the loop runs the handler
        for running in (first, second):
            status, headers, _ = await post(http, running.url or "", {"prompt": "hi", "max_tokens": 1},
                                            {"x-rxpipe-tenant": "t"})
            assert status == 200 and headers["x-ratelimit-limit-requests"] == "3"
    assert signal.getsignal(signal.SIGHUP) == signal.SIG_DFL  # both stopped: the handler is gone
